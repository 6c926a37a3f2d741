"""DescribeTopicPartitions (KIP-966): Metadata's partition view, paged by partition count.

Kafka's rules: an empty topic list means every topic (those the principal may not describe are
left out); named topics the principal may not describe get TOPIC_AUTHORIZATION_FAILED with a
zero topic id, unknown ones UNKNOWN_TOPIC_OR_PARTITION, and nothing is created. Topics come in
name order from the cursor on; once ``response_partition_limit`` partitions (at most 2000, at
least 1) are listed, ``next_cursor`` names where to go on. A cursor whose topic is not among
the named ones, or whose partition is negative, is INVALID_REQUEST for every named topic.
Every partition has this broker as its only replica, leader and ISR; eligible leader replicas
(KIP-966's ELR) are never in use, so those lists are empty.
"""

from __future__ import annotations

from kipproducer.protocol import build_response
from kipproducer.protocol import error_codes as ec

from ...protocol.api_keys import DESCRIBE_TOPIC_PARTITIONS
from ..api import RequestContext, handles
from ..security.authorized_ops import topic_operations
from ..security.checks import may_describe_topic
from .common import LEADER_EPOCH, logs_of

#: Kafka's max.request.partition.size.limit default.
PARTITION_LIMIT = 2000


def _refused(ctx: RequestContext, body, code: int):
    return build_response(
        DESCRIBE_TOPIC_PARTITIONS,
        ctx.api_version,
        topics=[{"error_code": code, "name": t.name, "topic_id": None, "is_internal": False,
                 "partitions": ()} for t in body.topics],
        next_cursor=None,
    )


def _partition(node: int, index: int) -> dict:
    return {
        "error_code": ec.NONE,
        "partition_index": index,
        "leader_id": node,
        "leader_epoch": LEADER_EPOCH,
        "replica_nodes": (node,),
        "isr_nodes": (node,),
        "eligible_leader_replicas": (),
        "last_known_elr": (),
        "offline_replicas": (),
    }


@handles(DESCRIBE_TOPIC_PARTITIONS, 0, 0)
async def describe_topic_partitions(ctx: RequestContext, body):
    known = logs_of(ctx).topics()
    everything = not body.topics
    cursor = body.cursor
    start_topic = cursor.topic_name if cursor is not None else ""
    if everything:
        names = {n for n in known if n >= start_topic}
    else:
        names = {t.name for t in body.topics if t.name >= start_topic}
        if cursor is not None and cursor.topic_name not in names:
            return _refused(ctx, body, ec.INVALID_REQUEST)
    if cursor is not None and cursor.partition_index < 0:
        return _refused(ctx, body, ec.INVALID_REQUEST)

    node = ctx.broker.node_id
    remaining = max(min(PARTITION_LIMIT, body.response_partition_limit), 1)
    out: list[dict] = []
    refused: list[dict] = []
    next_cursor = None
    for name in sorted(names):
        if not may_describe_topic(ctx, name):
            if not everything:
                refused.append({"error_code": ec.TOPIC_AUTHORIZATION_FAILED, "name": name,
                                "topic_id": None, "is_internal": False, "partitions": (),
                                "topic_authorized_operations": topic_operations(ctx, name,
                                                                               False)})
            continue
        if remaining == 0:
            next_cursor = {"topic_name": name, "partition_index": 0}
            break
        info = known.get(name)
        if info is None:
            if not everything:
                out.append({"error_code": ec.UNKNOWN_TOPIC_OR_PARTITION, "name": name,
                            "topic_id": None, "is_internal": False, "partitions": (),
                            "topic_authorized_operations": topic_operations(ctx, name, True)})
            continue
        first = cursor.partition_index if cursor is not None and name == start_topic else 0
        last = min(info.partitions, first + remaining)
        out.append({
            "error_code": ec.NONE,
            "name": name,
            "topic_id": info.topic_id,
            "is_internal": False,
            "partitions": [_partition(node, p) for p in range(first, last)],
            "topic_authorized_operations": topic_operations(ctx, name, True),
        })
        remaining -= max(last - first, 0)
        if last < info.partitions:
            next_cursor = {"topic_name": name, "partition_index": last}
            break
    return build_response(DESCRIBE_TOPIC_PARTITIONS, ctx.api_version, topics=out + refused,
                          next_cursor=next_cursor)
