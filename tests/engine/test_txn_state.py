"""The transaction state machine (engine/txn_state.py) on its own: no broker, no thread, no
event loop. Every transition, each coordinator API's error table, the epoch bump (KIP-360)
and the partitions of a transaction across begin / commit / abort, as aiokafka tests its
transaction manager. The requests that drive the machine against real brokers are tested in
tests/producer/test_producer_transactions.py."""

from __future__ import annotations

import ast
import threading
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException

from kipproducer.engine import txn_state
from kipproducer.engine.txn_state import (
    ADD_OFFSETS_ERRORS,
    ADD_PARTITIONS_ERRORS,
    END_TXN_ERRORS,
    INIT_PID_ERRORS,
    TRANSACTION_KEY,
    TXN_OFFSET_COMMIT_ERRORS,
    Action,
    Effect,
    SendDecision,
    TxnMachine,
    TxnState,
    init_pid_action,
    speaks_v2,
)
from kipproducer.protocol import error_codes as ec

BACKOFF = 0.1
TABLES = {"AddPartitionsToTxn": ADD_PARTITIONS_ERRORS, "AddOffsetsToTxn": ADD_OFFSETS_ERRORS,
          "TxnOffsetCommit": TXN_OFFSET_COMMIT_ERRORS, "EndTxn": END_TXN_ERRORS}
# A code none of the tables lists: librdkafka's default, the transaction is abortable.
UNLISTED = ec.TOPIC_AUTHORIZATION_FAILED


def machine_in(state: TxnState) -> TxnMachine:
    """A machine brought to ``state`` through the legal transitions."""
    m = TxnMachine()
    if state is TxnState.INIT:
        return m
    m.initialised()
    if state is TxnState.READY:
        return m
    m.begin()
    if state is TxnState.IN_TRANSACTION:
        return m
    if state is TxnState.BEGIN_COMMIT:
        m.begin_commit()
    elif state is TxnState.ABORTING:
        m.begin_abort()
    elif state is TxnState.ABORTABLE_ERROR:
        assert m.fail_abortable(KafkaError(ec.INVALID_RECORD, "bad")) == (Effect.PURGE,)
    elif state is TxnState.FATAL_ERROR:
        assert m.fail_fatal(KafkaError(ec.PRODUCER_FENCED, "fenced")) == (Effect.FAIL,)
    assert m.state is state
    return m


def raised(call) -> KafkaError:
    with pytest.raises(KafkaException) as info:
        call()
    return info.value.args[0]


# ---- states and transitions ---------------------------------------------------------------------

# call -> the states it is legal in and the state it leads to
TRANSITIONS = {
    "initialised": ({TxnState.INIT}, TxnState.READY),
    "resume": ({TxnState.INIT}, TxnState.BEGIN_COMMIT),
    "begin": ({TxnState.READY}, TxnState.IN_TRANSACTION),
    "begin_commit": ({TxnState.IN_TRANSACTION, TxnState.BEGIN_COMMIT}, TxnState.BEGIN_COMMIT),
    "begin_abort": ({TxnState.IN_TRANSACTION, TxnState.BEGIN_COMMIT, TxnState.ABORTING,
                     TxnState.ABORTABLE_ERROR}, TxnState.ABORTING),
}


@pytest.mark.parametrize("state", list(TxnState), ids=lambda s: s.value)
@pytest.mark.parametrize("call", sorted(TRANSITIONS))
def test_each_call_is_legal_in_its_states_only(call: str, state: TxnState) -> None:
    legal, after = TRANSITIONS[call]
    m = machine_in(state)
    if state in legal:
        getattr(m, call)()
        assert m.state is after
        return
    error = raised(getattr(m, call))
    assert m.state is state  # a refused call changes nothing
    if state is TxnState.FATAL_ERROR:
        assert error.fatal() and error.code() == ec.PRODUCER_FENCED
    elif state is TxnState.ABORTABLE_ERROR:
        assert error.txn_requires_abort() and error.code() == ec.INVALID_RECORD
    else:
        assert error.code() == KafkaError._STATE
        assert error.str() == f"Operation not valid in state {state.value}"


