"""FindCoordinator, the classic group APIs and TxnOffsetCommit, translated to the
GroupCoordinator's calls.

Every group and every transactional id lives on this node, so FindCoordinator answers with
ourselves, for transactions once the broker's transaction coordinator runs. The protocol type
is opaque: "consumer" groups, KIP-509 "producer" groups and any other type are handled alike.
"""

from __future__ import annotations

from kipproducer.protocol import build_response
from kipproducer.protocol import error_codes as ec

from ...protocol.api_keys import (
    DELETE_GROUPS,
    DESCRIBE_GROUPS,
    FIND_COORDINATOR,
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    LIST_GROUPS,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    SYNC_GROUP,
    TXN_OFFSET_COMMIT,
)
from ..api import RequestContext, handles
from ..security.authorized_ops import group_operations
from ..security.checks import (
    may_delete_group,
    may_describe_cluster,
    may_describe_group,
    may_describe_topic,
    may_describe_transactional_id,
    may_read_group,
    may_read_topic,
    may_write_transactional_id,
)
from .common import logs_of

KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION = 0, 1
NO_TRANSACTIONS = "the transaction coordinator is not running"


def _coordinator(ctx: RequestContext):
    groups = ctx.broker.groups
    if groups is None or not groups.is_active:
        return None
    return groups


def _transactions(ctx: RequestContext):
    """The broker's TransactionCoordinator, or None while it is not running (the attribute
    may not exist at all on a broker built without one)."""
    return getattr(ctx.broker, "transactions", None)


def _key_refused(key: str, code: int, message: str) -> dict:
    return {
        "key": key,
        "node_id": -1,
        "host": "",
        "port": -1,
        "error_code": code,
        "error_message": message,
    }


def _find_one(ctx: RequestContext, key: str, key_type: int) -> dict:
    broker = ctx.broker
    if key_type == KEY_TYPE_GROUP and not may_describe_group(ctx, key):
        return _key_refused(
            key, ec.GROUP_AUTHORIZATION_FAILED, f"{ctx.principal} lacks Describe on group {key}"
        )
    if key_type == KEY_TYPE_TRANSACTION and not may_describe_transactional_id(ctx, key):
        return _key_refused(
            key,
            ec.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            f"{ctx.principal} lacks Describe on transactional id {key}",
        )
    served = (key_type == KEY_TYPE_GROUP and _coordinator(ctx) is not None) or (
        key_type == KEY_TYPE_TRANSACTION and _transactions(ctx) is not None
    )
    if served:
        return {
            "key": key,
            "node_id": broker.node_id,
            "host": broker.advertised_for(ctx.session)[0],
            "port": broker.advertised_for(ctx.session)[1],
            "error_code": ec.NONE,
            "error_message": None,
        }
    if key_type not in (KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION):
        # Kafka 3.9 answers INVALID_REQUEST for the share key type (v6, KIP-932, not yet
        # served there either) and for any unknown one.
        return _key_refused(
            key, ec.INVALID_REQUEST, f"coordinator key type {key_type} is not served"
        )
    message = (
        NO_TRANSACTIONS
        if key_type == KEY_TYPE_TRANSACTION
        else "the group coordinator is not running"
    )
    return _key_refused(key, ec.COORDINATOR_NOT_AVAILABLE, message)


@handles(FIND_COORDINATOR, 0, 6)
async def find_coordinator(ctx: RequestContext, body):
    v = ctx.api_version
    if v >= 4:
        key_type = body.key_type
        found = [_find_one(ctx, key, key_type) for key in body.coordinator_keys]
        return build_response(FIND_COORDINATOR, v, coordinators=found)
    key_type = body.key_type if v >= 1 else KEY_TYPE_GROUP
    one = _find_one(ctx, body.key, key_type)
    one.pop("key")
    if v == 0:
        one.pop("error_message")
    return build_response(FIND_COORDINATOR, v, **one)


def _unavailable(api_key: int, version: int, **fields):
    return build_response(api_key, version, error_code=ec.COORDINATOR_NOT_AVAILABLE, **fields)


def _group_refused(api_key: int, version: int, **fields):
    """The answer to a group request the principal lacks READ on the group for."""
    return build_response(api_key, version, error_code=ec.GROUP_AUTHORIZATION_FAILED, **fields)


