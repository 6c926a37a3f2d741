"""Certificates for the TLS tests (made with trustme in the test run) and client settings."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trustme

TESTS = Path(__file__).resolve().parents[1]
for _sibling in ("security", "integration", "kip"):
    if str(TESTS / _sibling) not in sys.path:
        sys.path.insert(0, str(TESTS / _sibling))

KEY_PASSWORD = "key-secret"


@dataclass
class Certs:
    """A CA, the broker's certificate (127.0.0.1 and localhost) and client certificates."""

    dir: Path
    ca: Path  # the CA's certificate
    server: Path  # key + chain, one PEM file (ssl.keystore.location)
    server_encrypted: Path  # the same with the key encrypted by KEY_PASSWORD
    server_chain_pem: str
    server_key_pem: str
    other_ca: Path  # a CA nobody uses: an unknown CA for the clients
    clients: dict[str, tuple[Path, Path]]  # name -> (certificate chain, key)


def make_certs(directory: Path) -> Certs:
    from cryptography.hazmat.primitives import serialization

    ca = trustme.CA(organization_name="kip test CA")
    other = trustme.CA(organization_name="unknown CA")
    server = ca.issue_cert("127.0.0.1", "localhost", common_name="broker")
    ca.cert_pem.write_to_path(str(directory / "ca.pem"))
    other.cert_pem.write_to_path(str(directory / "other-ca.pem"))
    server.private_key_and_cert_chain_pem.write_to_path(str(directory / "server.pem"))
    key = serialization.load_pem_private_key(server.private_key_pem.bytes(), None)
    encrypted = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(KEY_PASSWORD.encode()))
    chain = b"".join(blob.bytes() for blob in server.cert_chain_pems)
    (directory / "server-encrypted.pem").write_bytes(encrypted + chain)
    clients = {}
    for name in ("alice", "mallory"):
        leaf = ca.issue_cert(f"{name}@example.com", common_name=name,
                             organization_name="Acme", organization_unit_name="Eng")
        cert, keyfile = directory / f"{name}.pem", directory / f"{name}.key"
        cert.write_bytes(b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
        leaf.private_key_pem.write_to_path(str(keyfile))
        clients[name] = (cert, keyfile)
    return Certs(directory, directory / "ca.pem", directory / "server.pem",
                 directory / "server-encrypted.pem", chain.decode(),
                 server.private_key_pem.bytes().decode(), directory / "other-ca.pem", clients)


def broker_tls(certs: Certs, **extra: str) -> dict[str, str]:
    """Broker properties: a PEM keystore, the CA as truststore."""
    return {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs.server),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(certs.ca),
        **extra,
    }


def rdkafka_ssl(bootstrap: str, certs: Certs, client: str | None = None,
                protocol: str = "SSL", **extra: Any) -> dict[str, Any]:
    """librdkafka (and kipproducer) settings for an SSL connection."""
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "security.protocol": protocol,
        "ssl.ca.location": str(certs.ca),
    }
    if client is not None:
        cert, key = certs.clients[client]
        conf["ssl.certificate.location"] = str(cert)
        conf["ssl.key.location"] = str(key)
    conf.update(extra)
    return conf


def oauthbearer_broker_tls(certs: Certs) -> dict[str, str]:
    """A SASL_SSL listener taking OAUTHBEARER (the broker's unsecured-JWT validation), ACLs
    on, re-authentication every 10 minutes (KIP-368)."""
    return broker_tls(certs, listeners="SASL_SSL://127.0.0.1:0", **{
        "sasl.enabled.mechanisms": "OAUTHBEARER", "authorizer.enabled": "true",
        "connections.max.reauth.ms": "600000"})
