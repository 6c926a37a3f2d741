"""``kip users`` and ``kip acls``: the broker's users and ACLs, in the spirit of kafka-acls.

Both edit ``<data dir>/security/`` directly (offline; a running broker picks the change up
within a second), or, for ``kip acls --bootstrap-server HOST:PORT``, go through the broker's
CreateAcls / DescribeAcls / DeleteAcls with the SASL settings of ``--command-config``.
See docs/security.md.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from collections.abc import Iterable
from typing import Any

from .broker.security.acls import (
    CLUSTER_NAME,
    WILDCARD,
    AclBinding,
    AclFilter,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
)
from .broker.security.errors import SecurityError
from .broker.security.users import SCRAM_MECHANISMS
from .sasl.scram import DEFAULT_ITERATIONS

Op, Res = AclOperation, ResourceType


def _fail(message: str) -> int:
    print(f"kip: {message}", file=sys.stderr)
    return 2


# -- kip broker --sasl ---------------------------------------------------------------------------


def add_broker_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sasl", metavar="MECHS",
                        help="require SASL on the listener: comma-separated mechanisms, e.g. "
                             "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512 (same as --config "
                             "sasl.enabled.mechanisms=...); add users with 'kip users add'")


def broker_properties(args: argparse.Namespace) -> dict[str, str]:
    """Broker properties that ``kip broker``'s security flags stand for."""
    return {} if not args.sasl else {"sasl.enabled.mechanisms": args.sasl}


# -- kip users -----------------------------------------------------------------------------------


def _read_password(args: argparse.Namespace) -> str:
    if args.password is not None:
        return args.password
    if not sys.stdin.isatty():
        return sys.stdin.readline().rstrip("\r\n")
    first = getpass.getpass(f"password for {args.name}: ")
    if getpass.getpass("again: ") != first:
        raise SystemExit("kip: the passwords differ")
    return first


def cmd_users(args: argparse.Namespace) -> int:
    from .broker.security.users import UserStore

    store = UserStore(args.data_dir)
    try:
        if args.action == "add":
            password = _read_password(args)
            if not password:
                return _fail("the password cannot be empty")
            store.add(args.name, password, args.mechanism, iterations=args.iterations)
            mechanisms = args.mechanism or list(SCRAM_MECHANISMS)
            print(f"user {args.name}: {', '.join(mechanisms)} credentials stored "
                  f"({args.iterations} iterations)")
        elif args.action == "remove":
            if not store.remove(args.name, args.mechanism):
                what = f"a {args.mechanism} credential" if args.mechanism else "credentials"
                return _fail(f"user {args.name} has no {what}")
            print(f"user {args.name}: removed" + (f" ({args.mechanism})" if args.mechanism
                                                   else ""))
        else:
            for user in store.users():
                mechs = ", ".join(f"{m} ({i} iterations)" for m, i in user.mechanisms.items())
                print(f"{user.name}\t{mechs}")
    except (ValueError, SecurityError, OSError) as exc:
        return _fail(str(exc))
    return 0


def _add_users_parser(sub: Any) -> None:
    users = sub.add_parser("users", help="manage the broker's SASL users (offline, on the "
                                         "data dir; a running broker sees changes at once)")
    actions = users.add_subparsers(dest="action", required=True)
    add = actions.add_parser("add", help="add a user or change its password")
    add.add_argument("name", help="the user name")
    add.add_argument("--password", help="the password (default: read from stdin, or prompted)")
    add.add_argument("--mechanism", action="append", choices=SCRAM_MECHANISMS,
                     help="store a credential for this mechanism only (repeatable; default: "
                          "both; PLAIN logins check the SCRAM-SHA-512 one, else SHA-256)")
    add.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS,
                     help=f"PBKDF2 iterations (4096..16384, default {DEFAULT_ITERATIONS})")
    remove = actions.add_parser("remove", help="remove a user (or one of its credentials)")
    remove.add_argument("name", help="the user name")
    remove.add_argument("--mechanism", choices=SCRAM_MECHANISMS,
                        help="remove only this mechanism's credential")
    listing = actions.add_parser("list", help="list users and their mechanisms")
    for p in (add, remove, listing):
        p.add_argument("--data-dir", required=True, help="the broker's data dir")
        p.set_defaults(func=cmd_users)


# -- kip acls ------------------------------------------------------------------------------------


def _resources(args: argparse.Namespace) -> list[tuple[ResourceType, str]]:
    out: list[tuple[ResourceType, str]] = []
    if args.cluster:
        out.append((Res.CLUSTER, CLUSTER_NAME))
    out += [(Res.TOPIC, t) for t in args.topic]
    out += [(Res.GROUP, g) for g in args.group]
    out += [(Res.TRANSACTIONAL_ID, x) for x in args.transactional_id]
    return out


