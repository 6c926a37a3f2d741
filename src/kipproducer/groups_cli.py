"""``kip groups``: look at consumer groups and producer groups (KIP-509) on a running broker.

- ``list``: every group with its state and protocol type;
- ``describe GROUP``: the members (member id, instance id, client id, host, assignment) and
  the committed offsets. For a producer group (a group with committed offsets of its
  positions topic, ``__kip_positions_<group>``, or the topic ``--positions-topic`` names) the
  offsets are shown as source partitions with their positions (the commit metadata) and
  owners; for a consumer group as kafka-consumer-groups.sh shows them (topic, partition,
  offset, owner), with the commit metadata.

It speaks the wire protocol itself (DescribeGroups, OffsetFetch, FindCoordinator), so it works
against any Kafka broker that serves the classic group protocol. See docs/producer-groups.md.
"""

from __future__ import annotations

import argparse
import struct
import sys
from typing import Any

from .blocking_client import (
    BlockingClient,
    RequestFailed,
    add_connection_arguments,
    print_table,
    run_tool,
)
from .producer_group import DELETED, POSITIONS_TOPIC_PREFIX
from .protocol import error_codes as ec
from .protocol.api_keys import (
    DESCRIBE_GROUPS,
    FIND_COORDINATOR,
    LIST_GROUPS,
    METADATA,
    OFFSET_FETCH,
)


class GroupsClient(BlockingClient):
    client_id = "kip-groups"


def _check(code: int, what: str) -> None:
    if code != ec.NONE:
        raise RequestFailed(f"{what}: {ec.error_name(code)}")


def decode_assignment(data: bytes | None) -> dict[str, list[int]]:
    """A ConsumerProtocolAssignment (any version): {topic: [partitions]}."""
    if not data:
        return {}
    pos = 2  # version
    (count,) = struct.unpack_from(">i", data, pos)
    pos += 4
    out: dict[str, list[int]] = {}
    for _ in range(max(count, 0)):
        (size,) = struct.unpack_from(">h", data, pos)
        pos += 2
        topic = data[pos:pos + size].decode()
        pos += size
        (n,) = struct.unpack_from(">i", data, pos)
        pos += 4
        out[topic] = list(struct.unpack_from(f">{max(n, 0)}i", data, pos))
        pos += 4 * max(n, 0)
    return out


def coordinator(client: GroupsClient, group: str, config: dict | None = None
                ) -> GroupsClient:
    """A client of the group's coordinator: ``client`` itself when its broker is the one
    (always on a single node), else a new connection the caller closes."""
    answer = client.request(FIND_COORDINATOR, 1, key=group, key_type=0)
    _check(int(answer.error_code), f"FindCoordinator({group})")
    host, port = client.sock.getpeername()[:2]
    if (answer.port == port and answer.host in (host, "localhost", "127.0.0.1")):
        return client
    return GroupsClient(f"{answer.host}:{answer.port}", config or {})


def describe(client: GroupsClient, group: str) -> dict[str, Any]:
    """The group's state, members and committed offsets, as plain data."""
    answer = client.request(DESCRIBE_GROUPS, 4, groups=[group],
                            include_authorized_operations=False)
    g = answer.groups[0]
    _check(int(g.error_code), f"group {group!r}")
    members = [{"member_id": m.member_id, "instance_id": m.group_instance_id,
                "client_id": m.client_id, "host": m.client_host,
                "assignment": decode_assignment(m.member_assignment)
                if g.protocol_type == "consumer" else {}} for m in g.members]
    fetched = client.request(OFFSET_FETCH, 7, group_id=group, topics=None,
                             require_stable=False)
    _check(int(fetched.error_code), f"OffsetFetch({group})")
    offsets = {}
    for t in fetched.topics:
        for p in t.partitions:
            if int(p.error_code) == ec.NONE and p.committed_offset >= 0:
                offsets[(t.name, p.partition_index)] = (p.committed_offset, p.metadata)
    return {"group": group, "state": g.group_state, "protocol_type": g.protocol_type,
            "protocol": g.protocol_data, "members": members, "offsets": offsets}


def _owner(members: list[dict], topic: str, partition: int) -> str:
    for m in members:
        if partition in m["assignment"].get(topic, ()):
            return f"{m['client_id']}/{m['host']} ({m['member_id']})"
    return "-"


