"""A small blocking Kafka client for the command line tools, with SASL PLAIN / SCRAM of its own.

``kip acls --bootstrap-server`` and ``kip transactions`` use it: they need requests stock admin
clients cannot send (ReplicatorWrite, operation 29, which librdkafka's AclOperation enum does not
know; WriteTxnMarkers). It speaks the project's protocol layer, one request at a time on one
connection.
"""

from __future__ import annotations

import argparse
import re
import socket
import struct
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kipproducer.broker.security.errors import AuthenticationFailed, SecurityError
from kipproducer.protocol import build_request, decode_response, encode_request_frame
from kipproducer.protocol import error_codes as ec
from kipproducer.sasl import plain_token
from kipproducer.sasl.scram import HASHES, ScramClient

from .protocol.api_keys import SASL_AUTHENTICATE, SASL_HANDSHAKE

_SIZE = struct.Struct(">i")


class RequestFailed(SecurityError):
    """The broker answered with an error code (``code``, where the caller gave it: whether
    asking again may help is ``error_codes.is_retriable(code)``)."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


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


def add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    """--bootstrap-server and --command-config, as Kafka's own tools take them."""
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT",
                        help="a broker of the cluster to ask")
    parser.add_argument("--command-config", metavar="FILE",
                        help="client properties: security.protocol, sasl.mechanism, "
                             "sasl.username, sasl.password, ssl.ca.location, "
                             "ssl.certificate.location, ssl.key.location, ...")


def run_tool(tool: str, client_class: type[BlockingClient], args: argparse.Namespace,
             action: Callable[[BlockingClient, dict[str, str]], int]) -> int:
    """Connect as ``args`` say and run ``action(client, client properties)``; a failure is
    one line on stderr naming the tool (exit code 1), not a traceback."""
    try:
        config = read_client_properties(args.command_config) if args.command_config else {}
    except (OSError, ValueError) as exc:
        print(f"{tool}: --command-config {args.command_config}: {exc}", file=sys.stderr)
        return 1
    try:
        with client_class(args.bootstrap_server, config) as client:
            return action(client, config)
    except (OSError, ConnectionError) as exc:  # the address, not only "[Errno 111] ..."
        print(f"{tool}: cannot reach {args.bootstrap_server}: {exc}", file=sys.stderr)
        return 1
    except (RequestFailed, ValueError) as exc:
        print(f"{tool}: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # e.g. SecurityError from SASL
        print(f"{tool}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


def print_table(header: Sequence[str], rows: Sequence[Sequence[Any]], *, sep: str = "  ",
                none: str = "-") -> None:
    """Columns padded to their widest cell, as Kafka's tools print them; ``none`` stands for
    a None cell."""
    cells = [[str(h) for h in header]]
    cells += [[none if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for row in cells:
        print(sep.join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def _host_port(server: str) -> tuple[str, int]:
    host, _, port = server.strip().rpartition(":")
    if not port.isdigit():
        raise ValueError(f"bootstrap server {server.strip()!r} is not HOST:PORT")
    return host or "127.0.0.1", int(port)


def _first_answering(addresses: list[tuple[str, int]], timeout: float
                     ) -> tuple[str, socket.socket]:
    """A connection to the first of the bootstrap servers that accepts one, as any Kafka
    client takes its bootstrap list (a node of the list may be down)."""
    failures = []
    for host, port in addresses:
        try:
            return host, socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            failures.append(f"{host}:{port}: {exc}")
    if len(failures) == 1:
        raise OSError(f"cannot connect to the bootstrap server {failures[0]}")
    raise OSError("cannot connect to any bootstrap server: " + "; ".join(failures))


class BlockingClient:
    """One connection to one broker, one request at a time; SASL PLAIN / SCRAM if configured.

    ``config`` takes client property names: ``security.protocol`` (PLAINTEXT, SSL,
    SASL_PLAINTEXT or SASL_SSL), ``sasl.mechanism``, ``sasl.username``, ``sasl.password`` and
    librdkafka's ``ssl.*`` properties (kipproducer.engine.tls).
    """

    client_id = "kip"

    def __init__(self, bootstrap: str, config: Mapping[str, str] | None = None,
                 *, timeout: float = 30.0) -> None:
        config = dict(config or {})
        addresses = [_host_port(server) for server in bootstrap.split(",") if server.strip()]
        if not addresses:
            raise ValueError(f"bootstrap servers {bootstrap!r} name no HOST:PORT")
        protocol = config.get("security.protocol", "PLAINTEXT").upper()
        tls = None
        if protocol in ("SSL", "SASL_SSL"):
            from kipproducer.engine.tls import tls_settings

            tls = tls_settings(config)  # TlsConfigError (a ValueError) names the property
        host, self.sock = _first_answering(addresses, timeout)
        self.correlation = 0
        try:
            if tls is not None:
                self.sock = tls.context.wrap_socket(
                    self.sock, server_hostname=(host or "127.0.0.1") if tls.check_hostname
                    else None)
            if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
                self.authenticate(
                    config.get("sasl.mechanism", "PLAIN").upper(),
                    config.get("sasl.username", ""),
                    config.get("sasl.password", ""),
                )
            elif protocol not in ("PLAINTEXT", "SSL"):
                raise ValueError(f"security.protocol {protocol} is not supported here "
                                 "(PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL)")
        except BaseException:
            self.sock.close()
            raise

    # -- plumbing --------------------------------------------------------------------------------

    def request(self, api_key: int, version: int, **fields: Any) -> Any:
        self.correlation += 1
        frame = encode_request_frame(self.correlation, self.client_id,
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

    def __enter__(self) -> BlockingClient:
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
