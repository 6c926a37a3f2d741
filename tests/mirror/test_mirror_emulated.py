"""`kip mirror --mode preserve` onto a target WITHOUT the KIP-WIRE extension (the stand-in for
stock Kafka, `kip.extensions.enable=false`): every source record at its source offset through
the stock-cluster emulation (docs/stock-clusters.md), the source's gaps (compacted records,
aborted transactions, markers) becoming fillers and markers on the target.

Compared per partition as readers see both sides (read_committed): offset, key, value,
headers and timestamp of every record. At read_uncommitted the target shows only fillers
besides the source's records. (Tansu as the target is refused by the emulation's probe:
tests/mirror/test_mirror_tansu.py.)
"""

from __future__ import annotations

import random
import subprocess
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from mirror_support import compacted_topic, create, fill, read, stable, transactions, unique
from test_mirror_kill import Feeder, child_env, kill_repeatedly, mirror_command

from kipproducer.broker.embedded import EmbeddedBroker
from kipproducer.mirror import Mirror, MirrorError
from kipproducer.stock.plan import FILLER_HEADER, Action, Step, gap_steps, plan_runs

PARTITIONS = 3


@pytest.fixture(scope="module")
def stock() -> Iterator[EmbeddedBroker]:
    """The stand-in for a stock Kafka cluster: no KIP feature announced."""
    config = {"kip.extensions.enable": False,
              "transaction.abort.timed.out.transaction.cleanup.interval.ms": 500}
    with EmbeddedBroker(config=config) as broker:
        yield broker


def test_plan_puts_no_record_in_a_transaction():
    # log end 2; records at 3 (gap of 1 at the log end), 4, 6 (gap of 1), 10 (gap of 3)
    plan = plan_runs(2, [3, 4, 6, 10])
    assert plan == [Action(Step.MARKER, 2, 0), Action(Step.PLAIN, 3, 2, 0),
                    Action(Step.MARKER, 5, 0), Action(Step.PLAIN, 6, 1, 2),
                    Action(Step.FILL, 7, 2), Action(Step.PLAIN, 10, 1, 3)]
    assert [a.end for a in plan] == [3, 5, 6, 7, 10, 11]
    # padding to a source position: a gap of one is a marker, a longer one fillers too
    assert gap_steps(11, 11) == []
    assert gap_steps(11, 12) == [Action(Step.MARKER, 11, 0)]
    assert gap_steps(11, 15) == [Action(Step.FILL, 11, 3)]


def same_copy(source: EmbeddedBroker, target: EmbeddedBroker, topic: str, copy: str) -> None:
    stable(target.bootstrap_servers, copy, PARTITIONS)
    src = read(source.bootstrap_servers, topic, PARTITIONS)
    dst = read(target.bootstrap_servers, copy, PARTITIONS)
    for p in range(PARTITIONS):
        assert dst[p] == src[p], (topic, p)
    # read_uncommitted: the source's records and fillers, nothing else
    everything = read(target.bootstrap_servers, copy, PARTITIONS, "read_uncommitted")
    for p in range(PARTITIONS):
        mine = {r.offset for r in src[p]}
        extra = [r for r in everything[p] if r.offset not in mine]
        assert all(r.key == b"" and r.value is None and r.headers == ((FILLER_HEADER, b""),)
                   for r in extra), (topic, p, extra[:3])


def test_preserve_onto_stock_target_keeps_offsets_across_gaps(source, stock):
    prefix = unique("em")
    compacted = compacted_topic(source, f"{prefix}.compacted", 900)
    txn = create(source, f"{prefix}.txn", PARTITIONS)
    fill(source, txn, 90)
    transactions(source, txn, 6, tag="a")  # every third aborted: gaps of 2 and more
    fill(source, txn, 30, start=500)
    transactions(source, txn, 2, tag="b")  # ends with a commit marker: a gap of 1 at the end
    for topic in (compacted, txn):
        stable(source.bootstrap_servers, topic, PARTITIONS)
    src = read(source.bootstrap_servers, compacted, PARTITIONS)
    assert any(b.offset - a.offset > 1 for rows in src.values()
               for a, b in zip(rows, rows[1:], strict=False)), "compaction leaves holes"

    mirror = Mirror(source.bootstrap_servers, stock.bootstrap_servers, f"{prefix}\\..*",
                    rename="c.{topic}", progress=False, group=unique("g"), timeout=30)
    snapshot = mirror.run(once=True)
    assert mirror.reader_kind == "consumer"  # the emulation writes records, not batches
    assert snapshot["records"] > 0
    for topic in (compacted, txn):
        same_copy(source, stock, topic, f"c.{topic}")

    # More source transactions, then the same mirror again: it resumes at the target's
    # log end (its previous run padded the copy to the source's end: no lone gap of one)
    transactions(source, txn, 4, tag="c")
    fill(source, txn, 12, start=900)
    stable(source.bootstrap_servers, txn, PARTITIONS)
    again = Mirror(source.bootstrap_servers, stock.bootstrap_servers, f"{prefix}\\..*",
                   rename="c.{topic}", progress=False, group=mirror.group, timeout=30)
    again.run(once=True)
    same_copy(source, stock, txn, f"c.{txn}")


