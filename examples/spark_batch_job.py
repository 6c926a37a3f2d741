"""A Spark batch job: read a topic with ``format("kip")``, transform, write exactly once.

It reads every committed record of ``--source-topic`` (read_committed), upper-cases the
values, writes them to ``--target-topic`` through kip's transactional sink (every task's
records are committed together by the driver, or none are: a read_committed reader sees each
row exactly once even when tasks fail and are retried), then reads the target back and prints
what it did. ``--fill N`` first writes N records to the source (for a try on an empty broker;
both topics are created when missing). Needs pyspark and a Java.

    python examples/spark_batch_job.py --bootstrap 127.0.0.1:9092 --fill 100
"""

from __future__ import annotations

import argparse
import sys

from kipproducer import Producer


def fill(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    try:
        for i in range(count):
            producer.produce(topic, b"order %d" % i, b"k%d" % i)
        left = producer.flush(30)
    finally:
        producer.close()
    if left:
        raise SystemExit(f"{left} of {count} records not delivered to {topic}")


def run(spark, bootstrap: str, source_topic: str, target_topic: str) -> int:
    """The job on ``spark``; returns the number of records the target holds afterwards."""
    rows = (spark.read.format("kip")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", source_topic)
            .option("kafka.isolation.level", "read_committed")
            .load()
            .selectExpr("key", "upper(cast(value as string)) as value"))
    read = rows.count()
    print(f"read {read} records from {source_topic}", flush=True)
    (rows.write.format("kip")
     .option("kafka.bootstrap.servers", bootstrap)
     .option("topic", target_topic)
     .mode("append").save())  # transactional (the default): all or nothing, once
    held = (spark.read.format("kip")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", target_topic)
            .option("kafka.isolation.level", "read_committed")
            .load().count())
    print(f"wrote {read} records to {target_topic} exactly once; it now holds {held}",
          flush=True)
    return held


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092", help="Kafka bootstrap servers")
    parser.add_argument("--source-topic", default="orders", help="the topic read")
    parser.add_argument("--target-topic", default="orders-upper", help="the topic written")
    parser.add_argument("--fill", type=int, default=0, metavar="N",
                        help="first write N records to the source topic")
    args = parser.parse_args(argv)
    if args.fill:
        fill(args.bootstrap, args.source_topic, args.fill)
    from kipproducer import spark as kip_spark

    spark = kip_spark.session("local[2]")
    try:
        run(spark, args.bootstrap, args.source_topic, args.target_topic)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
