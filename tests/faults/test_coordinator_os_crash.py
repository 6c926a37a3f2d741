"""OS crashes of the coordinators' logs, simulated (the matrix's rows "OS crash" and "faults
while writing the transaction log, consumer offsets").

The transaction coordinator (with its partitions' LogManager and the group coordinator, as
the broker starts them) and the group coordinator alone run a workload in this process under
the crash simulator (crash_sim.py), which records a crash point before every file operation
of their files and derives from each the states an OS crash may leave (unsynced data lost,
kept, cut at any byte, or with pages lost). The workload notes what was acknowledged (a call
answered with success) at each operation count. Every state is started on, as the broker
starts, and checked.

The transaction coordinator's log (flush.messages=1, its own compaction among the state
changes), with a data topic under the default flush policy and under flush.messages=1:

- the start raises nothing and the coordinator answers (its log is not offline);
- every transactional id's stored producer id and epoch is one it was given, at least the
  last one acknowledged (InitProducerId);
- a new InitProducerId for each id gets a producer id and epoch never handed out before (to
  any id), and a new id a producer id never handed out;
- every transaction whose record is in the partition is ended by a marker after the restart
  (none lost, none left open): COMMIT for an acknowledged commit and for a commit whose
  PrepareCommit was stored (the start completes it), ABORT for everything else (an
  acknowledged abort, a transaction fenced by a re-init, one whose EndTxn was not stored);
- an acknowledged EndTxn's record is there (its marker's fsync took it along), and with
  flush.messages=1 a stored commit decision's record too;
- a transaction's group offsets follow its decision: the group's committed offset is the last
  committed transaction's, an aborted transaction's never appears, nothing stays pending
  once every id was initialized again. (Under the default flush policy a commit whose
  decision was stored but whose EndTxn was not answered can come back committed without its
  record, which was never fsynced: its offsets are then ahead of the records.)

The group coordinator's log (every record fsynced; compacted every few commits into a
snapshot: temp file, fsync, rename, the old segment removed):

- the start raises nothing;
- every acknowledged commit is there, or a later commit of the same partition (acknowledged
  or not): never an older value, never a value nobody committed; a transaction's offsets
  appear only once its commit was stored, an aborted transaction's never;
- an acknowledged rebalance's member and assignment come back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import pytest
from crash_sim import CrashPoint, CrashTracer, materialized_states
from fault_support import (
    TOPIC,
    Coordinators,
    group_coordinator,
    is_commit_marker,
    log_batches,
    start_coordinators,
)

from kipproducer.broker.transactions import TransactionMetadata, TxnState
from kipproducer.broker.transactions.store import TransactionStore
from kipproducer.protocol import error_codes as ec
from kipproducer.records import encode_batch

Pair = tuple[int, int]  # (producer id, epoch)
W = TypeVar("W")


async def _check_every_state(work: W, tracer: CrashTracer,
                             check: Callable[[W, CrashPoint, str, Path], Awaitable[None]], *,
                             seed: int) -> int:
    """``check(work, point, where, directory)`` on every crash state of the tracer's points;
    how many states there were."""
    states = 0
    for point, where, crashed in materialized_states(tracer.points, seed=seed):
        states += 1
        await check(work, point, where, crashed)
    return states


# -- the transaction coordinator ---------------------------------------------------------------

#: Small enough that the workload rolls its log and compacts closed segments.
TXN_SEGMENT_BYTES = 700
GROUP = "g"
#: Each transactional id's offsets go to their own partition of GROUP.
OFFSETS_TP = {"a": ("t", 0), "b": ("t", 1), "c": ("t", 2)}
ROUNDS = 2


@dataclass
class Txn:
    label: bytes  # the value of its one record in the data partition
    transactional_id: str
    pair: Pair
    commit: bool | None  # what EndTxn asked; None: fenced by a re-init instead
    offset: int  # the offset its TxnOffsetCommit committed
    begun_at: int  # operations before AddPartitionsToTxn was answered NONE
    ended_at: int | None = None  # operations before EndTxn was answered NONE

    def committed(self, point: CrashPoint, stored: dict[str, TransactionMetadata]) -> bool:
        """Whether the transaction must come out committed from a crash at ``point`` that
        left ``stored`` (the transaction began before it): an acknowledged EndTxn's decision,
        else a commit whose PrepareCommit was stored."""
        if self.ended_at is not None and self.ended_at <= point.index:
            return self.commit is True
        return self.commit is True and stored[self.transactional_id].state in (
            TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT)


@dataclass
class TxnWorkload:
    tracer: CrashTracer
    #: (operations before the answer, transactional id, pair): InitProducerId answered NONE
    handed_out: list[tuple[int, str, Pair]] = field(default_factory=list)
    #: (operations after a call, every id's current pair): bounds what a crash can store
    after_call: list[tuple[int, dict[str, Pair]]] = field(default_factory=list)
    txns: list[Txn] = field(default_factory=list)
    sequences: dict[Pair, int] = field(default_factory=dict)
    #: flush.messages=1: every record is fsynced before its append returns
    records_durable: bool = False

    def note(self, started: Coordinators) -> None:
        current = {}
        for transactional_id in OFFSETS_TP:
            metadata = started.transactions.get(transactional_id)
            if metadata is not None:
                current[transactional_id] = (metadata.producer_id, metadata.producer_epoch)
        self.after_call.append((self.tracer.operations, current))

    def acked_pairs(self, point: CrashPoint) -> list[tuple[str, Pair]]:
        return [(tid, pair) for ops, tid, pair in self.handed_out if ops <= point.index]

    def bound(self, point: CrashPoint) -> dict[str, Pair]:
        """Every id's pair after the call running at ``point`` (a crash stores no later one)."""
        for ops, current in self.after_call:
            if ops > point.index:
                return current
        return self.after_call[-1][1]