def test_commit_and_abort_end_in_ready() -> None:
    m = machine_in(TxnState.BEGIN_COMMIT)
    assert m.flushed_for_commit(0) is None
    m.committed()
    assert m.state is TxnState.READY
    m = machine_in(TxnState.ABORTING)
    m.abort_ended()
    m.aborted()
    assert m.state is TxnState.READY and m.error is None


def test_an_abort_clears_the_abortable_error() -> None:
    m = machine_in(TxnState.ABORTABLE_ERROR)
    m.begin_abort()
    m.abort_ended()
    m.aborted()
    m.begin()
    assert m.state is TxnState.IN_TRANSACTION and m.error is None and m.sending


def test_fatal_is_final() -> None:
    m = machine_in(TxnState.FATAL_ERROR)
    first = m.error
    assert m.fail_fatal(KafkaError(ec.INVALID_TXN_STATE, "later")) == ()
    assert m.fail_abortable(KafkaError(ec.INVALID_RECORD, "later")) == ()
    assert m.error is first and m.state is TxnState.FATAL_ERROR


def test_a_fatal_error_is_flagged_fatal() -> None:
    m = machine_in(TxnState.IN_TRANSACTION)
    m.fail_fatal(KafkaError(ec.CLUSTER_AUTHORIZATION_FAILED, "no"))
    assert m.error is not None and m.error.fatal() and not m.sending


def test_the_first_abortable_error_is_the_one_reported() -> None:
    m = machine_in(TxnState.IN_TRANSACTION)
    assert m.fail_abortable(KafkaError(ec.INVALID_RECORD, "first")) == (Effect.PURGE,)
    assert m.fail_abortable(KafkaError(ec.MESSAGE_TOO_LARGE, "second")) == ()
    assert m.error is not None and m.error.str() == "first" and m.error.txn_requires_abort()


@pytest.mark.parametrize("state", list(TxnState), ids=lambda s: s.value)
def test_produce_is_refused_outside_a_transaction(state: TxnState) -> None:
    m = machine_in(state)
    error = m.produce_error()
    if state is TxnState.IN_TRANSACTION:
        assert error is None
        m.check_produce()
        return
    assert error is not None
    if state is TxnState.FATAL_ERROR:
        assert error.code() == KafkaError._FATAL
    else:
        assert error.code() == KafkaError._STATE and state.value in error.str()
    assert raised(m.check_produce).code() == error.code()


def test_sending_only_in_a_transaction_or_its_commit() -> None:
    sending = {s for s in TxnState if machine_in(s).sending}
    assert sending == {TxnState.IN_TRANSACTION, TxnState.BEGIN_COMMIT}


def test_resume_owes_an_end_txn() -> None:
    m = TxnMachine()
    m.resume()
    assert m.end_txn_owed and not m.registered


# ---- commit's flush ---------------------------------------------------------------------------


def test_records_left_after_the_flush_fail_the_commit_retriably() -> None:
    m = machine_in(TxnState.BEGIN_COMMIT)
    error = raised(lambda: m.flushed_for_commit(3))
    assert error.code() == KafkaError._TIMED_OUT and error.retriable() and "3 message" in \
        error.str()
    assert m.state is TxnState.BEGIN_COMMIT  # commit_transaction() may be called again


def test_failed_deliveries_make_the_commit_abortable() -> None:
    m = machine_in(TxnState.BEGIN_COMMIT)
    m.batch_failed(4, False, KafkaError(KafkaError._PURGE_QUEUE))  # a purge: not a failure
    m.batch_failed(2, False, KafkaError(KafkaError._PURGE_INFLIGHT))
    error = m.flushed_for_commit(0)
    assert error is not None and error.code() == KafkaError._INCONSISTENT
    assert "6 message(s)" in error.str() and error.txn_requires_abort()
    assert m.fail_abortable(error) == (Effect.PURGE,)
    assert m.state is TxnState.ABORTABLE_ERROR


