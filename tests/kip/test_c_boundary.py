"""The C boundary of the per-record produce() (src/_accel/kipproducer/_accumulator.pxd): the
Producer keeps what the C produce() reads in a ProduceState, the Engine in an EngineState,
and both sides agree on them.

The C path is told apart from the Python one by what a profiler sees: a record that the C
produce() appends enters no Python function of the producer; one it hands over enters
Producer._produce_kip."""

from __future__ import annotations

import re
import sys
import types
from contextlib import contextmanager
from pathlib import Path

from kip_support import create_topic, kip_producer, read_confluent, unique

from kipproducer import _accumulator
from kipproducer.producer import Producer

ACCEL = Path(__file__).resolve().parents[2] / "src" / "_accel"
PXD = ACCEL / "kipproducer" / "_accumulator.pxd"
PYX = ACCEL / "accumulator.pyx"


@contextmanager
def python_produce_calls():
    """A list that grows by one each time this thread enters Producer._produce_kip (the
    Python path of produce(offset=) / produce(expected_offset=))."""
    calls: list[int] = []
    code = Producer._produce_kip.__code__

    def profile(frame, event, arg):
        if event == "call" and frame.f_code is code:
            calls.append(1)

    sys.setprofile(profile)
    try:
        yield calls
    finally:
        sys.setprofile(None)


def test_the_producer_and_its_engine_hold_the_cdef_states(broker):
    bootstrap = broker.bootstrap_servers
    topic = create_topic(bootstrap, unique("boundary-types"))
    assert isinstance(Producer.__dict__["_kip_state"], types.MemberDescriptorType)
    with kip_producer(bootstrap) as p:
        state = p._kip_state
        assert type(state) is _accumulator.ProduceState
        assert (p._engine, p._group, p._txn) == (None, None, None)
        assert p._lanes is state.lanes
        # kip.mode=auto: direct once the first call finds the topic's brokers native
        assert p._kip_direct is False is state.kip_direct
        p.produce(topic, b"v0", partition=0, offset=0)  # starts the engine
        assert p._kip_direct is True is state.kip_direct
        engine = p._engine
        assert type(engine.shared) is _accumulator.EngineState
        assert state.engine is engine and state.sender is engine.shared
        shared = engine.shared
        assert (engine.acc, engine.lock) == (shared.acc, shared.lock)
        assert type(engine.acc) is _accumulator.RecordAccumulator
        assert engine.dead is False is shared.dead
        assert (engine._sender_idle, engine._idle_closed, engine._idle_until_ms) == (
            shared.sender_idle, shared.idle_closed, shared.idle_until_ms)
        assert engine._reports_cv is shared.reports_cv
        assert p.flush(30) == 0
        assert engine._outstanding == 0 == shared.outstanding
        assert shared.message_max_bytes == engine.config.message_max_bytes


def test_offset_produce_is_appended_in_c_and_reads_what_python_wrote(broker):
    bootstrap = broker.bootstrap_servers
    topic = create_topic(bootstrap, unique("boundary-path"))
    # A long linger: the records stay outstanding until flush(), so the counts below are
    # the C note_appended's, not yet lowered by delivery reports.
    with kip_producer(bootstrap, linger_ms=20_000) as p:
        with python_produce_calls() as calls:
            p.produce(topic, b"v0", partition=0, offset=0)
            assert len(calls) == 1  # the topic was not on the engine's lane yet
            for i in range(1, 51):
                p.produce(topic, b"v%d" % i, partition=0, offset=i)
            assert len(calls) == 1  # all 50 appended in C
            assert p._engine._outstanding == 51 == p._engine.shared.outstanding
            assert p._lanes[topic][1] == 51
            # A Python-side write reaches the C side: no direct path, every call in Python.
            p._kip_direct = False
            p.produce(topic, b"v51", partition=0, offset=51)
            assert len(calls) == 2
            p._kip_direct = True
            p.produce(topic, b"v52", partition=0, offset=52)
            assert len(calls) == 2
        assert p.flush(30) == 0
        assert p._engine._outstanding == 0 and p._lanes[topic][1] == 0
    log = read_confluent(bootstrap, topic, 1, expected=53)
    assert [(r.offset, r.value) for r in log] == [(i, b"v%d" % i) for i in range(53)]


def _declared_fields(class_name: str) -> set[str]:
    """The fields a cdef class of the .pxd declares."""
    text = PXD.read_text(encoding="utf-8")
    body = re.search(rf"^cdef class {class_name}:\n((?:    .*\n|\n)+)", text, re.M)
    assert body is not None, f"{class_name} is not declared in {PXD.name}"
    return set(re.findall(r"^    cdef (?:public |readonly )?\w+ (\w+)", body.group(1), re.M))


def _function_source(name: str) -> str:
    text = PYX.read_text(encoding="utf-8")
    found = re.search(rf"^(?:cdef|def) [^\n]*\b{name}\(.*?(?=^\S|\Z)", text, re.M | re.S)
    assert found is not None, f"{name} is not in {PYX.name}"
    return found.group(0)


def test_the_c_fast_path_reads_only_declared_fields():
    """Cython compiles an undeclared attribute of a typed cdef object as a Python lookup by
    name: a field renamed on one side only would fail at the first call. This fails first."""
    produce_fields = _declared_fields("ProduceState")
    engine_fields = _declared_fields("EngineState")
    assert {"lanes", "kip_direct", "last_target", "sender"} <= produce_fields
    assert {"outstanding", "dead", "sender_idle", "idle_until_ms"} <= engine_fields
    # the report target a run carries: a typed field of ProduceState, typed fields of its own
    target_fields = _declared_fields("ReportTarget")
    assert target_fields == {"callback", "per_record"}
    assert re.search(r"cdef public ReportTarget last_target", PXD.read_text(encoding="utf-8"))
    for function in ("produce", "appended_c", "sender_is_dead", "max_message_bytes",
                     "add_outstanding", "sender_needs_waking", "offsets_direct"):
        source = _function_source(function)
        assert "__dict__" not in source and "engine." not in source, function
        for variable, name in re.findall(r"\b(state|sender|shared|target)\.(\w+)", source):
            fields = {"state": produce_fields, "target": target_fields}.get(variable,
                                                                          engine_fields)
            assert name in fields, f"{function} reads {variable}.{name}, not declared"
    # and the Python side's properties name declared fields
    producer = Producer({"bootstrap.servers": "127.0.0.1:9"})
    for name in ("_group", "_engine", "_txn", "_kip_direct", "_lanes", "_last_target",
                 "_default_on_delivery"):
        getattr(producer, name)
