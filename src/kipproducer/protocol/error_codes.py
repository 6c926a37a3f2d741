"""Kafka error codes: named constants, name lookup and the retriable flag.

The table is taken from kio's ``ErrorCode`` enum (every code Apache Kafka defines, with
its retriable flag) plus the two codes of the kipproducer wire extensions
(docs/protocol.md §5). Decoded messages carry error codes as plain ints; this module is
how code turns them into names and decides whether to retry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from types import MappingProxyType
from typing import Final

from kio.schema.errors import ErrorCode as _KioErrorCode


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    code: int
    name: str
    retriable: bool


# Codes the project refers to by name. They are spelled out (rather than generated) so
# that type checkers and readers see them; tests check each against the kio table.
UNKNOWN_SERVER_ERROR: Final = -1
NONE: Final = 0
OFFSET_OUT_OF_RANGE: Final = 1
CORRUPT_MESSAGE: Final = 2
UNKNOWN_TOPIC_OR_PARTITION: Final = 3
INVALID_FETCH_SIZE: Final = 4
LEADER_NOT_AVAILABLE: Final = 5
NOT_LEADER_OR_FOLLOWER: Final = 6
REQUEST_TIMED_OUT: Final = 7
MESSAGE_TOO_LARGE: Final = 10
NETWORK_EXCEPTION: Final = 13
COORDINATOR_LOAD_IN_PROGRESS: Final = 14
COORDINATOR_NOT_AVAILABLE: Final = 15
NOT_COORDINATOR: Final = 16
INVALID_TOPIC_EXCEPTION: Final = 17
RECORD_LIST_TOO_LARGE: Final = 18
NOT_ENOUGH_REPLICAS: Final = 19
NOT_ENOUGH_REPLICAS_AFTER_APPEND: Final = 20
INVALID_REQUIRED_ACKS: Final = 21
ILLEGAL_GENERATION: Final = 22
INCONSISTENT_GROUP_PROTOCOL: Final = 23
INVALID_GROUP_ID: Final = 24
UNKNOWN_MEMBER_ID: Final = 25
INVALID_SESSION_TIMEOUT: Final = 26
REBALANCE_IN_PROGRESS: Final = 27
TOPIC_AUTHORIZATION_FAILED: Final = 29
GROUP_AUTHORIZATION_FAILED: Final = 30
CLUSTER_AUTHORIZATION_FAILED: Final = 31
INVALID_TIMESTAMP: Final = 32
UNSUPPORTED_VERSION: Final = 35
TOPIC_ALREADY_EXISTS: Final = 36
INVALID_PARTITIONS: Final = 37
INVALID_REPLICATION_FACTOR: Final = 38
INVALID_REQUEST: Final = 42
POLICY_VIOLATION: Final = 44
OUT_OF_ORDER_SEQUENCE_NUMBER: Final = 45
DUPLICATE_SEQUENCE_NUMBER: Final = 46
INVALID_PRODUCER_EPOCH: Final = 47
INVALID_TXN_STATE: Final = 48
INVALID_PRODUCER_ID_MAPPING: Final = 49
INVALID_TRANSACTION_TIMEOUT: Final = 50
CONCURRENT_TRANSACTIONS: Final = 51
TRANSACTION_COORDINATOR_FENCED: Final = 52
TRANSACTIONAL_ID_AUTHORIZATION_FAILED: Final = 53
OPERATION_NOT_ATTEMPTED: Final = 55
KAFKA_STORAGE_ERROR: Final = 56
UNKNOWN_PRODUCER_ID: Final = 59
UNSUPPORTED_COMPRESSION_TYPE: Final = 76
STALE_BROKER_EPOCH: Final = 77
MEMBER_ID_REQUIRED: Final = 79
GROUP_SUBSCRIBED_TO_TOPIC: Final = 86
INVALID_RECORD: Final = 87
UNSTABLE_OFFSET_COMMIT: Final = 88
PRODUCER_FENCED: Final = 90
UNKNOWN_TOPIC_ID: Final = 100
TRANSACTION_ABORTABLE: Final = 120

# kipproducer wire extensions (docs/protocol.md §5): codes no Kafka release uses.
INVALID_PRODUCE_OFFSET: Final = 10391
OFFSET_MISMATCH: Final = 10027

_EXTENSION_ERRORS: Final = (
    ErrorInfo(INVALID_PRODUCE_OFFSET, "INVALID_PRODUCE_OFFSET", False),
    ErrorInfo(OFFSET_MISMATCH, "OFFSET_MISMATCH", False),
)


def _build_table() -> dict[int, ErrorInfo]:
    table = {
        int(member.value): ErrorInfo(int(member.value), member.name.upper(), member.retriable)
        for member in _KioErrorCode
    }
    for info in _EXTENSION_ERRORS:
        table[info.code] = info
    return table


ERRORS: Final[Mapping[int, ErrorInfo]] = MappingProxyType(_build_table())
"""Every known error code → its name and retriable flag."""

_BY_NAME: Final = {info.name: info for info in ERRORS.values()}

KafkaErrorCode = IntEnum(  # type: ignore[misc]
    "KafkaErrorCode",
    {info.name: info.code for info in sorted(ERRORS.values(), key=lambda i: i.code)},
    module=__name__,
)
"""Every known code as an IntEnum member (``KafkaErrorCode.STALE_BROKER_EPOCH``). Handy for
logging and ``match``; decoded values stay plain ints, which compare equal to members."""


def error_info(code: int) -> ErrorInfo | None:
    """The table entry for ``code``, or None for a code this table does not know."""
    return ERRORS.get(code)


def error_name(code: int) -> str:
    """Upper-case name of ``code``; unknown codes read ``UNKNOWN_ERROR_<code>``."""
    info = ERRORS.get(code)
    return info.name if info is not None else f"UNKNOWN_ERROR_{code}"


def error_code(name: str) -> int:
    """The code for an error name, case-insensitive (``"offset_mismatch"`` → 10027).

    :raises KeyError: for a name that is not in the table.
    """
    try:
        return _BY_NAME[name.upper()].code
    except KeyError:
        raise KeyError(f"unknown Kafka error name {name!r}") from None


def is_retriable(code: int) -> bool:
    """Whether a client may retry after ``code``. Unknown codes are not retriable, as
    Java's ``Errors.forCode`` maps them to UNKNOWN_SERVER_ERROR."""
    info = ERRORS.get(code)
    return info.retriable if info is not None else False