def test_a_failure_while_flushing_is_raised_by_the_commit() -> None:
    m = machine_in(TxnState.BEGIN_COMMIT)
    m.batch_failed(1, True, KafkaError(ec.MESSAGE_TOO_LARGE, "too big"))
    error = raised(lambda: m.flushed_for_commit(0))
    assert error.code() == ec.MESSAGE_TOO_LARGE and error.txn_requires_abort()


# ---- the error tables -------------------------------------------------------------------------


def table_cases() -> list:
    cases = []
    for api, table in TABLES.items():
        for code, action in table.items():
            cases.append(pytest.param(api, code, action, id=f"{api}-{ec.error_name(code)}"))
        cases.append(pytest.param(api, UNLISTED, Action.ABORTABLE, id=f"{api}-unlisted"))
    return cases


@pytest.mark.parametrize("api,code,action", table_cases())
def test_each_tables_action(api: str, code: int, action: Action) -> None:
    m = machine_in(TxnState.IN_TRANSACTION)
    outcome = m.answer(code, TABLES[api], api, retry_backoff_s=BACKOFF)
    if action in (Action.RETRY, Action.COORDINATOR):
        assert outcome.error is None and outcome.effects == ()
        assert outcome.retry is not None
        assert outcome.retry.find_coordinator is (action is Action.COORDINATOR)
        assert outcome.retry.backoff_s == (txn_state.CONCURRENT_BACKOFF_S
                                           if code == ec.CONCURRENT_TRANSACTIONS else BACKOFF)
        assert m.state is TxnState.IN_TRANSACTION
    elif action is Action.FATAL:
        assert outcome.retry is None and outcome.effects == (Effect.FAIL,)
        assert m.state is TxnState.FATAL_ERROR and outcome.error is m.error
        assert outcome.error is not None and outcome.error.fatal()
        fenced = code in (ec.INVALID_PRODUCER_EPOCH, ec.PRODUCER_FENCED)
        assert outcome.error.code() == (KafkaError._FENCED if fenced else code)
    else:
        assert outcome.retry is None and outcome.effects == (Effect.PURGE,)
        assert m.state is TxnState.ABORTABLE_ERROR
        assert outcome.error is not None and outcome.error.txn_requires_abort()
        assert outcome.error.code() == code and api in outcome.error.str()


def test_the_tables_agree_on_the_common_cases() -> None:
    for table in TABLES.values():
        assert table[ec.NOT_COORDINATOR] is Action.COORDINATOR
        assert table[ec.COORDINATOR_NOT_AVAILABLE] is Action.COORDINATOR
        assert table[ec.COORDINATOR_LOAD_IN_PROGRESS] is Action.RETRY
        assert table[ec.CONCURRENT_TRANSACTIONS] is Action.RETRY
        assert table[ec.PRODUCER_FENCED] is Action.FATAL
        assert table[ec.TRANSACTIONAL_ID_AUTHORIZATION_FAILED] is Action.FATAL


def test_no_error_is_done() -> None:
    m = machine_in(TxnState.IN_TRANSACTION)
    assert m.answer(ec.NONE, END_TXN_ERRORS, "EndTxn", retry_backoff_s=BACKOFF) == txn_state.DONE


def test_an_abortable_answer_reports_the_transactions_first_error() -> None:
    m = machine_in(TxnState.ABORTABLE_ERROR)
    first = m.error
    outcome = m.answer(UNLISTED, ADD_OFFSETS_ERRORS, "AddOffsetsToTxn", retry_backoff_s=BACKOFF)
    assert outcome.error is first and outcome.effects == ()


def test_an_abortable_answer_while_aborting_leaves_the_state() -> None:
    m = machine_in(TxnState.ABORTING)
    outcome = m.answer(UNLISTED, END_TXN_ERRORS, "EndTxn abort failed", retry_backoff_s=BACKOFF)
    assert m.state is TxnState.ABORTING and outcome.effects == ()
    assert outcome.error is not None and outcome.error.code() == UNLISTED


# ---- InitProducerId -----------------------------------------------------------------------------


