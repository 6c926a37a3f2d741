"""Transactions of kipproducer's own engine on Apache Kafka, under both transaction
protocols a 4.x cluster can run: ``transaction.version`` 2 (KIP-890's second part, Kafka
4.x's default: the 3-node ``kafka3``) and 0 (the classic protocol: ``kafka1_tv0``, formatted
with it). The engine speaks Transactions V2 where the cluster runs it (``kafka3``: Produce v12
adds the partition, TxnOffsetCommit v5 the group's, EndTxn v5 bumps the epoch) and the
classic client flow elsewhere (``kafka1_tv0``; on ``kafka3`` too with
``kip.transaction.protocol=classic``): AddPartitionsToTxn v3, AddOffsetsToTxn, EndTxn without
the per-transaction epoch bump, which a 4.x broker serves under either setting, verifying
each transactional produce against the coordinator (KIP-890's first part).

* Committed transactions through the coordinator's node killed -9 (a node other than the
  active controller, the same recovery for every client; and a steady run), beside
  confluent-kafka's transactional Producer in the same test; judged by librdkafka and Kafka's
  Java consumer at read_committed (both must agree): nothing lost, duplicated or reordered,
  kip within 1.5x (+1 s) of confluent.
* Aborted transactions between committed ones, with every produce path: read_committed
  readers (both) see exactly the committed records at their offsets; read_uncommitted ones
  see the aborted ones too.
* Which flow went over the wire (the requests the engine sent, and the epoch after each
  EndTxn), under each flow on each cluster, with every produce path and offsets sent to the
  transaction; ``kip.transaction.protocol=v2`` on a cluster without it is one fatal error.
"""

from __future__ import annotations

import confluent_kafka
import numpy as np
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from kafka_cluster import KafkaCluster
from kafka_support import WireLog, judge_outcomes, read_both
from scenario_support import (
    KEYS,
    PARTITIONS,
    TXN_RECORDS,
    TXNS,
    Outcome,
    assert_within,
    run_transactions,
    sequences,
    unique,
    value,
)

from kipproducer import Producer
from kipproducer.protocol.api_keys import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    END_TXN,
    PRODUCE,
    TXN_OFFSET_COMMIT,
)


def _coordinated_off_the_controller(cluster: KafkaCluster, prefix: str) -> str:
    """A new transactional id whose coordinator is not the KRaft quorum's active controller.
    Killing the active controller's node adds a quorum election to the recovery, which took
    from 1 to 3.5 s more here and differs from one kill to the next; each client's run kills
    its own coordinator, so without this the three clients would be timed through
    different recoveries."""
    # __transaction_state exists once a transactional producer has been initialised
    confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap, "log_level": 0,
                              "transactional.id": unique("tid-warm")}).init_transactions(60)
    controller = cluster.active_controller()
    for _ in range(100):
        tid = unique(prefix)
        if cluster.transaction_coordinator(tid) != controller:
            return tid
    raise AssertionError(f"every __transaction_state partition is led by node {controller}")


def _run(cluster: KafkaCluster, client: str, kind: str) -> Outcome:
    topic = cluster.unique_topic(f"txn-{kind}-{client}", PARTITIONS)
    tid = unique(f"tid-{client}")
    events = {}
    if kind == "coordinator_killed":
        tid = _coordinated_off_the_controller(cluster, f"tid-{client}")
        # found again when killed in transaction 3 (leaders may have moved since)
        events = {3: lambda: cluster.kill(cluster.transaction_coordinator(tid))}
    outcome = run_transactions(client, cluster.bootstrap, topic, tid, events=events)
    for node_id, node in cluster.nodes.items():
        if not node.alive:
            cluster.restart(node_id, wait_in_sync=False)
    cluster.wait_in_sync()
    return outcome


@pytest.mark.timeout(600)
@pytest.mark.parametrize("kind", ["steady", "coordinator_killed"])
def test_transactions_through_the_coordinators_node_killed(kafka3: KafkaCluster,
                                                            kind: str) -> None:
    outcomes = [_run(kafka3, client, kind) for client in ("confluent", "arrays", "batch")]
    judge_outcomes(kafka3, outcomes, PARTITIONS, TXNS * TXN_RECORDS, kind)
    for kip in outcomes[1:]:
        assert_within(kip, outcomes[0])


