"""With ``transactional.id`` the bulk calls go through librdkafka's produce(), inside the
transaction (the engine takes no part in transactions yet).

Routing is shown from the outside: before init_transactions() librdkafka refuses to produce
(_STATE), and so do both bulk calls. The full round runs against Tansu, which supports
transactions: init, begin, produce_batch and produce_arrays with headers and timestamps,
commit, then a read_committed consumer sees every record with its headers.
"""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa
import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, KafkaError, KafkaException
from producer_support import create_topic, read_confluent, unique

from kipproducer import producer as kp

TS = (int(time.time()) - 60) * 1000


def test_bulk_calls_go_through_librdkafka_when_transactional(kip):
    topic = create_topic(kip.bootstrap, unique("txn-route"), 1)
    p = kp.Producer({"bootstrap.servers": kip.bootstrap, "transactional.id": unique("txn")})
    # librdkafka's own refusal: a transactional producer must init_transactions() first.
    with pytest.raises(KafkaException) as plain:
        p.produce(topic, b"x")
    assert plain.value.args[0].code() == KafkaError._STATE
    messages = [{"value": b"a"}, {"value": b"b", "headers": [("h", b"1")]}]
    assert p.produce_batch(topic, messages) == 0
    assert [m["_error"].code() for m in messages] == [KafkaError._STATE] * 2
    with pytest.raises(KafkaException) as bulk:
        p.produce_arrays(topic, [b"a", b"b"])
    assert bulk.value.args[0].code() == KafkaError._STATE
    assert len(p) == 0


def test_transaction_round_on_tansu(tansu):
    topic = create_topic(tansu.bootstrap, unique("txn"), 2)
    p = kp.Producer({"bootstrap.servers": tansu.bootstrap, "transactional.id": unique("txn"),
                     "linger.ms": 5})
    p.init_transactions(30)
    p.begin_transaction()
    reports = []
    messages = [{"value": b"batch-%d" % i, "key": b"k%d" % (i % 3),
                 "headers": [("i", b"%d" % i), ("null", None)], "timestamp": TS + i}
                for i in range(20)]
    messages[5]["headers"] = {"dict": b"header"}
    assert p.produce_batch(topic, messages, on_delivery=lambda e, m: reports.append(e)) == 20
    assert len(p) >= 20  # in librdkafka's queue: the engine was not used
    shared = [("shared", b"1"), ("other", b"2")]
    assert p.produce_arrays(topic, pa.array([b"arrays-%d" % i for i in range(3)]),
                            keys=np.array([b"a", None, b""], dtype=object), headers=shared,
                            timestamps=np.array([TS + 100 + i for i in range(3)]),
                            on_delivery=lambda e, m: reports.append(e)) == 3
    per_record = [[("r", b"%d" % i)] if i % 2 else None for i in range(4)]
    assert p.produce_arrays(topic, [b"per-%d" % i for i in range(4)], headers=per_record,
                            partition=1) == 4
    p.commit_transaction(30)
    assert len(reports) == 23 and all(e is None for e in reports)
    assert p.flush(10) == 0

    records = read_confluent(tansu.bootstrap, topic, 2, expected=27,
                             config={"isolation.level": "read_committed"})
    assert len(records) == 27
    by_value = {r.value: r for r in records}
    for i, m in enumerate(messages):
        r = by_value[b"batch-%d" % i]
        want = m["headers"].items() if isinstance(m["headers"], dict) else m["headers"]
        assert r.headers == tuple(want)
        assert r.key == m["key"]
        assert r.timestamp == (TIMESTAMP_CREATE_TIME, TS + i)
    for i, key in enumerate([b"a", None, b""]):
        r = by_value[b"arrays-%d" % i]
        assert r.headers == tuple(shared), i
        assert r.key == key
        assert r.timestamp == (TIMESTAMP_CREATE_TIME, TS + 100 + i)
    for i in range(4):
        r = by_value[b"per-%d" % i]
        assert r.partition == 1
        assert r.headers == (tuple(per_record[i]) if per_record[i] else ())
    p.close()
