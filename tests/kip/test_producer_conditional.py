"""KIP-27 (conditional publish) through ``kipproducer.Producer``, read by stock consumers.

A writer that expects the wrong log end gets OFFSET_MISMATCH with the true end and appends
nothing; a request's innocent partitions are retried by the engine; the KIP's worked example
(a bootstrapping leader fences a second one); a multi-batch append lands whole and
consecutive, or not at all; a retried batch whose response was lost; and four writer
PROCESSES racing on one partition leave a history where no two batches interleave.
"""

from __future__ import annotations

import logging
import multiprocessing
import queue
import time

import numpy as np
import pytest
from confluent_kafka import KafkaException
from kip_support import (
    KipProcess,
    create_topic,
    kip_producer,
    race_value,
    race_writer,
    read_confluent,
    unique,
    watermarks,
)

from kipproducer.errors import (
    OFFSET_MISMATCH,
    OffsetMismatchError,
    ProduceOffsetKafkaError,
)

OPERATION_NOT_ATTEMPTED = 55


def values(prefix: bytes, n: int) -> list[bytes]:
    return [b"%s-%d" % (prefix, i) for i in range(n)]


def logged(bootstrap: str, topic: str, partitions: int = 1, expected: int | None = None):
    return [(r.partition, r.offset, r.value)
            for r in read_confluent(bootstrap, topic, partitions, expected=expected)]


def test_wrong_expectation_is_refused_with_the_true_log_end(broker):
    bootstrap = broker.bootstrap_servers
    topic = create_topic(bootstrap, unique("mismatch"))
    reports: list = []
    with kip_producer(bootstrap) as p:
        assert p.append(topic, values(b"base", 3), partition=0) == 0
        # Behind the log end, ahead of it, and the per-record API.
        for expected in (1, 9):
            with pytest.raises(OffsetMismatchError) as info:
                p.append(topic, values(b"bad%d" % expected, 2), partition=0,
                         expected_offset=expected)
            assert isinstance(info.value, KafkaException)
            assert info.value.log_end_offset == 3
            assert info.value.args[0].code() == OFFSET_MISMATCH
        p.produce(topic, b"bad-record", partition=0, expected_offset=2,
                  on_delivery=lambda err, msg: reports.append((err, msg)))
        assert p.flush(10) == 0
    [(err, msg)] = reports
    assert isinstance(err, ProduceOffsetKafkaError)
    assert (err.code(), err.name(), err.log_end_offset) == (OFFSET_MISMATCH, "OFFSET_MISMATCH", 3)
    assert not err.retriable()
    assert msg.value() == b"bad-record"
    assert watermarks(bootstrap, topic) == (0, 3)
    assert logged(bootstrap, topic) == [(0, i, b"base-%d" % i) for i in range(3)]


def test_innocent_partition_of_a_refused_request_is_retried(broker, caplog):
    """produce_batch with one record per partition; partition 0's expectation is wrong. Both
    batches travel in one request (linger.ms gathers them), so the broker appends nothing:
    partition 0 gets OFFSET_MISMATCH, partition 1 OPERATION_NOT_ATTEMPTED. The engine sends
    partition 1 again on its own, and it is written where it expected."""
    bootstrap = broker.bootstrap_servers
    topic = create_topic(bootstrap, unique("innocent"), partitions=2)
    reports: list = []
    with kip_producer(bootstrap, linger_ms=200) as p:
        assert p.append(topic, values(b"p0", 2), partition=0) == 0
        assert p.append(topic, values(b"p1", 5), partition=1) == 0
        messages = [{"value": b"wrong", "partition": 0, "expected_offset": 1},
                    {"value": b"right", "partition": 1, "expected_offset": 5}]
        with caplog.at_level(logging.DEBUG, logger="kipproducer.engine"):
            assert p.produce_batch(topic, messages,
                                   on_delivery=lambda e, m: reports.append((e, m))) == 2
            assert p.flush(10) == 0
    assert not any("_error" in m for m in messages)
    by_partition = {m.partition(): (e, m) for e, m in reports}
    err, _ = by_partition[0]
    assert (err.code(), err.log_end_offset) == (OFFSET_MISMATCH, 2)
    err, msg = by_partition[1]
    assert err is None and msg.offset() == 5
    # What happened on the way: partition 1 was not attempted, then sent again.
    retries = [r.getMessage() for r in caplog.records if r.getMessage().startswith("retrying")]
    assert len(retries) == 1 and "OPERATION_NOT_ATTEMPTED" in retries[0], retries
    assert "'%s', 1," % topic in retries[0], retries
    assert logged(bootstrap, topic, 2) == [
        *[(0, i, b"p0-%d" % i) for i in range(2)],
        *[(1, i, b"p1-%d" % i) for i in range(5)], (1, 5, b"right")]


