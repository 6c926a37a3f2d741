"""Transactional writers and isolation-aware readers of three real clients, one interface.

The transaction tests run the same rounds through librdkafka (confluent_kafka),
kafka-python, aiokafka and kipproducer's own engine (kipproducer.Producer), then read the
result back with each client's consumer under both isolation levels. Every adapter is a thin
shell over the client's own API: what is tested is the client talking to the broker, not
this file.

- ``WRITERS[name](bootstrap, transactional_id)``: ``init()``, ``begin()``, ``send(topic,
  partition, value)``, ``flush()`` (every record sent is acknowledged, the transaction stays
  open), ``commit()``, ``abort()``, ``close()``.
- ``READERS[name](bootstrap, topic, partitions, isolation, expected)``: the values read from
  the beginning, as ``{partition: [(offset, value), ...]}``; reads until ``expected`` records
  came and then a moment longer, so extra records are seen too.
- ``END_OFFSETS[name](bootstrap, topic, partitions, isolation)``: ``{partition: end}`` from
  ListOffsets LATEST at that isolation level (the last stable offset under read_committed).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from kipproducer import Producer as KipProducer

READ_TIMEOUT_S = 20.0
EXTRA_WAIT_S = 0.5
Isolation = str  # "read_committed" | "read_uncommitted"
Read = dict[int, list[tuple[int, bytes]]]


# -- writers ----------------------------------------------------------------------------------


class ConfluentWriter:
    producer_class: type = Producer

    def __init__(self, bootstrap: str, transactional_id: str, **extra: Any) -> None:
        self.producer = self.producer_class({
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "linger.ms": 5,
            **extra,
        })

    def init(self, timeout: float = 30.0) -> None:
        self.producer.init_transactions(timeout)

    def begin(self) -> None:
        self.producer.begin_transaction()

    def send(self, topic: str, partition: int, value: bytes) -> None:
        self.producer.produce(topic, value, partition=partition)

    def flush(self) -> None:
        assert self.producer.flush(10) == 0, "records left unsent"

    def commit(self, timeout: float = 30.0) -> None:
        self.producer.commit_transaction(timeout)

    def abort(self, timeout: float = 30.0) -> None:
        self.producer.abort_transaction(timeout)

    def close(self) -> None:
        self.producer.flush(5)


class KipproducerWriter(ConfluentWriter):
    """kipproducer.Producer, the drop-in: its own engine runs the transactions."""

    producer_class = KipProducer


class KafkaPythonWriter:
    def __init__(self, bootstrap: str, transactional_id: str) -> None:
        from kafka import KafkaProducer

        self.producer = KafkaProducer(
            bootstrap_servers=bootstrap, transactional_id=transactional_id, linger_ms=5)

    def init(self) -> None:
        self.producer.init_transactions()

    def begin(self) -> None:
        self.producer.begin_transaction()

    def send(self, topic: str, partition: int, value: bytes) -> None:
        self.producer.send(topic, value, partition=partition)

    def flush(self) -> None:
        self.producer.flush(timeout=10)

    def commit(self) -> None:
        self.producer.commit_transaction()

    def abort(self) -> None:
        self.producer.abort_transaction()

    def close(self) -> None:
        self.producer.close(timeout=5)


class AiokafkaWriter:
    """aiokafka is asyncio-only: each call runs on the writer's own event loop."""

    def __init__(self, bootstrap: str, transactional_id: str) -> None:
        from aiokafka import AIOKafkaProducer

        self.loop = asyncio.new_event_loop()
        self.pending: list[asyncio.Future] = []

        async def make() -> Any:
            return AIOKafkaProducer(
                bootstrap_servers=bootstrap, transactional_id=transactional_id, linger_ms=5)

        self.producer = self._run(make())

    def _run(self, coro: Any, timeout: float = 30.0) -> Any:
        async def bounded() -> Any:
            async with asyncio.timeout(timeout):
                return await coro

        return self.loop.run_until_complete(bounded())

    def init(self) -> None:
        self._run(self.producer.start())

    def begin(self) -> None:
        self._run(self.producer.begin_transaction())

    def send(self, topic: str, partition: int, value: bytes) -> None:
        self.pending.append(self._run(self.producer.send(topic, value, partition=partition)))

    def flush(self) -> None:
        for sent in self.pending:  # each send's acknowledgement
            self._run(sent)

    def commit(self) -> None:
        self._run(self.producer.commit_transaction())
        self.pending.clear()

    def abort(self) -> None:
        self._run(self.producer.abort_transaction())
        self.pending.clear()

    def close(self) -> None:
        try:
            self._run(self.producer.stop(), timeout=10)
        finally:
            self.loop.close()


WRITERS: dict[str, Callable[[str, str], Any]] = {
    "confluent": ConfluentWriter,
    "kafka-python": KafkaPythonWriter,
    "aiokafka": AiokafkaWriter,
    "kipproducer": KipproducerWriter,
}


# -- readers ----------------------------------------------------------------------------------


