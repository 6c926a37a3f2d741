"""Emulated key conditions inside the Producer's own transaction (docs/per-key-conditional.md,
"Inside a transaction").

Outside a transaction each emulated call is a transaction of the emulation's writer, which
aborts and tries again when its records did not land where its key index ends. Inside the
caller's transaction nothing can be tried again: the records go into that transaction, so they
must land exactly where the index said, and when they do not the transaction must be aborted.
What one open transaction wrote to a partition through calls with key conditions is held here
(:class:`PartitionTxnKeys`), and each such call's reports pass through a :class:`LandingCheck`
before they reach the caller.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError

from .._accumulator import BatchDelivery, ReportTarget
from ..errors import KEY_ABSENT
from ..protocol import error_codes as ec
from .key_index import PartitionKeys, key_bytes


@dataclass(slots=True)
class PartitionTxnKeys:
    """One partition in one open transaction: the committed key index as it was read when the
    transaction first conditioned on the partition, and the answers the transaction's own
    records will give once it commits. Those records land one after another from ``start``
    (the index's end), nothing else among them, or the transaction fails."""

    index: PartitionKeys
    start: int
    count: int = 0
    pending: dict[bytes, int] = field(default_factory=dict)  # key -> offset or KEY_ABSENT

    def answer(self, key: bytes) -> int:
        """The key's last offset as this transaction sees it (its own records first)."""
        return self.pending.get(key, self.index.answer(key))

    def take(self, keys: list, tombstones: list[bool]) -> int:
        """A call's records, to be written next: the offset its first one must land at."""
        first = self.start + self.count
        for i, key in enumerate(keys):
            if key is not None:
                self.pending[key_bytes(key)] = KEY_ABSENT if tombstones[i] else first + i
        self.count += len(keys)
        return first

    def committed(self) -> None:
        """The transaction committed: its answers go into the index."""
        for key, answer in self.pending.items():
            self.index.record(key, answer, answer == KEY_ABSENT)
            if self.index.dirty is not None:
                self.index.dirty[key] = answer

    @property
    def last(self) -> int:
        return self.start + self.count - 1


class LandingCheck:
    """The reports of one call's records of one partition (one batch of their own) in a
    transaction: each is passed on once it is checked to have landed where the transaction's
    key index said. A batch that landed elsewhere (another producer, or this transaction
    outside calls with key conditions, appended to the partition since the index was read)
    is reported failed instead, and ``fail(count, error)`` fails the transaction (it must be
    aborted). The engine reports a batch's records in order, one report target after the
    other, so one count over all of them says which record each report starts at."""

    def __init__(self, topic: str, partition: int, start: int, count: int,
                 fail: Callable[[int, KafkaError], None]) -> None:
        self._where = f"{topic}[{partition}]"
        self._start, self._next, self._count = start, start, count
        self._fail = fail
        self._error: KafkaError | None = None
        self._targets: dict[int, ReportTarget] = {}

    def target(self, inner: ReportTarget | None) -> ReportTarget:
        """The target to append a record with, in place of ``inner`` (None: no callback):
        always one with a callback, so that every record is checked."""
        key = id(inner)
        wrapped = self._targets.get(key)
        if wrapped is None:
            callback = None if inner is None else inner.callback
            per_record = inner is not None and inner.per_record and callback is not None
            wrapped = self._targets[key] = ReportTarget(
                lambda err, report: self._checked(callback, err, report), per_record)
        return wrapped

    def _checked(self, callback: Callable | None, err: Any, report: Any) -> None:
        count = len(report) if isinstance(report, BatchDelivery) else 1
        if err is None and self._error is None and report.offset() != self._next:
            self._error = KafkaError(
                ec.CONCURRENT_TRANSACTIONS,
                f"{self._where}: records with key conditions landed at offset "
                f"{report.offset()}, not {self._next} where this transaction's key index "
                "ends: another producer (or this transaction, outside calls with key "
                "conditions) appended there since the index was read; abort the transaction "
                "and try again", retriable=True, txn_requires_abort=True)
            self._fail(self._count, self._error)
        if err is None and self._error is not None:
            err = self._error
        self._next += count
        if callback is not None:
            callback(err, report)
