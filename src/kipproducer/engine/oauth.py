"""OAUTHBEARER tokens for the engine's connections, as librdkafka gets them:

* ``oauth_cb``: confluent-kafka's callable, ``oauth_cb(sasl.oauthbearer.config)`` returning
  ``(token, expiry)`` (expiry in seconds since the epoch) or ``(token, expiry, principal,
  extensions)``;
* ``enable.sasl.oauthbearer.unsecure.jwt=true``: an unsecured JWT made from
  ``sasl.oauthbearer.config`` (``principal=... lifeSeconds=... scope=... extension_NAME=v``);
* ``sasl.oauthbearer.method=oidc``: librdkafka's OIDC client, the client-credentials grant
  against ``sasl.oauthbearer.token.endpoint.url`` (engine/oidc.py).

A token is used until 80% of its lifetime has passed (librdkafka's refresh point), then the
next authentication asks for a new one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kipproducer.sasl.oauthbearer import parse_unsecured_config, unsecured_token

from .oidc import OidcError, OidcSettings, fetch_token

#: librdkafka refreshes a token when this share of its lifetime has passed.
REFRESH_AT = 0.8


class TokenError(Exception):
    """The token source failed or returned something that is not a token."""


@dataclass(frozen=True)
class Token:
    value: str
    expires_at: float  # seconds since the epoch
    extensions: dict[str, str]
    #: The principal the source names (oidc: the token's sub claim), for logs; the broker
    #: takes its own from the token.
    principal: str = ""


class OAuthTokens:
    """The current token of one producer's engine, fetched again at 80% of its lifetime."""

    def __init__(self, fetch: Callable[[], Token], source: str) -> None:
        self._fetch = fetch
        self.source = source  # "oauth_cb", "sasl.oauthbearer.config" or "oidc", for errors
        self._token: Token | None = None
        self._refresh_at = 0.0
        self._lock = threading.Lock()
        self.fetches = 0

    @classmethod
    def from_callback(cls, callback: Callable[[str], Any], config: str) -> OAuthTokens:
        def fetch() -> Token:
            answer = callback(config)
            if not isinstance(answer, tuple | list) or len(answer) not in (2, 4):
                raise TokenError(f"oauth_cb returned {answer!r}; expected (token, expiry) or "
                                 "(token, expiry, principal, extensions)")
            token, expiry = answer[0], answer[1]
            extensions = dict(answer[3] or {}) if len(answer) == 4 else {}
            if not isinstance(token, str) or not token:
                raise TokenError("oauth_cb returned an empty token")
            try:
                expires_at = float(expiry)
            except (TypeError, ValueError):
                raise TokenError(f"oauth_cb returned expiry {expiry!r}; expected seconds "
                                 "since the epoch") from None
            return Token(token, expires_at, {str(k): str(v) for k, v in extensions.items()})

        return cls(fetch, "oauth_cb")

    @classmethod
    def unsecured(cls, config: str) -> OAuthTokens:
        parsed = parse_unsecured_config(config)  # ValueError: the caller names the property

        def fetch() -> Token:
            token, expires_at = unsecured_token(parsed)
            return Token(token, expires_at, dict(parsed.extensions))

        return cls(fetch, "sasl.oauthbearer.config")

    @classmethod
    def oidc(cls, settings: OidcSettings) -> OAuthTokens:
        def fetch() -> Token:
            try:
                got = fetch_token(settings)
            except OidcError as exc:  # it names the endpoint and the cause: said as it is
                raise TokenError(str(exc)) from None
            return Token(got.value, got.expires_at, dict(settings.extensions), got.principal)

        return cls(fetch, "sasl.oauthbearer.method=oidc")

    def current(self) -> Token:
        """The token to authenticate with; TokenError if the source fails."""
        with self._lock:
            now = time.time()
            if self._token is None or now >= self._refresh_at:
                try:
                    token = self._fetch()
                except TokenError:
                    raise
                except Exception as exc:
                    raise TokenError(f"{self.source} failed: {exc!r}") from None
                if token.expires_at <= now:
                    raise TokenError(f"{self.source} returned a token that expired at "
                                     f"{token.expires_at}")
                self._token = token
                self._refresh_at = now + REFRESH_AT * (token.expires_at - now)
                self.fetches += 1
            return self._token
