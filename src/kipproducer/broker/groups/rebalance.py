"""The timed half of the classic group protocol: rebalances, session expiry, sync deadlines.

Kafka's GroupMetadataManager drives each group through its states with three kinds of timers,
reproduced here on the event loop:

- a *heartbeat* timer per member (its session timeout; a longer join deadline while it is a
  new member whose first JoinGroup is parked); when it fires the member is removed unless it
  has a JoinGroup or SyncGroup parked;
- a *join* timer per group: the rebalance timeout (the largest of the members'), after which
  members that did not rejoin are dropped and the generation completes; or, for a group that was
  Empty, the initial rebalance delay, extended while new members keep arriving;
- a *sync* timer per group: members that got their JoinGroup response but send no SyncGroup
  within the rebalance timeout are removed and the group rebalances again.

Everything here runs on the event loop thread and never awaits: a request or a timer changes
the state in one step, and parked requests are answered by completing their futures.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from kipproducer.protocol import error_codes as errors

from .group import ClassicGroup, GroupState
from .member import GroupMember, JoinRequest
from .offset_store import GroupStore
from .results import JoinResult, SyncResult
from .timers import KeyedTimers

logger = logging.getLogger("kipproducer.broker.groups")


class RebalanceEngine:
    def __init__(
        self,
        *,
        store: GroupStore,
        timers: KeyedTimers,
        clock_ms: Callable[[], int],
        initial_rebalance_delay_ms: int,
        new_member_join_timeout_ms: int,
    ) -> None:
        self.store = store
        self.timers = timers
        self.clock_ms = clock_ms
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self.new_member_join_timeout_ms = new_member_join_timeout_ms

    # --------------------------------------------------------------------- timer keys

    @staticmethod
    def _heartbeat_key(group: ClassicGroup, member_id: str) -> tuple[str, str, str]:
        return ("heartbeat", group.group_id, member_id)

    @staticmethod
    def _join_key(group: ClassicGroup) -> tuple[str, str]:
        return ("join", group.group_id)

    @staticmethod
    def _sync_key(group: ClassicGroup) -> tuple[str, str]:
        return ("sync", group.group_id)

    def cancel_group_timers(self, group: ClassicGroup) -> None:
        for member_id in [*group.members, *group.pending_members]:
            self.timers.cancel(self._heartbeat_key(group, member_id))
        self.timers.cancel(self._join_key(group))
        self.timers.cancel(self._sync_key(group))

    # ------------------------------------------------------------------ parked requests

    def park_join(self, member: GroupMember) -> asyncio.Future[JoinResult]:
        """Give the member a fresh JoinGroup future.

        A member has one JoinGroup in flight; if an older one is still parked (the client gave
        up on it and retried), it is answered so that nothing waits forever.
        """
        member.complete_join(JoinResult.failure(errors.REBALANCE_IN_PROGRESS, member.member_id))
        future: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        member.join_future = future
        return future

    def park_sync(self, member: GroupMember) -> asyncio.Future[SyncResult]:
        member.complete_sync(SyncResult(errors.REBALANCE_IN_PROGRESS))
        future: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        member.sync_future = future
        return future

    # ------------------------------------------------------------------------ heartbeats

    def reschedule_heartbeat(
        self, group: ClassicGroup, member: GroupMember, timeout_ms: int | None = None
    ) -> None:
        member_id = member.member_id
        self.timers.schedule(
            self._heartbeat_key(group, member_id),
            member.session_timeout_ms if timeout_ms is None else timeout_ms,
            lambda: self._expire_heartbeat(group, member_id),
        )

    def cancel_heartbeat(self, group: ClassicGroup, member_id: str) -> None:
        self.timers.cancel(self._heartbeat_key(group, member_id))

    def schedule_pending_member_expiry(
        self, group: ClassicGroup, member_id: str, timeout_ms: int
    ) -> None:
        """A MEMBER_ID_REQUIRED id holds up the rebalance until its owner rejoins or this fires."""
        self.timers.schedule(
            self._heartbeat_key(group, member_id),
            timeout_ms,
            lambda: self._expire_heartbeat(group, member_id),
        )

    def _expire_heartbeat(self, group: ClassicGroup, member_id: str) -> None:
        if group.is_in(GroupState.DEAD):
            return
        if member_id in group.pending_members:
            logger.info(
                "group %s: pending member %s did not rejoin in time", group.group_id, member_id
            )
            self.remove_pending_member(group, member_id)
            return
        member = group.members.get(member_id)
        if member is None or member.has_satisfied_heartbeat():
            return
        logger.info(
            "group %s: member %s (instance %s) failed its session timeout, removing it",
            group.group_id,
            member_id,
            member.group_instance_id,
        )
        self.remove_member_and_update_group(
            group, member, f"member {member_id} failed its session timeout"
        )

    # ------------------------------------------------------------ adding and removing

    def add_member_and_rebalance(
        self, group: ClassicGroup, request: JoinRequest, member_id: str
    ) -> asyncio.Future[JoinResult]:
        member = GroupMember(
            member_id=member_id,
            group_instance_id=request.group_instance_id,
            client_id=request.client_id,
            client_host=request.client_host,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            session_timeout_ms=request.session_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=request.protocols,
            is_new=True,
        )
        future = self.park_join(member)
        if group.is_in(GroupState.PREPARING_REBALANCE) and group.previous_state is GroupState.EMPTY:
            group.new_member_added = True
        group.add(member)
        # A new member cannot heartbeat while its JoinGroup is parked, and the coordinator cannot
        # tell whether its client is still there; bound the wait so defunct joiners go away.
        self.reschedule_heartbeat(group, member, self.new_member_join_timeout_ms)
        self.maybe_prepare_rebalance_or_complete_join(
            group, f"member {member_id} (instance {request.group_instance_id}) joined"
        )
        return future

    def update_member_and_rebalance(
        self, group: ClassicGroup, member: GroupMember, request: JoinRequest, reason: str
    ) -> asyncio.Future[JoinResult]:
        group.update_member(
            member, request.protocols, request.rebalance_timeout_ms, request.session_timeout_ms
        )
        future = self.park_join(member)
        self.maybe_prepare_rebalance_or_complete_join(group, reason)
        return future

    def remove_member_and_update_group(
        self, group: ClassicGroup, member: GroupMember, reason: str
    ) -> None:
        self.remove_member(group, member)
        if group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self.maybe_prepare_rebalance_or_complete_join(group, reason)
        elif group.is_in(GroupState.PREPARING_REBALANCE) and group.has_all_members_joined():
            self.complete_join(group)

    def remove_member(self, group: ClassicGroup, member: GroupMember) -> None:
        """Drop a member without touching the group's state; UNKNOWN_MEMBER_ID tells its parked
        requests (if its client is still there) to join again from scratch."""
        member.complete_join(JoinResult.failure(errors.UNKNOWN_MEMBER_ID, ""))
        member.complete_sync(SyncResult(errors.UNKNOWN_MEMBER_ID))
        self.cancel_heartbeat(group, member.member_id)
        group.remove(member.member_id)

    def remove_pending_member(self, group: ClassicGroup, member_id: str) -> None:
        self.cancel_heartbeat(group, member_id)
        group.remove(member_id)
        if group.is_in(GroupState.PREPARING_REBALANCE) and group.has_all_members_joined():
            self.complete_join(group)

    # ------------------------------------------------------------------- join phase

    def maybe_prepare_rebalance_or_complete_join(self, group: ClassicGroup, reason: str) -> None:
        if group.can_rebalance():
            self.prepare_rebalance(group, reason)
        else:
            self.maybe_complete_join_phase(group)

    def maybe_complete_join_phase(self, group: ClassicGroup) -> None:
        # the initial rebalance of an Empty group always waits for its delay to pass
        if (
            group.is_in(GroupState.PREPARING_REBALANCE)
            and group.has_all_members_joined()
            and group.previous_state is not GroupState.EMPTY
        ):
            self.complete_join(group)

    def prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            # members waiting for their assignment must rejoin instead
            self.reset_and_propagate_assignment(group, errors.REBALANCE_IN_PROGRESS)
        self.timers.cancel(self._sync_key(group))
        group.pending_sync_members.clear()

        initial = group.is_in(GroupState.EMPTY)
        if initial:
            delay = self.initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            self.timers.schedule(
                self._join_key(group),
                delay,
                lambda: self._try_complete_initial_rebalance(group, delay, remaining),
            )
        group.transition_to(GroupState.PREPARING_REBALANCE, self.clock_ms())
        logger.info(
            "group %s: preparing to rebalance, old generation %d (%s)",
            group.group_id,
            group.generation_id,
            reason,
        )
        if not initial:
            if group.has_all_members_joined():
                self.complete_join(group)
            else:
                self.timers.schedule(
                    self._join_key(group),
                    group.rebalance_timeout_ms(),
                    lambda: self.complete_join(group),
                )

    def _try_complete_initial_rebalance(
        self, group: ClassicGroup, delay_ms: int, remaining_ms: int
    ) -> None:
        if not group.is_in(GroupState.PREPARING_REBALANCE):
            return
        if group.new_member_added and remaining_ms != 0:
            # someone joined during the delay: wait a little longer for the rest of the herd
            group.new_member_added = False
            next_delay = min(self.initial_rebalance_delay_ms, remaining_ms)
            next_remaining = max(remaining_ms - delay_ms, 0)
            self.timers.schedule(
                self._join_key(group),
                next_delay,
                lambda: self._try_complete_initial_rebalance(group, next_delay, next_remaining),
            )
        else:
            self.complete_join(group)

    def complete_join(self, group: ClassicGroup) -> None:
        """End the join phase: drop dynamic members that did not rejoin, start the next
        generation and answer every parked JoinGroup (the leader gets the member list)."""
        self.timers.cancel(self._join_key(group))
        if not group.is_in(GroupState.PREPARING_REBALANCE):
            return
        # static members are kept: they may be restarting and rejoin with the same instance id
        stragglers = [m for m in group.not_yet_rejoined_members() if not m.is_static]
        for member in stragglers:
            self.remove_member(group, member)
        if stragglers:
            logger.info(
                "group %s: removed members that did not rejoin in time: %s",
                group.group_id,
                [m.member_id for m in stragglers],
            )

        if not group.maybe_elect_new_joined_leader() and group.members:
            # only static members that have not rejoined are left: wait for them or their expiry
            logger.warning(
                "group %s: no member rejoined; waiting another rebalance timeout", group.group_id
            )
            self.timers.schedule(
                self._join_key(group),
                group.rebalance_timeout_ms(),
                lambda: self.complete_join(group),
            )
            return

        group.init_next_generation(self.clock_ms())
        if group.is_in(GroupState.EMPTY):
            logger.info("group %s: generation %d is empty", group.group_id, group.generation_id)
            self.store_group(group)
            return

        logger.info(
            "group %s: generation %d with %d members, protocol %s, leader %s",
            group.group_id,
            group.generation_id,
            group.size,
            group.protocol_name,
            group.leader_id,
        )
        for member in group.members.values():
            leader = group.is_leader(member.member_id)
            member.complete_join(
                JoinResult(
                    error_code=errors.NONE,
                    member_id=member.member_id,
                    generation_id=group.generation_id,
                    protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name,
                    leader_id=group.leader_id or "",
                    members=group.current_member_metadata() if leader else [],
                )
            )
            self.reschedule_heartbeat(group, member)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)

        generation = group.generation_id
        self.timers.schedule(
            self._sync_key(group),
            group.rebalance_timeout_ms(),
            lambda: self._expire_pending_sync(group, generation),
        )

    # ------------------------------------------------------------------- sync phase

    def remove_pending_sync_member(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if not group.pending_sync_members:
            self.timers.cancel(self._sync_key(group))

    def _expire_pending_sync(self, group: ClassicGroup, generation: int) -> None:
        if generation != group.generation_id or not group.is_in(
            GroupState.COMPLETING_REBALANCE, GroupState.STABLE
        ):
            return
        laggards = [group.members[m] for m in group.pending_sync_members if m in group.members]
        if not laggards:
            return
        for member in laggards:
            self.remove_member(group, member)
        logger.info(
            "group %s: removed members that sent no SyncGroup in time: %s",
            group.group_id,
            [m.member_id for m in laggards],
        )
        self.prepare_rebalance(group, "members did not sync in time")

    def complete_sync_phase(self, group: ClassicGroup, assignments: dict[str, bytes]) -> None:
        """The leader's SyncGroup: persist the assignment, then hand it out and go Stable."""
        # members the leader left out get an empty assignment; ids not in the group are ignored
        assignment = {member_id: assignments.get(member_id, b"") for member_id in group.members}
        error = self.store_group(group, assignment)
        if error != errors.NONE:
            self.reset_and_propagate_assignment(group, error)
            self.maybe_prepare_rebalance_or_complete_join(
                group, "could not store the group assignment"
            )
            return
        for member in group.members.values():
            member.assignment = assignment[member.member_id]
        self._propagate_assignment(group, errors.NONE)
        group.transition_to(GroupState.STABLE, self.clock_ms())
        logger.info("group %s: stable at generation %d", group.group_id, group.generation_id)

    def reset_and_propagate_assignment(self, group: ClassicGroup, error_code: int) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error_code)

    def _propagate_assignment(self, group: ClassicGroup, error_code: int) -> None:
        ok = error_code == errors.NONE
        for member in group.members.values():
            answered = member.complete_sync(
                SyncResult(
                    error_code=error_code,
                    protocol_type=group.protocol_type if ok else None,
                    protocol_name=group.protocol_name if ok else None,
                    assignment=member.assignment,
                )
            )
            if answered:
                # its session may have run out while it waited: start it afresh
                self.reschedule_heartbeat(group, member)

    # ------------------------------------------------------------------- durability

    def store_group(self, group: ClassicGroup, assignment: dict[str, bytes] | None = None) -> int:
        """Write the group's metadata record; NONE, or NOT_COORDINATOR when the disk fails
        (Kafka's answer to a storage error: clients look for the coordinator again)."""
        try:
            self.store.append_group_metadata(group.to_stored(assignment))
        except OSError as exc:  # a full or failing disk: one line, no traceback
            logger.error("group %s: could not store the group metadata: %s", group.group_id, exc)
            return errors.NOT_COORDINATOR
        return errors.NONE
