"""``kip demo``'s Spark step: the copied topic through ``format("kip")`` into a new topic,
exactly once while a task's first attempt fails on purpose.

The step reads the target broker's copy with the kip source (read_committed), passes the
value through a Python UDF that raises on the last record of Kafka partition 0 in the task's
first attempt, and writes with the transactional sink on local[2,4] (the task is retried).
Spark hands the failing attempt's writer a prefix of its rows as if it were all of them, and
that attempt does write them, in a transaction the driver then aborts. A read_uncommitted
consumer sees those rows twice; a read_committed one sees every record exactly once.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
from collections import Counter

OUT_SUFFIX = "-spark"


def _read(bootstrap: str, topic: str, isolation: str) -> tuple[Counter, int]:
    """(key, value) of every record up to the end, counted (tombstones left out), and the
    offset of partition 0's last record with a value."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"kip-demo-{time.time_ns()}",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "isolation.level": isolation, "log_level": 3})
    try:
        meta = consumer.list_topics(topic, timeout=30).topics[topic]
        consumer.assign([TopicPartition(topic, p, -2) for p in meta.partitions])
        found: Counter = Counter()
        last_of_0 = -1
        at_end: set[int] = set()
        deadline = time.monotonic() + 120
        while len(at_end) < len(meta.partitions) and time.monotonic() < deadline:
            for m in consumer.consume(10_000, 0.2):
                if m.error():
                    if m.error().code() != KafkaError._PARTITION_EOF:
                        raise RuntimeError(f"reading {topic}: {m.error()}")
                    at_end.add(m.partition())
                    continue
                at_end.discard(m.partition())
                if m.value() is not None:
                    found[(m.key(), m.value())] += 1
                    if m.partition() == 0:
                        last_of_0 = max(last_of_0, m.offset())
        return found, last_of_0
    finally:
        consumer.close()


@contextlib.contextmanager
def _stderr_to(path: str):
    """File descriptor 2 goes to ``path`` while the JVM starts: the JVM, and the Python
    workers it starts, keep writing their logs (the planned failure's ERROR lines and stack
    traces among them) there; this process's own stderr comes back afterwards."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(path, "ab") as log:
            os.dup2(log.fileno(), 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def log_path() -> str:
    return os.path.join(tempfile.gettempdir(), f"kip-demo-spark-{os.getpid()}.log")


def run(bootstrap: str, topic: str) -> bool:
    """The step against the broker ``bootstrap``: ``topic`` -> ``topic + OUT_SUFFIX``.
    Prints what it did; True when read_committed sees every record exactly once."""
    from confluent_kafka.admin import AdminClient, NewTopic
    from pyspark.sql import functions as F

    from . import session

    out = topic + OUT_SUFFIX
    want, fail_at = _read(bootstrap, topic, "read_committed")
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})
    admin.create_topics([NewTopic(out, 3, 1)])[out].result(30)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    t0 = time.perf_counter()
    logs = log_path()
    print(f"   Spark's and Java's logs (the planned failure's stack traces too): {logs}",
          flush=True)
    with _stderr_to(logs):
        spark = session("local[2,4]", "kip-demo", {
            "spark.driver.host": "127.0.0.1", "spark.ui.enabled": "false",
            # small Arrow batches: the failing attempt's writer gets (and writes) a prefix
            "spark.sql.execution.arrow.maxRecordsPerBatch": "1000"})
    started = time.perf_counter() - t0
    try:
        @F.udf("binary")
        def passed_on(partition, offset, value):  # no hints: Spark would take a pandas UDF
            from pyspark import TaskContext

            if partition == 0 and offset == fail_at and \
                    TaskContext.get().attemptNumber() == 0:
                raise RuntimeError("kip demo: planned failure of a first attempt")
            return value

        t1 = time.perf_counter()
        (spark.read.format("kip").option("kafka.bootstrap.servers", bootstrap)
         .option("subscribe", topic).option("kafka.isolation.level", "read_committed").load()
         .where(F.col("value").isNotNull())  # tombstones stay behind: the sink needs a value
         .select("key", passed_on("partition", "offset", "value").alias("value"))
         .write.format("kip").option("kafka.bootstrap.servers", bootstrap)
         .option("topic", out).mode("append").save())
        took = time.perf_counter() - t1
    finally:
        spark.stop()
    committed, _ = _read(bootstrap, out, "read_committed")
    everything, _ = _read(bootstrap, out, "read_uncommitted")
    once = committed == want
    print(f"   Spark started in {started:.1f} s (local[2,4]); the job ran in {took:.1f} s, one "
          "task failed on purpose, as planned, and was retried (its error is in that log)",
          flush=True)
    print(f"   read_uncommitted sees {sum(everything.values()):,} records in {out!r} "
          f"({sum(everything.values()) - sum(want.values()):,} from the failed attempt, "
          "aborted);")
    print(f"   read_committed sees {sum(committed.values()):,}: every record of {topic!r} "
          f"{'exactly once' if once else 'NOT exactly once'} "
          f"({max(committed.values(), default=0)} at most per record)")
    return once
