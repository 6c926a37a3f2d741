"""Helpers for the client-level KIP-391 / KIP-27 tests (tests/kip/test_producer_*.py).

The brokers, readers and the TCP proxy come from tests/producer/producer_support.py (imported,
not copied). Added here:

* :class:`ProduceWatchProxy`: a :class:`TcpProxy` that follows the Kafka frames in both
  directions: it counts Produce requests, and once armed it drops the response to the next
  Produce request (or the next request of another API, EndTxn say) and cuts that connection,
  so a batch is in the log (a transaction committed) while its producer only sees a lost
  connection.
* :func:`kip_producer`: a ``kipproducer.Producer`` with test-friendly timings.
* :func:`race_writer`: one process of the racing conditional writers test.
"""

from __future__ import annotations

import asyncio
import struct
import sys
import threading
import time
from pathlib import Path
from typing import Any

_PRODUCER_TESTS = str(Path(__file__).resolve().parents[1] / "producer")
if _PRODUCER_TESTS not in sys.path:
    sys.path.insert(0, _PRODUCER_TESTS)

from confluent_kafka import Consumer, TopicPartition  # noqa: E402
from producer_support import (  # noqa: E402
    KipProcess,
    Rec,
    TansuBroker,
    TcpProxy,
    create_topic,
    read_confluent,
    read_kafka_python,
    tansu_binary,
    unique,
    wait_until,
)

__all__ = [
    "END_TXN", "KipProcess", "ProduceWatchProxy", "Rec", "TansuBroker", "TcpProxy",
    "appended_with_key_conditions",
    "create_topic", "KeyReports", "in_threads", "kip_producer", "key_produced", "one_winner",
    "race_writer", "read_confluent",
    "read_kafka_python", "tansu_binary", "unique", "wait_until", "watermarks",
]

PRODUCE = 0
END_TXN = 26


def kip_producer(bootstrap: str, **extra: Any):
    """A kipproducer.Producer with short retry backoffs and a bounded delivery timeout."""
    from kipproducer import Producer

    config = {"bootstrap.servers": bootstrap, "linger.ms": 5, "retry.backoff.ms": 20,
              "retry.backoff.max.ms": 200, "message.timeout.ms": 30_000,
              "socket.timeout.ms": 10_000}
    config.update({k.replace("_", "."): v for k, v in extra.items()})
    return Producer(config)


def watermarks(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("wm")})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
    finally:
        consumer.close()


# -- a proxy that knows where the Kafka frames are ------------------------------------------------


class _Frames:
    """Frame boundaries of one direction of a Kafka connection (int32 size prefix).

    ``feed(data)`` returns the frames that start in ``data`` as (position, index) and the
    frames whose first two body bytes (a request's api key) became known as (index, key).
    """

    HEAD = 6  # size prefix + api key (a response's correlation id is longer still)

    def __init__(self) -> None:
        self.count = 0
        self._head = bytearray()
        self._left = 0

    def feed(self, data: bytes) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        starts: list[tuple[int, int]] = []
        heads: list[tuple[int, int]] = []
        i, n = 0, len(data)
        while i < n:
            if self._left:
                step = min(self._left, n - i)
                self._left -= step
                i += step
                continue
            if not self._head:
                starts.append((i, self.count))
                self.count += 1
            take = min(self.HEAD - len(self._head), n - i)
            self._head += data[i:i + take]
            i += take
            if len(self._head) == self.HEAD:
                size, key = struct.unpack(">ih", self._head)
                heads.append((self.count - 1, key))
                self._left = size - 2
                self._head.clear()
        return starts, heads


class ProduceWatchProxy(TcpProxy):
    """:class:`TcpProxy` that counts Produce requests and can lose one Produce response.

    ``drop_next_produce_response()`` arms it: the next Produce request goes to the broker
    unchanged, but its response never reaches the client; the connection is cut at the
    first byte of that response (``dropped`` is set then). The broker handled the request
    in full, so the batch is in the log while the producer only knows the connection died.
    With ``api_key`` (``END_TXN``, say) the next request of that API instead; with
    ``refuse_s`` every new connection is also refused (closed at once) for that many seconds
    after the cut: the broker stays out of reach longer than the client waits.
    """

    def __init__(self, target_port: int, port: int = 0) -> None:
        self.produce_requests = 0
        self.dropped = threading.Event()
        self._armed: int | None = None  # the API whose next response to lose
        self._refuse_s = 0.0
        self._refuse_until = 0.0
        super().__init__(target_port, port)

    def drop_next_produce_response(self, api_key: int = PRODUCE, refuse_s: float = 0.0) -> None:
        self.dropped.clear()
        self._refuse_s = refuse_s
        self._armed = api_key

    @property
    def refusing(self) -> bool:
        """Whether new connections are refused now (``refuse_s`` after a cut)."""
        return time.monotonic() < self._refuse_until

    async def _relay(self, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter, up_reader: asyncio.StreamReader,
                     up_writer: asyncio.StreamWriter) -> None:
        drop_index: list[int] = []  # the response (by index on this connection) to lose

        def abort() -> None:
            writer.transport.abort()
            up_writer.transport.abort()

        if time.monotonic() < self._refuse_until:
            abort()
            return

        async def requests() -> None:
            frames = _Frames()
            try:
                while data := await reader.read(1 << 16):
                    for index, api_key in frames.feed(data)[1]:
                        if api_key == PRODUCE:
                            self.produce_requests += 1
                        if api_key == self._armed:
                            self._armed = None
                            drop_index.append(index)
                    up_writer.write(data)  # parsed first: the drop is armed before the answer
                    await up_writer.drain()
            except (OSError, RuntimeError):
                pass
            finally:
                abort()

        async def responses() -> None:
            frames = _Frames()
            try:
                while data := await up_reader.read(1 << 16):
                    starts = frames.feed(data)[0]
                    cut_at = next((pos for pos, index in starts if index in drop_index), None)
                    if cut_at is not None:
                        writer.write(data[:cut_at])  # earlier responses still arrive
                        await writer.drain()
                        self._refuse_until = time.monotonic() + self._refuse_s
                        self.dropped.set()
                        return
                    writer.write(data)
                    await writer.drain()
            except (OSError, RuntimeError):
                pass
            finally:
                abort()

        await asyncio.gather(requests(), responses())


