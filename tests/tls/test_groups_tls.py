"""Producer groups (KIP-509, KIP-910) over TLS: both modes, over mTLS and SASL_SSL; the
positions a member commits survive its restart."""

from __future__ import annotations

import uuid

import pytest
from tls_support import broker_tls, rdkafka_ssl

from kipproducer import Producer
from kipproducer.broker.embedded import EmbeddedBroker


@pytest.fixture(scope="module")
def broker(certs):
    config = broker_tls(certs, listeners="SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0", **{
        "ssl.client.auth": "requested", "sasl.enabled.mechanisms": "PLAIN"})
    with EmbeddedBroker(config=config) as started:
        started.broker.users.add("member", "member-secret")
        yield started


def conf_for(broker, certs, how: str) -> dict:
    if how == "mTLS":
        return rdkafka_ssl(broker.listener_address("SSL"), certs, "alice")
    return rdkafka_ssl(broker.listener_address("SASL_SSL"), certs, protocol="SASL_SSL", **{
        "sasl.mechanism": "PLAIN", "sasl.username": "member", "sasl.password": "member-secret"})


@pytest.mark.parametrize("mode", ["at-least-once", "transactional"])
@pytest.mark.parametrize("how", ["mTLS", "SASL_SSL"])
def test_producer_group_over_tls(broker, certs, mode, how):
    group, topic = f"pg-{uuid.uuid4().hex[:6]}", f"pg-out-{uuid.uuid4().hex[:6]}"
    txn_id = f"pg-txn-{uuid.uuid4().hex[:6]}"

    def member() -> Producer:
        conf = {**conf_for(broker, certs, how), "group.id": group,
                "source.partition.count": 2, "session.timeout.ms": 6000, "linger.ms": 1}
        if mode == "transactional":
            conf["transactional.id"] = txn_id
        return Producer(conf)

    first = member()
    assert first.subscribe() == {0: None, 1: None}
    positions = {0: "row-7", 1: "2026-11-27T06:00:00"}
    if mode == "transactional":
        assert first._txn is not None  # the engine's transactions over TLS
        first.begin_transaction()
        first.produce_arrays(topic, [b"a", b"b"], partition=0)
        first.commit_transaction(positions=positions)
    else:
        first.produce_arrays(topic, [b"a", b"b"], partition=0)
        first.commit_positions(positions)
    assert first.alive() == positions
    first.close()
    restarted = member()
    assert restarted.subscribe() == positions
    restarted.close()
