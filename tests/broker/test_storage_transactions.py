"""Transactions in the partition log: markers, last stable offset, the aborted-transaction
index, read_committed reads, recovery after clean and unclean shutdowns, retention and
compaction."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from kipproducer.broker.producer_state import ProducerStateError
from kipproducer.broker.storage import LogConfig, PartitionLog
from kipproducer.broker.storage.partition_log import PRODUCER_SNAPSHOT_FILE
from kipproducer.broker.storage.txn_index import ENTRY_SIZE
from kipproducer.protocol import error_codes as ec
from kipproducer.records import decode_batches, encode_batch

DAY_MS = 86_400_000


def txn_batch(pid: int, seq: int, *records: tuple[bytes, bytes], epoch: int = 0) -> bytearray:
    return bytearray(
        encode_batch(
            [(k, v, None, None) for k, v in records],  # now: no time-based rolls
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
            transactional=True,
        )
    )


def plain_batch(*records: tuple[bytes, bytes]) -> bytearray:
    return bytearray(encode_batch([(k, v, None, None) for k, v in records]))


def all_batches(log: PartitionLog, *, committed: bool = False):
    """Every batch from the log start (read_committed: below the LSO only)."""
    out = []
    offset = log.log_start_offset
    while True:
        result = log.read(offset, 1 << 20, read_committed=committed)
        if not result.records:
            return out
        out.extend(decode_batches(result.records, validate=True, strict=True))
        offset = result.next_offset


def data_offsets(log: PartitionLog, *, committed: bool = False) -> list[int]:
    return [r.offset for b in all_batches(log, committed=committed) if not b.is_control for r in b]


def state_of(log: PartitionLog) -> tuple:
    producers = sorted(
        (
            e.producer_id,
            e.epoch,
            e.coordinator_epoch,
            e.current_txn_first_offset,
            tuple(e.batches),
        )
        for e in log.producer_state
    )
    return (
        log.log_end_offset,
        log.last_stable_offset,
        log.ongoing_transactions(),
        log.aborted_transactions(0, log.log_end_offset),
        producers,
    )


def test_markers_take_one_offset_and_move_the_last_stable_offset(tmp_path):
    log = PartitionLog(tmp_path / "t-0")
    assert log.last_stable_offset == 0
    assert log.append(txn_batch(1, 0, (b"a", b"1"), (b"b", b"1")), assign_offsets=True)[:2] == (
        0,
        1,
    )
    assert (log.last_stable_offset, log.high_watermark) == (0, 2)
    log.append(plain_batch((b"c", b"plain")), assign_offsets=True)  # offset 2
    log.append(txn_batch(2, 0, (b"d", b"2")), assign_offsets=True)  # offset 3
    log.append(txn_batch(1, 2, (b"e", b"1")), assign_offsets=True)  # offset 4
    assert log.ongoing_transactions() == {1: 0, 2: 3}
    assert log.last_stable_offset == 0

    commit = log.append_marker(1, 0, commit=True, coordinator_epoch=1)
    assert commit is not None
    assert (commit.base_offset, commit.last_offset, commit.log_end_offset) == (5, 5, 6)
    assert log.last_stable_offset == 3
    assert log.ongoing_transactions() == {2: 3}

    abort = log.append_marker(2, 0, commit=False, coordinator_epoch=1)
    assert abort is not None and abort.base_offset == 6
    assert log.last_stable_offset == log.high_watermark == 7
    assert log.ongoing_transactions() == {}
    assert log.aborted_transactions(0, 7) == [(2, 3)]
    assert log.aborted_transactions(6, 7) == [(2, 3)]  # the marker is in range
    assert log.aborted_transactions(0, 3) == []  # ends before the first offset
    assert log.aborted_transactions(7, 8) == []  # starts after the marker

    markers = [b for b in all_batches(log) if b.is_control]
    assert [(b.base_offset, b.producer_id, list(b)[0].key[3]) for b in markers] == [
        (5, 1, 1),
        (6, 2, 0),
    ]
    log.close()


def test_read_committed_stops_at_the_lso_and_lists_aborted_transactions(tmp_path):
    log = PartitionLog(tmp_path / "t-0")
    log.append(txn_batch(1, 0, (b"a", b"x")), assign_offsets=True)  # 0
    log.append_marker(1, 0, commit=False)  # 1
    log.append(plain_batch((b"b", b"y")), assign_offsets=True)  # 2
    log.append(txn_batch(2, 0, (b"c", b"z")), assign_offsets=True)  # 3, open
    log.append(plain_batch((b"d", b"w")), assign_offsets=True)  # 4
    result = log.read(0, 1 << 20, read_committed=True)
    assert result.last_stable_offset == 3
    assert result.next_offset == 3
    assert result.aborted_transactions == [(1, 0)]
    assert data_offsets(log, committed=True) == [0, 2]  # a consumer then drops offset 0
    at_lso = log.read(3, 1 << 20, read_committed=True)
    assert not at_lso.records and at_lso.aborted_transactions == []
    uncommitted = log.read(0, 1 << 20)
    assert uncommitted.aborted_transactions is None
    assert uncommitted.last_stable_offset == 3
    assert data_offsets(log) == [0, 2, 3, 4]
    log.append_marker(2, 0, commit=True)
    assert data_offsets(log, committed=True) == [0, 2, 3, 4]
    log.close()


def test_only_if_ongoing_writes_nothing_without_an_open_transaction(tmp_path):
    log = PartitionLog(tmp_path / "t-0")
    assert log.append_marker(1, 0, commit=True, only_if_ongoing=True) is None
    assert log.log_end_offset == 0
    log.append(txn_batch(1, 0, (b"a", b"x")), assign_offsets=True)
    assert log.append_marker(1, 0, commit=True, only_if_ongoing=True) is not None
    assert log.append_marker(1, 0, commit=True, only_if_ongoing=True) is None
    assert log.log_end_offset == 2
    log.close()


def test_marker_epoch_rules(tmp_path):
    log = PartitionLog(tmp_path / "t-0")
    log.append(txn_batch(1, 0, (b"a", b"x"), epoch=3), assign_offsets=True)
    with pytest.raises(ProducerStateError) as older:
        log.append_marker(1, 2, commit=False)
    assert older.value.error_code == ec.INVALID_PRODUCER_EPOCH
    assert log.log_end_offset == 1  # nothing written
    log.append_marker(1, 4, commit=False, coordinator_epoch=2)  # a bumped epoch aborts
    with pytest.raises(ProducerStateError) as fenced_data:
        log.append(txn_batch(1, 1, (b"a", b"late"), epoch=3), assign_offsets=True)
    assert fenced_data.value.error_code == ec.INVALID_PRODUCER_EPOCH
    with pytest.raises(ProducerStateError) as fenced_coordinator:
        log.append_marker(1, 4, commit=True, coordinator_epoch=1)
    assert fenced_coordinator.value.error_code == ec.TRANSACTION_COORDINATOR_FENCED
    log.append(txn_batch(1, 0, (b"a", b"new"), epoch=4), assign_offsets=True)
    assert log.ongoing_transactions() == {1: 2}
    log.close()


def test_markers_follow_flush_messages(tmp_path):
    log = PartitionLog(tmp_path / "t-0", LogConfig.of(flush_messages=1))
    log.append(txn_batch(1, 0, (b"a", b"x")), assign_offsets=True)
    log.append_marker(1, 0, commit=False)
    assert log.recovery_point == log.log_end_offset == 2
    log.close()


def test_log_append_time_topics_stamp_markers(tmp_path):
    log = PartitionLog(tmp_path / "t-0", LogConfig.of(message_timestamp_type="LogAppendTime"))
    before = int(time.time() * 1000)
    result = log.append_marker(1, 0, commit=True)
    assert result is not None and result.log_append_time >= before
    (marker,) = all_batches(log)
    assert marker.max_timestamp == result.log_append_time
    log.close()


def build_mixed_log(directory: Path, config: LogConfig | None = None) -> PartitionLog:
    """Aborted, committed and open transactions over three segments."""
    log = PartitionLog(directory, config)
    log.append(txn_batch(1, 0, (b"a", b"1")), assign_offsets=True)  # 0
    log.append(plain_batch((b"p", b"0")), assign_offsets=True)  # 1
    log.append(txn_batch(2, 0, (b"b", b"2")), assign_offsets=True)  # 2
    log.roll()
    log.append(txn_batch(1, 1, (b"a", b"1b")), assign_offsets=True)  # 3
    log.append_marker(1, 0, commit=False, coordinator_epoch=1)  # 4: aborts 0..4
    log.append(txn_batch(3, 0, (b"c", b"3")), assign_offsets=True)  # 5
    log.roll()
    log.append_marker(2, 0, commit=True, coordinator_epoch=1)  # 6
    log.append(txn_batch(1, 2, (b"a", b"again")), assign_offsets=True)  # 7
    log.append_marker(1, 0, commit=False, coordinator_epoch=1)  # 8: aborts 7..8
    log.append(txn_batch(4, 0, (b"d", b"4")), assign_offsets=True)  # 9, stays open
    log.append_marker(3, 0, commit=True, coordinator_epoch=1)  # 10
    return log


def expected_mixed_state(log: PartitionLog) -> None:
    assert log.log_end_offset == 11
    assert log.last_stable_offset == 9
    assert log.ongoing_transactions() == {4: 9}
    assert log.aborted_transactions(0, 11) == [(1, 0), (1, 7)]
    assert log.aborted_transactions(5, 7) == []
    assert data_offsets(log, committed=True) == [0, 1, 2, 3, 5, 7]


def test_reopen_after_close_keeps_the_transaction_state(tmp_path):
    log = build_mixed_log(tmp_path / "t-0")
    expected_mixed_state(log)
    before = state_of(log)
    log.close()
    reopened = PartitionLog(tmp_path / "t-0")
    assert state_of(reopened) == before
    expected_mixed_state(reopened)
    reopened.close()


@pytest.mark.parametrize(
    "damage", ["crash", "no_txn_index", "bad_txn_index", "no_snapshot", "flushed_crash"]
)
def test_recovery_rebuilds_the_same_state(tmp_path, damage):
    directory = tmp_path / "t-0"
    log = build_mixed_log(directory)
    before = state_of(log)
    if damage == "crash":
        log.close_handles()  # nothing flushed: every segment is recovered
    elif damage == "flushed_crash":
        log.flush()  # recovery point at the end: segments are trusted, not recovered
        log.checkpoint()
        log.close_handles()
        # The closed segment holding the first abort: its index files check out, so only
        # the missing .txnindex says it must be rebuilt.
        (directory / f"{3:020d}.txnindex").unlink()
    else:
        log.close()
        if damage == "no_txn_index":
            for path in directory.glob("*.txnindex"):
                path.unlink()
        elif damage == "bad_txn_index":
            for path in directory.glob("*.txnindex"):
                with open(path, "ab") as f:
                    f.write(b"\x00\x01\x02")
        else:
            (directory / PRODUCER_SNAPSHOT_FILE).unlink()
    reopened = PartitionLog(directory)
    assert state_of(reopened) == before
    expected_mixed_state(reopened)
    # The rebuilt files hold the entries again.
    sizes = sorted(p.stat().st_size for p in directory.glob("*.txnindex"))
    assert sizes == [0, ENTRY_SIZE, ENTRY_SIZE]
    reopened.close()


def test_a_torn_marker_is_cut_and_its_transaction_is_open_again(tmp_path):
    directory = tmp_path / "t-0"
    log = PartitionLog(directory)
    log.append(txn_batch(1, 0, (b"a", b"1")), assign_offsets=True)
    log.append(txn_batch(2, 0, (b"b", b"2")), assign_offsets=True)
    log.append_marker(1, 0, commit=False)
    before_marker = state_of(log)
    log.append_marker(2, 0, commit=False)
    assert log.aborted_transactions(0, 4) == [(1, 0), (2, 1)]
    log.close_handles()
    (segment,) = directory.glob("*.log")
    os.truncate(segment, segment.stat().st_size - 5)
    reopened = PartitionLog(directory)
    assert state_of(reopened) == before_marker
    assert reopened.last_stable_offset == 1
    assert reopened.aborted_transactions(0, 3) == [(1, 0)]
    assert (directory / segment.name.replace(".log", ".txnindex")).stat().st_size == ENTRY_SIZE
    reopened.close()


def test_head_truncation_keeps_open_transactions_and_deletes_txn_indexes(tmp_path):
    directory = tmp_path / "t-0"
    log = PartitionLog(directory)
    log.append(txn_batch(1, 0, (b"a", b"1")), assign_offsets=True)  # 0, stays open
    log.append(txn_batch(2, 0, (b"b", b"2")), assign_offsets=True)  # 1
    log.append_marker(2, 0, commit=False)  # 2
    log.roll()
    log.append(plain_batch((b"c", b"3")), assign_offsets=True)  # 3
    first_index = directory / f"{0:020d}.txnindex"
    assert first_index.stat().st_size == ENTRY_SIZE
    assert log.delete_records_before(3) == 3
    assert not first_index.exists()
    assert log.ongoing_transactions() == {1: 0}
    assert log.last_stable_offset == 3  # clamped to the log start
    assert 1 not in log.expire_producers(10**13, 1)
    assert log.ongoing_transactions() == {1: 0}
    log.append_marker(1, 0, commit=False)  # 4
    assert log.last_stable_offset == 5
    assert log.aborted_transactions(3, 5) == [(1, 0)]
    log.close()
    reopened = PartitionLog(directory)
    assert reopened.aborted_transactions(3, 5) == [(1, 0)]
    assert reopened.last_stable_offset == 5
    reopened.close()


@pytest.mark.parametrize("keep_snapshot", [True, False])
def test_a_transaction_opened_below_the_log_start_survives_a_crash(tmp_path, keep_snapshot):
    directory = tmp_path / "t-0"
    log = PartitionLog(directory)
    log.append(plain_batch((b"a", b"0")), assign_offsets=True)  # 0
    log.roll()  # the snapshot is taken here, before the transaction
    log.append(txn_batch(1, 0, (b"b", b"1")), assign_offsets=True)  # 1, stays open
    log.append(plain_batch((b"c", b"2")), assign_offsets=True)  # 2
    log.delete_records_before(2)  # inside the active segment: nothing is deleted
    assert log.ongoing_transactions() == {1: 1}
    log.flush()
    log.checkpoint()
    log.close_handles()
    if not keep_snapshot:
        (directory / PRODUCER_SNAPSHOT_FILE).unlink()
    reopened = PartitionLog(directory)
    assert reopened.log_start_offset == 2
    assert reopened.ongoing_transactions() == {1: 1}
    assert reopened.last_stable_offset == 2
    reopened.append_marker(1, 0, commit=False)
    assert reopened.aborted_transactions(2, 4) == [(1, 1)]
    reopened.close()


def test_retention_deletes_the_txn_index_with_its_segment(tmp_path):
    directory = tmp_path / "t-0"
    log = PartitionLog(directory, LogConfig.of(retention_ms=1_000))
    log.append(txn_batch(1, 0, (b"a", b"1")), assign_offsets=True)
    log.append_marker(1, 0, commit=False)
    log.roll()
    log.append(plain_batch((b"c", b"3")), assign_offsets=True)
    assert log.apply_retention(now_ms=int(time.time() * 1000) + DAY_MS) >= 1
    assert not (directory / f"{0:020d}.txnindex").exists()
    assert log.aborted_transactions(0, log.log_end_offset) == []
    log.close()


def compaction_log(directory: Path) -> PartitionLog:
    """Aborted, committed and open transactions for compaction (see the offsets)."""
    log = PartitionLog(directory, LogConfig.of(cleanup_policy="compact", delete_retention_ms=1000))
    log.append(plain_batch((b"a", b"v0")), assign_offsets=True)  # 0
    log.append(txn_batch(1, 0, (b"a", b"bad"), (b"c", b"bad")), assign_offsets=True)  # 1-2
    log.append_marker(1, 0, commit=False)  # 3
    log.append(txn_batch(1, 2, (b"e", b"e1")), assign_offsets=True)  # 4
    log.append_marker(1, 0, commit=True)  # 5
    log.append(txn_batch(2, 0, (b"b", b"old")), assign_offsets=True)  # 6
    log.append_marker(2, 0, commit=True)  # 7
    log.append(txn_batch(2, 1, (b"f", b"f2")), assign_offsets=True)  # 8
    log.append_marker(2, 0, commit=True)  # 9
    log.append(plain_batch((b"b", b"new")), assign_offsets=True)  # 10
    log.roll()
    log.append(txn_batch(3, 0, (b"a", b"open")), assign_offsets=True)  # 11, stays open
    log.roll()
    log.append(plain_batch((b"g", b"g")), assign_offsets=True)  # 12 (active)
    return log


def values(log: PartitionLog) -> list[tuple[int, bytes, bytes]]:
    return [
        (r.offset, r.key, r.value)
        for b in all_batches(log)
        if not b.is_control
        for r in b
    ]


def marker_offsets(log: PartitionLog) -> list[int]:
    return [b.base_offset for b in all_batches(log) if b.is_control]


def test_compaction_with_aborted_committed_and_open_transactions(tmp_path):
    directory = tmp_path / "t-0"
    log = compaction_log(directory)
    assert log.last_stable_offset == 11
    now = int(time.time() * 1000)

    # Markers are younger than delete.retention.ms: only data goes.
    stats = log.compact(now_ms=now)
    assert stats.segments_cleaned == 1
    assert values(log) == [
        (0, b"a", b"v0"),  # the aborted a=bad does not shadow it
        (4, b"e", b"e1"),
        (8, b"f", b"f2"),
        (10, b"b", b"new"),
        (11, b"a", b"open"),  # at the LSO: never cleaned
        (12, b"g", b"g"),
    ]
    assert marker_offsets(log) == [3, 5, 7, 9]
    assert log.aborted_transactions(0, 13) == [(1, 1)]

    # Old markers whose data is gone are removed, with their index entries.
    log.compact(now_ms=now + DAY_MS)
    assert marker_offsets(log) == [5, 9]
    assert log.aborted_transactions(0, 13) == []
    assert (directory / f"{0:020d}.txnindex").stat().st_size == 0
    assert log.last_stable_offset == 11
    assert log.ongoing_transactions() == {3: 11}
    before = state_of(log)
    committed = data_offsets(log, committed=True)
    log.close()

    for path in directory.glob("*.txnindex"):
        path.unlink()
    (directory / PRODUCER_SNAPSHOT_FILE).unlink()
    reopened = PartitionLog(directory)
    assert reopened.last_stable_offset == 11
    assert reopened.ongoing_transactions() == {3: 11}
    assert reopened.aborted_transactions(0, 13) == before[3]
    assert data_offsets(reopened, committed=True) == committed == [0, 4, 8, 10]
    reopened.close()


def test_compaction_stops_at_an_open_transaction(tmp_path):
    log = PartitionLog(tmp_path / "t-0", LogConfig.of(cleanup_policy="compact"))
    log.append(plain_batch((b"a", b"1")), assign_offsets=True)  # 0
    log.append(txn_batch(1, 0, (b"x", b"open")), assign_offsets=True)  # 1, open
    log.roll()
    log.append(plain_batch((b"a", b"2")), assign_offsets=True)  # 2
    log.roll()
    log.append(plain_batch((b"a", b"3")), assign_offsets=True)  # 3
    assert log.compact().segments_cleaned == 0  # the first segment reaches the LSO
    log.append_marker(1, 0, commit=True)
    log.roll()
    log.compact()
    assert [(o, v) for o, k, v in values(log) if k == b"a"] == [(3, b"3")]
    log.close()
