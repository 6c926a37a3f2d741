"""RecordBatch v2 codec: round trips, edge cases and malformed input."""

import os
import random
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import compression, producer, records

from kipproducer.errors import CorruptRecordError
from kipproducer.records import (
    BATCH_HEADER_SIZE,
    LAYOUT,
    decode_batches,
    encode_batch,
    next_sequence,
    rebuild_batch,
    set_base_offset,
    validate_batch,
)


def as_tuples(batch):
    return [(r.key, r.value, r.headers, r.timestamp) for r in batch]


@given(records, compression, producer, st.integers(0, 2**62), st.booleans())
@settings(max_examples=150, deadline=None)
def test_round_trip(recs, codec, prod, base_offset, transactional):
    pid, epoch, seq = prod
    data = encode_batch(
        recs,
        base_offset=base_offset,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        transactional=transactional,
        compression=codec,
    )
    (batch,) = decode_batches(data)
    assert batch.base_offset == base_offset
    assert batch.last_offset == base_offset + len(recs) - 1
    assert batch.record_count == len(recs) == len(batch)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (pid, epoch, seq)
    assert batch.is_transactional == transactional
    assert batch.compression == codec
    assert batch.max_timestamp == max(r[3] for r in recs)
    assert batch.base_timestamp == recs[0][3]
    decoded = list(batch)
    assert [r.offset for r in decoded] == list(range(base_offset, base_offset + len(recs)))
    assert as_tuples(decoded) == [(k, v, [tuple(h) for h in hs], ts) for k, v, hs, ts in recs]


def test_empty_versus_none_key_and_value():
    data = encode_batch([(b"", None, [], 5), (None, b"", [("h", None), ("e", b"")], 6)])
    first, second = validate_batch(data)
    assert first.key == b"" and first.value is None
    assert second.key is None and second.value == b""
    assert second.headers == [("h", None), ("e", b"")]


def test_zero_records_refused():
    with pytest.raises(ValueError, match="at least one record"):
        encode_batch([])


def test_none_timestamp_means_now():
    before = int(time.time() * 1000)
    (rec,) = validate_batch(encode_batch([(None, b"v", None, None)]))
    assert before <= rec.timestamp <= int(time.time() * 1000) + 1


@pytest.mark.parametrize("ts", [-1, 0, 2**62, 2**63 - 1])
def test_extreme_timestamps(ts):
    (rec,) = validate_batch(encode_batch([(None, b"v", None, ts)]))
    assert rec.timestamp == ts


def test_timestamps_going_backwards_use_negative_deltas():
    batch = validate_batch(encode_batch([(None, b"a", None, 1000), (None, b"b", None, 10)]))
    assert [r.timestamp for r in batch] == [1000, 10]
    assert batch.max_timestamp == 1000


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_one_mebibyte_record_every_codec(codec):
    big = os.urandom(1 << 20)
    batch = validate_batch(encode_batch([(b"k", big, [("h", big[:100])], 1)], compression=codec))
    (rec,) = batch
    assert rec.value == big and rec.headers == [("h", big[:100])]


def test_str_dict_headers_and_buffers_accepted():
    data = encode_batch([("ké", memoryview(b"val"), {"a": "b", "n": None}, 1)])
    (rec,) = validate_batch(data)
    assert rec.key == "ké".encode() and rec.value == b"val"
    assert rec.headers == [("a", b"b"), ("n", None)]


def test_bad_record_shapes_are_type_errors():
    with pytest.raises(TypeError):
        encode_batch([(b"k", b"v")])
    with pytest.raises(TypeError):
        encode_batch([(b"k", 12, None, 1)])
    with pytest.raises(TypeError):
        encode_batch([(b"k", b"v", [("k",)], 1)])
    with pytest.raises(TypeError):
        encode_batch([(b"k", b"v", [(None, b"x")], 1)])


def test_sequence_wrap():
    assert next_sequence(2**31 - 1, 1) == 0
    assert next_sequence(2**31 - 2, 3) == 1
    assert next_sequence(5, 10) == 15
    data = encode_batch(
        [(None, b"x", None, 1)] * 3, producer_id=1, producer_epoch=0, base_sequence=2**31 - 2
    )
    batch = validate_batch(data)
    assert batch.base_sequence == 2**31 - 2
    assert batch.last_sequence == 0  # sequences 2**31-2, 2**31-1, 0


