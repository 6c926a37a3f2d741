"""The transaction state machine of a transactional producer (KIP-98; the client flows of
transaction versions 0/1 and 2, KIP-890), without I/O.

Its states and error classes are librdkafka's (rdkafka_txnmgr.c), so the calls behave as
confluent-kafka's:

    Init --init_transactions--> Ready --begin_transaction--> InTransaction
    InTransaction --commit_transaction--> BeginCommit (flush) --EndTxn(commit)--> Ready
    InTransaction / AbortableError --abort_transaction--> AbortingTransaction --> Ready
    any --fatal error--> FatalError (every later call raises it)

A call in the wrong state raises ``_STATE`` ("Operation not valid in state ..."); in
AbortableError it raises the transaction's error (``txn_requires_abort()``), in FatalError the
fatal one (``fatal()``). Errors are ``KafkaException(KafkaError)`` flagged as librdkafka flags
them. Each coordinator API has its table of error code -> :class:`Action`
(``ADD_PARTITIONS_ERRORS``, ``ADD_OFFSETS_ERRORS``, ``TXN_OFFSET_COMMIT_ERRORS``,
``END_TXN_ERRORS``, ``INIT_PID_ERRORS``, ``FIND_COORDINATOR_ERRORS``; a code not listed
makes the transaction abortable, except for InitProducerId and FindCoordinator);
:meth:`TxnMachine.batch_failed` is the Produce side (docs/producer.md has the table).

The machine only decides. A change that needs work done returns :class:`Effect` values, an
answer from the coordinator returns an :class:`Outcome`; engine/transactions.py and
engine/txn_requests.py carry them out. This module imports no engine, no asyncio and no
connection, so its tests (tests/engine/test_txn_state.py) need no broker and no thread.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException

from kipproducer.protocol import error_codes as ec

GROUP_KEY, TRANSACTION_KEY = 0, 1   # FindCoordinator key types
# CONCURRENT_TRANSACTIONS clears within milliseconds (the previous EndTxn completing): asked
# again sooner than other retries.
CONCURRENT_BACKOFF_S = 0.02
# AddPartitionsToTxn's retriable answers wait this long (librdkafka's fixed 500 ms).
ADD_PARTITIONS_BACKOFF_S = 0.5

# Transactions V2 (KIP-890 part 2): the cluster finalizes the feature at this level or
# higher, and the versions that carry the V2 flow (Produce 12 adds its partition to the
# transaction through the leader; EndTxn 5 bumps the epoch and answers with it;
# TxnOffsetCommit 5 adds the group's offsets partition itself).
TRANSACTION_VERSION_FEATURE = "transaction.version"
TRANSACTION_VERSION_V2 = 2
PRODUCE_V2_VERSION = 12
END_TXN_V2_VERSION = 5
TXN_OFFSET_COMMIT_V2_VERSION = 5
# The classic flow's highest versions: Produce 11 is the last before V2 (a classic client must
# not send Produce 12, which has the leader add the partition); EndTxn stays at 3, as before
# V2 (4 only adds the TRANSACTION_ABORTABLE answer).
PRODUCE_CLASSIC_MAX_VERSION = 11
END_TXN_CLASSIC_MAX_VERSION = 3


def speaks_v2(setting: str, finalized_level: int, produce_max: int, end_txn_max: int) -> bool:
    """Whether the producer runs the Transactions V2 flow: ``setting`` is
    kip.transaction.protocol (``auto``: V2 where the cluster finalizes transaction.version
    >= 2 and the coordinator serves Produce 12 and EndTxn 5; ``classic``: never; ``v2``:
    V2, and a cluster that cannot run it is an error). ``finalized_level`` is the level the
    coordinator's ApiVersions finalizes (0 when it finalizes none), ``produce_max`` and
    ``end_txn_max`` the highest versions it serves."""
    able = (finalized_level >= TRANSACTION_VERSION_V2 and produce_max >= PRODUCE_V2_VERSION
            and end_txn_max >= END_TXN_V2_VERSION)
    if setting == "classic":
        return False
    if setting == "v2" and not able:
        raise KafkaException(KafkaError(
            KafkaError._UNSUPPORTED_FEATURE,
            "kip.transaction.protocol=v2: the cluster cannot run Transactions V2 (it "
            f"finalizes {TRANSACTION_VERSION_FEATURE}={finalized_level}, needs "
            f">= {TRANSACTION_VERSION_V2}; the coordinator serves Produce up to v{produce_max} "
            f"and EndTxn up to v{end_txn_max}, V2 needs v{PRODUCE_V2_VERSION} and "
            f"v{END_TXN_V2_VERSION})", fatal=True))
    return able


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


class Effect(enum.Enum):
    """Work a state change asks of the engine."""
    PURGE = "purge"                     # drop what waits (later in the loop: see fail_abortable)
    FAIL = "fail"                       # fatal (the machine's ``error``): send nothing more
    WAKE = "wake"                       # added partitions' batches may go now


class SendDecision(enum.Enum):
    """May a partition's batch be sent now (:meth:`TxnMachine.may_send`)."""
    SEND = "send"
    WAIT = "wait"             # waits for AddPartitionsToTxn, already asked
    ASK = "ask"               # waits, newly wanted: AddPartitionsToTxn is to be asked
    PURGE = "purge"           # the transaction is failing: not sent, and what waits dropped


