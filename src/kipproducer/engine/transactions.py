"""The client side of Kafka transactions (KIP-98; the classic flow, or Transactions V2 of
KIP-890 where the cluster runs it, engine/txn_requests.py): the blocking calls of a
transactional Producer.

One :class:`TransactionManager` per transactional Producer, owned by the engine that sends its
records. Three parts, each using only the one before it:

* engine/txn_state.py: the state machine (librdkafka's states and error classes, the per-API
  error tables, the partitions of the open transaction, the epoch-bump flag), no I/O;
* engine/txn_requests.py: the coordinator's requests, on the engine's event loop;
* this module: confluent-kafka's calls (init_transactions(), begin, send_offsets, commit,
  abort) on the caller's thread, waiting for the requests, and the engine's two questions
  (:meth:`TransactionManager.may_send`, :meth:`TransactionManager.batch_failed`).

The manager imports no engine: the engine hands it :class:`EngineHooks` (narrow callables)
when it takes it over (``attach``), and the effects the machine returns are carried out
through them.

Abort: records not yet sent are dropped and reported with ``_PURGE_QUEUE`` (as librdkafka's
``rd_kafka_purge(QUEUE | ABORT_TXN)``; a dropped batch that never went out gives its sequence
numbers back), records in flight are waited for, then EndTxn(abort). When a batch that went
out failed (its partition's sequence may have a hole) or the broker lost the producer
(UNKNOWN_PRODUCER_ID), the abort then bumps the epoch with InitProducerId(current id and
epoch), as Kafka's Java client does (KIP-360): every partition's sequence restarts at 0. A
broker that refuses the bump (Tansu) is asked as on a restart (no id/epoch named), which
bumps the epoch as well.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from .cluster import Cluster
from .group_metadata import parse_group_metadata
from .txn_requests import CoordinatorRequests
from .txn_state import (
    PRODUCE_CLASSIC_MAX_VERSION,
    PRODUCE_V2_VERSION,
    Effect,
    SendDecision,
    TxnMachine,
    TxnState,
)

# TxnState: what the producer and producer groups compare the state with.
__all__ = ["EngineHooks", "TransactionManager", "TxnState"]

log = logging.getLogger("kipproducer.engine")


@dataclass(frozen=True)
class EngineHooks:
    """What the transaction manager needs of the engine that owns it."""
    # Run a coroutine on the event loop and wait for its result (caller's thread); raises
    # TimeoutError after the timeout (seconds).
    run: Callable[[Coroutine[Any, Any, Any], float], Any]
    # Call a function on the event loop, after what runs now (any thread).
    call_soon: Callable[[Callable[[], Any]], None]
    # Drop every record not in flight, reported with _PURGE_QUEUE (event loop).
    purge: Callable[[], int]
    # A fatal error: nothing more is sent, what waits fails with it (event loop).
    fail: Callable[[KafkaError], None]
    # Have the sender look at its partitions again (event loop).
    wake: Callable[[], None]
    # A new producer id / epoch: every batch not yet acknowledged is re-stamped (event loop).
    adopt_producer: Callable[[int, int], None]
    # The producer id and epoch, read from their one store (the accumulator's; any thread).
    producer: Callable[[], tuple[int, int]]
    cluster: Cluster


class TransactionManager:
    def __init__(self, transactional_id: str, timeout_ms: int,
                 retry_backoff_ms: int = 100, protocol: str = "auto") -> None:
        self.transactional_id = transactional_id
        self.timeout_ms = timeout_ms
        self.protocol = protocol  # kip.transaction.protocol: auto, classic or v2
        self.retry_backoff_s = retry_backoff_ms / 1000
        self.machine = TxnMachine()
        self._hooks: EngineHooks | None = None
        self._requests: CoordinatorRequests | None = None

    def attach(self, hooks: EngineHooks) -> None:
        """The engine that sends this producer's records takes the manager over."""
        self._hooks = hooks
        self._requests = CoordinatorRequests(
            self.transactional_id, self.timeout_ms, self.retry_backoff_s, self.machine,
            hooks.cluster, hooks.producer, hooks.adopt_producer, self._apply, self.protocol)

    # ---- what others read ---------------------------------------------------------------------

    @property
    def state(self) -> TxnState:
        return self.machine.state

    @property
    def sending(self) -> bool:
        """Whether batches may go out (a failing or aborting transaction sends no more)."""
        return self.machine.sending

    @property
    def producer_id(self) -> int:
        return self._producer()[0]

    @property
    def producer_epoch(self) -> int:
        return self._producer()[1]

    def _producer(self) -> tuple[int, int]:
        return (-1, -1) if self._hooks is None else self._hooks.producer()

    def produce_versions(self, lowest: int, highest: int) -> tuple[int, int]:
        """The (lowest, highest) Produce version for this producer's batches, within the
        engine's: V2 needs v12 (the leader adds the partition), the classic flow must stay
        below it (a v12 would have the leader add it outside the classic flow)."""
        if self.machine.v2:
            return max(lowest, PRODUCE_V2_VERSION), PRODUCE_V2_VERSION
        return lowest, min(highest, PRODUCE_CLASSIC_MAX_VERSION)

    def require(self, *states: TxnState) -> None:
        self.machine.require(*states)

    def check_produce(self) -> None:
        self.machine.check_produce()

    def produce_error(self) -> KafkaError | None:
        return self.machine.produce_error()

    # ---- effects --------------------------------------------------------------------------------

    def _engine(self) -> tuple[EngineHooks, CoordinatorRequests]:
        if self._hooks is None or self._requests is None:
            raise KafkaException(KafkaError(KafkaError._STATE, "the transaction manager has "
                                            "no engine (init_transactions() starts it)"))
        return self._hooks, self._requests

    def _apply(self, effects: tuple[Effect, ...]) -> None:
        """Carry out what the machine decided (event loop)."""
        if not effects:
            return
        hooks = self._engine()[0]
        for effect in effects:
            if effect is Effect.WAKE:
                hooks.wake()
                continue
            error = self.machine.error
            assert error is not None  # PURGE and FAIL come from a failure, which sets it
            if effect is Effect.PURGE:
                log.error("transaction failed: %s", error.str())
                # Later in the loop, not here: this may run inside the engine's report
                # path, which may be walking the very queues a purge empties.
                hooks.call_soon(hooks.purge)
            else:
                log.error("fatal transaction error: %s", error.str())
                hooks.fail(error)

    # ---- the engine's side (event loop) -------------------------------------------------------

    def may_send(self, topic: str, partition: int) -> bool:
        """True when a batch of this partition may be sent now; otherwise the partition is
        queued for AddPartitionsToTxn (the engine is woken when it is registered)."""
        return self._decided(self.machine.may_send(topic, partition))

    def _decided(self, decision: SendDecision) -> bool:
        if decision is SendDecision.SEND:
            return True
        if decision is SendDecision.ASK:
            self._engine()[1].ensure_adding()
        elif decision is SendDecision.PURGE:
            hooks = self._engine()[0]
            hooks.call_soon(hooks.purge)  # later in the loop: the engine walks its queues
        return False

    def batch_failed(self, record_count: int, sequenced: bool, error: KafkaError) -> None:
        """A batch of this transaction was reported failed (see TxnMachine.batch_failed)."""
        self._apply(self.machine.batch_failed(record_count, sequenced, error))

    # ---- the blocking calls (caller's thread) -------------------------------------------------

    def records_failed(self, record_count: int, error: KafkaError) -> None:
        """Records of this transaction failed on the client's side (the stock emulation's key
        conditions: refused against its index, or landed where the index did not end): as a
        failed batch whose records reached the log or never left, the transaction must be
        aborted (no epoch bump: no sequence was lost)."""
        machine = self.machine
        self._run(self._on_loop(lambda: self._apply(
            machine.batch_failed(record_count, False, error))), self._deadline(None),
            "a failed key condition")

    def holds(self, topic: str, partition: int) -> bool:
        """Whether the open transaction has (or is adding) the partition."""
        key = (topic, partition)
        return key in self.machine.registered or key in self.machine.wanted

    def init(self, timeout: float | None) -> None:
        self.require(TxnState.INIT)
        deadline = self._deadline(timeout)
        requests = self._engine()[1]
        self._run(requests.init_producer_id(deadline, bump=False), deadline,
                  "init_transactions")
        self.machine.initialised()

    def resume(self, producer_id: int, producer_epoch: int) -> None:
        """Take over a transaction another producer began and left open (two-phase commit:
        the process that wrote the records is gone, this one ends the transaction). No
        InitProducerId: that would abort it. The coordinator checks the id and epoch on
        EndTxn (PRODUCER_FENCED when the transaction was aborted meanwhile, NONE for a
        transaction this id and epoch already committed, so a second commit is harmless).
        Only commit() or abort() may follow."""
        self.require(TxnState.INIT)
        if producer_id < 0 or producer_epoch < 0:
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG, "resume: producer id "
                                            "and epoch must be >= 0"))
        hooks = self._engine()[0]
        self._run(self._on_loop(lambda: hooks.adopt_producer(producer_id, producer_epoch)),
                  self._deadline(None), "resume_transaction")
        self.machine.resume()

    def begin(self) -> None:
        self.machine.begin()

    def register(self, topic: str, partition: int, timeout: float | None) -> None:
        """Add a partition to the open transaction without a record (AddPartitionsToTxn):
        its marker then takes one offset of it. The stock-cluster emulation writes a gap of
        exactly one offset this way (an empty aborted transaction), which librdkafka, adding
        a partition only with a record, cannot. Under Transactions V2 as well: there a
        partition joins with its first Produce, so one without a record still needs this
        request."""
        self.require(TxnState.IN_TRANSACTION)
        deadline = self._deadline(timeout)
        requests = self._engine()[1]

        async def add() -> None:
            self._decided(self.machine.ask_to_add(topic, partition))
            await requests.settle_adding()

        self._run(add(), deadline, "register a partition")
        if (topic, partition) not in self.machine.registered:
            raise KafkaException(self.machine.error or KafkaError(
                KafkaError._STATE, f"{topic}[{partition}] was not added to the transaction"))

    def send_offsets(self, positions: Iterable[Any], group_metadata: object,
                     timeout: float | None) -> None:
        try:
            group = parse_group_metadata(group_metadata)
        except (TypeError, ValueError) as exc:
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG, str(exc))) from None
        offsets = _valid_offsets(positions)
        self.require(TxnState.IN_TRANSACTION)
        if not offsets:
            return  # librdkafka: nothing to commit, nothing sent
        deadline = self._deadline(timeout)
        requests = self._engine()[1]
        self._run(requests.send_offsets(group, offsets, deadline), deadline,
                  "send_offsets_to_transaction")

    def commit(self, timeout: float | None, flush: Callable[[float], int]) -> None:
        machine = self.machine
        machine.begin_commit()
        deadline = self._deadline(timeout)
        left = flush(max(deadline - time.monotonic(), 0))
        failed = machine.flushed_for_commit(left)
        if failed is not None:
            self._run(self._on_loop(lambda: self._apply(machine.fail_abortable(failed))),
                      deadline, "commit_transaction")
            raise KafkaException(machine.error or failed)
        if machine.end_txn_owed:
            requests = self._engine()[1]
            self._run(requests.end_txn(True, deadline), deadline, "commit_transaction")
        machine.committed()

    def abort(self, timeout: float | None, flush: Callable[[float], int]) -> None:
        machine = self.machine
        machine.begin_abort()
        deadline = self._deadline(timeout)
        hooks, requests = self._engine()
        self._run(self._on_loop(hooks.purge), deadline, "abort_transaction")
        left = flush(max(deadline - time.monotonic(), 0))
        if left:
            raise KafkaException(KafkaError(
                KafkaError._TIMED_OUT, f"Failed to abort: {left} message(s) in flight did "
                "not come back in time", retriable=True))
        # An AddPartitionsToTxn still out may register a partition: its answer first.
        self._run(requests.settle_adding(), deadline, "abort_transaction")
        if machine.end_txn_owed:
            try:
                self._run(requests.end_txn(False, deadline), deadline, "abort_transaction")
            except KafkaException as exc:
                # The coordinator lost the producer: the epoch bump below starts over.
                if not machine.abort_end_failed(exc.args[0]):
                    raise
            machine.abort_ended()
        if machine.needs_epoch_bump:
            # KIP-360, after the abort as Kafka's client does it: the coordinator bumps the
            # epoch of the now idle transactional id, and every partition's sequence
            # restarts at 0 (the sequence holes of dropped or failed batches are gone).
            self._run(requests.init_producer_id(deadline, bump=True), deadline,
                      "abort_transaction")
        machine.aborted()

    def _deadline(self, timeout: float | None) -> float:
        if timeout is None or timeout < 0:
            # confluent-kafka passes -1 for no timeout, and librdkafka then uses
            # transaction.timeout.ms (rd_kafka_txn_curr_api_req).
            timeout = self.timeout_ms / 1000
        return time.monotonic() + timeout

    def _run(self, coro: Coroutine[Any, Any, Any], deadline: float, what: str) -> Any:
        try:
            hooks = self._engine()[0]
        except KafkaException:
            coro.close()
            raise
        try:
            return hooks.run(coro, max(deadline - time.monotonic(), 0) + 5)
        except TimeoutError:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"{what} timed out",
                                            retriable=True)) from None

    @staticmethod
    async def _on_loop(fn: Callable[[], Any]) -> Any:
        return fn()


def _valid_offsets(positions: Iterable[Any]) -> dict[str, list[tuple[int, int, int,
                                                                     str | None]]]:
    """confluent TopicPartitions -> {topic: [(partition, offset, leader epoch, metadata)]},
    without the ones that have no valid offset (librdkafka skips those)."""
    if positions is None:
        raise KafkaException(KafkaError(KafkaError._INVALID_ARG, "positions must be a list "
                                        "of TopicPartition"))
    out: dict[str, list[tuple[int, int, int, str | None]]] = {}
    for tp in positions:
        offset = getattr(tp, "offset", None)
        if not isinstance(offset, int) or offset < 0:
            continue
        epoch = getattr(tp, "leader_epoch", None)
        metadata = getattr(tp, "metadata", None)
        if metadata is not None and not metadata.endswith("\0"):
            # As librdkafka sends it from confluent-kafka (which passes the C string with its
            # NUL, and reads metadata back as a C string): a commit without the NUL comes back
            # from confluent's committed() with bytes past its end.
            metadata += "\0"
        out.setdefault(tp.topic, []).append(
            (tp.partition, offset, -1 if epoch is None else epoch, metadata))
    return out

