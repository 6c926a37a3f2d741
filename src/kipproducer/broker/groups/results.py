"""Plain values the coordinator hands back; the request handlers turn them into responses."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

NO_GENERATION = -1
NO_LEADER_EPOCH = -1
NO_OFFSET = -1

TopicPartition = tuple[str, int]


class JoinedMember(NamedTuple):
    """One entry of the member list the leader gets in its JoinGroup response."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResult:
    """What a JoinGroup request gets.

    ``members`` is non-empty only for the leader (or for a static leader told to skip the
    assignment, ``skip_assignment``, JoinGroup v9+). ``protocol_type``/``protocol_name`` are None
    on errors (JoinGroup v7+ carries both; older versions only the name).
    """

    error_code: int
    member_id: str
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    members: list[JoinedMember] = field(default_factory=list)
    skip_assignment: bool = False

    @classmethod
    def failure(cls, error_code: int, member_id: str) -> JoinResult:
        return cls(error_code=error_code, member_id=member_id)


@dataclass(frozen=True, slots=True)
class SyncResult:
    """What a SyncGroup request gets: the member's assignment for the current generation."""

    error_code: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


class MemberLeaveResult(NamedTuple):
    member_id: str
    group_instance_id: str | None
    error_code: int


class LeaveResult(NamedTuple):
    """Top-level error (COORDINATOR_NOT_AVAILABLE, UNKNOWN_MEMBER_ID for an unknown group...)
    and one entry per member named in the request."""

    error_code: int
    members: list[MemberLeaveResult]


class OffsetAndMetadata(NamedTuple):
    """A committed offset as OffsetFetch returns it; (-1, -1, "") when nothing is committed."""

    offset: int
    leader_epoch: int
    metadata: str


NO_COMMITTED_OFFSET = OffsetAndMetadata(NO_OFFSET, NO_LEADER_EPOCH, "")


class GroupOverview(NamedTuple):
    """One ListGroups entry. ``group_type`` is always "classic" (ListGroups v5)."""

    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"


class MemberDescription(NamedTuple):
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """One DescribeGroups entry, shaped like Kafka's group summary.

    Metadata, assignments and the protocol name are only filled in for a Stable group, as Kafka
    does. An unknown group is described with state "Dead" and no error (DescribeGroups v0-5);
    ``exists`` lets a v6+ handler answer GROUP_ID_NOT_FOUND instead.
    """

    error_code: int
    group_id: str
    state: str
    protocol_type: str = ""
    protocol_name: str = ""
    members: list[MemberDescription] = field(default_factory=list)
    exists: bool = True


def all_failed(partitions: Iterable[TopicPartition], error_code: int) -> dict[TopicPartition, int]:
    """The same error for every partition of an OffsetCommit."""
    return {tp: error_code for tp in partitions}
