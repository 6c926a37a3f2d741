"""Record-batch compression codecs, as Kafka's attributes bits 0-2 number them.

All codecs come from cramjam (one wheel, no system libraries). The choices below follow what the
Java client writes, so every Kafka reader accepts our batches:

- gzip: a single gzip member.
- snappy: snappy-java's "xerial" framing (magic, version, then length-prefixed raw blocks of at
  most 32 KiB). Readers also get raw snappy, which librdkafka and some others write.
- lz4: an LZ4 frame with independent blocks and no content checksum.
- zstd: a zstd frame.
"""

from __future__ import annotations

import struct

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


def decompress(codec: int, data) -> bytes:
    """Decompress a batch's records section; any failure is a CorruptRecordError."""
    try:
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


def _snappy_any(data: bytes) -> bytes:
    if not data.startswith(_XERIAL_MAGIC):
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
        out.append(bytes(cramjam.snappy.decompress_raw(data[pos : pos + size])))
        pos += size
    return b"".join(out)
