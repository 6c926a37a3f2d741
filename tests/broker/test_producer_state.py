"""Idempotent-producer state: duplicates, fencing, sequences, rebuild, producer ids."""

from __future__ import annotations

import pytest

from kipproducer.broker.producer_state import (
    ACCEPTED,
    INVALID_PRODUCER_EPOCH,
    INVALID_RECORD,
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    Duplicate,
    ProducerIdAllocator,
    ProducerStateError,
    ProducerStateManager,
    Rejected,
    in_sequence,
)
from kipproducer.broker.storage import (
    InvalidAppendOffsetError,
    LogConfig,
    OffsetMismatchError,
    PartitionLog,
)
from kipproducer.records import MAX_SEQUENCE

PID = 1234


def appended(state, epoch, first_seq, count, first_offset, timestamp=0):
    """Check then record a batch of ``count`` records, as the log does."""
    verdict = state.check(PID, epoch, first_seq, count - 1)
    if verdict is ACCEPTED:
        state.update(
            PID, epoch, first_seq, count - 1, first_offset, first_offset + count - 1, timestamp
        )
    return verdict


def test_error_codes_match_the_protocol_table():
    from kipproducer.protocol import error_codes

    assert OUT_OF_ORDER_SEQUENCE_NUMBER == error_codes.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert INVALID_PRODUCER_EPOCH == error_codes.INVALID_PRODUCER_EPOCH
    assert INVALID_RECORD == error_codes.INVALID_RECORD


def test_in_sequence_wraps_at_int32_max():
    assert in_sequence(4, 5)
    assert in_sequence(MAX_SEQUENCE, 0)
    assert not in_sequence(4, 6)
    assert in_sequence(-1, 0)


def test_duplicates_of_the_last_five_batches_get_their_offsets():
    state = ProducerStateManager()
    for i in range(6):
        assert appended(state, 0, i * 2, 2, 100 + i * 10, timestamp=i) is ACCEPTED
    # Batches 1..5 are cached; batch 0 (seq 0-1) was evicted.
    for i in range(1, 6):
        assert state.check(PID, 0, i * 2, 1) == Duplicate(100 + i * 10, 101 + i * 10, i)
    verdict = state.check(PID, 0, 0, 1)
    assert isinstance(verdict, Rejected) and verdict.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    # Same first sequence but a different length is not a duplicate.
    assert state.check(PID, 0, 10, 0).error_code == OUT_OF_ORDER_SEQUENCE_NUMBER


def test_gaps_and_repeats_are_out_of_order():
    state = ProducerStateManager()
    assert appended(state, 0, 0, 3, 0) is ACCEPTED
    assert appended(state, 0, 4, 1, 3).error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert appended(state, 0, 2, 1, 3).error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert appended(state, 0, 3, 1, 3) is ACCEPTED


def test_older_epochs_are_fenced_and_new_epochs_start_at_zero():
    state = ProducerStateManager()
    assert appended(state, 5, 0, 2, 0) is ACCEPTED
    assert appended(state, 4, 2, 1, 2).error_code == INVALID_PRODUCER_EPOCH
    assert appended(state, 6, 2, 1, 2).error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert appended(state, 6, 0, 1, 2) is ACCEPTED
    # The new epoch forgot the old epoch's batches: the old batch is now a fenced retry.
    assert state.check(PID, 5, 0, 1).error_code == INVALID_PRODUCER_EPOCH
    assert state.entry(PID).epoch == 6 and len(state.entry(PID).batches) == 1


def test_unknown_producers_may_start_anywhere_but_need_a_sequence():
    state = ProducerStateManager()
    assert state.check(PID, 0, 77, 3) is ACCEPTED
    assert state.check(PID, 0, -1, 0).error_code == INVALID_RECORD
    assert state.check(-1, -1, -1, 5) is ACCEPTED  # not idempotent at all


def test_sequences_wrap_after_int32_max():
    state = ProducerStateManager()
    first = MAX_SEQUENCE - 1
    assert appended(state, 0, first, 4, 0) is ACCEPTED  # MAX-1, MAX, 0, 1
    assert state.entry(PID).last_seq == 1
    assert state.check(PID, 0, first, 3) == Duplicate(0, 3, 0)
    assert appended(state, 0, 2, 1, 4) is ACCEPTED
    state2 = ProducerStateManager()
    assert appended(state2, 0, MAX_SEQUENCE - 1, 2, 0) is ACCEPTED
    assert appended(state2, 0, 0, 1, 2) is ACCEPTED


def test_truncate_head_and_expiry_forget_producers():
    state = ProducerStateManager()
    appended(state, 0, 0, 2, 10, timestamp=1000)
    assert state.truncate_head(12) == [PID]
    assert state.check(PID, 0, 99, 0) is ACCEPTED
    appended(state, 0, 0, 1, 20, timestamp=1000)
    assert state.remove_expired(now_ms=1500, expiration_ms=1000) == []
    assert state.remove_expired(now_ms=2000, expiration_ms=1000) == [PID]


def test_snapshot_round_trip(tmp_path):
    state = ProducerStateManager()
    for i in range(7):
        appended(state, 3, i, 1, i * 2, timestamp=i)
    state.write_snapshot(tmp_path / "snap", 42)
    restored = ProducerStateManager()
    assert restored.load_snapshot(tmp_path / "snap") == 42
    assert list(restored.entry(PID).batches) == list(state.entry(PID).batches)
    assert restored.entry(PID).epoch == 3
    (tmp_path / "bad").write_text("{]")
    assert restored.load_snapshot(tmp_path / "bad") is None and len(restored) == 0
    assert restored.load_snapshot(tmp_path / "missing") is None