@pytest.mark.parametrize("code", sorted(ec.ERRORS), ids=ec.error_name)
def test_init_pid_retries_exactly_the_retriable_codes(code: int) -> None:
    """The idempotent producer (engine.py) and the transactional one judge InitProducerId's
    answer with the same function: retry what is retriable, give up on the rest."""
    if code == ec.NONE:
        return
    assert (init_pid_action(code) is not Action.FATAL) is ec.is_retriable(code)
    if code in INIT_PID_ERRORS:
        assert init_pid_action(code) is INIT_PID_ERRORS[code]


@pytest.mark.parametrize("code,action", [(ec.NOT_COORDINATOR, Action.COORDINATOR),
                                         (ec.COORDINATOR_LOAD_IN_PROGRESS, Action.RETRY),
                                         (ec.CONCURRENT_TRANSACTIONS, Action.RETRY),
                                         (ec.NETWORK_EXCEPTION, Action.RETRY)])
def test_init_pid_retry(code: int, action: Action) -> None:
    m = TxnMachine()
    outcome = m.producer_id_answer(code, naming_current=False, coordinator=1,
                                   retry_backoff_s=BACKOFF)
    assert outcome.retry is not None and outcome.error is None
    assert outcome.retry.find_coordinator is (action is Action.COORDINATOR)
    assert not outcome.retry.without_current and m.state is TxnState.INIT


def test_init_pid_fatal_and_fenced() -> None:
    m = TxnMachine()
    outcome = m.producer_id_answer(ec.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                   naming_current=False, coordinator=3,
                                   retry_backoff_s=BACKOFF)
    assert outcome.effects == (Effect.FAIL,) and m.state is TxnState.FATAL_ERROR
    assert outcome.error is not None and "TxnCoordinator/3" in outcome.error.str()
    m = TxnMachine()
    outcome = m.producer_id_answer(ec.PRODUCER_FENCED, naming_current=True, coordinator=3,
                                   retry_backoff_s=BACKOFF)
    assert outcome.error is not None and outcome.error.code() == KafkaError._FENCED
    assert outcome.error.fatal() and m.state is TxnState.FATAL_ERROR


def test_a_refused_epoch_bump_asks_again_as_on_a_restart() -> None:
    """KIP-360 names the current id and epoch; a broker that refuses it (Tansu:
    UNKNOWN_SERVER_ERROR) is asked at once without them, and the state is left alone."""
    m = machine_in(TxnState.ABORTING)
    outcome = m.producer_id_answer(ec.UNKNOWN_SERVER_ERROR, naming_current=True,
                                   coordinator=1, retry_backoff_s=BACKOFF)
    assert outcome.retry is not None and outcome.retry.without_current
    assert outcome.retry.backoff_s == 0 and outcome.error is None
    assert m.state is TxnState.ABORTING
    # Refused again without naming them: fatal.
    outcome = m.producer_id_answer(ec.UNKNOWN_SERVER_ERROR, naming_current=False,
                                   coordinator=1, retry_backoff_s=BACKOFF)
    assert outcome.effects == (Effect.FAIL,) and m.state is TxnState.FATAL_ERROR


# ---- FindCoordinator --------------------------------------------------------------------------


def test_find_coordinator_answers() -> None:
    m = machine_in(TxnState.IN_TRANSACTION)
    outcome = m.coordinator_answer(ec.COORDINATOR_NOT_AVAILABLE, TRANSACTION_KEY, "t",
                                   retry_backoff_s=BACKOFF)
    assert outcome.retry is not None and not outcome.retry.find_coordinator
    assert "no transaction coordinator for t" in outcome.retry.reason
    outcome = m.coordinator_answer(ec.GROUP_AUTHORIZATION_FAILED, txn_state.GROUP_KEY, "g",
                                   retry_backoff_s=BACKOFF)
    assert outcome.effects == (Effect.PURGE,) and m.state is TxnState.ABORTABLE_ERROR
    assert outcome.error is not None and outcome.error.txn_requires_abort()
    outcome = m.coordinator_answer(ec.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, TRANSACTION_KEY,
                                   "t", retry_backoff_s=BACKOFF)
    assert outcome.effects == (Effect.FAIL,) and m.state is TxnState.FATAL_ERROR


# ---- partitions -------------------------------------------------------------------------------


