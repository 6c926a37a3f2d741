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
refused again. Re-authentication (KIP-368) is not done: a broker that ends the session closes
the connection, and the engine reconnects as after any lost connection.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket
from collections import OrderedDict
from typing import Any

from kipproducer.protocol import (
    ProtocolError,
    build_request,
    decode_response,
    encode_request_frame_parts,
    peek_correlation_id,
    read_frame,
)
from kipproducer.protocol import error_codes as ec
from kipproducer.protocol.schemas import version_range
from kipproducer.sasl import PLAIN, plain_token
from kipproducer.sasl.errors import AuthenticationFailed
from kipproducer.sasl.scram import ScramClient

from .config import SaslSettings

log = logging.getLogger("kipproducer.engine")

SASL_HANDSHAKE, API_VERSIONS, SASL_AUTHENTICATE = 17, 18, 36
UNSUPPORTED_SASL_MECHANISM = ec.error_code("UNSUPPORTED_SASL_MECHANISM")
ILLEGAL_SASL_STATE = ec.error_code("ILLEGAL_SASL_STATE")


class BrokerConnectionError(ConnectionError):
    """The connection failed or was lost; requests on it did not get an answer."""


class BrokerAuthenticationError(BrokerConnectionError):
    """SASL authentication failed: the broker refused the mechanism or the credentials (its
    message is kept), or it could not prove it knows the SCRAM credential. Not retriable: the
    same credentials would be refused again (librdkafka reports this as _AUTHENTICATION)."""


