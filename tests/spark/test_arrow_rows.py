"""kipproducer._arrow_rows: record batches (as a Fetch answer holds them, walked by the
mirror's batches.walk) decoded in C into Arrow columns, checked against the project's record
decoder for every codec, null keys and values, headers, LogAppendTime, offsets cut at both
ends of a range, and a malformed record. No Spark needed (pyarrow only)."""

from __future__ import annotations

import struct

import pyarrow as pa
import pytest

from kipproducer._arrow_rows import ArrowRows
from kipproducer._records import decode_batches, encode_batch
from kipproducer.errors import CorruptRecordError
from kipproducer.mirror.batches import walk
from kipproducer.spark.fetch_read import arrow_schema, to_record_batch

BASE_MS = 1_700_000_000_000


def records(n: int, tag: str) -> list[tuple]:
    return [(None if i % 5 == 0 else f"{tag}k{i}".encode(),
             None if i % 7 == 3 else f"{tag}v{i}".encode() * (i % 4),
             [("h", b"x%d" % i), ("n", None)] if i % 2 else [],
             BASE_MS + i) for i in range(n)]


def answer(codecs: list[str | None], per_batch: int = 50) -> tuple[bytes, list[tuple]]:
    """Batches back to back (offsets continuing) and the (offset, key, value, headers,
    timestamp) of every record."""
    blob, want, offset = b"", [], 0
    for i, codec in enumerate(codecs):
        recs = records(per_batch, f"b{i}")
        blob += encode_batch(recs, base_offset=offset, compression=codec)
        want += [(offset + j, k, v, [(hk, hv) for hk, hv in h], ts)
                 for j, (k, v, h, ts) in enumerate(recs)]
        offset += per_batch
    return blob, want


def decoded(blob: bytes, start: int, end: int, headers: bool = True) -> list[tuple]:
    rows = ArrowRows(headers)
    for batch in walk(blob, start).batches:
        batch.decode_into(rows, end)
    table = to_record_batch(rows.finish(), "topic-a", 4, arrow_schema(headers)).to_pylist()
    assert all(r["topic"] == "topic-a" and r["partition"] == 4 for r in table)
    return [(r["offset"], r["key"], r["value"],
             [(h["key"], h["value"]) for h in r["headers"]] if headers else None,
             int(r["timestamp"].timestamp() * 1000)) for r in table]


@pytest.mark.parametrize("codecs", [[None, None, None], ["gzip", "snappy", "lz4", "zstd"],
                                    [None, "zstd", None]])
def test_columns_equal_the_record_decoder(codecs) -> None:
    blob, want = answer(codecs)
    assert decoded(blob, 0, 10_000) == want
    # the same records as the project's own decoder sees them
    assert [(r.offset, r.key, r.value, list(r.headers), r.timestamp)
            for b in decode_batches(blob) for r in b.records()] == want


def test_range_cuts_both_ends_and_headers_are_optional() -> None:
    blob, want = answer([None, "lz4", None])
    assert decoded(blob, 30, 120) == [w for w in want if 30 <= w[0] < 120]
    assert decoded(blob, 30, 120, headers=False) == [
        w[:3] + (None,) + w[4:] for w in want if 30 <= w[0] < 120]


def test_log_append_time_gives_every_record_the_batch_time() -> None:
    batch = bytearray(encode_batch(records(10, "l")))
    attributes = struct.unpack_from(">h", batch, 21)[0] | 0x08
    struct.pack_into(">h", batch, 21, attributes)
    struct.pack_into(">q", batch, 35, BASE_MS + 999)  # maxTimestamp: the append time
    got = decoded(bytes(batch), 0, 100)
    assert [g[4] for g in got] == [BASE_MS + 999] * 10
    table = ArrowRows(False)
    walked = walk(bytes(batch), 0).batches
    assert walked[0].log_append_time
    table.add_records(walked[0].records, 10, 0, walked[0].base_timestamp, True,
                      walked[0].max_timestamp, 0, 100)
    types = pa.Array.from_buffers(pa.int32(), 10, [None, pa.py_buffer(
        table.finish()["timestampType"])])
    assert types.to_pylist() == [1] * 10


def test_a_malformed_record_is_an_error_not_a_crash() -> None:
    blob = bytearray(encode_batch(records(3, "m")))
    blob[61] = 0x7F  # the first record's length: far past the batch's end
    rows = ArrowRows(True)
    with pytest.raises(CorruptRecordError):
        rows.add_records(bytes(blob[61:]), 3, 0, BASE_MS, False, BASE_MS, 0, 100)
