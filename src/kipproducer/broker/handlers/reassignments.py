"""ElectLeaders, AlterPartitionReassignments and ListPartitionReassignments on one node.

Every partition has one replica, this broker, which is its leader: Kafka's controller answers
an election for such a partition ELECTION_NOT_NEEDED (and leaves those out of an "all
partitions" answer), a reassignment to the replica set the partition already has completes at
once, and no reassignment is ever ongoing. Cluster authorization is Kafka's: ALTER for the two
changes, DESCRIBE for the listing.
"""

from __future__ import annotations

from kipproducer.protocol import build_response
from kipproducer.protocol import error_codes as ec

from ...protocol.api_keys import (
    ALTER_PARTITION_REASSIGNMENTS,
    ELECT_LEADERS,
    LIST_PARTITION_REASSIGNMENTS,
)
from ..api import RequestContext, handles
from ..security.checks import may_alter_cluster, may_describe_cluster
from .common import logs_of

ELECTION_NOT_NEEDED = ec.error_code("ELECTION_NOT_NEEDED")
NO_REASSIGNMENT_IN_PROGRESS = ec.error_code("NO_REASSIGNMENT_IN_PROGRESS")
INVALID_REPLICA_ASSIGNMENT = ec.error_code("INVALID_REPLICA_ASSIGNMENT")
ELECTION_TYPES = (0, 1)  # preferred, unclean


def _exists(topics, topic: str, partition: int) -> bool:
    info = topics.get(topic)
    return info is not None and 0 <= partition < info.partitions


# -- ElectLeaders -----------------------------------------------------------------------------


@handles(ELECT_LEADERS, 0, 2)
async def elect_leaders(ctx: RequestContext, body):
    v = ctx.api_version
    topics = logs_of(ctx).topics()
    election_type = body.election_type if v >= 1 else 0
    if body.topic_partitions is None:
        # "Every partition": the answer lists only partitions that needed an election; here
        # none does.
        requested: list[tuple[str, int]] = []
    else:
        requested = [(t.topic, p) for t in body.topic_partitions for p in t.partitions]
    top = ec.NONE
    if not may_alter_cluster(ctx):
        top = ec.CLUSTER_AUTHORIZATION_FAILED
    elif election_type not in ELECTION_TYPES:
        top = ec.INVALID_REQUEST
    by_topic: dict[str, list[dict]] = {}
    for topic, partition in dict.fromkeys(requested):
        if top != ec.NONE:
            code, message = top, None
        elif topic not in topics:  # Kafka's words (kafka-leader-election prints them)
            code, message = ec.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {topic}"
        elif not _exists(topics, topic, partition):
            code, message = (ec.UNKNOWN_TOPIC_OR_PARTITION,
                             f"No such partition as {topic}-{partition}")
        else:
            code, message = ELECTION_NOT_NEEDED, f"{topic}-{partition} already has its leader"
        by_topic.setdefault(topic, []).append(
            {"partition_id": partition, "error_code": code, "error_message": message}
        )
    fields: dict = {
        "replica_election_results": [
            {"topic": t, "partition_result": results} for t, results in by_topic.items()
        ]
    }
    if v >= 1:
        fields["error_code"] = top
    return build_response(ELECT_LEADERS, v, **fields)


# -- AlterPartitionReassignments --------------------------------------------------------------


def _reassignment_error(ctx: RequestContext, topics, topic: str, partition: int,
                        replicas) -> tuple[int, str | None]:
    if not _exists(topics, topic, partition):
        return ec.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}-{partition} does not exist"
    if replicas is None:
        return NO_REASSIGNMENT_IN_PROGRESS, f"no reassignment of {topic}-{partition} is ongoing"
    replicas = list(replicas)
    if not replicas:
        return INVALID_REPLICA_ASSIGNMENT, "the replica list is empty"
    if len(set(replicas)) != len(replicas):
        return INVALID_REPLICA_ASSIGNMENT, f"the replica list {replicas} repeats a broker"
    unknown = [r for r in replicas if r != ctx.broker.node_id]
    if unknown:
        return INVALID_REPLICA_ASSIGNMENT, (
            f"broker {unknown[0]} is not registered (the only broker is {ctx.broker.node_id})")
    return ec.NONE, None  # the partition already has exactly these replicas


@handles(ALTER_PARTITION_REASSIGNMENTS, 0, 0)
async def alter_partition_reassignments(ctx: RequestContext, body):
    allowed = may_alter_cluster(ctx)
    topics = logs_of(ctx).topics()
    responses = []
    for t in body.topics:
        partitions = []
        for p in t.partitions:
            if allowed:
                code, message = _reassignment_error(ctx, topics, t.name, p.partition_index,
                                                    p.replicas)
            else:
                code, message = ec.CLUSTER_AUTHORIZATION_FAILED, None
            partitions.append({"partition_index": p.partition_index, "error_code": code,
                               "error_message": message})
        responses.append({"name": t.name, "partitions": partitions})
    top = ec.NONE if allowed else ec.CLUSTER_AUTHORIZATION_FAILED
    return build_response(ALTER_PARTITION_REASSIGNMENTS, ctx.api_version, error_code=top,
                          error_message=None, responses=responses)


# -- ListPartitionReassignments ---------------------------------------------------------------


@handles(LIST_PARTITION_REASSIGNMENTS, 0, 0)
async def list_partition_reassignments(ctx: RequestContext, body):
    # Nothing is ever being reassigned: the list is empty for any topics asked for (Kafka
    # skips topics it does not know here too).
    top = ec.NONE if may_describe_cluster(ctx) else ec.CLUSTER_AUTHORIZATION_FAILED
    return build_response(LIST_PARTITION_REASSIGNMENTS, ctx.api_version, error_code=top,
                          error_message=None, topics=())
