"""A Spark driver process for the standalone-cluster tests (test_spark_cluster.py): the test
process already holds a local SparkSession, and a JVM has one SparkContext, so the jobs on
the cluster run from here.

    python cluster_driver.py MASTER_URL JOBS_JSON OUT_JSON

JOBS_JSON: a list of jobs, run in order on one session:
- ``{"job": "sink", "bootstrap": B, "topic": T, "rows": N, "marker": M}``: N rows
  (key k<i>, value v<i>, 8 partitions) written with ``format("kip")``, the value UDF failing
  the first attempt of partition 3's task on its last row (so that attempt's writer may
  have written a prefix), touching the file M first;
- ``{"job": "read", "bootstrap": B, "topic": T, "isolation": I}``: the topic read with
  ``format("kip")`` (headers included), every row written to OUT_JSON under ``read-<I>``;
- ``{"job": "read-killed", "bootstrap": B, "topic": T, "marker": M}``: the topic read while
  the test kills a worker -9 (read_while_killed).
"""

from __future__ import annotations

import json
import os
import sys

FAILING_PARTITION, PARTITIONS = 3, 8


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


def read_while_killed(spark, bootstrap: str, topic: str, marker: str) -> list:
    """The topic read in 8 tasks, each first attempt touching ``marker`` and then pausing
    3 s before it hands its rows on: the test kills a worker -9 meanwhile, and the tasks it
    ran are run again on the other one. Every (partition, offset) read, sorted."""
    df = (spark.read.format("kip").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", topic).option("minPartitions", "8").load()
          .select("partition", "offset"))

    def pause_first_attempt(batches):
        import time

        from pyspark import TaskContext

        if TaskContext.get().attemptNumber() == 0:
            open(marker, "a").close()
            time.sleep(3)
        yield from batches

    rows = df.mapInArrow(pause_first_attempt, df.schema).collect()
    return sorted([r.partition, r.offset] for r in rows)


def main() -> None:
    master, jobs_file, out_file = sys.argv[1:4]
    from kipproducer import spark as kip_spark

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = kip_spark.session(master, "kip-cluster-driver", {
        "spark.driver.host": "127.0.0.1", "spark.ui.enabled": "false",
        "spark.executor.memory": "512m", "spark.executor.cores": "1",
        "spark.task.maxFailures": "4", "spark.pyspark.python": sys.executable})
    out: dict[str, object] = {}
    try:
        for job in json.loads(open(jobs_file).read()):
            # which executors there are before each job: a cluster of two workers has two
            out.setdefault("executors", []).append(  # type: ignore[union-attr]
                spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1)
            if job["job"] == "read-killed":
                out["read-killed"] = read_while_killed(spark, job["bootstrap"], job["topic"],
                                                       job["marker"])
            elif job["job"] == "sink":
                sink(spark, job["bootstrap"], job["topic"], int(job["rows"]), job["marker"])
            else:
                out[f"read-{job['isolation']}"] = read(spark, job["bootstrap"], job["topic"],
                                                       job["isolation"])
    finally:
        spark.stop()
    with open(out_file, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
