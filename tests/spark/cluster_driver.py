"""A Spark driver process for the standalone-cluster tests (test_spark_cluster.py): the test
process already holds a local SparkSession, and a JVM has one SparkContext, so the jobs on
the cluster run from here.

    python cluster_driver.py MASTER_URL JOBS_JSON OUT_JSON

JOBS_JSON: a list of jobs, run in order on one session; OUT_JSON is rewritten after each job
(the last job of a driver may be ended by kill -9):
- ``{"job": "sink", "bootstrap": B, "topic": T, "rows": N, "marker": M}``: N rows
  (key k<i>, value v<i>, 8 partitions) written with ``format("kip")``, the value UDF failing
  the first attempt of partition 3's task on its last row (so that attempt's writer may
  have written a prefix), touching the file M first;
- ``{"job": "read", "bootstrap": B, "topic": T, "isolation": I}``: the topic read with
  ``format("kip")`` (headers included), every row written to OUT_JSON under ``read-<I>``;
- ``{"job": "read-killed", "bootstrap": B, "topic": T, "pauses": D}``: the topic read while
  the test kills a worker -9 (read_while_killed);
- ``{"job": "sink-killed", "bootstrap": B, "topic": T, "rows": N, "pauses": D}``: N rows
  written with ``format("kip")`` while the test kills a worker -9 in the middle of the
  writes (sink_while_killed);
- ``{"job": "stream", "source": B, "topic": T, "target": B2, "out": T2, "sink_id": S,
  "checkpoint": C, "trigger": "run" | "available-now"}``: a streaming query from a kip
  source topic to the kip streaming sink with checkpoint C; ``run``: micro-batches every
  200 ms until the driver is killed; ``available-now``: what is there, then the next job.

``pauses`` jobs: each task's first attempt, once it holds rows, writes a file named by its
process id into the directory D and waits until the file D/killed exists (the test kills
the worker running one of them -9, then touches it), at most PAUSE_S.
"""

from __future__ import annotations

import json
import os
import sys
import time

FAILING_PARTITION, PARTITIONS = 3, 8
PAUSE_S = 60.0
EXECUTORS_WAIT_S = 120.0


def pause_until_killed(pauses: str) -> None:
    """In a task's first attempt: say so (a file named by this process id), then wait until
    the test has killed a worker (or PAUSE_S)."""
    from pyspark import TaskContext

    if TaskContext.get().attemptNumber() != 0:
        return
    open(os.path.join(pauses, str(os.getpid())), "w").close()
    deadline = time.monotonic() + PAUSE_S
    while not os.path.exists(os.path.join(pauses, "killed")) and time.monotonic() < deadline:
        time.sleep(0.05)


def sink(spark, bootstrap: str, topic: str, n: int, marker: str) -> None:
    from pyspark.sql import functions as F

    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "1000")
    last = (FAILING_PARTITION + 1) * n // PARTITIONS - 1

    @F.udf("binary")
    def value(i):
        from pyspark import TaskContext

        if i == last and TaskContext.get().attemptNumber() == 0:
            open(marker, "w").close()  # the test checks the failure did happen
            raise RuntimeError("planned failure of the first attempt")
        return b"v%d" % i

    ids = spark.range(0, n, numPartitions=PARTITIONS)
    df = ids.select(F.concat(F.lit("k"), F.col("id").cast("string")).cast("binary")
                    .alias("key"), value("id").alias("value"))
    (df.write.format("kip").option("kafka.bootstrap.servers", bootstrap)
     .option("topic", topic).mode("append").save())


