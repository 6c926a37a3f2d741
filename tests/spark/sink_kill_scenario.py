"""The Spark exactly-once sink, and the kip source reading its topic back, with the broker
under them killed -9 mid-job, for any cluster: ``kip broker`` (one process, killed and
restarted on its port and data dir: tests/spark/test_spark_broker_kill.py) and a 3-node
Apache Kafka (the node coordinating one of the write's open transactions, a partition leader
of the topic too: tests/apache_kafka/test_kafka_spark.py). The same jobs and the same checks
on both; the cluster comes in as a ``Target``.

A write is ``ROWS`` rows (key k<i>, value v<i>) in ``SPARK_PARTITIONS`` tasks of ``BATCHES``
Arrow batches each, through ``df.write.format("kip")``'s transactional path as one named
write (``kip.write.id``), on local[2,4] (a failed task is tried again). Each task's first
attempt pauses two thirds through its batches (the writer has written part of its rows)
until the kill is done; the kill comes once the log holds rows of the write that
read_committed readers do not see (open transactions), and the victim is restarted
``RESTART_AFTER_S`` later while the tasks write on.

1. The write fails: every attempt of the last task raises where first attempts pause.
   Nothing of it is visible to read_committed readers, and no transaction stays open (each
   partition's last stable offset reaches its end).
2. The same write run again (same write id), a node killed the same way: every row exactly
   once for read_committed readers.
3. The topic read back by ``spark.read.format("kip")`` at read_committed, each task's first
   attempt pausing after its first batch while a partition leader is killed -9: every
   committed record once, equal to what the cluster's readers read.
"""

from __future__ import annotations

import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mirror_support import log_ends, stable

from kipproducer.spark.twophase import transactional_ids

ROWS = 240_000
SPARK_PARTITIONS = 8
# Arrow batches per task, small: a Python worker and the JVM hold up to 64 KiB of a task's
# rows in each of their socket buffers, so the writer has what came before a pause only up to
# about 6 batches of 1,000 rows (measured: with 7,500-row batches it had none of them)
BATCHES = 30
PAUSE_BEFORE = 20        # a first attempt pauses before this batch (0-based)
FAILING_PARTITION = SPARK_PARTITIONS - 1
PAUSE_S = 120.0          # a paused attempt goes on after this long whatever happened
RESTART_AFTER_S = 3.0
READ_RANGES = 12         # minPartitions of the read: 2 ranges a partition

Log = dict[int, list[tuple[int, bytes | None, bytes | None]]]
EVERY_ROW_ONCE = Counter({(b"k%d" % i, b"v%d" % i): 1 for i in range(ROWS)})


@dataclass
class Target:
    """The cluster under the jobs."""

    bootstrap: str
    # (topic, the write's open transactional ids, or none for a read) -> what was killed
    kill: Callable[[str, list[str]], str]
    restart: Callable[[], None]
    # every record of the topic at read_committed, read by the cluster's own readers
    read_committed: Callable[[str], Log]
    # how many records the topic holds, aborted ones too (read_uncommitted)
    count_all: Callable[[str], int]


def pairs(log: Log) -> Counter:
    return Counter((k, v) for records in log.values() for _, k, v in records)


class KillMidJob:
    """On a thread of its own: waits until a task's first attempt pauses in ``gates`` (and,
    for a write, until the log holds rows of it that read_committed readers do not see),
    kills the victim, lets the tasks go on, and restarts the victim RESTART_AFTER_S later."""

    def __init__(self, target: Target, topic: str, partitions: int, gates: Path,
                 prefix: str | None = None) -> None:
        self.target, self.topic, self.partitions = target, topic, partitions
        self.gates, self.prefix = gates, prefix
        gates.mkdir(parents=True)
        self.before = {iso: log_ends(target.bootstrap, topic, partitions, iso)
                       for iso in ("read_uncommitted", "read_committed")}
        self.killed = ""
        self.started = time.monotonic()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="kill-mid-job", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self._steps()
        except BaseException as exc:  # reported by join()
            self.error = exc
        finally:
            (self.gates / "go").touch()  # never leaves a task paused

    def _steps(self) -> None:
        deadline = time.monotonic() + PAUSE_S
        while not any(self.gates.glob("paused-*")):
            assert time.monotonic() < deadline, "no task paused"
            time.sleep(0.1)
        open_ids: list[str] = []
        if self.prefix is not None:
            bootstrap, topic, parts = self.target.bootstrap, self.topic, self.partitions
            while (sum(log_ends(bootstrap, topic, parts).values())
                   <= sum(self.before["read_uncommitted"].values())):
                assert time.monotonic() < deadline, "no row of the write reached the log"
                time.sleep(0.1)
            # mid-write: rows of it are in the log, in transactions still open
            assert log_ends(bootstrap, topic, parts, "read_committed") == \
                self.before["read_committed"]
            known = transactional_ids({"bootstrap.servers": bootstrap}, self.prefix) or {}
            open_ids = sorted(t for t, state in known.items() if state == "Ongoing")
            assert open_ids, known
        paused = time.monotonic() - self.started
        self.killed = self.target.kill(self.topic, open_ids)
        (self.gates / "go").touch()
        time.sleep(RESTART_AFTER_S)
        self.target.restart()
        self.killed += (f" {paused:.1f} s into the job, back {time.monotonic() - self.started:.1f}"
                        " s into it")

    def join(self) -> str:
        self.thread.join(PAUSE_S + 120)
        assert not self.thread.is_alive(), "the kill's thread did not finish"
        if self.error is not None:
            raise self.error
        return self.killed


