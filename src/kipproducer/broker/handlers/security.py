"""SaslHandshake, SaslAuthenticate, CreateAcls, DescribeAcls, DeleteAcls,
DescribeUserScramCredentials and AlterUserScramCredentials.

The SASL handlers drive the connection's :class:`~..security.sasl.SaslSession` (``ctx.session``);
the server loop closes the connection after the response when the session asks for it. The ACL
and credential APIs need ALTER (changes) or DESCRIBE (reads) on the Cluster, as in Kafka.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from kipproducer.protocol import build_response
from kipproducer.protocol import error_codes as ec
from kipproducer.sasl.scram import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    ScramCredential,
    credential_from_salted_password,
)

from ...protocol.api_keys import (
    ALTER_USER_SCRAM_CREDENTIALS,
    CREATE_ACLS,
    DELETE_ACLS,
    DESCRIBE_ACLS,
    DESCRIBE_USER_SCRAM_CREDENTIALS,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
)
from ..api import RequestContext, handles
from ..security import checks
from ..security.acls import (
    AclBinding,
    AclFilter,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
)
from ..security.errors import StoreError
from ..security.users import validate_user_name

log = logging.getLogger("kipproducer.broker")


SECURITY_DISABLED = ec.error_code("SECURITY_DISABLED")
RESOURCE_NOT_FOUND = ec.error_code("RESOURCE_NOT_FOUND")
DUPLICATE_RESOURCE = ec.error_code("DUPLICATE_RESOURCE")
UNACCEPTABLE_CREDENTIAL = ec.error_code("UNACCEPTABLE_CREDENTIAL")
UNSUPPORTED_SASL_MECHANISM = ec.error_code("UNSUPPORTED_SASL_MECHANISM")

#: ScramMechanism codes of the credential APIs (0 is UNKNOWN).
SCRAM_CODES = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
SCRAM_CODE_OF = {name: code for code, name in SCRAM_CODES.items()}

NO_AUTHORIZER = (
    "no authorizer is configured (set authorizer.enabled=true to use ACLs)"
)

T = TypeVar("T")


async def _off_loop(fn: Callable[..., T], *args: Any) -> T:
    """Store writes fsync a file and its directory: off the event loop."""
    return await asyncio.get_running_loop().run_in_executor(None, fn, *args)


def _session(ctx: RequestContext):
    session = ctx.session
    if session is None:  # only a handler called outside a connection has none
        raise RuntimeError("SASL handlers need the connection's session")
    return session


# -- SASL -------------------------------------------------------------------------------------


@handles(SASL_HANDSHAKE, 0, 1)
async def sasl_handshake(ctx: RequestContext, body):
    code, mechanisms = _session(ctx).handshake(body.mechanism, ctx.api_version)
    return build_response(SASL_HANDSHAKE, ctx.api_version, error_code=code, mechanisms=mechanisms)


@handles(SASL_AUTHENTICATE, 0, 2)
async def sasl_authenticate(ctx: RequestContext, body):
    session = _session(ctx)
    code, message, reply = await session.authenticate(body.auth_bytes)
    fields: dict[str, Any] = {"error_code": code, "error_message": message, "auth_bytes": reply}
    if ctx.api_version >= 1:
        # KIP-368: how long the session lasts (connections.max.reauth.ms, the token's
        # expiry); 0 = no re-authentication required.
        fields["session_lifetime"] = session.session_lifetime_ms if code == 0 else 0
    return build_response(SASL_AUTHENTICATE, ctx.api_version, **fields)


# -- ACLs -------------------------------------------------------------------------------------


def _acl_store(ctx: RequestContext):
    """The ACL store, or None when the broker has no authorizer (Kafka: SECURITY_DISABLED)."""
    security = ctx.broker.security
    return None if security.authorizer is None else security.acls


def _binding_of(creation) -> AclBinding:
    """A wire AclCreation as a binding; ValueError (with a message) for codes out of range."""
    return AclBinding(
        ResourceType(creation.resource_type),
        creation.resource_name,
        PatternType(creation.resource_pattern_type),
        creation.principal,
        creation.host,
        AclOperation(creation.operation),
        AclPermission(creation.permission_type),
    )


def _filter_of(f) -> AclFilter:
    """A wire DescribeAcls request / DeleteAcls filter as an AclFilter (ValueError: bad code)."""
    return AclFilter(
        ResourceType(f.resource_type_filter),
        f.resource_name_filter,
        PatternType(f.pattern_type_filter),
        f.principal_filter,
        f.host_filter,
        AclOperation(f.operation),
        AclPermission(f.permission_type),
    )


def _binding_fields(b: AclBinding) -> dict[str, Any]:
    return {
        "resource_type": int(b.resource_type),
        "resource_name": b.resource_name,
        "pattern_type": int(b.pattern_type),
        "principal": b.principal,
        "host": b.host,
        "operation": int(b.operation),
        "permission_type": int(b.permission),
    }


def _alter_refusal(ctx: RequestContext, store) -> dict[str, Any] | None:
    """The per-entry error of Create/DeleteAcls when ACLs cannot be changed here, or None."""
    if store is None:
        return {"error_code": SECURITY_DISABLED, "error_message": NO_AUTHORIZER}
    if not checks.may_alter_cluster(ctx):
        return {"error_code": ec.CLUSTER_AUTHORIZATION_FAILED,
                "error_message": f"{ctx.principal} lacks Alter on the cluster"}
    return None


def _entries(ctx: RequestContext, store, entries, make) -> tuple[list, list]:
    """Create/DeleteAcls' per-entry checks: ``(results, items)``, a result per entry (an
    error answer, or None where the entry is valid) and the valid bindings or filters, in
    order."""
    results: list[dict[str, Any] | None] = []
    items: list = []
    for entry in entries:
        refusal = _alter_refusal(ctx, store)
        if refusal is not None:
            results.append(refusal)
            continue
        item, problem = _parsed(lambda e=entry: make(e))
        if item is None:
            results.append({"error_code": ec.INVALID_REQUEST, "error_message": problem})
            continue
        results.append(None)
        items.append(item)
    return results, items


def _parsed(make) -> tuple[Any, str | None]:
    """``(binding or filter, None)``, or ``(None, what is wrong with it)``: an unknown code or
    a combination Kafka refuses."""
    try:
        item = make()
        problem = item.problem()
    except ValueError as exc:
        return None, f"unknown code: {exc}"
    return (None, problem) if problem else (item, None)


@handles(CREATE_ACLS, 1, 3)
async def create_acls(ctx: RequestContext, body):
    store = _acl_store(ctx)
    checked, valid = _entries(ctx, store, body.creations, _binding_of)
    results = [r or {"error_code": ec.NONE, "error_message": None} for r in checked]
    if valid and store is not None:
        try:
            added = await _off_loop(store.add, valid)
            log.info("%s created ACLs (%d new): %s", ctx.principal, added,
                     "; ".join(str(b) for b in valid))
        except (StoreError, OSError) as exc:
            log.error("CreateAcls could not store the ACLs: %s", exc)
            for r in results:
                if r["error_code"] == ec.NONE:
                    r.update(error_code=ec.UNKNOWN_SERVER_ERROR, error_message=str(exc))
    return build_response(CREATE_ACLS, ctx.api_version, results=results)


@handles(DESCRIBE_ACLS, 1, 3)
async def describe_acls(ctx: RequestContext, body):
    v = ctx.api_version
    store = _acl_store(ctx)
    if store is None:
        return build_response(DESCRIBE_ACLS, v, error_code=SECURITY_DISABLED,
                              error_message=NO_AUTHORIZER)
    if not checks.may_describe_cluster(ctx):
        return build_response(DESCRIBE_ACLS, v, error_code=ec.CLUSTER_AUTHORIZATION_FAILED,
                              error_message=f"{ctx.principal} lacks Describe on the cluster")
    acl_filter, problem = _parsed(lambda: _filter_of(body))
    if acl_filter is None:
        return build_response(DESCRIBE_ACLS, v, error_code=ec.INVALID_REQUEST,
                              error_message=problem)
    grouped: dict[tuple[ResourceType, str, PatternType], list[AclBinding]] = {}
    for b in store.list(acl_filter):
        grouped.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(b)
    resources = [
        {
            "resource_type": int(rtype),
            "resource_name": name,
            "pattern_type": int(pattern),
            "acls": [
                {"principal": b.principal, "host": b.host, "operation": int(b.operation),
                 "permission_type": int(b.permission)}
                for b in bindings
            ],
        }
        for (rtype, name, pattern), bindings in grouped.items()
    ]
    return build_response(DESCRIBE_ACLS, v, error_code=ec.NONE, resources=resources)


@handles(DELETE_ACLS, 1, 3)
async def delete_acls(ctx: RequestContext, body):
    store = _acl_store(ctx)
    results, filters = _entries(ctx, store, body.filters, _filter_of)  # None: filled in below
    removed: list[list[AclBinding]] = []
    if filters and store is not None:
        try:
            removed = await _off_loop(store.remove, filters)
        except (StoreError, OSError) as exc:
            log.error("DeleteAcls could not store the ACLs: %s", exc)
            removed = []
            for i, r in enumerate(results):
                if r is None:
                    results[i] = {"error_code": ec.UNKNOWN_SERVER_ERROR, "error_message": str(exc)}
    gone = iter(removed)
    out = []
    for r in results:
        if r is None:
            matching = next(gone)
            if matching:
                log.info("%s deleted ACLs: %s", ctx.principal, "; ".join(map(str, matching)))
            r = {"error_code": ec.NONE, "error_message": None, "matching_acls": [
                {"error_code": ec.NONE, "error_message": None, **_binding_fields(b)}
                for b in matching]}
        out.append(r)
    return build_response(DELETE_ACLS, ctx.api_version, filter_results=out)


# -- SCRAM credentials (KIP-554) ---------------------------------------------------------------


@handles(DESCRIBE_USER_SCRAM_CREDENTIALS, 0, 0)
async def describe_user_scram_credentials(ctx: RequestContext, body):
    v = ctx.api_version
    if not checks.may_describe_cluster(ctx):
        # As Kafka's error response: the error at the top and once per user named.
        message = f"{ctx.principal} lacks Describe on the cluster"
        return build_response(DESCRIBE_USER_SCRAM_CREDENTIALS, v,
                              error_code=ec.CLUSTER_AUTHORIZATION_FAILED, error_message=message,
                              results=[{"user": u.name,
                                        "error_code": ec.CLUSTER_AUTHORIZATION_FAILED,
                                        "error_message": message}
                                       for u in body.users or ()])
    known = {u.name: u for u in ctx.broker.users.users()}
    wanted = None if body.users is None else [u.name for u in body.users]
    names = sorted(known) if not wanted else wanted
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    results = []
    for name in dict.fromkeys(names):
        entry: dict[str, Any] = {"user": name, "error_code": ec.NONE, "error_message": None}
        if counts[name] > 1:
            entry.update(error_code=DUPLICATE_RESOURCE,
                         error_message="Cannot describe SCRAM credentials for the same user "
                                       "twice in a single request")
        elif name not in known:
            entry.update(error_code=RESOURCE_NOT_FOUND,
                         error_message="Attempt to describe a user credential that does not "
                                       "exist")
        else:
            entry["credential_infos"] = [
                {"mechanism": SCRAM_CODE_OF[m], "iterations": i}
                for m, i in known[name].mechanisms.items()
            ]
        results.append(entry)
    return build_response(DESCRIBE_USER_SCRAM_CREDENTIALS, v, error_code=ec.NONE,
                          results=results)


def _upsertion_problem(u) -> tuple[int, str] | None:
    if u.mechanism not in SCRAM_CODES:
        return UNSUPPORTED_SASL_MECHANISM, f"unknown SCRAM mechanism code {u.mechanism}"
    if not MIN_ITERATIONS <= u.iterations <= MAX_ITERATIONS:
        return UNACCEPTABLE_CREDENTIAL, (
            f"iterations must be within {MIN_ITERATIONS}..{MAX_ITERATIONS}, not {u.iterations}")
    if not u.salt or not u.salted_password:
        return UNACCEPTABLE_CREDENTIAL, "the salt and the salted password cannot be empty"
    return None


@handles(ALTER_USER_SCRAM_CREDENTIALS, 0, 0)
async def alter_user_scram_credentials(ctx: RequestContext, body):
    users = ctx.broker.users
    authorized = checks.may_alter_cluster(ctx)
    named = [d.name for d in body.deletions] + [u.name for u in body.upsertions]
    results: dict[str, dict[str, Any]] = {}
    for name in named:
        results[name] = {"user": name, "error_code": ec.NONE, "error_message": None}
        if not authorized:
            results[name].update(error_code=ec.CLUSTER_AUTHORIZATION_FAILED,
                                 error_message=f"{ctx.principal} lacks Alter on the cluster")
        elif named.count(name) > 1:
            # Kafka refuses a user altered twice in one request (its changes would race); the
            # messages of this handler are Kafka's words, as its tools print them.
            results[name].update(
                error_code=DUPLICATE_RESOURCE,
                error_message="A user credential cannot be altered twice in the same request")
        else:
            try:
                validate_user_name(name)
            except ValueError as exc:
                results[name].update(error_code=UNACCEPTABLE_CREDENTIAL, error_message=str(exc))

    def ok(name: str) -> bool:
        return results[name]["error_code"] == ec.NONE

    try:
        for d in body.deletions:
            if not ok(d.name):
                continue
            mechanism = SCRAM_CODES.get(d.mechanism)
            if mechanism is None:
                results[d.name].update(error_code=UNSUPPORTED_SASL_MECHANISM,
                                       error_message=f"unknown SCRAM mechanism code {d.mechanism}")
            elif not await _off_loop(users.remove, d.name, mechanism):
                results[d.name].update(
                    error_code=RESOURCE_NOT_FOUND,
                    error_message="Attempt to delete a user credential that does not exist")
        for u in body.upsertions:
            if not ok(u.name):
                continue
            problem = _upsertion_problem(u)
            if problem:
                results[u.name].update(error_code=problem[0], error_message=problem[1])
                continue
            mechanism = SCRAM_CODES[u.mechanism]
            cred: ScramCredential = credential_from_salted_password(
                mechanism, bytes(u.salt), u.iterations, bytes(u.salted_password))
            await _off_loop(users.set_credentials, u.name, {mechanism: cred})
            log.info("%s set the %s credential of user %r", ctx.principal, mechanism, u.name)
    except (StoreError, OSError) as exc:
        log.error("AlterUserScramCredentials could not store the users: %s", exc)
        for r in results.values():
            if r["error_code"] == ec.NONE:
                r.update(error_code=ec.UNKNOWN_SERVER_ERROR, error_message=str(exc))
    return build_response(ALTER_USER_SCRAM_CREDENTIALS, ctx.api_version,
                          results=list(results.values()))
