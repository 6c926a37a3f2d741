"""Walking the record batches of one partition's Fetch answer, for the mirror's fast path.

Only the 61-byte batch headers are read in Python; the records stay bytes (decompressed when
the batch is compressed) and go to the target producer as they are (fetcher.py, then
``Producer._forward_fetched``). What the walk decides per batch, as Kafka's consumer does:

- control batches (transaction markers) are never copied; their offsets stay gaps;
- under read_committed, a transactional batch of a producer the answer lists in
  ``aborted_transactions`` (from that transaction's first offset on, until its ABORT marker)
  is dropped;
- a batch cut short at the end of the answer (the broker fills up to max bytes) is left for
  the next fetch, which starts at its base offset.

Consecutive uncompressed CreateTime batches go on as one span of the answer (no copy), found
by ``plain_run`` in C, so a source with a batch per few records (compacted, or written with
KIP-391 offsets) costs a call per answer, not per batch; the other batches (compressed,
LogAppendTime, control, transactional under read_committed when the answer lists aborted
transactions) are looked at here, one by one.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from .._records import plain_run
from ..compression import decompress

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta,
# baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, recordsCount
_HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = _HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength
CODEC_MASK = 0x07
LOG_APPEND_TIME = 0x08
TRANSACTIONAL = 0x10
CONTROL = 0x20
ABORT_MARKER = 0


class SourceBatchError(ValueError):
    """A fetched batch the fast path cannot take (bad magic, malformed header)."""


@dataclass(slots=True)
class SourceBatch:
    """Source records to forward: ``framed``, a run of whole uncompressed CreateTime batches
    as the answer holds them (headers included; one call for many small batches); else one
    batch's records section (decompressed, or LogAppendTime) and the header fields the
    target batch needs. Records below ``min_offset`` are not copied."""

    records: Any  # bytes or memoryview
    framed: bool
    count: int
    base_offset: int
    base_timestamp: int
    max_timestamp: int
    log_append_time: bool
    min_offset: int
    next_offset: int  # base offset + last offset delta + 1

    def decode_into(self, rows: Any, end_offset: int) -> None:
        """Append the records of [min_offset, end_offset) to ``rows`` (an ArrowRows: every
        record's offset, timestamp, key, value and headers decoded in C)."""
        if self.framed:
            rows.add_framed(self.records, self.min_offset, end_offset)
        else:
            rows.add_records(self.records, self.count, self.base_offset, self.base_timestamp,
                             self.log_append_time, self.max_timestamp, self.min_offset,
                             end_offset)


@dataclass(slots=True)
class Walked:
    batches: list[SourceBatch]
    next_offset: int        # where the next fetch of this partition starts
    complete: int           # whole batches seen (kept or dropped)
    dropped_aborted: int    # batches dropped as aborted (read_committed)


def _control_type(records: Any) -> int:
    """The type of a control batch's (only) record: its key is (version int16, type int16)."""
    data = bytes(records[:64])
    pos = 0

    def varint() -> int:
        nonlocal pos
        shift = result = 0
        while True:
            b = data[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return (result >> 1) ^ -(result & 1)
            shift += 7

    varint()      # record length
    pos += 1      # attributes
    varint()      # timestamp delta
    varint()      # offset delta
    key_length = varint()
    if key_length < 4:
        return -1
    return struct.unpack_from(">h", data, pos + 2)[0]


def walk(blob: Any, fetch_offset: int, aborted_transactions: Any = (),
         read_committed: bool = False) -> Walked:
    """The batches of ``blob`` (a Fetch answer's records of one partition) to copy."""
    view = memoryview(blob)
    size = len(view)
    aborted = sorted((a.first_offset, a.producer_id) for a in aborted_transactions or ()) \
        if read_committed else []
    aborting: set[int] = set()
    out: list[SourceBatch] = []
    pos = 0
    next_offset = fetch_offset
    complete = dropped = 0
    unpack = _HEADER.unpack_from
    while size - pos >= HEADER_SIZE:
        # The common case in C: a run of batches forwarded as they are, headers read there.
        end, batches, records, run_next, max_ts = plain_run(
            view, pos, read_committed and bool(aborted or aborting))
        if batches:
            out.append(SourceBatch(view[pos:end], True, records, -1, -1, max_ts, False,
                                   fetch_offset, run_next))
            next_offset = max(next_offset, run_next)
            complete += batches
            pos = end
            continue
        (base_offset, length, _, magic, _, attributes, last_delta, base_ts, max_ts,
         producer_id, _, _, count) = unpack(view, pos)
        end = pos + LOG_OVERHEAD + length
        if end > size:
            break  # cut short: the next fetch starts at this batch
        if magic != 2:
            raise SourceBatchError(
                f"a batch at offset {base_offset} has message format v{magic}; the fast "
                "path copies v2 (Kafka 0.11+) batches only")
        if length < HEADER_SIZE - LOG_OVERHEAD or count < 0 or last_delta < 0:
            raise SourceBatchError(f"the batch at offset {base_offset} has a malformed header")
        complete += 1
        last_offset = base_offset + last_delta
        pos_records = pos + HEADER_SIZE
        pos = end
        if last_offset < fetch_offset:
            continue  # wholly before the fetch offset (a broker may answer from a segment start)
        next_offset = last_offset + 1
        while aborted and aborted[0][0] <= last_offset:
            aborting.add(aborted.pop(0)[1])
        if attributes & CONTROL:
            if aborting and count and _control_type(view[pos_records:end]) == ABORT_MARKER:
                aborting.discard(producer_id)
            continue
        if attributes & TRANSACTIONAL and producer_id in aborting:
            dropped += 1
            continue
        if count == 0:
            continue
        records = view[pos_records:end]
        codec = attributes & CODEC_MASK
        if codec:
            records = decompress(codec, records)
        out.append(SourceBatch(records, False, count, base_offset, base_ts, max_ts,
                               bool(attributes & LOG_APPEND_TIME), fetch_offset, next_offset))
    return Walked(out, next_offset, complete, dropped)
