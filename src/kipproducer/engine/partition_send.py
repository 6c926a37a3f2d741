"""One partition's send state, in one place: the engine asks the partition, the partition answers.

A ``PartitionSendState`` owns what happens to a (topic, partition)'s batches between the
accumulator's drain and their delivery report: the batches waiting (``pending``), out on a
connection (``in_flight``) and failed without a verdict (``failed``, resent in their original
order once nothing is in flight), the retry backoff, the KIP-27 chain a failed conditional batch
breaks, the units batches went out in (docs/protocol.md §9), and whether the broker will continue
the partition's sequence under the current producer id (``sequence_broken``).

Two facts stay where they are written, and are read through this object:

- the next sequence number and the last explicit offset, in the C ``PartitionState``
  (kipproducer._accumulator): the append and drain hot paths stamp them there, under the
  accumulator's lock, so this object holds no copy that could disagree;
- whether the partition is in the open transaction: that is the transaction's fact (the
  coordinator's AddPartitionsToTxn answer), kept by the TransactionManager;
  :meth:`PartitionSendState.may_send` asks it.

No I/O and no thread here: the engine's sender loop calls these on its event loop.
"""

from __future__ import annotations

import time
from collections import deque
from typing import TYPE_CHECKING, Any, Protocol

from kipproducer.protocol.wire_extensions import ProduceMode

if TYPE_CHECKING:
    from confluent_kafka import KafkaError

    from kipproducer._accumulator import PartitionState, RecordAccumulator
    from kipproducer.accumulator import ProducerBatch

# A failed conditional call: (its opaque, the offset after the failed batch, the error).
BrokenChain = tuple[Any, int, "KafkaError"]


def first_opaque(batch: ProducerBatch) -> Any:
    """The opaque of the call the batch's first records came from (a conditional call's
    batches share it)."""
    runs = batch.opaque_runs
    return runs[0][1] if runs else None


def continues(batch: ProducerBatch, chain: BrokenChain) -> bool:
    """Whether ``batch`` is the next part of the conditional call whose batch failed."""
    return (batch.produce_mode == ProduceMode.EXPECTED_OFFSETS
            and batch.base_offset == chain[1] and first_opaque(batch) is chain[0])


class TransactionGate(Protocol):
    """What a partition asks of the transaction (engine/transactions.py's TransactionManager):
    True when its batches may be sent now; otherwise the manager asks AddPartitionsToTxn for it
    (or purges, if the transaction is failing) and wakes the engine when that is settled."""

    def may_send(self, topic: str, partition: int) -> bool: ...


