"""PKCS#12 client keystores (ssl.keystore.location + ssl.keystore.password): mTLS through the
engine against `kip broker` with ACLs on the certificate's principal, the same file given to
librdkafka as a peer check, a producer group, and each bad keystore refused with one error
naming the property."""

from __future__ import annotations

import os
import tempfile
import uuid
from pathlib import Path

import pytest
from confluent_kafka import KafkaError
from confluent_kafka import Producer as RdProducer
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12
from tls_support import Certs, broker_tls, rdkafka_ssl

from kipproducer import Producer
from kipproducer.broker.embedded import EmbeddedBroker
from kipproducer.broker.security import AclBinding
from kipproducer.engine.config import ConfigError, EngineConfig

STORE_PASSWORD = "store-secret"


def make_keystore(certs: Certs, client: str, path: Path, password: str = STORE_PASSWORD,
                  with_key: bool = True) -> Path:
    """The client's key, certificate and the rest of its chain in one PKCS#12 file."""
    cert_path, key_path = certs.clients[client]
    chain = x509.load_pem_x509_certificates(cert_path.read_bytes())
    key = serialization.load_pem_private_key(key_path.read_bytes(), None)
    encryption = (serialization.BestAvailableEncryption(password.encode()) if password
                  else serialization.NoEncryption())
    path.write_bytes(pkcs12.serialize_key_and_certificates(
        client.encode(), key if with_key else None, chain[0], chain[1:] or None, encryption))
    return path


def keystore_conf(address: str, certs: Certs, keystore: Path,
                  password: str | None = STORE_PASSWORD) -> dict:
    conf = {**rdkafka_ssl(address, certs), "ssl.keystore.location": str(keystore)}
    if password is not None:
        conf["ssl.keystore.password"] = password
    return conf


@pytest.fixture(scope="module")
def keystores(certs, tmp_path_factory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("keystores")
    return {name: make_keystore(certs, name, directory / f"{name}.p12")
            for name in ("alice", "mallory")}


@pytest.fixture(scope="module")
def mtls_broker(certs):
    """ssl.client.auth=required, ACLs on: alice may write any topic and use any group."""
    config = broker_tls(certs, listeners="SSL://127.0.0.1:0", **{
        "ssl.client.auth": "required", "authorizer.enabled": "true",
        "ssl.principal.mapping.rules": "RULE:^CN=([a-z]+),.*$/$1/,DEFAULT"})
    with EmbeddedBroker(config=config) as started:
        started.broker.acls.add([
            *(AclBinding.of("Topic", "*", "User:alice", op, "Allow")
              for op in ("Write", "Read", "Describe", "Create")),
            *(AclBinding.of("Group", "*", "User:alice", op, "Allow")
              for op in ("Read", "Describe")),
            AclBinding.of("Cluster", "kafka-cluster", "User:alice", "ReplicatorWrite",
                          "Allow")])
        yield started


def private_temp_files() -> set[str]:
    return {n for n in os.listdir(tempfile.gettempdir()) if n.startswith("kip-keystore-")}


def test_engine_mtls_with_a_pkcs12_keystore_and_acls_on_its_principal(mtls_broker, certs,
                                                                     keystores):
    address = mtls_broker.listener_address("SSL")
    topic = f"p12-{uuid.uuid4().hex[:8]}"
    before = private_temp_files()
    alice = Producer({**keystore_conf(address, certs, keystores["alice"]), "linger.ms": 0})
    errors: list = []
    assert alice.produce_batch(topic, [{"value": b"b%d" % i} for i in range(5)], partition=0,
                               on_delivery=lambda e, m: errors.append(e)) == 5
    alice.produce_arrays(topic, [b"a1", b"a2"], partition=0,
                         on_delivery=lambda e, r: errors.append(e))
    assert alice.flush(20) == 0
    assert errors and set(errors) == {None}, errors
    assert private_temp_files() == before  # the decrypted key's file is gone
    mallory = Producer({**keystore_conf(address, certs, keystores["mallory"]), "linger.ms": 0,
                        "delivery.timeout.ms": 60000})
    denied: list = []
    mallory.produce_arrays(topic, [b"m"], partition=0, on_delivery=lambda e, r: denied.append(e))
    mallory.flush(10)
    assert [e.code() for e in denied] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]


