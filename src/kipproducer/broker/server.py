"""The broker's TCP side: connections, request framing, dispatch, ordered responses.

One asyncio task per connection reads a frame, decodes it, runs its handler and writes the
response before reading the next: Kafka's own per-connection rule (requests are handled one at
a time, in order), which also keeps an idempotent producer's pipelined batches in order.

Bad input never takes the broker down: a frame that cannot be decoded, an unknown API or
version, a size above ``socket.request.max.bytes``, or a request whose bytes dribble in slower
than ``request.read.timeout.ms`` (slow-loris) gets a log line and a closed connection; every
other connection goes on. ApiVersions at a version we do not serve gets Kafka's answer instead
(a v0 response with UNSUPPORTED_VERSION and our version table), so clients can retry lower.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket
import struct
from typing import TYPE_CHECKING

from kipproducer.protocol import (
    ProtocolError,
    build_response,
    decode_request,
    encode_response_frame_parts,
)
from kipproducer.protocol import error_codes as ec

from .api import API_TABLE, RequestContext

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger("kipproducer.broker")

API_VERSIONS_KEY = 18
PRODUCE_KEY = 0
_SIZE = struct.Struct(">i")


class ConnectionClosed(Exception):
    """The peer went away or must be dropped; the reason is already logged."""


class BrokerServer:
    """Accepts Kafka clients on one listener and feeds their requests to a Broker."""

    def __init__(self, broker: Broker, host: str = "127.0.0.1", port: int = 0) -> None:
        self.broker = broker
        self.host = host
        self.port = port
        self._server: asyncio.base_events.Server | None = None
        self._connections: dict[asyncio.Task, asyncio.StreamWriter] = {}
        self._ids = itertools.count(1)

    async def start(self) -> tuple[str, int]:
        self._server = await asyncio.start_server(
            self._on_connection,
            self.host,
            self.port,
            limit=1 << 20,
            reuse_address=True,
        )
        sock = self._server.sockets[0]
        self.host, self.port = sock.getsockname()[:2]
        return self.host, self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task, writer in list(self._connections.items()):
            task.cancel()
            # Also drop the socket: before Python 3.12, asyncio.wait_for swallows a
            # cancellation that races with the read it wraps completing (CPython gh-86296),
            # and such a connection would go on waiting for its client's next request
            # (up to connections.max.idle.ms) while stop() waits for it. The aborted transport
            # ends that read at once.
            writer.transport.abort()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def _on_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections[task] = writer
        peer = writer.get_extra_info("peername") or ("?", 0)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = Connection(self.broker, reader, writer, next(self._ids), str(peer[0]))
        try:
            await conn.serve()
        except ConnectionClosed:
            pass
        except asyncio.CancelledError:
            pass
        except Exception:  # a bug in a handler must not take other clients down
            log.exception("connection %s from %s failed; closing it", conn.id, conn.host)
        finally:
            self._connections.pop(task, None)
            writer.close()


class Connection:
    def __init__(
        self,
        broker: Broker,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        conn_id: int,
        host: str,
    ) -> None:
        self.broker = broker
        self.reader = reader
        self.writer = writer
        self.id = conn_id
        self.host = host
        # Who the client is (User:ANONYMOUS until SASL says otherwise) and where it stands in
        # the SASL exchange; see security/sasl.py.
        self.session = broker.security.new_session(conn_id, host)

    @property
    def principal(self) -> str:
        return self.session.principal

    async def read_frame(self) -> bytearray:
        config = self.broker.config
        try:
            # asyncio.timeout, not wait_for: wait_for wraps the read in a new task, a cost
            # paid twice per request.
            async with asyncio.timeout(config.connections_max_idle_ms / 1000):
                prefix = await self.reader.readexactly(4)
        except asyncio.IncompleteReadError as exc:
            if exc.partial:
                log.info("connection %s: closed inside a size prefix", self.id)
            raise ConnectionClosed from None
        except (TimeoutError, ConnectionError):
            raise ConnectionClosed from None
        (size,) = _SIZE.unpack(prefix)
        limit, limit_name = config.socket_request_max_bytes, "socket.request.max.bytes"
        if not self.session.authenticated and limit > config.sasl_server_max_receive_size:
            # Before SASL completes, only small frames (Kafka's sasl.server.max.receive.size):
            # an unauthenticated client must not make the broker buffer 100 MB.
            limit, limit_name = config.sasl_server_max_receive_size, "sasl.server.max.receive.size"
        if size < 0 or size > limit:
            log.warning(
                "connection %s from %s: frame size %d outside 0..%d (%s); closing",
                self.id,
                self.host,
                size,
                limit,
                limit_name,
            )
            raise ConnectionClosed
        try:
            # bytearray: records fields decode to writable views, so the produce path can
            # stamp offsets into the request's own buffer.
            async with asyncio.timeout(config.request_read_timeout_ms / 1000):
                return bytearray(await self.reader.readexactly(size))
        except asyncio.IncompleteReadError:
            log.info("connection %s: closed inside a %d-byte frame", self.id, size)
            raise ConnectionClosed from None
        except TimeoutError:
            log.warning(
                "connection %s from %s: a %d-byte request did not arrive within "
                "%d ms (request.read.timeout.ms); closing",
                self.id,
                self.host,
                size,
                config.request_read_timeout_ms,
            )
            raise ConnectionClosed from None
        except ConnectionError:
            raise ConnectionClosed from None

    async def serve(self) -> None:
        while True:
            frame = await self.read_frame()
            if self.session.raw_tokens:
                await self.exchange_raw_token(frame)
                continue
            try:
                request = decode_request(frame)
            except ProtocolError as exc:
                header = exc.header
                if header is not None and header.api_key == API_VERSIONS_KEY:
                    await self.send(header.correlation_id, unsupported_api_versions())
                    continue
                log.warning(
                    "connection %s from %s: undecodable request (%s); closing",
                    self.id,
                    self.host,
                    exc,
                )
                raise ConnectionClosed from None
            header = request.header
            spec = API_TABLE.get(header.api_key)
            if spec is None or not spec.min_version <= header.api_version <= spec.max_version:
                if header.api_key == API_VERSIONS_KEY:
                    await self.send(header.correlation_id, unsupported_api_versions())
                    continue
                log.warning(
                    "connection %s from %s (%s): api %d v%d is not served; closing",
                    self.id,
                    self.host,
                    header.client_id,
                    header.api_key,
                    header.api_version,
                )
                raise ConnectionClosed
            if not self.session.may_handle(header.api_key):
                log.warning(
                    "connection %s from %s (%s): %s; closing",
                    self.id,
                    self.host,
                    header.client_id,
                    self.session.describe_refusal(header.api_key),
                )
                raise ConnectionClosed
            ctx = RequestContext(
                self.broker,
                header.api_key,
                header.api_version,
                header.correlation_id,
                header.client_id,
                self.host,
                self.id,
                self.session.principal,
                self.session,
            )
            response = await spec.handler(ctx, request.body)
            if response is None:  # acks=0 produce: no response, as Kafka
                continue
            await self.send(header.correlation_id, response)
            if self.session.close_requested:  # failed SASL: the answer is sent, now close
                await self.drain_and_close()
                raise ConnectionClosed

    async def drain_and_close(self) -> None:
        """Close after a failed authentication, as Kafka does: the answer is sent, and the
        connection closes connection.failed.authentication.delay.ms later. Meanwhile input is
        read and dropped: closing a socket with unread input makes the kernel send RST, which
        can destroy the answer before the client reads it."""
        delay = self.broker.config.connection_failed_authentication_delay_ms / 1000
        try:
            async with asyncio.timeout(delay):
                while await self.reader.read(1 << 16):
                    pass
        except (TimeoutError, ConnectionError, OSError):
            pass

    async def exchange_raw_token(self, frame: bytearray) -> None:
        """After a v0 SaslHandshake, SASL tokens travel as bare frames (no Kafka header)."""
        reply = await self.session.raw_token(bytes(frame))
        if reply is None:  # failed: Kafka closes without an answer in this flow
            raise ConnectionClosed
        try:
            self.writer.write(_SIZE.pack(len(reply)) + reply)
            await self.writer.drain()
        except ConnectionError:
            raise ConnectionClosed from None

    async def send(self, correlation_id: int, body) -> None:
        try:
            self.writer.writelines(encode_response_frame_parts(correlation_id, body))
            await self.writer.drain()
        except ConnectionError:
            raise ConnectionClosed from None


def api_versions_table() -> list[dict]:
    return [
        {
            "api_key": spec.api_key,
            "min_version": spec.advertise_min,
            "max_version": spec.max_version,
        }
        for spec in sorted(API_TABLE.values(), key=lambda s: s.api_key)
    ]


def unsupported_api_versions():
    """KIP-511: an ApiVersions request at an unknown version gets a v0 answer with the table."""
    return build_response(
        API_VERSIONS_KEY, 0, error_code=ec.UNSUPPORTED_VERSION, api_keys=api_versions_table()
    )
