"""Emulated KIP-391 (produce with offsets) against the stand-in for stock Kafka.

Every record must land at exactly its asked offset for a read_committed reader, with its key,
value, headers and timestamp; a read_uncommitted reader sees the fillers of gaps >= 2 (null
value, header ``kip.filler``) and nothing else extra. Gaps of 1 are the markers of empty
aborted transactions. Gaps of several partitions ready together share one transaction.
Offsets below the log end are refused as in native mode.
"""

from __future__ import annotations

import logging
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
    kill_9_when_open,
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
    kill_9_when_open(_DYING_WRITER, stock, topic, writer)
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


# Per partition of a 3-partition topic: gaps at the same points (after the first run, after
# the second), of every kind: fillers (g >= 2) and empty transactions (g == 1).
LINED_UP = {0: [0, 1, 2, 9, 10, 12], 1: [0, 1, 2, 4, 5, 8], 2: [0, 1, 2, 3, 7, 9]}


def check_partitions(bootstrap, topic, wanted, stamp):
    """read_committed: every record at its asked offset; read_uncommitted: fillers exactly
    where each partition's plan has gaps >= 2, nothing else besides the records."""
    n = len(wanted)
    got = committed(bootstrap, topic, n)
    for p, offsets in wanted.items():
        mine = [(r.offset, r.key, r.value, r.headers, r.timestamp[1])
                for r in got if r.partition == p]
        assert mine == [(o, b"k%d" % o, b"v%d.%d" % (p, o), (("h", b"%d" % o),), stamp + o)
                        for o in offsets], p
    every = uncommitted(bootstrap, topic, n)
    for p, offsets in wanted.items():
        extra = [r for r in every if r.partition == p and r.offset not in set(offsets)]
        assert all(is_filler(r) for r in extra), (p, extra)
        assert sorted(r.offset for r in extra) == [
            a.start + i for a in plan_runs(0, offsets) if a.step == Step.FILL
            for i in range(a.count)], p


def produce_lined_up(p, topic, wanted, stamp):
    for partition, offsets in wanted.items():
        p.produce_arrays(topic, [b"v%d.%d" % (partition, o) for o in offsets],
                         keys=[b"k%d" % o for o in offsets],
                         headers=[[("h", b"%d" % o)] for o in offsets],
                         timestamps=np.array([stamp + o for o in offsets], np.int64),
                         partition=partition, offsets=np.array(offsets, np.int64))


def test_gaps_that_line_up_share_one_transaction(stock):
    """Three partitions with a gap each after their first run and after their second: the
    copy calls partition by partition and flushes; the gaps of one round share ONE aborted
    transaction (2 in all, where one per gap would take 6), and each lands as planned."""
    from kipproducer.producer import emulation_of

    topic = new_topic(stock, "em-shared", partitions=3)
    stamp = now_ms() - 1000
    with emulated_producer(stock, unique("w")) as p:
        assert p.kip_mode(topic) == "emulated"
        produce_lined_up(p, topic, LINED_UP, stamp)
        assert p.flush(30) == 0
        per_gap = sum(a.step != Step.PLAIN for offsets in LINED_UP.values()
                      for a in plan_runs(0, offsets))
        assert per_gap == 6
        assert emulation_of(p).gap_transactions == 2
    check_partitions(stock, topic, LINED_UP, stamp)


def test_calls_above_the_partition_bound_still_share(stock, monkeypatch):
    """A copy calling partition by partition in calls larger than the per-partition bound
    (HELD_MAX, here 4): partitions with gaps wait for each other (2 shared transactions, as
    with small calls, not 6), until the bound on all held records (here 12) writes what is
    held; a partition without a gap streams at once past HELD_MAX."""
    from kipproducer.producer import emulation_of
    from kipproducer.stock import emulation as emulation_module

    monkeypatch.setattr(emulation_module, "HELD_MAX", 4)
    monkeypatch.setattr(emulation_module, "HELD_TOTAL_MAX", 1000)
    topic = new_topic(stock, "em-bound", partitions=3)
    stamp = now_ms() - 1000
    with emulated_producer(stock, unique("w")) as p:
        assert p.kip_mode(topic) == "emulated"
        produce_lined_up(p, topic, LINED_UP, stamp)
        emulation = emulation_of(p)
        assert len(emulation) == 18  # all held: every partition has a gap
        assert p.flush(30) == 0
        assert emulation.gap_transactions == 2
    check_partitions(stock, topic, LINED_UP, stamp)

    monkeypatch.setattr(emulation_module, "HELD_TOTAL_MAX", 12)
    topic = new_topic(stock, "em-bound-all", partitions=4)
    with emulated_producer(stock, unique("w")) as p:
        assert p.kip_mode(topic) == "emulated"
        emulation = emulation_of(p)
        produce_lined_up(p, topic, {0: LINED_UP[0]}, stamp)
        assert len(emulation) == 6
        produce_lined_up(p, topic, {1: LINED_UP[1]}, stamp)  # 12 held: both written
        assert len(emulation) == 0
        assert emulation.gap_transactions == 2  # partitions 0 and 1 shared their rounds
        produce_lined_up(p, topic, {2: LINED_UP[2]}, stamp)
        dense = {3: list(range(5))}  # no gap, past HELD_MAX: streams at once
        produce_lined_up(p, topic, dense, stamp)
        # the dense call wrote the partitions with gaps too, up to their last gap: only
        # partition 2's last run (offset 9) is held
        assert len(emulation) == 1
        assert p.flush(30) == 0
        assert emulation.gap_transactions == 4
    check_partitions(stock, topic, {**LINED_UP, **dense}, stamp)


