"""A call's records as columns (no Python object per record), and where their reports go:
what the emulation holds per partition and hands to its lanes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(slots=True)
class Sink:
    """Where one call's reports go: per record (a Message each) or per written run."""

    callback: Callable | None
    per_record: bool
    topic: str
    partition: int


@dataclass(slots=True)
class Rows:
    """One call's records for one partition, as columns."""

    offsets: np.ndarray | None   # asked offsets (int64); None: conditional or plain records
    keys: Sequence | None        # None: no key anywhere (a list, or a numpy object array)
    values: Sequence
    headers: list | None         # one entry per record; None: no header anywhere
    timestamps: np.ndarray | None  # ms per record (0: none); None: none anywhere
    sink: Sink

    @classmethod
    def one(cls, offset: int | None, key: Any, value: Any, headers: Any,
            timestamp: int | None, sink: Sink) -> Rows:
        return cls(None if offset is None else np.array([offset], np.int64),
                   None if key is None else [key], [value],
                   None if not headers else [headers],
                   np.array([timestamp], np.int64) if timestamp else None, sink)

    def __len__(self) -> int:
        return len(self.values)

    def cut(self, start: int, stop: int) -> Rows:
        if start == 0 and stop >= len(self.values):
            return self
        return Rows(None if self.offsets is None else self.offsets[start:stop],
                    None if self.keys is None else self.keys[start:stop],
                    self.values[start:stop],
                    None if self.headers is None else self.headers[start:stop],
                    None if self.timestamps is None else self.timestamps[start:stop],
                    self.sink)

    def row(self, i: int) -> tuple[Any, Any, Any, int | None]:
        """key, value, headers, timestamp (None: none) of record ``i``."""
        return (None if self.keys is None else self.keys[i], self.values[i],
                None if self.headers is None else self.headers[i],
                None if self.timestamps is None else (int(self.timestamps[i]) or None))


def slice_parts(parts: list[Rows], start: int, stop: int) -> list[Rows]:
    """Records [start, stop) of the concatenation of ``parts``."""
    out: list[Rows] = []
    base = 0
    for part in parts:
        n = len(part)
        lo, hi = max(start - base, 0), min(stop - base, n)
        if lo < hi:
            out.append(part.cut(lo, hi))
        base += n
        if base >= stop:
            break
    return out


def bulk_columns(parts: list[Rows]) -> tuple[list, Any, Any, Any]:
    """values, keys, headers, timestamps of a run for the bulk lane (None where no record
    has one)."""
    if len(parts) == 1:
        part = parts[0]
        values, keys, headers, stamps = part.values, part.keys, part.headers, part.timestamps
    else:
        values = [v for p in parts for v in p.values]
        keys = (None if all(p.keys is None for p in parts) else
                [k for p in parts for k in (p.keys if p.keys is not None else [None] * len(p))])
        headers = (None if all(p.headers is None for p in parts) else
                   [h for p in parts
                    for h in (p.headers if p.headers is not None else [None] * len(p))])
        stamps = (None if all(p.timestamps is None for p in parts) else
                  np.concatenate([p.timestamps if p.timestamps is not None
                                  else np.zeros(len(p), np.int64) for p in parts]))
    if headers is not None:
        headers = [h if h is None or isinstance(h, (list, dict)) else list(h) for h in headers]
    return values, keys, headers, stamps


class FailedRecord:
    """The report object of a record that was refused before librdkafka saw it."""

    def __init__(self, rows: Rows, index: int, err: Any) -> None:
        self._rows, self._index, self._err = rows, index, err

    def error(self) -> Any:
        return self._err

    def offset(self) -> int:
        return -1

    def topic(self) -> str:
        return self._rows.sink.topic

    def partition(self) -> int:
        return self._rows.sink.partition

    def key(self) -> Any:
        return self._rows.row(self._index)[0]

    def value(self) -> Any:
        return self._rows.values[self._index]

    def headers(self) -> Any:
        return self._rows.row(self._index)[2]
