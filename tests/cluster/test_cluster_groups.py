"""Producer groups (both modes) on a multi-broker cluster whose brokers fail over: a member
writes rounds of records and commits its positions while broker 1 (a leader of the data
topic and of the positions topic) goes down, its partitions move, and it comes back.
confluent-kafka's Producer runs the same rounds (plain or transactional, with no positions:
it has no producer groups) in the same test, on the same event, as the time baseline.

What the mock does not model, and is therefore not asserted:

* CreateTopics: the positions topic is created in the mock beforehand (the member accepts a
  positions topic that exists with its partition count when the cluster refuses to create).
* TxnOffsetCommit: the mock acknowledges it but keeps no offsets (checked with confluent's
  send_offsets_to_transaction), so transactional positions cannot be read back; only the
  at-least-once mode's positions are, by a new member of the group.
* A plain idempotent producer's retries are not deduplicated by the mock (see
  test_cluster_failover.py): at-least-once duplicates are bounded, not forbidden; the
  transactional mode's must be 0 (the mock checks transactional sequences).
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from confluent_kafka import Producer
from mock_cluster import MockCluster
from scenario_support import KEYS, PARTITIONS, Outcome, assert_within, judge, unique, value

from kipproducer import producer as kp

ROUNDS = 10
PER_ROUND = 1_500
SOURCE_PARTITIONS = 4
EVENT_ROUND = 3


def _event(cluster: MockCluster, topics: list[str]) -> threading.Timer:
    """Broker 1 down; its partitions of ``topics`` move to 2 and 3; back 2 s later."""
    cluster.broker_down(1)
    for topic in topics:
        count = PARTITIONS if not topic.startswith("__kip_positions_") else SOURCE_PARTITIONS
        for p in range(count):
            if p % 3 == 0:
                cluster.set_leader(topic, p, 2 if p % 2 else 3)
    timer = threading.Timer(2.0, cluster.broker_up, (1,))
    timer.start()
    return timer


def _rounds(cluster: MockCluster, client: str, mode: str) -> tuple[Outcome, dict | None]:
    topic = unique(f"pg-{mode}-{client}")
    cluster.create_topic(topic, PARTITIONS)
    group = unique("pg")
    positions_topic = f"__kip_positions_{group}"
    conf = {"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True,
            "acks": "all", "linger.ms": 5}
    if mode == "transactional":
        conf["transactional.id"] = unique("pg-txn")
        cluster.set_coordinator("transaction", conf["transactional.id"], 2)
    # The coordinators stay up (broker 2): the mock moves no coordinator off a broker that
    # goes down, so this is a leader failover; coordinator outages are
    # test_cluster_transactions.py's.
    cluster.set_coordinator("group", group, 2)
    if client == "kip":
        cluster.create_topic(positions_topic, SOURCE_PARTITIONS)
        conf.update({"group.id": group, "source.partition.count": SOURCE_PARTITIONS,
                     "session.timeout.ms": 6000})
        producer = kp.Producer(conf)
        assert producer.subscribe(timeout=30) == {p: None for p in range(SOURCE_PARTITIONS)}
    else:
        producer = Producer(conf)
        if mode == "transactional":
            producer.init_transactions(30)
    outcome = Outcome(client, topic)
    errors = outcome.errors

    def report(err, _) -> None:
        if err is not None:
            errors.append(err)

    timer = None
    started = time.monotonic()
    try:
        for r in range(ROUNDS):
            if r == EVENT_ROUND:
                timer = _event(cluster, [topic, positions_topic] if client == "kip" else [topic])
            seqs = range(r * PER_ROUND, (r + 1) * PER_ROUND)
            values = [value(i) for i in seqs]
            keys = [b"k%02d" % (i % KEYS) for i in seqs]
            positions = {p: f"round-{r}" for p in range(SOURCE_PARTITIONS)}
            if mode == "transactional":
                producer.begin_transaction()
            if client == "kip":
                producer.produce_arrays(topic, np.array(values, dtype=object),
                                        keys=np.array(keys, dtype=object), on_delivery=report)
            else:
                for v, k in zip(values, keys, strict=True):
                    producer.produce(topic, v, key=k, on_delivery=report)
            if mode == "transactional":
                if client == "kip":
                    producer.commit_transaction(60, positions=positions)
                else:
                    producer.commit_transaction(60)
            else:
                assert producer.flush(60) == 0
                if client == "kip":
                    producer.commit_positions(positions)
        outcome.elapsed = time.monotonic() - started
        outcome.delivered = ROUNDS * PER_ROUND - len(errors)
    finally:
        if timer is not None:
            timer.join()
        cluster.broker_up(1)
        if client == "kip":
            producer.close()
        else:
            producer.flush(10)
    resumed = None
    if client == "kip" and mode == "at-least-once":
        # A new member of the group resumes at the last positions committed.
        again = kp.Producer(conf)
        try:
            resumed = again.subscribe(timeout=30)
        finally:
            again.close()
    return judge(outcome, cluster.bootstrap, ROUNDS * PER_ROUND), resumed


@pytest.mark.parametrize("mode", ["at-least-once", "transactional"])
def test_producer_group_member_through_failover(mock_cluster: MockCluster, mode: str):
    mock_cluster.set_controller(1)
    confluent, _ = _rounds(mock_cluster, "confluent", mode)
    kip, resumed = _rounds(mock_cluster, "kip", mode)
    for outcome in (confluent, kip):
        print(outcome)
        assert not outcome.errors, (outcome.client, outcome.errors[:3])
        assert (outcome.lost, outcome.reordered) == (0, 0), outcome
        if mode == "transactional":
            assert outcome.duplicated == 0, outcome
    # at-least-once: the mock's own duplicates, at most what was in flight to broker 1
    assert kip.duplicated <= 5 * PER_ROUND, kip
    if mode == "at-least-once":
        assert resumed == {p: f"round-{ROUNDS - 1}" for p in range(SOURCE_PARTITIONS)}
    assert_within(kip, confluent)
