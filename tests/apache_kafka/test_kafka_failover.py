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
from kafka_support import read_both_topics, sequences
from scenario_support import PARTITIONS, N, Outcome, assert_within, run_load

KIP_CLIENTS = ("arrays", "batch", "produce")
PACE_S = 4.0


class Event:
    """The scenario's steps, run on a thread of their own from the load's event time."""

    def __init__(self, steps: Callable[[], None]) -> None:
        self.steps = steps
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None

    def fire(self) -> None:
        def run() -> None:
            try:
                self.steps()
            except BaseException as exc:  # reported by join()
                self.error = exc
        self.thread = threading.Thread(target=run, name="kafka-event", daemon=True)
        self.thread.start()

    def join(self) -> None:
        if self.thread is not None:
            self.thread.join(180)
            assert not self.thread.is_alive(), "the scenario's event did not finish in 180 s"
        if self.error is not None:
            raise self.error


def _judge(outcome: Outcome, log) -> Outcome:
    by_partition = sequences(log)
    seen: set[int] = set()
    for seqs in by_partition.values():
        last = -1
        for s in seqs:
            if s in seen:
                outcome.duplicated += 1
                continue
            seen.add(s)
            if s < last:
                outcome.reordered += 1
            last = s
    outcome.lost = N - len(seen)
    return outcome


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
    load_client = "confluent" if client == "confluent" else client
    try:
        outcome = run_load("kip-produce" if load_client == "produce" else load_client,
                           cluster.bootstrap, topic, pace_s=PACE_S,
                           event=event.fire if event else None, flush_timeout=120.0)
    finally:
        if event is not None:
            event.join()
    # a node left down is back before the topic is read (Java's consumer reads from leaders)
    for node_id, node in cluster.nodes.items():
        if not node.alive:
            cluster.restart(node_id, wait_in_sync=False)
    cluster.wait_in_sync(topics=[topic])
    return outcome


@pytest.mark.timeout(600)
@pytest.mark.parametrize("kind", ["steady", "leaders_moved_twice", "rolling_restart",
                                  "leader_killed_back", "leader_killed_never_back",
                                  "reassigned"])
def test_produce_paths_through_failover(kafka3: KafkaCluster, kind: str) -> None:
    confluent = _run(kafka3, "confluent", kind)
    outcomes = [confluent] + [_run(kafka3, client, kind) for client in KIP_CLIENTS]
    logs = read_both_topics(kafka3, [o.topic for o in outcomes], PARTITIONS)
    for outcome in outcomes:
        _judge(outcome, logs[outcome.topic])
        print(f"{kind}: {outcome.client} {outcome.elapsed:.2f} s, delivered "
              f"{outcome.delivered}, lost {outcome.lost}, duplicated {outcome.duplicated}, "
              f"reordered {outcome.reordered}, errors {len(outcome.errors)}")
    for outcome in outcomes:
        assert not outcome.errors, (outcome.client, outcome.errors[:3])
        assert outcome.delivered == N, outcome
        assert (outcome.lost, outcome.duplicated, outcome.reordered) == (0, 0, 0), outcome
    for kip in outcomes[1:]:
        assert_within(kip, confluent)
