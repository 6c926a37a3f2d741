"""The group coordinator of the reference broker: classic group membership and offsets.

``GroupCoordinator`` implements JoinGroup / SyncGroup / Heartbeat / LeaveGroup / OffsetCommit /
TxnOffsetCommit / OffsetFetch / ListGroups / DescribeGroups / DeleteGroups over plain Python
values (and ``complete_transaction`` for the transaction coordinator); the broker's
request handlers translate requests and responses. Error codes are the protocol layer's
(``kipproducer.protocol.error_codes``).
"""


from .coordinator import GroupCoordinator, GroupCoordinatorNotActive
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
    "GroupCoordinatorNotActive",
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
]
