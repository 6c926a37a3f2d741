"""``df.write.format("kip")``: rows to Kafka with Spark's Kafka sink columns and options, by
one of three write paths (docs/spark.md):

- ``transactional`` (the default): two-phase commit. Each task attempt writes through its own
  transactional id and leaves its transaction open; the driver commits the transactions of
  the successful attempts and aborts the others (twophase.py). Exactly once for
  read_committed readers. A named write (``kip.write.id``) commits through the sink's
  ledger (ledger.py), so a re-run or ``recover_write`` finishes what a killed driver left.
- ``ordered`` (``write_ordered``): KIP-27 expected offsets, no transaction. Each target
  partition's rows come to one task in a deterministic order; a retried attempt verifies the
  prefix an earlier attempt wrote and continues after it. Exactly once for every reader.
- ``offsets`` (an ``offset`` column): KIP-391, every record at its own offset, for copies; a
  retried attempt skips what is below the target's log end.

Spark hands a failed upstream operator's truncated input to ``write()`` as if it were the
whole partition (measured, see docs/spark.md): so no path makes a task's rows visible on the
task's word alone, except where a later attempt recognises and continues them.
"""

from __future__ import annotations

import json
import logging
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

# pyspark is there: the package refuses to import without it (__init__.py)
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from ..errors import KEY_OFFSET_MISMATCH, NO_KEY_CONDITION
from .ledger import DEFAULT_STATE_TOPIC, Ledger
from .options import OptionError, connection, kafka_properties, lower_keys, parse_int
from .twophase import OpenTransaction, settle

log = logging.getLogger("kipproducer.spark")

TRANSACTIONAL, ORDERED, OFFSETS = "transactional", "ordered", "offsets"
MODES = (TRANSACTIONAL, ORDERED, OFFSETS)
#: Kafka's default transaction.max.timeout.ms: the open transactions must outlast the job.
DEFAULT_TRANSACTION_TIMEOUT_MS = 900_000
_KNOWN = ("key", "value", "topic", "partition", "headers", "timestamp", "offset",
          "expected_key_offset")
#: The per-key mode's column (docs/spark.md): each row's expected_key_offset (null: none).
KEY_CONDITION_COLUMN = "expected_key_offset"


def report_committed(what: str, messages: list[Any], transactions: int) -> None:
    """One line in the driver's log (its stderr, where Spark's own lines go) per committed
    write or micro-batch: the rows its tasks wrote and the transactions it committed. Spark
    runs a Python data source's commit in a Python worker of the driver, whose logging is not
    the application's, so the line is written there directly."""
    rows = sum(m.records for m in messages if m is not None)
    print(f"{time.strftime('%y/%m/%d %H:%M:%S')} INFO kipproducer: kip sink: {what} "
          f"committed: {rows} rows from {len(messages)} tasks in {transactions} transactions",
          file=sys.stderr, flush=True)


class Message(WriterCommitMessage):  # type: ignore[misc]
    """A task attempt's report: its open transaction (transactional) or what it wrote."""

    def __init__(self, records: int, txn: OpenTransaction | None = None) -> None:
        self.records = records
        self.txn = txn


