"""`kip mirror` killed with SIGKILL at random points, 10 times, while the source keeps receiving
records (plain ones and transactions, some aborted); then one last run to the end (--once).

- preserve: the target holds every source record at its offset (key, value, headers,
  timestamp), nothing more: a restart resumes from the target's log ends;
- transactional: a read_committed reader of the target sees every committed source record
  exactly once, in order per partition, and the target group's offsets are the source
  positions after the last commit.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from mirror_support import (
    compacted_topic,
    create,
    fill,
    group_offsets,
    read,
    stable,
    transactions,
    unique,
)

import kipproducer

PARTITIONS = 3
KILLS = 10


def mirror_command(source, target, prefix: str, mode: str, group: str, *extra: str) -> list:
    return [sys.executable, "-m", "kipproducer", "mirror", "--source",
            source.bootstrap_servers, "--target", target.bootstrap_servers, "--topics",
            f"{prefix}\\..*", "--mode", mode, "--group", group, "--rename", "k.{topic}",
            "--commit-interval-ms", "200", "--quiet", *extra]


def child_env() -> dict[str, str]:
    """The mirror process imports the package this test imports."""
    env = dict(os.environ)
    root = str(Path(kipproducer.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


class Feeder(threading.Thread):
    """Keeps the source busy: plain records and transactions (every third aborted)."""

    def __init__(self, source, plain: str, txn: str) -> None:
        super().__init__(daemon=True)
        self.source, self.plain, self.txn = source, plain, txn
        self.done = threading.Event()
        self.rounds = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.done.is_set():
                fill(self.source, self.plain, 60, start=1000 * self.rounds)
                transactions(self.source, self.txn, 3, tag=f"f{self.rounds}.")
                self.rounds += 1
                time.sleep(0.05)
        except BaseException as exc:  # shown by the test
            self.error = exc


def kill_repeatedly(source, target, prefix: str, mode: str, group: str, feeder: Feeder,
                    log_path, rng: random.Random, pause_s: tuple[float, float]) -> None:
    """Start the mirror and kill -9 it KILLS times, each after a random pause in ``pause_s``,
    while ``feeder`` (started) keeps writing the source; then stop the feeder and check it
    wrote without error through at least 3 rounds."""
    log = open(log_path, "w")
    try:
        for _ in range(KILLS):
            proc = subprocess.Popen(mirror_command(source, target, prefix, mode, group),
                                    stdout=log, stderr=subprocess.STDOUT, env=child_env())
            time.sleep(rng.uniform(*pause_s))
            assert proc.poll() is None, log_path.read_text()[-3000:]
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
    finally:
        feeder.done.set()
        feeder.join(60)
        log.close()
    assert feeder.error is None, feeder.error
    assert feeder.rounds >= 3


@pytest.mark.timeout(240)
@pytest.mark.parametrize("mode", ["preserve", "transactional"])
def test_kill_minus_nine_ten_times(source, target, mode, tmp_path):
    prefix = unique("kill")
    compacted = compacted_topic(source, f"{prefix}.compacted", 1500)
    plain = create(source, f"{prefix}.plain", PARTITIONS)
    txn = create(source, f"{prefix}.txn", PARTITIONS)
    group = unique("mirror")
    rng = random.Random(20261125)
    feeder = Feeder(source, plain, txn)
    feeder.start()
    kill_repeatedly(source, target, prefix, mode, group, feeder, tmp_path / "mirror.log", rng,
                    (0.7, 2.0))
    for topic in (compacted, plain, txn):
        stable(source.bootstrap_servers, topic, PARTITIONS)
    last = subprocess.run(mirror_command(source, target, prefix, mode, group, "--once"),
                          capture_output=True, text=True, env=child_env(), timeout=120)
    assert last.returncode == 0, last.stderr[-3000:]

    for topic in (compacted, plain, txn):
        copy = f"k.{topic}"
        src = read(source.bootstrap_servers, topic, PARTITIONS)
        if mode == "preserve":
            assert read(target.bootstrap_servers, copy, PARTITIONS, "read_uncommitted") == src
            continue
        stable(target.bootstrap_servers, copy, PARTITIONS)
        dst = read(target.bootstrap_servers, copy, PARTITIONS)
        for p in range(PARTITIONS):
            assert [r.content() for r in dst[p]] == [r.content() for r in src[p]], (topic, p)
        positions = group_offsets(target.bootstrap_servers, group, copy, PARTITIONS)
        assert positions == {p: rows[-1].offset + 1 for p, rows in src.items()}, topic
