"""The classic group state machine (Kafka's ClassicGroup / GroupMetadata), without timers or I/O.

States::

    Empty --join--> PreparingRebalance --all joined / rebalance timeout--> CompletingRebalance
    CompletingRebalance --leader's SyncGroup--> Stable
    Stable / CompletingRebalance --join, leave, member expiry--> PreparingRebalance
    PreparingRebalance --nobody left--> Empty
    any --deleted / offsets expired--> Dead

The group is generic over ``protocol_type``: it never parses member metadata or assignments.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable

from kipproducer.protocol import error_codes as errors

from .member import GroupMember, Protocols
from .results import JoinedMember, TopicPartition
from .stored import CommittedOffset, PendingTxnOffsets, StoredGroupMetadata, StoredMember


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.EMPTY, GroupState.STABLE, GroupState.COMPLETING_REBALANCE}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}


class ClassicGroup:
    """Membership, generation and committed offsets of one group."""

    def __init__(self, group_id: str, now_ms: int | None = None) -> None:
        self.group_id = group_id
        self.state = GroupState.EMPTY
        self.previous_state = GroupState.EMPTY
        # when the group entered its current state; offsets of an Empty group expire from here
        self.state_timestamp_ms = now_ms
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, GroupMember] = {}
        self.static_members: dict[str, str] = {}  # group.instance.id -> member id
        # member ids handed out with MEMBER_ID_REQUIRED whose owners have not rejoined yet
        self.pending_members: set[str] = set()
        # members that got their JoinGroup response but have not sent SyncGroup yet
        self.pending_sync_members: set[str] = set()
        # a member joined during the initial (delayed) rebalance: extend the delay once more
        self.new_member_added = False
        self.offsets: dict[TopicPartition, CommittedOffset] = {}
        # producer id -> offsets of its open transaction (TxnOffsetCommit), not yet visible
        self.pending_txn_offsets: dict[int, PendingTxnOffsets] = {}

    def __repr__(self) -> str:
        return (
            f"ClassicGroup({self.group_id!r}, {self.state.value}, generation={self.generation_id},"
            f" members={list(self.members)})"
        )

    # ---------------------------------------------------------------------------- state

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    def transition_to(self, target: GroupState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS_STATES[target]:
            raise RuntimeError(
                f"group {self.group_id}: illegal transition {self.state.value} -> {target.value}"
            )
        self.previous_state, self.state = self.state, target
        self.state_timestamp_ms = now_ms

    def can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS_STATES[GroupState.PREPARING_REBALANCE]

    # -------------------------------------------------------------------------- members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def add(self, member: GroupMember) -> None:
        if not self.members:
            # the first member fixes the protocol type until the group is empty again
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        self.pending_members.discard(member.member_id)
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> GroupMember | None:
        """Drop a member (or a pending member id). The caller answers its parked requests."""
        self.pending_members.discard(member_id)
        self.pending_sync_members.discard(member_id)
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        instance_id = member.group_instance_id
        if instance_id is not None and self.static_members.get(instance_id) == member_id:
            del self.static_members[instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def replace_static_member(
        self, group_instance_id: str, old_id: str, new_id: str
    ) -> GroupMember:
        """Give a restarted static member a new id, keeping everything else (its assignment too).

        The old id is fenced from here on: requests carrying it with the instance id get
        FENCED_INSTANCE_ID. The caller answers the old id's parked requests.
        """
        member = self.members.pop(old_id)
        member.member_id = new_id
        self.members[new_id] = member
        self.static_members[group_instance_id] = new_id
        if old_id in self.pending_sync_members:
            self.pending_sync_members.discard(old_id)
            self.pending_sync_members.add(new_id)
        if self.leader_id == old_id:
            self.leader_id = new_id
        return member

    def update_member(
        self,
        member: GroupMember,
        protocols: Protocols,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
    ) -> None:
        member.set_protocols(protocols)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms

    def static_member_id(self, group_instance_id: str | None) -> str | None:
        if group_instance_id is None:
            return None
        return self.static_members.get(group_instance_id)

    def validate_member(self, member_id: str, group_instance_id: str | None) -> int:
        """NONE, or why a request from this (member id, instance id) pair is refused.

        A static member's instance id must map to the request's member id; any other member id
        was replaced by a newer instance of the same static member and is fenced.
        """
        if group_instance_id is not None:
            current = self.static_members.get(group_instance_id)
            if current is None:
                return errors.UNKNOWN_MEMBER_ID
            if current != member_id:
                return errors.FENCED_INSTANCE_ID
        if member_id not in self.members:
            return errors.UNKNOWN_MEMBER_ID
        return errors.NONE

    @property
    def size(self) -> int:
        return len(self.members)

    def num_awaiting_join(self) -> int:
        return sum(1 for m in self.members.values() if m.is_awaiting_join)

    def has_all_members_joined(self) -> bool:
        """Every member has a JoinGroup parked and no MEMBER_ID_REQUIRED rejoin is outstanding."""
        return self.num_awaiting_join() == len(self.members) and not self.pending_members

    def not_yet_rejoined_members(self) -> list[GroupMember]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    def rebalance_timeout_ms(self) -> int:
        """The rebalance waits as long as the most patient member allows."""
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else pick a member that did. False if none did."""
        if self.leader_id is None:
            return False
        if self.members[self.leader_id].is_awaiting_join:
            return True
        for member in self.members.values():
            if member.is_awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    # ------------------------------------------------------------------------ protocols

    def supports_protocols(self, protocol_type: str, protocol_names: Iterable[str]) -> bool:
        """Kafka's rule: an empty group takes any non-empty type and protocol list; otherwise
        the type must match and at least one protocol must be supported by every member."""
        names = set(protocol_names)
        if self.state is GroupState.EMPTY:
            return bool(protocol_type) and bool(names)
        if protocol_type != self.protocol_type:
            return False
        counts = self._supported_protocol_counts()
        return any(counts[name] == len(self.members) for name in names)

    def _supported_protocol_counts(self) -> Counter[str]:
        counts: Counter[str] = Counter()
        for member in self.members.values():
            counts.update(member.protocol_names)
        return counts

    def select_protocol(self) -> str:
        """Each member votes for its favourite protocol that all members support; most votes
        win. Ties go to the leader's (else the first member's) preference, to be deterministic."""
        if not self.members:
            raise RuntimeError(f"group {self.group_id}: cannot select a protocol with no members")
        counts = self._supported_protocol_counts()
        candidates = {name for name, count in counts.items() if count == len(self.members)}
        if not candidates:
            raise RuntimeError(f"group {self.group_id}: no protocol supported by all members")
        votes = Counter(m.preferred_protocol(candidates) for m in self.members.values())
        best = max(votes.values())
        tie_breaker = self.members.get(self.leader_id or "") or next(iter(self.members.values()))
        ordered = [name for name, _ in tie_breaker.protocols]
        return min((name for name, n in votes.items() if n == best), key=ordered.index)

    def current_member_metadata(self) -> list[JoinedMember]:
        """The member list the leader gets, with each member's metadata for the chosen protocol."""
        if self.protocol_name is None:
            raise RuntimeError(f"group {self.group_id}: no protocol selected")
        return [
            JoinedMember(m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
            for m in self.members.values()
        ]

    def init_next_generation(self, now_ms: int) -> None:
        """Close the join phase: bump the generation and pick the protocol (if anyone is left)."""
        self.generation_id += 1
        self.pending_sync_members.clear()
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.transition_to(GroupState.EMPTY, now_ms)

    # ------------------------------------------------------------------------ durability

    def to_stored(self, assignment: dict[str, bytes] | None = None) -> StoredGroupMetadata:
        """The metadata record of this group; ``assignment`` overrides the members' own."""
        protocol = self.protocol_name
        members = tuple(
            StoredMember(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                session_timeout_ms=m.session_timeout_ms,
                subscription=m.metadata(protocol) if protocol is not None else b"",
                assignment=(assignment or {}).get(m.member_id, m.assignment),
            )
            for m in self.members.values()
        )
        return StoredGroupMetadata(
            group_id=self.group_id,
            protocol_type=self.protocol_type,
            generation_id=self.generation_id,
            protocol_name=protocol,
            leader_id=self.leader_id,
            state_timestamp_ms=self.state_timestamp_ms,
            members=members,
        )

    @classmethod
    def from_stored(
        cls,
        group_id: str,
        metadata: StoredGroupMetadata | None,
        offsets: dict[TopicPartition, CommittedOffset],
        pending_txn_offsets: dict[int, PendingTxnOffsets] | None = None,
    ) -> ClassicGroup:
        """A loaded group: Stable if its last rebalance left members, else Empty."""
        group = cls(group_id)
        group.offsets = dict(offsets)
        group.pending_txn_offsets = dict(pending_txn_offsets or {})
        if metadata is None:
            return group  # only ever used for admin commits: a "simple" group
        group.generation_id = metadata.generation_id
        group.protocol_type = metadata.protocol_type
        group.state_timestamp_ms = metadata.state_timestamp_ms
        for stored in metadata.members:
            member = GroupMember(
                member_id=stored.member_id,
                group_instance_id=stored.group_instance_id,
                client_id=stored.client_id,
                client_host=stored.client_host,
                rebalance_timeout_ms=stored.rebalance_timeout_ms,
                session_timeout_ms=stored.session_timeout_ms,
                protocol_type=metadata.protocol_type or "",
                protocols=[(metadata.protocol_name or "", stored.subscription)],
                assignment=stored.assignment,
            )
            group.add(member)
        if group.members:
            group.protocol_name = metadata.protocol_name
            group.leader_id = metadata.leader_id if metadata.leader_id in group.members else None
            if group.leader_id is None:
                group.leader_id = next(iter(group.members))
            group.state = GroupState.STABLE
        return group
