"""kipproducer.Producer is a confluent_kafka.Producer: existing code runs unchanged.

The "example" below is confluent-kafka's own getting-started producer (produce with a
delivery callback, poll(0) in the loop, flush, len, list_topics), extended with the other
produce() forms (positional arguments, headers, timestamps, explicit partitions). It runs once
on confluent_kafka.Producer and once on kipproducer.Producer; both must report the same.
"""

from __future__ import annotations

import time

import confluent_kafka
import numpy as np
import pytest
from confluent_kafka import KafkaError, KafkaException
from producer_support import create_topic, read_confluent, unique

import kipproducer
from kipproducer import producer as kp
from kipproducer.engine.config import ConfigError

RECENT_TS = (int(time.time()) - 60) * 1000  # the broker's time retention keeps it


def confluent_example(producer_class, bootstrap: str, topic: str) -> dict:
    """Plain confluent-kafka code; nothing in it knows about kipproducer."""
    reports = []

    def delivery_report(err, msg):
        """Called once for each message produced to indicate delivery result."""
        if err is not None:
            reports.append(("failed", str(err)))
        else:
            reports.append((msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(),
                            msg.headers(), msg.timestamp()[0]))

    p = producer_class({"bootstrap.servers": bootstrap, "client.id": "example",
                        "linger.ms": 20})
    metadata = p.list_topics(timeout=10)
    partitions = len(metadata.topics[topic].partitions)
    some_data_source = [f"message {i}" for i in range(50)]
    for i, data in enumerate(some_data_source):
        # Trigger any available delivery report callbacks from previous produce() calls
        p.poll(0)
        # Asynchronously produce a message. The delivery report callback will
        # be triggered from the call to poll() above, or flush() below, when the
        # message has been successfully delivered or failed permanently.
        p.produce(topic, data.encode("utf-8"), key=str(i % 5), callback=delivery_report)
    p.produce(topic, value=b"with headers", headers=[("a", b"1"), ("b", None)],
              on_delivery=delivery_report, partition=0)
    p.produce(topic, b"positional", b"pk", 1, delivery_report, None, RECENT_TS,
              {"h": "v"})
    p.produce(topic, None, b"tombstone", on_delivery=delivery_report, partition=0)
    queued_before_flush = len(p)
    # Wait for any outstanding messages to be delivered and delivery report
    # callbacks to be triggered.
    left = p.flush(10)
    served_after = p.poll(0)
    return {"partitions": partitions, "reports": reports, "left": left, "len": len(p),
            "queued": queued_before_flush, "served_after": served_after, "producer": p}


def test_is_a_confluent_producer():
    p = kp.Producer({"bootstrap.servers": "127.0.0.1:1"})
    assert isinstance(p, confluent_kafka.Producer)
    assert isinstance(p, kipproducer.Producer)
    assert issubclass(kp.Producer, confluent_kafka.Producer)
    assert kipproducer.Producer is kp.Producer
    p.close()


def test_confluent_example_runs_unchanged(kip):
    results = {}
    for name, cls in (("confluent", confluent_kafka.Producer), ("kip", kp.Producer)):
        topic = create_topic(kip.bootstrap, unique(f"example-{name}"), 3)
        results[name] = confluent_example(cls, kip.bootstrap, topic)
        results[name]["topic"] = topic
    ours, theirs = results["kip"], results["confluent"]
    assert ours["left"] == theirs["left"] == 0
    assert ours["len"] == theirs["len"] == 0
    assert ours["queued"] == theirs["queued"] == 53
    assert ours["served_after"] == theirs["served_after"] == 0
    assert ours["partitions"] == theirs["partitions"] == 3
    strip = sorted(r[1:] for r in ours["reports"])
    assert strip == sorted(r[1:] for r in theirs["reports"])  # same partitions, offsets...
    assert all(r[0] == ours["topic"] for r in ours["reports"])
    assert len(strip) == 53 and all(r[0] != "failed" for r in ours["reports"])
    read = read_confluent(kip.bootstrap, ours["topic"], 3, expected=53)
    assert len(read) == 53
    assert {(r.partition, r.offset, r.key, r.value) for r in read} == {
        (r[1], r[2], r[3], r[4]) for r in ours["reports"]}
    ts = {r.value: r.timestamp for r in read}
    assert ts[b"positional"] == (confluent_kafka.TIMESTAMP_CREATE_TIME, RECENT_TS)
    headers = {r.value: r.headers for r in read}
    assert headers[b"with headers"] == (("a", b"1"), ("b", None))
    assert headers[b"positional"] == (("h", b"v"),)
    for r in results.values():
        r["producer"].close()


