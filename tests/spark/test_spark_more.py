"""The streaming source across a restart from its checkpoint, the driver's half of the
two-phase commit on its own, and option errors that name the option."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from confluent_kafka import Producer as ConfluentProducer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from mirror_support import read, unique

from kipproducer import Producer
from kipproducer.spark.twophase import OpenTransaction, end, fence


def create(bootstrap: str, topic: str, partitions: int) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    return topic


def produce(bootstrap: str, topic: str, start: int, n: int, partitions: int) -> None:
    p = ConfluentProducer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + n):
        p.produce(topic, b"s%d" % i, partition=i % partitions)
    assert p.flush(30) == 0


def test_stream_reads_each_record_once_across_a_restart(spark, source, tmp_path) -> None:
    bootstrap = source.bootstrap_servers
    topic = create(bootstrap, unique("stream"), 3)
    produce(bootstrap, topic, 0, 300, 3)
    got: list[bytes] = []
    batches: list[int] = []

    def collect(df, batch_id: int) -> None:
        batches.append(batch_id)
        got.extend(bytes(r.value) for r in df.select("value").collect())

    def run() -> None:
        query = (spark.readStream.format("kip").option("kafka.bootstrap.servers", bootstrap)
                 .option("subscribe", topic).option("startingOffsets", "earliest").load()
                 .writeStream.foreachBatch(collect)
                 .option("checkpointLocation", str(tmp_path / "checkpoint"))
                 .trigger(availableNow=True).start())
        assert query.awaitTermination(180)
        assert query.exception() is None

    run()
    assert Counter(got) == Counter(b"s%d" % i for i in range(300))
    # More records, and a partition that appears after the first run: read from its start.
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_partitions([NewPartitions(topic, 4)])[topic].result(30)
    produce(bootstrap, topic, 300, 200, 4)
    first_run = len(batches)
    run()  # the same checkpoint: continues after what the first run read
    assert len(batches) > first_run
    assert Counter(got) == Counter(b"s%d" % i for i in range(500))


def open_transaction(bootstrap: str, topic: str, tid: str) -> OpenTransaction:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce_arrays(topic, np.array([b"a", b"b"], dtype=object), partition=0)
    assert p.flush(30) == 0
    pid, epoch = p.transaction_producer()
    p.close()  # left open: closing does not end the transaction
    return OpenTransaction(tid, pid, epoch, 2, 0, 0)


def test_driver_commits_by_producer_id_once_and_reports_a_lost_transaction(target) -> None:
    bootstrap = target.bootstrap_servers
    props = {"bootstrap.servers": bootstrap}
    topic = create(bootstrap, unique("twophase"), 1)
    txn = open_transaction(bootstrap, topic, unique("tid"))
    assert read(bootstrap, topic, 1, "read_uncommitted", timeout=10)[0] != []
    end(props, txn, True, 60_000)
    end(props, txn, True, 60_000)  # a repeated commit is answered NONE
    assert [r.value for r in read(bootstrap, topic, 1)[0]] == [b"a", b"b"]
    # A transaction fenced (aborted) before the driver commits it: the commit says so.
    lost = open_transaction(bootstrap, topic, unique("tid"))
    fence(props, lost.transactional_id, 60_000)
    with pytest.raises(RuntimeError, match="aborted before the commit"):
        end(props, lost, True, 60_000)
    assert [r.value for r in read(bootstrap, topic, 1)[0]] == [b"a", b"b"]


def test_a_missing_or_wrong_option_names_itself(spark, target) -> None:
    df = spark.range(3).selectExpr("cast(id as string) as value")
    with pytest.raises(Exception, match="kafka.bootstrap.servers"):
        spark.read.format("kip").option("subscribe", "t").load().collect()
    with pytest.raises(Exception, match="'subscribe', 'subscribePattern' or 'assign'"):
        spark.read.format("kip").option("kafka.bootstrap.servers",
                                        target.bootstrap_servers).load().collect()
    with pytest.raises(Exception, match="option 'topic' or give a 'topic' column"):
        df.write.format("kip").option("kafka.bootstrap.servers",
                                      target.bootstrap_servers).mode("append").save()
    with pytest.raises(Exception, match="kafka.transactional.id"):
        (df.write.format("kip").option("kafka.bootstrap.servers", target.bootstrap_servers)
         .option("topic", "t").option("kafka.transactional.id", "x").mode("append").save())