def test_a_partition_waits_for_add_partitions_then_sends() -> None:
    m = machine_in(TxnState.IN_TRANSACTION)
    assert m.may_send("t", 1) is SendDecision.ASK
    assert m.may_send("t", 1) is SendDecision.WAIT  # asked once
    assert m.may_send("t", 0) is SendDecision.ASK
    assert m.partitions_asked() == [("t", 0), ("t", 1)]
    assert m.partitions_answer([("t", 0, ec.NONE), ("t", 1, ec.NONE)]) == txn_state.DONE
    assert m.registered == {("t", 0), ("t", 1)} and not m.wanted and m.end_txn_owed
    assert m.may_send("t", 1) is SendDecision.SEND
    assert m.partitions_settled() == (Effect.WAKE,)


def test_registered_partitions_across_commit_and_abort() -> None:
    m = machine_in(TxnState.IN_TRANSACTION)
    m.may_send("t", 0)
    m.partitions_answer([("t", 0, ec.NONE)])
    m.groups.add("g")
    m.begin_commit()
    assert m.may_send("t", 0) is SendDecision.SEND  # the commit's flush still sends
    m.committed()
    assert m.may_send("t", 0) is SendDecision.WAIT  # no transaction: nothing goes
    m.begin()
    assert not m.registered and not m.groups and not m.end_txn_owed
    assert m.may_send("t", 0) is SendDecision.ASK  # a new transaction adds it again
    m.partitions_answer([("t", 0, ec.NONE)])
    m.begin_abort()
    assert m.may_send("t", 0) is SendDecision.PURGE
    assert m.end_txn_owed
    m.abort_ended()
    assert not m.registered and not m.end_txn_owed
    m.aborted()
    m.begin()
    assert m.may_send("t", 0) is SendDecision.ASK


# (kip.transaction.protocol, finalized transaction.version, Produce max, EndTxn max) -> V2?
V2_CHOICES = [
    ("auto", 2, 12, 5, True),     # Kafka 4.x's default: V2
    ("auto", 2, 13, 5, True),
    ("auto", 0, 12, 5, False),    # a 4.x cluster formatted with transaction.version=0
    ("auto", 1, 12, 5, False),
    ("auto", 2, 11, 5, False),    # a broker without Produce v12
    ("auto", 2, 12, 4, False),    # or without EndTxn v5
    ("auto", 0, 10, 3, False),    # Kafka 3.x, kip broker: no finalized feature
    ("classic", 2, 12, 5, False),
    ("v2", 2, 12, 5, True),
]


@pytest.mark.parametrize(("setting", "level", "produce", "end_txn", "v2"), V2_CHOICES)
def test_the_transaction_protocol_choice(setting: str, level: int, produce: int, end_txn: int,
                                         v2: bool) -> None:
    assert speaks_v2(setting, level, produce, end_txn) is v2


def test_v2_forced_on_a_cluster_without_it_is_one_fatal_error() -> None:
    with pytest.raises(KafkaException) as info:
        speaks_v2("v2", 0, 12, 5)
    error = info.value.args[0]
    assert error.fatal() and error.code() == KafkaError._UNSUPPORTED_FEATURE
    assert "kip.transaction.protocol=v2" in error.str()
    assert "transaction.version=0" in error.str()


def test_v2_sends_without_add_partitions_but_an_empty_partition_is_still_added() -> None:
    m = machine_in(TxnState.IN_TRANSACTION)
    m.v2 = True
    # a batch goes at once: its Produce adds the partition; EndTxn is owed from then on
    assert m.may_send("t", 0) is SendDecision.SEND
    assert m.registered == {("t", 0)} and not m.wanted and m.end_txn_owed
    # a partition without a record (an empty aborted transaction) asks AddPartitionsToTxn
    assert m.ask_to_add("t", 1) is SendDecision.ASK
    assert m.ask_to_add("t", 1) is SendDecision.WAIT
    assert m.ask_to_add("t", 0) is SendDecision.SEND
    classic = machine_in(TxnState.IN_TRANSACTION)
    classic.v2 = False
    assert classic.may_send("t", 0) is SendDecision.ASK and not classic.registered


