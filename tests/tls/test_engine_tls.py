"""kipproducer's engine over TLS: the bulk calls, produce(offset=) and transactions over SSL and
SASL_SSL (PLAIN, SCRAM), mTLS with ACLs on the certificate principal, and each bad TLS input
failing at once with an error that names the property or the certificate problem."""

from __future__ import annotations

import time
import uuid

import pytest
import trustme
from confluent_kafka import Consumer, KafkaError, TopicPartition
from tls_support import KEY_PASSWORD, broker_tls, rdkafka_ssl

from kipproducer import Producer
from kipproducer.broker.embedded import EmbeddedBroker
from kipproducer.broker.security import AclBinding
from kipproducer.engine.config import ConfigError

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
USER, PASSWORD = "tls-user", "tls-secret"
# Far above what any failure below may take: an error must come from the cause, not a timeout.
DELIVERY_TIMEOUT_MS = 60_000


def topic_name() -> str:
    return f"etls-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def broker(certs):
    config = broker_tls(certs, listeners="SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0", **{
        "ssl.client.auth": "requested", "sasl.enabled.mechanisms": ",".join(MECHANISMS),
        "num.partitions": "2"})
    with EmbeddedBroker(config=config) as started:
        started.broker.users.add(USER, PASSWORD)
        yield started


