"""DescribeClientQuotas: the broker keeps no client quotas (AlterClientQuotas is not served),
so every filter matches nothing, as on a Kafka cluster where none were set. Served because
Kafka's own ``kafka-configs --entity-type users --describe`` asks for a user's quotas next to
their SCRAM credentials, and would fail on a broker without it. DESCRIBE_CONFIGS on the
Cluster is required, else CLUSTER_AUTHORIZATION_FAILED, as in Kafka.
"""

from __future__ import annotations

from kipproducer.protocol import build_response
from kipproducer.protocol import error_codes as ec
from kipproducer.protocol.api_keys import DESCRIBE_CLIENT_QUOTAS

from ..api import RequestContext, handles
from ..security.acls import AclOperation
from ..security.checks import on_cluster


@handles(DESCRIBE_CLIENT_QUOTAS, 0, 1)
async def describe_client_quotas(ctx: RequestContext, body):
    allowed = on_cluster(ctx, AclOperation.DESCRIBE_CONFIGS)
    return build_response(
        DESCRIBE_CLIENT_QUOTAS,
        ctx.api_version,
        error_code=ec.NONE if allowed else ec.CLUSTER_AUTHORIZATION_FAILED,
        error_message=None if allowed else "Cluster authorization failed.",
        entries=() if allowed else None,
    )
