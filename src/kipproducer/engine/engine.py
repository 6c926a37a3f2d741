"""The sending engine: the accumulator drained by a sender thread that speaks Produce.

Threads: the caller appends to the accumulator under a lock; a sender thread runs an asyncio
loop that drains ready batches, sends one Produce request per leader with at most one batch
per partition (Kafka's rule), keeps up to ``max.in.flight`` requests per connection, and
queues delivery reports. Reports are served by ``poll()`` / ``flush()`` on the caller's
thread, as librdkafka serves its callbacks.

Per partition (``PartitionSendState``, engine/partition_send.py) batches go out in order. A
retriable failure (connection lost, NOT_LEADER..., timeouts) stops that partition: once its
in-flight batches have all come back, the failed ones are sent again, in their original order
and with their original sequence numbers, so an idempotent producer's retries are recognised
by the broker as duplicates when the first attempt did land: no duplicates, no reordering. A
partition's batches in flight all use one connection: a batch never overtakes an earlier one
that is still out on a lost connection. With idempotence, OUT_OF_ORDER_SEQUENCE_NUMBER on a
batch behind a failed one is part of that retry; anywhere else (and UNKNOWN_PRODUCER_ID, a
batch refused for good, a purge) the partition's sequence is broken and the producer takes a
new id from InitProducerId, as Kafka's clients do, and re-stamps every batch not yet
acknowledged from sequence 0. Before that, the other partitions' failed batches (a lost
connection leaves their fate unknown) are retried under the current id until the broker
answers for them: a re-stamped copy of a batch that did land would be a duplicate no broker
can recognise.

With a ``TransactionManager`` (``transactional.id``; engine/transactions.py) the producer id
comes from init_transactions() instead, every batch is flagged transactional and every Produce
names the transactional id, a partition's batches wait until the manager has added it to the
transaction, and a batch that fails for good fails the transaction (the manager then drops
what waits; a new epoch, not a new producer id, repairs the sequences when it aborts).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaError, KafkaException

from kipproducer._accumulator import EngineState, note_appended
from kipproducer._sender_lock import SenderFirstLock
from kipproducer.accumulator import ProducerBatch, RecordAccumulator, monotonic_ms
from kipproducer.alarm import Alarm
from kipproducer.errors import ProduceOffsetKafkaError
from kipproducer.protocol import build_request
from kipproducer.protocol import error_codes as ec
from kipproducer.protocol.produce_codec import DIRECT_VERSIONS, encode_produce_request
from kipproducer.protocol.wire_extensions import (
    FEATURE_PRODUCE_CONDITIONAL,
    FEATURE_PRODUCE_KEY_CONDITIONAL,
    FEATURE_PRODUCE_OFFSETS,
    MULTI_BATCH_VERSION,
    ProduceMode,
)

from ..protocol.api_keys import INIT_PRODUCER_ID, PRODUCE
from ..state_fields import state_field
from .cluster import Cluster
from .config import EngineConfig
from .connection import BrokerAuthenticationError, BrokerConnection, BrokerConnectionError
from .key_conditions import batch_error as key_batch_error
from .key_conditions import conditions_by_partition
from .partition_send import BrokenChain, PartitionSendState
from .transactions import EngineHooks
from .txn_requests import (
    DEFAULT_TRANSACTION_TIMEOUT_MS,
    INIT_PRODUCER_ID_MAX_VERSION,
    request_producer_id,
)
from .txn_state import Action, init_pid_action

if TYPE_CHECKING:
    from .transactions import TransactionManager

log = logging.getLogger("kipproducer.engine")

PRODUCE_MAX_VERSION = 10
# ProduceMode rides on a tagged field: flexible Produce versions only (docs/protocol.md §2).
PRODUCE_MIN_VERSION = {ProduceMode.ASSIGN: 3, ProduceMode.USE_OFFSETS: 9,
                       ProduceMode.EXPECTED_OFFSETS: 9}
MODE_FEATURE = {ProduceMode.USE_OFFSETS: FEATURE_PRODUCE_OFFSETS,
                ProduceMode.EXPECTED_OFFSETS: FEATURE_PRODUCE_CONDITIONAL}
MODE_CALL = {ProduceMode.USE_OFFSETS: "offset= (KIP-391 produce with offsets)",
             ProduceMode.EXPECTED_OFFSETS: "expected_offset= (KIP-27 conditional publish)"}
MAX_REQUEST_BYTES = 64 << 20
# docs/protocol.md §9: a partition's batches with explicit offsets travel as one unit in a request
# to a broker that advertises feature version 2. Their bytes are joined into one records
# field (a copy), so a unit stops growing at this size: past it a request's fixed cost is
# already spread over enough records.
UNIT_MAX_BYTES = 1 << 20

# librdkafka's local error codes, as confluent_kafka.KafkaError exposes them.
MSG_TIMED_OUT = KafkaError._MSG_TIMED_OUT
PURGE_QUEUE = KafkaError._PURGE_QUEUE
# A topic that does not exist: librdkafka reports its records with the broker's
# UNKNOWN_TOPIC_OR_PART (once topic.metadata.propagation.max.ms has passed); so does the engine.
UNKNOWN_TOPIC = ec.UNKNOWN_TOPIC_OR_PARTITION
UNKNOWN_PARTITION = KafkaError._UNKNOWN_PARTITION
# SASL authentication refused (librdkafka's local code for it); not retriable.
AUTHENTICATION = KafkaError._AUTHENTICATION

# Errors after which the leader may have moved: refresh metadata before retrying.
_METADATA_ERRORS = {ec.NOT_LEADER_OR_FOLLOWER, ec.LEADER_NOT_AVAILABLE,
                    ec.UNKNOWN_TOPIC_OR_PARTITION, ec.KAFKA_STORAGE_ERROR,
                    ec.NETWORK_EXCEPTION}


def kafka_error(code: int, message: str | None = None, *, mode: int = 0,
                log_end_offset: int | None = None) -> KafkaError:
    """The error reported for a batch; batches sent with a ProduceMode get the subclass that
    carries the partition's log end offset."""
    message = message or ec.error_name(code)
    if mode == ProduceMode.ASSIGN:
        return KafkaError(code, message, retriable=ec.is_retriable(code))
    return ProduceOffsetKafkaError(code, message, retriable=ec.is_retriable(code),
                                   log_end_offset=-1 if log_end_offset is None
                                   else log_end_offset)


def no_such_partition(topic: str, partition: int, count: int) -> str:
    """The error text for a partition the topic does not have: which topic, which partition
    was asked, which exist, and what to do."""
    have = f"{count} partition" + ("" if count == 1 else "s")
    numbers = "0" if count == 1 else f"0-{count - 1}"
    return (f"topic {topic!r} has {have} ({numbers}); partition {partition} does not exist: "
            f"produce to one of {numbers}, or add partitions to the topic first "
            "(CreatePartitions)")