class WriteOptions:
    """The sink's options and the DataFrame's columns, checked on the driver."""

    def __init__(self, options: Mapping[str, str], columns: list[str]) -> None:
        opts = lower_keys(options)
        self.props: dict[str, Any] = dict(kafka_properties(opts, writing=True))
        # librdkafka's informational lines (level 6) would land on every task's stderr;
        # options are strings, confluent-kafka wants this one as an int
        self.props["log_level"] = int(self.props.get("log_level", 3))
        self.topic = opts.get("topic")
        names = {c.lower(): c for c in columns}
        self.columns = {k: names[k] for k in _KNOWN if k in names}
        if "value" not in self.columns:
            raise OptionError("the DataFrame needs a 'value' column (binary or string)")
        if self.topic is None and "topic" not in self.columns:
            raise OptionError("no topic: set the option 'topic' or give a 'topic' column")
        default = OFFSETS if "offset" in self.columns else TRANSACTIONAL
        self.mode = opts.get("kip.mode", default)
        if self.mode not in MODES:
            raise OptionError(f"option 'kip.mode' must be one of {', '.join(MODES)}, got "
                              f"{self.mode!r}")
        if self.mode == OFFSETS and not {"offset", "partition"} <= set(self.columns):
            raise OptionError("kip.mode=offsets writes each record at its offset: the "
                              "DataFrame needs 'offset' and 'partition' columns")
        self.key_conditions = KEY_CONDITION_COLUMN in self.columns
        if self.key_conditions and (self.mode != TRANSACTIONAL or self.topic is None):
            raise OptionError(f"an '{KEY_CONDITION_COLUMN}' column (per-key conditions) is "
                              "for the transactional sink writing to the topic of the option "
                              f"'topic' (kip.mode={self.mode}"
                              f"{'' if self.topic is not None else ', no topic option'})")
        if self.mode != OFFSETS and "offset" in self.columns:
            raise OptionError(f"an 'offset' column is only for kip.mode=offsets, not "
                              f"{self.mode}")
        self.base_offsets: dict[int, int] = {}
        if self.mode == ORDERED:
            if self.topic is None:
                raise OptionError("kip.mode=ordered needs the option 'topic'")
            if "partition" not in self.columns:
                raise OptionError("kip.mode=ordered needs a 'partition' column (use "
                                  "kipproducer.spark.write_ordered)")
            raw = opts.get("kip.ordered.baseoffsets")
            if raw is None:
                raise OptionError("kip.mode=ordered needs the option 'kip.ordered.baseOffsets'"
                                  " (use kipproducer.spark.write_ordered)")
            self.base_offsets = {int(p): int(o) for p, o in json.loads(raw).items()}
        self.timeout_ms = int(self.props.get("transaction.timeout.ms",
                                             DEFAULT_TRANSACTION_TIMEOUT_MS))
        if self.mode == TRANSACTIONAL:
            self.props["transaction.timeout.ms"] = str(self.timeout_ms)
        # Every write gets its own ids: attempts of this write never meet another's.
        self.prefix = opts.get("kip.transactional.id.prefix",
                               f"kip-spark-{uuid.uuid4().hex[:16]}")
        # A named write (kip.write.id) commits through a ledger record, so a driver killed
        # while committing is finished by a re-run or recover_write (docs/spark.md).
        self.write_id = opts.get("kip.write.id") or None
        self.state_topic = opts.get("kip.sink.statetopic", DEFAULT_STATE_TOPIC)
        self.done_before = False  # set on the driver: this named write was committed before
        if self.write_id is not None:
            if self.mode != TRANSACTIONAL:
                raise OptionError(f"option 'kip.write.id' is for kip.mode=transactional, not "
                                  f"{self.mode} (those modes resume without it)")
            if "kip.transactional.id.prefix" in opts:
                raise OptionError("set 'kip.write.id' or 'kip.transactional.id.prefix', not "
                                  "both (a named write's prefix is kip-spark-<write id>)")
            self.prefix = write_prefix(self.write_id)
        self.flush_timeout_s = parse_int(opts, "kip.flush.timeout.ms", 300_000, 1) / 1000


def write_prefix(write_id: str) -> str:
    """The transactional id prefix of a named write (or a streaming sink)."""
    return f"kip-spark-{write_id}"


# ---- columns -------------------------------------------------------------------------------------


def _binary(column: Any) -> Any:
    import pyarrow as pa

    if column is None:
        return None
    if pa.types.is_binary(column.type):
        return column
    return column.cast(pa.binary())


def _headers(column: Any) -> list | None:
    if column is None:
        return None
    return [None if h is None else [(e["key"], e["value"]) for e in h]
            for h in column.to_pylist()]