async def _init(started: Coordinators, transactional_id: str) -> tuple[int, Pair]:
    """InitProducerId, retried while it fences an open transaction: (code, pair)."""
    for _ in range(5):
        answer = await started.transactions.init_producer_id(transactional_id, 60_000)
        if answer.error_code != ec.CONCURRENT_TRANSACTIONS:
            break
    return answer.error_code, (answer.producer_id, answer.producer_epoch)


async def _begin(work: TxnWorkload, started: Coordinators, transactional_id: str, pair: Pair,
                 commit: bool | None, offset: int) -> Txn:
    """Add the partition and the group, write the transaction's record, commit its offset."""
    coordinator = started.transactions
    assert await coordinator.add_partitions(transactional_id, *pair, [(TOPIC, 0)]) == ec.NONE
    work.note(started)
    txn = Txn(b"%s-%d" % (transactional_id.encode(), len(work.txns)), transactional_id, pair,
              commit, offset, work.tracer.operations)
    work.txns.append(txn)
    sequence = work.sequences.get(pair, 0)
    work.sequences[pair] = sequence + 1
    batch = encode_batch([(None, txn.label, None, 1000)], producer_id=pair[0],
                         producer_epoch=pair[1], base_sequence=sequence, transactional=True)
    started.logs.get_log(TOPIC, 0).append(bytearray(batch), assign_offsets=True)
    assert await coordinator.add_offsets(transactional_id, *pair, GROUP) == ec.NONE
    work.note(started)
    tp = OFFSETS_TP[transactional_id]
    assert started.groups is not None
    answer = await started.groups.txn_commit_offsets(GROUP, *pair, "", -1, None,
                                                     {tp: (offset, None, "")})
    assert answer == {tp: ec.NONE}
    return txn


async def _end(work: TxnWorkload, started: Coordinators, txn: Txn) -> None:
    assert txn.commit is not None
    code = await started.transactions.end_transaction(txn.transactional_id, *txn.pair,
                                                      commit=txn.commit)
    assert code == ec.NONE
    txn.ended_at = work.tracer.operations
    work.note(started)


