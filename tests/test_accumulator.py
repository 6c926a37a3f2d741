"""The record accumulator: batching rules, bounds, sequences, and the bulk path."""

import numpy as np
import pyarrow as pa
import pytest
from aiokafka.record.default_records import DefaultRecordBatch as AioBatch

from kipproducer.accumulator import RecordAccumulator
from kipproducer.errors import OffsetOrderError, QueueFullError
from kipproducer.records import decode_batches


def drained(acc, **kw):
    return acc.drain(flush=True, **kw)


def records_of(batches):
    out = []
    for b in batches:
        (batch,) = decode_batches(b.data)
        assert AioBatch(bytes(b.data)).validate_crc()
        assert batch.base_offset == b.base_offset
        assert batch.record_count == b.record_count
        for r in batch:
            out.append((b.topic, b.partition, r.offset, r.key, r.value, r.headers, r.timestamp))
    return out


def test_batches_only_hold_consecutive_offsets():
    acc = RecordAccumulator(linger_ms=0)
    offsets = [0, 1, 2, 5, 6, 100, 101, 102, 103, 200]
    for o in offsets:
        acc.append("t", 0, None, b"v%d" % o, None, 1, offset=o)
    batches = drained(acc)
    assert [(b.base_offset, b.record_count) for b in batches] == [
        (0, 3), (5, 2), (100, 4), (200, 1)]
    assert all(b.offsets_explicit for b in batches)
    assert [r[2] for r in records_of(batches)] == offsets


def test_explicit_offsets_must_strictly_increase_across_batches():
    acc = RecordAccumulator(linger_ms=0)
    acc.append("t", 0, None, b"a", offset=10)
    drained(acc)
    with pytest.raises(OffsetOrderError, match="strictly increase"):
        acc.append("t", 0, None, b"b", offset=10)
    with pytest.raises(OffsetOrderError):
        acc.append("t", 0, None, b"b", offset=3)
    acc.append("t", 1, None, b"other partition", offset=3)  # per partition
    with pytest.raises(ValueError):
        acc.append("t", 0, None, b"b", offset=-1)


def test_plain_and_explicit_records_never_share_a_batch():
    acc = RecordAccumulator(linger_ms=0)
    acc.append("t", 0, None, b"a")
    acc.append("t", 0, None, b"b", offset=7)
    acc.append("t", 0, None, b"c")
    batches = drained(acc)
    assert [(b.offsets_explicit, b.base_offset, b.record_count) for b in batches] == [
        (False, 0, 1), (True, 7, 1), (False, 0, 1)]


def test_expected_offsets_form_conditional_batches():
    acc = RecordAccumulator(linger_ms=0)
    for o in (10, 11, 12):
        acc.append("t", 0, None, b"v%d" % o, expected_offset=o)
    acc.append("t", 0, None, b"again", expected_offset=10)  # may go back: new batch
    acc.append("t", 0, None, b"gap", expected_offset=50)
    batches = drained(acc)
    assert [(b.produce_mode, b.base_offset, b.record_count) for b in batches] == [
        (2, 10, 3), (2, 10, 1), (2, 50, 1)]
    assert not any(b.offsets_explicit for b in batches)
    assert [r[2] for r in records_of(batches)] == [10, 11, 12, 10, 50]
    with pytest.raises(ValueError, match="expected offset must be >= 0"):
        acc.append("t", 0, None, b"x", expected_offset=-1)
    with pytest.raises(ValueError, match="not both"):
        acc.append("t", 0, None, b"x", offset=5, expected_offset=5)


def test_three_modes_never_share_a_batch():
    acc = RecordAccumulator(linger_ms=0)
    acc.append("t", 0, None, b"a")
    acc.append("t", 0, None, b"b", offset=7)
    acc.append("t", 0, None, b"c", expected_offset=8)
    acc.append("t", 0, None, b"d", offset=8)
    acc.append("t", 0, None, b"e")
    assert [(b.produce_mode, b.base_offset) for b in drained(acc)] == [
        (0, 0), (1, 7), (2, 8), (1, 8), (0, 0)]


