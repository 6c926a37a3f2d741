"""The bulk lane puts a key on the partition librdkafka's partitioner picks.

For every librdkafka partitioner the same keys go once through plain ``produce()`` (librdkafka
itself chooses, partition=-1) and once through produce_batch and produce_arrays; the
partition each record landed on (from its delivery report, checked against the log) must be
the same for a key in all three. NULL and empty keys are included where the partitioner is
deterministic for them (librdkafka sends them to a random partition otherwise).
"""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa
import pytest
from producer_support import create_topic, read_confluent, unique

from kipproducer import producer as kp

PARTITIONS = 7

# (NULL key deterministic, empty key deterministic)
PARTITIONERS = {
    "consistent_random": (False, False),
    "consistent": (True, True),
    "murmur2": (True, True),
    "murmur2_random": (False, True),
    "fnv1a": (True, True),
    "fnv1a_random": (False, True),
}


def _keys() -> list[bytes | None]:
    rng = np.random.default_rng(20240607)
    keys: list[bytes | None] = [b"key-%d" % i for i in range(150)]
    keys += [rng.bytes(int(n)) for n in rng.integers(1, 40, 150)]  # high bytes, all lengths
    keys += [bytes([b]) for b in range(0, 256, 5)] + [b"\xff" * 4, b"\x80" * 3]
    return keys


@pytest.mark.parametrize("partitioner", sorted(PARTITIONERS))
def test_partitioner_matches_librdkafka(kip, partitioner):
    null_ok, empty_ok = PARTITIONERS[partitioner]
    keys = _keys() + ([None] if null_ok else []) + ([b""] if empty_ok else [])
    topic = create_topic(kip.bootstrap, unique(f"part-{partitioner}"), PARTITIONS)
    p = kp.Producer({"bootstrap.servers": kip.bootstrap, "partitioner": partitioner,
                     "linger.ms": 5})
    by_lane: dict[str, dict[int, int]] = {"librdkafka": {}, "batch": {}, "arrays": {},
                                          "arrow": {}}

    def recorder(lane):
        def record(err, msg):
            assert err is None, err
            by_lane[lane][int(msg.value().split(b"|")[1])] = msg.partition()
        return record

    for i, key in enumerate(keys):
        p.produce(topic, b"librdkafka|%d" % i, key, on_delivery=recorder("librdkafka"))
    assert p.flush(10) == 0
    p.produce_batch(topic, [{"value": b"batch|%d" % i, "key": k} for i, k in enumerate(keys)],
                    on_delivery=recorder("batch"))
    values = np.array([b"arrays|%d" % i for i in range(len(keys))], dtype=object)
    p.produce_arrays(topic, values, keys=np.array(keys, dtype=object), per_record=True,
                     on_delivery=recorder("arrays"))
    p.produce_arrays(topic, pa.array([b"arrow|%d" % i for i in range(len(keys))]),
                     keys=pa.array(keys, type=pa.binary()), per_record=True,
                     on_delivery=recorder("arrow"))
    assert p.flush(10) == 0

    expected = by_lane["librdkafka"]
    assert len(expected) == len(keys)
    assert len(set(expected.values())) == PARTITIONS  # the keys do spread
    for lane in ("batch", "arrays", "arrow"):
        wrong = {keys[i]: (expected[i], got) for i, got in by_lane[lane].items()
                 if got != expected[i]}
        assert not wrong, f"{lane}: key -> (librdkafka, {lane}) {list(wrong.items())[:5]}"
        assert len(by_lane[lane]) == len(keys)

    # The log agrees with the reports.
    records = read_confluent(kip.bootstrap, topic, PARTITIONS, expected=4 * len(keys))
    assert len(records) == 4 * len(keys)
    for r in records:
        lane, index = r.value.split(b"|")
        assert r.partition == expected[int(index)], (lane, r.key)
    p.close()


@pytest.mark.parametrize("partitioner", ["consistent", "murmur2", "fnv1a"])
def test_keyless_arrays_follow_librdkafka(kip, partitioner):
    """keys=None is a column of NULL keys: deterministic partitioners hash them as librdkafka
    does (one fixed partition), not randomly."""
    topic = create_topic(kip.bootstrap, unique(f"keyless-{partitioner}"), PARTITIONS)
    p = kp.Producer({"bootstrap.servers": kip.bootstrap, "partitioner": partitioner})
    plain = []
    for _ in range(5):
        p.produce(topic, b"plain", on_delivery=lambda e, m: plain.append(m.partition()))
    assert p.flush(10) == 0
    bulk = []
    for _ in range(5):
        p.produce_arrays(topic, [b"bulk"] * 3, on_delivery=lambda e, r: bulk.append(
            r.partition()))
        p.produce_batch(topic, [{"value": b"batch"}], on_delivery=lambda e, m: bulk.append(
            m.partition()))
    assert p.flush(10) == 0
    assert len(set(plain)) == 1
    assert set(bulk) == set(plain)
    p.close()


def test_random_partitioners_are_sticky_per_call(kip):
    """NULL keys with a *_random partitioner: one call's records share one partition."""
    topic = create_topic(kip.bootstrap, unique("sticky"), PARTITIONS)
    p = kp.Producer({"bootstrap.servers": kip.bootstrap, "partitioner": "murmur2_random"})
    seen = []
    for _ in range(12):
        p.produce_arrays(topic, [b"v"] * 20, on_delivery=lambda e, r: seen.append(
            (r.partition(), r.count)))
        assert p.flush(10) == 0
    assert all(count == 20 for _, count in seen)  # one batch per call: one partition
    assert len({part for part, _ in seen}) > 1     # but not always the same one
    p.close()


def test_new_partitions_are_seen_by_both_lanes(kip):
    """After partitions are added, both lanes pick among the new count once their metadata
    is refreshed (topic.metadata.refresh.interval.ms), so keys still agree."""
    from confluent_kafka.admin import AdminClient, NewPartitions

    topic = create_topic(kip.bootstrap, unique("grow"), 2)
    p = kp.Producer({"bootstrap.servers": kip.bootstrap, "partitioner": "murmur2",
                     "topic.metadata.refresh.interval.ms": 300})
    keys = [b"key-%d" % i for i in range(60)]

    def partitions_by_lane() -> tuple[dict, dict]:
        plain, bulk = {}, {}
        for k in keys:
            p.produce(topic, b"v", k, on_delivery=lambda e, m: plain.__setitem__(
                m.key(), m.partition()))
        assert p.flush(10) == 0
        p.produce_batch(topic, [{"value": b"v", "key": k} for k in keys],
                        on_delivery=lambda e, m: bulk.__setitem__(m.key(), m.partition()))
        assert p.flush(10) == 0
        return plain, bulk

    plain, bulk = partitions_by_lane()
    assert plain == bulk and set(plain.values()) == {0, 1}
    admin = AdminClient({"bootstrap.servers": kip.bootstrap})
    admin.create_partitions([NewPartitions(topic, 6)])[topic].result(10)
    deadline = time.monotonic() + 10
    while True:  # until librdkafka has seen the new partitions
        time.sleep(0.4)
        plain, bulk = partitions_by_lane()
        if max(plain.values()) >= 2 or time.monotonic() > deadline:
            break
    assert max(plain.values()) >= 2, "librdkafka never saw the new partitions"
    assert plain == bulk
    p.close()
