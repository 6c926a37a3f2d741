"""Leaders that move, and Produce errors the brokers answer with: produce_arrays and
produce_batch against confluent-kafka's Producer, in the same test on the same mock cluster.

* ``steady``: nothing happens (the baseline of the others).
* ``moved_twice``: every partition's leader moves to the next broker, and again 1 s later.
* ``errors``: the next Produce requests are answered NOT_LEADER_OR_FOLLOWER (x3),
  REQUEST_TIMED_OUT (x3), NOT_ENOUGH_REPLICAS (x3): the mock answers these without
  appending, and no connection is lost, so nothing may be duplicated either. The mock checks
  no sequence of a plain idempotent producer: a request already in flight behind the failed
  one is appended where Kafka refuses it (OUT_OF_ORDER_SEQUENCE_NUMBER) and the failed
  batch's retry lands after it. Order after an injected error is therefore judged here with
  one request in flight per connection (max.in.flight=1, both clients); the same errors with
  5 in flight are judged inside transactions (test_cluster_transactions.py), where the mock
  does check sequences.

Judged: every record delivered, in the log exactly once, in order per partition; the load's
completion time within 1.5x (+1 s) of confluent's.
"""

from __future__ import annotations

import threading

import pytest
from confluent_kafka import KafkaError
from mock_cluster import PRODUCE, MockCluster
from scenario_support import PARTITIONS, N, Outcome, assert_within, judge, run_load, unique

INJECTED = ([KafkaError.NOT_LEADER_FOR_PARTITION] * 3 + [KafkaError.REQUEST_TIMED_OUT] * 3
            + [KafkaError.NOT_ENOUGH_REPLICAS] * 3)


def _run(cluster: MockCluster, client: str, kind: str) -> Outcome:
    topic = unique(f"{kind}-{client}")
    cluster.create_topic(topic, PARTITIONS)
    timers: list[threading.Timer] = []

    def move(shift: int) -> None:
        for p in range(PARTITIONS):
            cluster.set_leader(topic, p, (p + shift) % 3 + 1)

    def event() -> None:
        if kind == "moved_twice":
            move(1)
            timers.append(threading.Timer(1.0, move, (2,)))
            timers[-1].start()
        elif kind == "errors":
            cluster.push_request_errors(PRODUCE, INJECTED)

    try:
        outcome = run_load(client, cluster.bootstrap, topic,
                           event=None if kind == "steady" else event,
                           config={"max.in.flight": 1} if kind == "errors" else None)
    finally:
        for t in timers:
            t.join()
    return judge(outcome, cluster.bootstrap)


@pytest.mark.parametrize("kind", ["steady", "moved_twice", "errors"])
@pytest.mark.parametrize("client", ["arrays", "batch"])
def test_moves_and_errors(mock_cluster: MockCluster, client: str, kind: str):
    confluent = _run(mock_cluster, "confluent", kind)
    if confluent.errors or (confluent.lost, confluent.duplicated, confluent.reordered) != (0, 0, 0):
        # The baseline itself is what the mock did to librdkafka (once, on a loaded 2-core CI
        # machine, it lost 2,823 acknowledged records of moved_twice): it is run once more on
        # a fresh topic. kipproducer's run is judged once, strictly, against a clean baseline.
        print("librdkafka's baseline was not clean, run once more:", confluent)
        confluent = _run(mock_cluster, "confluent", kind)
    kip = _run(mock_cluster, client, kind)
    for outcome in (confluent, kip):
        print(outcome)
        assert not outcome.errors, (outcome.client, outcome.errors[:3])
        assert outcome.delivered == N, outcome
        assert (outcome.lost, outcome.duplicated, outcome.reordered) == (0, 0, 0), outcome
    assert_within(kip, confluent)