def _end(producer: Producer, outcome: str, seqs: list[int], committed: list[int]) -> None:
    """Commit the transaction (its records join ``committed``) or abort it, its records in the
    log first, so the abort has records to hide (an abort purges records not sent yet, as
    librdkafka's does)."""
    if outcome == "commit":
        producer.commit_transaction(60)
        committed.extend(seqs)
    else:
        assert producer.flush(60) == 0
        producer.abort_transaction(60)


def _committed_sequences(cluster: KafkaCluster, topic: str,
                         committed: list[int]) -> dict[int, list[int]]:
    """The two partitions read at read_committed (by both readers) hold exactly
    ``committed``; returned per partition."""
    seen = sequences(read_both(cluster, topic, 2, isolation="read_committed"))
    assert sorted(s for seqs in seen.values() for s in seqs) == committed
    return seen


def _committed_and_aborted(cluster: KafkaCluster) -> None:
    topic = cluster.unique_topic("txn-aborts", 2)
    producer = Producer({"bootstrap.servers": cluster.bootstrap,
                         "transactional.id": unique("tid-aborts")})
    producer.init_transactions(60)
    committed: list[int] = []
    sent: list[int] = []
    seq = iter(range(10**6))

    def values(n: int) -> list[int]:
        out = [next(seq) for _ in range(n)]
        sent.extend(out)
        return out

    for how, outcome in [("arrays", "commit"), ("batch", "abort"), ("produce", "commit"),
                         ("arrays", "abort"), ("batch", "commit"), ("produce", "abort"),
                         ("batch", "commit")]:
        producer.begin_transaction()
        seqs = values(50)
        if how == "arrays":
            producer.produce_arrays(topic, np.array([value(i) for i in seqs], dtype=object),
                                    keys=np.array([b"k%02d" % (i % KEYS) for i in seqs],
                                                  dtype=object))
        elif how == "batch":
            assert producer.produce_batch(topic, [{"value": value(i), "key": b"k%02d" % (
                i % KEYS)} for i in seqs]) == len(seqs)
        else:
            for i in seqs:
                producer.produce(topic, value(i), key=b"k%02d" % (i % KEYS))
        _end(producer, outcome, seqs, committed)
    producer.close()
    seen = _committed_sequences(cluster, topic, committed)
    for seqs in seen.values():
        assert seqs == sorted(seqs)
    every = sequences(read_both(cluster, topic, 2, isolation="read_uncommitted"))
    assert sorted(s for seqs in every.values() for s in seqs) == sent


def test_aborted_transactions_on_transaction_version_2(kafka3: KafkaCluster) -> None:
    assert "transaction.version" in kafka3.finalized_features()
    _committed_and_aborted(kafka3)


def test_aborted_transactions_on_transaction_version_0(kafka1_tv0: KafkaCluster) -> None:
    features = kafka1_tv0.finalized_features()
    line = next(ln for ln in features.splitlines() if "transaction.version" in ln)
    assert "FinalizedVersionLevel: 0" in line, line
    _committed_and_aborted(kafka1_tv0)


@pytest.mark.timeout(300)
def test_transactions_on_transaction_version_0_beside_confluent(
        kafka1_tv0: KafkaCluster) -> None:
    outcomes = []
    for client in ("confluent", "arrays", "batch"):
        topic = kafka1_tv0.unique_topic(f"txn-tv0-{client}", PARTITIONS)
        outcomes.append(run_transactions(client, kafka1_tv0.bootstrap, topic,
                                         unique(f"tid-tv0-{client}")))
    judge_outcomes(kafka1_tv0, outcomes, PARTITIONS, TXNS * TXN_RECORDS, "tv0")
    for kip in outcomes[1:]:
        assert_within(kip, outcomes[0])


# (cluster fixture, kip.transaction.protocol, whether V2 is spoken)
FLOWS = [("kafka3", "auto", True), ("kafka3", "classic", False), ("kafka1_tv0", "auto", False)]


