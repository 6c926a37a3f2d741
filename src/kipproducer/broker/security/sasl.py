"""The SASL state of one connection, following Kafka's SaslServerAuthenticator.

On a listener with ``sasl.enabled.mechanisms`` set, a connection goes:

    START --SaslHandshake(mech)--> EXCHANGE --SaslAuthenticate*--> AUTHENTICATED
                                           \\--failure--> FAILED (response sent, then closed)

* START: ApiVersions (any number of times), SaslHandshake and SaslAuthenticate may arrive; the
  latter is answered ILLEGAL_SASL_STATE and the connection closed. Anything else closes the
  connection with a log line, as Kafka does: the client is not authenticated.
* SaslHandshake v1 is followed by SaslAuthenticate requests carrying the tokens; after a v0
  handshake the tokens come as bare size-prefixed frames without a Kafka header (the flow
  before KIP-152), which the server loop passes to :meth:`raw_token`.
* An unknown mechanism is answered UNSUPPORTED_SASL_MECHANISM with the enabled list, then
  the connection is closed; failed credentials get SASL_AUTHENTICATION_FAILED with a message,
  then the connection is closed.

With SASL off every connection starts AUTHENTICATED as ``User:ANONYMOUS``; SaslHandshake and
SaslAuthenticate get ILLEGAL_SASL_STATE, as on a Kafka PLAINTEXT listener.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import os
import time
from collections.abc import Callable
from typing import Protocol

from kipproducer.protocol import error_codes as ec
from kipproducer.sasl.oauthbearer import OAUTHBEARER, parse_client_message, validate_unsecured
from kipproducer.sasl.scram import HASHES, ScramServer

from ...protocol.api_keys import API_VERSIONS, SASL_AUTHENTICATE, SASL_HANDSHAKE
from .errors import AuthenticationFailed, MalformedToken
from .users import UserStore

log = logging.getLogger("kipproducer.broker.security")

PLAIN = "PLAIN"
SUPPORTED_MECHANISMS = (PLAIN, *HASHES, OAUTHBEARER)
ANONYMOUS = "User:ANONYMOUS"

SASL_AUTHENTICATION_FAILED = ec.error_code("SASL_AUTHENTICATION_FAILED")
UNSUPPORTED_SASL_MECHANISM = ec.error_code("UNSUPPORTED_SASL_MECHANISM")
ILLEGAL_SASL_STATE = ec.error_code("ILLEGAL_SASL_STATE")

#: Kafka's SaslAuthenticate tokens are small (a few hundred bytes for SCRAM); anything much
#: larger is not a token this broker can use.
MAX_TOKEN_BYTES = 64 * 1024


class State(enum.Enum):
    START = "start"
    EXCHANGE = "exchange"
    AUTHENTICATED = "authenticated"
    FAILED = "failed"


class Exchange(Protocol):
    username: str | None
    complete: bool

    def step(self, token: bytes) -> bytes: ...


class PlainServer:
    """SASL/PLAIN (RFC 4616): one message ``authzid NUL authcid NUL password``."""

    def __init__(self, verify: Callable[[str, str], bool]) -> None:
        self._verify = verify
        self.username: str | None = None
        self.complete = False

    def step(self, token: bytes) -> bytes:
        if self.complete:
            raise MalformedToken("the PLAIN exchange is already finished")
        parts = bytes(token).split(b"\0")
        if len(parts) != 3:
            raise MalformedToken(
                "a PLAIN token is authzid NUL username NUL password (two NUL bytes), "
                f"this one has {len(parts) - 1}"
            )
        try:
            authzid, username, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise MalformedToken("the PLAIN token is not UTF-8") from None
        if not username or not password:
            raise MalformedToken("the PLAIN token has an empty username or password")
        if authzid and authzid != username:
            raise AuthenticationFailed(
                "the authorization id requested differs from the user name"
            )
        if not self._verify(username, password):
            raise AuthenticationFailed("invalid username or password")
        self.username = username
        self.complete = True
        return b""


class OAuthBearerServer:
    """SASL/OAUTHBEARER with Kafka's unsecured-JWT validation (for tests and development):
    the token's ``sub`` is the principal, its ``exp`` bounds the session (KIP-368)."""

    def __init__(self) -> None:
        self.username: str | None = None
        self.complete = False
        self.expires_at: float | None = None  # seconds since the epoch

    def step(self, token: bytes) -> bytes:
        if self.complete:
            raise MalformedToken("the OAUTHBEARER exchange is already finished")
        jwt, _extensions, authzid = parse_client_message(token)
        valid = validate_unsecured(jwt)
        if authzid and authzid != valid.principal:
            raise AuthenticationFailed(
                "the authorization id requested differs from the token's principal")
        self.username = valid.principal
        self.expires_at = valid.expires_at
        self.complete = True
        return b""


