"""A task's offset range read with the project's own Fetch client, decoded in C into Arrow.

The mirror's Fetch reader (kipproducer.mirror.fetcher) asks the partition's leader itself
(Fetch v4-v12 through the engine's cluster and connection code: version negotiation, TLS,
SASL, leader changes, log-start moves) and hands back whole record batches: control batches
(transaction markers) never show up, and under read_committed the batches of aborted
transactions are dropped with the answer's aborted-transaction list. Compressed batches come
decompressed, one call per batch. kipproducer._arrow_rows then appends every record's
offset, timestamp, key, value (and headers) to Arrow buffers in C, so no Python object is
made per record; the task yields ``pyarrow.RecordBatch``es, which Spark takes as they are.

Where the Fetch client cannot go (a SASL mechanism the engine does not speak, such as
GSSAPI), ``unsupported`` says why and the source reads with a librdkafka consumer instead
(source.read_range_librdkafka).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from .._arrow_rows import ArrowRows
from ..mirror.fetcher import FetchReader
from ..mirror.fetcher import unsupported as _unsupported
from ..mirror.topics import MirrorError

if TYPE_CHECKING:
    from .offset_range import OffsetRange

#: Rows per Arrow batch handed to Spark (larger batches: fewer calls per row in Spark).
BATCH_ROWS = 32_768
#: Key/value/header bytes per Arrow batch at the most (Arrow's int32 offsets allow 2 GiB).
BATCH_BYTES = 64 << 20
#: Bytes one Fetch may return for the partition: a task reads one partition, so it may
#: take a large share (the mirror's default is 2 MiB per partition).
PARTITION_FETCH_BYTES = 8 << 20


class DataLossError(MirrorError):
    """Offsets of the range are no longer in the log and failOnDataLoss is true (a
    MirrorError, so the reader's thread hands it to the task as it is)."""


def unsupported(props: Mapping[str, str]) -> str | None:
    """Why the Fetch client cannot read with these ``kafka.*`` properties, or None."""
    return _unsupported(props)


class RangeFetcher(FetchReader):
    """The mirror's reader, with Spark's failOnDataLoss: offsets below the log start (deleted
    by retention or DeleteRecords) fail the task unless failOnDataLoss is false, in which
    case reading goes on from the new log start (the mirror's own behaviour)."""

    def __init__(self, config: Mapping[str, Any], isolation: str, *,
                 fail_on_data_loss: bool, timeout: float) -> None:
        super().__init__(config, isolation, timeout=timeout,
                         partition_max_bytes=int(config.get("max.partition.fetch.bytes",
                                                            PARTITION_FETCH_BYTES)))
        self.fail_on_data_loss = fail_on_data_loss

    async def _out_of_range(self, key: tuple[str, int], offset: int, generation: int,
                            log_start: int) -> None:
        if self.fail_on_data_loss:
            if log_start is None or log_start < 0:
                log_start = await self._log_start(key)
            if offset < log_start:
                raise DataLossError(
                    f"{key[0]}-{key[1]}: offsets from {offset} are no longer in the log (it "
                    f"starts at {log_start}: deleted by retention or DeleteRecords); set "
                    "failOnDataLoss=false to read what is left")
        await super()._out_of_range(key, offset, generation, log_start)


def arrow_schema(include_headers: bool) -> Any:
    import pyarrow as pa

    fields = [("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
              ("partition", pa.int32()), ("offset", pa.int64()),
              ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32())]
    if include_headers:
        fields.append(("headers", pa.list_(pa.struct([("key", pa.string()),
                                                      ("value", pa.binary())]))))
    return pa.schema(fields)


def _variable(kind: Any, n: int, column: tuple) -> Any:
    import pyarrow as pa

    validity, offsets, data, nulls = column
    return pa.Array.from_buffers(kind, n, [pa.py_buffer(validity) if validity else None,
                                           pa.py_buffer(offsets), pa.py_buffer(data)],
                                 null_count=nulls)


def to_record_batch(done: Mapping[str, Any], topic: str, partition: int, schema: Any) -> Any:
    """The buffers of ArrowRows.finish() as one RecordBatch (no copy of keys or values)."""
    import numpy as np
    import pyarrow as pa

    n = done["rows"]
    name = topic.encode()
    topics = pa.Array.from_buffers(pa.string(), n, [
        None, pa.py_buffer((np.arange(n + 1, dtype=np.int32) * len(name)).tobytes()),
        pa.py_buffer(name * n)])
    arrays = [_variable(pa.binary(), n, done["key"]), _variable(pa.binary(), n, done["value"]),
              topics, pa.array(np.full(n, partition, dtype=np.int32)),
              pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(done["offset"])]),
              pa.Array.from_buffers(pa.timestamp("us", tz="UTC"), n,
                                    [None, pa.py_buffer(done["timestamp"])]),
              pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(done["timestampType"])])]
    if "headers" in done:
        count = len(done["header_key"][1]) // 4 - 1
        pairs = pa.StructArray.from_arrays(
            [_variable(pa.string(), count, done["header_key"]),
             _variable(pa.binary(), count, done["header_value"])], names=["key", "value"])
        arrays.append(pa.Array.from_buffers(schema.field("headers").type, n,
                                            [None, pa.py_buffer(done["headers"])],
                                            children=[pairs]))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def read_range(props: Mapping[str, str], part: OffsetRange, *, isolation: str,
               include_headers: bool, fail_on_data_loss: bool,
               poll_timeout_s: float) -> Iterator[Any]:
    """Arrow batches of the records of ``part`` ([start, end) of one partition), in offset
    order. The range ends at ``end`` even when its last offsets hold no record for this
    reader (transaction markers, aborted batches, compaction): the fetch position moves past
    them."""
    schema = arrow_schema(include_headers)
    rows = ArrowRows(include_headers)
    key = (part.topic, part.partition)
    reader = RangeFetcher(props, isolation, fail_on_data_loss=fail_on_data_loss,
                          timeout=max(30.0, poll_timeout_s))
    try:
        reader.assign({key: part.start})
        position = part.start
        last_progress = time.monotonic()
        while position < part.end:
            answers = reader.poll(0.2)
            if not answers:
                if time.monotonic() - last_progress > poll_timeout_s:
                    raise TimeoutError(
                        f"{part.topic}-{part.partition}: nothing read for {poll_timeout_s:.0f}"
                        f" s at offset {position}, range [{part.start}, {part.end}) (an open "
                        "transaction under read_committed? records deleted?)")
                continue
            last_progress = time.monotonic()
            for answer in answers:
                for batch in answer.batches:
                    batch.decode_into(rows, part.end)
                    if rows.rows >= BATCH_ROWS or rows.data_bytes >= BATCH_BYTES:
                        yield to_record_batch(rows.finish(), part.topic, part.partition,
                                              schema)
                position = max(position, answer.next_offset)
        if rows.rows:
            yield to_record_batch(rows.finish(), part.topic, part.partition, schema)
    finally:
        reader.close()
