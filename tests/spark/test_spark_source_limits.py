"""The source's rate limit and offsets by timestamp: maxOffsetsPerTrigger (each micro-batch
reads at most that many offsets, the backlog shared by partition), startingTimestamp /
startingOffsetsByTimestamp / endingOffsetsByTimestamp (the first offset at or after the
timestamp, as ListOffsets answers it)."""

from __future__ import annotations

import json
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



@pytest.mark.parametrize("name", ["minOffsetsPerTrigger", "maxTriggerDelay"])
def test_options_not_supported_yet_are_refused_by_name(name) -> None:
    from kipproducer.spark.options import OptionError
    from kipproducer.spark.source import ReadPlan

    with pytest.raises(OptionError, match=f"option '{name}' is not supported yet"):
        ReadPlan({"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "t", name: "10"},
                 streaming=True)
