"""A partition's send state (engine/partition_send.py) without a broker or a sender thread:
its batches come from the real C accumulator (stamped with sequences as the engine's drain
stamps them); the transaction it asks is the real TransactionManager, driven through its state
machine's answers. The engine's use of it against brokers is tested in tests/producer/ and
tests/cluster/ (failover, silent broker, transactions)."""

from __future__ import annotations

import asyncio
import time

from confluent_kafka import KafkaError

from kipproducer.accumulator import ProducerBatch, RecordAccumulator
from kipproducer.engine.partition_send import PartitionSendState
from kipproducer.engine.transactions import EngineHooks, TransactionManager
from kipproducer.protocol import error_codes as ec

TOPIC = "t"
CONN = object()  # stands for the connection batches go out on


def accumulator(producer_id: int = 7, epoch: int = 0) -> RecordAccumulator:
    """One record per batch, so each record is a batch of its own sequence number."""
    acc = RecordAccumulator(batch_num_messages=1, linger_ms=0)
    acc.set_producer(producer_id, epoch)
    return acc


def drained(acc: RecordAccumulator, part: PartitionSendState, count: int,
            start: int = 0) -> list[ProducerBatch]:
    """Append ``count`` records to the partition and drain them into its pending queue."""
    for i in range(start, start + count):
        acc.append(TOPIC, part.partition, None, f"v{i}".encode())
    batches = acc.drain(int(time.monotonic() * 1000), flush=True)
    part.pending.extend(batches)
    return batches


def values(batches) -> list[int]:
    return [b.base_sequence for b in batches]


def test_batches_go_out_in_order_and_leave_flight_when_acknowledged() -> None:
    acc = accumulator()
    part = PartitionSendState(TOPIC, 0, acc)
    batches = drained(acc, part, 3)
    assert values(batches) == [0, 1, 2] and part.next_sequence == 3  # read through from C
    assert part.waiting and not part.blocked(time.monotonic())
    part.send(batches[0], CONN)
    part.send(batches[1], CONN)
    assert list(part.in_flight) == batches[:2] and list(part.pending) == batches[2:]
    assert [b.attempts for b in batches] == [1, 1, 0] and part.conn is CONN
    part.settle(batches[0])
    assert list(part.in_flight) == [batches[1]]
    part.settle(batches[1])
    assert not part.in_flight and not part.unresolved


def test_failed_batches_are_resent_in_sequence_order_after_those_in_flight() -> None:
    acc = accumulator()
    part = PartitionSendState(TOPIC, 0, acc)
    first, second, third, fourth = drained(acc, part, 4)
    for batch in (first, second, third):
        part.send(batch, CONN)
    # The connection is lost: answers come back in any order, the first last.
    for batch in (third, second):
        part.leave_flight(batch)
        part.retry_later(batch, 0.0)
    assert part.failed == [second, third] and part.unresolved
    now = time.monotonic() + 1
    part.resend_failed(now)  # the first batch is still out: nothing overtakes it
    assert part.failed == [second, third] and part.blocked(now)
    part.settle(first)
    part.resend_failed(now)
    assert list(part.pending) == [second, third, fourth] and not part.failed
    assert part.unresolved  # the head went out before: its fate is not known yet
    part.send(second, CONN)
    assert second.attempts == 2  # the same batch and sequence, sent again


def test_a_retry_waits_for_its_backoff() -> None:
    acc = accumulator()
    part = PartitionSendState(TOPIC, 0, acc)
    (batch,) = drained(acc, part, 1)
    part.send(batch, CONN)
    part.leave_flight(batch)
    part.retry_later(batch, 30.0)
    part.resend_failed(time.monotonic())
    assert part.failed == [batch] and part.blocked(time.monotonic())
    part.resend_failed(time.monotonic() + 31)
    assert list(part.pending) == [batch] and not part.blocked(time.monotonic() + 31)
    part.back_off(30.0)  # the leader is unreachable
    assert part.blocked(time.monotonic())


def test_a_broken_sequence_waits_for_a_new_epoch_which_restamps_from_zero() -> None:
    acc = accumulator(producer_id=7, epoch=0)
    part = PartitionSendState(TOPIC, 0, acc)
    batches = drained(acc, part, 3)
    part.send(batches[0], CONN)
    part.leave_flight(batches[0])
    part.retry_later(batches[0], 0.0)
    assert part.unresolved
    part.break_sequence()  # OUT_OF_ORDER_SEQUENCE_NUMBER, say
    assert part.sequence_broken and not part.unresolved  # nothing to resolve under this id
    # The epoch bump, as the engine's _adopt_producer does it: what is not acknowledged goes
    # back to the accumulator, oldest first, and is stamped again from sequence 0.
    again = part.new_producer()
    assert again == batches and not part.sequence_broken and not part.waiting
    for batch in reversed(again):
        acc.reenqueue(batch)
    acc.set_producer(7, 1)
    assert part.next_sequence == 0
    restamped = acc.drain(int(time.monotonic() * 1000), flush=True)
    assert restamped == batches and values(restamped) == [0, 1, 2]
    assert {(b.producer_id, b.producer_epoch) for b in restamped} == {(7, 1)}
    assert part.next_sequence == 3


