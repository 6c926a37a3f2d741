"""Produced compressed batches validated with bounded memory.

The native record codec validates a compressed batch by inflating its records section whole.
Here that inflation is bounded by ``decompressed.batch.max.bytes`` (kipproducer.compression's
output_limit stops each codec one byte past it), so a small batch that inflates to gigabytes
is refused with MESSAGE_TOO_LARGE after at most the bound's worth of work and memory.

MESSAGE_TOO_LARGE rather than CORRUPT_MESSAGE or INVALID_RECORD: the batch is well formed, only
too large once inflated; a Java producer answers MESSAGE_TOO_LARGE by splitting the batch and
sending the halves (which then fit, unless one record alone is too large), and librdkafka fails
the messages at once with "Message size too large". CORRUPT_MESSAGE would be retried as is,
forever.

The Batch that validation returns keeps its inflated section alive. A produce request holds
every partition's Batch until it is answered, so :func:`without_records` swaps in a Batch that
has read only the header: one inflated section at a time, not one per partition.
"""

from __future__ import annotations

from kipproducer.compression import output_limit
from kipproducer.records import LAYOUT, Batch, decode_batches, validate_batch

# The attributes' low byte (big-endian int16) holds the codec in bits 0-2.
_CODEC_BYTE = LAYOUT["attributes"] + 1


def is_compressed(records) -> bool:
    return len(records) > _CODEC_BYTE and records[_CODEC_BYTE] & 0x07 != 0


def validate_bounded(records, max_decompressed: int) -> Batch:
    """validate_batch(records), with a compressed section allowed to inflate to
    ``max_decompressed`` bytes at most (kipproducer.compression.DecompressedTooLarge past it,
    a CorruptRecordError whose rule is "decompressed_size")."""
    if not is_compressed(records):
        return validate_batch(records)
    with output_limit(max_decompressed):
        return validate_batch(records)


def without_records(batch: Batch, records) -> Batch:
    """The same batch's header without its inflated records section (uncompressed: as is)."""
    if not is_compressed(records):
        return batch
    return next(decode_batches(records, validate=False))
