"""Bounds and refusals: a full queue, an unknown topic, a message too large, purge()."""

from __future__ import annotations

import time
import tracemalloc

import numpy as np
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from producer_support import create_topic, free_port, read_confluent, unique

from kipproducer import producer as kp
from kipproducer.broker.embedded import EmbeddedBroker


@pytest.fixture(scope="module")
def strict_kip():
    """A broker that does not create topics on demand."""
    with EmbeddedBroker(config={"auto.create.topics.enable": "false"}) as broker:
        yield broker.bootstrap_servers


def test_produce_batch_marks_queue_full(kip):
    topic = create_topic(kip.bootstrap, unique("qfull-batch"), 2)
    p = kp.Producer({"bootstrap.servers": kip.bootstrap, "queue.buffering.max.messages": 500,
                     "linger.ms": 5})
    delivered = []
    messages = [{"value": b"%06d" % i, "key": b"%d" % (i % 7)} for i in range(5000)]
    first = p.produce_batch(topic, messages, on_delivery=lambda e, m: delivered.append(
        (e, m.value())))
    assert 0 < first <= 500
    assert len([m for m in messages if "_error" in m]) == 5000 - first
    assert all(m["_error"].code() == KafkaError._QUEUE_FULL for m in messages[first:])
    assert all("_error" not in m for m in messages[:first])
    # The confluent-kafka way: serve reports, then try the failed ones again.
    rounds = 0
    pending = messages[first:]
    while pending:
        rounds += 1
        assert rounds < 500
        for m in pending:
            del m["_error"]
        p.poll(0.01)
        p.produce_batch(topic, pending, on_delivery=lambda e, m: delivered.append(
            (e, m.value())))
        pending = [m for m in pending if "_error" in m]
    assert p.flush(20) == 0 and len(p) == 0
    assert len(delivered) == 5000 and all(e is None for e, _ in delivered)
    values = [r.value for r in read_confluent(kip.bootstrap, topic, 2, expected=5000)]
    assert sorted(values) == [b"%06d" % i for i in range(5000)]
    p.close()


@pytest.mark.parametrize("bound", [{"queue.buffering.max.messages": 300},
                                   {"queue.buffering.max.kbytes": 8}])
def test_produce_arrays_blocks_until_served(kip, bound):
    topic = create_topic(kip.bootstrap, unique("qfull-arrays"), 1)
    p = kp.Producer({"bootstrap.servers": kip.bootstrap, "linger.ms": 5, **bound})
    counted = []
    n = 20_000
    values = np.array([b"%06d" % i for i in range(n)], dtype=object)
    assert p.produce_arrays(topic, values, on_delivery=lambda e, r: counted.append(
        (e, r.count))) == n
    assert counted, "produce_arrays served delivery reports while it waited"
    assert p.flush(20) == 0 and len(p) == 0
    assert all(e is None for e, _ in counted) and sum(c for _, c in counted) == n
    got = [r.value for r in read_confluent(kip.bootstrap, topic, 1, expected=n)]
    assert got == list(values)
    # (data, offsets) columns resume at the right record after each partial append too.
    data = np.frombuffer(b"".join(values), dtype=np.uint8)
    offsets = np.arange(0, 6 * n + 1, 6, dtype=np.int64)
    assert p.produce_arrays(topic, (data, offsets), keys=(data, offsets)) == n
    assert p.flush(20) == 0
    got = read_confluent(kip.bootstrap, topic, 1, expected=2 * n)[n:]
    assert [r.value for r in got] == list(values) == [r.key for r in got]
    p.close()


