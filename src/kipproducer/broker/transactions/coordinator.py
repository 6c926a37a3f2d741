"""The transaction coordinator: Kafka's TransactionCoordinator for one node (KIP-98, TV1).

Every transactional id lives here. The request handlers (handlers/transactions.py) call the
``async`` API methods, which return Kafka error codes as the coordinator decides them; the
per-version mapping (PRODUCER_FENCED -> INVALID_PRODUCER_EPOCH for old clients) is the
handlers' job, as it is KafkaApis' in Kafka.

How a change happens (as Kafka's ``prepareTransitionTo`` / ``completeTransitionTo``): the next
``TransactionMetadata`` is computed from the current one, the id is marked *pending* (any
other request for it meanwhile gets CONCURRENT_TRANSACTIONS), the next value is written and
fsynced (store.py), and only then replaces the current one. A write that fails leaves the
current value as it was.

Ending a transaction (EndTxn, a timeout, or an InitProducerId fencing an Ongoing one): the
decision (PrepareCommit / PrepareAbort) is stored first; then a marker goes to every partition
of the transaction (``PartitionLog.append_marker``) and every group added with AddOffsetsToTxn
completes its pending offsets (``GroupCoordinator.complete_transaction``); then CompleteCommit
/ CompleteAbort is stored. One node writes its own markers, so all of that happens before the
client's EndTxn is answered. Whatever the partitions' flush policy, every marker is fsynced
(with the transaction's records before it) before the Complete state is stored: an OS crash
never keeps a completed transaction without its markers, which nothing would write again.
While it runs the transaction is in a Prepare state and every request for it gets
CONCURRENT_TRANSACTIONS, which is also what keeps a producer's next data from landing between
its markers. A completion that fails half-way (a storage error) stays in its Prepare state
and the timer retries it; a restart completes every stored Prepare state before the broker
listens (markers already written are not written twice: ``only_if_ongoing``).

The timer (``start``/``close``) aborts transactions Ongoing for longer than their timeout,
with an epoch bump that fences the producer (Kafka's abortTimedOutTransactions), every
``abort_interval_ms``, and removes ids idle for ``expiration_ms`` (then compacts the store)
every ``expire_interval_ms``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import time
from collections.abc import Callable, Collection, Coroutine, Iterable
from typing import Any, TypeVar

from kipproducer.protocol import error_codes as ec

from ..producer_state import ProducerStateError
from ..storage.errors import LogOfflineError, StorageError, UnknownTopicError
from .results import InitResult, TransactionDescription, TransactionListing
from .state import (
    IDLE,
    MAX_EPOCH,
    NO_PRODUCER_EPOCH,
    PREPARING,
    TopicPartition,
    TransactionMetadata,
    TxnState,
    bump_epoch,
    is_valid_producer_id,
)
from .store import SEGMENT_BYTES, TransactionStore

log = logging.getLogger("kipproducer.broker.transactions")

S = TxnState
T = TypeVar("T")
TRANSACTIONAL_ID_NOT_FOUND = ec.error_code("TRANSACTIONAL_ID_NOT_FOUND")

DEFAULT_MAX_TIMEOUT_MS = 900_000
DEFAULT_EXPIRATION_MS = 604_800_000
DEFAULT_ABORT_INTERVAL_MS = 10_000
DEFAULT_EXPIRE_INTERVAL_MS = 3_600_000


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)


class _CompletionFailed(Exception):
    """Markers or group offsets could not all be written; the Prepare state stays."""


class TransactionCoordinator:
    """Transactional ids, their state machine and durable state, in ``directory``.

    ``logs``: the broker's LogManager (markers; None only in tests that add no partitions);
    ``groups``: the GroupCoordinator (AddOffsetsToTxn groups; may be None likewise);
    ``allocate_producer_id``: the broker's durable producer id allocator;
    ``on_markers_written``: called after markers reached the partitions (wakes fetches).
    ``segment_bytes``: the size of the store's segments (Kafka's
    transaction.state.log.segment.bytes); compaction works on closed ones.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        allocate_producer_id: Callable[[], int],
        logs: Any = None,
        groups: Any = None,
        max_timeout_ms: int = DEFAULT_MAX_TIMEOUT_MS,
        expiration_ms: int = DEFAULT_EXPIRATION_MS,
        abort_interval_ms: int = DEFAULT_ABORT_INTERVAL_MS,
        expire_interval_ms: int = DEFAULT_EXPIRE_INTERVAL_MS,
        on_markers_written: Callable[[], None] | None = None,
        clock_ms: Callable[[], int] = _wall_clock_ms,
        segment_bytes: int = SEGMENT_BYTES,
    ) -> None:
        self.directory = os.fspath(directory)
        self.segment_bytes = segment_bytes
        self.max_timeout_ms = max_timeout_ms
        self.expiration_ms = expiration_ms
        self.abort_interval_ms = abort_interval_ms
        self.expire_interval_ms = expire_interval_ms
        self.clock_ms = clock_ms
        self._allocate_producer_id = allocate_producer_id
        self._logs = logs
        self._groups = groups
        self._on_markers_written = on_markers_written
        self._store: TransactionStore | None = None
        self._txns: dict[str, TransactionMetadata] = {}
        #: transactional id -> the state its running change leads to (Kafka's pendingState)
        self._pending: dict[str, TxnState] = {}
        #: Prepare states whose completion failed; the timer retries them
        self._unfinished: set[str] = set()
        self._timer: asyncio.Task | None = None
        self._tasks: set[asyncio.Task] = set()

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the store, finish every transaction a crash left in a Prepare state, start the
        timer. Ongoing transactions go on (and are aborted when they time out)."""
        loop = asyncio.get_running_loop()
        self._store = await loop.run_in_executor(
            None, functools.partial(TransactionStore, self.directory,
                                    segment_bytes=self.segment_bytes))
        self._txns = await loop.run_in_executor(None, self._store.load)
        preparing = [m for m in self._txns.values() if m.state in PREPARING]
        for metadata in preparing:
            log.info("completing transaction %r left in %s", metadata.transactional_id,
                     metadata.state.value)
            await self._finish(metadata, recovering=True)
        self._timer = asyncio.create_task(self._timer_loop())
        log.info("transaction coordinator started with %d transactional ids (%d completed)",
                 len(self._txns), len(preparing))

    async def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            await asyncio.gather(self._timer, return_exceptions=True)
            self._timer = None
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._store is not None:
            store, self._store = self._store, None
            await asyncio.get_running_loop().run_in_executor(None, store.close)

    # -- reading the state ----------------------------------------------------------------------

    def get(self, transactional_id: str) -> TransactionMetadata | None:
        """The current (durable) metadata of an id."""
        return self._txns.get(transactional_id)

    def pending_state(self, transactional_id: str) -> TxnState | None:
        return self._pending.get(transactional_id)

    def __len__(self) -> int:
        return len(self._txns)

    # -- InitProducerId -------------------------------------------------------------------------

    async def init_producer_id(
        self,
        transactional_id: str,
        timeout_ms: int,
        expected: tuple[int, int] | None = None,
    ) -> InitResult:
        """Kafka's handleInitProducerId for a transactional id.

        ``expected``: the (producer id, epoch) an InitProducerId v3+ names to bump its own
        epoch after an abortable error (KIP-360); None for a new producer.
        """
        return await self._guarded(self._init_producer_id(transactional_id, timeout_ms, expected))

    async def _init_producer_id(
        self, transactional_id: str, timeout_ms: int, expected: tuple[int, int] | None
    ) -> InitResult:
        if not transactional_id:
            return InitResult(ec.INVALID_REQUEST)
        if not 0 < timeout_ms <= self.max_timeout_ms:
            return InitResult(ec.INVALID_TRANSACTION_TIMEOUT)
        current = self._txns.get(transactional_id)
        is_new = current is None
        if current is None:
            producer_id = self._new_producer_id()
            if producer_id is None:
                return InitResult(ec.COORDINATOR_NOT_AVAILABLE)
            # Not stored until the epoch bump below is: a failed write leaves nothing behind.
            current = TransactionMetadata(
                transactional_id=transactional_id,
                producer_id=producer_id,
                producer_epoch=NO_PRODUCER_EPOCH,
                timeout_ms=timeout_ms,
                state=S.EMPTY,
                update_ms=self.clock_ms(),
            )
        elif transactional_id in self._pending:
            return InitResult(ec.CONCURRENT_TRANSACTIONS)
        if expected is not None and not is_valid_producer_id(current, *expected):
            return InitResult(ec.PRODUCER_FENCED)
        if current.state in PREPARING:
            return InitResult(ec.CONCURRENT_TRANSACTIONS)
        if current.state == S.ONGOING:
            # Abort the open transaction with a bumped epoch first (PrepareEpochFence); the
            # client retries on CONCURRENT_TRANSACTIONS and then gets a second bump (or a new
            # producer id if the fence used the last epoch).
            code = await self._fence_and_abort(current)
            return InitResult(code if code != ec.NONE else ec.CONCURRENT_TRANSACTIONS)
        if current.state not in IDLE:  # Dead / PrepareEpochFence are never stored
            raise AssertionError(f"{transactional_id!r} is stored as {current.state.value}")
        now = self.clock_ms()
        if current.is_epoch_exhausted and (expected is None
                                          or expected[1] == current.producer_epoch):
            producer_id = self._new_producer_id()
            if producer_id is None:
                return InitResult(ec.COORDINATOR_NOT_AVAILABLE)
            next_ = current.transit(
                S.EMPTY,
                producer_id=producer_id,
                last_producer_id=current.producer_id,
                producer_epoch=0,
                last_producer_epoch=(current.producer_epoch if expected is not None
                                     else NO_PRODUCER_EPOCH),
                timeout_ms=timeout_ms, partitions=frozenset(), groups=frozenset(),
                start_ms=-1, update_ms=now)
        else:
            bumped = bump_epoch(current, None if expected is None else expected[1])
            if bumped is None:
                return InitResult(ec.PRODUCER_FENCED)
            epoch, last_epoch = bumped
            next_ = current.transit(
                S.EMPTY, producer_epoch=epoch, last_producer_epoch=last_epoch,
                timeout_ms=timeout_ms, partitions=frozenset(), groups=frozenset(),
                start_ms=-1, update_ms=now)
        code = await self._persist(current, next_, is_new=is_new)
        if code != ec.NONE:
            return InitResult(code)
        log.info("transactional id %r: producer id %d epoch %d", transactional_id,
                 next_.producer_id, next_.producer_epoch)
        return InitResult(ec.NONE, next_.producer_id, next_.producer_epoch)

    def _new_producer_id(self) -> int | None:
        """A producer id never handed out, or None when the allocator cannot store its next
        block (a disk fault; the client retries on COORDINATOR_NOT_AVAILABLE)."""
        try:
            return self._allocate_producer_id()
        except StorageError as exc:
            log.error("InitProducerId: %s", exc)
            return None

    # -- AddPartitionsToTxn / AddOffsetsToTxn ---------------------------------------------------

    async def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Collection[TopicPartition],
    ) -> int:
        """Kafka's handleAddPartitionsToTransaction (the partitions are checked already)."""
        return await self._guarded(self._add(transactional_id, producer_id, producer_epoch,
                                             frozenset(partitions), frozenset()))

    async def add_offsets(
        self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str
    ) -> int:
        """AddOffsetsToTxn: the group's TxnOffsetCommits become part of the transaction (Kafka
        adds the group's __consumer_offsets partition; here the group itself)."""
        return await self._guarded(self._add(transactional_id, producer_id, producer_epoch,
                                             frozenset(), frozenset([group_id])))

    async def _add(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: frozenset[TopicPartition],
        groups: frozenset[str],
    ) -> int:
        current = self._owned(transactional_id, producer_id, producer_epoch)
        if isinstance(current, int):
            return current
        if transactional_id in self._pending or current.state in PREPARING:
            return ec.CONCURRENT_TRANSACTIONS
        if (current.state == S.ONGOING and partitions <= current.partitions
                and groups <= current.groups):
            return ec.NONE
        now = self.clock_ms()
        if current.state == S.ONGOING:
            next_ = current.transit(S.ONGOING, partitions=current.partitions | partitions,
                                    groups=current.groups | groups, update_ms=now)
        else:  # a new transaction starts
            next_ = current.transit(S.ONGOING, partitions=partitions, groups=groups,
                                    start_ms=now, update_ms=now)
        return await self._persist(current, next_)

    # -- EndTxn ---------------------------------------------------------------------------------

    async def end_transaction(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> int:
        """Kafka's endTransaction from a client: NONE once the transaction is complete."""
        return await self._guarded(
            self._end_transaction(transactional_id, producer_id, producer_epoch, commit))

    async def _end_transaction(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> int:
        current = self._owned(transactional_id, producer_id, producer_epoch)
        if isinstance(current, int):
            return current
        # Only a running change is refused here: a Prepare state is answered below.
        if transactional_id in self._pending:
            return ec.CONCURRENT_TRANSACTIONS
        state = current.state
        if state == S.ONGOING:
            return await self._end(current, commit=commit)
        # A retry of an EndTxn that completed is answered NONE; one still running waits.
        if state == (S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT):
            return ec.NONE
        if state == (S.PREPARE_COMMIT if commit else S.PREPARE_ABORT):
            return ec.CONCURRENT_TRANSACTIONS
        log.info("transactional id %r: EndTxn(%s) in state %s refused", transactional_id,
                 "commit" if commit else "abort", state.value)
        return ec.INVALID_TXN_STATE

    def _owned(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        *,
        fenced: int = ec.PRODUCER_FENCED,
    ) -> TransactionMetadata | int:
        """The id's current metadata if ``producer_id`` holds it with ``producer_epoch``, else
        the error code: ``fenced`` for another epoch (verification answers it with the
        older INVALID_PRODUCER_EPOCH). Each caller adds its own CONCURRENT_TRANSACTIONS rule."""
        if not transactional_id:
            return ec.INVALID_REQUEST
        current = self._txns.get(transactional_id)
        if current is None or current.producer_id != producer_id:
            return ec.INVALID_PRODUCER_ID_MAPPING
        # Strict equality: only InitProducerId bumps the epoch, never these requests (TV1).
        if current.producer_epoch != producer_epoch:
            return fenced
        return current

    async def _end(self, current: TransactionMetadata, *, commit: bool,
                   fenced_epoch: int | None = None) -> int:
        """Store the decision, then complete it. ``fenced_epoch``: abort with this (bumped)
        epoch and forget the last epoch (PrepareEpochFence)."""
        now = self.clock_ms()
        if fenced_epoch is None:
            next_ = current.transit(S.PREPARE_COMMIT if commit else S.PREPARE_ABORT,
                                    update_ms=now)
        else:
            fencing = current.transit(S.PREPARE_EPOCH_FENCE)
            next_ = fencing.transit(S.PREPARE_ABORT, producer_epoch=fenced_epoch,
                                    last_producer_epoch=NO_PRODUCER_EPOCH, update_ms=now)
        code = await self._persist(current, next_)
        if code != ec.NONE:
            return code
        # The decision is durable: the outcome is settled even if completing fails now (the
        # timer and a restart finish it), so the client is told NONE either way, as Kafka
        # answers EndTxn once the Prepare state is written.
        await self._finish(next_, recovering=False)
        return ec.NONE

    async def _fence_and_abort(self, current: TransactionMetadata) -> int:
        epoch = current.producer_epoch
        fenced_epoch = epoch + 1 if epoch < MAX_EPOCH else epoch
        log.info("transactional id %r: aborting its Ongoing transaction with epoch %d "
                 "(producer %d fenced)", current.transactional_id, fenced_epoch,
                 current.producer_id)
        return await self._end(current, commit=False, fenced_epoch=fenced_epoch)

    async def _finish(self, prepared: TransactionMetadata, *, recovering: bool) -> bool:
        """Markers, group offsets, then the Complete state; False if it must be retried."""
        transactional_id = prepared.transactional_id
        commit = prepared.state == S.PREPARE_COMMIT
        self._pending[transactional_id] = S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT
        try:
            await self._write_markers(prepared, commit, only_if_ongoing=recovering)
            await self._complete_groups(prepared, commit)
        except Exception as exc:  # _CompletionFailed, or a bug: either way, retry later
            self._unfinished.add(transactional_id)
            log.warning("transactional id %r: completing %s failed (%r); retrying later",
                        transactional_id, prepared.state.value, exc)
            return False
        finally:
            self._pending.pop(transactional_id, None)
        complete = prepared.transit(S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT,
                                    partitions=frozenset(), groups=frozenset(),
                                    update_ms=self.clock_ms())
        if await self._persist(prepared, complete) != ec.NONE:
            self._unfinished.add(transactional_id)
            return False
        self._unfinished.discard(transactional_id)
        return True

    async def _write_markers(self, prepared: TransactionMetadata, commit: bool, *,
                             only_if_ongoing: bool) -> None:
        if not prepared.partitions:
            return
        if self._logs is None:
            raise _CompletionFailed("no log manager to write markers to")
        write = functools.partial(self._write_markers_blocking, prepared, commit,
                                  only_if_ongoing)
        try:
            await asyncio.get_running_loop().run_in_executor(None, write)
        finally:
            if self._on_markers_written is not None:
                self._on_markers_written()

    def _write_markers_blocking(self, prepared: TransactionMetadata, commit: bool,
                                only_if_ongoing: bool) -> None:
        failures = []
        for topic, partition in sorted(prepared.partitions):
            try:
                partition_log = self._logs.get_log(topic, partition)
                partition_log.append_marker(
                    prepared.producer_id, prepared.producer_epoch, commit=commit,
                    coordinator_epoch=prepared.coordinator_epoch,
                    only_if_ongoing=only_if_ongoing)
                # Durable, with the transaction's records before it, before the Complete state
                # is stored: else an OS crash could keep the records without their marker while
                # this log holds the transaction complete, and nothing would write it again
                # (the partition's transaction hangs, an acknowledged commit reads as aborted).
                # Nothing to fsync with flush.messages=1.
                partition_log.flush()
            except UnknownTopicError:
                # Deleted since it was added: nothing left to mark (Kafka drops it too).
                continue
            except ProducerStateError as exc:
                # The partition knows a newer epoch of this producer: this transaction's data
                # there is fenced already. Kafka's marker handler gives up on it as well.
                log.warning("transaction marker for %s-%d refused: %s", topic, partition, exc)
                continue
            except (StorageError, OSError) as exc:
                failures.append(f"{topic}-{partition}: {exc}")
        if failures:
            raise _CompletionFailed("; ".join(failures))

    async def _complete_groups(self, prepared: TransactionMetadata, commit: bool) -> None:
        if not prepared.groups:
            return
        if self._groups is None:
            raise _CompletionFailed("no group coordinator to complete offsets in")
        for group_id in sorted(prepared.groups):
            try:
                await self._groups.complete_transaction(
                    group_id, prepared.producer_id, prepared.producer_epoch, commit)
            except Exception as exc:  # the group store failed: retry the whole completion
                raise _CompletionFailed(f"group {group_id}: {exc!r}") from exc

    # -- checks for other handlers (contract B) -------------------------------------------------

    def verify_produce(
        self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str,
        partition: int,
    ) -> int:
        """Error code for a transactional produce to ``topic``-``partition`` (Kafka's
        transaction verification, KIP-890 part 1, with AddPartitionsToTxnManager's mapping of
        PRODUCER_FENCED to INVALID_PRODUCER_EPOCH). INVALID_TXN_STATE: the partition is not
        in an Ongoing transaction of this producer; CONCURRENT_TRANSACTIONS: it is ending."""
        current = self._verified(transactional_id, producer_id, producer_epoch)
        if isinstance(current, int):
            return current
        if current.state == S.ONGOING and (topic, partition) in current.partitions:
            return ec.NONE
        return ec.INVALID_TXN_STATE

    def verify_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int,
        partitions: Collection[TopicPartition],
    ) -> dict[TopicPartition, int]:
        """AddPartitionsToTxn v4+ with verify_only (Kafka's verifyPartitionsInTransaction):
        NONE per partition already in the Ongoing transaction, else INVALID_TXN_STATE; one
        code for all when the id, producer or state is wrong (PRODUCER_FENCED unmapped, as
        the broker-to-broker answer carries it)."""
        current = self._owned(transactional_id, producer_id, producer_epoch)
        if isinstance(current, TransactionMetadata) and (
                transactional_id in self._pending or current.state in PREPARING):
            current = ec.CONCURRENT_TRANSACTIONS
        if isinstance(current, int):
            return dict.fromkeys(partitions, current)
        return {tp: ec.NONE if current.state == S.ONGOING and tp in current.partitions
                else ec.INVALID_TXN_STATE for tp in partitions}

    def verify_txn_offset_commit(
        self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str
    ) -> int:
        """Error code for a TxnOffsetCommit: NONE when the transaction is Ongoing with this
        producer id/epoch and ``group_id`` was added with AddOffsetsToTxn."""
        current = self._verified(transactional_id, producer_id, producer_epoch)
        if isinstance(current, int):
            return current
        if current.state == S.ONGOING and group_id in current.groups:
            return ec.NONE
        return ec.INVALID_TXN_STATE

    def _verified(
        self, transactional_id: str, producer_id: int, producer_epoch: int
    ) -> TransactionMetadata | int:
        """``_owned`` for the verifications, where a transaction in a Prepare state is ending
        (CONCURRENT_TRANSACTIONS)."""
        current = self._owned(transactional_id, producer_id, producer_epoch,
                              fenced=ec.INVALID_PRODUCER_EPOCH)
        if isinstance(current, TransactionMetadata) and current.state in PREPARING:
            return ec.CONCURRENT_TRANSACTIONS
        return current

    # -- DescribeTransactions / ListTransactions ------------------------------------------------

    def describe(self, transactional_id: str) -> TransactionDescription:
        if not transactional_id:
            return TransactionDescription(transactional_id, ec.INVALID_REQUEST)
        current = self._txns.get(transactional_id)
        if current is None or self._pending.get(transactional_id) == S.DEAD:
            return TransactionDescription(transactional_id, TRANSACTIONAL_ID_NOT_FOUND)
        return TransactionDescription(
            transactional_id, ec.NONE, current.state.value, current.producer_id,
            current.producer_epoch, current.timeout_ms, current.start_ms, current.partitions)

    def list_transactions(
        self,
        states: Iterable[str] = (),
        producer_ids: Iterable[int] = (),
        min_duration_ms: int = -1,
    ) -> tuple[list[TransactionListing], list[str]]:
        """(matching transactions, unknown state names), Kafka's listTransactionStates:
        an empty filter matches everything; ``min_duration_ms`` >= 0 keeps transactions
        running for longer than that."""
        states = list(states)
        wanted_states = set()
        unknown = []
        for name in states:
            state = TxnState.by_name(name)
            if state is None:
                unknown.append(name)
            else:
                wanted_states.add(state)
        wanted_ids = set(producer_ids)
        now = self.clock_ms()
        found = []
        for transactional_id, current in self._txns.items():
            if self._pending.get(transactional_id) == S.DEAD:
                continue
            if wanted_ids and current.producer_id not in wanted_ids:
                continue
            if states and current.state not in wanted_states:
                continue
            if min_duration_ms >= 0 and now - current.start_ms <= min_duration_ms:
                continue
            found.append(TransactionListing(transactional_id, current.producer_id,
                                            current.state.value))
        return found, unknown

    # -- timers ---------------------------------------------------------------------------------

    async def abort_timed_out(self) -> int:
        """Abort (with an epoch bump) every transaction Ongoing past its timeout; retry
        completions that failed. Returns how many were aborted."""
        return await self._guarded(self._abort_timed_out())

    async def _abort_timed_out(self) -> int:
        now = self.clock_ms()
        timed_out = [
            current for transactional_id, current in list(self._txns.items())
            if current.state == S.ONGOING and transactional_id not in self._pending
            and current.start_ms + current.timeout_ms < now
        ]
        aborted = 0
        for current in timed_out:
            if self._txns.get(current.transactional_id) is not current:
                continue  # changed while an earlier one was being aborted
            if current.transactional_id in self._pending:
                continue
            log.info("transactional id %r: transaction open for %d ms, longer than its "
                     "timeout %d ms", current.transactional_id, now - current.start_ms,
                     current.timeout_ms)
            if await self._fence_and_abort(current) == ec.NONE:
                aborted += 1
        for transactional_id in sorted(self._unfinished):
            current = self._txns.get(transactional_id)
            if current is None or transactional_id in self._pending:
                continue
            if current.state in PREPARING:
                await self._finish(current, recovering=True)
            else:
                self._unfinished.discard(transactional_id)
        return aborted

    async def remove_expired(self) -> int:
        """Remove ids idle (Empty / Complete*) for longer than ``expiration_ms``."""
        return await self._guarded(self._remove_expired())

    async def _remove_expired(self) -> int:
        if self._store is None:
            return 0
        horizon = self.clock_ms() - self.expiration_ms
        expired = [
            current for transactional_id, current in list(self._txns.items())
            if current.state in IDLE and transactional_id not in self._pending
            and current.update_ms <= horizon
        ]
        loop = asyncio.get_running_loop()
        removed = 0
        for current in expired:
            transactional_id = current.transactional_id
            if self._txns.get(transactional_id) is not current or transactional_id in self._pending:
                continue
            current.transit(S.DEAD)  # checks the transition
            self._pending[transactional_id] = S.DEAD
            try:
                await loop.run_in_executor(None, self._store.remove, transactional_id)
            except (StorageError, OSError) as exc:
                log.warning("could not expire transactional id %r: %s", transactional_id, exc)
                continue
            finally:
                self._pending.pop(transactional_id, None)
            if self._txns.get(transactional_id) is current:
                del self._txns[transactional_id]
                removed += 1
        if removed:
            log.info("expired %d transactional ids", removed)
        # Every state change appends a record: compaction keeps the log to about one record
        # per id (closed segments only, so it is cheap while the active one fills).
        store = self._store
        if store is not None:
            try:
                await loop.run_in_executor(None, store.compact)
            except LogOfflineError:
                pass  # the log said why in one line (a failed swap, or an earlier failure)
            except (StorageError, OSError) as exc:
                log.error("compacting the transaction log failed (%s); the next check in "
                          "%d ms tries again", exc, self.expire_interval_ms)
        return removed

    async def _timer_loop(self) -> None:
        loop = asyncio.get_running_loop()
        next_abort = next_expire = loop.time()
        while True:
            now = loop.time()
            try:
                if now >= next_abort:
                    next_abort = now + self.abort_interval_ms / 1000
                    await self.abort_timed_out()
                if now >= next_expire:
                    next_expire = now + self.expire_interval_ms / 1000
                    await self.remove_expired()
            except Exception:
                log.exception("transaction coordinator timer failed")
            await asyncio.sleep(max(0.0, min(next_abort, next_expire) - loop.time()))

    # -- durable changes ------------------------------------------------------------------------

    async def _guarded(self, change: Coroutine[Any, Any, T]) -> T:
        """Run a state change to its end even if the request that asked for it is cancelled
        (its connection closed, the broker stopping): half a change would leave the id
        pending forever. ``close`` waits for these."""
        task = asyncio.ensure_future(change)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return await asyncio.shield(task)

    async def _persist(self, current: TransactionMetadata, next_: TransactionMetadata, *,
                       is_new: bool = False) -> int:
        """Write ``next_`` durably, then install it; a failed write changes nothing."""
        transactional_id = current.transactional_id
        store = self._store
        if store is None:
            return ec.COORDINATOR_NOT_AVAILABLE
        if is_new:
            # Visible (as pending) while it is written, so a concurrent InitProducerId for the
            # same new id gets CONCURRENT_TRANSACTIONS instead of a second producer id.
            self._txns[transactional_id] = current
        self._pending[transactional_id] = next_.state
        try:
            await asyncio.get_running_loop().run_in_executor(None, store.write, next_)
        except (StorageError, OSError) as exc:
            log.error("transactional id %r: storing %s failed: %s", transactional_id,
                      next_.state.value, exc)
            if is_new and self._txns.get(transactional_id) is current:
                del self._txns[transactional_id]
            return ec.COORDINATOR_NOT_AVAILABLE
        finally:
            self._pending.pop(transactional_id, None)
        self._txns[transactional_id] = next_
        return ec.NONE