@dataclass(frozen=True)
class Retry:
    """Ask again after ``backoff_s`` (the coordinator first if ``find_coordinator``;
    InitProducerId without naming the current id and epoch if ``without_current``)."""
    reason: str
    backoff_s: float
    find_coordinator: bool = False
    without_current: bool = False


@dataclass(frozen=True)
class Outcome:
    """What an answer means: done (nothing set), ask again (``retry``), or failed (``error``,
    to raise to the caller, after carrying out ``effects``)."""
    retry: Retry | None = None
    error: KafkaError | None = None
    effects: tuple[Effect, ...] = ()


DONE = Outcome()

FENCING = (ec.INVALID_PRODUCER_EPOCH, ec.PRODUCER_FENCED)
_COORDINATOR_MOVED = {ec.NOT_COORDINATOR: Action.COORDINATOR,
                      ec.COORDINATOR_NOT_AVAILABLE: Action.COORDINATOR}
_AUTH_FATAL = {ec.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: Action.FATAL,
               ec.CLUSTER_AUTHORIZATION_FAILED: Action.FATAL}
# Per API, the codes that are not ABORTABLE (librdkafka's default for the unlisted ones).
ADD_PARTITIONS_ERRORS = {
    **_COORDINATOR_MOVED, **_AUTH_FATAL,
    ec.CONCURRENT_TRANSACTIONS: Action.RETRY, ec.COORDINATOR_LOAD_IN_PROGRESS: Action.RETRY,
    ec.UNKNOWN_TOPIC_OR_PARTITION: Action.RETRY,
    ec.INVALID_PRODUCER_EPOCH: Action.FATAL, ec.PRODUCER_FENCED: Action.FATAL,
    ec.INVALID_TXN_STATE: Action.FATAL,
}
ADD_OFFSETS_ERRORS = {
    **_COORDINATOR_MOVED, **_AUTH_FATAL, ec.REQUEST_TIMED_OUT: Action.COORDINATOR,
    ec.UNKNOWN_TOPIC_OR_PARTITION: Action.RETRY, ec.COORDINATOR_LOAD_IN_PROGRESS: Action.RETRY,
    ec.CONCURRENT_TRANSACTIONS: Action.RETRY,
    ec.INVALID_PRODUCER_EPOCH: Action.FATAL, ec.PRODUCER_FENCED: Action.FATAL,
    ec.INVALID_TXN_STATE: Action.FATAL, ec.UNSUPPORTED_FOR_MESSAGE_FORMAT: Action.FATAL,
}
TXN_OFFSET_COMMIT_ERRORS = {
    **_COORDINATOR_MOVED, **_AUTH_FATAL, ec.REQUEST_TIMED_OUT: Action.COORDINATOR,
    ec.CONCURRENT_TRANSACTIONS: Action.RETRY, ec.COORDINATOR_LOAD_IN_PROGRESS: Action.RETRY,
    ec.UNKNOWN_TOPIC_OR_PARTITION: Action.RETRY,
    ec.INVALID_PRODUCER_ID_MAPPING: Action.FATAL, ec.INVALID_PRODUCER_EPOCH: Action.FATAL,
    ec.PRODUCER_FENCED: Action.FATAL, ec.INVALID_TXN_STATE: Action.FATAL,
    ec.UNSUPPORTED_FOR_MESSAGE_FORMAT: Action.FATAL,
}
END_TXN_ERRORS = {
    **_COORDINATOR_MOVED, **_AUTH_FATAL, ec.REQUEST_TIMED_OUT: Action.COORDINATOR,
    ec.COORDINATOR_LOAD_IN_PROGRESS: Action.RETRY, ec.CONCURRENT_TRANSACTIONS: Action.RETRY,
    ec.INVALID_PRODUCER_EPOCH: Action.FATAL, ec.PRODUCER_FENCED: Action.FATAL,
    ec.INVALID_TXN_STATE: Action.FATAL,
}
# FindCoordinator: any other error is asked again (the coordinator may be starting); a group
# the producer may not use fails the offsets only, so the transaction, not the producer.
FIND_COORDINATOR_ERRORS = {ec.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: Action.FATAL,
                           ec.GROUP_AUTHORIZATION_FAILED: Action.ABORTABLE}
