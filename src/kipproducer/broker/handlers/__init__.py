"""Request handlers, one module per area; importing this package registers them all."""

from . import (  # noqa: F401
    admin,
    client_metrics,
    client_quotas,
    cluster,
    describe_topic_partitions,
    fetch,
    groups,
    log_dirs,
    offset_delete,
    produce,
    reassignments,
    security,
    transactions,
    txn_markers,
)