@handles(JOIN_GROUP, 0, 9)
async def join_group(ctx: RequestContext, body):
    v = ctx.api_version
    if not may_read_group(ctx, body.group_id):
        return _group_refused(JOIN_GROUP, v, member_id=body.member_id)
    groups = _coordinator(ctx)
    if groups is None:
        return _unavailable(JOIN_GROUP, v, member_id=body.member_id)
    result = await groups.join_group(
        body.group_id,
        body.member_id,
        body.group_instance_id if v >= 5 else None,
        body.protocol_type,
        [(p.name, p.metadata) for p in body.protocols],
        body.session_timeout,
        body.rebalance_timeout if v >= 1 else body.session_timeout,
        ctx.client_id or "",
        ctx.client_host,
        require_known_member_id=v >= 4,
        skip_assignment_supported=v >= 9,
    )
    fields = {
        "error_code": result.error_code,
        "generation_id": result.generation_id,
        "protocol_name": result.protocol_name if v >= 7 else (result.protocol_name or ""),
        "leader": result.leader_id,
        "member_id": result.member_id,
        "members": [
            {
                "member_id": m.member_id,
                "metadata": m.metadata,
                **({"group_instance_id": m.group_instance_id} if v >= 5 else {}),
            }
            for m in result.members
        ],
    }
    if v >= 7:
        fields["protocol_type"] = result.protocol_type
    if v >= 9:
        fields["skip_assignment"] = result.skip_assignment
    return build_response(JOIN_GROUP, v, **fields)


@handles(SYNC_GROUP, 0, 5)
async def sync_group(ctx: RequestContext, body):
    v = ctx.api_version
    if not may_read_group(ctx, body.group_id):
        return _group_refused(SYNC_GROUP, v)
    groups = _coordinator(ctx)
    if groups is None:
        return _unavailable(SYNC_GROUP, v)
    result = await groups.sync_group(
        body.group_id,
        body.generation_id,
        body.member_id,
        body.group_instance_id if v >= 3 else None,
        body.protocol_type if v >= 5 else None,
        body.protocol_name if v >= 5 else None,
        {a.member_id: a.assignment for a in body.assignments},
    )
    fields = {"error_code": result.error_code, "assignment": result.assignment}
    if v >= 5:
        fields.update(protocol_type=result.protocol_type, protocol_name=result.protocol_name)
    return build_response(SYNC_GROUP, v, **fields)


@handles(HEARTBEAT, 0, 4)
async def heartbeat(ctx: RequestContext, body):
    v = ctx.api_version
    if not may_read_group(ctx, body.group_id):
        return _group_refused(HEARTBEAT, v)
    groups = _coordinator(ctx)
    if groups is None:
        return _unavailable(HEARTBEAT, v)
    code = await groups.heartbeat(
        body.group_id,
        body.generation_id,
        body.member_id,
        body.group_instance_id if v >= 3 else None,
    )
    return build_response(HEARTBEAT, v, error_code=code)


@handles(LEAVE_GROUP, 0, 5)
async def leave_group(ctx: RequestContext, body):
    v = ctx.api_version
    if not may_read_group(ctx, body.group_id):
        return _group_refused(LEAVE_GROUP, v)
    groups = _coordinator(ctx)
    if groups is None:
        return _unavailable(LEAVE_GROUP, v)
    if v >= 3:
        members = [(m.member_id, m.group_instance_id) for m in body.members]
    else:
        members = [(body.member_id, None)]
    result = await groups.leave_group(body.group_id, members)
    if v < 3:
        code = result.error_code or (result.members[0].error_code if result.members else 0)
        return build_response(LEAVE_GROUP, v, error_code=code)
    return build_response(
        LEAVE_GROUP,
        v,
        error_code=result.error_code,
        members=[
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "error_code": m.error_code,
            }
            for m in result.members
        ],
    )


def _committed_value(p, *, with_leader_epoch: bool) -> tuple:
    """(offset, leader epoch, metadata) of one partition of an (Txn)OffsetCommit; -1 for the
    leader epoch in versions that do not carry it."""
    epoch = p.committed_leader_epoch if with_leader_epoch else -1
    return (p.committed_offset, epoch, p.committed_metadata)


def _commit_answer(body, answers: dict[tuple[str, int], int]) -> list:
    """The topics of an (Txn)OffsetCommit response: each partition asked for with its code."""
    return [
        {
            "name": topic.name,
            "partitions": [
                {
                    "partition_index": p.partition_index,
                    "error_code": answers[(topic.name, p.partition_index)],
                }
                for p in topic.partitions
            ],
        }
        for topic in body.topics
    ]


