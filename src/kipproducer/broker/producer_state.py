"""The broker's idempotent-producer bookkeeping, as Kafka keeps it per partition.

For each producer id a partition remembers the producer's epoch and its last
``NUM_BATCHES_TO_RETAIN`` (5) batches: first and last sequence, first and last offset and the
batch's timestamp. That is enough to

- answer a retried batch that already landed with its original offsets (``Duplicate``): a
  producer has at most 5 requests in flight per connection, so a retry always matches one of
  the 5;
- fence a zombie producer with an older epoch (INVALID_PRODUCER_EPOCH, 47);
- refuse a batch whose first sequence does not follow the last one
  (OUT_OF_ORDER_SEQUENCE_NUMBER, 45); a new epoch must start at sequence 0. Sequences wrap
  from 2**31-1 to 0 (``kipproducer.records.next_sequence``).

The partition log is the source of truth: ``ProducerStateManager.apply_batch`` replays batch
headers, and a snapshot (``write_snapshot``/``load_snapshot``) only saves replaying the whole
log on restart. Following docs/protocol.md §4 sequences count records, independent of offsets:
the last sequence is ``base sequence + lastOffsetDelta`` (the broker has checked that
lastOffsetDelta == record count - 1), and the offsets cached are the log offsets the batch got.

``ProducerIdAllocator`` hands out producer ids for InitProducerId from a durable counter in
the data dir, so an id is never reused across restarts.

Transactions (KIP-98): a transactional data batch of a producer with no open transaction in
this partition opens one at the batch's first offset (``current_txn_first_offset``); an
end-transaction marker (``complete_txn``, or a control batch replayed by ``apply_batch``)
closes it and yields a ``CompletedTxn``, which the log turns into an aborted-transaction index
entry on abort. The open transactions are also kept in a small map (producer id -> first
offset) so the first unstable offset is found without walking every producer; with no open
transaction it costs nothing. Producers with an open transaction are never forgotten, neither
by expiry nor by head truncation.

Not thread-safe by itself: the partition log calls it under its own lock.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

from kipproducer.errors import KipError
from kipproducer.protocol.error_codes import (
    INVALID_PRODUCER_EPOCH,
    INVALID_RECORD,
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    TRANSACTION_COORDINATOR_FENCED,
)
from kipproducer.records import MAX_SEQUENCE, Batch, next_sequence

from .storage.durable_files import read_checked_json, write_checked_json_atomically
from .storage.errors import DamagedFileError, StorageError

log = logging.getLogger("kipproducer.broker.storage")

NUM_BATCHES_TO_RETAIN: Final = 5
NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1
NO_SEQUENCE: Final = -1
#: Kafka's producer.id.expiration.ms default: a producer idle this long is forgotten.
DEFAULT_PRODUCER_ID_EXPIRATION_MS: Final = 86_400_000

SNAPSHOT_VERSION: Final = 1

# Control record types of an end-transaction marker (Kafka's ControlRecordType).
CONTROL_TYPE_ABORT: Final = 0
CONTROL_TYPE_COMMIT: Final = 1


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """What a partition remembers of one of a producer's recent batches."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


class ProducerStateEntry:
    """One producer's epoch and its last (up to 5) batches in this partition."""

    __slots__ = (
        "producer_id",
        "epoch",
        "batches",
        "last_timestamp",
        "coordinator_epoch",
        "current_txn_first_offset",
    )

    def __init__(self, producer_id: int, epoch: int = NO_PRODUCER_EPOCH) -> None:
        self.producer_id = producer_id
        self.epoch = epoch
        self.batches: deque[BatchMetadata] = deque(maxlen=NUM_BATCHES_TO_RETAIN)
        self.last_timestamp = -1
        self.coordinator_epoch = -1
        self.current_txn_first_offset: int | None = None

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        """Last offset of the producer's newest batch, -1 if none is cached."""
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.epoch:
            return None
        for cached in self.batches:
            if cached.first_seq == first_seq and cached.last_seq == last_seq:
                return cached
        return None

    def __repr__(self) -> str:
        return (
            f"ProducerStateEntry(producer_id={self.producer_id}, epoch={self.epoch}, "
            f"batches={list(self.batches)!r})"
        )


