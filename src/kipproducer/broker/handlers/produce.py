"""Produce and DescribeProducers (InitProducerId is in transactions.py).

The produce path validates every batch with the native decoder (CRC, layout, records), then
appends it with its base offset patched in place in the request's own buffer: no re-encoding
and no copy between the socket and the segment file. The one exception is a topic whose
compression.type names another codec than the batch's: that batch is rewritten first
(storage/recompress.py).

Per partition, in the order Kafka's ReplicaManager checks them: unknown
topic or partition; exactly one v2 batch (with explicit offsets, KIP-WIRE version 2: one or
more, see produce_unit.py); size <= max.message.bytes; CRC and record layout;
client rules (baseOffset 0, no control batches, a sequence with every producer id);
timestamps within message.timestamp.{before,after}.max.ms; keys on compacted topics; then the
log's own checks (idempotent duplicate, epoch, sequence) and the append.

Transactional batches (KafkaApis / ReplicaManager rules): a request carrying one needs its
transactional_id and WRITE on it, else every partition gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED
and nothing is appended; its transactional batches must all be of one producer id and epoch
(else INVALID_PRODUCER_ID_MAPPING for every partition); each must go to a partition added to
that producer's Ongoing transaction (transaction verification, KIP-890 part 1): else
INVALID_TXN_STATE up to Produce v10 and TRANSACTION_ABORTABLE from v11. A request without a
transactional_id pays none of this beyond one flag test per batch.
"""

from __future__ import annotations

import logging
import time

from kipproducer.compression import DecompressedTooLarge, output_limit
from kipproducer.errors import CorruptRecordError
from kipproducer.protocol import build_response
from kipproducer.protocol import error_codes as ec
from kipproducer.protocol.produce_codec import DIRECT_VERSIONS, EncodedAnswer
from kipproducer.protocol.wire_extensions import (
    KEY_CONDITIONAL_WIRE_VERSION,
    MULTI_BATCH_VERSION,
    KeyConditionsFormatError,
    ProduceMode,
    decode_key_conditions,
    encode_key_conflicts,
)
from kipproducer.records import (
    UnitRuleError,
    decode_batches,
    null_key_indexes,
    split_unit,
    unit_summary,
    validate_batch,
)

from ...protocol.api_keys import DESCRIBE_PRODUCERS, PRODUCE
from ..api import RequestContext, handles
from ..decompression_guard import validate_bounded, without_records
from ..produce_unit import BatchUnit
from ..producer_state import Duplicate, ProducerStateError
from ..security.checks import (
    may_produce_with_offsets,
    may_read_topic,
    may_write_topic,
    may_write_transactional_id,
)
from ..storage.errors import (
    InvalidAppendOffsetError,
    KeyConditionError,
    OffsetMismatchError,
    StorageError,
)
from ..storage.key_index import PENDING, UNKNOWN, KeyConditions
from ..storage.log_config import LONG_MAX
from ..storage.recompress import recompress
from .common import logs_of, partition_log

log = logging.getLogger("kipproducer.broker")

#: The first Produce version that is told TRANSACTION_ABORTABLE (KIP-890) for a partition not
#: in the transaction; older ones get INVALID_TXN_STATE.
FIRST_ABORTABLE_PRODUCE_VERSION = 11


class PartitionRefused(Exception):
    def __init__(
        self, error_code: int, message: str | None = None, record_errors: list | None = None
    ) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message
        self.record_errors = record_errors or []


