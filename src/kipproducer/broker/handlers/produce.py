"""Produce, InitProducerId and DescribeProducers.

The produce path validates every batch with the native decoder (CRC, layout, records), then
appends it with its base offset patched in place in the request's own buffer: no re-encoding
and no copy between the socket and the segment file.

Per partition, in Kafka's order (../shared/reference/kafka-protocol-facts.md §3.3): unknown
topic or partition; exactly one v2 batch; size <= max.message.bytes; CRC and record layout;
client rules (baseOffset 0, no control batches, a sequence with every producer id);
timestamps within message.timestamp.{before,after}.max.ms; keys on compacted topics; then the
log's own checks (idempotent duplicate, epoch, sequence) and the append.
"""

from __future__ import annotations

import logging
import time

from kipproducer.errors import CorruptRecordError
from kipproducer.protocol import build_response
from kipproducer.protocol import error_codes as ec
from kipproducer.protocol.wire_extensions import ProduceMode
from kipproducer.records import validate_batch

from ..api import RequestContext, handles
from ..producer_state import ProducerStateError
from ..storage.errors import StorageError
from ..storage.log_config import LONG_MAX
from .common import logs_of

log = logging.getLogger("kipproducer.broker")

PRODUCE, INIT_PRODUCER_ID, DESCRIBE_PRODUCERS = 0, 22, 61


class PartitionRefused(Exception):
    def __init__(
        self, error_code: int, message: str | None = None, record_errors: list | None = None
    ) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message
        self.record_errors = record_errors or []


def _check_batch(ctx: RequestContext, info, records):
    """Everything checked before the log is touched; returns the validated Batch."""
    config = info.config
    if records is None or len(records) == 0:
        raise PartitionRefused(ec.INVALID_RECORD, "a produce request needs one record batch")
    if len(records) > config.max_message_bytes:
        raise PartitionRefused(
            ec.MESSAGE_TOO_LARGE,
            f"batch of {len(records)} bytes exceeds max.message.bytes={config.max_message_bytes}",
        )
    try:
        batch = validate_batch(records)
    except CorruptRecordError as exc:
        code = ec.CORRUPT_MESSAGE if exc.rule in ("crc", "truncated") else ec.INVALID_RECORD
        raise PartitionRefused(code, str(exc)) from None
    if batch.base_offset != 0:
        raise PartitionRefused(
            ec.INVALID_RECORD,
            f"the baseOffset of a produced batch must be 0, not {batch.base_offset}",
        )
    if batch.is_control:
        raise PartitionRefused(ec.INVALID_RECORD, "clients may not produce control batches")
    if batch.producer_id >= 0 and batch.base_sequence < 0:
        raise PartitionRefused(
            ec.INVALID_RECORD, f"producer id {batch.producer_id} sent no base sequence"
        )
    if batch.is_transactional:
        raise PartitionRefused(
            ec.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            "transactions are not supported by this broker yet",
        )
    _check_timestamps(config, batch)
    if config.compact:
        _check_keys(batch)
    return batch


def _check_timestamps(config, batch) -> None:
    if config.log_append_time:
        return
    now = int(time.time() * 1000)
    after, before = config.message_timestamp_after_max_ms, config.message_timestamp_before_max_ms
    if after < LONG_MAX and batch.max_timestamp > now + after:
        raise PartitionRefused(
            ec.INVALID_TIMESTAMP,
            f"timestamp {batch.max_timestamp} is more than message.timestamp.after.max.ms="
            f"{after} ahead of the broker's clock",
        )
    if before < LONG_MAX:
        for index, record in enumerate(batch):
            if record.timestamp < now - before:
                raise PartitionRefused(
                    ec.INVALID_TIMESTAMP,
                    f"record {index}: timestamp {record.timestamp} is more than "
                    f"message.timestamp.before.max.ms={before} behind the broker's clock",
                    [{"batch_index": index, "batch_index_error_message": "timestamp too old"}],
                )


def _check_keys(batch) -> None:
    errors = [
        {"batch_index": index, "batch_index_error_message": "compacted topic needs a key"}
        for index, record in enumerate(batch)
        if record.key is None
    ]
    if errors:
        raise PartitionRefused(
            ec.INVALID_RECORD, "a compacted topic only takes records with a key", errors
        )


