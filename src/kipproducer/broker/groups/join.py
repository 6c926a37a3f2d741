"""JoinGroup: Kafka's classicGroupJoin, as a state dispatch over one group.

A JoinGroup either gets an answer at once (errors, MEMBER_ID_REQUIRED, a rejoin that changes
nothing) or parks the member until the rebalance completes; ``join`` returns the result or the
future to await. Everything happens synchronously on the event loop thread.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable

from kipproducer.protocol import error_codes as errors

from .group import ClassicGroup, GroupState
from .member import GroupMember, JoinRequest
from .rebalance import RebalanceEngine
from .results import JoinResult, SyncResult

logger = logging.getLogger("kipproducer.broker.groups")


class JoinHandler:
    """Answers JoinGroup requests for the groups in ``groups`` (shared with the coordinator).

    ``discard_if_unused`` forgets a group this request created if the request left it with
    nothing in it (so failed joins do not show up in ListGroups).
    """

    def __init__(
        self,
        groups: dict[str, ClassicGroup],
        engine: RebalanceEngine,
        *,
        min_session_timeout_ms: int,
        max_session_timeout_ms: int,
        max_group_size: int | None,
        discard_if_unused: Callable[[ClassicGroup], None],
    ) -> None:
        self._groups = groups
        self._engine = engine
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.max_group_size = max_group_size
        self._discard_if_unused = discard_if_unused

    def join(self, request: JoinRequest) -> JoinResult | asyncio.Future[JoinResult]:
        member_id = request.member_id
        if not request.group_id:
            return JoinResult.failure(errors.INVALID_GROUP_ID, member_id)
        if not (
            self.min_session_timeout_ms <= request.session_timeout_ms <= self.max_session_timeout_ms
        ):
            return JoinResult.failure(errors.INVALID_SESSION_TIMEOUT, member_id)

        group = self._groups.get(request.group_id)
        created = group is None
        if group is None:
            if member_id:
                return JoinResult.failure(errors.UNKNOWN_MEMBER_ID, member_id)
            group = self._groups[request.group_id] = ClassicGroup(
                request.group_id, self._engine.clock_ms()
            )
        try:
            if not self._accepts_joining_member(group, member_id):
                member = group.members.get(member_id)
                if member is not None:
                    self._engine.remove_member_and_update_group(
                        group, member, "group over its maximum size"
                    )
                return JoinResult.failure(errors.GROUP_MAX_SIZE_REACHED, "")
            if not member_id:
                return self._join_new_member(group, request)
            return self._join_existing_member(group, request)
        finally:
            if created:
                self._discard_if_unused(group)

    def _accepts_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        limit = self.max_group_size
        if limit is None or group.is_in(GroupState.EMPTY, GroupState.DEAD):
            return True
        member = group.members.get(member_id)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            # counting members that already rejoined lets the last rejoiners be the ones shed
            # when the limit was lowered
            return (member is not None and member.is_awaiting_join) or (
                group.num_awaiting_join() < limit
            )
        return member is not None or group.size < limit

    def _join_new_member(
        self, group: ClassicGroup, request: JoinRequest
    ) -> JoinResult | asyncio.Future[JoinResult]:
        if group.is_in(GroupState.DEAD):
            return JoinResult.failure(errors.COORDINATOR_NOT_AVAILABLE, "")
        if not group.supports_protocols(request.protocol_type, (n for n, _ in request.protocols)):
            return JoinResult.failure(errors.INCONSISTENT_GROUP_PROTOCOL, "")
        new_member_id = _new_member_id(request)
        instance_id = request.group_instance_id
        if instance_id is not None:
            existing = group.static_member_id(instance_id)
            if existing is not None:
                return self._replace_static_member(group, request, existing, new_member_id)
            return self._engine.add_member_and_rebalance(group, request, new_member_id)
        if request.require_known_member_id:
            # the client must come back with this id, so a retry after a lost response does
            # not add a second member
            group.pending_members.add(new_member_id)
            self._engine.schedule_pending_member_expiry(
                group, new_member_id, request.session_timeout_ms
            )
            logger.debug("group %s: new member must rejoin as %s", group.group_id, new_member_id)
            return JoinResult.failure(errors.MEMBER_ID_REQUIRED, new_member_id)
        return self._engine.add_member_and_rebalance(group, request, new_member_id)

    def _join_existing_member(
        self, group: ClassicGroup, request: JoinRequest
    ) -> JoinResult | asyncio.Future[JoinResult]:
        member_id = request.member_id
        if group.is_in(GroupState.DEAD):
            return JoinResult.failure(errors.COORDINATOR_NOT_AVAILABLE, member_id)
        if not group.supports_protocols(request.protocol_type, (n for n, _ in request.protocols)):
            return JoinResult.failure(errors.INCONSISTENT_GROUP_PROTOCOL, member_id)
        if member_id in group.pending_members:
            if request.group_instance_id is not None:
                # pending ids are only handed to dynamic members
                return JoinResult.failure(errors.UNKNOWN_MEMBER_ID, member_id)
            return self._engine.add_member_and_rebalance(group, request, member_id)
        error = group.validate_member(member_id, request.group_instance_id)
        if error != errors.NONE:
            return JoinResult.failure(error, member_id)

        member = group.members[member_id]
        if group.is_in(GroupState.PREPARING_REBALANCE):
            return self._engine.update_member_and_rebalance(
                group, member, request, f"member {member_id} rejoined"
            )
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            if member.matches(request.protocols):
                # a retry after a lost JoinGroup response: answer it again
                return self._current_generation(group, member, with_members=True)
            return self._engine.update_member_and_rebalance(
                group, member, request, f"member {member_id} changed its protocols"
            )
        if group.is_in(GroupState.STABLE):
            if group.is_leader(member_id) or not member.matches(request.protocols):
                # a leader's rejoin forces a rebalance: that is how it reacts to changes that do
                # not show in the metadata (for consumers: new partitions of subscribed topics)
                return self._engine.update_member_and_rebalance(
                    group, member, request, f"member {member_id} rejoined a stable group"
                )
            return self._current_generation(group, member, with_members=False)
        # Empty: the member's generation is gone
        return JoinResult.failure(errors.UNKNOWN_MEMBER_ID, member_id)

    @staticmethod
    def _current_generation(
        group: ClassicGroup, member: GroupMember, *, with_members: bool
    ) -> JoinResult:
        leader = group.is_leader(member.member_id)
        return JoinResult(
            error_code=errors.NONE,
            member_id=member.member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader_id=group.leader_id or "",
            members=group.current_member_metadata() if (with_members and leader) else [],
        )

    def _replace_static_member(
        self, group: ClassicGroup, request: JoinRequest, old_id: str, new_id: str
    ) -> JoinResult | asyncio.Future[JoinResult]:
        """A static member came back with an empty member id (its client restarted)."""
        instance_id = request.group_instance_id
        assert instance_id is not None
        logger.info(
            "group %s: static member %s rejoined; member id %s replaces %s",
            group.group_id,
            instance_id,
            new_id,
            old_id,
        )
        previous_leader = group.leader_id
        old = group.members[old_id]
        # a request of the old instance still parked belongs to a fenced duplicate
        old.complete_join(JoinResult.failure(errors.FENCED_INSTANCE_ID, old_id))
        old.complete_sync(SyncResult(errors.FENCED_INSTANCE_ID))
        self._engine.cancel_heartbeat(group, old_id)
        member = group.replace_static_member(instance_id, old_id, new_id)
        saved = (
            member.protocols,
            member.rebalance_timeout_ms,
            member.session_timeout_ms,
            member.client_id,
            member.client_host,
        )
        member.client_id, member.client_host = request.client_id, request.client_host
        self._engine.reschedule_heartbeat(group, member)
        group.update_member(
            member, request.protocols, request.rebalance_timeout_ms, request.session_timeout_ms
        )
        future = self._engine.park_join(member)

        if group.is_in(GroupState.STABLE):
            if group.protocol_name != group.select_protocol():
                self._engine.maybe_prepare_rebalance_or_complete_join(
                    group, f"static member {instance_id} changed the group's protocol"
                )
                return future
            # No rebalance: persist the new member id (so a coordinator restart still fences
            # the old one) and hand back the current generation; SyncGroup returns the
            # member's previous assignment.
            error = self._engine.store_group(group)
            if error != errors.NONE:
                member.join_future = None
                self._engine.cancel_heartbeat(group, new_id)
                group.replace_static_member(instance_id, new_id, old_id)
                member.set_protocols(saved[0])
                (
                    member.rebalance_timeout_ms,
                    member.session_timeout_ms,
                    member.client_id,
                    member.client_host,
                ) = saved[1:]
                self._engine.reschedule_heartbeat(group, member)
                return JoinResult(
                    error_code=error,
                    member_id="",
                    generation_id=group.generation_id,
                    protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name,
                    leader_id=previous_leader or "",
                )
            if request.skip_assignment_supported:
                leader = group.is_leader(new_id)
                result = JoinResult(
                    error_code=errors.NONE,
                    member_id=new_id,
                    generation_id=group.generation_id,
                    protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name,
                    leader_id=group.leader_id or "",
                    members=group.current_member_metadata() if leader else [],
                    skip_assignment=leader,
                )
            else:
                # the old leader id: a restarted leader must not compute an assignment that
                # a Stable group would never hand out
                result = JoinResult(
                    error_code=errors.NONE,
                    member_id=new_id,
                    generation_id=group.generation_id,
                    protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name,
                    leader_id=previous_leader or "",
                )
            member.complete_join(result)
            return result
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            # the leader may be assigning to the old member id: start over
            self._engine.prepare_rebalance(
                group, f"static member {instance_id} rejoined while awaiting the assignment"
            )
        else:
            self._engine.maybe_complete_join_phase(group)
        return future


def _new_member_id(request: JoinRequest) -> str:
    prefix = (
        request.group_instance_id if request.group_instance_id is not None else request.client_id
    )
    return f"{prefix}-{uuid.uuid4()}"