def _timestamps(column: Any) -> np.ndarray | None:
    import pyarrow as pa

    if column is None:
        return None
    millis = column.cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
    now = int(time.time() * 1000) * 1000
    return (millis.fill_null(now).to_numpy(zero_copy_only=False) // 1000).astype(np.int64)


class _Rows:
    """One Arrow batch as the columns produce_arrays takes, split by topic and partition."""

    def __init__(self, batch: Any, wo: WriteOptions) -> None:
        import pyarrow as pa

        self.batch = batch
        self.n = batch.num_rows
        col = {k: batch.column(name) for k, name in wo.columns.items()}
        self.values = _binary(col["value"])
        self.keys = _binary(col.get("key"))
        self.headers = col.get("headers")
        self.timestamps = _timestamps(col.get("timestamp"))
        part = col.get("partition")
        self.partitions = (None if part is None else
                           part.cast(pa.int64()).fill_null(-1).to_numpy(zero_copy_only=False))
        offset = col.get("offset")
        self.offsets = (None if offset is None else
                        offset.cast(pa.int64()).to_numpy(zero_copy_only=False))
        expected = col.get(KEY_CONDITION_COLUMN)
        self.expected_keys = (None if expected is None else
                              expected.cast(pa.int64()).fill_null(NO_KEY_CONDITION)
                              .to_numpy(zero_copy_only=False))
        if wo.topic is not None:
            self.topics = None
            self.topic = wo.topic
        else:
            topics = col["topic"]
            if topics.null_count:
                raise ValueError("a row has a null 'topic' and the option 'topic' is not set")
            self.topics = np.asarray(topics.to_pylist(), dtype=object)

    def groups(self) -> Iterator[tuple[str, np.ndarray | None]]:
        """(topic, row indices or None for all rows), rows in their order."""
        if self.topics is None:
            yield self.topic, None
            return
        for topic in dict.fromkeys(self.topics.tolist()):
            yield topic, np.flatnonzero(self.topics == topic)

    def take(self, rows: np.ndarray | None) -> dict[str, Any]:
        """The produce_arrays columns of ``rows`` (all when None)."""
        import pyarrow as pa

        if rows is None:
            return {"values": self.values, "keys": self.keys,
                    "headers": _headers(self.headers), "timestamps": self.timestamps,
                    "expected_key_offsets": self.expected_keys}
        index = pa.array(rows)
        return {"values": self.values.take(index),
                "keys": None if self.keys is None else self.keys.take(index),
                "headers": None if self.headers is None else _headers(self.headers.take(index)),
                "timestamps": None if self.timestamps is None else self.timestamps[rows],
                "expected_key_offsets": (None if self.expected_keys is None
                                         else self.expected_keys[rows])}

    def one_batch_pieces(self, rows: np.ndarray | None, size_limit: int,
                         count_limit: int) -> Iterator[np.ndarray]:
        """``rows`` (all when None) in pieces that fit one Kafka batch each, whatever their
        partitions: a call's records with key conditions of one partition must (the
        transaction keeps the pieces together)."""
        import pyarrow.compute as pc

        from ..producer import BATCH_OVERHEAD_BYTES, HEADER_OVERHEAD_BYTES, RECORD_OVERHEAD_BYTES

        index = np.arange(self.n) if rows is None else rows
        sizes = RECORD_OVERHEAD_BYTES + pc.binary_length(self.values).fill_null(0).to_numpy(
            zero_copy_only=False)
        if self.keys is not None:
            sizes = sizes + pc.binary_length(self.keys).fill_null(0).to_numpy(
                zero_copy_only=False)
        if self.headers is not None:
            sizes = sizes + np.array([sum(HEADER_OVERHEAD_BYTES + len(k) + len(v or b"")
                                          for k, v in h or [])
                                      for h in _headers(self.headers) or []], np.int64)
        start, used = 0, BATCH_OVERHEAD_BYTES
        for i, row in enumerate(index):
            if i > start and (i - start >= count_limit or used + sizes[row] > size_limit):
                yield index[start:i]
                start, used = i, BATCH_OVERHEAD_BYTES
            used += int(sizes[row])
        if start < len(index):
            yield index[start:]


class _Failures:
    """Delivery reports of one task's producer: the first error is raised at the end."""

    def __init__(self) -> None:
        self.first: Any = None

    def __call__(self, err: Any, report: Any) -> None:
        # a refused key condition before the records refused only with it
        if err is not None and (self.first is None or (
                err.code() == KEY_OFFSET_MISMATCH != self.first.code())):
            self.first = err

    def check(self, what: str) -> None:
        if self.first is not None:
            from confluent_kafka import KafkaException

            raise KafkaException(self.first) if not hasattr(self.first, "log_end_offset") \
                else RuntimeError(f"{what}: {self.first.str()} (log end "
                                  f"{self.first.log_end_offset})")


def _task() -> tuple[int, int]:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:  # not in a Spark task (a direct call): one attempt, id 0
        return 0, 0
    return ctx.partitionId(), ctx.taskAttemptId()


# ---- the writers ---------------------------------------------------------------------------------


def write_transactional(wo: WriteOptions, batches: Iterator[Any], *,
                        unique: bool = False) -> Message:
    """Every row in one transaction of this attempt's own id, left open for the driver.
    ``unique``: a random part too (streaming: task attempt ids start again at 0 when the
    query restarts in a new application, and a reused id would abort the old transaction)."""
    from ..producer import Producer

    partition_id, attempt = _task()
    txn_id = f"{wo.prefix}-{partition_id}-{attempt}"
    if unique:
        txn_id += f"-{uuid.uuid4().hex[:8]}"
    producer = None
    failures = _Failures()
    records = 0
    one_batch = _one_batch(wo.props) if wo.key_conditions else (0, 0)
    try:
        for batch in batches:
            if not batch.num_rows:
                continue
            if producer is None:  # no rows, no transaction
                producer = Producer({**wo.props, "transactional.id": txn_id})
                producer.init_transactions()
                producer.begin_transaction()
            rows = _Rows(batch, wo)
            for topic, index in rows.groups():
                if rows.expected_keys is None:
                    _send_any_partition(producer, topic, rows, index, failures)
                    continue
                for piece in rows.one_batch_pieces(index, *one_batch):
                    _send_any_partition(producer, topic, rows, piece, failures)
            records += rows.n
        if producer is None:
            return Message(0)
        left = producer.flush(wo.flush_timeout_s)
        if left:
            raise TimeoutError(f"{left} records not delivered in {wo.flush_timeout_s:.0f} s")
        failures.check(f"transaction {txn_id}")
        pid, epoch = producer.transaction_producer()
        # Left open on purpose: the driver commits it if Spark keeps this attempt.
        return Message(records, OpenTransaction(txn_id, pid, epoch, records, partition_id,
                                                attempt))
    except BaseException:
        if producer is not None:
            try:
                producer.abort_transaction(10)
            except Exception as exc:  # the driver fences it anyway
                log.warning("abort of %s after a failure: %s", txn_id, exc)
        raise
    finally:
        if producer is not None:
            producer.close()


def _one_batch(props: Mapping[str, Any]) -> tuple[int, int]:
    """The bytes and records one Kafka batch of the sink's producer may hold."""
    from .. import client_config

    size = min(int(client_config.value(props, "batch.size")),
               int(client_config.value(props, "message.max.bytes")))
    return size, int(client_config.value(props, "batch.num.messages"))


def _send_any_partition(producer: Any, topic: str, rows: _Rows, index: np.ndarray | None,
                        failures: _Failures) -> None:
    parts = rows.partitions
    if parts is not None and index is not None:
        parts = parts[index]
    if parts is None or (parts < 0).all():
        producer.produce_arrays(topic, partition=-1, on_delivery=failures, **rows.take(index))
        return
    chosen = parts >= 0
    given = np.flatnonzero(chosen) if index is None else index[chosen]
    producer.produce_arrays(topic, partition=parts[chosen].astype(np.int32),
                            on_delivery=failures, **rows.take(given))
    if not chosen.all():
        free = np.flatnonzero(~chosen) if index is None else index[~chosen]
        producer.produce_arrays(topic, partition=-1, on_delivery=failures, **rows.take(free))


def _by_partition(parts: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """(partition, row indices in their order) for each partition of ``parts``."""
    order = np.argsort(parts, kind="stable")
    sorted_parts = parts[order]
    bounds = np.flatnonzero(np.diff(sorted_parts)) + 1
    for chunk in np.split(order, bounds):
        if len(chunk):
            yield int(parts[chunk[0]]), chunk


def log_ends(props: Mapping[str, str], topic: str, partitions: list[int]) -> dict[int, int]:
    from confluent_kafka import IsolationLevel, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient(connection(props))
    found = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest()
                                for p in partitions},
                               isolation_level=IsolationLevel.READ_UNCOMMITTED)
    return {tp.partition: f.result(60).offset for tp, f in found.items()}


