"""SASL/OAUTHBEARER (RFC 7628, KIP-255): the client's message, unsecured JWTs, their check.

* the client's one message: ``n,[a=authzid],`` ``\\x01auth=Bearer <token>`` then
  ``\\x01key=value`` per SASL extension, ending ``\\x01\\x01``;
* unsecured tokens (for tests and development): a JWT with header ``{"alg":"none"}`` and an
  empty signature, made from ``sasl.oauthbearer.config`` as librdkafka reads it
  (``principal=... lifeSeconds=... scope=... principalClaimName=... scopeClaimName=...
  extension_NAME=value``) and checked as Kafka's unsecured validator does: ``alg`` none, the
  principal claim (``sub``) a non-empty string, ``exp`` present and in the future.
"""

from __future__ import annotations

import base64
import json
import math
import re
import time
from dataclasses import dataclass, field

from .errors import AuthenticationFailed, MalformedToken

OAUTHBEARER = "OAUTHBEARER"
_KEY = re.compile(r"^[A-Za-z]+$")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def unb64url(text: str) -> bytes:
    """A JWT part: base64url without its padding (RFC 7515), decoded."""
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def client_message(token: str, extensions: dict[str, str] | None = None,
                   authzid: str = "") -> bytes:
    """The client's initial response carrying the bearer token."""
    gs2 = f"n,a={authzid}," if authzid else "n,,"
    parts = [f"auth=Bearer {token}"]
    for key, value in (extensions or {}).items():
        if key == "auth" or not _KEY.match(key):
            raise ValueError(f"SASL extension name {key!r}: letters only, not 'auth'")
        parts.append(f"{key}={value}")
    return (gs2 + "\x01" + "\x01".join(parts) + "\x01\x01").encode("utf-8")


def parse_client_message(message: bytes) -> tuple[str, dict[str, str], str]:
    """(token, extensions, authzid) of a client's message; MalformedToken if it is not one."""
    try:
        text = bytes(message).decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedToken("the OAUTHBEARER message is not UTF-8") from None
    gs2, sep, rest = text.partition("\x01")
    if not sep or not rest.endswith("\x01\x01") or not gs2.startswith(("n,", "y,")):
        raise MalformedToken("not an OAUTHBEARER client message (RFC 7628)")
    fields = gs2.split(",")
    authzid = fields[1][2:] if len(fields) > 1 and fields[1].startswith("a=") else ""
    pairs: dict[str, str] = {}
    for item in rest[:-2].split("\x01"):
        key, eq, value = item.partition("=")
        if not eq:
            raise MalformedToken(f"OAUTHBEARER key/value {item!r} has no '='")
        pairs[key] = value
    auth = pairs.pop("auth", "")
    scheme, _, token = auth.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise MalformedToken("the OAUTHBEARER message has no 'auth=Bearer <token>'")
    return token.strip(), pairs, authzid


# -- unsecured tokens ------------------------------------------------------------------------


@dataclass(frozen=True)
class UnsecuredConfig:
    """``sasl.oauthbearer.config`` for unsecured tokens, librdkafka's keys."""

    principal: str
    life_seconds: int = 3600
    scope: tuple[str, ...] = ()
    principal_claim: str = "sub"
    scope_claim: str = "scope"
    extensions: dict[str, str] = field(default_factory=dict)


def parse_unsecured_config(text: str) -> UnsecuredConfig:
    """ValueError naming the key for a bad ``sasl.oauthbearer.config``."""
    values: dict[str, str] = {}
    extensions: dict[str, str] = {}
    for item in (text or "").split():
        key, eq, value = item.partition("=")
        if not eq:
            raise ValueError(f"{item!r} is not key=value")
        if key.startswith("extension_"):
            extensions[key[len("extension_"):]] = value
        elif key in ("principal", "lifeSeconds", "scope", "principalClaimName",
                     "scopeClaimName"):
            values[key] = value
        else:
            raise ValueError(f"unknown key {key!r}")
    if not values.get("principal"):
        raise ValueError("principal=... is required for an unsecured token")
    try:
        life = int(values.get("lifeSeconds", "3600"))
    except ValueError:
        raise ValueError("lifeSeconds must be an integer") from None
    if life <= 0:
        raise ValueError("lifeSeconds must be positive")
    return UnsecuredConfig(
        values["principal"], life,
        tuple(s for s in values.get("scope", "").split(",") if s),
        values.get("principalClaimName", "sub"), values.get("scopeClaimName", "scope"),
        extensions)


def unsecured_token(config: UnsecuredConfig, now: float | None = None) -> tuple[str, float]:
    """(an unsecured JWT, its expiry in seconds since the epoch)."""
    issued = time.time() if now is None else now
    expiry = issued + config.life_seconds
    # iat in whole seconds: Kafka's validator refuses an iat later than its clock in whole
    # milliseconds, which a fractional iat is when the broker checks within the same ms.
    claims: dict[str, object] = {config.principal_claim: config.principal,
                                 "iat": math.floor(issued), "exp": expiry}
    if config.scope:
        claims[config.scope_claim] = list(config.scope)
    header = _b64(json.dumps({"alg": "none"}).encode())
    payload = _b64(json.dumps(claims).encode())
    return f"{header}.{payload}.", expiry


@dataclass(frozen=True)
class ValidToken:
    principal: str
    expires_at: float  # seconds since the epoch


def validate_unsecured(token: str, now: float | None = None,
                       principal_claim: str = "sub") -> ValidToken:
    """Kafka's unsecured-JWT validation; AuthenticationFailed says what is wrong."""
    parts = token.split(".")
    if len(parts) != 3:
        raise AuthenticationFailed("invalid_token: a JWT has three dot-separated parts")
    try:
        header = json.loads(unb64url(parts[0]))
        claims = json.loads(unb64url(parts[1]))
    except (ValueError, UnicodeDecodeError):
        raise AuthenticationFailed("invalid_token: the JWT is not base64url JSON") from None
    if not isinstance(header, dict) or header.get("alg") != "none" or parts[2]:
        raise AuthenticationFailed(
            "invalid_token: the unsecured validator takes alg 'none' without a signature")
    if not isinstance(claims, dict):
        raise AuthenticationFailed("invalid_token: the JWT claims are not an object")
    principal = claims.get(principal_claim)
    if not isinstance(principal, str) or not principal.strip():
        raise AuthenticationFailed(
            f"invalid_token: the principal claim {principal_claim!r} is missing or empty")
    expiry = claims.get("exp")
    if not isinstance(expiry, int | float) or isinstance(expiry, bool):
        raise AuthenticationFailed("invalid_token: the 'exp' claim is missing")
    current = time.time() if now is None else now
    if expiry <= current:
        raise AuthenticationFailed(f"invalid_token: the token expired at {expiry}")
    return ValidToken(principal, float(expiry))