class Accepted:
    """The batch may be appended."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ACCEPTED"


ACCEPTED: Final = Accepted()


@dataclass(frozen=True, slots=True)
class Duplicate:
    """A retry of a batch already in the log: answer with its offsets, append nothing."""

    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class Rejected:
    """The batch must be refused with ``error_code``."""

    error_code: int
    message: str


CheckResult = Accepted | Duplicate | Rejected


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction closed by a marker: what the aborted-transaction index needs."""

    producer_id: int
    first_offset: int  # first data offset; the marker's offset when no data was written
    last_offset: int  # the marker's offset
    last_stable_offset: int  # the partition's first unstable offset right after the marker
    aborted: bool


@dataclass(frozen=True, slots=True)
class EndTxnMarker:
    """The content of a control batch's end-transaction record."""

    commit: bool
    coordinator_epoch: int


def read_end_txn_marker(batch: Batch) -> EndTxnMarker | None:
    """The COMMIT/ABORT marker of a control batch; None for other control records.

    Key: int16 version, int16 type (0 ABORT, 1 COMMIT); value: int16 version, int32
    coordinator epoch. Other types (KRaft's 2..6) and malformed records are not markers.
    """
    for record in batch:
        key, value = record.key, record.value
        if key is None or len(key) < 4:
            return None
        kind = int.from_bytes(key[2:4], "big", signed=True)
        if kind not in (CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT):
            return None
        coordinator_epoch = -1
        if value is not None and len(value) >= 6:
            coordinator_epoch = int.from_bytes(value[2:6], "big", signed=True)
        return EndTxnMarker(kind == CONTROL_TYPE_COMMIT, coordinator_epoch)
    return None


class ProducerStateError(KipError):
    """An append refused by the producer-state checks; ``error_code`` is the Kafka code."""

    def __init__(self, rejection: Rejected) -> None:
        super().__init__(rejection.message)
        self.error_code = rejection.error_code


def in_sequence(last_seq: int, next_seq: int) -> bool:
    """Whether ``next_seq`` directly follows ``last_seq`` (wrapping after 2**31-1 to 0)."""
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == MAX_SEQUENCE)


