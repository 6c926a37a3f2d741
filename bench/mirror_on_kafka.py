"""The Apache Kafka side of bench/side_by_side_mirror.py (issue 43): a compacted source topic,
MirrorMaker 2 with exactly-once as a lane, and the checks every lane's copy passes.

- A compacted source: each partition's keys written once, then a random half of them again in
  blocks of ``BLOCK`` keys, then one new key, and Kafka's own log cleaner left to drop the
  older copies. The topic's segments roll after ``segment.ms``, and the cleaner never reads
  the active segment (a key rewritten there would keep its older copy), so the last key, new,
  is written after a pause: its append rolls the segment holding the rewrites. What stays is
  one record per key, ``n`` in all, with holes of ``BLOCK`` offsets where a block was
  rewritten: a compacted topic's shape, made by Kafka itself.
- MirrorMaker 2 in dedicated mode (``org.apache.kafka.connect.mirror.MirrorMaker``, the
  ``connect-mirror`` jars the tests cache), exactly-once on the target
  (``exactly.once.source.support=enabled``), ``IdentityReplicationPolicy`` (the target topic
  keeps the source's name), the source read with ``read_committed``. One JVM per run, with
  cluster aliases of its own so no run resumes another's offsets. It runs until every
  partition's last source record is readable (read_committed) on the target; then, still
  running, until its checkpoints have translated a consumer group's offsets onto the target
  (what a consumer failing over to the target would resume from).
- The checks (:func:`digest`): per partition, the records a read_committed reader gets, in
  order: their count, a hash of their keys and values, and a hash of their offsets. A copy is
  exactly once when its count and key/value hash equal the source's on every partition, and
  keeps offsets when the offset hash does too.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any

from bench_support import BenchBroker, apache_kafka, broker_cpu

BLOCK = 1000  # keys per rewritten block of the compacted source: its holes' size
# What makes Kafka's cleaner compact the bench's source at once: the cleaner wakes every
# 0.5 s (15 s by default) and holds 1M keys in one pass (2 MiB in the tests' nodes).
CLEANER_CONFIG = {"log.cleaner.backoff.ms": 500,
                  "log.cleaner.dedupe.buffer.size": 64 * 1024 * 1024}
# A dirty ratio of 0: any uncleaned part is cleaned. The writes roll a segment every 100 ms,
# so the cleaner may clean while they go on; with 0.01 the part left after its last pass
# could stay below the ratio for good (on 3 nodes 1,681 records of 250,000 in one partition).
COMPACTED_TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.ms": "100",
                          "min.cleanable.dirty.ratio": "0", "min.compaction.lag.ms": "0"}
MM2_HEAP = ["-Xms256m", "-Xmx1g"]
MM2_TIMEOUT_S = 1800.0
CHECKPOINT_WAIT_S = 30.0
FAILOVER_GROUP = "bench-failover"


@dataclass
class PartitionDigest:
    count: int = 0
    records: Any = field(default_factory=hashlib.sha256)
    offsets: Any = field(default_factory=hashlib.sha256)
    last: tuple[bytes, bytes] | None = None
    found: tuple[int, int] | None = None  # (offset, index among the records) of the key asked
    below: int = 0                        # records below the offset asked


def digest(bootstrap: str, topic: str, partitions: int, *, keys: dict[int, bytes] | None = None,
           below: dict[int, int] | None = None) -> dict[int, PartitionDigest]:
    """Every partition of ``topic`` as a read_committed reader gets it (see the module doc).
    ``keys``: where that key is in each partition; ``below``: how many records each
    partition has below that offset."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-digest-{topic}",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest",
                         "enable.partition.eof": True, "log_level": 4})
    out = {p: PartitionDigest() for p in range(partitions)}
    records: dict[int, list] = {p: [] for p in range(partitions)}
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        at_end: set[int] = set()
        deadline = time.monotonic() + 600
        while len(at_end) < partitions:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: not read to its end in 600 s")
            for m in consumer.consume(10_000, 0.5):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        at_end.add(m.partition())
                        continue
                    raise RuntimeError(f"{topic}: {m.error().str()}")
                at_end.discard(m.partition())
                records[m.partition()].append((m.offset(), m.key(), m.value()))
            for p, batch in records.items():
                fold(out[p], batch, (keys or {}).get(p), (below or {}).get(p, -1))
                batch.clear()
    finally:
        consumer.close()
    return out


