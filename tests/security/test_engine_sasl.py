"""kipproducer's sending engine against a SASL listener with ACLs.

The bulk calls (produce_arrays, produce_batch, append) and the KIP calls (produce(offset=...),
produce(expected_offset=...)) go through the engine's own connections, which authenticate
with the librdkafka properties the Producer was given: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512.
A refused authentication fails the records at once with _AUTHENTICATION and the broker's
message; the KIP-WIRE §4 authorization rules reach the delivery reports.
"""

from __future__ import annotations

import base64
import time

import confluent_kafka
import pytest
from confluent_kafka import KafkaError, KafkaException
from security_support import (
    ALL_MECHANISMS,
    allow,
    consume_values,
    log_end,
    new_topic,
    sasl_conf,
    unique,
)

from kipproducer import Producer
from kipproducer.engine.config import ConfigError, EngineConfig
from kipproducer.errors import ProduceOffsetException
from kipproducer.protocol import error_codes as ec
from kipproducer.sasl import scram

MECHANISMS = ALL_MECHANISMS.split(",")
WRONG = "invalid username or password"  # the broker's reason for a refused credential


@pytest.fixture
def user(secured):
    """A fresh user with both SCRAM credentials (so PLAIN works too): (name, password)."""
    name = unique("eng")
    secured.broker.users.add(name, "pw-" + name)
    return name, "pw-" + name


def producer(broker, mechanism: str, name: str, password: str, **extra) -> Producer:
    return Producer(sasl_conf(broker.bootstrap_servers, mechanism, name, password,
                              **{"linger.ms": 5, **extra}))


def flush_refused(p: Producer, reports: list, expected: int, timeout: float = 10) -> None:
    """flush() after a refusal: it must return promptly with every callback served.

    Its count is not checked: the Producer's librdkafka side fails its own bootstrap
    connection too, and librdkafka counts those error events in len() until they are served.
    """
    started = time.monotonic()
    p.flush(timeout)
    assert time.monotonic() - started < 5, "the refused records were not failed promptly"
    assert len(reports) == expected, reports


# -- configuration ------------------------------------------------------------------------------


@pytest.mark.parametrize(("conf", "message"), [
    ({"security.protocol": "SSL", "ssl.ca.location": "/nonexistent/ca.pem"},
     "ssl.ca.location: no such file or directory '/nonexistent/ca.pem'"),
    ({"security.protocol": "sasl_ssl", "sasl.mechanism": "GSSAPI", "sasl.username": "u",
      "sasl.password": "p"}, "with security.protocol=SASL_SSL use one of"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.username": "u", "sasl.password": "p"},
     r"'GSSAPI' \(librdkafka's default when sasl.mechanism is not set\).*"
     "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
      "sasl.username": "u", "sasl.password": "p"},
     "OAUTHBEARER with security.protocol=SASL_PLAINTEXT needs a token source"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "scram-sha-256",
      "sasl.username": "u", "sasl.password": "p"}, "case-sensitive: SCRAM-SHA-256"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
      "sasl.username": "u"}, "sasl.username and sasl.password must be set"),
    ({"security.protocol": "TLS"}, "expected plaintext, ssl, sasl_plaintext or sasl_ssl"),
])
def test_the_engine_refuses_what_it_cannot_speak(conf, message):
    with pytest.raises(ConfigError, match=message):
        EngineConfig.from_properties({"bootstrap.servers": "127.0.0.1:9", **conf})


def test_an_oauthbearer_producer_is_built_and_refused_at_its_first_engine_call():
    """Drop-in: librdkafka's lane takes OAUTHBEARER without a token source (the application
    may set tokens itself), so the Producer is built; the first call that needs kipproducer's
    engine gets the reason, and nothing is queued on the engine."""
    producer = Producer({"bootstrap.servers": "127.0.0.1:9", "security.protocol": "SASL_SSL",
                         "sasl.mechanism": "OAUTHBEARER"})
    assert isinstance(producer, confluent_kafka.Producer)
    with pytest.raises(ConfigError, match="OAUTHBEARER with security.protocol=SASL_SSL needs"):
        producer.produce_arrays("t", [b"x"], partition=0)
    with pytest.raises(ConfigError, match="needs a token source"):
        producer.produce("t", b"x", partition=0, offset=5)


def test_security_properties_are_read_as_librdkafka_names_them():
    config = EngineConfig.from_properties({
        "bootstrap.servers": "127.0.0.1:9", "security.protocol": "sasl_plaintext",
        "sasl.mechanisms": "PLAIN", "sasl.mechanism": "SCRAM-SHA-512",  # alias; later wins
        "sasl.username": "alice", "sasl.password": "s3cret"})
    assert config.sasl is not None
    assert (config.sasl.mechanism, config.sasl.username, config.sasl.password) == (
        "SCRAM-SHA-512", "alice", "s3cret")
    assert "s3cret" not in repr(config)
    # PLAINTEXT (the default) ignores sasl.*, as librdkafka does.
    assert EngineConfig.from_properties({
        "bootstrap.servers": "127.0.0.1:9", "sasl.mechanism": "GSSAPI"}).sasl is None


