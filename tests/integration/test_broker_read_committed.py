"""read_committed and read_uncommitted consumers (librdkafka, kafka-python, aiokafka) against
transactional data in the broker's log.

The transactions are written straight into the partition log of an in-process EmbeddedBroker
(``PartitionLog.append`` with transactional batches, ``append_marker`` for COMMIT/ABORT), the
way the transaction coordinator writes markers; the clients read them over the wire, stock.

Partition 0 of the shared topic holds, by offset:

    0 c0, 1 c1 (producer 1000, committed by the marker at 2)
    3 a0, 4 a1 (producer 1001, aborted by the marker at 6)   5 p0 (no transaction)
    7 c2 (producer 1000, committed by the marker at 8)
    9 o0 (producer 1002, open)                                10 p1 (no transaction)

so the last stable offset is 9 and the high watermark 11.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka import Consumer, IsolationLevel, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from integration_support import create_topics, unique, wait_until

from kipproducer.broker.embedded import EmbeddedBroker
from kipproducer.broker.storage import PartitionLog
from kipproducer.protocol import build_request, decode_response, encode_request_frame
from kipproducer.records import decode_batches, encode_batch

TIMEOUT = 15.0
COMMITTED = [b"c0", b"c1", b"p0", b"c2"]
UNCOMMITTED = [b"c0", b"c1", b"a0", b"a1", b"p0", b"c2", b"o0", b"p1"]
LSO, HW = 9, 11


def txn_batch(pid: int, seq: int, *values: bytes) -> bytearray:
    return bytearray(
        encode_batch(
            [(None, v, None, None) for v in values],
            producer_id=pid,
            producer_epoch=0,
            base_sequence=seq,
            transactional=True,
        )
    )


def plain_batch(*values: bytes) -> bytearray:
    return bytearray(encode_batch([(None, v, None, None) for v in values]))


@dataclass
class Setup:
    broker: EmbeddedBroker
    topic: str
    log: PartitionLog
    p0_timestamp: int
    o0_timestamp: int

    def wake_fetchers(self) -> None:
        self.broker.call(lambda b: b.notify_appended())


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> Iterator[Setup]:
    with EmbeddedBroker(tmp_path_factory.mktemp("read-committed")) as broker:
        topic = unique("txn")
        create_topics(broker.bootstrap_servers, {topic: 1})
        log = broker.call(lambda b: b.logs.get_log(topic, 0))
        log.append(txn_batch(1000, 0, b"c0", b"c1"), assign_offsets=True)
        log.append_marker(1000, 0, commit=True)
        log.append(txn_batch(1001, 0, b"a0", b"a1"), assign_offsets=True)
        # Read before p0 is encoded (stamped with the time then): taken after its append, a
        # millisecond tick in between made the marker after p0 the first record at or after it.
        p0_timestamp = int(time.time() * 1000)
        log.append(plain_batch(b"p0"), assign_offsets=True)
        log.append_marker(1001, 0, commit=False)
        log.append(txn_batch(1000, 2, b"c2"), assign_offsets=True)
        log.append_marker(1000, 0, commit=True)
        time.sleep(0.01)  # o0 gets a timestamp after everything before it
        o0_timestamp = int(time.time() * 1000)
        log.append(txn_batch(1002, 0, b"o0"), assign_offsets=True)
        log.append(plain_batch(b"p1"), assign_offsets=True)
        assert (log.last_stable_offset, log.high_watermark) == (LSO, HW)
        setup = Setup(broker, topic, log, p0_timestamp, o0_timestamp)
        setup.wake_fetchers()
        yield setup


def test_librdkafka_consumers_see_committed_or_all_records(setup):
    for level, expected in (("read_committed", COMMITTED), ("read_uncommitted", UNCOMMITTED)):
        consumer = Consumer(
            {
                "bootstrap.servers": setup.broker.bootstrap_servers,
                "group.id": unique("rc"),
                "isolation.level": level,
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "check.crcs": True,
            }
        )
        try:
            consumer.assign([TopicPartition(setup.topic, 0, 0)])
            values: list[bytes] = []
            deadline = time.monotonic() + TIMEOUT
            while time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is None:
                    continue
                if msg.error():
                    # Partition EOF: the consumer reached the end it may read (LSO or HW).
                    assert msg.error().code() == -191, msg.error()
                    break
                values.append(msg.value())
            assert values == expected, level
            low, high = consumer.get_watermark_offsets(
                TopicPartition(setup.topic, 0), timeout=TIMEOUT, cached=False
            )
            assert (low, high) == (0, LSO if level == "read_committed" else HW)
        finally:
            consumer.close()


def test_list_offsets_follows_the_isolation_level(setup):
    admin = AdminClient({"bootstrap.servers": setup.broker.bootstrap_servers})
    tp = TopicPartition(setup.topic, 0)

    def offset(spec: OffsetSpec, level: IsolationLevel) -> int:
        futures = admin.list_offsets({tp: spec}, isolation_level=level)
        return futures[tp].result(TIMEOUT).offset

    committed, uncommitted = IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED
    assert offset(OffsetSpec.latest(), committed) == LSO
    assert offset(OffsetSpec.latest(), uncommitted) == HW
    assert offset(OffsetSpec.earliest(), committed) == 0
    # A timestamp whose first record lies below the LSO is found under both levels...
    assert offset(OffsetSpec.for_timestamp(setup.p0_timestamp), committed) <= 5
    # ...one whose first record is at or above it is not found under read_committed (Kafka
    # filters the answer: it does not look for an earlier one).
    assert offset(OffsetSpec.for_timestamp(setup.o0_timestamp), uncommitted) == 9
    assert offset(OffsetSpec.for_timestamp(setup.o0_timestamp), committed) == -1


def test_kafka_python_consumers(setup):
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    tp = KTopicPartition(setup.topic, 0)
    for level, expected in (("read_committed", COMMITTED), ("read_uncommitted", UNCOMMITTED)):
        consumer = KafkaConsumer(
            bootstrap_servers=setup.broker.bootstrap_servers,
            isolation_level=level,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            request_timeout_ms=10_000,
        )
        try:
            consumer.assign([tp])
            consumer.seek(tp, 0)
            values: list[bytes] = []
            deadline = time.monotonic() + TIMEOUT
            while len(values) < len(expected) and time.monotonic() < deadline:
                for records in consumer.poll(timeout_ms=200).values():
                    values.extend(r.value for r in records)
            assert not [r for rs in consumer.poll(timeout_ms=300).values() for r in rs]
            assert values == expected, level
            assert consumer.end_offsets([tp])[tp] == (LSO if level == "read_committed" else HW)
        finally:
            consumer.close()


def test_aiokafka_consumers(setup):
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATopicPartition

    async def read(level: str) -> tuple[list[bytes], int]:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=setup.broker.bootstrap_servers,
            isolation_level=level,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        await consumer.start()
        try:
            tp = ATopicPartition(setup.topic, 0)
            consumer.assign([tp])
            consumer.seek(tp, 0)
            values: list[bytes] = []
            deadline = time.monotonic() + TIMEOUT
            while time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=300)
                got = [r.value for records in batches.values() for r in records]
                if not got and values:
                    break
                values.extend(got)
            end = (await consumer.end_offsets([tp]))[tp]
            return values, end
        finally:
            await consumer.stop()

    assert asyncio.run(read("read_committed")) == (COMMITTED, LSO)
    assert asyncio.run(read("read_uncommitted")) == (UNCOMMITTED, HW)


def raw_fetch(setup: Setup, version: int, isolation_level: int):
    """One Fetch over a plain socket; the answer for partition 0."""
    request = build_request(
        1,
        version,
        replica_id=-1,
        max_wait=0,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=isolation_level,
        topics=[
            {
                "topic": setup.topic,
                "partitions": [
                    {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
                ],
            }
        ],
    )
    address = (setup.broker.host, setup.broker.port)
    with socket.create_connection(address, timeout=TIMEOUT) as sock:
        sock.sendall(encode_request_frame(7, "raw", request))
        received = b""
        while len(received) < 4 or len(received) < 4 + struct.unpack(">i", received[:4])[0]:
            chunk = sock.recv(65536)
            assert chunk, "the broker closed the connection"
            received += chunk
    (partition,) = decode_response(received[4:], 1, version).body.responses[0].partitions
    return partition


@pytest.mark.parametrize("version", [4, 11])
def test_fetch_answers_by_isolation_level_on_the_wire(setup, version):
    committed = raw_fetch(setup, version, 1)
    assert (committed.high_watermark, committed.last_stable_offset) == (HW, LSO)
    assert [(t.producer_id, t.first_offset) for t in committed.aborted_transactions] == [
        (1001, 3)
    ]
    batches = list(decode_batches(committed.records, validate=True, strict=True))
    assert max(b.last_offset for b in batches) < LSO
    uncommitted = raw_fetch(setup, version, 0)
    assert (uncommitted.high_watermark, uncommitted.last_stable_offset) == (HW, LSO)
    assert uncommitted.aborted_transactions is None
    batches = list(decode_batches(uncommitted.records, validate=True, strict=True))
    assert max(b.last_offset for b in batches) == HW - 1


def test_an_open_transaction_blocks_read_committed_until_it_commits(setup):
    """Runs last: it commits the open transaction (the marker takes offset 11)."""
    consumer = Consumer(
        {
            "bootstrap.servers": setup.broker.bootstrap_servers,
            "group.id": unique("rc"),
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 5_000,  # a long poll: the marker's wake-up must end it
        }
    )
    try:
        consumer.assign([TopicPartition(setup.topic, 0, 0)])
        values: list[bytes] = []
        wait_until(
            lambda: values.extend(m.value() for m in consumer.consume(10, 0.2) if not m.error())
            or len(values) >= len(COMMITTED),
            TIMEOUT,
            "the committed records",
        )
        assert values == COMMITTED
        assert not consumer.consume(10, 1.0)  # parked at the LSO
        setup.log.append_marker(1002, 0, commit=True)
        setup.wake_fetchers()
        assert setup.log.last_stable_offset == setup.log.high_watermark == 12
        wait_until(
            lambda: values.extend(m.value() for m in consumer.consume(10, 0.2) if not m.error())
            or len(values) >= len(COMMITTED) + 2,
            TIMEOUT,
            "the records of the committed transaction",
        )
        assert values == [*COMMITTED, b"o0", b"p1"]
    finally:
        consumer.close()
