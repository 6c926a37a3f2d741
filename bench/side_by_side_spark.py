"""The kip Spark sink vs a foreachPartition with confluent-kafka's Producer, side by side in
one run (issue 14).

One `kip broker` (data dir on tmpfs when there is one) and one SparkSession (local[2] by
default). The DataFrame is N rows (12-byte keys, 100-byte values) in 8 partitions, cached in
memory before the first run, so every contender starts from the same rows. After one untimed
warm-up round, each contender writes them to its own 6-partition topic, alternating, timed
from the action's start to its end (Spark's task scheduling included for all):

- confluent foreachPartition: ``df.foreachPartition`` with a confluent_kafka.Producer per
  partition, ``produce()`` per row, ``flush()``; idempotent, acks=all. At least once: a retried
  task writes its rows again (what users write today);
- kip sink (transactional): ``df.write.format("kip")``: each task's rows in its own
  transaction through kipproducer's Producer (produce_arrays on the Arrow batches), committed
  by the driver. Exactly once for read_committed readers;
- kip write_ordered: KIP-27 expected offsets, after a shuffle by target partition and a sort.
  Exactly once for every reader.

Usage: python bench/side_by_side_spark.py [--records N] [--repeat R] [--master local[2]]
       [--write bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time

from bench_support import broker_data_dir, start_kip_broker
from results_file import machine, replace_section

HEADING = "## Spark: the kip sink vs foreachPartition with confluent-kafka (issue 14)"
PARTITIONS = 6
CONFLUENT = "confluent foreachPartition"
KIP = "kip sink (transactional)"
ORDERED = "kip write_ordered"


def confluent_partition(bootstrap: str, topic: str):
    def write(rows) -> None:
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                      "linger.ms": 5, "log_level": 3})
        for row in rows:
            while True:
                try:
                    p.produce(topic, row.value, row.key)
                    break
                except BufferError:
                    p.poll(0.01)
        left = p.flush(120)
        if left:
            raise RuntimeError(f"{left} records not delivered")

    return write


def count(bootstrap: str, topic: str) -> int:
    """Records a read_committed consumer reads (log end offsets would count the commit
    markers too)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "kip-bench-count",
                  "enable.auto.commit": False, "enable.partition.eof": True,
                  "isolation.level": "read_committed", "log_level": 3})
    c.assign([TopicPartition(topic, p, -2) for p in range(PARTITIONS)])
    seen, at_end = 0, set()
    deadline = time.monotonic() + 120
    while len(at_end) < PARTITIONS and time.monotonic() < deadline:
        for m in c.consume(10_000, 0.2):
            if m.error() is None:
                seen += 1
            elif m.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(m.partition())
    c.close()
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--write", metavar="RESULTS_MD")
    args = parser.parse_args()

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), "src"))
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from confluent_kafka.admin import AdminClient, NewTopic
    from pyspark.sql import functions as F

    from kipproducer import spark as kip_spark

    data_dir, where = broker_data_dir("kip-bench-spark-")
    broker, bootstrap = start_kip_broker(data_dir)
    spark = kip_spark.session(args.master, "kip-bench", {
        "spark.driver.host": "127.0.0.1", "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "8"})
    try:
        df = (spark.range(0, args.records, numPartitions=8)
              .select(F.format_string("key-%08d", "id").cast("binary").alias("key"),
                      F.expr("cast(repeat(cast(id % 10 as string), 100) as binary)")
                      .alias("value"))
              .cache())
        df.count()
        admin = AdminClient({"bootstrap.servers": bootstrap})
        times: dict[str, list[float]] = {CONFLUENT: [], KIP: [], ORDERED: []}
        # Round 0 is a warm-up, not counted: each path's first action starts its Python
        # workers and imports (pyarrow, kipproducer), which cost seconds once per session.
        for r in range(args.repeat + 1):
            for name in times:
                topic = f"{name.split()[0]}-{name.split()[-1].strip('()')}-{r}"
                admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
                started = time.perf_counter()
                if name == CONFLUENT:
                    df.foreachPartition(confluent_partition(bootstrap, topic))
                elif name == KIP:
                    (df.write.format("kip").option("kafka.bootstrap.servers", bootstrap)
                     .option("topic", topic).mode("append").save())
                else:
                    kip_spark.write_ordered(df, topic, {"kafka.bootstrap.servers": bootstrap})
                elapsed = time.perf_counter() - started
                written = count(bootstrap, topic)
                if written != args.records:
                    raise SystemExit(f"{name}: {written} records in {topic}, expected "
                                     f"{args.records}")
                if r == 0:
                    print(f"warm-up {name}: {elapsed:.2f} s", flush=True)
                    continue
                times[name].append(elapsed)
                print(f"run {r} {name}: {args.records / elapsed:,.0f} rows/s "
                      f"({elapsed:.2f} s)", flush=True)
    finally:
        spark.stop()
        broker.terminate()
        broker.wait(30)
        shutil.rmtree(data_dir, ignore_errors=True)

    base = statistics.median(times[CONFLUENT])
    lines = [HEADING, "",
             f"{args.records:,} rows (12-byte keys, 100-byte values, 8 Spark partitions, cached) "
             f"to a 6-partition topic on one `kip broker` (data dir {where}), Spark "
             f"`{args.master}`, one warm-up round, then {args.repeat} alternating runs "
             "each, median; "
             f"`python bench/side_by_side_spark.py --records {args.records} --repeat "
             f"{args.repeat}`. Machine: {machine()}.", "",
             "| contender | rows/s (median) | vs confluent | guarantee |",
             "|---|---|---|---|"]
    guarantees = {CONFLUENT: "at least once", KIP: "exactly once (read_committed)",
                  ORDERED: "exactly once (every reader)"}
    for name, runs in times.items():
        median = statistics.median(runs)
        lines.append(f"| {name} | {args.records / median:,.0f} | {base / median:.2f}x | "
                     f"{guarantees[name]} |")
    section = "\n".join(lines) + "\n"
    print(section)
    if args.write:
        replace_section(args.write, HEADING, section)


if __name__ == "__main__":
    main()
