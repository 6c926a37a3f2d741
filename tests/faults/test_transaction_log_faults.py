"""Faults in the transaction coordinator's log (the matrix's rows on the transaction log).

The coordinator keeps every transactional id's state in its own log (``__transactions`` in
the data dir, Kafka's ``__transaction_state``), a partition log with flush.messages=1: each
state change (InitProducerId's Empty, AddPartitionsToTxn's Ongoing, EndTxn's PrepareCommit,
then CompleteCommit once the markers are written) is appended and fsynced before the client
is answered. A record that cannot be stored is cut back, the log goes offline until a
restart, and the request is answered COORDINATOR_NOT_AVAILABLE.

The broker runs under ``fiu-run -x``; a failure point is turned on just before the request
whose record it must hit (the data topics keep the default flush policy, so the coordinator's
log is the only one that fsyncs). A librdkafka transactional producer and read_committed
consumers show, for InitProducerId, AddPartitionsToTxn and EndTxn:

- the client gets an error, never a commit_transaction that returns although the commit
  decision was not stored;
- read_committed readers never see the records of a commit that was not acknowledged: after
  the restart the next init_transactions of the id fences the old producer and aborts its
  open transaction, and readers see exactly the acknowledged commits;
- a commit whose decision was stored but whose marker could not be written (its partition
  went offline) is acknowledged, as Kafka acknowledges EndTxn once the decision is stored,
  and the restart writes the marker.

The last tests run the coordinator in this process on real logs: one fails the n-th fsync of
its log, for every state record of one transaction's life in turn (crash_sim's fault); one
crashes the OS (crash_sim's model) right after a commit is answered, the data topic keeping
the default flush policy: the record and its COMMIT marker survive (the coordinator fsyncs
each partition once its marker is written); the last fails the periodic compaction of its
log, writing the compacted copy or swapping it in. Every OS-crash state of the coordinator's
log is in test_coordinator_os_crash.py.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import random
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer
from crash_sim import CrashTracer, crash_states, materialize
from fault_support import (
    FSYNC,
    INIT_PRODUCER_ID,
    TIMEOUT_S,
    TOPIC,
    WRITE,
    IdempotentWriter,
    fail,
    fail_os_call,
    is_commit_marker,
    log_batches,
    read_partition,
    restart_healthy,
    start_coordinators,
    watermark_error,
)
from integration_support import create_topics, unique
from raw_client import RawClient

from kipproducer.broker.storage.log_manager import LogManager
from kipproducer.broker.transactions import TransactionCoordinator, TxnState
from kipproducer.protocol import error_codes as ec
from kipproducer.records import encode_batch

#: How long a commit or init the broker cannot store is given before the client gives up.
REFUSED_S = 3


def txn_producer(bootstrap: str, transactional_id: str) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                     "linger.ms": 0})


def ready(bootstrap: str, transactional_id: str) -> Producer:
    """A transactional producer after init_transactions (which fences older instances)."""
    producer = txn_producer(bootstrap, transactional_id)
    producer.init_transactions(TIMEOUT_S)
    return producer


def init_code(bootstrap: str, transactional_id: str | None) -> int:
    """The error code of one InitProducerId (v4) for ``transactional_id``."""
    client = RawClient(bootstrap)
    try:
        return client.request(INIT_PRODUCER_ID, 4, transactional_id=transactional_id,
                              transaction_timeout=60_000, producer_id=-1,
                              producer_epoch=-1).error_code
    finally:
        client.close()


def broker_with_topic(kip_broker, fiu, prefix: str, config: dict[str, str] | None = None):
    """A broker under libfiu and a new one-partition topic on it."""
    broker = kip_broker(wrapper=fiu)
    topic = unique(prefix)
    create_topics(broker.bootstrap, {topic: 1}, config)
    return broker, topic


def commit(producer: Producer, topic: str, *values: bytes) -> None:
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value)
    producer.commit_transaction(TIMEOUT_S)


def values(bootstrap: str, topic: str, isolation: str = "read_committed") -> list[bytes]:
    return [value for _, value in read_partition(bootstrap, topic, quiet_s=1.0,
                                                 isolation=isolation)]


@pytest.mark.parametrize(("point", "error"), [(FSYNC, errno.EIO), (WRITE, errno.ENOSPC)],
                         ids=["fsync-eio", "write-enospc"])
def test_a_commit_decision_not_stored_fails_and_is_aborted_after_restart(
        kip_broker, fiu, point: str, error: int) -> None:
    broker, topic = broker_with_topic(kip_broker, fiu, "txn-log-end")
    first = ready(broker.bootstrap, "tx")
    commit(first, topic, b"committed-1")
    first.begin_transaction()
    first.produce(topic, b"never-committed")
    assert first.flush(TIMEOUT_S) == 0  # in the partition, in an open transaction

    fail(broker.pid, point, error=error)
    with pytest.raises(KafkaException):
        first.commit_transaction(REFUSED_S)  # PrepareCommit cannot be stored
    assert values(broker.bootstrap, topic) == [b"committed-1"]
    fail(broker.pid, point, on=False)
    if point == FSYNC:  # (a failing write() takes the broker's log lines with it)
        broker.wait_for_log("transactional id 'tx': storing PrepareCommit failed")

    restart_healthy(broker)
    second = ready(broker.bootstrap, "tx")  # fences the first producer, aborting its transaction
    commit(second, topic, b"committed-2")
    assert values(broker.bootstrap, topic) == [b"committed-1", b"committed-2"]
    # The refused transaction's record is in the log, aborted (not lost, not committed).
    assert values(broker.bootstrap, topic, "read_uncommitted") == [
        b"committed-1", b"never-committed", b"committed-2"]


def test_init_producer_id_fails_while_its_state_cannot_be_stored(kip_broker, fiu) -> None:
    broker, topic = broker_with_topic(kip_broker, fiu, "txn-log-init")

    fail(broker.pid, FSYNC)
    with pytest.raises(KafkaException):
        txn_producer(broker.bootstrap, "a").init_transactions(REFUSED_S)
    assert init_code(broker.bootstrap, None) == ec.COORDINATOR_NOT_AVAILABLE  # idempotent too
    fail(broker.pid, FSYNC, on=False)
    broker.wait_for_log("cannot store the next producer id block")
    # Nothing was stored or handed out: the same id initializes once the disk works.
    a = ready(broker.bootstrap, "a")
    commit(a, topic, b"a-1")

    fail(broker.pid, FSYNC)
    with pytest.raises(KafkaException):
        txn_producer(broker.bootstrap, "b").init_transactions(REFUSED_S)
    fail(broker.pid, FSYNC, on=False)
    broker.wait_for_log("transactional id 'b': storing Empty failed")
    # The coordinator's log stays offline until the restart, the disk healthy or not.
    assert init_code(broker.bootstrap, "c") == ec.COORDINATOR_NOT_AVAILABLE

    restart_healthy(broker)
    b = ready(broker.bootstrap, "b")
    commit(b, topic, b"b-1")
    a_again = ready(broker.bootstrap, "a")
    commit(a_again, topic, b"a-2")
    assert values(broker.bootstrap, topic) == [b"a-1", b"b-1", b"a-2"]


def test_add_partitions_not_stored_fail_the_transaction(kip_broker, fiu) -> None:
    broker, topic = broker_with_topic(kip_broker, fiu, "txn-log-add")
    first = ready(broker.bootstrap, "tx")
    commit(first, topic, b"committed-1")

    first.begin_transaction()
    fail(broker.pid, FSYNC)
    first.produce(topic, b"never-sent")  # its AddPartitionsToTxn cannot be stored
    with pytest.raises(KafkaException):
        first.commit_transaction(REFUSED_S)
    fail(broker.pid, FSYNC, on=False)
    broker.wait_for_log("transactional id 'tx': storing Ongoing failed")

    restart_healthy(broker)
    second = ready(broker.bootstrap, "tx")
    commit(second, topic, b"committed-2")
    assert values(broker.bootstrap, topic) == [b"committed-1", b"committed-2"]
    # The partition was never added, so the producer never sent its record there.
    assert values(broker.bootstrap, topic, "read_uncommitted") == [
        b"committed-1", b"committed-2"]


def test_a_stored_commit_whose_marker_fails_is_completed_by_the_restart(
        kip_broker, fiu) -> None:
    broker, topic = broker_with_topic(kip_broker, fiu, "txn-log-marker", {"flush.messages": "1"})
    producer = ready(broker.bootstrap, "tx")
    producer.begin_transaction()
    producer.produce(topic, b"committed-late")
    assert producer.flush(TIMEOUT_S) == 0
    # Another producer's append fails its fsync: the partition goes offline.
    writer = IdempotentWriter(broker.bootstrap, topic)
    fail(broker.pid, FSYNC)
    assert writer.send(0, b"refused").error_code == ec.KAFKA_STORAGE_ERROR
    fail(broker.pid, FSYNC, on=False)
    writer.close()

    producer.commit_transaction(TIMEOUT_S)  # the decision is stored: acknowledged
    broker.wait_for_log("transactional id 'tx': completing PrepareCommit failed")
    assert watermark_error(broker.bootstrap, topic) == "KAFKA_STORAGE_ERROR"

    restart_healthy(broker)
    broker.wait_for_log("completing transaction 'tx' left in PrepareCommit")
    assert values(broker.bootstrap, topic) == [b"committed-late"]


# -- in this process: the n-th record of the coordinator's log fails its fsync ----------------

TOPIC_PARTITION = (TOPIC, 0)


async def _one_transaction(coordinator: TransactionCoordinator, logs: LogManager
                           ) -> tuple[str, int]:
    """Init, add the partition, write a record there, commit: (the step that was refused, or
    "acknowledged"; its error code)."""
    init = await coordinator.init_producer_id("tx", 60_000)
    if init.error_code != ec.NONE:
        return "init", init.error_code
    pid, epoch = init.producer_id, init.producer_epoch
    code = await coordinator.add_partitions("tx", pid, epoch, [TOPIC_PARTITION])
    if code != ec.NONE:
        return "add", code
    batch = encode_batch([(b"k", b"v", None, 1)], producer_id=pid, producer_epoch=epoch,
                         base_sequence=0, transactional=True)
    logs.get_log(*TOPIC_PARTITION).append(bytearray(batch), assign_offsets=True)
    code = await coordinator.end_transaction("tx", pid, epoch, commit=True)
    return ("end" if code != ec.NONE else "acknowledged"), code


def _markers(logs: LogManager) -> list[bool]:
    """Whether each control batch of the partition commits (True) or aborts."""
    return [is_commit_marker(batch) for batch in log_batches(logs.get_log(*TOPIC_PARTITION))
            if batch.is_control]


@pytest.mark.parametrize("failing", [1, 2, 3, 4, None],
                         ids=["Empty", "Ongoing", "PrepareCommit", "CompleteCommit", "none"])
def test_each_state_record_failing_in_turn(tmp_path: Path, monkeypatch, failing) -> None:
    expected = {1: "init", 2: "add", 3: "end", 4: "acknowledged", None: "acknowledged"}

    async def scenario() -> None:
        # (only the coordinator's log: the n-th fsync of its segments fails)
        tracer = CrashTracer(tmp_path / "data" / "__transactions", fail_fsync_at=failing)
        tracer.install(monkeypatch)
        started = await start_coordinators(tmp_path / "data")
        refused, code = await _one_transaction(started.transactions, started.logs)
        assert tracer.segment_fsyncs >= (failing or 4)
        await started.close()
        monkeypatch.undo()
        assert refused == expected[failing]
        assert code == (ec.NONE if refused == "acknowledged" else ec.COORDINATOR_NOT_AVAILABLE)

        started = await start_coordinators(tmp_path / "data")  # the disk is healthy again
        coordinator = started.transactions
        init = await coordinator.init_producer_id("tx", 60_000)
        while init.error_code == ec.CONCURRENT_TRANSACTIONS:  # fencing an open transaction
            init = await coordinator.init_producer_id("tx", 60_000)
        assert init.error_code == ec.NONE
        assert coordinator.get("tx").state == TxnState.EMPTY
        markers = _markers(started.logs)
        await started.close()
        # Committed exactly when acknowledged, with one marker (the restart that completes a
        # stored decision writes none twice); an unacknowledged commit is aborted.
        if refused == "acknowledged":
            assert markers == [True]
        elif refused == "end":
            assert markers == [False]
        else:
            assert markers == []

    asyncio.run(asyncio.wait_for(scenario(), 20))


def test_an_acknowledged_commit_survives_an_os_crash_under_the_default_flush_policy(
        tmp_path: Path, monkeypatch) -> None:
    """The data topic keeps the default flush policy: the marker, and the transaction's
    record before it, are fsynced before the transaction is stored complete and the commit
    answered, so an OS crash right after the answer that loses everything unsynced keeps
    both. (Before, the marker could be lost while the coordinator's log, fsynced, held the
    transaction complete: nothing wrote it again, the record stayed in an open transaction
    for good, and a later transaction's abort marker made it read as aborted.)"""

    async def scenario() -> None:
        tracer = CrashTracer(tmp_path / "live")
        tracer.install(monkeypatch)
        started = await start_coordinators(tmp_path / "live")
        refused, _ = await _one_transaction(started.transactions, started.logs)
        assert refused == "acknowledged"
        answered = tracer.operations  # the next crash point is the state at the answer
        assert (await started.transactions.init_producer_id("other", 60_000)).error_code == 0
        await started.close()
        monkeypatch.undo()
        point = tracer.points[answered]
        assert point.index == answered
        variant, files = next(crash_states(point, random.Random(0)))
        assert variant == "unsynced-lost"
        materialize(files, tmp_path / "crashed")

        started = await start_coordinators(tmp_path / "crashed")
        records = [bytes(r.value) for batch in log_batches(started.logs.get_log(*TOPIC_PARTITION))
                   if not batch.is_control for r in batch]
        markers = _markers(started.logs)
        await started.close()
        assert (records, markers) == ([b"v"], [True])

    asyncio.run(asyncio.wait_for(scenario(), 20))


# -- in this process: the periodic compaction of the coordinator's log fails -----------------

@pytest.mark.parametrize(("name", "error", "suffix", "online"), [
    ("open", errno.EMFILE, ".cleaned", True),  # writing the compacted copy
    ("replace", errno.EIO, "", False),  # swapping the copy in
], ids=["open-of-the-copy", "rename-at-the-swap"])
def test_a_failed_compaction_of_the_transaction_log_is_one_line(
        tmp_path: Path, monkeypatch, caplog, name: str, error: int, suffix: str,
        online: bool) -> None:
    """The coordinator compacts its log after each expiration check (hourly by default).
    A failure writing the compacted copy leaves the log as it was and online: one line, and
    the next check compacts. A failed swap takes the log offline as any partition's (one
    line; COORDINATOR_NOT_AVAILABLE until a restart, which finds every state)."""

    async def scenario() -> None:
        logs = LogManager(tmp_path / "data")
        directory = tmp_path / "data" / "__transactions"
        coordinator = TransactionCoordinator(directory, segment_bytes=1024,
                                             allocate_producer_id=logs.allocate_producer_id)
        await coordinator.start()
        for i in range(30):  # about 6 state records per segment
            assert (await coordinator.init_producer_id(f"tx{i % 3}", 60_000)).error_code == 0
        epochs = {f"tx{i}": coordinator.get(f"tx{i}").producer_epoch for i in range(3)}
        fail_os_call(monkeypatch, name, error, lambda path: path.endswith(suffix))
        with caplog.at_level(logging.INFO, logger="kipproducer.broker"):
            await coordinator.remove_expired()  # raises nothing
        monkeypatch.undo()
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1 and not errors[0].exc_info, caplog.text
        assert f"[Errno {error}]" in errors[0].getMessage()
        answer = await coordinator.init_producer_id("tx0", 60_000)
        if online:
            assert answer.error_code == ec.NONE
            epochs["tx0"] += 1
            caplog.clear()
            with caplog.at_level(logging.INFO, logger="kipproducer.broker"):
                await coordinator.remove_expired()
            assert "compacted" in caplog.text and "ERROR" not in caplog.text
        else:
            assert answer.error_code == ec.COORDINATOR_NOT_AVAILABLE
        await coordinator.close()

        coordinator = TransactionCoordinator(directory, segment_bytes=1024,
                                             allocate_producer_id=logs.allocate_producer_id)
        await coordinator.start()
        assert {f"tx{i}": coordinator.get(f"tx{i}").producer_epoch for i in range(3)} == epochs
        await coordinator.close()
        logs.close()

    asyncio.run(asyncio.wait_for(scenario(), 20))
