"""Delivery-report Messages filled in place (kipproducer.message_layout, issue 15) against
confluent-kafka's own constructor: same fields, same accessors, exact reference counts, and
the constructor path whenever the layout is not one the probe vouches for."""

from __future__ import annotations

import dataclasses
import gc
import pickle
import sys
import tracemalloc

import confluent_kafka
import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, KafkaError

from kipproducer import message_layout
from kipproducer._records import fill_message, message_fill_type
from kipproducer.records import decode_batches, encode_batch

Message = confluent_kafka.Message


@pytest.fixture(autouse=True)
def fill_on():
    """Every test starts with the fill installed as the producer installs it, and leaves it so."""
    assert message_layout.install() is None
    yield
    assert message_layout.install() is None


def _accessors(m) -> tuple:
    return (m.topic(), m.partition(), m.offset(), m.key(), m.value(), m.headers(), m.error(),
            m.timestamp(), m.latency(), m.leader_epoch(), m.delivery_count(), len(m))


CASES = [
    ("topic", 0, 0, b"k", b"v", [("h", b"1")], None, TIMESTAMP_CREATE_TIME, 1_700_000_000_000),
    ("tōpic-ünïcode", 7, 2**62, None, None, None, None, TIMESTAMP_LOG_APPEND_TIME, 0),
    ("t", -1, -1, b"", b"", [], KafkaError(KafkaError._MSG_TIMED_OUT, "late"),
     TIMESTAMP_CREATE_TIME, -1),
    ("t", 2**31 - 1, 123, "str key", "str value", [("a", None), ("a", b"x")],
     KafkaError(KafkaError.INVALID_RECORD), 0, 5),
]


@pytest.mark.parametrize("case", CASES)
def test_a_filled_message_is_the_constructors(case):
    topic, partition, offset, key, value, headers, error, tstype, ts = case
    built = Message(topic, partition, offset, key, value, headers, error, (tstype, ts))
    filled = fill_message(topic, partition, offset, key, value, headers, error, tstype, ts)
    assert type(filled) is Message
    assert _accessors(filled) == _accessors(built)
    assert filled == built
    assert gc.is_tracked(filled)
    assert pickle.loads(pickle.dumps(filled)) == built
    # The setters replace (and release) what the fill stored.
    for m in (filled, built):
        m.set_headers([("new", b"h")])
        m.set_key(b"new key")
        m.set_value(b"new value")
        m.set_topic("new topic")
        m.set_error(None)
    assert _accessors(filled) == _accessors(built)


def test_reference_counts_are_exact():
    topic, key, value = "refcount-topic", b"refcount-key", b"refcount-value"
    headers, error = [("h", b"v")], KafkaError(KafkaError._FAIL, "refcount")
    shared = (topic, key, value, headers, error)
    before = [sys.getrefcount(obj) for obj in shared]
    messages = [fill_message(topic, 0, i, key, value, headers, error, 1, i)
                for i in range(10_000)]
    after = [sys.getrefcount(obj) for obj in shared]
    assert [a - b for a, b in zip(after, before, strict=True)] == [10_000] * 5
    key_refs = sys.getrefcount(key)
    messages[5].set_key(b"other")  # the setter releases the fill's reference
    assert sys.getrefcount(key) == key_refs - 1
    del messages
    gc.collect()
    assert [sys.getrefcount(obj) for obj in shared] == before


def _batch(n: int, *, log_append: bool = False):
    records = [(None if i % 7 == 3 else b"k%06d" % i, None if i % 11 == 5 else b"v" * (i % 50),
                [("source", b"bench")] if i % 3 else [], 1_700_000_000_000 + i)
               for i in range(n)]
    data = encode_batch(records, base_offset=0)
    if log_append:  # the attributes' timestamp-type bit (byte 22, low byte of attributes)
        data = bytearray(data)
        data[22] |= 0x08
        data = bytes(data)
    return data


def _reports(data: bytes, base_offset: int, error, message_type=Message) -> list:
    got = []
    (batch,) = decode_batches(data, validate=False)
    served = batch.deliver(0, batch.record_count, base_offset, "reports", 3, error,
                           lambda err, msg: got.append((err, msg)), message_type,
                           TIMESTAMP_CREATE_TIME)
    assert served == len(got) == batch.record_count
    return got


@pytest.mark.parametrize("base_offset,error,log_append", [
    (1000, None, False), (-1, KafkaError(KafkaError._MSG_TIMED_OUT, "timed out"), False),
    (0, None, True)])
def test_deliver_fills_what_the_fallback_builds(base_offset, error, log_append):
    data = _batch(300, log_append=log_append)
    filled = _reports(data, base_offset, error)
    message_layout.disable()
    assert message_fill_type() is None
    built = _reports(data, base_offset, error)
    assert [(e, _accessors(m)) for e, m in filled] == [(e, _accessors(m)) for e, m in built]
    assert [m for _, m in filled] == [m for _, m in built]


