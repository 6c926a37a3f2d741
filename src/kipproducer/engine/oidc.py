"""``sasl.oauthbearer.method=oidc``: OAUTHBEARER tokens from an OAuth 2.0 token endpoint with
the client-credentials grant (KIP-768), as librdkafka's built-in OIDC client gets them:

* an HTTP(S) POST to ``sasl.oauthbearer.token.endpoint.url`` with HTTP basic authentication
  (``sasl.oauthbearer.client.id`` : ``sasl.oauthbearer.client.secret``, base64) and the form
  body ``grant_type=client_credentials`` plus ``&scope=...`` when ``sasl.oauthbearer.scope``
  is set;
* the token is the answer's ``access_token``, a JWT whose payload gives its expiry (``exp``,
  seconds since the epoch) and its principal (``sasl.oauthbearer.sub.claim.name``, ``sub`` by
  default); the signature is the broker's to check, not the client's;
* ``sasl.oauthbearer.extensions`` (``key=value,key=value``) go to the broker with the token.

HTTPS endpoints are checked against ``https.ca.location`` / ``https.ca.pem`` (the system's CA
store when neither is set). One request per token: a failure (unreachable, an HTTP error, no
``access_token``, a token that is not a JWT) is one error naming the endpoint and the cause,
which fails the waiting records (the engine tries again after ``retry.backoff.max.ms``).
"""

from __future__ import annotations

import base64
import binascii
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import client_config
from ..sasl.oauthbearer import unb64url

#: librdkafka's timeout of one token request.
REQUEST_TIMEOUT_S = 20.0
CLIENT_CREDENTIALS = "client_credentials"
_EXTENSION_KEY = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


class OidcError(Exception):
    """The token endpoint did not give a usable token; the message names it and the cause."""


@dataclass(frozen=True)
class OidcSettings:
    endpoint: str
    client_id: str
    client_secret: str = field(repr=False)
    scope: str = ""
    extensions: dict[str, str] = field(default_factory=dict)
    sub_claim: str = "sub"
    https_ca_location: str = ""
    https_ca_pem: str = field(default="", repr=False)


@dataclass(frozen=True)
class OidcToken:
    value: str
    expires_at: float  # seconds since the epoch (the JWT's exp)
    principal: str


def oidc_settings(props: Mapping[str, Any]) -> OidcSettings:
    """The OIDC settings of ``props``; ValueError naming the property that is missing or bad
    (librdkafka refuses the same when the Producer is built)."""
    def text(name: str) -> str:
        return str(client_config.value(props, name) or "").strip()

    grant = text("sasl.oauthbearer.grant.type")
    if grant != CLIENT_CREDENTIALS:
        raise ValueError(
            f"sasl.oauthbearer.grant.type={grant}: kipproducer's sending engine runs the "
            "client_credentials grant only; fetch a jwt-bearer token in an oauth_cb instead")
    if client_config.value(props, "enable.sasl.oauthbearer.unsecure.jwt"):
        raise ValueError("enable.sasl.oauthbearer.unsecure.jwt and "
                         "sasl.oauthbearer.method=oidc are mutually exclusive")
    endpoint = text("sasl.oauthbearer.token.endpoint.url")
    for name, value in (("sasl.oauthbearer.token.endpoint.url", endpoint),
                        ("sasl.oauthbearer.client.id", text("sasl.oauthbearer.client.id")),
                        ("sasl.oauthbearer.client.secret",
                         text("sasl.oauthbearer.client.secret"))):
        if not value:
            raise ValueError(f"{name} is mandatory when sasl.oauthbearer.method=oidc is set")
    url = urllib.parse.urlsplit(endpoint)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise ValueError(f"sasl.oauthbearer.token.endpoint.url={endpoint!r}: expected an "
                         "http:// or https:// URL")
    sub_claim = text("sasl.oauthbearer.sub.claim.name")
    if not sub_claim:
        raise ValueError("sasl.oauthbearer.sub.claim.name must not be empty")
    return OidcSettings(
        endpoint, text("sasl.oauthbearer.client.id"), text("sasl.oauthbearer.client.secret"),
        text("sasl.oauthbearer.scope"), parse_extensions(text("sasl.oauthbearer.extensions")),
        sub_claim, text("https.ca.location"), text("https.ca.pem"))


