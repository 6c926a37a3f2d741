"""Emulated KIP-391 (produce with offsets) against the stand-in for stock Kafka.

Every record must land at exactly its asked offset for a read_committed reader, with its key,
value, headers and timestamp; a read_uncommitted reader sees the fillers of gaps >= 2 (null
value, header ``kip.filler``) and nothing else extra. Gaps of 1 are commit markers of the run
before them. Offsets below the log end are refused as in native mode.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from emulated_support import (
    STANDIN_CONFIG,
    committed,
    emulated_producer,
    is_filler,
    new_topic,
    now_ms,
    uncommitted,
)
from kip_support import kip_producer, unique

from kipproducer.broker.embedded import EmbeddedBroker
from kipproducer.errors import INVALID_PRODUCE_OFFSET, InvalidProduceOffsetError
from kipproducer.stock.plan import Step, plan_runs

# missing offsets: 4 (a gap of 1), 7-8 (of 2), 11 (1), 13..59 (many), 63 (1)
OFFSETS = [0, 1, 2, 3, 5, 6, 9, 10, 12, 60, 61, 62, 64]


@pytest.fixture(scope="module")
def stock():
    with EmbeddedBroker(config=STANDIN_CONFIG) as b:
        yield b.bootstrap_servers


def expected_records(offsets, stamp):
    return [(o, b"k%d" % o, b"v%d" % o, (("h", b"%d" % o),), stamp + o) for o in offsets]


def check_topic(bootstrap, topic, offsets, stamp, start=0):
    got = [(r.offset, r.key, r.value, r.headers, r.timestamp[1])
           for r in committed(bootstrap, topic)]
    assert got == expected_records(offsets, stamp)
    every = uncommitted(bootstrap, topic)
    asked = set(offsets)
    extra = [r for r in every if r.offset not in asked]
    assert all(is_filler(r) for r in extra), extra
    # every offset is a record, a filler or a marker: fillers exactly where gaps >= 2 are
    fillers = sorted(r.offset for r in extra)
    wanted = [a.start + i for a in plan_runs(start, offsets) if a.step == Step.FILL
              for i in range(a.count)]
    assert fillers == wanted


def test_plan_of_the_gaps():
    steps = [(a.step, a.start, a.count) for a in plan_runs(0, OFFSETS)]
    assert steps == [
        (Step.PLAIN, 0, 4),
        (Step.MARKER, 4, 0),      # an empty aborted transaction's marker takes 4
        (Step.PLAIN, 5, 2),
        (Step.FILL, 7, 1),        # filler at 7, abort marker at 8
        (Step.PLAIN, 9, 2),
        (Step.MARKER, 11, 0),
        (Step.PLAIN, 12, 1),
        (Step.FILL, 13, 46),      # fillers 13..58, abort marker at 59
        (Step.PLAIN, 60, 3),
        (Step.MARKER, 63, 0),
        (Step.PLAIN, 64, 1),
    ]
    # a gap of one right at the log end is a marker too (nothing before it is needed)
    assert [(a.step, a.start) for a in plan_runs(5, [6])] == [(Step.MARKER, 5),
                                                              (Step.PLAIN, 6)]
    assert [a.end for a in plan_runs(0, OFFSETS)] == [4, 5, 7, 9, 11, 12, 13, 60, 63, 64, 65]
    # the plain runs index the input
    assert [(a.first, a.count) for a in plan_runs(0, OFFSETS) if a.step == Step.PLAIN] == [
        (0, 4), (4, 2), (6, 2), (8, 1), (9, 3), (12, 1)]


@pytest.mark.parametrize("how", ["per_record", "arrays", "batch"])
def test_offsets_with_gaps_of_one_two_and_many(stock, how):
    topic = new_topic(stock, "em-off")
    stamp = now_ms() - 1000
    with emulated_producer(stock, unique("w")) as p:
        assert p.kip_mode(topic) == "emulated"
        reports: list = []
        if how == "per_record":
            for o in OFFSETS:
                p.produce(topic, b"v%d" % o, b"k%d" % o, partition=0, offset=o,
                          headers=[("h", b"%d" % o)], timestamp=stamp + o,
                          on_delivery=lambda err, msg: reports.append((err, msg.offset())))
        elif how == "arrays":
            p.produce_arrays(topic, [b"v%d" % o for o in OFFSETS],
                             keys=[b"k%d" % o for o in OFFSETS],
                             headers=[[("h", b"%d" % o)] for o in OFFSETS],
                             timestamps=np.array([stamp + o for o in OFFSETS], np.int64),
                             partition=0, offsets=np.array(OFFSETS, np.int64),
                             per_record=True,
                             on_delivery=lambda err, msg: reports.append((err, msg.offset())))
        else:
            messages = [{"value": b"v%d" % o, "key": b"k%d" % o, "partition": 0, "offset": o,
                         "headers": [("h", b"%d" % o)], "timestamp": stamp + o}
                        for o in OFFSETS]
            assert p.produce_batch(topic, messages,
                                   on_delivery=lambda err, msg: reports.append(
                                       (err, msg.offset()))) == len(OFFSETS)
        assert p.flush(30) == 0
        assert reports == [(None, o) for o in OFFSETS]
    check_topic(stock, topic, OFFSETS, stamp)


def test_compacted_topic_takes_the_fillers(stock):
    topic = unique("em-compact")
    admin = AdminClient({"bootstrap.servers": stock})
    admin.create_topics([NewTopic(topic, 1, 1, config={"cleanup.policy": "compact"})])[
        topic].result(20)
    stamp = now_ms() - 1000
    offsets = [0, 1, 5, 7, 8]
    with emulated_producer(stock, unique("w")) as p:
        assert p.append(topic, [b"v%d" % o for o in offsets],
                        keys=[b"k%d" % o for o in offsets],
                        headers=[[("h", b"%d" % o)] for o in offsets],
                        timestamps=np.array([stamp + o for o in offsets], np.int64),
                        partition=0, offsets=np.array(offsets, np.int64)) == 0
    check_topic(stock, topic, offsets, stamp)


def test_below_log_end_refused_and_writing_continues(stock):
    topic = new_topic(stock, "em-below")
    stamp = now_ms() - 1000
    with emulated_producer(stock, unique("w")) as p:
        first = p.append(topic, [b"v0", b"v1", b"v2"], keys=[b"k0", b"k1", b"k2"],
                         headers=[[("h", b"0")], [("h", b"1")], [("h", b"2")]],
                         timestamps=np.array([stamp, stamp + 1, stamp + 2], np.int64),
                         partition=0, offsets=np.array([0, 1, 2], np.int64))
        assert first == 0
        with pytest.raises(InvalidProduceOffsetError) as info:
            p.append(topic, [b"again"], partition=0, offsets=np.array([1], np.int64))
        assert info.value.log_end_offset == 3
        assert info.value.args[0].code() == INVALID_PRODUCE_OFFSET
        reports: list = []
        p.produce(topic, b"old", partition=0, offset=2,
                  on_delivery=lambda err, msg: reports.append(err))
        p.flush(10)
        assert reports[0].code() == INVALID_PRODUCE_OFFSET and reports[0].log_end_offset == 3
        # a gap of 10 after the refusals, then a gap of 1 closed by the same call
        assert p.append(topic, [b"v13", b"v15"], keys=[b"k13", b"k15"],
                        headers=[[("h", b"13")], [("h", b"15")]],
                        timestamps=np.array([stamp + 13, stamp + 15], np.int64),
                        partition=0, offsets=np.array([13, 15], np.int64)) == 13
    check_topic(stock, topic, [0, 1, 2, 13, 15], stamp)


def test_gap_of_one_at_the_log_end_is_an_empty_aborted_transaction(stock):
    """A gap of exactly one offset right at the log end (nothing held before it to commit):
    a transaction that adds the partition without a record and aborts, whose marker takes the
    offset. No record, no filler: read_uncommitted sees only the written records."""
    topic = new_topic(stock, "em-lone")
    with emulated_producer(stock, unique("w")) as p:
        assert p.append(topic, [b"a"], partition=0, offsets=np.array([0], np.int64)) == 0
        assert p.append(topic, [b"b"], partition=0, offsets=np.array([2], np.int64)) == 2
        assert p.append(topic, [b"c"], partition=0, offsets=np.array([3], np.int64)) == 3
        assert p.append(topic, [b"d"], partition=0, offsets=np.array([5], np.int64)) == 5
    expected = [(0, b"a"), (2, b"b"), (3, b"c"), (5, b"d")]
    assert [(r.offset, r.value) for r in committed(stock, topic)] == expected
    assert [(r.offset, r.value) for r in uncommitted(stock, topic)] == expected


def test_emulated_offsets_need_a_stable_transactional_id(stock):
    topic = new_topic(stock, "em-noid")
    with emulated_producer(stock) as p:
        with pytest.raises(KafkaException) as info:
            p.append(topic, [b"a"], partition=0, offsets=np.array([0], np.int64))
        assert "kip.emulation.transactional.id" in info.value.args[0].str()
    assert committed(stock, topic) == []


def test_auto_mode_per_broker(stock, broker):
    with kip_producer(stock) as p:
        assert p.kip_mode(new_topic(stock, "em-auto")) == "emulated"
    with kip_producer(broker.bootstrap_servers) as p:
        assert p.kip_mode(new_topic(broker.bootstrap_servers, "native-auto")) == "native"
    with kip_producer(stock, **{"kip.mode": "native"}) as p:
        assert p.kip_mode("anything") == "native"


_DYING_WRITER = textwrap.dedent("""
    import sys
    from confluent_kafka import Producer
    bootstrap, topic, txn_id = sys.argv[1:4]
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    p.init_transactions(20)
    p.begin_transaction()
    for _ in range(4):
        p.produce(topic, None, b"", partition=0, headers=[("kip.filler", b"")])
    p.flush(20)
    print("open", flush=True)
    sys.stdin.read()  # hold the transaction open until killed
