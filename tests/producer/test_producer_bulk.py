"""produce_batch and produce_arrays against kip broker and Tansu, read back by two clients.

Every record is read by librdkafka (``check.crcs=true``) and by kafka-python and compared
field by field (key, value, headers, timestamp) with what was produced, and with what the
delivery callbacks reported: per-record Messages (produce_batch, ``per_record=True``) and
BatchDelivery summaries (produce_arrays).
"""

from __future__ import annotations

import time

import confluent_kafka
import numpy as np
import pyarrow as pa
import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, KafkaError
from producer_support import Rec, create_topic, read_confluent, read_kafka_python, unique

from kipproducer import producer as kp

PARTITIONS = 3
N = 240
# Recent: the broker's time retention (7 days) would delete older records as it should.
BASE_TS = (int(time.time()) - 3600) * 1000


def _records(n: int = N):
    """Keys (None and empty among them), values (a tombstone and an empty one), headers."""
    keys = [None if i % 17 == 3 else b"" if i % 19 == 5 else b"key-%d" % (i % 23)
            for i in range(n)]
    values = [b"value-%05d-" % i + b"x" * (i % 37) for i in range(n)]
    values[7] = None      # a tombstone
    values[11] = b""      # an empty value
    per_record_headers = [
        None if i % 5 == 0 else
        [("seq", b"%d" % i), ("null", None), ("seq", b"dup")] if i % 5 == 1 else
        {"k": b"v%d" % i} if i % 5 == 2 else [] if i % 5 == 3 else [("u", "ünïcode")]
        for i in range(n)]
    timestamps = np.array([BASE_TS + 1000 * i for i in range(n)], dtype=np.int64)
    return keys, values, per_record_headers, timestamps


def _header_tuple(h) -> tuple:
    if h is None:
        return ()
    items = h.items() if isinstance(h, dict) else h
    return tuple((k, v.encode() if isinstance(v, str) else v) for k, v in items)


def _column(kind: str, items: list):
    if kind == "numpy":
        return np.array(items, dtype=object)
    if kind == "pyarrow":
        return pa.array(items, type=pa.binary())
    if kind == "list":
        return list(items)
    if kind == "pair":  # Arrow layout without a validity bitmap: no nulls, so None -> b""
        data = b"".join(x or b"" for x in items)
        offsets = np.zeros(len(items) + 1, dtype=np.int64)
        offsets[1:] = np.cumsum([len(x or b"") for x in items])
        return np.frombuffer(data, dtype=np.uint8), offsets
    raise AssertionError(kind)


def _read_both(bootstrap: str, topic: str, expected: int) -> list[Rec]:
    by_librdkafka = read_confluent(bootstrap, topic, PARTITIONS, expected=expected)
    by_kafka_python = read_kafka_python(bootstrap, topic, PARTITIONS, expected)
    assert len(by_librdkafka) == expected
    assert by_kafka_python == by_librdkafka
    return by_librdkafka


def _check_order(records: list[Rec], order_of) -> None:
    """Within a partition, records are in the order they were produced."""
    by_partition: dict[int, list[int]] = {}
    for r in records:
        by_partition.setdefault(r.partition, []).append(order_of(r))
    for partition, seen in by_partition.items():
        assert seen == sorted(seen), f"partition {partition} out of order"


