"""PartitionLog: one topic-partition on disk, Kafka's ``topic-N/`` directory.

Directory content:

- ``NNNNNNNNNNNNNNNNNNNN.log`` / ``.index`` / ``.timeindex`` / ``.txnindex``: the segments (see
  segment.py, index.py and txn_index.py), named by base offset. The last one is the active
  segment that appends go to.
- ``partition-state.json``: log start offset and recovery point (written atomically).
- ``producer-state.snapshot``: idempotent-producer and open-transaction state up to an
  offset (an optimisation; the log is the truth).

Transactions (KIP-98): transactional data batches open a producer's transaction at their first
offset; ``append_marker`` appends the COMMIT/ABORT control batch that closes it, under the
same lock, so the last stable offset (first offset of the earliest open transaction, else the
high watermark) moves atomically with the append. Each abort adds an entry to the
``.txnindex`` of the segment holding its marker; read_committed fetches get the aborted
transactions of the range they read (``read(..., read_committed=True)``).

Offsets: with ``assign_offsets=True`` a batch gets the log end offset as its base offset; with
``assign_offsets=False`` (KIP-391 USE_OFFSETS, replication) it keeps its own, which must be
>= the log end offset, and the log end becomes its last offset + 1. Gaps in offsets are
therefore normal, between batches and between segments, and every lookup treats an offset in
a gap as "the next batch after it".

Durability follows Kafka: appends go to the page cache, and are fsynced every
``flush.messages`` records (1 = before each append returns), when ``flush.ms`` has passed
(``flush_if_due``, from the broker's timer), when a segment is rolled (before its successor is
created, so a segment with a successor is whole after an OS crash) and on close. The recovery
point is the offset below which everything is known to be fsynced; on open every batch at or
above it is validated (CRC-32C and records) and the log is cut at the first torn or corrupt
batch, unless the bad batch is known to have been fsynced (then the partition goes offline
uncut, see ``LogSegment.recover``). An I/O error in an append, a flush, a checkpoint, retention
or compaction takes the partition offline (``_writing``). Index files are rebuilt whenever
they do not check out.

Thread safety: every public method may be called from any thread. One lock serializes
appends, reads and the segment list (a read holds it only for its pread, about 40 us per MiB);
a second lock serializes the slow maintenance work (retention, DeleteRecords, compaction,
close), and compaction reads and rewrites segments without holding the first lock, so
appends and fetches go on meanwhile. A flush triggered by ``flush.messages`` fsyncs under the
append lock, so a record is never visible to readers before it is durable; the timer-driven
``flush`` fsyncs outside it. Aborted-transaction index entries are fsynced by the same flushes,
so they are durable before the recovery point passes their markers.
"""

from __future__ import annotations

import itertools
import logging
import os
import random
import shutil
import struct
import threading
import time
from bisect import bisect_right
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

from kipproducer.crc32c import crc32c
from kipproducer.errors import KEY_INDEX_INCOMPLETE, KEY_OFFSET_MISMATCH
from kipproducer.protocol.error_codes import CONCURRENT_TRANSACTIONS
from kipproducer.records import (
    LAYOUT,
    Batch,
    decode_batches,
    encode_batch,
    place_unit,
    set_base_offset,
    set_partition_leader_epoch,
)

from ..producer_state import (
    CONTROL_TYPE_ABORT,
    CONTROL_TYPE_COMMIT,
    CompletedTxn,
    Duplicate,
    ProducerStateError,
    ProducerStateManager,
    Rejected,
    read_end_txn_marker,
)
from .compaction import (
    CleaningRules,
    CompactionStats,
    aborted_ranges,
    compactable_segments,
    needs_cleaning,
    scan_for_cleaning,
    write_cleaned,
)
from .durable_files import (
    TEMP_SUFFIX,
    fsync_dir,
    read_checked_json,
    write_checked_json_atomically,
)
from .errors import (
    CorruptLogError,
    InvalidAppendOffsetError,
    KeyConditionError,
    LogClosedError,
    LogOfflineError,
    OffsetMismatchError,
    OffsetOutOfRangeError,
    StorageError,
)
from .key_index import PENDING, UNKNOWN, KeyConditions, KeyIndex, keyed_records
from .log_config import LONG_MAX, LogConfig
from .segment import (
    CLEANED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    DurableDataCorruptError,
    LogSegment,
    SegmentCorruptionError,
    StaleIndexError,
    parse_segment_name,
)
from .txn_index import AbortedTxn

log = logging.getLogger("kipproducer.broker.storage")

STATE_FILE = "partition-state.json"
PRODUCER_SNAPSHOT_FILE = "producer-state.snapshot"
STATE_VERSION = 1

_TIMESTAMP_TYPE_FLAG = 0x08
_CONTROL_FLAG = 0x20
_ATTRIBUTES = struct.Struct(">h")
_TIMESTAMP = struct.Struct(">q")
_CRC = struct.Struct(">I")


def _now_ms() -> int:
    return int(time.time() * 1000)


def _aborted_entry(completed: CompletedTxn) -> AbortedTxn:
    return AbortedTxn(
        completed.producer_id,
        completed.first_offset,
        completed.last_offset,
        completed.last_stable_offset,
    )


def _index_data(index: KeyIndex, batch: Batch, base_offset: int, min_offset: int = 0) -> None:
    """A data batch written at ``base_offset`` into the key index: committed now, or pending
    until its transaction's marker."""
    records = keyed_records(batch, base_offset, min_offset)
    if batch.is_transactional:
        index.add_pending(batch.producer_id, records)
    else:
        index.commit(records)


def _index_if_aborted(segment: LogSegment, completed: CompletedTxn) -> None:
    """An aborted transaction goes into the transaction index of the segment holding its
    marker, where read_committed fetches find it."""
    if completed.aborted:
        segment.txn_index.append(_aborted_entry(completed))


class AppendResult(NamedTuple):
    """Where an appended batch landed (for a duplicate: where it landed the first time)."""

    base_offset: int
    last_offset: int
    log_append_time: int  # the broker's timestamp for LogAppendTime topics, else -1
    log_start_offset: int
    log_end_offset: int  # after the append (KIP-WIRE's LogEndOffset)
    duplicate: bool = False


class LogReadResult(NamedTuple):
    """Whole batches for a fetch, plus the partition offsets a FetchResponse reports."""

    records: memoryview  # empty when nothing is readable
    first_offset: int  # base offset of the first batch returned (start offset if none)
    next_offset: int  # offset after the last batch returned (start offset if none)
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    last_stable_offset: int = -1
    # read_committed: (producer id, first offset) of the aborted transactions overlapping
    # [start offset, next_offset), by first offset; None for read_uncommitted
    aborted_transactions: list[tuple[int, int]] | None = None


def build_end_txn_marker(
    producer_id: int,
    producer_epoch: int,
    *,
    commit: bool,
    coordinator_epoch: int,
    timestamp: int,
    base_offset: int = 0,
) -> bytearray:
    """Kafka's end-transaction marker: a control batch with one control record.

    Attributes transactional|control, base sequence -1; key = int16 version 0 + int16 type
    (0 ABORT, 1 COMMIT), value = int16 version 0 + int32 coordinator epoch. Encoded by the
    project's codec as a transactional batch, then the control bit is set and the CRC redone.
    """
    kind = CONTROL_TYPE_COMMIT if commit else CONTROL_TYPE_ABORT
    key = struct.pack(">hh", 0, kind)
    value = struct.pack(">hi", 0, coordinator_epoch)
    buf = bytearray(
        encode_batch(
            [(key, value, None, timestamp)],
            base_offset=base_offset,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=-1,
            transactional=True,
        )
    )
    attributes_pos = LAYOUT["attributes"]
    (attributes,) = _ATTRIBUTES.unpack_from(buf, attributes_pos)
    _ATTRIBUTES.pack_into(buf, attributes_pos, attributes | _CONTROL_FLAG)
    _CRC.pack_into(buf, LAYOUT["crc"], crc32c(memoryview(buf)[attributes_pos:]))
    return buf