def fold(d: PartitionDigest, batch: list, key: bytes | None, below: int) -> None:
    for offset, k, v in batch:
        k, v = k or b"", v or b""
        d.records.update(len(k).to_bytes(4, "big") + k + len(v).to_bytes(4, "big") + v)
        d.offsets.update(offset.to_bytes(8, "big"))
        if key is not None and k == key:
            d.found = (offset, d.count)
        if offset < below:
            d.below += 1
        d.count += 1
        d.last = (k, v)


def middles(source: dict[int, PartitionDigest], bootstrap: str, topic: str,
            partitions: int) -> dict[int, tuple[int, bytes]]:
    """(offset, key) of each partition's middle record: where the failover group stands."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-middle-{topic}",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest",
                         "log_level": 4})
    out = {}
    try:
        for p in range(partitions):
            # the record count // 2 records in: offsets are dense below the first hole only,
            # so walk from the start (a read of half a partition, once per bench run)
            want = source[p].count // 2
            consumer.assign([TopicPartition(topic, p, 0)])
            seen = 0
            while p not in out:
                for m in consumer.consume(10_000, 5):
                    if m.error():
                        raise RuntimeError(m.error().str())
                    if seen == want:
                        out[p] = (m.offset(), m.key())
                        break
                    seen += 1
    finally:
        consumer.close()
    return out


def compare(name: str, source: dict[int, PartitionDigest], target: dict[int, PartitionDigest],
            *, offsets: bool) -> None:
    """Raises unless ``target`` holds the source's records once each, in order (and at the
    same offsets, with ``offsets``)."""
    for p, want in source.items():
        got = target[p]
        if got.count != want.count or got.records.digest() != want.records.digest():
            raise RuntimeError(f"{name}: partition {p} holds {got.count} records "
                               f"(read_committed), the source {want.count}, or other ones")
        if offsets and got.offsets.digest() != want.offsets.digest():
            raise RuntimeError(f"{name}: partition {p}'s records are not at the source's "
                               "offsets")


def fill_compacted(bootstrap: str, topic: str, n: int, partitions: int,
                   replication: int) -> None:
    """The compacted source (see the module doc): ``n`` records once the cleaner is done."""
    import numpy as np
    from confluent_kafka.admin import AdminClient, NewTopic

    from kipproducer import Producer

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})
    admin.create_topics([NewTopic(topic, partitions, replication,
                                  config=COMPACTED_TOPIC_CONFIG)])[topic].result(30)
    per = n // partitions
    rng = np.random.default_rng(11)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 5})
    keys = [b"key-%08d" % i for i in range(per)]
    first = per - 1  # keys of the first pass; the last one comes alone, at the end
    for part in range(partitions):
        blob = rng.bytes(first * 100)
        producer.produce_arrays(topic, [blob[i * 100:(i + 1) * 100] for i in range(first)],
                                keys=keys[:first], partition=part)
    if producer.flush(300):
        raise RuntimeError("the compacted source's first pass was not written")
    time.sleep(1)  # past segment.ms: the next append rolls the segment
    for part in range(partitions):
        again = [i for start in range(0, first, BLOCK) if rng.random() < 0.5
                 for i in range(start, min(start + BLOCK, first))]
        blob = rng.bytes(len(again) * 100)
        producer.produce_arrays(topic, [blob[j * 100:(j + 1) * 100] for j in range(len(again))],
                                keys=[keys[i] for i in again], partition=part)
    if producer.flush(300):
        raise RuntimeError("the compacted source's second pass was not written")
    time.sleep(1)
    for part in range(partitions):
        producer.produce_arrays(topic, [rng.bytes(100)], keys=[keys[-1]], partition=part)
    if producer.flush(300):
        raise RuntimeError("the compacted source's last record was not written")
    deadline = time.monotonic() + 300
    while True:
        counts = {p: d.count for p, d in digest(bootstrap, topic, partitions).items()}
        if sum(counts.values()) == per * partitions:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{topic}: Kafka's cleaner left {counts} records, want {per} "
                               "per partition")
        time.sleep(2)


def mm2_properties(source: BenchBroker, target: BenchBroker, topic: str, run: str) -> str:
    """A dedicated MirrorMaker 2's configuration: one topic from source to target, exactly
    once, the same topic name; cluster aliases of the run's own."""
    a, b = f"S{run}", f"T{run}"
    rf = target.replication
    lines = {
        "clusters": f"{a}, {b}",
        f"{a}.bootstrap.servers": source.bootstrap,
        f"{b}.bootstrap.servers": target.bootstrap,
        f"{a}->{b}.enabled": "true",
        f"{b}->{a}.enabled": "false",
        f"{a}->{b}.topics": topic,
        "replication.policy.class":
            "org.apache.kafka.connect.mirror.IdentityReplicationPolicy",
        f"{b}.exactly.once.source.support": "enabled",
        f"{a}.consumer.isolation.level": "read_committed",
        # exactly-once in dedicated mode needs the workers' internal REST (KIP-710)
        "dedicated.mode.enable.internal.rest": "true",
        "listeners": "http://127.0.0.1:0",
        "replication.factor": rf,
        "offset-syncs.topic.replication.factor": source.replication,
        "checkpoints.topic.replication.factor": rf,
        "heartbeats.topic.replication.factor": rf,
        "offset.storage.replication.factor": rf,
        "status.storage.replication.factor": rf,
        "config.storage.replication.factor": rf,
        "emit.checkpoints.interval.seconds": 1,
        "sync.group.offsets.enabled": "true",
        "sync.group.offsets.interval.seconds": 1,
        "refresh.topics.interval.seconds": 1,
        "refresh.groups.interval.seconds": 1,
        "plugin.discovery": "service_load",
    }
    return "".join(f"{k} = {v}\n" for k, v in lines.items())