def test_bulk_expected_offset_numbers_records_from_it():
    acc = RecordAccumulator(linger_ms=0, batch_num_messages=4)
    values = [b"v%d" % i for i in range(10)]
    assert acc.append_arrays("t", 2, values, expected_offset=100) == 10
    batches = drained(acc)
    assert [(b.produce_mode, b.base_offset, b.record_count) for b in batches] == [
        (2, 100, 4), (2, 104, 4), (2, 108, 2)]
    assert [r[2] for r in records_of(batches)] == list(range(100, 110))
    with pytest.raises(ValueError, match="not both"):
        acc.append_arrays("t", 2, values, offsets=np.arange(10), expected_offset=1)
    with pytest.raises(ValueError, match="one partition"):
        acc.append_arrays("t", np.zeros(10, np.int32), values, expected_offset=1)


def test_batch_size_and_message_count_limits():
    acc = RecordAccumulator(batch_size=1000, batch_num_messages=7, linger_ms=0)
    for _ in range(100):
        acc.append("t", 0, b"k", b"x" * 50, None, 1)
    batches = drained(acc)
    assert all(b.size <= 1000 for b in batches)
    assert all(b.record_count <= 7 for b in batches)
    assert sum(b.record_count for b in batches) == 100
    # A single record larger than batch.size still goes out, alone.
    acc.append("t", 0, None, b"y" * 5000, None, 1)
    (big,) = drained(acc)
    assert big.record_count == 1 and big.size > 5000


def test_linger():
    acc = RecordAccumulator(linger_ms=50)
    acc.append("t", 0, None, b"a")
    st = acc.partition_state("t", 0)
    assert st.open_records == 1
    opened = acc.next_ready_ms()
    assert 0 < opened <= 50
    from kipproducer.accumulator import monotonic_ms

    now = monotonic_ms()
    assert acc.drain(now) == []
    assert len(acc.drain(now + 60)) == 1
    assert acc.next_ready_ms() is None


def test_release_gives_the_bytes_back_unless_a_report_reads_them():
    """A released batch's buffer goes back to the pool at once when its reports are per
    batch (or go to no callback); per-record reports decode it later, and an open view
    still points into it."""
    from kipproducer._accumulator import ReportTarget

    def drained(opaque):
        acc = RecordAccumulator(linger_ms=0)
        acc.append_arrays("t", 0, [b"a", b"b"], keys=[b"k", None], opaque=opaque)
        [batch] = acc.drain(flush=True)
        return acc, batch

    def values(batch):
        return [r.value for b in decode_batches(batch.data) for r in b]

    for per_batch in (None, ReportTarget(print, False), ReportTarget(None, True)):
        acc, batch = drained(per_batch)
        acc.release(batch)
        assert (acc.buffered_bytes, acc.buffered_messages) == (0, 0)
        with pytest.raises(BufferError, match="went back to the buffer pool"):
            memoryview(batch)
        assert batch.record_count == 2  # what a per-batch report reads is kept
        _, again = drained(per_batch)  # the pooled buffer serves the next batch
        assert values(again) == [b"a", b"b"]

    acc, batch = drained(ReportTarget(print, True))
    expected = bytes(batch.data)
    acc.release(batch)
    assert bytes(batch.data) == expected and values(batch) == [b"a", b"b"]

    acc, batch = drained(None)
    view = batch.data  # a view still open (a write not finished): the bytes stay
    acc.release(batch)
    assert bytes(view) == bytes(batch.data)
    view.release()