# InitProducerId: every error that is not retriable ends the producer (librdkafka's
# idempotence layer), fencing as _FENCED.
INIT_PID_ERRORS = {**_COORDINATOR_MOVED, ec.COORDINATOR_LOAD_IN_PROGRESS: Action.RETRY,
            ec.CONCURRENT_TRANSACTIONS: Action.RETRY, ec.REQUEST_TIMED_OUT: Action.RETRY}
# The broker lost the producer's state: abortable, and the abort bumps the epoch (KIP-360).
NEEDS_EPOCH_BUMP = (ec.UNKNOWN_PRODUCER_ID, ec.INVALID_PRODUCER_ID_MAPPING)
# Produce errors that end the producer rather than the transaction.
PRODUCE_FATAL = (*FENCING, ec.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                 ec.CLUSTER_AUTHORIZATION_FAILED)


def init_pid_action(code: int) -> Action:
    """InitProducerId's answer ``code`` (not NONE): the idempotent producer's and the
    transactional one's (both ask through txn_requests.request_producer_id)."""
    found = INIT_PID_ERRORS.get(code)
    if found is not None:
        return found
    return Action.RETRY if ec.is_retriable(code) else Action.FATAL


def error_text(code: int) -> str:
    return KafkaError(code).str()


def fenced_error(context: str) -> KafkaError:
    return KafkaError(KafkaError._FENCED, f"{context}: Local: This instance has been fenced "
                      "by a newer instance", fatal=True)


def _state_error(text: str) -> KafkaException:
    return KafkaException(KafkaError(KafkaError._STATE, text))


