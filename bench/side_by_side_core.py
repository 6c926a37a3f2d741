"""Side-by-side benchmark of the record core against other Python paths to Kafka bytes.

Everything is measured in one run on one machine, so the ratios are what count; absolute
numbers drift on shared machines. Workload: 12-byte keys, 100-byte values, ~16 KiB batches.

    python bench/side_by_side_core.py [--records N] [--repeat R] [--write bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import os

# numpy's OpenBLAS threads are not used by any contender, but idle-spinning they steal one of
# the two cores from whichever path runs after them.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import platform
import statistics
import sys
import time

import numpy as np
from results_file import machine, replace_section

KEY_SIZE, VALUE_SIZE, BATCH_BYTES = 12, 100, 16384
PAYLOAD = KEY_SIZE + VALUE_SIZE


def timed(fn, repeat):
    """Median seconds of `repeat` runs after one warm-up."""
    fn()
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def make_inputs(n):
    keys = [b"k%011d" % i for i in range(n)]
    value = os.urandom(VALUE_SIZE)
    values = [value] * n
    return keys, values


# As a sender thread does: drain what is ready every DRAIN_EVERY records and let the batches
# go once "sent", so buffers are recycled instead of the whole run being held in memory.
DRAIN_EVERY = 16384


def _drain_and_release(acc, flush=False):
    out = acc.drain(flush=flush)
    for batch in out:
        acc.release(batch)
    return sum(b.record_count for b in out)


def bench_ours_per_record(n, keys, values):
    from kipproducer.accumulator import RecordAccumulator

    def run():
        acc = RecordAccumulator(batch_size=BATCH_BYTES, linger_ms=0, max_messages=n + 1,
                                max_bytes=1 << 40)
        append = acc.append
        ts = 1_700_000_000_000
        sent = 0
        for start in range(0, n, DRAIN_EVERY):
            for i in range(start, min(start + DRAIN_EVERY, n)):
                append("bench", 0, keys[i], values[i], None, ts)
            sent += _drain_and_release(acc)
        sent += _drain_and_release(acc, flush=True)
        assert sent == n

    return run


def bench_ours_bulk(n, keys, values):
    from kipproducer.accumulator import RecordAccumulator

    key_data = np.frombuffer(b"".join(keys), dtype=np.uint8)
    key_pos = np.arange(0, (n + 1) * KEY_SIZE, KEY_SIZE, dtype=np.int64)
    value_data = np.frombuffer(b"".join(values), dtype=np.uint8)
    value_pos = np.arange(0, (n + 1) * VALUE_SIZE, VALUE_SIZE, dtype=np.int64)
    timestamps = np.full(n, 1_700_000_000_000, dtype=np.int64)

    def run():
        acc = RecordAccumulator(batch_size=BATCH_BYTES, linger_ms=0, max_messages=n + 1,
                                max_bytes=1 << 40)
        sent = 0
        for start in range(0, n, DRAIN_EVERY):
            end = min(start + DRAIN_EVERY, n)
            acc.append_arrays("bench", 0, (value_data, value_pos[start:end + 1]),
                              keys=(key_data, key_pos[start:end + 1]),
                              timestamps=timestamps[start:end])
            sent += _drain_and_release(acc)
        sent += _drain_and_release(acc, flush=True)
        assert sent == n

    return run


def bench_ours_encode_batch(n, keys, values):
    from kipproducer.records import encode_batch

    per_batch = BATCH_BYTES // (PAYLOAD + 8)
    chunks = [
        [(keys[j], values[j], None, 1_700_000_000_000) for j in range(i, min(i + per_batch, n))]
        for i in range(0, n, per_batch)
    ]

    def run():
        for chunk in chunks:
            encode_batch(chunk)

    return run


def _builder_bench(builder_cls, n, keys, values):
    def run():
        i = 0
        while i < n:
            b = builder_cls(magic=2, compression_type=0, is_transactional=0, producer_id=-1,
                            producer_epoch=-1, base_sequence=-1, batch_size=BATCH_BYTES)
            offset = 0
            while i < n:
                if b.append(offset, 1_700_000_000_000, keys[i], values[i], []) is None:
                    break
                i += 1
                offset += 1
            b.build()

    return run


def bench_aiokafka(n, keys, values):
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    assert "_crecords" in DefaultRecordBatchBuilder.__module__, "aiokafka's Cython builder"
    return _builder_bench(DefaultRecordBatchBuilder, n, keys, values)


def bench_kafka_python(n, keys, values):
    from kafka.record.default_records import DefaultRecordBatchBuilder

    return _builder_bench(DefaultRecordBatchBuilder, n, keys, values)


def bench_confluent_enqueue(n, keys, values):
    from confluent_kafka import Producer

    def run():
        p = Producer({"test.mock.num.brokers": 1, "linger.ms": 5, "batch.size": BATCH_BYTES,
                      "queue.buffering.max.messages": n + 10, "queue.buffering.max.kbytes":
                      2**21, "acks": 1, "enable.idempotence": False})
        produce = p.produce
        for i in range(n):
            produce("bench", values[i], keys[i], 0)
        p.flush(60)

    # Enqueue-only time is measured separately below; this includes delivery to the mock.
    return run


def bench_confluent_enqueue_only(n, keys, values):
    from confluent_kafka import Producer

    state = {}

    def run():
        p = Producer({"test.mock.num.brokers": 1, "linger.ms": 5, "batch.size": BATCH_BYTES,
                      "queue.buffering.max.messages": n + 10, "queue.buffering.max.kbytes":
                      2**21, "acks": 1, "enable.idempotence": False})
        produce = p.produce
        t0 = time.perf_counter()
        for i in range(n):
            produce("bench", values[i], keys[i], 0)
        state.setdefault("times", []).append(time.perf_counter() - t0)
        p.flush(60)

    return run, state


def crc_rates(repeat):
    import crc32c as reference

    from kipproducer import crc32c as ours

    rows = []
    for size in (16384, 1 << 20):
        data = os.urandom(size)
        loops = max(1, (256 << 20) // size)

        def ours_run(d=data, k=loops):
            f = ours.crc32c
            for _ in range(k):
                f(d)

        def ref_run(d=data, k=loops):
            f = reference.crc32c
            for _ in range(k):
                f(d)

        gb = size * loops / 1e9
        rows.append((size, gb / timed(ours_run, repeat), gb / timed(ref_run, repeat)))
    return rows


def versions():
    import aiokafka
    import confluent_kafka
    import kafka

    import kipproducer
    from kipproducer import crc32c

    return {
        "python": platform.python_version(),
        "kipproducer": kipproducer.__version__,
        "crc32c impl": crc32c.IMPLEMENTATION,
        "aiokafka": aiokafka.__version__,
        "kafka-python": kafka.__version__,
        "confluent-kafka": f"{confluent_kafka.version()[0]} (librdkafka "
                           f"{confluent_kafka.libversion()[0]})",
        # Cython builds the extensions and need not be installed beside them (pip builds in
        # an isolated environment), so its version is given only where it is.
        "Cython": _installed_version("Cython"),
        "numpy": np.__version__,
    }


def _installed_version(distribution: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return "not installed (the build's own)"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--write", metavar="PATH", help="replace the core section of this file")
    args = ap.parse_args(argv)
    n = args.records
    keys, values = make_inputs(n)

    rows = []
    for name, factory in [
        ("kipproducer accumulator, per-record append + drain", bench_ours_per_record),
        ("kipproducer accumulator, numpy bulk append + drain", bench_ours_bulk),
        ("kipproducer encode_batch (pre-built list of tuples)", bench_ours_encode_batch),
        ("aiokafka DefaultRecordBatchBuilder (Cython)", bench_aiokafka),
        ("kafka-python DefaultRecordBatchBuilder", bench_kafka_python),
        ("confluent-kafka produce() + flush, mock cluster", bench_confluent_enqueue),
    ]:
        seconds = timed(factory(n, keys, values), args.repeat)
        rows.append((name, n / seconds))
        print(f"{name:55s} {n / seconds / 1e6:8.2f} M rec/s", file=sys.stderr)
    run, state = bench_confluent_enqueue_only(n, keys, values)
    timed(run, args.repeat)
    enqueue = n / statistics.median(state["times"][1:])
    rows.append(("confluent-kafka produce() enqueue only, mock cluster", enqueue))
    print(f"{'confluent enqueue only':55s} {enqueue / 1e6:8.2f} M rec/s", file=sys.stderr)

    base = dict(rows)["aiokafka DefaultRecordBatchBuilder (Cython)"]
    lines = [
        "## Record core (issue 2)",
        "",
        f"Command: `python bench/side_by_side_core.py --records {n} --repeat {args.repeat}`"
        f" (median of {args.repeat} runs after a warm-up, all in one process run).",
        f"Machine: {machine()}.",
        "Versions: " + ", ".join(f"{k} {v}" for k, v in versions().items()) + ".",
        f"Workload: {n:,} records, {KEY_SIZE}-byte keys, {VALUE_SIZE}-byte values, "
        f"{BATCH_BYTES // 1024} KiB batches, no compression. MB/s counts key + value bytes.",
        f"kipproducer rows drain (and release) every {DRAIN_EVERY:,} records, as a sender "
        "thread does; the builders build each batch as it fills.",
        "",
        "| path | records/s | MB/s | vs aiokafka Cython builder |",
        "|---|---:|---:|---:|",
    ]
    for name, rate in rows:
        lines.append(f"| {name} | {rate / 1e6:.2f} M | {rate * PAYLOAD / 1e6:.0f} | "
                     f"{rate / base:.2f}x |")
    lines += ["", "| CRC-32C buffer | kipproducer GB/s | `crc32c` package GB/s | ratio |",
              "|---|---:|---:|---:|"]
    for size, ours_gbs, ref_gbs in crc_rates(args.repeat):
        label = f"{size // 1024} KiB" if size < (1 << 20) else f"{size >> 20} MiB"
        lines.append(f"| {label} | {ours_gbs:.1f} | {ref_gbs:.1f} | {ours_gbs / ref_gbs:.2f}x |")
        print(f"crc32c {label}: ours {ours_gbs:.1f} GB/s, crc32c pkg {ref_gbs:.1f} GB/s",
              file=sys.stderr)
    section = "\n".join(lines) + "\n"
    print(section)
    if args.write:
        replace_section(args.write, "## Record core (issue 2)", section)


if __name__ == "__main__":
    main()