class BatchHeader(Protocol):
    """The header fields the producer state needs (kipproducer.records.Batch has them)."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_offset_delta: int
    base_offset: int
    max_timestamp: int

    @property
    def last_offset(self) -> int: ...

    @property
    def is_control(self) -> bool: ...

    @property
    def is_transactional(self) -> bool: ...


class ProducerStateManager:
    """Producer id -> ProducerStateEntry for one partition."""

    def __init__(self) -> None:
        self._producers: dict[int, ProducerStateEntry] = {}
        # producer id -> first offset of its open transaction (mirrors the entries)
        self._ongoing: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._producers)

    def __iter__(self) -> Iterator[ProducerStateEntry]:
        return iter(self._producers.values())

    def entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self._producers.get(producer_id)

    def clear(self) -> None:
        self._producers.clear()
        self._ongoing.clear()

    # -- transactions ------------------------------------------------------------------------

    def ongoing_transactions(self) -> dict[int, int]:
        """Producer id -> first offset of its open transaction."""
        return dict(self._ongoing)

    def first_unstable_offset(self) -> int | None:
        """First offset of the earliest open transaction, None when none is open."""
        if not self._ongoing:
            return None
        return min(self._ongoing.values())

    def check_marker(
        self, producer_id: int, producer_epoch: int, coordinator_epoch: int
    ) -> Rejected | None:
        """Kafka's checks for an end-transaction marker: not from an older producer epoch
        (47), not from an older coordinator epoch than the last marker's (52)."""
        entry = self._producers.get(producer_id)
        if entry is None:
            return None
        if producer_epoch < entry.epoch:
            return Rejected(
                INVALID_PRODUCER_EPOCH,
                f"marker for producer {producer_id} has epoch {producer_epoch}, older than the "
                f"current epoch {entry.epoch}",
            )
        if coordinator_epoch < entry.coordinator_epoch:
            return Rejected(
                TRANSACTION_COORDINATOR_FENCED,
                f"marker for producer {producer_id} comes from coordinator epoch "
                f"{coordinator_epoch}, older than {entry.coordinator_epoch}",
            )
        return None

    def complete_txn(
        self,
        producer_id: int,
        producer_epoch: int,
        marker_offset: int,
        timestamp: int,
        *,
        commit: bool,
        coordinator_epoch: int,
    ) -> CompletedTxn:
        """Record an end-transaction marker appended at ``marker_offset`` (no checks).

        A marker with a newer epoch makes it the producer's epoch (older-epoch data is fenced
        from now on and the batch cache starts over). A marker with no open transaction (a
        repeated marker, or one whose data went with retention) still completes one of no
        data, first offset = the marker's offset, as in Kafka.
        """
        entry = self._entry_at(producer_id, producer_epoch, timestamp)
        entry.coordinator_epoch = coordinator_epoch
        first_offset = entry.current_txn_first_offset
        entry.current_txn_first_offset = None
        self._ongoing.pop(producer_id, None)
        still_open = self.first_unstable_offset()
        return CompletedTxn(
            producer_id,
            marker_offset if first_offset is None else first_offset,
            marker_offset,
            marker_offset + 1 if still_open is None else still_open,
            not commit,
        )

    def check(
        self, producer_id: int, producer_epoch: int, base_sequence: int, last_offset_delta: int
    ) -> CheckResult:
        """Kafka's checks for a client batch, before it is appended.

        Order: duplicate (same epoch, same first and last sequence as a cached batch), then
        the epoch (older -> 47), then the sequence (a new epoch must start at 0, the same
        epoch must continue from the last sequence -> 45). A producer this partition knows
        nothing about (new, or forgotten after retention / DeleteRecords / expiry) may start
        at any sequence, as in Kafka since KIP-360.
        """
        if producer_id < 0:
            return ACCEPTED
        if base_sequence < 0:
            return Rejected(
                INVALID_RECORD,
                f"producer {producer_id} sent a batch without a base sequence",
            )
        last_seq = next_sequence(base_sequence, last_offset_delta)
        current = self._producers.get(producer_id)
        if current is None or current.epoch == NO_PRODUCER_EPOCH:
            return ACCEPTED
        duplicate = current.find_duplicate(producer_epoch, base_sequence, last_seq)
        if duplicate is not None:
            return Duplicate(duplicate.first_offset, duplicate.last_offset, duplicate.timestamp)
        if producer_epoch < current.epoch:
            return Rejected(
                INVALID_PRODUCER_EPOCH,
                f"producer {producer_id} epoch {producer_epoch} is older than the current "
                f"epoch {current.epoch}",
            )
        if producer_epoch != current.epoch:
            if base_sequence != 0:
                return Rejected(
                    OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"producer {producer_id} started epoch {producer_epoch} at sequence "
                    f"{base_sequence}; a new epoch must start at 0",
                )
            return ACCEPTED
        if not in_sequence(current.last_seq, base_sequence):
            return Rejected(
                OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"producer {producer_id} epoch {producer_epoch}: sequence {base_sequence} does "
                f"not follow the last sequence {current.last_seq}",
            )
        return ACCEPTED

    def check_batch(self, batch: BatchHeader) -> CheckResult:
        return self.check(
            batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.last_offset_delta
        )

    def update(
        self,
        producer_id: int,
        producer_epoch: int,
        base_sequence: int,
        last_offset_delta: int,
        first_offset: int,
        last_offset: int,
        timestamp: int,
        *,
        is_control: bool = False,
        is_transactional: bool = False,
    ) -> None:
        """Record a data batch that was appended at [first_offset, last_offset].

        A transactional batch opens the producer's transaction if none is open. Markers go
        through ``complete_txn`` (``is_control`` only updates epoch and timestamp).
        """
        if producer_id < 0:
            return
        entry = self._entry_at(producer_id, producer_epoch, timestamp)
        if is_control:
            return
        if is_transactional and entry.current_txn_first_offset is None:
            entry.current_txn_first_offset = first_offset
            self._ongoing[producer_id] = first_offset
        if base_sequence < 0:
            return
        entry.batches.append(
            BatchMetadata(
                base_sequence,
                next_sequence(base_sequence, last_offset_delta),
                first_offset,
                last_offset,
                timestamp,
            )
        )

    def _entry_at(
        self, producer_id: int, producer_epoch: int, timestamp: int
    ) -> ProducerStateEntry:
        """The producer's entry (created if new) moved to ``producer_epoch`` and ``timestamp``,
        for a batch or marker appended with them."""
        entry = self._producers.get(producer_id)
        if entry is None:
            entry = self._producers[producer_id] = ProducerStateEntry(producer_id)
        if producer_epoch != entry.epoch:
            # A new epoch starts over: the old epoch's batches can no longer be retried.
            entry.epoch = producer_epoch
            entry.batches.clear()
        entry.last_timestamp = max(entry.last_timestamp, timestamp)
        return entry

    def apply_batch(self, batch: BatchHeader) -> CompletedTxn | None:
        """Replay one batch read back from the log; the transaction a marker completes."""
        if batch.producer_id < 0:
            return None
        if batch.is_control:
            marker = read_end_txn_marker(batch)  # type: ignore[arg-type]
            if marker is not None:
                return self.complete_txn(
                    batch.producer_id,
                    batch.producer_epoch,
                    batch.base_offset,
                    batch.max_timestamp,
                    commit=marker.commit,
                    coordinator_epoch=marker.coordinator_epoch,
                )
        self.update(
            batch.producer_id,
            batch.producer_epoch,
            batch.base_sequence,
            batch.last_offset_delta,
            batch.base_offset,
            batch.last_offset,
            batch.max_timestamp,
            is_control=batch.is_control,
            is_transactional=batch.is_transactional,
        )
        return None

    def rebuild(self, batches: Iterable[BatchHeader]) -> None:
        """Start over from the log's batches (in offset order)."""
        self.clear()
        for batch in batches:
            self.apply_batch(batch)

    def last_data_offsets(self) -> dict[int, int]:
        """Producer id -> last offset of its newest batch (compaction keeps that batch)."""
        return {
            pid: entry.last_data_offset for pid, entry in self._producers.items() if entry.batches
        }

    def truncate_head(self, log_start_offset: int) -> list[int]:
        """Forget producers whose newest batch is below the log start (retention, DeleteRecords).

        Their sequence history is gone from the log, so Kafka lets them continue with any
        sequence. A producer with an open transaction is kept: its marker is still to come
        and the transaction's first offset still bounds the last stable offset (the log
        clamps it to the log start). Returns the producer ids removed.
        """
        gone = [
            pid
            for pid, entry in self._producers.items()
            if entry.batches
            and entry.last_data_offset < log_start_offset
            and entry.current_txn_first_offset is None
        ]
        for pid in gone:
            del self._producers[pid]
        return gone

    def remove_expired(
        self, now_ms: int, expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS
    ) -> list[int]:
        """Forget producers idle for longer than ``expiration_ms`` (producer.id.expiration.ms)."""
        gone = [
            pid
            for pid, entry in self._producers.items()
            if entry.current_txn_first_offset is None
            and now_ms - entry.last_timestamp >= expiration_ms
        ]
        for pid in gone:
            del self._producers[pid]
        return gone

    # -- snapshots ---------------------------------------------------------------------------

    def to_document(self, offset: int) -> dict[str, Any]:
        """The state after every batch below ``offset``, as a JSON-able document."""
        return {
            "version": SNAPSHOT_VERSION,
            "offset": offset,
            "producers": [
                {
                    "producer_id": entry.producer_id,
                    "epoch": entry.epoch,
                    "last_timestamp": entry.last_timestamp,
                    "coordinator_epoch": entry.coordinator_epoch,
                    "current_txn_first_offset": entry.current_txn_first_offset,
                    "batches": [
                        [b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp]
                        for b in entry.batches
                    ],
                }
                for entry in self._producers.values()
            ],
        }

    def load_document(self, document: Any) -> int:
        """Replace the state with a snapshot document; returns the offset it covers up to.

        Raises ValueError for a document this version cannot read.
        """
        if not isinstance(document, dict) or document.get("version") != SNAPSHOT_VERSION:
            raise ValueError("not a producer state snapshot of a known version")
        producers: dict[int, ProducerStateEntry] = {}
        try:
            offset = int(document["offset"])
            for item in document["producers"]:
                entry = ProducerStateEntry(int(item["producer_id"]), int(item["epoch"]))
                entry.last_timestamp = int(item["last_timestamp"])
                entry.coordinator_epoch = int(item.get("coordinator_epoch", -1))
                txn_first = item.get("current_txn_first_offset")
                entry.current_txn_first_offset = None if txn_first is None else int(txn_first)
                for first_seq, last_seq, first_offset, last_offset, ts in item["batches"]:
                    entry.batches.append(
                        BatchMetadata(first_seq, last_seq, first_offset, last_offset, ts)
                    )
                producers[entry.producer_id] = entry
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"malformed producer state snapshot: {exc}") from exc
        self._producers = producers
        self._ongoing = {
            pid: entry.current_txn_first_offset
            for pid, entry in producers.items()
            if entry.current_txn_first_offset is not None
        }
        return offset

    def write_snapshot(self, path: Path, offset: int) -> None:
        write_checked_json_atomically(path, self.to_document(offset))

    def load_snapshot(self, path: Path) -> int | None:
        """Load the snapshot at ``path``; its offset, or None if there is none (or it is bad)."""
        try:
            document = read_checked_json(path)
            if document is None:
                return None
            return self.load_document(document)
        except ValueError as exc:  # includes json.JSONDecodeError
            log.warning("%s: unusable producer state snapshot (%s); replaying the log instead",
                        path, exc)
            self.clear()
            return None


