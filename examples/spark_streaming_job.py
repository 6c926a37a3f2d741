"""A Spark streaming job with a checkpoint, stopped and restarted: each run copies the
records that arrived since the last one, exactly once.

Each run starts a query ``readStream.format("kip")`` -> ``writeStream.format("kip")`` from
``--checkpoint`` with ``Trigger.AvailableNow`` (it reads to the ends the source has now,
then stops), upper-cases the values, and prints what it copied. Run it again later: it
resumes at the offsets its checkpoint recorded, and the sink (named by ``--sink-id``, the
same on every restart) writes no batch twice, even one Spark replays after a crash.
``--fill N`` first writes N more records to the source. Needs pyspark and a Java.

    python examples/spark_streaming_job.py --bootstrap 127.0.0.1:9092 --fill 50
    python examples/spark_streaming_job.py --bootstrap 127.0.0.1:9092 --fill 20  # 20 more
"""

from __future__ import annotations

import argparse
import sys

from spark_batch_job import fill


def run(spark, bootstrap: str, source_topic: str, target_topic: str, checkpoint: str,
        sink_id: str) -> int:
    """One run of the query on ``spark``; returns the number of records it copied."""
    query = (spark.readStream.format("kip")
             .option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", source_topic)
             .option("startingOffsets", "earliest")  # the first run: from the start
             .load()
             .selectExpr("key", "upper(cast(value as string)) as value")
             .writeStream.format("kip")
             .option("kafka.bootstrap.servers", bootstrap)
             .option("topic", target_topic)
             .option("kip.sink.id", sink_id)
             .option("checkpointLocation", checkpoint)
             .trigger(availableNow=True)
             .start())
    try:
        query.awaitTermination()
    finally:
        query.stop()
    if query.exception() is not None:
        raise SystemExit(f"the query failed: {query.exception()}")
    copied = sum(p["numInputRows"] for p in query.recentProgress)
    print(f"copied {copied} new records from {source_topic} to {target_topic} "
          f"(checkpoint {checkpoint})", flush=True)
    return copied


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092", help="Kafka bootstrap servers")
    parser.add_argument("--source-topic", default="orders", help="the topic read")
    parser.add_argument("--target-topic", default="orders-upper-stream",
                        help="the topic written")
    parser.add_argument("--checkpoint", default="orders-stream-checkpoint",
                        help="the query's checkpoint directory (kept across runs)")
    parser.add_argument("--sink-id", default="orders-upper-stream",
                        help="the sink's name: the same on every restart")
    parser.add_argument("--fill", type=int, default=0, metavar="N",
                        help="first write N more records to the source topic")
    args = parser.parse_args(argv)
    if args.fill:
        fill(args.bootstrap, args.source_topic, args.fill)
    from kipproducer import spark as kip_spark

    spark = kip_spark.session("local[2]")
    try:
        run(spark, args.bootstrap, args.source_topic, args.target_topic, args.checkpoint,
            args.sink_id)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
