"""The mirror's fast path (mirror/fetcher.py, mirror/batches.py): source batches fetched whole and
their records forwarded as bytes, checked on sources that make it work hard: compacted topics
of compressed batches, LogAppendTime topics, answers cut short mid-batch and batches larger
than a fetch may return, aborted transactions under both isolation levels, a log start that
moves while the mirror copies. And the librdkafka consumer it falls back to."""

from __future__ import annotations

import json
import struct
import threading

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from mirror_support import create, fill, read, stable, transactions, trim, unique

from kipproducer.blocking_client import BlockingClient
from kipproducer.mirror import Mirror, MirrorError
from kipproducer.mirror.batches import CODEC_MASK, HEADER_SIZE, LOG_APPEND_TIME, walk
from kipproducer.mirror.fetcher import FetchReader

PARTITIONS = 3
_HEADER = struct.Struct(">qiibIhiqqqhii")


def raw_fetch(bootstrap: str, topic: str, partition: int, offset: int = 0,
              max_bytes: int = 8 << 20, isolation: int = 0):
    """One Fetch v12 answer's partition data, through the project's protocol layer."""
    with BlockingClient(bootstrap) as client:
        answer = client.request(
            1, 12, replica_id=-1, max_wait=100, min_bytes=1, max_bytes=max_bytes,
            isolation_level=isolation, session_id=0, session_epoch=-1,
            topics=[{"topic": topic, "partitions": [{
                "partition": partition, "fetch_offset": offset, "log_start_offset": -1,
                "current_leader_epoch": -1, "partition_max_bytes": max_bytes}]}],
            forgotten_topics_data=[], rack_id="")
    return answer.responses[0].partitions[0]


def headers_of(blob) -> list[tuple]:
    """(base offset, attributes, last offset delta, records count) of each whole batch."""
    out, pos, view = [], 0, memoryview(blob)
    while len(view) - pos >= HEADER_SIZE:
        fields = _HEADER.unpack_from(view, pos)
        end = pos + 12 + fields[1]
        if end > len(view):
            break
        out.append((fields[0], fields[5], fields[6], fields[12]))
        pos = end
    return out


