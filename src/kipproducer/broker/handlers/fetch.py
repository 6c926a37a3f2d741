"""Fetch, ListOffsets and OffsetForLeaderEpoch: reading the logs.

Fetch honours max_wait_ms / min_bytes (a long poll woken by appends), max_bytes and
partition_max_bytes with Kafka's "at least one batch" rule for the first partition that has
data, topic ids (v13+), and refuses fetch sessions the way Kafka allows: a request for a new
session gets session id 0 ("no session created", the client goes on with full fetches) and an
incremental fetch on a session we never created gets FETCH_SESSION_ID_NOT_FOUND.

Isolation (KIP-98): a read_committed fetch (isolation_level 1) reads only below the last
stable offset and gets the aborted transactions of the range it reads; read_uncommitted (0)
reads to the high watermark and gets a null list. Every answer carries the real last stable
offset. ListOffsets LATEST answers the LSO under read_committed and the high watermark
otherwise; a timestamp or MAX_TIMESTAMP lookup whose record lies at or above that offset
finds nothing (Kafka's rule: the result is filtered, not searched for below the bound).
"""

from __future__ import annotations

import logging
import time

from kipproducer.protocol import build_response
from kipproducer.protocol import error_codes as ec

from ...protocol.api_keys import FETCH, LIST_OFFSETS, OFFSET_FOR_LEADER_EPOCH
from ..api import RequestContext, handles
from ..security.checks import may_describe_topic, may_read_topic
from ..storage.errors import OffsetOutOfRangeError, StorageError, UnknownTopicError
from .common import FETCH_SESSION_ID_NOT_FOUND, LEADER_EPOCH, logs_of, partition_log

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5
READ_UNCOMMITTED, READ_COMMITTED = 0, 1

logger = logging.getLogger("kipproducer.broker")


def _topic_of(logs, version: int, topic):
    """(name, info) of a fetch topic; info None when unknown."""
    if version >= 13:
        try:
            info = logs.topic_by_id(topic.topic_id)
        except UnknownTopicError:
            return None, None
        return info.name, info
    return topic.topic, logs.topics().get(topic.topic)


def _read_all(ctx: RequestContext, body) -> tuple[list, int, bool]:
    logs = logs_of(ctx)
    v = ctx.api_version
    read_committed = body.isolation_level == READ_COMMITTED
    # fetch.max.bytes caps what a client may ask for, as in Kafka: one Fetch holds no more
    # than that in memory (beyond a first batch larger than it, Kafka's "at least one" rule).
    cap = ctx.broker.config.fetch_max_bytes
    remaining = min(body.max_bytes, cap) if body.max_bytes > 0 else cap
    total = 0
    failed = False
    responses = []
    for topic in body.topics:
        name, info = _topic_of(logs, v, topic)
        # A name the client may not read is refused whether or not it exists (no leak); an
        # unknown topic id stays UNKNOWN_TOPIC_ID, as there is no name to check.
        readable = name is None or may_read_topic(ctx, name)
        partitions = []
        for p in topic.partitions:
            answer = {
                "partition_index": p.partition,
                "error_code": ec.NONE,
                "high_watermark": -1,
                "last_stable_offset": -1,
                # null unless a read_committed read fills it (Kafka's encoding)
                "aborted_transactions": None,
                "records": b"",
            }
            if v >= 5:
                answer["log_start_offset"] = -1
            if v >= 11:
                answer["preferred_read_replica"] = -1
            if not readable:
                answer["error_code"] = ec.TOPIC_AUTHORIZATION_FAILED
                failed = True
                partitions.append(answer)
                continue
            if info is None or not 0 <= p.partition < info.partitions:
                answer["error_code"] = (
                    ec.UNKNOWN_TOPIC_ID if v >= 13 else ec.UNKNOWN_TOPIC_OR_PARTITION
                )
                failed = True
                partitions.append(answer)
                continue
            log = logs.get_log(name, p.partition)
            try:
                result = log.read(
                    p.fetch_offset,
                    min(p.partition_max_bytes, remaining),
                    min_one_batch=(total == 0),
                    read_committed=read_committed,
                )
            except OffsetOutOfRangeError:
                answer.update(
                    error_code=ec.OFFSET_OUT_OF_RANGE,
                    high_watermark=log.high_watermark,
                    last_stable_offset=log.last_stable_offset,
                )
                if v >= 5:
                    answer["log_start_offset"] = log.log_start_offset
                failed = True
                partitions.append(answer)
                continue
            except StorageError as exc:
                # Damaged data (a batch failing its CRC) or a log an I/O error took offline:
                # no records, never a partial or bad batch served as good.
                logger.warning("fetch from %s-%d at %d refused: %s", name, p.partition,
                             p.fetch_offset, exc)
                answer["error_code"] = ec.KAFKA_STORAGE_ERROR
                failed = True
                partitions.append(answer)
                continue
            size = len(result.records)
            total += size
            remaining = max(0, remaining - size)
            answer.update(
                high_watermark=result.high_watermark,
                last_stable_offset=result.last_stable_offset,
                records=result.records if size else b"",
            )
            if result.aborted_transactions is not None:
                answer["aborted_transactions"] = [
                    {"producer_id": producer_id, "first_offset": first_offset}
                    for producer_id, first_offset in result.aborted_transactions
                ]
            if v >= 5:
                answer["log_start_offset"] = result.log_start_offset
            partitions.append(answer)
        entry = {"partitions": partitions}
        if v >= 13:
            entry["topic_id"] = topic.topic_id
        else:
            entry["topic"] = topic.topic
        responses.append(entry)
    return responses, total, failed