def parse_extensions(value: str) -> dict[str, str]:
    """``sasl.oauthbearer.extensions``: ``key=value`` pairs separated by commas (RFC 7628 keys:
    letters only, not ``auth``)."""
    out: dict[str, str] = {}
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        key, eq, val = item.partition("=")
        if not eq or not key:
            raise ValueError(f"sasl.oauthbearer.extensions: {item!r} is not key=value")
        if key == "auth" or not set(key) <= _EXTENSION_KEY:
            raise ValueError(f"sasl.oauthbearer.extensions: key {key!r} must be letters only, "
                             "and not 'auth' (RFC 7628)")
        out[key] = val
    return out


def fetch_token(settings: OidcSettings, timeout_s: float = REQUEST_TIMEOUT_S) -> OidcToken:
    """One client-credentials request; OidcError naming the endpoint and what went wrong."""
    where = f"the OIDC token endpoint {settings.endpoint} (sasl.oauthbearer.token.endpoint.url)"
    body = "grant_type=" + CLIENT_CREDENTIALS
    if settings.scope:
        body += "&scope=" + urllib.parse.quote(settings.scope, safe="")
    basic = base64.b64encode(f"{settings.client_id}:{settings.client_secret}".encode()).decode()
    request = urllib.request.Request(settings.endpoint, data=body.encode(), method="POST",
                                     headers={"Authorization": f"Basic {basic}",
                                              "Accept": "application/json",
                                              "Content-Type":
                                                  "application/x-www-form-urlencoded"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s,
                                    context=_https_context(settings)) as answer:
            raw = answer.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read(300).decode("utf-8", "replace").strip()
        hint = (" (check sasl.oauthbearer.client.id and sasl.oauthbearer.client.secret)"
                if exc.code in (400, 401, 403) else "")
        raise OidcError(f"{where} answered HTTP {exc.code} {exc.reason}{hint}"
                        + (f": {detail}" if detail else "")) from None
    except TimeoutError:
        raise OidcError(f"{where} did not answer within {timeout_s:g} s") from None
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, TimeoutError):  # the connect timed out
            raise OidcError(f"{where} did not answer within {timeout_s:g} s") from None
        raise OidcError(f"{where} cannot be reached: {exc.reason}") from None
    except (OSError, ssl.SSLError) as exc:
        raise OidcError(f"{where} cannot be reached: {exc}") from None
    return _token_of(raw, settings.sub_claim, where)


def _https_context(settings: OidcSettings) -> ssl.SSLContext | None:
    if not settings.endpoint.lower().startswith("https:"):
        return None
    location = settings.https_ca_location if settings.https_ca_location != "probe" else ""
    try:
        return ssl.create_default_context(cafile=location or None,
                                          cadata=settings.https_ca_pem or None)
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise OidcError(f"https.ca.location / https.ca.pem: no usable CA certificate: "
                        f"{exc}") from None


def _token_of(raw: bytes, sub_claim: str, where: str) -> OidcToken:
    """The access_token of the endpoint's JSON answer, its exp and its principal claim."""
    try:
        answer = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise OidcError(f"{where} answered with something that is not JSON: "
                        f"{raw[:100]!r}") from None
    token = answer.get("access_token") if isinstance(answer, dict) else None
    if not isinstance(token, str) or not token:
        keys = sorted(answer) if isinstance(answer, dict) else type(answer).__name__
        raise OidcError(f"{where} answered without an \"access_token\" string (got {keys})")
    parts = token.split(".")
    if len(parts) != 3:
        raise OidcError(f"{where}: the access_token is not a JWT (header.payload.signature, "
                        f"{len(parts)} part(s))")
    try:
        claims = json.loads(unb64url(parts[1]))
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise OidcError(f"{where}: the access_token's payload is not base64url JSON") from None
    if not isinstance(claims, dict):
        raise OidcError(f"{where}: the access_token's payload is not a JSON object")
    expiry = claims.get("exp")
    if isinstance(expiry, bool) or not isinstance(expiry, int | float) or expiry <= 0:
        raise OidcError(f"{where}: the access_token has no valid \"exp\" claim")
    principal = claims.get(sub_claim)
    if not isinstance(principal, str) or not principal:
        raise OidcError(f"{where}: the access_token has no non-empty \"{sub_claim}\" claim "
                        "(sasl.oauthbearer.sub.claim.name)")
    return OidcToken(token, float(expiry), principal)
