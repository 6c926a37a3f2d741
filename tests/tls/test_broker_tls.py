"""TLS listeners of the reference broker: stock clients over SSL, mTLS and SASL_SSL; the
principal of a client certificate in ACLs; bad keystore settings refused at start."""

from __future__ import annotations

import shutil
import subprocess
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from tls_support import KEY_PASSWORD, broker_tls, rdkafka_ssl

from kipproducer.broker.broker_config import BrokerConfigError
from kipproducer.broker.embedded import EmbeddedBroker
from kipproducer.broker.security import AclBinding
from kipproducer.broker.security.tls import parse_mapping_rules, principal_name, subject_dn

LISTENERS = "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0"


def topic_name() -> str:
    return f"tls-{uuid.uuid4().hex[:8]}"


def produce(conf: dict, topic: str, values: list[bytes]) -> None:
    producer = Producer({**conf, "linger.ms": 0})
    errors: list = []
    for value in values:
        producer.produce(topic, value, on_delivery=lambda e, m: e and errors.append(e))
    assert producer.flush(20) == 0
    assert errors == []


def consume(conf: dict, topic: str, n: int) -> list[bytes]:
    consumer = Consumer({**conf, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[bytes] = []
    try:
        for _ in range(60):
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is None, msg.error()
                out.append(msg.value())
            if len(out) >= n:
                break
    finally:
        consumer.close()
    return out


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory, certs):
    config = broker_tls(certs, listeners=LISTENERS, **{
        "ssl.client.auth": "requested", "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256"})
    with EmbeddedBroker(config=config) as broker:
        broker.broker.users.add("bob", "bob-secret")
        yield broker


def test_librdkafka_over_ssl_and_metadata_names_the_ssl_listener(tls_broker, certs):
    address = tls_broker.listener_address("SSL")
    assert address != tls_broker.bootstrap_servers  # bootstrap is the PLAINTEXT listener
    conf = rdkafka_ssl(address, certs)
    topic = topic_name()
    produce(conf, topic, [b"a", b"b", b"c"])
    assert consume(conf, topic, 3) == [b"a", b"b", b"c"]
    metadata = Producer(conf).list_topics(timeout=10)
    assert [f"{b.host}:{b.port}" for b in metadata.brokers.values()] == [address]


def test_librdkafka_mtls_and_sasl_ssl(tls_broker, certs):
    topic = topic_name()
    produce(rdkafka_ssl(tls_broker.listener_address("SSL"), certs, "alice"), topic, [b"m"])
    sasl = rdkafka_ssl(tls_broker.listener_address("SASL_SSL"), certs, protocol="SASL_SSL", **{
        "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "bob", "sasl.password": "bob-secret"})
    produce(sasl, topic, [b"s"])
    assert consume(sasl, topic, 2) == [b"m", b"s"]


def test_plaintext_client_cannot_talk_to_the_ssl_listener(tls_broker):
    producer = Producer({"bootstrap.servers": tls_broker.listener_address("SSL"),
                         "socket.timeout.ms": 2000, "message.timeout.ms": 2000})
    with pytest.raises(KafkaException):
        producer.list_topics(timeout=3)


def test_client_with_an_unknown_ca_is_refused(tls_broker, certs):
    conf = rdkafka_ssl(tls_broker.listener_address("SSL"), certs)
    conf["ssl.ca.location"] = str(certs.other_ca)
    with pytest.raises(KafkaException):
        Producer(conf).list_topics(timeout=3)


def test_kafka_python_over_ssl_and_mtls(tls_broker, certs):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.structs import TopicPartition as KPTopicPartition

    topic = topic_name()
    cert, key = certs.clients["alice"]
    common = {"bootstrap_servers": tls_broker.listener_address("SSL"),
              "security_protocol": "SSL", "ssl_cafile": str(certs.ca)}
    producer = KafkaProducer(**common, ssl_certfile=str(cert), ssl_keyfile=str(key))
    for value in (b"k1", b"k2"):
        producer.send(topic, value).get(timeout=20)
    producer.close()
    consumer = KafkaConsumer(**common, enable_auto_commit=False, consumer_timeout_ms=5000)
    consumer.assign([KPTopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    assert [m.value for m in consumer][:2] == [b"k1", b"k2"]
    consumer.close()


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat_over_mtls(tls_broker, certs):
    topic = topic_name()
    cert, key = certs.clients["alice"]
    args = ["kcat", "-b", tls_broker.listener_address("SSL"), "-X", "security.protocol=SSL",
            "-X", f"ssl.ca.location={certs.ca}", "-X", f"ssl.certificate.location={cert}",
            "-X", f"ssl.key.location={key}"]
    subprocess.run([*args, "-P", "-t", topic], input=b"x1\nx2\n", check=True, timeout=30)
    out = subprocess.run([*args, "-C", "-t", topic, "-o", "beginning", "-e", "-q"],
                         capture_output=True, check=True, timeout=30)
    assert out.stdout.split() == [b"x1", b"x2"]


def test_acls_name_the_certificate_principal(embedded, certs):
    config = broker_tls(certs, listeners="SSL://127.0.0.1:0", **{
        "ssl.client.auth": "required", "authorizer.enabled": "true",
        "ssl.principal.mapping.rules": "RULE:^CN=([a-z]+),OU=Eng,O=Acme$/$1/U,DEFAULT"})
    broker = embedded(config)
    topic = topic_name()
    broker.broker.acls.add([
        AclBinding.of("Topic", topic, "User:ALICE", op, "Allow")
        for op in ("Write", "Describe", "Create")])
    address = broker.listener_address("SSL")
    produce(rdkafka_ssl(address, certs, "alice"), topic, [b"ok"])
    denied = Producer({**rdkafka_ssl(address, certs, "mallory"), "message.timeout.ms": 5000})
    errors: list = []
    denied.produce(topic, b"no", on_delivery=lambda e, m: errors.append(e))
    denied.flush(10)
    assert errors and errors[0].name() == "TOPIC_AUTHORIZATION_FAILED", errors
    # required: a client without a certificate fails its handshake
    with pytest.raises(KafkaException):
        Producer(rdkafka_ssl(address, certs)).list_topics(timeout=3)


def test_subject_and_mapping_rules():
    cert = {"subject": ((("countryName", "US"),), (("organizationName", "Acme, Inc"),),
                        (("commonName", "alice"),))}
    dn = subject_dn(cert)
    assert dn == "CN=alice,O=Acme\\, Inc,C=US"
    assert principal_name(dn, parse_mapping_rules("DEFAULT")) == dn
    rules = parse_mapping_rules("RULE:^CN=(.*?),O=(.*)$/$1@$2/L, DEFAULT")
    assert principal_name("CN=Bob,O=X", rules) == "bob@x"
    assert principal_name("OU=a", rules) == "OU=a"
    with pytest.raises(BrokerConfigError, match="ssl.principal.mapping.rules"):
        parse_mapping_rules("RULE:broken")


def test_inline_pem_keystore_and_encrypted_key(embedded, certs):
    inline = embedded({
        "listeners": "SSL://127.0.0.1:0",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.certificate.chain": certs.server_chain_pem,
        "ssl.keystore.key": certs.server_key_pem,
        "ssl.truststore.certificates": certs.ca.read_text(),
    })
    Producer(rdkafka_ssl(inline.listener_address("SSL"), certs)).list_topics(timeout=10)
    encrypted = embedded(broker_tls(certs, listeners="SSL://127.0.0.1:0", **{
        "ssl.keystore.location": str(certs.server_encrypted),
        "ssl.key.password": KEY_PASSWORD}))
    Producer(rdkafka_ssl(encrypted.listener_address("SSL"), certs)).list_topics(timeout=10)


@pytest.mark.parametrize("override, message", [
    ({"ssl.keystore.location": "/nonexistent/server.pem"}, "ssl.keystore.location"),
    ({"ssl.keystore.type": "JKS"}, "ssl.keystore.type"),
    ({"ssl.client.auth": "always"}, "ssl.client.auth"),
    ({"listeners": "TLS://127.0.0.1:0"}, "listeners"),
    ({"listeners": "SASL_SSL://127.0.0.1:0"}, "sasl.enabled.mechanisms"),
])
def test_bad_tls_settings_fail_at_start(certs, override, message):
    config = {**broker_tls(certs, listeners="SSL://127.0.0.1:0"), **override}
    with pytest.raises(BrokerConfigError, match=message):
        EmbeddedBroker(config=config)


def test_wrong_key_password_fails_at_start(certs):
    config = broker_tls(certs, listeners="SSL://127.0.0.1:0", **{
        "ssl.keystore.location": str(certs.server_encrypted), "ssl.key.password": "wrong"})
    with pytest.raises(BrokerConfigError, match="ssl.key.password"):
        EmbeddedBroker(config=config)
    del config["ssl.key.password"]  # an encrypted key without a password: no prompt
    with pytest.raises(BrokerConfigError, match="encrypted and ssl.key.password is not set"):
        EmbeddedBroker(config=config)


def test_kip_broker_command_with_listeners(tmp_path, certs):
    """``kip broker --config listeners=SSL://...`` beside ``--listen``: both listeners open."""
    import sys

    args = [sys.executable, "-m", "kipproducer", "broker", "--listen", "127.0.0.1:0",
            "--data-dir", str(tmp_path / "data")]
    for key, value in broker_tls(certs, listeners="SSL://127.0.0.1:0").items():
        args += ["--config", f"{key}={value}"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline().strip() for _ in range(3)]
        assert lines[0].startswith("listening on 127.0.0.1:"), lines
        assert lines[1].startswith("listener PLAINTEXT://127.0.0.1:"), lines
        assert lines[2].startswith("listener SSL://127.0.0.1:"), lines
        conf = rdkafka_ssl(lines[2].removeprefix("listener SSL://"), certs)
        topic = topic_name()
        produce(conf, topic, [b"cli"])
        assert consume(conf, topic, 1) == [b"cli"]
    finally:
        proc.terminate()
        assert proc.wait(30) == 0


def test_kip_tools_over_mtls_acls_for_a_certificate_principal(embedded, certs, tmp_path, capsys):
    """kip acls / kip transactions (kipproducer's own admin client) over mTLS: a certificate
    super user adds an ACL naming another certificate's principal."""
    from kipproducer.cli import main as cli_main

    broker = embedded(broker_tls(certs, listeners="SSL://127.0.0.1:0", **{
        "ssl.client.auth": "required", "authorizer.enabled": "true",
        "super.users": "User:admin", "ssl.principal.mapping.rules":
        "RULE:^CN=alice,.*$/admin/,RULE:^CN=([a-z]+),.*$/$1/"}))
    cert, key = certs.clients["alice"]
    properties = tmp_path / "client.properties"
    properties.write_text("security.protocol=SSL\n"
                          f"ssl.ca.location={certs.ca}\n"
                          f"ssl.certificate.location={cert}\nssl.key.location={key}\n")
    common = ["--bootstrap-server", broker.listener_address("SSL"),
              "--command-config", str(properties)]
    assert cli_main(["acls", *common, "--add", "--allow-principal", "User:mallory",
                     "--operation", "Write", "--topic", "audited"]) == 0
    assert [str(b) for b in broker.broker.acls.list()] and \
        broker.broker.authorize("User:mallory", "Write", "Topic", "audited")
    assert cli_main(["transactions", *common, "list"]) == 0
    properties.write_text("security.protocol=SSL\n"
                          f"ssl.ca.location={certs.other_ca}\n")
    capsys.readouterr()
    assert cli_main(["acls", *common, "--list"]) != 0
    assert "certificate verify failed" in capsys.readouterr().err


def test_advertised_listeners_name_each_listener(embedded, certs):
    """Metadata tells each client the advertised address of the listener it came in on."""
    from confluent_kafka.admin import AdminClient, ConfigResource

    broker = embedded(broker_tls(certs, listeners="PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
                                 **{"advertised.listeners": "SSL://localhost:19093"}))
    plain = AdminClient({"bootstrap.servers": broker.listener_address("PLAINTEXT")})
    brokers = plain.list_topics(timeout=10).brokers
    assert [f"{b.host}:{b.port}" for b in brokers.values()] == [
        broker.listener_address("PLAINTEXT")]
    secure = AdminClient({**rdkafka_ssl(broker.listener_address("SSL"), certs),
                          "log_level": 0})
    assert [f"{b.host}:{b.port}" for b in secure.list_topics(timeout=10).brokers.values()] == [
        "localhost:19093"]
    resource = ConfigResource(ConfigResource.Type.BROKER, "1")
    configs = plain.describe_configs([resource])[resource].result(timeout=10)
    ssl_port = broker.listener_address("SSL").rsplit(":", 1)[1]
    assert configs["listeners"].value.endswith(f"SSL://127.0.0.1:{ssl_port}")
    assert configs["advertised.listeners"].value.endswith("SSL://localhost:19093")
    assert configs["ssl.key.password"].value is None
    with pytest.raises(BrokerConfigError, match="advertised.listeners"):
        EmbeddedBroker(config=broker_tls(certs, listeners="SSL://127.0.0.1:0", **{
            "advertised.listeners": "SASL_SSL://localhost:1"}))