@handles(FETCH, 4, 17)
async def fetch(ctx: RequestContext, body):
    v = ctx.api_version
    extra = {}
    if v >= 7:
        if body.session_id != 0:
            return build_response(
                FETCH, v, error_code=FETCH_SESSION_ID_NOT_FOUND, session_id=0, responses=()
            )
        extra = {"error_code": ec.NONE, "session_id": 0}
    deadline = time.monotonic() + max(0, body.max_wait) / 1000
    while True:
        responses, total, failed = _read_all(ctx, body)
        remaining = deadline - time.monotonic()
        if total >= max(body.min_bytes, 1) or failed or remaining <= 0:
            break
        await ctx.broker.wait_for_data(remaining)
    return build_response(FETCH, v, responses=responses, **extra)


@handles(LIST_OFFSETS, 1, 9)
async def list_offsets(ctx: RequestContext, body):
    logs = logs_of(ctx)
    v = ctx.api_version
    # v0-1 have no isolation level: read_uncommitted (Kafka bounds them by the log end, the
    # same offset as the high watermark here).
    read_committed = v >= 2 and body.isolation_level == READ_COMMITTED
    topics = []
    for topic in body.topics:
        info = logs.topics().get(topic.name)
        describable = may_describe_topic(ctx, topic.name)
        partitions = []
        for p in topic.partitions:
            answer = {
                "partition_index": p.partition_index,
                "error_code": ec.NONE,
                "timestamp": -1,
                "offset": -1,
            }
            if v >= 4:
                answer["leader_epoch"] = LEADER_EPOCH
            log, answer["error_code"] = partition_log(
                logs, info, topic.name, p.partition_index, describable)
            if log is None:
                partitions.append(answer)
                continue
            ts = p.timestamp
            fetchable = log.last_stable_offset if read_committed else log.high_watermark
            if ts == LATEST:
                answer["offset"] = fetchable
            elif ts in (EARLIEST, EARLIEST_LOCAL):
                answer["offset"] = log.log_start_offset
            elif ts == LATEST_TIERED:
                answer["offset"] = log.log_start_offset - 1  # nothing is tiered
            elif ts == MAX_TIMESTAMP:
                found = log.max_timestamp_offset()
                if found is not None and found[0] < fetchable:
                    answer["offset"], answer["timestamp"] = found
            elif ts >= 0:
                found = log.offset_for_timestamp(ts)
                if found is not None and found[0] < fetchable:
                    answer["offset"], answer["timestamp"] = found
            else:
                answer["error_code"] = ec.INVALID_REQUEST
            partitions.append(answer)
        topics.append({"name": topic.name, "partitions": partitions})
    return build_response(LIST_OFFSETS, v, topics=topics)


@handles(OFFSET_FOR_LEADER_EPOCH, 2, 4)
async def offset_for_leader_epoch(ctx: RequestContext, body):
    """One leader epoch (0) for the life of every partition: its end offset is the log end."""
    logs = logs_of(ctx)
    topics = []
    for topic in body.topics:
        info = logs.topics().get(topic.topic)
        describable = may_describe_topic(ctx, topic.topic)
        partitions = []
        for p in topic.partitions:
            answer = {
                "partition": p.partition,
                "error_code": ec.NONE,
                "leader_epoch": -1,
                "end_offset": -1,
            }
            log, answer["error_code"] = partition_log(
                logs, info, topic.topic, p.partition, describable)
            if log is not None and p.current_leader_epoch > LEADER_EPOCH:
                answer["error_code"] = ec.error_code("UNKNOWN_LEADER_EPOCH")
            elif log is not None and p.leader_epoch <= LEADER_EPOCH:
                answer.update(leader_epoch=LEADER_EPOCH, end_offset=log.log_end_offset)
            partitions.append(answer)
        topics.append({"topic": topic.topic, "partitions": partitions})
    return build_response(OFFSET_FOR_LEADER_EPOCH, ctx.api_version, topics=topics)