def copy_writer_id(topic: str, partition: int) -> str:
    """The emulation's transactional id for an offset copy into one target partition on a
    cluster without the KIP-WIRE extension (docs/stock-clusters.md): the same for every
    attempt and every job writing that partition, so a retried or re-run task fences the
    attempt before it (whose transaction of fillers may still be open) before it writes."""
    return f"kip-copy-{topic}-{partition}"


class _OffsetWriters:
    """The Producers of an offset-copy task. With the extension, one for every partition;
    on a stock cluster (emulated, docs/stock-clusters.md) one per target partition, since the
    emulation's transactional id belongs to the partition (copy_writer_id), not to the task:
    tasks and attempts that write the same partition then fence each other, as they must."""

    def __init__(self, props: Mapping[str, Any]) -> None:
        from ..producer import Producer

        self._make = lambda extra: Producer({**props, "enable.idempotence": True, **extra})
        self._shared = self._make({})
        self._own: dict[tuple[str, int], Any] = {}

    def __call__(self, topic: str, partition: int) -> Any:
        if self._shared.kip_mode(topic) == "native":
            return self._shared
        key = (topic, partition)
        writer = self._own.get(key)
        if writer is None:
            writer = self._own[key] = self._make(
                {"kip.emulation.transactional.id": copy_writer_id(topic, partition)})
        return writer

    def flush(self, timeout_s: float) -> int:
        return sum(p.flush(timeout_s) for p in (self._shared, *self._own.values()))

    def close(self) -> None:
        for producer in (self._shared, *self._own.values()):
            producer.close()


