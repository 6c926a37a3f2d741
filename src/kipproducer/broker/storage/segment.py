"""One log segment: a ``.log`` file of record batches plus its offset, time and aborted-
transaction indexes (``.index``, ``.timeindex``: index.py; ``.txnindex``: txn_index.py).

Files are named by the segment's base offset, 20 digits (``00000000000000000042.log``), as in
Kafka. Batches are stored exactly as they travel on the wire (RecordBatch v2), so a fetch is
a byte range of the file.

I/O is plain ``os.write`` (appends) and ``os.pread`` (reads) on a file descriptor the
segment keeps open. ``pread`` into a fresh buffer measured as fast as slicing an ``mmap`` for
1 MiB fetches (both copy at ~25 GB/s from the page cache, far above what the network layer
moves), and unlike an ``mmap`` it cannot crash the process with SIGBUS on an I/O error or a
truncated file, needs no remapping as the active segment grows and uses no address space.

A segment is not thread-safe; PartitionLog serializes access with its lock.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kipproducer.crc32c import crc32c
from kipproducer.records import (
    BATCH_HEADER_SIZE,
    LAYOUT,
    LOG_OVERHEAD,
    Batch,
    CorruptRecordError,
    decode_batches,
    validate_batch,
)

from .durable_files import fsync_dir, write_all
from .index import OffsetIndex, TimeIndex, fits_relative_offset
from .txn_index import TXN_INDEX_SUFFIX, TransactionIndex

log = logging.getLogger("kipproducer.broker.storage")

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
CLEANED_SUFFIX = ".cleaned"  # compaction output not yet swapped in

# Reads walk batch headers inside one pread window; this much is read beyond the fetch size so
# the batch an index entry points at and the wanted batch usually share a window.
_READ_SLACK = 64 * 1024
_SCAN_WINDOW = 4 * 1024 * 1024
# With a huge index.interval.bytes the first window would be huge too: past this, batches are
# skipped window by window instead.
_MAX_SKIP = 1024 * 1024
_BATCH_LENGTH_POS = LAYOUT["batch_length"]
_CRC_FROM = LAYOUT["attributes"]  # a batch's CRC-32C covers its bytes from here on


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


def parse_segment_name(file_name: str) -> int | None:
    """The base offset of a ``NNNN.log`` file name, None for any other file."""
    stem, dot, suffix = file_name.partition(".")
    if dot and suffix == LOG_SUFFIX[1:] and len(stem) == 20 and stem.isdigit():
        return int(stem)
    return None


class SegmentCorruptionError(Exception):
    """Data at ``position`` of a segment is not a whole, valid batch."""

    def __init__(self, position: int, reason: str) -> None:
        super().__init__(f"at byte {position}: {reason}")
        self.position = position
        self.reason = reason


class StaleIndexError(SegmentCorruptionError):
    """An offset index entry does not point at the batch it names: rebuild the indexes."""


class DurableDataCorruptError(SegmentCorruptionError):
    """Recovery found a bad batch among data that was fsynced (below the recovery point):
    cutting the segment there would drop records that were durable, so it is not cut."""

    base_offset = -1  # the segment's, filled in by the log


@dataclass(frozen=True, slots=True)
class SegmentSlice:
    """Whole batches read from one segment."""

    records: memoryview
    first_offset: int  # base offset of the first batch
    next_offset: int  # offset after the last batch


@dataclass(frozen=True, slots=True)
class RecoveryOutcome:
    truncated_bytes: int
    reason: str | None  # why the tail was cut, None when nothing was


class LogSegment:
    """A segment's files and what the log needs to know about them without reading them."""

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        fd: int,
        *,
        index_interval_bytes: int,
        log_path: Path | None = None,
    ) -> None:
        name = segment_name(base_offset)
        self.directory = directory
        self.base_offset = base_offset
        self.log_path = log_path or directory / (name + LOG_SUFFIX)
        self.offset_index = OffsetIndex(directory / (name + INDEX_SUFFIX), base_offset)
        self.time_index = TimeIndex(directory / (name + TIME_INDEX_SUFFIX), base_offset)
        self.txn_index = TransactionIndex(directory / (name + TXN_INDEX_SUFFIX), base_offset)
        self.index_interval_bytes = index_interval_bytes
        self._fd = fd
        self.size = os.fstat(fd).st_size
        self.next_offset = base_offset  # offset after the last batch
        self.max_timestamp = -1
        self.max_timestamp_offset = -1  # last offset of the batch holding max_timestamp
        # segment.ms counts from the first batch's timestamp, or from the segment's creation
        # (in this process) when there is no usable timestamp, as Kafka does.
        self.rolling_timestamp = -1
        self.created_ms = int(time.time() * 1000)
        self.flushed_size = 0  # bytes known to be on stable storage
        self._bytes_since_index_entry = 0

    # -- opening and creating ----------------------------------------------------------------

    @classmethod
    def create(
        cls, directory: Path, base_offset: int, *, index_interval_bytes: int, cleaned: bool = False
    ) -> LogSegment:
        """A new, empty segment file (``cleaned``: the compaction output for a segment)."""
        path = directory / (segment_name(base_offset) + LOG_SUFFIX)
        if cleaned:
            path = path.with_name(path.name + CLEANED_SUFFIX)
        flags = os.O_RDWR | os.O_CREAT | os.O_APPEND | (os.O_TRUNC if cleaned else os.O_EXCL)
        fd = os.open(path, flags, 0o644)
        try:
            segment = cls(
                directory, base_offset, fd, index_interval_bytes=index_interval_bytes,
                log_path=path,
            )
            if not cleaned:
                # An empty file says "no aborts here"; a missing one says "lost, rebuild it". A
                # compaction output gets its file when it is installed.
                segment.txn_index.create_empty()
        except BaseException:
            # Not left behind: an empty segment's name is its base offset, which a restart
            # would take as the log end.
            os.close(fd)
            path.unlink(missing_ok=True)
            raise
        # A new segment has nothing unflushed: its (empty) content is durable once the
        # directory entry is, which the log fsyncs.
        return segment

    @classmethod
    def open_existing(
        cls, directory: Path, base_offset: int, *, index_interval_bytes: int
    ) -> LogSegment:
        path = directory / (segment_name(base_offset) + LOG_SUFFIX)
        fd = os.open(path, os.O_RDWR | os.O_APPEND)
        return cls(directory, base_offset, fd, index_interval_bytes=index_interval_bytes)

    def load(self) -> bool:
        """Trust the index files of a cleanly written segment; False if they do not check out.

        The indexes are verified (sorted, inside the file, the last offset entry points at a
        batch header with the offset it claims), then the tail after the last index entry is
        walked (headers only) for the segment's next offset and max timestamp. On False the
        caller rebuilds with ``recover``.
        """
        if not self.offset_index.load(self.size) or not self.time_index.load(2**31 - 1):
            return False
        start = 0
        last = self.offset_index.last_entry()
        if last is not None:
            offset, position = last
            header = os.pread(self._fd, LOG_OVERHEAD, position)
            if len(header) < LOG_OVERHEAD or int.from_bytes(header[:8], "big") != offset:
                return False
            start = position
        last_ts_entry = self.time_index.last_entry()
        if last_ts_entry is not None:
            self.max_timestamp, self.max_timestamp_offset = last_ts_entry
        try:
            for _, batch in self.iter_batches(start):
                self._note_loaded_batch(batch)
        except SegmentCorruptionError:
            return False
        self._bytes_since_index_entry = self.size - start
        if last_ts_entry is not None and last_ts_entry[1] >= self.next_offset:
            return False
        self._read_rolling_timestamp()
        self.flushed_size = self.size
        return True

    def recover(
        self,
        validate_from_offset: int,
        min_offset: int,
        *,
        every_append_fsynced: bool = False,
        followed_by_segment: bool = False,
    ) -> RecoveryOutcome:
        """Rebuild the indexes from the file and cut it at the first bad batch.

        Every batch's header is checked (length, magic, offsets that increase and fit the
        segment); batches whose last offset is >= ``validate_from_offset`` are also fully
        validated (CRC-32C and every record). ``min_offset``: the first batch may not start
        below it (the previous segment's next offset).

        ``validate_from_offset`` is the recovery point: everything below it was fsynced. A
        bad batch there is damage to durable data (a bit flip, a failing disk), not a torn
        write: DurableDataCorruptError is raised and the file is left as it is. The recovery
        point on disk lags the last fsync, so with ``every_append_fsynced`` (flush.messages=1)
        a bad batch followed by a whole valid one is such damage too (only the last append can
        have been torn), and so is any bad batch of a segment followed by
        ``followed_by_segment``: a segment is fsynced before the next one is created.
        """
        self.offset_index.clear()
        self.time_index.clear()
        self.next_offset = self.base_offset
        self.max_timestamp = self.max_timestamp_offset = -1
        self._bytes_since_index_entry = 0
        expected = max(min_offset, self.base_offset)
        good_end = 0
        reason: str | None = None
        try:
            for position, batch in self.iter_batches(0):
                last_offset = batch.last_offset
                if batch.base_offset < expected:
                    reason = (
                        f"batch at byte {position} has base offset {batch.base_offset}, below "
                        f"the expected {expected}"
                    )
                    break
                if batch.last_offset_delta < 0 or not fits_relative_offset(
                    last_offset, self.base_offset
                ):
                    reason = f"batch at byte {position} has an impossible offset range"
                    break
                if last_offset >= validate_from_offset:
                    try:
                        validate_batch(batch.raw, strict=False)
                    except CorruptRecordError as exc:
                        reason = f"batch at byte {position} (offset {batch.base_offset}): {exc}"
                        if every_append_fsynced and self._valid_batch_at(
                                position + batch.size_in_bytes, last_offset + 1):
                            # Not a torn tail: a later append reached the disk whole, and it
                            # was written after this batch's fsync (flush.messages=1).
                            raise DurableDataCorruptError(
                                position,
                                f"{reason}; a whole batch follows it, and with "
                                "flush.messages=1 it was fsynced before that one was written",
                            ) from exc
                        break
                self._track(
                    batch.base_offset,
                    last_offset,
                    batch.max_timestamp,
                    position,
                    batch.size_in_bytes,
                    grow=False,
                )
                good_end = position + batch.size_in_bytes
                expected = last_offset + 1
        except DurableDataCorruptError:
            raise
        except SegmentCorruptionError as exc:
            reason = str(exc)
        if reason is not None and followed_by_segment:
            raise DurableDataCorruptError(
                good_end,
                f"{reason}; a later segment exists, and a segment is fsynced when the next "
                "one is created",
            )
        if reason is not None and expected < validate_from_offset:
            raise DurableDataCorruptError(
                good_end,
                f"{reason}; the offsets from {expected} to the recovery point "
                f"{validate_from_offset} were fsynced",
            )
        truncated = self.size - good_end
        if truncated:
            os.ftruncate(self._fd, good_end)
            os.fsync(self._fd)
            self.size = good_end
            reason = reason or "trailing bytes"
        self._read_rolling_timestamp()
        self.flushed_size = self.size
        self.flush_indexes()
        return RecoveryOutcome(truncated, reason if truncated else None)

    def rebuild_indexes(self, min_offset: int) -> None:
        """Rebuild the offset and time indexes from the log (headers only), cutting nothing:
        damage found on the way raises DurableDataCorruptError."""
        flushed = self.flushed_size
        self.recover(validate_from_offset=2**63 - 1, min_offset=min_offset)
        self.flushed_size = flushed

    def _valid_batch_at(self, position: int, min_offset: int) -> bool:
        """Whether a whole batch with a good CRC, starting at or after ``min_offset``, lies at
        ``position``."""
        try:
            for _, batch in self.iter_batches(position, window=64 * 1024):
                validate_batch(batch.raw, strict=False)
                return batch.base_offset >= min_offset
        except (SegmentCorruptionError, CorruptRecordError):
            return False
        return False

    def _read_rolling_timestamp(self) -> None:
        self.rolling_timestamp = -1
        if self.size >= BATCH_HEADER_SIZE:
            header = os.pread(self._fd, BATCH_HEADER_SIZE, 0)
            max_ts_pos = LAYOUT["max_timestamp"]
            self.rolling_timestamp = int.from_bytes(
                header[max_ts_pos : max_ts_pos + 8], "big", signed=True
            )

    # -- appending ---------------------------------------------------------------------------

    def append(
        self,
        data: bytes | bytearray | memoryview,
        base_offset: int,
        last_offset: int,
        max_timestamp: int,
    ) -> int:
        """Write one batch (already carrying its final offsets) at the end; returns its position."""
        position = self.size
        try:
            write_all(self._fd, data)
        except BaseException:
            # A short write (disk full, I/O error) must not leave a partial batch that the
            # next append (O_APPEND) would follow: cut the file back to where it was.
            os.ftruncate(self._fd, position)
            raise
        self._track(base_offset, last_offset, max_timestamp, position, len(data))
        if position == 0:
            self.rolling_timestamp = max_timestamp
        return position

    def cut_back(self, size: int) -> None:
        """Best effort, for a log going offline: cut the file to ``size`` bytes and make the
        cut durable. Errors are ignored (the disk is failing already); whatever is left, a
        restart validates past the recovery point."""
        if self._fd < 0:
            return
        try:
            if os.fstat(self._fd).st_size > size:
                os.ftruncate(self._fd, size)
                os.fsync(self._fd)
        except OSError as exc:
            log.error("%s: could not cut back to %d bytes: %s", self.log_path, size, exc)

    def remove_unsafely(self) -> None:
        """Best effort, for a log going offline: delete a segment that a failed append
        created, and make the deletion durable (errors are logged and ignored)."""
        try:
            self.delete()
            fsync_dir(self.directory)
        except OSError as exc:
            log.error("%s: could not remove it: %s", self.log_path, exc)

    def _note_loaded_batch(self, batch: Batch) -> None:
        """Account for a batch of a loaded segment: its index files already cover it."""
        if batch.max_timestamp > self.max_timestamp:
            self.max_timestamp = batch.max_timestamp
            self.max_timestamp_offset = batch.last_offset
        self.next_offset = batch.last_offset + 1

    def _track(
        self,
        base_offset: int,
        last_offset: int,
        max_timestamp: int,
        position: int,
        size: int,
        *,
        grow: bool = True,
    ) -> None:
        """Index bookkeeping for a batch at ``position`` (Kafka's index.interval.bytes rule)."""
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.max_timestamp_offset = last_offset
        if self._bytes_since_index_entry > self.index_interval_bytes:
            self.offset_index.append(base_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.max_timestamp_offset)
            self._bytes_since_index_entry = 0
        self._bytes_since_index_entry += size
        self.next_offset = last_offset + 1
        if grow:
            self.size = position + size

    def can_hold(self, last_offset: int) -> bool:
        """Whether a batch ending at ``last_offset`` can be indexed relative to this segment."""
        return fits_relative_offset(last_offset, self.base_offset)

    # -- reading -----------------------------------------------------------------------------

    def iter_batches(
        self, start: int = 0, end: int | None = None, *, window: int = _SCAN_WINDOW
    ) -> Iterator[tuple[int, Batch]]:
        """(file position, Batch) for each whole batch in [start, end), headers checked only.

        Raises SegmentCorruptionError at the first bad or cut-short batch. The Batch objects
        point into a read buffer and stay valid after the iteration.
        """
        end = self.size if end is None else end
        pos = start
        want = window
        while pos < end:
            data = os.pread(self._fd, min(want, end - pos), pos)
            if not data:
                raise SegmentCorruptionError(pos, "the file ends early")
            consumed = 0
            try:
                for batch in decode_batches(data, validate=False, strict=False, allow_partial=True):
                    yield pos + batch.position, batch
                    consumed = batch.position + batch.size_in_bytes
            except CorruptRecordError as exc:
                raise SegmentCorruptionError(pos + consumed, str(exc)) from exc
            if consumed == 0:
                # The first batch does not fit the window: its header says how big it is.
                if len(data) < LOG_OVERHEAD:
                    raise SegmentCorruptionError(pos, "a batch is cut short")
                need = LOG_OVERHEAD + int.from_bytes(
                    data[_BATCH_LENGTH_POS : _BATCH_LENGTH_POS + 4], "big", signed=True
                )
                if need > end - pos or need <= len(data):
                    raise SegmentCorruptionError(pos, "a batch is cut short")
                want = need
                continue
            want = window
            pos += consumed

    def read(
        self, start_offset: int, max_bytes: int, limit_offset: int, *, min_one: bool
    ) -> SegmentSlice | None:
        """Whole batches from the first one with offsets at or after ``start_offset``.

        Batches are taken while their total stays within ``max_bytes`` (the first one is taken
        whatever its size when ``min_one``) and their last offset is below ``limit_offset``.
        None when the segment has no batch at or after ``start_offset`` (the caller moves on to
        the next segment); an empty slice when there is one but it may not be returned.

        Usually one pread: from the index entry before ``start_offset``, ``max_bytes`` plus
        the index interval plus some slack, then the batch headers are walked in that buffer
        and the answer is a slice of it.
        """
        indexed, pos = self.offset_index.lookup_entry(start_offset)
        first_pos = end_pos = -1
        first_offset = next_offset = start_offset
        want = max_bytes + min(self.index_interval_bytes, _MAX_SKIP) + _READ_SLACK
        data = b""
        data_pos = 0
        blocked = False
        while pos < self.size:
            data = os.pread(self._fd, min(want, self.size - pos), pos)
            data_pos = pos
            if indexed >= 0:
                # The index entry must point at the batch it names: a damaged index file
                # that passed load's checks would otherwise start the read at a wrong batch.
                if int.from_bytes(data[:8], "big", signed=True) != indexed:
                    raise StaleIndexError(pos, f"the offset index says offset {indexed} "
                                          "starts here, the log does not")
                indexed = -1
            consumed = 0
            try:
                for batch in decode_batches(data, validate=False, strict=False, allow_partial=True):
                    batch_end = batch.position + batch.size_in_bytes
                    if first_pos < 0 and batch.last_offset < start_offset:
                        consumed = batch_end
                        continue
                    taken = 0 if first_pos < 0 else end_pos - first_pos
                    if batch.last_offset >= limit_offset or (
                        taken + batch.size_in_bytes > max_bytes and (taken or not min_one)
                    ):
                        blocked = True
                        break
                    if crc32c(batch.raw[_CRC_FROM:]) != batch.crc:
                        # A bit flipped on the disk: never served as if it were good. The
                        # batches before it are; a read starting at it fails.
                        if first_pos < 0:
                            raise SegmentCorruptionError(
                                pos + batch.position,
                                f"the batch at offset {batch.base_offset} fails its CRC-32C "
                                "check (damaged on the disk)",
                            )
                        blocked = True
                        break
                    if first_pos < 0:
                        first_pos = pos + batch.position
                        first_offset = batch.base_offset
                    end_pos = pos + batch_end
                    next_offset = batch.next_offset
                    consumed = batch_end
            except CorruptRecordError as exc:
                raise SegmentCorruptionError(pos + consumed, str(exc)) from exc
            if blocked:
                break
            pos += consumed
            taken = 0 if first_pos < 0 else end_pos - first_pos
            if pos >= self.size or (first_pos >= 0 and taken >= max_bytes):
                break
            if consumed:
                # The next batch's header may already be in this buffer: if that batch cannot
                # be returned anyway, stop here instead of reading it (and later re-reading
                # the answer from a second buffer).
                rest = len(data) - consumed
                if first_pos >= 0 and rest >= LOG_OVERHEAD:
                    next_size = LOG_OVERHEAD + int.from_bytes(
                        data[consumed + _BATCH_LENGTH_POS : consumed + _BATCH_LENGTH_POS + 4],
                        "big", signed=True)
                    if taken + next_size > max_bytes:
                        break
                want = max_bytes - taken + _READ_SLACK
                continue
            # The batch at pos is larger than the window: read it whole next round, unless it
            # could not be returned anyway.
            if len(data) < LOG_OVERHEAD:
                raise SegmentCorruptionError(pos, "a batch is cut short")
            need = LOG_OVERHEAD + int.from_bytes(
                data[_BATCH_LENGTH_POS : _BATCH_LENGTH_POS + 4], "big", signed=True
            )
            if need <= len(data) or pos + need > self.size:
                raise SegmentCorruptionError(pos, "a batch is cut short")
            if first_pos >= 0 and taken + need > max_bytes:
                break
            want = need
        if first_pos < 0:
            return SegmentSlice(memoryview(b""), start_offset, start_offset) if blocked else None
        if data_pos <= first_pos and end_pos <= data_pos + len(data):
            view = memoryview(data)[first_pos - data_pos : end_pos - data_pos]
        else:
            view = memoryview(os.pread(self._fd, end_pos - first_pos, first_pos))
        return SegmentSlice(view, first_offset, next_offset)

    # -- durability and lifecycle ------------------------------------------------------------

    def fsync(self) -> None:
        os.fsync(self._fd)
        self.txn_index.fsync()
        self.flushed_size = self.size

    def dup_fd(self) -> int:
        """A duplicate descriptor, so a flush can fsync outside the log's lock."""
        return os.dup(self._fd)

    def finish(self) -> None:
        """The segment stops being active: record its max timestamp as the last time entry."""
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.max_timestamp_offset)
        self.flush_indexes()

    def finish_cleaned(self) -> None:
        """Seal a compaction output: final time index entry (in memory) and data fsynced.

        Its index files are written only by ``install_as``, once the old ones are gone.
        """
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.max_timestamp_offset)
        self.fsync()

    def discard_cleaned(self) -> None:
        """Drop a compaction output that is not installed (its index paths are not its own)."""
        self.close()
        self.log_path.unlink(missing_ok=True)

    def flush_indexes(self, *, fsync: bool = False) -> None:
        self.offset_index.flush(fsync=fsync)
        self.time_index.flush(fsync=fsync)

    def largest_timestamp(self) -> int:
        """The newest record timestamp, or the file's mtime when no record has one (Kafka)."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        try:
            return int(os.fstat(self._fd).st_mtime * 1000)
        except OSError:
            return -1

    def install_as(self, replaced: LogSegment) -> None:
        """Swap this compaction output in for ``replaced`` (same base offset), crash-safely.

        The replaced segment's indexes go first: a crash before the rename leaves the old
        log without indexes, after it the new log without indexes, and both are rebuilt.
        """
        replaced.close()
        replaced.offset_index.delete_file()
        replaced.time_index.delete_file()
        replaced.txn_index.delete_file()
        os.replace(self.log_path, replaced.log_path)
        self.log_path = replaced.log_path
        fsync_dir(self.directory)
        self.flush_indexes(fsync=True)
        self.txn_index.replace(self.txn_index.entries)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def delete(self) -> None:
        self.close()
        for path in (
            self.log_path,
            self.offset_index.path,
            self.time_index.path,
            self.txn_index.path,
        ):
            path.unlink(missing_ok=True)

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def __repr__(self) -> str:
        return (
            f"LogSegment(base_offset={self.base_offset}, next_offset={self.next_offset}, "
            f"size={self.size})"
        )
