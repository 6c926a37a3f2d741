"""The ACL store (``<data dir>/security/acls.json``) and the authorizer that reads it.

Decision rules, as Kafka's StandardAuthorizer:

1. a super user (``super.users``) may do everything;
2. a DENY binding that matches (principal or ``User:*``, host or ``*``, the operation itself or
   ALL, the resource by literal name, ``*`` or prefix) denies: DENY overrides ALLOW;
3. a matching ALLOW binding allows; an ALLOW of READ, WRITE, DELETE or ALTER also allows
   DESCRIBE, and ALTER_CONFIGS allows DESCRIBE_CONFIGS (for ALLOW only);
4. if no binding at all names the resource (whoever it is for), the answer is
   ``allow.everyone.if.no.acl.found``; otherwise it is no.

The broker re-reads the file when it changes (looked at no more than every
``RELOAD_CHECK_S``), so ``kip acls --data-dir`` works on a running broker too.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from typing import Any

from .acls import (
    IMPLIES_DESCRIBE,
    IMPLIES_DESCRIBE_CONFIGS,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBinding,
    AclFilter,
    AclOperation,
    AclPermission,
    ResourceType,
)
from .files import WatchedJson, security_dir

log = logging.getLogger("kipproducer.broker.security")

ACLS_FILE = "acls.json"
FORMAT_VERSION = 1
RELOAD_CHECK_S = 0.5

#: The bindings, grouped by resource type for the authorizer's scans.
Index = dict[ResourceType, tuple[AclBinding, ...]]


def _index(bindings: Iterable[AclBinding]) -> Index:
    index: dict[ResourceType, list[AclBinding]] = {}
    for b in sorted(set(bindings)):
        index.setdefault(b.resource_type, []).append(b)
    return {rtype: tuple(bs) for rtype, bs in index.items()}


def _parse(document: Any) -> Index:
    if document is None:
        return {}
    if document.get("version") != FORMAT_VERSION:
        raise ValueError(f"unknown ACL file version {document.get('version')!r}")
    return _index(AclBinding.from_json(doc) for doc in document["acls"])


def _document(index: Index) -> dict[str, Any]:
    return {
        "version": FORMAT_VERSION,
        "acls": [b.to_json() for bindings in index.values() for b in bindings],
    }


def _all(index: Index) -> list[AclBinding]:
    return sorted(b for bindings in index.values() for b in bindings)


class AclStore:
    """The ACL bindings of one data dir. Thread-safe; changes are durable when a call returns."""

    def __init__(
        self, data_dir: str | os.PathLike[str], *, check_every_s: float = RELOAD_CHECK_S
    ) -> None:
        self.path = security_dir(data_dir) / ACLS_FILE
        self._file: WatchedJson[Index] = WatchedJson(self.path, _parse, check_every_s=check_every_s)

    def index(self) -> Index:
        return self._file.get()

    def load(self) -> None:
        self._file.get()

    def list(self, acl_filter: AclFilter | None = None) -> list[AclBinding]:
        bindings = _all(self._file.get())
        return bindings if acl_filter is None else [b for b in bindings if acl_filter.matches(b)]

    def add(self, bindings: Sequence[AclBinding]) -> int:
        """Store the bindings (each must be valid); returns how many were new."""
        for b in bindings:
            problem = b.problem()
            if problem:
                raise ValueError(f"{b}: {problem}")

        def change(index: Index):
            current = set(_all(index))
            new = current | set(bindings)
            if new == current:
                return index, None, 0
            updated = _index(new)
            return updated, _document(updated), len(new) - len(current)

        return int(self._file.update(change))

    def remove(self, filters: Sequence[AclFilter]) -> list[list[AclBinding]]:
        """Delete every binding matching each filter; per filter, the bindings it removed."""

        def change(index: Index):
            current = _all(index)
            removed = [[b for b in current if f.matches(b)] for f in filters]
            gone = {b for group in removed for b in group}
            if not gone:
                return index, None, removed
            updated = _index(b for b in current if b not in gone)
            return updated, _document(updated), removed

        return list(self._file.update(change))


def parse_super_users(text: str | None) -> frozenset[str]:
    """``super.users``: principals separated by semicolons (``User:admin;User:ops``)."""
    out = set()
    for part in (text or "").split(";"):
        part = part.strip()
        if not part:
            continue
        kind, sep, name = part.partition(":")
        if not sep or not kind or not name:
            raise ValueError(f"super.users entry {part!r} is not of the form User:name")
        out.add(part)
    return frozenset(out)


class Authorizer:
    def __init__(
        self,
        store: AclStore,
        *,
        super_users: frozenset[str] = frozenset(),
        allow_everyone_if_no_acl_found: bool = False,
    ) -> None:
        self.store = store
        self.super_users = super_users
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found

    def authorize(
        self,
        principal: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
        host: str = WILDCARD,
    ) -> bool:
        if principal in self.super_users:
            return True
        principals = (principal, WILDCARD_PRINCIPAL)
        found_resource_acls = False
        allowed = False
        for b in self.store.index().get(resource_type, ()):
            if not b.matches_name(name):
                continue
            found_resource_acls = True
            if b.principal not in principals or b.host not in (WILDCARD, host):
                continue
            if b.permission == AclPermission.DENY:
                if b.operation in (operation, AclOperation.ALL):
                    return False
            elif not allowed and _allow_covers(b.operation, operation):
                allowed = True
        if allowed:
            return True
        return not found_resource_acls and self.allow_everyone_if_no_acl_found

    def authorize_any(
        self,
        principal: str,
        operation: AclOperation,
        resource_type: ResourceType,
        host: str = WILDCARD,
    ) -> bool:
        """May ``principal`` do ``operation`` on at least one resource of the type?

        Kafka's authorizeByResourceType, simplified: some ALLOW binding for the principal must
        grant the operation on a resource name that no DENY takes back. With no bindings of
        the type at all, ``allow.everyone.if.no.acl.found`` decides.
        """
        if principal in self.super_users:
            return True
        bindings = self.store.index().get(resource_type, ())
        if not bindings:
            return self.allow_everyone_if_no_acl_found
        principals = (principal, WILDCARD_PRINCIPAL)
        for b in bindings:
            if (b.permission == AclPermission.ALLOW and b.principal in principals
                    and b.host in (WILDCARD, host) and _allow_covers(b.operation, operation)
                    and self.authorize(principal, operation, resource_type, b.resource_name,
                                       host)):
                return True
        return False


def _allow_covers(granted: AclOperation, wanted: AclOperation) -> bool:
    if granted in (wanted, AclOperation.ALL):
        return True
    if wanted == AclOperation.DESCRIBE:
        return granted in IMPLIES_DESCRIBE
    if wanted == AclOperation.DESCRIBE_CONFIGS:
        return granted in IMPLIES_DESCRIBE_CONFIGS
    return False
