"""The record columns of the bulk calls (``produce_arrays`` and the paths that stand in for it:
librdkafka's produce() per record, the stock-cluster emulation): turning a column into rows and
the accumulator's rule for headers. One copy, imported by producer.py and stock/hooks.py.

A column is a list / array of values, a pyarrow array (``to_pylist``), or a ``(data, offsets)``
pair: one bytes-like buffer and int offsets, record i being ``data[offsets[i]:offsets[i+1]]``.
"""

from __future__ import annotations

from typing import Any


def as_list(column: Any) -> list:
    """Every record of ``column`` as a Python list."""
    if hasattr(column, "to_pylist"):
        return column.to_pylist()
    if isinstance(column, tuple) and len(column) == 2:
        data, offsets = column
        data = bytes(data)
        return [data[int(offsets[i]):int(offsets[i + 1])] for i in range(len(offsets) - 1)]
    return list(column)


def column_rows(column: Any, start: int, stop: int) -> Any:
    """Records ``start`` to ``stop`` of a column ((data, offsets) columns keep absolute
    offsets into their data)."""
    if column is None:
        return None
    if isinstance(column, tuple) and len(column) == 2 and not isinstance(
            column[0], (bytes, type(None))):
        data, offsets = column
        return (data, offsets[start:stop + 1])
    return column[start:stop]


def per_record_headers(headers: Any, total: int) -> bool:
    """The accumulator's rule: n entries, the first None / a list / a dict: one per record;
    anything else (a dict, a list of (key, value) pairs) is shared by every record."""
    return (headers is not None and not isinstance(headers, dict)
            and hasattr(headers, "__len__") and hasattr(headers, "__getitem__")
            and len(headers) == total and total > 0
            and (headers[0] is None or isinstance(headers[0], (list, dict))))


def header_rows(headers: Any, start: int, stop: int, total: int) -> Any:
    """Records ``start`` to ``stop``'s headers: a slice of per-record headers, else the shared
    ones."""
    if per_record_headers(headers, total):
        return headers[start:stop]
    return headers
