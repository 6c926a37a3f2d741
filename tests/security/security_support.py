"""Helpers of the security tests: a raw client that authenticates itself, client settings,
ACL shorthands. The raw client is tests/kip's RawClient plus SaslHandshake / SaslAuthenticate
done by hand."""

from __future__ import annotations

import socket
import struct
import sys
import time
import uuid
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[1]
# Helper modules of the sibling test dirs (imported, not copied): tests/integration's broker
# subprocess factory and tests/kip's raw client.
for _sibling in ("integration", "kip"):
    if str(TESTS / _sibling) not in sys.path:
        sys.path.insert(0, str(TESTS / _sibling))

from integration_support import BrokerFactory  # noqa: E402,F401  (re-exported)
from raw_client import RawClient  # noqa: E402

from kipproducer.broker.security import AclBinding  # noqa: E402
from kipproducer.sasl.scram import ScramClient  # noqa: E402

ALL_MECHANISMS = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
ADMIN, ADMIN_PASSWORD = "admin", "admin-secret"


class SaslRawClient(RawClient):
    """RawClient that can authenticate itself (SaslHandshake v1 + SaslAuthenticate v2)."""

    def handshake(self, mechanism: str, version: int = 1):
        return self.request(17, version, mechanism=mechanism)

    def authenticate(self, token: bytes, version: int = 2):
        return self.request(36, version, auth_bytes=token)

    def login(self, mechanism: str, user: str, password: str) -> None:
        shake = self.handshake(mechanism)
        assert shake.error_code == 0, shake
        if mechanism == "PLAIN":
            answer = self.authenticate(b"\0" + user.encode() + b"\0" + password.encode())
            assert answer.error_code == 0, answer.error_message
            return
        scram = ScramClient(mechanism, user, password)
        first = self.authenticate(scram.first())
        assert first.error_code == 0, first.error_message
        final = self.authenticate(scram.final(first.auth_bytes))
        assert final.error_code == 0, final.error_message
        scram.verify(final.auth_bytes)

    def send_raw(self, payload: bytes) -> None:
        """A bare size-prefixed frame (the SaslHandshake v0 token flow)."""
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)

    def read_raw(self) -> bytes:
        size = struct.unpack(">i", self._read(4))[0]
        return self._read(size)

    def is_closed(self, timeout: float = 5.0) -> bool:
        """True once the broker has closed the connection (EOF or reset)."""
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def sasl_conf(bootstrap: str, mechanism: str, user: str, password: str,
              **extra: Any) -> dict[str, Any]:
    """confluent-kafka (librdkafka) settings for SASL_PLAINTEXT."""
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
        **extra,
    }


def allow(principal: str, operation: str, resource_type: str = "Topic",
          name: str = "*", **kw: Any) -> AclBinding:
    return AclBinding.of(resource_type, name, principal, operation, "Allow", **kw)


def deny(principal: str, operation: str, resource_type: str = "Topic",
         name: str = "*", **kw: Any) -> AclBinding:
    return AclBinding.of(resource_type, name, principal, operation, "Deny", **kw)


def connect(bootstrap: str) -> SaslRawClient:
    return SaslRawClient(bootstrap)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def consume_values(conf: dict[str, Any], topic: str, n: int, *, partitions: int | None = None,
                   timeout: float = 20) -> list[bytes]:
    """Up to ``n`` values read by a librdkafka consumer with ``conf`` (SASL settings): from
    offset 0 of ``partitions`` partitions when given, else through a subscription."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**conf, "group.id": unique("g"), "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    if partitions is None:
        consumer.subscribe([topic])
    else:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < n and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            out.append(msg.value())
    finally:
        consumer.close()
    return out


def new_topic(admin: RawClient, partitions: int = 2, prefix: str = "sec") -> str:
    """A fresh topic, created over ``admin``'s (authenticated) connection."""
    name = unique(prefix)
    admin.create_topic(name, partitions)
    return name


def log_end(admin: RawClient, topic: str, partitions: int = 2) -> list[int]:
    """Each partition's log end offset (ListOffsets latest)."""
    body = admin.request(2, 8, replica_id=-1, isolation_level=0, topics=[{
        "name": topic,
        "partitions": [{"partition_index": p, "timestamp": -1} for p in range(partitions)]}])
    return [p.offset for p in body.topics[0].partitions]
