"""Per-record produce(offset=) / produce(expected_offset=) in C (issue 15).

The common call is appended by ``_accumulator.produce`` with no Python frame; everything
else goes to ``Producer._produce_general``. These tests watch which path a call takes (a spy
in place of the general path) and check that the C path writes what stock consumers read
back exactly, reports each record to its own callback, and that every refusal is the same
once the engine runs and the topic is on the engine's lane (where the C path decides)."""

from __future__ import annotations

import time

import confluent_kafka
import pytest
from confluent_kafka import KafkaError, KafkaException
from kip_support import create_topic, kip_producer, read_confluent, unique

from kipproducer import _accumulator
from kipproducer import producer as kp
from kipproducer.errors import OFFSET_MISMATCH, OffsetOrderError

T0 = int(time.time() * 1000) - 60_000


@pytest.fixture
def general_calls():
    """Names of the keyword arguments of every call that reached the general path."""
    calls: list[tuple[str, ...]] = []
    general = kp.Producer._produce_general

    def spy(self, *args, **kwargs):
        calls.append(tuple(sorted(kwargs)))
        return general(self, *args, **kwargs)

    _accumulator.configure_produce(spy, confluent_kafka.Producer.produce, kp.ENGINE,
                                   kp._PRODUCE_KEYWORDS)
    try:
        yield calls
    finally:
        _accumulator.configure_produce(general, confluent_kafka.Producer.produce, kp.ENGINE,
                                       kp._PRODUCE_KEYWORDS)


def _record(i: int) -> dict:
    return {"key": None if i % 5 == 0 else b"k%d" % i, "value": None if i == 7 else b"v%d" % i,
            "headers": [("h", b"%d" % i)] if i % 2 else None, "timestamp": T0 + i}


def test_offset_produce_in_c_reads_back_exactly(broker, general_calls):
    bootstrap = broker.bootstrap_servers
    topic = create_topic(bootstrap, unique("direct-offsets"))
    offsets = [*range(0, 150), *range(400, 450)]  # a gap: a new batch (or run)
    reports: dict[str, list] = {"a": [], "b": []}

    def on_a(err, msg):
        reports["a"].append((err, msg))

    def on_b(err, msg):
        reports["b"].append((err, msg))

    with kip_producer(bootstrap) as p:
        for n, offset in enumerate(offsets):
            r = _record(offset)
            p.produce(topic, r["value"], r["key"], partition=0, offset=offset,
                      headers=r["headers"], timestamp=r["timestamp"],
                      on_delivery=on_a if n % 3 else on_b)
        # Only the first record (the topic was not on the engine's lane yet) went the long way.
        assert general_calls == [("headers", "offset", "on_delivery", "partition",
                                  "timestamp")]
        assert p.flush(30) == 0
    log = read_confluent(bootstrap, topic, 1, expected=len(offsets))
    assert [r.offset for r in log] == offsets
    for rec in log:
        r = _record(rec.offset)
        assert (rec.key, rec.value, rec.headers, rec.timestamp[1]) == (
            r["key"], r["value"], tuple(r["headers"] or ()), r["timestamp"])
    got = {msg.offset(): (name, msg) for name, pile in reports.items() for err, msg in pile
           if err is None}
    assert sorted(got) == offsets and not [e for pile in reports.values() for e, _ in pile if e]
    for n, offset in enumerate(offsets):
        name, msg = got[offset]
        assert name == ("a" if n % 3 else "b")
        assert (msg.key(), msg.value(), msg.partition()) == (_record(offset)["key"],
                                                             _record(offset)["value"], 0)


def test_expected_offset_produce_in_c(broker, general_calls):
    bootstrap = broker.bootstrap_servers
    topic = create_topic(bootstrap, unique("direct-expected"))
    errors = []
    with kip_producer(bootstrap) as p:
        for i in range(100):
            p.produce(topic, b"v%d" % i, b"k%d" % i, partition=0, expected_offset=i,
                      on_delivery=lambda err, msg: errors.append(err))
        assert p.flush(30) == 0
        assert errors == [None] * 100
        # An expectation the log does not meet: refused by the broker, reported as such.
        p.produce(topic, b"late", partition=0, expected_offset=50,
                  on_delivery=lambda err, msg: errors.append(err))
        assert p.flush(30) == 0
    assert len(general_calls) == 1
    assert errors[-1].code() == OFFSET_MISMATCH and errors[-1].log_end_offset == 100
    log = read_confluent(bootstrap, topic, 1, expected=100)
    assert [(r.offset, r.value) for r in log] == [(i, b"v%d" % i) for i in range(100)]


def test_refusals_are_the_same_on_the_engine_lane(broker, general_calls):
    bootstrap = broker.bootstrap_servers
    topic = create_topic(bootstrap, unique("direct-refusals"))
    with kip_producer(bootstrap, message_max_bytes=10_000) as p:
        p.produce(topic, b"v0", partition=0, offset=0)
        p.produce(topic, b"v1", partition=0, offset=1)
        assert len(general_calls) == 1  # from here on, the C path decides
        with pytest.raises(OffsetOrderError):
            p.produce(topic, b"x", partition=0, offset=1)
        with pytest.raises(ValueError, match="not both"):
            p.produce(topic, b"x", partition=0, offset=5, expected_offset=5)
        with pytest.raises(ValueError, match="explicit partition"):
            p.produce(topic, b"x", offset=5)
        with pytest.raises(ValueError, match="explicit partition"):
            p.produce(topic, b"x", partition=-1, expected_offset=5)
        with pytest.raises(TypeError, match="unexpected keyword"):
            p.produce(topic, b"x", partition=0, offset=5, bogus=1)
        with pytest.raises(KafkaException) as too_big:
            p.produce(topic, b"x" * 20_000, partition=0, offset=5)
        assert too_big.value.args[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
        with pytest.raises(TypeError):
            p.produce(topic, 12345, partition=0, offset=5)
        # Positional arguments take the general path, with the same outcome.
        p.produce(topic, b"v2", None, 0, offset=2)
        assert len(p) == 3
        assert p.flush(30) == 0
    assert [r.value for r in read_confluent(bootstrap, topic, 1, expected=3)] == [
        b"v0", b"v1", b"v2"]


def test_plain_produce_still_goes_to_librdkafka(broker, general_calls):
    bootstrap = broker.bootstrap_servers
    topic = create_topic(bootstrap, unique("direct-plain"))
    with kip_producer(bootstrap) as p:
        for i in range(10):
            p.produce(topic, b"v%d" % i, partition=0)
        assert general_calls == []  # straight to confluent-kafka's produce()
        assert p._engine is None
        assert p.flush(30) == 0
    assert len(read_confluent(bootstrap, topic, 1, expected=10)) == 10