@pytest.mark.parametrize("kind", ["numpy", "pyarrow", "pair", "list"])
@pytest.mark.parametrize("header_mode", ["shared", "per_record"])
def test_produce_arrays_round_trip(bulk_broker, kind, header_mode):
    topic = create_topic(bulk_broker.bootstrap, unique(f"arrays-{kind}"), PARTITIONS)
    keys, values, per_record_headers, timestamps = _records()
    if kind == "pair":
        keys = [k or b"" for k in keys]
        values = [v or b"" for v in values]
    shared = [("shared", b"1"), ("null", None), ("shared", b"2")]
    headers = shared if header_mode == "shared" else per_record_headers
    reports = []
    p = kp.Producer({"bootstrap.servers": bulk_broker.bootstrap, "linger.ms": 10,
                     "batch.num.messages": 50})
    n = p.produce_arrays(topic, _column(kind, values), keys=_column(kind, keys),
                         headers=headers, timestamps=timestamps,
                         on_delivery=lambda err, report: reports.append((err, report)))
    assert n == N
    assert p.flush(20) == 0
    records = _read_both(bulk_broker.bootstrap, topic, N)

    expected = {}
    for i in range(N):
        h = shared if header_mode == "shared" else per_record_headers[i]
        expected[i] = (keys[i], values[i], _header_tuple(h), int(timestamps[i]))
    index_of = {}
    for r in records:
        i = (int(r.timestamp[1]) - BASE_TS) // 1000
        assert r.timestamp[0] == TIMESTAMP_CREATE_TIME
        assert r.content == expected[i], f"record {i}"
        index_of[(r.partition, r.offset)] = i
    assert sorted(index_of.values()) == list(range(N))
    _check_order(records, lambda r: index_of[(r.partition, r.offset)])
    # One key, one partition.
    part_of_key: dict[bytes, int] = {}
    for r in records:
        if r.key:
            assert part_of_key.setdefault(r.key, r.partition) == r.partition

    # BatchDelivery summaries: counts add up, offsets are exactly the records read.
    assert all(err is None for err, _ in reports)
    assert all(isinstance(rep, kp.BatchDelivery) for _, rep in reports)
    assert sum(rep.count for _, rep in reports) == N == sum(len(rep) for _, rep in reports)
    reported = {(rep.partition(), rep.offset() + j) for _, rep in reports
                for j in range(rep.count)}
    assert reported == set(index_of)
    assert all(rep.topic() == topic and rep.error() is None for _, rep in reports)
    p.close()


def test_produce_arrays_per_record_reports(bulk_broker):
    topic = create_topic(bulk_broker.bootstrap, unique("per-record"), PARTITIONS)
    keys, values, headers, timestamps = _records(100)
    got = []
    p = kp.Producer({"bootstrap.servers": bulk_broker.bootstrap, "linger.ms": 5})
    p.produce_arrays(topic, np.array(values, dtype=object), keys=keys, headers=headers,
                     timestamps=timestamps, per_record=True,
                     on_delivery=lambda err, msg: got.append((err, msg)))
    assert p.flush(20) == 0
    records = {(r.partition, r.offset): r for r in _read_both(bulk_broker.bootstrap, topic,
                                                                100)}
    assert len(got) == 100
    for err, msg in got:
        assert err is None and msg.error() is None
        assert isinstance(msg, confluent_kafka.Message)
        r = records.pop((msg.partition(), msg.offset()))
        assert msg.topic() == topic
        assert (msg.key(), msg.value(), tuple(msg.headers() or ()), msg.timestamp()) == (
            r.key, r.value, r.headers, r.timestamp)
    assert not records
    # The same through the property, for every produce_arrays of the producer.
    got.clear()
    p2 = kp.Producer({"bootstrap.servers": bulk_broker.bootstrap,
                      "kip.delivery.report.per.record": "true"})
    p2.produce_arrays(topic, [b"a", b"b", b"c"], on_delivery=lambda e, m: got.append(m))
    assert p2.flush(10) == 0
    assert [m.value() for m in got] == [b"a", b"b", b"c"]
    assert all(isinstance(m, confluent_kafka.Message) for m in got)
    p.close()
    p2.close()


