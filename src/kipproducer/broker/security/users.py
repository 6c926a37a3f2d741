"""The SASL user store: ``<data dir>/security/users.json``.

Each user has one SCRAM credential per mechanism (salt, iterations, StoredKey, ServerKey;
never the password). SASL/PLAIN is verified against the same credentials: the password the
client sends is run through PBKDF2 with the stored salt and iterations, and the StoredKey it
gives must equal the stored one (SCRAM-SHA-512 preferred, else SCRAM-SHA-256). So there is no
second kind of password hash to keep in step, and a user added for SCRAM can use PLAIN too.

Usable without a running broker: ``UserStore(data_dir).add("alice", "secret")`` is what
``kip users add`` does; a running broker sees the change at the next authentication.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from kipproducer.sasl.scram import (
    DEFAULT_ITERATIONS,
    HASHES,
    ScramCredential,
    check_iterations,
    make_credential,
    password_matches,
)

from .files import WatchedJson, security_dir

USERS_FILE = "users.json"
FORMAT_VERSION = 1
SCRAM_MECHANISMS = tuple(HASHES)  # ("SCRAM-SHA-256", "SCRAM-SHA-512")
#: PLAIN tries the stronger credential first.
PLAIN_VERIFY_ORDER = ("SCRAM-SHA-512", "SCRAM-SHA-256")

Users = Mapping[str, Mapping[str, ScramCredential]]


def _parse(document: Any) -> Users:
    if document is None:
        return MappingProxyType({})
    if document.get("version") != FORMAT_VERSION:
        raise ValueError(f"unknown users file version {document.get('version')!r}")
    users: dict[str, Mapping[str, ScramCredential]] = {}
    for name, by_mechanism in document["users"].items():
        users[name] = MappingProxyType(
            {
                mechanism: ScramCredential.from_json(doc)
                for mechanism, doc in by_mechanism.items()
                if mechanism in HASHES
            }
        )
    return MappingProxyType(users)


def _document(users: Users) -> dict[str, Any]:
    return {
        "version": FORMAT_VERSION,
        "users": {
            name: {mechanism: cred.to_json() for mechanism, cred in creds.items()}
            for name, creds in sorted(users.items())
        },
    }


def validate_user_name(name: str) -> None:
    if not name:
        raise ValueError("a user name cannot be empty")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        raise ValueError(f"user name {name!r} contains control characters")


def check_mechanism(mechanism: str) -> None:
    if mechanism not in HASHES:
        raise ValueError(
            f"unknown SCRAM mechanism {mechanism!r}; use one of {', '.join(SCRAM_MECHANISMS)}"
        )


@dataclass(frozen=True)
class UserInfo:
    name: str
    #: mechanism -> iterations
    mechanisms: Mapping[str, int]


class UserStore:
    """The users of one data dir. Thread-safe; changes are durable when a call returns."""

    def __init__(self, data_dir: str | os.PathLike[str], *, check_every_s: float = 0.0) -> None:
        self.path = security_dir(data_dir) / USERS_FILE
        self._file: WatchedJson[Users] = WatchedJson(
            self.path, _parse, check_every_s=check_every_s
        )

    # -- reading ---------------------------------------------------------------------------------

    def credential(self, name: str, mechanism: str) -> ScramCredential | None:
        return self._file.get().get(name, {}).get(mechanism)

    def verify_password(self, name: str, password: str) -> bool:
        """SASL/PLAIN: does ``password`` match the user's stored SCRAM credential?"""
        creds = self._file.get().get(name)
        if not creds:
            return False
        for mechanism in PLAIN_VERIFY_ORDER:
            cred = creds.get(mechanism)
            if cred is not None:
                return password_matches(mechanism, cred, password)
        return False

    def users(self) -> list[UserInfo]:
        return [
            UserInfo(name, {m: c.iterations for m, c in sorted(creds.items())})
            for name, creds in sorted(self._file.get().items())
        ]

    def __contains__(self, name: object) -> bool:
        return name in self._file.get()

    def load(self) -> None:
        """Read the file now (raising StoreError if it is corrupt)."""
        self._file.get()

    # -- changing --------------------------------------------------------------------------------

    def add(
        self,
        name: str,
        password: str,
        mechanisms: str | Iterable[str] | None = None,
        *,
        iterations: int = DEFAULT_ITERATIONS,
    ) -> None:
        """Add the user, or replace its password, for ``mechanisms`` (default: both SCRAMs).

        Credentials for other mechanisms the user already has are kept.
        """
        validate_user_name(name)
        check_iterations(iterations)
        if mechanisms is None:
            wanted = list(SCRAM_MECHANISMS)
        elif isinstance(mechanisms, str):
            wanted = [mechanisms]
        else:
            wanted = list(mechanisms)
        if not wanted:
            raise ValueError("name at least one SCRAM mechanism")
        for mechanism in wanted:
            check_mechanism(mechanism)
        creds = {m: make_credential(m, password, iterations=iterations) for m in wanted}
        self.set_credentials(name, creds)

    def set_credentials(self, name: str, creds: Mapping[str, ScramCredential]) -> None:
        """Store ready-made credentials (AlterUserScramCredentials sends salted passwords)."""
        validate_user_name(name)

        def change(users: Users):
            new = dict(users)
            new[name] = MappingProxyType({**users.get(name, {}), **creds})
            return MappingProxyType(new), _document(new), None

        self._file.update(change)

    def remove(self, name: str, mechanism: str | None = None) -> bool:
        """Remove the user (or only its credential for ``mechanism``); False if absent."""

        def change(users: Users):
            creds = users.get(name)
            if creds is None or (mechanism is not None and mechanism not in creds):
                return users, None, False
            new = dict(users)
            if mechanism is None or len(creds) == 1:
                del new[name]
            else:
                new[name] = MappingProxyType({m: c for m, c in creds.items() if m != mechanism})
            return MappingProxyType(new), _document(new), True

        return bool(self._file.update(change))
