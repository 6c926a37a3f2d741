"""Reading a topic back from Apache Kafka twice, by librdkafka and by Kafka's own Java consumer
(``kafka-console-consumer``), at either isolation level, so every check of what a topic holds
is made by both and both must agree."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, KafkaError, TopicPartition
from kafka_cluster import KafkaCluster
from kafka_jars import reader_classpath

Record = tuple[int, bytes | None, bytes | None]   # (offset, key, value)
Log = dict[int, list[Record]]                     # partition -> records in offset order


def rdkafka_read(bootstrap: str, topic: str, partitions: int, *,
                 isolation: str = "read_committed", timeout: float = 60.0,
                 config: dict | None = None) -> Log:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "isolation.level": isolation, "fetch.wait.max.ms": 10,
                         **(config or {})})
    out: Log = {p: [] for p in range(partitions)}
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        at_eof: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(at_eof) < partitions:
            assert time.monotonic() < deadline, f"reading {topic} took over {timeout} s"
            for msg in consumer.consume(10_000, timeout=0.05):
                err = msg.error()
                if err is not None:
                    assert err.code() == KafkaError._PARTITION_EOF, err
                    at_eof.add(msg.partition())
                    continue
                at_eof.discard(msg.partition())
                out[msg.partition()].append((msg.offset(), msg.key(), msg.value()))
    finally:
        consumer.close()
    return out


def java_read_topics(cluster: KafkaCluster, topics: list[str], *,
                     isolation: str = "read_committed",
                     bootstrap: str | None = None) -> dict[str, Log]:
    """Kafka's own Java consumer (java/ReadTopics.java) reads every partition of ``topics``
    from the beginning up to its end offset at that isolation level."""
    out = cluster.tool("ReadTopics", bootstrap or cluster.bootstrap, isolation, *topics,
                       timeout=300, classpath=reader_classpath())
    logs: dict[str, Log] = {t: {} for t in topics}
    for line in out.splitlines():
        topic, part, off, key, value = line.split("\t")
        logs[topic].setdefault(int(part), []).append(
            (int(off), None if key == "-" else bytes.fromhex(key),
             None if value == "-" else bytes.fromhex(value)))
    return logs


def java_read(cluster: KafkaCluster, topic: str, partitions: int, *,
              isolation: str = "read_committed", bootstrap: str | None = None) -> Log:
    log = java_read_topics(cluster, [topic], isolation=isolation, bootstrap=bootstrap)[topic]
    return {p: log.get(p, []) for p in range(partitions)}


def read_both(cluster: KafkaCluster, topic: str, partitions: int, *,
              isolation: str = "read_committed") -> Log:
    """What librdkafka reads, after checking that Kafka's Java consumer reads the same
    offsets, keys and values."""
    return read_both_topics(cluster, [topic], partitions, isolation=isolation)[topic]


def read_both_topics(cluster: KafkaCluster, topics: list[str], partitions: int, *,
                     isolation: str = "read_committed") -> dict[str, Log]:
    """read_both for several topics, one Java consumer for all of them."""
    java = java_read_topics(cluster, topics, isolation=isolation)
    logs = {}
    for topic in topics:
        logs[topic] = _agree(topic, partitions, isolation, rdkafka_read(
            cluster.bootstrap, topic, partitions, isolation=isolation), java[topic])
    return logs


def _agree(topic: str, partitions: int, isolation: str, ours: Log, java: Log) -> Log:
    theirs = {p: java.get(p, []) for p in range(partitions)}
    for p in range(partitions):
        if ours[p] != theirs[p]:
            a, b = ours[p], theirs[p]
            first = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                         min(len(a), len(b)))
            raise AssertionError(
                f"{topic}[{p}] ({isolation}): librdkafka read {len(a)} records, Kafka's Java "
                f"consumer {len(b)}; first difference at #{first}: "
                f"{a[first:first + 2]} vs {b[first:first + 2]}")
    return ours


def sequences(log: Log) -> dict[int, list[int]]:
    """The sequence number each load's value starts with (tests/cluster/scenario_support.py)."""
    return {p: [int(v[:9]) for _, _, v in records if v is not None]
            for p, records in log.items()}
