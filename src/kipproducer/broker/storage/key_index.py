"""A partition's key -> last offset index, for per-key conditional produce (docs/protocol.md §10).

The answer for a key is the offset of its last committed data record in the partition, or
``KEY_ABSENT`` (-1) when it has no live record: never written, last written as a tombstone
(null value), or its last record is below the log start (deleted by retention or
DeleteRecords). Records of an open transaction are pending: they become the key's answer
when their transaction commits and are dropped when it aborts, so aborted records and
control records never count. Compaction keeps every key's last record (and turns a
tombstone into nothing, which answers the same), so it never changes an answer and the
index needs no rebuild after it.

Memory is bounded by ``max_keys`` committed entries: past it the key with the oldest last
offset is forgotten and ``evicted_up_to`` remembers the highest offset forgotten. A key the
index does not hold is then only known to be absent when that offset is below the log start;
otherwise :meth:`answer` says ``UNKNOWN`` and the broker refuses the condition
(KEY_INDEX_INCOMPLETE) rather than guess.

The index belongs to a :class:`~kipproducer.broker.storage.partition_log.PartitionLog`, which
builds it from the log on the first conditional request after it opened and updates it under
its append lock, in the same step as each append and each transaction marker.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import Final, NamedTuple

from kipproducer.errors import KEY_ABSENT
from kipproducer.records import Batch

UNKNOWN: Final = -2
"""The index forgot this key (bounded memory): the broker cannot answer."""
PENDING: Final = -3
"""Another producer's open transaction wrote this key: the answer waits for its end."""

#: (key, offset, is tombstone) of one data record
KeyedRecord = tuple[bytes, int, bool]


class KeyConditions(NamedTuple):
    """What an append must check before it writes (docs/protocol.md §10)."""

    checks: list[tuple[int, bytes, int]]
    """(record index in the batch or unit, key, expected last offset or KEY_ABSENT)"""
    max_keys: int
    """kip.key.index.max.keys: the bound of the index, should the log build it now"""
    partition_name: str
    """topic-partition, for the messages that name a refused key"""


def keyed_records(batch: Batch, base_offset: int, min_offset: int = 0) -> list[KeyedRecord]:
    """The keyed records of a data batch written at ``base_offset`` (its own base offset may
    still be the producer's), from ``min_offset`` on. Records with a null key have no answer
    to keep. Decompresses a compressed batch."""
    out = []
    shift = base_offset - batch.base_offset
    for record in batch:
        key = record.key
        offset = record.offset + shift  # compacted batches have holes between offsets
        if key is not None and offset >= min_offset:
            out.append((bytes(key), offset, record.value is None))
    return out


class KeyIndex:
    """Committed key -> last offset (a tombstone stored as ``~offset``), in last-offset order
    so the oldest is evicted first, plus each open transaction's pending keys."""

    __slots__ = ("max_keys", "evicted_up_to", "_last", "_pending")

    def __init__(self, max_keys: int) -> None:
        self.max_keys = max_keys
        self.evicted_up_to = -1
        self._last: OrderedDict[bytes, int] = OrderedDict()
        self._pending: dict[int, dict[bytes, int]] = {}  # producer id -> key -> stored value

    def __len__(self) -> int:
        return len(self._last)

    def answer(self, key: bytes, log_start_offset: int, producer_id: int = -1) -> int:
        """The key's last committed offset, ``KEY_ABSENT``, ``UNKNOWN`` or ``PENDING``.

        A producer with an open transaction that wrote the key reads its own pending record
        (the answer the key will have when that transaction commits); another producer's
        pending record makes the answer ``PENDING``."""
        own = self._pending.get(producer_id) if producer_id >= 0 else None
        if own is not None and key in own:
            return _answer_of(own[key], log_start_offset)
        for pid, keys in self._pending.items():
            if pid != producer_id and key in keys:
                return PENDING
        stored = self._last.get(key)
        if stored is not None:
            return _answer_of(stored, log_start_offset)
        if self.evicted_up_to >= log_start_offset:
            return UNKNOWN
        return KEY_ABSENT

    def commit(self, records: Iterable[KeyedRecord]) -> None:
        """Committed records, in offset order."""
        last = self._last
        for key, offset, tombstone in records:
            stored = last.pop(key, None)
            if stored is not None and _offset_of(stored) > offset:
                # (a transaction committing records older than a plain write of the key)
                last[key] = stored
                continue
            last[key] = ~offset if tombstone else offset
        if len(last) > self.max_keys:
            # the oldest last offsets go first; they are the first in order unless a late
            # commit put an older one after a newer one, which only makes eviction cautious
            while len(last) > self.max_keys:
                _, stored = last.popitem(last=False)
                self.evicted_up_to = max(self.evicted_up_to, _offset_of(stored))

    def add_pending(self, producer_id: int, records: Iterable[KeyedRecord]) -> None:
        """Records of ``producer_id``'s open transaction."""
        keys = self._pending.setdefault(producer_id, {})
        for key, offset, tombstone in records:
            keys[key] = ~offset if tombstone else offset

    def end_transaction(self, producer_id: int, commit: bool) -> None:
        """A COMMIT marker makes the producer's pending records committed; ABORT drops them."""
        keys = self._pending.pop(producer_id, None)
        if commit and keys:
            ordered = sorted(keys.items(), key=lambda item: _offset_of(item[1]))
            self.commit((key, _offset_of(stored), stored < 0) for key, stored in ordered)

    def pending_producers(self) -> list[int]:
        return list(self._pending)

    def answers(self, log_start_offset: int) -> dict[bytes, int]:
        """Every key the index holds -> its answer (tests compare a rebuilt index with it)."""
        return {key: _answer_of(stored, log_start_offset) for key, stored in self._last.items()}


def _offset_of(stored: int) -> int:
    return stored if stored >= 0 else ~stored


def _answer_of(stored: int, log_start_offset: int) -> int:
    if stored < 0 or stored < log_start_offset:  # a tombstone, or deleted by retention
        return KEY_ABSENT
    return stored
