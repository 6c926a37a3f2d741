"""A transactional id's state as Kafka's transaction coordinator keeps it (KIP-98, TV1).

``TransactionMetadata`` is immutable: every change builds the next value with
:meth:`TransactionMetadata.transit`, which refuses a transition Kafka's state machine does not
allow. The coordinator writes the next value durably and only then installs it, so memory never
runs ahead of the disk. ``to_json``/``from_json`` are the stored form (see store.py).

States (``TransactionState.scala``): Empty (no transaction), Ongoing (partitions or groups
added), PrepareCommit / PrepareAbort (the decision is durable, markers are being written),
CompleteCommit / CompleteAbort (done), Dead (being expired), PrepareEpochFence (an Ongoing
transaction is being aborted with a bumped epoch; never stored, the abort is stored as
PrepareAbort).
"""

from __future__ import annotations

import dataclasses
import enum
import json
from dataclasses import dataclass, field
from typing import Any, Final

NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1
MAX_EPOCH: Final = 2**15 - 1
RECORD_VERSION: Final = 1

TopicPartition = tuple[str, int]


class TxnState(enum.Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"

    @classmethod
    def by_name(cls, name: str) -> TxnState | None:
        """The state Kafka calls ``name`` (DescribeTransactions / ListTransactions)."""
        try:
            return cls(name)
        except ValueError:
            return None


S = TxnState

#: Kafka's TransactionState.validPreviousStates: the states each state may be entered from.
VALID_PREVIOUS: Final[dict[TxnState, frozenset[TxnState]]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}

#: States in which a transaction's markers are being (or must still be) written.
PREPARING: Final = frozenset({S.PREPARE_COMMIT, S.PREPARE_ABORT})
#: States without an open transaction: a new one may start, the id may expire.
IDLE: Final = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})


class IllegalTransition(RuntimeError):
    """A transition the state machine forbids: a coordinator bug, never a client error."""


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka keeps one epoch in reserve so that fencing an Ongoing transaction can still bump
    it; past that the coordinator hands out a new producer id (KIP-360)."""
    return epoch >= MAX_EPOCH - 1


@dataclass(frozen=True)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    update_ms: int
    last_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    partitions: frozenset[TopicPartition] = field(default_factory=frozenset)
    groups: frozenset[str] = field(default_factory=frozenset)
    start_ms: int = -1
    coordinator_epoch: int = 0

    def transit(self, state: TxnState, **changes: Any) -> TransactionMetadata:
        """The next value, in ``state``; raises IllegalTransition when Kafka forbids it."""
        if self.state not in VALID_PREVIOUS[state]:
            raise IllegalTransition(
                f"transactional id {self.transactional_id!r}: {self.state.value} -> "
                f"{state.value} is not a valid transition"
            )
        return dataclasses.replace(self, state=state, **changes)

    @property
    def is_epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    # -- stored form -----------------------------------------------------------------------------

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "version": RECORD_VERSION,
                "state": self.state.value,
                "producer_id": self.producer_id,
                "last_producer_id": self.last_producer_id,
                "producer_epoch": self.producer_epoch,
                "last_producer_epoch": self.last_producer_epoch,
                "timeout_ms": self.timeout_ms,
                "partitions": sorted([topic, partition] for topic, partition in self.partitions),
                "groups": sorted(self.groups),
                "start_ms": self.start_ms,
                "update_ms": self.update_ms,
                "coordinator_epoch": self.coordinator_epoch,
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def from_json(cls, transactional_id: str, data: bytes) -> TransactionMetadata:
        """Raises ValueError for a value this version cannot read."""
        try:
            doc = json.loads(data)
            if doc.get("version") != RECORD_VERSION:
                raise ValueError(f"unknown record version {doc.get('version')!r}")
            return cls(
                transactional_id=transactional_id,
                producer_id=int(doc["producer_id"]),
                producer_epoch=int(doc["producer_epoch"]),
                timeout_ms=int(doc["timeout_ms"]),
                state=TxnState(doc["state"]),
                update_ms=int(doc["update_ms"]),
                last_producer_id=int(doc["last_producer_id"]),
                last_producer_epoch=int(doc["last_producer_epoch"]),
                partitions=frozenset((str(t), int(p)) for t, p in doc["partitions"]),
                groups=frozenset(str(g) for g in doc["groups"]),
                start_ms=int(doc["start_ms"]),
                coordinator_epoch=int(doc["coordinator_epoch"]),
            )
        except (KeyError, TypeError, AttributeError, json.JSONDecodeError) as exc:
            raise ValueError(f"malformed transaction record: {exc}") from exc


# -- InitProducerId's epoch rules (TransactionMetadata.scala) ---------------------------------


def is_valid_producer_id(current: TransactionMetadata, producer_id: int, epoch: int) -> bool:
    """Kafka's isValidProducerId for an InitProducerId that names its producer id/epoch: the
    id has no epoch yet (new, or expired and recreated), the id matches, or it is a retry of
    the call that rotated an exhausted producer id to a new one."""
    return (current.producer_epoch == NO_PRODUCER_EPOCH
            or producer_id == current.producer_id
            or (producer_id == current.last_producer_id and is_epoch_exhausted(epoch)))


def bump_epoch(current: TransactionMetadata, expected_epoch: int | None) -> tuple[int, int] | None:
    """Kafka's prepareIncrementProducerEpoch: (epoch, last epoch), or None (PRODUCER_FENCED)."""
    bumped = current.producer_epoch + 1
    if expected_epoch is None:
        return bumped, NO_PRODUCER_EPOCH  # a new producer instance: nobody may retry
    if current.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == current.producer_epoch:
        return bumped, current.producer_epoch
    if expected_epoch == current.last_producer_epoch:
        # A retry of a bump that succeeded: the same answer again, no second bump.
        return current.producer_epoch, current.last_producer_epoch
    return None