def test_kip27_worked_example_leader_bootstrap(broker):
    """A leader reads the log end (0) and appends [A,B,C] expecting 0; a second would-be
    leader that also read 0 is refused and told 3; the first appends [D,E,F] expecting 3;
    the second, now expecting 3, is refused again (6)."""
    bootstrap = broker.bootstrap_servers
    topic = create_topic(bootstrap, unique("leaders"))
    with kip_producer(bootstrap) as leader, kip_producer(bootstrap) as rival:
        end = watermarks(bootstrap, topic)[1]
        assert end == 0
        assert leader.append(topic, [b"A", b"B", b"C"], partition=0, expected_offset=end) == 0
        with pytest.raises(OffsetMismatchError) as info:
            rival.append(topic, [b"X"], partition=0, expected_offset=end)
        assert info.value.log_end_offset == 3
        assert leader.append(topic, [b"D", b"E", b"F"], partition=0, expected_offset=3) == 3
        with pytest.raises(OffsetMismatchError) as info:
            rival.append(topic, [b"X"], partition=0, expected_offset=3)
        assert info.value.log_end_offset == 6
    assert logged(bootstrap, topic) == [(0, i, v) for i, v in enumerate(
        [b"A", b"B", b"C", b"D", b"E", b"F"])]


@pytest.mark.parametrize("wire_version", [2, 1])
def test_multi_batch_append_lands_whole_and_consecutive(request, wire_version):
    """2500 records, batch.num.messages=1000: three batches, each conditional on the one
    before. They land whole and consecutive; with a wrong expectation the first is refused.
    To a KIP-WIRE version 2 broker the batches drained together travel as one unit, refused
    whole (each reports the broker's OFFSET_MISMATCH); to a version 1 broker the first goes
    alone and the two that continue it fail locally, unsent."""
    broker = request.getfixturevalue("broker" if wire_version == 2 else "version_1_broker")
    bootstrap = broker.bootstrap_servers
    topic = create_topic(bootstrap, unique("multi"))
    big = np.array(values(b"big", 2500), dtype=object)
    reports: list = []
    with kip_producer(bootstrap, batch_num_messages=1000) as p:
        assert p.append(topic, values(b"head", 5), partition=0) == 0
        assert p.append(topic, big, partition=0, expected_offset=5) == 5
        # The same columns as reported batches: three, each at its own offset.
        p.produce_arrays(topic, big, partition=0, expected_offset=2505,
                         on_delivery=lambda err, report: reports.append((err, report)))
        assert p.flush(30) == 0
        assert [(e, r.offset(), r.count) for e, r in reports] == [
            (None, 2505, 1000), (None, 3505, 1000), (None, 4505, 500)]
        reports.clear()
        # Wrong by one: nothing of the 2500 is written.
        p.produce_arrays(topic, big, partition=0, expected_offset=5004,
                         on_delivery=lambda err, report: reports.append((err, report)))
        assert p.flush(30) == 0
        with pytest.raises(OffsetMismatchError) as info:
            p.append(topic, big, partition=0, expected_offset=4000)
        assert info.value.log_end_offset == 5005
    assert [r.count for _, r in reports] == [1000, 1000, 500]
    for i, (err, _) in enumerate(reports):
        assert (err.code(), err.log_end_offset) == (OFFSET_MISMATCH, 5005)
        if i == 0 or wire_version == 1:
            assert ("not sent" in err.str()) == (i > 0), err
        # (version 2: a later batch went in the first one's unit, refused by the broker, or
        # was drained after that unit left and failed locally: timing decides)
    log = logged(bootstrap, topic, expected=5005)
    assert [o for _, o, _ in log] == list(range(5005))
    assert [v for _, _, v in log] == [*values(b"head", 5), *big, *big]
    assert watermarks(bootstrap, topic) == (0, 5005)


@pytest.mark.parametrize("idempotent", [True, False], ids=["idempotent", "plain"])
def test_retry_after_lost_response(proxied_broker, idempotent):
    """A conditional batch is appended but its response is lost (connection cut); the engine
    sends it again. Idempotent: recognised as a duplicate, it succeeds where it landed.
    Without idempotence: OFFSET_MISMATCH, with a log end just after the caller's own
    records (KIP-WIRE §8). The batch is in the log exactly once."""
    b, proxy = proxied_broker
    topic = create_topic(b.bootstrap_servers, unique("cut-expected"))
    with kip_producer(b.bootstrap_servers, enable_idempotence=idempotent) as p:
        assert p.append(topic, values(b"head", 4), partition=0, expected_offset=0) == 0
        requests_before = proxy.produce_requests
        proxy.drop_next_produce_response()
        if idempotent:
            assert p.append(topic, values(b"cut", 50), partition=0, expected_offset=4) == 4
        else:
            with pytest.raises(OffsetMismatchError) as info:
                p.append(topic, values(b"cut", 50), partition=0, expected_offset=4)
            assert info.value.log_end_offset == 54
    assert proxy.dropped.is_set(), "the proxy never cut the batch's response"
    assert proxy.produce_requests >= requests_before + 2, "the batch was not sent again"
    assert logged(b.bootstrap_servers, topic, expected=54) == [
        (0, i, v) for i, v in enumerate([*values(b"head", 4), *values(b"cut", 50)])]


