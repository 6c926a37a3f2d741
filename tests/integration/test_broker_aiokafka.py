"""aiokafka against the broker subprocess: produce, consume, group commit and resume.

The tests are sync functions that run their own event loop (asyncio.run), bounded by
asyncio.timeout so a hang fails instead of stalling the suite.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from integration_support import KipBroker, consume_records, create_topics, unique

TIMEOUT = 20.0
PARTITIONS = 2


@pytest.fixture(scope="module")
def broker(module_broker_factory) -> KipBroker:
    return module_broker_factory()


def make_consumer(broker: KipBroker, *topics: str, **extra) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(
        *topics,
        bootstrap_servers=broker.bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        check_crcs=True,
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
        **extra,
    )


async def take(c: AIOKafkaConsumer, n: int) -> list:
    """Exactly ``n`` records (a short extra wait shows there are no more)."""
    out: list = []
    while len(out) < n:
        for records in (await c.getmany(timeout_ms=200, max_records=n - len(out))).values():
            out.extend(records)
    assert not await c.getmany(timeout_ms=300), "more records than produced"
    return out


@pytest.mark.parametrize(
    "settings",
    [
        {"acks": 1},
        {"acks": "all", "enable_idempotence": True},
        {"acks": "all", "enable_idempotence": True, "compression_type": "gzip"},
        {"acks": "all", "compression_type": "zstd", "linger_ms": 5},
    ],
    ids=["acks1", "idempotent", "gzip", "zstd"],
)
def test_produce_and_consume(broker: KipBroker, settings: dict) -> None:
    topic = unique("aio")
    create_topics(broker.bootstrap, {topic: PARTITIONS})
    base_ts = int(time.time() * 1000) - 60_000

    async def run() -> tuple[list, list]:
        async with asyncio.timeout(TIMEOUT):
            producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, **settings)
            await producer.start()
            try:
                futures = [
                    await producer.send(
                        topic,
                        b"value-%d" % i,
                        key=b"k%d" % i,
                        partition=i % PARTITIONS,
                        timestamp_ms=base_ts + i,
                        headers=[("n", b"%d" % i)],
                    )
                    for i in range(400)
                ]
                sent = list(await asyncio.gather(*futures))
            finally:
                await producer.stop()
            c = make_consumer(broker, topic)
            await c.start()
            try:
                return sent, await take(c, 400)
            finally:
                await c.stop()

    sent, got = asyncio.run(run())
    for partition in range(PARTITIONS):
        assert [m.offset for m in sent if m.partition == partition] == list(range(200))
    by_value = {r.value: r for r in got}
    for i, meta in enumerate(sent):
        r = by_value[b"value-%d" % i]
        assert (r.partition, r.offset, r.key, r.timestamp) == (
            meta.partition,
            meta.offset,
            b"k%d" % i,
            base_ts + i,
        )
        assert list(r.headers) == [("n", b"%d" % i)]
    assert len(consume_records(broker.bootstrap, topic, 400, timeout=TIMEOUT)) == 400


def test_group_commit_then_new_consumer_resumes(broker: KipBroker) -> None:
    topic, group = unique("aio-group"), unique("aio-group")
    create_topics(broker.bootstrap, {topic: PARTITIONS})
    committed = {0: 11, 1: 90}

    async def run() -> list:
        async with asyncio.timeout(TIMEOUT * 2):
            producer = AIOKafkaProducer(
                bootstrap_servers=broker.bootstrap, acks="all", enable_idempotence=True
            )
            await producer.start()
            try:
                for i in range(200):
                    await producer.send(topic, b"%d-%d" % (i % 2, i // 2), partition=i % 2)
                await producer.flush()
            finally:
                await producer.stop()

            first = make_consumer(broker, topic, group_id=group)
            await first.start()
            try:
                await take(first, 200)
                await first.commit({TopicPartition(topic, p): o for p, o in committed.items()})
                for p, o in committed.items():
                    assert await first.committed(TopicPartition(topic, p)) == o
            finally:
                await first.stop()

            second = make_consumer(broker, topic, group_id=group)
            await second.start()
            try:
                return await take(second, 200 - sum(committed.values()))
            finally:
                await second.stop()

    got = asyncio.run(run())
    for p, start in committed.items():
        seen = [(r.offset, r.value) for r in got if r.partition == p]
        assert seen == [(o, b"%d-%d" % (p, o)) for o in range(start, 100)]