# -- racing conditional writers (one process each) ------------------------------------------------


def race_value(writer: int, attempt: int, index: int) -> bytes:
    return b"w%d-a%d-%d" % (writer, attempt, index)


def race_writer(bootstrap: str, topic: str, writer: int, rounds: int, k: int,
                start: Any, results: Any) -> None:
    """Append ``rounds`` batches of ``k`` records to ``topic``[0], each conditional on the log
    end this writer last learnt (a successful append, or an OffsetMismatchError's
    ``log_end_offset``), once every writer has reached the ``start`` barrier. Every attempt
    has its own tag, so a refused batch that landed anyway shows in the log. Puts a dict of
    what happened on ``results``."""
    from kipproducer.errors import OffsetMismatchError

    out: dict[str, Any] = {"writer": writer, "successes": [], "mismatches": [], "error": None}
    try:
        producer = kip_producer(bootstrap, linger_ms=0)
        try:
            # Connected before the race: ask for an impossible log end; the refusal tells
            # where the log ends (attempt -1 must never be in the log).
            try:
                producer.append(topic, [race_value(writer, -1, 0)], partition=0,
                                expected_offset=1 << 40, timeout=30)
                raise AssertionError("an append expecting offset 2**40 succeeded")
            except OffsetMismatchError as exc:
                expected = exc.log_end_offset
            start.wait(60)  # a Barrier of all the writers: they start together
            attempt = 0
            deadline = time.monotonic() + 90
            while len(out["successes"]) < rounds:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"writer {writer}: {len(out['successes'])} rounds "
                                       f"after {attempt} attempts")
                values = [race_value(writer, attempt, i) for i in range(k)]
                try:
                    first = producer.append(topic, values, partition=0,
                                            expected_offset=expected, timeout=30)
                except OffsetMismatchError as exc:
                    out["mismatches"].append((attempt, expected, exc.log_end_offset))
                    expected = exc.log_end_offset
                else:
                    out["successes"].append((attempt, first))
                    expected = first + k
                attempt += 1
        finally:
            producer.close()
    except BaseException as exc:  # reported to the test, which fails on it
        out["error"] = repr(exc)
    results.put(out)


class KeyReports:
    """Delivery reports as (error, partition, offset, key) in the order they came (the
    per-key conditional tests)."""

    def __init__(self) -> None:
        self.items: list = []
        self.lock = threading.Lock()

    def __call__(self, err, msg) -> None:
        with self.lock:
            self.items.append((err, msg.partition(), msg.offset(), msg.key()))


def key_produced(p, topic, key, value, expected, **kw):
    """One record with ``expected_key_offset=expected``, flushed: its report as KeyReports
    holds it."""
    reports = KeyReports()
    p.produce(topic, value, key, expected_key_offset=expected, on_delivery=reports, **kw)
    assert p.flush(20) == 0
    [report] = reports.items
    return report


def in_threads(count: int, target, timeout: float = 90.0) -> None:
    """``target(i)`` for i in range(count), each in a thread of its own, all joined."""
    threads = [threading.Thread(target=target, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)


def one_winner(outcomes: list) -> tuple:
    """The one report without an error among racing writers' reports ((error, partition,
    offset, ...)); every other one must be KEY_OFFSET_MISMATCH naming the winner's offset."""
    from kipproducer.errors import KEY_OFFSET_MISMATCH

    winners = [o for o in outcomes if o[0] is None]
    assert len(winners) == 1, outcomes
    for o in outcomes:
        if o[0] is not None:
            assert (o[0].code(), o[0].actual) == (KEY_OFFSET_MISMATCH, winners[0][2]), o
    return winners[0]


def appended_with_key_conditions(p, topic: str) -> list[int]:
    """Producer.append() with ``expected_key_offsets=`` on a new one-partition topic: two
    aggregates created, a stale pair refused as a whole with KeyOffsetMismatchError naming
    the stale key (not its neighbour, which was refused only with it), then the pair again
    on the actual offsets. Returns the two successful calls' first offsets; four records are
    in the partition."""
    import pytest

    from kipproducer.errors import KEY_ABSENT, KeyOffsetMismatchError

    keys = [b"order-1", b"order-2"]
    first = p.append(topic, [b"created", b"created"], keys=keys, partition=0,
                     expected_key_offsets=[KEY_ABSENT, KEY_ABSENT])
    with pytest.raises(KeyOffsetMismatchError) as refused:
        p.append(topic, [b"paid", b"paid"], keys=keys, partition=0,
                 expected_key_offsets=[first, KEY_ABSENT])
    err = refused.value
    assert (err.topic, err.partition, err.key) == (topic, 0, b"order-2")
    assert (err.expected, err.actual) == (KEY_ABSENT, first + 1)
    second = p.append(topic, [b"paid", b"paid"], keys=keys, partition=0,
                      expected_key_offsets=[first, first + 1])
    assert second > first + 1
    return [first, second]
