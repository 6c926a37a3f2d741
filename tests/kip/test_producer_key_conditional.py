"""Per-key conditional produce (docs/protocol.md §10) through ``kipproducer.Producer``:
``produce(..., expected_key_offset=)``, produce_batch's ``expected_key_offset`` fields and
produce_arrays' ``expected_key_offsets``, against kip broker, read back by a stock consumer.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from confluent_kafka import KafkaError, KafkaException
from kip_support import (
    KeyReports,
    appended_with_key_conditions,
    create_topic,
    in_threads,
    key_produced,
    kip_producer,
    one_winner,
    read_confluent,
    unique,
)

from kipproducer.broker.embedded import EmbeddedBroker
from kipproducer.errors import (
    KEY_ABSENT,
    KEY_OFFSET_MISMATCH,
    NO_KEY_CONDITION,
    KeyConditionKafkaError,
)
from kipproducer.protocol import error_codes as ec


def test_produce_absent_then_present_and_the_actual_offset(broker):
    bootstrap = broker.bootstrap_servers
    topic = create_topic(bootstrap, unique("key-produce"), 3)
    with kip_producer(bootstrap) as p:
        err, partition, offset, _ = key_produced(p, topic, b"order-7", b"created", KEY_ABSENT)
        assert err is None
        err, again_partition, _, _ = key_produced(p, topic, b"order-7", b"created", KEY_ABSENT)
        # the partitioner puts the key where it was: the broker knows its last offset
        assert again_partition == partition
        assert isinstance(err, KeyConditionKafkaError)
        assert (err.code(), err.name()) == (KEY_OFFSET_MISMATCH, "KEY_OFFSET_MISMATCH")
        assert (err.topic, err.partition, err.key) == (topic, partition, b"order-7")
        assert (err.expected, err.actual) == (KEY_ABSENT, offset)
        assert not err.retriable()
        assert f"{topic}[{partition}]" in err.str() and "actual" in err.str()
        err, _, paid, _ = key_produced(p, topic, b"order-7", b"paid", offset)
        assert err is None and paid == offset + 1
    log = [(r.key, r.value) for r in read_confluent(bootstrap, topic, 3, expected=2)]
    assert log == [(b"order-7", b"created"), (b"order-7", b"paid")]


def test_call_refuses_what_cannot_be_conditioned(broker):
    topic = create_topic(broker.bootstrap_servers, unique("key-refuse"))
    with kip_producer(broker.bootstrap_servers) as p:
        with pytest.raises(ValueError, match="needs a key"):
            p.produce(topic, b"v", expected_key_offset=KEY_ABSENT)
        with pytest.raises(ValueError, match="neither offset"):
            p.produce(topic, b"v", b"k", partition=0, expected_offset=0,
                      expected_key_offset=KEY_ABSENT)
        with pytest.raises(ValueError, match="conditioned twice"):
            p.produce_batch(topic, [{"key": b"k", "value": b"1", "expected_key_offset": -1},
                                    {"key": b"k", "value": b"2", "expected_key_offset": -1}],
                            partition=0)
    with kip_producer(broker.bootstrap_servers, acks=0) as p:
        with pytest.raises(ValueError, match="acks=0"):
            p.produce(topic, b"v", b"k", expected_key_offset=KEY_ABSENT)


def test_produce_batch_conditions_of_a_partition_succeed_or_fail_together(broker):
    bootstrap = broker.bootstrap_servers
    topic = create_topic(bootstrap, unique("key-batch"), 2)
    reports = KeyReports()
    with kip_producer(bootstrap) as p:
        first = [{"key": b"a", "value": b"1", "expected_key_offset": KEY_ABSENT},
                 {"key": b"b", "value": b"1", "expected_key_offset": KEY_ABSENT},
                 {"key": b"c", "value": b"1"},
                 {"key": b"x", "value": b"1", "partition": 1,
                  "expected_key_offset": KEY_ABSENT}]
        assert p.produce_batch(topic, first, partition=0, on_delivery=reports) == 4
        assert p.flush(15) == 0
        assert [(e, pt, o) for e, pt, o, _ in reports.items] == [
            (None, 0, 0), (None, 0, 1), (None, 0, 2), (None, 1, 0)]
        reports.items.clear()
        # b's condition is stale: a, b and the unconditioned d are all refused; partition 1's
        # records of the same call are not affected
        second = [{"key": b"a", "value": b"2", "expected_key_offset": 0},
                  {"key": b"b", "value": b"2", "expected_key_offset": KEY_ABSENT},
                  {"key": b"d", "value": b"2"},
                  {"key": b"x", "value": b"2", "partition": 1, "expected_key_offset": 0}]
        p.produce_batch(topic, second, partition=0, on_delivery=reports)
        assert p.flush(15) == 0
    by_key = {key: (err, pt) for err, pt, _, key in reports.items}
    assert by_key[b"b"][0].code() == KEY_OFFSET_MISMATCH and by_key[b"b"][0].actual == 1
    assert by_key[b"a"][0].code() == ec.OPERATION_NOT_ATTEMPTED
    assert by_key[b"d"][0].code() == ec.OPERATION_NOT_ATTEMPTED
    assert by_key[b"x"] == (None, 1)
    log = [(r.partition, r.offset, r.key, r.value)
           for r in read_confluent(bootstrap, topic, 2, expected=5)]
    assert sorted(log) == [(0, 0, b"a", b"1"), (0, 1, b"b", b"1"), (0, 2, b"c", b"1"),
                           (1, 0, b"x", b"1"), (1, 1, b"x", b"2")]


def test_produce_arrays_expected_key_offsets(broker):
    bootstrap = broker.bootstrap_servers
    topic = create_topic(bootstrap, unique("key-arrays"))
    reports = KeyReports()
    batch_reports: list = []
    with kip_producer(bootstrap) as p:
        keys = [b"k%d" % i for i in range(100)]
        assert p.produce_arrays(topic, [b"v"] * 100, keys=keys, partition=0,
                                expected_key_offsets=np.full(100, KEY_ABSENT)) == 100
        assert p.flush(15) == 0
        # every key's last offset is its index: condition half of them, one stale
        expected = np.full(100, NO_KEY_CONDITION, dtype=np.int64)
        expected[::2] = np.arange(0, 100, 2)
        expected[50] = 7
        p.produce_arrays(topic, [b"w"] * 100, keys=keys, partition=0, per_record=True,
                         expected_key_offsets=expected, on_delivery=reports)
        assert p.flush(15) == 0
        expected[50] = 50
        p.produce_arrays(topic, [b"w"] * 100, keys=keys, partition=0,
                         expected_key_offsets=expected,
                         on_delivery=lambda err, r: batch_reports.append((err, r.offset(),
                                                                          r.count)))
        assert p.flush(15) == 0
    codes = [err.code() for err, _, _, _ in reports.items]
    assert codes.count(KEY_OFFSET_MISMATCH) == 1
    assert codes.count(ec.OPERATION_NOT_ATTEMPTED) == 99
    stale = next(err for err, _, _, _ in reports.items if err.code() == KEY_OFFSET_MISMATCH)
    assert (stale.key, stale.expected, stale.actual) == (b"k50", 7, 50)
    assert batch_reports == [(None, 100, 100)]
    assert len(read_confluent(bootstrap, topic, 1, expected=200)) == 200


def test_append_waits_for_the_verdict_of_key_conditions(broker):
    """Producer.append(expected_key_offsets=): the offset of the first record, or one
    KeyOffsetMismatchError naming the stale key; the refused pair is never written."""
    bootstrap = broker.bootstrap_servers
    topic = create_topic(bootstrap, unique("key-append"))
    with kip_producer(bootstrap) as p:
        first, second = appended_with_key_conditions(p, topic)
    log = [(r.offset, r.key, r.value) for r in read_confluent(bootstrap, topic, 1, expected=4)]
    assert log == [(first, b"order-1", b"created"), (first + 1, b"order-2", b"created"),
                   (second, b"order-1", b"paid"), (second + 1, b"order-2", b"paid")]


def test_concurrent_writers_on_one_key_exactly_one_wins(broker):
    bootstrap = broker.bootstrap_servers
    topic = create_topic(bootstrap, unique("key-race"))
    with kip_producer(bootstrap) as p:
        assert key_produced(p, topic, b"acct", b"open", KEY_ABSENT, partition=0)[0] is None
    writers = 6
    barrier = threading.Barrier(writers)
    outcomes: list = [None] * writers

    def write(i: int) -> None:
        with kip_producer(bootstrap) as p:
            p.produce(topic, b"warm-up", b"other-%d" % i, partition=0)
            p.flush(15)
            barrier.wait(30)
            outcomes[i] = key_produced(p, topic, b"acct", b"debit-%d" % i, 0, partition=0)

    in_threads(writers, write, 60)
    one_winner(outcomes)


def test_a_broker_without_the_feature_gets_nothing():
    with EmbeddedBroker(config={"kip.wire.version": 2}) as older:
        topic = create_topic(older.bootstrap_servers, unique("key-old"))
        with kip_producer(older.bootstrap_servers) as p:
            err, _, _, _ = key_produced(p, topic, b"k", b"v", KEY_ABSENT, partition=0)
        assert err.code() == KafkaError._UNSUPPORTED_FEATURE
        assert "kip.produce.key.conditional" in err.str()
        assert read_confluent(older.bootstrap_servers, topic, 1, expected=0, timeout=2) == []


@pytest.mark.parametrize("idempotent", [True, False], ids=["idempotent", "plain"])
def test_retry_after_lost_response(proxied_broker, idempotent):
    """The conditional record is written but its answer is lost; the engine sends it again.
    Idempotent: the duplicate check answers with its original offset. Plain: the retry gets
    KEY_OFFSET_MISMATCH whose actual offset is the first attempt's record. Written once."""
    b, proxy = proxied_broker
    topic = create_topic(b.bootstrap_servers, unique("key-cut"))
    with kip_producer(b.bootstrap_servers, enable_idempotence=idempotent) as p:
        assert key_produced(p, topic, b"head", b"0", KEY_ABSENT, partition=0)[0] is None
        proxy.drop_next_produce_response()
        err, _, offset, _ = key_produced(p, topic, b"k", b"once", KEY_ABSENT, partition=0)
        if idempotent:
            assert (err, offset) == (None, 1)
        else:
            assert err.code() == KEY_OFFSET_MISMATCH and err.actual == 1
    assert proxy.dropped.is_set(), "the proxy never cut the response"
    log = [(r.offset, r.key) for r in read_confluent(b.bootstrap_servers, topic, 1, expected=2)]
    assert log == [(0, b"head"), (1, b"k")]


