"""docs/spark.md's offset-column copy, as the page writes it: to an existing target topic it
copies every record at its offset; to a missing one it refuses before any task starts, in a
message naming the topic and the broker."""

from __future__ import annotations

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic


def copy(spark, src: str, dst: str, t: str) -> None:
    # docs/spark.md, "3. An offset column", as written there
    (spark.read.format("kip").option("kafka.bootstrap.servers", src).option("subscribe", t)
          .option("includeHeaders", "true").load()
          .select("key", "value", "headers", "partition", "offset", "timestamp")
          .write.format("kip").option("kafka.bootstrap.servers", dst).option("topic", t)
          .mode("append").save())


def test_offset_copy_to_a_missing_topic_refuses_then_copies(spark, source, target) -> None:
    src, dst, t = source.bootstrap_servers, target.bootstrap_servers, "docs-copy"
    src_admin = AdminClient({"bootstrap.servers": src})
    src_admin.create_topics([NewTopic(t, 2, 1)])[t].result(30)
    p = Producer({"bootstrap.servers": src})
    for i in range(6):
        p.produce(t, f"v{i}".encode(), f"k{i}".encode(), partition=i % 2)
    assert p.flush(30) == 0
    try:
        copy(spark, src, dst, t)
    except Exception as exc:  # noqa: BLE001 - Spark wraps the Python error in its own
        message = str(exc)
    else:
        raise AssertionError("the copy to a missing topic did not refuse")
    assert f"topic '{t}' does not exist on {dst}" in message, message[-3000:]
    dst_admin = AdminClient({"bootstrap.servers": dst})
    assert t not in dst_admin.list_topics(timeout=30).topics

    dst_admin.create_topics([NewTopic(t, 2, 1)])[t].result(30)
    copy(spark, src, dst, t)
    c = Consumer({"bootstrap.servers": dst, "group.id": "docs-copy-check",
                  "auto.offset.reset": "earliest"})
    try:
        c.subscribe([t])
        got = []
        for _ in range(60):
            got += [(m.partition(), m.offset(), m.key()) for m in c.consume(10, timeout=0.5)
                    if m.error() is None]
            if len(got) >= 6:
                break
    finally:
        c.close()
    assert sorted(got) == sorted((i % 2, i // 2, f"k{i}".encode()) for i in range(6))
