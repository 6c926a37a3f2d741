"""Property: random interleavings of plain, KIP-391 and KIP-27 appends follow the rules.

Each example runs a random sequence of waiting ``Producer.append`` calls (so every call's
outcome is known) on the partitions of a fresh topic, from two producers (both idempotent
or neither):

* plain: appended at the log end;
* offsets (KIP-391): a first offset relative to the log end (below, at or above it) and
  gaps between records. A gap starts a new batch. To a broker of KIP-WIRE version 1 each
  batch goes in its own request and is accepted iff its first offset >= the log end, which
  then becomes its last offset + 1 (so a call refused for its first batch may still write a
  later one); to a version 2 broker the batches of one call travel as one unit (§9), which
  is written whole or refused whole. A producer itself refuses (OffsetOrderError, nothing
  sent) a first offset not above the last explicit offset it was given for that partition;
* conditional (KIP-27): accepted iff the expected offset is the log end.

A small model predicts every outcome (the first offset, or the error and its
``log_end_offset``); at the end a librdkafka consumer must read exactly the model's logs and
the high watermarks must be the model's log ends.
"""

from __future__ import annotations

import itertools

import numpy as np
from confluent_kafka import Consumer, TopicPartition
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from kip_support import create_topic, kip_producer, read_confluent, unique

from kipproducer.errors import InvalidProduceOffsetError, OffsetMismatchError, OffsetOrderError

PARTITIONS = 3
_examples = itertools.count()


class Model:
    """The rules, per partition: the log end, the log, and each producer's last explicit
    offset (its local strictly-increasing rule)."""

    def __init__(self, partitions: int, producers: int, wire_version: int = 2) -> None:
        self.units = wire_version >= 2
        self.end = [0] * partitions
        self.log: list[list[tuple[int, bytes]]] = [[] for _ in range(partitions)]
        self.last_explicit = [[-1] * partitions for _ in range(producers)]

    def write(self, p: int, offsets, values) -> None:
        self.log[p].extend(zip(offsets, values, strict=True))
        self.end[p] = offsets[-1] + 1

    def plain(self, p: int, values):
        first = self.end[p]
        self.write(p, range(first, first + len(values)), values)
        return first

    def with_offsets(self, producer: int, p: int, offsets: list[int], values):
        if offsets[0] <= self.last_explicit[producer][p]:
            return ("local", None)
        self.last_explicit[producer][p] = offsets[-1]
        if self.units:  # one unit: offsets rise, so only its first batch can be refused
            if offsets[0] < self.end[p]:
                return ("refused", self.end[p])
            self.write(p, offsets, values)
            return offsets[0]
        refused = None
        start = 0
        for i in range(1, len(offsets) + 1):  # batches: runs of consecutive offsets
            if i < len(offsets) and offsets[i] == offsets[i - 1] + 1:
                continue
            if offsets[start] >= self.end[p]:
                self.write(p, offsets[start:i], values[start:i])
            elif refused is None:
                refused = ("refused", self.end[p])
            start = i
        return refused or offsets[0]

    def conditional(self, p: int, expected: int, values):
        if expected != self.end[p]:
            return ("mismatch", self.end[p])
        return self.plain(p, values)


ops = st.lists(st.tuples(
    st.integers(0, 1),                               # which producer
    st.sampled_from(["plain", "offsets", "conditional"]),
    st.integers(0, PARTITIONS - 1),
    st.integers(1, 4),                               # records
    st.integers(-4, 6),                              # offset relative to the log end
    st.lists(st.sampled_from([1, 1, 1, 2, 5]), min_size=3, max_size=3),  # offset steps
    st.booleans(),                                   # conditional: the right expectation
), min_size=1, max_size=14)


@settings(max_examples=50, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(ops=ops, idempotent=st.booleans(), wire_version=st.sampled_from([1, 2]))
def test_outcomes_and_logs_match_the_model(broker, version_1_broker, ops, idempotent,
                                           wire_version):
    bootstrap = (version_1_broker if wire_version == 1 else broker).bootstrap_servers
    topic = create_topic(bootstrap, unique("prop"), PARTITIONS)
    example = next(_examples)
    model = Model(PARTITIONS, 2, wire_version)
    with kip_producer(bootstrap, enable_idempotence=idempotent, linger_ms=0) as p0, \
            kip_producer(bootstrap, enable_idempotence=idempotent, linger_ms=0) as p1:
        for number, (who, kind, part, n, delta, steps, right) in enumerate(ops):
            p = (p0, p1)[who]
            values = [b"x%d-op%d-%d" % (example, number, i) for i in range(n)]
            end = model.end[part]
            if kind == "plain":
                predicted = model.plain(part, values)
                call = {}
            elif kind == "offsets":
                first = max(0, end + delta)
                offsets = [first + sum(steps[:i]) for i in range(n)]
                predicted = model.with_offsets(who, part, offsets, values)
                call = {"offsets": np.array(offsets, dtype=np.int64)}
            else:
                wrong = end + delta if delta and end + delta >= 0 else end + 7
                expected = end if right else wrong
                predicted = model.conditional(part, expected, values)
                call = {"expected_offset": expected}
            what = f"op {number}: producer {who} {kind} p{part} {call} (log end was {end})"
            try:
                outcome = p.append(topic, values, partition=part, timeout=20, **call)
            except OffsetOrderError:
                outcome = ("local", None)
            except InvalidProduceOffsetError as exc:
                outcome = ("refused", exc.log_end_offset)
            except OffsetMismatchError as exc:
                outcome = ("mismatch", exc.log_end_offset)
            assert outcome == predicted, what
            verdict = outcome[0] if isinstance(outcome, tuple) else "written"
            if verdict == "refused" and model.end[part] != end:
                verdict = "refused, a later batch written"
            event(f"{kind}: {verdict} (KIP-WIRE v{wire_version})")

    log = read_confluent(bootstrap, topic, PARTITIONS,
                         expected=sum(len(entries) for entries in model.log))
    assert [[(r.offset, r.value) for r in log if r.partition == part]
            for part in range(PARTITIONS)] == model.log
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("wm")})
    try:
        assert [consumer.get_watermark_offsets(TopicPartition(topic, part), timeout=10)[1]
                for part in range(PARTITIONS)] == model.end
    finally:
        consumer.close()
