"""The TransactionManager carries its state machine's effects out through the EngineHooks the
engine hands it, and nothing else (it imports no engine). No broker, no sender thread: the
hooks here record what they are asked; the requests are tested against real brokers in
tests/producer/test_producer_transactions.py and tests/cluster/test_cluster_transactions.py."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from kipproducer.engine.transactions import EngineHooks, TransactionManager, TxnState
from kipproducer.protocol import error_codes as ec


class Recorded:
    """What a manager asked of its engine."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.producer = (-1, -1)

    def hooks(self) -> EngineHooks:
        def adopt(producer_id: int, epoch: int) -> None:
            self.calls.append(("adopt", (producer_id, epoch)))
            self.producer = (producer_id, epoch)

        return EngineHooks(
            run=lambda coro, timeout: asyncio.run(coro),
            call_soon=lambda fn: self.calls.append(("call_soon", fn)),
            purge=lambda: 0, fail=lambda error: self.calls.append(("fail", error.code())),
            wake=lambda: self.calls.append(("wake", None)), adopt_producer=adopt,
            producer=lambda: self.producer, cluster=None)  # type: ignore[arg-type]


def resumed(engine: Recorded) -> TransactionManager:
    txn = TransactionManager("tid", 1000)
    txn.attach(engine.hooks())
    txn.resume(7, 3)
    return txn


def test_without_an_engine_a_call_that_needs_one_says_so() -> None:
    txn = TransactionManager("tid", 1000)
    assert (txn.producer_id, txn.producer_epoch) == (-1, -1)
    with pytest.raises(KafkaException) as info:
        txn.resume(1, 0)
    assert info.value.args[0].code() == KafkaError._STATE
    assert "no engine" in info.value.args[0].str() and txn.state is TxnState.INIT


def test_resume_adopts_the_producer_which_is_read_from_the_engine() -> None:
    engine = Recorded()
    txn = resumed(engine)
    assert engine.calls == [("adopt", (7, 3))]
    assert (txn.producer_id, txn.producer_epoch) == (7, 3)
    assert txn.state is TxnState.BEGIN_COMMIT


def test_a_failed_batch_purges_later_in_the_loop() -> None:
    engine = Recorded()
    txn = resumed(engine)
    txn.batch_failed(1, True, KafkaError(ec.MESSAGE_TOO_LARGE, "too big"))
    assert txn.state is TxnState.ABORTABLE_ERROR
    assert [name for name, _ in engine.calls[1:]] == ["call_soon"]
    assert not txn.may_send("t", 0)  # slipped in: dropped too
    assert [name for name, _ in engine.calls[1:]] == ["call_soon", "call_soon"]


def test_a_fenced_batch_fails_the_engine() -> None:
    engine = Recorded()
    txn = resumed(engine)
    txn.batch_failed(1, True, KafkaError(ec.PRODUCER_FENCED))
    assert txn.state is TxnState.FATAL_ERROR
    assert engine.calls[1:] == [("fail", KafkaError._FENCED)]
    txn.batch_failed(1, True, KafkaError(ec.PRODUCER_FENCED))  # once only
    assert len(engine.calls) == 2


def test_the_produce_versions_follow_the_transaction_protocol() -> None:
    txn = TransactionManager("tid", 1000)
    txn.machine.v2 = True       # V2: Produce v12, whose leader adds the partition
    assert txn.produce_versions(3, 10) == (12, 12)
    assert txn.produce_versions(9, 10) == (12, 12)
    txn.machine.v2 = False      # classic: below v12
    assert txn.produce_versions(3, 13) == (3, 11)
    assert txn.produce_versions(3, 10) == (3, 10)
