"""`kip demo`: copy a topic between two Kafka brokers with its offsets kept (KIP-391).

1. Two EmbeddedBrokers (the reference broker, in this process, temporary data dirs) start:
   a source and a target.
2. The source topic (3 partitions, ``cleanup.policy=compact``, small segments) is filled with
   records whose keys repeat: a hot key set that is written over and over, plus one-off keys.
   Some records are tombstones, most carry a header, all have their own timestamp.
3. The broker's log cleaner compacts it (superseded records are removed, their offsets become
   holes), and DeleteRecords moves each partition's log start up: the source's offsets now
   have real gaps and do not start at 0, as in any long-lived compacted topic.
4. The copy, with ``kip mirror``'s preserve mode (kipproducer.mirror): its Fetch reader takes
   the source's record batches whole and the engine writes their records to the target
   unchanged (KIP-391), every record at its source offset, with its key, value, headers and
   timestamp; the mirror moves the target's log start to the source's with DeleteRecords. Its
   progress line runs on stderr meanwhile. With ``--target-mode emulated`` the target has the
   extension switched off (``kip.extensions.enable=false``, as a stock Kafka), and the same
   mirror keeps the offsets with Kafka's transactions instead (docs/stock-clusters.md): the
   source's gaps become aborted fillers and markers, invisible to the read_committed reader of
   step 5.
5. A fresh librdkafka consumer reads both topics; a table compares, per partition, the
   watermarks, first and last offset, record count, gaps and a CRC-32C over every record's
   offset, timestamp, key, value and headers.

6. When pyspark and a Java are installed (``--no-spark`` skips it): a small exactly-once Spark
   step (kipproducer/spark/demo_step.py): the copy read with ``format("kip")`` and written
   with the transactional sink while one task's first attempt fails on purpose; otherwise it
   says what to install.

Exit code 0 only if every partition is identical (and the Spark step, when run, saw every
record exactly once).
"""

from __future__ import annotations

import re
import struct
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from .crc32c import crc32c

TOPIC = "orders"
PARTITIONS = 3
VALUE_SIZE = 100
RECORD_BYTES = 150  # about what one record takes in a batch (key, value, header, overhead)


# ---- what a consumer saw of one partition -----------------------------------------------------


_RECORD_HEAD = struct.Struct(">qqii")  # offset, timestamp, key length, value length (-1: null)
_HEADER_HEAD = struct.Struct(">ii")


@dataclass
class PartitionSummary:
    low: int = -1  # watermarks (log start, log end)
    high: int = -1
    first: int = -1
    last: int = -1
    records: int = 0
    gaps: int = 0  # holes between consecutive records
    crc: int = 0  # CRC-32C over every record in offset order
    size: int = 0  # key and value bytes

    def add(self, offset: int, timestamp: int, key, value, headers) -> None:
        if self.records == 0:
            self.first = offset
        elif offset != self.last + 1:
            self.gaps += 1
        self.last = offset
        self.records += 1
        parts = [_RECORD_HEAD.pack(offset, timestamp, -1 if key is None else len(key),
                                   -1 if value is None else len(value))]
        if key is not None:
            parts.append(key)
            self.size += len(key)
        if value is not None:
            parts.append(value)
            self.size += len(value)
        for name, data in headers or ():
            raw = name.encode()
            parts.append(_HEADER_HEAD.pack(len(raw), -1 if data is None else len(data)))
            parts.append(raw)
            if data is not None:
                parts.append(data)
        self.crc = crc32c(b"".join(parts), self.crc)

    def row(self) -> tuple:
        return (self.low, self.high, self.first, self.last, self.records, self.gaps, self.crc)


@dataclass
class TopicSummary:
    partitions: dict[int, PartitionSummary] = field(default_factory=dict)


def _consumer(bootstrap: str, group: str):
    from confluent_kafka import Consumer

    return Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
        "check.crcs": True,
        # librdkafka's default (1000 ms) pauses fetching for a second whenever its queue holds
        # more than 100k messages; a copy that drains the queue quickly wants it short.
        "fetch.queue.backoff.ms": 10,
    })


def _admin(broker):
    from confluent_kafka.admin import AdminClient

    # log_level 4: no notice about admin results left unread when the client goes away.
    return AdminClient({"bootstrap.servers": broker.bootstrap_servers, "log_level": 4})


