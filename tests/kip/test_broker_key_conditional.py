"""Per-key conditional produce on kip broker, on the wire (docs/protocol.md §10).

Requests are built with the shared protocol layer exactly as §10 specifies (KeyConditions tag
10001 per partition, KeyConflicts tag 10001 per partition answer); confluent-kafka's
transactional producer and read_committed consumer are the stock peers for the transaction
cases.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from raw_client import RawClient

from kipproducer.broker.embedded import EmbeddedBroker
from kipproducer.errors import KEY_ABSENT
from kipproducer.protocol import error_codes as ec
from kipproducer.protocol.wire_extensions import (
    FEATURE_PRODUCE_KEY_CONDITIONAL,
    ProduceMode,
    decode_key_conflicts,
    encode_key_conditions,
)
from kipproducer.records import encode_batch

ASSIGN = ProduceMode.ASSIGN


def records(*pairs, **kw) -> bytes:
    now = int(time.time() * 1000)
    return encode_batch([(k, v, [], now) for k, v in pairs], **kw)


def send(client: RawClient, topic: str, pairs, conditions, *, partition: int = 0,
         partitions: int = 1, **kw):
    """One Produce of ``pairs`` (key, value) to one partition, with ``conditions`` as
    (record index, expected) pairs; returns the partition's answer."""
    return client.produce(
        topic, {partition: records(*pairs, **kw)}, mode=ASSIGN,
        key_conditions={partition: encode_key_conditions(partitions, conditions)})[partition]


def conflicts(answer) -> list[tuple[int, int]]:
    return [] if answer.key_conflicts is None else decode_key_conflicts(answer.key_conflicts)


def new_topic(client: RawClient, partitions: int = 1, **configs) -> str:
    name = "kc-" + uuid.uuid4().hex[:8]
    client.create_topic(name, partitions, {k.replace("_", "."): str(v)
                                           for k, v in configs.items()})
    return name


