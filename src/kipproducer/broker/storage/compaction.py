"""Log compaction (``cleanup.policy=compact``): keep the latest record of every key.

One pass over a partition, simple and correct rather than clever:

1. The compactable segments are the closed ones, oldest first, up to the first segment that
   holds a record newer than ``min.compaction.lag.ms``; the active segment never is.
2. An offset map (key -> offset of its latest record) is built over those segments.
3. Each segment that has something to remove is copied batch by batch into a ``.cleaned``
   file: a record survives if it is the latest for its key, has a key at all, and is not a
   tombstone (null value) whose timestamp is more than ``delete.retention.ms`` old. Batches
   whose records all survive are copied byte for byte; others are re-encoded with
   ``rebuild_batch``, which keeps every surviving record's offset (and the batch's base offset,
   lastOffsetDelta and producer fields). A batch left with no records is dropped unless it
   is the last batch of its producer id, which Kafka keeps so the producer's sequence state
   can be rebuilt from the log. Control batches are copied untouched.
4. The ``.cleaned`` file is fsynced and swapped in by the partition log
   (``LogSegment.install_as``).

Offsets never change and the log end offset is untouched. Tombstones age by their own
timestamp (Kafka ages them from the pass that first saw them, via the delete-horizon bit); the
guarantee for readers is the same: a tombstone stays visible for ``delete.retention.ms``
after it was written. Segments are cleaned one by one and not merged, so many small segments
stay many (possibly empty) files.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kipproducer.records import Batch, Record, decode_batches, rebuild_batch

from .segment import LogSegment

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


def compactable_segments(
    segments: Sequence[LogSegment], now_ms: int, min_compaction_lag_ms: int
) -> list[LogSegment]:
    """The closed segments, oldest first, up to the first one still within the lag."""
    eligible = []
    for segment in segments[:-1]:
        if (
            min_compaction_lag_ms > 0
            and segment.largest_timestamp() > now_ms - min_compaction_lag_ms
        ):
            break
        eligible.append(segment)
    return eligible


def build_offset_map(segments: Sequence[LogSegment]) -> dict[bytes, int]:
    """Key -> offset of the latest record with that key in ``segments``."""
    latest: dict[bytes, int] = {}
    for segment in segments:
        for _, batch in segment.iter_batches():
            if batch.is_control:
                continue
            for record in batch:
                if record.key is not None:
                    latest[record.key] = record.offset
    return latest


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
        return False
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
                data: bytes | memoryview = batch.raw
            else:
                records = list(batch)
                kept = _retained(records, rules, stats)
                stats.records_removed += len(records) - len(kept)
                if len(kept) == batch.record_count:
                    data = batch.raw
                elif kept or _keeps_empty(batch, rules):
                    data = rebuild_batch(batch, kept)
                else:
                    stats.batches_removed += 1
                    continue
            header = next(decode_batches(data, validate=False, strict=False))
            cleaned.append(data, header.base_offset, header.last_offset, header.max_timestamp)
        cleaned.finish_cleaned()
    except BaseException:
        cleaned.discard_cleaned()
        raise
    stats.segments_cleaned += 1
    stats.bytes_before += segment.size
    stats.bytes_after += cleaned.size
    return cleaned
