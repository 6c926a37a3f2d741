"""`kip demo`: kipproducer end to end on an embedded broker, in a few seconds.

0. An EmbeddedBroker (the reference broker, in this process, temporary data dir) takes records
   from kipproducer.Producer's bulk lane; a stock librdkafka consumer reads them back, CRCs
   checked, and every payload is compared.
1. A source partition with offset gaps (as compaction and transaction markers leave them) is
   accumulated with its offsets kept: every batch holds consecutive offsets only.
2. Each batch is read back by our decoder and, when installed, by aiokafka's and kafka-python's
   readers (independent implementations), which must agree on every offset and byte.
3. The same records go through the per-record and the numpy bulk paths; records/s for each.

It will grow into the offset-preserving copy between two embedded brokers once the KIP-391
extension is on the wire.
"""

from __future__ import annotations

import hashlib
import time

import numpy as np

from .accumulator import RecordAccumulator
from .records import decode_batches


def _source_partition(n: int, seed: int = 42):
    rng = np.random.default_rng(seed)
    # Offsets with holes: ~2% of positions skip 1-50 offsets.
    steps = np.where(rng.random(n) < 0.02, rng.integers(2, 51, n), 1)
    offsets = np.cumsum(steps) - steps[0]
    keys = [b"user-%06d" % int(k) for k in rng.integers(0, 50_000, n)]
    values = [rng.bytes(100) for _ in range(n)]
    # Recent timestamps: older ones would fall to the broker's time retention (retention.ms).
    timestamps = int(time.time() * 1000) - 7 * n + np.arange(n, dtype=np.int64) * 7
    return offsets.astype(np.int64), keys, values, timestamps


def _independent_readers():
    readers = []
    try:
        from aiokafka.record.default_records import DefaultRecordBatch as Aio

        readers.append(("aiokafka", Aio))
    except ImportError:
        pass
    try:
        from kafka.record.default_records import DefaultRecordBatch as Kp

        readers.append(("kafka-python", Kp))
    except ImportError:
        pass
    return readers


def _broker_round_trip(n: int) -> None:
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    from .broker.embedded import EmbeddedBroker
    from .producer import Producer

    offsets, keys, values, timestamps = _source_partition(n, seed=7)
    with EmbeddedBroker() as broker:
        servers = broker.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": servers})
        admin.create_topics([NewTopic("demo", 3, 1)])["demo"].result(30)
        producer = Producer({"bootstrap.servers": servers, "enable.idempotence": True,
                             "linger.ms": 5})
        delivered = []
        t0 = time.perf_counter()
        producer.produce_arrays("demo", values, keys=keys, timestamps=timestamps,
                                headers=[("source", b"kip demo")],
                                on_delivery=lambda err, report: delivered.append((err, report)))
        left = producer.flush(60)
        elapsed = time.perf_counter() - t0
        errors = [err for err, _ in delivered if err is not None]
        acked = sum(report.count for err, report in delivered if err is None)
        assert left == 0 and not errors and acked == n, (left, errors[:3], acked)
        print(f"embedded broker {servers}: produced {n} records with headers and "
              f"timestamps through the bulk lane (idempotent, acks=all) in {elapsed:.2f} s")

        consumer = Consumer({"bootstrap.servers": servers, "group.id": "kip-demo",
                             "check.crcs": True, "enable.auto.commit": False})
        consumer.assign([TopicPartition("demo", p, 0) for p in range(3)])
        expected = {(k, v) for k, v in zip(keys, values, strict=True)}
        seen = set()
        deadline = time.monotonic() + 60
        while len(seen) < n and time.monotonic() < deadline:
            for msg in consumer.consume(10_000, 1.0):
                if msg.error() is None:
                    assert msg.headers() == [("source", b"kip demo")]
                    seen.add((msg.key(), msg.value()))
        consumer.close()
        assert seen == expected, f"consumer saw {len(seen)} of {n} records"
        print(f"librdkafka consumer (check.crcs=true): all {n} records back, keys, values "
              "and headers equal")
        producer.close()
    print()


def run(records: int = 200_000) -> int:
    _broker_round_trip(50_000)
    n = 20_000
    offsets, keys, values, timestamps = _source_partition(n)
    acc = RecordAccumulator(batch_size=16384, linger_ms=0, producer_id=1000, producer_epoch=0)
    acc.append_arrays("demo", 0, values, keys=keys, timestamps=timestamps, offsets=offsets)
    batches = acc.drain(flush=True)
    gaps = int(np.count_nonzero(np.diff(offsets) > 1))
    print(f"source: {n} records, offsets {offsets[0]}..{offsets[-1]} with {gaps} gaps")
    print(f"accumulated into {len(batches)} batches of consecutive offsets "
          f"(idempotent sequences 0..{batches[-1].last_sequence})")

    digest = hashlib.sha256()
    seen = []
    for b in batches:
        (batch,) = decode_batches(b.data)
        for r in batch:
            seen.append(r.offset)
            digest.update(r.key or b"")
            digest.update(r.value or b"")
    assert seen == offsets.tolist(), "offsets changed on the way"
    expected = hashlib.sha256()
    for k, v in zip(keys, values, strict=True):
        expected.update(k)
        expected.update(v)
    assert digest.hexdigest() == expected.hexdigest()
    print(f"kipproducer decoder: all {n} offsets and payloads match "
          f"(sha256 {digest.hexdigest()[:16]})")
    for name, reader in _independent_readers():
        got = []
        for b in batches:
            batch = reader(bytes(b.data))
            assert batch.validate_crc(), f"{name}: CRC rejected"
            got.extend(r.offset for r in batch)
        assert got == offsets.tolist(), f"{name} read different offsets"
        print(f"{name} reader: CRC valid, same {len(got)} offsets")

    print()
    print(f"speed ({records:,} records, 12-byte keys, 100-byte values, 16 KiB batches):")
    key_blob = b"".join(b"k%011d" % i for i in range(records))
    value_blob = bytes(100) * records
    key_pos = np.arange(0, (records + 1) * 12, 12, dtype=np.int64)
    value_pos = np.arange(0, (records + 1) * 100, 100, dtype=np.int64)
    ts = np.full(records, 1_700_000_000_000, dtype=np.int64)
    key_list = [key_blob[i * 12 : i * 12 + 12] for i in range(records)]
    value = value_blob[:100]

    def per_record():
        a = RecordAccumulator(batch_size=16384, linger_ms=0, max_messages=records + 1)
        append = a.append
        for k in key_list:
            append("demo", 0, k, value, None, 1_700_000_000_000)
        a.drain(flush=True)

    def bulk():
        a = RecordAccumulator(batch_size=16384, linger_ms=0, max_messages=records + 1)
        a.append_arrays("demo", 0, (np.frombuffer(value_blob, np.uint8), value_pos),
                        keys=(np.frombuffer(key_blob, np.uint8), key_pos), timestamps=ts)
        a.drain(flush=True)

    for label, fn in (("per-record append", per_record), ("numpy bulk append", bulk)):
        best = min(_timed(fn) for _ in range(3))
        print(f"  {label:18s} {records / best / 1e6:6.2f} M records/s")
    print("full side-by-side table: python bench/side_by_side_core.py (see bench/RESULTS.md)")
    return 0


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0