def test_close_after_a_refusal_is_prompt(broker):
    """An idempotent producer whose batch was refused takes a new producer id; a close()
    right after must not wait out the sender's idle timeout (1 s): the wake-up close() sends
    while the sender awaits InitProducerId was lost (engine.py cleared the event after the
    round's awaits, just before waiting on it)."""
    bootstrap = broker.bootstrap_servers
    topic = create_topic(bootstrap, unique("close"))
    took = []
    for _ in range(3):
        p = kip_producer(bootstrap, enable_idempotence=True)
        with pytest.raises(OffsetMismatchError):
            p.append(topic, [b"never"], partition=0, expected_offset=1000)
        started = time.monotonic()
        p.close()
        took.append(time.monotonic() - started)
    assert max(took) < 0.5, took
    assert watermarks(bootstrap, topic) == (0, 0)


# -- racing writer processes ----------------------------------------------------------------------

WRITERS, ROUNDS, K = 4, 20, 3


@pytest.fixture
def kip_broker_process(tmp_path):
    proc = KipProcess(tmp_path / "data", 0, {"num.partitions": 1},
                      tmp_path / "broker.stderr.log").start()
    try:
        yield proc
    finally:
        code = proc.stop()
        assert "Traceback" not in proc.log_tail(100_000), proc.log_tail(60)
        assert code == 0, f"broker exited with {code}:\n{proc.log_tail()}"


@pytest.mark.timeout(150)
def test_racing_writer_processes_never_interleave(kip_broker_process):
    """Four processes, one producer each, append K-record batches to one partition of a
    ``kip broker`` subprocess, each expecting the log end it last learnt (from its own
    successful append or OffsetMismatchError.log_end_offset), until each has ROUNDS
    successes. The history must be exactly the successful batches, whole, in the order and
    at the offsets their appends reported."""
    bootstrap = kip_broker_process.bootstrap
    topic = create_topic(bootstrap, unique("race"))
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(WRITERS)
    results = ctx.Queue()
    procs = [ctx.Process(target=race_writer, args=(bootstrap, topic, w, ROUNDS, K, start,
                                                   results), name=f"race-writer-{w}")
             for w in range(WRITERS)]
    for proc in procs:
        proc.start()
    outcomes = []
    try:
        deadline = time.monotonic() + 120
        while len(outcomes) < WRITERS:
            try:
                outcomes.append(results.get(timeout=max(0.1, deadline - time.monotonic())))
            except queue.Empty:
                raise AssertionError(f"{len(outcomes)} of {WRITERS} writers reported") from None
        for proc in procs:
            proc.join(30)
            assert proc.exitcode == 0, f"{proc.name} exited with {proc.exitcode}"
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
                proc.join(10)

    assert [o["error"] for o in outcomes] == [None] * WRITERS, outcomes
    successes = {(o["writer"], attempt): first for o in outcomes
                 for attempt, first in o["successes"]}
    assert all(len(o["successes"]) == ROUNDS for o in outcomes)
    for o in outcomes:
        # What a writer learnt from a refusal is news: the log end moved past its guess.
        assert all(end > expected for _, expected, end in o["mismatches"]), o["mismatches"]
        firsts = [first for _, first in o["successes"]]
        assert firsts == sorted(firsts)
    # The writers did race: someone lost at least once.
    assert sum(len(o["mismatches"]) for o in outcomes) > 0
    print("refusals per writer:", [len(o["mismatches"]) for o in outcomes])

    total = WRITERS * ROUNDS * K
    log = read_confluent(bootstrap, topic, 1, expected=total)
    assert [r.offset for r in log] == list(range(total)), "gaps or extra records"
    landed = {}
    for start_index in range(0, total, K):
        group = log[start_index:start_index + K]
        writer, attempt, _ = group[0].value.split(b"-")
        writer, attempt = int(writer[1:]), int(attempt[1:])
        # One batch, whole: K records of one writer's attempt, in order.
        assert [r.value for r in group] == [race_value(writer, attempt, i) for i in range(K)], \
            [r.value for r in group]
        assert (writer, attempt) not in landed, f"batch {(writer, attempt)} written twice"
        landed[(writer, attempt)] = group[0].offset
    # Exactly the successful appends, each where its append said it landed.
    assert landed == successes
