"""kafka-python against the broker subprocess: produce (plain and idempotent), consume, and a
group that commits and is resumed exactly at its committed offsets by a new consumer."""

from __future__ import annotations

import time

import pytest
from integration_support import KipBroker, consume_records, create_topics, unique
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import RebalanceInProgressError
from kafka.structs import OffsetAndMetadata

TIMEOUT = 15.0
PARTITIONS = 2


@pytest.fixture(scope="module")
def broker(module_broker_factory) -> KipBroker:
    return module_broker_factory()


def producer(broker: KipBroker, **extra) -> KafkaProducer:
    return KafkaProducer(
        bootstrap_servers=broker.bootstrap,
        request_timeout_ms=int(TIMEOUT * 1000),
        max_block_ms=int(TIMEOUT * 1000),
        **extra,
    )


def consumer(broker: KipBroker, *topics: str, **extra) -> KafkaConsumer:
    """A consumer subscribed to ``topics`` once it knows their partitions.

    kafka-python's group leader assigns from the metadata it holds when it joins, and for
    topics named at construction it does not wait for their first Metadata answer: a few runs
    in dozens logged its range assignor's "No partition metadata for topic" and kept an empty
    assignment for the test's whole 15 s. Asking for the topic's partitions first (and failing
    if the broker never reports them) makes the join start from the topic's metadata."""
    c = _consumer(broker, **extra)
    if topics:
        deadline = time.monotonic() + TIMEOUT
        for topic in topics:
            while not c.partitions_for_topic(topic):
                assert time.monotonic() < deadline, f"the broker never reported {topic}"
                time.sleep(0.05)
        c.subscribe(list(topics))
    return c


def _consumer(broker: KipBroker, **extra) -> KafkaConsumer:
    return KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        check_crcs=True,
        request_timeout_ms=int(TIMEOUT * 1000) + 1000,
        # The broker's group.min.session.timeout.ms (6 s) is the floor.
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
        **extra,
    )


def drain(c: KafkaConsumer, n: int, timeout: float = TIMEOUT) -> list:
    """Exactly ``n`` records from ``c`` (then a short wait shows there are no more)."""
    out: list = []
    deadline = time.monotonic() + timeout
    while len(out) < n:
        assert time.monotonic() < deadline, f"got {len(out)} of {n} records"
        for records in c.poll(timeout_ms=200, max_records=n - len(out)).values():
            out.extend(records)
    assert not c.poll(timeout_ms=300), "more records than produced"
    return out


@pytest.mark.parametrize(
    "settings",
    [
        {"acks": 1},
        {"acks": "all", "enable_idempotence": True},
        {"acks": "all", "enable_idempotence": True, "compression_type": "gzip"},
        {"acks": "all", "enable_idempotence": True, "compression_type": "lz4"},
        {"acks": "all", "enable_idempotence": True, "compression_type": "zstd"},
        {"acks": "all", "compression_type": "snappy", "linger_ms": 5},
    ],
    ids=["acks1", "idempotent", "gzip", "lz4", "zstd", "snappy"],
)
def test_produce_and_consume(broker: KipBroker, settings: dict) -> None:
    topic = unique("kp")
    create_topics(broker.bootstrap, {topic: PARTITIONS})
    p = producer(broker, **settings)
    base_ts = int(time.time() * 1000) - 60_000
    sent = []
    try:
        futures = [
            p.send(
                topic,
                key=b"k%d" % (i % 10),
                value=b"value-%d" % i,
                headers=[("n", b"%d" % i)],
                timestamp_ms=base_ts + i,
                partition=i % PARTITIONS,
            )
            for i in range(500)
        ]
        sent = [f.get(timeout=TIMEOUT) for f in futures]
    finally:
        p.close(timeout=TIMEOUT)
    for partition in range(PARTITIONS):
        offsets = [m.offset for m in sent if m.partition == partition]
        assert offsets == list(range(250))

    c = consumer(broker, topic, group_id=None)
    try:
        got = drain(c, 500)
    finally:
        c.close()
    by_value = {r.value: r for r in got}
    assert len(by_value) == 500
    for i, meta in enumerate(sent):
        r = by_value[b"value-%d" % i]
        assert (r.partition, r.offset) == (meta.partition, meta.offset)
        assert (r.key, r.timestamp, list(r.headers)) == (
            b"k%d" % (i % 10),
            base_ts + i,
            [("n", b"%d" % i)],
        )
    # Another client reads the same bytes the same way (check.crcs on).
    assert len(consume_records(broker.bootstrap, topic, 500, timeout=TIMEOUT)) == 500


def commit_through_rebalance(consumer: KafkaConsumer, offsets: dict | None = None) -> None:
    """commit(), tried again after a poll() while the group rebalances (what kafka-python's
    RebalanceInProgressError tells its user to do; a loaded machine can delay a heartbeat
    enough for the broker to start one)."""
    for _ in range(50):
        try:
            consumer.commit(offsets)
            return
        except RebalanceInProgressError:
            # rejoins the group; update_offsets=False: what it returns does not move the
            # positions a commit() without offsets would commit
            consumer.poll(timeout_ms=200, max_records=1, update_offsets=False)
    raise AssertionError("the group never settled for a commit")


def test_group_commit_then_new_consumer_resumes(broker: KipBroker) -> None:
    topic, group = unique("kp-group"), unique("kp-group")
    create_topics(broker.bootstrap, {topic: PARTITIONS})
    p = producer(broker, acks="all", enable_idempotence=True)
    try:
        for f in [p.send(topic, b"%d-%d" % (i % 2, i // 2), partition=i % 2) for i in range(200)]:
            f.get(timeout=TIMEOUT)
    finally:
        p.close(timeout=TIMEOUT)

    first = consumer(broker, topic, group_id=group)
    try:
        drain(first, 200)  # everything, though only a prefix is committed below
        committed = {0: 37, 1: 64}
        commit_through_rebalance(first, {
            TopicPartition(topic, part): OffsetAndMetadata(o, "", -1)
            for part, o in committed.items()
        })
        for part, o in committed.items():
            assert first.committed(TopicPartition(topic, part)) == o
    finally:
        first.close()  # leaves the group

    second = consumer(broker, topic, group_id=group)
    try:
        got = drain(second, 200 - sum(committed.values()))
        # Then it commits its own position, and a third consumer finds nothing to read.
        commit_through_rebalance(second)
    finally:
        second.close()
    for part, start in committed.items():
        seen = [(r.offset, r.value) for r in got if r.partition == part]
        assert seen == [(o, b"%d-%d" % (part, o)) for o in range(start, 100)]

    third = consumer(broker, topic, group_id=group)
    try:
        deadline = time.monotonic() + TIMEOUT
        while not third.assignment():  # joined, positions fetched from the committed offsets
            assert time.monotonic() < deadline, "never assigned"
            assert not third.poll(timeout_ms=200)
        assert not third.poll(timeout_ms=500)
        for part in range(PARTITIONS):
            assert third.position(TopicPartition(topic, part)) == 100
    finally:
        third.close()
