"""The RecordBatch v2 codec: encode records into a batch, decode and validate batches.

This is the public face of the native module ``kipproducer._records``:

- ``encode_batch(records, *, base_offset=0, producer_id=-1, producer_epoch=-1,
  base_sequence=-1, transactional=False, compression=None) -> bytes`` where ``records`` is a
  sequence of ``(key, value, headers, timestamp_ms)`` tuples: key/value ``bytes | None``
  (str and other contiguous buffers are accepted too), headers a sequence of
  ``(str, bytes | None)`` or a dict, timestamp_ms ``int | None`` (None = now). Record i gets
  offset ``base_offset + i``. Zero records is a ValueError.
- ``decode_batches(data, *, validate=True, strict=True, allow_partial=False)`` yields
  ``Batch`` objects; iterating a Batch yields ``Record`` objects (``offset``, ``timestamp``,
  ``key``, ``value``, ``headers``).
- ``validate_batch(data, *, strict=True) -> Batch`` for a buffer holding exactly one batch.

Malformed input raises ``kipproducer.errors.CorruptRecordError`` whose ``rule`` names the
broken rule; the decoder never reads outside the buffer it is given.
"""

from __future__ import annotations

from ._records import BATCH_HEADER_SIZE_ as BATCH_HEADER_SIZE
from ._records import (
    LAYOUT,
    Batch,
    Record,
    UnitRuleError,
    decode_batches,
    encode_batch,
    next_sequence,
    null_key_indexes,
    place_unit,
    rebuild_batch,
    set_base_offset,
    set_partition_leader_epoch,
    split_unit,
    unit_summary,
    validate_batch,
)
from ._records import LOG_OVERHEAD_ as LOG_OVERHEAD
from .compression import CODEC_IDS, CODEC_NAMES
from .errors import CorruptRecordError

#: Sequences wrap to 0 after this value (Kafka's Integer.MAX_VALUE).
MAX_SEQUENCE = 2**31 - 1

__all__ = [
    "BATCH_HEADER_SIZE",
    "Batch",
    "CODEC_IDS",
    "CODEC_NAMES",
    "CorruptRecordError",
    "LAYOUT",
    "LOG_OVERHEAD",
    "MAX_SEQUENCE",
    "Record",
    "UnitRuleError",
    "decode_batches",
    "encode_batch",
    "next_sequence",
    "null_key_indexes",
    "place_unit",
    "rebuild_batch",
    "set_base_offset",
    "set_partition_leader_epoch",
    "split_unit",
    "unit_summary",
    "validate_batch",
]
