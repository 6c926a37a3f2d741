"""Open transactions in the producer state: opened by data, closed by markers, kept safe."""

from __future__ import annotations

import pytest

from kipproducer.broker.producer_state import (
    INVALID_PRODUCER_EPOCH,
    TRANSACTION_COORDINATOR_FENCED,
    CompletedTxn,
    ProducerStateManager,
    read_end_txn_marker,
)
from kipproducer.broker.storage.partition_log import build_end_txn_marker
from kipproducer.protocol import error_codes as ec
from kipproducer.records import decode_batches, encode_batch


def txn_data(
    manager: ProducerStateManager, pid: int, first: int, last: int, *, seq: int = 0, epoch: int = 0
) -> None:
    manager.update(pid, epoch, seq, last - first, first, last, 1_000, is_transactional=True)


def test_error_codes_match_kafka():
    assert TRANSACTION_COORDINATOR_FENCED == ec.error_code("TRANSACTION_COORDINATOR_FENCED") == 52


def test_first_transactional_batch_opens_the_transaction_and_later_ones_do_not_move_it():
    manager = ProducerStateManager()
    assert manager.first_unstable_offset() is None
    txn_data(manager, 1, 5, 7)
    txn_data(manager, 1, 8, 9, seq=3)
    txn_data(manager, 2, 3, 3)  # an id may open later at a lower offset only in tests
    manager.update(3, 0, 0, 0, 10, 10, 1_000)  # idempotent, not transactional
    assert manager.ongoing_transactions() == {1: 5, 2: 3}
    assert manager.first_unstable_offset() == 3
    assert manager.entry(1).current_txn_first_offset == 5
    assert manager.entry(3).current_txn_first_offset is None


def test_complete_txn_closes_it_and_reports_the_next_unstable_offset():
    manager = ProducerStateManager()
    txn_data(manager, 1, 0, 2)
    txn_data(manager, 2, 3, 4)
    done = manager.complete_txn(2, 0, 5, 2_000, commit=False, coordinator_epoch=7)
    assert done == CompletedTxn(2, 3, 5, 0, aborted=True)  # producer 1 still holds offset 0
    assert manager.entry(2).coordinator_epoch == 7
    done = manager.complete_txn(1, 0, 6, 2_000, commit=True, coordinator_epoch=7)
    assert done == CompletedTxn(1, 0, 6, 7, aborted=False)
    assert manager.ongoing_transactions() == {}
    assert manager.first_unstable_offset() is None


def test_a_marker_without_an_open_transaction_completes_an_empty_one():
    manager = ProducerStateManager()
    done = manager.complete_txn(4, 1, 9, 2_000, commit=False, coordinator_epoch=0)
    assert done == CompletedTxn(4, 9, 9, 10, aborted=True)
    assert manager.entry(4).epoch == 1


def test_marker_checks_producer_and_coordinator_epochs():
    manager = ProducerStateManager()
    assert manager.check_marker(1, 0, 0) is None  # unknown producer: nothing to fence
    txn_data(manager, 1, 0, 0, epoch=3)
    manager.complete_txn(1, 3, 1, 2_000, commit=True, coordinator_epoch=5)
    older = manager.check_marker(1, 2, 5)
    assert older is not None and older.error_code == INVALID_PRODUCER_EPOCH
    fenced = manager.check_marker(1, 3, 4)
    assert fenced is not None and fenced.error_code == TRANSACTION_COORDINATOR_FENCED
    assert manager.check_marker(1, 4, 5) is None


def test_a_marker_with_a_newer_epoch_fences_the_older_epoch():
    manager = ProducerStateManager()
    txn_data(manager, 1, 0, 1, epoch=0)
    manager.complete_txn(1, 1, 2, 2_000, commit=False, coordinator_epoch=0)
    rejected = manager.check(1, 0, 2, 0)
    assert rejected.error_code == INVALID_PRODUCER_EPOCH
    # The new epoch starts its sequences at 0.
    assert manager.check(1, 1, 5, 0).error_code == ec.error_code("OUT_OF_ORDER_SEQUENCE_NUMBER")
    assert manager.check(1, 1, 0, 0).__class__.__name__ == "Accepted"


def test_open_transactions_survive_expiry_and_head_truncation():
    manager = ProducerStateManager()
    txn_data(manager, 1, 0, 1)
    manager.update(2, 0, 0, 0, 2, 2, 1_000)
    assert manager.truncate_head(100) == [2]
    assert manager.remove_expired(10**12, 1) == []
    assert manager.ongoing_transactions() == {1: 0}


def test_snapshot_round_trip_keeps_open_transactions():
    manager = ProducerStateManager()
    txn_data(manager, 1, 4, 6)
    txn_data(manager, 2, 7, 7)
    manager.complete_txn(2, 0, 8, 2_000, commit=True, coordinator_epoch=3)
    copy = ProducerStateManager()
    assert copy.load_document(manager.to_document(9)) == 9
    assert copy.ongoing_transactions() == {1: 4}
    assert copy.entry(2).coordinator_epoch == 3
    assert copy.to_document(9) == manager.to_document(9)


def test_replaying_the_batches_rebuilds_the_same_state():
    batches = [
        encode_batch([(b"k", b"v", None, 1)], base_offset=0, producer_id=1, producer_epoch=0,
                     base_sequence=0, transactional=True),
        encode_batch([(b"k", b"v", None, 1)] * 2, base_offset=1, producer_id=2,
                     producer_epoch=0, base_sequence=0, transactional=True),
        bytes(build_end_txn_marker(1, 0, commit=False, coordinator_epoch=2, timestamp=5,
                                   base_offset=3)),
        encode_batch([(b"k", b"v", None, 1)], base_offset=4, producer_id=1, producer_epoch=0,
                     base_sequence=1, transactional=True),
    ]
    replayed = ProducerStateManager()
    completed = [
        replayed.apply_batch(batch)
        for data in batches
        for batch in decode_batches(data, validate=True, strict=True)
    ]
    assert completed[:2] == [None, None] and completed[3] is None
    assert completed[2] == CompletedTxn(1, 0, 3, 1, aborted=True)
    assert replayed.ongoing_transactions() == {2: 1, 1: 4}
    assert replayed.entry(1).coordinator_epoch == 2


@pytest.mark.parametrize("commit", [True, False])
def test_marker_batch_layout(commit):
    raw = bytes(build_end_txn_marker(42, 7, commit=commit, coordinator_epoch=9, timestamp=123,
                                     base_offset=17))
    (batch,) = decode_batches(raw, validate=True, strict=True)
    assert batch.is_control and batch.is_transactional
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (42, 7, -1)
    assert (batch.base_offset, batch.last_offset_delta, batch.record_count) == (17, 0, 1)
    (record,) = list(batch)
    assert record.key == b"\x00\x00\x00" + (b"\x01" if commit else b"\x00")
    assert record.value == b"\x00\x00\x00\x00\x00\x09"
    marker = read_end_txn_marker(batch)
    assert marker is not None and marker.commit is commit and marker.coordinator_epoch == 9


def test_other_control_records_are_not_markers():
    # A record whose key has type 3 (a KRaft control record type) is not a marker.
    plain = encode_batch([(b"\x00\x00\x00\x03", b"", None, 1)], producer_id=-1)
    (other,) = decode_batches(plain, validate=False, strict=False)
    assert read_end_txn_marker(other) is None
