"""The TLS code blocks of docs/security.md and docs/producer.md work as written."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest
import trustme

from kipproducer.engine.config import EngineConfig

DOCS = Path(__file__).resolve().parents[2] / "docs"


def blocks(doc: str, language: str, after: str) -> list[str]:
    text = (DOCS / doc).read_text()
    text = text[text.index(after):]
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


def test_security_md_tls_example(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = blocks("security.md", "python", "## TLS listeners")[0]
    exec(compile(code, "docs/security.md", "exec"), {})
    assert (tmp_path / "certs" / "broker.pem").exists()


def test_security_md_kip_broker_command(tmp_path, monkeypatch):
    """The shell block (its ports made free ones), with the certificates of the example."""
    monkeypatch.chdir(tmp_path)
    exec(compile(blocks("security.md", "python", "## TLS listeners")[0], "example", "exec"), {})
    shell = blocks("security.md", "sh", "## TLS listeners")[0]
    users, broker = [" ".join(line.split()) for line in
                     shell.replace("\\\n", " ").strip().splitlines()]
    kip = [sys.executable, "-m", "kipproducer"]
    subprocess.run(kip + users.split()[1:], check=True, timeout=60)
    args = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:0", broker).split()[1:]
    proc = subprocess.Popen(kip + args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True)
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline().strip() for _ in range(4)]
        assert [line.split("://")[0] for line in lines[1:]] == [
            "listener SASL_PLAINTEXT", "listener SSL", "listener SASL_SSL"], lines
        from confluent_kafka import Producer

        address = lines[3].split("://")[1]
        p = Producer({"bootstrap.servers": address, "security.protocol": "SASL_SSL",
                      "ssl.ca.location": "certs/ca.pem", "sasl.mechanism": "SCRAM-SHA-512",
                      "sasl.username": "alice", "sasl.password": "alice-secret"})
        p.produce("docs", b"x")
        assert p.flush(20) == 0
    finally:
        proc.terminate()
        assert proc.wait(30) == 0


STORE_PASSWORD = "store-secret"  # what the docs' "<store password>" becomes here


def managed_section() -> str:
    text = (DOCS / "producer.md").read_text()
    start = text.index("## Connecting to managed Kafka")
    return text[start:text.index("\n## ", start)]


def documented(code: str) -> str:
    """A block with the parts the page says to replace filled in."""
    return code.replace("<store password>", STORE_PASSWORD).replace("<port>", "9093")


def run_openssl_block(directory: Path) -> None:
    """The page's openssl command, run in ``directory`` (service.key and service.cert)."""
    shell = re.findall(r"```sh\n(.*?)```", managed_section(), re.S)
    assert len(shell) == 1
    subprocess.run(shlex.split(documented(shell[0])), cwd=directory, check=True, timeout=60,
                   capture_output=True)


@pytest.fixture
def managed_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", managed_section(), re.S)


def test_producer_md_managed_kafka_settings(tmp_path, monkeypatch, managed_blocks):
    """Each service's block builds its Producer, and the engine takes its settings (the
    network is not used: the hosts are placeholders; the Aiven files and AWS's signer are
    stand-ins made here)."""
    monkeypatch.chdir(tmp_path)
    ca = trustme.CA()
    ca.cert_pem.write_to_path("ca.pem")
    leaf = ca.issue_cert("client.example.com")
    leaf.cert_chain_pems[0].write_to_path("service.cert")
    leaf.private_key_pem.write_to_path("service.key")
    run_openssl_block(tmp_path)
    signer = types.ModuleType("aws_msk_iam_sasl_signer")

    class MSKAuthTokenProvider:
        @staticmethod
        def generate_auth_token(region: str) -> tuple[str, int]:
            import time

            return "signed-url-token", int((time.time() + 900) * 1000)

    signer.MSKAuthTokenProvider = MSKAuthTokenProvider  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "aws_msk_iam_sasl_signer", signer)
    assert len(managed_blocks) == 7
    seen = set()
    for code in managed_blocks:
        scope: dict = {}
        exec(compile(documented(code), "docs/producer.md", "exec"), scope)
        config = EngineConfig.from_properties(scope["producer"]._conf)
        assert config.tls is not None
        if "oauth_cb" in scope:
            token = config.sasl.oauth.current()
            assert token.value == "signed-url-token" and token.expires_at < 4e9  # seconds
            seen.add("oauth_cb")
        if '"oidc"' in code:
            assert config.sasl.oauth.source == "sasl.oauthbearer.method=oidc"
            seen.add("oidc")
        if "ssl.keystore.location" in code:
            seen.add("keystore")
    assert seen == {"oauth_cb", "oidc", "keystore"}


def test_producer_md_aiven_keystore(tmp_path, monkeypatch, certs):
    """The page's openssl command makes a keystore the engine and librdkafka both use for
    mTLS with the page's settings, against a broker that requires client certificates."""
    from tls_support import broker_tls

    from kipproducer.broker.embedded import EmbeddedBroker

    monkeypatch.chdir(tmp_path)
    shutil.copy(certs.ca, "ca.pem")
    cert, key = certs.clients["alice"]
    shutil.copy(cert, "service.cert")
    shutil.copy(key, "service.key")
    run_openssl_block(tmp_path)
    code = next(b for b in re.findall(r"```python\n(.*?)```", managed_section(), re.S)
                if "ssl.keystore.location" in b)
    config = broker_tls(certs, listeners="SSL://127.0.0.1:0", **{"ssl.client.auth": "required"})
    with EmbeddedBroker(config=config) as mtls:
        scope: dict = {}
        code = documented(code).replace("<service>-<project>.aivencloud.com:9093",
                                        mtls.listener_address("SSL"))
        exec(compile(code, "docs/producer.md", "exec"), scope)
        producer = scope["producer"]
        reports: list = []
        producer.produce_arrays("aiven-docs", [b"engine"], partition=0,
                                on_delivery=lambda err, r: reports.append(err))
        producer.produce("aiven-docs", b"librdkafka", partition=0,
                         on_delivery=lambda err, m: reports.append(err))
        assert producer.flush(20) == 0
        assert reports == [None, None]
