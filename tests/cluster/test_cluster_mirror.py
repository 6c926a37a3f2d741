"""``kip mirror`` reading a multi-broker source whose leaders move and fail over, in both
modes; the target is the reference broker (``kip broker``, embedded), which speaks KIP-391
for preserve mode.

The source is librdkafka's mock cluster, written by confluent-kafka's Producer (paced, 2 s)
while the event happens; the mirror runs meanwhile. Judged: once the source is written, the
target holds exactly the source's records: preserve mode at the same offsets, transactional
mode in the same order per partition (its copies are committed with the source offsets).
There is no confluent-kafka mirror to time against; the mirror must catch up within its own
timeout.

The source's DescribeConfigs: the mock does not serve it. With a controller named
(``moved_twice``) librdkafka's admin client says so at once (_UNSUPPORTED_FEATURE); with none
(``failover``) the call is never answered and its future raises the builtin TimeoutError
after the mirror's timeout, which once stopped the mirror: both must leave the target topic
created with the target's defaults.

What the mock does not model otherwise: ListGroups
(no group offsets are synced), aborted transactions in Fetch answers (the source here has
none), a log beyond a few MiB per partition (the load stays far below).
"""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from mock_cluster import MockCluster
from scenario_support import PARTITIONS, unique, value

from kipproducer.broker.embedded import EmbeddedBroker
from kipproducer.mirror import Mirror

N = 6_000
PACE_S = 2.0


def _read(bootstrap: str, topic: str, timeout: float = 30.0) -> dict[int, list[tuple]]:
    """(offset, key, value) of every record, per partition."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("reader"),
                  "enable.auto.commit": False, "enable.partition.eof": True})
    out: dict[int, list[tuple]] = {p: [] for p in range(PARTITIONS)}
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(at_end) < PARTITIONS:
            assert time.monotonic() < deadline, f"{topic}: not read to the end"
            for m in c.consume(5000, 0.05):
                if m.error():
                    assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                    at_end.add(m.partition())
                    continue
                at_end.discard(m.partition())
                out[m.partition()].append((m.offset(), m.key(), m.value()))
    finally:
        c.close()
    return out


@pytest.fixture(scope="module")
def target():
    with EmbeddedBroker(config={"num.partitions": 1}) as broker:
        yield broker


def _event(cluster: MockCluster, topic: str, kind: str) -> list[threading.Timer]:
    timers: list[threading.Timer] = []

    def move(shift: int) -> None:
        for p in range(PARTITIONS):
            cluster.set_leader(topic, p, (p + shift) % 3 + 1)

    if kind == "moved_twice":
        move(1)
        timers.append(threading.Timer(1.0, move, (2,)))
    else:  # failover: broker 1 down, its partitions led by 2 and 3; back 2 s later
        cluster.broker_down(1)
        for p in range(PARTITIONS):
            if p % 3 == 0:
                cluster.set_leader(topic, p, 2 if p % 2 else 3)
        timers.append(threading.Timer(2.0, cluster.broker_up, (1,)))
    timers[-1].start()
    return timers


@pytest.mark.parametrize("kind", ["moved_twice", "failover"])
@pytest.mark.parametrize("mode", ["preserve", "transactional"])
def test_mirror_follows_moving_source_leaders(mock_cluster: MockCluster, target, mode, kind):
    topic = unique(f"mirror-{kind}")
    if kind == "moved_twice":
        mock_cluster.set_controller(1)
    mock_cluster.create_topic(topic, PARTITIONS)
    renamed = f"copy.{topic}"
    mirror = Mirror(mock_cluster.bootstrap, target.bootstrap_servers, topic, mode=mode,
                    group=unique("mirror") if mode == "transactional" else None,
                    rename="copy.{topic}", progress=False, commit_interval_ms=200,
                    metadata_interval_ms=500, timeout=8)
    failure: list[BaseException] = []

    def run() -> None:
        try:
            mirror.run()
        except BaseException as exc:  # handed to the test
            failure.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    producer = Producer({"bootstrap.servers": mock_cluster.bootstrap, "linger.ms": 5,
                         "enable.idempotence": True})
    for i in range(100):  # the topic has records before the mirror starts
        producer.produce(topic, value(i), key=b"k%02d" % (i % 60))
    assert producer.flush(10) == 0
    thread.start()
    timers: list[threading.Timer] = []
    started = time.monotonic()
    try:
        for i in range(100, N):
            if not timers and time.monotonic() - started > 1.0:
                timers = _event(mock_cluster, topic, kind)
            producer.produce(topic, value(i), key=b"k%02d" % (i % 60))
            if i % 200 == 0:
                producer.poll(0)
                time.sleep(max(started + PACE_S * i / N - time.monotonic(), 0))
        assert producer.flush(30) == 0
        for t in timers:
            t.join()
        mock_cluster.broker_up(1)
        source = _read(mock_cluster.bootstrap, topic)
        want = sum(len(v) for v in source.values())
        assert want >= N
        # The mirror catches up, or has failed (its timeout is 8 s; without a controller
        # the first 8 s of its run wait for DescribeConfigs).
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not failure:
            try:
                copied = _read(target.bootstrap_servers, renamed, timeout=5)
            except AssertionError:  # not created yet
                continue
            if sum(len(v) for v in copied.values()) >= want:
                break
            time.sleep(0.5)
    finally:
        mirror.stop()
        thread.join(30)
    assert not failure, f"the mirror stopped: {failure[0]!r}"
    assert not thread.is_alive()
    copied = _read(target.bootstrap_servers, renamed)
    if mode == "preserve":
        assert copied == source
    else:
        assert {p: [r[1:] for r in rows] for p, rows in copied.items()} == \
            {p: [r[1:] for r in rows] for p, rows in source.items()}


class _Probe:
    """A probe consumer whose answers are scripted: exceptions are raised, values returned."""

    def __init__(self, answers: list) -> None:
        self.answers = answers
        self.calls = 0

    def get_watermark_offsets(self, tp, timeout, cached):
        self.calls += 1
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer


def test_mirror_probe_retries_transient_errors_until_its_timeout(monkeypatch):
    """A source leader that moved answers NOT_LEADER to the probe until its metadata catches
    up; a future's builtin TimeoutError is an answer not come yet: both are asked again. A
    fatal error stops the mirror at once; a transient one that lasts past the mirror's
    timeout stops it then, as a MirrorError naming it."""
    from confluent_kafka import KafkaException

    from kipproducer.mirror import MirrorError

    mirror = Mirror("127.0.0.1:9", "127.0.0.1:9", "t", progress=False, timeout=1.5)
    not_leader = KafkaException(KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION))
    probe = _Probe([not_leader, TimeoutError(), not_leader, (3, 10)])
    monkeypatch.setattr(mirror, "_probe", lambda side: probe)
    assert mirror.watermarks("source", "t", 0) == (3, 10)
    assert probe.calls == 4

    probe = _Probe([KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)), (0, 0)])
    monkeypatch.setattr(mirror, "_probe", lambda side: probe)
    with pytest.raises(MirrorError, match="Topic authorization failed"):
        mirror.watermarks("source", "t", 0)
    assert probe.calls == 1

    probe = _Probe([not_leader] * 1000)
    monkeypatch.setattr(mirror, "_probe", lambda side: probe)
    with pytest.raises(MirrorError, match="watermarks of source t\\[0\\]: .*[Nn]ot leader"):
        mirror.watermarks("source", "t", 0)
    assert probe.calls > 5  # asked again and again (backoff 50 ms doubling) until then
