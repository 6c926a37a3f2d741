"""`kip mirror` between TLS clusters: the source is read by the mirror's own Fetch reader (no
fallback to librdkafka's consumer), in both modes, over mTLS and SASL_SSL."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from tls_support import broker_tls, rdkafka_ssl

from kipproducer.broker.embedded import EmbeddedBroker
from kipproducer.mirror import Mirror

PARTITIONS = 2


@pytest.fixture(scope="module")
def clusters(certs):
    config = broker_tls(certs, listeners="SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0", **{
        "ssl.client.auth": "requested", "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "num.partitions": str(PARTITIONS)})
    with EmbeddedBroker(config=config) as source, EmbeddedBroker(config=config) as target:
        target.broker.users.add("mirror", "mirror-secret")
        yield source, target


def source_conf(source, certs) -> dict:
    """The source over mTLS (the mirror's client certificate)."""
    return rdkafka_ssl(source.listener_address("SSL"), certs, "alice")


def target_conf(target, certs) -> dict:
    return rdkafka_ssl(target.listener_address("SASL_SSL"), certs, protocol="SASL_SSL", **{
        "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "mirror",
        "sasl.password": "mirror-secret"})


def records(conf: dict, topic: str, n: int) -> list[tuple[int, int, bytes | None, bytes]]:
    consumer = Consumer({**conf, "group.id": f"r-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    out = []
    deadline = time.monotonic() + 20
    try:
        while len(out) < n and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                out.append((msg.partition(), msg.offset(), msg.key(), msg.value()))
    finally:
        consumer.close()
    return sorted(out)


@pytest.mark.parametrize("mode", ["preserve", "transactional"])
def test_mirror_reads_a_tls_source_with_its_fetch_reader(clusters, certs, mode):
    source, target = clusters
    topic = f"mtls-{mode}-{uuid.uuid4().hex[:6]}"
    src = source_conf(source, certs)
    p = Producer({**src, "linger.ms": 5})
    for i in range(300):
        p.produce(topic, b"v%d" % i, b"k%d" % i, partition=i % PARTITIONS)
    assert p.flush(20) == 0
    tgt = target_conf(target, certs)
    mirror = Mirror(src.pop("bootstrap.servers"), tgt.pop("bootstrap.servers"), topic,
                    mode=mode, group=f"g-{uuid.uuid4().hex[:6]}" if mode != "preserve" else None,
                    source_config=src, target_config=tgt, progress=False)
    assert mirror.reader_kind == "fetch"  # TLS no longer falls back to librdkafka
    snapshot = mirror.run(once=True)
    assert snapshot["reader"] == "fetch" and snapshot["records"] == 300
    expected = records(source_conf(source, certs), topic, 300)
    copied = records(target_conf(target, certs), topic, 300)
    if mode == "preserve":
        assert copied == expected  # every offset kept
    else:
        assert sorted(r[1:][1:] for r in copied) == sorted(r[1:][1:] for r in expected)