def test_back_pressure_and_release():
    acc = RecordAccumulator(max_messages=5, linger_ms=0)
    for _ in range(5):
        acc.append("t", 0, None, b"v")
    with pytest.raises(QueueFullError) as err:
        acc.append("t", 0, None, b"v")
    assert isinstance(err.value, BufferError)
    assert len(acc) == 5
    batches = drained(acc)
    with pytest.raises(BufferError):  # drained but not delivered: still counted
        acc.append("t", 0, None, b"v")
    for b in batches:
        acc.release(b)
    assert len(acc) == 0 and acc.buffered_bytes == 0
    acc.append("t", 0, None, b"v")

    small = RecordAccumulator(max_bytes=2000, linger_ms=0)
    small.append("t", 0, None, b"x" * 1500)
    with pytest.raises(QueueFullError):
        small.append("t", 0, None, b"x" * 1500)


def test_sequences_per_partition_assigned_at_drain():
    acc = RecordAccumulator(linger_ms=0, batch_num_messages=3, producer_id=42, producer_epoch=3)
    for _ in range(7):
        acc.append("t", 0, None, b"a")
        acc.append("t", 1, None, b"b")
    batches = drained(acc)
    by_part = {}
    for b in batches:
        assert (b.producer_id, b.producer_epoch) == (42, 3)
        by_part.setdefault(b.partition, []).append((b.base_sequence, b.record_count))
    assert by_part[0] == [(0, 3), (3, 3), (6, 1)] == by_part[1]
    (first, *_rest) = decode_batches(batches[0].data)
    assert first.base_sequence == 0 and first.producer_id == 42


def test_sequence_wraps_after_int32_max():
    acc = RecordAccumulator(linger_ms=0, producer_id=1, producer_epoch=0)
    acc.set_next_sequence("t", 0, 2**31 - 2)
    for _ in range(3):
        acc.append("t", 0, None, b"a")
    (b,) = drained(acc)
    assert b.base_sequence == 2**31 - 2 and b.last_sequence == 0
    acc.append("t", 0, None, b"a")
    (b2,) = drained(acc)
    assert b2.base_sequence == 1


def test_retry_keeps_sequence_and_bytes():
    acc = RecordAccumulator(linger_ms=0, producer_id=7, producer_epoch=0)
    acc.append("t", 0, None, b"first")
    (b1,) = drained(acc)
    original = bytes(b1.data)
    acc.append("t", 0, None, b"second")
    acc.reenqueue(b1)
    again = drained(acc)
    assert again[0] is b1 and bytes(b1.data) == original and b1.base_sequence == 0
    assert again[1].base_sequence == 1


def test_epoch_bump_restarts_sequences_and_restamps_unsent_batches():
    acc = RecordAccumulator(linger_ms=0, producer_id=7, producer_epoch=0)
    for _ in range(4):
        acc.append("t", 0, None, b"x")
    (b1,) = drained(acc)
    assert b1.base_sequence == 0
    acc.append("t", 0, None, b"y")
    (b2,) = drained(acc)
    assert b2.base_sequence == 4
    acc.set_producer(7, 1)
    acc.reenqueue(b2)
    acc.reenqueue(b1)
    out = drained(acc)
    assert out == [b1, b2]
    assert [(b.producer_epoch, b.base_sequence) for b in out] == [(1, 0), (1, 4)]
    (rb1,) = decode_batches(b1.data)  # CRC recomputed over the new header
    assert rb1.producer_epoch == 1 and rb1.base_sequence == 0


def test_opaques_follow_records():
    acc = RecordAccumulator(linger_ms=0)
    acc.append("t", 0, None, b"a")
    acc.append("t", 0, None, b"b", opaque="B")
    acc.append("t", 0, None, b"c", opaque=3)
    acc.append("t", 0, None, b"d", opaque=3)
    (b,) = drained(acc)
    assert b.opaques == [None, "B", 3, 3]
    assert b.opaque_runs == [(0, None), (1, "B"), (2, 3)]


def test_bulk_opaque_is_one_run_per_call():
    acc = RecordAccumulator(linger_ms=0)
    first, second = object(), object()
    acc.append_arrays("t", 0, [b"x"] * 5, opaque=first)
    acc.append_arrays("t", 0, [b"y"] * 3, opaque=second)
    acc.append_arrays("t", 0, [b"z"] * 2)
    (b,) = drained(acc)
    assert b.opaque_runs == [(0, first), (5, second), (8, None)]
    assert b.opaques == [first] * 5 + [second] * 3 + [None] * 2


