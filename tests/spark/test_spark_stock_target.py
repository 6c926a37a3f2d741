"""The Spark offset copy (kip.mode=offsets, as spark.read.format("kip") hands it rows) onto a
target WITHOUT the KIP-WIRE extension (the stand-in for stock Kafka,
`kip.extensions.enable=false`): the writer emulates KIP-391 with Kafka's transactions
(docs/stock-clusters.md), one emulation transactional id per target partition, so the copy keeps
every record at its source offset over compaction holes, a moved log start and aborted
transactions, and a second run resumes at the target's log ends and writes nothing twice."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from mirror_support import compacted_topic, read, stable, transactions, trim, unique
from test_spark_kafka import create

from kipproducer import spark as kip_spark
from kipproducer.broker.embedded import EmbeddedBroker
from kipproducer.protocol.wire_extensions import FEATURE_PRODUCE_CONDITIONAL
from kipproducer.spark.options import OptionError


def same(got: dict, want: dict) -> None:
    """Per partition, the first record that differs (the whole dicts are too long to read)."""
    for p in sorted(want):
        mine, theirs = got.get(p, []), want[p]
        first = next((i for i, (a, b) in enumerate(zip(mine, theirs, strict=False)) if a != b),
                     min(len(mine), len(theirs)))
        assert mine == theirs, (f"partition {p}: {len(mine)} records, want {len(theirs)}; "
                                f"first difference at {first}: "
                                f"{mine[first:first + 2]} != {theirs[first:first + 2]}")


@pytest.fixture(scope="module")
def stock() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(config={"kip.extensions.enable": False}) as broker:
        yield broker


def test_offset_copy_onto_a_stock_target_keeps_offsets_and_resumes(spark, source,
                                                                   stock) -> None:
    topic = unique("stock-copy")
    compacted_topic(source, topic, 1500)
    trim(source, topic, 3, 25)
    transactions(source, topic, 3)  # the third aborted: a gap of its records and marker
    stable(source.bootstrap_servers, topic, 3)
    create(stock, topic, 3)

    def copy() -> None:
        (spark.read.format("kip").option("kafka.bootstrap.servers", source.bootstrap_servers)
         .option("subscribe", topic).option("includeHeaders", "true")
         .option("kafka.isolation.level", "read_committed").load()
         .select("key", "value", "headers", "partition", "offset", "timestamp")
         .write.format("kip").option("kafka.bootstrap.servers", stock.bootstrap_servers)
         .option("topic", topic).mode("append").save())

    want = read(source.bootstrap_servers, topic, 3)
    assert all(rs[0].offset >= 25 for rs in want.values())
    copy()
    stable(stock.bootstrap_servers, topic, 3)
    got = read(stock.bootstrap_servers, topic, 3)
    # every record at its source offset with its key, value, headers and timestamp; the
    # offsets before the source's first record are the target's fillers (aborted): invisible
    same(got, want)
    copy()  # resumed from the target's log ends: nothing written twice
    stable(stock.bootstrap_servers, topic, 3)
    same(read(stock.bootstrap_servers, topic, 3), want)


def test_driver_sees_which_leaders_lack_the_extension(source, stock) -> None:
    from kipproducer.spark.driver_client import driver_client

    topic = unique("stock-features")
    for broker in (source, stock):
        create(broker, topic, 3)
    native = driver_client({"bootstrap.servers": source.bootstrap_servers})
    stand_in = driver_client({"bootstrap.servers": stock.bootstrap_servers})
    try:
        assert native.leaders_lacking(topic, FEATURE_PRODUCE_CONDITIONAL) == []
        assert stand_in.leaders_lacking(topic, FEATURE_PRODUCE_CONDITIONAL) == [0, 1, 2]
    finally:
        native.close()
        stand_in.close()


def test_write_ordered_onto_a_stock_target_is_refused_before_any_task(spark, stock) -> None:
    topic = create(stock, unique("stock-ordered"), 2)
    df = spark.createDataFrame([(b"k", b"v")], "key binary, value binary")
    with pytest.raises(OptionError, match="do not have KIP-27.*transactional sink"):
        kip_spark.write_ordered(df, topic, {"kafka.bootstrap.servers": stock.bootstrap_servers})
    assert read(stock.bootstrap_servers, topic, 2) == {0: [], 1: []}