class PartitionSendState:
    """A partition's batches between the accumulator and their delivery report, and whether
    its sequence still holds. Attribute reads (``pending``, ``in_flight``, ``failed``,
    ``retry_at``, ``conn``) are the sender loop's hot path: plain slots, no properties."""

    __slots__ = ("topic", "partition", "pending", "in_flight", "failed", "retry_at", "conn",
                 "broken_chain", "units", "sequence_broken", "_acc", "_transaction", "_c_state")

    def __init__(self, topic: str, partition: int, acc: RecordAccumulator | None = None,
                 transaction: TransactionGate | None = None) -> None:
        self.topic = topic
        self.partition = partition
        self.pending: deque[ProducerBatch] = deque()    # drained, not sent, in order
        self.in_flight: deque[ProducerBatch] = deque()  # sent, no answer yet, in order
        self.failed: list[ProducerBatch] = []           # resent once in_flight is empty
        self.retry_at = 0.0                             # monotonic seconds
        self.conn: Any = None                           # the connection in_flight went out on
        # A conditional (KIP-27) batch failed for good: (its call's opaque, the offset after
        # it, the error). Later batches of the same call that continue it are not sent: they
        # expected to follow records that are not in the log.
        self.broken_chain: BrokenChain | None = None
        # id(first batch) -> batches of the unit it went out with (docs/protocol.md §9): a
        # retry sends exactly that unit again, so the broker recognises it as a duplicate.
        self.units: dict[int, int] = {}
        # The broker will not continue this partition's sequence under the current producer
        # id: its batches wait for a new id (or epoch), the other partitions' retries of
        # batches whose fate is unknown are resolved first (see Engine._unresolved).
        self.sequence_broken = False
        self._acc = acc
        self._transaction = transaction
        self._c_state: PartitionState | None = None

    def __repr__(self) -> str:
        return (f"PartitionSendState({self.topic}[{self.partition}]: {len(self.pending)} "
                f"pending, {len(self.in_flight)} in flight, {len(self.failed)} failed"
                f"{', sequence broken' if self.sequence_broken else ''})")

    # ---- the C side, read through ----------------------------------------------------------

    def _state(self) -> PartitionState:
        if self._c_state is None:
            if self._acc is None:
                raise LookupError(f"{self.topic}[{self.partition}] has no accumulator")
            self._c_state = self._acc.partition_state(self.topic, self.partition)
        return self._c_state

    @property
    def next_sequence(self) -> int:
        """The sequence number the next drained batch is stamped with (kept in C)."""
        return self._state().next_sequence

    @property
    def last_offset(self) -> int:
        """The last explicit offset appended (KIP-391/KIP-27; -1 for none; kept in C)."""
        return self._state().last_offset

    # ---- the transaction, asked ------------------------------------------------------------

    def may_send(self) -> bool:
        """Whether this partition's batches may be sent now: always without a transaction;
        in one, once the coordinator has added the partition (asking it has that done)."""
        transaction = self._transaction
        return transaction is None or transaction.may_send(self.topic, self.partition)

    # ---- batches -----------------------------------------------------------------------------

    def queue(self, batch: ProducerBatch) -> None:
        """A batch drained from the accumulator waits its turn, behind the others."""
        self.pending.append(batch)

    @property
    def waiting(self) -> bool:
        """Batches not sent yet or to be sent again."""
        return bool(self.pending or self.failed)

    def send(self, batch: ProducerBatch, conn: Any) -> None:
        """The head pending batch goes out on ``conn``."""
        self.pending.popleft()
        self.in_flight.append(batch)
        batch.attempts += 1
        self.conn = conn

    def leave_flight(self, batch: ProducerBatch) -> None:
        """Take an answered batch out of flight (answers come in order, so it is the first
        one, but after a lost connection)."""
        in_flight = self.in_flight
        if in_flight and in_flight[0] is batch:
            in_flight.popleft()
        elif batch in in_flight:
            in_flight.remove(batch)

    def settle(self, batch: ProducerBatch) -> None:
        """A batch has its verdict: out of flight, and its unit forgotten (a unit is
        remembered until then, for its retries)."""
        self.leave_flight(batch)
        if self.units:
            self.units.pop(id(batch), None)

    def retry_later(self, batch: ProducerBatch, backoff_s: float) -> None:
        """A batch failed without a verdict: it is sent again after ``backoff_s``, in sequence
        order with the other failed ones, once the partition has nothing in flight."""
        failed = self.failed
        failed.append(batch)
        failed.sort(key=lambda b: (b.base_sequence, b.created_ms))
        self.retry_at = time.monotonic() + backoff_s

    def back_off(self, seconds: float) -> None:
        """Send nothing of this partition for ``seconds`` (its leader is unreachable)."""
        self.retry_at = time.monotonic() + seconds

    def resend_failed(self, now: float) -> None:
        """Once nothing is in flight and the backoff has passed, the failed batches go back
        to the front of the queue, in their original order."""
        if self.failed and not self.in_flight and now >= self.retry_at:
            self.pending.extendleft(reversed(self.failed))
            self.failed.clear()

    def blocked(self, now: float) -> bool:
        """Nothing may be sent now: nothing waits, failed batches wait for the ones in flight,
        or the retry backoff runs."""
        return not self.pending or bool(self.failed) or now < self.retry_at

    @property
    def unresolved(self) -> bool:
        """Batches that went out and failed without a verdict (a lost connection, a timeout)
        while the sequence still holds: retried under the current producer id before a new
        one is taken, since they may already be in the log."""
        if self.sequence_broken:
            return False
        return bool(self.failed or (self.pending and self.pending[0].attempts > 0))

    # ---- the KIP-27 chain -----------------------------------------------------------------

    def continues_broken_chain(self, batch: ProducerBatch) -> bool:
        """Whether ``batch`` continues a conditional call whose earlier batch failed for good:
        it expected to follow records that are not in the log, so it must not be sent."""
        chain = self.broken_chain
        return chain is not None and continues(batch, chain)

    def conditional_settled(self, batch: ProducerBatch,
                            error: KafkaError | None) -> list[ProducerBatch]:
        """A conditional batch has its verdict. Delivered: the chain holds. Failed: the chain
        breaks after it, and the continuations already drained are taken off the queue and
        returned, to fail now (later ones fail when drained: continues_broken_chain)."""
        if error is None:
            self.broken_chain = None
            return []
        chain: BrokenChain = (first_opaque(batch), batch.base_offset + batch.record_count, error)
        taken = []
        for waiting in list(self.pending):
            if continues(waiting, chain):
                self.pending.remove(waiting)
                taken.append(waiting)
                chain = (chain[0], waiting.base_offset + waiting.record_count, chain[2])
        self.broken_chain = chain
        return taken

    # ---- the sequence ------------------------------------------------------------------------

    def break_sequence(self) -> None:
        """The broker will not continue this partition's sequence under the current producer
        id (OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID, a batch refused for good or
        purged after it was stamped)."""
        self.sequence_broken = True

    def new_producer(self) -> list[ProducerBatch]:
        """A new producer id or epoch: the sequence holds again (from 0, in C). Returns the
        batches not yet acknowledged (failed, then pending, oldest first); the engine gives
        them back to the accumulator to be re-stamped. Batches in flight stay: their answers
        come back under the id they were sent with."""
        batches = [*self.failed, *self.pending]
        self.failed.clear()
        self.pending.clear()
        self.sequence_broken = False
        return batches

    # ---- dropping --------------------------------------------------------------------------

    def take_pending(self) -> list[ProducerBatch]:
        """Every batch not sent yet, taken off the queue (a purge)."""
        batches = list(self.pending)
        self.pending.clear()
        return batches

    def drop_for_abort(self) -> list[ProducerBatch]:
        """Every batch not in flight, taken (a failing or aborted transaction). Batches that
        never went out give their sequence numbers back: the next one is the first of them,
        so no hole is left."""
        never_sent = [b.base_sequence for b in self.pending
                      if b.attempts == 0 and b.base_sequence >= 0]
        if never_sent:
            if self._acc is None:
                raise LookupError(f"{self.topic}[{self.partition}] has no accumulator")
            self._acc.set_next_sequence(self.topic, self.partition, min(never_sent))
        batches = [*self.failed, *self.pending]
        self.failed.clear()
        self.pending.clear()
        return batches

    def take_all(self) -> list[ProducerBatch]:
        """Every batch, in flight or not (the engine is failing everything)."""
        batches = [*self.in_flight, *self.failed, *self.pending]
        self.in_flight.clear()
        self.failed.clear()
        self.pending.clear()
        return batches

    def take_waiting(self, error: KafkaError | None,
                     expired: Any) -> list[ProducerBatch]:
        """Batches not in flight that fail now: all of them with ``error``, else those for
        which ``expired(batch)`` holds. A failed batch stays while others are in flight (it is
        resent, in order, after them)."""
        waiting = [*self.failed, *self.pending] if not self.in_flight else [*self.pending]
        taken = []
        for batch in waiting:
            if error is None and not expired(batch):
                continue
            if batch in self.failed:
                self.failed.remove(batch)
            else:
                self.pending.remove(batch)
            taken.append(batch)
        return taken
