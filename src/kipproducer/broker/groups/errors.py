"""Kafka error codes the group coordinator answers with.

Plain ints, spelled out here rather than imported from the protocol package (whose import pulls
in every message schema); a test checks them against kio's ``ErrorCode``.
"""

from __future__ import annotations

NONE = 0
UNKNOWN_SERVER_ERROR = -1
OFFSET_METADATA_TOO_LARGE = 12
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69
GROUP_SUBSCRIBED_TO_TOPIC = 86
MEMBER_ID_REQUIRED = 79
GROUP_MAX_SIZE_REACHED = 81
FENCED_INSTANCE_ID = 82
UNSTABLE_OFFSET_COMMIT = 88

ERROR_NAMES: dict[int, str] = {
    code: name for name, code in list(globals().items()) if name.isupper() and isinstance(code, int)
}


def error_name(code: int) -> str:
    """``"REBALANCE_IN_PROGRESS"`` for 27; for log messages."""
    return ERROR_NAMES.get(code, f"error {code}")
