"""PartitionLog appends (assigned and explicit offsets) and fetch reads."""

from __future__ import annotations

import pytest

from kipproducer.broker.storage import (
    InvalidAppendOffsetError,
    LogConfig,
    LogOfflineError,
    OffsetMismatchError,
    OffsetOutOfRangeError,
    PartitionLog,
)
from kipproducer.protocol.error_codes import KAFKA_STORAGE_ERROR
from kipproducer.records import decode_batches, validate_batch


def small_config(**values):
    return LogConfig.of(**{"segment_bytes": 1500, "index_interval_bytes": 200, **values})


def test_assigned_offsets_patch_the_batch_in_place(tmp_path, kit):
    log = PartitionLog(tmp_path / "t-0")
    first = kit.batch(kit.values(3))
    result = log.append(first, assign_offsets=True, leader_epoch=7)
    assert (result.base_offset, result.last_offset, result.log_end_offset) == (0, 2, 3)
    second = kit.batch(kit.values(2), base_offset=0)
    result = log.append(second, assign_offsets=True, leader_epoch=7)
    assert (result.base_offset, result.last_offset) == (3, 4)
    # The caller's buffer now carries the offsets and epoch the log gave it.
    batch = validate_batch(second)
    assert batch.base_offset == 3 and batch.partition_leader_epoch == 7
    assert log.log_end_offset == log.high_watermark == 5
    assert [r.offset for r in kit.read_all(log)] == [0, 1, 2, 3, 4]
    assert result.log_append_time == -1 and result.log_start_offset == 0
    log.close()


def test_explicit_offsets_keep_their_offsets_and_leave_gaps(tmp_path, kit):
    log = PartitionLog(tmp_path / "t-0")
    log.append(kit.batch(kit.values(2), base_offset=10), assign_offsets=False)
    assert log.log_end_offset == 12
    log.append(kit.batch(kit.values(3), base_offset=100), assign_offsets=False)
    assert log.log_end_offset == 103
    # A batch may start exactly at the log end, never below it.
    log.append(kit.batch(kit.values(1), base_offset=103), assign_offsets=False)
    with pytest.raises(InvalidAppendOffsetError) as excinfo:
        log.append(kit.batch(kit.values(1), base_offset=50), assign_offsets=False)
    assert excinfo.value.log_end_offset == 104
    assert excinfo.value.error_code == 10391
    assert [r.offset for r in kit.read_all(log, 0)] == [10, 11, 100, 101, 102, 103]
    # Assigned offsets continue after the explicit ones.
    assert log.append(kit.batch(kit.values(1)), assign_offsets=True).base_offset == 104
    log.close()


def test_expected_offset_must_equal_the_log_end(tmp_path, kit):
    log = PartitionLog(tmp_path / "t-0")
    log.append(kit.batch(kit.values(2)), assign_offsets=True, expected_base_offset=0)
    with pytest.raises(OffsetMismatchError) as excinfo:
        log.append(kit.batch(kit.values(1)), assign_offsets=True, expected_base_offset=0)
    assert excinfo.value.log_end_offset == 2 and excinfo.value.error_code == 10027
    assert log.log_end_offset == 2
    log.close()


def test_append_refuses_anything_but_one_whole_batch(tmp_path, kit):
    log = PartitionLog(tmp_path / "t-0")
    one = kit.batch(kit.values(1))
    with pytest.raises(ValueError):
        log.append(one + one, assign_offsets=True)
    with pytest.raises(ValueError):
        log.append(one[:-3], assign_offsets=True)
    assert log.log_end_offset == 0
    log.close()


def test_reads_from_inside_gaps_start_at_the_next_batch(tmp_path, kit):
    log = PartitionLog(tmp_path / "t-0", small_config())
    for base in (5, 40, 43, 300, 2**33):
        log.append(kit.batch(kit.values(3), base_offset=base), assign_offsets=False)
    assert log.log_start_offset == 0
    for start, first in [(0, 5), (6, 5), (8, 40), (39, 40), (43, 43), (46, 300), (303, 2**33)]:
        result = log.read(start, 1 << 20)
        assert result.first_offset == first, start
        assert result.records, start
    # The far explicit offset could not be indexed relative to the old segment: it rolled.
    assert log.segment_base_offsets[-1] == 2**33
    assert log.read(log.log_end_offset, 100).records.nbytes == 0
    log.close()


