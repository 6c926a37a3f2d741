"""Pending transactional offsets (TxnOffsetCommit, KIP-98 / KIP-447) and how a transaction's end
settles them. Pure functions over the dicts that both the store's durable copy and the live
groups keep, so replaying the log and serving requests apply exactly the same rules.
"""

from __future__ import annotations

from collections.abc import Mapping

from .results import TopicPartition
from .stored import CommittedOffset, PendingTxnOffsets


def add_pending(
    pending: dict[int, PendingTxnOffsets],
    producer_id: int,
    producer_epoch: int,
    offsets: Mapping[TopicPartition, CommittedOffset],
) -> None:
    """Record a TxnOffsetCommit: later commits of the same transaction override earlier ones
    partition by partition (Kafka keeps one pending map per producer id)."""
    current = pending.get(producer_id)
    merged = dict(current.offsets) if current is not None else {}
    merged.update(offsets)
    epoch = producer_epoch if current is None else max(producer_epoch, current.producer_epoch)
    pending[producer_id] = PendingTxnOffsets(epoch, merged)


def settles(
    pending: Mapping[int, PendingTxnOffsets], producer_id: int, producer_epoch: int
) -> bool:
    """Whether ending the producer's transaction with this epoch changes anything.

    Nothing pending: a repeated completion (the transaction coordinator re-sends markers after
    a restart) or the group was deleted meanwhile. Pending offsets of a newer epoch belong to
    a later transaction that a late completion of the old one must not touch. The coordinator
    bumps the epoch when it aborts on a timeout or a fencing InitProducerId, so a newer epoch
    than the offsets' is normal.
    """
    current = pending.get(producer_id)
    return current is not None and producer_epoch >= current.producer_epoch


def end_transaction(
    committed: dict[TopicPartition, CommittedOffset],
    pending: dict[int, PendingTxnOffsets],
    producer_id: int,
    producer_epoch: int,
    commit: bool,
) -> bool:
    """Commit (into ``committed``) or drop the producer's pending offsets; False if ``settles``
    says there is nothing to do.

    On commit, a pending offset replaces the committed one only if its record was written later
    (Kafka compares the records' offsets in ``__consumer_offsets``): a plain OffsetCommit that
    arrived while the transaction was open wins over the transaction's older offset.
    """
    if not settles(pending, producer_id, producer_epoch):
        return False
    ended = pending.pop(producer_id)
    if commit:
        for tp, offset in ended.offsets.items():
            existing = committed.get(tp)
            if existing is None or offset.record_seq > existing.record_seq:
                committed[tp] = offset
    return True


def pending_partitions(pending: Mapping[int, PendingTxnOffsets]) -> set[TopicPartition]:
    """Partitions some open transaction has offsets for (OffsetFetch's unstable partitions)."""
    return {tp for entry in pending.values() for tp in entry.offsets}
