"""Emulated KIP-27 (conditional publish) against the stand-in for stock Kafka.

A conditional batch is one transaction, committed only when its records landed where expected;
otherwise it is aborted and the report is native mode's: OFFSET_MISMATCH (10027) with the true
log end, markers counted. Markers take offsets: after n records at E the next expectation is
E + n + 1.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Producer as StockProducer
from emulated_support import (
    STANDIN_CONFIG,
    committed,
    emulated_producer,
    new_topic,
    race_conditional_writers,
    uncommitted,
)

from kipproducer.broker.embedded import EmbeddedBroker
from kipproducer.errors import OFFSET_MISMATCH, OffsetMismatchError


@pytest.fixture(scope="module")
def stock():
    with EmbeddedBroker(config=STANDIN_CONFIG) as b:
        yield b.bootstrap_servers


def test_bulk_append_then_mismatch_reports_the_true_log_end(stock):
    topic = new_topic(stock, "em-cond")
    with emulated_producer(stock) as p:
        assert p.append(topic, [b"a0", b"a1", b"a2"], keys=[b"k"] * 3,
                        headers=[("h", b"x")], partition=0, expected_offset=0) == 0
        # markers take offsets: 3 records at 0, commit marker at 3, next at 4
        with pytest.raises(OffsetMismatchError) as info:
            p.append(topic, [b"wrong"], partition=0, expected_offset=3)
        # the refused record went to 4 and its abort marker to 5
        assert info.value.log_end_offset == 6
        assert info.value.args[0].code() == OFFSET_MISMATCH
        assert p.append(topic, [b"b0", b"b1"], partition=0, expected_offset=6) == 6
    got = [(r.offset, r.key, r.value, r.headers) for r in committed(stock, topic)]
    assert got == [(0, b"k", b"a0", (("h", b"x"),)), (1, b"k", b"a1", (("h", b"x"),)),
                   (2, b"k", b"a2", (("h", b"x"),)), (6, None, b"b0", ()), (7, None, b"b1", ())]
    assert [r.offset for r in uncommitted(stock, topic)] == [0, 1, 2, 4, 6, 7]


def test_per_record_and_batch_reports_as_native(stock):
    topic = new_topic(stock, "em-cond-rec")
    reports: list = []

    def report(err, msg):
        reports.append((None if err is None else (err.code(), err.log_end_offset),
                        msg.offset() if err is None else None, msg.value()))

    with emulated_producer(stock) as p:
        p.produce(topic, b"r0", partition=0, expected_offset=0, on_delivery=report)
        # after one record at 0 its commit marker takes 1: the next is expected at 2
        p.produce(topic, b"r1", partition=0, expected_offset=2, on_delivery=report)
        # produce_batch: one conditional batch of two at 4, then a stale expectation of 5
        assert p.produce_batch(topic, [
            {"value": b"m0", "partition": 0, "expected_offset": 4},
            {"value": b"m1", "partition": 0, "expected_offset": 5},
            {"value": b"m2", "partition": 0, "expected_offset": 5}], on_delivery=report) == 3
        p.produce(topic, b"r2", partition=0, expected_offset=0, on_delivery=report)
        assert p.flush(20) == 0
    assert reports == [
        (None, 0, b"r0"), (None, 2, b"r1"), (None, 4, b"m0"), (None, 5, b"m1"),
        ((OFFSET_MISMATCH, 9), None, b"m2"),  # landed at 7, its abort marker at 8
        ((OFFSET_MISMATCH, 11), None, b"r2"),  # landed at 9, its abort marker at 10
    ]
    assert [(r.offset, r.value) for r in committed(stock, topic)] == [
        (0, b"r0"), (2, b"r1"), (4, b"m0"), (5, b"m1")]


def test_a_plain_writer_in_between_makes_the_check_fail(stock):
    topic = new_topic(stock, "em-cond-plain")
    plain = StockProducer({"bootstrap.servers": stock})
    with emulated_producer(stock) as p:
        assert p.append(topic, [b"c0"], partition=0, expected_offset=0) == 0
        plain.produce(topic, b"plain", partition=0)
        assert plain.flush(10) == 0
        with pytest.raises(OffsetMismatchError) as info:
            p.append(topic, [b"c1"], partition=0, expected_offset=2)
        assert info.value.log_end_offset == 5  # plain at 2, c1 aborted at 3, marker 4
        assert p.append(topic, [b"c2"], partition=0, expected_offset=5) == 5
    assert [(r.offset, r.value) for r in committed(stock, topic)] == [
        (0, b"c0"), (2, b"plain"), (5, b"c2")]


def test_four_concurrent_conditional_writers(stock):
    """At most one wins per expected offset, no interleaving, no duplicate: every committed
    record belongs to a success its writer saw, at the offsets it was told."""
    topic = new_topic(stock, "em-cond-race")
    race_conditional_writers(lambda: emulated_producer(stock), topic, lambda: [
        (r.offset, r.value) for r in committed(stock, topic)])
