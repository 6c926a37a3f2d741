"""An idempotent librdkafka producer (acks=all) and a check.crcs consumer, for every codec.

Every record (key, value, headers, timestamp, partition, offset) must come back exactly as the
delivery reports said it was stored: offsets 0..n-1 per partition in produce order.
"""

from __future__ import annotations

import random
import time

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    Producer,
    TopicPartition,
)
from integration_support import KipBroker, consume_records, create_topics, unique

RECORDS = 20_000
PARTITIONS = 3
TIMEOUT = 40.0


@pytest.fixture(scope="module")
def broker(module_broker_factory) -> KipBroker:
    return module_broker_factory()


def make_records(n: int, seed: int) -> list[tuple]:
    """(key, value, headers, timestamp): nulls, empties, repeats and sizes up to a few KiB."""
    rng = random.Random(seed)
    # A day ago, one ms apart: within Kafka's timestamp bounds, and distinct per record.
    base_ts = int(time.time() * 1000) - 86_400_000
    out = []
    for i in range(n):
        key = None if i % 97 == 0 else b"key-%d" % (i % 1000)
        if i % 113 == 0:
            value = None  # a tombstone is a record like any other on a delete-policy topic
        elif i % 51 == 0:
            value = b""
        else:
            value = rng.randbytes(rng.choice((8, 40, 300, 3000)))
        if i % 7 == 0:
            headers = []
        else:
            headers = [("seq", b"%d" % i), ("empty", b""), ("null", None), ("seq", b"again")]
        out.append((key, value, headers, base_ts + i))
    return out