def test_compression_in_accumulator():
    acc = RecordAccumulator(linger_ms=0, compression="zstd")
    for _ in range(100):
        acc.append("t", 0, b"k", b"value" * 20, [("h", b"1")], 5)
    (b,) = drained(acc)
    assert b.compression == "zstd" and b.size < 100 * 100
    assert len(records_of([b])) == 100


# ---- bulk path ------------------------------------------------------------------------------

N = 1000
VALUES = [None if i % 17 == 0 else b"value-%d" % i * (i % 5) for i in range(N)]
KEYS = [None if i % 13 == 0 else b"key-%d" % i for i in range(N)]
TIMESTAMPS = np.arange(1_000, 1_000 + N, dtype=np.int64)
OFFSETS = np.cumsum(np.where(np.arange(N) % 97 == 0, 5, 1)).astype(np.int64)


def per_record_reference(offsets=None, headers=None, partitions=None):
    acc = RecordAccumulator(linger_ms=0, batch_size=4096)
    for i in range(N):
        acc.append("t", 0 if partitions is None else int(partitions[i]), KEYS[i], VALUES[i],
                   None if headers is None else headers[i], int(TIMESTAMPS[i]),
                   None if offsets is None else int(offsets[i]))
    return records_of(drained(acc))


def arrow_pair(items):
    arr = pa.array(items, type=pa.binary())
    data = arr.buffers()[2]
    return np.frombuffer(data, dtype=np.uint8) if data is not None else b"", np.frombuffer(
        arr.buffers()[1], dtype=np.int32)


def column_of(form, items):
    """``items`` (bytes, str or None) as a column of the given form; the Arrow forms hold
    str items as their UTF-8 bytes, as a pyarrow binary array would."""
    if form == "list":
        return list(items)
    if form == "object_array":
        return np.array(items, dtype=object)
    items = [item.encode() if isinstance(item, str) else item for item in items]
    if form == "arrow":
        return pa.array(items, type=pa.binary())
    if form == "large_arrow":
        return pa.array(items, type=pa.large_binary())
    if form == "chunked":
        return pa.chunked_array([items[:300], items[300:]], type=pa.binary())
    return pa.array([b"junk"] * 3 + list(items), type=pa.binary()).slice(3)


@pytest.mark.parametrize("form", ["list", "object_array", "arrow", "large_arrow", "chunked",
                                  "sliced_arrow"])
def test_bulk_equals_per_record(form):
    acc = RecordAccumulator(linger_ms=0, batch_size=4096)
    n = acc.append_arrays("t", 0, column_of(form, VALUES), keys=column_of(form, KEYS),
                          timestamps=TIMESTAMPS, offsets=OFFSETS)
    assert n == N
    bulk = records_of(drained(acc))
    assert bulk == per_record_reference(offsets=OFFSETS)


def test_bulk_data_offsets_tuple_int32_and_int64():
    vals = [b"v%d" % i for i in range(N)]
    blob = b"".join(vals)
    pos = np.concatenate([[0], np.cumsum([len(v) for v in vals])])
    for dtype in (np.int32, np.int64):
        acc = RecordAccumulator(linger_ms=0)
        acc.append_arrays("t", 0, (np.frombuffer(blob, np.uint8), pos.astype(dtype)),
                          timestamps=TIMESTAMPS)
        assert [r[4] for r in records_of(drained(acc))] == vals


def test_bulk_headers_shared_and_per_record():
    shared = [("source", b"bulk"), ("n", None)]
    acc = RecordAccumulator(linger_ms=0, batch_size=4096)
    acc.append_arrays("t", 0, VALUES, keys=KEYS, timestamps=TIMESTAMPS, headers=shared)
    assert all(r[5] == shared for r in records_of(drained(acc)))
    per = [None if i % 3 else [("i", b"%d" % i)] for i in range(N)]
    acc.append_arrays("t", 0, VALUES, keys=KEYS, timestamps=TIMESTAMPS, headers=per)
    assert records_of(drained(acc)) == per_record_reference(headers=per)


