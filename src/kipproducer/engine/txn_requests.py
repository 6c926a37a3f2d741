"""The transaction coordinator's requests (the I/O side of engine/txn_state.py), on the
engine's event loop.

Classic flow (transaction versions 0/1): FindCoordinator(key_type 1) ->
InitProducerId(transactional_id, transaction.timeout.ms; the current producer id and epoch
when bumping the epoch, KIP-360) -> AddPartitionsToTxn (v0-3; before a partition's first
batch in the transaction, all partitions waiting at that moment in one request) -> Produce
(the engine's, v <= 11) -> AddOffsetsToTxn + FindCoordinator(group) + TxnOffsetCommit (v3:
member id, generation, group instance id) -> EndTxn (v <= 4).

Transactions V2 (KIP-890 part 2; chosen per producer by txn_state.speaks_v2 and
``kip.transaction.protocol``): no AddPartitionsToTxn before a batch (Produce v12 has the
partition's leader add the partition to the transaction), no AddOffsetsToTxn (TxnOffsetCommit
v5 has the group coordinator add its partition), and EndTxn v5 bumps the epoch, answering
with the producer id and epoch to use next (a new producer id when the epoch is exhausted),
which the engine adopts (every partition's sequence restarts at 0). A partition added
without a record (TransactionManager.register) still goes through AddPartitionsToTxn v3,
which a V2 coordinator serves for any client.

Each request is asked until its answer is final: the :class:`~.txn_state.TxnMachine` judges
every error code (retry, find the coordinator again, abortable, fatal) and these functions
carry the verdict out. :func:`request_producer_id` is the one InitProducerId request, the
idempotent producer's (engine.py) as well as the transactional one's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from kipproducer.protocol import build_request

from ..protocol.api_keys import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    END_TXN,
    FIND_COORDINATOR,
    INIT_PRODUCER_ID,
    PRODUCE,
    TXN_OFFSET_COMMIT,
)
from .cluster import Cluster
from .connection import BrokerConnection, BrokerConnectionError
from .group_metadata import GroupMetadata
from .txn_state import (
    ADD_OFFSETS_ERRORS,
    END_TXN_CLASSIC_MAX_VERSION,
    END_TXN_ERRORS,
    END_TXN_V2_VERSION,
    GROUP_KEY,
    TRANSACTION_KEY,
    TRANSACTION_VERSION_FEATURE,
    TXN_OFFSET_COMMIT_ERRORS,
    TXN_OFFSET_COMMIT_V2_VERSION,
    Action,
    Effect,
    Outcome,
    Retry,
    TxnMachine,
    speaks_v2,
)

log = logging.getLogger("kipproducer.engine")

INIT_PRODUCER_ID_MAX_VERSION = 4
# An idempotent producer (no transactional id) asks with the broker default's timeout.
DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000
Offsets = dict[str, list[tuple[int, int, int, str | None]]]


@dataclass(frozen=True)
class ProducerIdAnswer:
    error_code: int
    producer_id: int
    producer_epoch: int


async def request_producer_id(conn: BrokerConnection, version: int,
                              transactional_id: str | None, timeout_ms: int,
                              current: tuple[int, int] | None) -> ProducerIdAnswer:
    """One InitProducerId request. ``current`` (id, epoch) asks for that producer's epoch to
    be bumped (KIP-360, v3+); None asks for a new producer (or, with a transactional id, the
    id's next epoch)."""
    fields: dict[str, Any] = {"transactional_id": transactional_id,
                              "transaction_timeout": timeout_ms}
    if version >= 3:
        fields["producer_id"], fields["producer_epoch"] = current or (-1, -1)
    response = await conn.request(INIT_PRODUCER_ID, version,
                                  build_request(INIT_PRODUCER_ID, version, **fields))
    return ProducerIdAnswer(int(response.error_code), response.producer_id,
                            response.producer_epoch)


class RetryLater(Exception):
    """An answer that says: ask again (``retry`` says when and how)."""

    def __init__(self, retry: Retry) -> None:
        super().__init__(retry.reason)
        self.retry = retry


class CoordinatorRequests:
    """The requests of one transactional id. ``producer`` reads the producer id and epoch
    from their one store (the accumulator's), ``adopt_producer`` makes the engine take a new
    one, ``apply`` carries out the machine's effects."""

    def __init__(self, transactional_id: str, timeout_ms: int, retry_backoff_s: float,
                 machine: TxnMachine, cluster: Cluster,
                 producer: Callable[[], tuple[int, int]],
                 adopt_producer: Callable[[int, int], None],
                 apply: Callable[[tuple[Effect, ...]], None], protocol: str = "auto") -> None:
        self.transactional_id = transactional_id
        self.protocol = protocol  # kip.transaction.protocol
        self.timeout_ms = timeout_ms
        self.retry_backoff_s = retry_backoff_s
        self.machine = machine
        self.cluster = cluster
        self.producer = producer
        self.adopt_producer = adopt_producer
        self.apply = apply
        self.coordinator: int | None = None
        self.adding: asyncio.Task | None = None

    def _settle(self, outcome: Outcome) -> None:
        """Carry out an answer's verdict: nothing, RetryLater, or KafkaException."""
        self.apply(outcome.effects)
        if outcome.error is not None:
            raise KafkaException(outcome.error)
        if outcome.retry is not None:
            raise RetryLater(outcome.retry)

    async def retrying(self, step: Callable[[], Awaitable[Any]], deadline: float,
                       what: str) -> Any:
        """Run ``step`` until it returns; a RetryLater waits and tries again until
        ``deadline``, then the caller gets a retriable _TIMED_OUT (the call may be made
        again)."""
        while True:
            try:
                return await step()
            except RetryLater as later:
                retry = later.retry
                if retry.find_coordinator:
                    self.coordinator = None
                if time.monotonic() + retry.backoff_s > deadline:
                    raise KafkaException(KafkaError(
                        KafkaError._TIMED_OUT, f"{what} timed out: {later}",
                        retriable=True)) from None
                await asyncio.sleep(retry.backoff_s)

    def version(self, conn: BrokerConnection, api_key: int, wanted_max: int,
                wanted_min: int = 0) -> int:
        """The version to speak; a broker without the API cannot run transactions: fatal
        _UNSUPPORTED_FEATURE (as librdkafka when the broker lacks the transactional APIs)."""
        try:
            return conn.version_for(api_key, wanted_max, wanted_min)
        except BrokerConnectionError as exc:
            error = KafkaError(KafkaError._UNSUPPORTED_FEATURE,
                               f"transactions are not supported by broker {conn.node_id} "
                               f"({conn.host}:{conn.port}): {exc}", fatal=True)
            self.apply(self.machine.unsupported(error))
            raise KafkaException(error) from None

    async def ask(self, conn: BrokerConnection, api_key: int, version: int,
                  fields: dict[str, Any], *, maybe_registers: bool = False) -> Any:
        try:
            return await conn.request(api_key, version, build_request(api_key, version,
                                                                      **fields))
        except (BrokerConnectionError, OSError) as exc:
            if maybe_registers:
                self.machine.maybe_registered = True  # it may have arrived: EndTxn is owed
            raise RetryLater(Retry(str(exc), self.retry_backoff_s, True)) from None

    # ---- coordinators -------------------------------------------------------------------------

    async def find_coordinator(self, key_type: int, key: str) -> BrokerConnection:
        try:
            conn = await self.cluster.any_connection()
        except (BrokerConnectionError, OSError) as exc:
            raise RetryLater(Retry(str(exc), self.retry_backoff_s)) from None
        version = self.version(conn, FIND_COORDINATOR, 3, 1 if key_type else 0)
        fields: dict[str, Any] = {"key": key}
        if version >= 1:
            fields["key_type"] = key_type
        response = await self.ask(conn, FIND_COORDINATOR, version, fields)
        self._settle(self.machine.coordinator_answer(int(response.error_code), key_type, key,
                                                     retry_backoff_s=self.retry_backoff_s))
        # A coordinator the metadata did not list yet is still reachable at its address.
        self.cluster.brokers.setdefault(response.node_id, (response.host, response.port))
        try:
            return await self.cluster.connection(response.node_id)
        except (BrokerConnectionError, OSError, KeyError) as exc:
            raise RetryLater(Retry(str(exc), self.retry_backoff_s, True)) from None

    async def coordinator_connection(self) -> BrokerConnection:
        if self.coordinator is not None:
            try:
                return await self.cluster.connection(self.coordinator)
            except (BrokerConnectionError, OSError, KeyError):
                self.coordinator = None
        conn = await self.find_coordinator(TRANSACTION_KEY, self.transactional_id)
        self.coordinator = conn.node_id
        return conn

    def choose_protocol(self, conn: BrokerConnection) -> None:
        """Decide, once, whether this producer speaks Transactions V2 (on the coordinator's
        ApiVersions: the cluster's finalized transaction.version and the versions served)."""
        if self.machine.v2 is not None:
            return
        try:
            v2 = speaks_v2(self.protocol, conn.finalized_level(TRANSACTION_VERSION_FEATURE),
                           conn.max_version(PRODUCE), conn.max_version(END_TXN))
        except KafkaException as exc:
            self.apply(self.machine.unsupported(exc.args[0]))
            raise
        self.machine.v2 = v2
        log.info("transactional producer %s: %s", self.transactional_id,
                 "Transactions V2 (KIP-890)" if v2 else "the classic transaction protocol")

    # ---- InitProducerId, EndTxn ---------------------------------------------------------------

    async def init_producer_id(self, deadline: float, *, bump: bool) -> None:
        naming_current = [bump]   # KIP-360 first; as on a restart if the broker refuses that

        async def once() -> None:
            conn = await self.coordinator_connection()
            self.choose_protocol(conn)
            version = self.version(conn, INIT_PRODUCER_ID, INIT_PRODUCER_ID_MAX_VERSION)
            try:
                answer = await request_producer_id(
                    conn, version, self.transactional_id, self.timeout_ms,
                    self.producer() if naming_current[0] else None)
            except (BrokerConnectionError, OSError) as exc:
                raise RetryLater(Retry(str(exc), self.retry_backoff_s, True)) from None
            if answer.error_code == 0:
                self.adopt_producer(answer.producer_id, answer.producer_epoch)
                log.info("transactional producer %s: id %d epoch %d", self.transactional_id,
                         answer.producer_id, answer.producer_epoch)
                return
            outcome = self.machine.producer_id_answer(
                answer.error_code, naming_current=naming_current[0],
                coordinator=conn.node_id, retry_backoff_s=self.retry_backoff_s)
            if outcome.retry is not None and outcome.retry.without_current:
                log.info("epoch bump refused (%s): re-initialising instead",
                         outcome.retry.reason)
                naming_current[0] = False
            self._settle(outcome)

        await self.retrying(once, deadline, "InitProducerId")

    async def end_txn(self, commit: bool, deadline: float) -> None:
        what = "commit" if commit else "abort"

        async def once() -> None:
            conn = await self.coordinator_connection()
            self.choose_protocol(conn)
            version = (self.version(conn, END_TXN, END_TXN_V2_VERSION, END_TXN_V2_VERSION)
                       if self.machine.v2 else
                       self.version(conn, END_TXN, END_TXN_CLASSIC_MAX_VERSION))
            producer_id, producer_epoch = self.producer()
            response = await self.ask(conn, END_TXN, version, {
                "transactional_id": self.transactional_id, "producer_id": producer_id,
                "producer_epoch": producer_epoch, "committed": commit})
            self._settle(self.machine.answer(int(response.error_code), END_TXN_ERRORS,
                                             f"EndTxn {what} failed",
                                             retry_backoff_s=self.retry_backoff_s))
            if version >= END_TXN_V2_VERSION and response.producer_id >= 0:
                # V2: the epoch was bumped (or, exhausted, a new producer id given); the next
                # transaction's batches carry it, every sequence from 0.
                self.adopt_producer(response.producer_id, response.producer_epoch)

        await self.retrying(once, deadline, f"EndTxn {what}")

    # ---- AddPartitionsToTxn -------------------------------------------------------------------

    def ensure_adding(self) -> None:
        """Ask AddPartitionsToTxn for the wanted partitions, unless a request is running
        (which asks for them next)."""
        if self.adding is None or self.adding.done():
            self.adding = asyncio.get_running_loop().create_task(self.add_partitions())

    async def settle_adding(self) -> None:
        adding = self.adding
        if adding is not None and not adding.done():
            await asyncio.wait([adding])

    async def add_partitions(self) -> None:
        machine = self.machine
        deadline = time.monotonic() + self.timeout_ms / 1000
        while machine.wanted and machine.sending:
            try:
                await self._add_partitions_once(machine.partitions_asked())
                self.apply((Effect.WAKE,))  # their batches may go now
            except RetryLater as later:
                if time.monotonic() > deadline:
                    self.apply(machine.partitions_timed_out(str(later)))
                    break
                if later.retry.find_coordinator:
                    self.coordinator = None
                await asyncio.sleep(later.retry.backoff_s)
            except KafkaException as exc:  # fatal (set already) or a broker that cannot
                self.apply(machine.partitions_failed(exc.args[0]))
                break
            except Exception as exc:  # a bug: fail the transaction rather than hang it
                log.exception("AddPartitionsToTxn failed")
                self.apply(machine.fail_abortable(KafkaError(
                    KafkaError._FAIL, f"AddPartitionsToTxn: {exc!r}")))
                break
        self.apply(machine.partitions_settled())

    async def _add_partitions_once(self, asking: list[tuple[str, int]]) -> None:
        conn = await self.coordinator_connection()
        version = self.version(conn, ADD_PARTITIONS_TO_TXN, 3)
        topics: dict[str, list[int]] = {}
        for topic, partition in asking:
            topics.setdefault(topic, []).append(partition)
        producer_id, producer_epoch = self.producer()
        # v0-3 (the clients' versions; v4+ is for brokers): the schema names these fields
        # "v3_and_below_*".
        fields = {"v3_and_below_transactional_id": self.transactional_id,
                  "v3_and_below_producer_id": producer_id,
                  "v3_and_below_producer_epoch": producer_epoch,
                  "v3_and_below_topics": [{"name": t, "partitions": p}
                                          for t, p in topics.items()]}
        response = await self.ask(conn, ADD_PARTITIONS_TO_TXN, version, fields,
                                  maybe_registers=True)
        outcome = self.machine.partitions_answer(
            (topic.name, result.partition_index, int(result.partition_error_code))
            for topic in response.results_by_topic_v3_and_below
            for result in topic.results_by_partition)
        self.apply(outcome.effects)
        if outcome.retry is not None:
            raise RetryLater(outcome.retry)

    # ---- offsets ------------------------------------------------------------------------------

    async def send_offsets(self, group: GroupMetadata, offsets: Offsets,
                           deadline: float) -> None:
        v2 = bool(self.machine.v2)
        if group.group_id not in self.machine.groups and not v2:
            async def add_offsets() -> None:
                conn = await self.coordinator_connection()
                version = self.version(conn, ADD_OFFSETS_TO_TXN, 3)
                producer_id, producer_epoch = self.producer()
                response = await self.ask(conn, ADD_OFFSETS_TO_TXN, version, {
                    "transactional_id": self.transactional_id,
                    "producer_id": producer_id, "producer_epoch": producer_epoch,
                    "group_id": group.group_id}, maybe_registers=True)
                self._settle(self.machine.answer(int(response.error_code), ADD_OFFSETS_ERRORS,
                                                 "Failed to add offsets to transaction",
                                                 retry_backoff_s=self.retry_backoff_s))

            await self.retrying(add_offsets, deadline, "AddOffsetsToTxn")
        # (V2: the group coordinator adds its partition on TxnOffsetCommit v5; from the first
        # ask the coordinator may know the transaction, so EndTxn is owed either way)
        self.machine.groups.add(group.group_id)
        group_conn: list[BrokerConnection] = []

        async def commit_offsets() -> None:
            if not group_conn or not group_conn[0].connected:
                group_conn[:] = [await self.find_coordinator(GROUP_KEY, group.group_id)]
            conn = group_conn[0]
            version = (self.version(conn, TXN_OFFSET_COMMIT, TXN_OFFSET_COMMIT_V2_VERSION,
                                    TXN_OFFSET_COMMIT_V2_VERSION) if v2 else
                       self.version(conn, TXN_OFFSET_COMMIT, 3))
            producer_id, producer_epoch = self.producer()
            fields: dict[str, Any] = {
                "transactional_id": self.transactional_id, "group_id": group.group_id,
                "producer_id": producer_id, "producer_epoch": producer_epoch,
                "topics": [{"name": topic, "partitions": [
                    {"partition_index": p, "committed_offset": o,
                     **({"committed_leader_epoch": e} if version >= 2 else {}),
                     "committed_metadata": m} for p, o, e, m in parts]}
                    for topic, parts in offsets.items()]}
            if version >= 3:
                fields.update(generation_id=group.generation_id, member_id=group.member_id,
                              group_instance_id=group.group_instance_id)
            try:
                response = await self.ask(conn, TXN_OFFSET_COMMIT, version, fields)
            except RetryLater:
                group_conn.clear()
                raise
            for topic in response.topics:
                for part in topic.partitions:
                    code = int(part.error_code)
                    if TXN_OFFSET_COMMIT_ERRORS.get(code) is Action.COORDINATOR:
                        group_conn.clear()  # the group's coordinator moved
                    self._settle(self.machine.answer(
                        code, TXN_OFFSET_COMMIT_ERRORS, "Failed to commit offsets to "
                        f"transaction ({topic.name} [{part.partition_index}])",
                        retry_backoff_s=self.retry_backoff_s))

        try:
            await self.retrying(commit_offsets, deadline, "TxnOffsetCommit")
        except KafkaException as exc:
            self._settle(self.machine.offsets_not_committed(exc.args[0]))