def test_reads_across_segments_return_every_record_once(tmp_path, kit):
    log = PartitionLog(tmp_path / "t-0", small_config())
    expected = []
    for i in range(60):
        records = kit.values(1 + i % 4, prefix=b"%d-" % i, size=i % 30)
        result = log.append(kit.batch(records), assign_offsets=True)
        expected += [(result.base_offset + j, v) for j, (_, v) in enumerate(records)]
    assert len(log.segment_base_offsets) > 5
    got = [(r.offset, r.value) for r in kit.read_all(log, max_bytes=300)]
    assert got == expected
    # Every single offset, including the ones in the middle of a batch, is found via the index.
    for offset, value in expected:
        result = log.read(offset, 1)
        batch = next(decode_batches(result.records))
        assert batch.base_offset <= offset <= batch.last_offset
        assert value in [r.value for r in batch if r.offset == offset]
    log.close()


def test_max_bytes_takes_whole_batches_but_at_least_one(tmp_path, kit):
    log = PartitionLog(tmp_path / "t-0")
    sizes = []
    for _ in range(5):
        batch = kit.batch(kit.values(3, size=100))
        sizes.append(len(batch))
        log.append(batch, assign_offsets=True)
    result = log.read(0, 1)  # smaller than one batch: still one whole batch
    assert result.records.nbytes == sizes[0]
    assert (result.first_offset, result.next_offset) == (0, 3)
    result = log.read(0, sizes[0] + sizes[1] + 10)
    assert result.records.nbytes == sizes[0] + sizes[1]
    result = log.read(4, 10**6)
    assert result.first_offset == 3 and result.records.nbytes == sum(sizes[1:])
    assert log.read(0, 1, min_one_batch=False).records.nbytes == 0
    log.close()


def test_one_batch_larger_than_the_read_window(tmp_path, kit):
    log = PartitionLog(tmp_path / "t-0", LogConfig.of(index_interval_bytes=0))
    log.append(kit.batch(kit.values(2)), assign_offsets=True)
    big = kit.batch(kit.values(3, size=300_000))
    log.append(big, assign_offsets=True)
    log.append(kit.batch(kit.values(2)), assign_offsets=True)
    result = log.read(2, 10)
    assert result.records.nbytes == len(big)
    assert [r.offset for r in kit.records(result.records)] == [2, 3, 4]
    result = log.read(0, 200)
    assert [r.offset for r in kit.records(result.records)] == [0, 1]
    log.close()


def test_max_offset_limits_the_read(tmp_path, kit):
    log = PartitionLog(tmp_path / "t-0")
    for _ in range(3):
        log.append(kit.batch(kit.values(2)), assign_offsets=True)
    assert [r.offset for r in kit.records(log.read(0, 10**6, max_offset=4).records)] == [
        0,
        1,
        2,
        3,
    ]
    # A batch straddling max_offset is not returned.
    assert log.read(4, 10**6, max_offset=5).records.nbytes == 0
    assert log.read(4, 10**6, max_offset=4).records.nbytes == 0
    log.close()


def test_offsets_outside_the_log_are_out_of_range(tmp_path, kit):
    log = PartitionLog(tmp_path / "t-0")
    log.append(kit.batch(kit.values(2)), assign_offsets=True)
    with pytest.raises(OffsetOutOfRangeError) as excinfo:
        log.read(3, 100)
    assert (excinfo.value.log_start_offset, excinfo.value.log_end_offset) == (0, 2)
    assert excinfo.value.error_code == 1
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)
    log.close()


def test_log_append_time_stamps_the_batch_and_keeps_the_crc_valid(tmp_path, kit):
    log = PartitionLog(tmp_path / "t-0", LogConfig.of(message_timestamp_type="LogAppendTime"))
    buf = kit.batch(kit.values(2), timestamp=5)
    result = log.append(buf, assign_offsets=True)
    assert result.log_append_time > 1_600_000_000_000
    batch = validate_batch(buf)
    assert batch.timestamp_type == 1 and batch.max_timestamp == result.log_append_time
    assert {r.timestamp for r in kit.records(log.read(0, 1000).records)} == {result.log_append_time}
    log.close()


def test_segment_ms_rolls_on_record_time(tmp_path, kit):
    log = PartitionLog(tmp_path / "t-0", LogConfig.of(segment_ms=1000))
    log.append(kit.batch(kit.values(1), timestamp=10_000), assign_offsets=True)
    log.append(kit.batch(kit.values(1), timestamp=10_900), assign_offsets=True)
    assert log.segment_base_offsets == [0]
    log.append(kit.batch(kit.values(1), timestamp=11_001), assign_offsets=True)
    assert log.segment_base_offsets == [0, 2]
    log.close()


