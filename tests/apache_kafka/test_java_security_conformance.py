"""Kafka's tools and Java clients over SASL_SSL (SCRAM) and mTLS (PEM keystores), with ACLs,
against ``kip broker`` and, in the same test, a 1-node Apache Kafka with the same listeners,
users, certificates and authorizer (issue 47): kafka-acls prints the same, a client the ACLs
deny gets the same error, allowed clients produce and consume the same records with the Java
clients' own security configs.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kafka_jars
import pytest
from conformance import DELIBERATE, SHARED_CONFIG, Pair, same
from cryptography.hazmat.primitives import serialization
from kafka_cluster import KafkaCluster, KafkaNode, free_port
from tool_runs import (
    ACLS,
    CONSOLE_CONSUMER,
    GET_OFFSETS,
    TOPICS,
    VERIFIABLE_PRODUCER,
    Target,
    differences,
    events,
    normalize,
    run_both,
    spawn,
)

from kipproducer.broker.embedded import EmbeddedBroker

USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
SUPER_USERS = "User:ANONYMOUS;User:admin"  # ANONYMOUS: the PLAINTEXT listener (and Kafka's
# controller and inter-broker traffic): the tests' own admin connections
PRINCIPAL_RULES = "RULE:^CN=([^,]+),.*$/$1/,DEFAULT"  # certificate CN=alice,... -> User:alice


def keystore_pem(cert: Any) -> bytes:
    """A trustme certificate as one PEM keystore file: the PKCS#8 key, then the chain."""
    key = serialization.load_pem_private_key(cert.private_key_pem.bytes(), password=None)
    pkcs8 = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption())
    return pkcs8 + b"".join(blob.bytes() for blob in cert.cert_chain_pems)