async def _txn_workload(data_dir: Path, monkeypatch, topic_config: dict[str, str]
                        ) -> TxnWorkload:
    """Three ids, each round: a commits, b aborts, c's transaction is fenced by c's re-init,
    a re-inits (an epoch bump) every other round; the log compacts after each round. The
    last transaction (a's) stays open."""
    tracer = CrashTracer(data_dir)
    tracer.install(monkeypatch)
    work = TxnWorkload(tracer, records_durable=topic_config.get("flush.messages") == "1")
    started = await start_coordinators(data_dir, with_groups=True, topic_config=topic_config,
                                       segment_bytes=TXN_SEGMENT_BYTES)
    await asyncio.sleep(0.05)  # the coordinator's timer runs its first checks (nothing to do)
    pairs = {}

    async def init(transactional_id: str) -> None:
        code, pairs[transactional_id] = await _init(started, transactional_id)
        assert code == ec.NONE
        work.handed_out.append((tracer.operations, transactional_id, pairs[transactional_id]))
        work.note(started)

    for transactional_id in OFFSETS_TP:
        await init(transactional_id)
    for round_ in range(ROUNDS):
        await _end(work, started, await _begin(work, started, "a", pairs["a"], True, 10 * round_))
        await _end(work, started, await _begin(work, started, "b", pairs["b"], False, 10 * round_))
        await _begin(work, started, "c", pairs["c"], None, 10 * round_)
        await init("c")
        if round_ % 2:
            await init("a")
        await started.transactions.remove_expired()  # nothing expires; the log compacts
        work.note(started)
    await _begin(work, started, "a", pairs["a"], True, 1000)  # left open
    await started.close()
    monkeypatch.undo()
    return work


def _outcomes(started: Coordinators) -> dict[bytes, bool | None]:
    """Each transactional record's label -> whether the first marker of its producer after it
    commits, or None when no marker follows it."""
    open_: dict[int, list[bytes]] = {}
    outcome: dict[bytes, bool | None] = {}
    for batch in log_batches(started.logs.get_log(TOPIC, 0)):
        if batch.is_control:
            for label in open_.pop(batch.producer_id, []):
                outcome[label] = is_commit_marker(batch)
        else:
            for record in batch:
                outcome[bytes(record.value)] = None
                open_.setdefault(batch.producer_id, []).append(bytes(record.value))
    return outcome