def test_produce_batch_round_trip(bulk_broker):
    topic = create_topic(bulk_broker.bootstrap, unique("batch"), PARTITIONS)
    keys, values, headers, timestamps = _records(150)
    messages = []
    for i in range(150):
        m = {"value": values[i], "key": keys[i]}
        if headers[i] is not None:
            m["headers"] = headers[i]
        if i % 4 != 0:
            m["timestamp"] = int(timestamps[i])
        if i % 10 == 9:
            m["partition"] = i % PARTITIONS
        messages.append(m)
    messages[20]["value"] = "a str value"        # str values/keys are sent as UTF-8
    messages[20]["key"] = "a str key"
    too_big = {"value": b"x" * 20_000, "key": b"big"}
    messages.insert(30, too_big)
    own = []
    messages[40]["callback"] = lambda err, msg: own.append(msg)
    got = []
    p = kp.Producer({"bootstrap.servers": bulk_broker.bootstrap, "message.max.bytes": 10_000,
                     "linger.ms": 5})
    queued = p.produce_batch(topic, messages, on_delivery=lambda err, msg: got.append(
        (err, msg)))
    assert queued == 150
    errors = [m for m in messages if "_error" in m]
    assert errors == [too_big]
    assert too_big["_error"].code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert p.flush(20) == 0
    records = _read_both(bulk_broker.bootstrap, topic, 150)

    sent = [m for m in messages if "_error" not in m]
    by_value = {}
    for m in sent:
        value = m["value"].encode() if isinstance(m["value"], str) else m["value"]
        by_value[value] = m
    for r in records:
        m = by_value[r.value]
        key = m["key"].encode() if isinstance(m["key"], str) else m["key"]
        assert r.key == key
        assert r.headers == _header_tuple(m.get("headers"))
        if "timestamp" in m:
            assert r.timestamp == (TIMESTAMP_CREATE_TIME, m["timestamp"])
        if "partition" in m:
            assert r.partition == m["partition"]
    order = {id(m): i for i, m in enumerate(sent)}
    _check_order(records, lambda r: order[id(by_value[r.value])])

    # Per-record reports, each a confluent Message with what the consumer sees.
    assert len(got) == 149 and len(own) == 1
    at = {(r.partition, r.offset): r for r in records}
    for err, msg in got + [(None, own[0])]:
        assert err is None
        r = at.pop((msg.partition(), msg.offset()))
        assert (msg.key(), msg.value(), tuple(msg.headers() or ())) == (r.key, r.value,
                                                                        r.headers)
        assert msg.timestamp() == r.timestamp
    assert not at
    assert own[0].value() == messages[40]["value"]  # its own callback, not the call's
    p.close()


def test_produce_batch_matches_confluent_contract(kip):
    """Return value and ``_error`` as confluent-kafka's produce_batch gives them."""
    results = {}
    for name, cls in (("confluent", confluent_kafka.Producer), ("kip", kp.Producer)):
        topic = create_topic(kip.bootstrap, unique(f"contract-{name}"), 1)
        messages = [{"value": b"a"}, {"value": b"x" * 5000}, {"value": "str", "key": "k"},
                    {"value": b"b", "partition": 0}]
        p = cls({"bootstrap.servers": kip.bootstrap, "message.max.bytes": 2000})
        count = p.produce_batch(topic, messages)
        assert p.flush(10) == 0
        results[name] = (count, [m["_error"].code() if "_error" in m else None
                                 for m in messages],
                         [r.value for r in read_confluent(kip.bootstrap, topic, 1, expected=3)])
        with pytest.raises(TypeError):
            p.produce_batch(topic, ({"value": b"x"},))
        p.close()
    assert results["kip"] == results["confluent"] == (
        3, [None, KafkaError.MSG_SIZE_TOO_LARGE, None, None], [b"a", b"str", b"b"])


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_round_trip(bulk_broker, codec):
    topic = create_topic(bulk_broker.bootstrap, unique(f"codec-{codec}"), PARTITIONS)
    keys, values, headers, timestamps = _records()
    p = kp.Producer({"bootstrap.servers": bulk_broker.bootstrap, "compression.type": codec,
                     "batch.num.messages": 64})
    p.produce_arrays(topic, np.array(values, dtype=object), keys=keys, headers=headers,
                     timestamps=timestamps)
    p.produce_batch(topic, [{"value": b"batch-%d" % i, "key": b"k", "headers": [("i", b"1")],
                             "timestamp": BASE_TS} for i in range(50)])
    assert p.flush(20) == 0
    records = _read_both(bulk_broker.bootstrap, topic, N + 50)
    expected = {(keys[i], values[i], _header_tuple(headers[i]), int(timestamps[i]))
                for i in range(N)}
    expected |= {(b"k", b"batch-%d" % i, (("i", b"1"),), BASE_TS) for i in range(50)}
    assert {r.content for r in records} == expected
    p.close()