def read_committed(bootstrap: str, topic: str, partition: int = 0) -> list[tuple[int, bytes]]:
    """Every record a read_committed consumer gets, up to the last stable offset."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "g-" + uuid.uuid4().hex,
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        consumer.assign([TopicPartition(topic, partition, 0)])
        out: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            messages = consumer.consume(100, 0.3)
            out += [(m.offset(), m.key()) for m in messages if m.error() is None]
            position = consumer.position([TopicPartition(topic, partition)])[0].offset
            if not messages and position >= high:
                break
        return out
    finally:
        consumer.close()


def test_feature_advertised_from_version_3_only(client):
    features = {f.name: (f.min_version, f.max_version) for f in client.request(
        18, 3, client_software_name="t", client_software_version="1").supported_features}
    assert features[FEATURE_PRODUCE_KEY_CONDITIONAL] == (1, 1)
    with EmbeddedBroker(config={"kip.wire.version": 2}) as older:
        c = RawClient(older.bootstrap_servers)
        try:
            names = {f.name for f in c.request(18, 3, client_software_name="t",
                                               client_software_version="1").supported_features}
            assert FEATURE_PRODUCE_KEY_CONDITIONAL not in names
            # it skips the tag as an unknown one, as a stock broker does
            topic = new_topic(c)
            assert send(c, topic, [(b"k", b"1")], [(0, 5)]).error_code == 0
        finally:
            c.close()


def test_absent_then_present_and_the_actual_offset(broker, client):
    topic = new_topic(client)
    first = send(client, topic, [(b"order-1", b"created")], [(0, KEY_ABSENT)])
    assert (first.error_code, first.base_offset) == (0, 0)
    again = send(client, topic, [(b"order-1", b"created twice")], [(0, KEY_ABSENT)])
    assert again.error_code == ec.KEY_OFFSET_MISMATCH
    assert conflicts(again) == [(0, 0)]
    message = again.record_errors[0].batch_index_error_message
    assert f"{topic}-0" in message and "order-1" in message
    assert "expected absent, actual 0" in message
    second = send(client, topic, [(b"order-1", b"paid")], [(0, 0)])
    assert (second.error_code, second.base_offset) == (0, 1)
    stale = send(client, topic, [(b"order-1", b"shipped")], [(0, 0)])
    assert (stale.error_code, conflicts(stale)) == (ec.KEY_OFFSET_MISMATCH, [(0, 1)])
    assert [k for _, k in read_committed(broker.bootstrap_servers, topic)] == [b"order-1"] * 2


def test_different_keys_of_one_partition_do_not_conflict(client):
    topic = new_topic(client)
    for i in range(20):
        answer = send(client, topic, [(b"key-%d" % i, b"v")], [(0, KEY_ABSENT)])
        assert (answer.error_code, answer.base_offset) == (0, i)
    # each key's own last offset, whatever the others did since
    for i in range(20):
        answer = send(client, topic, [(b"key-%d" % i, b"w")], [(0, i)])
        assert (answer.error_code, answer.base_offset) == (0, 20 + i)


def test_concurrent_writers_on_one_key_exactly_one_wins(broker):
    setup = RawClient(broker.bootstrap_servers)
    topic = new_topic(setup)
    assert send(setup, topic, [(b"account", b"opened")], [(0, KEY_ABSENT)]).error_code == 0
    writers = 8
    barrier = threading.Barrier(writers)
    answers: list = [None] * writers

    def write(i: int) -> None:
        c = RawClient(broker.bootstrap_servers)
        try:
            barrier.wait(20)
            answers[i] = send(c, topic, [(b"account", b"debit-%d" % i)], [(0, 0)])
        finally:
            c.close()

    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    winners = [a for a in answers if a.error_code == 0]
    assert len(winners) == 1 and winners[0].base_offset == 1
    for loser in (a for a in answers if a.error_code != 0):
        assert loser.error_code == ec.KEY_OFFSET_MISMATCH
        assert conflicts(loser) == [(0, 1)]  # the winner's offset
    assert len(read_committed(broker.bootstrap_servers, topic)) == 2
    setup.close()


def test_stale_condition_in_a_multi_key_batch_refuses_the_whole_partition(broker, client):
    topic = new_topic(client, partitions=2)
    assert send(client, topic, [(b"a", b"1"), (b"b", b"1")], [(0, -1), (1, -1)],
                partitions=2).error_code == 0
    # b's condition is stale: a, c and the unconditioned d are not written either; the other
    # partition of the same request is not affected
    answers = client.produce(topic, {
        0: records((b"a", b"2"), (b"b", b"2"), (b"c", b"1"), (b"d", b"1")),
        1: records((b"x", b"1"))}, mode=ASSIGN, key_conditions={
        0: encode_key_conditions(2, [(0, 0), (1, 0), (2, -1)]),
        1: encode_key_conditions(2, [(0, -1)])})
    assert answers[0].error_code == ec.KEY_OFFSET_MISMATCH
    assert conflicts(answers[0]) == [(1, 1)]
    assert [e.batch_index for e in answers[0].record_errors] == [1]
    assert answers[1].error_code == 0
    assert read_committed(broker.bootstrap_servers, topic) == [(0, b"a"), (1, b"b")]
    # checked against the state before the batch: a and b at 0 and 1, c absent
    ok = send(client, topic, [(b"a", b"2"), (b"b", b"2"), (b"c", b"1")],
              [(0, 0), (1, 1), (2, -1)], partitions=2)
    assert (ok.error_code, ok.base_offset) == (0, 2)


def test_the_same_key_twice_in_one_batch(client):
    topic = new_topic(client)
    twice = send(client, topic, [(b"k", b"1"), (b"k", b"2")], [(0, -1), (1, -1)])
    assert twice.error_code == ec.INVALID_RECORD
    assert "conditioned twice" in twice.error_message
    # once conditioned, once not: both written, the key's last offset is the second record
    once = send(client, topic, [(b"k", b"1"), (b"k", b"2")], [(0, -1)])
    assert (once.error_code, once.base_offset) == (0, 0)
    assert send(client, topic, [(b"k", b"3")], [(0, 0)]).error_code == ec.KEY_OFFSET_MISMATCH
    assert send(client, topic, [(b"k", b"3")], [(0, 1)]).error_code == 0


def test_bad_conditions_are_refused_with_one_clear_error(client):
    topic = new_topic(client)
    cases = [
        ([(b"k", b"1")], [(1, -1)], ec.INVALID_RECORD, "record index 1"),
        ([(None, b"1")], [(0, -1)], ec.INVALID_RECORD, "without a key"),
        ([(b"k", b"1")], [(0, -2)], ec.INVALID_RECORD, "expected offset -2"),
        ([(b"k", b"1"), (b"j", b"1")], [(1, -1), (0, -1)], ec.INVALID_RECORD, "not after"),
    ]
    for pairs, conds, code, words in cases:
        answer = send(client, topic, pairs, conds)
        assert answer.error_code == code and words in answer.error_message, answer
    malformed = client.produce(topic, {0: records((b"k", b"1"))}, mode=ASSIGN,
                               key_conditions={0: b"\x00\x00\x00\x01\x00\x00\x00\x05"})[0]
    assert malformed.error_code == ec.INVALID_REQUEST
    assert "KeyConditions" in malformed.error_message
    with_mode = client.produce(topic, {0: records((b"k", b"1"), base_offset=0)},
                               mode=ProduceMode.EXPECTED_OFFSETS,
                               key_conditions={0: encode_key_conditions(1, [(0, -1)])})[0]
    assert with_mode.error_code == ec.INVALID_REQUEST
    # nothing of these reached the log
    assert send(client, topic, [(b"k", b"1")], [(0, -1)]).base_offset == 0


def test_partition_count_change_is_refused(client):
    topic = new_topic(client, partitions=2)
    assert send(client, topic, [(b"k", b"1")], [(0, -1)], partitions=2).error_code == 0
    body = client.request(37, 3, topics=[{"name": topic, "count": 3, "assignments": None}],
                          timeout=10000, validate_only=False)
    assert body.results[0].error_code == 0
    stale = send(client, topic, [(b"k", b"2")], [(0, 0)], partitions=2)
    assert stale.error_code == ec.PARTITION_COUNT_MISMATCH
    assert "2 partitions" in stale.error_message and "has 3" in stale.error_message
    # a client that learnt the new count is refused too: keys may have moved
    fresh = send(client, topic, [(b"k", b"2")], [(0, 0)], partitions=3)
    assert fresh.error_code == ec.PARTITION_COUNT_MISMATCH
    assert "pinned to 2" in fresh.error_message
    assert "key.conditional.partitions" in fresh.error_message
    # until an operator re-pins the topic (after moving the keys' histories, say)
    body = client.request(44, 1, resources=[{
        "resource_type": 2, "resource_name": topic,
        "configs": [{"name": "key.conditional.partitions", "config_operation": 1,
                     "value": None}]}], validate_only=False)
    assert body.responses[0].error_code == 0
    assert send(client, topic, [(b"k", b"2")], [(0, 0)], partitions=3).error_code == 0


def test_retry_after_a_lost_ack(broker, client):
    topic = new_topic(client)
    init = client.request(22, 1, transactional_id=None, transaction_timeout=-1)
    pid, epoch = init.producer_id, init.producer_epoch
    batch = dict(producer_id=pid, producer_epoch=epoch, base_sequence=0)
    first = send(client, topic, [(b"k", b"v")], [(0, -1)], **batch)
    # the same request again (its answer was lost): the duplicate check answers it
    retry = send(client, topic, [(b"k", b"v")], [(0, -1)], **batch)
    assert (first.error_code, retry.error_code) == (0, 0)
    assert retry.base_offset == first.base_offset == 0
    # without idempotence the retry is refused, and the actual offset is the first attempt's
    plain = send(client, topic, [(b"p", b"v")], [(0, -1)])
    plain_retry = send(client, topic, [(b"p", b"v")], [(0, -1)])
    assert plain_retry.error_code == ec.KEY_OFFSET_MISMATCH
    assert conflicts(plain_retry) == [(0, plain.base_offset)]
    assert len(read_committed(broker.bootstrap_servers, topic)) == 2


def test_index_bound_refuses_rather_than_guesses(tmp_path):
    with EmbeddedBroker(config={"kip.key.index.max.keys": 2}) as b:
        c = RawClient(b.bootstrap_servers)
        try:
            topic = new_topic(c)
            for i, key in enumerate((b"a", b"b", b"c")):
                assert send(c, topic, [(key, b"1")], [(0, -1)]).base_offset == i
            forgotten = send(c, topic, [(b"a", b"2")], [(0, 0)])
            assert forgotten.error_code == ec.KEY_INDEX_INCOMPLETE
            assert conflicts(forgotten) == [(0, -2)]
            assert "kip.key.index.max.keys=2" in forgotten.error_message
            assert send(c, topic, [(b"new", b"1")], [(0, -1)]).error_code == \
                ec.KEY_INDEX_INCOMPLETE
            assert send(c, topic, [(b"c", b"2")], [(0, 2)]).error_code == 0
        finally:
            c.close()


def _partition_log(embedded: EmbeddedBroker, topic: str, partition: int = 0):
    return embedded.broker.logs.get_log(topic, partition)


def test_restart_rebuilds_the_same_index(tmp_path):
    data = tmp_path / "data"
    with EmbeddedBroker(data) as b:
        c = RawClient(b.bootstrap_servers)
        topic = new_topic(c)
        for i in range(30):
            key = b"key-%d" % (i % 7)
            value = None if i % 5 == 4 else b"v%d" % i
            c.produce(topic, {0: records((key, value))}, mode=ASSIGN)
        assert send(c, topic, [(b"key-0", b"x")], [(0, 28)]).error_code == 0
        log = _partition_log(b, topic)
        before = log.key_index(100_000).answers(log.log_start_offset)
        c.close()
    with EmbeddedBroker(data) as b:
        c = RawClient(b.bootstrap_servers)
        log = _partition_log(b, topic)
        assert log.key_index(100_000).answers(log.log_start_offset) == before
        # and the conditions agree with it
        for key, last in before.items():
            assert send(c, topic, [(key, b"after")], [(0, last)]).error_code == 0, key
        c.close()
    # their last records (offsets 29 and 24) are tombstones
    assert before[b"key-1"] == before[b"key-3"] == KEY_ABSENT
    assert before[b"key-0"] == 30 and before[b"key-4"] == 25


def test_compaction_and_tombstones_never_change_an_answer(broker, client):
    topic = new_topic(client, cleanup_policy="compact", delete_retention_ms=0,
                      min_cleanable_dirty_ratio="0.01", segment_ms=100)
    log = _partition_log(broker, topic)
    assert send(client, topic, [(b"a", b"1"), (b"b", b"1"), (b"t", b"1")],
                [(0, -1), (1, -1), (2, -1)]).error_code == 0
    assert send(client, topic, [(b"a", b"2"), (b"t", None)], [(0, 0), (1, 2)]).error_code == 0
    # a tombstone before cleaning: absent
    assert send(client, topic, [(b"t", b"again")], [(0, 4)]).error_code == ec.KEY_OFFSET_MISMATCH
    answers_before = log.key_index(100_000).answers(log.log_start_offset)
    log.roll()
    client.produce(topic, {0: records((b"z", b"1"))}, mode=ASSIGN)  # offset 5
    log.roll()
    log.compact(now_ms=int(time.time() * 1000) + 60_000)
    kept = [k for _, k in read_committed(broker.bootstrap_servers, topic)]
    assert b"t" not in kept and kept.count(b"a") == 1  # cleaned: the tombstone is gone
    # between writes the answers stand, and a rebuild from the cleaned log agrees
    log._key_index = None  # noqa: SLF001 (force the rebuild a restart would do)
    rebuilt = log.key_index(100_000).answers(log.log_start_offset)
    assert {k: v for k, v in rebuilt.items() if v != KEY_ABSENT} == \
        {k: v for k, v in answers_before.items() if v != KEY_ABSENT} | {b"z": 5}
    assert send(client, topic, [(b"t", b"again")], [(0, KEY_ABSENT)]).error_code == 0
    assert send(client, topic, [(b"a", b"3"), (b"b", b"2")], [(0, 3), (1, 1)]).error_code == 0


def _transactional(bootstrap: str, tid: str, **extra) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid,
                         "linger.ms": 0, **extra})
    producer.init_transactions(20)
    return producer


def test_open_transaction_makes_a_key_pending(broker, client):
    topic = new_topic(client)
    assert send(client, topic, [(b"k", b"1")], [(0, -1)]).error_code == 0
    producer = _transactional(broker.bootstrap_servers, "kc-" + uuid.uuid4().hex)
    producer.begin_transaction()
    producer.produce(topic, key=b"k", value=b"in txn", partition=0)
    producer.flush(10)
    pending = send(client, topic, [(b"k", b"2")], [(0, 0)])
    assert pending.error_code == ec.CONCURRENT_TRANSACTIONS
    assert ec.is_retriable(pending.error_code) and conflicts(pending) == [(0, -3)]
    # other keys of the partition are not held back
    assert send(client, topic, [(b"other", b"1")], [(0, -1)]).error_code == 0
    producer.abort_transaction(20)
    # the aborted record never counts
    assert send(client, topic, [(b"k", b"2")], [(0, 0)]).error_code == 0
    producer.begin_transaction()
    producer.produce(topic, key=b"k", value=b"committed", partition=0)
    producer.commit_transaction(20)
    committed = [o for o, k in read_committed(broker.bootstrap_servers, topic) if k == b"k"]
    assert send(client, topic, [(b"k", b"3")], [(0, committed[-1])]).error_code == 0


def _write_and_hang(bootstrap: str, topic: str, tid: str, ready) -> None:
    producer = _transactional(bootstrap, tid, **{"transaction.timeout.ms": 2000})
    producer.begin_transaction()
    producer.produce(topic, key=b"k", value=b"never committed", partition=0)
    producer.flush(10)
    ready.set()
    time.sleep(120)


def test_writer_killed_mid_transaction_never_becomes_the_last_offset():
    with EmbeddedBroker(config={
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": 300}) as b:
        c = RawClient(b.bootstrap_servers)
        try:
            topic = new_topic(c)
            assert send(c, topic, [(b"k", b"1")], [(0, -1)]).error_code == 0
            ready = multiprocessing.get_context("spawn").Event()
            writer = multiprocessing.get_context("spawn").Process(
                target=_write_and_hang,
                args=(b.bootstrap_servers, topic, "kc-" + uuid.uuid4().hex, ready))
            writer.start()
            assert ready.wait(60)
            os.kill(writer.pid, signal.SIGKILL)
            writer.join(10)
            # pending until the coordinator aborts the timed-out transaction, then key k's
            # last offset is still 0
            deadline = time.monotonic() + 30
            while True:
                answer = send(c, topic, [(b"k", b"2")], [(0, 0)])
                if answer.error_code != ec.CONCURRENT_TRANSACTIONS:
                    break
                assert time.monotonic() < deadline, "the killed transaction never ended"
                time.sleep(0.2)
            assert answer.error_code == 0, answer
            assert [k for _, k in read_committed(b.bootstrap_servers, topic)] == [b"k", b"k"]
        finally:
            c.close()