async def _check_txn_state(work: TxnWorkload, point: CrashPoint, where: str,
                           crashed: Path) -> None:
    # What the crash left stored, read as the coordinator's start reads it.
    store = TransactionStore(crashed / "__transactions", segment_bytes=TXN_SEGMENT_BYTES)
    stored = store.load()
    store.close()
    bound = work.bound(point)
    for transactional_id, pair in work.acked_pairs(point):
        metadata = stored.get(transactional_id)
        assert metadata is not None, f"{where}: {transactional_id} lost"
        kept = (metadata.producer_id, metadata.producer_epoch)
        assert pair <= kept <= bound[transactional_id], (where, transactional_id, kept)

    started = await start_coordinators(crashed, with_groups=True, segment_bytes=TXN_SEGMENT_BYTES)
    try:
        for transactional_id, metadata in stored.items():
            after = started.transactions.get(transactional_id)
            assert after is not None
            if metadata.state == TxnState.PREPARE_COMMIT:  # completed by the start
                assert after.state == TxnState.COMPLETE_COMMIT, where
            elif metadata.state == TxnState.PREPARE_ABORT:
                assert after.state == TxnState.COMPLETE_ABORT, where
        # A new InitProducerId of every id (fencing any open transaction) and of a new one.
        handed_out = {pair for _, pair in work.acked_pairs(point)}
        for transactional_id in [*OFFSETS_TP, "new"]:
            code, pair = await _init(started, transactional_id)
            assert code == ec.NONE, (where, transactional_id, code)
            assert pair not in handed_out, f"{where}: {transactional_id} got {pair} again"
            metadata = stored.get(transactional_id)
            if metadata is None or pair[0] != metadata.producer_id:
                assert pair[0] not in {pid for pid, _ in handed_out}, (where, pair)
            else:
                assert pair[1] > metadata.producer_epoch, (where, transactional_id, pair)

        outcomes = _outcomes(started)
        last_committed: dict[str, int] = {}
        for txn in work.txns:
            if txn.begun_at > point.index:
                continue
            expected = txn.committed(point, stored)
            if expected:
                last_committed[txn.transactional_id] = txn.offset
            acked = txn.ended_at is not None and txn.ended_at <= point.index
            if acked or (expected and work.records_durable):
                # (with its offsets: committed offsets never ahead of the records)
                assert txn.label in outcomes, f"{where}: {txn.label!r} lost"
            elif txn.label not in outcomes:
                continue  # never written, or (unsynced) not kept
            got = outcomes[txn.label]
            assert got is not None, f"{where}: {txn.label!r} has no marker"
            assert got == expected, f"{where}: {txn.label!r} committed: {got}"
        assert started.groups is not None
        offsets = {tp: o.offset for tp, o in started.groups.fetch_offsets(GROUP).items()}
        assert offsets == {OFFSETS_TP[tid]: offset for tid, offset in last_committed.items()}, (
            where, offsets)
        assert not started.groups.unstable_partitions(GROUP), where
    finally:
        await started.close()


@pytest.mark.parametrize("topic_config", [{}, {"flush.messages": "1"}],
                         ids=["default-flush", "flush-every"])
def test_every_os_crash_state_of_the_transaction_log_starts_consistent(
        tmp_path: Path, monkeypatch, topic_config: dict[str, str]) -> None:
    async def scenario() -> int:
        work = await _txn_workload(tmp_path / "live", monkeypatch, topic_config)
        assert work.tracer.points and any(
            "__transactions" in path and path.endswith(".cleaned")
            for point in work.tracer.points for path in point.current), "no compaction"
        return await _check_every_state(work, work.tracer, _check_txn_state, seed=4501)

    assert asyncio.run(scenario()) >= 400


# -- the group coordinator ----------------------------------------------------------------------

#: The transactions of the group workload: (producer id, epoch, partition, offset, commit);
#: commit None: left open at the end.
GROUP_TXNS = [(7, 0, ("t", 5), 500, True), (8, 0, ("t", 6), 600, False),
              (7, 1, ("t", 8), 510, True), (9, 0, ("t", 9), 610, False),
              (10, 0, ("t", 7), 700, None)]


@dataclass
class Commit:
    value: tuple[int, str]  # (offset, metadata)
    started_at: int  # operations before the call that makes it committed
    acked_at: int  # operations before its answer


@dataclass
class GroupWorkload:
    tracer: CrashTracer
    #: partition -> the values committed to it, in order (a transaction's at its commit)
    commits: dict[tuple[str, int], list[Commit]] = field(default_factory=dict)
    #: partition of each transaction -> (pending from, ended at, started ending at)
    txns: dict[tuple[str, int], tuple[int, int | None, int | None]] = field(default_factory=dict)
    synced_at: int | None = None

    def committed(self, tp: tuple[str, int], value: tuple[int, str], started_at: int) -> None:
        self.commits.setdefault(tp, []).append(Commit(value, started_at, self.tracer.operations))


