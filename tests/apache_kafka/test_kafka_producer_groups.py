"""Producer groups (KIP-509, KIP-910) on a 3-node Apache Kafka, in both modes: three member
processes, one killed -9 mid-stream twice, and between the two kills the node leading the
output topic's partition 0 killed -9 too (back 5 s later). The scenario and its checks are
tests/producer/groups_kill_scenario.py's (the reference broker runs the same one):
transactional mode exactly once and in order for a read_committed reader, at-least-once
mode (idempotent members) nothing missing and no duplicate within one owner, and no source
partition produced by two members in one generation."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from groups_kill_scenario import COUNT, kill_members_twice
from kafka_cluster import KafkaCluster


@pytest.mark.timeout(400)
@pytest.mark.parametrize("mode", ["at-least-once", "transactional"])
def test_members_and_a_node_killed(kafka3: KafkaCluster, mode: str, tmp_path: Path) -> None:
    topic = kafka3.unique_topic(f"pg-{mode}", COUNT)
    restarted: list[threading.Thread] = []

    def kill_a_node() -> None:
        victim = kafka3.leader(topic, 0)
        kafka3.kill(victim)
        timer = threading.Timer(5.0, kafka3.restart, (victim,), {"wait_in_sync": False})
        timer.start()
        restarted.append(timer)

    try:
        # idempotent: the node killed loses acknowledgements (see kill_members_twice)
        kill_members_twice(kafka3.bootstrap, mode, tmp_path, between_kills=kill_a_node,
                           topic=topic, idempotent=True)
    finally:
        for timer in restarted:
            timer.join(120)
