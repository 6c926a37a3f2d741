"""The Kafka 3.9 topic config table: synonyms, broker units, and the configs the log honours
(min.cleanable.dirty.ratio, max.compaction.lag.ms, segment.jitter.ms, segment.index.bytes,
compression.type's rewrite of a batch)."""

from __future__ import annotations

import pytest

from kipproducer.broker.broker_config import BrokerConfig, BrokerConfigError
from kipproducer.broker.storage import InvalidConfigError, LogConfig, PartitionLog
from kipproducer.broker.storage.log_config import (
    SOURCE_DEFAULT_CONFIG,
    SOURCE_STATIC_BROKER_CONFIG,
    SOURCE_TOPIC_CONFIG,
    TYPE_DOUBLE,
)
from kipproducer.broker.storage.recompress import recompress
from kipproducer.records import decode_batches, encode_batch, validate_batch


def test_broker_synonyms_in_their_units_most_specific_wins() -> None:
    config = BrokerConfig.from_properties(
        {"log.retention.hours": "2", "log.roll.hours": "1", "log.roll.ms": "5000",
         "log.cleaner.min.cleanable.ratio": "0.1", "compression.type": "zstd"})
    assert config.topic_defaults == {
        "retention.ms": str(2 * 3_600_000),
        "segment.ms": "5000",  # log.roll.ms beats log.roll.hours, as in Kafka
        "min.cleanable.dirty.ratio": "0.1",
        "compression.type": "zstd",
    }
    with pytest.raises(BrokerConfigError):
        BrokerConfig.from_properties({"log.retention.hours": "two"})


