"""kipproducer.mirror.Mirror between two reference brokers, in this process.

The source holds a compacted topic (holes in its offsets), a DeleteRecords-trimmed one (its
log start is not 0), and one with committed and aborted transactions; records carry keys,
headers and timestamps. Each mode copies them (``run(once=True)``), and the copies are read
back with a stock librdkafka consumer:

- preserve: every record of the source at the same offset, with the same key, value, headers
  and timestamp (read_committed source = what the mirror reads);
- transactional: a read_committed reader of the target sees every committed source record
  once, in order per partition; the target group's offsets are the source positions.
"""

from __future__ import annotations

import json
import threading
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from mirror_support import (
    compacted_topic,
    create,
    fill,
    group_offsets,
    read,
    stable,
    transactions,
    trim,
    unique,
)

from kipproducer.cli import main as cli_main
from kipproducer.mirror import Mirror, MirrorError

PARTITIONS = 3


@pytest.fixture(scope="module")
def topics(source) -> dict[str, str]:
    """Source topics of each kind, made once per module (a name prefix per kind)."""
    prefix = unique("m")
    compacted = compacted_topic(source, f"{prefix}.compacted", 3000)
    trimmed = create(source, f"{prefix}.trimmed", PARTITIONS)
    fill(source, trimmed, 900)
    trim(source, trimmed, PARTITIONS, 120)
    txn = create(source, f"{prefix}.txn", PARTITIONS)
    transactions(source, txn, 12)
    fill(source, txn, 60, start=10_000)
    for topic in (compacted, trimmed, txn):
        stable(source.bootstrap_servers, topic, PARTITIONS)
    return {"prefix": prefix, "compacted": compacted, "trimmed": trimmed, "txn": txn}


def watermarks(broker, topic: str) -> dict[int, tuple[int, int]]:
    c = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": unique("marks")})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)
                for p in range(PARTITIONS)}
    finally:
        c.close()


def test_source_has_holes(source, topics):
    """What the mirror must keep: gaps from compaction and markers, a log start above 0."""
    compacted = read(source.bootstrap_servers, topics["compacted"], PARTITIONS)
    assert any(b.offset - a.offset > 1 for rows in compacted.values()
               for a, b in zip(rows, rows[1:], strict=False))
    trimmed = read(source.bootstrap_servers, topics["trimmed"], PARTITIONS)
    assert all(rows[0].offset == 120 for rows in trimmed.values())
    txn_all = read(source.bootstrap_servers, topics["txn"], PARTITIONS, "read_uncommitted")
    txn_committed = read(source.bootstrap_servers, topics["txn"], PARTITIONS)
    assert sum(map(len, txn_all.values())) > sum(map(len, txn_committed.values()))


def test_preserve_keeps_every_offset(source, target, topics, tmp_path):
    metrics = tmp_path / "metrics.json"
    mirror = Mirror(source.bootstrap_servers, target.bootstrap_servers,
                    f"{topics['prefix']}\\..*", mode="preserve", progress=False,
                    metrics_json=str(metrics))
    snapshot = mirror.run(once=True)
    assert snapshot["reader"] == "fetch" and mirror.fetcher.fetches > 0  # the fast path ran
    total = 0
    for kind in ("compacted", "trimmed", "txn"):
        topic = topics[kind]
        src = read(source.bootstrap_servers, topic, PARTITIONS)
        dst = read(target.bootstrap_servers, topic, PARTITIONS, "read_uncommitted")
        assert dst == src, kind  # offsets, keys, values, headers, timestamps
        # The log starts (DeleteRecords) and ends too.
        assert watermarks(target, topic) == watermarks(source, topic), kind
        total += sum(map(len, src.values()))
    assert snapshot["records"] == total and snapshot["lag"] == 0
    written = json.loads(metrics.read_text())
    assert written["records"] == total and len(written["partitions"]) == 3 * PARTITIONS
    # A second run finds every target at its source's end: nothing to copy, nothing doubled.
    again = Mirror(source.bootstrap_servers, target.bootstrap_servers,
                   f"{topics['prefix']}\\..*", progress=False).run(once=True)
    assert again["records"] == 0
    assert read(target.bootstrap_servers, topics["txn"], PARTITIONS, "read_uncommitted") == \
        read(source.bootstrap_servers, topics["txn"], PARTITIONS)


