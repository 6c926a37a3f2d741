"""produce(offset=) / produce(expected_offset=) and their array forms on a multi-broker
stock cluster.

KIP-391 (offset=) and KIP-27 (expected_offset=) need brokers that advertise the kipproducer
wire extensions (KIP-WIRE); librdkafka's mock cluster does not, like every stock broker.
What the mock can show: on every leader, before and after a failover, these calls fail at
once and clearly (_UNSUPPORTED_FEATURE, naming the call) and nothing of them is written;
plain records of the same producer still fail over and land. Their own failover (a leader
moving with explicit offsets in flight) needs a multi-broker cluster that speaks KIP-WIRE,
which neither the mock nor the single-node reference broker (``kip broker``) is: it is not
modelled here.
"""

from __future__ import annotations

import time

import numpy as np
from confluent_kafka import KafkaError
from mock_cluster import MockCluster
from scenario_support import PARTITIONS, client_config, read_sequences, unique, value

from kipproducer import producer as kp
from kipproducer.errors import ProduceOffsetKafkaError

UNSUPPORTED = KafkaError._UNSUPPORTED_FEATURE


def _kip_calls(p: kp.Producer, topic: str, reports: list, base: int) -> int:
    """One of each KIP call on every partition; how many records they carry."""
    def collect(mode: str):
        return lambda err, report: reports.append((mode, err, report))

    count = 0
    for partition in range(PARTITIONS):
        p.produce(topic, b"o", b"k", partition=partition, offset=base,
                  on_delivery=collect("offset="))
        p.produce(topic, b"e", b"k", partition=partition, expected_offset=0,
                  on_delivery=collect("expected_offset="))
        p.produce_arrays(topic, [b"a0", b"a1"], partition=partition,
                         offsets=np.array([base + 1, base + 2], np.int64),
                         on_delivery=collect("offset="))
        p.produce_arrays(topic, [b"b0", b"b1"], partition=partition, expected_offset=0,
                         on_delivery=collect("expected_offset="))
        count += 6
    return count


def _check(reports: list, count: int) -> None:
    assert sum(getattr(r, "count", 1) for _, _, r in reports) == count
    for mode, err, _ in reports:
        assert isinstance(err, ProduceOffsetKafkaError), (mode, err)
        assert err.code() == UNSUPPORTED, (mode, err)
        assert err.str().startswith(mode) and "unsupported by broker" in err.str(), err


def test_kip_calls_fail_clearly_before_and_after_failover(mock_cluster: MockCluster):
    topic = unique("kipcalls")
    mock_cluster.create_topic(topic, PARTITIONS)
    p = kp.Producer({**client_config(mock_cluster.bootstrap),
                     # the native refusal is the point; kip.mode=auto would first probe the
                     # emulation (docs/stock-clusters.md), which the mock cannot run
                     "kip.mode": "native"})
    reports: list = []
    started = time.monotonic()
    count = _kip_calls(p, topic, reports, 100)
    assert p.flush(20) == 0
    assert time.monotonic() - started < 5, "the refusal was not immediate"
    _check(reports, count)

    # Broker 1 goes down and its partitions fail over: plain records move, KIP calls are
    # still refused by the new leaders.
    plain = [0]

    def delivered(err, msg) -> None:
        assert err is None, err
        plain[0] += 1

    for i in range(600):
        p.produce(topic, value(i), partition=i % PARTITIONS, on_delivery=delivered)
    p.poll(0.2)
    mock_cluster.broker_down(1)
    for partition in (0, 3):
        mock_cluster.set_leader(topic, partition, 2)
    for i in range(600, 1200):
        p.produce(topic, value(i), partition=i % PARTITIONS, on_delivery=delivered)
    reports.clear()
    count = _kip_calls(p, topic, reports, 1000)
    assert p.flush(30) == 0
    _check(reports, count)
    assert plain[0] == 1200
    p.close()
    mock_cluster.broker_up(1)
    sequences = read_sequences(mock_cluster.bootstrap, topic)
    # Only the plain records are in the log; nothing of the KIP calls.
    written = sorted(s for seqs in sequences.values() for s in seqs)
    assert set(written) == set(range(1200))
