"""The engine's half of KIP-WIRE version 2 (§9): a partition's batches with explicit offsets
travel as one unit per request to a broker that advertises version 2, one batch per request
to a version 1 broker, and a unit whose answer was lost is sent again as exactly that unit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kip_support import (
    ProduceWatchProxy,
    create_topic,
    kip_producer,
    read_confluent,
    unique,
    watermarks,
)

from kipproducer.broker.embedded import EmbeddedBroker
from kipproducer.errors import OffsetMismatchError

RUNS = 600  # every other offset: each record is a run, so a batch, of its own


@pytest.fixture(params=[2, 1], ids=["wire-v2", "wire-v1"])
def watched_broker(request):
    """(EmbeddedBroker of KIP-WIRE version ``param``, ProduceWatchProxy in front of it)."""
    proxy = ProduceWatchProxy(0)
    try:
        with EmbeddedBroker(config={"advertised.port": proxy.port,
                                    "kip.wire.version": request.param}) as b:
            proxy.target_port = b.broker.server.port
            yield b, proxy, request.param
    finally:
        proxy.close()


def test_gapped_copy_travels_in_units(watched_broker):
    b, proxy, version = watched_broker
    bootstrap = b.bootstrap_servers
    topic = create_topic(bootstrap, unique("units"), 2)
    offsets = np.arange(0, 2 * RUNS, 2, dtype=np.int64) + 5
    values = [b"v-%d" % o for o in offsets]
    reports: list = []
    with kip_producer(bootstrap, linger_ms=50) as p:
        before = proxy.produce_requests
        p.produce_arrays(topic, values, partition=0, offsets=offsets, per_record=True,
                         on_delivery=lambda err, msg: reports.append((err, msg)))
        # Per-record produce() with offsets, the other partition: the same path.
        for o, v in zip(offsets.tolist(), values, strict=True):
            p.produce(topic, v, b"k", partition=1, offset=o,
                      on_delivery=lambda err, msg: reports.append((err, msg)))
        assert p.flush(30) == 0
        requests = proxy.produce_requests - before
    assert [e for e, _ in reports if e is not None] == []
    assert sorted((m.partition(), m.offset()) for _, m in reports) == sorted(
        (part, o) for part in (0, 1) for o in offsets.tolist())
    if version == 2:
        assert requests <= 40, f"{requests} Produce requests for {2 * RUNS} runs"
    else:
        assert requests >= RUNS, f"a version 1 broker got {requests} requests for {RUNS} runs"
    log = read_confluent(bootstrap, topic, 2, expected=2 * RUNS)
    for part in (0, 1):
        assert [(r.offset, r.value) for r in log if r.partition == part] == list(
            zip(offsets.tolist(), values, strict=True))


@pytest.mark.parametrize("watched_broker", [2], indirect=True, ids=["wire-v2"])
@pytest.mark.parametrize("mode", ["offsets", "expected"])
def test_unit_resent_whole_after_a_lost_answer(watched_broker, mode):
    """The broker appends a unit but its answer is cut; the engine sends the same unit again
    and the broker's idempotence window recognises it: every record reported at its offset,
    each in the log once."""
    b, proxy, _version = watched_broker  # (version 1: test_producer_offsets.py's lost answer)
    bootstrap = b.bootstrap_servers
    topic = create_topic(bootstrap, unique(f"cut-unit-{mode}"))
    reports: list = []
    with kip_producer(bootstrap, batch_num_messages=3, linger_ms=100,
                      enable_idempotence=True) as p:
        assert p.append(topic, [b"first"], partition=0, expected_offset=0) == 0
        proxy.drop_next_produce_response()
        values = [b"r-%d" % i for i in range(30)]
        if mode == "offsets":
            offsets = np.arange(10, 70, 2, dtype=np.int64)  # 30 runs of one record
            p.produce_arrays(topic, values, partition=0, offsets=offsets, per_record=True,
                             on_delivery=lambda err, msg: reports.append((err, msg)))
            want = offsets.tolist()
        else:  # 10 batches of 3 (batch.num.messages), each expecting where the last ends
            p.produce_arrays(topic, values, partition=0, expected_offset=1, per_record=True,
                             on_delivery=lambda err, msg: reports.append((err, msg)))
            want = list(range(1, 31))
        assert p.flush(30) == 0
    assert proxy.dropped.is_set(), "the proxy never cut an answer"
    assert [(err, msg.offset()) for err, msg in reports] == [(None, o) for o in want]
    log = read_confluent(bootstrap, topic, 1, expected=31)
    assert [(r.offset, r.value) for r in log] == [(0, b"first"), *zip(want, values,
                                                                       strict=True)]


def test_refused_unit_reports_every_batch(watched_broker):
    """A unit whose first expectation is wrong is refused whole: each of its records gets
    OFFSET_MISMATCH with the log end, and nothing is written."""
    b, _proxy, version = watched_broker
    bootstrap = b.bootstrap_servers
    topic = create_topic(bootstrap, unique("refused-unit"))
    with kip_producer(bootstrap, batch_num_messages=2) as p:
        assert p.append(topic, [b"a", b"b"], partition=0) == 0
        with pytest.raises(OffsetMismatchError) as info:
            p.append(topic, [b"x-%d" % i for i in range(8)], partition=0, expected_offset=5,
                     timeout=20)
        assert info.value.log_end_offset == 2
    assert [r.value for r in read_confluent(bootstrap, topic, 1, expected=2)] == [b"a", b"b"]


def test_batch_reports_stay_per_kafka_batch(watched_broker):
    """produce_arrays' per-batch reports with packed runs: one BatchDelivery per run of
    consecutive offsets (a Kafka batch), so offset() .. offset() + count is exactly where each
    report's records went, as without packing."""
    b, _proxy, _version = watched_broker
    topic = create_topic(b.bootstrap_servers, unique("run-reports"))
    offsets = np.array([3, 4, 5, 9, 20, 21, 22, 23, 40], dtype=np.int64)
    reports: list = []
    with kip_producer(b.bootstrap_servers, linger_ms=50, enable_idempotence=True) as p:
        p.produce_arrays(topic, [b"r%d" % o for o in offsets], partition=0, offsets=offsets,
                         on_delivery=lambda err, report: reports.append((err, report)))
        assert p.flush(20) == 0
    assert all(err is None for err, _ in reports)
    assert sorted((r.offset(), r.count) for _, r in reports) == [
        (3, 3), (9, 1), (20, 4), (40, 1)]