def write_offsets(wo: WriteOptions, batches: Iterator[Any]) -> Message:
    """KIP-391: each record at its ``offset``; offsets below the target's log end (as the
    task found it) are skipped, so a retried attempt or a rerun job continues the copy."""
    writers = _OffsetWriters(wo.props)
    failures = _Failures()
    ends: dict[tuple[str, int], int] = {}
    last: dict[tuple[str, int], int] = {}
    records = 0
    try:
        for batch in batches:
            if not batch.num_rows:
                continue
            rows = _Rows(batch, wo)
            if rows.offsets is None or (rows.partitions < 0).any():
                raise ValueError("kip.mode=offsets: every row needs a partition and an offset")
            for topic, index in rows.groups():
                parts = rows.partitions if index is None else rows.partitions[index]
                for partition, sub in _by_partition(parts):
                    chosen = sub if index is None else index[sub]
                    offsets = rows.offsets[chosen]
                    key = (topic, partition)
                    if key not in ends:
                        ends[key] = log_ends(wo.props, topic, [partition])[partition]
                        last[key] = -1
                    if (np.diff(offsets) <= 0).any() or offsets[0] <= last[key]:
                        raise ValueError(
                            f"{topic}-{partition}: offsets must rise within a Spark partition "
                            "(sortWithinPartitions('partition', 'offset') before writing)")
                    last[key] = int(offsets[-1])
                    keep = offsets >= ends[key]
                    if not keep.any():
                        continue
                    chosen, offsets = chosen[keep], offsets[keep]
                    writers(topic, partition).produce_arrays(
                        topic, partition=partition, offsets=offsets, on_delivery=failures,
                        **rows.take(chosen))
                    records += len(chosen)
        left = writers.flush(wo.flush_timeout_s)
        if left:
            raise TimeoutError(f"{left} records not delivered in {wo.flush_timeout_s:.0f} s")
        failures.check("produce with offsets")
        return Message(records)
    finally:
        writers.close()


class _Target:
    """The records an earlier attempt wrote to one partition, read back in order."""

    def __init__(self, props: Mapping[str, str], topic: str, partition: int, start: int,
                 end: int) -> None:
        from confluent_kafka import Consumer, TopicPartition

        # assigned, never subscribed: the group id only satisfies librdkafka
        self.consumer = Consumer({**connection(props),
                                  "group.id": f"kip-spark-verify-{uuid.uuid4().hex[:8]}",
                                  "enable.auto.commit": False,
                                  "isolation.level": "read_uncommitted"})
        self.consumer.assign([TopicPartition(topic, partition, start)])
        self.topic, self.partition, self.next, self.end = topic, partition, start, end
        self.pending: list[Any] = []

    def take(self) -> Any:
        from confluent_kafka import KafkaException

        deadline = time.monotonic() + 60
        while not self.pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.topic}-{self.partition}: offset {self.next} of the "
                                   "earlier attempt's records not readable")
            for m in self.consumer.consume(1000, 0.2):
                if m.error():
                    raise KafkaException(m.error())
                self.pending.append(m)
            self.pending.reverse()
        m = self.pending.pop()
        if m.offset() != self.next:
            raise RuntimeError(f"{self.topic}-{self.partition}: expected offset {self.next}, "
                               f"read {m.offset()}")
        self.next += 1
        return m

    def close(self) -> None:
        self.consumer.close()