def test_producer_ids_are_never_reused_across_restarts(tmp_path):
    path = tmp_path / "producer-ids.json"
    allocator = ProducerIdAllocator(path, block_size=3)
    ids = [allocator.allocate() for _ in range(5)]
    assert ids == [0, 1, 2, 3, 4]
    # A crash loses the rest of the block; the next process starts after it.
    allocator = ProducerIdAllocator(path, block_size=3)
    assert allocator.next_id == 6
    more = [allocator.allocate() for _ in range(4)]
    assert more == [6, 7, 8, 9]
    assert len(set(ids + more)) == 9


# -- through the partition log ------------------------------------------------------------


def idempotent(kit, n, seq, epoch=0, base_offset=0, pid=PID):
    return kit.batch(
        kit.values(n),
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        base_offset=base_offset,
    )


def test_log_answers_a_retried_batch_with_its_original_offsets(tmp_path, kit):
    log = PartitionLog(tmp_path / "t-0")
    first = log.append(idempotent(kit, 3, 0), assign_offsets=True)
    log.append(idempotent(kit, 2, 3), assign_offsets=True)
    retry = log.append(idempotent(kit, 3, 0), assign_offsets=True)
    assert retry.duplicate and (retry.base_offset, retry.last_offset) == (0, 2)
    assert first.base_offset == 0 and log.log_end_offset == 5
    with pytest.raises(ProducerStateError) as excinfo:
        log.append(idempotent(kit, 1, 9), assign_offsets=True)
    assert excinfo.value.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    log.append(idempotent(kit, 1, 0, epoch=1), assign_offsets=True)
    with pytest.raises(ProducerStateError) as excinfo:
        log.append(idempotent(kit, 1, 1, epoch=0), assign_offsets=True)
    assert excinfo.value.error_code == INVALID_PRODUCER_EPOCH
    assert log.log_end_offset == 6
    log.close()


def test_duplicate_check_comes_before_the_explicit_offset_check(tmp_path, kit):
    # docs/KIP-WIRE §4: a retried USE_OFFSETS batch below the log end still succeeds.
    log = PartitionLog(tmp_path / "t-0")
    log.append(idempotent(kit, 2, 0, base_offset=100), assign_offsets=False)
    log.append(idempotent(kit, 2, 2, base_offset=500), assign_offsets=False)
    retry = log.append(idempotent(kit, 2, 0, base_offset=100), assign_offsets=False)
    assert retry.duplicate and (retry.base_offset, retry.last_offset) == (100, 101)
    assert retry.log_end_offset == 502
    # Sequences count records, not offsets: the gap 102..499 does not matter.
    log.append(idempotent(kit, 1, 4, base_offset=900), assign_offsets=False)
    # Not a duplicate: the offset check applies.
    with pytest.raises(InvalidAppendOffsetError):
        log.append(idempotent(kit, 1, 5, base_offset=600), assign_offsets=False)
    # KIP-27: a retry whose first attempt landed succeeds despite the log end having moved.
    retry = log.append(idempotent(kit, 1, 4), assign_offsets=True, expected_base_offset=900)
    assert retry.duplicate and retry.base_offset == 900
    with pytest.raises(OffsetMismatchError):
        log.append(idempotent(kit, 1, 5), assign_offsets=True, expected_base_offset=900)
    log.close()


@pytest.mark.parametrize("keep_snapshot", [True, False])
def test_producer_state_is_rebuilt_from_the_log_on_restart(tmp_path, kit, keep_snapshot):
    directory = tmp_path / "t-0"
    config = LogConfig.of(segment_bytes=400)
    log = PartitionLog(directory, config)
    seq = 0
    for _ in range(8):
        log.append(idempotent(kit, 2, seq), assign_offsets=True)
        if seq == 0:
            log.append(idempotent(kit, 1, 0, pid=99), assign_offsets=True)
        seq += 2
    assert len(log.segment_base_offsets) > 2
    before = list(log.producer_state.entry(PID).batches)
    log.close_handles()  # crash: the snapshot from close is not written
    if not keep_snapshot:
        (directory / "producer-state.snapshot").unlink(missing_ok=True)
    log = PartitionLog(directory, config)
    assert list(log.producer_state.entry(PID).batches) == before
    assert log.producer_state.entry(99).last_seq == 0
    retry = log.append(idempotent(kit, 2, 12), assign_offsets=True)
    assert retry.duplicate and retry.base_offset == before[-2].first_offset
    assert not log.append(idempotent(kit, 2, 16), assign_offsets=True).duplicate
    log.close()


def test_delete_records_forgets_producers_below_the_log_start(tmp_path, kit):
    log = PartitionLog(tmp_path / "t-0")
    log.append(idempotent(kit, 2, 0), assign_offsets=True)
    log.append(kit.batch(kit.values(2)), assign_offsets=True)
    log.delete_records_before(3)
    assert log.producer_state.entry(PID) is None
    # Its history is gone from the log, so any sequence is accepted (Kafka since KIP-360).
    assert log.append(idempotent(kit, 1, 40), assign_offsets=True).base_offset == 4
    log.close()
