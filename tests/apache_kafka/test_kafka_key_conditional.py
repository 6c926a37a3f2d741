"""Per-key conditional publish (docs/per-key-conditional.md) on a 3-node Apache Kafka, where
it runs emulated through Kafka's own transactions, every read_committed check made by
librdkafka and by Kafka's Java consumer.

* Absent then present; a mismatch names topic, partition, key, expected and actual.
* Four concurrent writers (different transactional ids) on one key: exactly one wins, the
  others are told the winner's offset; writers on different keys of one partition: no false
  conflict.
* A stale condition inside a multi-key batch: the whole batch refused, nothing of it visible.
* Restart and rebuild: the same answers; a tombstone is absent, an aborted record and the
  record of a writer killed -9 in its transaction never count.
* A takeover through kip.emulation.key.index.topic reads only the partition's tail and
  answers as a full read does.
* Failover: a writer fenced by a new owner with its id (a zombie) never commits.
* A partition count change refuses every condition.
* Kafka's cleaner compacting the partition and removing a tombstone between two writers
  changes no answer.
* Inside the Producer's own transaction (txn_key_scenarios.py): the transaction's own
  records count, a stale condition fails the transaction, another producer's record between
  two calls fails it (CONCURRENT_TRANSACTIONS), a zombie with the same transactional.id never
  commits, a partition written outside key conditions first is refused.
* A lost acknowledgement (1 node behind a proxy that cuts the connection at the first byte of
  the answer: the Produce's, the commit's EndTxn's, and EndTxn's with the node out of reach
  past the call's timeout): written once; the caller appending it again is refused with its
  offset and finds its own record there; the writer goes on.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import kafka_jars
import pytest
from confluent_kafka import Producer as StockProducer
from confluent_kafka.admin import NewPartitions
from kafka_cluster import KafkaCluster

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kip"))
from emulated_support import DYING_KEYED_WRITER, kill_9_when_open  # noqa: E402
from kafka_support import rdkafka_read, read_both
from kip_support import (  # noqa: E402
    END_TXN,
    PRODUCE,
    ProduceWatchProxy,
    in_threads,
    one_winner,
    wait_until,
)
from scenario_support import unique
from txn_key_scenarios import SCENARIOS  # noqa: E402

from kipproducer import Producer
from kipproducer.errors import KEY_ABSENT, KEY_OFFSET_MISMATCH, KeyConditionKafkaError
from kipproducer.producer import emulation_of
from kipproducer.protocol import error_codes as ec

#: Topics that keep every key's last record (without kip.emulation.key.retention, a topic
#: whose retention can delete one is refused)
KEEP = {"retention.ms": "-1"}


def emulated(bootstrap: str, writer: str | None = None, **extra) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                     "kip.mode": "emulated",
                     "kip.emulation.transactional.id": writer or unique("writer"), **extra})


def produced(p: Producer, topic: str, key, value, expected, **kw):
    """(error, partition, offset) of one conditional record."""
    out: list = []
    p.produce(topic, value, key, expected_key_offset=expected,
              on_delivery=lambda err, msg: out.append((err, msg.partition(), msg.offset())),
              **kw)
    assert p.flush(60) == 0
    [report] = out
    return report


def test_absent_present_and_racing_writers(kafka3: KafkaCluster) -> None:
    topic = kafka3.unique_topic("keycond", 3, config=KEEP)
    with emulated(kafka3.bootstrap) as p:
        err, partition, created = produced(p, topic, b"acct", b"open", KEY_ABSENT)
        assert err is None
        err, _, _ = produced(p, topic, b"acct", b"open", KEY_ABSENT)
        assert isinstance(err, KeyConditionKafkaError)
        assert (err.code(), err.topic, err.partition, err.key, err.expected, err.actual) == (
            KEY_OFFSET_MISMATCH, topic, partition, b"acct", KEY_ABSENT, created)
    writers = 4
    barrier = threading.Barrier(writers)
    outcomes: list = [None] * writers
    own: list = [None] * writers

    def write(i: int) -> None:
        with emulated(kafka3.bootstrap) as w:
            # the writer's index is built (and it writes a key of its own) before the race
            own[i] = produced(w, topic, b"own-%d" % i, b"x", KEY_ABSENT, partition=partition)
            barrier.wait(60)
            outcomes[i] = produced(w, topic, b"acct", b"debit-%d" % i, created,
                                   partition=partition)
            # after the race: its own key once more, conditioned on its own last offset
            own[i] = produced(w, topic, b"own-%d" % i, b"y", own[i][2], partition=partition)

    in_threads(writers, write, 120)
    winner = one_winner(outcomes)
    assert all(o[0] is None for o in own), own  # different keys: no false conflict
    log = read_both(kafka3, topic, 3)[partition]
    acct = [(off, v) for off, k, v in log if k == b"acct"]
    assert acct == [(created, b"open"), (winner[2], acct[1][1])]
    for i in range(writers):
        assert [v for _, k, v in log if k == b"own-%d" % i] == [b"x", b"y"]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
def test_key_conditions_inside_a_transaction(kafka3: KafkaCluster, scenario) -> None:
    """The Producer's own transaction (a producer group's exactly-once member is one):
    txn_key_scenarios.py, each read checked by librdkafka and Kafka's Java consumer."""
    scenario(kafka3.bootstrap, kafka3.unique_topic("keycond-txn", config=KEEP),
             lambda topic: read_both(kafka3, topic, 1)[0])