def test_a_loop_that_never_polls_does_not_hold_the_delivered_batches(kip):
    """produce_arrays calls that never block never serve reports, so the reports pile up
    until flush(); the batches they report go back to the buffer pool when the broker
    answers, not when the report is served: 100 MB sent, held reports or not, far less in
    memory."""
    topic = create_topic(kip.bootstrap, unique("unpolled"), 1)
    p = kp.Producer({"bootstrap.servers": kip.bootstrap, "linger.ms": 5})
    watch = Consumer({"bootstrap.servers": kip.bootstrap, "group.id": unique("watch")})
    values = np.array([b"v" * 10_000] * 500, dtype=object)  # 5 MB a call
    counted = []
    p.produce_arrays(topic, values[:1], on_delivery=lambda e, r: counted.append(r.count))
    assert p.flush(20) == 0
    tracemalloc.start()
    try:
        for call in range(1, 21):
            p.produce_arrays(topic, values, on_delivery=lambda e, r: counted.append(r.count))
            deadline = time.monotonic() + 30
            while watch.get_watermark_offsets(TopicPartition(topic, 0), 5)[1] < 1 + 500 * call:
                assert time.monotonic() < deadline
                time.sleep(0.01)
        deadline = time.monotonic() + 10
        while tracemalloc.get_traced_memory()[0] > 40 << 20:
            assert time.monotonic() < deadline, (
                f"{tracemalloc.get_traced_memory()[0] >> 20} MiB held after 100 MB delivered")
            time.sleep(0.05)
        assert sum(counted) == 1  # no report was served: they all still wait
    finally:
        tracemalloc.stop()
        watch.close()
    assert p.flush(30) == 0 and sum(counted) == 1 + 20 * 500
    p.close()


def test_unknown_topic(strict_kip):
    # (librdkafka waits topic.metadata.propagation.max.ms for a topic to appear)
    p = kp.Producer({"bootstrap.servers": strict_kip, "topic.metadata.propagation.max.ms": 500})
    topic = unique("no-such-topic")
    with pytest.raises(KafkaException) as info:
        p.produce_arrays(topic, [b"a", b"b"])
    assert info.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    with pytest.raises(KafkaException) as info:
        p.produce_batch(topic, [{"value": b"a"}])
    assert info.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert len(p) == 0
    # With an explicit partition nothing is asked up front: the records fail when sent.
    reports = []
    assert p.produce_arrays(topic, [b"a", b"b"], partition=0,
                            on_delivery=lambda e, r: reports.append((e, r.count))) == 2
    assert p.flush(20) == 0
    assert [(e.code(), c) for e, c in reports] == [(KafkaError.UNKNOWN_TOPIC_OR_PART, 2)]
    # librdkafka's lane reports the same error (after topic.metadata.propagation.max.ms).
    plain = []
    p.produce(topic, b"x", on_delivery=lambda e, m: plain.append(e))
    p.flush(20)
    assert [e.code() for e in plain] == [KafkaError.UNKNOWN_TOPIC_OR_PART]
    p.close()


def test_topics_are_auto_created_as_for_librdkafka(kip):
    """allow.auto.create.topics (librdkafka's producer default: true) holds for both lanes."""
    topic = unique("auto")
    p = kp.Producer({"bootstrap.servers": kip.bootstrap})
    assert p.produce_arrays(topic, [b"a", b"b"]) == 2
    assert p.flush(10) == 0
    assert [r.value for r in read_confluent(kip.bootstrap, topic, 1, expected=2)] == [
        b"a", b"b"]
    p.close()
    p = kp.Producer({"bootstrap.servers": kip.bootstrap, "allow.auto.create.topics": False})
    with pytest.raises(KafkaException) as info:
        p.produce_arrays(unique("not-created"), [b"a"])
    assert info.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    p.close()