def test_bulk_partition_array():
    parts = (np.arange(N) % 3).astype(np.int32)
    acc = RecordAccumulator(linger_ms=0, batch_size=4096)
    acc.append_arrays("t", parts, VALUES, keys=KEYS, timestamps=TIMESTAMPS)
    got = sorted(records_of(drained(acc)), key=lambda r: (r[1], r[6]))
    want = sorted(per_record_reference(partitions=parts), key=lambda r: (r[1], r[6]))
    assert got == want


def test_bulk_stops_at_the_bounds():
    acc = RecordAccumulator(linger_ms=0, max_messages=600)
    assert acc.append_arrays("t", 0, VALUES, timestamps=TIMESTAMPS) == 600
    assert len(acc) == 600


def test_bulk_bad_columns():
    acc = RecordAccumulator(linger_ms=0)
    with pytest.raises(ValueError, match="same length"):
        acc.append_arrays("t", 0, VALUES, keys=KEYS[:10])
    with pytest.raises(TypeError):
        acc.append_arrays("t", 0, np.zeros(10, dtype=np.int64))
    with pytest.raises(ValueError, match="past the end"):
        acc.append_arrays("t", 0, (np.zeros(4, np.uint8), np.array([0, 2, 9], np.int64)))
    with pytest.raises(ValueError, match="decrease"):
        acc.append_arrays("t", 0, (np.zeros(4, np.uint8), np.array([0, 3, 2], np.int64)))
    with pytest.raises(TypeError):
        acc.append_arrays("t", 0, [b"ok", 5])
    with pytest.raises(OffsetOrderError):
        acc.append_arrays("t", 0, [b"a", b"b"], offsets=np.array([5, 5]))


def test_packed_runs_are_batches_back_to_back():
    """pack_runs (KIP-WIRE §9): a gap in explicit offsets starts a new RecordBatch in the same
    ProducerBatch; each run is a valid producer batch with its own offsets, and sequences
    continue from run to run."""
    import numpy as np

    from kipproducer.records import decode_batches

    acc = RecordAccumulator(linger_ms=0)
    acc.pack_runs = True
    acc.set_producer(7, 0)
    offsets = np.array([10, 11, 12, 20, 30, 31], dtype=np.int64)
    assert acc.append_arrays("t", 0, [b"v%d" % o for o in offsets], offsets=offsets) == 6
    [batch] = acc.drain(flush=True)
    assert (batch.record_count, batch.base_offset, batch.last_offset) == (6, 10, 31)
    assert [batch.record_offset(i) for i in range(6)] == offsets.tolist()
    runs = list(decode_batches(batch.data, validate=True, strict=True))
    assert [(b.base_offset, b.record_count, b.base_sequence, b.producer_id) for b in runs] == [
        (10, 3, 0, 7), (20, 1, 3, 7), (30, 2, 4, 7)]
    assert [r.value for b in runs for r in b] == [b"v%d" % o for o in offsets]
    # A new epoch re-stamps every run; the next batch continues the sequence.
    acc.set_producer(8, 0)
    assert acc.append_arrays("t", 0, [b"x"], offsets=np.array([40], np.int64)) == 1
    [later] = acc.drain(flush=True)
    assert later.base_sequence == 0 and later.runs is None
    acc.release(batch)
    acc.release(later)
    assert (acc.buffered_bytes, acc.buffered_messages) == (0, 0)


class _Name(str):
    """A str subclass key: equal to the field name, yet not a str exactly."""