class SecuredKafka(KafkaCluster):
    """The harness's 1-node cluster with TLS, plus a SASL_SSL listener (SCRAM) and Kafka's
    StandardAuthorizer."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, 1, tls=True, scram_users=USERS, config={
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": SUPER_USERS,
            "ssl.principal.mapping.rules": PRINCIPAL_RULES,
        })
        self.listeners.append("SASL_SSL")
        for node in self.nodes.values():
            node.ports["SASL_SSL"] = free_port()

    def _make_certificates(self) -> None:
        super()._make_certificates()
        # trustme writes the key as SEC1 ("BEGIN EC PRIVATE KEY"); Kafka's PEM keystore
        # takes PKCS#8 only
        assert self.security.broker_pem is not None
        self.security.broker_pem.write_bytes(
            keystore_pem(self.ca.issue_cert("127.0.0.1", "localhost")))

    def _server_properties(self, node: KafkaNode) -> dict[str, Any]:
        config = super()._server_properties(node)
        sec, prefix = self.security, "listener.name.sasl_ssl"
        config.update({
            "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
            f"{prefix}.ssl.keystore.type": "PEM",
            f"{prefix}.ssl.keystore.location": sec.broker_pem,
            f"{prefix}.ssl.truststore.type": "PEM",
            f"{prefix}.ssl.truststore.location": sec.ca_pem,
            **{f"{prefix}.{mech}.sasl.jaas.config":
               "org.apache.kafka.common.security.scram.ScramLoginModule required;"
               for mech in ("scram-sha-256", "scram-sha-512")},
        })
        return config


class SecuredPair(Pair):
    """Targets on each broker's PLAINTEXT listener (a super user: the admin commands) and, by
    name, its SASL_SSL and SSL ones."""

    def __init__(self, kafka: SecuredKafka, kip: EmbeddedBroker, root: Path) -> None:
        super().__init__(kafka, kip, root)
        self.sasl_ssl = {"kafka": kafka.bootstrap_for("SASL_SSL"),
                         "kip": kip.listener_address("SASL_SSL")}
        self.ssl = {"kafka": kafka.bootstrap_for("SSL"), "kip": kip.listener_address("SSL")}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredPair]:
    root = tmp_path_factory.mktemp("secured")
    reason = kafka_jars.missing()  # conftest.py's rule: skip without Kafka, fail in CI
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"Apache Kafka is required in CI: {reason}", pytrace=False)
        pytest.skip(f"Apache Kafka tests need {reason}")
    kafka = SecuredKafka(root / "kafka-cluster")
    try:
        kafka.start()
        sec = kafka.security
        assert sec.broker_pem is not None and sec.ca_pem is not None
        with EmbeddedBroker(config={
            **SHARED_CONFIG,
            "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
            "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
            "ssl.keystore.location": str(sec.broker_pem),
            "ssl.truststore.location": str(sec.ca_pem),
            "ssl.client.auth": "requested",
            "ssl.principal.mapping.rules": PRINCIPAL_RULES,
            "authorizer.enabled": "true",
            "super.users": SUPER_USERS,
        }) as kip:
            for user, password in USERS.items():
                kip.broker.users.add(user, password)
            pair = SecuredPair(kafka, kip, root)
            _client_files(pair, kafka)
            yield pair
    finally:
        kafka.close()


def _client_files(pair: SecuredPair, kafka: SecuredKafka) -> None:
    """Each user's Java client configs, in each target's scratch directory: ``<user>-scram``
    (SASL_SSL, SCRAM-SHA-512) and ``<user>-mtls`` (SSL with the user's certificate)."""
    ca = kafka.security.ca_pem
    for user in ("alice", "bob"):
        # (an identity too: a certificate with an empty subjectAltName does not parse in Java)
        cert = kafka.ca.issue_cert(f"{user}.clients.test", common_name=user,
                                   organization_unit_name="clients")
        for target in (pair.kafka, pair.kip):
            pem = target.scratch / f"{user}.pem"  # PKCS#8 key + chain, as Kafka's PEM keystore
            pem.write_bytes(keystore_pem(cert))
            trust = f"ssl.truststore.type=PEM\nssl.truststore.location={ca}\n"
            (target.scratch / f"{user}-scram.properties").write_text(
                "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
                "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule "
                f'required username="{user}" password="{USERS[user]}";\n' + trust)
            (target.scratch / f"{user}-mtls.properties").write_text(
                f"security.protocol=SSL\nssl.keystore.type=PEM\nssl.keystore.location={pem}\n"
                + trust)
    shutil.copy(ca, pair.kip.scratch / "ca.pem")


def acls(*args: str) -> tuple[str, ...]:
    return (ACLS, "--bootstrap-server", "{bs}", *args)


def test_kafka_acls_and_a_denied_client(secured: SecuredPair) -> None:
    pair = secured
    setup = [
        (TOPICS, "--bootstrap-server", "{bs}", "--create", "--topic", "sec", "--partitions", "1"),
        acls("--add", "--allow-principal", "User:alice", "--producer", "--topic", "sec"),
        acls("--add", "--allow-principal", "User:alice", "--consumer", "--topic", "sec",
             "--group", "sec-"),
        acls("--add", "--allow-principal", "User:alice", "--operation", "Read",
             "--resource-pattern-type", "prefixed", "--group", "sec-"),
        acls("--add", "--deny-principal", "User:bob", "--operation", "Write", "--topic", "sec"),
        acls("--list"),
        acls("--list", "--topic", "sec"),
        acls("--list", "--principal", "User:alice"),
        acls("--remove", "--deny-principal", "User:bob", "--operation", "Write", "--topic",
             "sec", "--force"),
        acls("--list", "--topic", "sec"),
    ]
    same(pair.compare(setup, unordered=set(range(1, len(setup)))))
    assert "User:alice" in pair.runs[6] and "operation=WRITE" in pair.runs[6]
    # bob has no ACL: the same refusals on both, through the Java clients over SASL_SSL
    denied = [
        (TOPICS, "--bootstrap-server", "{sasl_ssl}", "--command-config",
         "{dir}/bob-scram.properties", "--describe", "--topic", "sec"),
        (CONSOLE_CONSUMER, "--bootstrap-server", "{sasl_ssl}", "--command-config",
         "{dir}/bob-scram.properties", "--topic", "sec", "--group", "sec-bob",
         "--from-beginning", "--timeout-ms", "10000"),
        (GET_OFFSETS, "--bootstrap-server", "{sasl_ssl}", "--command-config",
         "{dir}/bob-scram.properties", "--topic", "sec"),
        (ACLS, "--bootstrap-server", "{sasl_ssl}", "--command-config",
         "{dir}/bob-scram.properties", "--list"),
    ]
    same(_compare_on(pair, denied))
    assert "TopicAuthorizationException" in pair.runs[1] or "not authorized" in (
        pair.runs[1].lower()), pair.runs[1]


@dataclass(frozen=True)
class SecuredTarget(Target):
    """A target whose commands may name its ``{sasl_ssl}`` and ``{ssl}`` listeners."""

    sasl_ssl: str = ""
    ssl: str = ""

    def fill(self, word: str) -> str:
        return super().fill(word.replace("{sasl_ssl}", self.sasl_ssl).replace("{ssl}", self.ssl))


def _on(pair: SecuredPair, target: Target) -> SecuredTarget:
    return SecuredTarget(target.name, target.bootstrap, target.node, target.scratch,
                         pair.sasl_ssl[target.name], pair.ssl[target.name])


# Deliberate (docs/broker.md): DescribeAcls refused for want of Describe on the Cluster. Kafka's
# message prints its internal request object (connection id, session object), kip broker's
# names the principal and what it lacks.
CLUSTER_DESCRIBE_REFUSED = (
    (r"Request Request\(.*\) needs DESCRIBE permission\.|User:\w+ lacks Describe on the cluster",
     "<no Describe on the Cluster>"),
)


def _compare_on(pair: SecuredPair, commands: list[tuple[str, ...]],
                unordered: Collection[int] = ()) -> list[str]:
    rules = (*DELIBERATE, *CLUSTER_DESCRIBE_REFUSED)
    on_kafka, on_kip = run_both(_on(pair, pair.kafka), _on(pair, pair.kip), commands)
    pair.runs = [normalize(run.text, *rules) for run in on_kip]
    return differences(on_kafka, on_kip, *rules, unordered=unordered)


@pytest.mark.parametrize("login", ["scram", "mtls"])
def test_allowed_clients_over_sasl_ssl_and_mtls(secured: SecuredPair, login: str) -> None:
    """alice (allowed by the ACLs the test adds) writes 200 records with the Java
    producer and reads them back with the Java consumer in her group, logged in with SCRAM
    over SASL_SSL or with her certificate over SSL: the same on both brokers."""
    pair = secured
    topic, listener = f"sec-{login}", "{sasl_ssl}" if login == "scram" else "{ssl}"
    config = f"{{dir}}/alice-{login}.properties"
    # kafka-acls prints the ACLs it adds from a hash set, in an order that differs from one
    # JVM to the next (each side's tool may run in its own): compared sorted
    same(_compare_on(pair, [
        (TOPICS, "--bootstrap-server", "{bs}", "--create", "--topic", topic),
        acls("--add", "--allow-principal", "User:alice", "--producer", "--consumer", "--topic",
             topic, "--group", f"sec-{login}"),
    ], unordered={1}))
    producers = [spawn(_on(pair, t), VERIFIABLE_PRODUCER, "--bootstrap-server", listener,
                       "--topic", topic, "--max-messages", "200", "--acks", "-1",
                       "--command-config", config, name=f"alice-{login}")
                 for t in (pair.kafka, pair.kip)]
    assert [proc.wait(120) for proc in producers] == [0, 0]
    for target in (pair.kafka, pair.kip):
        acked = [e for e in events(target, f"alice-{login}")
                 if e["name"] == "producer_send_success"]
        assert len(acked) == 200, target.name
    on_kafka, on_kip = run_both(_on(pair, pair.kafka), _on(pair, pair.kip), [
        (CONSOLE_CONSUMER, "--bootstrap-server", listener, "--command-config", config,
         "--topic", topic, "--group", f"sec-{login}", "--from-beginning", "--max-messages",
         "200", "--timeout-ms", "30000")])
    for run in (on_kafka[0], on_kip[0]):
        assert sorted(run.out.split()) == sorted(str(i) for i in range(200)), run
