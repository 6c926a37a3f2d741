"""format("kip") on local[2,4] against reference brokers: the transactional sink and
write_ordered while an upstream UDF fails a task's first attempt (Spark then hands the writer
a truncated partition as if it were whole), the source against librdkafka over compaction
holes and aborted transactions, and an offset-preserving copy between two brokers."""

from __future__ import annotations

import time
from collections import Counter

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from mirror_support import compacted_topic, read, stable, transactions, trim, unique
from pyspark.sql import functions as F

from kipproducer import spark as kip_spark
from kipproducer.broker.embedded import EmbeddedBroker

ROWS = 1_000_000
SPARK_PARTITIONS = 8
FAILING_PARTITION = 3


def create(broker: EmbeddedBroker, topic: str, partitions: int, **config: str) -> str:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic(topic, partitions, 1, config=config)])[topic].result(30)
    return topic


def rows_failing_once(spark, n: int = ROWS):
    """``n`` rows (key k<i>, value v<i>) in 8 partitions; the value UDF raises on the last row
    of partition 3 in its first attempt only, so that attempt's writer sees a prefix.

    The writer gets rows in Arrow batches of maxRecordsPerBatch (10,000 by default): with
    12,500 rows a partition it would fail before its first batch (measured); batches of 5,000
    hand the failing attempt 10,000 rows that look like a whole partition."""
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "5000")
    last = (FAILING_PARTITION + 1) * n // SPARK_PARTITIONS - 1

    @F.udf("binary")
    def value(i):  # no hints: Spark would read them as a pandas UDF
        from pyspark import TaskContext

        if i == last and TaskContext.get().attemptNumber() == 0:
            raise RuntimeError("planned failure of the first attempt")
        return b"v%d" % i

    ids = spark.range(0, n, numPartitions=SPARK_PARTITIONS)
    return ids.select(F.concat(F.lit("k"), F.col("id").cast("string")).cast("binary")
                      .alias("key"), value("id").alias("value"))


def values_of(records: dict) -> Counter:
    return Counter(r.value for rs in records.values() for r in rs)


