"""The TLS code blocks of docs/security.md and docs/producer.md work as written."""

from __future__ import annotations

import re
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


@pytest.fixture
def managed_blocks() -> list[str]:
    found = blocks("producer.md", "python", "## Connecting to managed Kafka")
    return found[:5]


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
    signer = types.ModuleType("aws_msk_iam_sasl_signer")

    class MSKAuthTokenProvider:
        @staticmethod
        def generate_auth_token(region: str) -> tuple[str, int]:
            import time

            return "signed-url-token", int((time.time() + 900) * 1000)

    signer.MSKAuthTokenProvider = MSKAuthTokenProvider  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "aws_msk_iam_sasl_signer", signer)
    assert len(managed_blocks) == 5
    for code in managed_blocks:
        scope: dict = {}
        # "Replace the <...> parts": the port is the one placeholder the engine parses.
        exec(compile(code.replace("<port>", "9093"), "docs/producer.md", "exec"), scope)
        config = EngineConfig.from_properties(scope["producer"]._conf)
        assert config.tls is not None
        if "oauth_cb" in scope:
            token = config.sasl.oauth.current()
            assert token.value == "signed-url-token" and token.expires_at < 4e9  # seconds