def test_message_too_large(kip):
    topic = create_topic(kip.bootstrap, unique("too-large"), 1)
    p = kp.Producer({"bootstrap.servers": kip.bootstrap, "message.max.bytes": 10_000})
    values = [b"ok", b"x" * 10_001, b"ok"]
    with pytest.raises(KafkaException) as info:
        p.produce_arrays(topic, values)
    assert info.value.args[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
    with pytest.raises(KafkaException) as info:  # key + value count
        p.produce_arrays(topic, [b"x" * 6000], keys=[b"k" * 6000])
    assert info.value.args[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert len(p) == 0  # nothing of a refused call was enqueued
    assert p.produce_arrays(topic, [b"fine" * 100]) == 1
    assert p.flush(10) == 0
    assert [r.value for r in read_confluent(kip.bootstrap, topic, 1, expected=1)] == [
        b"fine" * 100]
    p.close()


@pytest.mark.parametrize("idempotence", [False, True])
def test_broker_refuses_a_batch(kip, idempotence):
    """The broker's max.message.bytes refuses a batch: its records fail with
    MSG_SIZE_TOO_LARGE, the records before and after it are delivered once."""
    topic = unique("broker-refuses")
    admin = AdminClient({"bootstrap.servers": kip.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"max.message.bytes": "3000"})])[
        topic].result(10)
    p = kp.Producer({"bootstrap.servers": kip.bootstrap, "enable.idempotence": idempotence,
                     "linger.ms": 50})
    got = []

    def report(err, msg):
        got.append((err.code() if err else None, msg.value()[:6]))

    p.produce_batch(topic, [{"value": b"before"}], on_delivery=report)
    assert p.flush(10) == 0
    p.produce_batch(topic, [{"value": b"with"}, {"value": b"x" * 5000}], on_delivery=report)
    assert p.flush(10) == 0
    p.produce_arrays(topic, [b"after1", b"after2"], per_record=True, on_delivery=report)
    assert p.flush(10) == 0
    too_large = KafkaError.MSG_SIZE_TOO_LARGE
    assert got == [(None, b"before"), (too_large, b"with"), (too_large, b"xxxxxx"),
                   (None, b"after1"), (None, b"after2")]
    assert [r.value for r in read_confluent(kip.bootstrap, topic, 1, expected=3)] == [
        b"before", b"after1", b"after2"]
    p.close()


def test_purge_drops_queued_engine_records(kip):
    topic = create_topic(kip.bootstrap, unique("purge"), 1)
    p = kp.Producer({"bootstrap.servers": kip.bootstrap, "linger.ms": 60_000})
    arrays, batch, plain = [], [], []
    p.produce_arrays(topic, [b"a%d" % i for i in range(100)],
                     on_delivery=lambda e, r: arrays.append((e, r.count)))
    p.produce_batch(topic, [{"value": b"b%d" % i} for i in range(10)],
                    on_delivery=lambda e, m: batch.append((e, m.value())))
    assert len(p) == 110
    p.purge(in_queue=False)  # librdkafka's semantics: only in-flight ones; none here
    assert len(p) == 110
    p.purge()
    assert p.flush(10) == 0 and len(p) == 0
    assert [(e.code(), c) for e, c in arrays] == [(KafkaError._PURGE_QUEUE, 100)]
    assert [e.code() for e, _ in batch] == [KafkaError._PURGE_QUEUE] * 10
    assert [v for _, v in batch] == [b"b%d" % i for i in range(10)]
    # The producer goes on working after a purge.
    p.produce(topic, b"plain", on_delivery=lambda e, m: plain.append(e))
    p.produce_arrays(topic, [b"after"])
    assert p.flush(10) == 0
    assert plain == [None]
    assert [r.value for r in read_confluent(kip.bootstrap, topic, 1, expected=2)] == [
        b"plain", b"after"]
    p.close()


def test_purge_frees_the_queue_bounds_at_once(kip):
    """After purge() returns, the purged records' share of queue.buffering.max.messages is
    free: a full queue takes as many records again, none refused with _QUEUE_FULL."""
    topic = create_topic(kip.bootstrap, unique("purge-room"), 1)
    p = kp.Producer({"bootstrap.servers": kip.bootstrap, "linger.ms": 60_000,
                     "queue.buffering.max.messages": 50})
    for _ in range(3):
        messages = [{"value": b"v%d" % i} for i in range(50)]
        assert p.produce_batch(topic, messages, partition=0) == 50
        assert not [m["_error"] for m in messages if "_error" in m]
        p.purge()
    assert p.flush(10) == 0
    p.close()