@handles(OFFSET_COMMIT, 2, 9)
async def offset_commit(ctx: RequestContext, body):
    v = ctx.api_version
    logs = logs_of(ctx)
    groups = _coordinator(ctx)
    topics_known = logs.topics()
    answers: dict[tuple[str, int], int] = {}
    valid = {}
    group_readable = may_read_group(ctx, body.group_id)
    for topic in body.topics:
        info = topics_known.get(topic.name)
        topic_readable = group_readable and may_read_topic(ctx, topic.name)
        for p in topic.partitions:
            tp = (topic.name, p.partition_index)
            if not group_readable:
                answers[tp] = ec.GROUP_AUTHORIZATION_FAILED
            elif not topic_readable:
                answers[tp] = ec.TOPIC_AUTHORIZATION_FAILED
            elif groups is None:
                answers[tp] = ec.COORDINATOR_NOT_AVAILABLE
            elif info is None or not 0 <= p.partition_index < info.partitions:
                answers[tp] = ec.UNKNOWN_TOPIC_OR_PARTITION
            else:
                valid[tp] = _committed_value(p, with_leader_epoch=v >= 6)
    if valid:
        generation = body.generation_id_or_member_epoch
        answers.update(
            await groups.commit_offsets(
                body.group_id,
                generation,
                body.member_id,
                body.group_instance_id if v >= 7 else None,
                valid,
            )
        )
    return build_response(OFFSET_COMMIT, v, topics=_commit_answer(body, answers))


def _fetch_group(
    ctx: RequestContext, group_id: str, topics, version: int, require_stable: bool = False
) -> tuple[list, int]:
    """One group's OffsetFetch answer. With ``require_stable`` (v7+) a partition that an open
    transaction has offsets for is answered UNSTABLE_OFFSET_COMMIT with no offset, at the
    partition level as Kafka does, so the consumer retries instead of starting from an offset
    the transaction is about to move."""
    if not may_describe_group(ctx, group_id):
        return [], ec.GROUP_AUTHORIZATION_FAILED
    groups = _coordinator(ctx)
    if groups is None:
        return [], ec.COORDINATOR_NOT_AVAILABLE
    # Topics the principal may not describe: refused when named, left out of "all topics".
    denied = set() if topics is None else {
        t.name for t in topics if not may_describe_topic(ctx, t.name)}
    wanted = None if topics is None else [
        (t.name, p) for t in topics if t.name not in denied for p in t.partition_indexes]
    found = groups.fetch_offsets(group_id, wanted)
    unstable = groups.unstable_partitions(group_id) if require_stable else set()
    by_topic: dict[str, list] = {}
    for t in topics or ():
        if t.name in denied:
            by_topic[t.name] = [
                {"partition_index": p, "committed_offset": -1, "metadata": None,
                 "error_code": ec.TOPIC_AUTHORIZATION_FAILED}
                for p in t.partition_indexes
            ]
    for (topic, partition), value in sorted(found.items()):
        if topics is None and not may_describe_topic(ctx, topic):
            continue
        entry = {
            "partition_index": partition,
            "committed_offset": value.offset,
            "metadata": value.metadata,
            "error_code": ec.NONE,
        }
        leader_epoch = value.leader_epoch
        if (topic, partition) in unstable:
            entry.update(committed_offset=-1, metadata="", error_code=ec.UNSTABLE_OFFSET_COMMIT)
            leader_epoch = -1
        if version >= 5:
            entry["committed_leader_epoch"] = leader_epoch
        by_topic.setdefault(topic, []).append(entry)
    return [{"name": name, "partitions": parts} for name, parts in by_topic.items()], ec.NONE


@handles(OFFSET_FETCH, 1, 9)
async def offset_fetch(ctx: RequestContext, body):
    v = ctx.api_version
    if v >= 8:
        results = []
        for group in body.groups:
            topics, code = _fetch_group(ctx, group.group_id, group.topics, v, body.require_stable)
            results.append({"group_id": group.group_id, "topics": topics, "error_code": code})
        return build_response(OFFSET_FETCH, v, groups=results)
    require_stable = body.require_stable if v >= 7 else False
    topics, code = _fetch_group(ctx, body.group_id, body.topics, v, require_stable)
    fields = {"topics": topics}
    if v >= 2:
        fields["error_code"] = code
    return build_response(OFFSET_FETCH, v, **fields)


def _verify_transaction(ctx: RequestContext, body) -> int:
    """The transaction coordinator's word on this TxnOffsetCommit: NONE when the transaction is
    open with this producer id and epoch and the group was added with AddOffsetsToTxn."""
    transactions = _transactions(ctx)
    if transactions is None:
        return ec.COORDINATOR_NOT_AVAILABLE
    return transactions.verify_txn_offset_commit(
        body.transactional_id, body.producer_id, body.producer_epoch, body.group_id
    )