def test_a_lost_answer_owes_an_end_txn() -> None:
    m = machine_in(TxnState.IN_TRANSACTION)
    m.maybe_registered = True  # what txn_requests sets when a request's answer is lost
    assert m.end_txn_owed
    m.begin_abort()
    m.abort_ended()
    assert not m.end_txn_owed


def test_a_failing_transaction_drops_what_slips_in() -> None:
    m = machine_in(TxnState.ABORTABLE_ERROR)
    assert m.may_send("t", 0) is SendDecision.PURGE
    assert not m.wanted


def test_add_partitions_retry_and_coordinator() -> None:
    m = machine_in(TxnState.IN_TRANSACTION)
    m.may_send("t", 0)
    m.may_send("t", 1)
    outcome = m.partitions_answer([("t", 0, ec.NONE), ("t", 1, ec.CONCURRENT_TRANSACTIONS)])
    assert outcome.retry is not None
    assert outcome.retry.backoff_s == txn_state.CONCURRENT_BACKOFF_S
    assert m.registered == {("t", 0)} and m.partitions_asked() == [("t", 1)]
    outcome = m.partitions_answer([("t", 1, ec.NOT_COORDINATOR)])
    assert outcome.retry is not None and outcome.retry.find_coordinator
    assert outcome.retry.backoff_s == txn_state.ADD_PARTITIONS_BACKOFF_S
    assert m.state is TxnState.IN_TRANSACTION


def test_add_partitions_reports_the_cause_not_operation_not_attempted() -> None:
    m = machine_in(TxnState.IN_TRANSACTION)
    outcome = m.partitions_answer([("a", 0, ec.OPERATION_NOT_ATTEMPTED),
                                   ("b", 0, ec.TOPIC_AUTHORIZATION_FAILED),
                                   ("c", 0, ec.OPERATION_NOT_ATTEMPTED)])
    assert outcome.effects == (Effect.PURGE,) and m.state is TxnState.ABORTABLE_ERROR
    assert m.error is not None and m.error.code() == ec.TOPIC_AUTHORIZATION_FAILED
    assert "b [0]" in m.error.str() and not m.needs_epoch_bump


def test_add_partitions_fenced_is_fatal() -> None:
    m = machine_in(TxnState.IN_TRANSACTION)
    outcome = m.partitions_answer([("t", 0, ec.INVALID_PRODUCER_EPOCH)])
    assert outcome.effects == (Effect.FAIL,)
    assert m.error is not None and m.error.code() == KafkaError._FENCED and m.error.fatal()


def test_add_partitions_timeout_and_failure() -> None:
    m = machine_in(TxnState.IN_TRANSACTION)
    assert m.partitions_timed_out("slow") == (Effect.PURGE,)
    assert m.error is not None and m.error.code() == KafkaError._TIMED_OUT
    m = machine_in(TxnState.IN_TRANSACTION)
    fatal = KafkaError(KafkaError._UNSUPPORTED_FEATURE, "no transactions", fatal=True)
    assert m.partitions_failed(fatal) == (Effect.FAIL,) and m.state is TxnState.FATAL_ERROR


# ---- failed batches and the epoch bump (KIP-360) ----------------------------------------------


def test_a_failed_sequenced_batch_makes_the_abort_bump_the_epoch() -> None:
    m = machine_in(TxnState.IN_TRANSACTION)
    effects = m.batch_failed(5, True, KafkaError(ec.MESSAGE_TOO_LARGE, "too big"))
    assert effects == (Effect.PURGE,) and m.state is TxnState.ABORTABLE_ERROR
    assert m.needs_epoch_bump and m.failed_records == 5
    m.begin_abort()
    m.abort_ended()
    assert m.needs_epoch_bump  # the abort asks InitProducerId(current id, epoch) now
    m.aborted()
    assert not m.needs_epoch_bump and m.failed_records == 0


def test_a_batch_purged_before_it_went_out_fails_nothing() -> None:
    m = machine_in(TxnState.IN_TRANSACTION)
    assert m.batch_failed(3, False, KafkaError(KafkaError._PURGE_QUEUE)) == ()
    assert m.state is TxnState.IN_TRANSACTION and not m.needs_epoch_bump
    # A purged batch that had gone out left a hole: no failure, but the abort bumps.
    assert m.batch_failed(3, True, KafkaError(KafkaError._PURGE_INFLIGHT)) == ()
    assert m.state is TxnState.IN_TRANSACTION and m.needs_epoch_bump


