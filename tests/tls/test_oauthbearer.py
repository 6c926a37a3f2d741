"""SASL/OAUTHBEARER over SASL_SSL: the broker's unsecured-JWT validation, the engine's token
sources (oauth_cb, sasl.oauthbearer.config), refresh at 80% of a token's life and KIP-368
re-authentication on a long-lived connection; librdkafka's own OAUTHBEARER against the broker."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka import Producer as RdProducer
from tls_support import oauthbearer_broker_tls, rdkafka_ssl

from kipproducer import Producer
from kipproducer.broker.embedded import EmbeddedBroker
from kipproducer.broker.security import AclBinding
from kipproducer.sasl.errors import AuthenticationFailed
from kipproducer.sasl.oauthbearer import (
    UnsecuredConfig,
    client_message,
    parse_client_message,
    parse_unsecured_config,
    unb64url,
    unsecured_token,
    validate_unsecured,
)


@pytest.fixture(scope="module")
def broker(certs):
    with EmbeddedBroker(config=oauthbearer_broker_tls(certs)) as started:
        yield started


def oauth_conf(broker, certs, **extra) -> dict:
    return rdkafka_ssl(broker.listener_address("SASL_SSL"), certs, protocol="SASL_SSL",
                       **{"sasl.mechanism": "OAUTHBEARER", **extra})


def allow_topic(broker, principal: str, topic: str) -> None:
    broker.broker.acls.add([AclBinding.of("Topic", topic, principal, op, "Allow")
                            for op in ("Write", "Read", "Describe", "Create")])


def test_unsecured_tokens_and_messages():
    config = parse_unsecured_config("principal=alice lifeSeconds=60 scope=a,b extension_x=1")
    assert config == UnsecuredConfig("alice", 60, ("a", "b"), extensions={"x": "1"})
    token, expiry = unsecured_token(config, now=1000.0)
    assert expiry == 1060.0 and token.endswith(".")
    # iat in whole seconds, never after the clock: Kafka refuses an iat later than its clock
    # in whole ms, which a fractional one is when checked within the same millisecond
    fractional, _ = unsecured_token(config, now=1000.9996)
    assert json.loads(unb64url(fractional.split(".")[1]))["iat"] == 1000
    assert validate_unsecured(token, now=1001.0).principal == "alice"
    with pytest.raises(AuthenticationFailed, match="expired"):
        validate_unsecured(token, now=1060.0)
    with pytest.raises(AuthenticationFailed, match="alg 'none'"):
        validate_unsecured(token + "signature", now=1001.0)
    assert parse_client_message(client_message(token, {"x": "1"})) == (token, {"x": "1"}, "")
    with pytest.raises(ValueError, match="principal"):
        parse_unsecured_config("lifeSeconds=5")


def test_engine_with_unsecured_tokens_and_acls_on_the_token_principal(broker, certs):
    topic = f"oauth-{uuid.uuid4().hex[:6]}"
    allow_topic(broker, "User:alice", topic)
    unsecured = {"enable.sasl.oauthbearer.unsecure.jwt": True, "linger.ms": 0}
    alice = Producer(oauth_conf(broker, certs, **unsecured,
                                **{"sasl.oauthbearer.config": "principal=alice"}))
    errors: list = []
    alice.produce_arrays(topic, [b"a1", b"a2"], partition=0,
                         on_delivery=lambda e, r: errors.append(e))
    alice.produce(topic, b"a3", partition=0, offset=10, on_delivery=lambda e, m: None)
    assert alice.flush(20) == 0 and errors == [None]
    eve = Producer(oauth_conf(broker, certs, **unsecured, **{
        "sasl.oauthbearer.config": "principal=eve", "delivery.timeout.ms": 60000}))
    denied: list = []
    eve.produce_arrays(topic, [b"e"], partition=0, on_delivery=lambda e, r: denied.append(e))
    eve.flush(10)
    assert [e.code() for e in denied] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]


def test_oauth_cb_tokens_refresh_and_the_connection_reauthenticates(broker, certs):
    """Tokens living 3 s: the engine's connection is told a session of about 3 s (KIP-368),
    re-authenticates on the same connection with a fresh token (taken at 80% of the old
    one's life), and records keep flowing past the first token's expiry."""
    topic = f"oauth-cb-{uuid.uuid4().hex[:6]}"
    allow_topic(broker, "User:bob", topic)
    calls: list[str] = []

    def oauth_cb(config: str) -> tuple[str, float]:
        calls.append(config)
        token, expiry = unsecured_token(UnsecuredConfig("bob", 3))
        return token, expiry

    p = Producer(oauth_conf(broker, certs, oauth_cb=oauth_cb,
                            **{"sasl.oauthbearer.config": "scope=test", "linger.ms": 0}))
    errors: list = []
    deadline = time.monotonic() + 5
    sent = 0
    while time.monotonic() < deadline:
        p.produce_arrays(topic, [b"r%d" % sent], partition=0,
                         on_delivery=lambda e, r: errors.append(e))
        sent += 1
        assert p.flush(10) == 0
        time.sleep(0.1)
    assert set(errors) == {None} and len(errors) == sent
    engine = p._engine
    assert engine.config.sasl.oauth.fetches >= 2  # refreshed before the token expired
    connections = [c for c in engine.cluster.connections() if c.node_id >= 0]
    assert connections and max(c.reauthentications for c in connections) >= 1
    assert all(c.session_lifetime_ms <= 3000 for c in connections)
    assert "scope=test" in calls


def test_a_failing_oauth_cb_fails_the_records_at_once(broker, certs):
    calls: list[str] = []

    def oauth_cb(config: str):
        calls.append(config)
        if len(calls) == 1:  # librdkafka's lane asks once while the Producer is built
            return unsecured_token(UnsecuredConfig("bob", 60))
        raise RuntimeError("the identity provider is down")

    p = Producer(oauth_conf(broker, certs, oauth_cb=oauth_cb,
                            **{"delivery.timeout.ms": 60000, "log_level": 0}))
    errors: list = []
    started = time.monotonic()
    p.produce_arrays("t", [b"x"], partition=0, on_delivery=lambda e, r: errors.append(e))
    p.flush(15)
    assert time.monotonic() - started < 5
    assert [e.code() for e in errors] == [KafkaError._AUTHENTICATION]
    assert "identity provider is down" in errors[0].str()


def test_librdkafka_oauthbearer_against_the_broker(broker, certs):
    topic = f"oauth-rd-{uuid.uuid4().hex[:6]}"
    allow_topic(broker, "User:carol", topic)
    broker.broker.acls.add([AclBinding.of("Group", "*", "User:carol", "Read", "Allow")])
    conf = oauth_conf(broker, certs, **{"enable.sasl.oauthbearer.unsecure.jwt": True,
                                        "sasl.oauthbearer.config": "principal=carol"})
    p = RdProducer(conf)
    p.produce(topic, b"rd", partition=0)
    assert p.flush(20) == 0
    c = Consumer({**conf, "group.id": "g-carol", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got = None
    for _ in range(40):
        msg = c.poll(0.5)
        if msg is not None and msg.error() is None:
            got = msg.value()
            break
    c.close()
    assert got == b"rd"


def test_broker_session_lifetime_reauthentication_and_expiry():
    """KIP-368 on the broker: the session lasts until the token expires (below
    connections.max.reauth.ms); re-authenticating renews it (as the same principal only);
    a client that does not is closed at its next request."""
    from security_support import SaslRawClient

    with EmbeddedBroker(config={"sasl.enabled.mechanisms": "OAUTHBEARER",
                                "connections.max.reauth.ms": "60000"}) as plain:
        client = SaslRawClient(plain.bootstrap_servers)

        def login(principal: str, life: int):
            assert client.handshake("OAUTHBEARER").error_code == 0
            token, _ = unsecured_token(UnsecuredConfig(principal, life))
            return client.authenticate(client_message(token))

        first = login("dave", 1)
        assert first.error_code == 0 and 0 < first.session_lifetime <= 1000
        renewed = login("dave", 30)
        assert renewed.error_code == 0 and 29_000 < renewed.session_lifetime <= 30_000
        time.sleep(1.1)  # past the first token: the renewed session still holds
        assert client.request(3, 12, topics=[]).brokers
        refused = login("mallory", 30)  # another principal on this connection
        assert refused.error_code != 0 and client.is_closed()
        client.close()
        short = SaslRawClient(plain.bootstrap_servers)
        assert short.handshake("OAUTHBEARER").error_code == 0
        token, _ = unsecured_token(UnsecuredConfig("erin", 1))
        assert short.authenticate(client_message(token)).error_code == 0
        time.sleep(1.1)
        try:  # the next request finds the session expired: no answer, the connection closed
            short.request(3, 12, topics=[])
            answered = True
        except (ConnectionError, OSError, AssertionError, EOFError):
            answered = False
        assert not answered and short.is_closed()
        short.close()
