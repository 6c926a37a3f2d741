"""KIP-391 (produce with offsets) through ``kipproducer.Producer``, read by stock consumers.

A source log's offsets 0..99, 1000..1099 and 5000 (gaps kept) are written with
``produce(..., offset=)`` and with ``produce_arrays(offsets=)``; librdkafka and kafka-python
consumers must read exactly those offsets with the producer's keys, values, headers and
timestamps. Replays below the log end are refused with INVALID_PRODUCE_OFFSET and the log end;
an idempotent retry of a batch that did land succeeds with its original offsets.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition
from kip_support import (
    create_topic,
    kip_producer,
    read_confluent,
    read_kafka_python,
    unique,
    watermarks,
)

from kipproducer import BatchDelivery
from kipproducer.errors import (
    INVALID_PRODUCE_OFFSET,
    InvalidProduceOffsetError,
    OffsetOrderError,
    ProduceOffsetKafkaError,
)

SOURCE_OFFSETS = [*range(100), *range(1000, 1100), 5000]
LOG_END = 5001
T0 = int(time.time() * 1000) - 60_000  # recent: older records would meet time retention


def source_record(offset: int) -> tuple:
    """(key, value, headers, timestamp) of the source log's record at ``offset``."""
    return (b"k-%d" % offset, b"value-%d" % offset, (("src", b"%d" % offset),), T0 + offset)


def write_source(bootstrap: str, topic: str, lane: str) -> list:
    """Write the source log with one producer; returns its delivery reports."""
    reports: list = []

    def on_delivery(err, report) -> None:
        reports.append((err, report))

    records = [source_record(o) for o in SOURCE_OFFSETS]
    with kip_producer(bootstrap) as p:
        if lane == "produce":
            for offset, (key, value, headers, ts) in zip(SOURCE_OFFSETS, records, strict=True):
                p.produce(topic, value, key, partition=0, offset=offset, headers=list(headers),
                          timestamp=ts, on_delivery=on_delivery)
        else:
            assert p.produce_arrays(
                topic, np.array([r[1] for r in records], dtype=object),
                keys=np.array([r[0] for r in records], dtype=object),
                headers=[list(r[2]) for r in records],
                timestamps=np.array([r[3] for r in records], dtype=np.int64),
                partition=0, offsets=np.array(SOURCE_OFFSETS, dtype=np.int64),
                on_delivery=on_delivery) == len(records)
        assert p.flush(30) == 0
    return reports


def as_source(records) -> list[tuple]:
    return [(r.offset, (r.key, r.value, r.headers, r.timestamp[1])) for r in records]


EXPECTED_LOG = [(o, source_record(o)) for o in SOURCE_OFFSETS]


