"""I/O errors other than a full disk in the group coordinator's log (the matrix's rows on the
group log; the full disk is in test_disk_full.py).

The group coordinator keeps committed offsets, the pending offsets of open transactions and
each completed rebalance's group metadata in its own log (``__groups`` in the data dir, Kafka's
``__consumer_offsets``): every record is written and fsynced before the request is answered,
and the log is compacted into a snapshot (temp file, fsync, rename, then the old segment is
removed) when it grows past a size, at a clean stop, and at a start that replayed records.

A record that cannot be stored is cut back and the request is answered NOT_COORDINATOR, as
Kafka maps a storage error of ``__consumer_offsets`` (the client looks the coordinator up
again and retries); the coordinator keeps serving, and a commit works again once the disk
does. Shown here:

- in this process, on a coordinator whose log compacts every few commits: each write, fsync,
  open, rename and unlink of its files failing in turn, once or from then on (until a restart
  on a healthy disk): after the restart every commit answered with success is there (plain,
  transactional once its transaction completed, and the group's generation), the offsets are
  the ones the coordinator served before the restart, and no failure logged a traceback;
- a running broker under ``fiu-run -x`` with librdkafka clients: OffsetCommit and
  TxnOffsetCommit refused while fsync (or write) fails, one log line, commits working again
  without a restart, and the restart keeping exactly what was acknowledged.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from fault_support import (
    FSYNC,
    INIT_PRODUCER_ID,
    TIMEOUT_S,
    WRITE,
    fail,
    group_coordinator,
    restart_healthy,
)
from integration_support import create_topics, unique
from raw_client import RawClient

from kipproducer.broker.groups import GroupCoordinator
from kipproducer.protocol import error_codes as ec

# -- in this process: the n-th file operation of the group log fails ------------------------

#: The errno each operation fails with.
FAILURES = {"write": errno.EIO, "fsync": errno.EIO, "open": errno.EMFILE,
            "replace": errno.EIO, "unlink": errno.EIO}


class FailingOps:
    """Wraps os.open/write/fsync/replace/unlink; the ``nth`` call of ``op`` on a file under
    ``root`` (directories included: their fsync is how renames become durable) fails with
    FAILURES[op], and with ``persist`` so does every later one."""

    def __init__(self, root: Path, op: str, nth: int, *, persist: bool) -> None:
        self.root = str(root.resolve())
        self.op, self.nth, self.persist = op, nth, persist
        self.calls = {name: 0 for name in FAILURES}
        self.failed = 0
        self.healthy = False
        self._fds: set[int] = set()
        self._real = {name: getattr(os, name) for name in FAILURES}

    def _ours(self, target) -> bool:
        if isinstance(target, int):
            return target in self._fds
        return os.path.abspath(os.fspath(target)).startswith(self.root)

    def _check(self, op: str, target) -> None:
        if self.healthy or not self._ours(target):
            return
        self.calls[op] += 1
        if op == self.op and (self.calls[op] == self.nth
                              or (self.persist and self.calls[op] > self.nth)):
            self.failed += 1
            raise OSError(FAILURES[op], os.strerror(FAILURES[op]) + " (injected)")

    def install(self, monkeypatch) -> None:
        real = self._real

        def open_(path, flags, mode=0o777, *, dir_fd=None):
            self._check("open", path)
            fd = real["open"](path, flags, mode, dir_fd=dir_fd)
            if self._ours(path):
                self._fds.add(fd)
            return fd

        def write(fd, data):
            self._check("write", fd)
            return real["write"](fd, data)

        def fsync(fd):
            self._check("fsync", fd)
            return real["fsync"](fd)

        def replace(src, dst, **kwargs):
            self._check("replace", src)
            return real["replace"](src, dst, **kwargs)

        def unlink(path, **kwargs):
            self._check("unlink", path)
            return real["unlink"](path, **kwargs)

        for name, wrapper in (("open", open_), ("write", write), ("fsync", fsync),
                              ("replace", replace), ("unlink", unlink)):
            monkeypatch.setattr(os, name, wrapper)


@dataclass
class Acknowledged:
    offsets: dict[tuple[str, int], tuple[int, str]] = field(default_factory=dict)
    generation: int | None = None
    refused: int = 0
    #: Errors raised to the caller rather than logged: a failed start (the broker's start
    #: reports it, one line and exit status 2) and a failed transaction completion (the
    #: transaction coordinator logs it and retries).
    raised: list[str] = field(default_factory=list)


async def _commit(groups: GroupCoordinator, acked: Acknowledged, generation: int, member: str,
                  i: int) -> None:
    tp = ("t", i % 3)
    answer = await groups.commit_offsets("g", generation, member, None,
                                         {tp: (10 * i, None, f"m{i}")})
    if answer[tp] == ec.NONE:
        acked.offsets[tp] = (10 * i, f"m{i}")
    else:
        assert answer[tp] == ec.NOT_COORDINATOR, answer
        acked.refused += 1


async def _life(data_dir: Path, acked: Acknowledged) -> dict[tuple[str, int], tuple[int, str]]:
    """Commits from outside the group, a transaction's offsets, a member joining, commits of
    its generation, a clean stop: what OffsetFetch answered just before the stop."""
    groups = group_coordinator(data_dir)
    try:
        await groups.start()
    except OSError as exc:
        acked.raised.append(str(exc))
        return {}
    for i in range(8):
        await _commit(groups, acked, -1, "", i)
    tp = ("t", 5)
    txn = await groups.txn_commit_offsets("g", 7, 0, "", -1, None, {tp: (500, None, "txn")})
    if txn[tp] == ec.NONE:
        for _ in range(3):  # the transaction coordinator retries a completion that failed
            try:
                await groups.complete_transaction("g", 7, 0, commit=True)
            except OSError as exc:
                acked.raised.append(str(exc))
                continue
            acked.offsets[tp] = (500, "txn")
            break
    else:
        acked.refused += 1
    joined = await groups.join_group("g", "", None, "consumer", [("range", b"meta")], 10_000,
                                     10_000, "client", "/127.0.0.1",
                                     require_known_member_id=False)
    assert joined.error_code == ec.NONE, joined
    synced = await groups.sync_group("g", joined.generation_id, joined.member_id, None,
                                     "consumer", "range", {joined.member_id: b"assignment"})
    if synced.error_code == ec.NONE:
        acked.generation = joined.generation_id
        for i in range(8, 14):
            await _commit(groups, acked, joined.generation_id, joined.member_id, i)
    else:
        assert synced.error_code == ec.NOT_COORDINATOR, synced
        acked.refused += 1
    served = {tp: (o.offset, o.metadata) for tp, o in groups.fetch_offsets("g").items()}
    await groups.close()
    return served


async def _count_operations(data_dir: Path, monkeypatch) -> dict[str, int]:
    ops = FailingOps(data_dir, "open", 0, persist=False)
    ops.install(monkeypatch)
    await _life(data_dir, Acknowledged())
    monkeypatch.undo()
    return ops.calls


def _cases(tmp_path: Path, monkeypatch) -> dict[str, int]:
    return asyncio.run(_count_operations(tmp_path / "count", monkeypatch))


@pytest.mark.parametrize("persist", [False, True], ids=["once", "from-then-on"])
@pytest.mark.parametrize("op", FAILURES)
def test_each_group_log_operation_failing_in_turn(tmp_path: Path, monkeypatch, caplog,
                                                  op: str, persist: bool) -> None:
    calls = _cases(tmp_path, monkeypatch)[op]
    assert calls >= (4 if op in ("replace", "unlink") else 20), calls  # compactions ran

    async def scenario(nth: int) -> Acknowledged:
        data_dir = tmp_path / f"{op}-{nth}"
        ops = FailingOps(data_dir, op, nth, persist=persist)
        ops.install(monkeypatch)
        acked = Acknowledged()
        served = await _life(data_dir, acked)
        monkeypatch.undo()
        assert ops.failed, "the injected failure never happened"

        again = group_coordinator(data_dir)  # the disk is healthy again
        await again.start()
        restored = {tp: (o.offset, o.metadata) for tp, o in again.fetch_offsets("g").items()}
        description = again.describe_group("g")
        await again.close()
        assert restored == acked.offsets, (op, nth, acked)
        if served:
            assert served == acked.offsets
        if acked.generation is not None:  # the member comes back with its assignment
            assert [m.assignment for m in description.members] == [b"assignment"]
        return acked

    for nth in range(1, calls + 1):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="kipproducer.broker.groups"):
            acked = asyncio.run(asyncio.wait_for(scenario(nth), 10))
        assert not [r for r in caplog.records if r.exc_info], (op, nth, caplog.text)
        assert f"[Errno {FAILURES[op]}]" in caplog.text + str(acked.raised), (op, nth)


# -- a running broker under libfiu --------------------------------------------------------------

ADD_OFFSETS_TO_TXN, END_TXN, TXN_OFFSET_COMMIT = 25, 26, 28


class Transaction:
    """One open transaction of ``transactional_id`` with offsets for ``group``, in exact
    requests (so the fault can be turned on between AddOffsetsToTxn, whose record the
    transaction log stores, and TxnOffsetCommit)."""

    def __init__(self, bootstrap: str, transactional_id: str, group: str) -> None:
        self.client = RawClient(bootstrap)
        self.transactional_id, self.group = transactional_id, group
        init = self.client.request(INIT_PRODUCER_ID, 4, transactional_id=transactional_id,
                                   transaction_timeout=60_000, producer_id=-1,
                                   producer_epoch=-1)
        assert init.error_code == ec.NONE, init
        self.producer_id, self.epoch = init.producer_id, init.producer_epoch
        added = self.client.request(ADD_OFFSETS_TO_TXN, 3, transactional_id=transactional_id,
                                    producer_id=self.producer_id,
                                    producer_epoch=self.epoch, group_id=group)
        assert added.error_code == ec.NONE, added

    def commit_offset(self, topic: str, offset: int) -> int:
        """One TxnOffsetCommit of partition 0: its error code."""
        body = self.client.request(
            TXN_OFFSET_COMMIT, 3, transactional_id=self.transactional_id, group_id=self.group,
            producer_id=self.producer_id, producer_epoch=self.epoch, generation_id=-1,
            member_id="", group_instance_id=None,
            topics=[{"name": topic, "partitions": [{
                "partition_index": 0, "committed_offset": offset,
                "committed_leader_epoch": -1, "committed_metadata": ""}]}])
        return body.topics[0].partitions[0].error_code

    def commit(self) -> int:
        body = self.client.request(END_TXN, 3, transactional_id=self.transactional_id,
                                   producer_id=self.producer_id, producer_epoch=self.epoch,
                                   committed=True)
        self.client.close()
        return body.error_code


def committed(bootstrap: str, topic: str, group: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return consumer.committed([TopicPartition(topic, 0)], timeout=TIMEOUT_S)[0].offset
    finally:
        consumer.close()


def commit_error(consumer: Consumer, topic: str, offset: int) -> str | None:
    """A synchronous OffsetCommit of partition 0: None, or the error's name."""
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    except KafkaException as exc:
        return exc.args[0].name()
    return None


