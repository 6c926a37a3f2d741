"""The stock-cluster emulation (docs/stock-clusters.md) over SASL_SSL: its log ends and last
stable offsets go through the engine's own ListOffsets (stock/log_ends.py), which must use
the connection's TLS and SASL settings as librdkafka's clients do, and a refused login must
come back as one clear error, not a hang."""

from __future__ import annotations

import time
import uuid

import numpy as np
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tls_support import broker_tls, rdkafka_ssl

from kipproducer import Producer
from kipproducer.broker.embedded import EmbeddedBroker
from kipproducer.stock.log_ends import LogEnds, log_ends_reader

USER, PASSWORD = "emu-user", "emu-secret"


@pytest.fixture(scope="module")
def stock(certs):
    """The stand-in for stock Kafka (no KIP-WIRE feature) on a SASL_SSL listener."""
    config = broker_tls(certs, listeners="SASL_SSL://127.0.0.1:0", **{
        "sasl.enabled.mechanisms": "SCRAM-SHA-256", "kip.extensions.enable": "false"})
    with EmbeddedBroker(config=config) as started:
        started.broker.users.add(USER, PASSWORD)
        yield started


def sasl_ssl(stock, certs, password: str = PASSWORD) -> dict:
    return rdkafka_ssl(stock.listener_address("SASL_SSL"), certs, protocol="SASL_SSL", **{
        "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": USER, "sasl.password": password})


def test_emulated_copy_over_sasl_ssl(stock, certs):
    conf = sasl_ssl(stock, certs)
    topic = f"emu-tls-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(conf)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(20)
    p = Producer({**conf, "kip.mode": "emulated",
                  "kip.emulation.transactional.id": f"emu-tls-{uuid.uuid4().hex[:6]}"})
    assert p.kip_mode(topic) == "emulated"
    errors: list = []
    offsets = np.array([0, 1, 3, 7, 8], np.int64)  # a gap of one (marker at 2), one of three
    p.produce_arrays(topic, [b"v%d" % o for o in offsets], partition=0, offsets=offsets,
                     on_delivery=lambda err, report: err and errors.append(err))
    assert p.flush(30) == 0
    assert errors == []
    reader = log_ends_reader(conf)
    try:
        assert isinstance(reader, LogEnds)  # the engine's client speaks SCRAM over TLS
        assert reader.log_end(topic, 0) == 9
        assert reader.stable_end(topic, 0) == 9
    finally:
        reader.close()
    consumer = Consumer({**conf, "group.id": f"r-{uuid.uuid4().hex[:6]}",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 20
    try:
        while len(got) < len(offsets) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append((msg.offset(), msg.value()))
    finally:
        consumer.close()
    assert got == [(int(o), b"v%d" % o) for o in offsets]


def log_end_error(conf: dict, topic: str) -> tuple[KafkaError, float]:
    """What one ListOffsets question for ``topic`` raises through ``conf``, and how long it
    took to."""
    reader = LogEnds(conf)
    started = time.monotonic()
    try:
        with pytest.raises(KafkaException) as caught:
            reader.log_end(topic, 0)
    finally:
        reader.close()
    return caught.value.args[0], time.monotonic() - started


def test_refused_login_is_one_clear_error(stock, certs):
    error, seconds = log_end_error(sasl_ssl(stock, certs, password="wrong"), "anything")
    assert error.code() == KafkaError._AUTHENTICATION
    assert "ListOffsets" in error.str()
    assert seconds < 10


def test_a_missing_topic_is_named(stock, certs):
    error, _ = log_end_error(sasl_ssl(stock, certs), "no-such-topic")
    assert error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert "no-such-topic" in error.str()