def test_a_stale_condition_refuses_the_whole_batch(kafka3: KafkaCluster) -> None:
    topic = kafka3.unique_topic("keycond-batch", config=KEEP)
    reports: list = []

    def report(err, msg):
        reports.append((msg.key(), None if err is None else err.code(),
                        None if err is None else getattr(err, "actual", None)))

    with emulated(kafka3.bootstrap) as p:
        p.produce_batch(topic, [{"key": b"a", "value": b"1", "expected_key_offset": KEY_ABSENT},
                                {"key": b"b", "value": b"1", "expected_key_offset": KEY_ABSENT}],
                        partition=0, on_delivery=report)
        assert p.flush(60) == 0
        # a is at 0 (fine), b at 1 (stale: expected absent); the same key twice, once
        # conditioned; an unconditioned record: none of them is written
        p.produce_batch(topic, [{"key": b"a", "value": b"2", "expected_key_offset": 0},
                                {"key": b"a", "value": b"3"},
                                {"key": b"b", "value": b"2", "expected_key_offset": KEY_ABSENT},
                                {"key": b"c", "value": b"2"}],
                        partition=0, on_delivery=report)
        assert p.flush(60) == 0
    assert reports[:2] == [(b"a", None, None), (b"b", None, None)]
    assert sorted(reports[2:]) == [(b"a", ec.OPERATION_NOT_ATTEMPTED, KEY_ABSENT),
                                   (b"a", ec.OPERATION_NOT_ATTEMPTED, KEY_ABSENT),
                                   (b"b", KEY_OFFSET_MISMATCH, 1),
                                   (b"c", ec.OPERATION_NOT_ATTEMPTED, KEY_ABSENT)]
    assert read_both(kafka3, topic, 1)[0] == [(0, b"a", b"1"), (1, b"b", b"1")]


def test_restart_rebuilds_the_same_answers(kafka3: KafkaCluster) -> None:
    """A tombstone is absent; an aborted record and the record of a writer killed -9 inside
    its transaction (the restarted writer, same kip.emulation.transactional.id, fences it)
    never become a key's last offset."""
    topic = kafka3.unique_topic("keycond-restart", config=KEEP)
    writer = unique("writer")
    with emulated(kafka3.bootstrap, writer) as p:
        assert produced(p, topic, b"k", b"v0", KEY_ABSENT, partition=0) == (None, 0, 0)
        assert produced(p, topic, b"t", b"x", KEY_ABSENT, partition=0) == (None, 0, 2)
        assert produced(p, topic, b"t", None, 2, partition=0) == (None, 0, 4)
    aborted = StockProducer({"bootstrap.servers": kafka3.bootstrap,
                             "transactional.id": unique("other")})
    aborted.init_transactions(60)
    aborted.begin_transaction()
    aborted.produce(topic, b"aborted", b"k", partition=0)
    aborted.flush(60)
    aborted.abort_transaction(60)
    kill_9_when_open(DYING_KEYED_WRITER, kafka3.bootstrap, topic, writer)
    with emulated(kafka3.bootstrap, writer) as p:
        err, _, _ = produced(p, topic, b"k", b"stale", KEY_ABSENT, partition=0)
        assert (err.code(), err.actual) == (KEY_OFFSET_MISMATCH, 0)
        err, _, _ = produced(p, topic, b"t", b"stale", 2, partition=0)
        assert (err.code(), err.actual) == (KEY_OFFSET_MISMATCH, KEY_ABSENT)
        err, _, k1 = produced(p, topic, b"k", b"v1", 0, partition=0)
        assert err is None
        assert produced(p, topic, b"t", b"again", KEY_ABSENT, partition=0)[0] is None
    log = read_both(kafka3, topic, 1)[0]
    assert [(k, v) for _, k, v in log] == [(b"k", b"v0"), (b"t", b"x"), (b"t", None),
                                           (b"k", b"v1"), (b"t", b"again")]
    assert (k1, b"k", b"v1") in log