def first_after_seek(bootstrap: str, topic: str, offset: int) -> tuple[int, int]:
    """(librdkafka, kafka-python): the offset of the first record each reads from ``offset``."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("seek"),
                  "enable.auto.commit": False, "check.crcs": True})
    try:
        c.assign([TopicPartition(topic, 0, offset)])
        msg = None
        deadline = time.monotonic() + 20
        while msg is None and time.monotonic() < deadline:
            msg = c.poll(0.2)
            assert msg is None or msg.error() is None, msg.error()
        assert msg is not None, "librdkafka read nothing after the seek"
        confluent_first = msg.offset()
    finally:
        c.close()
    kp = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, check_crcs=True)
    try:
        tp = KpTopicPartition(topic, 0)
        kp.assign([tp])
        kp.seek(tp, offset)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            batch = kp.poll(200, max_records=1).get(tp)
            if batch:
                return confluent_first, batch[0].offset
        raise AssertionError("kafka-python read nothing after the seek")
    finally:
        kp.close()


@pytest.mark.parametrize("lane", ["produce", "produce_arrays"])
def test_preserved_offsets_seen_by_stock_consumers(broker, lane):
    bootstrap = broker.bootstrap_servers
    topic = create_topic(bootstrap, unique(f"preserved-{lane.replace('_', '-')}"))
    reports = write_source(bootstrap, topic, lane)

    assert all(err is None for err, _ in reports), [e for e, _ in reports if e][:3]
    if lane == "produce":
        # One Message per record, at the offset it was written to.
        assert [(m.offset(), m.key(), m.value()) for _, m in reports] == [
            (o, b"k-%d" % o, b"value-%d" % o) for o in SOURCE_OFFSETS]
    else:
        # One BatchDelivery per batch: a gap starts a new batch.
        assert all(isinstance(r, BatchDelivery) for _, r in reports)
        assert [(r.partition(), r.offset(), r.count) for _, r in reports] == [
            (0, 0, 100), (0, 1000, 100), (0, 5000, 1)]

    assert as_source(read_confluent(bootstrap, topic, 1, expected=201)) == EXPECTED_LOG
    assert as_source(read_kafka_python(bootstrap, topic, 1, expected=201)) == EXPECTED_LOG
    assert watermarks(bootstrap, topic) == (0, LOG_END)
    # A consumer placed inside the gap reads the next record that exists.
    assert first_after_seek(bootstrap, topic, 500) == (1000, 1000)


def test_replay_is_refused_with_the_log_end_and_changes_nothing(broker):
    bootstrap = broker.bootstrap_servers
    topic = create_topic(bootstrap, unique("replay"))
    write_source(bootstrap, topic, "produce")

    # A fresh producer replays offsets 0..99 record by record.
    reports: list = []
    with kip_producer(bootstrap) as replayer:
        for o in range(100):
            replayer.produce(topic, b"replayed-%d" % o, b"k-%d" % o, partition=0, offset=o,
                             on_delivery=lambda err, msg: reports.append((err, msg)))
        assert replayer.flush(30) == 0
        assert len(reports) == 100
        for err, msg in reports:
            assert isinstance(err, ProduceOffsetKafkaError) and isinstance(err, KafkaError)
            assert (err.code(), err.name(), err.log_end_offset) == (
                INVALID_PRODUCE_OFFSET, "INVALID_PRODUCE_OFFSET", LOG_END)
            assert not err.retriable()
            assert msg.error() is err
        # The same producer refuses to go back locally: offsets only move forward.
        with pytest.raises(OffsetOrderError):
            replayer.append(topic, [b"again"], partition=0, offsets=np.array([0], np.int64))

    # The waiting API, from another fresh producer: one batch, refused as a whole.
    with kip_producer(bootstrap) as replayer:
        with pytest.raises(InvalidProduceOffsetError) as info:
            replayer.append(topic, [b"replayed-%d" % o for o in range(100)], partition=0,
                            offsets=np.arange(100, dtype=np.int64))
        assert isinstance(info.value, KafkaException)
        assert info.value.log_end_offset == LOG_END
        assert info.value.args[0].code() == INVALID_PRODUCE_OFFSET
        assert info.value.args[0].log_end_offset == LOG_END
        # Just below the log end is still below it.
        with pytest.raises(InvalidProduceOffsetError) as info:
            replayer.append(topic, [b"late"], partition=0, offsets=np.array([5000], np.int64))
        assert info.value.log_end_offset == LOG_END

    assert as_source(read_confluent(bootstrap, topic, 1, expected=201)) == EXPECTED_LOG
    assert watermarks(bootstrap, topic) == (0, LOG_END)


@pytest.mark.parametrize("idempotent", [True, False], ids=["idempotent", "plain"])
def test_retry_after_lost_response_keeps_the_original_offsets(proxied_broker, idempotent):
    """The broker writes an offset batch but the connection is cut before its response
    arrives; the engine sends the batch again. Idempotent: the duplicate check comes before
    the offset check, so the retry succeeds with its original offsets. Without idempotence
    the retry is below the log end: INVALID_PRODUCE_OFFSET, with the log end just after the
    batch (KIP-WIRE §8). Either way the log holds the batch exactly once."""
    b, proxy = proxied_broker
    topic = create_topic(b.bootstrap_servers, unique("cut-offsets"))
    offsets = np.arange(40, 140, dtype=np.int64)
    values = [b"cut-%d" % o for o in offsets]
    reports: list = []
    with kip_producer(b.bootstrap_servers, enable_idempotence=idempotent) as p:
        # Before the cut, one batch the normal way: the producer is connected (and holds a
        # producer id); the cut batch is not its first.
        assert p.append(topic, [b"first"], partition=0, offsets=np.array([7], np.int64)) == 7
        requests_before, connections_before = proxy.produce_requests, proxy.accepted
        proxy.drop_next_produce_response()
        p.produce_arrays(topic, values, partition=0, offsets=offsets, per_record=True,
                         on_delivery=lambda err, msg: reports.append((err, msg)))
        assert p.flush(30) == 0
    assert proxy.dropped.is_set(), "the proxy never cut the batch's response"
    assert proxy.produce_requests >= requests_before + 2, "the batch was not sent again"
    assert proxy.accepted > connections_before
    assert len(reports) == 100
    if idempotent:
        assert [(err, msg.offset()) for err, msg in reports] == [(None, int(o)) for o in offsets]
    else:
        for err, _ in reports:
            assert (err.code(), err.log_end_offset) == (INVALID_PRODUCE_OFFSET, 140)
    log = read_confluent(b.bootstrap_servers, topic, 1, expected=101)
    assert [(r.offset, r.value) for r in log] == [(7, b"first"),
                                                  *zip(offsets.tolist(), values, strict=True)]


def test_kip_calls_refused_at_the_call(broker):
    """What the modes cannot do is a ValueError at the call, before anything is queued."""
    bootstrap = broker.bootstrap_servers
    topic = create_topic(bootstrap, unique("refused-call"))
    with kip_producer(bootstrap, acks=0) as p:
        with pytest.raises(ValueError, match="acks=0"):
            p.produce(topic, b"v", partition=0, offset=0)
        with pytest.raises(ValueError, match="acks=0"):
            p.produce(topic, b"v", partition=0, expected_offset=0)
        with pytest.raises(ValueError, match="acks=0"):
            p.produce_arrays(topic, [b"v"], partition=0, offsets=np.array([0], np.int64))
        with pytest.raises(ValueError, match="acks=0"):
            p.append(topic, [b"v"], partition=0, expected_offset=0)
        assert len(p) == 0
    with kip_producer(bootstrap) as p:
        with pytest.raises(ValueError, match="not both"):
            p.produce(topic, b"v", partition=0, offset=0, expected_offset=0)
        with pytest.raises(ValueError, match="partition"):
            p.produce(topic, b"v", expected_offset=0)
        with pytest.raises(ValueError, match="partition"):
            p.produce_arrays(topic, [b"v"], expected_offset=0)
        assert len(p) == 0
    assert watermarks(bootstrap, topic) == (0, 0)
