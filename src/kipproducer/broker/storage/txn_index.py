"""A segment's aborted-transaction index, Kafka's ``.txnindex``.

One file per segment (``NNNNNNNNNNNNNNNNNNNN.txnindex``, created empty with the segment, so a
missing file means lost rather than "no aborts"). Each entry is 34 bytes, big-endian, the
same layout as Kafka's ``AbortedTxn``:

    int16 version (0) | int64 producer id | int64 first offset | int64 last offset
    | int64 last stable offset

An entry describes one aborted transaction whose ABORT marker (at ``last offset``) lies in
this segment; ``first offset`` is the transaction's first data offset (possibly in an earlier
segment) and ``last stable offset`` the partition's LSO just after the abort. Entries are in
marker order. A read_committed fetch collects the entries that overlap the range it returns;
once an entry's last stable offset reaches the end of that range no later entry can overlap
it (every transaction still open then started at or after that LSO), so the search stops.

Durability: an entry is appended (page cache) when the marker is appended, and fsynced with
the segment's data by the partition log's flush, so an entry is durable before the recovery
point passes its marker. Segments above the recovery point, and any segment whose file is
missing or fails ``load``'s checks, get their index rebuilt from the log on open.

The entries are also held in memory (aborts are rare; a fetch must not read files).
Not thread-safe: the partition log serializes access.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Final, NamedTuple

from .durable_files import write_all, write_atomically

TXN_INDEX_SUFFIX: Final = ".txnindex"
_VERSION: Final = 0
_ENTRY: Final = struct.Struct(">hqqqq")
ENTRY_SIZE: Final = _ENTRY.size  # 34


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int  # the ABORT marker's offset
    last_stable_offset: int  # the partition's LSO right after the abort


def encode_entries(entries: Iterable[AbortedTxn]) -> bytes:
    return b"".join(_ENTRY.pack(_VERSION, *entry) for entry in entries)


class TransactionIndex:
    """The aborted transactions whose markers are in one segment, and the file they live in."""

    __slots__ = ("path", "base_offset", "entries", "_written", "_synced")

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.entries: list[AbortedTxn] = []
        self._written = 0  # entries appended to the file by this process
        self._synced = 0  # of those, entries known to be fsynced

    def create_empty(self) -> None:
        """Create the (empty) file of a new segment; the caller fsyncs the directory."""
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.close(fd)

    def load(self, next_offset: int) -> bool:
        """Read the file; False when it is missing or does not check out (rebuild it then).

        Checks: a whole number of entries of version 0, markers inside
        [base offset, ``next_offset``) in increasing order, first offset <= last offset.
        """
        self.entries = []
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return False
        if len(data) % ENTRY_SIZE:
            return False
        entries = []
        previous = self.base_offset - 1
        for version, producer_id, first, last, lso in _ENTRY.iter_unpack(data):
            if version != _VERSION or not previous < last < next_offset or first > last:
                return False
            previous = last
            entries.append(AbortedTxn(producer_id, first, last, lso))
        self.entries = entries
        self._written = self._synced = 0
        return True

    def append(self, entry: AbortedTxn) -> None:
        """Add an entry at the end of the file (not fsynced: see ``fsync``)."""
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            size = os.fstat(fd).st_size
            try:
                write_all(fd, _ENTRY.pack(_VERSION, *entry))
            except BaseException:
                # Disk full or I/O error: no partial entry may stay behind.
                os.ftruncate(fd, size)
                raise
        finally:
            os.close(fd)
        self.entries.append(entry)
        self._written += 1

    @property
    def unsynced(self) -> int:
        """How many appended entries are not yet known to be durable (0: nothing to fsync)."""
        return self._written - self._synced

    def fsync(self, written: int | None = None) -> None:
        """fsync the file; ``written``: the ``written_count`` read before (flush outside locks)."""
        count = self._written if written is None else written
        if count <= self._synced:
            return
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:  # the segment was deleted meanwhile
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self._synced = max(self._synced, count)

    @property
    def written_count(self) -> int:
        return self._written

    def replace(self, entries: list[AbortedTxn]) -> None:
        """Rewrite the whole file (rebuild, compaction) atomically and durably."""
        write_atomically(self.path, encode_entries(entries))
        self.entries = list(entries)
        self._written = self._synced = 0

    def collect(self, start_offset: int, upper_offset: int) -> tuple[list[AbortedTxn], bool]:
        """Entries overlapping [start_offset, upper_offset); True when no later segment can
        hold more (an entry's last stable offset reached ``upper_offset``)."""
        found = []
        for entry in self.entries:
            if entry.last_offset >= start_offset and entry.first_offset < upper_offset:
                found.append(entry)
            if entry.last_stable_offset >= upper_offset:
                return found, True
        return found, False

    def delete_file(self) -> None:
        self.path.unlink(missing_ok=True)
