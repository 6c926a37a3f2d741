"""SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka uses them.

Only what a server stores is kept: salt, iteration count, StoredKey = H(HMAC(SaltedPassword,
"Client Key")) and ServerKey = HMAC(SaltedPassword, "Server Key"). StoredKey lets the server
check a client's proof without knowing the password; ServerKey lets it prove to the client that
it knows the credential. Neither gives the password back.

:class:`ScramServer` runs one server-side exchange (client-first -> server-first,
client-final -> server-final); the broker's SASL state machine drives it. :class:`ScramClient`
is the client side, used by the engine's connections, by the ``kip acls --bootstrap-server``
client and by tests that talk SASL on the wire themselves.
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


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


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


# -- message parsing -----------------------------------------------------------------------------


def _attributes(text: str, what: str) -> list[tuple[str, str]]:
    """``a=1,b=2`` -> [("a", "1"), ("b", "2")]; values may contain '=' but not ','."""
    out = []
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) < 1:
            raise MalformedToken(f"{what}: {part!r} is not an attribute=value pair")
        out.append((key, value))
    return out


def decode_saslname(name: str) -> str:
    """RFC 5802 saslname: ',' travels as '=2C' and '=' as '=3D'; any other '=' is invalid."""
    out = []
    i = 0
    while i < len(name):
        if name[i] == "=":
            code = name[i + 1 : i + 3]
            if code == "2C":
                out.append(",")
            elif code == "3D":
                out.append("=")
            else:
                raise MalformedToken(f"invalid escape {name[i:i + 3]!r} in SCRAM user name")
            i += 3
        else:
            out.append(name[i])
            i += 1
    return "".join(out)


def encode_saslname(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


@dataclass(frozen=True)
class ClientFirst:
    gs2_header: str  # "n,," or "y,," or "n,a=authzid,": echoed back in client-final's c=
    authzid: str
    username: str
    nonce: str
    extensions: dict[str, str]
    bare: str  # client-first-message-bare, part of AuthMessage


def parse_client_first(token: bytes) -> ClientFirst:
    text = _utf8(token, "client-first message")
    flag, sep, rest = text.partition(",")
    if not sep:
        raise MalformedToken("client-first message has no GS2 header")
    if flag.startswith("p="):
        raise MalformedToken("channel binding is not supported (GS2 flag 'p')")
    if flag not in ("n", "y"):
        raise MalformedToken(f"unknown GS2 channel-binding flag {flag!r}")
    authz_part, sep, bare = rest.partition(",")
    if not sep:
        raise MalformedToken("client-first message ends inside its GS2 header")
    authzid = ""
    if authz_part:
        if not authz_part.startswith("a="):
            raise MalformedToken(f"bad authorization identity {authz_part!r}")
        authzid = decode_saslname(authz_part[2:])
    attrs = _attributes(bare, "client-first message")
    if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r":
        raise MalformedToken("client-first message must start with n=<user>,r=<nonce>")
    username = decode_saslname(attrs[0][1])
    nonce = attrs[1][1]
    if not username:
        raise MalformedToken("client-first message names no user")
    if not nonce or not _printable(nonce):
        raise MalformedToken("client-first message has an empty or unprintable nonce")
    extensions = dict(attrs[2:])
    return ClientFirst(f"{flag},{authz_part},", authzid, username, nonce, extensions, bare)


@dataclass(frozen=True)
class ClientFinal:
    channel_binding: bytes
    nonce: str
    proof: bytes
    without_proof: str  # client-final-message-without-proof, part of AuthMessage


def parse_client_final(token: bytes) -> ClientFinal:
    text = _utf8(token, "client-final message")
    head, sep, proof_text = text.rpartition(",p=")
    if not sep:
        raise MalformedToken("client-final message has no proof (p=)")
    attrs = _attributes(head, "client-final message")
    if len(attrs) < 2 or attrs[0][0] != "c" or attrs[1][0] != "r":
        raise MalformedToken("client-final message must start with c=<binding>,r=<nonce>")
    try:
        binding = base64.b64decode(attrs[0][1], validate=True)
        proof = base64.b64decode(proof_text, validate=True)
    except ValueError:
        raise MalformedToken("client-final message has invalid base64") from None
    return ClientFinal(binding, attrs[1][1], proof, head)


def _utf8(token: bytes, what: str) -> str:
    try:
        return bytes(token).decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedToken(f"{what} is not UTF-8") from None


def _printable(text: str) -> bool:
    return all(0x21 <= ord(c) <= 0x7E and c != "," for c in text)


# -- the server side -----------------------------------------------------------------------------

INVALID_CREDENTIALS = "invalid username or password"


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
        self._first: ClientFirst | None = None
        self._server_first = ""
        self._nonce = ""
        self._credential: ScramCredential | None = None
        self.username: str | None = None
        self.complete = False

    def step(self, token: bytes) -> bytes:
        if self._first is None:
            return self._on_client_first(token)
        if not self.complete and self._server_first:
            return self._on_client_final(token)
        raise MalformedToken("the SCRAM exchange is already finished")

    def _on_client_first(self, token: bytes) -> bytes:
        first = parse_client_first(token)
        if first.extensions.get(TOKEN_AUTH_EXTENSION, "").lower() == "true":
            raise AuthenticationFailed("delegation token authentication is not supported")
        if first.authzid and first.authzid != first.username:
            raise AuthenticationFailed(
                "the authorization id requested differs from the user name"
            )
        credential = self._lookup(first.username)
        if credential is None:
            credential = self._decoy(first.username)
        self._first = first
        self._credential = credential
        self._nonce = first.nonce + secrets.token_urlsafe(24)
        self._server_first = (
            f"r={self._nonce},s={_b64(credential.salt)},i={credential.iterations}"
        )
        return self._server_first.encode()

    def _on_client_final(self, token: bytes) -> bytes:
        first, credential = self._first, self._credential
        assert first is not None and credential is not None
        final = parse_client_final(token)
        if final.nonce != self._nonce:
            raise AuthenticationFailed("the client-final nonce does not match the exchange")
        if final.channel_binding != first.gs2_header.encode():
            raise AuthenticationFailed("the channel-binding data does not echo the GS2 header")
        auth_message = f"{first.bare},{self._server_first},{final.without_proof}".encode()
        signature = _hmac(self._hash, credential.stored_key, auth_message)
        if len(final.proof) != len(signature):
            raise AuthenticationFailed(INVALID_CREDENTIALS)
        client_key = _xor(final.proof, signature)
        if not hmac.compare_digest(
            hashlib.new(self._hash, client_key).digest(), credential.stored_key
        ):
            raise AuthenticationFailed(INVALID_CREDENTIALS)
        self.username = first.username
        self.complete = True
        server_signature = _hmac(self._hash, credential.server_key, auth_message)
        return f"v={_b64(server_signature)}".encode()

    def _decoy(self, username: str) -> ScramCredential:
        size = hashlib.new(self._hash).digest_size
        salt = _hmac(self._hash, self._decoy_secret, username.encode())[:SALT_BYTES]
        # A StoredKey no proof can hash to: the exchange fails at the client's proof.
        return ScramCredential(salt, DEFAULT_ITERATIONS, os.urandom(size), os.urandom(size))


# -- the client side -----------------------------------------------------------------------------


class ScramClient:
    """The client half: ``first()``, then ``final(server_first)``, then ``verify(server_final)``."""

    def __init__(
        self, mechanism: str, username: str, password: str, *, nonce: str | None = None
    ) -> None:
        self.mechanism = mechanism
        self._hash = hash_name_of(mechanism)
        self.username = username
        self.password = password
        self.nonce = secrets.token_urlsafe(18) if nonce is None else nonce
        self._bare = f"n={encode_saslname(username)},r={self.nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return ("n,," + self._bare).encode()

    def final(self, server_first: bytes) -> bytes:
        attrs = dict(_attributes(_utf8(server_first, "server-first message"), "server-first"))
        if "e" in attrs:
            raise AuthenticationFailed(f"server refused: {attrs['e']}")
        nonce, salt, iterations = attrs["r"], base64.b64decode(attrs["s"]), int(attrs["i"])
        if not nonce.startswith(self.nonce):
            raise AuthenticationFailed("the server's nonce does not extend ours")
        salted = salted_password(self.mechanism, self.password, salt, iterations)
        without_proof = f"c={_b64(b'n,,')},r={nonce}"
        auth_message = f"{self._bare},{_utf8(server_first, 'server-first')},{without_proof}"
        client_key = _hmac(self._hash, salted, b"Client Key")
        stored_key = hashlib.new(self._hash, client_key).digest()
        proof = _xor(client_key, _hmac(self._hash, stored_key, auth_message.encode()))
        server_key = _hmac(self._hash, salted, b"Server Key")
        self._server_signature = _hmac(self._hash, server_key, auth_message.encode())
        return f"{without_proof},p={_b64(proof)}".encode()

    def verify(self, server_final: bytes) -> None:
        attrs = dict(_attributes(_utf8(server_final, "server-final message"), "server-final"))
        if "e" in attrs:
            raise AuthenticationFailed(f"server refused: {attrs['e']}")
        if base64.b64decode(attrs.get("v", "")) != self._server_signature:
            raise AuthenticationFailed("the server's signature is wrong: it does not know us")
