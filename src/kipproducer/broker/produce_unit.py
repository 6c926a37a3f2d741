"""Several record batches of one partition in one Produce request (KIP-WIRE version 2, §9).

Kafka takes exactly one batch per partition in a Produce request. With explicit offsets
(ProduceMode 1 and 2) a batch holds consecutive offsets only, so a copy of a compacted topic
would need a request per surviving run of offsets; a broker that advertises MaxVersion 2 of
the KIP features accepts the runs of one partition back to back instead. This module splits
such a records field into its batches and checks the rules that bind them together; each
batch's own rules (CRC, layout, offset deltas, size, timestamps, keys) are the produce
handler's, as for a single batch. The log appends a :class:`BatchUnit` whole or not at all
(``PartitionLog.append_unit``).
"""

from __future__ import annotations

from kipproducer.errors import CorruptRecordError
from kipproducer.protocol.wire_extensions import ProduceMode
from kipproducer.records import Batch, decode_batches, next_sequence


class UnitRefused(Exception):
    """A rule of §9 broken: the partition gets INVALID_RECORD with this message."""


class BatchUnit:
    """The batches of one partition in one request, checked to belong together.

    It answers the producer-state questions a single batch answers (producer id, epoch,
    first sequence, ``last_offset_delta`` as the sequence span) so the idempotence window
    treats the unit as one entry.
    """

    __slots__ = ("parts", "whole", "base_offset", "producer_id", "producer_epoch",
                 "base_sequence", "record_count", "is_transactional")

    is_control = False

    def __init__(self, parts: list[tuple[memoryview, Batch]],
                 whole: memoryview | None = None) -> None:
        first = parts[0][1]
        self.parts = parts
        # The records field the parts are slices of, back to back (None once a part is
        # replaced, e.g. recompressed): the log writes it in one go.
        self.whole = whole
        self.base_offset = first.base_offset
        self.producer_id = first.producer_id
        self.producer_epoch = first.producer_epoch
        self.base_sequence = first.base_sequence
        self.record_count = sum(batch.record_count for _, batch in parts)
        self.is_transactional = first.is_transactional

    @property
    def last_offset_delta(self) -> int:
        """Sequences count records across the unit (offsets may have gaps between batches)."""
        return self.record_count - 1

    @property
    def batches(self) -> list[Batch]:
        return [batch for _, batch in self.parts]

    def __len__(self) -> int:
        return len(self.parts)


def split_records(records: memoryview) -> list[tuple[memoryview, Batch]]:
    """Every batch of a records field, each validated on its own (strict: a producer's
    batch), with the slice of ``records`` it occupies (writable when ``records`` is)."""
    parts = []
    for batch in decode_batches(records, validate=True, strict=True):
        start = batch.position
        parts.append((records[start:start + batch.size_in_bytes], batch))
    if not parts:
        raise CorruptRecordError("no record batch in an empty buffer", "truncated")
    return parts


def check_unit(parts: list[tuple[memoryview, Batch]], mode: int,
               whole: memoryview | None = None) -> BatchUnit:
    """The rules that bind the batches of a unit together (KIP-WIRE §9); UnitRefused names
    the batch and the rule it breaks."""
    if mode not in (ProduceMode.USE_OFFSETS, ProduceMode.EXPECTED_OFFSETS):
        raise UnitRefused(
            f"{len(parts)} record batches for one partition: only a request with explicit "
            "offsets (ProduceMode 1 or 2, KIP-WIRE version 2) may carry more than one")
    first = parts[0][1]
    previous = first
    for index, (_, batch) in enumerate(parts[1:], start=1):
        where = f"batch {index} of {len(parts)}"
        if (batch.producer_id, batch.producer_epoch) != (first.producer_id,
                                                         first.producer_epoch):
            raise UnitRefused(
                f"{where}: producer {batch.producer_id} epoch {batch.producer_epoch} differs "
                f"from the first batch's ({first.producer_id}, {first.producer_epoch})")
        if batch.is_transactional != first.is_transactional:
            raise UnitRefused(f"{where}: transactional flag differs from the first batch's")
        if first.producer_id >= 0 and first.base_sequence >= 0:
            want = next_sequence(previous.last_sequence, 1)
            if batch.base_sequence != want:
                raise UnitRefused(
                    f"{where}: base sequence {batch.base_sequence} does not continue the "
                    f"previous batch (expected {want})")
        if mode == ProduceMode.USE_OFFSETS:
            floor = previous.base_offset + previous.record_count
            if batch.base_offset < floor:
                raise UnitRefused(
                    f"{where}: base offset {batch.base_offset} overlaps or goes back (the "
                    f"previous batch ends at {floor - 1}); offsets must rise")
        elif batch.base_offset != -1:
            if previous.base_offset == -1:
                raise UnitRefused(
                    f"{where}: expects offset {batch.base_offset} after a batch with no "
                    "expectation; later batches must then expect nothing (-1)")
            want = previous.base_offset + previous.record_count
            if batch.base_offset != want:
                raise UnitRefused(
                    f"{where}: expects offset {batch.base_offset}, but the previous batch "
                    f"ends at {want - 1}; a later batch expects -1 or exactly {want}")
        previous = batch
    return BatchUnit(parts, whole)
