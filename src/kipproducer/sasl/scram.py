"""SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka uses them, through ``scramp``.

The exchange itself (messages, nonces, proofs, the server's signature) is the ``scramp``
library's, on both sides: :class:`ScramServer` runs one server-side exchange for the broker's
SASL state machine, :class:`ScramClient` is the client side used by the engine's connections,
the ``kip acls --bootstrap-server`` client and tests that talk SASL on the wire themselves.

What stays here is what Kafka does differently from ``scramp``:

- Kafka takes the password as UTF-8 as it is, with no SASLprep; ``scramp`` always applies
  SASLprep. The stored credentials are therefore derived here (so a password SASLprep would
  change or refuse is stored as Kafka stores it, and data dirs made before keep working), and a
  client whose user name or password SASLprep would change is refused with that reason rather
  than sending a proof no Kafka broker would accept. The broker's side is unaffected for
  passwords (it holds keys, not passwords); a user name SASLprep refuses is refused.
- Kafka's GS2 header may carry an authorization id equal to the user; ``scramp`` accepts
  none, so any authorization id is refused (Kafka's clients send none).
- Kafka's client-first may carry the ``tokenauth`` extension (delegation tokens); it is
  refused here by name before ``scramp`` sees it.
- An unknown user gets a decoy credential (see :class:`ScramServer`).
- The checks of a client's messages before ``scramp`` reads them, so that each mistake gets
  one message naming it.

Only what a server stores is kept: salt, iteration count, StoredKey = H(HMAC(SaltedPassword,
"Client Key")) and ServerKey = HMAC(SaltedPassword, "Server Key"). StoredKey lets the server
check a client's proof without knowing the password; ServerKey lets it prove to the client that
it knows the credential. Neither gives the password back.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from scramp import ScramClient as _ScrampClient
from scramp import ScramException, ScramMechanism
from scramp.utils import saslprep

from .errors import AuthenticationFailed, MalformedToken

#: Mechanism name -> hashlib name. Kafka knows exactly these two.
HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
#: Kafka's bounds for stored credentials (ScramMechanism.minIterations / maxIterations).
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096
SALT_BYTES = 32
#: Extensions a client may send in its first message; "tokenauth" (delegation tokens) is
#: recognised only to refuse it clearly.
TOKEN_AUTH_EXTENSION = "tokenauth"


@dataclass(frozen=True)
class ScramCredential:
    """What the server keeps for one user and one SCRAM mechanism."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    def to_json(self) -> dict[str, Any]:
        return {
            "salt": _b64(self.salt),
            "iterations": self.iterations,
            "stored_key": _b64(self.stored_key),
            "server_key": _b64(self.server_key),
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ScramCredential:
        return cls(
            base64.b64decode(doc["salt"], validate=True),
            int(doc["iterations"]),
            base64.b64decode(doc["stored_key"], validate=True),
            base64.b64decode(doc["server_key"], validate=True),
        )


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _hmac(hash_name: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, hash_name).digest()


def hash_name_of(mechanism: str) -> str:
    try:
        return HASHES[mechanism]
    except KeyError:
        raise ValueError(
            f"unknown SCRAM mechanism {mechanism!r}; known: {', '.join(HASHES)}"
        ) from None


def check_iterations(iterations: int) -> None:
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(
            f"iterations must be within {MIN_ITERATIONS}..{MAX_ITERATIONS}, not {iterations}"
        )


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i) of RFC 5802: PBKDF2 with the mechanism's HMAC.

    Kafka does no SASLprep normalisation (the password is taken as UTF-8), nor do we.
    """
    name = hash_name_of(mechanism)
    return hashlib.pbkdf2_hmac(name, password.encode("utf-8"), salt, iterations)


def credential_from_salted_password(
    mechanism: str, salt: bytes, iterations: int, salted: bytes
) -> ScramCredential:
    name = hash_name_of(mechanism)
    client_key = _hmac(name, salted, b"Client Key")
    stored_key = hashlib.new(name, client_key).digest()
    server_key = _hmac(name, salted, b"Server Key")
    return ScramCredential(salt, iterations, stored_key, server_key)


def make_credential(
    mechanism: str,
    password: str,
    *,
    iterations: int = DEFAULT_ITERATIONS,
    salt: bytes | None = None,
) -> ScramCredential:
    """A fresh credential for ``password`` (a random salt unless one is given)."""
    check_iterations(iterations)
    salt = os.urandom(SALT_BYTES) if salt is None else salt
    return credential_from_salted_password(
        mechanism, salt, iterations, salted_password(mechanism, password, salt, iterations)
    )


def password_matches(mechanism: str, credential: ScramCredential, password: str) -> bool:
    """Whether ``password`` is the one ``credential`` was made from (used for SASL/PLAIN)."""
    expected = credential_from_salted_password(
        mechanism,
        credential.salt,
        credential.iterations,
        salted_password(mechanism, password, credential.salt, credential.iterations),
    )
    return hmac.compare_digest(expected.stored_key, credential.stored_key)


# -- the client's messages, checked before scramp reads them -------------------------------------


def _utf8(token: bytes, what: str) -> str:
    try:
        return bytes(token).decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedToken(f"{what} is not UTF-8") from None


def decode_saslname(name: str) -> str:
    """RFC 5802 saslname: ',' travels as '=2C' and '=' as '=3D'; any other '=' is invalid."""
    for at in (i for i, c in enumerate(name) if c == "="):
        if name[at:at + 3] not in ("=2C", "=3D"):
            raise MalformedToken(f"invalid escape {name[at:at + 3]!r} in SCRAM user name")
    return name.replace("=2C", ",").replace("=3D", "=")


def _check_client_first(text: str) -> None:
    """The client-first message's shape, each mistake named: GS2 header, no channel binding,
    no authorization id other than the user (scramp takes none at all), n=<user>,r=<nonce>
    first, no delegation token."""
    flag, sep, rest = text.partition(",")
    if not sep:
        raise MalformedToken("client-first message has no GS2 header")
    if flag.startswith("p="):
        raise MalformedToken("channel binding is not supported (GS2 flag 'p')")
    authz, sep, bare = rest.partition(",")
    if not sep:
        raise MalformedToken("client-first message ends inside its GS2 header")
    attrs = [part.partition("=") for part in bare.split(",")]
    if len(attrs) < 2 or attrs[0][:2] != ("n", "=") or attrs[1][:2] != ("r", "="):
        raise MalformedToken("client-first message must start with n=<user>,r=<nonce>")
    user, nonce = decode_saslname(attrs[0][2]), attrs[1][2]
    if not user:
        raise MalformedToken("client-first message names no user")
    if not nonce:
        raise MalformedToken("client-first message has an empty nonce")
    extensions = {key: value for key, _, value in attrs[2:]}
    if extensions.get(TOKEN_AUTH_EXTENSION, "").lower() == "true":
        raise AuthenticationFailed("delegation token authentication is not supported")
    if authz:
        if authz != "a=" + encode_saslname(user):
            raise AuthenticationFailed(
                "the authorization id requested differs from the user name")
        raise AuthenticationFailed("an authorization id is not supported: send n,, as the GS2 "
                                   "header (Kafka's clients do)")


def _check_client_final(text: str) -> None:
    head, sep, proof = text.rpartition(",p=")
    if not sep:
        raise MalformedToken("client-final message has no proof (p=)")
    for value in (head.partition("c=")[2].partition(",")[0], proof):
        try:
            base64.b64decode(value, validate=True)
        except ValueError:
            raise MalformedToken("client-final message has invalid base64") from None


# -- the server side -----------------------------------------------------------------------------

INVALID_CREDENTIALS = "invalid username or password"
#: scramp's server errors -> what the client is told
_SERVER_REFUSALS = {
    "invalid-proof": INVALID_CREDENTIALS,
    "channel-bindings-dont-match": "the channel-binding data does not echo the GS2 header",
}


def _refusal(exc: ScramException, what: str) -> AuthenticationFailed:
    """The AuthenticationFailed that says why scramp refused ``what``."""
    error = exc.server_error.value if exc.server_error is not None else ""
    if error in _SERVER_REFUSALS:
        return AuthenticationFailed(_SERVER_REFUSALS[error])
    return AuthenticationFailed(f"{what} message refused: {exc.args[0]}")


class ScramServer:
    """One server-side SCRAM exchange; ``step`` is called once per client token.

    ``lookup(username)`` returns the user's credential for this mechanism or None. An unknown
    user still gets a server-first message (with a salt derived from the name and a per-broker
    secret), so that the reply to the first message does not tell which users exist; the
    exchange then fails at the proof like a wrong password.
    """

    def __init__(
        self,
        mechanism: str,
        lookup: Callable[[str], ScramCredential | None],
        decoy_secret: bytes,
    ) -> None:
        self.mechanism = mechanism
        self._hash = hash_name_of(mechanism)
        self._lookup = lookup
        self._decoy_secret = decoy_secret
        self._exchange = ScramMechanism(mechanism).make_server(
            self._credential_of, s_nonce=secrets.token_urlsafe(24))
        self._started = False
        self._named: str | None = None  # the user the client-first named
        self.username: str | None = None
        self.complete = False

    def step(self, token: bytes) -> bytes:
        if not self._started:
            self._started = True
            return self._on_client_first(token)
        if not self.complete:
            return self._on_client_final(token)
        raise MalformedToken("the SCRAM exchange is already finished")

    def _credential_of(self, username: str) -> tuple[bytes, bytes, bytes, int]:
        """scramp's auth_fn: the stored credential, or the decoy of an unknown user."""
        self._named = username
        credential = self._lookup(username) or self._decoy(username)
        return (credential.salt, credential.stored_key, credential.server_key,
                credential.iterations)

    def _on_client_first(self, token: bytes) -> bytes:
        text = _utf8(token, "client-first message")
        _check_client_first(text)
        try:
            self._exchange.set_client_first(text)
            return self._exchange.get_server_first().encode()
        except ScramException as exc:
            raise _refusal(exc, "client-first") from None

    def _on_client_final(self, token: bytes) -> bytes:
        text = _utf8(token, "client-final message")
        _check_client_final(text)
        try:
            self._exchange.set_client_final(text)
            server_final = self._exchange.get_server_final()
        except ScramException as exc:
            raise _refusal(exc, "client-final") from None
        self.username = self._named
        self.complete = True
        return server_final.encode()

    def _decoy(self, username: str) -> ScramCredential:
        size = hashlib.new(self._hash).digest_size
        salt = _hmac(self._hash, self._decoy_secret, username.encode())[:SALT_BYTES]
        # A StoredKey no proof can hash to: the exchange fails at the client's proof.
        return ScramCredential(salt, DEFAULT_ITERATIONS, os.urandom(size), os.urandom(size))


