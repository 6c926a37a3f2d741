"""A small blocking client for the security APIs, with SASL PLAIN / SCRAM of its own.

``kip acls --bootstrap-server`` uses it: stock admin clients cannot send the ReplicatorWrite
operation (29), which librdkafka's AclOperation enum does not know. It speaks the project's
protocol layer, one request at a time on one connection.
"""

from __future__ import annotations

import re
import socket
import struct
from collections.abc import Mapping
from typing import Any

from kipproducer.protocol import build_request, decode_response, encode_request_frame
from kipproducer.protocol import error_codes as ec
from kipproducer.sasl import plain_token
from kipproducer.sasl.scram import HASHES, ScramClient

from .acls import AclBinding, AclFilter, AclOperation, AclPermission, PatternType, ResourceType
from .errors import AuthenticationFailed, SecurityError

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
_SIZE = struct.Struct(">i")


class RequestFailed(SecurityError):
    """The broker answered with an error code."""


def read_client_properties(path: str) -> dict[str, str]:
    """A ``--command-config`` file: ``key=value`` lines, ``#`` comments.

    Takes librdkafka's names (``sasl.username`` / ``sasl.password``) and also a Java-style
    ``sasl.jaas.config=... username="u" password="p";``.
    """
    props: dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith(("#", "!")):
                continue
            key, sep, value = line.partition("=")
            if not sep:
                raise ValueError(f"{path}: {line!r} is not key=value")
            props[key.strip()] = value.strip()
    jaas = props.get("sasl.jaas.config")
    if jaas:
        for key in ("username", "password"):
            found = re.search(rf'{key}\s*=\s*"([^"]*)"', jaas)
            if found:
                props.setdefault(f"sasl.{key}", found.group(1))
    return props


class SecurityClient:
    def __init__(self, bootstrap: str, config: Mapping[str, str] | None = None,
                 *, timeout: float = 30.0) -> None:
        config = dict(config or {})
        host, _, port = bootstrap.rpartition(":")
        if not port.isdigit():
            raise ValueError(f"bootstrap server {bootstrap!r} is not HOST:PORT")
        self.sock = socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout)
        self.correlation = 0
        try:
            protocol = config.get("security.protocol", "PLAINTEXT").upper()
            if protocol == "SASL_PLAINTEXT":
                self.authenticate(
                    config.get("sasl.mechanism", "PLAIN").upper(),
                    config.get("sasl.username", ""),
                    config.get("sasl.password", ""),
                )
            elif protocol != "PLAINTEXT":
                raise ValueError(f"security.protocol {protocol} is not supported here "
                                 "(PLAINTEXT or SASL_PLAINTEXT)")
        except BaseException:
            self.sock.close()
            raise

    # -- plumbing --------------------------------------------------------------------------------

    def request(self, api_key: int, version: int, **fields: Any) -> Any:
        self.correlation += 1
        frame = encode_request_frame(self.correlation, "kip-acls",
                                     build_request(api_key, version, **fields))
        self.sock.sendall(frame)
        size = _SIZE.unpack(self._read(4))[0]
        return decode_response(self._read(size), api_key, version).body

    def _read(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            out += chunk
        return bytes(out)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> SecurityClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- SASL ------------------------------------------------------------------------------------

    def authenticate(self, mechanism: str, username: str, password: str) -> None:
        shake = self.request(SASL_HANDSHAKE, 1, mechanism=mechanism)
        if shake.error_code != ec.NONE:
            raise AuthenticationFailed(
                f"mechanism {mechanism} refused ({ec.error_name(shake.error_code)}); the "
                f"broker offers {', '.join(shake.mechanisms) or 'none'}")
        if mechanism == "PLAIN":
            self._auth_step(plain_token(username, password))
        elif mechanism in HASHES:
            scram = ScramClient(mechanism, username, password)
            server_first = self._auth_step(scram.first())
            scram.verify(self._auth_step(scram.final(server_first)))
        else:
            raise AuthenticationFailed(f"mechanism {mechanism} is not supported by this client")

    def _auth_step(self, token: bytes) -> bytes:
        answer = self.request(SASL_AUTHENTICATE, 2, auth_bytes=token)
        if answer.error_code != ec.NONE:
            raise AuthenticationFailed(answer.error_message or ec.error_name(answer.error_code))
        return bytes(answer.auth_bytes)

    # -- ACLs ------------------------------------------------------------------------------------

    def create_acls(self, bindings: list[AclBinding]) -> None:
        answer = self.request(CREATE_ACLS, 3, creations=[
            {"resource_type": int(b.resource_type), "resource_name": b.resource_name,
             "resource_pattern_type": int(b.pattern_type), "principal": b.principal,
             "host": b.host, "operation": int(b.operation),
             "permission_type": int(b.permission)}
            for b in bindings])
        problems = [f"{b}: {ec.error_name(r.error_code)} {r.error_message or ''}".rstrip()
                    for b, r in zip(bindings, answer.results, strict=True) if r.error_code]
        if problems:
            raise RequestFailed("; ".join(problems))

    def describe_acls(self, acl_filter: AclFilter) -> list[AclBinding]:
        answer = self.request(DESCRIBE_ACLS, 3, **_filter_fields(acl_filter))
        if answer.error_code:
            raise RequestFailed(f"{ec.error_name(answer.error_code)}: {answer.error_message}")
        return sorted(
            AclBinding(ResourceType(r.resource_type), r.resource_name,
                       PatternType(r.pattern_type), a.principal, a.host,
                       AclOperation(a.operation), AclPermission(a.permission_type))
            for r in answer.resources for a in r.acls)

    def delete_acls(self, filters: list[AclFilter]) -> list[AclBinding]:
        answer = self.request(DELETE_ACLS, 3, filters=[_filter_fields(f) for f in filters])
        removed = []
        for result in answer.filter_results:
            if result.error_code:
                raise RequestFailed(f"{ec.error_name(result.error_code)}: "
                                    f"{result.error_message}")
            removed += [
                AclBinding(ResourceType(m.resource_type), m.resource_name,
                           PatternType(m.pattern_type), m.principal, m.host,
                           AclOperation(m.operation), AclPermission(m.permission_type))
                for m in result.matching_acls]
        return sorted(set(removed))


def _filter_fields(f: AclFilter) -> dict[str, Any]:
    return {
        "resource_type_filter": int(f.resource_type),
        "resource_name_filter": f.resource_name,
        "pattern_type_filter": int(f.pattern_type),
        "principal_filter": f.principal,
        "host_filter": f.host,
        "operation": int(f.operation),
        "permission_type": int(f.permission),
    }
