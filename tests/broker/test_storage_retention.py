"""Retention, DeleteRecords, the log start offset and ListOffsets lookups."""

from __future__ import annotations

import errno
import json
import os

import pytest

from kipproducer.broker.storage import (
    LogConfig,
    LogOfflineError,
    OffsetOutOfRangeError,
    PartitionLog,
)


def append_one_per_segment(log, kit, timestamps):
    """One single-record batch per timestamp; segment.bytes makes each its own segment."""
    for ts in timestamps:
        log.append(kit.batch([(b"k", b"v", ts)]), assign_offsets=True)


def one_batch_segments(kit, **values):
    size = len(kit.batch([(b"k", b"v", 0)]))
    return LogConfig.of(segment_bytes=size, **values)


def test_retention_by_time_deletes_old_segments_and_moves_the_log_start(tmp_path, kit):
    directory = tmp_path / "t-0"
    config = one_batch_segments(kit, retention_ms=1000)
    log = PartitionLog(directory, config)
    append_one_per_segment(log, kit, [1000, 2000, 3000, 4000])
    assert log.segment_base_offsets == [0, 1, 2, 3]
    assert log.apply_retention(now_ms=3500) == 2  # 1000 and 2000 are more than 1 s old
    assert log.segment_base_offsets == [2, 3]
    assert log.log_start_offset == 2
    with pytest.raises(OffsetOutOfRangeError):
        log.read(1, 100)
    assert [r.offset for r in kit.read_all(log)] == [2, 3]
    assert sorted(p.name for p in directory.glob("*.log")) == [
        f"{2:020d}.log",
        f"{3:020d}.log",
    ]
    log.close()
    log = PartitionLog(directory, config)
    assert log.log_start_offset == 2
    log.close()


def test_an_empty_cleanup_policy_keeps_every_segment(tmp_path, kit):
    """Neither delete nor compact: retention.ms past, nothing goes, nothing is compacted."""
    config = one_batch_segments(kit, retention_ms=1000, cleanup_policy="")
    log = PartitionLog(tmp_path / "t-0", config)
    append_one_per_segment(log, kit, [1000, 2000, 3000, 4000])
    assert log.apply_retention(now_ms=10_000) == 0
    assert log.segment_base_offsets == [0, 1, 2, 3]
    assert not log.needs_compaction(now_ms=10_000)
    assert [r.offset for r in kit.read_all(log)] == [0, 1, 2, 3]
    log.close()


def test_retention_of_the_whole_log_keeps_the_log_end(tmp_path, kit):
    log = PartitionLog(tmp_path / "t-0", LogConfig.of(retention_ms=10))
    log.append(kit.batch(kit.values(3), timestamp=100), assign_offsets=True)
    assert log.apply_retention(now_ms=1000) == 1
    assert log.segment_base_offsets == [3]
    assert (log.log_start_offset, log.log_end_offset, log.size_in_bytes) == (3, 3, 0)
    assert log.read(3, 100).records.nbytes == 0
    assert log.append(kit.batch(kit.values(1)), assign_offsets=True).base_offset == 3
    log.close()


def test_retention_by_size_deletes_oldest_segments_first(tmp_path, kit):
    config = one_batch_segments(kit, retention_bytes=0)
    size = config.segment_bytes
    log = PartitionLog(tmp_path / "t-0", config.altered({"retention.bytes": str(size * 2)}))
    append_one_per_segment(log, kit, [1, 2, 3, 4, 5])
    assert log.apply_retention(now_ms=10) == 3
    assert log.segment_base_offsets == [3, 4]
    assert log.size_in_bytes == 2 * size
    log.close()


def test_compact_only_topics_are_not_deleted_by_retention(tmp_path, kit):
    config = one_batch_segments(kit, retention_ms=1, cleanup_policy="compact")
    log = PartitionLog(tmp_path / "t-0", config)
    append_one_per_segment(log, kit, [1, 2, 3])
    assert log.apply_retention(now_ms=10_000) == 0
    assert log.segment_base_offsets == [0, 1, 2]
    log.close()