@pytest.mark.parametrize("code", [ec.UNKNOWN_PRODUCER_ID, ec.INVALID_PRODUCER_ID_MAPPING])
def test_the_broker_losing_the_producer_bumps_the_epoch(code: int) -> None:
    m = machine_in(TxnState.IN_TRANSACTION)
    m.batch_failed(1, False, KafkaError(code))
    assert m.state is TxnState.ABORTABLE_ERROR and m.needs_epoch_bump
    m = machine_in(TxnState.IN_TRANSACTION)
    outcome = m.answer(code, ADD_OFFSETS_ERRORS, "AddOffsetsToTxn", retry_backoff_s=BACKOFF)
    assert outcome.effects == (Effect.PURGE,) and m.needs_epoch_bump


def test_end_txn_abort_losing_the_producer_is_repaired_by_the_bump() -> None:
    m = machine_in(TxnState.ABORTING)
    outcome = m.answer(ec.UNKNOWN_PRODUCER_ID, END_TXN_ERRORS, "EndTxn abort failed",
                       retry_backoff_s=BACKOFF)
    assert m.state is TxnState.ABORTING and m.needs_epoch_bump
    assert outcome.error is not None and m.abort_end_failed(outcome.error)
    assert not m.abort_end_failed(KafkaError(UNLISTED))  # anything else is raised


def test_abortable_errors_without_a_hole_do_not_bump() -> None:
    m = machine_in(TxnState.IN_TRANSACTION)
    m.batch_failed(1, False, KafkaError(ec.MESSAGE_TOO_LARGE))
    assert m.state is TxnState.ABORTABLE_ERROR and not m.needs_epoch_bump


@pytest.mark.parametrize("code,expected", [
    (ec.PRODUCER_FENCED, KafkaError._FENCED), (ec.INVALID_PRODUCER_EPOCH, KafkaError._FENCED),
    (ec.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, ec.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    (ec.CLUSTER_AUTHORIZATION_FAILED, ec.CLUSTER_AUTHORIZATION_FAILED)])
def test_produce_errors_that_end_the_producer(code: int, expected: int) -> None:
    m = machine_in(TxnState.BEGIN_COMMIT)
    assert m.batch_failed(1, True, KafkaError(code)) == (Effect.FAIL,)
    assert m.state is TxnState.FATAL_ERROR
    assert m.error is not None and m.error.code() == expected and m.error.fatal()


# ---- offsets ----------------------------------------------------------------------------------


def test_offsets_not_committed_in_time_fail_the_transaction() -> None:
    m = machine_in(TxnState.IN_TRANSACTION)
    timed_out = KafkaError(KafkaError._TIMED_OUT, "TxnOffsetCommit timed out", retriable=True)
    outcome = m.offsets_not_committed(timed_out)
    assert outcome.effects == (Effect.PURGE,) and m.state is TxnState.ABORTABLE_ERROR
    assert outcome.error is not None and outcome.error.txn_requires_abort()
    m = machine_in(TxnState.IN_TRANSACTION)
    fatal = KafkaError(ec.PRODUCER_FENCED, "fenced", fatal=True)
    assert m.offsets_not_committed(fatal).effects == ()  # its state was set by its answer


# ---- what the module is -------------------------------------------------------------------------


def test_the_machine_does_no_io_and_imports_no_engine() -> None:
    tree = ast.parse(Path(txn_state.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add("." * node.level + (node.module or ""))
    assert imported <= {"__future__", "enum", "collections.abc", "dataclasses",
                        "confluent_kafka", "kipproducer.protocol"}, imported


def test_no_thread_was_started() -> None:
    before = threading.active_count()
    m = machine_in(TxnState.IN_TRANSACTION)
    m.may_send("t", 0)
    m.partitions_answer([("t", 0, ec.NONE)])
    m.begin_commit()
    m.committed()
    assert threading.active_count() == before