def test_describe_lists_synonyms_most_specific_first() -> None:
    broker = {"log.retention.minutes": "30"}
    config = LogConfig.parse({"retention.ms": "1000"}, broker_defaults={"retention.ms": "1800000"})
    [entry] = config.describe(["retention.ms"], broker)
    assert (entry.value, entry.source) == ("1000", SOURCE_TOPIC_CONFIG)
    assert [(s.name, s.value, s.source) for s in entry.synonyms] == [
        ("retention.ms", "1000", SOURCE_TOPIC_CONFIG),
        ("log.retention.minutes", "30", SOURCE_STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", SOURCE_DEFAULT_CONFIG),
    ]
    unset = LogConfig.parse(broker_defaults={"retention.ms": "1800000"})
    [entry] = unset.describe(["retention.ms"], broker)
    assert (entry.value, entry.source) == ("1800000", SOURCE_STATIC_BROKER_CONFIG)
    [ratio] = unset.describe(["min.cleanable.dirty.ratio"])
    assert (ratio.value, ratio.config_type, ratio.source) == ("0.5", TYPE_DOUBLE,
                                                              SOURCE_DEFAULT_CONFIG)
    # No broker synonym: no synonyms at all, the built-in default.
    [own] = unset.describe(["check.expected.offsets"])
    assert own.synonyms == () and own.source == SOURCE_DEFAULT_CONFIG


def test_single_node_refusals_say_why() -> None:
    with pytest.raises(InvalidConfigError, match="tiered storage"):
        LogConfig.parse({"remote.storage.enable": "true"})
    assert LogConfig.parse({"remote.storage.enable": "false"}).remote_storage_enable is False


def _compact_log(tmp_path, **values) -> PartitionLog:
    return PartitionLog(tmp_path / "t-0", LogConfig.of(cleanup_policy="compact", **values))


def _fill(kit, log: PartitionLog, keys: list[bytes], timestamp: int) -> None:
    for key in keys:
        log.append(kit.batch([(key, b"x" * 50, timestamp)]), assign_offsets=True)
    log.roll()


def test_dirty_ratio_decides_when_the_cleaner_runs(tmp_path, kit) -> None:
    log = _compact_log(tmp_path, min_cleanable_dirty_ratio=0.5)
    _fill(kit, log, [b"a", b"b", b"c", b"d"], 1000)
    assert log.needs_compaction(now_ms=2000)  # everything is dirty after a start
    log.compact(now_ms=2000)
    assert not log.needs_compaction(now_ms=2001)
    _fill(kit, log, [b"a"], 2000)  # 1 dirty segment next to 4 clean ones: 20 % < 50 %
    assert not log.needs_compaction(now_ms=2002)
    _fill(kit, log, [b"b", b"c", b"d", b"e"], 2000)
    assert log.needs_compaction(now_ms=2003)
    log.close()


def test_max_compaction_lag_forces_a_pass_and_rolls_the_active_segment(tmp_path, kit) -> None:
    log = _compact_log(tmp_path, min_cleanable_dirty_ratio=0.9, max_compaction_lag_ms=5000)
    _fill(kit, log, [b"a", b"b", b"c", b"d", b"e", b"f", b"g", b"h", b"i", b"j"], 1000)
    log.compact(now_ms=1000)
    _fill(kit, log, [b"a"], 2000)
    assert not log.needs_compaction(now_ms=6000)  # dirty since 2000: 4 s < 5 s
    assert log.needs_compaction(now_ms=7001)
    log.close()
    # The active segment rolls once it spans max.compaction.lag.ms, so it can be cleaned.
    rolling = _compact_log(tmp_path / "r", max_compaction_lag_ms=5000)
    rolling.append(kit.batch([(b"a", b"1", 10_000)]), assign_offsets=True)
    rolling.append(kit.batch([(b"a", b"2", 15_001)]), assign_offsets=True)
    assert len(rolling.segment_base_offsets) == 2
    rolling.close()


def test_segment_index_bytes_and_jitter_roll_segments(tmp_path, kit) -> None:
    # Two 8-byte index entries at most, one entry per batch (index.interval.bytes=0).
    log = PartitionLog(tmp_path / "i-0", LogConfig.of(segment_index_bytes=16,
                                                       index_interval_bytes=0))
    for i in range(5):
        log.append(kit.batch([(None, b"v%d" % i, 1000)]), assign_offsets=True)
    # A segment's first batch gets no entry (the index starts at its base offset): three
    # batches fill two entries, the fourth rolls.
    assert log.segment_base_offsets == [0, 3]
    assert all(len(segment.offset_index) <= 2 for segment in log._segments)
    log.close()
    jittered = PartitionLog(tmp_path / "j-0", LogConfig.of(segment_ms=10_000,
                                                            segment_jitter_ms=10_000))
    assert 0 <= jittered._roll_jitter_ms < 10_000
    jittered.close()


@pytest.mark.parametrize(("sent", "topic", "stored"), [
    (None, "lz4", "lz4"), ("gzip", "zstd", "zstd"), ("snappy", "uncompressed", None),
    ("zstd", "gzip", "gzip"),
])
def test_recompress_keeps_every_header_field(sent, topic, stored) -> None:
    records = [(b"k%d" % i, b"value-%d" % i * 10, [("h", b"1")], 1_000 + i) for i in range(5)]
    original = encode_batch(records, producer_id=7, producer_epoch=2, base_sequence=40,
                            transactional=True, compression=sent)
    before = validate_batch(original)
    rewritten = recompress(original, before.attributes, LogConfig.of(compression_type=topic))
    assert rewritten is not None
    [after] = decode_batches(bytes(rewritten), validate=True)
    assert after.compression == stored
    for name in ("base_offset", "last_offset_delta", "base_timestamp", "max_timestamp",
                 "producer_id", "producer_epoch", "base_sequence", "record_count",
                 "is_transactional", "timestamp_type"):
        assert getattr(after, name) == getattr(before, name), name
    assert [(r.key, r.value, r.headers, r.timestamp) for r in after] == [
        (r.key, r.value, r.headers, r.timestamp) for r in before]
    # Same codec, or "producer": nothing to do.
    assert recompress(original, before.attributes, LogConfig.of(compression_type="producer")) \
        is None
