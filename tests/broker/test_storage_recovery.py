"""Restart and crash recovery: torn tails, corrupt batches, missing or damaged indexes."""

from __future__ import annotations

import logging
import os

import pytest

from kipproducer.broker.storage import LogConfig, LogOfflineError, PartitionLog
from kipproducer.records import decode_batches


def fill(log, kit, batches=20, records=3, size=20):
    expected = []
    for i in range(batches):
        values = kit.values(records, prefix=b"%d-" % i, size=size)
        result = log.append(kit.batch(values, timestamp=1000 + i), assign_offsets=True)
        expected += [(result.base_offset + j, v) for j, (_, v) in enumerate(values)]
    return expected


def as_pairs(records):
    return [(r.offset, r.value) for r in records]


def segment_path(directory, base, suffix=".log"):
    return directory / f"{base:020d}{suffix}"


def test_close_and_reopen_keeps_everything(tmp_path, kit):
    directory = tmp_path / "t-0"
    config = LogConfig.of(segment_bytes=1000, index_interval_bytes=100)
    log = PartitionLog(directory, config)
    expected = fill(log, kit)
    log.append(kit.batch(kit.values(1), base_offset=500), assign_offsets=False)
    expected.append((500, b"v0"))
    before = (log.segment_base_offsets, log.log_end_offset, log.size_in_bytes)
    timestamps = (log.offset_for_timestamp(1005), log.max_timestamp_offset())
    log.close()

    log = PartitionLog(directory, config)
    assert (log.segment_base_offsets, log.log_end_offset, log.size_in_bytes) == before
    assert (log.offset_for_timestamp(1005), log.max_timestamp_offset()) == timestamps
    assert log.recovery_point == log.log_end_offset
    assert as_pairs(kit.read_all(log, 0)) == expected
    assert log.append(kit.batch(kit.values(1)), assign_offsets=True).base_offset == 501
    log.close()