def count_values(bootstrap: str, topic: str, partitions: int,
                 isolation: str = "read_committed") -> Counter:
    """Every value of the topic, counted: mirror_support.read without a record object per
    message (a million of them cost seconds)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("count"),
                  "enable.auto.commit": False, "enable.partition.eof": True,
                  "isolation.level": isolation})
    found: Counter = Counter()
    try:
        c.assign([TopicPartition(topic, p, -2) for p in range(partitions)])
        at_end: set[int] = set()
        deadline = time.monotonic() + 120
        while len(at_end) < partitions:
            assert time.monotonic() < deadline, f"{topic}: not read to the end"
            batch = c.consume(100_000, 0.2)
            # In order: a batch may hold a partition's last records and then its end (which
            # is reported once), or an end and then records that arrived after it.
            for m in batch:
                if m.error():
                    assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                    at_end.add(m.partition())
                else:
                    at_end.discard(m.partition())
            found.update(m.value() for m in batch if not m.error())
    finally:
        c.close()
    return found


def test_transactional_sink_writes_each_row_once_for_read_committed(spark, target) -> None:
    topic = create(target, unique("eos"), 6)
    started = time.monotonic()
    (rows_failing_once(spark).write.format("kip")
     .option("kafka.bootstrap.servers", target.bootstrap_servers).option("topic", topic)
     .mode("append").save())
    print(f"transactional sink: {ROWS} rows in {time.monotonic() - started:.1f} s")
    stable(target.bootstrap_servers, topic, 6)  # the failed attempt's transaction is ended
    committed = count_values(target.bootstrap_servers, topic, 6, "read_committed")
    assert committed == Counter({b"v%d" % i: 1 for i in range(ROWS)})
    # The failed attempt did write (a prefix of its partition), in a transaction now aborted:
    # without the two-phase commit those rows would be duplicates.
    everything = count_values(target.bootstrap_servers, topic, 6, "read_uncommitted")
    assert sum(everything.values()) > ROWS
    assert max(everything.values()) == 2


def test_write_ordered_writes_each_row_once_for_every_reader(spark, target) -> None:
    topic = create(target, unique("ordered"), 6)
    options = {"kafka.bootstrap.servers": target.bootstrap_servers}
    started = time.monotonic()
    bases = kip_spark.write_ordered(rows_failing_once(spark), topic, options)
    print(f"write_ordered: {ROWS} rows in {time.monotonic() - started:.1f} s")
    assert bases == {p: 0 for p in range(6)}
    records = read(target.bootstrap_servers, topic, 6, "read_uncommitted")
    assert values_of(records) == Counter({b"v%d" % i: 1 for i in range(ROWS)})
    for p, rs in records.items():
        assert [r.offset for r in rs] == list(range(len(rs)))
        # the deterministic order: sorted by key, then value
        assert [r.key for r in rs] == sorted(r.key for r in rs), p
    # A rerun with the same base offsets finds every row written and writes nothing.
    kip_spark.write_ordered(rows_failing_once(spark), topic, options, base_offsets=bases)
    again = count_values(target.bootstrap_servers, topic, 6, "read_uncommitted")
    assert sum(again.values()) == ROWS


def spark_records(df) -> dict[int, list[tuple]]:
    out: dict[int, list[tuple]] = {}
    rows = df.select("partition", "offset", "key", "value", "headers",
                     F.unix_millis("timestamp").alias("ms"), "timestampType").collect()
    for r in sorted(rows, key=lambda r: (r.partition, r.offset)):
        assert r.timestampType == 0
        headers = tuple((h.key, bytes(h.value) if h.value is not None else None)
                        for h in r.headers or ())
        out.setdefault(r.partition, []).append(
            (r.offset, None if r.key is None else bytes(r.key),
             None if r.value is None else bytes(r.value), headers, r.ms))
    return out


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_read_equals_librdkafka_over_holes_and_aborted_transactions(spark, source,
                                                                      isolation) -> None:
    topic = unique(f"holes-{isolation[5:9]}")
    compacted_topic(source, topic, 3000)
    trim(source, topic, 3, 5)
    transactions(source, topic, 6)  # rounds 2 and 5 aborted: the log ends in an abort
    stable(source.bootstrap_servers, topic, 3)
    df = (spark.read.format("kip").option("kafka.bootstrap.servers", source.bootstrap_servers)
          .option("subscribe", topic).option("includeHeaders", "true")
          .option("kafka.isolation.level", isolation).load())
    expected = {p: [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in rs]
                for p, rs in read(source.bootstrap_servers, topic, 3, isolation).items()}
    got = spark_records(df)
    assert got == expected
    aborted = sum(1 for rs in expected.values() for r in rs if (r[2] or b"").startswith(b"t2-"))
    assert aborted == (6 if isolation == "read_uncommitted" else 0)
    # Several Spark partitions per Kafka partition, and a JSON end inside the log.
    ends = {p: rs[len(rs) // 2][0] for p, rs in expected.items()}
    part = (spark.read.format("kip").option("kafka.bootstrap.servers",
                                            source.bootstrap_servers)
            .option("assign", f'{{"{topic}": [0, 1, 2]}}').option("minPartitions", "7")
            .option("endingOffsets", '{"%s": {%s}}' % (topic, ", ".join(
                f'"{p}": {o}' for p, o in ends.items())))
            .option("includeHeaders", "true").option("kafka.isolation.level", isolation)
            .load())
    assert part.rdd.getNumPartitions() >= 7
    assert spark_records(part) == {p: [r for r in rs if r[0] < ends[p]]
                                   for p, rs in expected.items()}


def test_copy_keeps_offsets_between_brokers(spark, source, target) -> None:
    topic = unique("copy")
    compacted_topic(source, topic, 3000)
    trim(source, topic, 3, 40)
    create(target, topic, 3, **{"cleanup.policy": "compact", "segment.bytes": "4096"})

    def copy() -> None:
        (spark.read.format("kip").option("kafka.bootstrap.servers", source.bootstrap_servers)
         .option("subscribe", topic).option("includeHeaders", "true").load()
         .select("key", "value", "headers", "partition", "offset", "timestamp")
         .write.format("kip").option("kafka.bootstrap.servers", target.bootstrap_servers)
         .option("topic", topic).mode("append").save())

    copy()
    want = read(source.bootstrap_servers, topic, 3)
    assert all(rs[0].offset >= 40 for rs in want.values())
    assert read(target.bootstrap_servers, topic, 3) == want
    copy()  # resumed from the target's log ends: nothing written twice
    assert read(target.bootstrap_servers, topic, 3) == want