@pytest.mark.parametrize(("cluster_name", "setting", "v2"), FLOWS)
def test_the_transaction_flow_on_the_wire(request: pytest.FixtureRequest,
                                          monkeypatch: pytest.MonkeyPatch, cluster_name: str,
                                          setting: str, v2: bool) -> None:
    cluster: KafkaCluster = request.getfixturevalue(cluster_name)
    wire = WireLog(monkeypatch)
    topic = cluster.unique_topic(f"txn-flow-{setting}", 2)
    group = unique("txn-flow-group")
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    producer = Producer({"bootstrap.servers": cluster.bootstrap,
                         "transactional.id": unique(f"tid-flow-{setting}"),
                         "kip.transaction.protocol": setting})
    producer.init_transactions(60)
    epochs = [producer.transaction_producer()]
    committed: list[int] = []
    seq = iter(range(10**6))
    for how, outcome in [("produce", "commit"), ("batch", "commit"), ("arrays", "abort"),
                         ("produce", "commit")]:
        producer.begin_transaction()
        seqs = [next(seq) for _ in range(20)]
        if how == "produce":
            for i in seqs:
                producer.produce(topic, value(i), partition=i % 2)
        elif how == "batch":
            assert producer.produce_batch(topic, [{"value": value(i), "partition": i % 2}
                                                  for i in seqs]) == len(seqs)
            producer.send_offsets_to_transaction([TopicPartition(topic, 0, 5)],
                                                 consumer.consumer_group_metadata(), 60)
        else:
            producer.produce_arrays(topic, np.array([value(i) for i in seqs], dtype=object),
                                    partition=1)
        _end(producer, outcome, seqs, committed)
        epochs.append(producer.transaction_producer())
    producer.close()
    # V2: every EndTxn bumped the epoch, and the coordinator took the bumped one for the next
    # transaction (else its batches were fenced); classic: one epoch throughout
    pid, first = epochs[0]
    assert epochs == [(pid, first + (i if v2 else 0)) for i in range(5)], epochs
    if v2:
        assert wire.count(ADD_PARTITIONS_TO_TXN) == 0 and wire.count(ADD_OFFSETS_TO_TXN) == 0
        assert wire.versions(PRODUCE) == {12}
        assert wire.versions(END_TXN) == {5} and wire.versions(TXN_OFFSET_COMMIT) == {5}
    else:
        assert wire.transactions_with(ADD_PARTITIONS_TO_TXN) == 4
        assert wire.transactions_with(ADD_OFFSETS_TO_TXN) == 1  # (CONCURRENT_TRANSACTIONS: again)
        assert max(wire.versions(PRODUCE)) <= 11 and wire.versions(END_TXN) == {3}
        assert wire.versions(TXN_OFFSET_COMMIT) == {3}
    _committed_sequences(cluster, topic, committed)
    assert [tp.offset for tp in consumer.committed([TopicPartition(topic, 0)], 30)] == [5]
    consumer.close()


def test_v2_asked_of_a_cluster_without_it_is_one_fatal_error(kafka1_tv0: KafkaCluster) -> None:
    producer = Producer({"bootstrap.servers": kafka1_tv0.bootstrap,
                         "transactional.id": unique("tid-v2-refused"),
                         "kip.transaction.protocol": "v2"})
    with pytest.raises(KafkaException) as info:
        producer.init_transactions(30)
    error = info.value.args[0]
    assert error.fatal() and error.code() == KafkaError._UNSUPPORTED_FEATURE, error
    assert "transaction.version=0" in error.str()
    producer.close()


@pytest.mark.parametrize(("cluster_name", "setting", "v2"), [FLOWS[0], FLOWS[2]])
def test_a_transaction_left_open_is_committed_by_another_producer(
        request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, cluster_name: str,
        setting: str, v2: bool) -> None:
    """The Spark sink's two-phase commit (docs/spark.md): a task's producer writes and leaves
    its transaction open, the driver commits it under the reported id and epoch; a repeated
    commit is harmless."""
    cluster: KafkaCluster = request.getfixturevalue(cluster_name)
    wire = WireLog(monkeypatch)
    topic = cluster.unique_topic(f"txn-resume-{setting}", 2)
    props = {"bootstrap.servers": cluster.bootstrap, "transactional.id": unique("tid-resume"),
             "kip.transaction.protocol": setting}
    task = Producer(props)
    task.init_transactions(60)
    task.begin_transaction()
    task.produce_arrays(topic, np.array([value(i) for i in range(30)], dtype=object))
    assert task.flush(60) == 0
    reported = task.transaction_producer()
    task.close()   # the transaction stays open
    for _ in range(2):
        driver = Producer(props)
        driver.resume_transaction(*reported)
        driver.commit_transaction(60)
        driver.close()
    assert wire.versions(END_TXN) == ({5} if v2 else {3})
    assert wire.versions(PRODUCE) == ({12} if v2 else {10})
    _committed_sequences(cluster, topic, list(range(30)))
