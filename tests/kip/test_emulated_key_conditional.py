"""Emulated per-key conditional publish (docs/per-key-conditional.md, "Emulated mode")
against the stand-in for stock Kafka: the writer's key index is read at read_committed, and
each call's records of a partition are one transaction, committed only where the index ends.
Read back by librdkafka at read_committed."""

from __future__ import annotations

import threading
from contextlib import contextmanager

import numpy as np
import pytest
from confluent_kafka import KafkaError
from confluent_kafka import Producer as StockProducer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from emulated_support import (
    DYING_KEYED_WRITER,
    STANDIN_CONFIG,
    committed,
    emulated_producer,
    keyed_topic,
    kill_9_when_open,
    new_topic,
    uncommitted,
)
from kip_support import (
    KeyReports,
    appended_with_key_conditions,
    in_threads,
    key_produced,
    one_winner,
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


@pytest.fixture(scope="module")
def stock():
    with EmbeddedBroker(config=STANDIN_CONFIG) as b:
        yield b


@contextmanager
def standin_behind_proxy():
    """(bootstrap, ProduceWatchProxy): the stand-in advertised at the proxy, so every
    connection after the bootstrap passes through it and it can lose an answer."""
    from kip_support import ProduceWatchProxy

    proxy = ProduceWatchProxy(0)
    try:
        with EmbeddedBroker(config={**STANDIN_CONFIG, "advertised.port": proxy.port}) as b:
            proxy.target_port = b.broker.server.port
            yield b.bootstrap_servers, proxy
    finally:
        proxy.close()


def read_back(bootstrap: str, topic: str, partitions: int = 1):
    return [(r.partition, r.offset, r.key, r.value)
            for r in committed(bootstrap, topic, partitions)]


def test_absent_then_present_and_the_mismatch_names_everything(stock):
    bootstrap = stock.bootstrap_servers
    topic = keyed_topic(bootstrap, "emk-basic", 3)
    with emulated_producer(bootstrap, unique("w")) as p:
        err, partition, created, _ = key_produced(p, topic, b"order-7", b"created", KEY_ABSENT)
        assert err is None and created == 0
        err, again, _, _ = key_produced(p, topic, b"order-7", b"created", KEY_ABSENT)
        assert again == partition
        assert isinstance(err, KeyConditionKafkaError)
        assert (err.code(), err.name()) == (KEY_OFFSET_MISMATCH, "KEY_OFFSET_MISMATCH")
        assert (err.topic, err.partition, err.key) == (topic, partition, b"order-7")
        assert (err.expected, err.actual) == (KEY_ABSENT, created)
        assert f"{topic}[{partition}]" in err.str()
        # one record at 0, its commit marker at 1: the next is at 2
        err, _, paid, _ = key_produced(p, topic, b"order-7", b"paid", created)
        assert err is None and paid == 2
        err, _, _, _ = key_produced(p, topic, b"order-7", b"late", created)
        assert (err.code(), err.actual) == (KEY_OFFSET_MISMATCH, paid)
    assert read_back(bootstrap, topic, 3) == [(partition, 0, b"order-7", b"created"),
                                              (partition, 2, b"order-7", b"paid")]


def test_append_waits_for_the_verdict_of_key_conditions(stock):
    """Producer.append(expected_key_offsets=) emulated: each call one transaction of the
    writer; the refused pair is aborted or never sent, so read_committed sees four records."""
    topic = keyed_topic(stock.bootstrap_servers, "key-append")
    with emulated_producer(stock.bootstrap_servers) as p:
        first, second = appended_with_key_conditions(p, topic)
    assert [(o, k, v) for _, o, k, v in read_back(stock.bootstrap_servers, topic)] == [
        (first, b"order-1", b"created"), (first + 1, b"order-2", b"created"),
        (second, b"order-1", b"paid"), (second + 1, b"order-2", b"paid")]


def test_a_stale_condition_refuses_the_whole_batch(stock):
    """produce_batch and produce_arrays: one partition's records of a call are appended
    together or not at all, every condition checked against the state before them; the same
    key twice in a call (conditioned once) is fine."""
    bootstrap = stock.bootstrap_servers
    topic = keyed_topic(bootstrap, "emk-batch")
    reports = KeyReports()
    with emulated_producer(bootstrap, unique("w")) as p:
        first = [{"key": b"a", "value": b"1", "expected_key_offset": KEY_ABSENT},
                 {"key": b"b", "value": b"1", "expected_key_offset": KEY_ABSENT},
                 {"key": b"a", "value": b"2"},
                 {"key": b"c", "value": b"1"}]
        assert p.produce_batch(topic, first, partition=0, on_delivery=reports) == 4
        assert p.flush(20) == 0
        assert [(e, o) for e, _, o, _ in reports.items] == [(None, 0), (None, 1), (None, 2),
                                                            (None, 3)]
        reports.items.clear()
        # a's last record is at 2 now (checked against the state before the batch), b's
        # condition is stale: nothing of the call is written
        second = [{"key": b"a", "value": b"3", "expected_key_offset": 2},
                  {"key": b"b", "value": b"2", "expected_key_offset": KEY_ABSENT},
                  {"key": b"d", "value": b"2"}]
        p.produce_batch(topic, second, partition=0, on_delivery=reports)
        assert p.flush(20) == 0
        by_key = {key: err for err, _, _, key in reports.items}
        assert (by_key[b"b"].code(), by_key[b"b"].actual) == (KEY_OFFSET_MISMATCH, 1)
        assert by_key[b"a"].code() == ec.OPERATION_NOT_ATTEMPTED
        assert by_key[b"d"].code() == ec.OPERATION_NOT_ATTEMPTED
        # produce_arrays: 20 keys absent, then conditions on half of them, one stale
        keys = [b"k%d" % i for i in range(20)]
        batches: list = []
        p.produce_arrays(topic, [b"v"] * 20, keys=keys, partition=0,
                         expected_key_offsets=np.full(20, KEY_ABSENT),
                         on_delivery=lambda err, r: batches.append((err, r.offset(), r.count)))
        assert p.flush(20) == 0
        assert batches == [(None, 5, 20)]  # 4 records and their marker before
        expected = np.full(20, NO_KEY_CONDITION, dtype=np.int64)
        expected[::2] = np.arange(5, 25, 2)
        expected[10] = 3
        per_record = KeyReports()
        p.produce_arrays(topic, [b"w"] * 20, keys=keys, partition=0, per_record=True,
                         expected_key_offsets=expected, on_delivery=per_record)
        assert p.flush(20) == 0
        codes = [err.code() for err, _, _, _ in per_record.items]
        assert codes.count(KEY_OFFSET_MISMATCH) == 1 and codes.count(
            ec.OPERATION_NOT_ATTEMPTED) == 19
    got = read_back(bootstrap, topic)
    assert [o for _, o, _, _ in got] == [0, 1, 2, 3] + list(range(5, 25))
    assert all(v in (b"1", b"2", b"v") for _, _, _, v in got)


def test_concurrent_writers_on_one_key_exactly_one_wins(stock):
    """Writers with different transactional ids, each with its own index: exactly one wins,
    every other gets KEY_OFFSET_MISMATCH with the winner's offset."""
    bootstrap = stock.bootstrap_servers
    topic = keyed_topic(bootstrap, "emk-race")
    with emulated_producer(bootstrap, unique("w")) as p:
        assert key_produced(p, topic, b"acct", b"open", KEY_ABSENT, partition=0)[0] is None
    writers = 4
    barrier = threading.Barrier(writers)
    outcomes: list = [None] * writers

    def write(i: int) -> None:
        with emulated_producer(bootstrap, unique(f"w{i}")) as p:
            # the index is built before the race (the writer's first condition)
            assert key_produced(p, topic, b"own-%d" % i, b"x", KEY_ABSENT, partition=0)[0] is None
            barrier.wait(30)
            outcomes[i] = key_produced(p, topic, b"acct", b"debit-%d" % i, 0, partition=0)

    in_threads(writers, write, 90)
    winner = one_winner(outcomes)
    acct = [(o, v) for _, o, k, v in read_back(bootstrap, topic) if k == b"acct"]
    assert acct == [(0, b"open"), (winner[2], acct[1][1])]


def test_a_writer_at_its_own_end_still_sees_a_record_appended_since(stock):
    """A writer whose last commit left the log ending at its marker writes its next call
    without looking at the log first; a record another producer appended since makes that
    attempt land past the index: aborted (in the log, never visible to read_committed), the
    record read, and the stale condition refused with the record's offset."""
    bootstrap = stock.bootstrap_servers
    topic = keyed_topic(bootstrap, "emk-at-end")
    with emulated_producer(bootstrap, unique("w")) as p:
        err, _, created, _ = key_produced(p, topic, b"order-1", b"created", KEY_ABSENT,
                                          partition=0)
        assert err is None
        other = StockProducer({"bootstrap.servers": bootstrap})
        other.produce(topic, b"paid", b"order-1", partition=0)
        assert other.flush(20) == 0
        [(_, paid, _, _)] = [r for r in read_back(bootstrap, topic) if r[3] == b"paid"]
        err, _, _, _ = key_produced(p, topic, b"order-1", b"shipped", created, partition=0)
        assert isinstance(err, KeyConditionKafkaError) and err.code() == KEY_OFFSET_MISMATCH
        assert (err.expected, err.actual) == (created, paid)
        err, _, shipped, _ = key_produced(p, topic, b"order-1", b"shipped", paid, partition=0)
        assert err is None
    assert [(o, v) for _, o, _, v in read_back(bootstrap, topic)] == [
        (created, b"created"), (paid, b"paid"), (shipped, b"shipped")]
    attempts = [r.offset for r in uncommitted(bootstrap, topic) if r.value == b"shipped"]
    assert len(attempts) == 2 and attempts[-1] == shipped  # the aborted one, then this one


def test_writers_on_different_keys_of_one_partition_never_conflict(stock):
    bootstrap = stock.bootstrap_servers
    topic = keyed_topic(bootstrap, "emk-keys")
    writers, rounds = 3, 4
    errors: list = []

    def write(i: int) -> None:
        with emulated_producer(bootstrap, unique(f"w{i}")) as p:
            last = KEY_ABSENT
            for r in range(rounds):
                err, _, offset, _ = key_produced(p, topic, b"key-%d" % i, b"%d" % r, last,
                                             partition=0)
                if err is not None:
                    errors.append(err)
                    return
                last = offset

    in_threads(writers, write)
    assert errors == []
    got = read_back(bootstrap, topic)
    for i in range(writers):
        assert [v for _, _, k, v in got if k == b"key-%d" % i] == [b"0", b"1", b"2", b"3"]


def test_restart_rebuilds_the_same_index_and_a_dead_writer_never_counts(stock):
    """A restarted writer (same kip.emulation.transactional.id) reads the partition again and
    answers as before: a tombstone is absent, an aborted record and a record of a writer
    killed -9 in its transaction (fenced by the restart) never count."""
    bootstrap = stock.bootstrap_servers
    topic = keyed_topic(bootstrap, "emk-restart")
    writer = unique("writer")
    with emulated_producer(bootstrap, writer) as p:
        assert key_produced(p, topic, b"k", b"v0", KEY_ABSENT, partition=0)[:3] == (None, 0, 0)
        assert key_produced(p, topic, b"t", b"x", KEY_ABSENT, partition=0)[:3] == (None, 0, 2)
        assert key_produced(p, topic, b"t", None, 2, partition=0)[:3] == (None, 0, 4)  # tombstone
    aborted = StockProducer({"bootstrap.servers": bootstrap, "transactional.id": unique("a")})
    aborted.init_transactions(20)
    aborted.begin_transaction()
    aborted.produce(topic, b"aborted", b"k", partition=0)
    aborted.flush(20)
    aborted.abort_transaction(20)
    kill_9_when_open(DYING_KEYED_WRITER, bootstrap, topic, writer)
    with emulated_producer(bootstrap, writer) as p:
        err, _, _, _ = key_produced(p, topic, b"k", b"stale", KEY_ABSENT, partition=0)
        assert (err.code(), err.actual) == (KEY_OFFSET_MISMATCH, 0)
        err, _, _, _ = key_produced(p, topic, b"t", b"stale", 2, partition=0)
        assert (err.code(), err.actual) == (KEY_OFFSET_MISMATCH, KEY_ABSENT)
        err, _, k1, _ = key_produced(p, topic, b"k", b"v1", 0, partition=0)
        assert err is None
        assert key_produced(p, topic, b"t", b"again", KEY_ABSENT, partition=0)[0] is None
    got = read_back(bootstrap, topic)
    assert [(k, v) for _, _, k, v in got] == [(b"k", b"v0"), (b"t", b"x"), (b"t", None),
                                              (b"k", b"v1"), (b"t", b"again")]
    assert (0, k1, b"k", b"v1") in got


def test_compaction_between_writes_changes_no_answer():
    with EmbeddedBroker(config=STANDIN_CONFIG) as b:
        bootstrap = b.bootstrap_servers
        topic = unique("emk-compact")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1, config={
            "cleanup.policy": "compact", "segment.bytes": "1024",
            "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "0"})])[topic].result(20)
        # small batches: the 1 KiB segments close behind them, and the cleaner takes those
        plain = StockProducer({"bootstrap.servers": bootstrap, "batch.num.messages": 4})
        for i in range(60):
            plain.produce(topic, b"%d" % i + b"-" * 40, b"hot", partition=0)
        plain.produce(topic, b"gone", b"tomb", partition=0)
        plain.produce(topic, None, b"tomb", partition=0)
        for i in range(40):
            plain.produce(topic, b"filler" + b"-" * 40, b"f%d" % i, partition=0)
        assert plain.flush(20) == 0
        with emulated_producer(bootstrap, unique("w")) as p:
            before = key_produced(p, topic, b"hot", b"?", KEY_ABSENT, partition=0)[0]
            assert before.code() == KEY_OFFSET_MISMATCH and before.actual == 59
            log = b.broker.logs.get_log(topic, 0)
            assert log.compact().segments_cleaned > 0
            log.compact()  # (the tombstone's own segment, now that the horizon passed)
        with emulated_producer(bootstrap, unique("w")) as p:  # a new index, read compacted
            err = key_produced(p, topic, b"hot", b"?", KEY_ABSENT, partition=0)[0]
            assert (err.code(), err.actual) == (KEY_OFFSET_MISMATCH, 59)
            assert key_produced(p, topic, b"tomb", b"back", KEY_ABSENT, partition=0)[0] is None
            assert key_produced(p, topic, b"hot", b"next", 59, partition=0)[0] is None
        got = read_back(bootstrap, topic)
        assert [o for _, o, k, _ in got if k == b"hot"][0] == 59  # the cleaner ran
        assert [v for _, _, k, v in got if k == b"tomb"] == [b"back"]


def test_a_partition_count_change_refuses_every_condition(stock):
    bootstrap = stock.bootstrap_servers
    topic = keyed_topic(bootstrap, "emk-grow", 2)
    with emulated_producer(bootstrap, unique("w"),
                           topic_metadata_refresh_interval_ms=100) as p:
        err, _, offset, _ = key_produced(p, topic, b"k", b"1", KEY_ABSENT)
        assert err is None
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_partitions([NewPartitions(topic, 4)])[topic].result(15)
        for _ in range(2):  # whether the producer still partitions with 2 or already with 4
            err = key_produced(p, topic, b"k", b"2", offset)[0]
            assert err.code() == ec.PARTITION_COUNT_MISMATCH, err
            assert "partition count change" in err.str()
    assert len(read_back(bootstrap, topic, 4)) == 1


def test_a_topic_whose_retention_can_age_a_key_out_is_refused_unless_allowed(stock):
    """Default topic configs (cleanup.policy=delete, retention.ms 7 days) can delete a key's
    last record: refused, naming the configs; with kip.emulation.key.retention=true a key
    whose last record was deleted (DeleteRecords here) answers absent, as in native mode."""
    from confluent_kafka import TopicPartition

    bootstrap = stock.bootstrap_servers
    topic = new_topic(bootstrap, "emk-retention")
    with emulated_producer(bootstrap, unique("w")) as p:
        err = key_produced(p, topic, b"k", b"v", KEY_ABSENT, partition=0)[0]
        assert err.code() == KafkaError.INVALID_CONFIG
        assert "retention.ms" in err.str() and "kip.emulation.key.retention" in err.str()
    assert read_back(bootstrap, topic) == []
    with emulated_producer(bootstrap, unique("w"), **{"kip.emulation.key.retention": True}) as p:
        assert key_produced(p, topic, b"k", b"v", KEY_ABSENT, partition=0)[:3] == (None, 0, 0)
        assert key_produced(p, topic, b"other", b"v", KEY_ABSENT, partition=0)[:3] == (None, 0, 2)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        [deleted] = admin.delete_records([TopicPartition(topic, 0, 1)]).values()
        deleted.result(20)  # k's record at 0 is gone
        err = key_produced(p, topic, b"k", b"again", 0, partition=0)[0]
        assert (err.code(), err.actual) == (KEY_OFFSET_MISMATCH, KEY_ABSENT)
        assert key_produced(p, topic, b"k", b"again", KEY_ABSENT, partition=0)[0] is None


def test_a_zombie_writer_never_commits(stock):
    """Failover: a second writer with the same kip.emulation.transactional.id takes over (its
    start fences the first); the first one's next conditional append fails, nothing of it
    is visible, and the new owner's index answers as before."""
    bootstrap = stock.bootstrap_servers
    topic = keyed_topic(bootstrap, "emk-zombie")
    writer = unique("writer")
    zombie = emulated_producer(bootstrap, writer)
    try:
        assert key_produced(zombie, topic, b"k", b"v0", KEY_ABSENT, partition=0)[:3] == (None, 0, 0)
        with emulated_producer(bootstrap, writer) as owner:
            assert key_produced(owner, topic, b"other", b"x", KEY_ABSENT, partition=0)[0] is None
            err = key_produced(zombie, topic, b"k", b"zombie", 0, partition=0)[0]
            assert err is not None and err.code() != KEY_OFFSET_MISMATCH, err
            assert key_produced(owner, topic, b"k", b"v1", 0, partition=0)[0] is None
    finally:
        zombie.close()
    assert [(k, v) for _, _, k, v in read_back(bootstrap, topic)] == [
        (b"k", b"v0"), (b"other", b"x"), (b"k", b"v1")]


def test_retry_after_a_lost_acknowledgement_writes_once():
    """The conditional record is in the log but its Produce answer is lost; the writer's
    idempotent producer sends it again and is answered with the first attempt's offset."""
    with standin_behind_proxy() as (bootstrap, proxy):
        topic = keyed_topic(bootstrap, "emk-cut")
        with emulated_producer(bootstrap, unique("w")) as p:
            assert key_produced(p, topic, b"head", b"0", KEY_ABSENT, partition=0)[0] is None
            proxy.drop_next_produce_response()
            assert key_produced(p, topic, b"k", b"once", KEY_ABSENT, partition=0)[:3] == (
                None, 0, 2)
            err = key_produced(p, topic, b"k", b"twice", KEY_ABSENT, partition=0)[0]
            assert (err.code(), err.actual) == (KEY_OFFSET_MISMATCH, 2)
        assert proxy.dropped.is_set(), "the proxy never cut the response"
        assert [(o, k) for _, o, k, _ in read_back(bootstrap, topic)] == [(0, b"head"),
                                                                       (2, b"k")]


def test_a_lost_commit_answer_is_recognised_and_the_writer_goes_on():
    """The answer to the commit (EndTxn) of a conditional append is lost: asked again at
    once, Kafka answers the commit it already made, and the call reports the record written.
    Lost while the broker stays out of reach past the call's timeout: the call fails with a
    retriable error (its outcome unknown); the writer finishes that commit before its next
    transaction, and appending the same event again is refused naming the first attempt's
    record, where the caller finds its own. The writer is not stuck: other appends go on."""
    from kip_support import END_TXN, wait_until

    with standin_behind_proxy() as (bootstrap, proxy):
        topic = keyed_topic(bootstrap, "emk-lost-commit")
        short = {"message.timeout.ms": 3000, "socket.timeout.ms": 2000}
        with emulated_producer(bootstrap, unique("w"), **short) as p:
            assert key_produced(p, topic, b"head", b"0", KEY_ABSENT, partition=0)[0] is None
            proxy.drop_next_produce_response(END_TXN)
            assert key_produced(p, topic, b"a", b"a1", KEY_ABSENT, partition=0)[:3] == (
                None, 0, 2)
            assert proxy.dropped.is_set()
            proxy.drop_next_produce_response(END_TXN, refuse_s=5)
            err = key_produced(p, topic, b"b", b"b1", KEY_ABSENT, partition=0)[0]
            assert proxy.dropped.is_set()
            assert err is not None and err.retriable(), err
            wait_until(lambda: not proxy.refusing, 20, "the broker in reach again")
            for _ in range(5):  # as a caller does while the error is retriable (reconnecting)
                err = key_produced(p, topic, b"b", b"b1", KEY_ABSENT, partition=0)[0]
                if err is None or not err.retriable():
                    break
            assert (err.code(), err.actual) == (KEY_OFFSET_MISMATCH, 4), err
            assert key_produced(p, topic, b"c", b"c1", KEY_ABSENT, partition=0)[:3] == (
                None, 0, 6)
        assert [(o, k, v) for _, o, k, v in read_back(bootstrap, topic)] == [
            (0, b"head", b"0"), (2, b"a", b"a1"), (4, b"b", b"b1"), (6, b"c", b"c1")]


def test_the_index_topic_gives_the_same_answers_reading_only_the_tail(stock):
    """With kip.emulation.key.index.topic, each conditional transaction also writes the
    changed answers and a checkpoint to the index topic; a new writer reads those and the
    partition only from the checkpoint on (here: a plain writer's records after it), and
    answers as a full read does, tombstones and the partition count included."""
    from kipproducer.producer import emulation_of

    bootstrap = stock.bootstrap_servers
    topic = keyed_topic(bootstrap, "emk-index")
    index_topic = unique("key-index")
    plain = StockProducer({"bootstrap.servers": bootstrap})
    for i in range(200):
        plain.produce(topic, b"history-%d" % i, b"k%d" % (i % 20), partition=0)
    assert plain.flush(20) == 0
    config = {"kip.emulation.key.index.topic": index_topic}
    with emulated_producer(bootstrap, unique("w"), **config) as p:
        assert key_produced(p, topic, b"k1", b"new", 181, partition=0)[:3] == (None, 0, 200)
        assert key_produced(p, topic, b"k2", None, 182, partition=0)[:3] == (None, 0, 202)
        assert emulation_of(p).key_records_read == 200
    plain.produce(topic, b"after", b"k3", partition=0)  # at 204, after the checkpoint
    plain.produce(topic, None, b"k4", partition=0)      # a tombstone at 205
    assert plain.flush(20) == 0
    answers = {}
    for with_index in (True, False):
        extra = config if with_index else {}
        with emulated_producer(bootstrap, unique("w"), **extra) as p:
            got = []
            for key, expected in ((b"k1", 0), (b"k2", 0), (b"k3", 0), (b"k4", 0), (b"k5", 0),
                                  (b"zz", 0)):
                err = key_produced(p, topic, key, b"?", expected, partition=0)[0]
                got.append((key, err.actual))
            answers[with_index] = got
            read = emulation_of(p).key_records_read
            # the index topic: only the tail (the commit marker's offset, then 204 and 205)
            assert read == (2 if with_index else 204), read
    assert answers[True] == answers[False] == [
        (b"k1", 200), (b"k2", KEY_ABSENT), (b"k3", 204), (b"k4", KEY_ABSENT), (b"k5", 185),
        (b"zz", KEY_ABSENT)]


def test_a_short_message_timeout_still_starts_the_writer(stock):
    """message.timeout.ms of 3 s: the emulation's writer takes it as its transaction timeout
    and shortens its socket timeout to match (librdkafka refused the writer's config before:
    `socket.timeout.ms` must be <= `transaction.timeout.ms` + 100)."""
    topic = keyed_topic(stock.bootstrap_servers, "key-short-timeout")
    with emulated_producer(stock.bootstrap_servers, **{"message.timeout.ms": 3000}) as p:
        assert p.append(topic, [b"created"], keys=[b"order-1"], partition=0,
                        expected_key_offsets=[KEY_ABSENT]) == 0
    assert [(o, k) for _, o, k, _ in read_back(stock.bootstrap_servers, topic)] == [
        (0, b"order-1")]