def test_preserve_copies_group_offsets(source, target, topics):
    group = unique("app")
    c = Consumer({"bootstrap.servers": source.bootstrap_servers, "group.id": group})
    c.commit(offsets=[TopicPartition(topics["trimmed"], p, 200 + p, metadata="m")
                      for p in range(PARTITIONS)], asynchronous=False)
    c.close()
    Mirror(source.bootstrap_servers, target.bootstrap_servers, topics["trimmed"],
           rename="g.{topic}", progress=False).run(once=True)
    copied = group_offsets(target.bootstrap_servers, group, "g." + topics["trimmed"],
                           PARTITIONS)
    assert copied == {p: 200 + p for p in range(PARTITIONS)}


def test_transactional_exactly_once(source, target, topics):
    group = unique("mirror")
    rename = "eos.{topic}"
    mirror = Mirror(source.bootstrap_servers, target.bootstrap_servers,
                    f"{topics['prefix']}\\..*", mode="transactional", group=group,
                    rename=rename, progress=False, commit_interval_ms=200)
    snapshot = mirror.run(once=True)
    assert snapshot["reader"] == "fetch" and mirror.fetcher.fetches > 0  # the fast path ran
    assert snapshot["transactions"] >= 1
    for kind in ("compacted", "trimmed", "txn"):
        topic = topics[kind]
        src = read(source.bootstrap_servers, topic, PARTITIONS)
        dst = read(target.bootstrap_servers, rename.format(topic=topic), PARTITIONS)
        assert {p: [r.content() for r in rows] for p, rows in dst.items()} == \
            {p: [r.content() for r in rows] for p, rows in src.items()}, kind
        positions = group_offsets(target.bootstrap_servers, group,
                                  rename.format(topic=topic), PARTITIONS)
        assert positions == {p: rows[-1].offset + 1 for p, rows in src.items()}, kind
    # A restart resumes from the group's offsets: nothing twice.
    more = Mirror(source.bootstrap_servers, target.bootstrap_servers,
                  f"{topics['prefix']}\\..*", mode="transactional", group=group,
                  rename=rename, progress=False).run(once=True)
    assert more["records"] == 0


def test_transactional_caught_up_commits_without_waiting_for_the_interval(source, target):
    """A live copy that has read every source partition to its end commits what it read at
    once: with a commit interval of 10 minutes, records written while it runs are readable
    (read_committed) on the target long before that (before, they waited the interval)."""
    topic = create(source, unique("live"), PARTITIONS)
    fill(source, topic, 30)
    mirror = Mirror(source.bootstrap_servers, target.bootstrap_servers, topic,
                    mode="transactional", group=unique("live"), rename="live.{topic}",
                    progress=False, commit_interval_ms=600_000)
    worker = threading.Thread(target=mirror.run, daemon=True)
    worker.start()
    try:
        for expected, more in ((30, 0), (60, 30)):
            if more:
                fill(source, topic, more, start=1_000)
            deadline = time.monotonic() + 60
            while True:
                got = read(target.bootstrap_servers, "live." + topic, PARTITIONS) \
                    if topic_exists(target, "live." + topic) else {}
                if sum(len(rows) for rows in got.values()) == expected:
                    break
                assert time.monotonic() < deadline, f"{expected} records not committed: {got}"
                time.sleep(0.2)
        assert worker.is_alive() and mirror.metrics.transactions >= 2
    finally:
        mirror.stop()
        worker.join(60)


def topic_exists(broker, topic: str) -> bool:
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    return topic in admin.list_topics(timeout=10).topics


