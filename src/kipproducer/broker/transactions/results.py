"""What the coordinator's API methods return (the handlers turn them into responses)."""

from __future__ import annotations

from dataclasses import dataclass

from .state import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TopicPartition


@dataclass(frozen=True, slots=True)
class InitResult:
    error_code: int
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """One DescribeTransactions entry (error_code NONE or TRANSACTIONAL_ID_NOT_FOUND...)."""

    transactional_id: str
    error_code: int
    state: str = ""
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    timeout_ms: int = 0
    start_ms: int = -1
    partitions: frozenset[TopicPartition] = frozenset()


@dataclass(frozen=True, slots=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str