def _records_by_partition(batches: list[ProducerBatch]):
    """(topic, partition, records) per partition of a request, in order: one batch's bytes,
    or a unit's batches joined back to back (docs/protocol.md §9)."""
    parts: dict[tuple[str, int], list] = {}
    for batch in batches:
        parts.setdefault((batch.topic, batch.partition), []).append(batch.data)
    for (topic, partition), datas in parts.items():
        yield topic, partition, datas[0] if len(datas) == 1 else b"".join(datas)


def continuation_error(chain: BrokenChain) -> KafkaError:
    cause = chain[2]
    return kafka_error(cause.code(), f"not sent: the conditional batch before it in the same "
                       f"call failed ({cause.str()})", mode=ProduceMode.EXPECTED_OFFSETS,
                       log_end_offset=getattr(cause, "log_end_offset", -1))


class Wakeup:
    """The sender loop's alarm clock: ``wait(timeout)`` returns when ``set()`` is called or
    the timeout passes (or earlier: see below). An asyncio.Event under wait_for costs a
    task's worth of futures and callbacks per wait, and the loop waits once per round, so one
    future per wait and one Alarm for all of them; a wait that the alarm wakes before its own
    deadline returns early (the sender loop just runs a round)."""

    __slots__ = ("_loop", "_flag", "_waiter", "_alarm")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._flag = False
        self._waiter: asyncio.Future | None = None
        self._alarm = Alarm(loop, self._fired)

    def set(self) -> None:
        self._flag = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def clear(self) -> None:
        self._flag = False

    async def wait(self, timeout: float) -> None:
        if self._flag:
            return
        loop = self._loop
        self._alarm.arm(loop.time() + timeout)
        waiter = self._waiter = loop.create_future()
        try:
            await waiter
        finally:
            self._waiter = None

    def _fired(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


@dataclass(slots=True)
class DeliveryReport:
    """One batch's outcome, served to callbacks by poll()."""

    batch: ProducerBatch
    error: KafkaError | None
    base_offset: int
    log_append_time: int = -1


class Engine:
    # Kept in self.shared (the C boundary): the C produce() and note_appended read them there.
    acc = state_field("shared", "acc", writable=False)
    lock = state_field("shared", "lock", writable=False)
    _reports_cv = state_field("shared", "reports_cv", writable=False)
    _outstanding = state_field("shared", "outstanding")
    dead = state_field("shared", "dead")
    _sender_idle = state_field("shared", "sender_idle")
    _idle_closed = state_field("shared", "idle_closed")
    _idle_until_ms = state_field("shared", "idle_until_ms")

    def __init__(self, config: EngineConfig, txn: TransactionManager | None = None) -> None:
        self.config = config
        # A transactional producer's manager (engine/transactions.py): it takes the producer
        # id (init_transactions), says which partitions may be sent to (AddPartitionsToTxn)
        # and hears of every failed batch. It is handed EngineHooks once the sender runs.
        self.txn = txn
        # What the caller's thread and the sender share (acc, lock, _reports_cv, dead,
        # _outstanding, _sender_idle, _idle_*: properties over it, above).
        self.shared = EngineState(
            RecordAccumulator(
                batch_size=config.batch_size, batch_num_messages=config.batch_num_messages,
                linger_ms=config.linger_ms, max_bytes=config.queue_max_kbytes * 1024,
                max_messages=config.queue_max_messages, compression=config.compression,
                transactional=txn is not None),
            # guards the accumulator; the sender thread gets it ahead of the caller's (fair
            # to the sender, see kipproducer._sender_lock)
            SenderFirstLock(),
            threading.Condition(),
            config.message_max_bytes, self.wake, self._fail_held)
        self._reports: deque[DeliveryReport] = deque()
        self._outstanding = 0                 # records appended, not yet reported
        self._piled_records = 0               # records in self._reports
        self._prompt_waiters = 0              # take_reports callers that want every report now
        # Each partition's send state (batches, retries, whether its sequence holds), the one
        # place the engine asks about a partition (engine/partition_send.py).
        self._partitions: dict[tuple[str, int], PartitionSendState] = {}
        self._flushing = 0
        self._closing = False
        # The producer id and epoch are kept once, in the accumulator (acc.producer_id,
        # acc.producer_epoch, C: it stamps them on every batch it drains); the engine and the
        # TransactionManager read them there. A batch's own producer_id / producer_epoch are
        # what it was stamped with, derived from that store: a retry resends them unchanged.
        # A transactional producer's id comes from init_transactions(), not from here.
        self._need_new_producer_id = config.enable_idempotence and txn is None
        self._fatal: KafkaError | None = None
        self.dead = False                     # the sender thread has ended
        self._loop = asyncio.new_event_loop()
        self._wake: Wakeup | None = None
        # A Produce answer named a moved or unknown leader, a connection was lost or a request
        # timed out: the leaders may have moved (the cluster's ``stale`` says the same of a
        # broker it could not reach).
        self._need_metadata = False
        self._next_stale_refresh = 0.0  # a stale refresh at most every retry.backoff.ms
        self._done_batches: deque[ProducerBatch] = deque()  # reported; bounds not given back
        self._sender_idle = True
        # What the sleeping sender saw (see appended()): batches closed, and when it wakes.
        self._idle_closed = -1
        self._idle_until_ms = 0
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kip-sender", daemon=True)
        self._thread.start()
        self._ready.wait()
        if txn is not None:
            acc = self.acc
            txn.attach(EngineHooks(
                run=self.call, call_soon=self._call_soon, purge=self.purge_transaction,
                fail=self.fail_transactional, wake=self.wake_sender,
                adopt_producer=self.set_producer,
                producer=lambda: (acc.producer_id, acc.producer_epoch), cluster=self.cluster))

    # ---- caller side ------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._outstanding

    def check(self) -> None:
        """KafkaException when the engine can take no more records (its sender is gone)."""
        if self.dead:
            raise KafkaException(self._fatal or KafkaError(
                KafkaError._FATAL, "the kipproducer engine is closed", fatal=True))

    def wake(self) -> None:
        """Tell the sender there is work (cheap when it is already busy)."""
        if self._sender_idle and not self._closing and not self.dead:
            self._sender_idle = False
            self._call_soon(self._set_wake)

    def _call_soon(self, fn) -> None:
        try:
            self._loop.call_soon_threadsafe(fn)
        except RuntimeError:  # the loop is closed: the sender thread has ended
            pass

    def _set_wake(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def appended(self, count: int) -> None:
        """``count`` records were appended: count them and wake the sender if it needs to
        (the rule is note_appended's, in C, which per-record produce() calls directly)."""
        if note_appended(self.shared, count):
            self._fail_held()

    def _fail_held(self) -> None:
        """The sender died while records were appended: report them failed."""
        self._fail_everything(self._fatal or KafkaError(
            KafkaError._FATAL, "the kipproducer engine is closed", fatal=True))

    def call(self, coro, timeout: float | None = None) -> Any:
        if self.dead:
            coro.close()
            self.check()
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def holds_records(self, topic: str, partition: int) -> bool:
        """Whether records of the partition are still the engine's (appended, waiting to be
        sent, out or failed) or, in a transaction, the partition is in it. Asked on the
        sender's loop: there no batch is between the accumulator and its partition's send
        state, and none is sent before the transaction has the partition."""
        async def ask() -> bool:
            with self.lock:
                state = self.acc.partition_state(topic, partition)
                if state.open_records or state.ready_batches:
                    return True
            sender = self._partitions.get((topic, partition))
            if sender is not None and (sender.pending or sender.in_flight or sender.failed):
                return True
            return self.txn is not None and self.txn.holds(topic, partition)
        return self.call(ask())

    def known_partition_count(self, topic: str) -> int | None:
        """The partition count of ``topic`` if its metadata is known and fresh (within
        topic.metadata.refresh.interval.ms), without asking the sender thread; else None."""
        cluster = getattr(self, "cluster", None)
        meta = cluster.topics.get(topic) if cluster is not None else None
        if meta is None or meta.error_code != ec.NONE or not meta.partition_count:
            return None
        age = time.monotonic() - cluster.refreshed_at.get(topic, 0.0)
        return meta.partition_count if age * 1000 <= self.config.metadata_refresh_ms else None

    def partition_count(self, topic: str, timeout: float = 30.0) -> int:
        """Partitions of ``topic`` (metadata fetched if needed); raises on an unknown topic."""
        # Fresh metadata answers here: the round trip to the sender thread is what the
        # coroutine would answer with, and it cost the sender a wake-up, a task and a
        # cross-thread future per bulk call (produce_arrays asks once per call).
        known = self.known_partition_count(topic)
        if known is not None:
            return known
        return self.call(self._partition_count(topic, timeout - 1), timeout)

    def leaders_announce(self, topic: str, features: tuple[str, ...],
                         timeout: float = 30.0) -> list[bool]:
        """Per partition of ``topic``: whether its leader announces every one of ``features``
        in ApiVersions (kip.mode=auto, docs/stock-clusters.md); raises LookupError as
        partition_count does."""
        return self.call(self._leaders_announce(topic, features, timeout - 1), timeout)

    async def _leaders_announce(self, topic: str, features: tuple[str, ...],
                                timeout: float) -> list[bool]:
        deadline = time.monotonic() + timeout
        count = await self._partition_count(topic, timeout)
        out = []
        for partition in range(count):
            while True:
                try:
                    conn = await self.cluster.connection(self.cluster.leader(topic, partition))
                    break
                except (BrokerConnectionError, OSError) as exc:
                    # A leader killed is named by the metadata until the cluster fences it
                    # (seconds on Kafka): ask again until the partition has a leader that
                    # answers, as a send to it would.
                    await self._lookup_retry(exc, deadline)
                    with contextlib.suppress(BrokerConnectionError, OSError):
                        await self.cluster.refresh([topic])
            out.append(all(conn.supports_feature(name) for name in features))
        return out

    async def _lookup_retry(self, exc: BaseException, deadline: float) -> None:
        """After a connection error of a metadata lookup: LookupError where asking again
        cannot help (authentication) or the time is up, else the retry backoff."""
        if isinstance(exc, BrokerAuthenticationError):
            raise LookupError(AUTHENTICATION, str(exc)) from None
        if time.monotonic() > deadline:
            raise LookupError(KafkaError._TRANSPORT, str(exc)) from None
        await asyncio.sleep(self.config.retry_backoff_ms / 1000)

    async def _partition_count(self, topic: str, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        meta = self.cluster.topics.get(topic)
        age = time.monotonic() - self.cluster.refreshed_at.get(topic, 0.0)
        if meta is not None and meta.error_code == ec.NONE and (
                age * 1000 > self.config.metadata_refresh_ms):
            # topic.metadata.refresh.interval.ms, as librdkafka: partitions may have been
            # added, and both lanes must pick among the same count.
            try:
                await self.cluster.refresh([topic])
            except (BrokerConnectionError, OSError) as exc:
                log.info("metadata refresh failed, using what is known: %s", exc)
            meta = self.cluster.topics.get(topic, meta)
            if meta.error_code != ec.NONE:
                meta = None
        while meta is None or meta.error_code != ec.NONE:
            try:
                await self.cluster.refresh([topic])
            except (BrokerConnectionError, OSError) as exc:
                # A connection lost mid-request is no answer: ask again, as librdkafka does.
                await self._lookup_retry(exc, deadline)
                continue
            meta = self.cluster.topics.get(topic)
            code = meta.error_code if meta is not None else ec.UNKNOWN_TOPIC_OR_PARTITION
            # A topic being auto-created answers LEADER_NOT_AVAILABLE for a moment (Kafka).
            if code == ec.NONE or not ec.is_retriable(code) or code in (
                    ec.UNKNOWN_TOPIC_OR_PARTITION,) or time.monotonic() > deadline:
                break
            await asyncio.sleep(self.config.retry_backoff_ms / 1000)
        if meta is None or meta.error_code != ec.NONE:
            code = meta.error_code if meta is not None else ec.UNKNOWN_TOPIC_OR_PARTITION
            raise LookupError(code)
        return meta.partition_count

    def take_reports(self, timeout: float | None, *, prompt: bool = True) -> list[DeliveryReport]:
        """Wait up to ``timeout`` seconds (None: forever) for reports and take them all.

        ``prompt=False`` (flush): woken only when every outstanding record has its report, else
        at the timeout with the pile so far. A copy with gapped offsets answers thousands of
        small requests a second; waking the caller's thread for each costs more than the report.
        """
        with self._reports_cv:
            if timeout != 0 and (not self._reports if prompt
                                 else self._piled_records < self._outstanding):
                self._prompt_waiters += prompt
                try:
                    self._reports_cv.wait(timeout)
                finally:
                    self._prompt_waiters -= prompt
            reports = list(self._reports)
            self._reports.clear()
            self._piled_records = 0
            return reports

    def report_done(self, records: int) -> None:
        with self._reports_cv:
            self._outstanding -= records

    def begin_flush(self) -> None:
        self._flushing += 1
        self._sender_idle = False
        self._call_soon(self._set_wake)

    def end_flush(self) -> None:
        self._flushing -= 1

    def purge(self) -> int:
        """Drop records not yet sent; they are reported with _PURGE_QUEUE."""
        if self.txn is not None:  # sequences handled as an abort handles them
            return self.call(self._purge_transaction())
        return self.call(self._purge())

    async def _purge_transaction(self) -> int:
        return self.purge_transaction()

    async def _purge(self) -> int:
        with self.lock:
            # Drain first: a finished batch has its bytes, so per-record reports can name
            # every purged record (an unfinished batch has no bytes to decode).
            for batch in self.acc.drain(int(time.monotonic() * 1000), flush=True):
                self._sender_for(batch.topic, batch.partition).queue(batch)
            never_drained = self.acc.purge()  # already released from the bounds
        drained = []
        for sender in self._partitions.values():
            drained.extend(sender.take_pending())
        error = kafka_error(PURGE_QUEUE, "purged before it was sent")
        for batch in never_drained:
            self._report(batch, error, -1, release=False)
        for batch in drained:
            self._report(batch, error, -1)
        with self.lock:
            self._give_back_bounds()  # purge() returns with the room free
        if (self.config.enable_idempotence and self.txn is None
                and any(b.producer_id >= 0 for b in drained)):
            # Their sequences will never reach the broker: start over with a new producer id
            # rather than run into OUT_OF_ORDER_SEQUENCE_NUMBER with the next batch.
            for batch in drained:
                if batch.producer_id >= 0:
                    self._partitions[(batch.topic, batch.partition)].break_sequence()
            self._need_new_producer_id = True
        return sum(b.record_count for b in never_drained + drained)

    def close(self, timeout: float = 30.0) -> None:
        if self._closing:
            return
        self._closing = True
        if self.dead:
            return
        self._call_soon(self._set_wake)
        self._thread.join(timeout)

    # ---- transactions (the TransactionManager's EngineHooks, on the event loop) --------------

    def set_producer(self, producer_id: int, producer_epoch: int) -> None:
        """A transactional producer id / epoch: batches not yet acknowledged are re-stamped
        with it, every partition's sequence from 0."""
        self._adopt_producer(producer_id, producer_epoch)

    def _adopt_producer(self, producer_id: int, producer_epoch: int) -> None:
        """Batches not yet acknowledged go back to the accumulator, oldest first at the front,
        so they are re-stamped with the new id and sequences from 0 when drained again; every
        partition's sequence holds again."""
        with self.lock:
            for sender in self._partitions.values():
                for batch in reversed(sender.new_producer()):
                    self.acc.reenqueue(batch)
            self.acc.set_producer(producer_id, producer_epoch)

    def purge_transaction(self) -> int:
        """Drop every record not in flight (reported with _PURGE_QUEUE, as librdkafka does
        when a transaction fails or is aborted); in-flight batches come back as they will.
        Returns how many records were dropped."""
        with self.lock:
            for batch in self.acc.drain(int(time.monotonic() * 1000), flush=True):
                self._sender_for(batch.topic, batch.partition).queue(batch)
            never_drained = self.acc.purge()
            dropped = []
            for sender in self._partitions.values():
                # (batches that never went out give their sequence numbers back)
                dropped.extend(sender.drop_for_abort())
        error = kafka_error(PURGE_QUEUE, "Local: Purged in queue (the transaction failed or "
                            "is being aborted)")
        for batch in never_drained:
            self._report(batch, error, -1, release=False)
        for batch in dropped:
            self._report(batch, error, -1)
        with self.lock:
            self._give_back_bounds()
        return sum(b.record_count for b in never_drained + dropped)

    def fail_transactional(self, error: KafkaError) -> None:
        """A fatal transactional error: nothing more is sent, what waits fails with it."""
        self._fatal = error
        self._call_soon(self._set_wake)

    def wake_sender(self) -> None:
        self._call_soon(self._set_wake)

    # ---- sender thread ----------------------------------------------------------------------

    def _run(self) -> None:
        self.lock.bind_sender()
        asyncio.set_event_loop(self._loop)
        self._wake = Wakeup(self._loop)
        config = self.config
        self.cluster = Cluster(config.bootstrap_servers, config.client_id,
                               request_timeout_s=config.request_timeout_ms / 1000,
                               connect_timeout_s=config.socket_timeout_ms / 1000,
                               allow_auto_create_topics=config.allow_auto_create_topics,
                               sasl=config.sasl, tls=config.tls,
                               auth_retry_backoff_s=config.retry_backoff_max_ms / 1000,
                               reconnect_backoff_ms=config.reconnect_backoff_ms,
                               reconnect_backoff_max_ms=config.reconnect_backoff_max_ms)
        self._ready.set()
        try:
            self._loop.run_until_complete(self._sender())
        except Exception as exc:  # a bug: fail every record loudly rather than hang
            log.exception("kipproducer sender thread failed")
            self._fatal = KafkaError(KafkaError._FATAL, f"kipproducer sender thread failed: "
                                     f"{exc!r}", fatal=True)
            tasks = asyncio.all_tasks(self._loop)
            for task in tasks:
                task.cancel()
            self._loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            with self.lock:
                # Before the last sweep: a record appended after it sees ``dead`` in
                # appended() and is failed by its caller (nobody else would report it).
                self.dead = True
            self._fail_everything(self._fatal)
        finally:
            self.dead = True
            try:
                self._loop.run_until_complete(self.cluster.close())
            finally:
                self._loop.close()

    def _fail_everything(self, error: KafkaError) -> None:
        with self.lock:
            # Drained batches have bytes, for the per-record reports (as in _purge).
            for batch in self.acc.drain(int(time.monotonic() * 1000), flush=True):
                self._sender_for(batch.topic, batch.partition).queue(batch)
            never_drained = self.acc.purge()
        for batch in never_drained:
            self._report(batch, error, -1, release=False)
        for sender in self._partitions.values():
            for batch in sender.take_all():
                self._report(batch, error, -1)

    async def _sender(self) -> None:
        assert self._wake is not None
        while True:
            # Cleared before this round's work, not just before the wait: a wake set while
            # this round awaits (close(), a task's _wake_soon()) must not be lost.
            self._wake.clear()
            if self._closing and self._outstanding == 0:
                return
            if (self._need_new_producer_id and not self._any_in_flight()
                    and not self._unresolved()):
                await self._init_producer_id()
            now_ms = int(time.monotonic() * 1000)
            with self.lock:
                self._give_back_bounds()
                batches = self.acc.drain(now_ms, flush=bool(self._flushing) or self._closing)
            for batch in batches:
                self._sender_for(batch.topic, batch.partition).queue(batch)
            if self._metadata_due():
                await self._refresh_metadata(set())
            await self._dispatch()
            # From here the caller's next append wakes the loop (once), to drain it: answers
            # do not (the answer path sends the next requests itself, see _send_next), so
            # this is how records appended meanwhile, for another partition say, get out
            # promptly. Set before next_ready_ms is read: an append after that read is not
            # in the timeout, and must wake.
            self._sender_idle = True
            self._idle_until_ms = 0  # until set below, every append wakes the loop
            waiting = any(s.pending or s.failed for s in self._partitions.values())
            with self.lock:
                self._give_back_bounds()  # batches failed in dispatch: room for the caller now
                delay = self.acc.next_ready_ms()
                if delay is None:
                    timeout = 0.05 if waiting else 1.0
                else:
                    timeout = max(delay, 1) / 1000
                # Under the lock, so an append either is in this timeout or sees these.
                self._idle_closed = self.acc.closed_batches
                self._idle_until_ms = monotonic_ms() + int(timeout * 1000)
            await self._wake.wait(timeout)
            self._sender_idle = False

    def _give_back_bounds(self) -> None:
        """Release reported batches' share of the queue bounds (the caller holds the lock)."""
        done = self._done_batches
        while done:
            self.acc.release(done.popleft())

    def _sender_for(self, topic: str, partition: int) -> PartitionSendState:
        key = (topic, partition)
        sender = self._partitions.get(key)
        if sender is None:
            sender = self._partitions[key] = PartitionSendState(topic, partition, self.acc,
                                                                self.txn)
        return sender

    def _any_in_flight(self) -> bool:
        return any(s.in_flight for s in self._partitions.values())

    def _unresolved(self) -> bool:
        """Batches that went out and failed without a verdict (a lost connection, a timeout)
        on partitions whose sequence still holds: retried under the current producer id
        before a new one is taken, since they may already be in the log."""
        return any(s.unresolved for s in self._partitions.values())

    async def _init_producer_id(self) -> None:
        """The idempotent producer's id (a transactional producer's comes from its
        TransactionManager, through the same request)."""
        try:
            conn = await self.cluster.any_connection()
            # The cluster's first answer says whether runs of offsets may be packed (§9).
            self.acc.pack_runs = conn.supports_feature(FEATURE_PRODUCE_OFFSETS,
                                                       MULTI_BATCH_VERSION)
            version = conn.version_for(INIT_PRODUCER_ID, INIT_PRODUCER_ID_MAX_VERSION)
            response = await request_producer_id(conn, version, None,
                                                 DEFAULT_TRANSACTION_TIMEOUT_MS, None)
        except (BrokerConnectionError, OSError) as exc:
            log.info("InitProducerId failed, will retry: %s", exc)
            await asyncio.sleep(self.config.retry_backoff_ms / 1000)
            return
        if response.error_code != ec.NONE:
            if init_pid_action(response.error_code) is not Action.FATAL:
                await asyncio.sleep(self.config.retry_backoff_ms / 1000)
                return
            self._fatal = kafka_error(response.error_code, "InitProducerId failed")
            log.error("idempotent producer cannot start: %s", self._fatal)
            self._need_new_producer_id = False
            return
        self._adopt_producer(response.producer_id, response.producer_epoch)
        self._need_new_producer_id = False
        log.info("idempotent producer id %d epoch %d", response.producer_id,
                 response.producer_epoch)

    async def _dispatch(self) -> None:
        """Send every partition's next batch whose leader can take a request now."""
        refused = self.cluster.authentication_failure()
        if refused is not None:  # SASL refused us: what waits fails now, not at its timeout
            self._fail_waiting(kafka_error(AUTHENTICATION, refused))
        if self._fatal is not None or (self.config.enable_idempotence
                                       and self.acc.producer_id < 0):
            # Nothing can be sent until there is a producer id (or ever, after a fatal
            # error); batches waiting for it still time out (delivery.timeout.ms).
            self._fail_waiting(self._fatal)
            return
        # Waiting for a new producer id: only retries of batches whose fate is unknown go
        # out, under the current id, so the new id never re-sends a batch already written.
        resolving = self._need_new_producer_id
        now = time.monotonic()
        by_leader: dict[int, list[PartitionSendState]] = {}
        missing: set[str] = set()
        for sender in self._partitions.values():
            if resolving and sender.sequence_broken:
                continue
            sender.resend_failed(now)
            if sender.blocked(now):
                continue
            batch = sender.pending[0]
            if self._expired(batch):
                sender.pending.popleft()
                self._report(batch, kafka_error(MSG_TIMED_OUT, "delivery.timeout.ms "
                                                "expired before the batch was sent"), -1)
                continue
            if resolving and batch.attempts == 0:
                continue
            leader = self.cluster.leader(sender.topic, sender.partition)
            if leader < 0:
                missing.add(sender.topic)
                continue
            by_leader.setdefault(leader, []).append(sender)
        if missing:
            await self._refresh_metadata(missing)
        for leader, senders in by_leader.items():
            try:
                conn = await self.cluster.connection(leader)
            except (BrokerConnectionError, KeyError) as exc:
                log.info("broker %s unreachable: %s", leader, exc)
                # Its partitions may have new leaders: the next round refreshes metadata.
                self._need_metadata = True
                for sender in senders:
                    sender.back_off(self.config.retry_backoff_ms / 1000)
                continue
            conn.on_writable = self._wake_soon
            self._fill(conn, senders)

    def _fill(self, conn: BrokerConnection, senders: list[PartitionSendState]) -> None:
        """Send requests on ``conn`` while it has room: up to max.in.flight, each with at
        most one batch per partition (Kafka's rule), a partition's batches in order, while
        the socket buffer has room (a full one wakes the sender when it drains)."""
        budget = self.config.max_in_flight - conn.in_flight
        while budget > 0 and not conn.congested:
            chosen, mode = self._take_request(conn, senders)
            if not chosen:
                break
            self._send_produce(conn, chosen, mode)
            budget -= 1

    def _take_request(self, conn: BrokerConnection,
                      senders: list[PartitionSendState]) -> tuple[list[ProducerBatch], int]:
        """The next request's batches and ProduceMode: the head batch of each partition that
        may go now, all of one mode (a request has one mode, docs/protocol.md §2)."""
        chosen, size, mode = [], 0, None
        for sender in senders:
            # Waiting for the connection gave other tasks their turn: an earlier batch of
            # this partition may have failed meanwhile (it goes first), and batches still
            # in flight on another (lost) connection must come back before this one may
            # overtake them; otherwise a later sequence could land first (a broker takes
            # any first sequence from a producer id it does not know yet).
            if (sender.failed or not sender.pending
                    or (sender.in_flight and sender.conn is not conn)):
                continue
            batch = sender.pending[0]
            if self._need_new_producer_id and batch.attempts == 0:
                continue  # resolving: only retries of batches whose fate is unknown go out
            if not sender.may_send():
                continue  # not added to the transaction yet (AddPartitionsToTxn is asked)
            batch_mode = batch.produce_mode
            if self._expired(batch):
                sender.pending.popleft()
                self._report(batch, kafka_error(MSG_TIMED_OUT, "delivery.timeout.ms "
                                                "expired before the batch was sent",
                                                mode=batch_mode), -1)
                continue
            if (batch_mode != ProduceMode.ASSIGN or batch.key_conditions is not None) \
                    and self._refuse_locally(conn, sender, batch):
                continue
            if mode is not None and batch_mode != mode:
                continue
            if batch_mode == ProduceMode.EXPECTED_OFFSETS and sender.in_flight:
                # One conditional batch of a partition at a time: the next one expects this
                # one's records in the log, and must not be checked before its verdict.
                continue
            if chosen and size + batch.size > MAX_REQUEST_BYTES:
                break
            mode = batch_mode
            unit = self._unit_of(conn, sender, batch, MAX_REQUEST_BYTES - size)
            for member in unit:
                chosen.append(member)
                size += member.size
                sender.send(member, conn)
        return chosen, ProduceMode.ASSIGN if mode is None else mode

    def _unit_of(self, conn: BrokerConnection, sender: PartitionSendState, head: ProducerBatch,
                 room: int) -> list[ProducerBatch]:
        """The batches of ``sender`` that go in this request: the head batch, and with
        explicit offsets to a broker that takes several batches per partition (docs/protocol.md §9)
        the pending batches that may follow it in one unit: same mode, offsets that continue
        as §9 requires, within UNIT_MAX_BYTES. A retried head goes with the unit it first
        went out with, no more and no less (the broker's duplicate check knows units)."""
        mode = head.produce_mode
        pending = sender.pending
        if head.attempts:
            count = sender.units.get(id(head), 1)
            unit = []
            for batch in pending:
                if len(unit) == count or batch.attempts == 0:
                    break
                unit.append(batch)
            return unit
        if (mode == ProduceMode.ASSIGN or len(pending) < 2
                or not conn.supports_feature(MODE_FEATURE[mode], MULTI_BATCH_VERSION)):
            return [head]
        unit = [head]
        size = head.size
        previous = head
        for batch in itertools.islice(pending, 1, None):
            if (batch.attempts or batch.produce_mode != mode
                    or size + batch.size > min(room, UNIT_MAX_BYTES)):
                break
            if mode == ProduceMode.EXPECTED_OFFSETS and (
                    previous.base_offset < 0
                    or batch.base_offset != previous.base_offset + previous.record_count):
                break  # a new expectation (another call): its own request
            unit.append(batch)
            size += batch.size
            previous = batch
        if len(unit) > 1:
            sender.units[id(head)] = len(unit)
        return unit

    def _refuse_locally(self, conn: BrokerConnection, sender: PartitionSendState,
                        batch: ProducerBatch) -> bool:
        """Fail a KIP batch that must not be sent: the broker lacks the feature (a stock
        broker would ignore the mode and assign offsets), or it continues a failed
        conditional batch of the same call. True when the batch was taken off the queue."""
        mode = batch.produce_mode
        error = None
        if batch.key_conditions is not None:
            try:
                supported = (conn.supports_feature(FEATURE_PRODUCE_KEY_CONDITIONAL)
                             and conn.version_for(PRODUCE, PRODUCE_MAX_VERSION) >= 9)
            except BrokerConnectionError:
                supported = False
            if not supported:
                error = kafka_error(
                    KafkaError._UNSUPPORTED_FEATURE,
                    f"expected_key_offset= (per-key conditional produce) is unsupported by "
                    f"broker {conn.node_id} ({conn.host}:{conn.port}): it does not advertise "
                    f"the feature {FEATURE_PRODUCE_KEY_CONDITIONAL!r}; nothing was sent")
        elif sender.continues_broken_chain(batch):
            error = continuation_error(sender.broken_chain)
        else:
            feature = MODE_FEATURE[mode]
            try:
                conn.version_for(PRODUCE, PRODUCE_MAX_VERSION, PRODUCE_MIN_VERSION[mode])
                supported = conn.supports_feature(feature)
            except BrokerConnectionError:
                supported = False
            units = supported and conn.supports_feature(feature, MULTI_BATCH_VERSION)
            if mode == ProduceMode.USE_OFFSETS:
                # Later batches pack their runs of offsets as the leader allows (§9).
                self.acc.pack_runs = units
            # (run_count, not runs: that builds a tuple per run, and this runs per batch)
            if supported and batch.run_count and not units:
                error = kafka_error(
                    KafkaError._UNSUPPORTED_FEATURE,
                    f"a batch of {batch.run_count} runs of offsets was packed for a broker "
                    f"that takes several per request (KIP-WIRE version 2), but broker "
                    f"{conn.node_id} ({conn.host}:{conn.port}) advertises {feature!r} "
                    "version 1 only; nothing was sent", mode=mode)
            elif not supported:
                error = kafka_error(
                    KafkaError._UNSUPPORTED_FEATURE,
                    f"{MODE_CALL[mode]} is unsupported by broker {conn.node_id} "
                    f"({conn.host}:{conn.port}): it does not advertise the feature "
                    f"{feature!r}; nothing was sent", mode=mode)
        if error is None:
            return False
        sender.pending.popleft()
        self._fail_for_good(batch, error)
        return True

    def _fail_waiting(self, error: KafkaError | None) -> None:
        """Report waiting (not in flight) batches that expired, or all of them with ``error``."""
        timed_out = kafka_error(MSG_TIMED_OUT, "delivery.timeout.ms expired before the batch "
                                "was sent")
        for sender in self._partitions.values():
            for batch in sender.take_waiting(error, self._expired):
                self._report(batch, error or timed_out, -1)

    def _expired(self, batch: ProducerBatch) -> bool:
        age = int(time.monotonic() * 1000) - batch.created_ms
        return age > self.config.delivery_timeout_ms

    def _metadata_due(self) -> bool:
        """Whether the sender refreshes the known topics' metadata now: they are stale (at
        most once per retry.backoff.ms), or topic.metadata.refresh.interval.ms has passed."""
        cluster = self.cluster
        if not cluster.topics:
            return False
        now = time.monotonic()
        if now < self._next_stale_refresh:
            return False
        interval = self.config.metadata_refresh_ms
        if not (self._need_metadata or cluster.stale or (
                interval >= 0 and (now - cluster.refreshed) * 1000 >= interval)):
            return False
        self._next_stale_refresh = now + self.config.retry_backoff_ms / 1000
        return True

    async def _refresh_metadata(self, topics) -> None:
        self._need_metadata = False
        self.cluster.stale = False
        try:
            await self.cluster.refresh(sorted(topics | set(self.cluster.topics)))
        except (BrokerConnectionError, OSError) as exc:
            log.info("metadata refresh failed: %s", exc)
            self._need_metadata = True  # asked again (at most once per retry.backoff.ms)
            return
        for sender in self._partitions.values():
            meta = self.cluster.topics.get(sender.topic)
            if meta is None or not sender.pending:
                continue
            if meta.error_code == ec.UNKNOWN_TOPIC_OR_PARTITION:
                error = kafka_error(UNKNOWN_TOPIC, f"topic {sender.topic} does not exist")
            elif meta.error_code == ec.TOPIC_AUTHORIZATION_FAILED:
                # As librdkafka: no Describe on the topic (ACLs) fails its records now.
                error = kafka_error(ec.TOPIC_AUTHORIZATION_FAILED,
                                    f"not authorized to access topic {sender.topic}")
            elif meta.error_code == ec.NONE and sender.partition >= meta.partition_count:
                # As librdkafka: a partition the topic does not have fails now, not after
                # delivery.timeout.ms.
                error = KafkaError(UNKNOWN_PARTITION, no_such_partition(
                    sender.topic, sender.partition, meta.partition_count))
            else:
                continue
            for batch in sender.take_pending():
                self._report(batch, error, -1)

    def _send_produce(self, conn: BrokerConnection, batches: list[ProducerBatch],
                      mode: int = ProduceMode.ASSIGN) -> None:
        """Write one Produce request now; its answer is handled by :meth:`_produce_answered`
        from the connection's callback (no task per request: this is the per-request cost of
        every copy whose offsets have gaps, where each batch is its own request)."""
        config = self.config
        try:
            lowest, highest = PRODUCE_MIN_VERSION[mode], PRODUCE_MAX_VERSION
            if self.txn is not None:
                # Transactions V2 sends v12, the classic flow below it (transactions.py)
                lowest, highest = self.txn.produce_versions(lowest, highest)
            version = conn.version_for(PRODUCE, highest, lowest)
            # The body is built in the call (no local keeps it): it holds views of the batches'
            # bytes, and a batch whose bytes are still viewed cannot be re-stamped for a new
            # producer id.
            on_answer = None if config.acks == 0 else (
                lambda response, error: self._produce_answered(conn, batches, mode, response,
                                                               error))
            if version in DIRECT_VERSIONS and self.txn is None:
                # (the C encoder writes a null transactional_id: transactional requests go
                # through the generic codec)
                topics: dict[str, list] = {}
                conditions = (conditions_by_partition(batches) if mode == ProduceMode.ASSIGN
                              else None)
                for topic, partition, records in _records_by_partition(batches):
                    topics.setdefault(topic, []).append(
                        (partition, records, conditions.get((topic, partition)))
                        if conditions else (partition, records))
                conn.send_parts(PRODUCE, version, lambda correlation_id, client_id: (
                    encode_produce_request(correlation_id, client_id, version, config.acks,
                                           config.request_timeout_ms, topics, mode)),
                    on_answer)
            else:
                conn.send(PRODUCE, version, self._produce_body(batches, version, mode),
                          on_answer)
        except (BrokerConnectionError, OSError) as exc:
            self._produce_answered(conn, batches, mode, None, exc)
            return
        if config.acks == 0:  # sent is all we will ever know
            for batch in batches:
                self._complete(batch, None, -1)

    def _produce_answered(self, conn: BrokerConnection, batches: list[ProducerBatch],
                          mode: int, response: Any, error: BaseException | None) -> None:
        if error is not None:
            # A lost connection, a timeout, or an answer that does not decode: no verdict.
            # The leader may be gone: metadata is refreshed before the retries go out.
            self._need_metadata = True
            for batch in batches:
                self._retry_or_fail(batch, kafka_error(ec.NETWORK_EXCEPTION, str(error),
                                                       mode=mode))
            self._wake_soon()
            return
        results = {(t.name, p.index): p for t in response.responses
                   for p in t.partition_responses}
        refresh = False
        # Records of a partition's unit (docs/protocol.md §9) before each batch: with assigned
        # offsets (KIP-27) a batch lands that far after the unit's base offset.
        ahead: dict[tuple[str, int], int] = {}
        delivered: list[DeliveryReport] = []  # reported together: one lock, one wake-up
        for batch in batches:
            key = (batch.topic, batch.partition)
            before = ahead.get(key, 0)
            ahead[key] = before + batch.record_count
            answer = results.get(key)
            if answer is None:
                self._retry_or_fail(batch, kafka_error(ec.UNKNOWN_SERVER_ERROR,
                                                       "no answer for this partition", mode=mode))
                continue
            code = answer.error_code
            if mode != ProduceMode.ASSIGN and code != ec.NONE:
                log_end = getattr(answer, "log_end_offset", None)
                self._on_error(batch, kafka_error(
                    code, getattr(answer, "error_message", None), mode=mode,
                    log_end_offset=log_end))
                refresh = refresh or code in _METADATA_ERRORS
                continue
            if code == ec.NONE:
                base = answer.base_offset
                if before and base >= 0:
                    base = (batch.base_offset if mode == ProduceMode.USE_OFFSETS
                            else base + before)
                self._settle(batch)
                delivered.append(DeliveryReport(batch, None, base,
                                                getattr(answer, "log_append_time", -1)))
            elif code == ec.DUPLICATE_SEQUENCE_NUMBER:
                # Written before; with a ProduceMode its offsets are the batch's own.
                self._complete(batch, None, batch.base_offset if mode else -1)
            else:
                refresh = refresh or code in _METADATA_ERRORS
                message = getattr(answer, "error_message", None)
                self._on_error(batch, kafka_error(code, message) if batch.key_conditions is None
                               else key_batch_error(batch, code, message,
                                                    getattr(answer, "key_conflicts", None)))
        if delivered:
            self._report_delivered(delivered)
        if refresh:
            self._need_metadata = True
        if not self._send_next(conn, batches):
            self._wake_soon()

    def _send_next(self, conn: BrokerConnection, answered: list[ProducerBatch]) -> bool:
        """Right after an answer, in its callback: the next requests to the same broker go
        out now, not after a round of the sender loop.
        With max.in.flight requests out and the broker answering one at a time, this
        turnaround is what the pipeline waits on (a copy with gapped offsets sends thousands
        of one-batch requests a second). Only in the plain case: any failure, retry, missing
        producer id, metadata refresh or a partition running out of drained batches leaves
        the work to the sender loop.

        True when the loop has nothing to do for these partitions now (it is not woken)."""
        if (self._need_metadata or self._need_new_producer_id or self._fatal is not None
                or self._closing or not conn.connected or conn.congested
                or (self.config.enable_idempotence and self.acc.producer_id < 0)):
            return False
        # Every partition led by this broker that has batches to send, in the loop's order:
        # the freed budget is not only the answered partitions' to take.
        senders: list[PartitionSendState] = []
        now = time.monotonic()
        leader = self.cluster.leader
        node = conn.node_id
        for sender in self._partitions.values():
            if not (sender.pending or sender.failed):
                continue
            if sender.failed or now < sender.retry_at:
                return False  # a retry: the loop's business
            if leader(sender.topic, sender.partition) == node:
                senders.append(sender)
        self._fill(conn, senders)
        if self._done_batches:  # their share of the queue bounds, if the caller allows
            if not self.lock.acquire(blocking=False):
                return False
            try:
                self._give_back_bounds()
            finally:
                self.lock.release()
        # Drained batches left for every partition: the loop drains more before they run out
        # (and the answered partitions need it when they have none left).
        return all(len(sender.pending) > 1 for sender in senders) and all(
            self._partitions[(batch.topic, batch.partition)].pending for batch in answered)

    def _produce_body(self, batches: list[ProducerBatch], version: int, mode: int) -> Any:
        topics: dict[str, list] = {}
        conditions = conditions_by_partition(batches) if mode == ProduceMode.ASSIGN else None
        for topic, partition, records in _records_by_partition(batches):
            part = {"index": partition, "records": records}
            if conditions and (topic, partition) in conditions:
                part["key_conditions"] = conditions[(topic, partition)]
            topics.setdefault(topic, []).append(part)
        extension = {"produce_mode": int(mode)} if mode != ProduceMode.ASSIGN else {}
        return build_request(
            PRODUCE, version, transactional_id=self.config.transactional_id,
            acks=self.config.acks,
            timeout=self.config.request_timeout_ms,
            topic_data=[{"name": t, "partition_data": parts} for t, parts in topics.items()],
            **extension)

    def _wake_soon(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def _on_error(self, batch: ProducerBatch, error: KafkaError) -> None:
        code = error.code()
        sender = self._sender_for(batch.topic, batch.partition)
        if (code == ec.OPERATION_NOT_ATTEMPTED
                and batch.produce_mode == ProduceMode.EXPECTED_OFFSETS):
            # Innocent: another partition of the request had the wrong expected offset and
            # nothing was appended. Sent again (its own expectation is checked then).
            self._retry_or_fail(batch, error, force_retry=True)
            return
        if self.config.enable_idempotence and code in (ec.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                                       ec.UNKNOWN_PRODUCER_ID):
            if sender.failed:  # caused by an earlier batch of ours that failed: resend
                self._retry_or_fail(batch, error, force_retry=True)
            elif self.txn is not None:
                # The transaction fails; its abort bumps the epoch (KIP-360).
                self._fail_for_good(batch, error)
            else:  # the broker lost our sequence: new producer id, then resend everything
                sender.break_sequence()
                self._need_new_producer_id = True
                self._retry_or_fail(batch, error, force_retry=True)
            return
        if ec.is_retriable(code):
            self._retry_or_fail(batch, error)
            return
        self._fail_for_good(batch, error)

    def _fail_for_good(self, batch: ProducerBatch, error: KafkaError) -> None:
        self._finish(batch, error, -1)
        if self.config.enable_idempotence and batch.producer_id >= 0 and self.txn is None:
            # A batch that will never be written leaves a hole in the sequence: start over with
            # a new producer id (Kafka's clients bump the epoch the same way).
            self._sender_for(batch.topic, batch.partition).break_sequence()
            self._need_new_producer_id = True

    def _retry_or_fail(self, batch: ProducerBatch, error: KafkaError, *,
                       force_retry: bool = False) -> None:
        sender = self._sender_for(batch.topic, batch.partition)
        sender.leave_flight(batch)
        if self._expired(batch) or (not force_retry and batch.attempts > self.config.retries):
            self._finish(batch, error, -1)
            return
        if self.txn is not None and not self.txn.sending:
            self._finish(batch, error, -1)  # the transaction is failing: nothing is resent
            return
        backoff = min(self.config.retry_backoff_ms * (2 ** min(batch.attempts - 1, 10)),
                      self.config.retry_backoff_max_ms)
        sender.retry_later(batch, backoff / 1000)
        log.debug("retrying %s after %s", batch, error)

    def _complete(self, batch: ProducerBatch, error, base_offset: int,
                  log_append_time: int = -1) -> None:
        self._settle(batch)
        self._report(batch, error, base_offset, log_append_time)

    def _settle(self, batch: ProducerBatch) -> None:
        """A batch has its verdict: out of flight, and its unit forgotten (a unit is
        remembered until then, for its retries)."""
        self._sender_for(batch.topic, batch.partition).settle(batch)

    def _finish(self, batch: ProducerBatch, error, base_offset: int) -> None:
        self._complete(batch, error, base_offset)
        if batch.produce_mode != ProduceMode.EXPECTED_OFFSETS:
            return
        sender = self._sender_for(batch.topic, batch.partition)
        # Continuations already drained fail now (with idempotence one new producer id then
        # covers them all); later ones when they are drained (_refuse_locally).
        for waiting in sender.conditional_settled(batch, error):
            self._complete(waiting, continuation_error(sender.broken_chain), -1)

    def _report_delivered(self, reports: list[DeliveryReport]) -> None:
        """What _report does for batches written without error, for a request's worth."""
        self._done_batches.extend(report.batch for report in reports)
        self._pile(reports)

    def _pile(self, reports: list[DeliveryReport]) -> None:
        """Hand reports to the caller's thread. Only the first reports of a pile wake the
        caller (it takes the whole pile): one thread switch per pile rather than per batch."""
        records = sum(report.batch.record_count for report in reports)
        with self._reports_cv:
            was_empty = not self._reports
            self._reports.extend(reports)
            self._piled_records += records
            if ((self._prompt_waiters and was_empty)
                    or self._piled_records >= self._outstanding):
                self._reports_cv.notify_all()

    def _report(self, batch: ProducerBatch, error, base_offset: int,
                log_append_time: int = -1, *, release: bool = True) -> None:
        if release:
            # Its share of the queue bounds goes back in the sender's next locked step, not
            # here: the caller's thread holds the lock while it appends (tens of ms for a big
            # produce_arrays call) and the answer path must not wait for it.
            self._done_batches.append(batch)
        if (error is not None and batch.produce_mode != ProduceMode.ASSIGN
                and not isinstance(error, ProduceOffsetKafkaError)):
            # Every error of a KIP batch has log_end_offset (-1: the broker did not say).
            error = ProduceOffsetKafkaError(error.code(), error.str(), fatal=error.fatal(),
                                            retriable=error.retriable())
        if error is not None and self.txn is not None:
            # A batch that went out, or failed otherwise than by a purge before it was sent,
            # may leave a hole in its partition's sequence (see purge_transaction).
            holes = batch.base_sequence >= 0 and (batch.attempts > 0
                                                  or error.code() != PURGE_QUEUE)
            self.txn.batch_failed(batch.record_count, holes, error)
        self._pile([DeliveryReport(batch, error, base_offset, log_append_time)])
