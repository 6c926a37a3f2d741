"""kipproducer's produce paths on a 3-node Apache Kafka (replication factor 3,
``min.insync.replicas=2``, ``acks=all``, idempotent) through leader moves, a rolling
restart, a leader killed -9, and a reassignment, each beside confluent-kafka's Producer in the
same test on the same cluster.

A load is tests/cluster/scenario_support.py's: 30,000 records paced over ``PACE_S`` seconds,
keys spread over 6 partitions, each value carrying its sequence number; the event starts at
0.7 s on a thread of its own (Kafka's tools take seconds), and the load's time runs until
flush() has every report. Judged for every client: every record delivered, none lost,
duplicated or reordered (read back by librdkafka and by Kafka's Java consumer, which must
agree), and kip's time within 1.5x (+1 s) of confluent's.

Clients: ``arrays`` (produce_arrays), ``batch`` (produce_batch) and ``produce`` (kip's
Producer, per-record produce()), all against one ``confluent`` baseline run per scenario.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from kafka_cluster import KafkaCluster
from kafka_support import judge_outcomes
from scenario_support import (
    PARTITIONS,
    N,
    Outcome,
    assert_within,
    compare,
    run_load,
)

KIP_CLIENTS = ("arrays", "batch", "produce")
# The load's pacing per scenario: long enough for the event to happen inside it (Kafka's
# tools start a JVM each: a leader move takes a few seconds, a node's restart more), and for
# a node killed -9 short enough that the load's time is the failover's (Kafka fences the dead
# node after broker.session.timeout.ms, 3 s here; the kill comes 0.7 s into a 2 s load).
PACE_S = {"steady": 3.0, "leaders_moved_twice": 12.0, "rolling_restart": 30.0,
          "leader_killed_back": 2.0, "leader_killed_never_back": 2.0, "reassigned": 8.0}


class Event:
    """The scenario's steps, run on a thread of their own from the load's event time."""

    def __init__(self, steps: Callable[[], None]) -> None:
        self.steps = steps
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None
        self.took = 0.0

    def fire(self) -> None:
        def run() -> None:
            started = time.monotonic()
            try:
                self.steps()
            except BaseException as exc:  # reported by join()
                self.error = exc
            self.took = time.monotonic() - started
        self.thread = threading.Thread(target=run, name="kafka-event", daemon=True)
        self.thread.start()

    def join(self) -> None:
        if self.thread is not None:
            self.thread.join(180)
            assert not self.thread.is_alive(), "the scenario's event did not finish in 180 s"
        if self.error is not None:
            raise self.error


def _scenario(cluster: KafkaCluster, topic: str, kind: str) -> Callable[[], None] | None:
    def other_than(node: int) -> int:
        return next(i for i in cluster.nodes if i != node)

    if kind == "steady":
        return None
    if kind == "leaders_moved_twice":
        def moves() -> None:
            for shift in (1, 2):
                cluster.move_leaders(topic, {p: (p + shift) % 3 + 1 for p in range(PARTITIONS)})
        return moves
    if kind == "rolling_restart":
        return cluster.rolling_restart
    if kind in ("leader_killed_back", "leader_killed_never_back"):
        victim = cluster.leader(topic, 0)

        def kill() -> None:
            cluster.kill(victim)
            if kind == "leader_killed_back":
                cluster.wait_leader_not(topic, 0, victim)
                time.sleep(2.0)
                cluster.restart(victim, wait_in_sync=False)
        return kill
    if kind == "reassigned":
        # replication factor 2 here, so a reassignment really moves replicas to another node
        def reassign() -> None:
            parts = cluster.partitions(topic)
            moves = {}
            for p, pm in parts.items():
                missing = next(i for i in cluster.nodes if i not in pm.replicas)
                moves[(topic, p)] = [missing, pm.replicas[0]]
            cluster.reassign(moves)
        return reassign
    raise ValueError(kind)


def _run(cluster: KafkaCluster, client: str, kind: str) -> Outcome:
    replication = 2 if kind == "reassigned" else 3
    config = {"min.insync.replicas": "1"} if kind == "reassigned" else None
    topic = cluster.unique_topic(f"{kind}-{client}", PARTITIONS, replication=replication,
                                 config=config)
    steps = _scenario(cluster, topic, kind)
    event = Event(steps) if steps is not None else None
    cluster.settle()
    try:
        outcome = run_load("kip-produce" if client == "produce" else client,
                           cluster.bootstrap, topic, pace_s=PACE_S[kind],
                           event=event.fire if event else None, flush_timeout=120.0)
    finally:
        if event is not None:
            event.join()
            print(f"{kind}: {client}'s event took {event.took:.1f} s")
    # a node left down is back before the topic is read (Java's consumer reads from leaders)
    for node_id, node in cluster.nodes.items():
        if not node.alive:
            cluster.restart(node_id, wait_in_sync=False)
    cluster.wait_in_sync(topics=[topic])
    return outcome


def _judged(cluster: KafkaCluster, kind: str, clients: list[str]) -> list[Outcome]:
    outcomes = [_run(cluster, client, kind) for client in clients]
    judge_outcomes(cluster, outcomes, PARTITIONS, N, kind)
    return outcomes


def within(kip: Outcome, confluent: Outcome, factor: float = 1.5, slack_s: float = 1.0) -> bool:
    return kip.elapsed <= confluent.elapsed * factor + slack_s


@pytest.mark.timeout(900)
@pytest.mark.parametrize("kind", ["steady", "leaders_moved_twice", "rolling_restart",
                                  "leader_killed_back", "leader_killed_never_back",
                                  "reassigned"])
def test_produce_paths_through_failover(kafka3: KafkaCluster, kind: str) -> None:
    """Every client's load is judged for loss, duplicates and order. Times: where a kip
    client misses 1.5x (+1 s) of confluent's, both run once more and each side's faster run
    is compared, since a failover's time varies between runs of the very same code (here
    two runs of librdkafka's produce() after a kill -9 differed by up to 4 s: where the kill
    falls against the client's metadata refresh and the JVMs' own pauses)."""
    confluent, *kips = _judged(kafka3, kind, ["confluent", *KIP_CLIENTS])
    for kip in kips:
        if within(kip, confluent):
            print(compare(kip, confluent))
            continue
        client = "produce" if kip.client == "kip-produce" else kip.client
        again_confluent, again_kip = _judged(kafka3, kind, ["confluent", client])
        best_confluent = min(confluent, again_confluent, key=lambda o: o.elapsed)
        best_kip = min(kip, again_kip, key=lambda o: o.elapsed)
        assert_within(best_kip, best_confluent)
