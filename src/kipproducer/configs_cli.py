"""``kip configs``: describe and alter dynamic broker configs (KIP-226) on a running broker.

Like Kafka's ``kafka-configs.sh --entity-type brokers``: ``--entity-name 1`` is the broker's
own (per-broker) level, ``--entity-default`` the cluster default; ``--describe`` prints the
dynamic values of that level (``--all``: every config of the broker), ``--alter`` takes
``--add-config k=v,...`` and ``--delete-config k,...`` through IncrementalAlterConfigs. See
docs/broker.md, "Dynamic broker configs".
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .blocking_client import BlockingClient, RequestFailed, add_connection_arguments, run_tool
from .protocol import error_codes as ec
from .protocol.api_keys import DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS

RESOURCE_BROKER = 4
OP_SET, OP_DELETE = 0, 1
SOURCES = {1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG",
           3: "DYNAMIC_DEFAULT_BROKER_CONFIG", 4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG",
           6: "DYNAMIC_BROKER_LOGGER_CONFIG"}


class ConfigsClient(BlockingClient):
    client_id = "kip-configs"

    def describe(self, entity: str) -> list[Any]:
        answer = self.request(DESCRIBE_CONFIGS, 4, resources=[{
            "resource_type": RESOURCE_BROKER, "resource_name": entity,
            "configuration_keys": None}], include_synonyms=True, include_documentation=False)
        [result] = answer.results
        _check(result.error_code, result.error_message)
        return list(result.configs)

    def alter(self, entity: str, add: dict[str, str], delete: list[str],
              validate_only: bool = False) -> None:
        configs = [{"name": k, "config_operation": OP_SET, "value": v} for k, v in add.items()]
        configs += [{"name": k, "config_operation": OP_DELETE, "value": None} for k in delete]
        answer = self.request(INCREMENTAL_ALTER_CONFIGS, 1, resources=[{
            "resource_type": RESOURCE_BROKER, "resource_name": entity, "configs": configs}],
            validate_only=validate_only)
        [result] = answer.responses
        _check(result.error_code, result.error_message)


def _check(code: int, message: str | None) -> None:
    if code != ec.NONE:
        raise RequestFailed(f"{ec.error_name(code)}: {message or ''}".rstrip(": "))


def parse_add_config(text: str) -> dict[str, str]:
    """``k=v,k2=[a,b]``: kafka-configs.sh's syntax (square brackets keep commas in a value)."""
    pairs: dict[str, str] = {}
    item, depth, items = "", 0, []
    for char in text:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        if char == "," and depth == 0:
            items.append(item)
            item = ""
        else:
            item += char
    items.append(item)
    for entry in filter(None, (i.strip() for i in items)):
        name, sep, value = entry.partition("=")
        if not sep or not name:
            raise ValueError(f"--add-config: expected key=value, got {entry!r}")
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        pairs[name.strip()] = value
    return pairs


def _describe(client: ConfigsClient, args: argparse.Namespace, entity: str) -> int:
    configs = client.describe(entity)
    if args.entity_default:
        print("Default configs for brokers in the cluster are:")
    elif args.all:
        print(f"All configs for broker {entity} are:")
    else:
        print(f"Dynamic configs for broker {entity} are:")
    for c in sorted(configs, key=lambda c: c.name):
        if not (args.all or args.entity_default) and c.config_source != 2:
            continue
        value = "null" if c.value is None else c.value
        synonyms = ", ".join(
            f"{SOURCES.get(s.source, s.source)}:{s.name}="
            f"{'null' if s.value is None else s.value}" for s in c.synonyms)
        print(f"  {c.name}={value} sensitive={str(bool(c.is_sensitive)).lower()} "
              f"synonyms={{{synonyms}}}")
    return 0


def _alter(client: ConfigsClient, args: argparse.Namespace, entity: str) -> int:
    add = parse_add_config(args.add_config or "")
    delete = [n.strip() for n in (args.delete_config or "").split(",") if n.strip()]
    if not add and not delete:
        raise ValueError("--alter needs --add-config or --delete-config")
    client.alter(entity, add, delete)
    if args.entity_default:
        print("Completed updating default config for brokers in the cluster.")
    else:
        print(f"Completed updating config for broker {entity}.")
    return 0


def cmd_configs(args: argparse.Namespace) -> int:
    if (args.entity_name is None) == (not args.entity_default):
        print("kip configs: give --entity-name ID or --entity-default", file=sys.stderr)
        return 2
    entity = "" if args.entity_default else args.entity_name
    action = _describe if args.describe else _alter
    return run_tool("kip configs", ConfigsClient, args,
                    lambda client, _config: action(client, args, entity))


def add_parser(sub: Any) -> None:
    parser = sub.add_parser("configs", help="describe and alter dynamic broker configs on a "
                                            "running broker (like kafka-configs.sh)")
    add_connection_arguments(parser)
    parser.add_argument("--entity-type", choices=["brokers"], default="brokers",
                        help="what to configure: brokers (the only type here)")
    entity = parser.add_mutually_exclusive_group()
    entity.add_argument("--entity-name", metavar="ID",
                        help="the broker's node id: its per-broker configs")
    entity.add_argument("--entity-default", action="store_true",
                        help="the cluster-wide default of every broker")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true",
                        help="print the dynamic configs of the entity")
    action.add_argument("--alter", action="store_true",
                        help="change configs (with --add-config and/or --delete-config)")
    parser.add_argument("--all", action="store_true",
                        help="with --describe --entity-name: every config, not only dynamic "
                             "ones")
    parser.add_argument("--add-config", metavar="K=V,...",
                        help="configs to set, comma-separated (a value with commas in "
                             "[brackets])")
    parser.add_argument("--delete-config", metavar="K,...",
                        help="configs to remove from the entity, comma-separated")
    parser.set_defaults(func=cmd_configs)