# -- the client side -----------------------------------------------------------------------------


def encode_saslname(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _unchanged_by_saslprep(what: str, text: str) -> None:
    """scramp applies SASLprep to the user name and the password, Kafka does not: where that
    changes them, the proof could not match the broker's credential; say so instead."""
    try:
        same = saslprep(text) == text
    except ScramException as exc:
        raise AuthenticationFailed(f"the SCRAM {what} is refused by SASLprep ({exc.args[0]}), "
                                   "which this client applies") from None
    if not same:
        raise AuthenticationFailed(
            f"the SCRAM {what} changes under SASLprep (which this client applies and Kafka "
            "does not), so the broker would refuse the proof: use one in normalised form")


class ScramClient:
    """The client half: ``first()``, then ``final(server_first)``, then ``verify(server_final)``."""

    def __init__(
        self, mechanism: str, username: str, password: str, *, nonce: str | None = None
    ) -> None:
        hash_name_of(mechanism)  # ValueError for an unknown mechanism
        _unchanged_by_saslprep("user name", username)
        _unchanged_by_saslprep("password", password)
        self.mechanism = mechanism
        self.username = username
        self._exchange = _ScrampClient([mechanism], username, password, c_nonce=nonce)

    def first(self) -> bytes:
        return self._exchange.get_client_first().encode()

    def final(self, server_first: bytes) -> bytes:
        text = _utf8(server_first, "server-first message")
        try:
            self._exchange.set_server_first(text)
            return self._exchange.get_client_final().encode()
        except ScramException as exc:
            if exc.server_error is not None and text.startswith("e="):
                raise AuthenticationFailed(f"server refused: {exc.server_error.value}") from None
            if "nonce" in str(exc).lower():
                raise AuthenticationFailed("the server's nonce does not extend ours") from None
            raise AuthenticationFailed(f"unusable server-first message: {exc}") from None

    def verify(self, server_final: bytes) -> None:
        text = _utf8(server_final, "server-final message")
        try:
            self._exchange.set_server_final(text)
        except ScramException as exc:
            if exc.server_error is not None and text.startswith("e="):
                raise AuthenticationFailed(f"server refused: {exc.server_error.value}") from None
            raise AuthenticationFailed(
                f"the server's signature is wrong: it does not know us ({exc})") from None
