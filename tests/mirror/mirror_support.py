"""Source topics of every kind a mirror meets, and readers that compare both sides."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from confluent_kafka import (
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from kipproducer.broker.embedded import EmbeddedBroker


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class Rec:
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple
    timestamp: int

    def content(self) -> tuple:
        return (self.key, self.value, self.headers, self.timestamp)


def create(broker: EmbeddedBroker, topic: str, partitions: int, **config: str) -> str:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic(topic, partitions, 1, config=config)])[topic].result(30)
    return topic


def read(bootstrap: str, topic: str, partitions: int, isolation: str = "read_committed",
         timeout: float = 60.0) -> dict[int, list[Rec]]:
    """Every record of every partition, read to the end (the last stable offset under
    read_committed: a test waits for open transactions to end first)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("reader"),
                  "enable.auto.commit": False, "enable.partition.eof": True,
                  "isolation.level": isolation, "auto.offset.reset": "earliest"})
    out: dict[int, list[Rec]] = {p: [] for p in range(partitions)}
    try:
        c.assign([TopicPartition(topic, p, -2) for p in range(partitions)])
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(at_end) < partitions:
            assert time.monotonic() < deadline, f"{topic}: not read to the end"
            for m in c.consume(10_000, 0.1):
                if m.error():
                    assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                    at_end.add(m.partition())
                    continue
                at_end.discard(m.partition())
                out[m.partition()].append(Rec(m.offset(), m.key(), m.value(),
                                              tuple(m.headers() or ()), m.timestamp()[1]))
    finally:
        c.close()
    return out


def log_ends(bootstrap: str, topic: str, partitions: int,
             isolation: str = "read_uncommitted") -> dict[int, int]:
    """Each partition's end for a reader at ``isolation``: the high watermark, or the last
    stable offset (read_committed)."""
    level = (IsolationLevel.READ_COMMITTED if isolation == "read_committed"
             else IsolationLevel.READ_UNCOMMITTED)
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})  # no info lines
    deadline = time.monotonic() + 30
    while True:
        found = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest()
                                    for p in range(partitions)}, isolation_level=level)
        try:
            return {tp.partition: future.result(10).offset for tp, future in found.items()}
        except KafkaException:
            # a leader just elected (a new topic, a node killed) is not known everywhere yet
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def stable(bootstrap: str, topic: str, partitions: int, timeout: float = 30.0) -> None:
    """Wait until no transaction holds a partition's last stable offset back."""
    deadline = time.monotonic() + timeout
    while (log_ends(bootstrap, topic, partitions, "read_committed")
           != log_ends(bootstrap, topic, partitions, "read_uncommitted")):
        assert time.monotonic() < deadline, f"{topic}: transactions still open"
        time.sleep(0.2)


def fill(broker: EmbeddedBroker, topic: str, n: int, *, keys: int | None = None,
         start: int = 0, partitions: int = 3) -> None:
    """n records spread over the partitions: keys (some repeating when ``keys``), headers on most,
    a timestamp each (1 ms apart, recent), a tombstone now and then."""
    # Small batches: the cleaner compacts closed segments only, and a segment holds whole
    # batches.
    p = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 5,
                  "batch.size": 1024})
    now = int(time.time() * 1000) - n
    for i in range(start, start + n):
        # Runs of hot keys (written over and over: compaction keeps the last) between runs
        # of one-off keys (kept): holes of many sizes.
        key = b"k%d" % (i % keys) if keys and (i // 7) % 2 else b"key-%d" % i
        value = None if keys and i % 17 == 5 else b"value-%d" % i
        headers = [("trace", b"%d" % i)] if i % 10 else None
        p.produce(topic, value, key, partition=i % partitions, headers=headers,
                  timestamp=now + i - start)
    assert p.flush(30) == 0


def transactions(broker: EmbeddedBroker, topic: str, rounds: int, *, per_round: int = 6,
                 tag: str = "t", partitions: int = 3) -> None:
    """Rounds of a transactional producer, every third aborted."""
    p = Producer({"bootstrap.servers": broker.bootstrap_servers,
                  "transactional.id": unique("src-txn"), "linger.ms": 2})
    p.init_transactions(30)
    for r in range(rounds):
        p.begin_transaction()
        for i in range(per_round):
            p.produce(topic, f"{tag}{r}-{i}".encode(), f"{tag}{r}".encode(),
                      partition=(r + i) % partitions, headers=[("round", b"%d" % r)])
        if r % 3 == 2:
            assert p.flush(30) == 0  # in the log before the abort (else librdkafka purges them)
            p.abort_transaction(30)
        else:
            p.commit_transaction(30)


def compacted_topic(broker: EmbeddedBroker, topic: str, n: int, partitions: int = 3) -> str:
    """A compacted topic with holes in its offsets that no further cleaning changes: hot keys
    written over and over, then one-off keys enough to close the segments that hold them,
    then a pass of the broker's own cleaner. Every key is left once, so the cleaner of a
    mirror's target (the same configs) finds nothing to remove from the copy either."""
    create(broker, topic, partitions, **{"cleanup.policy": "compact", "segment.bytes": "4096"})
    fill(broker, topic, n, keys=30, partitions=partitions)
    fill(broker, topic, 150 * partitions, start=10 * n, partitions=partitions)
    for p in range(partitions):
        broker.broker.logs.get_log(topic, p).compact()
    rows = read(broker.bootstrap_servers, topic, partitions)
    for p, records in rows.items():
        keys = [r.key for r in records]
        assert len(keys) == len(set(keys)), f"{topic}[{p}]: a key is left twice"
    return topic


def trim(broker: EmbeddedBroker, topic: str, partitions: int, by: int) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    for future in admin.delete_records([TopicPartition(topic, p, by)
                                        for p in range(partitions)]).values():
        future.result(30)


def group_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return {tp.partition: tp.offset for tp in c.committed(
            [TopicPartition(topic, p) for p in range(partitions)], timeout=10)}
    finally:
        c.close()