def commit_group(bootstrap: str, topic: str, offsets: dict[int, int]) -> None:
    """The failover group's committed offsets on the source (a group with no members)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": FAILOVER_GROUP,
                         "enable.auto.commit": False, "log_level": 4})
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()],
                        asynchronous=False)
    finally:
        consumer.close()


def group_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """The failover group's committed offsets on ``bootstrap`` ({} while it has none)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})
    request = [ConsumerGroupTopicPartitions(
        FAILOVER_GROUP, [TopicPartition(topic, p) for p in range(partitions)])]
    try:
        result = admin.list_consumer_group_offsets(request)[FAILOVER_GROUP].result(10)
    except Exception:  # noqa: BLE001 - the group does not exist on the target yet
        return {}
    return {tp.partition: tp.offset for tp in result.topic_partitions if tp.offset >= 0}


def last_records(consumer, topic: str, partitions: int) -> dict[int, tuple[bytes, bytes]]:
    """Each partition's last record a read_committed reader gets (none for an empty one)."""
    from confluent_kafka import KafkaError, TopicPartition

    out = {}
    for p in range(partitions):
        high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5,
                                              cached=False)[1]
        if high <= 0:
            continue
        consumer.assign([TopicPartition(topic, p, max(0, high - 64))])
        while True:
            batch = consumer.consume(1000, 2)
            if not batch:
                break
            for m in batch:
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        break
                    raise RuntimeError(m.error().str())
                out[p] = (m.key() or b"", m.value() or b"")
            if batch[-1].error():
                break
    return out


