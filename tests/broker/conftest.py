"""Shared helpers for the broker storage tests: real batches from the project's codec."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from kipproducer.records import Record, decode_batches, encode_batch


class Kit:
    """Builders and readers, as a fixture so hypothesis tests can use it (session scope)."""

    @staticmethod
    def batch(
        records: Sequence[tuple[Any, Any] | tuple[Any, Any, int]],
        *,
        base_offset: int = 0,
        timestamp: int = 1_000,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        compression: str | None = None,
    ) -> bytearray:
        """A writable batch of (key, value[, timestamp]) records."""
        encoded = [
            (r[0], r[1], None, r[2] if len(r) > 2 else timestamp)  # type: ignore[misc]
            for r in records
        ]
        return bytearray(
            encode_batch(
                encoded,
                base_offset=base_offset,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                base_sequence=base_sequence,
                compression=compression,
            )
        )

    @staticmethod
    def values(n: int, prefix: bytes = b"v", size: int = 0) -> list[tuple[bytes, bytes]]:
        return [(b"k%d" % i, prefix + b"%d" % i + b"x" * size) for i in range(n)]

    @staticmethod
    def records(data: Any) -> list[Record]:
        """Every record of the batches in ``data``, validated."""
        return [r for b in decode_batches(data, validate=True, strict=False) for r in b]

    @staticmethod
    def read_all(log: Any, start: int | None = None, max_bytes: int = 1 << 20) -> list[Record]:
        """Fetch from ``start`` (default: log start) to the log end, like a consumer."""
        offset = log.log_start_offset if start is None else start
        out: list[Record] = []
        while offset < log.log_end_offset:
            result = log.read(offset, max_bytes)
            if not result.records:
                break
            batches = list(decode_batches(result.records, validate=True, strict=False))
            out.extend(r for b in batches for r in b if r.offset >= offset)
            offset = result.next_offset
        return out


@pytest.fixture(scope="session")
def kit() -> Kit:
    return Kit()