def produce_all(bootstrap: str, topic: str, records: list[tuple], conf: dict) -> list[tuple]:
    """Produce with delivery reports; returns (partition, offset) per record, in order."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            **conf,
        }
    )
    placed: list[tuple | None] = [None] * len(records)
    errors: list[str] = []

    def delivered(index: int):
        def report(err, msg) -> None:
            if err is not None:
                errors.append(f"record {index}: {err}")
            else:
                placed[index] = (msg.partition(), msg.offset())

        return report

    for i, (key, value, headers, ts) in enumerate(records):
        while True:
            try:
                producer.produce(
                    topic, value, key, headers=headers, timestamp=ts, on_delivery=delivered(i)
                )
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(TIMEOUT) == 0, "records still in flight"
    assert not errors, errors[:5]
    assert None not in placed
    return placed  # type: ignore[return-value]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_idempotent_roundtrip_every_record(broker: KipBroker, codec: str) -> None:
    topic = unique(f"roundtrip-{codec}")
    create_topics(broker.bootstrap, {topic: PARTITIONS})
    records = make_records(RECORDS, seed=sum(codec.encode()))
    placed = produce_all(broker.bootstrap, topic, records, {"compression.type": codec})

    # Delivery reports: per partition, offsets 0..n-1 in the order the records were produced.
    per_partition: dict[int, list[int]] = {}
    for partition, offset in placed:
        per_partition.setdefault(partition, []).append(offset)
        assert 0 <= partition < PARTITIONS
    assert len(per_partition) == PARTITIONS, "keys spread over every partition"
    for partition, offsets in per_partition.items():
        assert offsets == list(range(len(offsets))), f"partition {partition}"

    got = consume_records(broker.bootstrap, topic, RECORDS, timeout=TIMEOUT)
    by_place = {(r.partition, r.offset): r for r in got}
    assert len(by_place) == RECORDS, "a record was read twice"
    for index, (key, value, headers, ts) in enumerate(records):
        rec = by_place[placed[index]]
        assert (rec.key, rec.value, rec.timestamp) == (key, value, ts), f"record {index}"
        assert list(rec.headers) == headers, f"record {index}"
    # The consumer saw each partition in offset order.
    for partition in range(PARTITIONS):
        seen = [r.offset for r in got if r.partition == partition]
        assert seen == list(range(len(per_partition[partition])))


def test_producer_chosen_partitions_and_keyless_records(broker: KipBroker) -> None:
    """Explicit partitions, no keys, acks=1 without idempotence: same guarantees of order."""
    topic = unique("explicit")
    create_topics(broker.bootstrap, {topic: PARTITIONS})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": 1, "linger.ms": 2})
    for i in range(3000):
        producer.produce(topic, b"v%d" % i, partition=i % PARTITIONS)
    assert producer.flush(TIMEOUT) == 0
    got = consume_records(broker.bootstrap, topic, 3000, timeout=TIMEOUT)
    for partition in range(PARTITIONS):
        values = [r.value for r in got if r.partition == partition]
        assert values == [b"v%d" % i for i in range(partition, 3000, PARTITIONS)]


def test_acks_0_records_arrive(broker: KipBroker) -> None:
    """acks=0: the broker sends no response at all, and still stores every record in order."""
    topic = unique("acks0")
    create_topics(broker.bootstrap, {topic: 1})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": 0, "linger.ms": 2})
    for i in range(1000):
        producer.produce(topic, b"%d" % i)
    assert producer.flush(TIMEOUT) == 0
    got = consume_records(broker.bootstrap, topic, 1000, timeout=TIMEOUT)
    assert [(r.offset, r.value) for r in got] == [(i, b"%d" % i) for i in range(1000)]


def test_log_append_time_topic_stamps_the_broker_clock(broker: KipBroker) -> None:
    topic = unique("append-time")
    create_topics(broker.bootstrap, {topic: 1}, {"message.timestamp.type": "LogAppendTime"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    before = int(time.time() * 1000)
    for i in range(10):
        producer.produce(topic, b"%d" % i, timestamp=1_000_000 + i)  # 1970: replaced
    assert producer.flush(TIMEOUT) == 0
    after = int(time.time() * 1000)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique("lat")})
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        msgs = []
        deadline = time.monotonic() + TIMEOUT
        while len(msgs) < 10 and time.monotonic() < deadline:
            msgs += [m for m in c.consume(10, timeout=0.5) if m.error() is None]
    finally:
        c.close()
    assert len(msgs) == 10
    for m in msgs:
        kind, ts = m.timestamp()
        assert kind == TIMESTAMP_LOG_APPEND_TIME
        assert before - 1000 <= ts <= after + 1000


@pytest.mark.parametrize(
    "topic_config, record, expected",
    [
        # A compacted topic only takes records with a key.
        ({"cleanup.policy": "compact"}, {"value": b"no key"}, KafkaError.INVALID_RECORD),
        # Larger than the topic's max.message.bytes.
        (
            {"max.message.bytes": "2000"},
            {"key": b"k", "value": b"x" * 5000},
            KafkaError.MSG_SIZE_TOO_LARGE,
        ),
        # More than message.timestamp.after.max.ms (1 hour) ahead of the broker's clock.
        (
            {},
            {"value": b"future", "timestamp": int(time.time() * 1000) + 86_400_000},
            KafkaError.INVALID_TIMESTAMP,
        ),
    ],
    ids=["compacted-without-key", "too-large", "future-timestamp"],
)
def test_refused_records_get_their_error_and_are_not_stored(
    broker: KipBroker, topic_config: dict, record: dict, expected: int
) -> None:
    topic = unique("refused")
    create_topics(broker.bootstrap, {topic: 1}, topic_config)
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "acks": "all", "message.send.max.retries": 0}
    )
    errors: list = []
    producer.produce(topic, on_delivery=lambda err, msg: errors.append(err), **record)
    assert producer.flush(TIMEOUT) == 0
    assert [e.code() for e in errors] == [expected], errors
    producer.produce(topic, b"fine", key=b"k")  # the partition goes on working
    assert producer.flush(TIMEOUT) == 0
    [rec] = consume_records(broker.bootstrap, topic, 1, timeout=TIMEOUT)
    assert (rec.offset, rec.value) == (0, b"fine")