def write_ordered_rows(wo: WriteOptions, batches: Iterator[Any]) -> Message:
    """KIP-27: the i-th row of target partition p goes at base[p] + i, and is written only if
    the log ends there. Rows an earlier attempt wrote (the log already ends past base[p]) are
    compared with what is there, then skipped."""
    from ..producer import Producer

    assert wo.topic is not None
    topic = wo.topic
    producer = Producer({**wo.props, "enable.idempotence": True})
    failures = _Failures()
    index: dict[int, int] = {}      # partition -> rows of it seen so far
    written: dict[int, int] = {}    # partition -> rows an earlier attempt wrote
    verify: dict[int, _Target] = {}
    records = 0
    try:
        for batch in batches:
            if not batch.num_rows:
                continue
            rows = _Rows(batch, wo)
            if (rows.partitions < 0).any():
                raise ValueError("kip.mode=ordered: every row needs a partition")
            for partition, chosen in _by_partition(rows.partitions):
                if partition not in wo.base_offsets:
                    raise ValueError(f"kip.ordered.baseOffsets has no offset for partition "
                                     f"{partition} of {topic}")
                base = wo.base_offsets[partition]
                if partition not in index:
                    end = log_ends(wo.props, topic, [partition])[partition]
                    index[partition] = 0
                    written[partition] = end - base
                    if end < base:
                        raise RuntimeError(f"{topic}-{partition}: the log ends at {end}, "
                                           f"before the write's base offset {base}")
                    if end > base:
                        log.info("%s-%d: %d rows already written by an earlier attempt",
                                 topic, partition, end - base)
                        verify[partition] = _Target(wo.props, topic, partition, base, end)
                first = index[partition]
                skip = max(0, min(written[partition] - first, len(chosen)))
                if skip:
                    _check_prefix(verify[partition], rows, chosen[:skip], first)
                    if first + skip == written[partition]:
                        verify.pop(partition).close()
                index[partition] = first + len(chosen)
                rest = chosen[skip:]
                if len(rest):
                    producer.produce_arrays(topic, partition=partition,
                                            expected_offset=base + first + skip,
                                            on_delivery=failures, **rows.take(rest))
                    records += len(rest)
        short = [p for p in index if index[p] < written[p]]
        if short:
            raise RuntimeError(f"{topic}: partitions {short} hold more records since the base "
                               "offsets than this write has rows (another writer?)")
        left = producer.flush(wo.flush_timeout_s)
        if left:
            raise TimeoutError(f"{left} records not delivered in {wo.flush_timeout_s:.0f} s")
        failures.check(f"ordered write to {topic}")
        return Message(records)
    finally:
        for target in verify.values():
            target.close()
        producer.close()


def _check_prefix(target: _Target, rows: _Rows, chosen: np.ndarray, first: int) -> None:
    cols = rows.take(chosen)
    values = cols["values"].to_pylist()
    keys = cols["keys"].to_pylist() if cols["keys"] is not None else [None] * len(values)
    headers = cols["headers"] or [None] * len(values)
    for i, (key, value, hdrs) in enumerate(zip(keys, values, headers, strict=True)):
        m = target.take()
        if m.key() != key or m.value() != value or list(m.headers() or []) != list(hdrs or []):
            raise RuntimeError(
                f"{target.topic}-{target.partition}: the record at offset {m.offset()} is not "
                f"this write's row {first + i} (the input is not deterministic, or another "
                "writer appended): nothing more is written")


def _require_topic(props: Mapping[str, Any], topic: str) -> None:
    """kip.mode=offsets: the target topic must exist before tasks start (an auto-created one
    would have the broker's default partition count, and the first record's offset is
    refused there as a leaderless partition deep in a task's trace)."""
    from confluent_kafka.admin import AdminClient

    bootstrap = props.get("bootstrap.servers")
    try:
        topics = AdminClient(connection(props)).list_topics(timeout=30).topics  # no auto-create
    except Exception as exc:
        raise OptionError(f"kip.mode=offsets: cannot list the topics of {bootstrap}: "
                          f"{exc}") from None
    if topic not in topics:
        raise OptionError(
            f"kip.mode=offsets: topic {topic!r} does not exist on {bootstrap}; create it with "
            "the source's partition count first (kip mirror --engine spark and "
            "kipproducer.spark.backfill create it)")


