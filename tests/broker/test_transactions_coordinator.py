"""The transaction coordinator's state machine against real partition logs and a real group
coordinator: every transition, every error Kafka answers, timeouts, expiry, and restarts in
every state (a crash between the stored decision and the markers included).

Each test runs on its own event loop (``run``); ``Node`` is one broker's worth of storage: a
LogManager with topic ``t`` (2 partitions), a GroupCoordinator and the TransactionCoordinator,
all in one data dir, with a clock the test moves.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from kipproducer.broker.groups import GroupCoordinator
from kipproducer.broker.storage.log_manager import LogManager
from kipproducer.broker.transactions import (
    TransactionCoordinator,
    TransactionMetadata,
    TransactionStore,
    TxnState,
)
from kipproducer.protocol import error_codes as ec
from kipproducer.records import decode_batches, encode_batch

TIMEOUT_MS = 60_000
T0, T1 = ("t", 0), ("t", 1)


def run(test: Callable[[], Awaitable[Any]]) -> Any:
    async def bounded() -> Any:
        return await asyncio.wait_for(test(), 20)

    return asyncio.run(bounded())


class Node:
    """Logs, groups and transactions of one data dir; ``restart()`` closes and reopens all."""

    def __init__(self, data_dir: Path, **settings: Any) -> None:
        self.data_dir = data_dir
        self.settings = settings
        self.now = 1_000_000
        self.logs: LogManager | None = None
        self.groups: GroupCoordinator | None = None
        self.txn: TransactionCoordinator | None = None
        self.sequences: dict[tuple[int, tuple[str, int]], int] = {}

    async def start(self) -> Node:
        self.logs = LogManager(self.data_dir)
        if "t" not in self.logs.topics():
            self.logs.create_topic("t", 2)
        self.groups = GroupCoordinator(self.data_dir / "__groups", fsync=False)
        await self.groups.start()
        self.txn = TransactionCoordinator(
            self.data_dir / "__transactions",
            allocate_producer_id=self.logs.allocate_producer_id,
            logs=self.logs, groups=self.groups, clock_ms=lambda: self.now,
            abort_interval_ms=3_600_000, expire_interval_ms=3_600_000, **self.settings)
        await self.txn.start()
        return self

    async def stop(self) -> None:
        await self.txn.close()
        await self.groups.close()
        self.logs.close()

    async def restart(self) -> None:
        await self.stop()
        await self.start()

    def log(self, tp: tuple[str, int]):
        return self.logs.get_log(*tp)

    def produce(self, tp: tuple[str, int], producer_id: int, epoch: int, n: int = 2,
                transactional: bool = True) -> None:
        sequence = self.sequences.get((producer_id, tp), 0)
        batch = encode_batch([(b"k", b"v%d" % i, None, self.now) for i in range(n)],
                             producer_id=producer_id, producer_epoch=epoch,
                             base_sequence=sequence, transactional=transactional)
        self.log(tp).append(bytearray(batch), assign_offsets=True)
        self.sequences[(producer_id, tp)] = sequence + n

    def markers(self, tp: tuple[str, int]) -> list[tuple[int, bool, int]]:
        """(offset, commit, producer epoch) of every control batch in the partition."""
        found = []
        log = self.log(tp)
        offset = log.log_start_offset
        while offset < log.log_end_offset:
            result = log.read(offset, 1 << 20)
            for batch in decode_batches(result.records, validate=True, strict=False):
                if batch.is_control:
                    key = bytes(next(iter(batch)).key)
                    found.append((batch.base_offset, key[3] == 1, batch.producer_epoch))
            offset = result.next_offset
        return found

    async def begin(self, transactional_id: str = "tx", partitions=(T0, T1)) -> tuple[int, int]:
        """InitProducerId + AddPartitionsToTxn + data in every partition: an Ongoing txn."""
        init = await self.txn.init_producer_id(transactional_id, TIMEOUT_MS)
        assert init.error_code == ec.NONE
        pid, epoch = init.producer_id, init.producer_epoch
        assert await self.txn.add_partitions(transactional_id, pid, epoch, partitions) == ec.NONE
        for tp in partitions:
            self.produce(tp, pid, epoch)
        return pid, epoch

    def state(self, transactional_id: str = "tx") -> TxnState | None:
        current = self.txn.get(transactional_id)
        return None if current is None else current.state


def with_node(body: Callable[[Node], Awaitable[Any]], tmp_path: Path, **settings: Any) -> Any:
    async def test() -> Any:
        node = await Node(tmp_path / "data", **settings).start()
        try:
            return await body(node)
        finally:
            await node.stop()

    return run(test)


# -- InitProducerId --------------------------------------------------------------------------------


def test_init_producer_id_new_id_then_epoch_bumps(tmp_path):
    async def body(node: Node) -> None:
        first = await node.txn.init_producer_id("tx", TIMEOUT_MS)
        assert (first.error_code, first.producer_epoch) == (ec.NONE, 0)
        second = await node.txn.init_producer_id("tx", TIMEOUT_MS)
        assert (second.error_code, second.producer_id, second.producer_epoch) == (
            ec.NONE, first.producer_id, 1)
        meta = node.txn.get("tx")
        assert meta.state == TxnState.EMPTY and meta.last_producer_epoch == -1
        other = await node.txn.init_producer_id("other", TIMEOUT_MS)
        assert other.producer_id != first.producer_id

    with_node(body, tmp_path)


def test_init_producer_id_refuses_bad_timeouts_and_empty_id(tmp_path):
    async def body(node: Node) -> None:
        for timeout in (0, -5, 900_001):
            result = await node.txn.init_producer_id("tx", timeout)
            assert result.error_code == ec.INVALID_TRANSACTION_TIMEOUT, timeout
        assert (await node.txn.init_producer_id("", 1000)).error_code == ec.INVALID_REQUEST
        assert node.txn.get("tx") is None  # nothing stored for a refused request
        assert (await node.txn.init_producer_id("tx", 900_000)).error_code == ec.NONE

    with_node(body, tmp_path)


def test_init_producer_id_with_expected_epoch_kip_360(tmp_path):
    async def body(node: Node) -> None:
        first = await node.txn.init_producer_id("tx", TIMEOUT_MS)
        pid = first.producer_id
        bumped = await node.txn.init_producer_id("tx", TIMEOUT_MS, (pid, 0))
        assert (bumped.error_code, bumped.producer_id, bumped.producer_epoch) == (ec.NONE, pid, 1)
        assert node.txn.get("tx").last_producer_epoch == 0
        # A retry of that bump (its answer was lost) gets the same answer, no second bump.
        retry = await node.txn.init_producer_id("tx", TIMEOUT_MS, (pid, 0))
        assert (retry.error_code, retry.producer_epoch) == (ec.NONE, 1)
        # Neither the current nor the last epoch, or another producer id: fenced.
        stale = await node.txn.init_producer_id("tx", TIMEOUT_MS, (pid, 7))
        assert stale.error_code == ec.PRODUCER_FENCED
        other = await node.txn.init_producer_id("tx", TIMEOUT_MS, (pid + 100, 1))
        assert other.error_code == ec.PRODUCER_FENCED
        # A new instance (no expected epoch) bumps and forgets the last epoch.
        fresh = await node.txn.init_producer_id("tx", TIMEOUT_MS)
        assert fresh.producer_epoch == 2
        late = await node.txn.init_producer_id("tx", TIMEOUT_MS, (pid, 1))
        assert late.error_code == ec.PRODUCER_FENCED

    with_node(body, tmp_path)


def test_exhausted_epoch_rotates_the_producer_id(tmp_path):
    async def body(node: Node) -> None:
        await node.stop()
        store = TransactionStore(node.data_dir / "__transactions")
        store.write(TransactionMetadata("tx", producer_id=500, producer_epoch=32766,
                                        timeout_ms=TIMEOUT_MS, state=TxnState.COMPLETE_COMMIT,
                                        update_ms=node.now))
        store.close()
        await node.start()
        rotated = await node.txn.init_producer_id("tx", TIMEOUT_MS, (500, 32766))
        assert rotated.error_code == ec.NONE
        assert rotated.producer_id != 500 and rotated.producer_epoch == 0
        meta = node.txn.get("tx")
        assert (meta.last_producer_id, meta.last_producer_epoch) == (500, 32766)
        # The same call again (a retry) is recognised and answered alike.
        retry = await node.txn.init_producer_id("tx", TIMEOUT_MS, (500, 32766))
        assert (retry.error_code, retry.producer_id, retry.producer_epoch) == (
            ec.NONE, rotated.producer_id, 0)

    with_node(body, tmp_path)


def test_init_producer_id_fences_an_ongoing_transaction(tmp_path):
    async def body(node: Node) -> None:
        pid, epoch = await node.begin()
        second = await node.txn.init_producer_id("tx", TIMEOUT_MS)
        assert second.error_code == ec.CONCURRENT_TRANSACTIONS
        meta = node.txn.get("tx")
        assert (meta.state, meta.producer_epoch) == (TxnState.COMPLETE_ABORT, epoch + 1)
        for tp in (T0, T1):
            assert node.markers(tp) == [(2, False, epoch + 1)]
            assert node.log(tp).last_stable_offset == node.log(tp).high_watermark == 3
            assert node.log(tp).aborted_transactions(0, 3) == [(pid, 0)]
        # The old instance is fenced everywhere.
        assert await node.txn.end_transaction("tx", pid, epoch, True) == ec.PRODUCER_FENCED
        assert await node.txn.add_partitions("tx", pid, epoch, [T0]) == ec.PRODUCER_FENCED
        assert node.txn.verify_produce("tx", pid, epoch, *T0) == ec.INVALID_PRODUCER_EPOCH
        # The new instance retries and gets the next epoch.
        retry = await node.txn.init_producer_id("tx", TIMEOUT_MS)
        assert (retry.error_code, retry.producer_id, retry.producer_epoch) == (
            ec.NONE, pid, epoch + 2)

    with_node(body, tmp_path)


# -- a transaction's life --------------------------------------------------------------------------


@pytest.mark.parametrize("commit", [True, False])
def test_end_transaction_writes_markers_then_completes(tmp_path, commit):
    async def body(node: Node) -> None:
        pid, epoch = await node.begin(partitions=(T0,))
        assert node.txn.verify_produce("tx", pid, epoch, *T0) == ec.NONE
        # Added later, without data: it still gets a marker, as Kafka writes one to every
        # partition of the transaction.
        assert await node.txn.add_partitions("tx", pid, epoch, [T1]) == ec.NONE
        assert node.log(T0).last_stable_offset == 0
        assert await node.txn.end_transaction("tx", pid, epoch, commit) == ec.NONE
        assert node.markers(T0) == [(2, commit, epoch)]
        assert node.markers(T1) == [(0, commit, epoch)]
        assert node.log(T0).last_stable_offset == node.log(T0).high_watermark == 3
        assert node.log(T0).aborted_transactions(0, 3) == ([] if commit else [(pid, 0)])
        meta = node.txn.get("tx")
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        assert meta.state == done and not meta.partitions and not meta.groups
        # A retry of the same EndTxn is answered NONE and writes nothing; the opposite one
        # is an invalid state.
        assert await node.txn.end_transaction("tx", pid, epoch, commit) == ec.NONE
        assert len(node.markers(T0)) == 1
        assert await node.txn.end_transaction("tx", pid, epoch, not commit) == (
            ec.INVALID_TXN_STATE)
        # The next transaction starts from Complete*.
        assert node.txn.verify_produce("tx", pid, epoch, *T0) == ec.INVALID_TXN_STATE
        assert await node.txn.add_partitions("tx", pid, epoch, [T1]) == ec.NONE
        meta = node.txn.get("tx")
        assert meta.state == TxnState.ONGOING and meta.partitions == {T1}
        assert meta.start_ms == node.now

    with_node(body, tmp_path)


def test_errors_of_end_and_add(tmp_path):
    async def body(node: Node) -> None:
        init = await node.txn.init_producer_id("tx", TIMEOUT_MS)
        pid, epoch = init.producer_id, init.producer_epoch
        assert await node.txn.end_transaction("tx", pid, epoch, True) == ec.INVALID_TXN_STATE
        assert await node.txn.end_transaction("tx", pid, epoch, False) == ec.INVALID_TXN_STATE
        assert await node.txn.end_transaction("nope", pid, epoch, True) == (
            ec.INVALID_PRODUCER_ID_MAPPING)
        assert await node.txn.end_transaction("tx", pid + 1, epoch, True) == (
            ec.INVALID_PRODUCER_ID_MAPPING)
        assert await node.txn.end_transaction("tx", pid, epoch + 1, True) == ec.PRODUCER_FENCED
        assert await node.txn.add_partitions("nope", pid, epoch, [T0]) == (
            ec.INVALID_PRODUCER_ID_MAPPING)
        assert await node.txn.add_partitions("tx", pid, epoch - 1, [T0]) == ec.PRODUCER_FENCED
        assert await node.txn.add_offsets("tx", pid + 1, epoch, "g") == (
            ec.INVALID_PRODUCER_ID_MAPPING)
        assert await node.txn.end_transaction("", pid, epoch, True) == ec.INVALID_REQUEST
        assert node.txn.verify_produce("nope", pid, epoch, *T0) == ec.INVALID_PRODUCER_ID_MAPPING
        assert node.txn.verify_produce("tx", pid, epoch, *T0) == ec.INVALID_TXN_STATE
        assert node.state() == TxnState.EMPTY

    with_node(body, tmp_path)


class GatedGroups:
    """The real group coordinator, with complete_transaction held until ``gate`` is set: the
    test can look at a transaction while its completion runs."""

    def __init__(self, groups: GroupCoordinator) -> None:
        self.groups = groups
        self.gate = asyncio.Event()
        self.waiting = asyncio.Event()

    async def complete_transaction(self, *args: Any) -> None:
        self.waiting.set()
        await self.gate.wait()
        await self.groups.complete_transaction(*args)


def test_requests_during_a_completion_get_concurrent_transactions(tmp_path):
    async def body(node: Node) -> None:
        gated = GatedGroups(node.groups)
        node.txn._groups = gated
        pid, epoch = await node.begin(partitions=(T0,))
        assert await node.txn.add_offsets("tx", pid, epoch, "g") == ec.NONE
        ending = asyncio.create_task(node.txn.end_transaction("tx", pid, epoch, True))
        await asyncio.wait_for(gated.waiting.wait(), 5)
        assert node.state() == TxnState.PREPARE_COMMIT
        assert node.markers(T0) == [(2, True, epoch)]  # markers first, then the groups
        assert await node.txn.add_partitions("tx", pid, epoch, [T1]) == (
            ec.CONCURRENT_TRANSACTIONS)
        assert await node.txn.end_transaction("tx", pid, epoch, True) == (
            ec.CONCURRENT_TRANSACTIONS)
        assert await node.txn.end_transaction("tx", pid, epoch, False) == (
            ec.CONCURRENT_TRANSACTIONS)  # pending first, as Kafka checks it
        assert (await node.txn.init_producer_id("tx", TIMEOUT_MS)).error_code == (
            ec.CONCURRENT_TRANSACTIONS)
        assert node.txn.verify_produce("tx", pid, epoch, *T0) == ec.CONCURRENT_TRANSACTIONS
        gated.gate.set()
        assert await ending == ec.NONE
        assert node.state() == TxnState.COMPLETE_COMMIT

    with_node(body, tmp_path)


def test_group_offsets_commit_with_the_transaction(tmp_path):
    async def body(node: Node) -> None:
        pid, epoch = await node.begin(partitions=(T0,))
        assert node.txn.verify_txn_offset_commit("tx", pid, epoch, "g") == ec.INVALID_TXN_STATE
        assert await node.txn.add_offsets("tx", pid, epoch, "g") == ec.NONE
        assert node.txn.get("tx").groups == {"g"}
        assert node.txn.verify_txn_offset_commit("tx", pid, epoch, "g") == ec.NONE
        assert node.txn.verify_txn_offset_commit("tx", pid, epoch + 1, "g") == (
            ec.INVALID_PRODUCER_EPOCH)
        assert node.txn.verify_txn_offset_commit("tx", pid + 1, epoch, "g") == (
            ec.INVALID_PRODUCER_ID_MAPPING)
        codes = await node.groups.txn_commit_offsets(
            "g", pid, epoch, "", -1, None, {T0: (2, -1, "")})
        assert codes == {T0: ec.NONE}
        assert node.groups.fetch_offsets("g", [T0])[T0][0] == -1  # pending, not visible
        assert await node.txn.end_transaction("tx", pid, epoch, True) == ec.NONE
        assert node.groups.fetch_offsets("g", [T0])[T0][0] == 2

    with_node(body, tmp_path)


# -- timeouts and expiry ---------------------------------------------------------------------------


def test_timed_out_transaction_is_aborted_and_its_producer_fenced(tmp_path):
    async def body(node: Node) -> None:
        pid, epoch = await node.begin()
        node.now += TIMEOUT_MS  # not yet: Kafka aborts once start + timeout < now
        assert await node.txn.abort_timed_out() == 0
        node.now += 1
        assert await node.txn.abort_timed_out() == 1
        meta = node.txn.get("tx")
        assert (meta.state, meta.producer_epoch) == (TxnState.COMPLETE_ABORT, epoch + 1)
        for tp in (T0, T1):
            assert node.markers(tp) == [(2, False, epoch + 1)]
            assert node.log(tp).last_stable_offset == 3
        assert node.txn.verify_produce("tx", pid, epoch, *T0) == ec.INVALID_PRODUCER_EPOCH
        assert await node.txn.end_transaction("tx", pid, epoch, True) == ec.PRODUCER_FENCED
        assert await node.txn.abort_timed_out() == 0

    with_node(body, tmp_path)


def test_idle_ids_expire_and_stay_gone_after_a_restart(tmp_path):
    async def body(node: Node) -> None:
        await node.txn.init_producer_id("idle", TIMEOUT_MS)
        node.now += 500
        await node.begin("busy")
        node.now += 1000 - 500
        assert await node.txn.remove_expired() == 1
        assert node.txn.get("idle") is None and node.state("busy") == TxnState.ONGOING
        assert node.txn.describe("idle").error_code == ec.error_code("TRANSACTIONAL_ID_NOT_FOUND")
        await node.restart()
        assert node.txn.get("idle") is None and node.state("busy") == TxnState.ONGOING
        # A new InitProducerId for an expired id starts it over with a new producer id.
        again = await node.txn.init_producer_id("idle", TIMEOUT_MS)
        assert (again.error_code, again.producer_epoch) == (ec.NONE, 0)

    with_node(body, tmp_path, expiration_ms=1000)


# -- describe and list -----------------------------------------------------------------------------


def test_describe_and_list_transactions(tmp_path):
    async def body(node: Node) -> None:
        pid, epoch = await node.begin("a", partitions=(T1, T0))
        await node.txn.init_producer_id("b", 5000)
        found = node.txn.describe("a")
        assert (found.error_code, found.state, found.producer_id, found.producer_epoch) == (
            ec.NONE, "Ongoing", pid, epoch)
        assert (found.timeout_ms, found.start_ms, found.partitions) == (
            TIMEOUT_MS, node.now, {T0, T1})
        assert node.txn.describe("zzz").error_code == ec.error_code("TRANSACTIONAL_ID_NOT_FOUND")

        def ids(*args: Any) -> set[str]:
            listed, _unknown = node.txn.list_transactions(*args)
            return {t.transactional_id for t in listed}

        assert ids() == {"a", "b"}
        assert ids(["Ongoing"]) == {"a"}
        assert ids(["Empty", "Ongoing"]) == {"a", "b"}
        assert ids([], [pid]) == {"a"}
        listed, unknown = node.txn.list_transactions(["Ongoing", "Bogus"])
        assert unknown == ["Bogus"] and [t.transactional_id for t in listed] == ["a"]
        node.now += 10
        # Running for longer than the duration: "a" (10 ms) only for durations below 10;
        # "b" never started one (start -1), which Kafka counts as very long.
        assert ids([], [], 9) == {"a", "b"}
        assert ids([], [], 10) == {"b"}

    with_node(body, tmp_path)


# -- restarts --------------------------------------------------------------------------------------


@pytest.mark.parametrize("state", ["Empty", "Ongoing", "CompleteCommit", "CompleteAbort"])
def test_restart_keeps_every_stored_state(tmp_path, state):
    async def body(node: Node) -> None:
        if state == "Empty":
            init = await node.txn.init_producer_id("tx", TIMEOUT_MS)
            pid, epoch = init.producer_id, init.producer_epoch
        else:
            pid, epoch = await node.begin()
        if state.startswith("Complete"):
            assert await node.txn.end_transaction(
                "tx", pid, epoch, state == "CompleteCommit") == ec.NONE
        before = node.txn.get("tx")
        await node.restart()
        assert node.txn.get("tx") == before
        if state == "Ongoing":
            assert node.txn.verify_produce("tx", pid, epoch, *T0) == ec.NONE
            assert node.log(T0).last_stable_offset == 0
            node.now += TIMEOUT_MS + 1
            assert await node.txn.abort_timed_out() == 1
            assert node.log(T0).last_stable_offset == node.log(T0).high_watermark
        else:
            init = await node.txn.init_producer_id("tx", TIMEOUT_MS)
            assert (init.producer_id, init.producer_epoch) == (pid, epoch + 1)

    with_node(body, tmp_path)


@pytest.mark.parametrize("commit", [True, False])
@pytest.mark.parametrize("markers_before_crash", [0, 1])
def test_restart_completes_a_prepared_transaction(tmp_path, commit, markers_before_crash):
    """A crash after the decision was stored: none, or some, of the markers were written."""

    async def body(node: Node) -> None:
        pid, epoch = await node.begin()
        assert await node.txn.add_offsets("tx", pid, epoch, "g") == ec.NONE
        await node.groups.txn_commit_offsets("g", pid, epoch, "", -1, None, {T0: (7, -1, "")})
        ongoing = node.txn.get("tx")
        await node.stop()
        # What the coordinator stores first when the EndTxn arrives, and then the crash.
        store = TransactionStore(node.data_dir / "__transactions")
        prepare = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        store.write(ongoing.transit(prepare))
        store.close()
        if markers_before_crash:
            logs = LogManager(node.data_dir)
            logs.get_log(*T0).append_marker(pid, epoch, commit=commit)
            logs.close()
        await node.start()
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        assert node.state() == done
        for tp in (T0, T1):
            assert node.markers(tp) == [(2, commit, epoch)]  # exactly one each
            assert node.log(tp).last_stable_offset == 3
        assert node.groups.fetch_offsets("g", [T0])[T0][0] == (7 if commit else -1)
        # And it stays complete across one more restart.
        await node.restart()
        assert node.state() == done and len(node.markers(T0)) == 1

    with_node(body, tmp_path)


def test_store_replays_the_last_state_of_each_id(tmp_path):
    store = TransactionStore(tmp_path / "tx")
    base = TransactionMetadata("a", producer_id=1, producer_epoch=0, timeout_ms=10,
                               state=TxnState.EMPTY, update_ms=5)
    ongoing = base.transit(TxnState.ONGOING, partitions=frozenset({T0}),
                           groups=frozenset({"g"}), start_ms=6)
    store.write(base)
    store.write(ongoing)
    store.write(TransactionMetadata("b", producer_id=2, producer_epoch=3, timeout_ms=10,
                                    state=TxnState.COMPLETE_ABORT, update_ms=1))
    store.remove("b")
    store.close()
    reopened = TransactionStore(tmp_path / "tx")
    assert reopened.load() == {"a": ongoing}
    reopened.close()


def test_store_compaction_keeps_the_latest_state(tmp_path):
    store = TransactionStore(tmp_path / "tx", segment_bytes=512)
    meta = TransactionMetadata("a", producer_id=1, producer_epoch=0, timeout_ms=10,
                               state=TxnState.EMPTY, update_ms=5)
    for epoch in range(40):
        meta = meta.transit(TxnState.EMPTY, producer_epoch=epoch)
        store.write(meta)
    store.write(TransactionMetadata("gone", producer_id=2, producer_epoch=0, timeout_ms=10,
                                    state=TxnState.EMPTY, update_ms=5))
    store.remove("gone")
    before = store._log.size_in_bytes
    store.compact()
    assert store._log.size_in_bytes < before
    store.close()
    reopened = TransactionStore(tmp_path / "tx", segment_bytes=512)
    assert reopened.load() == {"a": meta}
    reopened.close()


def test_illegal_transitions_are_refused():
    from kipproducer.broker.transactions.state import IllegalTransition

    empty = TransactionMetadata("a", producer_id=1, producer_epoch=0, timeout_ms=10,
                                state=TxnState.EMPTY, update_ms=5)
    with pytest.raises(IllegalTransition):
        empty.transit(TxnState.PREPARE_COMMIT)
    with pytest.raises(IllegalTransition):
        empty.transit(TxnState.COMPLETE_ABORT)
    ongoing = empty.transit(TxnState.ONGOING)
    with pytest.raises(IllegalTransition):
        ongoing.transit(TxnState.DEAD)
    assert ongoing.transit(TxnState.PREPARE_EPOCH_FENCE).transit(
        TxnState.PREPARE_ABORT).state == TxnState.PREPARE_ABORT


# -- failures while completing ------------------------------------------------------------------


def test_a_failed_completion_stays_prepared_and_is_retried(tmp_path):
    async def body(node: Node) -> None:
        pid, epoch = await node.begin(partitions=(T0,))
        assert await node.txn.add_offsets("tx", pid, epoch, "g") == ec.NONE
        await node.groups.txn_commit_offsets("g", pid, epoch, "", -1, None, {T0: (2, -1, "")})
        await node.groups.close()  # the group store is gone: the completion cannot finish
        # The decision is durable, so the client is told NONE (Kafka answers after Prepare).
        assert await node.txn.end_transaction("tx", pid, epoch, True) == ec.NONE
        assert node.state() == TxnState.PREPARE_COMMIT
        assert node.txn.pending_state("tx") is None
        assert await node.txn.add_partitions("tx", pid, epoch, [T1]) == (
            ec.CONCURRENT_TRANSACTIONS)
        await node.groups.start()
        await node.txn.abort_timed_out()  # the timer's pass also retries completions
        assert node.state() == TxnState.COMPLETE_COMMIT
        assert node.markers(T0) == [(2, True, epoch)]  # not written twice
        assert node.groups.fetch_offsets("g", [T0])[T0][0] == 2

    with_node(body, tmp_path)


def test_a_cancelled_request_does_not_leave_its_change_half_done(tmp_path):
    async def body(node: Node) -> None:
        gated = GatedGroups(node.groups)
        node.txn._groups = gated
        pid, epoch = await node.begin(partitions=(T0,))
        assert await node.txn.add_offsets("tx", pid, epoch, "g") == ec.NONE
        request = asyncio.create_task(node.txn.end_transaction("tx", pid, epoch, True))
        await asyncio.wait_for(gated.waiting.wait(), 5)
        request.cancel()  # the client's connection closed
        await asyncio.gather(request, return_exceptions=True)
        gated.gate.set()
        await node.txn.close()  # waits for the change to finish
        await node.txn.start()
        assert node.state() == TxnState.COMPLETE_COMMIT

    with_node(body, tmp_path)


def test_a_partition_deleted_during_the_transaction_is_skipped(tmp_path):
    async def body(node: Node) -> None:
        node.logs.create_topic("gone", 1)
        pid, epoch = await node.begin(partitions=(T0, ("gone", 0)))
        node.logs.delete_topic("gone")
        assert await node.txn.end_transaction("tx", pid, epoch, False) == ec.NONE
        assert node.state() == TxnState.COMPLETE_ABORT
        assert node.markers(T0) == [(2, False, epoch)]

    with_node(body, tmp_path)


def test_broker_properties_of_the_coordinator():
    from kipproducer.broker.broker_config import BrokerConfig, BrokerConfigError

    defaults = BrokerConfig.from_properties({})
    assert (defaults.transaction_max_timeout_ms, defaults.transactional_id_expiration_ms) == (
        900_000, 604_800_000)
    assert defaults.transaction_abort_timed_out_transaction_cleanup_interval_ms == 10_000
    assert defaults.transaction_remove_expired_transaction_cleanup_interval_ms == 3_600_000
    set_ = BrokerConfig.from_properties({"transaction.max.timeout.ms": "5000"})
    assert set_.transaction_max_timeout_ms == 5000
    with pytest.raises(BrokerConfigError, match="transaction.abort"):
        BrokerConfig.from_properties(
            {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "0"})


@pytest.mark.parametrize(
    ("epoch", "last_epoch", "expected", "answer"),
    [
        (3, -1, None, (4, -1)),  # a new instance: bump, nobody may retry
        (3, -1, 3, (4, 3)),  # the producer bumps its own epoch (KIP-360)
        (4, 3, 3, (4, 3)),  # a retry of that bump: the same answer
        (4, 3, 2, None),  # neither: fenced
        (-1, -1, 9, (0, -1)),  # an id with no epoch yet accepts any expected epoch
    ],
)
def test_epoch_bump_rules(epoch, last_epoch, expected, answer):
    from kipproducer.broker.transactions.state import bump_epoch

    current = TransactionMetadata("a", producer_id=1, producer_epoch=epoch, timeout_ms=10,
                                  state=TxnState.EMPTY, update_ms=5,
                                  last_producer_epoch=last_epoch)
    assert bump_epoch(current, expected) == answer
