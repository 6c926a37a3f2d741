"""The producer-group kill -9 scenario (issue 13), for any cluster: 3 member processes
(groups_worker.py), 6 source partitions, each a deterministic sequence whose position is its
last sequence number sent; one member is killed mid-stream twice (a fresh one joins after
each kill), and ``between_kills`` (a node killed, say) runs after the first kill.

- transactional: a read_committed consumer sees every source record exactly once and in order;
- at-least-once: no source record is missing, and a sequence goes back (duplicates) only where
  its partition changed owner;
- both: no source partition is produced by two members in one generation.

With a node killed, at-least-once members need ``idempotent``: without it a batch the dead
leader wrote but never acknowledged is written again by the retry, a duplicate run within one
owner (librdkafka's retries do the same), which is the producer's doing, not the group's.

A killed member's open transaction holds the last stable offset of its partitions back until
the broker aborts it (transaction.timeout.ms, 10 s in the workers): read_committed readers,
this scenario's included, see the records after it only then, as on any Kafka.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from producer_support import create_topic, read_confluent, unique

from kipproducer.groups_cli import GroupsClient, coordinator, describe
from kipproducer.producer_group import POSITIONS_TOPIC_PREFIX

COUNT, TOTAL, STEP = 6, 400, 10
WORKER = Path(__file__).with_name("groups_worker.py")


MOVING = (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
          KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError._TIMED_OUT, KafkaError._TRANSPORT)


def committed(bootstrap: str, group: str) -> dict[int, int]:
    # read_uncommitted: OffsetFetch without require_stable, so a killed member's open
    # transaction does not hold this progress check until the broker aborts it
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "isolation.level": "read_uncommitted"})
    deadline = time.monotonic() + 30
    try:
        while True:
            try:
                parts = c.committed([TopicPartition(POSITIONS_TOPIC_PREFIX + group, p)
                                     for p in range(COUNT)], timeout=10)
                break
            except KafkaException as exc:
                # the group's coordinator moving (its node killed): asked again
                if exc.args[0].code() not in MOVING or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        return {tp.partition: int(tp.metadata) if tp.offset > 0 and tp.metadata else -1
                for tp in parts}
    finally:
        c.close()


def kill_members_twice(bootstrap: str, mode: str, tmp_path: Path, *,
                       between_kills: Callable[[], None] | None = None,
                       topic: str | None = None, idempotent: bool = False) -> None:
    topic = topic or create_topic(bootstrap, unique("pg-kill"), COUNT)
    group = unique("pg-kill")
    stop = tmp_path / "stop"
    logs = []
    workers: dict[str, subprocess.Popen] = {}

    def start(name: str) -> None:
        log = open(tmp_path / f"{name}.log", "w")
        logs.append(log)
        workers[name] = subprocess.Popen(
            [sys.executable, str(WORKER), bootstrap, group, mode, topic, str(COUNT),
             str(TOTAL), name, str(stop), *(["idempotent"] if idempotent else [])],
            stdout=log, stderr=subprocess.STDOUT)

    def progress() -> int:
        return sum(v + 1 for v in committed(bootstrap, group).values())

    def wait_progress(at_least: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while progress() < at_least:
            assert time.monotonic() < deadline, f"stuck at {progress()} < {at_least}"
            for name, w in workers.items():
                assert w.poll() is None or w.returncode == -signal.SIGKILL, (
                    name, (tmp_path / f"{name}.log").read_text()[-3000:])
            time.sleep(0.2)

    def kill_mid_stream(timeout: float = 30) -> None:
        """SIGKILL a member while it owns a source partition it has not finished."""
        deadline = time.monotonic() + timeout
        while True:
            assert time.monotonic() < deadline, "no member owned an unfinished partition"
            with GroupsClient(bootstrap) as client:
                found = coordinator(client, group)
                try:
                    described = describe(found, group)
                finally:
                    if found is not client:
                        found.close()
            topic_name = POSITIONS_TOPIC_PREFIX + group
            positions = committed(bootstrap, group)
            for m in described["members"]:
                owned = list(m["assignment"].get(topic_name, ()))
                victim = m["client_id"]
                if (victim in workers and workers[victim].poll() is None
                        and any(positions[p] < TOTAL - 4 * STEP for p in owned)):
                    workers[victim].send_signal(signal.SIGKILL)
                    killed.append((victim, owned, {p: positions[p] for p in owned}))
                    return
            time.sleep(0.1)

    killed: list = []
    try:
        for name in ("m1", "m2", "m3"):
            start(name)
        wait_progress(COUNT * TOTAL // 10)
        kill_mid_stream()
        if between_kills is not None:
            between_kills()
        start("m4")
        wait_progress(COUNT * TOTAL // 3)
        kill_mid_stream()
        start("m5")
        wait_progress(COUNT * TOTAL, timeout=90)
    finally:
        stop.touch()
        for w in workers.values():
            try:
                w.wait(20)
            except subprocess.TimeoutExpired:
                w.kill()
        for log in logs:
            log.close()
    assert len(killed) == 2
    for name, w in workers.items():
        if name not in {victim for victim, _, _ in killed}:
            assert w.returncode == 0, (tmp_path / f"{name}.log").read_text()[-3000:]

    config = {"isolation.level": "read_committed"} if mode == "transactional" else {}
    # At least every source record; transactional: once the dead members' transactions are
    # aborted, exactly every source record.
    records = read_confluent(bootstrap, topic, COUNT, config=config,
                             expected=COUNT * TOTAL, timeout=60)
    by_partition: dict[int, list[tuple[int, str, int]]] = {p: [] for p in range(COUNT)}
    for r in records:
        part, seq, name, generation = r.value.decode().split(":")
        assert int(part) == r.partition
        by_partition[r.partition].append((int(seq), name, int(generation)))
    owners: dict[tuple[int, int], set[str]] = {}
    for part, rows in by_partition.items():
        seqs = [seq for seq, _, _ in rows]
        assert set(seqs) == set(range(TOTAL)), f"source partition {part}: records missing"
        if mode == "transactional":
            assert seqs == list(range(TOTAL)), f"source partition {part}: not exactly once"
        for (seq, name, gen), (prev_seq, prev_name, prev_gen) in zip(rows[1:], rows, strict=False):
            if seq != prev_seq + 1:  # a duplicate run: only after the owner changed
                assert seq <= prev_seq and (name, gen) != (prev_name, prev_gen), (
                    part, prev_seq, seq, prev_name, name)
        for _seq, name, gen in rows:
            owners.setdefault((part, gen), set()).add(name)
    two = {k: v for k, v in owners.items() if len(v) > 1}
    assert not two, f"produced by two members in one generation: {two}"
    # The victims' unfinished partitions were finished by others.
    for victim, owned, _at_kill in killed:
        for part in owned:
            assert any(name != victim for _, name, _ in by_partition[part])