def test_librdkafka_reads_the_same_keystore(mtls_broker, certs, keystores):
    """Peer check: librdkafka authenticates with the same file (and is refused the topic
    with mallory's), so the file is a keystore as librdkafka understands one."""
    address = mtls_broker.listener_address("SSL")
    topic = f"p12-rd-{uuid.uuid4().hex[:8]}"
    rd = RdProducer(keystore_conf(address, certs, keystores["alice"]))
    rd.produce(topic, b"librdkafka", partition=0)
    assert rd.flush(20) == 0
    reports: list = []
    other = RdProducer({**keystore_conf(address, certs, keystores["mallory"]),
                        "message.timeout.ms": 10000, "log_level": 0})
    other.produce(topic, b"m", partition=0, on_delivery=lambda e, m: reports.append(e))
    other.flush(15)
    assert [e.code() for e in reports] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]


def test_producer_group_with_a_pkcs12_keystore(mtls_broker, certs, keystores):
    group, topic = f"p12-g-{uuid.uuid4().hex[:6]}", f"p12-go-{uuid.uuid4().hex[:6]}"
    conf = {**keystore_conf(mtls_broker.listener_address("SSL"), certs, keystores["alice"]),
            "group.id": group, "source.partition.count": 1, "session.timeout.ms": 6000,
            "linger.ms": 1}
    member = Producer(conf)
    assert member.subscribe() == {0: None}
    member.produce_arrays(topic, [b"g1", b"g2"], partition=0)
    member.commit_positions({0: "row-2"})
    assert member.alive() == {0: "row-2"}
    member.close()


# -- bad keystores: one error naming the property ----------------------------------------------


def refused_with(conf: dict, match: str) -> str:
    with pytest.raises(ConfigError, match=match) as caught:
        EngineConfig.from_properties(conf)
    return str(caught.value)


def test_bad_keystores_name_the_property(certs, keystores, tmp_path):
    address = "127.0.0.1:9"  # never connected to: each error comes from the settings
    alice = keystores["alice"]
    refused_with(keystore_conf(address, certs, alice, "wrong"),
                 r"ssl.keystore.password: the PKCS#12 file .* does not open with it")
    refused_with(keystore_conf(address, certs, alice, None),
                 "ssl.keystore.password is mandatory when ssl.keystore.location is set")
    refused_with(keystore_conf(address, certs, tmp_path / "missing.p12"),
                 r"ssl.keystore.location: cannot read .*missing.p12")
    garbage = tmp_path / "garbage.p12"
    garbage.write_bytes(os.urandom(512))
    refused_with(keystore_conf(address, certs, garbage), "is not a PKCS#12 file")
    refused_with(keystore_conf(address, certs, certs.clients["alice"][0]),
                 "is a PEM file, not PKCS#12; give PEM files as ssl.certificate.location")
    jks = tmp_path / "client.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed\x00\x00\x00\x02" + os.urandom(64))
    message = refused_with(keystore_conf(address, certs, jks), "is a Java JKS keystore")
    assert "keytool -importkeystore" in message and "-deststoretype PKCS12" in message
    no_key = make_keystore(certs, "alice", tmp_path / "cert-only.p12", with_key=False)
    refused_with(keystore_conf(address, certs, no_key), "holds no private key")
    both = {**keystore_conf(address, certs, alice),
            "ssl.certificate.location": str(certs.clients["alice"][0]),
            "ssl.key.location": str(certs.clients["alice"][1])}
    refused_with(both, "give either it or ssl.certificate.")
    refused_with({**rdkafka_ssl(address, certs), "ssl.certificate.store.location": "Root"},
                 "ssl.certificate.store.location is not supported")


def test_a_keystore_without_a_password(certs, tmp_path):
    """A PKCS#12 file made without encryption opens with an empty ssl.keystore.password; an
    encrypted one does not."""
    plain = make_keystore(certs, "alice", tmp_path / "plain.p12", password="")
    assert EngineConfig.from_properties(
        keystore_conf("127.0.0.1:9", certs, plain, "")).tls is not None
    locked = make_keystore(certs, "alice", tmp_path / "locked.p12")
    refused_with(keystore_conf("127.0.0.1:9", certs, locked, ""),
                 "ssl.keystore.password: the PKCS#12 file .* is encrypted and the password "
                 "is empty")