def test_transactional_starts_from_the_source_group(source, target, topics):
    """A target group that does not exist yet takes the source group's offsets (one-time
    sync): the records before them are not copied."""
    group = unique("app")
    c = Consumer({"bootstrap.servers": source.bootstrap_servers, "group.id": group})
    c.commit(offsets=[TopicPartition(topics["trimmed"], p, 250) for p in range(PARTITIONS)],
             asynchronous=False)
    c.close()
    rename = "sync.{topic}"
    Mirror(source.bootstrap_servers, target.bootstrap_servers, topics["trimmed"],
           mode="transactional", group=group, rename=rename, progress=False).run(once=True)
    dst = read(target.bootstrap_servers, rename.format(topic=topics["trimmed"]), PARTITIONS)
    src = read(source.bootstrap_servers, topics["trimmed"], PARTITIONS)
    for p in range(PARTITIONS):
        assert [r.content() for r in dst[p]] == [r.content() for r in src[p]
                                                 if r.offset >= 250]


def test_cli_preserve(source, target, topics, capsys):
    rename = "cli.{topic}"
    code = cli_main(["mirror", "--source", source.bootstrap_servers, "--target",
                     target.bootstrap_servers, "--topics", topics["compacted"],
                     "--rename", rename, "--once", "--quiet"])
    assert code == 0, capsys.readouterr().err
    assert "records copied" in capsys.readouterr().err
    src = read(source.bootstrap_servers, topics["compacted"], PARTITIONS)
    assert read(target.bootstrap_servers, rename.format(topic=topics["compacted"]),
                PARTITIONS, "read_uncommitted") == src


# ---- bad input ----------------------------------------------------------------------------------


def test_unreachable_cluster_is_a_clear_error(source):
    with pytest.raises(MirrorError, match=r"the target cluster \(127.0.0.1:1\) did not answer"):
        Mirror(source.bootstrap_servers, "127.0.0.1:1", ".*", progress=False,
               timeout=2).run(once=True)


def test_once_with_a_pattern_matching_nothing_ends_with_an_error(source, target, capsys):
    """A typo in --topics: `--once` stops at the first look with one line saying so, instead
    of waiting for ever on "0 partitions"."""
    started = time.monotonic()
    code = cli_main(["mirror", "--source", source.bootstrap_servers, "--target",
                     target.bootstrap_servers, "--topics", "no-such-topic-.*", "--once",
                     "--quiet"])
    assert code == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        "kip mirror: no source topic matches --topics 'no-such-topic-.*': nothing to copy"]
    assert time.monotonic() - started < 30  # the mirror's timeout; it answers at once


def test_transactional_needs_a_group(source, target):
    with pytest.raises(MirrorError, match="needs --group"):
        Mirror(source.bootstrap_servers, target.bootstrap_servers, ".*",
               mode="transactional")
    assert cli_main(["mirror", "--source", source.bootstrap_servers, "--target",
                     target.bootstrap_servers, "--topics", "x", "--mode",
                     "transactional"]) == 2


def test_target_with_unrelated_data_is_refused(source, target, topics):
    """A target partition that ends beyond the source's end holds records the source never
    had: preserve mode refuses to touch it and says so; nothing is written."""
    name = unique("other")
    create(source, name, PARTITIONS)
    fill(source, name, 30)
    create(target, name, PARTITIONS)
    fill(target, name, 300)
    before = read(target.bootstrap_servers, name, PARTITIONS, "read_uncommitted")
    with pytest.raises(MirrorError, match="is not a copy of the source .* beyond the "
                                          "source's last record"):
        Mirror(source.bootstrap_servers, target.bootstrap_servers, name,
               progress=False).run(once=True)
    assert read(target.bootstrap_servers, name, PARTITIONS, "read_uncommitted") == before
    # Shorter than the source, but other records: refused too.
    other = unique("other")
    create(source, other, PARTITIONS)
    fill(source, other, 90)
    create(target, other, PARTITIONS)
    fill(target, other, 30, start=500)
    with pytest.raises(MirrorError, match="record at offset 9 differs"):
        Mirror(source.bootstrap_servers, target.bootstrap_servers, other,
               progress=False).run(once=True)