def _operations_for(args: argparse.Namespace, rtype: ResourceType) -> list[AclOperation]:
    """The operations to grant on one resource: --operation, or the --producer / --consumer
    sets of kafka-acls, or All."""
    if args.producer or args.consumer:
        ops: list[AclOperation] = []
        if args.producer and rtype == Res.TOPIC:
            ops += [Op.WRITE, Op.DESCRIBE, Op.CREATE]
        if args.producer and rtype == Res.TRANSACTIONAL_ID:
            ops += [Op.WRITE, Op.DESCRIBE]
        if args.consumer and rtype == Res.TOPIC:
            ops += [Op.READ, Op.DESCRIBE]
        if args.consumer and rtype == Res.GROUP:
            ops += [Op.READ]
        return list(dict.fromkeys(ops))
    return [Op.parse(o) for o in args.operation] or [Op.ALL]


def _principals(args: argparse.Namespace) -> list[tuple[str, AclPermission, list[str]]]:
    allow_hosts = args.allow_host or [WILDCARD]
    deny_hosts = args.deny_host or [WILDCARD]
    return ([(p, AclPermission.ALLOW, allow_hosts) for p in args.allow_principal]
            + [(p, AclPermission.DENY, deny_hosts) for p in args.deny_principal])


def _bindings(args: argparse.Namespace, pattern: PatternType) -> list[AclBinding]:
    out = []
    for rtype, name in _resources(args):
        for op in _operations_for(args, rtype):
            for principal, permission, hosts in _principals(args):
                for host in hosts:
                    out.append(AclBinding.of(rtype, name, principal, op, permission,
                                             pattern_type=pattern, host=host))
    return out


def _removal_filters(args: argparse.Namespace, pattern: PatternType) -> list[AclFilter]:
    """--remove: exactly the named principals (any operation and host unless given), or, with
    no principal, every binding of the resources (as kafka-acls)."""
    filters = []
    for rtype, name in _resources(args):
        if not args.allow_principal and not args.deny_principal:
            filters.append(AclFilter(rtype, name, pattern))
            continue
        if args.producer or args.consumer or args.operation:
            ops = _operations_for(args, rtype)
        else:
            ops = [Op.ANY]
        hosts_given = bool(args.allow_host or args.deny_host)
        for op in ops:
            for principal, permission, hosts in _principals(args):
                for host in hosts if hosts_given else [None]:
                    filters.append(AclFilter(rtype, name, pattern, principal, host, op,
                                             permission))
    return filters


def _list_filters(args: argparse.Namespace, pattern: PatternType) -> list[AclFilter]:
    resources = _resources(args) or [(Res.ANY, None)]
    return [AclFilter(rtype, name, pattern, args.principal) for rtype, name in resources]


def _print_bindings(bindings: Iterable[AclBinding]) -> None:
    current = None
    for b in sorted(bindings):
        resource = (b.resource_type, b.resource_name, b.pattern_type)
        if resource != current:
            current = resource
            print(f"{b.resource_type.kafka_name}:{b.pattern_type.kafka_name}:{b.resource_name}")
        print(f"    {b.permission.kafka_name:<5} {b.principal} {b.operation.kafka_name} "
              f"from host {b.host}")


def cmd_acls(args: argparse.Namespace) -> int:
    if (args.data_dir is None) == (args.bootstrap_server is None):
        return _fail("give exactly one of --data-dir (offline) and --bootstrap-server")
    resources = _resources(args)
    if (args.add or args.remove) and not resources:
        return _fail("name a resource: --cluster, --topic, --group or --transactional-id")
    if args.add and not (args.allow_principal or args.deny_principal):
        return _fail("--add needs --allow-principal or --deny-principal")
    if args.producer and not (args.topic or args.transactional_id):
        return _fail("--producer needs --topic (and optionally --transactional-id)")
    if args.consumer and not (args.topic and args.group):
        return _fail("--consumer needs --topic and --group")
    try:
        default = PatternType.ANY if args.list else PatternType.LITERAL
        pattern = PatternType.parse(args.resource_pattern_type or default)
        if args.add and pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
            return _fail("--add takes --resource-pattern-type literal or prefixed")
        backend = _Backend(args)
        try:
            if args.add:
                bindings = _bindings(args, pattern)
                backend.add(bindings)
                print(f"added {len(bindings)} ACL binding(s):")
                _print_bindings(bindings)
            elif args.remove:
                removed = backend.remove(_removal_filters(args, pattern))
                print(f"removed {len(removed)} ACL binding(s)" + (":" if removed else ""))
                _print_bindings(removed)
            else:
                _print_bindings(backend.list(_list_filters(args, pattern)))
        finally:
            backend.close()
    except (ValueError, SecurityError, OSError) as exc:
        return _fail(str(exc))
    return 0