def read_typed(bootstrap: str, topic: str, partitions: int,
               isolation: str = "read_committed") -> dict[int, list[tuple]]:
    """Every record as (offset, key, value, headers, (timestamp type, timestamp))."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("typed"),
                  "enable.partition.eof": True, "isolation.level": isolation})
    out: dict[int, list[tuple]] = {p: [] for p in range(partitions)}
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        ended: set[int] = set()
        while len(ended) < partitions:
            m = c.poll(30)
            assert m is not None, f"{topic}: not read to the end"
            if m.error():
                ended.add(m.partition())
                continue
            out[m.partition()].append((m.offset(), m.key(), m.value(),
                                       tuple(m.headers() or ()), m.timestamp()))
    finally:
        c.close()
    return out


def content(rows: dict[int, list[tuple]]) -> dict[int, list[tuple]]:
    return {p: [r[1:] for r in recs] for p, recs in rows.items()}


def mirror(source, target, topic: str, mode: str = "preserve", **kwargs) -> dict:
    m = Mirror(source.bootstrap_servers, target.bootstrap_servers, topic, mode=mode,
               group=unique("g") if mode == "transactional" else None, progress=False,
               **kwargs)
    snapshot = m.run(once=True)
    assert snapshot["reader"] == kwargs.get("reader", "fetch")
    return snapshot


# ---- compacted, compressed ----------------------------------------------------------------------


@pytest.mark.parametrize("codec", ["lz4", "gzip", "zstd"])
def test_compacted_compressed_source(source, target, codec):
    """Compressed batches whose offsets the cleaner thinned out: decompressed, and re-encoded
    as runs of consecutive offsets (preserve) or as the target's own batches (transactional)."""
    topic = create(source, unique(f"cc-{codec}"), 1, **{"cleanup.policy": "compact",
                                                        "segment.bytes": "4096"})
    p = Producer({"bootstrap.servers": source.bootstrap_servers, "compression.type": codec,
                  "linger.ms": 20, "batch.size": 2000})
    for i in range(1500):
        p.produce(topic, b"value-%d" % i, b"k%d" % (i % 40) if (i // 9) % 2 else b"u%d" % i,
                  partition=0, headers=[("i", b"%d" % i)], timestamp=1_700_000_000_000 + i)
    assert p.flush(30) == 0
    fill(source, topic, 300, start=50_000, partitions=1)  # closes the segments to clean
    source.broker.logs.get_log(topic, 0).compact()
    batches = headers_of(raw_fetch(source.bootstrap_servers, topic, 0).records)
    compressed_with_holes = [b for b in batches
                             if b[1] & CODEC_MASK and b[3] < b[2] + 1]
    assert compressed_with_holes, "the source must hold compacted compressed batches"

    mirror(source, target, topic)
    assert read_typed(target.bootstrap_servers, topic, 1, "read_uncommitted") == \
        read_typed(source.bootstrap_servers, topic, 1)
    copy = "eos." + topic
    mirror(source, target, topic, "transactional", rename="eos.{topic}")
    assert content(read_typed(target.bootstrap_servers, copy, 1)) == \
        content(read_typed(source.bootstrap_servers, topic, 1))


# ---- LogAppendTime ----------


@pytest.mark.parametrize("mode", ["preserve", "transactional"])
def test_log_append_time_source(source, target, mode):
    """The source's append times and the LogAppendTime type reach the target's readers (the
    target topic is made CreateTime, so its broker keeps what the mirror writes)."""
    topic = create(source, unique("lat"), PARTITIONS,
                   **{"message.timestamp.type": "LogAppendTime"})
    fill(source, topic, 600)
    src = read_typed(source.bootstrap_servers, topic, PARTITIONS)
    assert all(r[4][0] == 2 for rows in src.values() for r in rows)  # LogAppendTime
    batches = headers_of(raw_fetch(source.bootstrap_servers, topic, 0).records)
    assert all(b[1] & LOG_APPEND_TIME for b in batches)
    mirror(source, target, topic, mode, rename="c.{topic}")
    dst = read_typed(target.bootstrap_servers, "c." + topic, PARTITIONS)
    if mode == "preserve":
        assert dst == src
    else:
        assert content(dst) == content(src)


# ---- answers cut short ----------


def test_walk_ignores_a_batch_cut_short(source):
    topic = create(source, unique("cut"), 1)
    fill(source, topic, 200, partitions=1)
    blob = bytes(raw_fetch(source.bootstrap_servers, topic, 0).records)
    whole = walk(blob, 0)
    batches = headers_of(blob)
    assert len(batches) > 2
    # Cut in the middle of the third batch: the first two are taken, the next fetch starts
    # at the third.
    third = batches[2][0]
    cut_at = _batch_start(blob, 2) + 30
    cut = walk(blob[:cut_at], 0)
    assert cut.next_offset == third and cut.complete == 2
    assert sum(b.count for b in cut.batches) == sum(b[3] for b in batches[:2])
    # Cut inside the header of the first batch: nothing, and nothing moves.
    assert walk(blob[:HEADER_SIZE - 1], 0).next_offset == 0
    assert whole.next_offset == 200


def _batch_start(blob: bytes, index: int) -> int:
    pos = 0
    for _ in range(index):
        pos += 12 + _HEADER.unpack_from(blob, pos)[1]
    return pos


def test_fetch_size_smaller_than_the_batches(source, target):
    """A partition fetch size smaller than most batches: many small answers, each with one
    batch larger than the size (KIP-74: the first batch comes whole). Our broker never cuts
    an answer mid-batch (Kafka does, sending file slices): test_walk_ignores_a_batch_cut_short
    covers that on real fetched bytes."""
    topic = create(source, unique("small"), PARTITIONS)
    p = Producer({"bootstrap.servers": source.bootstrap_servers, "linger.ms": 20,
                  "batch.size": 20_000})
    for i in range(3000):
        p.produce(topic, b"v" * (i % 50), b"key-%d" % i, partition=i % PARTITIONS)
    assert p.flush(30) == 0
    snapshot = mirror(source, target, topic,
                      source_config={"max.partition.fetch.bytes": 1500})
    assert snapshot["records"] == 3000
    assert read_typed(target.bootstrap_servers, topic, PARTITIONS, "read_uncommitted") == \
        read_typed(source.bootstrap_servers, topic, PARTITIONS)


# ---- transactions ----------


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_aborted_transactions_by_isolation(source, target, isolation):
    """read_committed leaves the aborted records out (their offsets stay gaps);
    read_uncommitted copies them as plain records. Markers are never copied."""
    topic = create(source, unique("abt"), PARTITIONS)
    transactions(source, topic, 9)
    fill(source, topic, 30, start=500)
    stable(source.bootstrap_servers, topic, PARTITIONS)
    src = read(source.bootstrap_servers, topic, PARTITIONS, isolation)
    everything = read(source.bootstrap_servers, topic, PARTITIONS, "read_uncommitted")
    committed = read(source.bootstrap_servers, topic, PARTITIONS, "read_committed")
    assert sum(map(len, everything.values())) > sum(map(len, committed.values()))
    snapshot = mirror(source, target, topic, isolation=isolation, rename=f"{isolation}.{{topic}}")
    assert snapshot["records"] == sum(map(len, src.values()))
    assert read(target.bootstrap_servers, f"{isolation}.{topic}", PARTITIONS,
                "read_uncommitted") == src


# ---- the log start moves ----------


def test_log_start_moves_during_the_copy(source, target, monkeypatch):
    """DeleteRecords moves the source's log start past where the mirror reads next: it goes
    on from the new log start (the records below are gone on the source too)."""
    topic = create(source, unique("moving"), PARTITIONS)
    fill(source, topic, 1500)
    trimmed = threading.Event()
    assign = FetchReader.assign

    def trim_then_assign(reader, positions):
        # The mirror has chosen where to start (offset 0, the log start then); the source's
        # log start moves before the reader gets there.
        if not trimmed.is_set():
            assert set(positions.values()) == {0}
            trim(source, topic, PARTITIONS, 300)
            trimmed.set()
        assign(reader, positions)

    monkeypatch.setattr(FetchReader, "assign", trim_then_assign)
    snapshot = mirror(source, target, topic, source_config={"max.partition.fetch.bytes": 2000})
    assert trimmed.is_set()
    src = read(source.bootstrap_servers, topic, PARTITIONS)
    assert all(rows[0].offset == 300 for rows in src.values())
    assert snapshot["records"] == sum(map(len, src.values()))
    assert read(target.bootstrap_servers, topic, PARTITIONS, "read_uncommitted") == src


def test_fetch_reader_continues_from_the_new_log_start(source):
    topic = create(source, unique("oor"), 1)
    fill(source, topic, 400, partitions=1)
    trim(source, topic, 1, 250)
    reader = FetchReader({"bootstrap.servers": source.bootstrap_servers}, "read_committed")
    try:
        reader.assign({(topic, 0): 10})  # below the log start now
        first = None
        for _ in range(100):
            for fetched in reader.poll(0.2):
                if fetched.batches and first is None:
                    first = fetched
            if first is not None:
                break
        assert first is not None
        assert first.batches[0].min_offset == 250
    finally:
        reader.close()


# ---- the fallback ----------


def test_consumer_reader_still_copies(source, target):
    topic = create(source, unique("slow"), PARTITIONS)
    fill(source, topic, 900, keys=20)
    transactions(source, topic, 6)
    stable(source.bootstrap_servers, topic, PARTITIONS)
    snapshot = mirror(source, target, topic, reader="consumer")
    assert snapshot["records"] == 900 + 24
    assert read(target.bootstrap_servers, topic, PARTITIONS, "read_uncommitted") == \
        read(source.bootstrap_servers, topic, PARTITIONS)


def test_sources_the_fetch_reader_cannot_speak_fall_back():
    oauth = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER"}
    m = Mirror("127.0.0.1:1", "127.0.0.1:1", "x", source_config=oauth, progress=False)
    assert m.reader_kind == "consumer" and m.metrics.snapshot()["reader"] == "consumer"
    with pytest.raises(MirrorError, match="OAUTHBEARER"):
        Mirror("127.0.0.1:1", "127.0.0.1:1", "x", source_config=oauth, reader="fetch",
               progress=False)
    plain = Mirror("127.0.0.1:1", "127.0.0.1:1", "x", progress=False)
    assert plain.reader_kind == "fetch"


def test_cli_reader_choice(source, target, tmp_path, capsys):
    from kipproducer.cli import main as cli_main

    topic = create(source, unique("cli"), PARTITIONS)
    fill(source, topic, 120)
    for reader in ("consumer", "fetch"):
        metrics = tmp_path / f"{reader}.json"
        code = cli_main(["mirror", "--source", source.bootstrap_servers, "--target",
                         target.bootstrap_servers, "--topics", topic, "--rename",
                         f"{reader}.{{topic}}", "--reader", reader, "--once", "--quiet",
                         "--metrics-json", str(metrics)])
        assert code == 0, capsys.readouterr().err
        written = json.loads(metrics.read_text())
        assert written["reader"] == reader and written["records"] == 120
        assert read(target.bootstrap_servers, f"{reader}.{topic}", PARTITIONS,
                    "read_uncommitted") == read(source.bootstrap_servers, topic, PARTITIONS)
    assert cli_main(["mirror", "--source", "127.0.0.1:1", "--target", "127.0.0.1:1",
                     "--topics", "x", "--reader", "fetch", "--source-config",
                     "security.protocol=SASL_PLAINTEXT", "--source-config",
                     "sasl.mechanism=OAUTHBEARER"]) == 2
    assert "OAUTHBEARER" in capsys.readouterr().err


@pytest.mark.parametrize("version", [4, 7, 12])
def test_every_fetch_version_the_reader_speaks(source, target, monkeypatch, version):
    """Fetch v4 (isolation levels), v7 (sessions) and v12 (flexible): brokers older than ours
    answer the lower ones; each reads the same records (v4 has no log start in its answers:
    the reader asks ListOffsets when the log start moves)."""
    import kipproducer.mirror.fetcher as fetcher

    monkeypatch.setattr(fetcher, "FETCH_VERSIONS", (version, version))
    topic = create(source, unique(f"v{version}"), PARTITIONS)
    fill(source, topic, 300)
    transactions(source, topic, 6)
    stable(source.bootstrap_servers, topic, PARTITIONS)
    assign = FetchReader.assign

    def trim_then_assign(reader, positions):
        trim(source, topic, PARTITIONS, 40)  # below where the reader starts: out of range
        assign(reader, positions)

    monkeypatch.setattr(FetchReader, "assign", trim_then_assign)
    mirror(source, target, topic)
    assert read(target.bootstrap_servers, topic, PARTITIONS, "read_uncommitted") == \
        read(source.bootstrap_servers, topic, PARTITIONS)


def test_a_target_producer_on_librdkafkas_transactions_cannot_take_batches():
    """An OAUTHBEARER target without a token source keeps librdkafka's transactions: the
    transactional mode then reads with the consumer (Mirror._run asks can_forward())."""
    import kipproducer as kp
    from kipproducer.mirror.writers import Writer

    writer = Writer.__new__(Writer)
    writer.producer = kp.Producer({"bootstrap.servers": "127.0.0.1:1", "log_level": 0,
                                   "transactional.id": unique("oauth"),
                                   "security.protocol": "SASL_PLAINTEXT",
                                   "sasl.mechanism": "OAUTHBEARER"})
    assert not writer.can_forward()
    writer.producer = kp.Producer({"bootstrap.servers": "127.0.0.1:1",
                                   "transactional.id": unique("plain")})
    assert writer.can_forward()