def test_unknown_partition_fails_promptly(kip):
    """A partition the topic does not have: _UNKNOWN_PARTITION now, as librdkafka reports it,
    not _MSG_TIMED_OUT after delivery.timeout.ms."""
    topic = create_topic(kip.bootstrap, unique("partitions"), 2)
    p = kp.Producer({"bootstrap.servers": kip.bootstrap})
    got = []
    p.produce(topic, b"v", partition=5, on_delivery=lambda e, m: got.append(("plain", e)))
    assert p.flush(10) == 0
    p.produce_arrays(topic, [b"a", b"b"], partition=5,
                     on_delivery=lambda e, r: got.append(("arrays", e)))
    p.produce_batch(topic, [{"value": b"c", "partition": 7}, {"value": b"d", "partition": 1}],
                    on_delivery=lambda e, m: got.append(("batch", e)))
    assert p.flush(10) == 0
    codes = [(lane, e.code() if e else None) for lane, e in got]
    assert sorted(codes, key=str) == sorted([
        ("plain", KafkaError._UNKNOWN_PARTITION), ("arrays", KafkaError._UNKNOWN_PARTITION),
        ("batch", KafkaError._UNKNOWN_PARTITION), ("batch", None)], key=str)
    assert [r.value for r in read_confluent(kip.bootstrap, topic, 2, expected=1)] == [b"d"]
    p.close()


@pytest.mark.parametrize("idempotence", [False, True])
def test_unreachable_broker_times_out(idempotence):
    """Nothing listens: records time out after message.timeout.ms (as librdkafka's do, also
    while an idempotent producer is still waiting for its producer id), and a call that
    needs metadata gives up with _TRANSPORT instead of hanging."""
    port = free_port()
    p = kp.Producer({"bootstrap.servers": f"127.0.0.1:{port}", "message.timeout.ms": 1000,
                     "enable.idempotence": idempotence})
    got = []
    started = time.monotonic()
    p.produce_arrays("t", [b"a", b"b"], partition=0, on_delivery=lambda e, r: got.append(e))
    p.produce_batch("t", [{"value": b"c", "partition": 1}],
                    on_delivery=lambda e, m: got.append(e))
    assert p.flush(10) == 0
    assert time.monotonic() - started < 8
    assert [e.code() for e in got] == [KafkaError._MSG_TIMED_OUT] * 2
    with pytest.raises(KafkaException) as info:
        p.produce_arrays("t", [b"a"])
    assert info.value.args[0].code() == KafkaError._TRANSPORT
    assert time.monotonic() - started < 12
    p.close()


def test_a_failed_sender_fails_records_instead_of_hanging(kip, monkeypatch):
    """Should the sender thread ever die (a bug), every record it held is reported with a
    fatal error, flush() returns, and further bulk calls raise instead of queueing forever.
    (The failure is injected into the engine; the broker and clients are real.)"""
    from kipproducer.engine import engine as engine_module

    topic = create_topic(kip.bootstrap, unique("sender-dies"), 1)
    p = kp.Producer({"bootstrap.servers": kip.bootstrap, "linger.ms": 200})
    got = []
    p.produce_arrays(topic, [b"a"] * 10, on_delivery=lambda e, r: got.append((e, r.count)))

    async def broken_dispatch(self):
        raise RuntimeError("injected sender failure")

    monkeypatch.setattr(engine_module.Engine, "_dispatch", broken_dispatch)
    p.produce_batch(topic, [{"value": b"b"}], on_delivery=lambda e, m: got.append((e, 1)))
    assert p.flush(10) == 0
    assert [(e.code(), e.fatal(), n) for e, n in got] == [(KafkaError._FATAL, True, 10),
                                                          (KafkaError._FATAL, True, 1)]
    with pytest.raises(KafkaException) as info:
        p.produce_arrays(topic, [b"c"])
    assert info.value.args[0].code() == KafkaError._FATAL
    p.close()