@pytest.mark.parametrize("point", [FSYNC, WRITE], ids=["fsync-eio", "write-eio"])
def test_commits_the_group_log_cannot_store_are_refused_and_retried(
        kip_broker, fiu, point: str) -> None:
    broker = kip_broker(wrapper=fiu)
    topic = unique("group-log")
    create_topics(broker.bootstrap, {topic: 1})
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "plain",
                         "enable.auto.commit": False})
    assert commit_error(consumer, topic, 5) is None
    transaction = Transaction(broker.bootstrap, "tx", "transactional")

    fail(broker.pid, point)
    assert commit_error(consumer, topic, 7) == "NOT_COORDINATOR"
    assert transaction.commit_offset(topic, 9) == ec.NOT_COORDINATOR
    fail(broker.pid, point, on=False)
    if point == FSYNC:  # (a failing write() takes the broker's log lines with it)
        logged = broker.wait_for_log("group transactional: could not store transactional "
                                     "offsets: [Errno 5]")
        # one line per refused request (librdkafka retried the commit a few times first)
        assert "group plain: could not store committed offsets: [Errno 5]" in logged

    # The disk works again: so do commits, without a restart.
    assert commit_error(consumer, topic, 8) is None
    assert transaction.commit_offset(topic, 10) == ec.NONE
    assert transaction.commit() == ec.NONE
    consumer.close()

    restart_healthy(broker)
    assert committed(broker.bootstrap, topic, "plain") == 8
    assert committed(broker.bootstrap, topic, "transactional") == 10
