"""The "authorized operations" bitfields of Metadata, DescribeCluster and DescribeGroups.

Kafka answers, when the client asks for them, one bit per ACL operation (bit ``code``) that
the caller's principal may perform on the resource, out of the operations that apply to its
type (``AclEntry.supportedOperations``); without an authorizer all of them. When the client
did not ask, the field is ``-2**31``. The Cluster resource here also has kipproducer's
ReplicatorWrite (29, produce with offsets; docs/protocol.md §5).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from .acls import CLUSTER_NAME, AclOperation, ResourceType

if TYPE_CHECKING:
    from ..api import RequestContext

Op = AclOperation

#: Kafka's "not requested" value.
OMITTED: Final = -(2**31)

SUPPORTED: Final[dict[ResourceType, tuple[AclOperation, ...]]] = {
    ResourceType.TOPIC: (Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER,
                         Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS),
    ResourceType.GROUP: (Op.READ, Op.DESCRIBE, Op.DELETE),
    ResourceType.CLUSTER: (Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS,
                           Op.IDEMPOTENT_WRITE, Op.ALTER, Op.DESCRIBE, Op.REPLICATOR_WRITE),
}


def authorized_operations(ctx: RequestContext, resource_type: ResourceType, name: str) -> int:
    """The bitfield of the operations ``ctx.principal`` may perform on the resource."""
    authorizer = ctx.broker.security.authorizer
    bits = 0
    for op in SUPPORTED[resource_type]:
        if authorizer is None or authorizer.authorize(
                ctx.principal, op, resource_type, name, ctx.client_host):
            bits |= 1 << int(op)
    return bits


def cluster_operations(ctx: RequestContext, requested: bool) -> int:
    return authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME) if requested else OMITTED


def topic_operations(ctx: RequestContext, topic: str, requested: bool) -> int:
    return authorized_operations(ctx, ResourceType.TOPIC, topic) if requested else OMITTED


def group_operations(ctx: RequestContext, group: str, requested: bool) -> int:
    return authorized_operations(ctx, ResourceType.GROUP, group) if requested else OMITTED