class _Backend:
    """The data dir's ACL store, or a broker reached through the security APIs."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.store = None
        self.client = None
        if args.data_dir is not None:
            from .broker.security.authorizer import AclStore

            self.store = AclStore(args.data_dir)
        else:
            from .broker.security.client import SecurityClient, read_client_properties

            config = read_client_properties(args.command_config) if args.command_config else {}
            self.client = SecurityClient(args.bootstrap_server, config)

    def add(self, bindings: list[AclBinding]) -> None:
        if self.store is not None:
            self.store.add(bindings)
        else:
            assert self.client is not None
            self.client.create_acls(bindings)

    def remove(self, filters: list[AclFilter]) -> list[AclBinding]:
        if self.store is not None:
            return sorted({b for group in self.store.remove(filters) for b in group})
        assert self.client is not None
        return self.client.delete_acls(filters)

    def list(self, filters: list[AclFilter]) -> list[AclBinding]:
        found: set[AclBinding] = set()
        for f in filters:
            if self.store is not None:
                found.update(self.store.list(f))
            else:
                assert self.client is not None
                found.update(self.client.describe_acls(f))
        return sorted(found)

    def close(self) -> None:
        if self.client is not None:
            self.client.close()


def _add_acls_parser(sub: Any) -> None:
    acls = sub.add_parser(
        "acls", help="add, remove or list ACLs (like kafka-acls)",
        description="Add, remove or list ACL bindings, offline on a data dir (a running broker "
                    "reloads them within a second) or online through a broker.")
    action = acls.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true", help="add ACL bindings")
    action.add_argument("--remove", action="store_true", help="remove ACL bindings")
    action.add_argument("--list", action="store_true", help="list ACL bindings")
    where = acls.add_argument_group("where the ACLs live (one of)")
    where.add_argument("--data-dir", help="the broker's data dir (offline edit)")
    where.add_argument("--bootstrap-server", metavar="HOST:PORT",
                       help="go through a running broker's CreateAcls / DescribeAcls / "
                            "DeleteAcls")
    where.add_argument("--command-config", metavar="FILE",
                       help="client properties for --bootstrap-server: security.protocol, "
                            "sasl.mechanism, sasl.username, sasl.password (or a "
                            "sasl.jaas.config with username=\"..\" password=\"..\")")
    who = acls.add_argument_group("who")
    who.add_argument("--allow-principal", action="append", default=[], metavar="User:NAME",
                     help="principal to allow (User:* for everyone; repeatable)")
    who.add_argument("--deny-principal", action="append", default=[], metavar="User:NAME",
                     help="principal to deny (repeatable)")
    who.add_argument("--allow-host", action="append", default=[], metavar="HOST",
                     help="host the allow applies to (default *)")
    who.add_argument("--deny-host", action="append", default=[], metavar="HOST",
                     help="host the deny applies to (default *)")
    who.add_argument("--principal", metavar="User:NAME", help="--list: only this principal")
    what = acls.add_argument_group("what")
    what.add_argument("--operation", action="append", default=[], metavar="OP",
                      help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, "
                           "DescribeConfigs, AlterConfigs, IdempotentWrite, ReplicatorWrite, "
                           "All (repeatable; --add default All, --remove default: any)")
    what.add_argument("--producer", action="store_true",
                      help="the producer set: Write, Describe, Create on --topic (and Write, "
                           "Describe on --transactional-id)")
    what.add_argument("--consumer", action="store_true",
                      help="the consumer set: Read, Describe on --topic and Read on --group")
    on = acls.add_argument_group("on")
    on.add_argument("--cluster", action="store_true", help="the Cluster resource")
    on.add_argument("--topic", action="append", default=[], metavar="T", help="a topic")
    on.add_argument("--group", action="append", default=[], metavar="G", help="a group")
    on.add_argument("--transactional-id", action="append", default=[], metavar="X",
                    help="a transactional id")
    on.add_argument("--resource-pattern-type", metavar="TYPE", type=str.lower,
                    choices=["literal", "prefixed", "any", "match"],
                    help="literal (default for --add/--remove) or prefixed; --list and "
                         "--remove also take any / match (default for --list: any)")
    acls.set_defaults(func=cmd_acls)


def add_parsers(sub: Any) -> None:
    """Register ``kip users`` and ``kip acls`` on the ``kip`` subparsers."""
    _add_users_parser(sub)
    _add_acls_parser(sub)