def _watermarks(consumer, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    from confluent_kafka import TopicPartition

    return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10,
                                              cached=False)
            for p in range(partitions)}


def read_topic(bootstrap: str, topic: str, partitions: int, on_messages=None,
               timeout: float = 120.0) -> TopicSummary:
    """Read every partition from its log start to its log end with a stock librdkafka
    consumer; summarize it, and hand each poll's messages to ``on_messages(messages,
    fraction)``, fraction being how far through the partitions' offsets the reading is."""
    from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

    consumer = _consumer(bootstrap, f"kip-demo-{topic}-{time.monotonic_ns()}")
    try:
        marks = _watermarks(consumer, topic, partitions)
        summary = TopicSummary({p: PartitionSummary(low, high)
                                for p, (low, high) in marks.items()})
        pending = {p for p, (low, high) in marks.items() if high > low}
        position = {p: low for p, (low, _high) in marks.items()}
        span = sum(high - low for low, high in marks.values()) or 1
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: partitions {sorted(pending)} not read to their end "
                                   f"within {timeout:.0f} s")
            batch = consumer.consume(10_000, 0.1)
            records = []
            for msg in batch:
                err = msg.error()
                p = msg.partition()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        # At the end: records beyond the end seen at the start count as
                        # missing, not as a reason to wait.
                        if max(position[p], msg.offset()) >= marks[p][1]:
                            pending.discard(p)
                        continue
                    raise RuntimeError(f"{topic} [{p}]: {err}")
                offset = msg.offset()
                summary.partitions[p].add(offset, msg.timestamp()[1], msg.key(), msg.value(),
                                          msg.headers())
                position[p] = offset + 1
                if offset + 1 >= marks[p][1]:
                    pending.discard(p)
                records.append(msg)
            if on_messages is not None and records:
                done = sum(position[p] - marks[p][0] for p in position)
                on_messages(records, done / span)
        return summary
    finally:
        consumer.close()


# ---- the source --------------------------------------------------------------------------------