def test_torn_tail_after_a_crash_is_truncated(tmp_path, kit, caplog):
    directory = tmp_path / "t-0"
    log = PartitionLog(directory)
    expected = fill(log, kit, batches=10)
    last_size = log.size_in_bytes
    torn = kit.batch(kit.values(3, size=200))
    log.append(torn, assign_offsets=True)
    log.close_handles()  # kill -9: nothing flushed, no state written
    # Only part of the last batch reached the disk.
    os.truncate(segment_path(directory, 0), last_size + len(torn) // 2)

    with caplog.at_level(logging.WARNING, logger="kipproducer.broker.storage"):
        log = PartitionLog(directory)
    assert "truncated" in caplog.text
    assert log.log_end_offset == expected[-1][0] + 1
    assert log.size_in_bytes == last_size
    assert as_pairs(kit.read_all(log)) == expected
    # The next append takes the offset the lost batch had.
    assert log.append(kit.batch(kit.values(1)), assign_offsets=True).base_offset == 30
    log.close()


def test_garbage_after_the_last_batch_is_truncated(tmp_path, kit):
    directory = tmp_path / "t-0"
    log = PartitionLog(directory)
    expected = fill(log, kit, batches=5)
    size = log.size_in_bytes
    log.close_handles()
    with open(segment_path(directory, 0), "ab") as f:
        f.write(b"\x00" * 100)  # a file extended by the OS but never written
    log = PartitionLog(directory)
    assert log.size_in_bytes == size
    assert as_pairs(kit.read_all(log)) == expected
    log.close()


def test_corrupt_crc_in_the_tail_truncates_from_that_batch(tmp_path, kit):
    directory = tmp_path / "t-0"
    log = PartitionLog(directory, LogConfig.of(segment_bytes=2000))
    expected = fill(log, kit, batches=40)
    active_base = log.segment_base_offsets[-1]
    log.close_handles()
    path = segment_path(directory, active_base)
    batches = list(decode_batches(path.read_bytes(), validate=False))
    victim = batches[2]
    data = bytearray(path.read_bytes())
    data[victim.position + 70] ^= 0xFF  # a record byte: covered by the CRC
    path.write_bytes(data)

    log = PartitionLog(directory, LogConfig.of(segment_bytes=2000))
    assert log.log_end_offset == victim.base_offset
    assert as_pairs(kit.read_all(log)) == [p for p in expected if p[0] < victim.base_offset]
    log.close()


def test_clean_shutdown_trusts_the_log_and_skips_validation(tmp_path, kit):
    # After a clean close the recovery point is the log end: a later bit flip is not looked
    # for on open (as in Kafka), so the open is cheap.
    directory = tmp_path / "t-0"
    log = PartitionLog(directory)
    fill(log, kit, batches=5)
    end = log.log_end_offset
    log.close()
    path = segment_path(directory, 0)
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF
    path.write_bytes(data)
    log = PartitionLog(directory)
    assert log.log_end_offset == end
    log.close()


def test_missing_and_corrupt_indexes_are_rebuilt(tmp_path, kit):
    directory = tmp_path / "t-0"
    config = LogConfig.of(segment_bytes=1500, index_interval_bytes=100)
    log = PartitionLog(directory, config)
    expected = fill(log, kit, batches=40)
    bases = log.segment_base_offsets
    assert len(bases) >= 3
    lookup = log.offset_for_timestamp(1020)
    log.close()
    index = segment_path(directory, bases[0], ".index")
    good_index = index.read_bytes()
    assert good_index
    index.unlink()
    segment_path(directory, bases[0], ".timeindex").unlink()
    segment_path(directory, bases[1], ".index").write_bytes(b"\x00" * 16)  # not increasing
    segment_path(directory, bases[2], ".index").write_bytes(b"\x01\x02\x03")  # partial entry

    log = PartitionLog(directory, config)
    assert index.read_bytes() == good_index
    assert segment_path(directory, bases[0], ".timeindex").exists()
    assert log.offset_for_timestamp(1020) == lookup
    assert as_pairs(kit.read_all(log)) == expected
    for offset, value in expected[::7]:
        assert value in [r.value for r in kit.records(log.read(offset, 1).records)]
    log.close()


def test_leftovers_of_an_interrupted_compaction_are_removed(tmp_path, kit):
    directory = tmp_path / "t-0"
    log = PartitionLog(directory)
    expected = fill(log, kit, batches=3)
    log.close()
    leftover = directory / ("0" * 20 + ".log.cleaned")
    leftover.write_bytes(b"partial")
    (directory / "partition-state.json.tmp").write_bytes(b"{")
    log = PartitionLog(directory)
    assert not leftover.exists()
    assert not (directory / "partition-state.json.tmp").exists()
    assert as_pairs(kit.read_all(log)) == expected
    log.close()


def test_a_damaged_segment_with_a_successor_is_not_cut(tmp_path, kit, caplog):
    # A segment is fsynced before the next one is created, so an OS crash cannot tear a
    # segment that has a successor: a bad tail there is damage to durable data. Cutting it
    # would leave a hole in the offsets; the partition goes offline instead, files kept.
    directory = tmp_path / "t-0"
    config = LogConfig.of(segment_bytes=1000)
    log = PartitionLog(directory, config)
    fill(log, kit, batches=30)
    bases = log.segment_base_offsets
    log.close_handles()
    path = segment_path(directory, bases[1])
    size = path.stat().st_size
    os.truncate(path, size - 10)
    with caplog.at_level(logging.ERROR, logger="kipproducer.broker.storage"):
        log = PartitionLog(directory, config)
    assert log.offline
    assert f"segment {bases[1]} is damaged" in caplog.text and "not truncated" in caplog.text
    assert path.stat().st_size == size - 10
    with pytest.raises(LogOfflineError):
        log.read(0, 1000)
    log.close()


def test_unreadable_state_file_means_full_recovery(tmp_path, kit):
    directory = tmp_path / "t-0"
    log = PartitionLog(directory)
    expected = fill(log, kit, batches=4)
    log.close()
    (directory / "partition-state.json").write_text("not json")
    log = PartitionLog(directory)
    assert as_pairs(kit.read_all(log)) == expected
    log.close()
