"""Cross-checks with independent RecordBatch implementations: kafka-python and aiokafka.

Their readers must accept our batches (CRC valid, every field equal), and our reader must
accept theirs.
"""

import pytest
from aiokafka.record.default_records import DefaultRecordBatch as AioBatch
from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch as KpBatch
from kafka.record.default_records import DefaultRecordBatchBuilder as KpBuilder
from strategies import compression, producer, records

from kipproducer.records import decode_batches, encode_batch

CODEC_ID = {None: 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def _headers(hs):
    return [(k, v) for k, v in hs]


def check_reader(batch, recs, base_offset, pid, epoch, seq, transactional, codec):
    assert batch.validate_crc()
    assert batch.base_offset == base_offset
    assert batch.producer_id == pid
    assert batch.producer_epoch == epoch
    assert batch.base_sequence == seq
    assert batch.is_transactional == transactional
    assert batch.compression_type == CODEC_ID[codec]
    assert batch.last_offset_delta == len(recs) - 1
    got = list(batch)
    assert len(got) == len(recs)
    for i, (rec, (key, value, headers, ts)) in enumerate(zip(got, recs, strict=True)):
        assert rec.offset == base_offset + i
        assert rec.key == key
        assert rec.value == value
        assert rec.timestamp == ts
        assert _headers(rec.headers) == _headers(headers)


@given(records, compression, producer, st.integers(0, 2**40), st.booleans())
@settings(max_examples=120, deadline=None)
def test_kafka_python_and_aiokafka_read_our_batches(recs, codec, prod, base, txn):
    pid, epoch, seq = prod
    data = encode_batch(recs, base_offset=base, producer_id=pid, producer_epoch=epoch,
                        base_sequence=seq, transactional=txn, compression=codec)
    check_reader(KpBatch(data), recs, base, pid, epoch, seq, txn, codec)
    check_reader(AioBatch(data), recs, base, pid, epoch, seq, txn, codec)


def build_with(builder_cls, recs, codec, pid, epoch, seq, txn):
    builder = builder_cls(magic=2, compression_type=CODEC_ID[codec], is_transactional=int(txn),
                          producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                          batch_size=1 << 30)
    for i, (key, value, headers, ts) in enumerate(recs):
        assert builder.append(i, ts, key, value, headers) is not None
    return bytes(builder.build())


@pytest.mark.parametrize("builder_cls", [KpBuilder, AioBuilder], ids=["kafka-python", "aiokafka"])
@given(recs=records, codec=compression, prod=producer, txn=st.booleans())
@settings(max_examples=80, deadline=None)
def test_we_read_their_batches(builder_cls, recs, codec, prod, txn):
    pid, epoch, seq = prod
    data = build_with(builder_cls, recs, codec, pid, epoch, seq, txn)
    (batch,) = decode_batches(data)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (pid, epoch, seq)
    assert batch.is_transactional == txn
    # Builders may leave a batch uncompressed when compressing does not make it smaller.
    written = {v: k for k, v in CODEC_ID.items()}[KpBatch(data).compression_type]
    assert written in (codec, None)
    assert batch.compression == written
    got = [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in batch]
    assert got == [(i, k, v, _headers(h), ts) for i, (k, v, h, ts) in enumerate(recs)
                   ] or builder_cls is AioBuilder
    # aiokafka's builder writes a first timestamp of -1 as 0 (its own reader and
    # kafka-python's read 0 back too), so for it the reference is kafka-python's reading of
    # the same bytes, and everything but such timestamps must equal the input.
    theirs = [(r.offset, r.key, r.value, _headers(r.headers), r.timestamp)
              for r in KpBatch(data)]
    assert got == theirs
    assert [g[:4] for g in got] == [(i, k, v, _headers(h)) for i, (k, v, h, _) in
                                    enumerate(recs)]


def test_uncompressed_bytes_identical_to_kafka_python():
    """Same input, same bytes: the layout is the reference one, field for field."""
    recs = [(b"key%d" % i, b"value" * i, [("h", b"v"), ("n", None)], 1_700_000_000_000 + i)
            for i in range(50)]
    ours = encode_batch(recs, producer_id=9, producer_epoch=2, base_sequence=100)
    theirs = build_with(KpBuilder, recs, None, 9, 2, 100, False)
    # partitionLeaderEpoch (bytes 12-15, outside the CRC) is -1 from Java producers and us,
    # 0 from kafka-python; the broker overwrites it. Everything else must match.
    assert ours[:12] + ours[16:] == theirs[:12] + theirs[16:]
