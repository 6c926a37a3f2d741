"""The client side of Kafka transactions (KIP-98, TV1) for the sending engine.

One :class:`TransactionManager` per transactional Producer. Its state machine and error
classes are librdkafka's (rdkafka_txnmgr.c), so the calls behave as confluent-kafka's:

    Init --init_transactions--> Ready --begin_transaction--> InTransaction
    InTransaction --commit_transaction--> BeginCommit (flush) --EndTxn(commit)--> Ready
    InTransaction / AbortableError --abort_transaction--> AbortingTransaction --> Ready
    any --fatal error--> FatalError (every later call raises it)

A call in the wrong state raises ``_STATE`` ("Operation not valid in state ..."); in
AbortableError it raises the transaction's error (``txn_requires_abort()``), in FatalError the
fatal one (``fatal()``). Errors are ``KafkaException(KafkaError)`` flagged as librdkafka flags
them; the per-API tables are ``_ADD_PARTITIONS``, ``_ADD_OFFSETS``, ``_TXN_OFFSET_COMMIT``,
``_END_TXN``, ``_INIT_PID`` and :meth:`TransactionManager.batch_failed` (docs/producer.md has
the table).

Protocol: FindCoordinator(key_type 1) -> InitProducerId(transactional_id,
transaction.timeout.ms; the current producer id and epoch when bumping the epoch, KIP-360) ->
AddPartitionsToTxn (v0-3; before a partition's first batch in the transaction, all partitions
waiting at that moment in one request) -> Produce (transactional_id set, every batch flagged
transactional) -> AddOffsetsToTxn + FindCoordinator(group) + TxnOffsetCommit (v3: member id,
generation, group instance id) -> EndTxn. The engine asks :meth:`may_send` before sending a
partition's batch; the network work runs on the engine's event loop, the blocking calls wait
for it on the caller's thread.

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

import asyncio
import enum
import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaError, KafkaException

from kipproducer.protocol import build_request
from kipproducer.protocol import error_codes as ec

from ..protocol.api_keys import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    END_TXN,
    FIND_COORDINATOR,
    INIT_PRODUCER_ID,
    TXN_OFFSET_COMMIT,
)
from .connection import BrokerConnection, BrokerConnectionError
from .group_metadata import GroupMetadata, parse_group_metadata

if TYPE_CHECKING:
    from .engine import Engine

log = logging.getLogger("kipproducer.engine")

GROUP_KEY, TRANSACTION_KEY = 0, 1
DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000


class TxnState(enum.Enum):
    # The values are librdkafka's state names, as its messages show them.
    INIT = "Init"
    READY = "Ready"
    IN_TRANSACTION = "InTransaction"
    BEGIN_COMMIT = "BeginCommit"
    ABORTING = "AbortingTransaction"
    ABORTABLE_ERROR = "AbortableError"
    FATAL_ERROR = "FatalError"


class Action(enum.Enum):
    RETRY = "retry"               # ask again after a backoff
    COORDINATOR = "coordinator"   # find the coordinator again, then ask again
    ABORTABLE = "abortable"       # the transaction must be aborted
    FATAL = "fatal"               # the producer is done


_FENCING = (ec.INVALID_PRODUCER_EPOCH, ec.PRODUCER_FENCED)
_COORDINATOR_MOVED = {ec.NOT_COORDINATOR: Action.COORDINATOR,
                      ec.COORDINATOR_NOT_AVAILABLE: Action.COORDINATOR}
_AUTH_FATAL = {ec.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: Action.FATAL,
               ec.CLUSTER_AUTHORIZATION_FAILED: Action.FATAL}
# Per API, the codes that are not ABORTABLE (librdkafka's default for the unlisted ones).
_ADD_PARTITIONS = {
    **_COORDINATOR_MOVED, **_AUTH_FATAL,
    ec.CONCURRENT_TRANSACTIONS: Action.RETRY, ec.COORDINATOR_LOAD_IN_PROGRESS: Action.RETRY,
    ec.UNKNOWN_TOPIC_OR_PARTITION: Action.RETRY,
    ec.INVALID_PRODUCER_EPOCH: Action.FATAL, ec.PRODUCER_FENCED: Action.FATAL,
    ec.INVALID_TXN_STATE: Action.FATAL,
}
_ADD_OFFSETS = {
    **_COORDINATOR_MOVED, **_AUTH_FATAL, ec.REQUEST_TIMED_OUT: Action.COORDINATOR,
    ec.UNKNOWN_TOPIC_OR_PARTITION: Action.RETRY, ec.COORDINATOR_LOAD_IN_PROGRESS: Action.RETRY,
    ec.CONCURRENT_TRANSACTIONS: Action.RETRY,
    ec.INVALID_PRODUCER_EPOCH: Action.FATAL, ec.PRODUCER_FENCED: Action.FATAL,
    ec.INVALID_TXN_STATE: Action.FATAL, ec.UNSUPPORTED_FOR_MESSAGE_FORMAT: Action.FATAL,
}
_TXN_OFFSET_COMMIT = {
    **_COORDINATOR_MOVED, **_AUTH_FATAL, ec.REQUEST_TIMED_OUT: Action.COORDINATOR,
    ec.CONCURRENT_TRANSACTIONS: Action.RETRY, ec.COORDINATOR_LOAD_IN_PROGRESS: Action.RETRY,
    ec.UNKNOWN_TOPIC_OR_PARTITION: Action.RETRY,
    ec.INVALID_PRODUCER_ID_MAPPING: Action.FATAL, ec.INVALID_PRODUCER_EPOCH: Action.FATAL,
    ec.PRODUCER_FENCED: Action.FATAL, ec.INVALID_TXN_STATE: Action.FATAL,
    ec.UNSUPPORTED_FOR_MESSAGE_FORMAT: Action.FATAL,
}
_END_TXN = {
    **_COORDINATOR_MOVED, **_AUTH_FATAL, ec.REQUEST_TIMED_OUT: Action.COORDINATOR,
    ec.COORDINATOR_LOAD_IN_PROGRESS: Action.RETRY, ec.CONCURRENT_TRANSACTIONS: Action.RETRY,
    ec.INVALID_PRODUCER_EPOCH: Action.FATAL, ec.PRODUCER_FENCED: Action.FATAL,
    ec.INVALID_TXN_STATE: Action.FATAL,
}
# InitProducerId: every error that is not retriable ends the producer (librdkafka's
# idempotence layer), fencing as _FENCED.
_INIT_PID = {**_COORDINATOR_MOVED, ec.COORDINATOR_LOAD_IN_PROGRESS: Action.RETRY,
             ec.CONCURRENT_TRANSACTIONS: Action.RETRY, ec.REQUEST_TIMED_OUT: Action.RETRY}
# The broker lost the producer's state: abortable, and the abort bumps the epoch (KIP-360).
_NEEDS_EPOCH_BUMP = (ec.UNKNOWN_PRODUCER_ID, ec.INVALID_PRODUCER_ID_MAPPING)
# Produce errors that end the producer rather than the transaction.
_PRODUCE_FATAL = (*_FENCING, ec.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                  ec.CLUSTER_AUTHORIZATION_FAILED)


def _init_pid_action(code: int) -> Action:
    found = _INIT_PID.get(code)
    if found is not None:
        return found
    return Action.RETRY if ec.is_retriable(code) else Action.FATAL


def _error_text(code: int) -> str:
    return KafkaError(code).str()


def fenced_error(context: str) -> KafkaError:
    return KafkaError(KafkaError._FENCED, f"{context}: Local: This instance has been fenced "
                      "by a newer instance", fatal=True)


class _Retry(Exception):
    """An answer that says: ask again (after ``backoff_s``; the coordinator first if
    ``find_coordinator``)."""

    def __init__(self, reason: str, backoff_s: float, find_coordinator: bool) -> None:
        super().__init__(reason)
        self.backoff_s = backoff_s
        self.find_coordinator = find_coordinator


class TransactionManager:
    def __init__(self, transactional_id: str, timeout_ms: int,
                 retry_backoff_ms: int = 100) -> None:
        self.transactional_id = transactional_id
        self.timeout_ms = timeout_ms
        self.retry_backoff_s = retry_backoff_ms / 1000
        self.engine: Engine | None = None
        self.state = TxnState.INIT
        self.error: KafkaError | None = None   # the abortable or fatal error of the state
        self.producer_id, self.producer_epoch = -1, -1
        self._coordinator: int | None = None
        # This transaction: partitions the coordinator knows, partitions waiting for
        # AddPartitionsToTxn, groups added with AddOffsetsToTxn.
        self.registered: set[tuple[str, int]] = set()
        self._wanted: set[tuple[str, int]] = set()
        self._adding: asyncio.Task | None = None
        self._groups: set[str] = set()
        # A request reached the coordinator whose fate is unknown (a lost answer): an
        # EndTxn is owed even if nothing was registered for sure.
        self._maybe_registered = False
        self._needs_epoch_bump = False
        self._failed_records = 0

    # ---- states -------------------------------------------------------------------------------

    @property
    def sending(self) -> bool:
        """Whether batches may go out (a failing or aborting transaction sends no more)."""
        return self.state in (TxnState.IN_TRANSACTION, TxnState.BEGIN_COMMIT)

    def require(self, *states: TxnState) -> None:
        """librdkafka's rd_kafka_txn_require_state: KafkaException unless in ``states``."""
        if self.state in states:
            return
        if self.state in (TxnState.FATAL_ERROR, TxnState.ABORTABLE_ERROR) and self.error:
            raise KafkaException(self.error)
        raise KafkaException(KafkaError(KafkaError._STATE,
                                        f"Operation not valid in state {self.state.value}"))

    def check_produce(self) -> None:
        """What librdkafka's produce() raises outside a transaction."""
        if self.state is TxnState.FATAL_ERROR:
            raise KafkaException(KafkaError(KafkaError._FATAL, "Unable to produce message: "
                                            "Local: Fatal error"))
        if self.state is not TxnState.IN_TRANSACTION:
            raise KafkaException(KafkaError(KafkaError._STATE, "Unable to produce message: "
                                            "Local: Erroneous state (not in a transaction: "
                                            f"state {self.state.value})"))

    def produce_error(self) -> KafkaError | None:
        """check_produce's error as a value (for produce_batch's per-message ``_error``)."""
        try:
            self.check_produce()
        except KafkaException as exc:
            return exc.args[0]
        return None

    def set_abortable(self, error: KafkaError, *, bump: bool = False) -> None:
        """The transaction failed: what waits is dropped, only abort_transaction() helps.
        Runs on the event loop. The first error is the one reported (librdkafka)."""
        if bump:
            self._needs_epoch_bump = True
        if self.state not in (TxnState.IN_TRANSACTION, TxnState.BEGIN_COMMIT):
            return  # aborting already, or fatal: nothing to add
        log.error("transaction failed in state %s: %s", self.state.value, error.str())
        self.error = KafkaError(error.code(), error.str(), txn_requires_abort=True)
        self.state = TxnState.ABORTABLE_ERROR
        if self.engine is not None:
            # Later in the loop, not here: this runs inside the engine's report path, which
            # may be walking the very queues a purge empties.
            self.engine.call_soon(self.engine.purge_transaction)

    def set_fatal(self, error: KafkaError) -> None:
        if self.state is TxnState.FATAL_ERROR:
            return
        log.error("fatal transaction error: %s", error.str())
        if not error.fatal():
            error = KafkaError(error.code(), error.str(), fatal=True)
        self.error = error
        self.state = TxnState.FATAL_ERROR
        if self.engine is not None:
            self.engine.fail_transactional(error)

    def _new_transaction(self) -> None:
        self.registered.clear()
        self._wanted.clear()
        self._groups.clear()
        self._maybe_registered = False
        self._failed_records = 0
        self.error = None

    # ---- the engine's side (event loop) -------------------------------------------------------

    def may_send(self, topic: str, partition: int) -> bool:
        """True when a batch of this partition may be sent now; otherwise the partition is
        queued for AddPartitionsToTxn (the engine is woken when it is registered)."""
        if not self.sending:
            if (self.state in (TxnState.ABORTABLE_ERROR, TxnState.ABORTING)
                    and self.engine is not None):
                # A record that slipped in while the transaction failed: dropped too (later
                # in the loop: the engine is walking its queues now).
                self.engine.call_soon(self.engine.purge_transaction)
            return False
        key = (topic, partition)
        if key in self.registered:
            return True
        if key not in self._wanted:
            self._wanted.add(key)
            if self._adding is None or self._adding.done():
                self._adding = asyncio.get_running_loop().create_task(self._add_partitions())
        return False

    def batch_failed(self, record_count: int, sequenced: bool, error: KafkaError) -> None:
        """A batch of this transaction was reported failed (librdkafka: the transaction
        becomes abortable; fencing is fatal)."""
        self._failed_records += record_count
        if sequenced:
            # Its sequence numbers never reached the log: the partition's sequence has a hole
            # that only a new epoch closes.
            self._needs_epoch_bump = True
        code = error.code()
        if code in _PRODUCE_FATAL:
            self.set_fatal(fenced_error("Failed to produce") if code in _FENCING else
                           KafkaError(code, f"Failed to produce: {error.str()}", fatal=True))
        elif code not in (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT):
            self.set_abortable(error, bump=sequenced or code in _NEEDS_EPOCH_BUMP)

    async def _add_partitions(self) -> None:
        deadline = time.monotonic() + self.timeout_ms / 1000
        while self._wanted and self.sending:
            asking = sorted(self._wanted)
            try:
                await self._add_partitions_once(asking)
                if self.engine is not None:
                    self.engine.wake_sender()  # their batches may go now
            except _Retry as retry:
                if time.monotonic() > deadline:
                    self.set_abortable(KafkaError(
                        KafkaError._TIMED_OUT, f"Failed to add partitions to transaction "
                        f"within transaction.timeout.ms: {retry}"))
                    break
                if retry.find_coordinator:
                    self._coordinator = None
                await asyncio.sleep(retry.backoff_s)
            except KafkaException as exc:  # fatal (set already) or a broker that cannot
                error = exc.args[0]
                if error.fatal():
                    self.set_fatal(error)
                else:
                    self.set_abortable(error)
                break
            except Exception as exc:  # a bug: fail the transaction rather than hang it
                log.exception("AddPartitionsToTxn failed")
                self.set_abortable(KafkaError(KafkaError._FAIL, f"AddPartitionsToTxn: {exc!r}"))
                break
        self._wanted.clear()
        if self.engine is not None:
            self.engine.wake_sender()

    async def _add_partitions_once(self, asking: list[tuple[str, int]]) -> None:
        conn = await self._coordinator_connection()
        version = self._version(conn, ADD_PARTITIONS_TO_TXN, 3)
        topics: dict[str, list[int]] = {}
        for topic, partition in asking:
            topics.setdefault(topic, []).append(partition)
        # v0-3 (the clients' versions; v4+ is for brokers): the schema names these fields
        # "v3_and_below_*".
        fields = {"v3_and_below_transactional_id": self.transactional_id,
                  "v3_and_below_producer_id": self.producer_id,
                  "v3_and_below_producer_epoch": self.producer_epoch,
                  "v3_and_below_topics": [{"name": t, "partitions": p}
                                          for t, p in topics.items()]}
        response = await self._ask(conn, ADD_PARTITIONS_TO_TXN, version, fields,
                                   maybe_registers=True)
        results = response.results_by_topic_v3_and_below
        retry: _Retry | None = None
        abortable: KafkaError | None = None
        for topic in results:
            for result in topic.results_by_partition:
                key = (topic.name, result.partition_index)
                code = int(result.partition_error_code)
                if code == ec.NONE:
                    self.registered.add(key)
                    self._wanted.discard(key)
                    continue
                action = _ADD_PARTITIONS.get(code, Action.ABORTABLE)
                text = (f"Failed to add partition {key[0]} [{key[1]}] to transaction: "
                        f"{_error_text(code)}")
                if action is Action.FATAL:
                    self.set_fatal(fenced_error("Failed to add partitions to transaction")
                                   if code in _FENCING else KafkaError(code, text, fatal=True))
                    return
                if action is Action.ABORTABLE:
                    # OPERATION_NOT_ATTEMPTED names partitions skipped for another's error:
                    # the other error is the one to report.
                    if abortable is None or abortable.code() == ec.OPERATION_NOT_ATTEMPTED:
                        abortable = KafkaError(code, text)
                    continue
                backoff = 0.02 if code == ec.CONCURRENT_TRANSACTIONS else 0.5
                retry = _Retry(text, backoff, action is Action.COORDINATOR)
        if abortable is not None:
            self.set_abortable(abortable, bump=abortable.code() in _NEEDS_EPOCH_BUMP)
            return
        if retry is not None:
            raise retry

    # ---- the blocking calls (caller's thread) -------------------------------------------------

    def init(self, timeout: float | None) -> None:
        self.require(TxnState.INIT)
        deadline = self._deadline(timeout)
        self._run(self._init_producer_id(deadline, bump=False), deadline, "init_transactions")
        self.state = TxnState.READY

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
        engine = self.engine
        if engine is None:
            raise KafkaException(KafkaError(KafkaError._STATE, "resume: no engine"))
        self.producer_id, self.producer_epoch = producer_id, producer_epoch
        deadline = self._deadline(None)
        self._run(self._call_soon(lambda: engine.set_producer(producer_id, producer_epoch)),
                  deadline, "resume_transaction")
        self._new_transaction()
        # Which partitions the other producer added is unknown here: an EndTxn is owed.
        self._maybe_registered = True
        self.state = TxnState.BEGIN_COMMIT

    def begin(self) -> None:
        self.require(TxnState.READY)
        self._new_transaction()
        self.state = TxnState.IN_TRANSACTION

    def register(self, topic: str, partition: int, timeout: float | None) -> None:
        """Add a partition to the open transaction without a record (AddPartitionsToTxn):
        its marker then takes one offset of it. The stock-cluster emulation writes a gap of
        exactly one offset this way (an empty aborted transaction), which librdkafka, adding
        a partition only with a record, cannot."""
        self.require(TxnState.IN_TRANSACTION)
        deadline = self._deadline(timeout)

        async def add() -> None:
            self.may_send(topic, partition)
            await self._settle_adding()

        self._run(add(), deadline, "register a partition")
        if (topic, partition) not in self.registered:
            raise KafkaException(self.error or KafkaError(
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
        self._run(self._send_offsets(group, offsets, deadline), deadline,
                  "send_offsets_to_transaction")

    def commit(self, timeout: float | None, flush: Callable[[float], int]) -> None:
        self.require(TxnState.IN_TRANSACTION, TxnState.BEGIN_COMMIT)
        deadline = self._deadline(timeout)
        self.state = TxnState.BEGIN_COMMIT
        left = flush(max(deadline - time.monotonic(), 0))
        if self.state is not TxnState.BEGIN_COMMIT:
            self.require(TxnState.BEGIN_COMMIT)  # failed while flushing: raises its error
        if left:
            raise KafkaException(KafkaError(
                KafkaError._TIMED_OUT, "Failed to flush all outstanding messages within the "
                f"transaction timeout: {left} message(s) remaining", retriable=True))
        if self._failed_records:
            error = KafkaError(KafkaError._INCONSISTENT, f"{self._failed_records} message(s) "
                               "failed delivery (see individual delivery reports)",
                               txn_requires_abort=True)
            self._run(self._call_soon(lambda: self.set_abortable(error)), deadline,
                      "commit_transaction")
            raise KafkaException(self.error or error)
        if self.registered or self._groups or self._maybe_registered:
            self._run(self._end_txn(True, deadline), deadline, "commit_transaction")
        self.state = TxnState.READY

    def abort(self, timeout: float | None, flush: Callable[[float], int]) -> None:
        self.require(TxnState.IN_TRANSACTION, TxnState.BEGIN_COMMIT, TxnState.ABORTING,
                     TxnState.ABORTABLE_ERROR)
        deadline = self._deadline(timeout)
        self.state = TxnState.ABORTING
        if self.engine is not None:
            self._run(self._call_soon(self.engine.purge_transaction), deadline,
                      "abort_transaction")
            left = flush(max(deadline - time.monotonic(), 0))
            if left:
                raise KafkaException(KafkaError(
                    KafkaError._TIMED_OUT, f"Failed to abort: {left} message(s) in flight did "
                    "not come back in time", retriable=True))
        # An AddPartitionsToTxn still out may register a partition: its answer first.
        self._run(self._settle_adding(), deadline, "abort_transaction")
        if self.registered or self._groups or self._maybe_registered:
            try:
                self._run(self._end_txn(False, deadline), deadline, "abort_transaction")
            except KafkaException as exc:
                # The coordinator lost the producer: the epoch bump below starts over.
                if exc.args[0].code() not in _NEEDS_EPOCH_BUMP:
                    raise
                self._needs_epoch_bump = True
            self.registered.clear()
            self._groups.clear()
            self._maybe_registered = False
        if self._needs_epoch_bump:
            # KIP-360, after the abort as Kafka's client does it: the coordinator bumps the
            # epoch of the now idle transactional id, and every partition's sequence
            # restarts at 0 (the sequence holes of dropped or failed batches are gone).
            self._run(self._init_producer_id(deadline, bump=True), deadline,
                      "abort_transaction")
            self._needs_epoch_bump = False
        self._new_transaction()
        self.state = TxnState.READY

    def _deadline(self, timeout: float | None) -> float:
        if timeout is None or timeout < 0:
            # confluent-kafka passes -1 for no timeout, and librdkafka then uses
            # transaction.timeout.ms (rd_kafka_txn_curr_api_req).
            timeout = self.timeout_ms / 1000
        return time.monotonic() + timeout

    def _run(self, coro, deadline: float, what: str) -> Any:
        engine = self.engine
        if engine is None:
            coro.close()
            raise KafkaException(KafkaError(KafkaError._STATE, f"{what}: no engine"))
        try:
            return engine.call(coro, max(deadline - time.monotonic(), 0) + 5)
        except TimeoutError:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"{what} timed out",
                                            retriable=True)) from None

    @staticmethod
    async def _call_soon(fn: Callable[[], Any]) -> None:
        fn()

    async def _settle_adding(self) -> None:
        adding = self._adding
        if adding is not None and not adding.done():
            await asyncio.wait([adding])

    # ---- requests (event loop) ----------------------------------------------------------------

    async def _retrying(self, step: Callable[[], Any], deadline: float, what: str) -> Any:
        """Run ``step`` until it returns; a _Retry waits and tries again until ``deadline``,
        then the caller gets a retriable _TIMED_OUT (the call may be made again)."""
        while True:
            try:
                return await step()
            except _Retry as retry:
                if retry.find_coordinator:
                    self._coordinator = None
                if time.monotonic() + retry.backoff_s > deadline:
                    raise KafkaException(KafkaError(
                        KafkaError._TIMED_OUT, f"{what} timed out: {retry}",
                        retriable=True)) from None
                await asyncio.sleep(retry.backoff_s)

    def _version(self, conn: BrokerConnection, api_key: int, wanted_max: int,
                 wanted_min: int = 0) -> int:
        """The version to speak; a broker without the API cannot run transactions: fatal
        _UNSUPPORTED_FEATURE (as librdkafka when the broker lacks the transactional APIs)."""
        try:
            return conn.version_for(api_key, wanted_max, wanted_min)
        except BrokerConnectionError as exc:
            error = KafkaError(KafkaError._UNSUPPORTED_FEATURE,
                               f"transactions are not supported by broker {conn.node_id} "
                               f"({conn.host}:{conn.port}): {exc}", fatal=True)
            self.set_fatal(error)
            raise KafkaException(error) from None

    async def _ask(self, conn: BrokerConnection, api_key: int, version: int,
                   fields: dict[str, Any], *, maybe_registers: bool = False) -> Any:
        try:
            return await conn.request(api_key, version, build_request(api_key, version,
                                                                      **fields))
        except (BrokerConnectionError, OSError) as exc:
            if maybe_registers:
                self._maybe_registered = True  # it may have arrived: EndTxn is owed
            raise _Retry(str(exc), self.retry_backoff_s, True) from None

    async def _find_coordinator(self, key_type: int, key: str) -> BrokerConnection:
        engine = self.engine
        assert engine is not None
        try:
            conn = await engine.cluster.any_connection()
        except (BrokerConnectionError, OSError) as exc:
            raise _Retry(str(exc), self.retry_backoff_s, False) from None
        version = self._version(conn, FIND_COORDINATOR, 3, 1 if key_type else 0)
        fields: dict[str, Any] = {"key": key}
        if version >= 1:
            fields["key_type"] = key_type
        response = await self._ask(conn, FIND_COORDINATOR, version, fields)
        code = int(response.error_code)
        what = "transaction" if key_type == TRANSACTION_KEY else "group"
        if code != ec.NONE:
            text = f"FindCoordinator({what} {key}): {_error_text(code)}"
            if code == ec.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
                error = KafkaError(code, text, fatal=True)
                self.set_fatal(error)
                raise KafkaException(error)
            if code == ec.GROUP_AUTHORIZATION_FAILED:  # the offsets only: abortable
                error = KafkaError(code, text, txn_requires_abort=True)
                self.set_abortable(error)
                raise KafkaException(error)
            raise _Retry(f"no {what} coordinator for {key}: {_error_text(code)}",
                         self.retry_backoff_s, False)
        # A coordinator the metadata did not list yet is still reachable at its address.
        engine.cluster.brokers.setdefault(response.node_id, (response.host, response.port))
        try:
            return await engine.cluster.connection(response.node_id)
        except (BrokerConnectionError, OSError, KeyError) as exc:
            raise _Retry(str(exc), self.retry_backoff_s, True) from None

    async def _coordinator_connection(self) -> BrokerConnection:
        engine = self.engine
        assert engine is not None
        if self._coordinator is not None:
            try:
                return await engine.cluster.connection(self._coordinator)
            except (BrokerConnectionError, OSError, KeyError):
                self._coordinator = None
        conn = await self._find_coordinator(TRANSACTION_KEY, self.transactional_id)
        self._coordinator = conn.node_id
        return conn

    async def _init_producer_id(self, deadline: float, *, bump: bool) -> None:
        # KIP-360 names the current id and epoch; a broker that refuses that (Tansu answers
        # UNKNOWN_SERVER_ERROR) is asked as on a restart, which bumps the epoch too.
        name_current = [bump]

        async def once() -> None:
            conn = await self._coordinator_connection()
            version = self._version(conn, INIT_PRODUCER_ID, 4)
            fields: dict[str, Any] = {"transactional_id": self.transactional_id,
                                      "transaction_timeout": self.timeout_ms}
            if version >= 3:
                fields["producer_id"] = self.producer_id if name_current[0] else -1
                fields["producer_epoch"] = self.producer_epoch if name_current[0] else -1
            response = await self._ask(conn, INIT_PRODUCER_ID, version, fields)
            code = int(response.error_code)
            if code == ec.NONE:
                self.producer_id = response.producer_id
                self.producer_epoch = response.producer_epoch
                assert self.engine is not None
                self.engine.set_producer(response.producer_id, response.producer_epoch)
                log.info("transactional producer %s: id %d epoch %d", self.transactional_id,
                         response.producer_id, response.producer_epoch)
                return
            action = _init_pid_action(code)
            if action is Action.FATAL and name_current[0] and code not in _FENCING:
                log.info("epoch bump refused (%s): re-initialising instead",
                         _error_text(code))
                name_current[0] = False
                raise _Retry(_error_text(code), 0, False)
            if action is Action.FATAL:
                error = (fenced_error("Failed to acquire transactional PID")
                         if code in _FENCING else KafkaError(
                             code, "Failed to acquire transactional PID from broker "
                             f"TxnCoordinator/{conn.node_id}: {_error_text(code)}", fatal=True))
                self.set_fatal(error)
                raise KafkaException(error)
            raise _Retry(_error_text(code), self.retry_backoff_s,
                         action is Action.COORDINATOR)

        await self._retrying(once, deadline, "InitProducerId")

    async def _end_txn(self, commit: bool, deadline: float) -> None:
        what = "commit" if commit else "abort"

        async def once() -> None:
            conn = await self._coordinator_connection()
            version = self._version(conn, END_TXN, 3)
            response = await self._ask(conn, END_TXN, version, {
                "transactional_id": self.transactional_id, "producer_id": self.producer_id,
                "producer_epoch": self.producer_epoch, "committed": commit})
            self._raise_for(int(response.error_code), _END_TXN, f"EndTxn {what} failed")

        await self._retrying(once, deadline, f"EndTxn {what}")

    async def _send_offsets(self, group: GroupMetadata,
                            offsets: dict[str, list[tuple[int, int, int, str | None]]],
                            deadline: float) -> None:
        if group.group_id not in self._groups:
            async def add_offsets() -> None:
                conn = await self._coordinator_connection()
                version = self._version(conn, ADD_OFFSETS_TO_TXN, 3)
                response = await self._ask(conn, ADD_OFFSETS_TO_TXN, version, {
                    "transactional_id": self.transactional_id,
                    "producer_id": self.producer_id, "producer_epoch": self.producer_epoch,
                    "group_id": group.group_id}, maybe_registers=True)
                self._raise_for(int(response.error_code), _ADD_OFFSETS,
                                "Failed to add offsets to transaction")

            await self._retrying(add_offsets, deadline, "AddOffsetsToTxn")
            self._groups.add(group.group_id)
        group_conn: list[BrokerConnection] = []

        async def commit_offsets() -> None:
            if not group_conn or not group_conn[0].connected:
                group_conn[:] = [await self._find_coordinator(GROUP_KEY, group.group_id)]
            conn = group_conn[0]
            version = self._version(conn, TXN_OFFSET_COMMIT, 3)
            fields: dict[str, Any] = {
                "transactional_id": self.transactional_id, "group_id": group.group_id,
                "producer_id": self.producer_id, "producer_epoch": self.producer_epoch,
                "topics": [{"name": topic, "partitions": [
                    {"partition_index": p, "committed_offset": o,
                     **({"committed_leader_epoch": e} if version >= 2 else {}),
                     "committed_metadata": m} for p, o, e, m in parts]}
                    for topic, parts in offsets.items()]}
            if version >= 3:
                fields.update(generation_id=group.generation_id, member_id=group.member_id,
                              group_instance_id=group.group_instance_id)
            try:
                response = await self._ask(conn, TXN_OFFSET_COMMIT, version, fields)
            except _Retry:
                group_conn.clear()
                raise
            for topic in response.topics:
                for part in topic.partitions:
                    code = int(part.error_code)
                    if code in _COORDINATOR_MOVED or code == ec.REQUEST_TIMED_OUT:
                        group_conn.clear()
                    self._raise_for(code, _TXN_OFFSET_COMMIT, "Failed to commit offsets to "
                                    f"transaction ({topic.name} [{part.partition_index}])")

        try:
            await self._retrying(commit_offsets, deadline, "TxnOffsetCommit")
        except KafkaException as exc:
            error = exc.args[0]
            if error.retriable() and not error.fatal():
                # librdkafka: offsets not committed in time fail the transaction.
                error = KafkaError(error.code(), error.str(), txn_requires_abort=True)
                self.set_abortable(error)
                raise KafkaException(error) from None
            raise

    def _raise_for(self, code: int, table: dict[int, Action], context: str) -> None:
        """Nothing for NONE; _Retry, or KafkaException after setting the state, otherwise."""
        if code == ec.NONE:
            return
        action = table.get(code, Action.ABORTABLE)
        text = f"{context}: {_error_text(code)}"
        if action is Action.FATAL:
            error = fenced_error(context) if code in _FENCING else KafkaError(code, text,
                                                                             fatal=True)
            self.set_fatal(error)
            raise KafkaException(error)
        if action is Action.ABORTABLE:
            error = KafkaError(code, text, txn_requires_abort=True)
            if self.state is TxnState.ABORTING:
                if code in _NEEDS_EPOCH_BUMP:
                    self._needs_epoch_bump = True
            else:
                self.set_abortable(error, bump=code in _NEEDS_EPOCH_BUMP)
            raise KafkaException(self.error if self.error is not None and
                                 self.state is TxnState.ABORTABLE_ERROR else error)
        backoff = 0.02 if code == ec.CONCURRENT_TRANSACTIONS else self.retry_backoff_s
        raise _Retry(text, backoff, action is Action.COORDINATOR)


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