def _require_native_key_conditions(props: Mapping[str, Any], topic: str | None) -> None:
    """Per-key conditions in the sink need the brokers' own check: emulated (a stock
    cluster), a task's first condition on a partition waits until every transaction of the
    partition is decided, and the other tasks' transactions stay open until the driver
    commits them all."""
    from ..protocol.wire_extensions import FEATURE_PRODUCE_KEY_CONDITIONAL
    from .driver_client import driver_client

    assert topic is not None  # (WriteOptions requires the option with the column)
    client = driver_client(props)
    try:
        if client.partition_counts([topic]).get(topic) is None:
            raise OptionError(f"topic {topic!r} does not exist")
        if client.leaders_lacking(topic, FEATURE_PRODUCE_KEY_CONDITIONAL):
            raise OptionError(
                f"an '{KEY_CONDITION_COLUMN}' column needs brokers that check key conditions "
                f"themselves (kip.produce.key.conditional); those of {topic!r} do not, and "
                "emulated conditions cannot go into the sink's transactions: a task's first "
                "condition on a partition waits for every open transaction of it, and the "
                "other tasks' stay open until the driver commits them all; append them "
                "with kipproducer.Producer, where they are emulated")
    finally:
        client.close()


class KipWriter(DataSourceArrowWriter):  # type: ignore[misc]
    def __init__(self, options: Mapping[str, str], columns: list[str]) -> None:
        self.wo = WriteOptions(options, columns)
        if self.wo.mode == OFFSETS and self.wo.topic is not None:
            _require_topic(self.wo.props, self.wo.topic)
        if self.wo.key_conditions:
            _require_native_key_conditions(self.wo.props, self.wo.topic)
        if self.wo.write_id is not None:
            ledger = self._ledger()
            ledger.state.ensure_topic()
            # A commit a killed driver left half done is finished before anything is written;
            # a write committed before writes nothing again.
            record = ledger.finish_recorded()
            if record is not None and record["status"] == "done":
                log.warning("write %s was committed before: this run writes nothing",
                            self.wo.write_id)
                self.wo.done_before = True

    def _ledger(self) -> Ledger:
        assert self.wo.write_id is not None
        return Ledger(self.wo.props, self.wo.state_topic, self.wo.write_id, self.wo.prefix,
                      self.wo.timeout_ms)

    def write(self, iterator: Iterator[Any]) -> Message:
        if self.wo.done_before:
            for _ in iterator:  # read to the end: the upstream stage finishes normally
                pass
            return Message(0)
        if self.wo.mode == TRANSACTIONAL:
            # A named write's ids must not repeat in a re-run (a new application numbers its
            # task attempts from 0 again), or the re-run would abort what the old one left.
            return write_transactional(self.wo, iterator, unique=self.wo.write_id is not None)
        if self.wo.mode == OFFSETS:
            return write_offsets(self.wo, iterator)
        return write_ordered_rows(self.wo, iterator)

    def commit(self, messages: list[Message | None]) -> None:
        if self.wo.mode != TRANSACTIONAL:
            report_committed(f"write ({self.wo.mode})", messages, 0)
            return  # written already; nothing is held back
        txns = [m.txn for m in messages if m is not None and m.txn is not None]
        if self.wo.write_id is not None:
            if not self._ledger().commit(0, txns):
                return  # committed before (the ledger's log says so)
        else:
            settle(self.wo.props, self.wo.prefix + "-", commit=txns, abort=(),
                   timeout_ms=self.wo.timeout_ms)
        report_committed(f"write {self.wo.write_id or self.wo.prefix}", messages, len(txns))

    def abort(self, messages: list[Message | None]) -> None:
        if self.wo.mode != TRANSACTIONAL:
            return
        txns = [m.txn for m in messages if m is not None and m.txn is not None]
        if self.wo.write_id is not None:
            self._ledger().abort(txns)
            return
        settle(self.wo.props, self.wo.prefix + "-", commit=(), abort=txns,
               timeout_ms=self.wo.timeout_ms)