def read_all(conf: dict, topic: str, partitions: int, n: int,
             committed: bool = False) -> list[tuple[int, int, bytes]]:
    consumer = Consumer({**conf, "group.id": f"r-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False,
                         "isolation.level": "read_committed" if committed else
                         "read_uncommitted"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[tuple[int, int, bytes]] = []
    deadline = time.monotonic() + 20
    try:
        while len(out) < n and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                out.append((msg.partition(), msg.offset(), msg.value()))
    finally:
        consumer.close()
    return sorted(out)


def sasl_ssl(broker, certs, mechanism: str) -> dict:
    return rdkafka_ssl(broker.listener_address("SASL_SSL"), certs, protocol="SASL_SSL", **{
        "sasl.mechanism": mechanism, "sasl.username": USER, "sasl.password": PASSWORD})


def deliver_everything(conf: dict, topic: str) -> None:
    """produce_arrays, produce_batch and produce(offset=) through the engine, all delivered."""
    p = Producer({**conf, "linger.ms": 2, "enable.idempotence": True})
    errors: list = []
    p.produce_arrays(topic, [b"arr-%d" % i for i in range(100)], partition=0,
                     on_delivery=lambda err, r: err and errors.append(err))
    assert p.produce_batch(topic, [{"value": b"batch-%d" % i} for i in range(20)],
                           partition=1, on_delivery=lambda err, m: err and errors.append(err)
                           ) == 20
    assert p.flush(20) == 0
    q = Producer({**conf, "linger.ms": 0})
    q.produce(topic, b"at-50", partition=1, offset=50,
              on_delivery=lambda err, m: err and errors.append(err))
    assert q.flush(20) == 0
    assert errors == []


@pytest.mark.parametrize("how", ["SSL", *MECHANISMS])
def test_bulk_and_kip_calls_over_tls(broker, certs, how):
    conf = (rdkafka_ssl(broker.listener_address("SSL"), certs) if how == "SSL"
            else sasl_ssl(broker, certs, how))
    topic = topic_name()
    deliver_everything(conf, topic)
    got = read_all(conf, topic, 2, 121)
    assert [v for p, _, v in got if p == 0] == [b"arr-%d" % i for i in range(100)]
    assert [(o, v) for p, o, v in got if p == 1][-1] == (50, b"at-50")
    assert len(got) == 121


def test_transactions_over_sasl_ssl(broker, certs):
    conf = sasl_ssl(broker, certs, "SCRAM-SHA-256")
    topic = topic_name()
    p = Producer({**conf, "transactional.id": f"tx-{uuid.uuid4().hex[:6]}"})
    assert p._txn is not None  # the engine's transactions, not librdkafka's
    p.init_transactions(20)
    p.begin_transaction()
    p.produce_arrays(topic, [b"aborted"], partition=0)
    p.abort_transaction(20)
    p.begin_transaction()
    p.produce_arrays(topic, [b"t1", b"t2"], partition=0)
    p.produce_batch(topic, [{"value": b"t3"}], partition=1)
    p.commit_transaction(20)
    got = read_all(conf, topic, 2, 3, committed=True)
    assert sorted(v for _, _, v in got) == [b"t1", b"t2", b"t3"]


def test_mtls_acls_on_the_certificate_principal(certs):
    config = broker_tls(certs, listeners="SSL://127.0.0.1:0", **{
        "ssl.client.auth": "required", "authorizer.enabled": "true",
        "ssl.principal.mapping.rules": "RULE:^CN=([a-z]+),.*$/$1/,DEFAULT"})
    with EmbeddedBroker(config=config) as secured:
        topic = topic_name()
        secured.broker.acls.add([
            *(AclBinding.of("Topic", topic, "User:alice", op, "Allow")
              for op in ("Write", "Describe", "Create")),
            AclBinding.of("Cluster", "kafka-cluster", "User:alice", "ReplicatorWrite", "Allow")])
        address = secured.listener_address("SSL")
        alice = Producer({**rdkafka_ssl(address, certs, "alice"), "linger.ms": 0})
        errors: list = []
        alice.produce_arrays(topic, [b"a"], partition=0, on_delivery=lambda e, r: errors.append(e))
        alice.produce(topic, b"b", partition=0, offset=5, on_delivery=lambda e, m: errors.append(e))
        assert alice.flush(20) == 0 and errors == [None, None]
        mallory = Producer({**rdkafka_ssl(address, certs, "mallory"), "linger.ms": 0,
                            "delivery.timeout.ms": DELIVERY_TIMEOUT_MS})
        denied: list = []
        mallory.produce_arrays(topic, [b"m"], partition=0,
                               on_delivery=lambda e, r: denied.append(e))
        mallory.flush(10)
        assert [e.code() for e in denied] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]


# -- bad inputs: one clear error, at once --------------------------------------------------------


def refused(conf: dict, topic: str = "t") -> tuple[KafkaError, float]:
    """The error of one produce_arrays record, and how long it took to come."""
    p = Producer({**conf, "delivery.timeout.ms": DELIVERY_TIMEOUT_MS, "log_level": 0})
    errors: list = []
    started = time.monotonic()
    p.produce_arrays(topic, [b"x"], partition=0, on_delivery=lambda e, r: errors.append(e))
    p.flush(15)
    took = time.monotonic() - started
    assert len(errors) == 1 and errors[0] is not None, errors
    return errors[0], took


def test_bad_ca_path_names_the_property(broker, certs):
    conf = rdkafka_ssl(broker.listener_address("SSL"), certs)
    conf["ssl.ca.location"] = str(certs.dir / "missing-ca.pem")
    from kipproducer.engine.config import EngineConfig

    with pytest.raises(ConfigError, match="ssl.ca.location: no such file or directory"):
        EngineConfig.from_properties(conf)


def test_wrong_key_password_names_the_property(broker, certs):
    conf = rdkafka_ssl(broker.listener_address("SSL"), certs)
    conf.update({"ssl.certificate.location": str(certs.server_encrypted),
                 "ssl.key.location": str(certs.server_encrypted), "ssl.key.password": "wrong"})
    from kipproducer.engine.config import EngineConfig

    with pytest.raises(ConfigError, match="ssl.key.password: the private key in "
                                          "ssl.key.location does not open"):
        EngineConfig.from_properties(conf)
    conf.pop("ssl.key.password")
    with pytest.raises(ConfigError, match="encrypted and ssl.key.password is not set"):
        EngineConfig.from_properties(conf)
    conf["ssl.key.password"] = KEY_PASSWORD
    assert EngineConfig.from_properties(conf).tls is not None


def test_unknown_ca_fails_the_records_at_once(broker, certs):
    conf = rdkafka_ssl(broker.listener_address("SSL"), certs)
    conf["ssl.ca.location"] = str(certs.other_ca)
    err, took = refused(conf)
    assert err.code() == KafkaError._AUTHENTICATION and not err.retriable()
    assert "certificate verify failed" in err.str() and "ssl.ca.location" in err.str(), err.str()
    assert took < 5


def test_hostname_mismatch_fails_the_records_at_once(tmp_path, certs):
    ca = trustme.CA()
    leaf = ca.issue_cert("broker.example.com")
    leaf.private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "server.pem"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    with EmbeddedBroker(config={"listeners": "SSL://127.0.0.1:0",
                                "ssl.keystore.location": str(tmp_path / "server.pem")}) as b:
        conf = {"bootstrap.servers": b.listener_address("SSL"), "security.protocol": "SSL",
                "ssl.ca.location": str(tmp_path / "ca.pem")}
        err, took = refused(conf)
        assert err.code() == KafkaError._AUTHENTICATION
        assert "does not name the host" in err.str(), err.str()
        assert "ssl.endpoint.identification.algorithm" in err.str()
        assert took < 5
        # With the check off the same broker is trusted (its CA still is checked).
        p = Producer({**conf, "ssl.endpoint.identification.algorithm": "none",
                      "linger.ms": 0})
        p.produce_arrays(topic_name(), [b"ok"], partition=0)
        assert p.flush(20) == 0


def test_tls_client_on_a_plaintext_listener_fails_at_once(certs):
    with EmbeddedBroker() as plain:
        err, took = refused(rdkafka_ssl(plain.bootstrap_servers, certs))
        assert err.code() == KafkaError._AUTHENTICATION and "TLS" in err.str(), err.str()
        assert took < 5


def test_missing_client_certificate_on_an_mtls_listener_fails_at_once(certs):
    config = broker_tls(certs, listeners="SSL://127.0.0.1:0", **{"ssl.client.auth": "required"})
    with EmbeddedBroker(config=config) as mtls:
        err, took = refused(rdkafka_ssl(mtls.listener_address("SSL"), certs))
        assert err.code() == KafkaError._AUTHENTICATION and "TLS" in err.str(), err.str()
        assert took < 5


def test_pem_text_properties_and_switches(broker, certs):
    """ssl.ca.pem / ssl.certificate.pem / ssl.key.pem instead of files; verification off
    accepts an unknown CA; a bad cipher list names its property."""
    from kipproducer.engine.config import EngineConfig

    cert, key = certs.clients["alice"]
    address = broker.listener_address("SSL")
    inline = {"bootstrap.servers": address, "security.protocol": "SSL",
              "ssl.ca.pem": certs.ca.read_text(), "ssl.certificate.pem": cert.read_text(),
              "ssl.key.pem": key.read_text(), "linger.ms": 0}
    p = Producer(inline)
    p.produce_arrays(topic_name(), [b"pem"], partition=0)
    assert p.flush(20) == 0
    unchecked = {**rdkafka_ssl(address, certs), "ssl.ca.location": str(certs.other_ca),
                 "enable.ssl.certificate.verification": "false", "linger.ms": 0}
    q = Producer(unchecked)
    q.produce_arrays(topic_name(), [b"unchecked"], partition=0)
    assert q.flush(20) == 0
    with pytest.raises(ConfigError, match="ssl.cipher.suites"):
        EngineConfig.from_properties({**rdkafka_ssl(address, certs),
                                      "ssl.cipher.suites": "NO-SUCH-CIPHER"})
    with pytest.raises(ConfigError, match="ssl.endpoint.identification.algorithm"):
        EngineConfig.from_properties({**rdkafka_ssl(address, certs),
                                      "ssl.endpoint.identification.algorithm": "ldap"})
