"""KIP-226 certificate rotation: a dynamic listener keystore update (issue 27).

New TLS connections present the new certificate at once; connections opened before keep
working; a keystore that cannot be loaded is refused and changes nothing.
"""

from __future__ import annotations

import socket
import ssl
from pathlib import Path

import trustme
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from tls_support import Certs, broker_tls, rdkafka_ssl

TIMEOUT = 10.0


def _peer_common_name(address: str, certs: Certs) -> str:
    host, port = address.rsplit(":", 1)
    context = ssl.create_default_context(cafile=str(certs.ca))
    with socket.create_connection((host, int(port)), timeout=5) as raw, \
            context.wrap_socket(raw, server_hostname=host) as tls:
        subject = dict(pair[0] for pair in tls.getpeercert()["subject"])
    return subject["commonName"]


def _set(admin: AdminClient, name: str, value: str):
    resource = ConfigResource(ConfigResource.Type.BROKER, "1", incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)])
    [future] = admin.incremental_alter_configs([resource]).values()
    try:
        return future.result(TIMEOUT)
    except KafkaException as exc:
        return exc.args[0]


def _second_certificate(certs: Certs, directory: Path) -> Path:
    """A second broker certificate from a CA the clients trust: the one rotated in."""
    ca = trustme.CA(organization_name="kip rotation CA")
    leaf = ca.issue_cert("127.0.0.1", "localhost", common_name="broker-rotated")
    path = directory / "rotated.pem"
    leaf.private_key_and_cert_chain_pem.write_to_path(str(path))
    # The clients trust both CAs: the test CA file gains the second one.
    bundle = directory / "both-cas.pem"
    bundle.write_bytes(certs.ca.read_bytes() + ca.cert_pem.bytes())
    return path, bundle


def test_keystore_update_reaches_new_connections_only(embedded, certs, tmp_path) -> None:
    rotated, bundle = _second_certificate(certs, tmp_path)
    trusting = Certs(**{**certs.__dict__, "ca": bundle})
    broker = embedded(broker_tls(certs, listeners="PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0"))
    address = broker.listener_address("SSL")
    assert _peer_common_name(address, trusting) == "broker"
    # A client connected over TLS before the update.
    secure = AdminClient({**rdkafka_ssl(address, trusting), "log_level": 0})
    assert secure.list_topics(timeout=TIMEOUT).brokers
    plain = AdminClient({"bootstrap.servers": broker.listener_address("PLAINTEXT")})

    # A file that holds no key: refused with Kafka's code, nothing changes.
    err = _set(plain, "listener.name.ssl.ssl.keystore.location", str(certs.ca))
    assert isinstance(err, KafkaError) and err.code() == KafkaError.INVALID_REQUEST
    assert "Validation of dynamic config update of SSLFactory failed" in err.str()
    assert _peer_common_name(address, trusting) == "broker"

    assert _set(plain, "listener.name.ssl.ssl.keystore.location", str(rotated)) is None
    assert _peer_common_name(address, trusting) == "broker-rotated"
    # The connection opened before goes on working (same TLS session, old certificate).
    assert secure.list_topics(timeout=TIMEOUT).brokers
    resource = ConfigResource(ConfigResource.Type.BROKER, "1")
    configs = plain.describe_configs([resource])[resource].result(timeout=TIMEOUT)
    entry = configs["listener.name.ssl.ssl.keystore.location"]
    assert entry.value == str(rotated) and not entry.is_read_only


def test_rotated_keystore_is_in_force_after_a_restart(embedded, certs, tmp_path) -> None:
    rotated, bundle = _second_certificate(certs, tmp_path)
    trusting = Certs(**{**certs.__dict__, "ca": bundle})
    config = broker_tls(certs, listeners="PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0")
    data_dir = tmp_path / "data"
    broker = embedded(config, data_dir=str(data_dir))
    plain = AdminClient({"bootstrap.servers": broker.listener_address("PLAINTEXT")})
    assert _set(plain, "listener.name.ssl.ssl.keystore.location", str(rotated)) is None
    stored = data_dir / "__broker_configs.json"
    assert stored.stat().st_mode & 0o077 == 0  # only the broker's user reads it
    broker.close()
    again = embedded(config, data_dir=str(data_dir))
    assert _peer_common_name(again.listener_address("SSL"), trusting) == "broker-rotated"
