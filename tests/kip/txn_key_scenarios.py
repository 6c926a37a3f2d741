"""Emulated key conditions inside the Producer's own transaction (docs/per-key-conditional.md,
"Inside a transaction"), as scenarios shared by the stand-in's tests
(tests/kip/test_emulated_txn_key_conditional.py) and Apache Kafka's
(tests/apache_kafka/test_kafka_key_conditional.py). Each takes the bootstrap, a one-partition
topic that keeps every key's last record, and ``read(topic)``: the partition's committed
records as (offset, key, value)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import Producer as StockProducer
from kip_support import KeyReports, kip_producer, unique

from kipproducer.errors import KEY_ABSENT, KEY_OFFSET_MISMATCH, KeyConditionKafkaError
from kipproducer.protocol import error_codes as ec

Read = Callable[[str], list[tuple[int, bytes, bytes]]]


def txn_producer(bootstrap: str, txn_id: str | None = None):
    """An emulated Producer with the engine's transactions, initialised."""
    p = kip_producer(bootstrap, **{"kip.mode": "emulated",
                                   "transactional.id": txn_id or unique("txn")})
    p.init_transactions(30)
    return p


def conditioned(p, topic: str, rows: list[tuple[bytes, bytes, int]]) -> list:
    """One produce_batch call of (key, value, expected key offset) to partition 0: its
    reports (error, partition, offset, key) once flushed."""
    reports = KeyReports()
    p.produce_batch(topic, [{"key": k, "value": v, "expected_key_offset": e}
                            for k, v, e in rows], partition=0, on_delivery=reports)
    assert p.flush(30) == 0
    return reports.items


def commit_sees_its_own_records(bootstrap: str, topic: str, read: Read) -> None:
    """Two aggregates created in one call; a second call of the same transaction conditions
    on the first call's offsets (the transaction's own records count); committed, read back;
    a second transaction goes on from the committed answers."""
    p = txn_producer(bootstrap)
    try:
        p.begin_transaction()
        [(e1, _, o1, _), (e2, _, o2, _)] = conditioned(
            p, topic, [(b"order-1", b"created", KEY_ABSENT), (b"order-2", b"created", KEY_ABSENT)])
        assert (e1, e2, o2) == (None, None, o1 + 1)
        [(e3, _, o3, _)] = conditioned(p, topic, [(b"order-1", b"paid", o1)])
        assert e3 is None and o3 == o2 + 1
        p.commit_transaction(30)
        assert read(topic) == [(o1, b"order-1", b"created"), (o2, b"order-2", b"created"),
                               (o3, b"order-1", b"paid")]
        p.begin_transaction()
        batches: list = []  # one report per batch this time: its offset is the first record's
        p.produce_arrays(topic, [b"shipped", b"paid"], keys=[b"order-1", b"order-2"],
                         partition=0, expected_key_offsets=[o3, o2],
                         on_delivery=lambda err, report: batches.append((err, report)))
        assert p.flush(30) == 0
        [(err, report)] = batches
        o4 = report.offset()
        assert err is None and len(report) == 2 and o4 == o3 + 2  # (the first marker between)
        p.commit_transaction(30)
        assert read(topic)[-2:] == [(o4, b"order-1", b"shipped"), (o4 + 1, b"order-2", b"paid")]
    finally:
        p.close()


def a_stale_condition_fails_the_transaction(bootstrap: str, topic: str, read: Read) -> None:
    """A stale condition in a two-key call: that key KEY_OFFSET_MISMATCH with the actual
    offset, its neighbour OPERATION_NOT_ATTEMPTED, the commit refused (abort needed), and
    nothing of the transaction visible, its unconditioned record of the same call included;
    the producer goes on after the abort."""
    p = txn_producer(bootstrap)
    try:
        p.begin_transaction()
        [(err, _, created, _)] = conditioned(p, topic, [(b"acct", b"open", KEY_ABSENT)])
        assert err is None
        p.commit_transaction(30)
        p.begin_transaction()
        [(stale, _, _, key), (neighbour, _, _, _)] = conditioned(
            p, topic, [(b"acct", b"debit", KEY_ABSENT), (b"other", b"x", KEY_ABSENT)])
        assert isinstance(stale, KeyConditionKafkaError) and key == b"acct"
        assert (stale.code(), stale.expected, stale.actual) == (KEY_OFFSET_MISMATCH,
                                                                KEY_ABSENT, created)
        assert neighbour.code() == ec.OPERATION_NOT_ATTEMPTED
        with pytest.raises(KafkaException) as refused:
            p.commit_transaction(30)
        assert refused.value.args[0].txn_requires_abort()
        p.abort_transaction(30)
        p.begin_transaction()
        [(err, _, debit, _)] = conditioned(p, topic, [(b"acct", b"debit", created)])
        assert err is None
        p.commit_transaction(30)
        assert read(topic) == [(created, b"acct", b"open"), (debit, b"acct", b"debit")]
    finally:
        p.close()


