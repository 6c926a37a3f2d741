"""Micro benchmarks of the record core (pytest-benchmark).

    python -m pytest bench/test_micro_core.py --benchmark-enable

Not part of the test run (testpaths = tests); numbers go to bench/RESULTS.md only through the
side-by-side script, which measures every contender in one run.
"""

import os

import numpy as np
import pytest

from kipproducer.accumulator import RecordAccumulator
from kipproducer.crc32c import crc32c
from kipproducer.records import decode_batches, encode_batch, validate_batch

N = 10_000
KEYS = [b"k%011d" % i for i in range(N)]
VALUE = os.urandom(100)
RECORDS = [(k, VALUE, None, 1_700_000_000_000) for k in KEYS[:140]]


def test_encode_batch_16k(benchmark):
    benchmark(encode_batch, RECORDS)


def test_validate_batch_16k(benchmark):
    data = encode_batch(RECORDS)
    benchmark(validate_batch, data)


def test_iterate_batch_16k(benchmark):
    data = encode_batch(RECORDS)
    benchmark(lambda: [r.value for b in decode_batches(data) for r in b])


@pytest.mark.parametrize("size", [16384, 1 << 20])
def test_crc32c(benchmark, size):
    data = os.urandom(size)
    benchmark(crc32c, data)


def test_accumulator_per_record_10k(benchmark):
    def run():
        acc = RecordAccumulator(batch_size=16384, linger_ms=0)
        append = acc.append
        for k in KEYS:
            append("t", 0, k, VALUE, None, 1)
        acc.drain(flush=True)

    benchmark(run)


def test_accumulator_bulk_10k(benchmark):
    keys = np.array(KEYS, dtype=object)
    values = np.array([VALUE] * N, dtype=object)
    ts = np.full(N, 1, dtype=np.int64)

    def run():
        acc = RecordAccumulator(batch_size=16384, linger_ms=0)
        acc.append_arrays("t", 0, values, keys=keys, timestamps=ts)
        acc.drain(flush=True)

    benchmark(run)