def sink_while_killed(spark, bootstrap: str, topic: str, n: int, pauses: str) -> None:
    """N rows (key k<i>, value v<i>) in 4 tasks of 4 Arrow batches each: each first attempt
    pauses in its third batch (pause_until_killed), halfway through its rows, when the test
    kills the worker running one of them."""
    from pyspark.sql import functions as F

    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(n // 16))
    tasks = 4

    @F.udf("binary")
    def value(i):
        if i % (n // tasks) == n // tasks // 2 + n // 16:  # in a task's third batch
            pause_until_killed(pauses)
        return b"v%d" % i

    df = spark.range(0, n, numPartitions=tasks).select(
        F.concat(F.lit("k"), F.col("id").cast("string")).cast("binary").alias("key"),
        value("id").alias("value"))
    (df.write.format("kip").option("kafka.bootstrap.servers", bootstrap)
     .option("topic", topic).mode("append").save())


def read(spark, bootstrap: str, topic: str, isolation: str) -> list:
    from pyspark.sql import functions as F

    df = (spark.read.format("kip").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", topic).option("includeHeaders", "true")
          .option("kafka.isolation.level", isolation).option("minPartitions", "4").load())

    def text(b):
        return None if b is None else bytes(b).decode("latin-1")

    rows = df.select("partition", "offset", "key", "value", "headers",
                     F.unix_millis("timestamp").alias("ms")).collect()
    return sorted([r.partition, r.offset, text(r.key), text(r.value),
                   [[h.key, text(h.value)] for h in r.headers or ()], r.ms] for r in rows)


def read_while_killed(spark, bootstrap: str, topic: str, pauses: str) -> list:
    """The topic read in 8 tasks, each first attempt pausing (pause_until_killed) before it
    hands its rows on: the test kills the worker running one of them -9, and the tasks it
    ran are run again on another. Every (partition, offset) read, sorted."""
    df = (spark.read.format("kip").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", topic).option("minPartitions", "8").load()
          .select("partition", "offset"))

    def pause_first_attempt(batches):
        pause_until_killed(pauses)
        yield from batches

    rows = df.mapInArrow(pause_first_attempt, df.schema).collect()
    return sorted([r.partition, r.offset] for r in rows)


def stream(spark, job: dict) -> list:
    writer = (spark.readStream.format("kip").option("kafka.bootstrap.servers", job["source"])
              .option("subscribe", job["topic"]).option("startingOffsets", "earliest").load()
              .select("key", "value")
              .writeStream.format("kip").option("kafka.bootstrap.servers", job["target"])
              .option("topic", job["out"]).option("kip.sink.id", job["sink_id"])
              .option("checkpointLocation", job["checkpoint"]))
    if job["trigger"] == "run":
        writer.trigger(processingTime="200 milliseconds").start().awaitTermination()
        return []
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination()
    if query.exception() is not None:
        raise SystemExit(f"query failed: {query.exception()}")
    # what each progress report shows of the source: where the micro-batch ended and the
    # partitions' ends as the source last saw them (the lag is the difference)
    return [{"end": p["sources"][0].get("endOffset"), "latest": p["sources"][0].get("latestOffset")}
            for p in query.recentProgress]


def executors(spark) -> int:
    return spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1  # less the driver


def wait_for_executors(spark, count: int) -> None:
    """A replacement worker registers, and gets this application's executor, on its own
    time: a job that kills a worker waits until there is another to rerun on."""
    deadline = time.monotonic() + EXECUTORS_WAIT_S
    while executors(spark) < count:
        if time.monotonic() > deadline:
            raise SystemExit(f"{executors(spark)} executors after {EXECUTORS_WAIT_S:.0f} s, "
                             f"expected {count}")
        time.sleep(0.2)


def main() -> None:
    master, jobs_file, out_file = sys.argv[1:4]
    from kipproducer import spark as kip_spark

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = kip_spark.session(master, "kip-cluster-driver", {
        "spark.driver.host": "127.0.0.1", "spark.ui.enabled": "false",
        "spark.executor.memory": "512m", "spark.executor.cores": "1",
        "spark.sql.shuffle.partitions": "2",
        "spark.task.maxFailures": "4", "spark.pyspark.python": sys.executable})
    out: dict[str, list] = {"executors": []}

    def save() -> None:  # after each job: the last one may never end
        with open(out_file + ".new", "w") as f:
            json.dump(out, f)
        os.replace(out_file + ".new", out_file)

    try:
        for job in json.loads(open(jobs_file).read()):
            kind = job["job"]
            if kind != "stream":
                # executors register on their own time: at the first job, and after a kill
                # (a replacement worker), a job could otherwise start on one or none
                wait_for_executors(spark, 2)
            # which executors there are before each job: a cluster of two workers has two
            out["executors"].append(executors(spark))
            save()
            if kind == "read-killed":
                out[kind] = read_while_killed(spark, job["bootstrap"], job["topic"],
                                              job["pauses"])
            elif kind == "sink-killed":
                sink_while_killed(spark, job["bootstrap"], job["topic"], int(job["rows"]),
                                  job["pauses"])
            elif kind == "sink":
                sink(spark, job["bootstrap"], job["topic"], int(job["rows"]), job["marker"])
            elif kind == "stream":
                out.setdefault("progress", []).extend(stream(spark, job) or [])
            else:
                out[f"read-{job['isolation']}"] = read(spark, job["bootstrap"], job["topic"],
                                                       job["isolation"])
            save()
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