def test_a_partition_count_change_refuses_every_condition(kafka3: KafkaCluster) -> None:
    topic = kafka3.unique_topic("keycond-grow", 2, config=KEEP)
    with emulated(kafka3.bootstrap, **{"topic.metadata.refresh.interval.ms": 200}) as p:
        err, _, offset = produced(p, topic, b"k", b"1", KEY_ABSENT)
        assert err is None
        kafka3.admin().create_partitions([NewPartitions(topic, 4)])[topic].result(60)
        # a change is one once the metadata shows it: until then every node answers 2, and a
        # record partitioned with 2 goes where it always did
        kafka3.wait_partition_count_on_every_node(topic, 4)
        for _ in range(2):  # whether the producer still partitions with 2 or already with 4
            err = produced(p, topic, b"k", b"2", offset)[0]
            assert err.code() == ec.PARTITION_COUNT_MISMATCH, err
            assert "partition count change" in err.str()
    assert sum(len(r) for r in read_both(kafka3, topic, 4).values()) == 1


def test_failover_a_zombie_owner_never_commits(kafka3: KafkaCluster) -> None:
    topic = kafka3.unique_topic("keycond-zombie", config=KEEP)
    writer = unique("writer")
    zombie = emulated(kafka3.bootstrap, writer)
    try:
        assert produced(zombie, topic, b"k", b"v0", KEY_ABSENT, partition=0) == (None, 0, 0)
        with emulated(kafka3.bootstrap, writer) as owner:  # fences the zombie
            assert produced(owner, topic, b"other", b"x", KEY_ABSENT, partition=0)[0] is None
            err = produced(zombie, topic, b"k", b"zombie", 0, partition=0)[0]
            assert err is not None and err.code() != KEY_OFFSET_MISMATCH, err
            assert produced(owner, topic, b"k", b"v1", 0, partition=0)[0] is None
    finally:
        zombie.close()
    assert [(k, v) for _, k, v in read_both(kafka3, topic, 1)[0]] == [
        (b"k", b"v0"), (b"other", b"x"), (b"k", b"v1")]


def test_takeover_through_the_index_topic_answers_as_a_full_read(kafka3: KafkaCluster) -> None:
    topic = kafka3.unique_topic("keycond-index", config=KEEP)
    index_topic = unique("key-index")
    plain = StockProducer({"bootstrap.servers": kafka3.bootstrap, "enable.idempotence": True})
    for i in range(100):
        plain.produce(topic, b"history-%d" % i, b"k%d" % (i % 10), partition=0)
    assert plain.flush(60) == 0
    extra = {"kip.emulation.key.index.topic": index_topic}
    with emulated(kafka3.bootstrap, **extra) as p:
        assert produced(p, topic, b"k1", b"new", 91, partition=0) == (None, 0, 100)
        assert produced(p, topic, b"k2", None, 92, partition=0) == (None, 0, 102)
    plain.produce(topic, b"after", b"k3", partition=0)  # after the checkpoint: at 104
    assert plain.flush(60) == 0
    answers = {}
    for label, config in (("index", extra), ("full", {})):
        with emulated(kafka3.bootstrap, **config) as p:
            answers[label] = [(key, produced(p, topic, key, b"?", 0, partition=0)[0].actual)
                              for key in (b"k1", b"k2", b"k3", b"k5", b"zz")]
            read = emulation_of(p).key_records_read
            assert read == (1 if label == "index" else 103), (label, read)
    assert answers["index"] == answers["full"] == [
        (b"k1", 100), (b"k2", KEY_ABSENT), (b"k3", 104), (b"k5", 95), (b"zz", KEY_ABSENT)]
    entries = read_both(kafka3, index_topic, 1)[0]
    assert entries and all(k.startswith((b"k", b"c")) for _, k, _ in entries)


def test_compaction_and_a_cleaned_tombstone_change_no_answer(kafka3: KafkaCluster) -> None:
    """Kafka's own cleaner runs between two writers: the key written over and over keeps only
    its last record, and the tombstone is removed; a writer before and one after the
    cleaning give the same answers."""
    topic = kafka3.unique_topic("keycond-compact", config={
        "cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": "0", "min.compaction.lag.ms": "0"})
    plain = StockProducer({"bootstrap.servers": kafka3.bootstrap, "enable.idempotence": True})
    for i in range(30):
        plain.produce(topic, b"%d" % i, b"hot", partition=0)
    plain.produce(topic, b"gone", b"tomb", partition=0)
    plain.produce(topic, None, b"tomb", partition=0)
    assert plain.flush(60) == 0

    def answers() -> list:
        with emulated(kafka3.bootstrap) as p:
            return [(key, produced(p, topic, key, b"?", 0, partition=0)[0].actual)
                    for key in (b"hot", b"tomb")]

    before = answers()
    assert before == [(b"hot", 29), (b"tomb", KEY_ABSENT)]
    deadline = time.monotonic() + 60
    while True:  # new records roll the segments (segment.ms) and keep the cleaner busy
        plain.produce(topic, b"roll", b"roll", partition=0)
        assert plain.flush(60) == 0
        log = rdkafka_read(kafka3.bootstrap, topic, 1)[0]
        keys = [k for _, k, _ in log]
        if keys.count(b"hot") == 1 and b"tomb" not in keys:
            break
        assert time.monotonic() < deadline, f"Kafka's cleaner did not run: {keys[:40]}"
        time.sleep(1)
    assert answers() == before


