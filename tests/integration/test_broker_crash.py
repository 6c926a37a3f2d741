"""kill -9 of the broker in the middle of an acks=all idempotent stream (flush.messages=1).

What was acknowledged was fsynced first (flush.messages=1), so after the restart on the same
data dir every acknowledged record is there exactly once, at the offset its delivery report
gave; each partition's log is gap-free 0..hw-1 with the high watermark equal to the records
in it; and no value appears twice (records in flight at the kill may or may not be there).
"""

from __future__ import annotations

import time
from collections import Counter

from confluent_kafka import Consumer, Producer, TopicPartition
from integration_support import KipBroker, Rec, consume_records, create_topics, unique

PARTITIONS = 3
ACKED_BEFORE_KILL = 4000
TIMEOUT = 30.0


class Stream:
    """An idempotent acks=all producer that records every acknowledged record."""

    def __init__(self, bootstrap: str, topic: str, **extra) -> None:
        self.topic = topic
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 2,
                "batch.num.messages": 200,
                # Fail fast in the test if the broker is gone for good.
                "message.timeout.ms": int(TIMEOUT * 1000),
                **extra,
            }
        )
        self.acked: dict[bytes, tuple[int, int]] = {}  # value -> (partition, offset)
        self.failed: list[str] = []
        self.sent = 0

    def _report(self, err, msg) -> None:
        if err is None:
            value = msg.value()
            assert value not in self.acked, f"{value!r} acknowledged twice"
            self.acked[value] = (msg.partition(), msg.offset())
        else:
            self.failed.append(str(err))

    def send_until(self, acked: int, deadline: float) -> None:
        while len(self.acked) < acked:
            assert time.monotonic() < deadline, f"only {len(self.acked)} acknowledged"
            try:
                self.producer.produce(
                    self.topic,
                    b"rec-%08d" % self.sent,
                    key=b"k%d" % (self.sent % 50),
                    on_delivery=self._report,
                )
                self.sent += 1
            except BufferError:
                self.producer.poll(0.05)
            self.producer.poll(0)


def read_back(broker: KipBroker, topic: str) -> dict[int, list[Rec]]:
    """Every record of every partition, checking the log is 0..hw-1 without gaps."""
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique("crash-check")})
    try:
        hws = {
            p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=TIMEOUT, cached=False)
            for p in range(PARTITIONS)
        }
    finally:
        c.close()
    for p, (low, _) in hws.items():
        assert low == 0, f"partition {p} starts at {low}"
    total = sum(high for _, high in hws.values())
    records = consume_records(broker.bootstrap, topic, total, timeout=TIMEOUT)
    by_partition: dict[int, list[Rec]] = {p: [] for p in range(PARTITIONS)}
    for rec in records:
        by_partition[rec.partition].append(rec)
    for p, recs in by_partition.items():
        # The high watermark is exactly the number of records in the log, offsets contiguous.
        assert [r.offset for r in recs] == list(range(hws[p][1])), f"partition {p}"
    return by_partition


def check_acknowledged(stream: Stream, logs: dict[int, list[Rec]]) -> None:
    everything = [r for recs in logs.values() for r in recs]
    counts = Counter(r.value for r in everything)
    duplicates = [v for v, n in counts.items() if n > 1]
    assert not duplicates, f"{len(duplicates)} values stored twice, e.g. {duplicates[:3]}"
    at = {(r.partition, r.offset): r.value for r in everything}
    missing = [(v, place, at.get(place)) for v, place in stream.acked.items() if at.get(place) != v]
    assert not missing, (
        f"{len(missing)} of {len(stream.acked)} acknowledged records are not at their "
        f"acknowledged (partition, offset); (value, place, found there): {missing[:3]}"
    )


def test_kill_9_mid_stream_keeps_every_acknowledged_record(kip_broker) -> None:
    broker: KipBroker = kip_broker({"log.flush.interval.messages": 1})
    topic = unique("crash")
    create_topics(broker.bootstrap, {topic: PARTITIONS})
    stream = Stream(broker.bootstrap, topic)
    # send_until keeps the producer's queue full: batches are in flight at the kill.
    stream.send_until(ACKED_BEFORE_KILL, time.monotonic() + TIMEOUT)
    assert len(stream.producer) > 0, "nothing in flight"
    broker.kill()
    # Reports for responses that reached the client before the kill are real acknowledgements.
    stream.producer.poll(0.5)
    acked_at_kill = dict(stream.acked)
    stream.producer.purge()
    stream.producer.poll(0.1)
    assert set(stream.acked) == set(acked_at_kill), "an acknowledgement after the kill"
    assert len(acked_at_kill) >= ACKED_BEFORE_KILL

    broker.start()
    logs = read_back(broker, topic)
    check_acknowledged(stream, logs)
    # A second restart (clean this time) changes nothing.
    broker.restart()
    assert read_back(broker, topic) == logs


def test_kill_9_and_restart_on_the_same_port_while_the_producer_keeps_going(kip_broker) -> None:
    """The producer outlives the crash: it reconnects and retries what was in flight.

    The broker rebuilt its idempotent-producer state from the log, so a retried batch that
    had been written before the kill is recognised as a duplicate, not stored twice.
    """
    broker: KipBroker = kip_broker({"log.flush.interval.messages": 1})
    topic = unique("crash-same-port")
    create_topics(broker.bootstrap, {topic: PARTITIONS})
    stream = Stream(
        broker.bootstrap, topic, **{"reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 200}
    )
    stream.send_until(2000, time.monotonic() + TIMEOUT)
    broker.kill()
    broker.start(port=broker.port)
    stream.send_until(len(stream.acked) + 2000, time.monotonic() + TIMEOUT)
    assert stream.producer.flush(TIMEOUT) == 0
    # Everything sent was acknowledged: in-flight batches were retried after the restart.
    assert not stream.failed, stream.failed[:3]
    assert len(stream.acked) == stream.sent

    logs = read_back(broker, topic)
    check_acknowledged(stream, logs)
    assert sum(len(recs) for recs in logs.values()) == stream.sent


def test_sigterm_under_a_full_stream_stops_promptly_and_cleanly(kip_broker) -> None:
    """A clean stop while a client floods the broker: prompt exit 0, acknowledged data kept.

    (Before the fix a connection could survive its cancellation, Python < 3.12's wait_for
    swallowing it, and the broker hung in shutdown until the client went away.)
    """
    broker: KipBroker = kip_broker({"log.flush.interval.messages": 1})
    topic = unique("sigterm")
    create_topics(broker.bootstrap, {topic: PARTITIONS})
    stream = Stream(broker.bootstrap, topic)
    stream.send_until(3000, time.monotonic() + TIMEOUT)
    started = time.monotonic()
    assert broker.stop(timeout=10) == 0
    assert time.monotonic() - started < 10
    stream.producer.poll(0.5)
    stream.producer.purge()
    stream.producer.poll(0.1)

    broker.start()
    check_acknowledged(stream, read_back(broker, topic))