def test_example_still_runs_with_the_engine_in_use(kip):
    """After a bulk call started the engine, plain produce() code keeps working."""
    topic = create_topic(kip.bootstrap, unique("example-mixed"), 3)
    got = []
    p = kp.Producer({"bootstrap.servers": kip.bootstrap, "linger.ms": 20})
    assert p.produce_arrays(topic, [b"bulk-%d" % i for i in range(10)], keys=[b"k"] * 10,
                            on_delivery=lambda err, report: got.append(("bulk", err, report)))
    assert len(p) == 10
    # Switching lanes on a topic first delivers (and reports) the other lane's records.
    p.produce(topic, b"plain", b"k", -1, lambda err, msg: got.append(("plain", err, msg)))
    assert [g[0] for g in got] == ["bulk"]
    p.produce(topic, b"kw", key=b"k", callback=lambda err, msg: got.append(("kw", err, msg)))
    with pytest.raises(TypeError):
        p.produce(topic, b"x", b"k", -1, None, None, None, None, "extra")
    assert len(p) == 2
    assert p.flush(10) == 0 and len(p) == 0
    kinds = [g[0] for g in got]
    assert kinds == ["bulk", "plain", "kw"]  # one lane order per topic: bulk first
    assert all(g[1] is None for g in got)
    bulk = got[0][2]
    assert bulk.count == 10 and bulk.offset() == 0
    assert got[1][2].offset() == 10 and got[2][2].offset() == 11
    assert got[1][2].partition() == bulk.partition()  # same key, same partition, both lanes
    p.close()


def test_context_manager_delivers_both_lanes(kip):
    """``with Producer(...) as p:`` ends with every report served, the engine's too."""
    topic = create_topic(kip.bootstrap, unique("ctx"), 1)
    got = []
    with kp.Producer({"bootstrap.servers": kip.bootstrap, "linger.ms": 500}) as p:
        p.produce_arrays(topic, [b"a", b"b"], on_delivery=lambda e, r: got.append(r.count))
        p.produce_batch(topic, [{"value": b"c"}], on_delivery=lambda e, m: got.append(m.value()))
        p.produce(topic, b"d", on_delivery=lambda e, m: got.append(m.value()))
    assert got == [2, b"c", b"d"]
    assert [r.value for r in read_confluent(kip.bootstrap, topic, 1, expected=4)] == [
        b"a", b"b", b"c", b"d"]


def test_len_poll_flush_cover_the_engine(kip):
    topic = create_topic(kip.bootstrap, unique("len"), 2)
    p = kp.Producer({"bootstrap.servers": kip.bootstrap, "linger.ms": 60_000})
    reports = []
    n = p.produce_arrays(topic, np.array([b"v%d" % i for i in range(1000)], dtype=object),
                         partition=1, on_delivery=lambda e, r: reports.append(r))
    assert n == 1000
    assert len(p) == 1000  # lingering in the engine
    assert p.poll(0.05) == 0
    assert p.flush(10) == 0 and len(p) == 0
    assert sum(r.count for r in reports) == 1000
    assert {r.partition() for r in reports} == {1}
    assert p.poll(0) == 0
    p.close()


def test_unknown_kip_property_fails_at_construction():
    with pytest.raises(ConfigError, match="kip.no.such.thing"):
        kp.Producer({"bootstrap.servers": "127.0.0.1:1", "kip.no.such.thing": "1"})
    with pytest.raises(ValueError):  # ConfigError is a ValueError
        kp.Producer({"bootstrap.servers": "127.0.0.1:1", "kip.delivery.report.per.record": "x"})
    p = kp.Producer({"bootstrap.servers": "127.0.0.1:1", "kip.delivery.report.per.record": True})
    assert isinstance(p, confluent_kafka.Producer)
    p.close()
    # Not kip.*: still librdkafka's to judge, with librdkafka's error.
    with pytest.raises(KafkaException) as info:
        kp.Producer({"bootstrap.servers": "127.0.0.1:1", "no.such.property": "1"})
    assert info.value.args[0].code() == KafkaError._INVALID_ARG


@pytest.mark.parametrize(("args", "kwargs"), [
    (("t", 5), {}),                                   # a value that is not bytes
    (("t", b"v"), {"bogus": 1}),                      # an unknown keyword
    (("t", b"v"), {"partition": "0"}),                # a partition that is not an int
    (("t", b"v"), {"headers": 5}),                    # headers of the wrong type
    ((5, b"v"), {}),                                  # a topic that is not a str
])
def test_plain_produce_refuses_as_confluent_does(args, kwargs):
    """A plain produce() (engine not in use) is confluent-kafka's C produce called directly
    with our tuple and keyword dict: the same exception, with the same words."""
    conf = {"bootstrap.servers": "127.0.0.1:1", "log_level": 0}
    errors = []
    for cls in (confluent_kafka.Producer, kp.Producer):
        p = cls(conf)
        given = dict(kwargs)
        with pytest.raises(Exception) as info:
            p.produce(*args, **kwargs)
        errors.append((type(info.value), str(info.value)))
        assert kwargs == given  # the caller's dict is left as it was
    assert errors[0] == errors[1]