def _source_columns(n: int, seed: int = 5):
    """Keys that repeat (so compaction has work), some tombstones, headers, timestamps.

    The stream alternates bursts of new orders (one-off keys: compaction keeps them) and
    bursts of updates to a small set of customer keys (each written dozens of times: compaction
    keeps only the latest), so the compacted log has holes of every size.
    """
    rng = np.random.default_rng(seed)
    hot = max(20, n // 100)
    is_hot = np.zeros(n, dtype=bool)
    pos = 0
    while pos < n:
        length = int(rng.integers(1, 41))
        is_hot[pos:pos + length] = rng.random() < 0.5
        pos += length
    hot_ids = rng.integers(0, hot, n)
    keys = [b"customer-%06d" % hot_ids[i] if is_hot[i] else b"order-%08d" % i
            for i in range(n)]
    blob = rng.bytes(n * VALUE_SIZE)
    values: list[bytes | None] = [blob[i * VALUE_SIZE:(i + 1) * VALUE_SIZE] for i in range(n)]
    for i in np.flatnonzero(is_hot & (rng.random(n) < 0.02)):
        values[i] = None  # a tombstone: compaction keeps it (delete.retention.ms is a day)
    traces = rng.bytes(n * 8)
    no_header = rng.random(n) < 0.1
    headers = [None if no_header[i] else [("trace-id", traces[i * 8:(i + 1) * 8])]
               for i in range(n)]
    # Recent timestamps, 1 ms apart: older ones would fall to the broker's time retention.
    timestamps = int(time.time() * 1000) - n + np.arange(n, dtype=np.int64)
    return keys, values, headers, timestamps


def _fill_source(source, n: int, segment_bytes: int) -> float:
    from confluent_kafka.admin import NewTopic

    from .producer import Producer

    admin = _admin(source)
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1, config={
        "cleanup.policy": "compact", "segment.bytes": str(segment_bytes)})])[TOPIC].result(30)
    keys, values, headers, timestamps = _source_columns(n)
    # Small batches: a segment holds whole batches, and the cleaner needs several closed
    # segments per partition to have something to do.
    batch_size = max(1024, min(65536, segment_bytes // 4))
    producer = Producer({"bootstrap.servers": source.bootstrap_servers,
                         "enable.idempotence": True, "linger.ms": 5, "batch.size": batch_size})
    failed = []
    t0 = time.perf_counter()
    producer.produce_arrays(TOPIC, values, keys=keys, headers=headers, timestamps=timestamps,
                            on_delivery=lambda err, report: err and failed.append(err))
    left = producer.flush(60)
    elapsed = time.perf_counter() - t0
    producer.close()
    if left or failed:
        raise RuntimeError(f"filling the source failed: {left} left, errors {failed[:3]}")
    return elapsed


def _records_in(log) -> int:
    """How many records a partition log holds now (batch headers only, nothing decoded)."""
    from .records import decode_batches

    count, offset = 0, log.log_start_offset
    while offset < log.log_end_offset:
        found = log.read(offset, 4 << 20)
        if not len(found.records):
            break
        count += sum(b.record_count for b in decode_batches(found.records, validate=False))
        offset = found.next_offset
    return count


def _compact_and_trim(source, written: int) -> tuple[int, dict[int, int], float]:
    """A pass of the broker's log cleaner over each partition, then DeleteRecords.

    The broker's own timer may already have cleaned some partitions while the topic was being
    filled, so what the cleaner removed is counted as ``written`` minus what the logs hold
    after this pass, not as what this pass alone removed."""
    from confluent_kafka import TopicPartition

    t0 = time.perf_counter()
    logs = source.broker.logs
    remaining = 0
    for p in range(PARTITIONS):
        log = logs.get_log(TOPIC, p)
        log.compact()
        remaining += _records_in(log)
    removed = written - remaining

    # Move each log start a little way in, as retention or a DeleteRecords call would.
    consumer = _consumer(source.bootstrap_servers, "kip-demo-marks")
    marks = _watermarks(consumer, TOPIC, PARTITIONS)
    consumer.close()
    admin = _admin(source)
    wanted = [TopicPartition(TOPIC, p, low + (high - low) // 40 + p)
              for p, (low, high) in marks.items()]
    starts = {}
    for tp, future in admin.delete_records(wanted).items():
        starts[tp.partition] = future.result(30).low_watermark
    return removed, starts, time.perf_counter() - t0


# ---- the copy ----------------------------------------------------------------------------------


def _copy(source, target) -> tuple[int, float, int]:
    """``kip mirror --mode preserve``'s code (kipproducer.mirror): its Fetch reader takes the
    source's batches whole, the engine writes their records to the target, every record at its
    source offset; the mirror moves the target's log starts to the source's."""
    from confluent_kafka.admin import NewTopic

    from .mirror import Mirror

    admin = _admin(target)
    # Same policy, the default segment size: everything stays in the active segment, which
    # the cleaner never touches, so the target holds exactly what was copied (the mirror
    # takes an existing target topic as it is).
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1, config={
        "cleanup.policy": "compact"})])[TOPIC].result(30)
    t0 = time.perf_counter()
    snapshot = Mirror(source.bootstrap_servers, target.bootstrap_servers, re.escape(TOPIC),
                      mode="preserve").run(once=True)
    return snapshot["records"], time.perf_counter() - t0, snapshot["bytes"]


# ---- the report --------------------------------------------------------------------------------


def _table(source: TopicSummary, target: TopicSummary) -> tuple[list[str], int]:
    head = (f"{'partition':>9}  {'broker':<6}  {'watermarks':>17}  {'first':>7}  {'last':>7}  "
            f"{'records':>7}  {'gaps':>6}  {'crc32c':>8}  identical")
    lines = [head, "-" * len(head)]
    same = 0
    for p in sorted(source.partitions):
        s, t = source.partitions[p], target.partitions.get(p, PartitionSummary())
        identical = s.row() == t.row() and s.records > 0
        same += identical
        for side, summary in (("source", s), ("target", t)):
            marks = f"{summary.low:,}..{summary.high:,}"
            verdict = ("yes" if identical else "NO") if side == "target" else ""
            label = str(p) if side == "source" else ""
            lines.append(f"{label:>9}  {side:<6}  {marks:>17}  {summary.first:>7,}  "
                         f"{summary.last:>7,}  {summary.records:>7,}  {summary.gaps:>6,}  "
                         f"{summary.crc:08x}  {verdict}".rstrip())
    return lines, same


