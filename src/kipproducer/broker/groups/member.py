"""One member of a classic group, as the coordinator sees it between requests."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from .results import JoinResult, SyncResult

Protocols = list[tuple[str, bytes]]


@dataclass(eq=False, slots=True)
class GroupMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    # (name, metadata) in the member's order of preference; the metadata is opaque
    protocols: Protocols
    assignment: bytes = b""
    # a JoinGroup / SyncGroup parked until the rebalance gets far enough
    join_future: asyncio.Future[JoinResult] | None = None
    sync_future: asyncio.Future[SyncResult] | None = None
    # joined during the current rebalance and has not received a JoinGroup response yet
    is_new: bool = False
    protocol_names: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        self.protocol_names = frozenset(name for name, _ in self.protocols)

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.join_future is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.sync_future is not None

    def set_protocols(self, protocols: Protocols) -> None:
        self.protocols = protocols
        self.protocol_names = frozenset(name for name, _ in protocols)

    def matches(self, protocols: Protocols) -> bool:
        """Same protocols, same order, same metadata: a rejoin that changes nothing."""
        return self.protocols == protocols

    def metadata(self, protocol_name: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol_name:
                return metadata
        raise ValueError(f"member {self.member_id} does not support protocol {protocol_name!r}")

    def preferred_protocol(self, candidates: set[str]) -> str:
        """The member's vote: its most preferred protocol among those every member supports."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def has_satisfied_heartbeat(self) -> bool:
        """Whether the member survives its session timer firing without a heartbeat.

        A member with a JoinGroup or SyncGroup parked is alive by definition (it cannot heartbeat
        while it waits), except a new member: it gets a separate, longer join deadline and is
        dropped when that passes, so clients that disconnected mid-join do not pile up.
        """
        if self.is_new:
            return False
        return self.is_awaiting_join or self.is_awaiting_sync

    def complete_join(self, result: JoinResult) -> bool:
        """Answer the parked JoinGroup, if any. Returns whether there was one."""
        future, self.join_future = self.join_future, None
        if future is None:
            return False
        if not future.done():
            future.set_result(result)
        return True

    def complete_sync(self, result: SyncResult) -> bool:
        future, self.sync_future = self.sync_future, None
        if future is None:
            return False
        if not future.done():
            future.set_result(result)
        return True


@dataclass(frozen=True, slots=True)
class JoinRequest:
    """The fields of a JoinGroup request the coordinator uses (any version)."""

    group_id: str
    member_id: str
    group_instance_id: str | None
    protocol_type: str
    protocols: Protocols
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str
    client_host: str
    require_known_member_id: bool
    skip_assignment_supported: bool
