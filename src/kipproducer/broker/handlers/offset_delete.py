"""OffsetDelete (KIP-496): removes a group's committed offsets, with KafkaApis' checks.

DELETE on the group, else GROUP_AUTHORIZATION_FAILED for the whole request; READ on each topic,
else TOPIC_AUTHORIZATION_FAILED for its partitions; partitions that do not exist get
UNKNOWN_TOPIC_OR_PARTITION. The rest goes to the group coordinator (see
``GroupCoordinator.delete_offsets`` for the group rules). A group error answers with no
partitions, as Kafka does.
"""

from __future__ import annotations

from kipproducer.protocol import build_response
from kipproducer.protocol import error_codes as ec

from ...protocol.api_keys import OFFSET_DELETE
from ..api import RequestContext, handles
from ..security.checks import may_delete_group, may_read_topic
from .common import logs_of


def _answer(ctx: RequestContext, code: int, partitions: dict[tuple[str, int], int] | None = None):
    by_topic: dict[str, list[dict]] = {}
    for (topic, partition), error in (partitions or {}).items():
        by_topic.setdefault(topic, []).append({"partition_index": partition, "error_code": error})
    return build_response(
        OFFSET_DELETE,
        ctx.api_version,
        error_code=code,
        topics=[{"name": t, "partitions": ps} for t, ps in by_topic.items()],
    )


@handles(OFFSET_DELETE, 0, 0)
async def offset_delete(ctx: RequestContext, body):
    if not may_delete_group(ctx, body.group_id):
        return _answer(ctx, ec.GROUP_AUTHORIZATION_FAILED)
    groups = ctx.broker.groups
    if groups is None or not groups.is_active:
        return _answer(ctx, ec.COORDINATOR_NOT_AVAILABLE)
    topics = logs_of(ctx).topics()
    answers: dict[tuple[str, int], int] = {}
    valid: list[tuple[str, int]] = []
    for t in body.topics:
        readable = may_read_topic(ctx, t.name)
        info = topics.get(t.name)
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            if not readable:
                answers[tp] = ec.TOPIC_AUTHORIZATION_FAILED
            elif info is None or not 0 <= tp[1] < info.partitions:
                answers[tp] = ec.UNKNOWN_TOPIC_OR_PARTITION
            else:
                answers[tp] = ec.NONE
                valid.append(tp)
    code, deleted = groups.delete_offsets(body.group_id, valid)
    if code != ec.NONE:
        return _answer(ctx, code)
    answers.update(deleted)
    return _answer(ctx, ec.NONE, answers)