def _spark_step(target) -> bool | None:
    """Step 5 when pyspark and a Java are here: True/False (exactly once or not), None when
    skipped (and it says how to install what is missing)."""
    try:
        from .spark import demo_step, unavailable_reason
    except ImportError as exc:  # the spark extra is not installed: the message says how
        if exc.name != "kipproducer.spark":
            raise
        missing: str | None = str(exc).removeprefix("kipproducer.spark: ")
    else:
        missing = unavailable_reason()
    if missing is not None:
        print(f"\n5. spark   skipped: {missing}")
        return None
    print(f"\n5. spark   spark.read.format('kip') of the copy -> a Python UDF that fails one "
          f"task's first attempt -> df.write.format('kip') (transactional) to "
          f"{TOPIC + demo_step.OUT_SUFFIX!r}", flush=True)
    return demo_step.run(target.bootstrap_servers, TOPIC)


TARGET_MODES = {
    # target broker config, how step 3 writes
    "native": ({}, "their records written at their offsets (target, KIP-391)"),
    "emulated": ({"kip.extensions.enable": False},
                 "their records written at their offsets by Kafka's transactions (target "
                 "without the KIP-WIRE extension, as a stock Kafka: gaps filled with aborted "
                 "records and markers)"),
}


def run(records: int = 200_000, spark: bool = True, target_mode: str = "native") -> int:
    from .broker.embedded import EmbeddedBroker

    if records < 1000:
        print("kip demo: --records must be at least 1000", file=sys.stderr)
        return 2
    if target_mode not in TARGET_MODES:
        print(f"kip demo: --target-mode must be one of {', '.join(TARGET_MODES)}, got "
              f"{target_mode!r}", file=sys.stderr)
        return 2
    target_config, how = TARGET_MODES[target_mode]
    # About 8 segments per partition: the cleaner only compacts closed segments.
    segment_bytes = max(16 * 1024, records * RECORD_BYTES // PARTITIONS // 8)
    print("kip demo: copy a compacted topic to another broker with every offset kept "
          "(KIP-391)\n")
    t_start = time.perf_counter()
    with EmbeddedBroker() as source, EmbeddedBroker(config=target_config) as target:
        print(f"source broker {source.bootstrap_servers}, target broker "
              f"{target.bootstrap_servers} (embedded, temporary data dirs"
              f"{'; the target without the KIP-WIRE extension' if target_config else ''})",
              flush=True)

        filled = _fill_source(source, records, segment_bytes)
        print(f"1. filled  {TOPIC!r} on the source: {records:,} records in {PARTITIONS} "
              f"partitions (cleanup.policy=compact, segment.bytes={segment_bytes:,}) with "
              f"kipproducer produce_arrays in {filled:.2f} s", flush=True)

        removed, starts, took = _compact_and_trim(source, records)
        moved = ", ".join(f"{starts[p]:,}" for p in sorted(starts))
        print(f"2. holes   the broker's log cleaner removed {removed:,} superseded records and "
              f"DeleteRecords moved the log starts to {moved} ({took:.2f} s)", flush=True)

        print(f"3. copy    kip mirror --mode preserve: record batches fetched whole (source) -> "
              f"{how}, keys, values, headers, timestamps kept", flush=True)
        copied, elapsed, size = _copy(source, target)
        print(f"   copied {copied:,} records in {elapsed:.2f} s: {copied / elapsed:,.0f} "
              f"records/s, {size / elapsed / 1e6:.1f} MB/s of records (acks=all, "
              "idempotent); the mirror set the target's log starts to the source's (DeleteRecords)",
              flush=True)

        print("4. verify  a fresh librdkafka consumer reads both topics to their end\n")
        src = read_topic(source.bootstrap_servers, TOPIC, PARTITIONS)
        dst = read_topic(target.bootstrap_servers, TOPIC, PARTITIONS)
        lines, same = _table(src, dst)
        print("\n".join(lines))
        print()
        print(f"crc32c covers every record's offset, timestamp, key, value and headers. "
              f"identical: {'yes' if same == PARTITIONS else 'no'} ({same} of {PARTITIONS} "
              "partitions)", flush=True)
        once = _spark_step(target) if spark else None
    print(f"\nwhole demo {time.perf_counter() - t_start:.1f} s")
    return 0 if same == PARTITIONS and once is not False else 1