def low_watermarks(bootstrap: str, topic: str, partitions: int) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("lows")})
    try:
        return [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[0]
                for p in range(partitions)]
    finally:
        c.close()


def test_trimmed_source_gives_the_stock_target_the_same_log_start(source, stock):
    """A source whose log starts were moved (DeleteRecords): in the middle of a partition, to
    its very end (nothing left), and a little. The stock target cannot DeleteRecords above
    its log end, so the emulation fills it up to the source's log start first (fillers, one
    aborted transaction), then the mirror trims it: both answer the same earliest offset and
    every record is at its offset. Trimmed again later, the rerun moves the target's too."""
    topic = create(source, unique("emtrim"), PARTITIONS)
    fill(source, topic, 90)  # offsets 0..29 in each partition
    cuts = {0: 20, 1: 30, 2: 5}
    admin = AdminClient({"bootstrap.servers": source.bootstrap_servers})
    for future in admin.delete_records([TopicPartition(topic, p, o)
                                        for p, o in cuts.items()]).values():
        future.result(30)
    assert low_watermarks(source.bootstrap_servers, topic, PARTITIONS) == [20, 30, 5]
    copy = f"t.{topic}"
    mirror = Mirror(source.bootstrap_servers, stock.bootstrap_servers, topic,
                    rename="t.{topic}", progress=False, group=unique("g"), timeout=30)
    mirror.run(once=True)
    same_copy(source, stock, topic, copy)
    assert low_watermarks(stock.bootstrap_servers, copy, PARTITIONS) == [20, 30, 5]

    fill(source, topic, 30, start=100)  # 30..39 in each partition
    for future in admin.delete_records([TopicPartition(topic, p, 35)
                                        for p in range(PARTITIONS)]).values():
        future.result(30)
    Mirror(source.bootstrap_servers, stock.bootstrap_servers, topic, rename="t.{topic}",
           progress=False, group=mirror.group, timeout=30).run(once=True)
    same_copy(source, stock, topic, copy)
    assert low_watermarks(stock.bootstrap_servers, copy, PARTITIONS) == [35] * PARTITIONS


def test_fetch_reader_refused_for_a_stock_target(source, stock):
    topic = create(source, unique("emf"), PARTITIONS)
    fill(source, topic, 9)
    mirror = Mirror(source.bootstrap_servers, stock.bootstrap_servers, topic, reader="fetch",
                    rename="f.{topic}", progress=False, timeout=30)
    with pytest.raises(MirrorError, match="KIP-WIRE extension on the target"):
        mirror.run(once=True)



@pytest.mark.timeout(180)
def test_kill_minus_nine_ten_times_onto_stock_target(source, stock, tmp_path):
    """kill -9 of the mirror ten times at random points while the source keeps receiving
    (plain records, committed and aborted transactions: gaps of one and of many), then one
    last run to the end: the copy is identical at read_committed. No source record rides in
    a target transaction (gaps of one are empty aborted transactions), and each restart
    fences its predecessor before reading the log end, so no kill leaves a hole."""
    prefix = unique("emkill")
    plain = create(source, f"{prefix}.plain", PARTITIONS)
    txn = create(source, f"{prefix}.txn", PARTITIONS)
    group = unique("emmirror")
    rng = random.Random()
    feeder = Feeder(source, plain, txn)
    feeder.start()
    kill_repeatedly(source, stock, prefix, "preserve", group, feeder, tmp_path / "mirror.log",
                    rng, (1.2, 2.5))
    for topic in (plain, txn):
        stable(source.bootstrap_servers, topic, PARTITIONS)
    last = subprocess.run(mirror_command(source, stock, prefix, "preserve", group, "--once"),
                          capture_output=True, text=True, env=child_env(), timeout=120)
    assert last.returncode == 0, last.stderr[-3000:]
    for topic in (plain, txn):
        same_copy(source, stock, topic, f"k.{topic}")

