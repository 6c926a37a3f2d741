"""The two sparse indexes of a log segment, held in memory and mirrored to a file.

``.index`` (OffsetIndex): entries of big-endian ``int32 relative offset, int32 position``:
the batch whose base offset is ``segment base + relative offset`` starts at byte ``position``
of the ``.log`` file. An entry is added every ``index.interval.bytes`` of log, so a lookup
lands at most that many bytes (plus one batch) before the batch it is looking for.

``.timeindex`` (TimeIndex): entries of big-endian ``int64 timestamp, int64 relative offset``:
the largest record timestamp among all records up to and including that offset (the last
offset of the batch that raised it). Timestamps strictly increase from entry to entry.

Both are derived data: the log is the truth and an index can always be rebuilt from it. So
entries are written to the file lazily (on flush, roll and close) rather than on every append,
and a file that fails ``load``'s checks is simply rebuilt by the segment.

The formats are close to Kafka's but not the same (Kafka indexes a batch's last offset and
packs time entries in 12 bytes); both fields of an entry have one width here so that a whole
file loads with one ``array.frombytes``.
"""

from __future__ import annotations

import operator
import os
import struct
import sys
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from itertools import islice
from pathlib import Path

from .durable_files import write_atomically

_INT32_MAX = 2**31 - 1


class _SparseIndex:
    """Two parallel arrays (keys, values) sorted by key, with the file they persist to."""

    _entry: struct.Struct
    _key_code: str
    _value_code: str  # the same width as _key_code (files are read as one array)

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._keys = array(self._key_code)
        self._values = array(self._value_code)
        self._persisted = 0  # entries already in the file
        self._rewrite = True  # the file does not match the first _persisted entries

    def __len__(self) -> int:
        return len(self._keys)

    def clear(self) -> None:
        self._keys = array(self._key_code)
        self._values = array(self._value_code)
        self._rewrite = True

    def _read_entries(self) -> tuple[array, array] | None:
        """The file's entries, or None when it is missing or not a whole number of entries."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        size = self._entry.size
        if len(data) % size:
            return None
        # Both fields of an entry have the same width: one C-level copy, then split.
        fields = array(self._key_code)
        fields.frombytes(data)
        if sys.byteorder == "little":
            fields.byteswap()
        return fields[0::2], fields[1::2]

    def flush(self, *, fsync: bool = False) -> None:
        """Write the entries not yet in the file (or the whole file if it was truncated)."""
        if self._rewrite:
            write_atomically(self.path, self._encode(0))
        elif self._persisted < len(self._keys):
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, self._encode(self._persisted))
                if fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
        self._persisted = len(self._keys)
        self._rewrite = False

    def _encode(self, start: int) -> bytes:
        """Entries from ``start`` on, interleaved and big-endian, as the file holds them."""
        count = len(self._keys) - start
        fields = array(self._key_code, bytes(2 * count * self._keys.itemsize))
        fields[0::2] = self._keys[start:]
        fields[1::2] = self._values[start:]
        if sys.byteorder == "little":
            fields.byteswap()
        return fields.tobytes()

    def delete_file(self) -> None:
        self.path.unlink(missing_ok=True)


class OffsetIndex(_SparseIndex):
    """Relative batch base offset -> byte position in the segment's log file."""

    _entry = struct.Struct(">ii")
    _key_code = "i"
    _value_code = "i"

    def append(self, base_offset: int, position: int) -> None:
        relative = base_offset - self.base_offset
        if self._keys and (relative <= self._keys[-1] or position <= self._values[-1]):
            raise ValueError(
                f"offset index entries must increase: {base_offset}@{position} after "
                f"{self._keys[-1] + self.base_offset}@{self._values[-1]}"
            )
        self._keys.append(relative)
        self._values.append(position)

    def lookup(self, offset: int) -> int:
        """Position of the last indexed batch starting at or before ``offset`` (0 if none)."""
        i = bisect_right(self._keys, offset - self.base_offset) - 1
        return self._values[i] if i >= 0 else 0

    def lookup_entry(self, offset: int) -> tuple[int, int]:
        """(absolute base offset, position) of the last entry at or before ``offset``, or
        (-1, 0) when there is none: where a read starts, and the offset of the batch that
        must be there."""
        i = bisect_right(self._keys, offset - self.base_offset) - 1
        return (self._keys[i] + self.base_offset, self._values[i]) if i >= 0 else (-1, 0)

    def last_entry(self) -> tuple[int, int] | None:
        """(absolute base offset, position) of the last entry."""
        if not self._keys:
            return None
        return self._keys[-1] + self.base_offset, self._values[-1]

    def load(self, segment_size: int) -> bool:
        """Read the file; False (and empty) when it is missing or inconsistent."""
        self.clear()
        entries = self._read_entries()
        if entries is None:
            return False
        keys, positions = entries
        if keys and (
            keys[0] < 0
            or positions[0] < 0
            or positions[-1] >= segment_size
            or not _increasing(keys, operator.lt)
            or not _increasing(positions, operator.lt)
        ):
            return False
        self._keys, self._values = keys, positions
        self._persisted = len(keys)
        self._rewrite = False
        return True


class TimeIndex(_SparseIndex):
    """Largest timestamp so far -> the relative offset where it was reached."""

    _entry = struct.Struct(">qq")
    _key_code = "q"
    _value_code = "q"

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add an entry if ``timestamp`` is larger than the last one (entries must increase)."""
        if self._keys and timestamp <= self._keys[-1]:
            return
        relative = offset - self.base_offset
        if self._values and relative < self._values[-1]:
            return
        self._keys.append(timestamp)
        self._values.append(relative)

    def lookup_before(self, timestamp: int) -> int | None:
        """The offset of the last entry whose timestamp is < ``timestamp``, None if none.

        Every record up to and including that offset has a smaller timestamp, so the first
        record with a timestamp >= ``timestamp`` comes after it.
        """
        i = bisect_left(self._keys, timestamp) - 1
        return self._values[i] + self.base_offset if i >= 0 else None

    def last_entry(self) -> tuple[int, int] | None:
        """(timestamp, absolute offset) of the last entry: the segment's max timestamp."""
        if not self._keys:
            return None
        return self._keys[-1], self._values[-1] + self.base_offset

    def load(self, max_relative_offset: int) -> bool:
        self.clear()
        entries = self._read_entries()
        if entries is None:
            return False
        timestamps, offsets = entries
        if offsets and (
            offsets[0] < 0
            or offsets[-1] > max_relative_offset
            or not _increasing(timestamps, operator.lt)
            or not _increasing(offsets, operator.le)
        ):
            return False
        self._keys, self._values = timestamps, offsets
        self._persisted = len(timestamps)
        self._rewrite = False
        return True


def _increasing(values: array, compare: Callable[[int, int], bool]) -> bool:
    """Whether ``compare`` holds for every pair of neighbours (at C speed, no Python loop)."""
    return all(map(compare, values, islice(values, 1, None)))


def fits_relative_offset(offset: int, base_offset: int) -> bool:
    """Whether ``offset`` can be stored relative to a segment starting at ``base_offset``."""
    return 0 <= offset - base_offset <= _INT32_MAX