# -- authentication -----------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_bulk_calls_deliver_over_sasl(secured, admin, user, mechanism):
    name, password = user
    topic = new_topic(admin)
    group = unique("g")
    secured.broker.acls.add([allow(f"User:{name}", "Write", name=topic),
                             allow(f"User:{name}", "Read", name=topic),
                             allow(f"User:{name}", "Read", "Group", "*")])
    # Idempotence too: InitProducerId goes over an authenticated connection as well.
    p = producer(secured, mechanism, name, password, **{"enable.idempotence": True})
    reports: list = []
    arrays = [b"arr-%d" % i for i in range(200)]
    batch = [{"value": b"batch-%d" % i} for i in range(50)]
    # No partition: the partitioner needs metadata, fetched over SASL too.
    p.produce_arrays(topic, arrays, on_delivery=lambda err, r: reports.append((err, r)))
    assert p.produce_batch(topic, batch, partition=1,
                           on_delivery=lambda err, m: reports.append((err, m))) == 50
    assert p.flush(20) == 0
    assert [err for err, _ in reports if err is not None] == []
    delivered = sum(len(r) if hasattr(r, "count") else 1 for _, r in reports)
    assert delivered == 250
    conf = sasl_conf(secured.bootstrap_servers, mechanism, name, password, **{"group.id": group})
    got = consume_values(conf, topic, 250, partitions=2)
    assert sorted(got) == sorted(arrays + [m["value"] for m in batch])


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_wrong_password_fails_the_records_promptly(secured, admin, user, mechanism):
    name, _ = user
    topic = new_topic(admin)
    secured.broker.acls.add([allow(f"User:{name}", "Write", name=topic)])
    p = producer(secured, mechanism, name, "wrong-password",
                 **{"enable.idempotence": mechanism == "SCRAM-SHA-512"})
    errors: list[KafkaError] = []
    started = time.monotonic()
    p.produce_arrays(topic, [b"a", b"b", b"c"], partition=0,
                     on_delivery=lambda err, r: errors.append(err))
    p.produce_batch(topic, [{"value": b"d"}, {"value": b"e"}], partition=1,
                    on_delivery=lambda err, m: errors.append(err))
    p.produce(topic, b"f", partition=0, offset=10, on_delivery=lambda err, m: errors.append(err))
    flush_refused(p, errors, 4)
    for err in errors:
        assert err is not None and err.code() == KafkaError._AUTHENTICATION, err
        assert not err.retriable()
        assert WRONG in err.str() and mechanism in err.str(), err.str()
    # A call that needs metadata (no partition) is refused at the call, just as promptly.
    with pytest.raises(KafkaException) as raised:
        p.produce_arrays(topic, [b"g"])
    assert raised.value.args[0].code() == KafkaError._AUTHENTICATION
    assert WRONG in raised.value.args[0].str()
    assert time.monotonic() - started < 5
    assert log_end(admin, topic) == [0, 0]  # nothing written


def test_unsupported_mechanism_names_what_the_broker_enables(embedded):
    broker = embedded({"sasl.enabled.mechanisms": "SCRAM-SHA-256"})
    broker.broker.users.add("bob", "bob-pw")
    p = producer(broker, "PLAIN", "bob", "bob-pw")
    errors: list[KafkaError] = []
    p.produce_arrays("t", [b"x"], partition=0, on_delivery=lambda err, r: errors.append(err))
    flush_refused(p, errors, 1)
    assert [e.code() for e in errors] == [KafkaError._AUTHENTICATION]
    assert "does not accept SASL mechanism PLAIN" in errors[0].str()
    assert "its listener enables: SCRAM-SHA-256" in errors[0].str()


def test_sasl_producer_against_a_listener_without_sasl(embedded):
    broker = embedded()
    p = producer(broker, "SCRAM-SHA-256", "bob", "bob-pw")
    errors: list[KafkaError] = []
    p.produce_arrays("t", [b"x"], partition=0, on_delivery=lambda err, r: errors.append(err))
    flush_refused(p, errors, 1)
    assert [e.code() for e in errors] == [KafkaError._AUTHENTICATION]
    assert "has no SASL on this listener" in errors[0].str()