def another_producers_record_fails_the_transaction(bootstrap: str, topic: str,
                                                   read: Read) -> None:
    """A record another producer appends to the partition between two conditional calls of
    one transaction makes the second call's records land past the transaction's index: they
    are reported CONCURRENT_TRANSACTIONS (retriable), the commit is refused, and after the
    abort the next transaction reads that record (its key's condition then fails on it)."""
    p = txn_producer(bootstrap)
    other = StockProducer({"bootstrap.servers": bootstrap})
    try:
        p.begin_transaction()
        [(err, _, first, _)] = conditioned(p, topic, [(b"cart", b"created", KEY_ABSENT)])
        assert err is None
        other.produce(topic, b"emptied", b"cart", partition=0)
        assert other.flush(30) == 0
        [(moved, _, _, _)] = conditioned(p, topic, [(b"cart", b"item", first)])
        assert moved is not None and moved.code() == ec.CONCURRENT_TRANSACTIONS
        assert moved.retriable() and "landed at offset" in moved.str()
        with pytest.raises(KafkaException) as refused:
            p.commit_transaction(30)
        assert refused.value.args[0].txn_requires_abort()
        p.abort_transaction(30)
        [(emptied_at, _, _)] = [r for r in read(topic) if r[2] == b"emptied"]
        p.begin_transaction()
        [(err, _, _, _)] = conditioned(p, topic, [(b"cart", b"created", KEY_ABSENT)])
        assert isinstance(err, KeyConditionKafkaError) and err.actual == emptied_at
        p.abort_transaction(30)
        assert read(topic) == [(emptied_at, b"cart", b"emptied")]
    finally:
        p.close()


def a_zombie_never_commits(bootstrap: str, topic: str, read: Read) -> None:
    """A member's successor with the same transactional.id fences it: the zombie's open
    transaction, conditional records and all, never becomes visible, and the successor's
    index (read after the fence) does not count them."""
    txn_id = unique("owner")
    zombie = txn_producer(bootstrap, txn_id)
    try:
        zombie.begin_transaction()
        [(err, _, _, _)] = conditioned(zombie, topic, [(b"stock-7", b"reserved", KEY_ABSENT)])
        assert err is None
        successor = txn_producer(bootstrap, txn_id)
        try:
            with pytest.raises(KafkaException):
                zombie.commit_transaction(30)
            successor.begin_transaction()
            [(err, _, reserved, _)] = conditioned(successor, topic,
                                                  [(b"stock-7", b"reserved", KEY_ABSENT)])
            assert err is None
            successor.commit_transaction(30)
        finally:
            successor.close()
        assert read(topic) == [(reserved, b"stock-7", b"reserved")]
    finally:
        zombie.close()


def other_records_first_are_refused(bootstrap: str, topic: str, read: Read) -> None:
    """A transaction that already wrote to the partition outside calls with key conditions
    cannot condition there (its own undecided records hide the index): every record of the
    call fails with _STATE, the commit is refused."""
    p = txn_producer(bootstrap)
    try:
        p.begin_transaction()
        p.produce(topic, b"plain", b"k", partition=0)
        [(err, _, _, _)] = conditioned(p, topic, [(b"k", b"next", KEY_ABSENT)])
        assert err is not None and err.code() == KafkaError._STATE
        assert "first key condition comes before" in err.str()
        with pytest.raises(KafkaException):
            p.commit_transaction(30)
        p.abort_transaction(30)
        assert read(topic) == []
    finally:
        p.close()


def a_group_members_index_and_its_zombie(bootstrap: str, topic: str, read: Read) -> None:
    """Producer groups (docs/producer-groups.md), exactly-once: the member that owns a source
    partition writes that partition's aggregate with key conditions in the transaction that
    commits its position. A member that lost the partition (it stopped calling: a zombie)
    appends with the condition that held when it owned it: its transaction is refused at
    the position commit (KIP-447) and aborted, and the new owner's condition, checked
    against its own index, still sees the old owner's last committed record."""
    import time

    from confluent_kafka import TopicPartition

    from kipproducer import Producer
    from kipproducer.producer_group import POSITIONS_TOPIC_PREFIX

    group = unique("keyed-group")
    session_ms = 6000

    def member(**extra):
        p = Producer({"bootstrap.servers": bootstrap, "group.id": group,
                      "source.partition.count": 1, "session.timeout.ms": session_ms,
                      "max.alive.interval.ms": session_ms, "transactional.id": unique("m"),
                      "kip.mode": "emulated", "linger.ms": 1, **extra})
        return p

    a = member()
    b = None
    try:
        assert a.subscribe(timeout=60) == {0: None}
        a.begin_transaction()
        [(err, _, opened, _)] = conditioned(a, topic, [(b"order-9", b"opened", KEY_ABSENT)])
        assert err is None
        a.commit_transaction(positions={0: "event-1"})
        stale = a._group.group_metadata()  # what the zombie commits with below
        b = member()
        b.subscribe(timeout=60)  # a standby until A is gone
        deadline = time.monotonic() + 60
        while b.alive() != {0: "event-1"}:  # A stops calling: B takes its partition over
            assert time.monotonic() < deadline, "B never got the partition"
            time.sleep(0.05)
        # A, not knowing yet, appends on what it last saw and commits its position
        a.begin_transaction()
        [(err, _, _, _)] = conditioned(a, topic, [(b"order-9", b"zombie", opened)])
        assert err is None  # (written in A's transaction; only the commit decides)
        with pytest.raises(KafkaException) as refused:
            a.send_offsets_to_transaction(
                [TopicPartition(POSITIONS_TOPIC_PREFIX + group, 0, 2, metadata="event-2")],
                stale)
        assert refused.value.args[0].code() in (KafkaError.ILLEGAL_GENERATION,
                                                KafkaError.UNKNOWN_MEMBER_ID)
        a.abort_transaction(30)
        b.begin_transaction()
        [(err, _, paid, _)] = conditioned(b, topic, [(b"order-9", b"paid", opened)])
        assert err is None
        b.commit_transaction(positions={0: "event-2"})
        assert read(topic) == [(opened, b"order-9", b"opened"), (paid, b"order-9", b"paid")]
        assert b.alive() == {0: "event-2"}
    finally:
        a.close()
        if b is not None:
            b.close()


SCENARIOS = [commit_sees_its_own_records, a_stale_condition_fails_the_transaction,
             another_producers_record_fails_the_transaction, a_zombie_never_commits,
             other_records_first_are_refused, a_group_members_index_and_its_zombie]