class _Collector:
    """What a reader has seen; ``more()`` says whether to poll again: until ``expected``
    records came and ``EXTRA_WAIT_S`` more passed (so extra records are caught too), or until
    ``READ_TIMEOUT_S`` (the caller's assertion then shows what was missing)."""

    def __init__(self, partitions: int, expected: int) -> None:
        self.rows: Read = {p: [] for p in range(partitions)}
        self.expected = expected
        self.got = 0
        self.deadline = time.monotonic() + READ_TIMEOUT_S
        self.quiet_until: float | None = None

    def add(self, partition: int, offset: int, value: bytes) -> None:
        self.rows[partition].append((offset, value))
        self.got += 1

    def more(self) -> bool:
        now = time.monotonic()
        if self.got >= self.expected:
            self.quiet_until = self.quiet_until or now + EXTRA_WAIT_S
            if now >= self.quiet_until:
                return False
        return now < self.deadline

    def result(self) -> Read:
        return {p: sorted(rows) for p, rows in self.rows.items()}


def read_confluent(bootstrap: str, topic: str, partitions: int, isolation: Isolation,
                   expected: int) -> Read:
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"reader-{time.monotonic_ns()}",
        "enable.auto.commit": False,
        "isolation.level": isolation,
        "enable.partition.eof": False,
    })
    seen = _Collector(partitions, expected)
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        while seen.more():
            for msg in consumer.consume(1000, timeout=0.2):
                if msg.error() is not None:
                    raise AssertionError(f"consumer error: {msg.error()}")
                seen.add(msg.partition(), msg.offset(), msg.value())
        return seen.result()
    finally:
        consumer.close()


def read_kafka_python(bootstrap: str, topic: str, partitions: int, isolation: Isolation,
                      expected: int) -> Read:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation,
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             group_id=None, consumer_timeout_ms=200)
    seen = _Collector(partitions, expected)
    try:
        consumer.assign([KTP(topic, p) for p in range(partitions)])
        consumer.seek_to_beginning()
        while seen.more():
            for records in consumer.poll(timeout_ms=200).values():
                for r in records:
                    seen.add(r.partition, r.offset, r.value)
        return seen.result()
    finally:
        consumer.close()


def read_aiokafka(bootstrap: str, topic: str, partitions: int, isolation: Isolation,
                  expected: int) -> Read:
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATP

    async def run() -> Read:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation,
                                    enable_auto_commit=False, auto_offset_reset="earliest")
        seen = _Collector(partitions, expected)
        await consumer.start()
        try:
            consumer.assign([ATP(topic, p) for p in range(partitions)])
            await consumer.seek_to_beginning()
            while seen.more():
                batch = await consumer.getmany(timeout_ms=200)
                for records in batch.values():
                    for r in records:
                        seen.add(r.partition, r.offset, r.value)
            return seen.result()
        finally:
            await consumer.stop()

    return asyncio.run(asyncio.wait_for(run(), READ_TIMEOUT_S + 15))


READERS: dict[str, Callable[..., Read]] = {
    "confluent": read_confluent,
    "kafka-python": read_kafka_python,
    "aiokafka": read_aiokafka,
}


# -- end offsets ------------------------------------------------------------------------------


def end_offsets_confluent(bootstrap: str, topic: str, partitions: int,
                          isolation: Isolation) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "end-offsets",
                         "isolation.level": isolation})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10,
                                              cached=False)[1]
            for p in range(partitions)
        }
    finally:
        consumer.close()


def end_offsets_kafka_python(bootstrap: str, topic: str, partitions: int,
                             isolation: Isolation) -> dict[int, int]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation)
    try:
        found = consumer.end_offsets([KTP(topic, p) for p in range(partitions)])
        return {tp.partition: offset for tp, offset in found.items()}
    finally:
        consumer.close()


def end_offsets_aiokafka(bootstrap: str, topic: str, partitions: int,
                         isolation: Isolation) -> dict[int, int]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATP

    async def run() -> dict[int, int]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation)
        await consumer.start()
        try:
            found = await consumer.end_offsets([ATP(topic, p) for p in range(partitions)])
            return {tp.partition: offset for tp, offset in found.items()}
        finally:
            await consumer.stop()

    return asyncio.run(asyncio.wait_for(run(), 30))


END_OFFSETS: dict[str, Callable[..., dict[int, int]]] = {
    "confluent": end_offsets_confluent,
    "kafka-python": end_offsets_kafka_python,
    "aiokafka": end_offsets_aiokafka,
}


# -- a model of what the log holds ------------------------------------------------------------


class TxnModel:
    """Where each record and each marker of a series of transactions lands, per partition.

    Kafka's rule: a transaction's records take consecutive offsets per partition in the order
    sent, and its end (commit or abort) writes one marker, taking one offset, in every
    partition it wrote to.
    """

    def __init__(self, partitions: int) -> None:
        self.next_offset = dict.fromkeys(range(partitions), 0)
        self.committed: Read = {p: [] for p in range(partitions)}
        self.written: Read = {p: [] for p in range(partitions)}
        self.open: Read = {p: [] for p in range(partitions)}

    def send(self, partition: int, value: bytes) -> None:
        offset = self.next_offset[partition]
        self.next_offset[partition] = offset + 1
        self.open[partition].append((offset, value))
        self.written[partition].append((offset, value))

    def end(self, commit: bool) -> None:
        for p, rows in self.open.items():
            if rows:
                self.next_offset[p] += 1  # the marker
                if commit:
                    self.committed[p].extend(rows)
        self.open = {p: [] for p in self.open}

    def count(self, read: Read) -> int:
        return sum(len(rows) for rows in read.values())

    def last_stable_offsets(self) -> dict[int, int]:
        return {p: rows[0][0] if rows else self.next_offset[p] for p, rows in self.open.items()}