class BrokerConnection:
    def __init__(self, node_id: int, host: str, port: int, client_id: str, *,
                 request_timeout_s: float = 30.0, connect_timeout_s: float = 10.0,
                 sasl: SaslSettings | None = None) -> None:
        self.node_id = node_id
        self.host = host
        self.port = port
        self.client_id = client_id
        self.request_timeout_s = request_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.sasl = sasl
        self.api_versions: dict[int, tuple[int, int]] = {}
        self.features: dict[str, tuple[int, int]] = {}
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._pending: OrderedDict[int, tuple[int, int, asyncio.Future]] = OrderedDict()
        self._ids = itertools.count(1)
        self._read_task: asyncio.Task | None = None
        self._closed_error: BaseException | None = None

    @property
    def connected(self) -> bool:
        return self._writer is not None and self._closed_error is None

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    async def connect(self) -> None:
        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port, limit=1 << 22),
                self.connect_timeout_s)
        except (OSError, TimeoutError) as exc:
            raise BrokerConnectionError(
                f"cannot connect to broker {self.node_id} at {self.host}:{self.port}: {exc}"
            ) from None
        sock = self._writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._closed_error = None
        self._read_task = asyncio.create_task(self._read_loop())
        try:
            await self._negotiate()
            if self.sasl is not None:
                await self._authenticate(self.sasl)
        except BaseException:
            # Not handed out: close it here (the broker closes a failed SASL connection too).
            await self.close()
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
        features = getattr(response, "supported_features", ()) or ()
        self.features = {f.name: (f.min_version, f.max_version) for f in features}

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
                "security.protocol=SASL_PLAINTEXT does not match it")
        if shake.error_code != ec.NONE:
            raise BrokerAuthenticationError(
                f"{where} refused SaslHandshake for {sasl.mechanism}: "
                f"{ec.error_name(shake.error_code)}")
        if sasl.mechanism == PLAIN:
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

    async def _sasl_step(self, version: int, token: bytes, where: str) -> bytes:
        """One SaslAuthenticate round trip: our token out, the broker's token back."""
        answer = await self.request(SASL_AUTHENTICATE, version, build_request(
            SASL_AUTHENTICATE, version, auth_bytes=token))
        if answer.error_code != ec.NONE:
            # The broker's message says why (SASL_AUTHENTICATION_FAILED: "Authentication
            # failed with SASL mechanism ...: invalid username or password").
            reason = answer.error_message or ec.error_name(answer.error_code)
            raise BrokerAuthenticationError(f"SASL authentication with {where} failed: {reason}")
        return bytes(answer.auth_bytes)

    def version_for(self, api_key: int, wanted_max: int, wanted_min: int = 0) -> int:
        """The highest version both sides speak; BrokerConnectionError if none."""
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

    def supports_feature(self, name: str, version: int = 1) -> bool:
        found = self.features.get(name)
        return found is not None and found[0] <= version <= found[1]

    async def request(self, api_key: int, version: int, body: Any, *,
                      expect_response: bool = True, timeout_s: float | None = None) -> Any:
        """Send one request; the decoded response body (None when none is expected)."""
        if not self.connected or self._writer is None:
            raise BrokerConnectionError(
                f"not connected to broker {self.node_id}: {self._closed_error}")
        correlation_id = next(self._ids) & 0x7FFFFFFF
        parts = encode_request_frame_parts(correlation_id, self.client_id, body)
        # Nothing here may keep the body (a produce body views the batches' bytes) while the
        # answer is awaited: an exception's traceback would keep it alive with this frame.
        del body
        future: asyncio.Future | None = None
        if expect_response:
            future = asyncio.get_running_loop().create_future()
            self._pending[correlation_id] = (api_key, version, future)
        try:
            self._writer.writelines(parts)
            parts = None
            await self._writer.drain()
        except (OSError, RuntimeError) as exc:
            parts = None
            self._fail(BrokerConnectionError(f"write to broker {self.node_id} failed: {exc}"))
        if future is None:
            return None
        # One timer per request rather than asyncio.wait_for (which wraps the wait in more
        # futures and callbacks): this is the per-request cost of every Produce.
        timeout = timeout_s or self.request_timeout_s
        timer = asyncio.get_running_loop().call_later(
            timeout, self._answer_overdue, correlation_id, api_key, version, timeout)
        try:
            return await future
        finally:
            timer.cancel()

    def _answer_overdue(self, correlation_id: int, api_key: int, version: int,
                        timeout: float) -> None:
        if correlation_id in self._pending:
            # Responses come in order: a missing one poisons the connection for everything
            # behind it, so close it, as Kafka's clients do (every waiter gets the error).
            self._fail(BrokerConnectionError(
                f"broker {self.node_id} did not answer api {api_key} v{version} within "
                f"{timeout:.0f} s (request.timeout.ms)"))

    async def _read_loop(self) -> None:
        assert self._reader is not None
        try:
            while True:
                frame = await read_frame(self._reader, 2**31 - 1)
                if frame is None:
                    raise BrokerConnectionError(f"broker {self.node_id} closed the connection")
                correlation_id = peek_correlation_id(frame)
                entry = self._pending.pop(correlation_id, None)
                if entry is None:
                    raise BrokerConnectionError(
                        f"broker {self.node_id} answered unknown correlation id "
                        f"{correlation_id}")
                api_key, version, future = entry
                try:
                    response = decode_response(frame, api_key, version)
                except ProtocolError as exc:
                    if not future.done():
                        future.set_exception(exc)
                    continue
                if not future.done():
                    future.set_result(response.body)
        except asyncio.CancelledError:
            self._fail(BrokerConnectionError(f"connection to broker {self.node_id} closed"))
            raise
        except (OSError, ProtocolError, BrokerConnectionError,
                asyncio.IncompleteReadError) as exc:
            error = exc if isinstance(exc, BrokerConnectionError) else BrokerConnectionError(
                f"connection to broker {self.node_id} failed: {exc}")
            self._fail(error)

    def _fail(self, error: BaseException) -> None:
        if self._closed_error is None:
            self._closed_error = error
            log.info("%s", error)
        pending, self._pending = self._pending, OrderedDict()
        for _, _, future in pending.values():
            if not future.done():
                future.set_exception(error)
        if self._writer is not None:
            self._writer.close()

    async def close(self) -> None:
        self._fail(BrokerConnectionError(f"connection to broker {self.node_id} closed"))
        task, self._read_task = self._read_task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
