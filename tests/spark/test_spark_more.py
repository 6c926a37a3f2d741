"""Streaming: source and sink across restarts from a checkpoint, a replayed micro-batch and a
driver that died between task commits; the driver's half of the two-phase commit on its own;
option errors that name the option."""

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


def test_stream_sink_replayed_batch_writes_nothing_twice(spark, source, target,
                                                         tmp_path) -> None:
    from pathlib import Path

    topic = create(source.bootstrap_servers, unique("stream-in"), 3)
    out = create(target.bootstrap_servers, unique("stream-out"), 4)
    produce(source.bootstrap_servers, topic, 0, 300, 3)
    checkpoint = tmp_path / "checkpoint"
    sink_id = unique("sink")

    def run() -> None:
        query = (spark.readStream.format("kip")
                 .option("kafka.bootstrap.servers", source.bootstrap_servers)
                 .option("subscribe", topic).option("startingOffsets", "earliest").load()
                 .select("key", "value")
                 .writeStream.format("kip")
                 .option("kafka.bootstrap.servers", target.bootstrap_servers)
                 .option("topic", out).option("kip.sink.id", sink_id)
                 .option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start())
        assert query.awaitTermination(180)
        assert query.exception() is None

    run()
    assert values(target.bootstrap_servers, out, 4) == Counter(b"s%d" % i for i in range(300))
    # The driver "dies" after the sink committed the last batch but before Spark recorded
    # it: without its commit-log entry Spark runs that batch again on restart.
    commits = sorted(Path(checkpoint, "commits").glob("[0-9]*"), key=lambda p: int(p.name))
    commits[-1].unlink()
    Path(checkpoint, "commits", f".{commits[-1].name}.crc").unlink(missing_ok=True)
    produce(source.bootstrap_servers, topic, 300, 200, 3)
    run()  # batch N again (its new transactions are aborted), then the 200 new records
    assert values(target.bootstrap_servers, out, 4) == Counter(b"s%d" % i for i in range(500))
    # A source partition that appeared meanwhile is read from its start.
    admin = AdminClient({"bootstrap.servers": source.bootstrap_servers})
    admin.create_partitions([NewPartitions(topic, 4)])[topic].result(30)
    produce(source.bootstrap_servers, topic, 500, 100, 4)
    run()
    assert values(target.bootstrap_servers, out, 4) == Counter(b"s%d" % i for i in range(600))


def values(bootstrap: str, topic: str, partitions: int) -> Counter:
    from mirror_support import stable

    stable(bootstrap, topic, partitions)
    return Counter(r.value for rs in read(bootstrap, topic, partitions).values() for r in rs)


def test_stream_sink_finishes_a_commit_a_dead_driver_left(spark, target) -> None:
    from dataclasses import asdict

    from kipproducer.spark.sink import Message
    from kipproducer.spark.stream_sink import DEFAULT_STATE_TOPIC, KipStreamWriter, SinkState

    bootstrap = target.bootstrap_servers
    out = create(bootstrap, unique("stream-left"), 1)
    sink_id = unique("sink")
    props = {"bootstrap.servers": bootstrap}
    writer = KipStreamWriter({"kafka.bootstrap.servers": bootstrap, "topic": out,
                              "kip.sink.id": sink_id}, ["key", "value"])
    prefix = f"kip-spark-{sink_id}-"
    recorded = [open_transaction(bootstrap, out, f"{prefix}{i}-0-x") for i in range(3)]
    state = SinkState(props, DEFAULT_STATE_TOPIC, sink_id)
    state.write({"batch": 7, "status": "committing", "txns": [asdict(t) for t in recorded]})
    end(props, recorded[0], True, 60_000)  # the old driver got this far
    replay = open_transaction(bootstrap, out, f"{prefix}0-1-y")
    writer.commit([Message(2, replay), None], 7)
    assert values(bootstrap, out, 1) == Counter({b"a": 3, b"b": 3})
    assert state.read() == {"batch": 7, "status": "done"}