# v4 only adds the TRANSACTION_ABORTABLE error (KIP-890 part 1); v5 belongs to transactions V2
# (an implicit AddOffsetsToTxn), which this broker does not serve.
@handles(TXN_OFFSET_COMMIT, 0, 4)
async def txn_offset_commit(ctx: RequestContext, body):
    """Kafka's order: Write on the transactional id and Read on the group refuse the whole
    request; then Read on each topic and the topic's existence, per partition; then the
    transaction coordinator's check; then the group coordinator (KIP-447 member checks)."""
    v = ctx.api_version
    every = [(t.name, p.partition_index) for t in body.topics for p in t.partitions]
    if not may_write_transactional_id(ctx, body.transactional_id):
        refused = dict.fromkeys(every, ec.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        return build_response(TXN_OFFSET_COMMIT, v, topics=_commit_answer(body, refused))
    if not may_read_group(ctx, body.group_id):
        refused = dict.fromkeys(every, ec.GROUP_AUTHORIZATION_FAILED)
        return build_response(TXN_OFFSET_COMMIT, v, topics=_commit_answer(body, refused))
    topics_known = logs_of(ctx).topics()
    answers: dict[tuple[str, int], int] = {}
    valid = {}
    for topic in body.topics:
        info = topics_known.get(topic.name)
        readable = may_read_topic(ctx, topic.name)
        for p in topic.partitions:
            tp = (topic.name, p.partition_index)
            if not readable:
                answers[tp] = ec.TOPIC_AUTHORIZATION_FAILED
            elif info is None or not 0 <= p.partition_index < info.partitions:
                answers[tp] = ec.UNKNOWN_TOPIC_OR_PARTITION
            else:
                valid[tp] = _committed_value(p, with_leader_epoch=v >= 2)
    if valid:
        groups = _coordinator(ctx)
        code = ec.COORDINATOR_NOT_AVAILABLE if groups is None else _verify_transaction(ctx, body)
        if code != ec.NONE:
            answers.update(dict.fromkeys(valid, code))
        else:
            answers.update(
                await groups.txn_commit_offsets(
                    body.group_id,
                    body.producer_id,
                    body.producer_epoch,
                    body.member_id if v >= 3 else "",
                    body.generation_id if v >= 3 else -1,
                    body.group_instance_id if v >= 3 else None,
                    valid,
                )
            )
    return build_response(TXN_OFFSET_COMMIT, v, topics=_commit_answer(body, answers))


@handles(LIST_GROUPS, 0, 5)
async def list_groups(ctx: RequestContext, body):
    v = ctx.api_version
    groups = _coordinator(ctx)
    if groups is None:
        return _unavailable(LIST_GROUPS, v, groups=())
    states = list(body.states_filter) if v >= 4 and body.states_filter else None
    types = list(body.types_filter) if v >= 5 and body.types_filter else None
    out = []
    everything = may_describe_cluster(ctx)  # else only the groups it may describe, as Kafka
    for g in groups.list_groups(states, types):
        if not everything and not may_describe_group(ctx, g.group_id):
            continue
        entry = {"group_id": g.group_id, "protocol_type": g.protocol_type}
        if v >= 4:
            entry["group_state"] = g.state
        if v >= 5:
            entry["group_type"] = g.group_type
        out.append(entry)
    return build_response(LIST_GROUPS, v, error_code=ec.NONE, groups=out)


@handles(DESCRIBE_GROUPS, 0, 5)
async def describe_groups(ctx: RequestContext, body):
    v = ctx.api_version
    groups = _coordinator(ctx)
    out = []
    for group_id in body.groups:
        if groups is None or not may_describe_group(ctx, group_id):
            out.append(
                {
                    "error_code": ec.COORDINATOR_NOT_AVAILABLE
                    if groups is None
                    else ec.GROUP_AUTHORIZATION_FAILED,
                    "group_id": group_id,
                    "group_state": "",
                    "protocol_type": "",
                    "protocol_data": "",
                    "members": (),
                }
            )
            continue
        d = groups.describe_group(group_id)
        entry = {
            "error_code": d.error_code,
            "group_id": d.group_id,
            "group_state": d.state,
            "protocol_type": d.protocol_type,
            "protocol_data": d.protocol_name,
            "members": [
                {
                    "member_id": m.member_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "member_metadata": m.metadata,
                    "member_assignment": m.assignment,
                    **({"group_instance_id": m.group_instance_id} if v >= 4 else {}),
                }
                for m in d.members
            ],
        }
        if v >= 3:
            # Kafka fills it for a group described without error, when asked.
            entry["authorized_operations"] = group_operations(
                ctx, group_id, body.include_authorized_operations and d.error_code == ec.NONE)
        out.append(entry)
    return build_response(DESCRIBE_GROUPS, v, groups=out)


@handles(DELETE_GROUPS, 0, 2)
async def delete_groups(ctx: RequestContext, body):
    groups = _coordinator(ctx)
    allowed = [g for g in body.groups_names if may_delete_group(ctx, g)]
    codes = {g: ec.GROUP_AUTHORIZATION_FAILED for g in body.groups_names}
    if groups is None:
        codes.update({g: ec.COORDINATOR_NOT_AVAILABLE for g in allowed})
    elif allowed:
        codes.update(groups.delete_groups(allowed))
    return build_response(
        DELETE_GROUPS,
        ctx.api_version,
        results=[{"group_id": g, "error_code": codes[g]} for g in body.groups_names],
    )