async def _group_workload(data_dir: Path, monkeypatch) -> GroupWorkload:
    """Commits from outside the group, transactions committed and aborted between them, a
    member joining, commits of its generation; one transaction left open; a clean stop."""
    tracer = CrashTracer(data_dir)
    tracer.install(monkeypatch)
    work = GroupWorkload(tracer)
    groups = group_coordinator(data_dir)
    await groups.start()
    generation, member = -1, ""

    async def commit(i: int) -> None:
        tp = ("t", i % 3)
        started_at = tracer.operations
        answer = await groups.commit_offsets(GROUP, generation, member, None,
                                             {tp: (10 * i, None, f"m{i}")})
        assert answer == {tp: ec.NONE}
        work.committed(tp, (10 * i, f"m{i}"), started_at)

    async def transaction(producer_id: int, epoch: int, tp: tuple[str, int], offset: int,
                          end: bool | None) -> None:
        answer = await groups.txn_commit_offsets(GROUP, producer_id, epoch, "", -1, None,
                                                 {tp: (offset, None, "txn")})
        assert answer == {tp: ec.NONE}
        pending_at = tracer.operations
        if end is None:
            work.txns[tp] = (pending_at, None, None)
            return
        await commit(100 + len(work.txns))  # a plain commit while the transaction is open
        started_at = tracer.operations
        await groups.complete_transaction(GROUP, producer_id, epoch, end)
        work.txns[tp] = (pending_at, tracer.operations, started_at)
        if end:
            work.committed(tp, (offset, "txn"), started_at)

    for i in range(12):
        await commit(i)
        if i % 4 == 3:
            await transaction(*GROUP_TXNS[i // 4])
    joined = await groups.join_group(GROUP, "", None, "consumer", [("range", b"meta")], 10_000,
                                     10_000, "client", "/127.0.0.1",
                                     require_known_member_id=False)
    assert joined.error_code == ec.NONE, joined
    synced = await groups.sync_group(GROUP, joined.generation_id, joined.member_id, None,
                                     "consumer", "range", {joined.member_id: b"assignment"})
    assert synced.error_code == ec.NONE, synced
    work.synced_at = tracer.operations
    generation, member = joined.generation_id, joined.member_id
    for i in range(12, 24):
        await commit(i)
    await transaction(*GROUP_TXNS[3])
    await transaction(*GROUP_TXNS[4])
    await groups.close()
    monkeypatch.undo()
    return work


async def _check_group_state(work: GroupWorkload, point: CrashPoint, where: str,
                             crashed: Path) -> None:
    groups = group_coordinator(crashed)
    await groups.start()
    try:
        offsets = {tp: (o.offset, o.metadata) for tp, o in groups.fetch_offsets(GROUP).items()}
        unstable = groups.unstable_partitions(GROUP)
        members = [m.assignment for m in groups.describe_group(GROUP).members]
    finally:
        await groups.close()
    for tp in work.commits.keys() | offsets.keys():
        history = work.commits.get(tp, [])
        written = [c.value for c in history if c.started_at <= point.index]
        acked = sum(c.acked_at <= point.index for c in history)
        got = offsets.get(tp)
        assert got is None or got in written, f"{where}: {tp} is {got}, never committed"
        if acked:
            assert got is not None, f"{where}: {tp}'s commits lost"
            assert written.index(got) >= acked - 1, f"{where}: {tp} went back to {got}"
    for tp, (pending_at, ended_at, ending_at) in work.txns.items():
        if ended_at is not None and ended_at <= point.index:
            assert tp not in unstable, f"{where}: {tp}'s ended transaction still pending"
        elif pending_at <= point.index and (ending_at is None or ending_at > point.index):
            assert tp in unstable, f"{where}: {tp}'s pending offsets lost"
    if work.synced_at is not None and work.synced_at <= point.index:
        assert members == [b"assignment"], where


def test_every_os_crash_state_of_the_group_log_starts_consistent(
        tmp_path: Path, monkeypatch) -> None:
    async def scenario() -> int:
        work = await _group_workload(tmp_path / "live", monkeypatch)
        snapshots = sum(path.endswith(".tmp") for point in work.tracer.points
                        for path in point.current)
        assert snapshots >= 5, "the group log did not compact"
        return await _check_every_state(work, work.tracer, _check_group_state, seed=4502)

    assert asyncio.run(scenario()) >= 400
