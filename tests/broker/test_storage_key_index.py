"""The per-partition key -> last offset index (storage/key_index.py, docs/protocol.md §10), on
its own and inside a PartitionLog: answers, transactions, the memory bound, and a rebuild
from the log that answers the same."""

from __future__ import annotations

from kipproducer.broker.storage.key_index import PENDING, UNKNOWN, KeyConditions, KeyIndex
from kipproducer.broker.storage.partition_log import PartitionLog
from kipproducer.errors import KEY_ABSENT
from kipproducer.records import encode_batch


def test_answers_tombstones_and_the_log_start():
    index = KeyIndex(100)
    index.commit([(b"a", 0, False), (b"b", 1, False), (b"a", 2, False), (b"b", 3, True)])
    assert index.answer(b"a", 0) == 2
    assert index.answer(b"b", 0) == KEY_ABSENT  # last written as a tombstone
    assert index.answer(b"never", 0) == KEY_ABSENT
    assert index.answer(b"a", 3) == KEY_ABSENT  # its last record is below the log start


def test_transactions_are_pending_until_their_marker():
    index = KeyIndex(100)
    index.commit([(b"k", 0, False)])
    index.add_pending(7, [(b"k", 1, False)])
    assert index.answer(b"k", 0) == PENDING
    assert index.answer(b"k", 0, producer_id=7) == 1  # its own pending record
    index.end_transaction(7, commit=False)
    assert index.answer(b"k", 0) == 0
    index.add_pending(8, [(b"k", 2, False)])
    index.commit([(b"k", 3, False)])  # a plain write while the transaction is open
    index.end_transaction(8, commit=True)
    assert index.answer(b"k", 0) == 3  # the higher offset stays the last one


def test_the_bound_forgets_the_oldest_and_never_guesses():
    index = KeyIndex(2)
    index.commit([(b"a", 0, False), (b"b", 1, False), (b"c", 2, False)])
    assert len(index) == 2 and index.evicted_up_to == 0
    assert index.answer(b"a", 0) == UNKNOWN
    assert index.answer(b"new", 0) == UNKNOWN  # it may have been one of the forgotten
    assert index.answer(b"c", 0) == 2
    assert index.answer(b"new", 1) == KEY_ABSENT  # what was forgotten is below the log start


def test_partition_log_rebuilds_the_same_answers(tmp_path):
    with PartitionLog(tmp_path / "t-0") as log:
        log.append(bytearray(encode_batch([(b"a", b"1", [], 1), (b"b", b"1", [], 1)])),
                   assign_offsets=True)
        log.key_index(1000)  # built now, then kept up to date by every append and marker
        log.append(bytearray(encode_batch([(b"a", b"2", [], 2)], producer_id=5,
                                          producer_epoch=0, base_sequence=0,
                                          transactional=True)), assign_offsets=True)
        log.append_marker(5, 0, commit=True)
        log.append(bytearray(encode_batch([(b"b", None, [], 3)], producer_id=6,
                                          producer_epoch=0, base_sequence=0,
                                          transactional=True)), assign_offsets=True)
        log.append_marker(6, 0, commit=False)  # the aborted tombstone never counts
        log.append(bytearray(encode_batch([(b"c", b"1", [], 4)], producer_id=9,
                                          producer_epoch=0, base_sequence=0,
                                          transactional=True)), assign_offsets=True)
        live = log.key_index(1000)
        before = live.answers(log.log_start_offset)
        assert before == {b"a": 2, b"b": 1}
        assert live.answer(b"c", 0) == PENDING  # producer 9's transaction is still open
        log.append(bytearray(encode_batch([(b"b", b"x", [], 5)])), assign_offsets=True,
                   key_conditions=KeyConditions([(0, b"b", 1)], 1000, "t-0"))
        assert log.key_index(1000).answer(b"b", 0) == 7
    with PartitionLog(tmp_path / "t-0") as reopened:
        rebuilt = reopened.key_index(1000)
        assert rebuilt.answers(reopened.log_start_offset) == {b"a": 2, b"b": 7}
        assert rebuilt.answer(b"c", 0) == PENDING
