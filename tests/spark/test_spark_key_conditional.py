"""The transactional sink's per-key mode (docs/spark.md): an ``expected_key_offset`` column
checked by `kip broker` for each row in the tasks' transactions, on local[2,4]: every
condition holds and the rows commit once; one stale condition fails the job with the key
named and nothing of it is visible; a cluster without the brokers' check is refused before
any task starts."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from mirror_support import read, unique
from pyspark.sql import functions as F

from kipproducer.broker.embedded import EmbeddedBroker
from kipproducer.errors import KEY_ABSENT

KEYS = 2_000
PARTITIONS = 3


def create(bootstrap: str, topic: str) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    return topic


def events(spark, value: str, expected: dict[bytes, int] | None):
    """One row per key k0..k1999 (8 Spark partitions, a key in one of them), conditioned
    on ``expected[key]`` (all absent when None)."""
    rows = [(b"k%d" % i, value.encode(), KEY_ABSENT if expected is None
             else expected[b"k%d" % i]) for i in range(KEYS)]
    df = spark.createDataFrame(rows, "key binary, value binary, expected_key_offset long")
    return df.repartition(8, F.col("key"))


def write(df, bootstrap: str, topic: str) -> None:
    (df.write.format("kip").option("kafka.bootstrap.servers", bootstrap)
     .option("topic", topic).mode("append").save())


def last_offsets(bootstrap: str, topic: str) -> dict[bytes, tuple[int, bytes]]:
    last: dict[bytes, tuple[int, bytes]] = {}
    for records in read(bootstrap, topic, PARTITIONS).values():
        for r in records:
            last[r.key] = (r.offset, r.value)
    return last


def test_each_key_condition_checked_in_the_tasks_transactions(spark, target) -> None:
    bootstrap = target.bootstrap_servers
    topic = create(bootstrap, unique("spark-keys"))
    write(events(spark, "created", None), bootstrap, topic)
    created = last_offsets(bootstrap, topic)
    assert len(created) == KEYS and {v for _, v in created.values()} == {b"created"}
    write(events(spark, "paid", {k: o for k, (o, _) in created.items()}), bootstrap, topic)
    paid = last_offsets(bootstrap, topic)
    assert {v for _, v in paid.values()} == {b"paid"}
    # one stale condition (k7 on its first offset): the job fails naming it, nothing visible
    stale = {k: o for k, (o, _) in paid.items()} | {b"k7": created[b"k7"][0]}
    with pytest.raises(Exception, match=r"KEY_OFFSET_MISMATCH|key b'k7'") as failed:
        write(events(spark, "shipped", stale), bootstrap, topic)
    assert "k7" in str(failed.value)
    assert last_offsets(bootstrap, topic) == paid
    assert sum(len(rs) for rs in read(bootstrap, topic, PARTITIONS).values()) == 2 * KEYS


def test_a_cluster_without_the_brokers_check_is_refused_before_any_task(spark) -> None:
    with EmbeddedBroker(config={"kip.extensions.enable": False}) as stock:
        topic = create(stock.bootstrap_servers, unique("spark-keys-stock"))
        with pytest.raises(Exception, match="need brokers that check key conditions|"
                                            "needs brokers that check key conditions"):
            write(events(spark, "created", None), stock.bootstrap_servers, topic)
        assert read(stock.bootstrap_servers, topic, PARTITIONS, "read_uncommitted",
                    timeout=5) == {p: [] for p in range(PARTITIONS)}


def test_the_column_is_refused_outside_the_transactional_sink(spark, target) -> None:
    bootstrap = target.bootstrap_servers
    df = events(spark, "x", None).withColumn("topic", F.lit("somewhere"))
    with pytest.raises(Exception, match="'expected_key_offset' column"):
        (df.write.format("kip").option("kafka.bootstrap.servers", bootstrap)
         .mode("append").save())


def test_a_tasks_conditional_rows_go_in_pieces_of_one_kafka_batch() -> None:
    import numpy as np
    import pyarrow as pa

    from kipproducer.spark.sink import WriteOptions, _one_batch, _Rows

    n = 1_000
    batch = pa.record_batch({
        "key": pa.array([b"k%d" % i for i in range(n)]),
        "value": pa.array([b"x" * 100] * n),
        "expected_key_offset": pa.array([KEY_ABSENT] * (n - 1) + [None], pa.int64())})
    wo = WriteOptions({"kafka.bootstrap.servers": "127.0.0.1:9", "topic": "t",
                       "kafka.batch.size": "10000", "kafka.batch.num.messages": "50"},
                      batch.schema.names)
    assert _one_batch(wo.props) == (10_000, 50)
    rows = _Rows(batch, wo)
    assert rows.expected_keys[-1] < KEY_ABSENT  # a null: no condition
    pieces = list(rows.one_batch_pieces(None, *_one_batch(wo.props)))
    assert np.concatenate(pieces).tolist() == list(range(n))  # every row once, in order
    for piece in pieces:
        size = 61 + sum(32 + len(b"k%d" % i) + 100 for i in piece)
        assert len(piece) <= 50 and size <= 10_000
    assert len(pieces) == 20  # 10,000 bytes would hold 69 rows: the count binds (50)
    subset = np.arange(0, n, 2)
    assert np.concatenate(list(rows.one_batch_pieces(subset, 2_000, 1_000))).tolist() == \
        subset.tolist()
