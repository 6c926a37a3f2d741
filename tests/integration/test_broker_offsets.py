"""Watermarks, offsets by timestamp, ListOffsets specs and DeleteRecords, through librdkafka.

Timestamps are chosen by the producer (CreateTime), so every expected offset is known. One
record carries a timestamp far ahead of its neighbours: Kafka's "first offset whose timestamp
is >= the target" and MAX_TIMESTAMP must both point at it, not at the last record.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import (
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec
from integration_support import KipBroker, consume_records, create_topics, unique

N = 100
OUTLIER = 30  # offset (in partition 0) of the record with the largest timestamp
TIMEOUT = 15.0
BASE_TS = int(time.time() * 1000) - 3_600_000 * 24


def ts_of(partition: int, offset: int) -> int:
    if partition == 0 and offset == OUTLIER:
        return BASE_TS + 10_000_000
    return BASE_TS + offset * 1000 + partition


@pytest.fixture
def filled(kip_broker) -> tuple[KipBroker, str]:
    broker: KipBroker = kip_broker()
    topic = unique("offsets")
    create_topics(broker.bootstrap, {topic: 2})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    for offset in range(N):
        for p in (0, 1):
            producer.produce(topic, b"%d-%d" % (p, offset), partition=p, timestamp=ts_of(p, offset))
    assert producer.flush(TIMEOUT) == 0
    return broker, topic


def new_consumer(broker: KipBroker, **extra) -> Consumer:
    return Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique("offsets"), **extra})


def watermarks(c: Consumer, topic: str, p: int) -> tuple[int, int]:
    return c.get_watermark_offsets(TopicPartition(topic, p), timeout=TIMEOUT, cached=False)


def list_offsets(admin: AdminClient, topic: str, specs: dict[int, OffsetSpec]) -> dict:
    futures = admin.list_offsets({TopicPartition(topic, p): s for p, s in specs.items()})
    return {tp.partition: f.result(TIMEOUT) for tp, f in futures.items()}


def test_watermarks_and_offsets_for_times(filled) -> None:
    broker, topic = filled
    c = new_consumer(broker)
    try:
        assert watermarks(c, topic, 0) == (0, N)
        assert watermarks(c, topic, 1) == (0, N)

        def lookup(partition: int, ts: int) -> int:
            [tp] = c.offsets_for_times([TopicPartition(topic, partition, ts)], timeout=TIMEOUT)
            assert tp.error is None, tp.error
            return tp.offset

        assert lookup(1, 0) == 0  # older than everything: the first record
        assert lookup(1, ts_of(1, 42)) == 42  # exact
        assert lookup(1, ts_of(1, 42) + 1) == 43  # between: the next one
        assert lookup(1, ts_of(1, N - 1) + 1) == OFFSET_END  # newer than everything: none
        # Partition 0: after offset 30 the outlier is the first record late enough.
        assert lookup(0, ts_of(0, 29) + 1) == OUTLIER
        assert lookup(0, ts_of(0, 60)) == OUTLIER
        assert lookup(0, ts_of(0, OUTLIER)) == OUTLIER
        assert lookup(0, ts_of(0, OUTLIER) + 1) == OFFSET_END
        # Several partitions in one request.
        found = c.offsets_for_times(
            [TopicPartition(topic, 0, ts_of(0, 10)), TopicPartition(topic, 1, ts_of(1, 77))],
            timeout=TIMEOUT,
        )
        assert [(tp.partition, tp.offset) for tp in found] == [(0, 10), (1, 77)]
    finally:
        c.close()


def test_admin_list_offsets_specs(filled) -> None:
    broker, topic = filled
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    got = list_offsets(admin, topic, {0: OffsetSpec.earliest(), 1: OffsetSpec.latest()})
    assert (got[0].offset, got[1].offset) == (0, N)

    got = list_offsets(admin, topic, {0: OffsetSpec.max_timestamp(), 1: OffsetSpec.max_timestamp()})
    assert (got[0].offset, got[0].timestamp) == (OUTLIER, ts_of(0, OUTLIER))
    assert (got[1].offset, got[1].timestamp) == (N - 1, ts_of(1, N - 1))

    got = list_offsets(admin, topic, {1: OffsetSpec.for_timestamp(ts_of(1, 5))})
    assert (got[1].offset, got[1].timestamp) == (5, ts_of(1, 5))


def test_delete_records_moves_the_low_watermark(filled) -> None:
    broker, topic = filled
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    def delete(partition: int, before: int):
        [future] = admin.delete_records([TopicPartition(topic, partition, before)]).values()
        return future.result(TIMEOUT)

    assert delete(0, 40).low_watermark == 40
    assert delete(0, 20).low_watermark == 40  # never moves back
    assert delete(1, OFFSET_END).low_watermark == N  # -1: everything below the high watermark
    with pytest.raises(KafkaException) as raised:
        delete(0, N + 1)  # beyond the high watermark
    assert raised.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE

    c = new_consumer(broker)
    try:
        assert watermarks(c, topic, 0) == (40, N)
        assert watermarks(c, topic, 1) == (N, N)
        # A timestamp of a deleted record finds the first record still there.
        [tp] = c.offsets_for_times([TopicPartition(topic, 0, ts_of(0, 5))], timeout=TIMEOUT)
        assert tp.offset == 40
    finally:
        c.close()
    got = list_offsets(admin, topic, {0: OffsetSpec.earliest(), 1: OffsetSpec.earliest()})
    assert (got[0].offset, got[1].offset) == (40, N)

    # A consumer from the beginning starts at the low watermark...
    recs = consume_records(broker.bootstrap, topic, N - 40, partitions=1, timeout=TIMEOUT)
    assert [r.offset for r in recs] == list(range(40, N))
    assert recs[0].value == b"0-40"
    # ...and one told to read a deleted offset is reset (OFFSET_OUT_OF_RANGE → earliest).
    c = new_consumer(broker, **{"auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(topic, 0, 5)])
        msg = None
        deadline = time.monotonic() + TIMEOUT
        while msg is None or msg.error() is not None:
            assert time.monotonic() < deadline, "no record after the reset"
            msg = c.poll(0.5)
        assert msg.offset() == 40
    finally:
        c.close()

    # New records go on at the high watermark, and the low watermarks survive a restart.
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(topic, b"after", partition=1)
    assert producer.flush(TIMEOUT) == 0
    broker.restart()
    c = new_consumer(broker)
    try:
        assert watermarks(c, topic, 0) == (40, N)
        assert watermarks(c, topic, 1) == (N, N + 1)
    finally:
        c.close()
    recs = consume_records(broker.bootstrap, topic, N - 40 + 1, timeout=TIMEOUT)
    assert [(r.offset, r.value) for r in recs if r.partition == 1] == [(N, b"after")]
    assert [r.offset for r in recs if r.partition == 0] == list(range(40, N))
