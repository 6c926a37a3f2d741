"""The topic's compression.type applied to a produced batch: recompress when the codecs differ.

Only the records section changes hands: its bytes are decompressed (if the batch was
compressed) and compressed with the topic's codec (unless it is "uncompressed"), then the
batch length, the codec bits of the attributes and the CRC are written anew. Every other
header field (offsets, timestamps, producer id, epoch, base sequence, record count, the
transactional bit) is kept byte for byte, so idempotent duplicate detection and transactions
see the same batch they would have seen uncompressed.
"""

from __future__ import annotations

import struct
from typing import Final

from kipproducer import compression
from kipproducer.crc32c import crc32c
from kipproducer.records import LAYOUT

from .log_config import LogConfig

_CODEC_MASK: Final = 0x07
_INT32 = struct.Struct(">i")
_INT16 = struct.Struct(">h")
_UINT32 = struct.Struct(">I")
_RECORDS: Final = LAYOUT["records"]
_LENGTH: Final = LAYOUT["batch_length"]
_ATTRIBUTES: Final = LAYOUT["attributes"]
_CRC: Final = LAYOUT["crc"]
# batchLength counts the bytes after itself.
_LENGTH_OFFSET: Final = _LENGTH + 4


def target_codec(config: LogConfig) -> int | None:
    """The codec id the topic stores batches in, or None for "producer" (keep as sent)."""
    kind = config.compression_type
    if kind == "producer":
        return None
    if kind == "uncompressed":
        return compression.NONE
    return compression.codec_id(kind)


def _level(config: LogConfig, codec: int) -> int | None:
    if codec == compression.GZIP:
        return None if config.compression_gzip_level == -1 else config.compression_gzip_level
    if codec == compression.LZ4:
        return config.compression_lz4_level
    if codec == compression.ZSTD:
        return config.compression_zstd_level
    return None


def recompress(buf, attributes: int, config: LogConfig) -> bytearray | None:
    """The batch in ``buf`` rewritten with the topic's codec, or None when it already has it.

    ``attributes``: the batch's attributes as parsed. Raises CorruptRecordError when the
    records section does not decompress (the produce path validated it, so only a codec bug
    would get here).
    """
    wanted = target_codec(config)
    current = attributes & _CODEC_MASK
    if wanted is None or wanted == current:
        return None
    view = memoryview(buf)
    records = view[_RECORDS:]
    plain = records if current == compression.NONE else compression.decompress(current, records)
    packed = plain if wanted == compression.NONE else compression.compress(
        wanted, plain, _level(config, wanted))
    out = bytearray(_RECORDS + len(packed))
    out[:_RECORDS] = view[:_RECORDS]
    out[_RECORDS:] = packed
    _INT32.pack_into(out, _LENGTH, len(out) - _LENGTH_OFFSET)
    _INT16.pack_into(out, _ATTRIBUTES, (attributes & ~_CODEC_MASK) | wanted)
    _UINT32.pack_into(out, _CRC, crc32c(memoryview(out)[_ATTRIBUTES:]))
    return out
