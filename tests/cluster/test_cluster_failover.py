"""A leader broker goes down: produce_arrays and produce_batch against confluent-kafka's
Producer, in the same test on the same mock cluster.

* ``down_and_up``: broker 1 down for 2 s, its partitions keep it as leader (no failover).
* ``failover_back``: broker 1 down, its partitions moved to brokers 2 and 3; it comes back
  4 s later, after the load's pacing has ended: a client that waited for it instead of
  following the new leaders would take over 1.5x confluent's time.
* ``failover_never_back``: the same, and it stays down until every record has its report.

Judged: every record delivered and in the log once, in order per partition; the load's
completion time within 1.5x (+1 s) of confluent's. The mock does not deduplicate a plain
idempotent producer's retries (only a transactional producer's sequences are checked): a
batch whose answer was lost with the connection and was sent again is in its log twice.
Such duplicates are the mock's, so they are counted, bounded (a lost connection can have at
most max.in.flight requests of one batch per partition out) and printed, not forbidden.
"""

from __future__ import annotations

import threading

import pytest
from mock_cluster import MockCluster
from scenario_support import CHUNK, PARTITIONS, N, Outcome, assert_within, judge, run_load, unique

DOWN = 1


def _scenario(cluster: MockCluster, topic: str, kind: str) -> tuple:
    """(the event, what restores the cluster afterwards)."""
    timers: list[threading.Timer] = []

    def down_and_up() -> None:
        cluster.broker_down(DOWN)
        timers.append(threading.Timer(2.0, cluster.broker_up, (DOWN,)))
        timers[-1].start()

    def failover() -> None:
        cluster.broker_down(DOWN)
        for p in range(PARTITIONS):
            if p % 3 + 1 == DOWN:
                cluster.set_leader(topic, p, 2 if p % 2 else 3)
        if kind == "failover_back":
            timers.append(threading.Timer(4.0, cluster.broker_up, (DOWN,)))
            timers[-1].start()

    def restore() -> None:
        for t in timers:
            t.join()
        cluster.broker_up(DOWN)

    return (down_and_up if kind == "down_and_up" else failover), restore


def _run(cluster: MockCluster, client: str, kind: str) -> Outcome:
    topic = unique(f"{kind}-{client}")
    cluster.create_topic(topic, PARTITIONS)
    event, restore = _scenario(cluster, topic, kind)
    try:
        outcome = run_load(client, cluster.bootstrap, topic, event=event)
    finally:
        restore()
    return judge(outcome, cluster.bootstrap)


@pytest.mark.parametrize("kind", ["down_and_up", "failover_back", "failover_never_back"])
@pytest.mark.parametrize("client", ["arrays", "batch"])
def test_leader_down(mock_cluster: MockCluster, client: str, kind: str):
    confluent = _run(mock_cluster, "confluent", kind)
    kip = _run(mock_cluster, client, kind)
    for outcome in (confluent, kip):
        print(outcome)
        assert not outcome.errors, (outcome.client, outcome.errors[:3])
        assert outcome.delivered == N, outcome
        assert outcome.lost == 0, outcome
        assert outcome.reordered == 0, outcome
    # The mock's own duplicates (see above): at most 5 requests in flight to the broker that
    # went down, one batch (at most CHUNK records here, the call size) per partition each.
    assert kip.duplicated <= 5 * CHUNK * PARTITIONS // 3, kip
    assert_within(kip, confluent)