def test_delete_records_moves_the_log_start_and_persists_it(tmp_path, kit):
    directory = tmp_path / "t-0"
    config = one_batch_segments(kit)
    log = PartitionLog(directory, config)
    for _ in range(4):
        log.append(kit.batch(kit.values(1)), assign_offsets=True)
    log.append(kit.batch(kit.values(3)), assign_offsets=True)  # offsets 4..6
    assert log.delete_records_before(5) == 5
    assert log.segment_base_offsets == [4]  # whole segments below 5 are gone
    assert log.log_start_offset == 5
    # Reading at the log start returns the batch holding it (consumers skip offset 4).
    assert [r.offset for r in kit.records(log.read(5, 1000).records)] == [4, 5, 6]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(4, 1000)
    assert log.delete_records_before(2) == 5  # never moves back
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records_before(8)
    state = json.loads((directory / "partition-state.json").read_text())
    assert state["log_start_offset"] == 5
    log.close_handles()  # even without a clean close the log start survives
    log = PartitionLog(directory, config)
    assert log.log_start_offset == 5
    assert log.delete_records_before(-1) == 7  # -1: up to the high watermark
    assert log.segment_base_offsets == [7]
    assert log.read(7, 100).records.nbytes == 0
    log.close()


def test_offset_for_timestamp_finds_the_first_record_at_or_after(tmp_path, kit):
    log = PartitionLog(tmp_path / "t-0", LogConfig.of(segment_bytes=1000, index_interval_bytes=50))
    timestamps = {}
    for i in range(100):
        # Not monotonic: every 10th record is older than its neighbours.
        ts = 10_000 + i * 10 - (500 if i % 10 == 5 else 0)
        result = log.append(kit.batch([(b"k", b"v", ts)]), assign_offsets=True)
        timestamps[result.base_offset] = ts
    assert len(log.segment_base_offsets) > 3

    def model(target):
        for offset in sorted(timestamps):
            if timestamps[offset] >= target:
                return offset, timestamps[offset]
        return None

    for target in [0, 9_000, 10_000, 10_001, 10_455, 10_500, 10_505, 10_990, 10_991, 99_999]:
        assert log.offset_for_timestamp(target) == model(target), target
    assert log.max_timestamp_offset() == (99, 10_990)
    log.delete_records_before(50)
    assert log.offset_for_timestamp(0) == (50, 10_500)
    assert log.offset_for_timestamp(0, max_offset=50) is None
    log.close()


def test_max_timestamp_offset_picks_the_record_inside_its_batch(tmp_path, kit):
    log = PartitionLog(tmp_path / "t-0")
    assert log.max_timestamp_offset() is None
    log.append(
        kit.batch([(b"a", b"1", 50), (b"b", b"2", 90), (b"c", b"3", 70)]), assign_offsets=True
    )
    log.append(kit.batch([(b"d", b"4", 80)]), assign_offsets=True)
    assert log.max_timestamp_offset() == (1, 90)
    log.close()


@pytest.mark.parametrize("change", ["retention", "delete-records"])
def test_a_log_start_the_state_file_cannot_hold_takes_the_log_offline(
        tmp_path, kit, monkeypatch, change):
    """rename failing (EIO) for partition-state.json while retention or DeleteRecords moves
    the log start: LogOfflineError (KAFKA_STORAGE_ERROR), no segment deleted, and the next
    open has the log as it was (the old log start, every record)."""
    directory = tmp_path / "t-0"
    config = one_batch_segments(kit, retention_ms=1000)
    log = PartitionLog(directory, config)
    append_one_per_segment(log, kit, [1000, 2000, 3000, 4000])
    real_replace = os.replace

    def replace(src, dst, **kwargs):
        if str(dst).endswith("partition-state.json"):
            raise OSError(errno.EIO, "Input/output error (injected)")
        return real_replace(src, dst, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(LogOfflineError):
        if change == "retention":
            log.apply_retention(now_ms=3500)
        else:
            log.delete_records_before(2)
    monkeypatch.undo()
    assert log.offline
    log.close()
    log = PartitionLog(directory, config)
    assert log.log_start_offset == 0
    assert [r.offset for r in kit.read_all(log)] == [0, 1, 2, 3]
    log.close()