def _dict_forms(i: int) -> list[dict]:
    """One message as produce_batch users may build it: literal keys, keys made at run time
    (not interned), and dicts with keys that are no field (another type, a str subclass)."""
    fields = {"key": b"k%d" % i, "value": b"v%d" % i, "headers": [("h", b"%d" % i)],
              "timestamp": 1_700_000_000_000 + i, "partition": i % 2}
    runtime = {"".join(list(name)): v for name, v in fields.items()}
    assert all(a is not b for a, b in zip(fields, runtime, strict=True))
    return [fields, runtime, {**fields, 7: "not a field", "_error": None},
            {_Name("value"): b"v%d" % i, **{k: v for k, v in fields.items() if k != "value"}}]


def test_append_dicts_reads_every_form_of_message_dict():
    from kipproducer._accumulator import scan_messages

    out = []
    for form in range(4):
        acc = RecordAccumulator(linger_ms=0)
        messages = [_dict_forms(i)[form] for i in range(20)]
        assert scan_messages(messages, -1) is False  # every message has its partition
        failed = []
        assert acc.append_dicts("t", messages, 0, 20, None, -1, 1 << 20, "target",
                                lambda cb: cb, (None, None),
                                lambda m, code, text, failed=failed: failed.append(code)) == 20
        assert failed == []
        out.append(sorted(records_of(drained(acc))))
    assert out[0] == out[1] == out[2] == out[3]
    assert len(out[0]) == 20 and out[0][0][3:] == (b"k0", b"v0", [("h", b"0")],
                                                   1_700_000_000_000)


class _Key(str):
    """A str subclass header key: not cached (its text could be anything its class says)."""


def _append_dicts(acc, messages, start=0, stop=None):
    failed = []
    queued = acc.append_dicts("t", messages, start, len(messages) if stop is None else stop,
                              None, 0, 1 << 20, "target", lambda cb: cb, (None, None),
                              lambda m, code, text: failed.append((code, text)))
    return queued, failed


def test_append_dicts_headers_encoded_once_read_back_as_given():
    """Headers copied from an earlier record's encoding (the same pairs) read back exactly as
    the general path writes them, and whatever cannot be cached is encoded per record."""
    shared = [("source", b"bench"), ("trace", "text")]
    forms = [
        shared, shared,                                  # the same list
        [("source", b"bench"), ("trace", "text")],       # equal pairs, new tuples: re-encoded
        [shared[0], shared[1]], [shared[0], shared[1]],  # new lists of the same pairs
        tuple(shared),                                   # a tuple of the same pairs
        [], [],                                          # no headers, as an empty list
        [("k", None)], [("k", None)],                    # a null value
        [("k", bytearray(b"mutable"))],                  # mutable value: per record
        [("k", memoryview(b"view"))],
        {"dict": b"form"}, {"dict": b"form"},            # a dict: per record
        [(_Key("sub"), b"v")],                           # str subclass key: per record
        [("n%d" % i, b"%d" % i) for i in range(17)],     # more pairs than cached
        shared, None, shared,
    ]
    messages = [{"value": b"v%d" % i, "key": b"k", "timestamp": 1_700_000_000_000 + i,
                 **({} if h is None else {"headers": h})} for i, h in enumerate(forms)]
    acc = RecordAccumulator(linger_ms=0)
    assert _append_dicts(acc, messages) == (len(forms), [])
    assert acc.headers_reused >= 6  # the cached path was taken, not only the general one
    general = RecordAccumulator(linger_ms=0)
    for m in messages:
        general.append("t", 0, m["key"], m["value"], m.get("headers"), m["timestamp"])
    assert general.headers_reused == 0
    got, want = records_of(drained(acc)), records_of(drained(general))
    assert got == want
    expected = [[] if h is None else
                [(k, None if v is None else v.encode() if isinstance(v, str) else bytes(v))
                 for k, v in (h.items() if isinstance(h, dict) else h)]
                for h in forms]
    assert [r[5] for r in got] == expected


