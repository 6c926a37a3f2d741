"""Log compaction (``cleanup.policy=compact``): keep the latest record of every key.

One pass over a partition, simple and correct rather than clever:

1. The compactable segments are the closed ones, oldest first, up to the first segment that
   holds a record newer than ``min.compaction.lag.ms`` or reaches the first unstable offset
   (the last stable offset: nothing at or above an open transaction is cleaned, as in
   Kafka's LogCleaner); the active segment never is.
2. An offset map (key -> offset of its latest record) is built over those segments, leaving
   out the records of aborted transactions (they must not shadow older committed values).
3. Each segment that has something to remove is copied batch by batch into a ``.cleaned``
   file: a record survives if it is the latest for its key, has a key at all, and is not a
   tombstone (null value) whose timestamp is more than ``delete.retention.ms`` old. Batches
   whose records all survive are copied byte for byte; others are re-encoded with
   ``rebuild_batch``, which keeps every surviving record's offset (and the batch's base offset,
   lastOffsetDelta and producer fields). A batch left with no records is dropped unless it
   is the last batch of its producer id, which Kafka keeps so the producer's sequence state
   can be rebuilt from the log.
   Transactions: every record of an aborted transaction's batches is removed (the batch is
   kept empty only as its producer's last batch). An end-transaction marker (control batch)
   is removed once no batch of its transaction is left in the cleaned range (Kafka's rule:
   a batch seen in this pass keeps it, so it goes at the earliest in the pass after its
   data) and its timestamp is older than ``delete.retention.ms``, so a read_committed
   consumer that read the data still meets the marker; other control batches are copied
   untouched. Batches of open transactions are never in the cleaned range (point 1). The
   segment's aborted-transaction index keeps the entries whose markers stay.
4. The ``.cleaned`` file is fsynced and swapped in by the partition log
   (``LogSegment.install_as``).

Offsets never change and the log end offset is untouched. Tombstones and markers age by their
own timestamp (Kafka ages them from the pass that first saw them removable, via the
delete-horizon bit); the guarantee for readers is the same: a tombstone stays visible for
``delete.retention.ms`` after it was written. Segments are cleaned one by one and not
merged, so many small segments stay many (possibly empty) files.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from kipproducer.records import Batch, Record, decode_batches, rebuild_batch

from .segment import LogSegment
from .txn_index import AbortedTxn

log = logging.getLogger("kipproducer.broker.storage")


@dataclass(slots=True)
class CompactionStats:
    segments_cleaned: int = 0
    records_removed: int = 0
    tombstones_removed: int = 0
    batches_removed: int = 0
    bytes_before: int = 0
    bytes_after: int = 0


@dataclass(frozen=True, slots=True)
class CleaningRules:
    latest: Mapping[bytes, int]  # key -> offset of its latest record
    tombstone_horizon_ms: int  # tombstones with a timestamp before this are removed
    producer_last_offsets: Mapping[int, int]  # producer id -> last offset of its last batch
    # producer id -> (first offset, marker offset) of its aborted transactions
    aborted: Mapping[int, Sequence[tuple[int, int]]] = field(default_factory=dict)
    removable_markers: frozenset[int] = frozenset()  # offsets of markers to remove


def aborted_ranges(entries: Iterable[AbortedTxn]) -> dict[int, list[tuple[int, int]]]:
    """Producer id -> (first offset, marker offset) of each aborted transaction."""
    ranges: dict[int, list[tuple[int, int]]] = {}
    for entry in entries:
        ranges.setdefault(entry.producer_id, []).append((entry.first_offset, entry.last_offset))
    return ranges


def is_aborted(batch: Batch, aborted: Mapping[int, Sequence[tuple[int, int]]]) -> bool:
    """Whether a data batch belongs to an aborted transaction."""
    if not batch.is_transactional or batch.is_control:
        return False
    ranges = aborted.get(batch.producer_id)
    if not ranges:
        return False
    offset = batch.base_offset
    return any(first <= offset <= last for first, last in ranges)


def compactable_segments(
    segments: Sequence[LogSegment],
    now_ms: int,
    min_compaction_lag_ms: int,
    first_unstable_offset: int | None = None,
) -> list[LogSegment]:
    """The closed segments, oldest first, up to the first one still within the lag or
    holding offsets at or above ``first_unstable_offset``."""
    eligible = []
    for segment in segments[:-1]:
        if first_unstable_offset is not None and segment.next_offset > first_unstable_offset:
            break
        if (
            min_compaction_lag_ms > 0
            and segment.largest_timestamp() > now_ms - min_compaction_lag_ms
        ):
            break
        eligible.append(segment)
    return eligible


def scan_for_cleaning(
    segments: Sequence[LogSegment],
    aborted: Mapping[int, Sequence[tuple[int, int]]],
    marker_horizon_ms: int,
) -> tuple[dict[bytes, int], frozenset[int]]:
    """One walk over ``segments``: the offset map and the markers that may be removed.

    Offset map: key -> offset of its latest record, aborted transactions left out. A marker
    may go when no data batch of its transaction was met before it in this walk and its
    timestamp is older than ``marker_horizon_ms``.
    """
    latest: dict[bytes, int] = {}
    with_data: set[int] = set()  # producers with transactional data met since their marker
    removable: set[int] = set()
    for segment in segments:
        for _, batch in segment.iter_batches():
            producer_id = batch.producer_id
            if batch.is_control:
                if producer_id >= 0:
                    had_data = producer_id in with_data
                    with_data.discard(producer_id)
                    if not had_data and batch.max_timestamp < marker_horizon_ms:
                        removable.add(batch.base_offset)
                continue
            if batch.is_transactional and producer_id >= 0:
                with_data.add(producer_id)
            if is_aborted(batch, aborted):
                continue
            for record in batch:
                if record.key is not None:
                    latest[record.key] = record.offset
    return latest, frozenset(removable)


def _retained(
    records: list[Record], rules: CleaningRules, stats: CompactionStats | None
) -> list[Record]:
    kept = []
    for record in records:
        key = record.key
        if key is None or rules.latest.get(key, -1) > record.offset:
            continue
        if record.value is None and record.timestamp < rules.tombstone_horizon_ms:
            if stats is not None:
                stats.tombstones_removed += 1
            continue
        kept.append(record)
    return kept


def _keeps_empty(batch: Batch, rules: CleaningRules) -> bool:
    return (
        batch.producer_id >= 0
        and rules.producer_last_offsets.get(batch.producer_id) == batch.last_offset
    )


def _batch_changes(batch: Batch, rules: CleaningRules) -> bool:
    if batch.is_control:
        return batch.base_offset in rules.removable_markers
    if is_aborted(batch, rules.aborted):
        return batch.record_count > 0 or not _keeps_empty(batch, rules)
    if batch.record_count == 0:
        return not _keeps_empty(batch, rules)
    return len(_retained(list(batch), rules, None)) != batch.record_count


def needs_cleaning(segment: LogSegment, rules: CleaningRules) -> bool:
    """Whether compaction would remove anything from ``segment`` (stops at the first hit)."""
    return any(_batch_changes(batch, rules) for _, batch in segment.iter_batches())


def write_cleaned(segment: LogSegment, rules: CleaningRules, stats: CompactionStats) -> LogSegment:
    """The compacted copy of ``segment`` as a fsynced ``.cleaned`` segment, not yet swapped in."""
    cleaned = LogSegment.create(
        segment.directory,
        segment.base_offset,
        index_interval_bytes=segment.index_interval_bytes,
        cleaned=True,
    )
    try:
        for _, batch in segment.iter_batches():
            if batch.is_control:
                if batch.base_offset in rules.removable_markers:
                    stats.batches_removed += 1
                    continue
                data: bytes | memoryview = batch.raw
            else:
                records = list(batch)
                if is_aborted(batch, rules.aborted):
                    kept: list[Record] = []
                else:
                    kept = _retained(records, rules, stats)
                stats.records_removed += len(records) - len(kept)
                if kept and len(kept) == batch.record_count:
                    data = batch.raw
                elif kept:
                    data = rebuild_batch(batch, kept)
                elif _keeps_empty(batch, rules):
                    data = batch.raw if batch.record_count == 0 else rebuild_batch(batch, [])
                else:
                    stats.batches_removed += 1
                    continue
            header = next(decode_batches(data, validate=False, strict=False))
            cleaned.append(data, header.base_offset, header.last_offset, header.max_timestamp)
        # The aborted-transaction entries whose markers stay (written when installed).
        cleaned.txn_index.entries = [
            entry
            for entry in segment.txn_index.entries
            if entry.last_offset not in rules.removable_markers
        ]
        cleaned.finish_cleaned()
    except BaseException:
        cleaned.discard_cleaned()
        raise
    stats.segments_cleaned += 1
    stats.bytes_before += segment.size
    stats.bytes_after += cleaned.size
    return cleaned
