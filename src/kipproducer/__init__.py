"""kipproducer: a Kafka producer with a Cython core that ships the KIP extensions Kafka never did.

Subpackages and modules:
  records      RecordBatch v2 codec (encode, decode, validate)
  accumulator  per-partition batching with consecutive offsets and idempotent sequences
  crc32c       hardware CRC-32C
  errors       exceptions
"""

from __future__ import annotations

__version__ = "0.1.0.dev0"

from .accumulator import ProducerBatch, RecordAccumulator
from .errors import CorruptRecordError, KipError, OffsetOrderError, QueueFullError
from .records import Batch, Record, decode_batches, encode_batch, validate_batch

__all__ = [
    "Batch",
    "CorruptRecordError",
    "KipError",
    "OffsetOrderError",
    "ProducerBatch",
    "QueueFullError",
    "Record",
    "RecordAccumulator",
    "__version__",
    "decode_batches",
    "encode_batch",
    "validate_batch",
]