""")


def test_kill_9_mid_transaction_then_restart(stock):
    """A writer dies with a transaction open (its fillers at 3..6, no marker). The restarted
    writer, with the same kip.emulation.transactional.id, fences it and has its transaction
    aborted before reading the log end, so the new records land exactly where asked."""
    topic = new_topic(stock, "em-kill")
    writer = unique("writer")
    stamp = now_ms() - 1000
    with emulated_producer(stock, writer) as p:
        p.append(topic, [b"v0", b"v1", b"v2"], keys=[b"k0", b"k1", b"k2"],
                 headers=[[("h", b"0")], [("h", b"1")], [("h", b"2")]],
                 timestamps=np.array([stamp, stamp + 1, stamp + 2], np.int64),
                 partition=0, offsets=np.array([0, 1, 2], np.int64))
    dying = subprocess.Popen([sys.executable, "-c", _DYING_WRITER, stock, topic, writer],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert dying.stdout.readline() == b"open\n"
    finally:
        os.kill(dying.pid, signal.SIGKILL)
        dying.wait(10)
    # 3..6 hold the dead writer's open records; its abort marker will take 7
    with emulated_producer(stock, writer) as p:
        with pytest.raises(InvalidProduceOffsetError) as info:
            p.append(topic, [b"v7"], partition=0, offsets=np.array([7], np.int64))
        assert info.value.log_end_offset == 8
        p.append(topic, [b"v8", b"v20", b"v21"], keys=[b"k8", b"k20", b"k21"],
                 headers=[[("h", b"8")], [("h", b"20")], [("h", b"21")]],
                 timestamps=np.array([stamp + 8, stamp + 20, stamp + 21], np.int64),
                 partition=0, offsets=np.array([8, 20, 21], np.int64))
    got = [(r.offset, r.key, r.value, r.headers, r.timestamp[1])
           for r in committed(stock, topic)]
    assert got == [(o, b"k%d" % o, b"v%d" % o, (("h", b"%d" % o),), stamp + o)
                   for o in (0, 1, 2, 8, 20, 21)]
    dead = [r.offset for r in uncommitted(stock, topic) if is_filler(r)]
    assert dead[:4] == [3, 4, 5, 6]  # the dead writer's, aborted; then 9..18 fill 9..19
    assert dead[4:] == list(range(9, 19))


def test_per_record_stream_with_polls_between(stock):
    """produce(offset=) one record at a time with poll(0) after each, as a copy loop does:
    runs go out as soon as the next gap is known, the last one at flush()."""
    topic = new_topic(stock, "em-stream")
    stamp = now_ms() - 1000
    offsets = list(range(0, 300)) + [301, 302] + list(range(310, 600)) + [700]
    reports: list = []
    with emulated_producer(stock, unique("w")) as p:
        for o in offsets:
            p.produce(topic, b"v%d" % o, b"k%d" % o, partition=0, offset=o,
                      headers=[("h", b"%d" % o)], timestamp=stamp + o,
                      on_delivery=lambda err, msg: reports.append((err, msg.offset())))
            p.poll(0)
        # everything but the last run is written before flush()
        assert len(p) == 1
        assert p.flush(30) == 0
    assert reports == [(None, o) for o in offsets]
    check_topic(stock, topic, offsets, stamp)


def test_purge_drops_the_held_run(stock):
    topic = new_topic(stock, "em-purge")
    reports: list = []
    with emulated_producer(stock, unique("w")) as p:
        for o in (0, 1, 2):
            p.produce(topic, b"v%d" % o, partition=0, offset=o,
                      on_delivery=lambda err, msg: reports.append(err))
        assert len(p) == 3  # one run at the log end: held until flush()
        p.purge()
        assert p.flush(10) == 0
    assert [err.code() for err in reports] == [KafkaError._PURGE_QUEUE] * 3
    assert committed(stock, topic) == []


def test_a_plain_writer_in_between_fails_the_streamed_run_by_its_reports(stock):
    """A run in the bulk lane is checked by the base offsets its delivery reports give (no
    ListOffsets per run): a foreign record appended where the run was planned makes its
    report INVALID_PRODUCE_OFFSET (the run is visible after the foreign record, as the docs'
    limits say), and the next call plans from the true log end again."""
    from confluent_kafka import Producer as PlainProducer

    topic = new_topic(stock, "em-foreign")
    with emulated_producer(stock, unique("w")) as p:
        assert p.append(topic, [b"v0", b"v1", b"v2"], partition=0,
                        offsets=np.array([0, 1, 2], np.int64)) == 0
        foreign = PlainProducer({"bootstrap.servers": stock, "enable.idempotence": True})
        foreign.produce(topic, b"foreign", partition=0)
        assert foreign.flush(20) == 0
        reports: list = []
        p.produce_arrays(topic, [b"v3", b"v4"], partition=0,
                         offsets=np.array([3, 4], np.int64),
                         on_delivery=lambda err, report: reports.append((err, report)))
        assert p.flush(30) == 0
        assert len(reports) == 1
        err, report = reports[0]
        assert err is not None and err.code() == INVALID_PRODUCE_OFFSET, err
        assert "landed at offset 4, not 3" in err.str()
        assert report.offset() == -1 and len(report) == 2
        # the writer carries on from the true log end (6): fillers 6..8, marker 9, record 10
        assert p.append(topic, [b"v10"], partition=0, offsets=np.array([10], np.int64)) == 10
    assert [(r.offset, r.value) for r in committed(stock, topic)] == [
        (0, b"v0"), (1, b"v1"), (2, b"v2"), (3, b"foreign"), (4, b"v3"), (5, b"v4"),
        (10, b"v10")]


def test_producer_properties_do_not_reach_the_emulations_readers(stock, caplog):
    """The emulation's log-end readers are consumers: a Producer config's linger.ms and
    batching properties are left out of theirs, so librdkafka logs no CONFWARN for them."""
    topic = new_topic(stock, "em-confwarn")
    with caplog.at_level(logging.DEBUG):
        with emulated_producer(stock, unique("w"), **{"linger.ms": 5,
                                                       "batch.num.messages": 1000}) as p:
            assert p.append(topic, [b"a"], partition=0,
                            offsets=np.array([1], np.int64)) == 1
    warned = [r.getMessage() for r in caplog.records if "producer property" in r.getMessage()]
    assert warned == []
