"""A silent leader: broker 1 keeps its connections open but answers no Produce request for
far longer than the request timeout (the mock's per-broker round-trip times, pushed for its
next requests), and its partitions move to brokers 2 and 3 meanwhile, as a cluster does
with a broker that stopped answering. produce_arrays and produce_batch against
confluent-kafka's Producer, in the same test.

A client that waits on the silent connection instead of giving up after its request timeout
(here 2 s for both: request.timeout.ms, and socket.timeout.ms, which is what librdkafka times
a Produce request out by; with its default of 60 s confluent waits the silence out),
refreshing metadata and sending to the new leaders takes the silence's whole length (10 s)
and fails the 1.5x limit.

Judged as test_cluster_failover.py: every record delivered, none lost, none reordered; the
mock does not deduplicate a plain idempotent producer's retries (a request that timed out
may have been written), so duplicates are bounded, not forbidden.
"""

from __future__ import annotations

import pytest
from mock_cluster import PRODUCE, MockCluster
from scenario_support import CHUNK, PARTITIONS, N, Outcome, assert_within, judge, run_load, unique

SILENT = 1
SILENCE_MS = 10_000
REQUEST_TIMEOUT_MS = 2_000


def _run(cluster: MockCluster, client: str) -> Outcome:
    topic = unique(f"silent-{client}")
    cluster.create_topic(topic, PARTITIONS)

    def fall_silent() -> None:
        # Its next Produce requests are answered only after SILENCE_MS (no error code).
        cluster.push_broker_errors(SILENT, PRODUCE, [(0, SILENCE_MS)] * 10)
        for p in range(PARTITIONS):
            if p % 3 + 1 == SILENT:
                cluster.set_leader(topic, p, 2 if p % 2 else 3)

    try:
        outcome = run_load(client, cluster.bootstrap, topic, event=fall_silent,
                           config={"request.timeout.ms": REQUEST_TIMEOUT_MS,
                                   # librdkafka times a Produce request out by this one
                                   "socket.timeout.ms": REQUEST_TIMEOUT_MS})
    finally:
        cluster.clear_request_errors(PRODUCE)
    return judge(outcome, cluster.bootstrap)


@pytest.mark.parametrize("client", ["arrays", "batch"])
def test_silent_leader(mock_cluster: MockCluster, client: str):
    confluent = _run(mock_cluster, "confluent")
    kip = _run(mock_cluster, client)
    for outcome in (confluent, kip):
        print(outcome)
        assert not outcome.errors, (outcome.client, outcome.errors[:3])
        assert outcome.delivered == N, outcome
        assert (outcome.lost, outcome.reordered) == (0, 0), outcome
    assert kip.duplicated <= 5 * CHUNK * PARTITIONS // 3, kip
    assert kip.elapsed < SILENCE_MS / 1000, kip  # it did not wait the silence out
    assert_within(kip, confluent)