def stamp_log_append_time(buf: bytearray | memoryview, timestamp: int, pos: int = 0) -> None:
    """Mark the batch at ``buf[pos:]`` LogAppendTime with ``timestamp``; recompute its CRC.

    Kafka's in-place rewrite for ``message.timestamp.type=LogAppendTime``: the timestamp-type
    attribute bit and MaxTimestamp change (readers then report MaxTimestamp for every record),
    both are inside the CRC.
    """
    attributes_pos = pos + LAYOUT["attributes"]
    length = LAYOUT["batch_length"]
    (batch_length,) = struct.unpack_from(">i", buf, pos + length)
    end = pos + 12 + batch_length
    (attributes,) = _ATTRIBUTES.unpack_from(buf, attributes_pos)
    _ATTRIBUTES.pack_into(buf, attributes_pos, attributes | _TIMESTAMP_TYPE_FLAG)
    _TIMESTAMP.pack_into(buf, pos + LAYOUT["max_timestamp"], timestamp)
    _CRC.pack_into(buf, pos + LAYOUT["crc"], crc32c(memoryview(buf)[attributes_pos:end]))


class PartitionLog:
    """A partition's segments, indexes, offsets and producer state.

    ``PartitionLog(directory, config)`` opens (creating if needed) and recovers the log in
    ``directory``. See the module docstring for formats, durability and thread safety.
    """

    def __init__(self, directory: str | os.PathLike[str], config: LogConfig | None = None) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._config = config or LogConfig()
        self._lock = threading.RLock()
        self._maintenance_lock = threading.Lock()
        self._segments: list[LogSegment] = []
        self._log_start_offset = 0
        self._recovery_point = 0
        self._unflushed_records = 0
        self._last_flush_ms = _now_ms()
        self._closed = False
        self._offline_reason: str | None = None  # set by an I/O error: see _writing
        # Segments out of the log (below its start) whose files could not be removed: each
        # retention check tries again (see _delete_segments)
        self._undeleted: list[LogSegment] = []
        # segment.jitter.ms: the active segment rolls this much before segment.ms (drawn anew
        # for each segment, as Kafka does, so that partitions created together do not all roll
        # at once).
        self._roll_jitter_ms = 0
        # The cleaner's progress, in memory only (Kafka checkpoints it): everything below this
        # offset was compacted by the last pass, everything above is "dirty". After a restart
        # the whole log counts as dirty, so the first pass runs regardless of the ratio.
        self._first_dirty_offset = 0
        self._last_compaction_ms: int | None = None
        self.producer_state = ProducerStateManager()
        # key -> last offset (docs/protocol.md §10): built from the log by the first per-key
        # conditional append after the log opened, then updated with every append and marker
        self._key_index: KeyIndex | None = None
        try:
            self._open()
        except DurableDataCorruptError as exc:
            # Not truncated, not refused: this partition answers KAFKA_STORAGE_ERROR, the
            # others are served, and the files stay as they are for an operator.
            self._offline_reason = (
                f"partition log {self.directory} is offline: segment {exc.base_offset} is "
                f"damaged {exc}; it was not truncated, to keep the fsynced records after the "
                "damage; restore the segment from a replica or backup, or remove the damaged "
                "part by hand (everything from that byte on), then restart"
            )
            log.error("%s", self._offline_reason)
            self.close_handles()
        except BaseException:
            # Opening can fail half-way (EMFILE, ENOSPC): release every file opened so far.
            self.close_handles()
            raise

    # -- properties ----------------------------------------------------------------------------

    @property
    def config(self) -> LogConfig:
        return self._config

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        with self._lock:
            return self._segments[-1].next_offset

    @property
    def high_watermark(self) -> int:
        """The offset below which records are readable: the log end (a single replica)."""
        return self.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        """First offset of the earliest open transaction (not below the log start, as
        Kafka clamps it), else the high watermark: read_committed reads stop here."""
        with self._lock:
            return self._last_stable_offset_locked()

    def _last_stable_offset_locked(self) -> int:
        high_watermark = self._segments[-1].next_offset
        first_unstable = self.producer_state.first_unstable_offset()
        if first_unstable is None:
            return high_watermark
        return min(high_watermark, max(first_unstable, self._log_start_offset))

    def ongoing_transactions(self) -> dict[int, int]:
        """Producer id -> first offset of its open transaction in this partition."""
        with self._lock:
            return self.producer_state.ongoing_transactions()

    def aborted_transactions(self, start_offset: int, upper_offset: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of the aborted transactions overlapping
        [start_offset, upper_offset), by first offset (a read_committed fetch's list)."""
        with self._lock:
            self._check_open()
            return self._aborted_transactions_locked(start_offset, upper_offset)

    def _aborted_transactions_locked(
        self, start_offset: int, upper_offset: int
    ) -> list[tuple[int, int]]:
        if upper_offset <= start_offset:
            return []
        found: list[AbortedTxn] = []
        # An entry lives in its marker's segment, and a marker overlapping the range is at or
        # after start_offset: earlier segments cannot hold one.
        for segment in self._segments[self._segment_index(start_offset) :]:
            if not segment.txn_index.entries:
                continue
            entries, complete = segment.txn_index.collect(start_offset, upper_offset)
            found.extend(entries)
            if complete:
                break
        found.sort(key=lambda entry: entry.first_offset)
        return [(entry.producer_id, entry.first_offset) for entry in found]

    @property
    def recovery_point(self) -> int:
        """Everything below this offset is known to be fsynced."""
        return self._recovery_point

    @property
    def last_flush_ms(self) -> int:
        """Wall-clock time of the last flush (or of the open), for ``flush.ms``."""
        return self._last_flush_ms

    @property
    def size_in_bytes(self) -> int:
        with self._lock:
            return sum(segment.size for segment in self._segments)

    @property
    def segment_base_offsets(self) -> list[int]:
        with self._lock:
            return [segment.base_offset for segment in self._segments]

    @property
    def closed(self) -> bool:
        return self._closed

    def update_config(self, config: LogConfig) -> None:
        """Apply changed topic configs (AlterConfigs); they take effect on the next append."""
        with self._lock:
            jitter_changed = (config.segment_jitter_ms, config.segment_ms) != (
                self._config.segment_jitter_ms, self._config.segment_ms)
            self._config = config
            if jitter_changed:
                self._draw_roll_jitter()
            for segment in self._segments:
                segment.index_interval_bytes = config.index_interval_bytes

    # -- opening and recovery ------------------------------------------------------------------

    def _open(self) -> None:
        state = self._read_state()
        self._log_start_offset = state.get("log_start_offset", 0)
        recovery_point = state.get("recovery_point", 0)
        bases = self._clean_directory()
        interval = self._config.index_interval_bytes
        segments = self._segments  # filled as they open, so a failure can close them
        for base in bases:
            segments.append(
                LogSegment.open_existing(self.directory, base, index_interval_bytes=interval))
        stale_txn_indexes = self._recover_segments(segments, recovery_point)
        if not segments:
            self._segments.append(self._create_segment(self._log_start_offset))
        log_end = self._segments[-1].next_offset
        if self._log_start_offset > log_end:
            # The log start was moved (DeleteRecords) past data that a crash then lost.
            log.warning(
                "%s: log start offset %d is past the recovered log end %d; starting an empty "
                "segment there",
                self.directory,
                self._log_start_offset,
                log_end,
            )
            self._roll_locked(self._log_start_offset)
        self._log_start_offset = max(self._log_start_offset, self._segments[0].base_offset)
        for segment in self._take_segments_below_log_start():
            segment.delete()
        self._recovery_point = self._segments[-1].next_offset
        self._draw_roll_jitter()
        self._load_producer_state(
            [segment for segment in stale_txn_indexes if segment in self._segments]
        )
        self._write_state()

    def _read_state(self) -> dict[str, int]:
        path = self.directory / STATE_FILE
        try:
            document = read_checked_json(path)
        except ValueError:
            log.warning("%s: unreadable %s, recovering every segment", self.directory, STATE_FILE)
            return {}
        if document is None:
            return {}
        if not isinstance(document, dict) or document.get("version") != STATE_VERSION:
            log.warning("%s: %s has an unknown version, ignored", self.directory, STATE_FILE)
            return {}
        return {
            key: int(document[key])
            for key in ("log_start_offset", "recovery_point")
            if isinstance(document.get(key), int)
        }

    def _write_state(self) -> None:
        write_checked_json_atomically(
            self.directory / STATE_FILE,
            {
                "version": STATE_VERSION,
                "log_start_offset": self._log_start_offset,
                "recovery_point": self._recovery_point,
            },
        )

    def _clean_directory(self) -> list[int]:
        """Remove leftovers of interrupted writes; the base offsets of the segments, sorted."""
        bases = []
        names = os.listdir(self.directory)
        log_names = {name for name in names if parse_segment_name(name) is not None}
        for name in names:
            base = parse_segment_name(name)
            if base is not None:
                bases.append(base)
            elif name.endswith(CLEANED_SUFFIX) or name.endswith(TEMP_SUFFIX):
                log.info("%s: removing unfinished file %s", self.directory, name)
                (self.directory / name).unlink()
            elif (
                name.endswith(INDEX_SUFFIX)
                or name.endswith(TIME_INDEX_SUFFIX)
                or name.endswith(TXN_INDEX_SUFFIX)
            ):
                if name.rsplit(".", 1)[0] + LOG_SUFFIX not in log_names:
                    (self.directory / name).unlink()
        return sorted(bases)

    def _recover_segments(
        self, segments: list[LogSegment], recovery_point: int
    ) -> list[LogSegment]:
        """Load every segment; recover (validate, truncate) those not known to be flushed.

        Returns the segments whose aborted-transaction index must be rebuilt from the log:
        the recovered ones and those whose ``.txnindex`` is missing or bad.
        """
        min_offset = 0
        stale_txn_indexes = []
        for i, segment in enumerate(segments):
            loaded = segment.load()
            if (
                loaded
                and segment.next_offset <= recovery_point
                and segment.base_offset >= min_offset
            ):
                min_offset = segment.next_offset
                if not segment.txn_index.load(segment.next_offset):
                    log.info(
                        "%s: rebuilding the transaction index of segment %d",
                        self.directory,
                        segment.base_offset,
                    )
                    stale_txn_indexes.append(segment)
                continue
            stale_txn_indexes.append(segment)
            is_last = i == len(segments) - 1
            before = segment.next_offset if loaded else None
            try:
                outcome = segment.recover(
                    validate_from_offset=recovery_point, min_offset=min_offset,
                    every_append_fsynced=self._config.flush_messages == 1,
                    followed_by_segment=not is_last)
            except DurableDataCorruptError as exc:
                exc.base_offset = segment.base_offset
                raise
            if outcome.truncated_bytes:
                level = logging.WARNING if is_last else logging.ERROR
                log.log(
                    level,
                    "%s: segment %d truncated at byte %d (%d bytes dropped, log end %s -> %d): %s",
                    self.directory,
                    segment.base_offset,
                    segment.size,
                    outcome.truncated_bytes,
                    "?" if before is None else before,
                    segment.next_offset,
                    outcome.reason,
                )
            elif not loaded:
                log.info(
                    "%s: rebuilt the indexes of segment %d", self.directory, segment.base_offset
                )
            segment.fsync()
            min_offset = segment.next_offset
        return stale_txn_indexes

    def _load_producer_state(self, stale_txn_indexes: list[LogSegment]) -> None:
        """Producer state from the snapshot plus a replay of the log after it; the replay
        also rebuilds the aborted-transaction indexes of ``stale_txn_indexes``.

        Rebuilding a segment's index needs the state as of the segment's start (a
        transaction aborted there may have begun earlier), so when the snapshot is past the
        first stale segment the replay starts from the beginning of the log.
        """
        snapshot = self.directory / PRODUCER_SNAPSHOT_FILE
        log_end = self._segments[-1].next_offset
        first_base = self._segments[0].base_offset
        offset = self.producer_state.load_snapshot(snapshot)
        if offset is None or offset > log_end or offset < first_base:
            # Replay what is on disk, below the log start too: a transaction opened there
            # may still be open (truncate_head below forgets the rest).
            self.producer_state.clear()
            offset = first_base
        rebuilt: dict[int, list[AbortedTxn]] = {
            segment.base_offset: [] for segment in stale_txn_indexes
        }
        if stale_txn_indexes and stale_txn_indexes[0].base_offset < offset:
            self.producer_state.clear()
            offset = first_base
        for segment in list(self._segments):
            if segment.next_offset <= offset:
                continue
            entries = rebuilt.get(segment.base_offset)
            position = segment.offset_index.lookup(offset)
            for _, batch in segment.iter_batches(position):
                if batch.last_offset < offset:
                    continue
                completed = self.producer_state.apply_batch(batch)
                if completed is not None and completed.aborted and entries is not None:
                    entries.append(_aborted_entry(completed))
        for segment in stale_txn_indexes:
            segment.txn_index.replace(rebuilt[segment.base_offset])
        self.producer_state.truncate_head(self._log_start_offset)

    # -- segments ------------------------------------------------------------------------------

    def _draw_roll_jitter(self) -> None:
        jitter = min(self._config.segment_jitter_ms, self._config.segment_ms)
        self._roll_jitter_ms = random.randrange(jitter) if jitter > 0 else 0

    def _create_segment(self, base_offset: int) -> LogSegment:
        self._draw_roll_jitter()
        segment = LogSegment.create(
            self.directory, base_offset, index_interval_bytes=self._config.index_interval_bytes
        )
        # The new file's name carries the log end offset when the segment is empty: make the
        # name durable so a crash cannot move the log end backwards.
        fsync_dir(self.directory)
        return segment

    def _roll_locked(self, base_offset: int) -> LogSegment:
        active = self._segments[-1]
        active.finish()
        if active.flushed_size < active.size:
            # Durable before the next segment's name is: after an OS crash a segment that has
            # a successor is whole, so recovery never leaves a hole in the offsets behind a
            # lost tail (and damage to it is damage, not a torn write).
            active.fsync()
            self._recovery_point = max(self._recovery_point, active.next_offset)
        segment = self._create_segment(base_offset)
        self._segments.append(segment)
        log.debug("%s: rolled segment %d", self.directory, base_offset)
        self.producer_state.write_snapshot(self.directory / PRODUCER_SNAPSHOT_FILE, base_offset)
        return segment

    def roll(self) -> None:
        """Close the active segment and start a new one at the log end (if it holds data)."""
        with self._lock:
            self._check_open()
            active = self._segments[-1]
            if active.size:
                self._roll_locked(active.next_offset)

    def _should_roll(
        self, active: LogSegment, size: int, max_timestamp: int, last_offset: int
    ) -> bool:
        if not active.can_hold(last_offset):
            return True
        if active.size == 0:
            return False
        config = self._config
        if active.size + size > config.segment_bytes:
            return True
        # segment.index.bytes bounds the offset index (8-byte entries): a full one rolls.
        if len(active.offset_index) >= config.segment_index_bytes // 8:
            return True
        if active.rolling_timestamp >= 0 and max_timestamp >= 0:
            waited = max_timestamp - active.rolling_timestamp
        else:
            waited = _now_ms() - active.created_ms
        max_segment_ms = config.segment_ms
        if config.compact:
            # A record in the active segment cannot be compacted: roll in time for
            # max.compaction.lag.ms.
            max_segment_ms = min(max_segment_ms, config.max_compaction_lag_ms)
        return waited > max_segment_ms - self._roll_jitter_ms

    def _segment_index(self, offset: int) -> int:
        """Index of the last segment whose base offset is <= ``offset`` (0 if none)."""
        return max(bisect_right(self._segments, offset, key=lambda s: s.base_offset) - 1, 0)

    def _check_open(self) -> None:
        if self._offline_reason is not None:
            raise LogOfflineError(self._offline_reason)
        if self._closed:
            raise LogClosedError(f"partition log {self.directory} is closed")

    @property
    def offline(self) -> bool:
        """Whether an I/O error took the log offline (see ``_writing``)."""
        return self._offline_reason is not None

    @contextmanager
    def _writing(self, what: str, *, cut: bool = True) -> Iterator[None]:
        """A change of the files under the lock (an append, a flush, a checkpoint, retention,
        a compaction swap): an OSError (ENOSPC, EIO, EMFILE, a failed fsync, open or rename)
        takes the log offline instead of leaving memory and files apart.

        With ``cut``, the files are first cut back to where they ended before the append:
        nothing of a failed append stays (a partial write, a batch whose fsync failed and so is
        not durable, a segment rolled for it, whose empty file would carry its base offset), so
        what a restart recovers ends with the last append that succeeded. Then the files are
        closed without a flush and every later call raises LogOfflineError
        (KAFKA_STORAGE_ERROR) until the broker restarts, as Kafka takes a failed log directory
        offline: after a failed fsync the page cache cannot be trusted to say what is on the
        disk.
        """
        count = len(self._segments)
        active = self._segments[-1]
        size = active.size
        log_end = active.next_offset
        try:
            yield
        except OSError as exc:
            reason = (
                f"partition log {self.directory} is offline after an I/O error in {what} "
                f"({exc}); restart the broker once the disk is healthy"
            )
            if cut:
                for segment in self._segments[count:]:
                    segment.remove_unsafely()
                del self._segments[count:]
                active.cut_back(size)
            self._offline_reason = reason
            for segment in self._segments:
                segment.close()
            self._closed = True
            if cut:
                log.error("%s; the failed append was cut, the log ends at offset %d", reason,
                          log_end)
            else:
                log.error("%s", reason)
            raise LogOfflineError(reason) from exc

    # -- append --------------------------------------------------------------------------------

    def append(
        self,
        batch_buf: bytearray | memoryview,
        *,
        assign_offsets: bool,
        leader_epoch: int = 0,
        expected_base_offset: int | None = None,
        check_producer_state: bool = True,
        batch: Batch | None = None,
        key_conditions: KeyConditions | None = None,
    ) -> AppendResult:
        """Append one validated batch held in a writable buffer, patched in place.

        The batch's baseOffset (assign_offsets=True: the log end offset; False: its own, which
        must be >= the log end, KIP-391) and partitionLeaderEpoch are written into
        ``batch_buf``; for LogAppendTime topics also the timestamp (and the CRC).

        Checks, in this order (docs/protocol.md §4): a retry of one of the producer's last 5
        batches returns its original offsets with ``duplicate=True`` and appends nothing;
        then ``expected_base_offset`` (KIP-27) must equal the log end, else
        OffsetMismatchError; an explicit base offset below the log end raises
        InvalidAppendOffsetError; then the producer epoch and sequence (ProducerStateError
        with INVALID_PRODUCER_EPOCH or OUT_OF_ORDER_SEQUENCE_NUMBER). Nothing is written
        when any check fails. ``check_producer_state=False`` skips the epoch/sequence checks
        (replication) but still records the batch in the producer state. ``batch``: the
        batch as already parsed from ``batch_buf`` (validate_batch), not parsed again.
        ``key_conditions`` (docs/protocol.md §10) are checked last, against the key index
        as it is before the batch: KeyConditionError when one fails.
        """
        if batch is None:
            batch = next(decode_batches(batch_buf, validate=False, strict=False), None)
        if batch is None or batch.size_in_bytes != len(batch_buf):
            raise ValueError("batch_buf must hold exactly one whole record batch")
        with self._lock:
            self._check_open()
            config = self._config
            producer_id = batch.producer_id
            checked = None
            if producer_id >= 0 and check_producer_state and not batch.is_control:
                checked = self.producer_state.check_batch(batch)
            duplicate = self._duplicate_or_expected(checked, expected_base_offset)
            if duplicate is not None:
                return duplicate
            log_end = self._segments[-1].next_offset
            if assign_offsets:
                base_offset = log_end
            else:
                base_offset = batch.base_offset
                if base_offset < log_end:
                    raise InvalidAppendOffsetError(base_offset, log_end)
            if isinstance(checked, Rejected):
                raise ProducerStateError(checked)
            if key_conditions is not None:
                self._check_keys_locked(key_conditions, producer_id)
            last_offset = base_offset + batch.last_offset_delta
            log_append_time = -1
            max_timestamp = batch.max_timestamp
            if config.log_append_time:
                log_append_time = max_timestamp = _now_ms()
            with self._writing("an append"):
                marker = read_end_txn_marker(batch) if batch.is_control else None
                active = self._place_and_write(batch_buf, batch.base_offset, base_offset,
                                               last_offset, max_timestamp, leader_epoch,
                                               log_append_time)
                if producer_id >= 0 and marker is not None:
                    # A marker that arrives as a batch (replication) closes the transaction as
                    # append_marker does.
                    completed = self.producer_state.complete_txn(
                        producer_id,
                        batch.producer_epoch,
                        base_offset,
                        max_timestamp,
                        commit=marker.commit,
                        coordinator_epoch=marker.coordinator_epoch,
                    )
                    _index_if_aborted(active, completed)
                    if self._key_index is not None:
                        self._key_index.end_transaction(producer_id, marker.commit)
                elif producer_id >= 0:
                    self.producer_state.update(
                        producer_id,
                        batch.producer_epoch,
                        batch.base_sequence,
                        batch.last_offset_delta,
                        base_offset,
                        last_offset,
                        max_timestamp,
                        is_control=batch.is_control,
                        is_transactional=batch.is_transactional,
                    )
                if self._key_index is not None and not batch.is_control:
                    _index_data(self._key_index, batch, base_offset)
                self._unflushed_records += max(batch.record_count, 1)
                if self._unflushed_records >= config.flush_messages:
                    self._flush_locked()
            return AppendResult(
                base_offset, last_offset, log_append_time, self._log_start_offset, last_offset + 1
            )

    def _place_and_write(self, buf: bytearray | memoryview, own_base_offset: int,
                         base_offset: int, last_offset: int, max_timestamp: int,
                         leader_epoch: int, log_append_time: int) -> LogSegment:
        """Roll if the batch does not fit, patch its offsets, leader epoch and (LogAppendTime)
        timestamp in place, write it; the segment it went to."""
        active = self._segments[-1]
        if self._should_roll(active, len(buf), max_timestamp, last_offset):
            active = self._roll_locked(base_offset)
        if base_offset != own_base_offset:
            set_base_offset(buf, base_offset)
        set_partition_leader_epoch(buf, leader_epoch)
        if log_append_time >= 0:
            stamp_log_append_time(buf, log_append_time)
        active.append(buf, base_offset, last_offset, max_timestamp)
        return active

    def _duplicate_or_expected(self, checked, expected_base_offset: int | None
                               ) -> AppendResult | None:
        """The first two checks of an append (in docs/protocol.md §4's order), under the lock:
        a retry of a cached batch (or unit) is answered with its original offsets; then a
        KIP-27 expectation must be the log end (OffsetMismatchError)."""
        if isinstance(checked, Duplicate):
            return AppendResult(
                checked.first_offset,
                checked.last_offset,
                checked.timestamp if self._config.log_append_time else -1,
                self._log_start_offset,
                self._segments[-1].next_offset,
                duplicate=True,
            )
        log_end = self._segments[-1].next_offset
        if expected_base_offset is not None and expected_base_offset != log_end:
            raise OffsetMismatchError(expected_base_offset, log_end)
        return None

    def append_unit(
        self,
        unit,
        *,
        assign_offsets: bool,
        leader_epoch: int = 0,
        expected_base_offset: int | None = None,
        key_conditions: KeyConditions | None = None,
    ) -> AppendResult:
        """Append several batches of one producer as one (docs/protocol.md §9), all or nothing.

        ``unit`` is a :class:`~kipproducer.broker.produce_unit.BatchUnit`: its batches were
        validated and checked against each other (offsets rising, sequences continuing).
        The checks of :meth:`append` run once for the whole unit, in the same order: a retry
        of the unit (same epoch, same first and last sequence) returns its original offsets;
        ``expected_base_offset`` must equal the log end; explicit offsets start at or above
        the log end; the producer epoch and sequence. Then every batch is written (offsets
        patched in place when assigned) and the producer state records the unit as one entry
        of its window. Nothing is written when a check fails.
        """
        with self._lock:
            self._check_open()
            config = self._config
            producer_id = unit.producer_id
            checked = self.producer_state.check_batch(unit) if producer_id >= 0 else None
            duplicate = self._duplicate_or_expected(checked, expected_base_offset)
            if duplicate is not None:
                return duplicate
            log_end = self._segments[-1].next_offset
            if not assign_offsets and unit.base_offset < log_end:
                raise InvalidAppendOffsetError(unit.base_offset, log_end)
            if isinstance(checked, Rejected):
                raise ProducerStateError(checked)
            if key_conditions is not None:
                self._check_keys_locked(key_conditions, producer_id)
            with self._writing("an append"):
                log_append_time = _now_ms() if config.log_append_time else -1
                next_offset = log_end
                first_offset = -1
                max_timestamp = -1
                if unit.whole is not None and log_append_time < 0:
                    # The batches lie back to back in the request: placed in place and written
                    # with one write (and one index step), unless the segment must roll inside.
                    last = unit.batches[-1]
                    last_offset = (log_end + unit.record_count - 1 if assign_offsets
                                   else last.base_offset + last.last_offset_delta)
                    active = self._segments[-1]
                    if not self._should_roll(active, len(unit.whole), unit.max_timestamp,
                                             last_offset):
                        first_offset, last_offset, max_timestamp = place_unit(
                            unit.whole, unit.batches, log_end if assign_offsets else -1,
                            leader_epoch)
                        active.append(unit.whole, first_offset, last_offset, max_timestamp)
                        next_offset = last_offset + 1
                for buf, batch in (unit.parts if first_offset < 0 else ()):
                    base_offset = next_offset if assign_offsets else batch.base_offset
                    last_offset = base_offset + batch.last_offset_delta
                    timestamp = log_append_time if log_append_time >= 0 else batch.max_timestamp
                    self._place_and_write(buf, batch.base_offset, base_offset, last_offset,
                                          timestamp, leader_epoch, log_append_time)
                    if first_offset < 0:
                        first_offset = base_offset
                    max_timestamp = max(max_timestamp, timestamp)
                    next_offset = last_offset + 1
                last_offset = next_offset - 1
                if producer_id >= 0:
                    self.producer_state.update(
                        producer_id,
                        unit.producer_epoch,
                        unit.base_sequence,
                        unit.last_offset_delta,  # the unit's sequence span: records - 1
                        first_offset,
                        last_offset,
                        max_timestamp,
                        is_transactional=unit.is_transactional,
                    )
                if self._key_index is not None:
                    base = log_end
                    for batch in unit.batches:
                        if not assign_offsets:
                            base = batch.base_offset
                        _index_data(self._key_index, batch, base)
                        base += batch.last_offset_delta + 1
                self._unflushed_records += unit.record_count
                if self._unflushed_records >= config.flush_messages:
                    self._flush_locked()
            return AppendResult(
                first_offset, last_offset, log_append_time, self._log_start_offset, next_offset
            )

    def append_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        *,
        commit: bool,
        coordinator_epoch: int = 0,
        only_if_ongoing: bool = False,
        leader_epoch: int = 0,
    ) -> AppendResult | None:
        """Append an end-transaction marker (COMMIT or ABORT) for ``producer_id``.

        The control batch takes one offset at the log end and closes the producer's open
        transaction here; an abort adds an entry to the active segment's transaction index.
        The last stable offset moves with the append, under the append lock.
        ``only_if_ongoing``: with no open transaction for the producer, write nothing and
        return None (a coordinator re-completing a transaction after a restart). Raises
        ProducerStateError: INVALID_PRODUCER_EPOCH (47) for an epoch older than the
        producer's, TRANSACTION_COORDINATOR_FENCED (52) for a coordinator epoch older than
        the one of the producer's last marker. Markers count toward ``flush.messages``.
        """
        with self._lock:
            self._check_open()
            if only_if_ongoing:
                entry = self.producer_state.entry(producer_id)
                if entry is None or entry.current_txn_first_offset is None:
                    return None
            rejected = self.producer_state.check_marker(
                producer_id, producer_epoch, coordinator_epoch
            )
            if rejected is not None:
                raise ProducerStateError(rejected)
            config = self._config
            offset = self._segments[-1].next_offset
            timestamp = _now_ms()
            buf = build_end_txn_marker(
                producer_id,
                producer_epoch,
                commit=commit,
                coordinator_epoch=coordinator_epoch,
                timestamp=timestamp,
                base_offset=offset,
            )
            log_append_time = -1
            if config.log_append_time:
                log_append_time = timestamp
                stamp_log_append_time(buf, timestamp)
            set_partition_leader_epoch(buf, leader_epoch)
            with self._writing("an append"):
                active = self._segments[-1]
                if self._should_roll(active, len(buf), timestamp, offset):
                    active = self._roll_locked(offset)
                active.append(buf, offset, offset, timestamp)
                completed = self.producer_state.complete_txn(
                    producer_id,
                    producer_epoch,
                    offset,
                    timestamp,
                    commit=commit,
                    coordinator_epoch=coordinator_epoch,
                )
                _index_if_aborted(active, completed)
                if self._key_index is not None:
                    self._key_index.end_transaction(producer_id, commit)
                self._unflushed_records += 1
                if self._unflushed_records >= config.flush_messages:
                    self._flush_locked()
            return AppendResult(offset, offset, log_append_time, self._log_start_offset, offset + 1)

    # -- per-key conditions (docs/protocol.md §10) -----------------------------------------------

    def key_index(self, max_keys: int) -> KeyIndex:
        """The partition's key index, built from the log first if this log has none yet (or
        one of another bound). Takes the append lock for the whole scan."""
        with self._lock:
            self._check_open()
            return self._key_index_locked(max_keys)

    def _key_index_locked(self, max_keys: int) -> KeyIndex:
        index = self._key_index
        if index is None or index.max_keys != max_keys:
            index = self._key_index = self._build_key_index_locked(max_keys)
        return index

    def _build_key_index_locked(self, max_keys: int) -> KeyIndex:
        """Replay the log from its start: committed records in order, each transaction's
        records pending until its marker."""
        index = KeyIndex(max_keys)
        start = self._log_start_offset
        for segment in self._segments:
            if segment.next_offset <= start:
                continue
            try:
                for _, batch in segment.iter_batches():
                    if batch.last_offset < start:
                        continue
                    if batch.is_control:
                        marker = read_end_txn_marker(batch)
                        if marker is not None and batch.producer_id >= 0:
                            index.end_transaction(batch.producer_id, marker.commit)
                    else:
                        _index_data(index, batch, batch.base_offset, start)
            except SegmentCorruptionError as exc:
                raise CorruptLogError(
                    f"{self.directory}: segment {segment.base_offset} {exc}") from exc
        for producer_id in index.pending_producers():
            # The cleaner removes a marker only after every record of its transaction (an
            # aborted one's go first), so records left without a marker and without an
            # open transaction belong to a committed one.
            entry = self.producer_state.entry(producer_id)
            if entry is None or entry.current_txn_first_offset is None:
                index.end_transaction(producer_id, commit=True)
        return index

    def _check_keys_locked(self, conditions: KeyConditions, producer_id: int) -> None:
        index = self._key_index_locked(conditions.max_keys)
        start = self._log_start_offset
        conflicts = []
        for record_index, key, expected in conditions.checks:
            actual = index.answer(key, start, producer_id)
            if actual != expected:
                conflicts.append((record_index, key, expected, actual))
        if not conflicts:
            return
        answers = {actual for _, _, _, actual in conflicts}
        if answers - {UNKNOWN, PENDING}:
            code, why = KEY_OFFSET_MISMATCH, "a key's last offset is not the one expected"
        elif PENDING in answers:
            code, why = CONCURRENT_TRANSACTIONS, "a key has records of an open transaction"
        else:
            code, why = KEY_INDEX_INCOMPLETE, (
                f"the key index forgot a key (kip.key.index.max.keys={index.max_keys})")
        raise KeyConditionError(code, why, conflicts)

    # -- read ----------------------------------------------------------------------------------

    def read(
        self,
        start_offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
        read_committed: bool = False,
    ) -> LogReadResult:
        """Whole batches starting with the one that holds ``start_offset``.

        If ``start_offset`` is in a gap (explicit offsets, compaction), reading starts at the
        next batch after it. Batches are added while the total stays within ``max_bytes``; with
        ``min_one_batch`` (Kafka's rule for the first partition of a fetch) the first batch is
        returned whatever its size, so a consumer never stalls on a big batch. Only batches
        entirely below ``max_offset`` (exclusive: high watermark or last stable offset) are
        returned. The result is one buffer from one segment; a consumer reaching the end of a
        segment gets the next one on its next fetch. Raises OffsetOutOfRangeError when
        ``start_offset`` is below the log start or above the log end.

        ``read_committed``: only batches below the last stable offset, and the result lists
        the aborted transactions overlapping [start_offset, next_offset).
        """
        with self._lock:
            self._check_open()
            log_start = self._log_start_offset
            log_end = self._segments[-1].next_offset
            if start_offset < log_start or start_offset > log_end:
                raise OffsetOutOfRangeError(start_offset, log_start, log_end)
            stable = self._last_stable_offset_locked()
            limit = log_end if max_offset is None else min(max_offset, log_end)
            if read_committed:
                limit = min(limit, stable)
            found = None
            if start_offset < limit:
                for segment in self._segments[self._segment_index(start_offset) :]:
                    if segment.base_offset >= limit:
                        break
                    try:
                        found = self._read_segment(segment, start_offset, max_bytes, limit,
                                                   min_one_batch)
                    except SegmentCorruptionError as exc:
                        raise CorruptLogError(
                            f"{self.directory}: segment {segment.base_offset} {exc}"
                        ) from exc
                    except OSError as exc:  # EIO: this read fails (56), nothing partial
                        raise StorageError(
                            f"{self.directory}: reading segment {segment.base_offset}: {exc}"
                        ) from exc
                    if found is not None:
                        break
            aborted = None
            if read_committed:
                upper = start_offset if found is None else found.next_offset
                aborted = self._aborted_transactions_locked(start_offset, upper)
            if found is None:
                return LogReadResult(
                    memoryview(b""),
                    start_offset,
                    start_offset,
                    log_end,
                    log_start,
                    log_end,
                    stable,
                    aborted,
                )
            return LogReadResult(
                found.records,
                found.first_offset,
                found.next_offset,
                log_end,
                log_start,
                log_end,
                stable,
                aborted,
            )

    def _read_segment(self, segment: LogSegment, start_offset: int, max_bytes: int,
                      limit: int, min_one: bool):
        try:
            return segment.read(start_offset, max_bytes, limit, min_one=min_one)
        except StaleIndexError as exc:
            self._rebuild_indexes(segment, exc)
            return segment.read(start_offset, max_bytes, limit, min_one=min_one)

    def _batches_from(self, segment: LogSegment, offset: int) -> Iterator[tuple[int, Batch]]:
        """The segment's batches from the index entry at or before ``offset`` on (headers
        checked only), after making sure the entry points at the batch it names."""
        indexed, position = segment.offset_index.lookup_entry(offset)
        batches = segment.iter_batches(position, window=64 * 1024)
        if indexed < 0:
            return batches
        try:
            first = next(batches, None)
        except SegmentCorruptionError:  # the entry points into the middle of a batch
            first = None
        if first is None or first[1].base_offset != indexed:
            self._rebuild_indexes(segment, StaleIndexError(
                position, f"the offset index says offset {indexed} starts here, the log does "
                "not"))
            return segment.iter_batches(segment.offset_index.lookup(offset), window=64 * 1024)
        return itertools.chain([first], batches)

    def _rebuild_indexes(self, segment: LogSegment, why: StaleIndexError) -> None:
        """A damaged index that passed the checks on open: rebuilt from the log."""
        log.warning("%s: rebuilding the indexes of segment %d: %s", self.directory,
                    segment.base_offset, why)
        index = self._segments.index(segment)
        previous = self._segments[index - 1].next_offset if index else 0
        segment.rebuild_indexes(previous)

    # -- ListOffsets -----------------------------------------------------------------------------

    def offset_for_timestamp(
        self, timestamp: int, *, max_offset: int | None = None
    ) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with a timestamp >= ``timestamp``.

        ListOffsets by timestamp: None when no record (at or above the log start and below
        ``max_offset``) is that recent.
        """
        with self._lock:
            self._check_open()
            log_start = self._log_start_offset
            log_end = self._segments[-1].next_offset
            limit = log_end if max_offset is None else min(max_offset, log_end)
            for segment in self._segments:
                if segment.base_offset >= limit:
                    return None
                if segment.next_offset <= log_start or segment.max_timestamp < timestamp:
                    continue
                start = max(log_start, segment.base_offset)
                before = segment.time_index.lookup_before(timestamp)
                if before is not None:
                    start = max(start, before + 1)
                for _, batch in self._batches_from(segment, start):
                    if batch.last_offset < start or batch.max_timestamp < timestamp:
                        continue
                    for record in batch:
                        if record.offset < start:
                            continue
                        if record.offset >= limit:
                            return None
                        if record.timestamp >= timestamp:
                            return record.offset, record.timestamp
            return None

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the record with the largest timestamp (the first such).

        ListOffsets MAX_TIMESTAMP (-3); None for a log with no records.
        """
        with self._lock:
            self._check_open()
            log_start = self._log_start_offset
            best: LogSegment | None = None
            for segment in self._segments:
                if segment.next_offset <= log_start or segment.max_timestamp < 0:
                    continue
                if best is None or segment.max_timestamp > best.max_timestamp:
                    best = segment
            if best is None:
                return None
            target = best.max_timestamp_offset
            for _, batch in self._batches_from(best, target):
                if batch.last_offset < target:
                    continue
                for record in batch:
                    if record.offset >= log_start and record.timestamp == best.max_timestamp:
                        return record.offset, record.timestamp
                break
            return target, best.max_timestamp

    # -- log start: DeleteRecords and retention --------------------------------------------------

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: move the log start up to ``offset`` (-1: the high watermark).

        Returns the new log start offset (the low watermark). Whole segments below it are
        deleted; records below it in the first remaining segment become unreadable.
        """
        with self._maintenance_lock:
            with self._lock:
                self._check_open()
                high_watermark = self._segments[-1].next_offset
                if offset == -1:
                    offset = high_watermark
                if offset < 0 or offset > high_watermark:
                    raise OffsetOutOfRangeError(offset, self._log_start_offset, high_watermark)
                if offset <= self._log_start_offset:
                    return self._log_start_offset
                with self._writing("DeleteRecords", cut=False):
                    self._log_start_offset = offset
                    doomed = self._take_segments_below_log_start()
                    self._write_state()
                self.producer_state.truncate_head(self._log_start_offset)
            self._delete_segments(doomed, "below the log start offset")
            return offset

    def apply_retention(self, now_ms: int | None = None) -> int:
        """Delete old segments by ``retention.ms`` / ``retention.bytes``; returns how many.

        Only with ``cleanup.policy`` containing ``delete``; the oldest segments go first and
        the active segment too when it is entirely past retention (a new one is rolled).
        Segments entirely below the log start offset are deleted under any policy.
        """
        now_ms = _now_ms() if now_ms is None else now_ms
        with self._maintenance_lock:
            self._delete_leftover_segments()
            with self._lock:
                self._check_open()
                config = self._config
                count = 0
                if config.delete:
                    count = max(
                        self._retention_ms_breached(now_ms), self._retention_bytes_breached()
                    )
                doomed = self._segments[:count] if count else []
                with self._writing("retention", cut=False):
                    if doomed:
                        if count == len(self._segments):
                            self._roll_locked(self._segments[-1].next_offset)
                        del self._segments[:count]
                        self._log_start_offset = max(
                            self._log_start_offset, self._segments[0].base_offset
                        )
                    doomed += self._take_segments_below_log_start()
                    if doomed:
                        self._write_state()
                if doomed:
                    self.producer_state.truncate_head(self._log_start_offset)
            self._delete_segments(doomed, "past retention")
            return len(doomed)

    def _deletable(self) -> list[LogSegment]:
        """Segments retention may consider: all but an empty active segment."""
        if self._segments[-1].size == 0:
            return self._segments[:-1]
        return list(self._segments)

    def _retention_ms_breached(self, now_ms: int) -> int:
        retention_ms = self._config.retention_ms
        if retention_ms < 0:
            return 0
        count = 0
        for segment in self._deletable():
            if now_ms - segment.largest_timestamp() <= retention_ms:
                break
            count += 1
        return count

    def _retention_bytes_breached(self) -> int:
        retention_bytes = self._config.retention_bytes
        if retention_bytes < 0:
            return 0
        excess = sum(segment.size for segment in self._segments) - retention_bytes
        count = 0
        for segment in self._deletable():
            if excess - segment.size < 0:
                break
            excess -= segment.size
            count += 1
        return count

    def _take_segments_below_log_start(self) -> list[LogSegment]:
        """Remove from the list (not from disk) the segments entirely below the log start.

        A segment qualifies when the next segment starts at or below the log start (Kafka's
        rule), or when it holds data that all lies below it. An empty segment (the first one,
        emptied by compaction) waits for the first rule, so compaction never moves the log
        start.
        """
        log_start = self._log_start_offset
        segments = self._segments
        count = 0
        for i, segment in enumerate(segments):
            next_base = segments[i + 1].base_offset if i + 1 < len(segments) else None
            below = (next_base is not None and next_base <= log_start) or (
                segment.size > 0 and segment.next_offset <= log_start
            )
            if not below:
                break
            count += 1
        if count == 0:
            return []
        if count == len(self._segments):
            self._roll_locked(max(self._segments[-1].next_offset, self._log_start_offset))
        doomed = self._segments[:count]
        del self._segments[:count]
        return doomed

    def _delete_segments(self, segments: list[LogSegment], why: str) -> None:
        """Remove the files of segments already out of the log (out of the list, and below
        the log start that partition-state.json holds), so reads and the log start never
        depend on it. A file the disk does not let go of (unlink failing) is one log line;
        the next retention check tries again, and a restart removes it as well."""
        for segment in segments:
            log.info(
                "%s: deleting segment %d (%d bytes) %s",
                self.directory,
                segment.base_offset,
                segment.size,
                why,
            )
            try:
                segment.delete()
            except OSError as exc:
                self._undeleted.append(segment)
                log.error(
                    "%s: could not delete the files of segment %d (%s); it is no longer "
                    "part of the log, the next retention check tries again",
                    self.directory, segment.base_offset, exc,
                )
        if segments:
            try:
                fsync_dir(self.directory)
            except OSError as exc:  # a crash may bring the files back: the next open removes them
                log.error("%s: could not fsync the directory after deleting segments (%s)",
                          self.directory, exc)

    def _delete_leftover_segments(self) -> None:
        """Retry the segments whose files an earlier deletion could not remove."""
        leftovers, self._undeleted = self._undeleted, []
        self._delete_segments(leftovers, "left over by a failed deletion")

    # -- compaction ----------------------------------------------------------------------------

    def needs_compaction(self, now_ms: int | None = None) -> bool:
        """Whether the cleaner should compact this partition now (Kafka's selection rules).

        Yes when the uncleaned ("dirty") bytes of the cleanable segments are at least
        min.cleanable.dirty.ratio of them, or when the oldest dirty record is older than
        max.compaction.lag.ms; also once delete.retention.ms has passed since the last pass,
        so tombstones and markers that came due go even when little was written since.
        """
        now_ms = _now_ms() if now_ms is None else now_ms
        with self._lock:
            self._check_open()
            config = self._config
            if not config.compact:
                return False
            segments = compactable_segments(
                self._segments,
                now_ms,
                config.min_compaction_lag_ms,
                self._last_stable_offset_locked(),
            )
            if not segments:
                return False
            last = self._last_compaction_ms
            if last is not None and now_ms - last >= config.delete_retention_ms:
                return True
            dirty = [seg for seg in segments if seg.next_offset > self._first_dirty_offset]
            if not dirty:
                return False
            total = sum(seg.size for seg in segments)
            if total == 0 or sum(seg.size for seg in dirty) / total >= (
                config.min_cleanable_dirty_ratio
            ):
                return True
            first = dirty[0]
            oldest = first.rolling_timestamp if first.rolling_timestamp >= 0 else first.created_ms
            return now_ms - oldest > config.max_compaction_lag_ms

    def compact(self, now_ms: int | None = None) -> CompactionStats:
        """One compaction pass over the closed segments (``cleanup.policy`` with ``compact``).

        See compaction.py for the rules. Appends and reads continue during the pass; each
        rewritten segment is swapped in atomically.
        """
        now_ms = _now_ms() if now_ms is None else now_ms
        stats = CompactionStats()
        with self._maintenance_lock:
            with self._lock:
                self._check_open()
                config = self._config
                if not config.compact:
                    return stats
                segments = compactable_segments(
                    self._segments,
                    now_ms,
                    config.min_compaction_lag_ms,
                    self._last_stable_offset_locked(),
                )
                producer_last_offsets = self.producer_state.last_data_offsets()
                aborted = aborted_ranges(
                    entry for segment in self._segments for entry in segment.txn_index.entries
                )
            if not segments:
                return stats
            self._first_dirty_offset = segments[-1].next_offset
            self._last_compaction_ms = now_ms
            # Segments other than the active one never change except through this method
            # (which holds the maintenance lock), so they are read without the main lock.
            horizon_ms = now_ms - config.delete_retention_ms
            latest, removable_markers = scan_for_cleaning(segments, aborted, horizon_ms)
            rules = CleaningRules(
                latest=latest,
                tombstone_horizon_ms=horizon_ms,
                producer_last_offsets=producer_last_offsets,
                aborted=aborted,
                removable_markers=removable_markers,
            )
            for segment in segments:
                if not needs_cleaning(segment, rules):
                    continue
                try:
                    cleaned = write_cleaned(segment, rules, stats)
                except OSError as exc:
                    # Reading the segment or writing its copy failed (open, read, write,
                    # fsync): the log's own files are unchanged, so it stays online and the
                    # copy is dropped (a restart removes one that could not be).
                    self._first_dirty_offset = segment.base_offset
                    log.error("%s: compacting segment %d failed (%s); the log is unchanged, "
                              "the next compaction pass tries again", self.directory,
                              segment.base_offset, exc)
                    break
                try:
                    with self._lock:
                        self._install_cleaned(segment, cleaned)
                except OSError:
                    # The disk failed the swap (an unlink, the rename, an fsync): offline, as
                    # after a failed append; the old segment's log file is still whole, and a
                    # restart removes the unfinished .cleaned file.
                    with self._lock, self._writing("a compaction pass", cut=False):
                        raise
        if stats.segments_cleaned:
            log.info(
                "%s: compacted %d segments, %d records removed (%d tombstones), %d -> %d bytes",
                self.directory,
                stats.segments_cleaned,
                stats.records_removed,
                stats.tombstones_removed,
                stats.bytes_before,
                stats.bytes_after,
            )
        return stats

    def _install_cleaned(self, segment: LogSegment, cleaned: LogSegment) -> None:
        index = self._segments.index(segment)
        if cleaned.size == 0 and index > 0:
            # Nothing left: drop the segment. The first one stays, even empty, so that the
            # log start offset does not move because of compaction.
            cleaned.discard_cleaned()
            del self._segments[index]
            segment.delete()
            fsync_dir(self.directory)
            return
        try:
            cleaned.install_as(segment)
        except BaseException:
            cleaned.close()
            raise
        self._segments[index] = cleaned

    # -- producer state ------------------------------------------------------------------------

    def expire_producers(self, now_ms: int, expiration_ms: int) -> list[int]:
        """Forget producers idle for ``expiration_ms`` (producer.id.expiration.ms)."""
        with self._lock:
            return self.producer_state.remove_expired(now_ms, expiration_ms)

    # -- flushing and lifecycle ------------------------------------------------------------------

    def _flush_locked(self) -> None:
        for segment in self._segments:
            if segment.flushed_size < segment.size:
                segment.fsync()
        self._recovery_point = self._segments[-1].next_offset
        self._unflushed_records = 0
        self._last_flush_ms = _now_ms()

    def flush(self) -> None:
        """fsync everything appended so far; the fsyncs run outside the append lock."""
        with self._lock:
            self._check_open()
            pending = [
                (segment, segment.size, segment.dup_fd())
                for segment in self._segments
                if segment.flushed_size < segment.size
            ]
            txn_indexes = [
                (segment.txn_index, segment.txn_index.written_count)
                for segment in self._segments
                if segment.txn_index.unsynced
            ]
            flushed_to = self._segments[-1].next_offset
            self._unflushed_records = 0
        try:
            for _, _, fd in pending:
                os.fsync(fd)
            for txn_index, written in txn_indexes:
                txn_index.fsync(written)
        except OSError:
            with self._lock, self._writing("a flush", cut=False):
                raise
        finally:
            for _, _, fd in pending:
                os.close(fd)
        with self._lock:
            for segment, size, _ in pending:
                segment.flushed_size = max(segment.flushed_size, size)
            self._recovery_point = max(self._recovery_point, flushed_to)
            self._last_flush_ms = _now_ms()
            if pending and not self._closed:
                # The recovery point on disk tells a restart which damage is a torn write (cut)
                # and which is damage to durable data (kept): keep it close to the truth.
                with self._writing("a flush", cut=False):
                    self._write_state()

    def has_unflushed_data(self) -> bool:
        with self._lock:
            return any(segment.flushed_size < segment.size for segment in self._segments)

    def flush_if_due(self, now_ms: int | None = None) -> bool:
        """Flush if ``flush.ms`` has passed since the last flush or a rolled segment waits.

        Kafka flushes a rolled segment soon after the roll; here the broker's timer does it.
        Returns whether a flush ran.
        """
        now_ms = _now_ms() if now_ms is None else now_ms
        with self._lock:
            if self._closed:
                return False
            rolled_pending = any(
                segment.flushed_size < segment.size for segment in self._segments[:-1]
            )
            flush_ms = self._config.flush_ms
            due = (
                flush_ms != LONG_MAX
                and now_ms - self._last_flush_ms >= flush_ms
                and self._segments[-1].flushed_size < self._segments[-1].size
            )
        if rolled_pending or due:
            self.flush()
            return True
        return False

    def checkpoint(self) -> None:
        """Persist the log start offset and recovery point (the broker calls it periodically)."""
        with self._lock:
            if not self._closed:
                with self._writing("a checkpoint", cut=False):
                    self._write_state()

    def close(self) -> None:
        """Flush, write the indexes, producer snapshot and state, and release the files.

        StorageError when the disk fails any of it (the files are released all the same):
        the next open recovers from the recovery point on disk, as after a crash.
        """
        with self._maintenance_lock, self._lock:
            if self._closed:
                return
            try:
                self._flush_locked()
                for segment in self._segments:
                    segment.flush_indexes()
                self.producer_state.write_snapshot(
                    self.directory / PRODUCER_SNAPSHOT_FILE, self._segments[-1].next_offset
                )
                self._write_state()
            except OSError as exc:
                raise StorageError(
                    f"partition log {self.directory} was not closed cleanly ({exc}); the next "
                    "start recovers it from its last recovery point"
                ) from exc
            finally:
                for segment in self._segments:
                    segment.close()
                self._closed = True

    def close_handles(self) -> None:
        """Release the files without flushing or writing anything, as if the process died.

        For a broker giving up on a failed disk, and for crash tests: the next open recovers
        from the last recovery point.
        """
        with self._maintenance_lock, self._lock:
            for segment in self._segments:
                segment.close()
            self._closed = True

    def delete(self) -> None:
        """Close without flushing and remove the partition directory."""
        with self._maintenance_lock, self._lock:
            for segment in self._segments:
                segment.close()
            self._closed = True
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> PartitionLog:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"PartitionLog({str(self.directory)!r}, log_start_offset={self._log_start_offset}, "
            f"segments={len(self._segments)})"
        )