def test_set_base_offset_keeps_crc_valid():
    data = bytearray(encode_batch([(None, b"x", None, 1)] * 4))
    set_base_offset(data, 12345)
    batch = validate_batch(data)
    assert [r.offset for r in batch] == [12345, 12346, 12347, 12348]


def test_several_batches_and_partial_tail():
    a = encode_batch([(None, b"a", None, 1)], base_offset=0)
    b = encode_batch([(None, b"b", None, 1)] * 2, base_offset=1)
    assert [x.base_offset for x in decode_batches(a + b)] == [0, 1]
    cut = a + b[:-3]
    with pytest.raises(CorruptRecordError) as err:
        list(decode_batches(cut))
    assert err.value.rule == "truncated"
    assert [x.base_offset for x in decode_batches(cut, allow_partial=True)] == [0]


def test_validate_batch_wants_exactly_one_batch():
    a = encode_batch([(None, b"a", None, 1)])
    with pytest.raises(CorruptRecordError) as err:
        validate_batch(a + a)
    assert err.value.rule == "trailing_bytes"
    with pytest.raises(CorruptRecordError):
        validate_batch(b"")


def _patched(data, field, value, size):
    buf = bytearray(data)
    pos = LAYOUT[field]
    buf[pos : pos + size] = value.to_bytes(size, "big", signed=True)
    return bytes(buf)


@pytest.mark.parametrize(
    "field,value,size,rule",
    [
        ("magic", 1, 1, "magic"),
        ("crc", 12345, 4, "crc"),
        ("batch_length", 10, 4, "batch_length"),
        ("batch_length", 2**31 - 1, 4, "truncated"),
    ],
)
def test_header_rules(field, value, size, rule):
    data = _patched(encode_batch([(b"k", b"v", None, 1)] * 3), field, value, size)
    with pytest.raises(CorruptRecordError) as err:
        list(decode_batches(data))
    assert err.value.rule == rule


def _recrc(buf):
    from kipproducer.crc32c import crc32c

    buf = bytearray(buf)
    crc = crc32c(bytes(buf[LAYOUT["attributes"] :]))
    buf[LAYOUT["crc"] : LAYOUT["crc"] + 4] = crc.to_bytes(4, "big")
    return bytes(buf)


def test_count_must_match_last_offset_delta():
    data = encode_batch([(b"k", b"v", None, 1)] * 3)
    bad = _recrc(_patched(data, "records_count", 2, 4))
    with pytest.raises(CorruptRecordError) as err:
        validate_batch(bad)
    assert err.value.rule == "record_count"
    bad = _recrc(_patched(data, "last_offset_delta", 5, 4))
    with pytest.raises(CorruptRecordError) as err:
        validate_batch(bad)
    assert err.value.rule == "record_count"


def test_offset_deltas_must_be_0_to_n_minus_1():
    batch = validate_batch(encode_batch([(b"k%d" % i, b"v", None, 1) for i in range(5)]))
    compacted = rebuild_batch(batch, [r for r in batch if r.offset in (0, 1, 2, 4)])
    # Same count and lastOffsetDelta as a 4-record producer batch, but deltas 0,1,2,4.
    fake = _recrc(_patched(compacted, "last_offset_delta", 3, 4))
    with pytest.raises(CorruptRecordError) as err:
        validate_batch(fake)
    assert err.value.rule == "offset_delta"
    # A compacted batch is fine when read non-strictly.
    (kept,) = decode_batches(compacted, strict=False)
    assert [r.offset for r in kept] == [0, 1, 2, 4]
    assert kept.last_offset == 4


def test_trailing_bytes_inside_records_section():
    data = encode_batch([(b"k", b"v", None, 1)])
    buf = bytearray(data + b"\x00\x00")
    length = int.from_bytes(buf[8:12], "big") + 2
    buf[8:12] = length.to_bytes(4, "big")
    with pytest.raises(CorruptRecordError) as err:
        validate_batch(_recrc(buf))
    assert err.value.rule == "trailing_bytes"


