"""Paced loads against the mock cluster, read back and judged, for kip and confluent alike.

A load sends ``N`` records (each value carries its sequence number, keys spread them over
the topic's partitions) paced over ``PACE_S`` seconds, with one of the clients:

* ``confluent``: confluent_kafka.Producer.produce() per record (the baseline);
* ``kip-produce``: kipproducer's Producer, produce() per record (librdkafka's own path);
* ``arrays``: kipproducer's produce_arrays in chunks;
* ``batch``: kipproducer's produce_batch in chunks.

``event`` runs at ``EVENT_AT_S`` into the load (a leader move, a broker down...), and
:func:`run_load` returns when flush() has every report in: its ``elapsed`` is the load's
completion time, the time a failover is judged by. :func:`judge` reads every partition back
with librdkafka and counts records lost, duplicated and reordered (per partition, each
sequence after the one before).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from mock_cluster import MockCluster

from kipproducer import producer as kp

N = 30_000
PACE_S = 2.0
CHUNK = 1_000
EVENT_AT_S = 0.7
PARTITIONS = 6
KEYS = 60
PAD = b"." * 60


PER_RECORD = ("confluent", "kip-produce")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def value(i: int) -> bytes:
    return b"%09d|" % i + PAD


def client_config(bootstrap: str, **extra) -> dict:
    """The same settings for both clients: idempotent, acks=all, librdkafka's defaults for
    reconnects and metadata; a generous delivery timeout, so a failover is judged by its
    time, not by records failed on a short one."""
    return {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
            "linger.ms": 5, "message.timeout.ms": 60_000, **extra}


@dataclass
class Outcome:
    client: str
    topic: str
    elapsed: float = 0.0
    delivered: int = 0
    errors: list = field(default_factory=list)
    lost: int = 0
    duplicated: int = 0
    reordered: int = 0


class _Reports:
    def __init__(self, outcome: Outcome) -> None:
        self.outcome = outcome
        self.lock = threading.Lock()

    def batch(self, err, report) -> None:  # produce_arrays: one per Kafka batch
        if err is not None:
            self.outcome.errors.append(err)
        else:
            self.outcome.delivered += report.count

    def record(self, err, msg) -> None:  # produce / produce_batch: one per record
        if err is not None:
            self.outcome.errors.append(err)
        else:
            self.outcome.delivered += 1


def run_load(client: str, bootstrap: str, topic: str, *, n: int = N, pace_s: float = PACE_S,
             event: Callable[[], None] | None = None, event_at_s: float = EVENT_AT_S,
             flush_timeout: float = 60.0, config: dict | None = None) -> Outcome:
    outcome = Outcome(client, topic)
    reports = _Reports(outcome)
    conf = client_config(bootstrap, **(config or {}))
    producer: Producer = Producer(conf) if client == "confluent" else kp.Producer(conf)
    started = time.monotonic()
    fired = event is None
    for start in range(0, n, CHUNK):
        # paced: chunk k goes out at k * (pace / chunks)
        due = started + pace_s * start / n
        while True:
            now = time.monotonic()
            if not fired and now - started >= event_at_s:
                fired = True
                event()
            if now >= due:
                break
            producer.poll(min(due - now, 0.01))
        seqs = range(start, min(start + CHUNK, n))
        keys = [b"k%02d" % (i % KEYS) for i in seqs]
        if client in PER_RECORD:
            for i, key in zip(seqs, keys, strict=True):
                while True:
                    try:
                        producer.produce(topic, value(i), key=key, on_delivery=reports.record)
                        break
                    except BufferError:
                        producer.poll(0.01)
        elif client == "arrays":
            values = np.array([value(i) for i in seqs], dtype=object)
            assert producer.produce_arrays(topic, values, keys=np.array(keys, dtype=object),
                                           on_delivery=reports.batch) == len(seqs)
        elif client == "batch":
            messages = [{"value": value(i), "key": key} for i, key in zip(seqs, keys,
                                                                           strict=True)]
            while messages:
                queued = producer.produce_batch(topic, messages, on_delivery=reports.record)
                failed = [m for m in messages if "_error" in m]
                for m in failed:
                    assert m["_error"].code() == KafkaError._QUEUE_FULL, m["_error"]
                    del m["_error"]
                assert failed == messages[queued:]
                messages = failed
                if messages:
                    producer.poll(0.05)
        else:
            raise ValueError(client)
        producer.poll(0)
    if not fired:
        event()
    left = producer.flush(flush_timeout)
    outcome.elapsed = time.monotonic() - started
    assert left == 0, f"{client}: {left} records without a report after {flush_timeout} s"
    if client != "confluent":
        producer.close()
    return outcome


Log = dict[int, list[tuple[int, bytes | None, bytes | None]]]  # partition -> (offset, key, value)


def read_records(bootstrap: str, topic: str, partitions: int = PARTITIONS, *,
                 timeout: float = 30.0, config: dict | None = None) -> Log:
    """Every record, per partition in offset order, read by librdkafka to the end."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("reader"),
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "fetch.wait.max.ms": 10, **(config or {})})
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