def _pause_first_attempt(gate: str) -> None:
    """In a task's first attempt: say so (a file named by its partition and attempt id in
    ``gate``), then wait until ``gate``/go exists (or PAUSE_S)."""
    import os
    import time

    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx.attemptNumber() != 0:
        return
    open(os.path.join(gate, f"paused-{ctx.partitionId()}-{ctx.taskAttemptId()}"), "w").close()
    deadline = time.monotonic() + PAUSE_S
    while not os.path.exists(os.path.join(gate, "go")) and time.monotonic() < deadline:
        time.sleep(0.05)


def _ship_by_value() -> None:
    """Spark's pickler ships this module's functions by value: the Python workers cannot
    import it (it is not on their path)."""
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])


def rows(spark: Any, gates: Path, fail: bool) -> Any:
    """The write's DataFrame. Each task's first attempt pauses before batch PAUSE_BEFORE;
    with ``fail`` every attempt of FAILING_PARTITION raises there."""
    _ship_by_value()
    gate = str(gates)

    def make(batches: Any) -> Any:
        import pyarrow as pa
        from pyspark import TaskContext

        partition = TaskContext.get().partitionId()
        for i, batch in enumerate(batches):
            if i == PAUSE_BEFORE:
                _pause_first_attempt(gate)
            if fail and partition == FAILING_PARTITION and i == PAUSE_BEFORE:
                raise RuntimeError("planned failure of every attempt of this task")
            ids = batch.column(0).to_pylist()
            yield pa.RecordBatch.from_arrays(
                [pa.array([b"k%d" % n for n in ids], pa.binary()),
                 pa.array([b"v%d" % n for n in ids], pa.binary())], names=["key", "value"])

    return (spark.range(0, ROWS, numPartitions=SPARK_PARTITIONS)
            .mapInArrow(make, "key binary, value binary"))


def write(spark: Any, bootstrap: str, topic: str, write_id: str, gates: Path,
          fail: bool) -> None:
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = spark.conf.get(key)
    spark.conf.set(key, str(ROWS // SPARK_PARTITIONS // BATCHES))
    try:
        (rows(spark, gates, fail).write.format("kip")
         .option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
         .option("kip.write.id", write_id).mode("append").save())
    finally:
        spark.conf.set(key, before)


def read(spark: Any, bootstrap: str, topic: str, gates: Path) -> Log:
    """The topic read with format("kip") at read_committed in READ_RANGES tasks, each first
    attempt pausing after its first batch until ``gates``/go exists."""
    _ship_by_value()
    gate = str(gates)
    df = (spark.read.format("kip").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", topic).option("kafka.isolation.level", "read_committed")
          .option("minPartitions", str(READ_RANGES)).load()
          .select("partition", "offset", "key", "value"))

    def pause_after_the_first_batch(batches: Any) -> Any:
        for i, batch in enumerate(batches):
            yield batch
            if i == 0:
                _pause_first_attempt(gate)

    table = df.mapInArrow(pause_after_the_first_batch, df.schema).toArrow()
    out: Log = {}
    for p, o, k, v in sorted(zip(*(table.column(c).to_pylist() for c in table.column_names),
                                 strict=True)):
        out.setdefault(p, []).append((o, k, v))
    return out


def sink_and_source_through_kills(spark: Any, target: Target, topic: str, partitions: int,
                                  tmp_path: Path) -> None:
    """The three jobs of the module docstring, each through a kill -9, and their checks."""
    bootstrap = target.bootstrap
    write_id = f"through-a-kill-{uuid.uuid4().hex[:8]}"
    prefix = f"kip-spark-{write_id}-"

    # 1. the write fails: nothing of it visible, no transaction left open
    kill = KillMidJob(target, topic, partitions, tmp_path / "failed", prefix)
    started = time.monotonic()
    failure: BaseException | None = None
    try:
        write(spark, bootstrap, topic, write_id, tmp_path / "failed", fail=True)
    except Exception as exc:  # the job's failure, checked below
        failure = exc
    print(f"failed write: {kill.join()} killed; failed after {time.monotonic() - started:.1f} s")
    assert failure is not None and "planned failure" in str(failure), failure
    stable(bootstrap, topic, partitions)
    assert target.read_committed(topic) == {p: [] for p in range(partitions)}
    written = target.count_all(topic)
    print(f"failed write: {written} rows in the log, all aborted")
    assert written > 0

    # 2. the same write again: every row once
    kill = KillMidJob(target, topic, partitions, tmp_path / "rerun", prefix)
    started = time.monotonic()
    write(spark, bootstrap, topic, write_id, tmp_path / "rerun", fail=False)
    print(f"re-run: {kill.join()} killed; {ROWS} rows in {time.monotonic() - started:.1f} s")
    stable(bootstrap, topic, partitions)
    committed = target.read_committed(topic)
    assert pairs(committed) == EVERY_ROW_ONCE
    print(f"re-run: every row once for read_committed readers; the log holds "
          f"{target.count_all(topic)} rows with the aborted ones")

    # 3. read back by the kip source through a kill: what the cluster's readers read
    kill = KillMidJob(target, topic, partitions, tmp_path / "read")
    started = time.monotonic()
    by_spark = read(spark, bootstrap, topic, tmp_path / "read")
    print(f"read: {kill.join()} killed; read in {time.monotonic() - started:.1f} s")
    assert by_spark == {p: rs for p, rs in committed.items() if rs}
