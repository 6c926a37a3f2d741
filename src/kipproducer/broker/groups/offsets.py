"""Offset-commit rules of classic groups (plain and transactional) and offset retention
(KIP-211)."""

from __future__ import annotations

from kipproducer.protocol import error_codes as errors

from .group import ClassicGroup, GroupState
from .results import TopicPartition
from .txn_offsets import pending_partitions


def validate_offset_commit(
    group: ClassicGroup, member_id: str, group_instance_id: str | None, generation_id: int
) -> int:
    """NONE, or the error every partition of an OffsetCommit gets.

    Generation -1 with no member id is a commit from outside group management (an admin tool,
    or a consumer using ``assign()``); Kafka accepts it only while the group has no members.
    Anything else must come from a current member of the current generation, and not while the
    group waits for the leader's assignment (the member would commit for partitions it may be
    about to lose).
    """
    error = _validate_committer(group, member_id, group_instance_id, generation_id)
    if error != errors.NONE:
        return error
    from_outside = not _names_member(member_id, group_instance_id, generation_id)
    if from_outside and not group.is_in(GroupState.EMPTY):
        return errors.UNKNOWN_MEMBER_ID
    if group.is_in(GroupState.COMPLETING_REBALANCE):
        return errors.REBALANCE_IN_PROGRESS
    return errors.NONE


def validate_txn_offset_commit(
    group: ClassicGroup, member_id: str, group_instance_id: str | None, generation_id: int
) -> int:
    """NONE, or the error every partition of a TxnOffsetCommit gets (Kafka's
    ClassicGroup.validateOffsetCommit with isTransactional).

    KIP-447: v3+ requests carry the consumer's member id, instance id and generation, so a
    zombie producer working for a consumer of an older generation is refused
    (ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID). v0-2 requests carry none of
    them and are accepted whatever the group's state, and so is a -1 generation while the group
    is Empty (a standalone producer). Unlike OffsetCommit, a group awaiting its assignment does
    not refuse the commit: the transaction only takes effect when it commits.
    """
    return _validate_committer(group, member_id, group_instance_id, generation_id)


def _names_member(member_id: str, group_instance_id: str | None, generation_id: int) -> bool:
    """Whether a commit claims to come from a group member (else from outside the group)."""
    return generation_id >= 0 or bool(member_id) or group_instance_id is not None


def _validate_committer(
    group: ClassicGroup, member_id: str, group_instance_id: str | None, generation_id: int
) -> int:
    """The checks OffsetCommit and TxnOffsetCommit share: the group still exists, and a commit
    that names a member comes from a current member of the current generation. A -1
    generation is accepted while the group is Empty, whatever member it names."""
    if group.is_in(GroupState.DEAD):
        return errors.COORDINATOR_NOT_AVAILABLE
    if generation_id < 0 and group.is_in(GroupState.EMPTY):
        return errors.NONE
    if _names_member(member_id, group_instance_id, generation_id):
        error = group.validate_member(member_id, group_instance_id)
        if error != errors.NONE:
            return error
        if generation_id != group.generation_id:
            return errors.ILLEGAL_GENERATION
    return errors.NONE


def expired_partitions(group: ClassicGroup, now_ms: int, retention_ms: int) -> list[TopicPartition]:
    """Offsets of ``group`` older than the retention period.

    Only groups without members lose offsets. A group that used group management counts from
    when it became Empty (or the commit, if later: an admin reset of an idle group restarts the
    clock); a "simple" group that only ever received admin commits counts from each commit.
    Kafka also expires offsets of a Stable "consumer" group for topics it no longer subscribes
    to; that needs parsing consumer metadata, which this coordinator never does.
    A partition an open transaction has pending offsets for keeps its committed offset, as in
    Kafka (the transaction may still commit over it, or abort and leave it in force).
    """
    if not group.is_in(GroupState.EMPTY):
        return []
    in_transactions = pending_partitions(group.pending_txn_offsets)
    became_empty = group.state_timestamp_ms if group.protocol_type is not None else None
    expired = []
    for tp, committed in group.offsets.items():
        if tp in in_transactions:
            continue
        base = committed.commit_timestamp_ms
        if became_empty is not None:
            base = max(base, became_empty)
        if now_ms - base >= retention_ms:
            expired.append(tp)
    return expired
