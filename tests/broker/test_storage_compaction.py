"""Log compaction against a model: latest value per key, tombstones expire, offsets stay."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kipproducer.broker.storage import LogConfig, PartitionLog
from kipproducer.records import decode_batches

NOW = 1_000_000
DELETE_RETENTION = 10_000

record_strategy = st.tuples(
    st.sampled_from([b"a", b"b", b"c", b"d", b"e"]),
    st.one_of(st.none(), st.binary(min_size=0, max_size=8)),
    st.integers(min_value=NOW - 3 * DELETE_RETENTION, max_value=NOW),
)
log_strategy = st.lists(
    st.tuples(st.lists(record_strategy, min_size=1, max_size=3), st.booleans()),
    min_size=1,
    max_size=25,
)


def compacted_model(appended):
    """(offset, key, value) expected after compaction of a log whose segments are all closed."""
    latest = {}
    for offset, key, value, ts in appended:
        latest[key] = (offset, value, ts)
    kept = [
        (offset, key, value)
        for key, (offset, value, ts) in latest.items()
        if value is not None or ts >= NOW - DELETE_RETENTION
    ]
    return sorted(kept)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=log_strategy, gap=st.integers(min_value=0, max_value=5))
def test_compaction_matches_the_model(kit, batches, gap):
    config = LogConfig.of(cleanup_policy="compact", delete_retention_ms=DELETE_RETENTION)
    with tempfile.TemporaryDirectory() as tmp:
        log = PartitionLog(Path(tmp) / "t-0", config)
        appended = []
        next_offset = 0
        for records, roll_after in batches:
            buf = kit.batch(list(records), base_offset=next_offset)
            result = log.append(buf, assign_offsets=False)
            appended += [
                (result.base_offset + i, key, value, ts)
                for i, (key, value, ts) in enumerate(records)
            ]
            next_offset = result.last_offset + 1 + gap  # explicit offsets with gaps
            if roll_after:
                log.roll()
        log.roll()  # compaction never touches the active segment
        log_end = log.log_end_offset
        bases = log.segment_base_offsets

        log.compact(now_ms=NOW)
        expected = compacted_model(appended)
        got = [(r.offset, r.key, r.value) for r in kit.read_all(log, 0)]
        assert got == expected
        assert log.log_end_offset == log_end
        assert log.log_start_offset == 0
        assert log.segment_base_offsets[0] == bases[0]

        stats = log.compact(now_ms=NOW)  # a second pass finds nothing to do
        assert stats.segments_cleaned == 0
        log.close()
        log = PartitionLog(Path(tmp) / "t-0", config)
        assert [(r.offset, r.key, r.value) for r in kit.read_all(log, 0)] == expected
        log.close()


def test_tombstones_survive_until_delete_retention_passes(tmp_path, kit):
    config = LogConfig.of(cleanup_policy="compact", delete_retention_ms=1000)
    log = PartitionLog(tmp_path / "t-0", config)
    log.append(kit.batch([(b"k", b"v1", 100)]), assign_offsets=True)
    log.append(kit.batch([(b"k", None, 500)]), assign_offsets=True)
    log.roll()
    log.compact(now_ms=1000)
    assert [(r.offset, r.value) for r in kit.read_all(log, 0)] == [(1, None)]
    log.compact(now_ms=1501)
    assert kit.read_all(log, 0) == []
    assert log.log_end_offset == 2
    # Reading from 0 still works (a consumer with an old committed offset is not reset), and
    # the emptied first segment does not move the log start, now or after a restart.
    assert log.read(0, 100).records.nbytes == 0
    log.apply_retention(now_ms=1501)
    assert log.log_start_offset == 0
    log.close()
    log = PartitionLog(tmp_path / "t-0", config)
    assert log.log_start_offset == 0 and log.log_end_offset == 2
    log.close()


def test_active_segment_and_min_compaction_lag_are_respected(tmp_path, kit):
    config = LogConfig.of(cleanup_policy="compact", min_compaction_lag_ms=1000)
    log = PartitionLog(tmp_path / "t-0", config)
    log.append(kit.batch([(b"k", b"old", 100)]), assign_offsets=True)
    log.roll()
    log.append(kit.batch([(b"k", b"new", 5000)]), assign_offsets=True)
    log.roll()
    log.append(kit.batch([(b"k", b"newest", 5000)]), assign_offsets=True)  # active
    # The second segment is within the lag at now=5500: only the first is compactable, and
    # alone it holds the latest "k" it knows of.
    assert log.compact(now_ms=5500).segments_cleaned == 0
    assert [r.value for r in kit.read_all(log, 0)] == [b"old", b"new", b"newest"]
    log.compact(now_ms=7000)
    assert [r.value for r in kit.read_all(log, 0)] == [b"new", b"newest"]
    log.close()


def test_last_batch_of_a_producer_is_kept_empty(tmp_path, kit):
    directory = tmp_path / "t-0"
    config = LogConfig.of(cleanup_policy="compact")
    log = PartitionLog(directory, config)
    log.append(
        kit.batch([(b"k", b"1"), (b"j", b"1")], producer_id=7, producer_epoch=0, base_sequence=0),
        assign_offsets=True,
    )
    log.append(
        kit.batch([(b"k", b"2")], producer_id=7, producer_epoch=0, base_sequence=2),
        assign_offsets=True,
    )
    log.append(kit.batch([(b"k", b"3"), (b"j", b"3")]), assign_offsets=True)
    log.roll()
    stats = log.compact(now_ms=2000)
    assert stats.batches_removed == 1  # producer 7's first batch is gone entirely
    raw = b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))
    batches = [
        (b.base_offset, b.record_count, b.producer_id) for b in decode_batches(raw, strict=False)
    ]
    assert batches == [(2, 0, 7), (3, 2, -1)]
    assert [(r.offset, r.value) for r in kit.read_all(log, 0)] == [(3, b"3"), (4, b"3")]
    log.close()
    # The empty batch still carries the producer's last sequence after a restart.
    (directory / "producer-state.snapshot").unlink()
    log = PartitionLog(directory, config)
    entry = log.producer_state.entry(7)
    assert entry is not None and entry.last_seq == 2
    log.close()


def test_compaction_keeps_compressed_batches_readable(tmp_path, kit):
    log = PartitionLog(tmp_path / "t-0", LogConfig.of(cleanup_policy="compact,delete"))
    records = [(b"k%d" % (i % 5), b"v%d" % i) for i in range(40)]
    log.append(kit.batch(records, compression="gzip"), assign_offsets=True)
    log.roll()
    log.compact(now_ms=2000)
    got = [(r.offset, r.key, r.value) for r in kit.read_all(log, 0)]
    assert got == [(35 + i, b"k%d" % i, b"v%d" % (35 + i)) for i in range(5)]
    batch = next(decode_batches(log.read(0, 10**6).records, strict=False))
    assert batch.compression == "gzip" and batch.last_offset == 39
    log.close()
