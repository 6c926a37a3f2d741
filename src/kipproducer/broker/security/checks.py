"""What each request needs, one helper per check (Kafka's KafkaApis rules).

Handlers call these with their RequestContext: the connection's principal (``ctx.principal``,
set by SASL) and the client's address (``ctx.client_host``) go to the broker's authorizer.
With the authorizer off every helper answers True at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .acls import CLUSTER_NAME, AclOperation, ResourceType

if TYPE_CHECKING:
    from ..api import RequestContext

Op, Res = AclOperation, ResourceType

#: DescribeConfigs / AlterConfigs resource type codes (ConfigResource.Type).
CONFIG_TOPIC, CONFIG_BROKER = 2, 4


def allowed(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType,
            name: str) -> bool:
    security = ctx.broker.security
    if security.authorizer is None:
        return True
    return security.authorizer.authorize(
        ctx.principal, operation, resource_type, name, ctx.client_host
    )


def on_cluster(ctx: RequestContext, operation: AclOperation) -> bool:
    return allowed(ctx, operation, Res.CLUSTER, CLUSTER_NAME)


# -- topics ---------------------------------------------------------------------------------------


def may_write_topic(ctx: RequestContext, topic: str) -> bool:
    """Produce (any mode), and offsets for a topic with ProduceMode EXPECTED_OFFSETS."""
    return allowed(ctx, Op.WRITE, Res.TOPIC, topic)


def may_read_topic(ctx: RequestContext, topic: str) -> bool:
    """Fetch, OffsetCommit, DescribeProducers."""
    return allowed(ctx, Op.READ, Res.TOPIC, topic)


def may_describe_topic(ctx: RequestContext, topic: str) -> bool:
    """Metadata, ListOffsets, OffsetForLeaderEpoch, OffsetFetch."""
    return allowed(ctx, Op.DESCRIBE, Res.TOPIC, topic)


def may_create_topic(ctx: RequestContext, topic: str) -> bool:
    """CreateTopics and auto-creation: CREATE on the Cluster, or on the topic itself."""
    return on_cluster(ctx, Op.CREATE) or allowed(ctx, Op.CREATE, Res.TOPIC, topic)


def may_delete_topic(ctx: RequestContext, topic: str) -> bool:
    """DeleteTopics and DeleteRecords."""
    return allowed(ctx, Op.DELETE, Res.TOPIC, topic)


def may_alter_topic(ctx: RequestContext, topic: str) -> bool:
    """CreatePartitions."""
    return allowed(ctx, Op.ALTER, Res.TOPIC, topic)


# -- configs --------------------------------------------------------------------------------------


def _config_resource(resource_type: int, name: str) -> tuple[ResourceType, str]:
    if resource_type == CONFIG_TOPIC:
        return Res.TOPIC, name
    return Res.CLUSTER, CLUSTER_NAME  # broker (and broker logger) configs belong to the cluster


def may_describe_configs(ctx: RequestContext, resource_type: int, name: str) -> bool:
    rtype, rname = _config_resource(resource_type, name)
    return allowed(ctx, Op.DESCRIBE_CONFIGS, rtype, rname)


def may_alter_configs(ctx: RequestContext, resource_type: int, name: str) -> bool:
    rtype, rname = _config_resource(resource_type, name)
    return allowed(ctx, Op.ALTER_CONFIGS, rtype, rname)


# -- groups ---------------------------------------------------------------------------------------


def may_read_group(ctx: RequestContext, group: str) -> bool:
    """JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit."""
    return allowed(ctx, Op.READ, Res.GROUP, group)


def may_describe_group(ctx: RequestContext, group: str) -> bool:
    """FindCoordinator, DescribeGroups, OffsetFetch, ListGroups (per group)."""
    return allowed(ctx, Op.DESCRIBE, Res.GROUP, group)


def may_delete_group(ctx: RequestContext, group: str) -> bool:
    return allowed(ctx, Op.DELETE, Res.GROUP, group)


# -- the cluster ----------------------------------------------------------------------------------


def may_produce_with_offsets(ctx: RequestContext) -> bool:
    """KIP-391 (ProduceMode USE_OFFSETS): ReplicatorWrite on the Cluster (docs/protocol.md §4)."""
    return on_cluster(ctx, Op.REPLICATOR_WRITE)


def may_write_idempotently(ctx: RequestContext) -> bool:
    """InitProducerId without a transactional id: IDEMPOTENT_WRITE on the Cluster, or WRITE
    on at least one topic (the rule since Kafka 3.0, KIP-679)."""
    security = ctx.broker.security
    if security.authorizer is None:
        return True
    return on_cluster(ctx, Op.IDEMPOTENT_WRITE) or security.authorizer.authorize_any(
        ctx.principal, Op.WRITE, Res.TOPIC, ctx.client_host
    )


def may_describe_cluster(ctx: RequestContext) -> bool:
    """DescribeAcls, DescribeUserScramCredentials, ListGroups (all groups)."""
    return on_cluster(ctx, Op.DESCRIBE)


def may_alter_cluster(ctx: RequestContext) -> bool:
    """CreateAcls, DeleteAcls, AlterUserScramCredentials."""
    return on_cluster(ctx, Op.ALTER)


# -- transactional ids ----------------------------------------------------------------------------


def may_write_transactional_id(ctx: RequestContext, transactional_id: str) -> bool:
    """InitProducerId with a transactional id, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
    TxnOffsetCommit, and a Produce carrying transactional records."""
    return allowed(ctx, Op.WRITE, Res.TRANSACTIONAL_ID, transactional_id)


def may_describe_transactional_id(ctx: RequestContext, transactional_id: str) -> bool:
    """FindCoordinator (key type transaction), DescribeTransactions, ListTransactions (per
    id). WRITE implies DESCRIBE in Kafka's authorizer."""
    return allowed(ctx, Op.DESCRIBE, Res.TRANSACTIONAL_ID, transactional_id)
