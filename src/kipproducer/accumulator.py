"""The record accumulator: per-partition batching into RecordBatch v2 bytes, in C.

``RecordAccumulator(*, batch_size=1000000, batch_num_messages=10000, linger_ms=5,
max_bytes=1 GiB, max_messages=100000, compression=None, producer_id=-1, producer_epoch=-1,
transactional=False)``; the defaults are librdkafka's (``batch.size``, ``batch.num.messages``,
``linger.ms``, ``queue.buffering.max.kbytes``, ``queue.buffering.max.messages``,
``compression.type``).

Appending
    ``append(topic, partition, key, value, headers=None, timestamp=None, offset=None,
    opaque=None, expected_offset=None)`` encodes one record into the partition's open batch.
    With ``offset`` the record keeps that offset (KIP-391): explicit offsets must strictly
    increase per partition (:class:`~kipproducer.errors.OffsetOrderError`), and a record whose
    offset is not the previous one + 1 starts a new batch, so every batch holds consecutive
    offsets. With ``expected_offset`` (KIP-27) the record is expected to land at that offset:
    records with consecutive expected offsets share a batch whose ``base_offset`` is the first
    one (the broker appends it only if its log ends there); expected offsets may go back (a
    writer retrying from the log end it was told). Records of different modes (none, ``offset``,
    ``expected_offset``; ``ProducerBatch.produce_mode`` 0, 1, 2) never share a batch.
    ``QueueFullError`` (a ``BufferError``) when ``max_messages`` / ``max_bytes`` are reached.

    ``append_arrays(topic, partition, values, keys=None, timestamps=None, offsets=None,
    headers=None, opaque=None, expected_offset=None) -> int`` appends a whole column set in one
    call with no per-record Python work. ``values``/``keys``: a pyarrow binary/string array (or
    chunked array), a ``(data, offsets)`` tuple in Arrow layout (uint8 data buffer, int32/int64
    offsets of length n + 1), or a sequence / numpy object array of ``bytes | None``.
    ``timestamps`` and ``offsets``: int64 arrays. ``expected_offset``: one int, the expected
    offset of the first record (the others follow it; one partition only). ``partition``: an int
    or an int32 array (one per record). ``headers``: one header list or dict applied to every
    record, or a list of n per-record header lists (``None`` for none). Returns how many records
    were appended; fewer than n means the bounds were reached: send, then append the rest.

Draining
    ``drain(now_ms=None, *, flush=False, partitions=None)`` returns finished
    :class:`ProducerBatch` objects (``topic``, ``partition``, ``base_offset``,
    ``record_count``, ``base_sequence``, ``producer_id``, ``producer_epoch``, ``data`` as a
    zero-copy memoryview, ``opaques``). A batch is handed out when it is full, when linger.ms
    has passed since its first record, or with ``flush=True``.

Idempotence
    With a producer id set (``set_producer(pid, epoch)``), each drained batch gets the
    partition's next sequence; sequences wrap from 2**31-1 to 0 as Kafka's do. ``reenqueue``
    puts a batch back for a retry with its sequence kept; ``set_producer`` with a new epoch
    restarts sequences at 0 and re-stamps batches not yet sent. ``release(batch)`` returns a
    delivered (or finally failed) batch's bytes and messages to the bounds.

Threads
    An accumulator serves one thread at a time: the engine holds its lock around every call.
    ``append_arrays`` without explicit or expected offsets copies the records that continue
    a batch with the GIL released, a stretch at a time, so other threads (the engine's
    sender) run meanwhile. The items of a stretch are held by a reference each while it is
    copied, so a column changed by another thread meanwhile is safe to read.
"""

from __future__ import annotations

from ._accumulator import PartitionState, ProducerBatch, RecordAccumulator, monotonic_ms

__all__ = [
    "PartitionState",
    "ProducerBatch",
    "RecordAccumulator",
    "monotonic_ms",
]