def _snapshots(data: bytes, tamper) -> list:
    """Each report's accessors, read in the callback; ``tamper(i, msg)`` then does what a
    callback may do to a report it does not keep (or keeps: it returns True)."""
    got, kept = [], []

    def on_delivery(err, msg) -> None:
        seen = _accessors(msg)  # the headers as a tuple: holding the list would pin it
        got.append(seen[:5] + (None if seen[5] is None else tuple(seen[5]),) + seen[6:])
        if tamper(len(got) - 1, msg):
            kept.append(msg)

    (batch,) = decode_batches(data, validate=False)
    assert batch.deliver(0, batch.record_count, 5, "reports", 3, None, on_delivery, Message,
                         TIMESTAMP_CREATE_TIME) == batch.record_count
    return got


def _touch(i: int, msg) -> bool:
    """Change some reports the callback drops, keep every fifth: the next reports must not
    show any of it."""
    if i % 4 == 1 and msg.headers() is not None:
        msg.headers().append(("added", b"by the callback"))
    elif i % 4 == 2:
        msg.set_key(b"changed")
        msg.set_headers([("replaced", b"1")])
    elif i % 4 == 3:
        msg.set_value(None)
        msg.set_error(KafkaError(KafkaError._FAIL))
    return i % 5 == 0


def test_reports_the_callback_drops_or_changes_are_exact():
    """A report the callback did not keep carries the next record (recycled in place): what
    every callback sees is what a fresh report of that record holds, however the callback
    used the earlier ones (kept them, changed their headers list, called their setters)."""
    data = _batch(400)
    recycled = _snapshots(data, lambda i, msg: False)
    changed = _snapshots(data, _touch)
    message_layout.disable()
    built = _snapshots(data, lambda i, msg: False)
    assert recycled == built
    assert changed == built


def test_no_leak_over_many_reports():
    data = _batch(1000)
    (batch,) = decode_batches(data, validate=False)

    def deliver_many(rounds: int) -> None:
        for _ in range(rounds):
            batch.deliver(0, 1000, 0, "leak", 0, None, lambda err, msg: None, Message,
                          TIMESTAMP_CREATE_TIME)

    deliver_many(5)
    gc.collect()
    tracemalloc.start()
    try:
        deliver_many(5)
        gc.collect()
        start, _ = tracemalloc.get_traced_memory()
        deliver_many(100)  # 100k reports
        gc.collect()
        end, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert end - start < 64 * 1024


def test_deliver_counts_shared_references_exactly():
    topic = "".join(["shared-", "topic"])  # a str of its own, not interned
    error = KafkaError(KafkaError._MSG_TIMED_OUT, "shared")
    (batch,) = decode_batches(_batch(500), validate=False)
    before = (sys.getrefcount(topic), sys.getrefcount(error))
    kept = []
    batch.deliver(0, 500, -1, topic, 0, error, lambda err, msg: kept.append(msg), Message,
                  TIMESTAMP_CREATE_TIME)
    assert (sys.getrefcount(topic), sys.getrefcount(error)) == (before[0] + 500,
                                                                before[1] + 500)
    assert all(m.topic() is topic and m.error() is error for m in kept)
    kept.clear()
    assert (sys.getrefcount(topic), sys.getrefcount(error)) == before


def test_other_types_use_their_constructor():
    class Report:
        def __init__(self, *args) -> None:
            self.args = args

    got = _reports(_batch(3), 10, None, Report)
    assert [type(m) for _, m in got] == [Report] * 3
    assert got[0][1].args[:3] == ("reports", 3, 10)


def test_the_probe_refuses_what_it_cannot_vouch_for():
    class WithDict(Message):  # a subclass with a __dict__: not the struct the fill knows
        pass

    with pytest.raises(message_layout.LayoutMismatch):
        message_layout.probe(WithDict)
    assert message_layout.install(WithDict) is not None
    assert message_fill_type() is None
    message_layout.install()
    assert message_fill_type() is Message


def test_a_wrong_layout_is_caught_and_falls_back(monkeypatch):
    """Offsets that are wrong (key and value swapped, as another version might order them)
    fail the check of the fill against the constructor: reports stay the constructor's."""
    real = message_layout.probe(Message)
    offsets = dict(real.offsets, key=real.offsets["value"], value=real.offsets["key"])
    monkeypatch.setattr(message_layout, "probe",
                        lambda t: dataclasses.replace(real, offsets=offsets))
    reason = message_layout.install()
    assert reason is not None and "differ" in reason
    assert message_fill_type() is None
    got = _reports(_batch(5), 0, None)
    assert got[1][1].key() == b"k000001" and got[1][1].value() == b"v"
    monkeypatch.undo()