def test_append_dicts_header_cache_sees_a_changed_list():
    """The same list object with other pairs in it (changed between calls) is encoded anew."""
    pairs = [("h", b"first")]
    messages = [{"value": b"a", "headers": pairs}, {"value": b"b", "headers": pairs}]
    acc = RecordAccumulator(linger_ms=0)
    assert _append_dicts(acc, messages, 0, 1) == (1, [])
    pairs[0] = ("h", b"second")
    assert _append_dicts(acc, messages, 1, 2) == (1, [])
    pairs.append(("more", b"x"))
    assert _append_dicts(acc, [{"value": b"c", "headers": pairs}]) == (1, [])
    assert [r[5] for r in records_of(drained(acc))] == [
        [("h", b"first")], [("h", b"second")], [("h", b"second"), ("more", b"x")]]


def test_append_dicts_bad_headers_fail_the_message_either_way():
    """A pair that cannot be encoded fails its message with _INVALID_ARG whether it is met on
    the way into the cache or on the general path; the others go."""
    good = [("h", b"ok")]
    messages = [{"value": b"1", "headers": good},
                {"value": b"2", "headers": [("h", "\ud800")]},   # not encodable as UTF-8
                {"value": b"3", "headers": good},
                {"value": b"4", "headers": [("h", 5)]},           # not bytes / str
                {"value": b"5", "headers": [("h", b"x", b"y")]},  # not a pair
                {"value": b"6", "headers": [(None, b"x")]},       # no key
                {"value": b"7", "headers": good}]
    acc = RecordAccumulator(linger_ms=0)
    queued, failed = _append_dicts(acc, messages)
    assert queued == 3
    assert [code for code, _ in failed] == ["_INVALID_ARG"] * 4
    assert [r[4] for r in records_of(drained(acc))] == [b"1", b"3", b"7"]


def test_append_arrays_headers_encoded_once_match_per_record_appends():
    values = [b"v%d" % i for i in range(40)]
    per_record = [[("i", b"%d" % (i % 3))] if i % 4 else None for i in range(40)]
    constant = [("tag", b"same")]
    per_record_same = [constant] * 40
    for headers in ([("shared", b"1"), ("two", None)], {"as": b"dict"}, per_record,
                    per_record_same):
        acc = RecordAccumulator(linger_ms=0)
        assert acc.append_arrays("t", 0, values, headers=headers, timestamps=[7] * 40) == 40
        general = RecordAccumulator(linger_ms=0)
        for i, value in enumerate(values):
            h = headers[i] if headers is per_record or headers is per_record_same else headers
            general.append("t", 0, None, value, h, 7)
        assert records_of(drained(acc)) == records_of(drained(general))
        if headers is per_record_same:
            assert acc.headers_reused == 39
    with pytest.raises(TypeError):  # a bad shared pair refuses the call before any append
        RecordAccumulator().append_arrays("t", 0, values, headers=[("k", 5)])


class _Meddler:
    """A dict key hashing like "timestamp" whose equality test takes "value" out of the dict:
    the lookup of "timestamp" (absent) runs it, after "value" was found."""

    def __init__(self, target: dict) -> None:
        self.target = target
        self.armed = False

    def __hash__(self) -> int:
        return hash("timestamp")

    def __eq__(self, other) -> bool:
        if self.armed and "value" in self.target:
            del self.target["value"]
            # Same size, other bytes: takes the freed value's memory if anything still
            # pointed there (a borrowed reference would now read x's).
            self.junk = bytes(bytearray(b"x" * 5000))
        return False


def test_message_dict_changed_by_its_own_key_lookup():
    """A dict whose key equality changes the dict while the fields are looked up: the value
    found before stays alive and is the one written (it was a borrowed reference once)."""
    from kipproducer._accumulator import scan_messages

    def message():
        m = {"value": bytes(bytearray(b"v" * 5000)), "key": b"k", "partition": 0}
        meddler = _Meddler(m)
        m[meddler] = None
        meddler.armed = True
        assert "value" in m
        return m

    messages = [message() for _ in range(50)]
    assert scan_messages(messages, -1) is False
    messages = [message() for _ in range(50)]
    acc = RecordAccumulator(linger_ms=0)
    queued, failed = _append_dicts(acc, messages)
    assert (queued, failed) == (50, [])
    assert [r[4] for r in records_of(drained(acc))] == [b"v" * 5000] * 50