class ProducerIdAllocator:
    """Producer ids for InitProducerId, never reused, even across restarts.

    Ids are handed out from blocks (1000 by default, as Kafka's ProducerIdManager does): the end
    of the current block is written durably before the first id of the block is returned, so
    after a crash allocation resumes after the block and may skip ids but never repeats one.
    Thread-safe.
    """

    VERSION: Final = 1

    def __init__(self, path: str | Path, *, block_size: int = 1000) -> None:
        if block_size < 1:
            raise ValueError("block_size must be positive")
        self.path = Path(path)
        self.block_size = block_size
        self._lock = threading.Lock()
        try:
            document = read_checked_json(self.path)
        except ValueError as exc:
            raise DamagedFileError(
                f"{exc}; producer ids cannot be handed out safely (one could repeat): restore "
                'the file, or replace it with {"version": 1, "next_block_start": N}, N above '
                "every producer id in use"
            ) from None
        if document is None:
            start = 0
        elif isinstance(document, dict) and document.get("version") == self.VERSION:
            start = int(document["next_block_start"])
        else:
            raise DamagedFileError(
                f"{self.path} is not a producer id block file of a known version")
        self._next_id = start
        self._block_end = start  # nothing reserved yet in this process

    @property
    def next_id(self) -> int:
        """The id the next ``allocate`` returns."""
        with self._lock:
            return self._next_id

    def allocate(self) -> int:
        """The next id; StorageError when the next block cannot be stored (a disk fault)."""
        with self._lock:
            if self._next_id >= self._block_end:
                block_end = self._next_id + self.block_size
                try:
                    write_checked_json_atomically(
                        self.path, {"version": self.VERSION, "next_block_start": block_end}
                    )
                except OSError as exc:
                    # Nothing handed out: the next call tries the same block again.
                    raise StorageError(
                        f"cannot store the next producer id block in {self.path}: {exc}"
                    ) from exc
                self._block_end = block_end
            producer_id = self._next_id
            self._next_id += 1
            return producer_id