def test_corrupt_compressed_section():
    data = bytearray(encode_batch([(b"k", b"v" * 1000, None, 1)] * 10, compression="zstd"))
    data[BATCH_HEADER_SIZE + 5 :] = b"\x00" * (len(data) - BATCH_HEADER_SIZE - 5)
    with pytest.raises(CorruptRecordError) as err:
        validate_batch(_recrc(data))
    assert err.value.rule in ("decompression", "record_size", "varint", "trailing_bytes")


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_truncations_and_bit_flips_only_raise_corrupt_record(codec):
    rng = random.Random(7)
    recs = [(b"key%d" % i, os.urandom(rng.randrange(0, 300)), [("h", b"x")], 1000 + i)
            for i in range(20)]
    data = encode_batch(recs, compression=codec)
    assert list(decode_batches(b"")) == []
    for cut in range(1, len(data), max(1, len(data) // 97)):
        with pytest.raises(CorruptRecordError):
            list(decode_batches(data[:cut]))
    for _ in range(400):
        buf = bytearray(data)
        for _ in range(rng.randrange(1, 4)):
            buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
        if bytes(buf[:8]) != data[:8] or bytes(buf[12:16]) != data[12:16]:
            continue  # bytes outside the CRC: a flip there is not corruption the CRC can see
        try:
            for batch in decode_batches(buf):
                list(batch)
        except CorruptRecordError:
            pass


@pytest.mark.parametrize("codec", [None, "zstd"])
def test_forged_crc_still_caught_by_structure(codec):
    """Bit flips with the CRC recomputed: the record walk must still catch (or survive) them."""
    rng = random.Random(11)
    data = encode_batch([(b"k%d" % i, b"v" * i, [("h%d" % i, b"x")], i) for i in range(30)],
                        compression=codec)
    for _ in range(500):
        buf = bytearray(data)
        pos = rng.randrange(LAYOUT["attributes"], len(buf))
        buf[pos] ^= 1 << rng.randrange(8)
        try:
            for batch in decode_batches(_recrc(buf)):
                list(batch)
        except CorruptRecordError:
            pass


@given(st.binary(max_size=400))
@settings(max_examples=300)
def test_random_bytes_never_crash(data):
    try:
        for batch in decode_batches(data):
            list(batch)
    except CorruptRecordError:
        pass


def test_lying_record_lengths_do_not_over_read():
    # A single record whose length varint claims far more than exists.
    data = bytearray(encode_batch([(b"k", b"v", None, 1)]))
    data[BATCH_HEADER_SIZE] = 0x7E  # zigzag 63
    with pytest.raises(CorruptRecordError) as err:
        validate_batch(_recrc(data))
    assert err.value.rule == "record_size"


def test_header_keys_must_be_utf8_ascii_or_not():
    """Validation checks every header key's UTF-8 without building the headers (issue 30):
    ASCII and multi-byte keys pass, a key with invalid bytes fails with rule header_key, in
    any record of the batch."""
    recs = [(b"k", b"v", [("plain", b"1"), ("clé", b"2")], 1), (b"k", b"v", [("zz", b"3")], 1)]
    data = encode_batch(recs)
    assert as_tuples(validate_batch(data)) == as_tuples(decode_batches(data).__next__())
    # "zz" in the second record becomes two bytes that are not UTF-8
    at = data.rindex(b"zz")
    bad = _recrc(data[:at] + b"\xff\xfe" + data[at + 2:])
    with pytest.raises(CorruptRecordError) as err:
        validate_batch(bad)
    assert err.value.rule == "header_key"


def test_unit_summary_reads_every_batch():
    from kipproducer.records import split_unit, unit_summary

    plain = encode_batch([(b"k", b"v" * 50, None, 5)] * 3, base_offset=0)
    later = encode_batch([(b"k", b"v", None, 9)], base_offset=10)
    packed = encode_batch([(b"k", b"v", None, 7)] * 2, base_offset=20, compression="gzip")
    batches = split_unit(plain + later + packed, 1)
    largest, records, newest, compressed = unit_summary(batches)
    assert largest == max(b.size_in_bytes for b in batches) == len(plain)
    assert (records, newest, compressed) == (6, 9, True)
    assert unit_summary(batches[:2])[3] is False