def test_segment_bytes_rolls_before_the_batch_that_would_not_fit(tmp_path, kit):
    batch_size = len(kit.batch(kit.values(1)))
    log = PartitionLog(tmp_path / "t-0", LogConfig.of(segment_bytes=batch_size * 3))
    for _ in range(7):
        log.append(kit.batch(kit.values(1)), assign_offsets=True)
    assert log.segment_base_offsets == [0, 3, 6]
    assert log.size_in_bytes == 7 * batch_size
    log.close()


def test_compressed_batches_are_stored_and_read_as_sent(tmp_path, kit):
    log = PartitionLog(tmp_path / "t-0")
    log.append(kit.batch(kit.values(50, size=20), compression="gzip"), assign_offsets=True)
    records = kit.read_all(log)
    assert [r.offset for r in records] == list(range(50))
    log.close()


def test_closed_log_refuses_calls(tmp_path, kit):
    log = PartitionLog(tmp_path / "t-0")
    log.close()
    log.close()  # idempotent
    with pytest.raises(Exception, match="closed"):
        log.append(kit.batch(kit.values(1)), assign_offsets=True)
    with pytest.raises(Exception, match="closed"):
        log.read(0, 10)


def test_a_failed_write_leaves_no_partial_batch(tmp_path, kit, monkeypatch):
    import errno
    import os

    log = PartitionLog(tmp_path / "t-0")
    log.append(kit.batch(kit.values(2)), assign_offsets=True)
    size = log.size_in_bytes
    real_write = os.write

    def disk_full(fd, data):
        real_write(fd, bytes(data)[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", disk_full)
    with pytest.raises(LogOfflineError) as failed:
        log.append(kit.batch(kit.values(3)), assign_offsets=True)
    monkeypatch.setattr(os, "write", real_write)
    assert failed.value.error_code == KAFKA_STORAGE_ERROR
    assert (tmp_path / "t-0" / ("0" * 20 + ".log")).stat().st_size == size
    # Offline until reopened (Kafka's failed log directory): nothing is read or appended.
    assert log.offline
    with pytest.raises(LogOfflineError):
        log.read(0, 1000)
    with pytest.raises(LogOfflineError):
        log.append(kit.batch(kit.values(1)), assign_offsets=True)
    log.close()
    log = PartitionLog(tmp_path / "t-0")
    log.append(kit.batch(kit.values(1)), assign_offsets=True)
    assert [r.offset for r in kit.read_all(log)] == [0, 1, 2]
    log.close()


def test_a_segment_that_fails_half_created_leaves_no_file(tmp_path, kit, monkeypatch):
    """open failing (EMFILE) for the new segment's .txnindex, in a roll for a batch with its
    own, higher offsets (KIP-391): the new segment's empty .log file is removed too. Left,
    its name would make the log end jump to the batch's offset at the next start."""
    import errno
    import os

    log = PartitionLog(tmp_path / "t-0", LogConfig.of(segment_bytes=200))
    log.append(kit.batch(kit.values(2, size=60)), assign_offsets=True)
    real_open = os.open

    def no_descriptor(path, flags, mode=0o777, **kwargs):
        if str(path).endswith(".txnindex"):
            raise OSError(errno.EMFILE, "Too many open files")
        return real_open(path, flags, mode, **kwargs)

    monkeypatch.setattr(os, "open", no_descriptor)
    with pytest.raises(LogOfflineError):
        log.append(kit.batch(kit.values(2, size=60), base_offset=100), assign_offsets=False)
    monkeypatch.undo()
    assert sorted(p.name for p in (tmp_path / "t-0").glob("*.log")) == ["0" * 20 + ".log"]
    log = PartitionLog(tmp_path / "t-0", LogConfig.of(segment_bytes=200))
    assert log.log_end_offset == 2
    log.close()


def test_reads_without_index_entries_walk_the_segment_in_windows(tmp_path, kit):
    # index.interval.bytes larger than the segment: every lookup starts at byte 0.
    log = PartitionLog(tmp_path / "t-0", LogConfig.of(index_interval_bytes=2**31 - 1))
    for i in range(12_000):
        log.append(kit.batch([(b"k", b"%06d" % i + b"x" * 100)]), assign_offsets=True)
    assert log.size_in_bytes > 2 * 1024 * 1024
    for offset in (0, 1, 5_000, 9_999, 11_999):
        result = log.read(offset, 1)
        assert [r.value[:6] for r in kit.records(result.records)] == [b"%06d" % offset]
    result = log.read(10_000, 5_000)
    records = kit.records(result.records)
    assert records[0].offset == 10_000 and result.records.nbytes <= 5_000
    assert result.next_offset == records[-1].offset + 1
    log.close()
