"""Several record batches of one partition in one Produce request (KIP-WIRE version 2, §9).

Kafka takes exactly one batch per partition in a Produce request. With explicit offsets
(ProduceMode 1 and 2) a batch holds consecutive offsets only, so a copy of a compacted topic
would need a request per surviving run of offsets; a broker that advertises MaxVersion 2 of
the KIP features accepts the runs of one partition back to back instead. The records field is
split and checked in one C pass (``kipproducer.records.split_unit``: each batch's own rules
and the rules that bind them together); the produce handler adds the topic's rules
(timestamps, keys, transactions) and the log appends a :class:`BatchUnit` whole or not at all
(``PartitionLog.append_unit``), in one write when it can.
"""

from __future__ import annotations

from kipproducer.records import Batch, unit_summary


class BatchUnit:
    """The batches of one partition in one request, checked to belong together.

    It answers the producer-state questions a single batch answers (producer id, epoch,
    first sequence, ``last_offset_delta`` as the sequence span) so the idempotence window
    treats the unit as one entry.
    """

    __slots__ = ("batches", "whole", "_parts", "base_offset", "producer_id", "producer_epoch",
                 "base_sequence", "record_count", "is_transactional", "max_timestamp")

    is_control = False

    def __init__(self, batches: list[Batch], whole: memoryview | None) -> None:
        first = batches[0]
        self.batches = batches
        # The records field the batches lie in, back to back (``Batch.position``); None once
        # a batch was replaced (recompressed): then ``parts`` holds each batch's own buffer.
        self.whole = whole
        self._parts: list[tuple[memoryview, Batch]] | None = None
        self.base_offset = first.base_offset
        self.producer_id = first.producer_id
        self.producer_epoch = first.producer_epoch
        self.base_sequence = first.base_sequence
        _, self.record_count, self.max_timestamp, _ = unit_summary(batches)  # one C pass
        self.is_transactional = first.is_transactional

    @property
    def last_offset_delta(self) -> int:
        """Sequences count records across the unit (offsets may have gaps between batches)."""
        return self.record_count - 1

    @property
    def parts(self) -> list[tuple[memoryview, Batch]]:
        """(buffer, batch) per batch: slices of ``whole``, or the buffers set in its place."""
        if self._parts is None:
            whole = self.whole
            self._parts = [(whole[b.position:b.position + b.size_in_bytes], b)
                           for b in self.batches]
        return self._parts

    @parts.setter
    def parts(self, parts: list[tuple[memoryview, Batch]]) -> None:
        self._parts = parts
        self.batches = [batch for _, batch in parts]
        self.whole = None

    def __len__(self) -> int:
        return len(self.batches)