class SaslConfig:
    """What every connection's session needs: the enabled mechanisms and the user store."""

    def __init__(self, mechanisms: tuple[str, ...], users: UserStore,
                 reauth_ms: int = 0) -> None:
        self.mechanisms = mechanisms
        self.users = users
        #: connections.max.reauth.ms (KIP-368): 0, sessions do not expire.
        self.reauth_ms = reauth_ms
        # Salts for users that do not exist: stable within the broker's life (so a client
        # cannot spot the decoy by asking twice), unknown outside it.
        self.decoy_secret = os.urandom(32)

    @property
    def enabled(self) -> bool:
        return bool(self.mechanisms)

    def exchange(self, mechanism: str) -> Exchange:
        if mechanism == PLAIN:
            return PlainServer(self.users.verify_password)
        if mechanism == OAUTHBEARER:
            return OAuthBearerServer()
        return ScramServer(
            mechanism,
            lambda name: self.users.credential(name, mechanism),
            self.decoy_secret,
        )


class SaslSession:
    """Per connection: who the client is, and where it stands in the SASL exchange."""

    def __init__(self, config: SaslConfig, conn_id: int, host: str, *,
                 sasl: bool | None = None, principal: str = ANONYMOUS,
                 listener: object | None = None) -> None:
        self.config = config
        self.conn_id = conn_id
        self.host = host
        #: Whether this connection's listener takes SASL (SASL_PLAINTEXT / SASL_SSL).
        self.sasl = config.enabled if sasl is None else sasl and config.enabled
        #: The BrokerServer the client connected to (its address is what Metadata tells).
        self.listener = listener
        self.principal = principal
        self.state = State.START if self.sasl else State.AUTHENTICATED
        self.mechanism: str | None = None
        self.raw_tokens = False  # after a v0 SaslHandshake (no Kafka headers on tokens)
        self.close_requested = False
        self._exchange: Exchange | None = None
        #: KIP-368: when the session ends (time.time()), None: never; and its length in ms
        #: as told in the SaslAuthenticate answer.
        self.expires_at: float | None = None
        self.session_lifetime_ms = 0
        self.reauthenticating = False

    @property
    def authenticated(self) -> bool:
        return self.state is State.AUTHENTICATED

    def may_handle(self, api_key: int) -> bool:
        """May a request of ``api_key`` be served in the current state?"""
        if self.state is State.AUTHENTICATED:
            return True
        if self.state is State.START:
            return api_key in (API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE)
        if self.state is State.EXCHANGE:
            return api_key == SASL_AUTHENTICATE
        return False

    def describe_refusal(self, api_key: int) -> str:
        if self.state is State.EXCHANGE:
            return f"api {api_key} during the SASL/{self.mechanism} exchange"
        return f"api {api_key} before SASL authentication"

    # -- SaslHandshake ---------------------------------------------------------------------------

    def handshake(self, mechanism: str, version: int) -> tuple[int, list[str]]:
        """(error code, mechanisms to list in the response)."""
        enabled = list(self.config.mechanisms)
        if not self.sasl:
            return ILLEGAL_SASL_STATE, enabled
        if self.state is State.AUTHENTICATED:
            if self.config.reauth_ms <= 0 or mechanism != self.mechanism:
                # Without connections.max.reauth.ms Kafka answers so (no re-authentication);
                # re-authentication keeps the mechanism (KIP-368).
                return ILLEGAL_SASL_STATE, enabled
            self._exchange = self.config.exchange(mechanism)
            self.reauthenticating = True
            return ec.NONE, enabled
        if self.state is not State.START:
            self._fail(f"a second SaslHandshake ({mechanism!r}) during the exchange")
            return ILLEGAL_SASL_STATE, enabled
        if mechanism not in self.config.mechanisms:
            self._fail(f"unsupported SASL mechanism {mechanism!r} (enabled: "
                       f"{', '.join(enabled)})")
            return UNSUPPORTED_SASL_MECHANISM, enabled
        self.mechanism = mechanism
        self._exchange = self.config.exchange(mechanism)
        self.state = State.EXCHANGE
        self.raw_tokens = version == 0
        return ec.NONE, enabled

    # -- SaslAuthenticate ------------------------------------------------------------------------

    async def authenticate(self, token: bytes) -> tuple[int, str | None, bytes]:
        """(error code, error message, server token) for one SaslAuthenticate request."""
        if not self.sasl:
            return ILLEGAL_SASL_STATE, "SASL is not enabled on this listener", b""
        if self.state is State.AUTHENTICATED and not self.reauthenticating:
            return (ILLEGAL_SASL_STATE, "already authenticated; " + (
                "re-authentication starts with SaslHandshake" if self.config.reauth_ms > 0
                else "re-authentication is not supported"), b"")
        if (self.state is not State.EXCHANGE and not self.reauthenticating) or self.raw_tokens:
            message = "SaslAuthenticate must follow a successful SaslHandshake v1"
            self._fail(message)
            return ILLEGAL_SASL_STATE, message, b""
        try:
            return ec.NONE, None, await self._step(token)
        except AuthenticationFailed as exc:
            message = f"Authentication failed with SASL mechanism {self.mechanism}: {exc}"
            self._fail(str(exc))
            return SASL_AUTHENTICATION_FAILED, message, b""

    async def raw_token(self, token: bytes) -> bytes | None:
        """A token after a v0 handshake; None: failed, close without an answer (as Kafka)."""
        try:
            reply = await self._step(token)
        except AuthenticationFailed as exc:
            self._fail(str(exc))
            return None
        if self.authenticated:
            self.raw_tokens = False
        return reply

    async def _step(self, token: bytes) -> bytes:
        exchange = self._exchange
        assert exchange is not None
        if len(token) > MAX_TOKEN_BYTES:
            raise MalformedToken(f"a {len(token)}-byte token is larger than any "
                                 f"{self.mechanism} message")
        # PLAIN runs PBKDF2 (thousands of HMACs): off the event loop, like any slow work.
        reply = await asyncio.get_running_loop().run_in_executor(None, exchange.step, bytes(token))
        if exchange.complete:
            assert exchange.username is not None
            principal = f"User:{exchange.username}"
            if self.reauthenticating and principal != self.principal:
                raise AuthenticationFailed(
                    f"re-authentication as {principal} on a connection of {self.principal}")
            self.principal = principal
            self.state = State.AUTHENTICATED
            self.reauthenticating = False
            self._exchange = None
            self._start_session(getattr(exchange, "expires_at", None))
            log.debug("connection %s from %s authenticated as %s (SASL/%s)",
                      self.conn_id, self.host, self.principal, self.mechanism)
        return reply

    def _start_session(self, credential_expiry: float | None) -> None:
        """KIP-368: with connections.max.reauth.ms the session lasts that long, or until the
        credential (an OAUTHBEARER token) expires if sooner; the client re-authenticates in
        time or the broker closes the connection."""
        reauth_ms = self.config.reauth_ms
        if reauth_ms <= 0:
            self.expires_at, self.session_lifetime_ms = None, 0
            return
        now = time.time()
        lifetime_ms = reauth_ms
        if credential_expiry is not None:
            lifetime_ms = max(0, min(lifetime_ms, int((credential_expiry - now) * 1000)))
        self.session_lifetime_ms = lifetime_ms
        self.expires_at = now + lifetime_ms / 1000

    @property
    def expired(self) -> bool:
        return self.expires_at is not None and time.time() >= self.expires_at

    def _fail(self, reason: str) -> None:
        log.warning("connection %s from %s: SASL authentication failed: %s; closing",
                    self.conn_id, self.host, reason)
        self.state = State.FAILED
        self._exchange = None
        self.close_requested = True