def test_a_failed_condition_fails_its_transaction(broker):
    """In a transaction of the Producer's engine, a failed condition fails the transaction:
    commit raises, the caller aborts, nothing of it is visible to read_committed."""
    bootstrap = broker.bootstrap_servers
    topic = create_topic(bootstrap, unique("key-txn"))
    reports = KeyReports()
    with kip_producer(bootstrap, transactional_id=unique("txn")) as p:
        p.init_transactions(15)
        p.begin_transaction()
        p.produce(topic, b"1", b"a", partition=0, expected_key_offset=KEY_ABSENT,
                  on_delivery=reports)
        p.commit_transaction(15)
        p.begin_transaction()
        p.produce(topic, b"2", b"b", partition=0, on_delivery=reports)
        p.produce(topic, b"2", b"a", partition=0, expected_key_offset=KEY_ABSENT,
                  on_delivery=reports)
        with pytest.raises(KafkaException):
            p.commit_transaction(15)
        p.abort_transaction(15)
        p.begin_transaction()
        p.produce(topic, b"3", b"a", partition=0, expected_key_offset=0, on_delivery=reports)
        p.commit_transaction(15)
    codes = [None if err is None else err.code() for err, _, _, _ in reports.items]
    assert codes == [None, ec.OPERATION_NOT_ATTEMPTED, KEY_OFFSET_MISMATCH, None]
    log = [(r.key, r.value) for r in read_confluent(
        bootstrap, topic, 1, expected=2, config={"isolation.level": "read_committed"})]
    assert log == [(b"a", b"1"), (b"a", b"3")]


def test_partition_count_change_refuses_every_condition(broker):
    from confluent_kafka.admin import AdminClient, NewPartitions

    bootstrap = broker.bootstrap_servers
    topic = create_topic(bootstrap, unique("key-grow"), 2)
    with kip_producer(bootstrap, topic_metadata_refresh_interval_ms=100) as p:
        err, partition, offset, _ = key_produced(p, topic, b"k", b"1", KEY_ABSENT)
        assert err is None
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_partitions([NewPartitions(topic, 4)])[topic].result(15)
        for _ in range(2):  # whether the producer still partitions with 2 or already with 4
            err, _, _, _ = key_produced(p, topic, b"k", b"2", offset)
            assert err.code() == ec.PARTITION_COUNT_MISMATCH, err
            assert "key.conditional.partitions" in err.str()
    assert len(read_confluent(bootstrap, topic, 4, expected=1)) == 1
