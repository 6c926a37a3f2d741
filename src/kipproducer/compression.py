"""Record-batch compression codecs, as Kafka's attributes bits 0-2 number them.

All codecs come from cramjam (one wheel, no system libraries). The choices below follow what the
Java client writes, so every Kafka reader accepts our batches:

- gzip: a single gzip member.
- snappy: snappy-java's "xerial" framing (magic, version, then length-prefixed raw blocks of at
  most 32 KiB). Readers also get raw snappy, which librdkafka and some others write.
- lz4: an LZ4 frame with independent blocks and no content checksum.
- zstd: a zstd frame.

Decompression is unbounded by default (a client reading its own broker's batches). A broker
validating what producers send sets a bound with :func:`output_limit`: every codec then stops
as soon as the output would pass it and raises :class:`DecompressedTooLarge`, holding at most
about twice the bound meanwhile (the output and its final copy), so a small batch that inflates
to gigabytes (a "zip bomb") costs no more memory than the bound.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import cramjam

from .errors import CorruptRecordError

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4

CODEC_IDS = {None: NONE, "none": NONE, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}
CODEC_NAMES = {NONE: None, GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024
_BE_INT32 = struct.Struct(">i")


def codec_id(name: str | None) -> int:
    """Map a compression.type value (None, "none", "gzip", ...) to its attributes id."""
    try:
        return CODEC_IDS[name.lower() if isinstance(name, str) else name]
    except KeyError:
        raise ValueError(
            f"unknown compression {name!r}: use one of none, gzip, snappy, lz4, zstd"
        ) from None


def compress(codec: int, data, level: int | None = None) -> bytes:
    """Compress a records section; ``level``: the codec's level (None: its default).

    The broker passes a topic's compression.{gzip,lz4,zstd}.level; snappy has no levels.
    """
    if codec == GZIP:
        return bytes(cramjam.gzip.compress(data, level=level))
    if codec == SNAPPY:
        return _snappy_xerial(memoryview(data))
    if codec == LZ4:
        c = cramjam.lz4.Compressor(level=level, content_checksum=False, block_linked=False)
        c.compress(data if isinstance(data, bytes) else bytes(data))
        return bytes(c.finish())
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(data, level=level))
    raise ValueError(f"unknown compression codec id {codec}")


def _snappy_xerial(view: memoryview) -> bytes:
    parts = [_XERIAL_HEADER]
    for start in range(0, len(view), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK]))
        parts.append(_BE_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


class DecompressedTooLarge(CorruptRecordError):
    """A records section inflates past the bound set with :func:`output_limit`."""

    def __init__(self, codec: int, compressed: int, limit: int) -> None:
        name = CODEC_NAMES.get(codec, codec)
        super().__init__(
            f"{name} records section of {compressed} bytes inflates past {limit} bytes",
            "decompressed_size",
        )
        self.limit = limit


# The bound of the current context: the broker's produce path sets it around validation; the
# native record codec calls decompress(codec, data) and cannot pass it as an argument.
_OUTPUT_LIMIT: ContextVar[int | None] = ContextVar("kipproducer_decompress_limit", default=None)


@contextmanager
def output_limit(max_bytes: int | None) -> Iterator[None]:
    """Within the block, decompress() refuses output beyond ``max_bytes`` (None: no bound)."""
    token = _OUTPUT_LIMIT.set(max_bytes)
    try:
        yield
    finally:
        _OUTPUT_LIMIT.reset(token)


def decompress(codec: int, data) -> bytes:
    """Decompress a batch's records section; any failure is a CorruptRecordError (its subclass
    DecompressedTooLarge when the section inflates past the bound of :func:`output_limit`)."""
    limit = _OUTPUT_LIMIT.get()
    try:
        if limit is not None:
            return _bounded(codec, data, limit)
        if codec == GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if codec == SNAPPY:
            return _snappy_any(bytes(data))
        if codec == LZ4:
            return bytes(cramjam.lz4.decompress(data))
        if codec == ZSTD:
            return bytes(cramjam.zstd.decompress(data))
    except CorruptRecordError:
        raise
    except Exception as exc:  # cramjam raises its own DecompressionError and ValueErrors
        name = CODEC_NAMES.get(codec, codec)
        raise CorruptRecordError(
            f"{name} records section does not decompress: {exc}", "decompression"
        ) from None
    raise CorruptRecordError(f"unknown compression codec id {codec} in attributes", "compression")


def _bounded(codec: int, data, limit: int) -> bytes:
    if codec == GZIP:
        return _gzip_bounded(data, limit)
    if codec == SNAPPY:
        return _snappy_any(bytes(data), limit)
    if codec == LZ4:
        return _into_bounded(cramjam.lz4, codec, data, limit)
    if codec == ZSTD:
        return _into_bounded(cramjam.zstd, codec, data, limit)
    raise CorruptRecordError(f"unknown compression codec id {codec} in attributes", "compression")


def _gzip_bounded(data, limit: int) -> bytes:
    """zlib's max_length stops inflating one byte past the bound: no more output than that is
    ever made. Members are read one after another, as a multi-member gzip reader does."""
    parts: list[bytes] = []
    remaining = limit
    rest = memoryview(data)
    while True:
        inflater = zlib.decompressobj(wbits=31)  # 16 + 15: a gzip header and trailer
        out = inflater.decompress(rest, remaining + 1)
        if len(out) > remaining:
            raise DecompressedTooLarge(GZIP, len(data), limit)
        if not inflater.eof:
            raise CorruptRecordError("gzip records section is truncated", "decompression")
        parts.append(out)
        remaining -= len(out)
        rest = memoryview(inflater.unused_data)
        if not len(rest):
            return parts[0] if len(parts) == 1 else b"".join(parts)


def _into_bounded(module, codec: int, data, limit: int) -> bytes:
    """lz4 and zstd frames through cramjam's decompress_into, into a buffer that ends one byte
    past the bound: cramjam stops there ("failed to write whole buffer"). The buffer is a
    numpy.empty array, whose pages cost memory only once written. A first guess sized for
    ordinary ratios saves mapping the whole bound for every small batch."""
    import numpy

    size = min(limit + 1, max(64 * 1024, 16 * len(data)))
    while True:
        buffer = numpy.empty(size, dtype=numpy.uint8)
        try:
            count = module.decompress_into(data, buffer)
        except cramjam.DecompressionError as exc:
            if "whole buffer" not in str(exc):
                raise
            count = size  # full, and the output goes on
        if count < size:
            return buffer[:count].tobytes()
        if size > limit:
            raise DecompressedTooLarge(codec, len(data), limit)
        size = limit + 1  # the guess was short: once more with the whole bound


def _snappy_any(data: bytes, limit: int | None = None) -> bytes:
    """Raw snappy, or xerial blocks of raw snappy. Every raw block starts with its length
    uncompressed, so a bound is checked before anything is inflated."""
    budget = limit
    if not data.startswith(_XERIAL_MAGIC):
        if budget is not None and cramjam.snappy.decompress_raw_len(data) > budget:
            raise DecompressedTooLarge(SNAPPY, len(data), budget)
        return bytes(cramjam.snappy.decompress_raw(data))
    pos = len(_XERIAL_HEADER)
    if len(data) < pos:
        raise CorruptRecordError("snappy xerial header is truncated", "decompression")
    out = []
    while pos < len(data):
        if pos + 4 > len(data):
            raise CorruptRecordError("snappy xerial block length is truncated", "decompression")
        (size,) = _BE_INT32.unpack_from(data, pos)
        pos += 4
        if size < 0 or pos + size > len(data):
            raise CorruptRecordError(
                f"snappy xerial block of {size} bytes overruns the section", "decompression"
            )
        block = data[pos : pos + size]
        if budget is not None:
            budget -= cramjam.snappy.decompress_raw_len(block)
            if budget < 0:
                raise DecompressedTooLarge(SNAPPY, len(data), limit or 0)
        out.append(bytes(cramjam.snappy.decompress_raw(block)))
        pos += size
    return b"".join(out)