@pytest.fixture(scope="module")
def kafka1_behind_proxy(tmp_path_factory: pytest.TempPathFactory
                        ) -> Iterator[tuple[KafkaCluster, ProduceWatchProxy]]:
    """1 node whose PLAINTEXT listener is advertised at a proxy that can lose one answer:
    every client connection after the bootstrap (and the node's own transaction marker
    requests) pass through it."""
    kafka_jars.require_in_tests()
    cluster = KafkaCluster(tmp_path_factory.mktemp("kafka1-proxied"), 1)
    proxy = ProduceWatchProxy(cluster.nodes[1].ports["PLAINTEXT"])
    cluster.extra_config["advertised.listeners"] = f"PLAINTEXT://127.0.0.1:{proxy.port}"
    try:
        cluster.start()
        yield cluster, proxy
    finally:
        cluster.close()
        proxy.close()


def test_a_retry_after_a_lost_acknowledgement_is_written_once(
        kafka1_behind_proxy: tuple[KafkaCluster, ProduceWatchProxy]) -> None:
    """docs/per-key-conditional.md, Retries. The answer to a conditional record's Produce is
    lost (the record is in the log), then the answer to another one's commit (the commit is
    made): the writer's idempotent producer asks again at once, Kafka answers with the first
    attempt (its duplicate check; the commit already made), and the call reports the record
    written once at its offset. Then a commit's answer is lost and the node stays out of reach
    past the call's timeout: the call fails with a retriable error, its outcome unknown to the
    caller. Each time, a caller that appends the same event again is refused with the offset
    of the first attempt's record, and finds its own record there; the writer goes on."""
    cluster, proxy = kafka1_behind_proxy
    topic = cluster.unique_topic("keycond-lost-ack", config=KEEP)
    bootstrap = f"127.0.0.1:{proxy.port}"
    short = {"message.timeout.ms": 5000, "socket.timeout.ms": 3000}

    def appended_before(p: Producer, key: bytes, value: bytes) -> int:
        """Append again (as a caller does while the error is retriable: reconnecting):
        refused naming the first attempt's record, which holds ``value``."""
        for _ in range(5):
            err = produced(p, topic, key, value, KEY_ABSENT, partition=0)[0]
            if err is None or not err.retriable():
                break
        assert err is not None and (err.code(), err.expected) == (
            KEY_OFFSET_MISMATCH, KEY_ABSENT), err
        log = rdkafka_read(bootstrap, topic, 1)[0]
        assert [(k, v) for o, k, v in log if o == err.actual] == [(key, value)]
        return err.actual

    with emulated(bootstrap, **short) as p:
        # the probe, the fence and the key index, before any answer is lost
        assert produced(p, topic, b"head", b"0", KEY_ABSENT, partition=0) == (None, 0, 0)
        for api, key in ((PRODUCE, b"lost-produce"), (END_TXN, b"lost-commit")):
            proxy.drop_next_produce_response(api)
            err, _, offset = produced(p, topic, key, b"event-1", KEY_ABSENT, partition=0)
            assert proxy.dropped.is_set(), f"the proxy never lost an answer of API {api}"
            assert err is None, err
            assert appended_before(p, key, b"event-1") == offset
        proxy.drop_next_produce_response(END_TXN, refuse_s=8)
        err = produced(p, topic, b"unknown", b"event-1", KEY_ABSENT, partition=0)[0]
        assert proxy.dropped.is_set()
        assert err is not None and err.retriable(), err
        wait_until(lambda: not proxy.refusing, 30, "the node in reach again")
        appended_before(p, b"unknown", b"event-1")
        assert produced(p, topic, b"after", b"event-1", KEY_ABSENT, partition=0)[0] is None
    log = read_both(cluster, topic, 1)[0]
    assert [(k, v) for _, k, v in log] == [
        (b"head", b"0"), (b"lost-produce", b"event-1"), (b"lost-commit", b"event-1"),
        (b"unknown", b"event-1"), (b"after", b"event-1")]