@pytest.mark.parametrize(("messages", "error", "text"), [
    ([{"value": b"ok"}, {"value": 123}], TypeError, "Message value at index 1"),
    ([{"value": b"ok"}, {"value": b"a", "key": 5}], TypeError, "Message key at index 1"),
    ([{"value": b"ok"}, {"value": b"a", "partition": "0"}], TypeError,
     "Message partition at index 1"),
    ([{"value": b"ok"}, {"value": b"a", "headers": 5}], ValueError, "Invalid headers at index 1"),
    ([{"value": b"ok"}, "not a dict"], TypeError, "index 1"),
])
def test_produce_batch_bad_types_refuse_the_whole_call(kip, messages, error, text):
    """As confluent-kafka: a message of the wrong shape raises for the whole call, naming its
    index, and nothing of the call is queued (checked against confluent's own produce_batch)."""
    for cls in (confluent_kafka.Producer, kp.Producer):
        p = cls({"bootstrap.servers": kip.bootstrap})
        with pytest.raises(error, match=text):
            p.produce_batch(unique("bad-types"), [dict(m) if isinstance(m, dict) else m
                                                  for m in messages])
        assert len(p) == 0, cls
        p.close()


def test_produce_batch_offsets_and_their_refusals(kip):
    """offset / expected_offset in produce_batch's dicts go the KIP-391 / KIP-27 way, and a
    record that cannot be sent so carries its reason in ``_error`` while the others go."""
    topic = create_topic(kip.bootstrap, unique("batch-offsets"), 2)
    reports = []
    p = kp.Producer({"bootstrap.servers": kip.bootstrap})
    messages = [{"value": b"at-5", "partition": 0, "offset": 5},
                {"value": b"at-6", "partition": 0, "offset": 6},
                {"value": b"both", "partition": 0, "offset": 9, "expected_offset": 9},
                {"value": b"no-partition", "offset": 10},
                {"value": b"expects-0", "partition": 1, "expected_offset": 0},
                {"value": b"plain", "partition": 1}]
    assert p.produce_batch(topic, messages, on_delivery=lambda e, m: reports.append((e, m))) == 4
    assert [m["_error"].code() if "_error" in m else None for m in messages] == [
        None, None, KafkaError._INVALID_ARG, KafkaError._INVALID_ARG, None, None]
    assert "not both" in messages[2]["_error"].str()
    assert "explicit partition" in messages[3]["_error"].str()
    assert p.flush(10) == 0
    assert sorted((m.partition(), m.offset(), m.value()) for e, m in reports if e is None) == [
        (0, 5, b"at-5"), (0, 6, b"at-6"), (1, 0, b"expects-0"), (1, 1, b"plain")]
    p.close()
    # acks=0 cannot report a refusal: offset records are refused at the call, others go.
    p = kp.Producer({"bootstrap.servers": kip.bootstrap, "acks": 0})
    messages = [{"value": b"x", "partition": 0, "offset": 7}, {"value": b"y", "partition": 0}]
    assert p.produce_batch(topic, messages) == 1
    assert messages[0]["_error"].code() == KafkaError._INVALID_ARG
    assert "acks=0" in messages[0]["_error"].str()
    assert p.flush(10) == 0
    p.close()
    records = read_confluent(kip.bootstrap, topic, 2, expected=5)
    assert sorted((r.partition, r.offset, r.value) for r in records) == [
        (0, 5, b"at-5"), (0, 6, b"at-6"), (0, 7, b"y"), (1, 0, b"expects-0"), (1, 1, b"plain")]