def _position_text(offset: int | None, metadata: str | None) -> str:
    """A producer group's position as its committed offset and metadata say it."""
    if offset is None:
        return "(none)"
    if offset == DELETED:
        return "(deleted)"
    # Without metadata (a broker that does not keep it) the position is only in its record.
    return (metadata or "").rstrip("\0") or f"(in the record at offset {offset - 1})"


def _partition_count(client: GroupsClient, topic: str) -> int:
    """The topic's partition count (0 when the metadata does not say): every source partition
    is listed, "(none)" for one without a position."""
    try:
        answer = client.request(METADATA, 12, topics=[{"name": topic}],
                                allow_auto_topic_creation=False,
                                include_topic_authorized_operations=False)
    except RequestFailed:
        return 0
    return sum(len(t.partitions) for t in answer.topics
               if t.name == topic and int(t.error_code) == ec.NONE)


def _describe(client: GroupsClient, args: argparse.Namespace) -> int:
    d = describe(client, args.group)
    if d["state"] == "Dead" and not d["offsets"]:
        print(f"kip groups: group {args.group!r} does not exist", file=sys.stderr)
        return 1
    positions_topic = args.positions_topic or POSITIONS_TOPIC_PREFIX + args.group
    subscribed = {t for m in d["members"] for t in m["assignment"]}
    is_producer_group = positions_topic in subscribed or any(
        t == positions_topic for t, _ in d["offsets"])
    kind = "producer group" if is_producer_group else "group"
    print(f"{kind} {d['group']}: state {d['state']}, protocol "
          f"{d['protocol_type'] or '-'}/{d['protocol'] or '-'}, {len(d['members'])} member(s)")
    print()
    print_table(("MEMBER-ID", "INSTANCE-ID", "CLIENT-ID", "HOST", "ASSIGNMENT"), [
        (m["member_id"], m["instance_id"], m["client_id"], m["host"],
         ",".join(f"{t}:{'+'.join(map(str, ps))}" for t, ps in sorted(m["assignment"].items()))
         or "-") for m in d["members"]])
    print()
    if is_producer_group:
        partitions = sorted({p for (t, p) in d["offsets"] if t == positions_topic}
                            | {p for m in d["members"]
                               for p in m["assignment"].get(positions_topic, ())}
                            | set(range(_partition_count(client, positions_topic))))
        rows = []
        for p in partitions:
            offset, metadata = d["offsets"].get((positions_topic, p), (None, None))
            rows.append((p, _position_text(offset, metadata),
                         _owner(d["members"], positions_topic, p)))
        print(f"positions ({positions_topic}):")
        print_table(("SOURCE-PARTITION", "POSITION", "OWNER"), rows)
    else:
        print_table(("TOPIC", "PARTITION", "CURRENT-OFFSET", "METADATA", "OWNER"), [
            (t, p, o, (m or "").rstrip("\0") or None, _owner(d["members"], t, p))
            for (t, p), (o, m) in sorted(d["offsets"].items())])
    return 0


def _list(client: GroupsClient, args: argparse.Namespace) -> int:
    answer = client.request(LIST_GROUPS, 4, states_filter=[])
    _check(int(answer.error_code), "ListGroups")
    print_table(("GROUP", "STATE", "PROTOCOL-TYPE"), sorted(
        (g.group_id, g.group_state, g.protocol_type or "-") for g in answer.groups))
    return 0


def cmd_groups(args: argparse.Namespace) -> int:
    def action(client: GroupsClient, config: dict[str, str]) -> int:
        if args.action is not _describe:
            return args.action(client, args)
        found = coordinator(client, args.group, config)
        try:
            return args.action(found, args)
        finally:
            if found is not client:
                found.close()

    return run_tool("kip groups", GroupsClient, args, action)


def add_parser(sub: Any) -> None:
    parser = sub.add_parser("groups", help="list and describe consumer and producer groups")
    add_connection_arguments(parser)
    actions = parser.add_subparsers(dest="groups_command", required=True)
    actions.add_parser("list", help="every group with its state").set_defaults(action=_list)
    describe_parser = actions.add_parser(
        "describe", help="members, assignments and committed offsets (a producer group's "
                         "source partitions, positions and owners)")
    describe_parser.add_argument("group", help="the group id")
    describe_parser.add_argument("--positions-topic", help="a producer group's positions "
                                 "topic when not __kip_positions_<group>")
    describe_parser.set_defaults(action=_describe)
    parser.set_defaults(func=cmd_groups)