class TxnMachine:
    """One transactional producer's transaction: its state, the error of that state, the
    partitions and groups of the open transaction and whether its abort must bump the epoch.

    Not locked: the engine's event loop changes it (answers, failed batches), the caller's
    thread only in the blocking calls, which wait for the loop's work of the same call."""

    def __init__(self) -> None:
        self.state = TxnState.INIT
        self.error: KafkaError | None = None   # the abortable or fatal error of the state
        # This transaction: partitions the coordinator knows, partitions waiting for
        # AddPartitionsToTxn, groups added with AddOffsetsToTxn.
        self.registered: set[tuple[str, int]] = set()
        self.wanted: set[tuple[str, int]] = set()
        self.groups: set[str] = set()
        # A request reached the coordinator whose fate is unknown (a lost answer): an
        # EndTxn is owed even if nothing was registered for sure.
        self.maybe_registered = False
        # KIP-360: the abort ends with InitProducerId(current id and epoch), which restarts
        # every partition's sequence (a failed batch left a hole, or the broker lost us).
        self.needs_epoch_bump = False
        self.failed_records = 0
        # Transactions V2 (speaks_v2): a partition joins the transaction with its first
        # Produce (the leader adds it), EndTxn bumps the epoch. None until decided (the first
        # InitProducerId or EndTxn, on the coordinator's ApiVersions).
        self.v2: bool | None = None

    # ---- reading the state --------------------------------------------------------------------

    @property
    def sending(self) -> bool:
        """Whether batches may go out (a failing or aborting transaction sends no more)."""
        return self.state in (TxnState.IN_TRANSACTION, TxnState.BEGIN_COMMIT)

    @property
    def end_txn_owed(self) -> bool:
        """Whether the coordinator may know of this transaction (an EndTxn must end it)."""
        return bool(self.registered or self.groups or self.maybe_registered)

    def require(self, *states: TxnState) -> None:
        """librdkafka's rd_kafka_txn_require_state: KafkaException unless in ``states``."""
        if self.state in states:
            return
        if self.state in (TxnState.FATAL_ERROR, TxnState.ABORTABLE_ERROR) and self.error:
            raise KafkaException(self.error)
        raise _state_error(f"Operation not valid in state {self.state.value}")

    def check_produce(self) -> None:
        """What librdkafka's produce() raises outside a transaction."""
        if self.state is TxnState.FATAL_ERROR:
            raise KafkaException(KafkaError(KafkaError._FATAL, "Unable to produce message: "
                                            "Local: Fatal error"))
        if self.state is not TxnState.IN_TRANSACTION:
            raise _state_error("Unable to produce message: Local: Erroneous state (not in a "
                               f"transaction: state {self.state.value})")

    def produce_error(self) -> KafkaError | None:
        """check_produce's error as a value (for produce_batch's per-message ``_error``)."""
        try:
            self.check_produce()
        except KafkaException as exc:
            return exc.args[0]
        return None

    # ---- failing --------------------------------------------------------------------------------

    def fail_abortable(self, error: KafkaError, *, bump: bool = False) -> tuple[Effect, ...]:
        """The transaction failed: what waits is dropped, only abort_transaction() helps.
        The first error is the one reported (librdkafka)."""
        if bump:
            self.needs_epoch_bump = True
        if not self.sending:
            return ()  # aborting already, or fatal: nothing to add
        self.error = KafkaError(error.code(), error.str(), txn_requires_abort=True)
        self.state = TxnState.ABORTABLE_ERROR
        # The engine purges later in its loop, not at once: this may run inside its report
        # path, which may be walking the very queues a purge empties.
        return (Effect.PURGE,)

    def fail_fatal(self, error: KafkaError) -> tuple[Effect, ...]:
        if self.state is TxnState.FATAL_ERROR:
            return ()
        if not error.fatal():
            error = KafkaError(error.code(), error.str(), fatal=True)
        self.error = error
        self.state = TxnState.FATAL_ERROR
        return (Effect.FAIL,)

    def _failed(self, error: KafkaError) -> Outcome:
        """``error`` fatal or abortable: the state follows, the caller gets it."""
        if error.fatal():
            return Outcome(error=error, effects=self.fail_fatal(error))
        return Outcome(error=error, effects=self.fail_abortable(error))

    # ---- the transitions of the blocking calls (caller's thread) -----------------------------

    def _new_transaction(self) -> None:
        self.registered.clear()
        self.wanted.clear()
        self.groups.clear()
        self.maybe_registered = False
        self.failed_records = 0
        self.error = None

    def initialised(self) -> None:
        """init_transactions() got its producer id."""
        self.require(TxnState.INIT)
        self.state = TxnState.READY

    def resume(self) -> None:
        """Take over a transaction another producer began and left open: only commit or abort
        may follow. Which partitions the other producer added is unknown here: an EndTxn is
        owed."""
        self.require(TxnState.INIT)
        self._new_transaction()
        self.maybe_registered = True
        self.state = TxnState.BEGIN_COMMIT

    def begin(self) -> None:
        self.require(TxnState.READY)
        self._new_transaction()
        self.state = TxnState.IN_TRANSACTION

    def begin_commit(self) -> None:
        self.require(TxnState.IN_TRANSACTION, TxnState.BEGIN_COMMIT)
        self.state = TxnState.BEGIN_COMMIT

    def flushed_for_commit(self, left: int) -> KafkaError | None:
        """The commit's flush returned with ``left`` records: raises what stops the commit
        here (a failure while flushing, records left); returns the abortable error to set
        (on the loop) when records failed delivery; None when EndTxn(commit) may go."""
        if self.state is not TxnState.BEGIN_COMMIT:
            self.require(TxnState.BEGIN_COMMIT)  # failed while flushing: raises its error
        if left:
            raise KafkaException(KafkaError(
                KafkaError._TIMED_OUT, "Failed to flush all outstanding messages within the "
                f"transaction timeout: {left} message(s) remaining", retriable=True))
        if self.failed_records:
            return KafkaError(KafkaError._INCONSISTENT, f"{self.failed_records} message(s) "
                              "failed delivery (see individual delivery reports)",
                              txn_requires_abort=True)
        return None

    def committed(self) -> None:
        self.state = TxnState.READY

    def begin_abort(self) -> None:
        self.require(TxnState.IN_TRANSACTION, TxnState.BEGIN_COMMIT, TxnState.ABORTING,
                     TxnState.ABORTABLE_ERROR)
        self.state = TxnState.ABORTING

    def abort_end_failed(self, error: KafkaError) -> bool:
        """EndTxn(abort) failed with ``error``: True when the epoch bump that follows
        repairs it (the coordinator lost the producer), else the caller raises it."""
        if error.code() not in NEEDS_EPOCH_BUMP:
            return False
        self.needs_epoch_bump = True
        return True

    def abort_ended(self) -> None:
        """EndTxn(abort) went (or was not owed): the coordinator holds nothing of it."""
        self.registered.clear()
        self.groups.clear()
        self.maybe_registered = False

    def aborted(self) -> None:
        """The abort is complete (the epoch bumped if it had to be)."""
        self.needs_epoch_bump = False
        self._new_transaction()
        self.state = TxnState.READY

    # ---- the engine's side (event loop) -------------------------------------------------------

    def may_send(self, topic: str, partition: int) -> SendDecision:
        """Whether a batch of this partition may be sent now; otherwise the partition waits
        for AddPartitionsToTxn."""
        if not self.sending:
            if self.state in (TxnState.ABORTABLE_ERROR, TxnState.ABORTING):
                # A record that slipped in while the transaction failed: dropped too.
                return SendDecision.PURGE
            return SendDecision.WAIT
        if self.v2:
            # V2: the Produce itself adds the partition (the leader asks the coordinator);
            # from here on the coordinator may know the transaction, so EndTxn is owed.
            self.registered.add((topic, partition))
            return SendDecision.SEND
        return self.ask_to_add(topic, partition)

    def ask_to_add(self, topic: str, partition: int) -> SendDecision:
        """The partition waits for AddPartitionsToTxn (under either flow: an empty
        partition, whose only mark is the transaction's marker, is added this way; Kafka
        keeps the client's AddPartitionsToTxn under V2, and the EndTxn of V2 ends such a
        transaction as any other)."""
        key = (topic, partition)
        if key in self.registered:
            return SendDecision.SEND
        if key in self.wanted:
            return SendDecision.WAIT
        self.wanted.add(key)
        return SendDecision.ASK

    def batch_failed(self, record_count: int, sequenced: bool,
                     error: KafkaError) -> tuple[Effect, ...]:
        """A batch of this transaction was reported failed (librdkafka: the transaction
        becomes abortable; fencing is fatal)."""
        self.failed_records += record_count
        if sequenced:
            # Its sequence numbers never reached the log: the partition's sequence has a hole
            # that only a new epoch closes.
            self.needs_epoch_bump = True
        code = error.code()
        if code in PRODUCE_FATAL:
            return self.fail_fatal(fenced_error("Failed to produce") if code in FENCING else
                                   KafkaError(code, f"Failed to produce: {error.str()}",
                                              fatal=True))
        if code in (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT):
            return ()
        return self.fail_abortable(error, bump=sequenced or code in NEEDS_EPOCH_BUMP)

    # ---- the coordinator's answers (event loop) -----------------------------------------------

    def partitions_asked(self) -> list[tuple[str, int]]:
        """The partitions one AddPartitionsToTxn asks for: all waiting now, in order."""
        return sorted(self.wanted)

    def partitions_answer(self, results: Iterable[tuple[str, int, int]]) -> Outcome:
        """AddPartitionsToTxn's (topic, partition, error code)s. Added partitions are
        registered; a fatal code ends the producer, an abortable one the transaction;
        otherwise a retriable code asks again for the partitions still wanted."""
        retry: Retry | None = None
        abortable: KafkaError | None = None
        for topic, partition, code in results:
            key = (topic, partition)
            if code == ec.NONE:
                self.registered.add(key)
                self.wanted.discard(key)
                continue
            action = ADD_PARTITIONS_ERRORS.get(code, Action.ABORTABLE)
            text = (f"Failed to add partition {topic} [{partition}] to transaction: "
                    f"{error_text(code)}")
            if action is Action.FATAL:
                error = (fenced_error("Failed to add partitions to transaction")
                         if code in FENCING else KafkaError(code, text, fatal=True))
                return Outcome(effects=self.fail_fatal(error))
            if action is Action.ABORTABLE:
                # OPERATION_NOT_ATTEMPTED names partitions skipped for another's error:
                # the other error is the one to report.
                if abortable is None or abortable.code() == ec.OPERATION_NOT_ATTEMPTED:
                    abortable = KafkaError(code, text)
                continue
            backoff = (CONCURRENT_BACKOFF_S if code == ec.CONCURRENT_TRANSACTIONS
                       else ADD_PARTITIONS_BACKOFF_S)
            retry = Retry(text, backoff, action is Action.COORDINATOR)
        if abortable is not None:
            return Outcome(effects=self.fail_abortable(
                abortable, bump=abortable.code() in NEEDS_EPOCH_BUMP))
        if retry is not None:
            return Outcome(retry=retry)
        return DONE

    def partitions_timed_out(self, reason: str) -> tuple[Effect, ...]:
        return self.fail_abortable(KafkaError(
            KafkaError._TIMED_OUT, "Failed to add partitions to transaction within "
            f"transaction.timeout.ms: {reason}"))

    def partitions_failed(self, error: KafkaError) -> tuple[Effect, ...]:
        """AddPartitionsToTxn could not be asked (``error``: fatal, or the transaction's)."""
        return self._failed(error).effects

    def partitions_settled(self) -> tuple[Effect, ...]:
        """The asking has stopped (all added, or the transaction is failing): what still
        waits is not asked for; the engine looks again."""
        self.wanted.clear()
        return (Effect.WAKE,)

    def answer(self, code: int, table: dict[int, Action], context: str, *,
               retry_backoff_s: float) -> Outcome:
        """An answer's error ``code`` under the API's ``table``."""
        if code == ec.NONE:
            return DONE
        action = table.get(code, Action.ABORTABLE)
        text = f"{context}: {error_text(code)}"
        if action is Action.FATAL:
            error = fenced_error(context) if code in FENCING else KafkaError(code, text,
                                                                            fatal=True)
            return Outcome(error=error, effects=self.fail_fatal(error))
        if action is Action.ABORTABLE:
            error = KafkaError(code, text, txn_requires_abort=True)
            effects: tuple[Effect, ...] = ()
            if self.state is TxnState.ABORTING:
                if code in NEEDS_EPOCH_BUMP:
                    self.needs_epoch_bump = True
            else:
                effects = self.fail_abortable(error, bump=code in NEEDS_EPOCH_BUMP)
            if self.error is not None and self.state is TxnState.ABORTABLE_ERROR:
                error = self.error  # the transaction's first error is the one reported
            return Outcome(error=error, effects=effects)
        backoff = CONCURRENT_BACKOFF_S if code == ec.CONCURRENT_TRANSACTIONS else retry_backoff_s
        return Outcome(retry=Retry(text, backoff, action is Action.COORDINATOR))

    def producer_id_answer(self, code: int, *, naming_current: bool, coordinator: int,
                           retry_backoff_s: float) -> Outcome:
        """InitProducerId's error ``code`` (not NONE). KIP-360 names the current id and epoch
        (``naming_current``); a broker that refuses that (Tansu answers UNKNOWN_SERVER_ERROR)
        is asked again as on a restart, which bumps the epoch too."""
        action = init_pid_action(code)
        if action is Action.FATAL and naming_current and code not in FENCING:
            return Outcome(retry=Retry(error_text(code), 0, without_current=True))
        if action is Action.FATAL:
            error = (fenced_error("Failed to acquire transactional PID") if code in FENCING
                     else KafkaError(code, "Failed to acquire transactional PID from broker "
                                     f"TxnCoordinator/{coordinator}: {error_text(code)}",
                                     fatal=True))
            return Outcome(error=error, effects=self.fail_fatal(error))
        return Outcome(retry=Retry(error_text(code), retry_backoff_s,
                                   action is Action.COORDINATOR))

    def coordinator_answer(self, code: int, key_type: int, key: str, *,
                           retry_backoff_s: float) -> Outcome:
        """FindCoordinator's error ``code`` for a transactional id or a group."""
        if code == ec.NONE:
            return DONE
        what = "transaction" if key_type == TRANSACTION_KEY else "group"
        text = f"FindCoordinator({what} {key}): {error_text(code)}"
        action = FIND_COORDINATOR_ERRORS.get(code, Action.RETRY)
        if action is Action.FATAL:
            error = KafkaError(code, text, fatal=True)
            return Outcome(error=error, effects=self.fail_fatal(error))
        if action is Action.ABORTABLE:
            error = KafkaError(code, text, txn_requires_abort=True)
            return Outcome(error=error, effects=self.fail_abortable(error))
        return Outcome(retry=Retry(f"no {what} coordinator for {key}: {error_text(code)}",
                                   retry_backoff_s))

    def unsupported(self, error: KafkaError) -> tuple[Effect, ...]:
        """The coordinator lacks a transactional API: the producer cannot go on."""
        return self.fail_fatal(error)

    def offsets_not_committed(self, error: KafkaError) -> Outcome:
        """TxnOffsetCommit gave up with ``error``: librdkafka fails the transaction when the
        offsets were not committed in time (a retriable error); others stay as they are."""
        if error.retriable() and not error.fatal():
            error = KafkaError(error.code(), error.str(), txn_requires_abort=True)
            return Outcome(error=error, effects=self.fail_abortable(error))
        return Outcome(error=error)