@handles(PRODUCE, 3, 12, advertise_min=0)
async def produce(ctx: RequestContext, body):
    logs = logs_of(ctx)
    mode = getattr(body, "produce_mode", ProduceMode.ASSIGN)
    results = []
    appended = False
    for topic in body.topic_data:
        info = logs.topics().get(topic.name)
        partitions = []
        for pdata in topic.partition_data:
            answer = {
                "index": pdata.index,
                "base_offset": -1,
                "log_append_time": -1,
                "log_start_offset": -1,
            }
            try:
                if body.transactional_id is not None:
                    raise PartitionRefused(
                        ec.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                        "transactions are not supported by this broker yet",
                    )
                if mode != ProduceMode.ASSIGN:
                    raise PartitionRefused(
                        ec.INVALID_REQUEST,
                        f"ProduceMode {mode} is not enabled on this broker (no "
                        "kip.produce.* feature advertised)",
                    )
                if info is None or not 0 <= pdata.index < info.partitions:
                    raise PartitionRefused(ec.UNKNOWN_TOPIC_OR_PARTITION)
                _check_batch(ctx, info, pdata.records)
                result = logs.get_log(topic.name, pdata.index).append(
                    pdata.records, assign_offsets=True
                )
                answer.update(
                    base_offset=result.base_offset,
                    log_append_time=result.log_append_time,
                    log_start_offset=result.log_start_offset,
                )
                appended = appended or not result.duplicate
            except PartitionRefused as refused:
                answer.update(
                    error_code=refused.error_code,
                    error_message=refused.message,
                    record_errors=refused.record_errors,
                )
            except ProducerStateError as exc:
                answer.update(error_code=exc.error_code, error_message=str(exc))
            except StorageError as exc:
                log.warning("produce to %s-%d failed: %s", topic.name, pdata.index, exc)
                answer.update(error_code=ec.KAFKA_STORAGE_ERROR, error_message=str(exc))
            if ctx.api_version < 8:
                answer.pop("record_errors", None)
                answer.pop("error_message", None)
            if ctx.api_version < 5:
                answer.pop("log_start_offset")
            partitions.append(answer)
        results.append({"name": topic.name, "partition_responses": partitions})
    if appended:
        ctx.broker.notify_appended()
    if body.acks == 0:
        return None
    return build_response(PRODUCE, ctx.api_version, responses=results)


@handles(INIT_PRODUCER_ID, 0, 5, advertise_min=0)
async def init_producer_id(ctx: RequestContext, body):
    if body.transactional_id is not None:
        return build_response(
            INIT_PRODUCER_ID,
            ctx.api_version,
            error_code=ec.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            producer_id=-1,
            producer_epoch=-1,
        )
    # An idempotent producer (no transactional id) always gets a fresh id, epoch 0, as Kafka's
    # coordinator does, also when it asks to bump the epoch of its old id (KIP-360).
    producer_id = logs_of(ctx).allocate_producer_id()
    return build_response(
        INIT_PRODUCER_ID,
        ctx.api_version,
        error_code=ec.NONE,
        producer_id=producer_id,
        producer_epoch=0,
    )


@handles(DESCRIBE_PRODUCERS, 0, 0)
async def describe_producers(ctx: RequestContext, body):
    logs = logs_of(ctx)
    topics = []
    for topic in body.topics:
        info = logs.topics().get(topic.name)
        partitions = []
        for index in topic.partition_indexes:
            if info is None or not 0 <= index < info.partitions:
                partitions.append(
                    {"partition_index": index, "error_code": ec.UNKNOWN_TOPIC_OR_PARTITION}
                )
                continue
            state = logs.get_log(topic.name, index).producer_state
            partitions.append(
                {
                    "partition_index": index,
                    "error_code": ec.NONE,
                    "active_producers": [
                        {
                            "producer_id": entry.producer_id,
                            "producer_epoch": entry.epoch,
                            "last_sequence": entry.last_seq,
                            "last_timestamp": entry.last_timestamp,
                            "coordinator_epoch": -1,
                            "current_txn_start_offset": -1,
                        }
                        for entry in state
                    ],
                }
            )
        topics.append({"name": topic.name, "partitions": partitions})
    return build_response(DESCRIBE_PRODUCERS, ctx.api_version, topics=topics)
