"""The source's rate limits and offsets by timestamp: maxOffsetsPerTrigger (each micro-batch
reads at most that many offsets, the backlog shared by partition), minOffsetsPerTrigger /
maxTriggerDelay (a micro-batch waits for enough new offsets, or for the delay),
startingTimestamp / startingOffsetsByTimestamp / endingOffsetsByTimestamp (the first offset at
or after the timestamp, as ListOffsets answers it)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer as ConfluentProducer
from confluent_kafka.admin import AdminClient, NewTopic
from mirror_support import unique

from kipproducer.spark.source import cap

BASE_MS = 1_700_000_000_000


def create(bootstrap: str, topic: str, partitions: int) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # referenced until the answer
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    return topic


def test_cap_shares_the_limit_by_backlog() -> None:
    start = {("t", 0): 0, ("t", 1): 100, ("t", 2): 5}
    end = {("t", 0): 300, ("t", 1): 200, ("t", 2): 5}
    capped = cap(start, end, 100)
    assert sum(capped[tp] - start[tp] for tp in end) == 100
    assert capped == {("t", 0): 75, ("t", 1): 125, ("t", 2): 5}
    assert cap(start, end, 10_000) == end
    odd = cap({("t", 0): 0, ("t", 1): 0, ("t", 2): 0},
              {("t", 0): 10, ("t", 1): 10, ("t", 2): 10}, 20)
    assert sum(odd.values()) == 20 and all(6 <= o <= 7 for o in odd.values())


def produce_timed(bootstrap: str, topic: str, n: int, partitions: int) -> None:
    """Record i: value s<i>, timestamp BASE_MS + i * 10, partition i % partitions."""
    p = ConfluentProducer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(n):
        p.produce(topic, b"s%d" % i, partition=i % partitions, timestamp=BASE_MS + i * 10)
    assert p.flush(30) == 0


def test_max_offsets_per_trigger_cuts_micro_batches(spark, source, tmp_path) -> None:
    topic = create(source.bootstrap_servers, unique("limit"), 3)
    produce_timed(source.bootstrap_servers, topic, 300, 3)
    sizes: list[int] = []
    values: list[bytes] = []

    def batch(df, batch_id) -> None:
        rows = df.select("value").collect()
        sizes.append(len(rows))
        values.extend(bytes(r.value) for r in rows)

    query = (spark.readStream.format("kip")
             .option("kafka.bootstrap.servers", source.bootstrap_servers)
             .option("subscribe", topic).option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "70").load()
             .writeStream.foreachBatch(batch)
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(240)
    assert query.exception() is None
    assert sorted(values) == sorted(b"s%d" % i for i in range(300))  # all, once
    nonempty = [n for n in sizes if n]
    assert max(nonempty) <= 70 and len(nonempty) >= 5, sizes
    # the checkpointed ends advance by at most 70 offsets a batch
    ends = []
    for f in sorted(Path(tmp_path, "checkpoint", "offsets").glob("[0-9]*"), key=lambda f: int(
            f.name)):
        ends.append(sum(json.loads(f.read_text().splitlines()[-1])[topic].values()))
    assert all(0 < b - a <= 70 for a, b in zip(ends, ends[1:], strict=False)), ends


def test_offsets_by_timestamp(spark, source) -> None:
    topic = create(source.bootstrap_servers, unique("bytime"), 3)
    produce_timed(source.bootstrap_servers, topic, 300, 3)

    def read(**options: str) -> list[int]:
        reader = (spark.read.format("kip").option("kafka.bootstrap.servers",
                                                  source.bootstrap_servers)
                  .option("subscribe", topic))
        for name, value in options.items():
            reader = reader.option(name, value)
        return sorted(int(bytes(r.value)[1:]) for r in reader.load().select("value").collect())

    # records from i = 100 (timestamp BASE + 1000) on, all partitions
    assert read(startingTimestamp=str(BASE_MS + 1000)) == list(range(100, 300))
    # per partition, with an end by timestamp: partition 0 from i = 150, 1 from the start,
    # 2 not at all (start and end at the same record); ends at i = 240 (exclusive)
    per = {topic: {"0": BASE_MS + 1500, "1": -2, "2": BASE_MS + 2000}}
    until = {topic: {"0": BASE_MS + 2400, "1": BASE_MS + 2400, "2": BASE_MS + 2000}}
    got = read(startingOffsetsByTimestamp=json.dumps(per),
               endingOffsetsByTimestamp=json.dumps(until))
    assert got == sorted([i for i in range(150, 240) if i % 3 == 0]
                         + [i for i in range(0, 240) if i % 3 == 1])
    # an end timestamp later than every record: to the end
    assert read(endingTimestamp=str(BASE_MS + 10**9)) == list(range(300))
    # no record that recent: an error naming the partitions, or the end with "latest"
    with pytest.raises(Exception, match="no record at or after the starting timestamp"):
        read(startingTimestamp=str(BASE_MS + 10**9))
    assert read(startingTimestamp=str(BASE_MS + 10**9),
                startingOffsetsByTimestampStrategy="latest") == []
    with pytest.raises(Exception, match="gives no timestamp for"):
        read(startingOffsetsByTimestamp=json.dumps({topic: {"0": BASE_MS}}))
    with pytest.raises(Exception, match="maxOffsetsPerTrigger' is for streaming"):
        read(maxOffsetsPerTrigger="10")


def test_min_offsets_per_trigger_holds_micro_batches_back(source) -> None:
    """The stream reader as Spark's driver calls it: latestOffset(start, limit) answers start
    itself (no micro-batch) while fewer than minOffsetsPerTrigger offsets are new, and lets
    a smaller backlog through once maxTriggerDelay has passed since the last micro-batch."""
    from kipproducer.spark.source import KipStreamReader

    topic = create(source.bootstrap_servers, unique("minrows"), 2)
    reader = KipStreamReader({"kafka.bootstrap.servers": source.bootstrap_servers,
                              "subscribe": topic, "startingOffsets": "earliest",
                              "minOffsetsPerTrigger": "50", "maxTriggerDelay": "3s"})
    limit = reader.getDefaultReadLimit()
    start = reader.initialOffset()
    assert reader.latestOffset(start, limit) == start  # the first trigger: nothing there yet

    produce_timed(source.bootstrap_servers, topic, 30, 2)
    assert reader.latestOffset(start, limit) == start  # 30 < 50: held back

    produce_timed(source.bootstrap_servers, topic, 30, 2)
    end = reader.latestOffset(start, limit)
    assert sum(end[topic].values()) == 60  # 60 >= 50: through

    produce_timed(source.bootstrap_servers, topic, 10, 2)
    assert reader.latestOffset(end, limit) == end  # 10 < 50, the delay not yet passed
    time.sleep(3.2)
    later = reader.latestOffset(end, limit)
    assert sum(later[topic].values()) == 70  # maxTriggerDelay passed: the 10 go


@pytest.mark.parametrize(("options", "message"), [
    ({"minOffsetsPerTrigger": "10"}, "'minOffsetsPerTrigger' is for streaming queries only"),
    ({"maxTriggerDelay": "1m"}, "'maxTriggerDelay' is for streaming queries only"),
])
def test_trigger_options_refused_in_batch_queries(options, message) -> None:
    from kipproducer.spark.options import OptionError
    from kipproducer.spark.source import ReadPlan

    with pytest.raises(OptionError, match=message):
        ReadPlan({"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "t", **options},
                 streaming=False)


@pytest.mark.parametrize(("options", "message"), [
    ({"minOffsetsPerTrigger": "100", "maxOffsetsPerTrigger": "10"},
     r"'minOffsetsPerTrigger' \(100\) is larger than 'maxOffsetsPerTrigger' \(10\)"),
    ({"minOffsetsPerTrigger": "0"}, "'minOffsetsPerTrigger' must be >= 1"),
    ({"minOffsetsPerTrigger": "5", "maxTriggerDelay": "soon"},
     "'maxTriggerDelay' must be a duration such as"),
    ({"minOffsetsPerTrigger": "5", "maxTriggerDelay": "5 weeks"},
     "'maxTriggerDelay' must be a duration such as"),
])
def test_trigger_options_with_values_that_cannot_work(options, message) -> None:
    from kipproducer.spark.options import OptionError
    from kipproducer.spark.source import ReadPlan

    with pytest.raises(OptionError, match=message):
        ReadPlan({"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "t", **options},
                 streaming=True)


@pytest.mark.parametrize(("raw", "ms"), [("250", 250), ("500ms", 500), ("30s", 30_000),
                                         ("15m", 900_000), ("2min", 120_000),
                                         ("1h", 3_600_000), ("1d", 86_400_000)])
def test_max_trigger_delay_reads_spark_time_strings(raw, ms) -> None:
    from kipproducer.spark.source import ReadPlan

    plan = ReadPlan({"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "t",
                     "minOffsetsPerTrigger": "5", "maxTriggerDelay": raw}, streaming=True)
    assert plan.max_trigger_delay_ms == ms


def test_min_offsets_per_trigger_in_a_streaming_query(spark, source, tmp_path) -> None:
    """Spark itself runs no micro-batch while the reader holds the offsets back: 40 records
    wait (below minOffsetsPerTrigger=60) through several triggers, then go with the next 40
    in one micro-batch of 80."""
    topic = create(source.bootstrap_servers, unique("minq"), 2)
    sizes: list[int] = []

    def batch(df, batch_id) -> None:
        sizes.append(df.count())

    # A progress report for triggers that run nothing too (Spark's default: every 10 s).
    quiet_interval = spark.conf.get("spark.sql.streaming.noDataProgressEventInterval")
    spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", "200ms")
    query = (spark.readStream.format("kip")
             .option("kafka.bootstrap.servers", source.bootstrap_servers)
             .option("subscribe", topic).option("startingOffsets", "earliest")
             .option("minOffsetsPerTrigger", "60").option("maxTriggerDelay", "1h").load()
             .writeStream.foreachBatch(batch)
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(processingTime="300 milliseconds").start())
    try:
        deadline = time.monotonic() + 120
        while not query.recentProgress and time.monotonic() < deadline:
            time.sleep(0.2)  # the query's first trigger (nothing to read yet)
        produce_timed(source.bootstrap_servers, topic, 40, 2)
        time.sleep(3)  # about ten triggers
        assert sum(sizes) == 0, sizes
        # The progress shows the backlog held back: the partitions' ends as the source last
        # saw them (reportLatestOffset), 40 offsets past where the query stands.
        shown = [p["sources"][0].get("latestOffset") for p in query.recentProgress]
        assert any(sum(json.loads(o)[topic].values()) == 40 for o in shown if o), shown
        produce_timed(source.bootstrap_servers, topic, 40, 2)
        while sum(sizes) < 80 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert query.exception() is None
        assert [n for n in sizes if n] == [80], sizes
    finally:
        query.stop()
        spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", quiet_interval)