# -- produce_arrays' copy without the GIL (offsets assigned by the broker) ----------------------

N_LONG = 5000  # more than one stretch of records copied without the GIL (COPY_STRETCH = 4096)
LONG_VALUES = [None if i % 211 == 0 else ("text-%d" % i if i % 101 == 0 else b"v%d" % i * (i % 7))
               for i in range(N_LONG)]
LONG_KEYS = [None if i % 13 == 0 else b"key-%d" % i for i in range(N_LONG)]
LONG_TIMESTAMPS = np.arange(5_000, 5_000 + N_LONG, dtype=np.int64)


@pytest.mark.parametrize("form", ["list", "object_array", "arrow", "chunked", "sliced_arrow"])
@pytest.mark.parametrize("limits", [{"batch_size": 4096},
                                    {"batch_size": 1_000_000, "batch_num_messages": 3000}])
@pytest.mark.parametrize("headers", [None, [("h", b"1")]])
def test_assigned_offsets_columns_equal_per_record_appends(form, limits, headers):
    """The records that continue a batch are copied in stretches without the GIL; batches end
    inside a stretch (by size, by batch_num_messages) and stretches end inside a batch, and
    the batches are byte for byte those of per-record appends."""
    acc = RecordAccumulator(linger_ms=0, **limits)
    assert acc.append_arrays("t", 0, column_of(form, LONG_VALUES),
                             keys=column_of(form, LONG_KEYS),
                             timestamps=LONG_TIMESTAMPS, headers=headers) == N_LONG
    bulk = drained(acc)
    reference = RecordAccumulator(linger_ms=0, **limits)
    for i in range(N_LONG):
        value = LONG_VALUES[i]
        reference.append("t", 0, LONG_KEYS[i],
                         value.encode() if isinstance(value, str) else value, headers,
                         int(LONG_TIMESTAMPS[i]))
    expected = drained(reference)
    assert len(bulk) == len(expected) > 1
    assert [bytes(b.data) for b in bulk] == [bytes(b.data) for b in expected]


def test_columns_without_keys_or_timestamps_stop_at_the_message_bound():
    acc = RecordAccumulator(linger_ms=0, max_messages=N_LONG - 7)
    values = np.array([b"x" * 20] * N_LONG, dtype=object)
    assert acc.append_arrays("t", 0, values) == N_LONG - 7
    assert [r[3:5] for r in records_of(drained(acc))] == [(None, b"x" * 20)] * (N_LONG - 7)


def test_columns_are_copied_without_the_gil_from_held_items():
    """append_arrays copies without the GIL, so another thread runs meanwhile (here: looks at
    the column) and could replace an item being copied, freeing it. It cannot: each gathered
    item carries one more reference until copied, which that thread sees."""
    import sys
    import threading

    n = 20_000
    values = np.array([bytes(bytearray(b"v" * 512)) for _ in range(n)], dtype=object)
    done = threading.Event()
    held_seen = []

    def look():
        while not done.is_set():
            for j in range(0, n, 97):
                if sys.getrefcount(values[j]) > 2:  # the array's, getrefcount's, and ours?
                    held_seen.append(j)

    thread = threading.Thread(target=look)
    thread.start()
    try:
        for _ in range(50):  # a few calls at most, unless the machine is busy elsewhere
            acc = RecordAccumulator(linger_ms=0, max_messages=n)
            assert acc.append_arrays("t", 0, values) == n
            assert {r[4] for r in records_of(drained(acc))} == {b"v" * 512}
            if held_seen:
                break
    finally:
        done.set()
        thread.join()
    assert held_seen, "no item was seen held: the copy ran with the GIL, or without holding"
    assert all(sys.getrefcount(values[j]) == 2 for j in range(n))  # every hold released
