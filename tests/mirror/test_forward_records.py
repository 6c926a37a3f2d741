"""RecordAccumulator.append_fetched / append_fetched_batches (the mirror's fast path in C) and
batches.walk, on batches encoded and decoded by the project's record codec, no broker: what goes
in comes out of the drained batches record for record, at the offsets and with the timestamps
the source had."""

from __future__ import annotations

import pytest

from kipproducer._accumulator import RecordAccumulator
from kipproducer._records import decode_batches, encode_batch, rebuild_batch
from kipproducer.mirror.batches import walk

HEADER = 61


def source_records(n: int, start_ts: int = 1_700_000_000_000) -> list[tuple]:
    return [(b"key-%d" % i if i % 5 else None, b"value-%d" % i if i % 7 else None,
             [("h", b"%d" % i)] if i % 3 else None, start_ts + 3 * i) for i in range(n)]


def drained(acc: RecordAccumulator) -> list:
    out = []
    for batch in acc.drain(flush=True):
        out.extend(decode_batches(bytes(batch.data)))
        acc.release(batch)
    return out


def rows(batches) -> list[tuple]:
    return [(r.offset, r.timestamp, r.key, r.value, r.headers) for b in batches for r in b]


def test_a_span_of_whole_batches_keeps_offsets_and_content():
    first = encode_batch(source_records(40), base_offset=100)
    second = encode_batch(source_records(25, 1_700_000_100_000), base_offset=140)
    acc = RecordAccumulator(producer_id=7, producer_epoch=0)
    done, *_, queued, last = acc.append_fetched_batches("t", 0, first + second,
                                                        with_offsets=True)
    assert done and queued == 65 and last == 164
    expected = rows(decode_batches(first + second))
    out = drained(acc)
    assert rows(out) == expected
    assert len(out) == 1 and out[0].base_offset == 100  # joined: consecutive offsets


def test_records_below_the_fetch_offset_are_skipped():
    data = encode_batch(source_records(30), base_offset=50)
    acc = RecordAccumulator()
    *_, queued, last = acc.append_fetched_batches("t", 0, data, with_offsets=True,
                                                  min_offset=62)
    assert queued == 18 and last == 79
    assert [r[0] for r in rows(drained(acc))] == list(range(62, 80))


def test_a_compacted_batch_becomes_runs_of_consecutive_offsets():
    whole = next(decode_batches(encode_batch(source_records(60), base_offset=1000)))
    kept = [r for r in whole if r.offset % 4 in (0, 1) or r.offset > 1050]
    compacted = rebuild_batch(whole, kept)
    acc = RecordAccumulator(producer_id=3, producer_epoch=0)
    acc.pack_runs = True
    index, pos, queued, last = acc.append_fetched(
        "t", 0, compacted[HEADER:], len(kept), 1000, whole.base_timestamp,
        whole.max_timestamp, with_offsets=True)
    assert (index, pos, queued, last) == (len(kept), len(compacted) - HEADER, len(kept), 1059)
    out = drained(acc)
    assert rows(out) == [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in kept]
    for batch in out:  # every RecordBatch holds consecutive offsets (KIP-391)
        assert [r.offset for r in batch] == list(range(batch.base_offset,
                                                       batch.base_offset + len(batch)))
    # The broker assigns offsets (transactional mode): the records, in order, with no gaps.
    acc = RecordAccumulator()
    acc.append_fetched("t", 0, compacted[HEADER:], len(kept), 1000, whole.base_timestamp,
                       whole.max_timestamp)
    out = drained(acc)
    assert [r[1:] for r in rows(out)] == [(r.timestamp, r.key, r.value, r.headers)
                                          for r in kept]


def test_log_append_time_batches_keep_their_type_and_stamp():
    data = encode_batch(source_records(12), base_offset=0)
    acc = RecordAccumulator()
    append_time = 1_800_000_000_000
    acc.append_fetched("t", 0, data[HEADER:], 12, 0, 1_700_000_000_000, append_time,
                       log_append_time=True, with_offsets=True)
    acc.append_fetched_batches("t", 0, encode_batch(source_records(5), base_offset=12),
                               with_offsets=True)
    out = drained(acc)
    assert len(out) == 2  # a LogAppendTime batch holds its source batch only
    assert out[0].timestamp_type == 1 and {r.timestamp for r in out[0]} == {append_time}
    assert out[1].timestamp_type == 0


def test_a_full_queue_is_resumed_where_it_stopped():
    data = encode_batch(source_records(50), base_offset=0) + \
        encode_batch(source_records(50), base_offset=50)
    acc = RecordAccumulator(max_messages=16)
    got = []
    batch_pos = index = pos = 0
    for _ in range(50):
        done, batch_pos, index, pos, queued, _ = acc.append_fetched_batches(
            "t", 0, data, with_offsets=True, batch_pos=batch_pos, start_record=index,
            start_pos=pos)
        got.extend(drained(acc))
        if done:
            break
    assert rows(got) == rows(decode_batches(data))


def test_malformed_records_are_a_clear_error():
    data = encode_batch(source_records(10), base_offset=0)
    acc = RecordAccumulator()
    with pytest.raises(ValueError, match="malformed or truncated"):
        acc.append_fetched("t", 0, data[HEADER:-5], 10, 0, 0, 0)
    with pytest.raises(ValueError, match="cut short"):
        acc.append_fetched_batches("t", 1, data[:-5])


def test_walk_joins_plain_batches_and_decompresses_the_rest():
    plain = encode_batch(source_records(10), base_offset=0) + \
        encode_batch(source_records(10), base_offset=10)
    packed = encode_batch(source_records(10), base_offset=20, compression="gzip")
    walked = walk(plain + packed + plain[:70], 0)
    assert walked.next_offset == 30 and walked.complete == 3  # the cut tail is left
    span, compressed = walked.batches
    assert span.framed and span.count == 20 and bytes(span.records) == plain
    assert not compressed.framed and compressed.count == 10 and compressed.base_offset == 20
    acc = RecordAccumulator()
    acc.append_fetched("t", 0, compressed.records, 10, 20, compressed.base_timestamp,
                       compressed.max_timestamp, with_offsets=True)
    assert rows(drained(acc)) == rows(decode_batches(packed))