_copies = iter(range(10**6))


@settings(max_examples=25, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.one_of(st.just(1), st.integers(2, 5), st.integers(6, 5000)),
                      min_size=1, max_size=300),
       first=st.integers(0, 1000))
def test_any_gap_pattern_reads_back_identical(broker, steps, first):
    """Property (issue 15): whatever the gaps, a copy through produce_arrays (partition 0) and
    through per-record produce() (partition 1) reads back, with a stock consumer, exactly the
    offsets and values written; the high watermarks are the last offset + 1."""
    bootstrap = broker.bootstrap_servers
    topic = create_topic(bootstrap, unique(f"gaps-{next(_copies)}"), 2)
    offsets = np.cumsum([first, *steps[:-1]], dtype=np.int64)
    values = [b"g-%d" % o for o in offsets]
    with kip_producer(bootstrap, enable_idempotence=True) as p:
        p.produce_arrays(topic, values, partition=0, offsets=offsets)
        for o, v in zip(offsets.tolist(), values, strict=True):
            p.produce(topic, v, partition=1, offset=o)
        assert p.flush(30) == 0
    log = read_confluent(bootstrap, topic, 2, expected=2 * len(values))
    for part in (0, 1):
        assert [(r.offset, r.value) for r in log if r.partition == part] == list(
            zip(offsets.tolist(), values, strict=True))
        assert watermarks(bootstrap, topic, part)[1] == int(offsets[-1]) + 1