def test_an_abort_drops_what_waits_and_gives_unsent_sequences_back() -> None:
    acc = accumulator()
    part = PartitionSendState(TOPIC, 0, acc)
    batches = drained(acc, part, 4)
    part.send(batches[0], CONN)
    part.send(batches[1], CONN)
    part.leave_flight(batches[1])
    part.retry_later(batches[1], 0.0)
    assert part.next_sequence == 4
    dropped = part.drop_for_abort()
    assert dropped == batches[1:] and list(part.in_flight) == [batches[0]]
    assert part.next_sequence == 2  # the failed batch's sequence went out: a hole stays
    assert part.take_all() == [batches[0]] and not part.in_flight


def test_waiting_batches_time_out_but_a_failed_one_stays_behind_those_in_flight() -> None:
    acc = accumulator()
    part = PartitionSendState(TOPIC, 0, acc)
    first, second, third = drained(acc, part, 3)
    part.send(first, CONN)
    part.send(second, CONN)
    part.leave_flight(second)
    part.retry_later(second, 0.0)
    assert part.take_waiting(None, lambda batch: False) == []
    taken = part.take_waiting(None, lambda batch: True)
    assert taken == [third] and part.failed == [second]
    error = KafkaError(KafkaError._FATAL, "gone")
    part.settle(first)
    assert part.take_waiting(error, lambda batch: False) == [second] and not part.waiting
    assert part.take_pending() == []


def test_last_offset_is_read_through_from_the_accumulator() -> None:
    acc = accumulator()
    part = PartitionSendState(TOPIC, 2, acc)
    assert part.last_offset == -1
    acc.append(TOPIC, 2, None, b"v", offset=41)
    assert part.last_offset == 41


class Recorded:
    """The engine's side of a TransactionManager, recording what it is asked."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def hooks(self) -> EngineHooks:
        return EngineHooks(
            run=lambda coro, timeout: asyncio.run(coro),
            call_soon=lambda fn: self.calls.append("call_soon"),
            purge=lambda: 0, fail=lambda error: self.calls.append("fail"),
            wake=lambda: self.calls.append("wake"), adopt_producer=lambda pid, epoch: None,
            producer=lambda: (7, 0), cluster=None)  # type: ignore[arg-type]


def test_may_send_outside_and_inside_a_transaction() -> None:
    assert PartitionSendState(TOPIC, 0).may_send()  # no transaction: always
    engine = Recorded()
    txn = TransactionManager("tid", 1000)
    txn.attach(engine.hooks())
    txn.machine.initialised()
    part, other = PartitionSendState(TOPIC, 0, transaction=txn), PartitionSendState(
        TOPIC, 1, transaction=txn)
    assert not part.may_send()  # no transaction begun: nothing goes out

    async def in_transaction() -> None:
        txn.begin()
        assert not part.may_send()  # not added yet: AddPartitionsToTxn is asked for it
        assert txn.machine.partitions_asked() == [(TOPIC, 0)]
        for task in asyncio.all_tasks():  # the request itself needs a broker
            if task is not asyncio.current_task():
                task.cancel()
        txn.machine.partitions_answer([(TOPIC, 0, ec.NONE)])  # the coordinator added it
        assert part.may_send() and not other.may_send()

    asyncio.run(in_transaction())
    # The transaction fails: a batch that slipped in is purged, not sent.
    txn.batch_failed(1, True, KafkaError(ec.INVALID_RECORD, "bad"))
    engine.calls.clear()
    assert not part.may_send() and engine.calls == ["call_soon"]


def test_a_failed_conditional_batch_breaks_its_calls_chain_and_nothing_else() -> None:
    acc = accumulator()
    part = PartitionSendState(TOPIC, 0, acc)
    call, other_call = object(), object()
    for offset in (10, 11, 12):
        acc.append(TOPIC, 0, None, b"v", opaque=call, expected_offset=offset)
    acc.append(TOPIC, 0, None, b"w", opaque=other_call, expected_offset=13)
    batches = acc.drain(int(time.monotonic() * 1000), flush=True)
    assert [b.base_offset for b in batches] == [10, 11, 12, 13]
    for batch in batches:
        part.queue(batch)
    part.send(batches[0], CONN)
    mismatch = KafkaError(ec.INVALID_RECORD, "the log end is 9, not 10")
    # The first batch failed: the call's two later batches continue it and are taken off
    # the queue; the other call's batch stays.
    assert part.conditional_settled(batches[0], mismatch) == batches[1:3]
    assert list(part.pending) == [batches[3]]
    assert part.broken_chain == (call, 13, mismatch)
    # A later batch of the same call, drained after, continues the chain: not to be sent.
    acc.append(TOPIC, 0, None, b"v", opaque=call, expected_offset=13)
    late = acc.drain(int(time.monotonic() * 1000), flush=True)
    assert part.continues_broken_chain(late[0])
    assert not part.continues_broken_chain(batches[3])
    # A delivered conditional batch: the chain holds again.
    assert part.conditional_settled(batches[3], None) == []
    assert part.broken_chain is None and not part.continues_broken_chain(late[0])