def written(watcher, topic: str, partitions: int) -> bool:
    """Whether any record is on ``topic`` yet, committed or not."""
    from confluent_kafka import TopicPartition

    return any(watcher.get_watermark_offsets(TopicPartition(topic, p), timeout=5,
                                             cached=False)[1] > 0 for p in range(partitions))


def start_mm2(source: BenchBroker, target: BenchBroker, topic: str, work_dir: str,
              run: str) -> tuple[subprocess.Popen, str]:
    """A dedicated MirrorMaker 2 copying ``topic`` (mm2_properties), in a JVM of its own
    logging to a file in ``work_dir``: its process and its log's path."""
    kafka = apache_kafka()
    from kafka_jars import classpath, java

    config_path = os.path.join(work_dir, f"mm2-{run}.properties")
    with open(config_path, "w") as f:
        f.write(mm2_properties(source, target, topic, run))
    log4j = os.path.join(work_dir, "log4j2-mm2.properties")
    with open(log4j, "w") as f:
        f.write(kafka.TOOL_LOG4J2)
    log_path = os.path.join(work_dir, f"mm2-{run}.log")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [java() or "java", *MM2_HEAP, *kafka.JVM_FLAGS,
             f"-Dlog4j2.configurationFile={log4j}", "-cp", classpath(),
             "org.apache.kafka.connect.mirror.MirrorMaker", config_path],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    return proc, log_path


def stop_mm2(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(30)


def run_mm2(source: BenchBroker, target: BenchBroker, topic: str, partitions: int,
            expected_last: dict[int, tuple[bytes, bytes]], work_dir: str,
            run: str) -> dict:
    """One MirrorMaker 2 run (see the module doc). Seconds from the JVM's start and from the
    first record written on the target (committed or not) to the last one readable; its CPU
    seconds at both points; and the failover group's offsets as its checkpoints translated
    them."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": target.bootstrap, "group.id": f"bench-poll-{run}",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest",
                         "enable.partition.eof": True, "log_level": 0})
    # Its high watermarks (read_uncommitted: ListOffsets answers the last stable offset to a
    # read_committed reader) show the first record written, before its transaction commits.
    watcher = Consumer({"bootstrap.servers": target.bootstrap, "group.id": f"bench-hw-{run}",
                        "isolation.level": "read_uncommitted", "log_level": 0})
    t0 = time.perf_counter()
    proc, log_path = start_mm2(source, target, topic, work_dir, run)
    try:
        first = cpu_first = None
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"MirrorMaker 2 exited {proc.returncode}:\n" + tail(log_path))
            if time.perf_counter() - t0 > MM2_TIMEOUT_S:
                raise TimeoutError(f"MirrorMaker 2 did not copy {topic} in {MM2_TIMEOUT_S} s:\n"
                                   + tail(log_path))
            if topic in consumer.list_topics(timeout=5).topics:
                if first is None and written(watcher, topic, partitions):
                    first, cpu_first = time.perf_counter(), broker_cpu(proc.pid)
                last = last_records(consumer, topic, partitions)
                if last == expected_last:
                    done, cpu_done = time.perf_counter(), broker_cpu(proc.pid)
                    break
            time.sleep(0.2)
        translated: dict[int, int] = {}
        deadline = time.monotonic() + CHECKPOINT_WAIT_S
        while len(translated) < partitions and time.monotonic() < deadline:
            translated = group_offsets(target.bootstrap, topic, partitions)
            time.sleep(0.5)
    finally:
        consumer.close()
        watcher.close()
        stop_mm2(proc)
    return {"seconds": done - first, "whole_seconds": done - t0, "cpu": cpu_done - cpu_first,
            "whole_cpu": cpu_done, "translated": translated}


def tail(path: str, lines: int = 30) -> str:
    with open(path, errors="replace") as f:
        return "\n".join(line[:300] for line in f.read().splitlines()[-lines:])


def delete_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})
    admin.delete_topics([topic], operation_timeout=30)[topic].result(60)