class RequestRefused(Exception):
    """A rule that fails the whole request: every partition gets ``error_code``, nothing is
    appended (Kafka answers such a request with one error for all its partitions)."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


class TransactionalRequest:
    """What a request with a transactional_id needs to check its transactional batches."""

    __slots__ = ("transactional_id", "authorized", "coordinator", "producer")

    def __init__(self, ctx: RequestContext, transactional_id: str) -> None:
        self.transactional_id = transactional_id
        self.authorized = may_write_transactional_id(ctx, transactional_id)
        self.coordinator = ctx.broker.transactions
        self.producer: tuple[int, int] | None = None  # of the first transactional batch

    def verify(self, ctx: RequestContext, batch, topic: str, partition: int) -> None:
        """Raise for a transactional batch the transaction does not allow."""
        producer = (batch.producer_id, batch.producer_epoch)
        if self.producer is None:
            self.producer = producer
        elif producer != self.producer:
            raise RequestRefused(
                ec.INVALID_PRODUCER_ID_MAPPING,
                "transactional records contained more than one producer id")
        if self.coordinator is None:
            code = ec.COORDINATOR_NOT_AVAILABLE
        else:
            code = self.coordinator.verify_produce(
                self.transactional_id, batch.producer_id, batch.producer_epoch, topic,
                partition)
        if code == ec.NONE:
            return
        if code == ec.INVALID_TXN_STATE:
            if ctx.api_version >= FIRST_ABORTABLE_PRODUCE_VERSION:
                raise PartitionRefused(ec.TRANSACTION_ABORTABLE)
            raise PartitionRefused(code, "Partition was not added to the transaction")
        if code in (ec.CONCURRENT_TRANSACTIONS, ec.COORDINATOR_NOT_AVAILABLE):
            # Kafka's translation for clients that would not retry these (TV1 producers):
            # NOT_ENOUGH_REPLICAS is retriable and triggers no metadata refresh.
            raise PartitionRefused(
                ec.NOT_ENOUGH_REPLICAS,
                "Unable to verify the partition has been added to the transaction. "
                f"Underlying error: {ec.error_name(code)}")
        raise PartitionRefused(code)


def _check_transactional(ctx: RequestContext, txn: TransactionalRequest | None, batch,
                         mode: int, topic: str, partition: int) -> None:
    """The rules for a batch with the transactional bit: docs/protocol.md §4's USE_OFFSETS rule
    (whatever the request's transactional id), then KafkaApis' order: the transactional id and
    its ACL, which fail the request, then the transaction's own check of the partition."""
    if mode == ProduceMode.USE_OFFSETS:
        raise PartitionRefused(
            ec.INVALID_TXN_STATE,
            "a batch with explicit offsets cannot be transactional: commit markers would "
            "take offsets the source owns")
    if txn is None or not txn.authorized:
        raise RequestRefused(
            ec.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            "transactional records need the request's transactional_id" if txn is None
            else f"{ctx.principal} lacks Write on the TransactionalId")
    txn.verify(ctx, batch, topic, partition)


def _check_batch(ctx: RequestContext, info, records, mode: int = ProduceMode.ASSIGN,
                 txn: TransactionalRequest | None = None, partition: int = -1):
    """Everything checked before the log is touched; returns (the batch's buffer, the
    validated Batch): the request's own bytes, or new ones recompressed to the topic's
    compression.type. With explicit offsets and several batches (docs/protocol.md §9): (None, the
    checked BatchUnit), each of its parts recompressed the same way."""
    config = info.config
    if records is None or len(records) == 0:
        raise PartitionRefused(ec.INVALID_RECORD, "a produce request needs one record batch")
    limit = ctx.broker.config.decompressed_batch_max_bytes
    if mode == ProduceMode.ASSIGN:
        _check_size(len(records), config)
        try:
            batch = validate_bounded(records, limit)
        except CorruptRecordError as exc:
            raise _corrupt(ctx, exc) from None
        _check_one(ctx, info, batch, mode, txn, partition)
        # the request holds the batch until answered: drop its inflated records
        return _apply_compression_type(config, records, without_records(batch, records))
    try:
        with output_limit(limit):
            batches = split_unit(records, mode)
    except CorruptRecordError as exc:
        raise _corrupt(ctx, exc) from None
    except UnitRuleError as exc:
        raise PartitionRefused(ec.INVALID_RECORD, str(exc)) from None
    # One C pass over the batches (a compacted topic's copy sends thousands per request)
    largest, _, newest, compressed = unit_summary(batches)
    _check_size(largest, config)
    first = batches[0]
    if first.is_transactional:  # (the others: same flag and producer, split_unit checked)
        _check_transactional(ctx, txn, first, mode, info.name, partition)
    _check_timestamps(config, batches, newest)
    if config.compact:
        for batch in batches:
            _check_keys(batch)
    if compressed:
        # the request holds its batches until answered: drop their inflated records
        batches = list(decode_batches(records, validate=False))
        first = batches[0]
    if len(batches) == 1:
        return _apply_compression_type(config, records, first)
    if ctx.broker.config.kip_wire_version < MULTI_BATCH_VERSION:
        raise PartitionRefused(
            ec.INVALID_RECORD,
            f"{len(batches)} record batches for one partition; this broker advertises "
            "KIP-WIRE version 1 (kip.wire.version=1): one batch per partition")
    unit = BatchUnit(batches, records)
    if config.compression_type != "producer":
        parts = unit.parts
        rewritten = [_apply_compression_type(config, buf, batch) for buf, batch in parts]
        if any(buf is not original for (buf, _), (original, _) in zip(rewritten, parts,
                                                                      strict=True)):
            unit.parts = rewritten
    return None, unit


def _check_size(size: int, config) -> None:
    if size > config.max_message_bytes:
        raise PartitionRefused(
            ec.MESSAGE_TOO_LARGE,
            f"batch of {size} bytes exceeds max.message.bytes={config.max_message_bytes}",
        )


def _corrupt(ctx: RequestContext, exc: CorruptRecordError) -> PartitionRefused:
    if isinstance(exc, DecompressedTooLarge):
        # a compressed batch may inflate only so far: see decompression_guard
        log.warning("produce from %s (%s) refused: %s", ctx.client_host, ctx.client_id, exc)
        return PartitionRefused(ec.MESSAGE_TOO_LARGE, f"{exc} (decompressed.batch.max.bytes)")
    code = ec.CORRUPT_MESSAGE if exc.rule in ("crc", "truncated") else ec.INVALID_RECORD
    return PartitionRefused(code, str(exc))


def _check_one(ctx: RequestContext, info, batch, mode: int,
               txn: TransactionalRequest | None, partition: int) -> None:
    """The rules for one validated batch of a producer."""
    if mode == ProduceMode.ASSIGN and batch.base_offset != 0:
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
        _check_transactional(ctx, txn, batch, mode, info.name, partition)
    _check_timestamps(info.config, [batch], batch.max_timestamp)
    if info.config.compact:
        _check_keys(batch)


def _apply_compression_type(config, records, batch):
    """Kafka's LogValidator rule: a batch whose codec is not the topic's is recompressed."""
    if config.compression_type == "producer":  # the default: the request's bytes as they are
        return records, batch
    try:
        rewritten = recompress(records, batch.attributes, config)
    except CorruptRecordError as exc:
        raise PartitionRefused(ec.CORRUPT_MESSAGE, str(exc)) from None
    if rewritten is None:
        return records, batch
    if len(rewritten) > config.max_message_bytes:
        raise PartitionRefused(
            ec.MESSAGE_TOO_LARGE,
            f"batch of {len(rewritten)} bytes after recompression to "
            f"{config.compression_type} exceeds max.message.bytes={config.max_message_bytes}",
        )
    # The log appends the Batch parsed from the very buffer it writes.
    return rewritten, validate_batch(rewritten)


def _check_timestamps(config, batches: list, newest: int) -> None:
    """message.timestamp.{after,before}.max.ms for a batch (or a unit's batches), ``newest``
    their largest max_timestamp."""
    if config.log_append_time:
        return
    after, before = config.message_timestamp_after_max_ms, config.message_timestamp_before_max_ms
    if after == LONG_MAX and before == LONG_MAX:
        return
    now = int(time.time() * 1000)
    if after < LONG_MAX and newest > now + after:
        raise PartitionRefused(
            ec.INVALID_TIMESTAMP,
            f"timestamp {newest} is more than message.timestamp.after.max.ms="
            f"{after} ahead of the broker's clock",
        )
    if before < LONG_MAX:
        for batch in batches:
            for index, record in enumerate(batch):
                if record.timestamp < now - before:
                    raise PartitionRefused(
                        ec.INVALID_TIMESTAMP,
                        f"record {index}: timestamp {record.timestamp} is more than "
                        f"message.timestamp.before.max.ms={before} behind the broker's clock",
                        [{"batch_index": index,
                          "batch_index_error_message": "timestamp too old"}],
                    )


def _check_keys(batch) -> None:
    errors = [
        {"batch_index": index, "batch_index_error_message": "compacted topic needs a key"}
        for index in null_key_indexes(batch)
    ]
    if errors:
        raise PartitionRefused(
            ec.INVALID_RECORD, "a compacted topic only takes records with a key", errors
        )


@handles(PRODUCE, 3, 11)
async def produce(ctx: RequestContext, body):
    logs = logs_of(ctx)
    # A stock broker (the stand-in, kip.extensions.enable=false) skips the unknown tag: mode 0
    # rules, so a batch with baseOffset != 0 is INVALID_RECORD and one at 0 is appended at the
    # log end, with no LogEndOffset in the answer (Kafka 3.9's UnifiedLog checks).
    config = ctx.broker.config
    mode = (getattr(body, "produce_mode", ProduceMode.ASSIGN)
            if config.kip_extensions_enable else ProduceMode.ASSIGN)
    # A broker below KIP-WIRE version 3 skips the KeyConditions tag as an unknown one.
    key_conditional = (config.kip_extensions_enable
                       and config.kip_wire_version >= KEY_CONDITIONAL_WIRE_VERSION)
    txn = (None if body.transactional_id is None
           else TransactionalRequest(ctx, body.transactional_id))
    # (code, message) that fails the whole request; not the exception itself, whose traceback
    # would keep the request's batches (views of the receive buffer) alive past the request
    refused_request: tuple[int, str] | None = None
    results = []
    accepted = []  # (log, records, batch, answer) that passed every check before the log
    touched = []  # (log, answer) for every existing partition: LogEndOffset goes to each
    for topic in body.topic_data:
        info = logs.topics().get(topic.name)
        writable = may_write_topic(ctx, topic.name)
        partitions = []
        for pdata in topic.partition_data:
            answer = {
                "index": pdata.index,
                "base_offset": -1,
                "log_append_time": -1,
                "log_start_offset": -1,
            }
            partitions.append(answer)
            try:
                if writable and info is not None and 0 <= pdata.index < info.partitions:
                    log_ = logs.get_log(topic.name, pdata.index)
                    touched.append((log_, answer))
                # raises for a partition that does not exist (or may not be written), so
                # log_ below is always this partition's
                _check_request(ctx, body, mode, info, pdata.index, writable)
                records, batch = _check_batch(ctx, info, pdata.records, mode, txn, pdata.index)
                raw = getattr(pdata, "key_conditions", None) if key_conditional else None
                conditions = (None if raw is None else
                              _key_conditions(ctx, info, pdata.index, raw, mode, batch))
                accepted.append((log_, records, batch, answer, conditions))
            except RequestRefused as refused:
                refused_request = refused_request or (refused.error_code, refused.message)
            except PartitionRefused as refused:
                if refused.error_code in (ec.CORRUPT_MESSAGE, ec.INVALID_RECORD):
                    # Bad bytes get a log line besides their error code, like every other
                    # kind of bad input (an operator can tell a broken client from a flaky one).
                    log.warning(
                        "produce to %s-%d from %s (%s) refused: %s",
                        topic.name,
                        pdata.index,
                        ctx.client_host,
                        ctx.client_id,
                        refused.message,
                    )
                _refuse(answer, refused.error_code, refused.message, refused.record_errors)
        results.append({"name": topic.name, "partition_responses": partitions})
    if refused_request is not None:
        accepted = []
        for topic in results:
            for answer in topic["partition_responses"]:
                _refuse(answer, *refused_request)
    if mode == ProduceMode.EXPECTED_OFFSETS:
        accepted = _precheck_expected_offsets(accepted)
    appended = False
    for log_, records, batch, answer, conditions in accepted:
        appended = _append(log_, records, batch, answer, mode, conditions) or appended
    if mode != ProduceMode.ASSIGN:
        for log_, answer in touched:
            answer["log_end_offset"] = log_.log_end_offset
    for topic in results:
        for answer in topic["partition_responses"]:
            if ctx.api_version < 8:
                answer.pop("record_errors", None)
                answer.pop("error_message", None)
            if ctx.api_version < 5:
                answer.pop("log_start_offset")
    if appended:
        ctx.broker.notify_appended()
    if body.acks == 0:
        return None
    if ctx.api_version in DIRECT_VERSIONS:  # once per request: the direct codec
        return EncodedAnswer(ctx.api_version, results)
    return build_response(PRODUCE, ctx.api_version, responses=results)


def _refuse(answer: dict, code: int, message: str | None = None, record_errors=None) -> None:
    answer.update(error_code=code, error_message=message, record_errors=record_errors or [])


def _check_request(
    ctx: RequestContext, body, mode: int, info, index: int, writable: bool = True
) -> None:
    """Request-level rules, answered per partition as Kafka does.

    ``writable``: the principal has WRITE on the topic. It is checked after ReplicatorWrite
    (a request-wide rule) and before the topic's existence, so an unauthorized client cannot
    tell which topics exist.
    """
    if mode not in (ProduceMode.ASSIGN, ProduceMode.USE_OFFSETS, ProduceMode.EXPECTED_OFFSETS):
        raise PartitionRefused(ec.INVALID_REQUEST, f"unknown ProduceMode {mode}")
    if mode == ProduceMode.USE_OFFSETS and not may_produce_with_offsets(ctx):
        raise PartitionRefused(
            ec.CLUSTER_AUTHORIZATION_FAILED,
            f"{ctx.principal} lacks ReplicatorWrite on the cluster (KIP-391 produce with "
            "offsets)")
    if not writable:
        raise PartitionRefused(
            ec.TOPIC_AUTHORIZATION_FAILED, f"{ctx.principal} lacks Write on the topic")
    if info is None or not 0 <= index < info.partitions:
        raise PartitionRefused(ec.UNKNOWN_TOPIC_OR_PARTITION)
    if info.config.check_expected_offsets and mode != ProduceMode.EXPECTED_OFFSETS:
        raise PartitionRefused(
            ec.POLICY_VIOLATION,
            f"topic {info.name} has check.expected.offsets=true: it only takes conditional "
            "produce requests (ProduceMode EXPECTED_OFFSETS)")


def _precheck_expected_offsets(accepted: list) -> list:
    """KIP-27: if any batch expects an offset other than its log end, append nothing at all.

    A retry the producer state recognises as a duplicate is not a mismatch: it succeeds with
    its original offsets (docs/protocol.md §4, the duplicate check comes first).
    """
    mismatched = set()
    for i, (log_, _records, batch, answer, _conditions) in enumerate(accepted):
        expected = batch.base_offset
        if expected == -1:
            continue
        if batch.producer_id >= 0 and isinstance(
                log_.producer_state.check_batch(batch), Duplicate):
            continue
        end = log_.log_end_offset
        if expected != end:
            _refuse(answer, ec.OFFSET_MISMATCH,
                    f"expected the log to end at {expected}; it ends at {end}")
            mismatched.add(i)
    if not mismatched:
        return accepted
    for i, (_log, _records, _batch, answer, _conditions) in enumerate(accepted):
        if i not in mismatched:
            _refuse(answer, ec.OPERATION_NOT_ATTEMPTED,
                    "another partition of this conditional request did not match its "
                    "expected offset; nothing was appended")
    return []


def _append(log_, records, batch, answer: dict, mode: int,
            conditions: KeyConditions | None = None) -> bool:
    """Append one checked batch; True when something new reached the log."""
    expected = None
    if mode == ProduceMode.EXPECTED_OFFSETS and batch.base_offset != -1:
        expected = batch.base_offset
    try:
        if isinstance(batch, BatchUnit):
            result = log_.append_unit(batch, assign_offsets=mode != ProduceMode.USE_OFFSETS,
                                      expected_base_offset=expected,
                                      key_conditions=conditions)
        else:
            result = log_.append(records, assign_offsets=mode != ProduceMode.USE_OFFSETS,
                                 expected_base_offset=expected, batch=batch,
                                 key_conditions=conditions)
    except KeyConditionError as exc:
        _refuse_keys(answer, exc, conditions.partition_name if conditions else "")
        return False
    except InvalidAppendOffsetError as exc:
        _refuse(answer, ec.INVALID_PRODUCE_OFFSET, str(exc))
        return False
    except OffsetMismatchError as exc:
        _refuse(answer, ec.OFFSET_MISMATCH, str(exc))
        return False
    except ProducerStateError as exc:
        _refuse(answer, exc.error_code, str(exc))
        return False
    except StorageError as exc:
        log.warning("produce to %s failed: %s", log_.directory, exc)
        _refuse(answer, ec.KAFKA_STORAGE_ERROR, str(exc))
        return False
    answer.update(base_offset=result.base_offset, log_append_time=result.log_append_time,
                  log_start_offset=result.log_start_offset)
    return not result.duplicate


def _key_conditions(ctx: RequestContext, info, partition: int, raw: bytes, mode: int,
                    batch) -> KeyConditions:
    """The KeyConditions tag of a partition (docs/protocol.md §10), checked against the
    request: mode 0, the topic's partition count, record indexes rising within the
    partition's records, each on a record with a key, no key conditioned twice."""
    if mode != ProduceMode.ASSIGN:
        raise PartitionRefused(
            ec.INVALID_REQUEST,
            f"per-key conditions ride on ProduceMode 0 only, not {ProduceMode(mode).name}")
    try:
        partition_count, entries = decode_key_conditions(raw)
    except KeyConditionsFormatError as exc:
        raise PartitionRefused(ec.INVALID_REQUEST, str(exc)) from None
    pinned = _pinned_partition_count(ctx, info)
    if partition_count != info.partitions or pinned != info.partitions:
        raise PartitionRefused(
            ec.PARTITION_COUNT_MISMATCH,
            f"the key conditions were partitioned for {partition_count} partitions; topic "
            f"{info.name} has {info.partitions}, and its key conditions are pinned to "
            f"{pinned} (topic config {PINNED_PARTITIONS}): a key's partition may have "
            "changed, so its last offset in this partition says nothing")
    keys = [record.key for part in (batch.batches if isinstance(batch, BatchUnit) else [batch])
            for record in part]
    checks = []
    seen: set[bytes] = set()
    previous = -1
    for index, expected in entries:
        problem = None
        if not previous < index < len(keys):
            problem = (f"record index {index} is not after {previous} and below the "
                       f"{len(keys)} records of the partition")
        elif expected < -1:
            problem = f"expected offset {expected}: -1 (absent) or an offset"
        elif keys[index] is None:
            problem = "a record without a key cannot be conditioned on its key"
        elif bytes(keys[index]) in seen:
            problem = f"key {bytes(keys[index])!r} is conditioned twice in one partition"
        if problem is not None:
            raise PartitionRefused(
                ec.INVALID_RECORD, f"{info.name}-{partition}: KeyConditions: {problem}",
                [{"batch_index": max(index, 0), "batch_index_error_message": problem}])
        key = bytes(keys[index])
        seen.add(key)
        checks.append((index, key, expected))
        previous = index
    return KeyConditions(checks, ctx.broker.config.kip_key_index_max_keys,
                         f"{info.name}-{partition}")


#: The topic config that pins the partition count of a topic's key conditions.
PINNED_PARTITIONS = "key.conditional.partitions"


def _pinned_partition_count(ctx: RequestContext, info) -> int:
    """The partition count the topic's key conditions are pinned to: set (and persisted) by
    the first conditional request, so that after a partition count change every condition is
    refused, also from clients that learnt the new count (docs/protocol.md §10)."""
    pinned = info.config.key_conditional_partitions
    if pinned == 0:
        logs_of(ctx).incremental_alter_topic_config(
            info.name, {PINNED_PARTITIONS: str(info.partitions)})
        pinned = info.partitions
    return pinned


def _answer_text(offset: int) -> str:
    if offset == UNKNOWN:
        return "unknown (the key index forgot it)"
    if offset == PENDING:
        return "pending in another producer's open transaction"
    return "absent" if offset < 0 else str(offset)


def _refuse_keys(answer: dict, exc: KeyConditionError, where: str) -> None:
    """The partition's answer to failed key conditions: one record error per conflict, naming
    the key, what was expected and what is; the KeyConflicts tag with the actual offsets."""
    record_errors = [
        {"batch_index": index,
         "batch_index_error_message":
             f"{where}: key {key!r}: expected {_answer_text(expected)}, "
             f"actual {_answer_text(actual)}"}
        for index, key, expected, actual in exc.conflicts]
    _refuse(answer, exc.error_code, f"{exc}; nothing of the partition was appended",
            record_errors)
    answer["key_conflicts"] = encode_key_conflicts(
        [(index, actual) for index, _key, _expected, actual in exc.conflicts])


@handles(DESCRIBE_PRODUCERS, 0, 0)
async def describe_producers(ctx: RequestContext, body):
    logs = logs_of(ctx)
    topics = []
    for topic in body.topics:
        info = logs.topics().get(topic.name)
        readable = may_read_topic(ctx, topic.name)
        partitions = []
        for index in topic.partition_indexes:
            log, code = partition_log(logs, info, topic.name, index, readable)
            if log is None:
                partitions.append({"partition_index": index, "error_code": code})
                continue
            state = log.producer_state
            # {producer id: first offset of its open transaction in this partition}
            open_transactions = log.ongoing_transactions()
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
                            "coordinator_epoch": entry.coordinator_epoch,
                            "current_txn_start_offset": open_transactions.get(
                                entry.producer_id, -1),
                        }
                        for entry in state
                    ],
                }
            )
        topics.append({"name": topic.name, "partitions": partitions})
    return build_response(DESCRIBE_PRODUCERS, ctx.api_version, topics=topics)
