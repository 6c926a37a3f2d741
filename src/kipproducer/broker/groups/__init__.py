"""The group coordinator of the reference broker: classic group membership and offsets.

``GroupCoordinator`` implements JoinGroup / SyncGroup / Heartbeat / LeaveGroup / OffsetCommit /
OffsetFetch / ListGroups / DescribeGroups / DeleteGroups over plain Python values; the broker's
request handlers translate requests and responses. Error codes are the ints in ``errors``.
"""

from . import errors
from .coordinator import GroupCoordinator
from .group import GroupState
from .results import (
    NO_COMMITTED_OFFSET,
    GroupDescription,
    GroupOverview,
    JoinedMember,
    JoinResult,
    LeaveResult,
    MemberDescription,
    MemberLeaveResult,
    OffsetAndMetadata,
    SyncResult,
)

__all__ = [
    "NO_COMMITTED_OFFSET",
    "GroupCoordinator",
    "GroupDescription",
    "GroupOverview",
    "GroupState",
    "JoinResult",
    "JoinedMember",
    "LeaveResult",
    "MemberDescription",
    "MemberLeaveResult",
    "OffsetAndMetadata",
    "SyncResult",
    "errors",
]
