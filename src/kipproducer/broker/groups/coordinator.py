"""GroupCoordinator: the classic consumer-group protocol, independent of the wire format.

The broker's request handlers call one method per request (JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, OffsetCommit, TxnOffsetCommit, OffsetFetch, ListGroups, DescribeGroups,
DeleteGroups) with plain Python values and turn the returned values into responses. Error codes
are Kafka's (see ``errors``). The transaction coordinator calls ``complete_transaction`` when a
transaction that committed offsets to a group ends.

Groups are generic over their ``protocol_type``: "consumer", "connect", a KIP-509 "producer"
group or anything else behave the same; member metadata and assignments are opaque bytes.

Threading: not thread-safe. Create, start, call and close the coordinator on one event loop.
Every method changes the state synchronously before its first ``await``; only JoinGroup and
SyncGroup wait (for the rebalance to get far enough), and a cancelled waiter does not disturb
the group (the member stays parked, as in Kafka, until the rebalance answers it).

Durability: committed offsets, pending transactional offsets, transaction ends and each
completed rebalance's group metadata are fsynced to an append-only log in ``data_dir`` before
the request is answered (see ``offset_store``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kipproducer.protocol import error_codes as errors

from .group import ClassicGroup, GroupState
from .join import JoinHandler
from .member import JoinRequest
from .offset_store import DEFAULT_COMPACT_AFTER_BYTES, GroupStore
from .offsets import expired_partitions, validate_offset_commit, validate_txn_offset_commit
from .rebalance import RebalanceEngine
from .results import (
    NO_COMMITTED_OFFSET,
    NO_LEADER_EPOCH,
    GroupDescription,
    GroupOverview,
    JoinResult,
    LeaveResult,
    MemberDescription,
    MemberLeaveResult,
    OffsetAndMetadata,
    SyncResult,
    TopicPartition,
    all_failed,
)
from .stored import CommittedOffset
from .subscriptions import CONSUMER_PROTOCOL_TYPE, subscribed_topics
from .timers import KeyedTimers
from .txn_offsets import add_pending, end_transaction, pending_partitions, settles

logger = logging.getLogger("kipproducer.broker.groups")

DAY_MS = 24 * 60 * 60 * 1000
GROUP_TYPE_CLASSIC = "classic"
_RETENTION_TIMER_KEY = ("offsets-retention",)

# (offset, leader_epoch or None, metadata or None), as an OffsetCommit partition carries them
CommitValue = tuple[int, int | None, str | None]


class GroupCoordinatorNotActive(RuntimeError):
    """``complete_transaction`` was called before ``start()`` or after ``close()``."""


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)


class GroupCoordinator:
    """Membership and offsets of every classic group, kept in ``data_dir``.

    ``initial_rebalance_delay_ms`` (``group.initial.rebalance.delay.ms``) lets the first
    rebalance of an Empty group wait for more members; ``min/max_session_timeout_ms``
    bound the session timeouts members may ask for; ``max_group_size`` (None: unlimited) caps
    members per group; ``offsets_retention_ms`` (``offsets.retention.ms``) is how long offsets
    of a group without members are kept, checked every ``offsets_retention_check_interval_ms``;
    ``new_member_join_timeout_ms`` bounds how long a new member's first JoinGroup may stay
    parked; ``max_offset_metadata_bytes`` (``offset.metadata.max.bytes``) caps commit metadata
    (counted in characters, as Kafka does).
    ``clock_ms`` gives wall-clock milliseconds for commit timestamps and retention (tests
    inject one); timers run on the event loop's clock. ``fsync=False`` skips fsyncs (tests only).
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        initial_rebalance_delay_ms: int = 0,
        min_session_timeout_ms: int = 6000,
        max_session_timeout_ms: int = 1_800_000,
        max_group_size: int | None = None,
        offsets_retention_ms: int = 7 * DAY_MS,
        offsets_retention_check_interval_ms: int = 600_000,
        new_member_join_timeout_ms: int = 300_000,
        max_offset_metadata_bytes: int = 4096,
        clock_ms: Callable[[], int] = _wall_clock_ms,
        fsync: bool = True,
        compact_log_after_bytes: int = DEFAULT_COMPACT_AFTER_BYTES,
    ) -> None:
        self.offsets_retention_ms = offsets_retention_ms
        self.offsets_retention_check_interval_ms = offsets_retention_check_interval_ms
        self.max_offset_metadata_bytes = max_offset_metadata_bytes
        self.clock_ms = clock_ms
        self._store = GroupStore(data_dir, fsync=fsync, compact_after_bytes=compact_log_after_bytes)
        self._timers = KeyedTimers()
        self._engine = RebalanceEngine(
            store=self._store,
            timers=self._timers,
            clock_ms=clock_ms,
            initial_rebalance_delay_ms=initial_rebalance_delay_ms,
            new_member_join_timeout_ms=new_member_join_timeout_ms,
        )
        self._groups: dict[str, ClassicGroup] = {}
        self._joins = JoinHandler(
            self._groups,
            self._engine,
            min_session_timeout_ms=min_session_timeout_ms,
            max_session_timeout_ms=max_session_timeout_ms,
            max_group_size=max_group_size,
            discard_if_unused=self._discard_if_unused,
        )
        self._active = False

    # ------------------------------------------------------------------------- lifecycle

    @property
    def is_active(self) -> bool:
        """True between ``start()`` and ``close()``. While inactive, requests get
        COORDINATOR_NOT_AVAILABLE (``fetch_offsets`` and ``list_groups`` have no error channel:
        the handler should check this property)."""
        return self._active

    async def start(self) -> None:
        """Load the durable state (recovering a torn log tail) and start the timers.

        Groups whose last rebalance left members come back Stable at that generation with
        those members and assignments; each member must heartbeat within its session timeout.
        """
        if self._active:
            return
        for group_id, stored in self._store.open().items():
            self._groups[group_id] = ClassicGroup.from_stored(
                group_id, stored.metadata, stored.offsets, stored.pending
            )
        self._active = True
        for group in self._groups.values():
            for member in group.members.values():
                self._engine.reschedule_heartbeat(group, member)
            limit = self._joins.max_group_size
            if limit is not None and group.size > limit:
                self._engine.prepare_rebalance(group, "loaded group is over the maximum size")
        self._schedule_retention_check()
        logger.info("group coordinator started with %d groups", len(self._groups))

    async def close(self) -> None:
        """Stop the timers, answer parked requests with NOT_COORDINATOR, compact the log."""
        if not self._active:
            return
        self._active = False
        self._timers.cancel_all()
        for group in self._groups.values():
            for member in group.members.values():
                member.complete_join(JoinResult.failure(errors.NOT_COORDINATOR, member.member_id))
                member.complete_sync(SyncResult(errors.NOT_COORDINATOR))
        self._groups.clear()
        self._store.close()
        logger.info("group coordinator closed")

    async def __aenter__(self) -> GroupCoordinator:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # ------------------------------------------------------------------------- JoinGroup

    async def join_group(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str,
        protocols: Iterable[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        client_id: str,
        client_host: str,
        *,
        require_known_member_id: bool,
        skip_assignment_supported: bool = False,
    ) -> JoinResult:
        """JoinGroup. Waits until the rebalance completes, then returns this member's view.

        ``member_id`` is "" for a member joining for the first time. ``protocols`` are
        (name, metadata) in order of preference. ``require_known_member_id`` is True for
        JoinGroup v4+ and ``skip_assignment_supported`` for v9+ (KIP-814). JoinGroup v0 has no
        rebalance timeout: pass the session timeout.

        Errors: INVALID_GROUP_ID (empty group id); INVALID_SESSION_TIMEOUT (outside the
        configured bounds); UNKNOWN_MEMBER_ID (member id unknown, or group unknown with a member
        id, or the member was removed while waiting); MEMBER_ID_REQUIRED (v4+ dynamic member
        with an empty id: ``member_id`` holds the id to rejoin with); INCONSISTENT_GROUP_PROTOCOL
        (empty type or protocol list, other protocol type than the group's, or no protocol in
        common with every member); FENCED_INSTANCE_ID (a static member's old member id);
        GROUP_MAX_SIZE_REACHED; REBALANCE_IN_PROGRESS (a newer JoinGroup from the same member
        superseded this one); NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE (closing, or the group
        metadata could not be stored).

        The leader's result lists every member with its metadata for the chosen protocol. A
        static member rejoining a Stable group with an empty member id (a restart) gets a new
        member id, its previous assignment on SyncGroup and no rebalance, unless its protocols
        change the group's protocol choice; ``leader_id`` is then the pre-restart leader id so
        the member does not act as leader (or, with ``skip_assignment_supported``, a static
        leader gets the member list with ``skip_assignment=True``).
        """
        request = JoinRequest(
            group_id=group_id,
            member_id=member_id,
            group_instance_id=group_instance_id,
            protocol_type=protocol_type,
            protocols=[(str(name), bytes(metadata)) for name, metadata in protocols],
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            client_id=client_id,
            client_host=client_host,
            require_known_member_id=require_known_member_id,
            skip_assignment_supported=skip_assignment_supported,
        )
        if not self._active:
            return JoinResult.failure(errors.COORDINATOR_NOT_AVAILABLE, member_id)
        outcome = self._joins.join(request)
        if isinstance(outcome, JoinResult):
            return outcome
        # shield: a handler cancelled mid-wait must not cancel the member's parked join
        return await asyncio.shield(outcome)

    # ------------------------------------------------------------------------- SyncGroup

    async def sync_group(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: Mapping[str, bytes],
    ) -> SyncResult:
        """SyncGroup. The leader passes every member's assignment; followers pass {}.

        Followers wait for the leader's SyncGroup; everybody then gets its own assignment.
        ``protocol_type``/``protocol_name`` (v5+, None before) must match the group's.

        Errors: INVALID_GROUP_ID; UNKNOWN_MEMBER_ID (unknown group or member, or an Empty
        group); FENCED_INSTANCE_ID; ILLEGAL_GENERATION; INCONSISTENT_GROUP_PROTOCOL;
        REBALANCE_IN_PROGRESS (a rebalance started before or while waiting);
        NOT_COORDINATOR (the assignment could not be stored, or closing);
        COORDINATOR_NOT_AVAILABLE.
        """
        outcome = self._sync(
            group_id,
            generation_id,
            member_id,
            group_instance_id,
            protocol_type,
            protocol_name,
            {str(k): bytes(v) for k, v in assignments.items()},
        )
        if isinstance(outcome, SyncResult):
            return outcome
        return await asyncio.shield(outcome)

    def _sync(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
    ) -> SyncResult | asyncio.Future[SyncResult]:
        if not self._active:
            return SyncResult(errors.COORDINATOR_NOT_AVAILABLE)
        if not group_id:
            return SyncResult(errors.INVALID_GROUP_ID)
        group = self._groups.get(group_id)
        if group is None:
            return SyncResult(errors.UNKNOWN_MEMBER_ID)
        if group.is_in(GroupState.DEAD):
            return SyncResult(errors.COORDINATOR_NOT_AVAILABLE)
        error = group.validate_member(member_id, group_instance_id)
        if error != errors.NONE:
            return SyncResult(error)
        if generation_id != group.generation_id:
            return SyncResult(errors.ILLEGAL_GENERATION)
        if _inconsistent(protocol_type, group.protocol_type) or _inconsistent(
            protocol_name, group.protocol_name
        ):
            return SyncResult(errors.INCONSISTENT_GROUP_PROTOCOL)
        if group.is_in(GroupState.EMPTY):
            return SyncResult(errors.UNKNOWN_MEMBER_ID)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            return SyncResult(errors.REBALANCE_IN_PROGRESS)

        member = group.members[member_id]
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            future = self._engine.park_sync(member)
            self._engine.remove_pending_sync_member(group, member_id)
            if group.is_leader(member_id):
                self._engine.complete_sync_phase(group, assignments)
            return future
        # Stable: the assignment is already there (a follower after the leader, or a retry)
        self._engine.remove_pending_sync_member(group, member_id)
        self._engine.reschedule_heartbeat(group, member)
        return SyncResult(errors.NONE, group.protocol_type, group.protocol_name, member.assignment)

    # ------------------------------------------------------------------------- Heartbeat

    async def heartbeat(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
    ) -> int:
        """Heartbeat: keeps the member's session alive. Returns an error code.

        NONE (Stable, or CompletingRebalance: clients may heartbeat right after JoinGroup);
        REBALANCE_IN_PROGRESS (rejoin now); UNKNOWN_MEMBER_ID (unknown group or member, or the
        group is Empty); FENCED_INSTANCE_ID; ILLEGAL_GENERATION; INVALID_GROUP_ID;
        COORDINATOR_NOT_AVAILABLE.
        """
        if not self._active:
            return errors.COORDINATOR_NOT_AVAILABLE
        if not group_id:
            return errors.INVALID_GROUP_ID
        group = self._groups.get(group_id)
        if group is None:
            return errors.UNKNOWN_MEMBER_ID
        if group.is_in(GroupState.DEAD):
            return errors.COORDINATOR_NOT_AVAILABLE
        error = group.validate_member(member_id, group_instance_id)
        if error != errors.NONE:
            return error
        if generation_id != group.generation_id:
            return errors.ILLEGAL_GENERATION
        if group.is_in(GroupState.EMPTY):
            return errors.UNKNOWN_MEMBER_ID
        self._engine.reschedule_heartbeat(group, group.members[member_id])
        if group.is_in(GroupState.PREPARING_REBALANCE):
            return errors.REBALANCE_IN_PROGRESS
        return errors.NONE

    # ------------------------------------------------------------------------ LeaveGroup

    async def leave_group(
        self, group_id: str, members: Iterable[tuple[str, str | None]]
    ) -> LeaveResult:
        """LeaveGroup for (member_id, group_instance_id) pairs; the rest of the group rebalances.

        v0-2 carry one member with no instance id; v3+ a batch. An empty member id with an
        instance id removes that static member (the admin "remove members" path).
        Top-level errors: COORDINATOR_NOT_AVAILABLE, INVALID_GROUP_ID, UNKNOWN_MEMBER_ID (unknown
        group). Per member: NONE, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID.
        """
        members = list(members)
        if not self._active:
            return LeaveResult(errors.COORDINATOR_NOT_AVAILABLE, [])
        if not group_id:
            return LeaveResult(errors.INVALID_GROUP_ID, [])
        group = self._groups.get(group_id)
        if group is None:
            return LeaveResult(errors.UNKNOWN_MEMBER_ID, [])
        if group.is_in(GroupState.DEAD):
            return LeaveResult(errors.COORDINATOR_NOT_AVAILABLE, [])

        results: list[MemberLeaveResult] = []
        left: list[str] = []
        for member_id, instance_id in members:
            was_member = (member_id or group.static_member_id(instance_id)) in group.members
            error = self._leave_one(group, member_id, instance_id)
            results.append(MemberLeaveResult(member_id, instance_id, error))
            if error == errors.NONE and was_member:
                left.append(member_id or str(instance_id))
        if left and group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            # (a pending member leaving changes nothing for the others: no rebalance)
            logger.info("group %s: members left: %s", group.group_id, left)
            self._engine.maybe_prepare_rebalance_or_complete_join(group, f"members left: {left}")
        elif group.is_in(GroupState.PREPARING_REBALANCE):
            # whoever left, the rebalance may no longer be waiting for anybody
            self._engine.maybe_complete_join_phase(group)
        return LeaveResult(errors.NONE, results)

    def _leave_one(self, group: ClassicGroup, member_id: str, instance_id: str | None) -> int:
        if not member_id:
            current = group.static_member_id(instance_id)
            if current is None:
                return errors.UNKNOWN_MEMBER_ID
            self._engine.remove_member(group, group.members[current])
            return errors.NONE
        if member_id in group.pending_members:
            self._engine.cancel_heartbeat(group, member_id)
            group.remove(member_id)
            return errors.NONE
        error = group.validate_member(member_id, instance_id)
        if error != errors.NONE:
            return error
        self._engine.remove_member(group, group.members[member_id])
        return errors.NONE

    # ----------------------------------------------------------------------- OffsetCommit

    async def commit_offsets(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: Mapping[TopicPartition, CommitValue],
        *,
        unknown_group_error: int = errors.ILLEGAL_GENERATION,
    ) -> dict[TopicPartition, int]:
        """OffsetCommit: {(topic, partition): (offset, leader_epoch, metadata)} -> error per
        partition. The broker has already answered partitions of unknown topics itself.

        ``generation_id`` -1 with an empty ``member_id`` is a commit from outside group
        management (admin tools, ``assign()``): accepted while the group has no members (and it
        creates a "simple" group when there is none). Otherwise the member and generation must
        be current. ``leader_epoch`` None means -1; ``metadata`` None means "".

        Errors (the same for every partition unless noted): ``unknown_group_error`` when the
        group does not exist and the commit is not a -1 generation one (ILLEGAL_GENERATION as
        Kafka answers OffsetCommit < v9; pass GROUP_ID_NOT_FOUND for v9+); UNKNOWN_MEMBER_ID;
        FENCED_INSTANCE_ID; ILLEGAL_GENERATION; REBALANCE_IN_PROGRESS (the group awaits its
        assignment); OFFSET_METADATA_TOO_LARGE (per partition); NOT_COORDINATOR (the commit
        could not be written); COORDINATOR_NOT_AVAILABLE. Accepted offsets are fsynced before
        this returns.
        """
        if not self._active:
            return all_failed(offsets, errors.COORDINATOR_NOT_AVAILABLE)
        group = self._groups.get(group_id)
        created = group is None
        if group is None:
            if generation_id >= 0:
                return all_failed(offsets, unknown_group_error)
            group = self._groups[group_id] = ClassicGroup(group_id, self.clock_ms())
        try:
            return self._commit(group, generation_id, member_id, group_instance_id, offsets)
        finally:
            if created:
                self._discard_if_unused(group)

    def _commit(
        self,
        group: ClassicGroup,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: Mapping[TopicPartition, CommitValue],
    ) -> dict[TopicPartition, int]:
        error = validate_offset_commit(group, member_id, group_instance_id, generation_id)
        if error != errors.NONE:
            return all_failed(offsets, error)
        member = group.members.get(member_id)
        if member is not None:
            # a commit is as good a sign of life as a heartbeat
            self._engine.reschedule_heartbeat(group, member)

        results, accepted = self._accept_offsets(offsets)
        if accepted:
            try:
                stored = self._store.append_offsets(group.group_id, accepted)
            except OSError as exc:  # a full or failing disk: one line, no traceback
                logger.error("group %s: could not store committed offsets: %s", group.group_id, exc)
                results.update(all_failed(accepted, errors.NOT_COORDINATOR))
                return results
            group.offsets.update(stored)
        return results

    def _accept_offsets(
        self, offsets: Mapping[TopicPartition, CommitValue]
    ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, CommittedOffset]]:
        """Per-partition checks of a commit: (result per partition, offsets to store)."""
        now = self.clock_ms()
        results: dict[TopicPartition, int] = {}
        accepted: dict[TopicPartition, CommittedOffset] = {}
        for (topic, partition), (offset, leader_epoch, metadata) in offsets.items():
            tp = (topic, partition)
            metadata = metadata or ""
            if len(metadata) > self.max_offset_metadata_bytes:
                results[tp] = errors.OFFSET_METADATA_TOO_LARGE
                continue
            epoch = NO_LEADER_EPOCH if leader_epoch is None else leader_epoch
            accepted[tp] = CommittedOffset(offset, epoch, metadata, now)
            results[tp] = errors.NONE
        return results, accepted

    # -------------------------------------------------------------------- TxnOffsetCommit

    async def txn_commit_offsets(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        member_id: str,
        generation_id: int,
        group_instance_id: str | None,
        offsets: Mapping[TopicPartition, CommitValue],
    ) -> dict[TopicPartition, int]:
        """TxnOffsetCommit: store ``offsets`` as pending for (group, producer id) until
        ``complete_transaction``; they are invisible to OffsetFetch until the commit.

        The handler has already checked ACLs, topics and (with the transaction coordinator) that
        the transaction is open and the group was added to it. TxnOffsetCommit v0-2 carry no
        member: pass "", -1, None. Errors (the same for every partition unless noted):
        INVALID_GROUP_ID (empty group id); ILLEGAL_GENERATION (unknown group with a generation,
        or a stale generation: KIP-447 zombie fencing); UNKNOWN_MEMBER_ID; FENCED_INSTANCE_ID;
        OFFSET_METADATA_TOO_LARGE (per partition); NOT_COORDINATOR (could not be written);
        COORDINATOR_NOT_AVAILABLE. Accepted offsets are fsynced before this returns.
        """
        if not self._active:
            return all_failed(offsets, errors.COORDINATOR_NOT_AVAILABLE)
        if not group_id:
            return all_failed(offsets, errors.INVALID_GROUP_ID)
        group = self._groups.get(group_id)
        created = group is None
        if group is None:
            if generation_id >= 0:
                return all_failed(offsets, errors.ILLEGAL_GENERATION)
            # a producer outside any consumer group (or with an unknown one): a simple group
            group = self._groups[group_id] = ClassicGroup(group_id, self.clock_ms())
        try:
            error = validate_txn_offset_commit(group, member_id, group_instance_id, generation_id)
            if error != errors.NONE:
                return all_failed(offsets, error)
            results, accepted = self._accept_offsets(offsets)
            if not accepted:
                return results
            try:
                stored = self._store.append_txn_offsets(
                    group_id, producer_id, producer_epoch, accepted
                )
            except OSError as exc:  # a full or failing disk: one line, no traceback
                logger.error("group %s: could not store transactional offsets: %s", group_id, exc)
                results.update(all_failed(accepted, errors.NOT_COORDINATOR))
                return results
            add_pending(group.pending_txn_offsets, producer_id, producer_epoch, stored)
            return results
        finally:
            if created:
                self._discard_if_unused(group)

    async def complete_transaction(
        self, group_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> None:
        """The producer's transaction ended: on commit its pending offsets for the group become
        committed offsets (each only if written after the partition's current committed offset:
        a plain OffsetCommit made during the transaction wins); on abort they are dropped.
        Durable before this returns.

        Idempotent: with nothing pending for the producer (a repeat after a restart, or the
        group was deleted meanwhile), or pending offsets of a newer epoch (a later
        transaction's), nothing happens. Raises GroupCoordinatorNotActive when not started and
        OSError when the record could not be written (nothing changed; call again).
        """
        if not self._active:
            raise GroupCoordinatorNotActive("the group coordinator is not running")
        group = self._groups.get(group_id)
        if group is None or not settles(group.pending_txn_offsets, producer_id, producer_epoch):
            return
        self._store.append_txn_end(group_id, producer_id, producer_epoch, commit=commit)
        end_transaction(
            group.offsets, group.pending_txn_offsets, producer_id, producer_epoch, commit
        )
        logger.debug(
            "group %s: transaction of producer %d %s",
            group_id,
            producer_id,
            "committed" if commit else "aborted",
        )

    # ------------------------------------------------------------------------ OffsetFetch

    def fetch_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """OffsetFetch: committed (offset, leader_epoch, metadata) per partition.

        With ``partitions`` every requested partition is answered, (-1, -1, "") when nothing
        is committed (or the group is unknown); with None, all committed partitions of the
        group. Offsets are returned whatever the group's state (simple groups have no members).
        Pending transactional offsets are not visible: see ``unstable_partitions``.
        """
        group = self._groups.get(group_id) if self._active else None
        committed = group.offsets if group is not None else {}
        if partitions is None:
            return {
                tp: OffsetAndMetadata(o.offset, o.leader_epoch, o.metadata)
                for tp, o in committed.items()
            }
        found: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp in partitions:
            o = committed.get(tp)
            found[tp] = (
                NO_COMMITTED_OFFSET
                if o is None
                else OffsetAndMetadata(o.offset, o.leader_epoch, o.metadata)
            )
        return found

    def unstable_partitions(self, group_id: str) -> set[TopicPartition]:
        """Partitions of the group with pending transactional offsets: an OffsetFetch with
        ``require_stable`` (v7+) answers them UNSTABLE_OFFSET_COMMIT, as Kafka does."""
        group = self._groups.get(group_id) if self._active else None
        return set() if group is None else pending_partitions(group.pending_txn_offsets)

    # -------------------------------------------------------- List/Describe/DeleteGroups

    def list_groups(
        self,
        states_filter: Iterable[str] | None = None,
        types_filter: Iterable[str] | None = None,
    ) -> list[GroupOverview]:
        """ListGroups. Filters (v4 states, v5 types) match case-insensitively; empty or None
        means no filter. Every group here is of type "classic"."""
        if not self._active:
            return []
        states = {s.lower() for s in states_filter or ()}
        types = {t.lower() for t in types_filter or ()}
        if types and GROUP_TYPE_CLASSIC not in types:
            return []
        return [
            GroupOverview(group.group_id, group.protocol_type or "", group.state.value)
            for group in self._groups.values()
            if not states or group.state.value.lower() in states
        ]

    def describe_group(self, group_id: str) -> GroupDescription:
        """DescribeGroups for one group (see ``GroupDescription``)."""
        if not self._active:
            return GroupDescription(errors.COORDINATOR_NOT_AVAILABLE, group_id, "", exists=False)
        group = self._groups.get(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            return GroupDescription(errors.NONE, group_id, GroupState.DEAD.value, exists=False)
        stable = group.is_in(GroupState.STABLE) and group.protocol_name is not None
        members = [
            MemberDescription(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                metadata=m.metadata(group.protocol_name) if stable and group.protocol_name else b"",
                assignment=m.assignment if stable else b"",
            )
            for m in group.members.values()
        ]
        return GroupDescription(
            error_code=errors.NONE,
            group_id=group_id,
            state=group.state.value,
            protocol_type=group.protocol_type or "",
            protocol_name=(group.protocol_name or "") if stable else "",
            members=members,
        )

    def delete_groups(self, group_ids: Iterable[str]) -> dict[str, int]:
        """DeleteGroups: removes Empty groups and their offsets.

        Pending transactional offsets go with the group, as in Kafka 4 (they are deleted with
        tombstones); the transaction's later end finds nothing to commit.

        Per group: NONE; GROUP_ID_NOT_FOUND (unknown); NON_EMPTY_GROUP (has members or is
        rebalancing); NOT_COORDINATOR (the tombstone could not be written);
        COORDINATOR_NOT_AVAILABLE.
        """
        results: dict[str, int] = {}
        for group_id in group_ids:
            if not self._active:
                results[group_id] = errors.COORDINATOR_NOT_AVAILABLE
                continue
            group = self._groups.get(group_id)
            if group is None or group.is_in(GroupState.DEAD):
                results[group_id] = errors.GROUP_ID_NOT_FOUND
            elif not group.is_in(GroupState.EMPTY):
                results[group_id] = errors.NON_EMPTY_GROUP
            else:
                results[group_id] = self._remove_group(group, "deleted")
        return results

    def delete_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition]
    ) -> tuple[int, dict[TopicPartition, int]]:
        """OffsetDelete: (group error, error per partition), Kafka's handleDeleteOffsets.

        An Empty group loses the offsets of every partition named; a "consumer" group with
        members keeps those of topics its members subscribe to (GROUP_SUBSCRIBED_TO_TOPIC) and
        loses the others; a group of another protocol type with members is NON_EMPTY_GROUP.
        Deletions are fsynced tombstones, so they survive a restart; an Empty group left with
        no offsets is removed, as Kafka's cleanup does. Group errors (the partition map is then
        empty): INVALID_GROUP_ID, GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, NOT_COORDINATOR (the
        tombstones could not be written), COORDINATOR_NOT_AVAILABLE.
        """
        if not self._active:
            return errors.COORDINATOR_NOT_AVAILABLE, {}
        if not group_id:
            return errors.INVALID_GROUP_ID, {}
        group = self._groups.get(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            return errors.GROUP_ID_NOT_FOUND, {}
        requested = list(dict.fromkeys(partitions))
        results: dict[TopicPartition, int] = {}
        if group.is_in(GroupState.EMPTY):
            eligible = requested
        elif group.protocol_type == CONSUMER_PROTOCOL_TYPE:
            subscribed = subscribed_topics(group) or set()
            eligible = [tp for tp in requested if tp[0] not in subscribed]
            results.update(
                {tp: errors.GROUP_SUBSCRIBED_TO_TOPIC for tp in requested if tp[0] in subscribed}
            )
        else:
            return errors.NON_EMPTY_GROUP, {}
        present = [tp for tp in eligible if tp in group.offsets]
        if present:
            try:
                self._store.append_offsets_deleted(group.group_id, present)
            except OSError as exc:  # a full or failing disk: one line, no traceback
                logger.error("group %s: could not delete offsets: %s", group.group_id, exc)
                return errors.NOT_COORDINATOR, {}
            for tp in present:
                del group.offsets[tp]
            logger.info("group %s: deleted the offsets of %s", group.group_id, present)
        results.update(dict.fromkeys(eligible, errors.NONE))
        if (
            group.is_in(GroupState.EMPTY)
            and not group.offsets
            and not group.pending_members
            and not group.pending_txn_offsets
        ):
            self._remove_group(group, "its last offsets were deleted")
        return errors.NONE, results

    # -------------------------------------------------------------------- retention

    def expire_offsets(self) -> int:
        """Drop offsets past ``offsets_retention_ms`` of groups without members (but not of
        partitions with pending transactional offsets), then groups left Empty with no offsets
        and no open transaction. Runs every ``offsets_retention_check_interval_ms``; public
        for tests and admin use. Returns how many offsets were removed."""
        if not self._active:
            return 0
        now = self.clock_ms()
        removed = 0
        for group in list(self._groups.values()):
            expired = expired_partitions(group, now, self.offsets_retention_ms)
            if expired:
                try:
                    self._store.append_offsets_deleted(group.group_id, expired)
                except OSError as exc:  # a full or failing disk: one line, no traceback
                    logger.error("group %s: could not expire offsets: %s", group.group_id, exc)
                    continue
                for tp in expired:
                    del group.offsets[tp]
                removed += len(expired)
                logger.info(
                    "group %s: expired %d offsets after retention", group.group_id, len(expired)
                )
            if (
                group.is_in(GroupState.EMPTY)
                and not group.offsets
                and not group.pending_members
                and not group.pending_txn_offsets
            ):
                self._remove_group(group, "empty and without offsets")
        return removed

    def _schedule_retention_check(self) -> None:
        def check() -> None:
            try:
                self.expire_offsets()
            finally:
                if self._active:
                    self._schedule_retention_check()

        self._timers.schedule(_RETENTION_TIMER_KEY, self.offsets_retention_check_interval_ms, check)

    # ------------------------------------------------------------------------ helpers

    def _remove_group(self, group: ClassicGroup, reason: str) -> int:
        if self._store.knows_group(group.group_id):
            try:
                self._store.append_group_deleted(group.group_id)
            except OSError as exc:  # a full or failing disk: one line, no traceback
                logger.error("group %s: could not write its tombstone: %s", group.group_id, exc)
                return errors.NOT_COORDINATOR
        self._engine.cancel_group_timers(group)
        group.transition_to(GroupState.DEAD, self.clock_ms())
        del self._groups[group.group_id]
        logger.info("group %s removed (%s)", group.group_id, reason)
        return errors.NONE

    def _discard_if_unused(self, group: ClassicGroup) -> None:
        """Forget a group a failed request created, so errors leave no trace in ListGroups."""
        if (
            group.is_in(GroupState.EMPTY)
            and not group.members
            and not group.pending_members
            and not group.offsets
            and not group.pending_txn_offsets
            and not self._store.knows_group(group.group_id)
            and self._groups.get(group.group_id) is group
        ):
            del self._groups[group.group_id]

    def debug_state(self) -> dict[str, Any]:
        """A snapshot of every group's soft state, for tests and troubleshooting."""
        return {
            group_id: {
                "state": group.state.value,
                "generation_id": group.generation_id,
                "leader_id": group.leader_id,
                "members": list(group.members),
                "pending_members": sorted(group.pending_members),
                "offsets": len(group.offsets),
                "open_transactions": sorted(group.pending_txn_offsets),
            }
            for group_id, group in self._groups.items()
        }


def _inconsistent(requested: str | None, current: str | None) -> bool:
    """SyncGroup v5+: a protocol type/name the client names must be the group's."""
    return requested is not None and current is not None and requested != current
