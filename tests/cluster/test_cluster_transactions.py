"""Transactions on a multi-broker cluster: kipproducer's engine (produce_arrays,
produce_batch) against confluent-kafka's transactional Producer, in the same test.

The mock checks a transactional producer's sequences (a retried batch that had landed is
recognised, an out-of-order one refused), so here duplicates are the client's and must be 0.
What it does not model: its Fetch reports the high watermark as the last stable offset and
lists no aborted transactions, so only committed transactions are read back (every one here
commits) and read_committed isolation itself is not checked.

* ``moves``: leaders of every partition move twice, inside transactions 3 and 6.
* ``errors``: Produce answered NOT_LEADER_OR_FOLLOWER / REQUEST_TIMED_OUT /
  NOT_ENOUGH_REPLICAS inside transactions 2 and 5 (retried in the transaction, which commits).
* ``coordinator_down``: the transaction coordinator (broker 2, which leads no partition of
  the topic) is down for 2 s from inside transaction 3.
* ``failover``: inside transaction 3, broker 1 goes down and its partitions move to brokers 2
  and 3 (the coordinator stays on broker 2); it is back 2 s later. Batches in flight on the
  lost connections are sent again to the new leaders: the mock recognises a retry that had
  landed (it checks transactional sequences), so a duplicate here would be the client's.
* ``failover_never_back``: the same, and broker 1 stays down until every transaction is
  committed.
"""

from __future__ import annotations

import threading

import pytest
from confluent_kafka import KafkaError
from mock_cluster import PRODUCE, MockCluster
from scenario_support import (
    PARTITIONS,
    TXN_RECORDS,
    TXNS,
    Outcome,
    assert_within,
    judge,
    run_transactions,
    unique,
)

INJECTED = ([KafkaError.NOT_LEADER_FOR_PARTITION] * 2 + [KafkaError.REQUEST_TIMED_OUT] * 2
            + [KafkaError.NOT_ENOUGH_REPLICAS] * 2)


def _run(cluster: MockCluster, client: str, kind: str) -> Outcome:
    topic = unique(f"txn-{kind}-{client}")
    tid = unique(f"tid-{client}")
    leaders = [1, 3] * (PARTITIONS // 2) if kind == "coordinator_down" else None
    cluster.create_topic(topic, PARTITIONS, leaders)
    timers: list[threading.Timer] = []

    def move(shift: int) -> None:
        for p in range(PARTITIONS):
            cluster.set_leader(topic, p, (p + shift) % 3 + 1)

    def coordinator_down() -> None:
        cluster.broker_down(2)
        timers.append(threading.Timer(2.0, cluster.broker_up, (2,)))
        timers[-1].start()

    if kind == "moves":
        events = {3: lambda: move(1), 6: lambda: move(2)}
    elif kind == "errors":
        events = {t: lambda: cluster.push_request_errors(PRODUCE, INJECTED) for t in (2, 5)}
    elif kind.startswith("failover"):
        cluster.set_coordinator("transaction", tid, 2)

        def failover() -> None:
            cluster.broker_down(1)
            for p in range(PARTITIONS):
                if p % 3 == 0:
                    cluster.set_leader(topic, p, 2 if p % 2 else 3)
            if kind == "failover":
                timers.append(threading.Timer(2.0, cluster.broker_up, (1,)))
                timers[-1].start()

        events = {3: failover}
    else:
        cluster.set_coordinator("transaction", tid, 2)
        events = {3: coordinator_down}
    try:
        outcome = run_transactions(client, cluster.bootstrap, topic, tid, events=events)
    finally:
        for t in timers:
            t.join()
        cluster.broker_up(1)
        cluster.broker_up(2)
    return judge(outcome, cluster.bootstrap, TXNS * TXN_RECORDS)


@pytest.mark.parametrize(
    "kind", ["moves", "errors", "coordinator_down", "failover", "failover_never_back"])
@pytest.mark.parametrize("client", ["arrays", "batch"])
def test_transactions(mock_cluster: MockCluster, client: str, kind: str):
    confluent = _run(mock_cluster, "confluent", kind)
    kip = _run(mock_cluster, client, kind)
    for outcome in (confluent, kip):
        print(outcome)
        assert not outcome.errors, (outcome.client, outcome.errors[:3])
        assert outcome.delivered == TXNS * TXN_RECORDS, outcome
        assert (outcome.lost, outcome.duplicated, outcome.reordered) == (0, 0, 0), outcome
    assert_within(kip, confluent)