def sequences(log: Log) -> dict[int, list[int]]:
    """The sequence number each record's value starts with (see value()), per partition."""
    return {p: [int(v[:9]) for _, _, v in records if v is not None]
            for p, records in log.items()}


def read_sequences(bootstrap: str, topic: str, partitions: int = PARTITIONS,
                   timeout: float = 30.0) -> dict[int, list[int]]:
    """Every record's sequence number, per partition in offset order."""
    return sequences(read_records(bootstrap, topic, partitions, timeout=timeout))


def count_faults(outcome: Outcome, by_partition: dict[int, list[int]], n: int = N) -> Outcome:
    """Counts what the log holds against what was sent: lost (never in the log),
    duplicated (in it more than once), reordered (a partition's sequence going backwards
    other than by a duplicate)."""
    seen: set[int] = set()
    duplicated = reordered = 0
    for seqs in by_partition.values():
        last = -1
        for s in seqs:
            if s in seen:
                duplicated += 1
                continue
            seen.add(s)
            if s < last:
                reordered += 1
            last = s
    outcome.lost = n - len(seen)
    outcome.duplicated = duplicated
    outcome.reordered = reordered
    return outcome


def judge(outcome: Outcome, bootstrap: str, n: int = N) -> Outcome:
    """count_faults on what librdkafka reads back from the topic."""
    return count_faults(outcome, read_sequences(bootstrap, outcome.topic), n)


def compare(kip: Outcome, confluent: Outcome, *, factor: float = 1.5,
            slack_s: float = 1.0) -> str:
    return (f"{kip.client} {kip.elapsed:.2f} s vs confluent {confluent.elapsed:.2f} s "
            f"(limit {factor}x + {slack_s} s)")


def assert_within(kip: Outcome, confluent: Outcome, *, factor: float = 1.5,
                  slack_s: float = 1.0) -> None:
    print(compare(kip, confluent, factor=factor, slack_s=slack_s))
    assert kip.elapsed <= confluent.elapsed * factor + slack_s, compare(
        kip, confluent, factor=factor, slack_s=slack_s)


def leaders_of(cluster: MockCluster, topic: str) -> list[int]:
    """Partition i led by broker i % 3 + 1 (what create_topic sets)."""
    return [cluster.broker_ids[p % len(cluster.broker_ids)] for p in range(PARTITIONS)]


TXNS = 10
TXN_RECORDS = 2_000


def run_transactions(client: str, bootstrap: str, topic: str, transactional_id: str, *,
                     events: dict[int, Callable[[], None]] | None = None,
                     txns: int = TXNS, per_txn: int = TXN_RECORDS,
                     config: dict | None = None) -> Outcome:
    """``txns`` transactions of ``per_txn`` records each, committed one after the other;
    ``events[k]`` runs after transaction k began and half its records were produced.
    ``client`` confluent (per-record produce), arrays or batch (kip's engine)."""
    n = txns * per_txn
    outcome = Outcome(client, topic)
    reports = _Reports(outcome)
    conf = client_config(bootstrap, **{"transactional.id": transactional_id,
                                       "transaction.timeout.ms": 60_000, **(config or {})})
    conf.pop("message.timeout.ms")
    producer: Producer = Producer(conf) if client == "confluent" else kp.Producer(conf)
    started = time.monotonic()
    producer.init_transactions(30)
    events = events or {}

    def send(seqs: range) -> None:
        keys = [b"k%02d" % (i % KEYS) for i in seqs]
        if client == "confluent":
            for i, key in zip(seqs, keys, strict=True):
                producer.produce(topic, value(i), key=key, on_delivery=reports.record)
        elif client == "arrays":
            producer.produce_arrays(topic, np.array([value(i) for i in seqs], dtype=object),
                                    keys=np.array(keys, dtype=object),
                                    on_delivery=reports.batch)
        else:
            messages = [{"value": value(i), "key": key}
                        for i, key in zip(seqs, keys, strict=True)]
            assert producer.produce_batch(topic, messages,
                                          on_delivery=reports.record) == len(messages)

    for t in range(txns):
        producer.begin_transaction()
        first = t * per_txn
        half = first + per_txn // 2
        send(range(first, half))
        if t in events:
            producer.poll(0.05)
            events[t]()
        send(range(half, first + per_txn))
        producer.commit_transaction(60)
    outcome.elapsed = time.monotonic() - started
    if client != "confluent":
        producer.close()
    assert outcome.delivered + len(outcome.errors) == n
    return outcome
