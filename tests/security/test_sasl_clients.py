"""Stock clients over SASL_PLAINTEXT against ``kip broker --sasl ...`` run as a subprocess.

librdkafka (confluent-kafka) with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512; kafka-python and
aiokafka with SCRAM. A wrong password is an authentication error on the client, and nothing
is written.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient
from security_support import ALL_MECHANISMS, BrokerFactory, consume_values, sasl_conf, unique

from kipproducer.broker.security import UserStore

USER, PASSWORD = "alice", "alice-pw"


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory):
    """``kip broker`` with every mechanism; alice is added to the data dir before start."""
    base: Path = tmp_path_factory.mktemp("sasl-broker")
    UserStore(base / "data").add(USER, PASSWORD)
    factory = BrokerFactory(base)
    broker = factory({"sasl.enabled.mechanisms": ALL_MECHANISMS}, data_dir=base / "data")
    yield broker
    factory.close()


def produce(conf: dict, topic: str, values: list[bytes], timeout: float = 20) -> list:
    producer = Producer({**conf, "linger.ms": 5})
    reports: list = []
    for v in values:
        producer.produce(topic, v, on_delivery=lambda err, msg: reports.append((err, msg)))
    assert producer.flush(timeout) == 0, "messages still in flight"
    return reports


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_confluent_produces_and_consumes(sasl_broker, mechanism):
    conf = sasl_conf(sasl_broker.bootstrap, mechanism, USER, PASSWORD)
    topic = unique("sasl")
    values = [b"%s-%d" % (mechanism.encode(), i) for i in range(50)]
    reports = produce({**conf, "enable.idempotence": True}, topic, values)
    assert [err for err, _ in reports] == [None] * 50
    assert consume_values(conf, topic, 50) == values


def test_confluent_wrong_password_is_an_authentication_error(sasl_broker):
    topic = unique("denied")
    errors: list[KafkaError] = []
    conf = sasl_conf(sasl_broker.bootstrap, "SCRAM-SHA-256", USER, "wrong",
                     error_cb=errors.append, **{"reconnect.backoff.ms": 1000})
    producer = Producer(conf)
    producer.produce(topic, b"must not arrive")
    deadline = time.monotonic() + 10
    while not any(e.code() == KafkaError._AUTHENTICATION for e in errors):
        assert time.monotonic() < deadline, errors
        producer.poll(0.2)
    failure = next(e for e in errors if e.code() == KafkaError._AUTHENTICATION)
    assert "invalid username or password" in failure.str()
    assert "SCRAM-SHA-256" in failure.str()
    producer.purge()
    producer.flush(1)
    del producer
    # Nothing reached the broker: the topic was not even auto-created.
    good = sasl_conf(sasl_broker.bootstrap, "PLAIN", USER, PASSWORD)
    assert topic not in AdminClient(good).list_topics(timeout=10).topics
    sasl_broker.wait_for_log("SASL authentication failed: invalid username or password")


def test_kafka_python_scram_produces_and_consumes(sasl_broker):
    from kafka import KafkaConsumer, KafkaProducer

    conf = dict(bootstrap_servers=sasl_broker.bootstrap, security_protocol="SASL_PLAINTEXT",
                sasl_mechanism="SCRAM-SHA-256", sasl_plain_username=USER,
                sasl_plain_password=PASSWORD)
    topic = unique("kp")
    producer = KafkaProducer(**conf)
    for i in range(20):
        producer.send(topic, b"kp-%d" % i).get(timeout=20)
    producer.close()
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", group_id=unique("kpg"),
                             consumer_timeout_ms=15000, **conf)
    got = []
    for record in consumer:
        got.append(record.value)
        if len(got) == 20:
            break
    consumer.close()
    assert got == [b"kp-%d" % i for i in range(20)]


def test_kafka_python_wrong_password_fails(sasl_broker, caplog):
    from kafka import KafkaProducer
    from kafka.errors import KafkaTimeoutError

    # kafka-python 3 retries a failed bootstrap until bootstrap_timeout_ms; the reason is in
    # its log, with the broker's message.
    caplog.set_level(logging.WARNING, logger="kafka")
    with pytest.raises(KafkaTimeoutError, match="Unable to bootstrap"):
        KafkaProducer(bootstrap_servers=sasl_broker.bootstrap,
                      security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-512",
                      sasl_plain_username=USER, sasl_plain_password="wrong",
                      bootstrap_timeout_ms=2000)
    assert "invalid username or password" in caplog.text


def test_aiokafka_scram_produces_and_consumes(sasl_broker):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    conf = dict(bootstrap_servers=sasl_broker.bootstrap, security_protocol="SASL_PLAINTEXT",
                sasl_mechanism="SCRAM-SHA-512", sasl_plain_username=USER,
                sasl_plain_password=PASSWORD)
    topic = unique("aio")

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(**conf)
        await producer.start()
        try:
            for i in range(20):
                await producer.send_and_wait(topic, b"aio-%d" % i)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest",
                                    group_id=unique("aiog"), **conf)
        await consumer.start()
        got: list[bytes] = []
        try:
            async with asyncio.timeout(20):
                async for record in consumer:
                    got.append(record.value)
                    if len(got) == 20:
                        break
        finally:
            await consumer.stop()
        return got

    assert asyncio.run(run()) == [b"aio-%d" % i for i in range(20)]


def test_aiokafka_wrong_password_fails(sasl_broker, caplog):
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaConnectionError

    async def run() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=sasl_broker.bootstrap, security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="SCRAM-SHA-256", sasl_plain_username=USER,
            sasl_plain_password="wrong", request_timeout_ms=5000)
        try:
            await producer.start()
        finally:
            await producer.stop()

    caplog.set_level(logging.ERROR, logger="aiokafka")
    with pytest.raises(KafkaConnectionError, match="Unable to bootstrap"):
        asyncio.run(run())
    # aiokafka logs the broker's answer: error 58 with its message.
    assert "SaslAuthenticationFailed" in caplog.text
    assert "invalid username or password" in caplog.text