def test_a_broker_that_cannot_sign_the_scram_exchange_is_refused(embedded, monkeypatch):
    """SCRAM authenticates the broker too: a wrong server signature (a broker that does not
    hold our credential) fails the connection, although the broker said yes."""
    broker = embedded({"sasl.enabled.mechanisms": "SCRAM-SHA-512"})
    broker.broker.users.add("bob", "bob-pw")
    honest = scram.ScramServer._on_client_final

    def forged(self, token: bytes) -> bytes:
        honest(self, token)  # the broker accepts the client's proof...
        return b"v=" + base64.b64encode(b"\0" * 64)  # ...but cannot prove itself

    monkeypatch.setattr(scram.ScramServer, "_on_client_final", forged)
    p = producer(broker, "SCRAM-SHA-512", "bob", "bob-pw")
    errors: list[KafkaError] = []
    p.produce_arrays("t", [b"x"], partition=0, on_delivery=lambda err, r: errors.append(err))
    flush_refused(p, errors, 1)
    assert [e.code() for e in errors] == [KafkaError._AUTHENTICATION]
    assert "failed SCRAM server authentication" in errors[0].str()


def test_a_refusal_is_not_for_ever(secured, admin):
    """The refusal holds for retry.backoff.max.ms; a later call authenticates again (the
    user store may have changed meanwhile), as librdkafka and Kafka's clients do."""
    name = unique("late")
    topic = new_topic(admin, 1)
    secured.broker.acls.add([allow(f"User:{name}", "Write", name=topic)])
    p = producer(secured, "SCRAM-SHA-256", name, "pw", **{"retry.backoff.max.ms": 200})
    outcome: list = []
    p.produce_arrays(topic, [b"early"], partition=0,
                     on_delivery=lambda err, r: outcome.append(err))
    flush_refused(p, outcome, 1)
    assert outcome[0].code() == KafkaError._AUTHENTICATION  # no such user yet
    secured.broker.users.add(name, "pw", "SCRAM-SHA-256")
    time.sleep(0.3)
    assert p.append(topic, [b"late"], partition=0, expected_offset=0) == 0
    assert log_end(admin, topic, 1) == [1]


# -- KIP-WIRE §4 authorization through the Producer ---------------------------------------------


def test_produce_with_offsets_needs_replicator_write(secured, admin, user):
    name, password = user
    principal = f"User:{name}"
    topic = new_topic(admin)
    secured.broker.acls.add([allow(principal, "Write", name=topic)])
    p = producer(secured, "SCRAM-SHA-512", name, password)
    reports: list = []

    def record(err, msg) -> None:
        reports.append((err, msg))

    p.produce(topic, b"replicated", partition=0, offset=1000, on_delivery=record)
    assert p.flush(10) == 0
    err, _ = reports.pop()
    assert err is not None and err.code() == ec.CLUSTER_AUTHORIZATION_FAILED, err
    assert "lacks ReplicatorWrite on the cluster" in err.str()
    assert log_end(admin, topic) == [0, 0]  # nothing written

    secured.broker.acls.add([allow(principal, "ReplicatorWrite", "Cluster", "kafka-cluster")])
    # A new Producer: within one, explicit offsets must strictly increase (docs/producer.md),
    # even past a refused record.
    p = producer(secured, "SCRAM-SHA-512", name, password)
    p.produce(topic, b"replicated", partition=0, offset=1000, on_delivery=record)
    assert p.flush(10) == 0
    err, msg = reports.pop()
    assert err is None, err
    assert msg.offset() == 1000
    assert log_end(admin, topic) == [1001, 0]


@pytest.mark.parametrize("granted", [None, "Read"], ids=["no-acl", "read-only"])
def test_conditional_produce_needs_write(secured, admin, user, granted):
    """Without Write: TOPIC_AUTHORIZATION_FAILED, whether the broker refuses the Metadata
    (no Describe at all) or the Produce (Read implies Describe, not Write)."""
    name, password = user
    principal = f"User:{name}"
    topic = new_topic(admin)
    if granted:
        secured.broker.acls.add([allow(principal, granted, name=topic)])
    p = producer(secured, "SCRAM-SHA-256", name, password)
    started = time.monotonic()
    with pytest.raises(ProduceOffsetException) as raised:
        p.append(topic, [b"a", b"b"], partition=0, expected_offset=0)
    assert raised.value.error.code() == ec.TOPIC_AUTHORIZATION_FAILED
    errors: list[KafkaError] = []
    p.produce(topic, b"c", partition=1, expected_offset=0,
              on_delivery=lambda err, m: errors.append(err))
    assert p.flush(10) == 0
    assert [e.code() for e in errors] == [ec.TOPIC_AUTHORIZATION_FAILED]
    assert time.monotonic() - started < 5, "refused records must not wait for their timeout"
    assert log_end(admin, topic) == [0, 0]

    secured.broker.acls.add([allow(principal, "Write", name=topic)])
    assert p.append(topic, [b"a", b"b"], partition=0, expected_offset=0) == 0
    assert p.append(topic, [b"c"], partition=0, expected_offset=2) == 2
    assert log_end(admin, topic) == [3, 0]
