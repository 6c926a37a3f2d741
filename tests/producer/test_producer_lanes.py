"""One order per topic across both lanes: produce() and the bulk calls interleaved.

Records go to single-partition topics with their call order in the value; the consumer must
see exactly that order, whichever lane sent each record, and every record is reported once.
"""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest
from producer_support import create_topic, read_confluent, unique

from kipproducer import producer as kp


def _interleave(p: kp.Producer, topics: list[str], calls: int, seed: int) -> dict[str, int]:
    """Random produce / produce_batch / produce_arrays calls; returns records per topic."""
    rng = random.Random(seed)
    next_seq = dict.fromkeys(topics, 0)
    reported: dict[str, list[int]] = {t: [] for t in topics}

    def on_record(err, msg):
        assert err is None, err
        reported[msg.topic()].append(int(msg.value()))

    def on_batch(err, report):
        assert err is None, err
        reported[report.topic()].extend([-1] * report.count)

    for _ in range(calls):
        topic = rng.choice(topics)
        kind = rng.choice(["produce", "produce", "batch", "arrays", "arrow"])
        n = 1 if kind == "produce" else rng.randint(1, 300)
        seqs = range(next_seq[topic], next_seq[topic] + n)
        next_seq[topic] += n
        if kind == "produce":
            p.produce(topic, b"%d" % seqs[0], key=b"k", on_delivery=on_record)
        elif kind == "batch":
            assert p.produce_batch(topic, [{"value": b"%d" % s, "key": b"k"} for s in seqs],
                                   on_delivery=on_record) == n
        elif kind == "arrays":
            assert p.produce_arrays(topic, np.array([b"%d" % s for s in seqs], dtype=object),
                                    on_delivery=on_batch) == n
        else:
            assert p.produce_arrays(topic, pa.array([b"%d" % s for s in seqs]),
                                    per_record=True, on_delivery=on_record) == n
        if rng.random() < 0.3:
            p.poll(0)
    assert p.flush(20) == 0
    for topic in topics:
        assert len(reported[topic]) == next_seq[topic]
        named = [s for s in reported[topic] if s >= 0]
        assert sorted(named) == sorted(set(named))
    return next_seq


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_lanes_keep_call_order(kip, seed):
    topic = create_topic(kip.bootstrap, unique("lanes"), 1)
    p = kp.Producer({"bootstrap.servers": kip.bootstrap, "linger.ms": 2})
    counts = _interleave(p, [topic], 60, seed)
    values = [int(r.value) for r in read_confluent(kip.bootstrap, topic, 1,
                                                   expected=counts[topic])]
    assert values == list(range(counts[topic]))
    p.close()


def test_lanes_are_per_topic(kip):
    topics = [create_topic(kip.bootstrap, unique(f"lanes-{i}"), 1) for i in range(3)]
    p = kp.Producer({"bootstrap.servers": kip.bootstrap, "linger.ms": 2,
                     "enable.idempotence": True})
    counts = _interleave(p, topics, 90, 7)
    for topic in topics:
        values = [int(r.value) for r in read_confluent(kip.bootstrap, topic, 1,
                                                       expected=counts[topic])]
        assert values == list(range(counts[topic])), topic
    p.close()


def test_lane_switch_with_long_linger(kip):
    """A switch waits for the other lane's records even when they would linger for long."""
    topic = create_topic(kip.bootstrap, unique("linger"), 1)
    p = kp.Producer({"bootstrap.servers": kip.bootstrap, "linger.ms": 2_000})
    p.produce(topic, b"0")
    p.produce_arrays(topic, [b"1", b"2"])
    p.produce(topic, b"3")
    p.produce_batch(topic, [{"value": b"4"}])
    assert p.flush(20) == 0
    assert [r.value for r in read_confluent(kip.bootstrap, topic, 1, expected=5)] == [
        b"0", b"1", b"2", b"3", b"4"]
    p.close()
