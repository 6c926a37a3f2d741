"""examples/spark_batch_job.py and examples/spark_streaming_job.py on the tests' Spark session
(their ``run`` is what their ``main`` calls after starting a session): the printed lines say
what they did, and what they say is what the target topic holds."""

from __future__ import annotations

import sys
import uuid
from collections import Counter
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))

import spark_batch_job  # noqa: E402
import spark_streaming_job  # noqa: E402


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def committed_values(bootstrap: str, topic: str, partitions: int = 3) -> Counter:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("check"),
                         "isolation.level": "read_committed", "enable.partition.eof": True,
                         "enable.auto.commit": False})
    seen: Counter = Counter()
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        at_end: set[int] = set()
        while len(at_end) < partitions:
            msg = consumer.poll(10)
            assert msg is not None, f"reading {topic} stalled"
            if msg.error() is not None:
                at_end.add(msg.partition())
                continue
            seen[msg.value()] += 1
    finally:
        consumer.close()
    return seen


def test_batch_job_copies_once_and_says_so(spark, source, capsys) -> None:
    bootstrap = source.bootstrap_servers
    src, dst = unique("orders"), unique("orders-upper")
    spark_batch_job.fill(bootstrap, src, 40)
    assert spark_batch_job.run(spark, bootstrap, src, dst) == 40
    assert capsys.readouterr().out.splitlines() == [
        f"read 40 records from {src}",
        f"wrote 40 records to {dst} exactly once; it now holds 40"]
    assert committed_values(bootstrap, dst) == Counter(b"ORDER %d" % i for i in range(40))


def test_streaming_job_stopped_and_restarted_copies_only_the_new(spark, source, capsys,
                                                                tmp_path) -> None:
    bootstrap = source.bootstrap_servers
    src, dst = unique("orders"), unique("orders-stream")
    checkpoint, sink_id = str(tmp_path / "checkpoint"), unique("sink")
    spark_batch_job.fill(bootstrap, src, 30)
    assert spark_streaming_job.run(spark, bootstrap, src, dst, checkpoint, sink_id) == 30
    spark_batch_job.fill(bootstrap, src, 12)  # 12 more (values "order 0".."order 11" again)
    assert spark_streaming_job.run(spark, bootstrap, src, dst, checkpoint, sink_id) == 12
    assert capsys.readouterr().out.splitlines() == [
        f"copied 30 new records from {src} to {dst} (checkpoint {checkpoint})",
        f"copied 12 new records from {src} to {dst} (checkpoint {checkpoint})"]
    expected = Counter(b"ORDER %d" % i for i in range(30)) + Counter(
        b"ORDER %d" % i for i in range(12))
    assert committed_values(bootstrap, dst) == expected