def test_target_with_more_partitions_is_refused(source, target):
    name = unique("wide")
    create(source, name, 2)
    create(target, name, 4)
    with pytest.raises(MirrorError, match="has 4 partitions but source topic"):
        Mirror(source.bootstrap_servers, target.bootstrap_servers, name,
               progress=False).run(once=True)


def test_bad_arguments():
    with pytest.raises(MirrorError, match="not a regular expression"):
        Mirror("127.0.0.1:1", "127.0.0.1:1", "(", progress=False)
    with pytest.raises(MirrorError, match="must contain"):
        Mirror("127.0.0.1:1", "127.0.0.1:1", "x", rename="copy", progress=False)
    with pytest.raises(MirrorError, match="mode"):
        Mirror("127.0.0.1:1", "127.0.0.1:1", "x", mode="fast", progress=False)
    with pytest.raises(MirrorError, match="reader"):
        Mirror("127.0.0.1:1", "127.0.0.1:1", "x", reader="quick", progress=False)


class MetadataWithoutThePartition(Consumer):
    """A probe whose librdkafka metadata cache lost a partition the mirror knows, as a
    long-lived client's cache did on Apache Kafka after a node was killed and came back: every
    watermark query answers _UNKNOWN_PARTITION without asking a broker."""

    def get_watermark_offsets(self, *args, **kwargs):
        raise KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION,
                                        "Failed to get watermark offsets: Local: Unknown "
                                        "partition"))


def source_watermarks_through(probe_class, source, target, topic: str):
    """The mirror's watermarks of ``topic``[0] on the source, asked with a probe of
    ``probe_class`` in place: (the answer, that probe, the probe in place after)."""
    mirror = Mirror(source.bootstrap_servers, target.bootstrap_servers, topic,
                    mode="preserve", progress=False, timeout=5)
    probe = mirror._probes["source"] = probe_class({
        "bootstrap.servers": source.bootstrap_servers, "group.id": unique("probe")})
    try:
        return mirror.watermarks("source", topic, 0), probe, mirror._probes.get("source")
    finally:
        mirror.close_probes()


def test_a_probe_whose_metadata_lost_a_partition_is_replaced(source, target, topics):
    """The mirror's watermark probe is replaced when its cache lacks a known partition, and
    the next try asks the cluster (before, the stuck probe was asked again until the mirror's
    timeout, and the mirror stopped with 'Unknown partition')."""
    topic = topics["trimmed"]
    marks, stuck, after = source_watermarks_through(MetadataWithoutThePartition, source,
                                                    target, topic)
    assert marks == watermarks(source, topic)[0]
    assert after is not stuck


class BrokerHandleDestroyedOnce(Consumer):
    """A probe whose first watermark query was in flight to a node that left the metadata
    (killed -9 on Apache Kafka): librdkafka fails it with _DESTROY_BROKER."""

    failed = False

    def get_watermark_offsets(self, *args, **kwargs):
        if not self.failed:
            self.failed = True
            raise KafkaException(KafkaError(KafkaError._DESTROY_BROKER,
                                            "Failed to get watermark offsets: Local: Broker "
                                            "handle destroyed without termination"))
        return super().get_watermark_offsets(*args, **kwargs)


def test_a_query_to_a_node_that_left_is_asked_again(source, target, topics):
    """_DESTROY_BROKER is transient: the watermark query is asked again (before, the mirror
    stopped on it when a source node was killed -9 mid-copy on Apache Kafka)."""
    topic = topics["trimmed"]
    marks, probe, _ = source_watermarks_through(BrokerHandleDestroyedOnce, source, target,
                                                topic)
    assert marks == watermarks(source, topic)[0]
    assert probe.failed
