"""A Spark driver process for the kill -9 test: a streaming query from a kip source topic to
the kip streaming sink, with a checkpoint.

    python stream_driver.py SOURCE TOPIC TARGET OUT SINK_ID CHECKPOINT run|finish

``run``: micro-batches every 200 ms until killed; ``finish``: Trigger.AvailableNow, then exit.
"""

from __future__ import annotations

import os
import sys

from kipproducer import spark as kip_spark


def main() -> None:
    source, topic, target, out, sink_id, checkpoint, mode = sys.argv[1:8]
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = kip_spark.session("local[2,4]", "kip-stream-driver", {
        "spark.driver.host": "127.0.0.1", "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2"})
    writer = (spark.readStream.format("kip").option("kafka.bootstrap.servers", source)
              .option("subscribe", topic).option("startingOffsets", "earliest").load()
              .select("key", "value")
              .writeStream.format("kip").option("kafka.bootstrap.servers", target)
              .option("topic", out).option("kip.sink.id", sink_id)
              .option("checkpointLocation", checkpoint))
    if mode == "run":
        query = writer.trigger(processingTime="200 milliseconds").start()
        print("started", flush=True)
        query.awaitTermination()
    else:
        query = writer.trigger(availableNow=True).start()
        query.awaitTermination()
        if query.exception() is not None:
            raise SystemExit(f"query failed: {query.exception()}")
    spark.stop()


if __name__ == "__main__":
    main()
