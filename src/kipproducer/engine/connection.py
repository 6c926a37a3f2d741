"""One client connection to one broker: pipelined requests over the shared protocol layer.

Requests are written as they come; responses arrive in request order (Kafka's per-connection
guarantee) and are matched by correlation id. On connect the connection negotiates API
versions (ApiVersions v3, falling back to v0 as KIP-511 describes) and records the broker's
supported features (KIP-584), which is how the engine learns whether a broker implements the
kipproducer wire extensions.

With SASL configured (security.protocol=SASL_PLAINTEXT) the connection then authenticates as
Kafka's clients do (KIP-43, KIP-152): SaslHandshake v1 naming the mechanism, then
SaslAuthenticate carrying the mechanism's tokens (PLAIN: one; SCRAM: client-first and
client-final, and the broker's signature is checked). Only then is the connection handed out.
A refusal is a :class:`BrokerAuthenticationError`: retrying with the same credentials would be
refused again.

The socket is driven by the engine's own transport (engine/socket_transport.py: requests go
from the batches to the socket without a copy in Python). With TLS (security.protocol SSL /
SASL_SSL, engine/tls.py) the socket is wrapped in an SSLSocket and its handshake done before
anything is sent; a failed handshake (an unknown CA, a certificate that does not name the
host) is a :class:`BrokerTlsError`, as final as a refused password.

OAUTHBEARER sends the token of the configured source (engine/oauth.py). When the broker
answers SaslAuthenticate with a session lifetime (KIP-368), the connection re-authenticates
between 85% and 95% of it, as Kafka's clients do: new requests are held (the connection reads
as congested), the ones in flight are answered, SaslHandshake + SaslAuthenticate go out with
a fresh token, then the held requests follow in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import random
import socket
import ssl
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from kipproducer import _held_io as held_io
from kipproducer.protocol import (
    FrameReceiver,
    ProtocolError,
    build_request,
    decode_response,
    encode_request_frame_parts,
    peek_correlation_id,
)
from kipproducer.protocol import error_codes as ec
from kipproducer.protocol.produce_codec import decode_produce_response, is_direct
from kipproducer.protocol.schemas import version_range
from kipproducer.sasl import PLAIN, plain_token
from kipproducer.sasl.errors import AuthenticationFailed
from kipproducer.sasl.oauthbearer import OAUTHBEARER, client_message
from kipproducer.sasl.scram import ScramClient

from ..protocol.api_keys import API_VERSIONS, SASL_AUTHENTICATE, SASL_HANDSHAKE
from .config import SaslSettings
from .oauth import TokenError
from .socket_transport import SocketTransport, tls_handshake
from .tls import TlsSettings, describe_handshake_error

log = logging.getLogger("kipproducer.engine")

UNSUPPORTED_SASL_MECHANISM = ec.error_code("UNSUPPORTED_SASL_MECHANISM")
ILLEGAL_SASL_STATE = ec.error_code("ILLEGAL_SASL_STATE")


# How a request's sender hears back: (response body, None) or (None, the error).
AnswerCallback = Callable[[Any, "BaseException | None"], None]


class BrokerConnectionError(ConnectionError):
    """The connection failed or was lost; requests on it did not get an answer."""


class BrokerAuthenticationError(BrokerConnectionError):
    """SASL authentication failed: the broker refused the mechanism or the credentials (its
    message is kept), or it could not prove it knows the SCRAM credential. Not retriable: the
    same credentials would be refused again (librdkafka reports this as _AUTHENTICATION)."""


class BrokerTlsError(BrokerAuthenticationError):
    """The TLS handshake failed (the broker's certificate is not trusted or does not name the
    host, or the broker refused ours). Not retriable: the next handshake would fail alike."""


class _HandshakeLost(Exception):
    """The broker closed the TCP connection in the middle of the TLS handshake."""


class HeldSocket(socket.socket):
    """The engine's sockets: non-blocking, and their send / receive calls keep the GIL.

    The engine's transport (engine/socket_transport.py) calls these methods as it would a
    plain socket's (without TLS; an SSLSocket does its own system calls); only the system
    calls change (kipproducer._held_io says why: a busy caller thread otherwise delays every
    send and receive of the engine's sender by a GIL switch interval). Calls with flags,
    ancillary data or an address are the socket's own.
    """

    __slots__ = ()

    def send(self, data, flags: int = 0) -> int:  # type: ignore[override]
        if flags:
            return super().send(data, flags)
        return held_io.send(self.fileno(), data)

    def recv_into(self, buffer, nbytes: int = 0, flags: int = 0) -> int:  # type: ignore[override]
        if flags:
            return super().recv_into(buffer, nbytes, flags)
        return held_io.recv_into(self.fileno(), buffer, nbytes)

    def sendmsg(self, buffers, ancdata=(), flags: int = 0,  # type: ignore[override]
                address=None) -> int:
        if ancdata or flags or address is not None:
            return super().sendmsg(buffers, ancdata, flags, address)
        return held_io.sendmsg(self.fileno(), buffers)


async def open_held_socket(loop: asyncio.AbstractEventLoop, host: str,
                           port: int) -> socket.socket:
    """A connected non-blocking socket to ``host:port``, trying each address the name has
    (a HeldSocket on POSIX systems, a plain socket elsewhere)."""
    kind = HeldSocket if os.name == "posix" else socket.socket
    last: OSError | None = None
    for family, type_, proto, _, address in await loop.getaddrinfo(
            host, port, type=socket.SOCK_STREAM):
        sock = kind(family, type_, proto)
        try:
            sock.setblocking(False)
            await loop.sock_connect(sock, address)
        except OSError as exc:
            sock.close()
            last = exc
            continue
        except BaseException:
            sock.close()
            raise
        return sock
    raise last or OSError(f"{host} has no address")


class BrokerConnection:
    def __init__(self, node_id: int, host: str, port: int, client_id: str, *,
                 request_timeout_s: float = 30.0, connect_timeout_s: float = 10.0,
                 sasl: SaslSettings | None = None, tls: TlsSettings | None = None) -> None:
        self.node_id = node_id
        self.tls = tls
        self.host = host
        self.port = port
        self.client_id = client_id
        self.request_timeout_s = request_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.sasl = sasl
        self.api_versions: dict[int, tuple[int, int]] = {}
        # version_for's answers (asked for every Produce request), until the next ApiVersions
        self._versions: dict[tuple[int, int, int], int] = {}
        self.features: dict[str, tuple[int, int]] = {}
        # The cluster's finalized feature levels (ApiVersions v3+), e.g. transaction.version.
        self.finalized: dict[str, int] = {}
        self._transport: asyncio.Transport | None = None
        self._stream: _ResponseStream | None = None
        # correlation id -> (api key, version, on_answer, deadline, timeout), in send order
        self._pending: OrderedDict[int, tuple] = OrderedDict()
        self._ids = itertools.count(1)
        self._watchdog: asyncio.TimerHandle | None = None
        self._watchdog_at = 0.0  # when it fires (time.monotonic())
        self.on_writable: Callable[[], None] | None = None  # runs when a full buffer drains
        self._closed_error: BaseException | None = None
        self._peer_closed = False  # the broker closed the connection (EOF)
        # KIP-368: the session's lifetime (ms, 0: none), the re-authentication timer, and the
        # requests held while it runs (None: not re-authenticating).
        self.session_lifetime_ms = 0
        self.reauthentications = 0
        self._reauth_timer: asyncio.TimerHandle | None = None
        self._held: list[tuple] | None = None

    @property
    def connected(self) -> bool:
        return self._transport is not None and self._closed_error is None

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    async def connect(self) -> None:
        loop = asyncio.get_running_loop()
        self._closed_error = None
        self._peer_closed = False
        try:
            self._transport, self._stream = await asyncio.wait_for(
                self._open(loop), self.connect_timeout_s)
        except ssl.SSLError as exc:
            assert self.tls is not None
            raise BrokerTlsError(describe_handshake_error(
                exc, self.tls, f"broker {self.node_id} at {self.host}:{self.port}")) from None
        except _HandshakeLost as exc:
            raise BrokerTlsError(
                f"broker {self.node_id} at {self.host}:{self.port} closed the connection during "
                f"the TLS handshake ({exc}): is it a TLS listener? (security.protocol=SSL or "
                "SASL_SSL needs one; a PLAINTEXT listener drops the TLS hello)") from None
        except (OSError, TimeoutError) as exc:
            raise BrokerConnectionError(
                f"cannot connect to broker {self.node_id} at {self.host}:{self.port}: {exc}"
            ) from None
        try:
            if self._closed_error is not None:  # lost while connecting
                raise self._closed_error
            sock = self._transport.get_extra_info("socket")
            if sock is not None:
                try:
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                except OSError as exc:
                    raise BrokerConnectionError(
                        f"cannot use the connection to broker {self.node_id}: {exc}") from None
            try:
                await self._negotiate()
            except BrokerConnectionError as exc:
                if self.tls is None or not self._peer_closed:
                    raise
                # TLS 1.3 ends the handshake on the client's side before the broker has
                # checked the client's certificate: a refusal shows as a closed connection.
                raise BrokerTlsError(
                    f"broker {self.node_id} at {self.host}:{self.port} closed the TLS "
                    f"connection before answering ApiVersions ({exc}): it refused our "
                    "certificate, or requires one (ssl.client.auth=required: set "
                    "ssl.certificate.location and ssl.key.location)") from None
            if self.sasl is not None:
                await self._authenticate(self.sasl)
        except BaseException:
            # Not handed out: close it here (the broker closes a failed SASL connection too).
            await self.close()
            raise

    async def _open(self, loop: asyncio.AbstractEventLoop):
        sock = await open_held_socket(loop, self.host, self.port)
        try:
            if self.tls is not None:
                try:
                    sock = await tls_handshake(
                        loop, sock, self.tls.context,
                        self.host if self.tls.check_hostname else None)
                except (ConnectionResetError, ConnectionAbortedError, BrokenPipeError) as exc:
                    raise _HandshakeLost(exc.strerror or type(exc).__name__) from None
                except ssl.SSLEOFError:
                    raise _HandshakeLost("end of stream") from None
            stream = _ResponseStream(self)
            return SocketTransport(loop, sock, stream), stream
        except BaseException:
            sock.close()
            raise

    async def _negotiate(self) -> None:
        ours = version_range(API_VERSIONS)
        version = min(3, ours[1])
        response = await self.request(API_VERSIONS, version, build_request(
            API_VERSIONS, version, client_software_name="kipproducer",
            client_software_version="0.1"))
        if response.error_code == ec.UNSUPPORTED_VERSION:
            response = await self.request(API_VERSIONS, 0, build_request(API_VERSIONS, 0))
        if response.error_code != ec.NONE:
            raise BrokerConnectionError(
                f"broker {self.node_id} refused ApiVersions: "
                f"{ec.error_name(response.error_code)}")
        self.api_versions = {k.api_key: (k.min_version, k.max_version)
                             for k in response.api_keys}
        self._versions.clear()
        features = getattr(response, "supported_features", ()) or ()
        self.features = {f.name: (f.min_version, f.max_version) for f in features}
        finalized = getattr(response, "finalized_features", ()) or ()
        self.finalized = {f.name: int(f.max_version_level) for f in finalized}

    async def _authenticate(self, sasl: SaslSettings) -> None:
        """SaslHandshake v1 + SaslAuthenticate; BrokerAuthenticationError on any refusal."""
        where = (f"broker {self.node_id} at {self.host}:{self.port}" if self.node_id >= 0
                 else f"bootstrap broker {self.host}:{self.port}")
        try:
            self.version_for(SASL_HANDSHAKE, 1, 1)
            version = self.version_for(SASL_AUTHENTICATE, 2)
        except BrokerConnectionError as exc:
            raise BrokerAuthenticationError(
                f"SASL authentication with {where} is impossible: {exc}") from None
        shake = await self.request(SASL_HANDSHAKE, 1, build_request(
            SASL_HANDSHAKE, 1, mechanism=sasl.mechanism))
        if shake.error_code == UNSUPPORTED_SASL_MECHANISM:
            offered = ", ".join(shake.mechanisms or ()) or "none"
            raise BrokerAuthenticationError(
                f"{where} does not accept SASL mechanism {sasl.mechanism} (sasl.mechanism); "
                f"its listener enables: {offered}")
        if shake.error_code == ILLEGAL_SASL_STATE:
            raise BrokerAuthenticationError(
                f"{where} has no SASL on this listener (ILLEGAL_SASL_STATE): "
                f"security.protocol={'SASL_SSL' if self.tls else 'SASL_PLAINTEXT'} does not "
                "match it")
        if shake.error_code != ec.NONE:
            raise BrokerAuthenticationError(
                f"{where} refused SaslHandshake for {sasl.mechanism}: "
                f"{ec.error_name(shake.error_code)}")
        if sasl.mechanism == OAUTHBEARER:
            assert sasl.oauth is not None
            try:
                # In a thread: a token fetch (oauth_cb, an OIDC endpoint) may take seconds,
                # and the other connections' requests run on this event loop meanwhile.
                token = await asyncio.to_thread(sasl.oauth.current)
            except TokenError as exc:
                raise BrokerAuthenticationError(
                    f"SASL/OAUTHBEARER with {where}: no token: {exc}") from None
            challenge = await self._sasl_step(
                version, client_message(token.value, token.extensions), where)
            if challenge:
                # A refused token is answered with a JSON error, not an error code; the
                # exchange then ends with the client's lone 0x01 (RFC 7628 section 3.2.3),
                # after which the broker closes the connection. Sending anything else would
                # be answered ILLEGAL_SASL_STATE.
                with contextlib.suppress(BrokerConnectionError):
                    await self.request(SASL_AUTHENTICATE, version, build_request(
                        SASL_AUTHENTICATE, version, auth_bytes=b"\x01"))
                raise BrokerAuthenticationError(
                    f"SASL/OAUTHBEARER with {where}: the broker refused the token: "
                    f"{challenge.decode('utf-8', 'replace')} (check the token's exp, iat, "
                    "scope and principal claims against the broker's validator)")
        elif sasl.mechanism == PLAIN:
            await self._sasl_step(version, plain_token(sasl.username, sasl.password), where)
        else:
            scram = ScramClient(sasl.mechanism, sasl.username, sasl.password)
            server_first = await self._sasl_step(version, scram.first(), where)
            try:
                client_final = scram.final(server_first)
            except (AuthenticationFailed, KeyError, ValueError) as exc:
                raise BrokerAuthenticationError(
                    f"{where} sent an unusable SCRAM server-first message: {exc!r}") from None
            server_final = await self._sasl_step(version, client_final, where)
            try:
                scram.verify(server_final)
            except (AuthenticationFailed, KeyError, ValueError) as exc:
                # A broker without our credential cannot sign the exchange: not to be trusted.
                raise BrokerAuthenticationError(
                    f"{where} failed SCRAM server authentication: {exc}") from None
        log.debug("authenticated to %s as %s with %s", where, sasl.username, sasl.mechanism)
        if self.session_lifetime_ms > 0:
            # KIP-368: Kafka's clients re-authenticate at a random 85-95% of the session.
            delay = self.session_lifetime_ms / 1000 * random.uniform(0.85, 0.95)
            self._reauth_timer = asyncio.get_running_loop().call_later(
                delay, lambda: asyncio.ensure_future(self._reauthenticate()))

    async def _reauthenticate(self) -> None:
        """KIP-368: hold new requests, let those in flight be answered, authenticate again
        on this connection, then send what was held. A refusal closes the connection."""
        self._reauth_timer = None
        if not self.connected or self.sasl is None:
            return
        self._held = []
        try:
            while self._pending and self._closed_error is None:
                await asyncio.sleep(0.001)
            if self._closed_error is not None:
                return
            await self._authenticate(self.sasl)
            self.reauthentications += 1
        except BrokerConnectionError as exc:
            self._fail(exc if isinstance(exc, BrokerAuthenticationError)
                       else BrokerAuthenticationError(f"re-authentication failed: {exc}"))
            return
        finally:
            held, self._held = self._held, None
        for api_key, version, frame_parts, on_answer, timeout_s in held or ():
            try:
                self.send_parts(api_key, version, frame_parts, on_answer, timeout_s=timeout_s)
            except BrokerConnectionError as exc:
                if on_answer is not None:
                    self._answer(on_answer, None, exc)
        if self._stream is not None and self._stream.paused is None and self.on_writable:
            self.on_writable()

    async def _sasl_step(self, version: int, token: bytes, where: str) -> bytes:
        """One SaslAuthenticate round trip: our token out, the broker's token back."""
        answer = await self.request(SASL_AUTHENTICATE, version, build_request(
            SASL_AUTHENTICATE, version, auth_bytes=token))
        if answer.error_code != ec.NONE:
            # The broker's message says why (SASL_AUTHENTICATION_FAILED: "Authentication
            # failed with SASL mechanism ...: invalid username or password").
            reason = answer.error_message or ec.error_name(answer.error_code)
            raise BrokerAuthenticationError(f"SASL authentication with {where} failed: {reason}")
        self.session_lifetime_ms = int(getattr(answer, "session_lifetime", 0) or 0)
        return bytes(answer.auth_bytes)

    def version_for(self, api_key: int, wanted_max: int, wanted_min: int = 0) -> int:
        """The highest version both sides speak; BrokerConnectionError if none."""
        key = (api_key, wanted_max, wanted_min)
        found = self._versions.get(key)
        if found is None:
            found = self._versions[key] = self._choose_version(api_key, wanted_max, wanted_min)
        return found

    def _choose_version(self, api_key: int, wanted_max: int, wanted_min: int) -> int:
        theirs = self.api_versions.get(api_key)
        ours = version_range(api_key)
        if theirs is None:
            raise BrokerConnectionError(f"broker {self.node_id} does not serve api {api_key}")
        high = min(theirs[1], ours[1], wanted_max)
        low = max(theirs[0], ours[0], wanted_min)
        if high < low:
            raise BrokerConnectionError(
                f"broker {self.node_id} serves api {api_key} v{theirs[0]}-{theirs[1]}; "
                f"kipproducer needs v{low}-{wanted_max}")
        return high

    def finalized_level(self, name: str) -> int:
        """The level the cluster finalizes a feature at (0 when it finalizes none)."""
        return self.finalized.get(name, 0)

    def max_version(self, api_key: int) -> int:
        """The highest version of an API both sides speak (-1 when the broker lacks it)."""
        theirs = self.api_versions.get(api_key)
        return -1 if theirs is None else min(theirs[1], version_range(api_key)[1])

    def supports_feature(self, name: str, version: int = 1) -> bool:
        found = self.features.get(name)
        return found is not None and found[0] <= version <= found[1]

    async def request(self, api_key: int, version: int, body: Any, *,
                      expect_response: bool = True, timeout_s: float | None = None) -> Any:
        """Send one request; the decoded response body (None when none is expected)."""
        future: asyncio.Future | None = None
        if expect_response:
            future = asyncio.get_running_loop().create_future()

            def answered(response: Any, error: BaseException | None) -> None:
                if future.done():
                    return
                if error is not None:
                    future.set_exception(error)
                else:
                    future.set_result(response)

        self.send(api_key, version, body, answered if future is not None else None,
                  timeout_s=timeout_s)
        del body  # a produce body views the batches' bytes: not kept while waiting
        await self.writable()
        return None if future is None else await future

    def send(self, api_key: int, version: int, body: Any,
             on_answer: AnswerCallback | None, *, timeout_s: float | None = None) -> None:
        """Write one request now and return: ``on_answer(response_body, None)`` runs on the
        event loop when the answer arrives, ``on_answer(None, error)`` when the request fails
        (a lost connection, request.timeout.ms, an answer that does not decode). Without
        ``on_answer`` no response is expected (acks=0 Produce). BrokerConnectionError when the
        connection is down; nothing was written then.

        This is the per-request path of every Produce: no task, future or timer per request.
        Callers bound their own pipelining (max.in.flight) and send no more while
        :attr:`congested` (``on_writable`` runs when the socket buffer drains)."""
        self.send_parts(api_key, version,
                        lambda correlation_id, client_id: encode_request_frame_parts(
                            correlation_id, client_id, body),
                        on_answer, timeout_s=timeout_s)

    def send_parts(self, api_key: int, version: int,
                   frame_parts: Callable[[int, str], list[Any]],
                   on_answer: AnswerCallback | None, *, timeout_s: float | None = None) -> None:
        """:meth:`send` for a caller with its own encoder: ``frame_parts(correlation_id,
        client_id)`` returns the request frame's buffers (the Produce fast path)."""
        transport = self._transport
        if transport is None or self._closed_error is not None:
            raise BrokerConnectionError(
                f"not connected to broker {self.node_id}: {self._closed_error}")
        if self._held is not None and api_key not in (SASL_HANDSHAKE, SASL_AUTHENTICATE):
            # Re-authenticating (KIP-368): sent, in order, once the session is renewed.
            self._held.append((api_key, version, frame_parts, on_answer, timeout_s))
            return
        correlation_id = next(self._ids) & 0x7FFFFFFF
        parts = frame_parts(correlation_id, self.client_id)
        if on_answer is not None:
            timeout = timeout_s or self.request_timeout_s
            deadline = time.monotonic() + timeout
            self._pending[correlation_id] = (api_key, version, on_answer, deadline, timeout)
            if self._watchdog is None or deadline < self._watchdog_at:
                self._arm_watchdog(deadline)
        transport.writelines(parts)

    async def writable(self) -> None:
        """Returns when the socket buffer has room again (at once, usually)."""
        stream = self._stream
        if stream is not None and stream.paused is not None:
            await stream.paused

    @property
    def congested(self) -> bool:
        """The socket buffer is full (the transport paused writing), or the connection is
        re-authenticating (``on_writable`` runs after either)."""
        return self._held is not None or (
            self._stream is not None and self._stream.paused is not None)

    def _arm_watchdog(self, deadline: float) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
        self._watchdog_at = deadline
        self._watchdog = asyncio.get_running_loop().call_later(
            max(deadline - time.monotonic(), 0), self._check_overdue)

    def _check_overdue(self) -> None:
        """One timer per connection, not one per request, set for the earliest deadline of
        the requests waiting for an answer (re-armed when it fires early)."""
        self._watchdog = None
        if not self._pending:
            return
        api_key, version, _, deadline, timeout = min(self._pending.values(),
                                                      key=lambda entry: entry[3])
        if time.monotonic() >= deadline:
            # A missing answer poisons the connection for everything behind it: close it, as
            # Kafka's clients do (every waiter gets the error).
            self._fail(BrokerConnectionError(
                f"broker {self.node_id} did not answer api {api_key} v{version} within "
                f"{timeout:.0f} s (request.timeout.ms)"))
            return
        self._arm_watchdog(deadline)

    def _on_frame(self, frame: bytearray) -> None:
        """A response frame arrived (in the protocol's callback): decode it, call its waiter."""
        correlation_id = peek_correlation_id(frame)
        entry = self._pending.pop(correlation_id, None)
        if entry is None:
            self._fail(BrokerConnectionError(
                f"broker {self.node_id} answered unknown correlation id {correlation_id}"))
            return
        api_key, version, on_answer = entry[0], entry[1], entry[2]
        try:
            if is_direct(api_key, version):  # Produce: the hot path
                body = decode_produce_response(frame, version)
            else:
                body = decode_response(frame, api_key, version).body
        except ProtocolError as exc:
            self._answer(on_answer, None, exc)
            return
        self._answer(on_answer, body, None)

    def _answer(self, on_answer: AnswerCallback, response: Any,
                error: BaseException | None) -> None:
        try:
            on_answer(response, error)
        except Exception:  # a waiter's bug must not take the connection down with it
            log.exception("handling the answer of broker %s failed", self.node_id)

    def _fail(self, error: BaseException) -> None:
        if self._closed_error is None:
            self._closed_error = error
            log.info("%s", error)
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        if self._reauth_timer is not None:
            self._reauth_timer.cancel()
            self._reauth_timer = None
        pending, self._pending = self._pending, OrderedDict()
        for entry in pending.values():
            self._answer(entry[2], None, error)
        held, self._held = self._held, None
        for entry in held or ():
            if entry[3] is not None:
                self._answer(entry[3], None, error)
        if self._transport is not None:
            self._transport.close()
        if self._stream is not None:
            self._stream.release_writers()

    async def close(self) -> None:
        self._fail(BrokerConnectionError(f"connection to broker {self.node_id} closed"))


class _ResponseStream(asyncio.BufferedProtocol):
    """The connection's socket: response frames are cut from the stream as they arrive
    (the shared FrameReceiver, as in the broker) and handed to the connection at once."""

    def __init__(self, conn: BrokerConnection) -> None:
        self.conn = conn
        self.receiver = FrameReceiver(2**31 - 1)
        self.paused: asyncio.Future | None = None  # set while the socket buffer is full

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.receiver.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        conn = self.conn
        try:
            frames = self.receiver.received(nbytes)
        except ProtocolError as exc:
            conn._fail(BrokerConnectionError(
                f"connection to broker {conn.node_id} failed: {exc}"))
            return
        for frame in frames:
            if conn._closed_error is not None:
                return
            try:
                conn._on_frame(frame)
            except ProtocolError as exc:
                conn._fail(BrokerConnectionError(
                    f"connection to broker {conn.node_id} failed: {exc}"))
                return

    def eof_received(self) -> bool:
        self.conn._peer_closed = True
        self.conn._fail(BrokerConnectionError(
            f"broker {self.conn.node_id} closed the connection"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        conn = self.conn
        if isinstance(exc, ssl.SSLError):  # e.g. the broker refused our certificate (mTLS)
            conn._fail(BrokerTlsError(
                f"TLS connection to broker {conn.node_id} at {conn.host}:{conn.port} failed: "
                f"{exc}"))
            return
        if exc is None or isinstance(exc, (ConnectionResetError, ConnectionAbortedError,
                                           BrokenPipeError)):
            # closed by the broker: with TLS 1.3 a broker refusing the client's certificate
            # sends its alert after the client's handshake has ended, and a busy machine may
            # see the reset of that close instead of the alert (connect() reads this flag)
            conn._peer_closed = True
        conn._fail(BrokerConnectionError(
            f"connection to broker {conn.node_id} failed: {exc}" if exc is not None
            else f"broker {conn.node_id} closed the connection"))

    def pause_writing(self) -> None:
        if self.paused is None:
            self.paused = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        self.release_writers()
        if self.conn.on_writable is not None:
            self.conn.on_writable()

    def release_writers(self) -> None:
        paused, self.paused = self.paused, None
        if paused is not None and not paused.done():
            paused.set_result(None)
