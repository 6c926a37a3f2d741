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
from .producer import BatchDelivery, GroupMetadata, Producer
from .records import Batch, Record, decode_batches, encode_batch, validate_batch

__all__ = [
    "Batch",
    "BatchDelivery",
    "EmbeddedBroker",
    "GroupMetadata",
    "Producer",
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


def __getattr__(name: str):
    # The broker pulls in asyncio servers and the protocol layer: load it on first use.
    if name == "EmbeddedBroker":
        from .broker.embedded import EmbeddedBroker

        return EmbeddedBroker
    raise AttributeError(f"module 'kipproducer' has no attribute {name!r}")