_DYING_SHARED_WRITER = textwrap.dedent("""
    import json, sys
    import numpy as np
    import kipproducer.producer as engine
    from kipproducer import Producer

    def stop_before_end_txn(self, *args, **kwargs):
        print("open", flush=True)
        sys.stdin.read()  # hold the shared transaction open (fillers written) until killed

    engine.Producer.abort_transaction = stop_before_end_txn
    bootstrap, topic, txn_id, stamp = sys.argv[1:5]
    stamp = int(stamp)
    p = Producer({"bootstrap.servers": bootstrap, "kip.mode": "emulated",
                  "kip.emulation.transactional.id": txn_id})
    for partition, offsets in json.loads(sys.argv[5]).items():
        p.produce_arrays(topic, [b"v%d.%d" % (int(partition), o) for o in offsets],
                         keys=[b"k%d" % o for o in offsets],
                         headers=[[("h", b"%d" % o)] for o in offsets],
                         timestamps=np.array([stamp + o for o in offsets], np.int64),
                         partition=int(partition), offsets=np.array(offsets, np.int64))
    p.flush(30)
""")


def test_kill_9_mid_shared_transaction_then_restart(stock):
    """The writer is killed with the shared transaction of the first round open (fillers of
    partitions 0 and 1 written, partition 2 added without a record, no EndTxn). Each
    partition's part of it starts at its gap and holds no kept record, so the restarted
    writer's fence has the abort markers land inside the gaps, and every record of the rest
    of the copy lands at its offset."""
    import json

    from kipproducer.producer import emulation_of

    topic = new_topic(stock, "em-shared-kill", partitions=3)
    writer = unique("writer")
    stamp = now_ms() - 1000
    kill_9_when_open(_DYING_SHARED_WRITER, stock, topic, writer, str(stamp),
                     json.dumps(LINED_UP))
    # the first runs landed (0..2 / 0..2 / 0..3), the first round's gaps are open
    first = {0: [0, 1, 2], 1: [0, 1, 2], 2: [0, 1, 2, 3]}
    rest = {p: offsets[len(first[p]):] for p, offsets in LINED_UP.items()}
    with emulated_producer(stock, writer) as p:
        ends = [emulation_of(p).log_end(topic, partition) for partition in range(3)]
        # fenced: each abort marker took its gap's last offset, right before the next record
        assert ends == [rest[0][0], rest[1][0], rest[2][0]]
        produce_lined_up(p, topic, rest, stamp)
        assert p.flush(30) == 0
    check_partitions(stock, topic, LINED_UP, stamp)


def test_arrays_refilled_by_the_caller_after_the_call_keep_what_was_given(stock):
    """A gap holds a call's records for the next call; a caller that reuses its numpy arrays
    for that next call must not change them (the emulation keeps copies, as the engine's
    accumulator does)."""
    topic = new_topic(stock, "em-reuse")
    values, keys = np.empty(3, dtype=object), np.empty(3, dtype=object)
    offsets = np.empty(3, dtype=np.int64)
    with emulated_producer(stock, unique("w")) as p:
        for call in range(2):
            values[:] = [b"v%d-%d" % (call, i) for i in range(3)]
            keys[:] = [b"k%d-%d" % (call, i) for i in range(3)]
            offsets[:] = [10 * call + i * 3 for i in range(3)]  # gaps of 2: held for now
            p.produce_arrays(topic, values, keys=keys, partition=0, offsets=offsets)
        values[:] = [b"overwritten"] * 3
        keys[:] = [b"overwritten"] * 3
        offsets[:] = [100, 101, 102]
        assert p.flush(30) == 0
    got = [(r.offset, r.key, r.value) for r in committed(stock, topic)]
    assert got == [(10 * c + 3 * i, b"k%d-%d" % (c, i), b"v%d-%d" % (c, i))
                   for c in range(2) for i in range(3)]
