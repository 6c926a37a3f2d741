"""The emulated writer: what ``Producer`` does with ``offset=`` / ``expected_offset=`` on a
topic whose brokers lack the KIP-WIRE extension (docs/stock-clusters.md).

Runs that start at the log end go through a plain lane: the Producer's own bulk lane when
their reports are per batch (``bulk``: sent without waiting, each run checked by the base
offsets its delivery reports give), else an idempotent librdkafka producer (checked record by
record). A transactional producer (``kip.emulation.transactional.id``, the engine's
transactions, which can add a partition without a record) writes the gaps as aborted
transactions, and conditional batches. Before a transaction touches a partition every plain
run sent to it is acknowledged and checked, and after the transaction the writer waits until
its marker is in the log (Kafka writes markers after EndTxn is answered): the lanes never
overlap on a partition, so every position is exact.

Records are held per partition as columns (:class:`Rows`, no object per record) until the
next gap is known, the held records grow past a bound, or flush() / append(). Delivery
reports are queued and handed to the callbacks from poll() / flush(), as librdkafka does.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from confluent_kafka import KafkaError, KafkaException, Producer

from .. import client_config
from .._accumulator import BatchDelivery
from ..clients import with_logger
from ..errors import (
    INVALID_PRODUCE_OFFSET,
    KEY_ABSENT,
    OFFSET_MISMATCH,
    ProduceOffsetKafkaError,
)
from ..protocol import error_codes as ec
from . import key_index
from .key_index import PartitionKeys
from .log_ends import ConsumerLogEnds, LogEnds, log_ends_reader
from .plan import FILLER_HEADER, Action, Step, gap_steps, plan_runs
from .probe import probe_cluster
from .rows import FailedRecord, Rows, bulk_columns, slice_parts
from .txn_keys import PartitionTxnKeys

log = logging.getLogger("kipproducer.stock")

#: Properties of the user's config that the emulation's own clients must not inherit.
_NOT_INHERITED = ("transactional.id", "enable.idempotence", "on_delivery", "delivery.report.cb",
                  "dr_cb", "dr_msg_cb", "callback", "message.timeout.ms", "delivery.timeout.ms",
                  "acks", "request.required.acks", "max.in.flight",
                  "max.in.flight.requests.per.connection", "enable.gapless.guarantee",
                  "transaction.timeout.ms")
#: Held records of one partition without a gap written before more are taken: a dense copy
#: streams through the bulk lane in runs of this size.
HELD_MAX = 100_000
#: Held records of all partitions written together once this many are held (bounds the
#: memory). Below it a partition with a gap waits for its next call (or poll(), flush()), so
#: a copy that calls partition by partition, even in calls of HELD_MAX records, has every
#: partition's gaps ready together and they share transactions.
HELD_TOTAL_MAX = 1_000_000

OFFSETS_CALL = "offset="
CONDITIONAL_CALL = "expected_offset="

#: bulk_send(topic, partition, values, keys, headers, timestamps, on_delivery): a run at the
#: log end into the Producer's bulk lane, not waiting; on_delivery gets BatchDelivery reports.
BulkSend = Callable[[str, int, list, Any, Any, Any, Callable], None]
#: bulk_settle(done, timeout_s): serve the bulk lane's reports until done() (False: timed out).
BulkSettle = Callable[[Callable[[], bool], float], bool]


@dataclass(frozen=True)
class EngineTransactions:
    """What the gap transactions need of the project's Producer, handed in by it (the emulation
    does not import the Producer that uses it): the engine's transactions can add a partition
    without a record."""

    #: new_producer(config): a Producer of the project's engine with that configuration
    new_producer: Callable[[dict[str, Any]], Producer]
    #: register_partition(producer, topic, partition, timeout_s): adds the partition to the
    #: producer's open transaction without a record
    register_partition: Callable[[Producer, str, int, float], None]


@dataclass(slots=True)
class _Sent:
    """A run sent through the bulk lane and not yet checked."""

    start: int
    count: int
    parts: list[Rows]
    outcome: list = field(default_factory=list)  # (err, BatchDelivery) as they come

    def reported(self) -> int:
        return sum(len(report) for _, report in self.outcome)


@dataclass(slots=True)
class _Plan:
    """A partition's planned actions, the records they write, and the next one to do."""

    actions: list[Action]
    parts: list[Rows]
    next: int = 0

    @property
    def current(self) -> Action:
        return self.actions[self.next]


_FILLER_HEADERS = [(FILLER_HEADER, b"")]


def _batches_misplaced(outcome: list, start: int, count: int, what: str) -> Any:
    """Batch reports ``(err, BatchDelivery)`` of ``count`` records written from offset
    ``start`` (a plain run of the bulk lane, or a gap's fillers): None when they cover
    [start, start + count) in order; else the first error (a KafkaError) or a sentence
    saying where ``what`` landed."""
    pieces = sorted(outcome, key=lambda got: got[1].offset())
    error = next((err for err, _ in pieces if err is not None), None)
    if error is not None:
        return error
    expected = start
    for _, report in pieces:
        if report.offset() != expected:
            return (f"{what} {expected - start} and after landed at offset "
                    f"{report.offset()}, not {expected}: another writer appended")
        expected += len(report)
    if expected != start + count:
        return KafkaError(KafkaError._TIMED_OUT,
                          f"{start + count - expected} {what} not acknowledged")
    return None


def connection_of(conf: Mapping[str, Any]) -> dict[str, Any]:
    """The user's librdkafka properties that the emulation's clients share (servers, security,
    client.id, ...), without the kip.* ones and those the emulation sets itself."""
    return {k: v for k, v in conf.items()
            if not k.startswith("kip.") and k not in _NOT_INHERITED}


class Emulation:
    def __init__(self, conf: Mapping[str, Any], *, transactional_id: str, probe_topic: str,
                 engine_transactions: EngineTransactions, timeout_s: float = 60.0,
                 bulk_send: BulkSend | None = None,
                 bulk_settle: BulkSettle | None = None, key_retention: bool = False,
                 key_index_topic: str = "") -> None:
        self._connection = with_logger(connection_of(conf))
        # How the gap transactions are spoken (the one kip.* property their producer takes):
        # the classic flow unless the user names one. Measured (bench/RESULTS.md, "What a gap
        # costs"), V2 saves a gap nothing: the fillers' Produce v12 waits for the
        # coordinator's write that AddPartitionsToTxn did, and on 3 nodes it cost more.
        self._txn_protocol = (client_config.value(conf, "kip.transaction.protocol")
                              if "kip.transaction.protocol" in conf else "classic")
        self._engine_txns = engine_transactions
        self._probe_topic = probe_topic
        self._timeout = timeout_s
        self._configured_id = transactional_id or None
        self._txn: Producer | None = None
        # what the transactional producer's last transaction was doing when a call gave up on
        # it ("open", "commit", "abort"; None: ended): finished before its next one
        self._txn_unfinished: str | None = None
        # the transactional producer starting in the background (a configured id: its fence
        # is under way while the caller prepares its first call); joined before any use
        self._txn_starting: threading.Thread | None = None
        self._txn_started: list = []  # the started producer, or the exception it raised
        self._plain: Producer | None = None
        self._ends_reader: LogEnds | ConsumerLogEnds | None = None
        # the log end each partition has once what was sent to it is in (markers counted)
        self._ends: dict[tuple[str, int], int] = {}
        self._held: dict[tuple[str, int], list[Rows]] = {}
        self._held_per_key: dict[tuple[str, int], int] = {}  # records in self._held[key]
        self._held_count = 0
        self._reports: list[tuple[Callable, Any, Any]] = []
        # partitions whose held records have a gap: only those have a run that can go before
        # flush() (re-planning a dense run at every call would cost O(n) per record)
        self._gapped: set[tuple[str, int]] = set()
        # Runs whose reports are per batch go through the Producer's own bulk lane (the
        # engine's produce_arrays, columns in C), sent without waiting; runs in flight per
        # partition, checked before anything else touches the partition.
        self._bulk_send = bulk_send
        self._bulk_settle = bulk_settle
        self._sent: dict[tuple[str, int], list[_Sent]] = {}
        #: gap transactions written (one per round of gaps, shared by its partitions)
        self.gap_transactions = 0
        # per-key conditions: each partition's key index (built at its first condition)
        self._key_indexes: dict[tuple[str, int], PartitionKeys] = {}
        # per topic: its partition count at this writer's first key condition
        self._key_partitions: dict[str, int] = {}
        # kip.emulation.key.retention, and per topic whether retention can delete a key's
        # last record (then a last offset below the log start answers absent)
        self._key_retention = key_retention
        self._key_topics_aging: dict[str, bool] = {}
        self._admin: Any = None
        # kip.emulation.key.index.topic and its partition count (None: not yet asked)
        self._key_index_topic = key_index_topic
        self._key_index_partitions: int | None = None
        # key conditions inside the Producer's own open transaction, per partition
        # (txn_keys.py): what the transaction wrote there through them
        self._txn_keys: dict[tuple[str, int], PartitionTxnKeys] = {}
        #: conditional appends aborted because another writer's record landed first (each
        #: is followed by a re-read of the index and a new check)
        self.key_retries = 0
        #: records of conditioned partitions read into key indexes (a takeover through the
        #: index topic reads only the partitions' tails)
        self.key_records_read = 0

    # ---- what the Producer calls ----------------------------------------------------------

    def probe(self) -> None:
        if self._ends_reader is None:
            self._start_clients()
        probe_cluster(self._connection, self._probe_topic, min(self._timeout, 30.0))

    def _start_clients(self) -> None:
        """At the first probe, while the probe runs (its verdict decides before anything is
        written): the log-end reader connects, and a writer with a configured id starts its
        transactional producer, whose InitProducerId fences the predecessor (the engine's
        start, FindCoordinator, InitProducerId: 0.1-0.3 s on the stand-in, first-use costs
        included). The first log end joins the fence: it is still read only after the
        predecessor's open transaction is aborted. A random id has no predecessor; its
        producer starts at its first transaction."""
        self._reader().warm_up(self._probe_topic)
        if self._configured_id is not None and self._txn is None and not self._txn_starting:
            self._txn_starting = threading.Thread(target=self._start_txn_producer,
                                                  name="kip-emulation-fence", daemon=True)
            self._txn_starting.start()

    def __len__(self) -> int:
        return self._held_count  # (runs in flight are counted by the bulk lane's queue)

    def offsets(self, topic: str, partition: int, rows: Rows) -> None:
        """Records with asked offsets (strictly increasing within the call)."""
        self.probe()
        if self._configured_id is None:
            error = ProduceOffsetKafkaError(
                KafkaError._INVALID_ARG,
                f"{OFFSETS_CALL} on a broker without the KIP-WIRE extension (emulated mode) "
                "needs kip.emulation.transactional.id: an id that stays the same for this "
                "writer across restarts, so a restarted writer fences its predecessor and "
                "aborts its open transaction before reading the log end "
                "(docs/stock-clusters.md)")
            self._fail([rows], error)
            return
        key = (topic, partition)
        held = self._held.setdefault(key, [])
        if not len(rows):
            return
        asked = rows.offsets
        assert asked is not None
        first, final = int(asked[0]), int(asked[-1])
        last = int(held[-1].offsets[-1]) if held else -1  # type: ignore[index]
        if first <= last:
            # (the callers pass strictly increasing offsets: only the first can be too low)
            self._fail([rows], ProduceOffsetKafkaError(
                INVALID_PRODUCE_OFFSET,
                f"{OFFSETS_CALL}: offset {first} of {topic}[{partition}] is below the "
                f"log end {last + 1} (explicit offsets must strictly increase)",
                log_end_offset=last + 1))
            return
        # A partition with a gap waits for the next call to it (or poll(), flush(), the bound)
        # before its runs go: by then other partitions may have a gap ready too, and their
        # gaps share one transaction (a copy that calls partition by partition).
        again = key in self._gapped
        if (held and first != last + 1) or final - first != len(rows) - 1:
            self._gapped.add(key)
        held.append(rows)
        self._held_count += len(rows)
        count = self._held_per_key[key] = self._held_per_key.get(key, 0) + len(rows)
        if self._held_count >= HELD_TOTAL_MAX:
            self._drain_keys(list(self._held), final=True)
        elif count >= HELD_MAX and key not in self._gapped:
            # a dense run streams (nothing of it waits for a transaction)
            self._drain_keys([*self._gapped, key], final_key=key)
        elif again:
            self._drain_keys(list(self._gapped))

    def log_end(self, topic: str, partition: int) -> int:
        """The partition's log end once this writer holds its transactional id: a predecessor
        with the same id is fenced first (its open transaction aborted, its marker in) and
        every transaction of the partition is decided. What a resuming copy starts from."""
        self.probe()
        key = (topic, partition)
        self._settle(key)
        self._ends.pop(key, None)
        return self._log_end(key)

    def pad_to(self, topic: str, partition: int, next_offset: int) -> bool:
        """Nothing of the partition lies between its held records (or its log end) and
        ``next_offset``: write the held records now and fill the log up to ``next_offset``
        (a copy that has read its source to a position past markers or aborted records, or
        a source whose log starts at ``next_offset`` with nothing after it). True when the
        log is known to end at ``next_offset`` or beyond with nothing in flight; the held
        records' reports say what became of them."""
        key = (topic, partition)
        held = self._held.setdefault(key, [])
        if held and self._configured_id is None:
            self._drain(key, final=True)  # (reported there: the id is missing)
            return False
        end = self._log_end_or_fail(key)
        if end is None:
            return False
        offsets = self._held_offsets(key)
        last_end = int(offsets[-1]) + 1 if len(offsets) else end
        if (len(offsets) and offsets[0] < end) or next_offset <= last_end:
            self._drain(key, final=True)
        else:
            actions = plan_runs(end, offsets) + gap_steps(last_end, next_offset)
            self._run_plans({key: _Plan(actions, self._take(key, len(offsets)))})
        # (runs still in flight on the bulk lane: their own reports say where the log ends)
        return self._ends.get(key, -1) >= next_offset and key not in self._sent

    def conditional(self, topic: str, partition: int, parts: list[Rows],
                    expected: int) -> None:
        """One conditional batch: its records land at ``expected``.. or none is visible."""
        self.probe()
        key = (topic, partition)
        self._drain(key, final=True)
        error = self._settle(key)
        if error is not None:
            self._fail(parts, error)
            return
        self._conditional(topic, partition, parts, expected)

    def key_conditional(self, topic: str, partition: int, parts: list[Rows],
                        expected: list[int | None], partitions: int) -> None:
        """A call's records of one partition, some with a key condition (``expected``: one
        entry per record, None for none): appended together in one transaction, committed
        only when every condition holds against this writer's key index and the records
        landed right where the index ends (nothing else was appended since it was brought
        up to date); else aborted, the index brought up to date and the conditions checked
        again (docs/per-key-conditional.md, "Emulated mode")."""
        self.probe()
        key = (topic, partition)
        self._drain(key, final=True)
        error = self._settle(key)
        keys = [part.row(i)[0] for part in parts for i in range(len(part))]
        if error is not None:
            self._report(parts, [(e, None) for e in key_index.batch_failed(
                topic, partition, keys, expected, error.code(), error.str())])
            return
        try:
            outcomes = self._key_conditional(key, parts, keys, expected, partitions)
        except KafkaException as exc:
            self._key_indexes.pop(key, None)  # what was committed is not known: read again
            err = exc.args[0]
            outcomes = [(e, None) for e in key_index.batch_failed(
                topic, partition, keys, expected, err.code(), f"expected_key_offset=: "
                f"{err.str()}", retriable=err.retriable())]
        self._report(parts, outcomes)

    def txn_key_conditional(self, topic: str, partition: int, parts: list[Rows],
                            expected: list[int | None], partitions: int, *,
                            touched: bool) -> int | KafkaError:
        """A call's records of one partition, some with a key condition, inside the caller's
        own open transaction (txn_keys.py): checked against the partition's key index as the
        transaction sees it (its own earlier records first). Returns the offset they must
        land at, from which the caller appends them to its transaction; or, when refused,
        the error that fails the transaction (nothing was written, and the records' reports
        are queued here). ``touched``: the transaction already holds records of the
        partition (written outside calls with key conditions)."""
        key = (topic, partition)
        keys = [part.row(i)[0] for part in parts for i in range(len(part))]
        tombstones = [v is None for part in parts for v in part.values]
        self.probe()
        try:
            outcome = self._txn_key_check(key, keys, expected, partitions, touched)
        except KafkaException as exc:
            err = exc.args[0]
            outcome = key_index.batch_failed(topic, partition, keys, expected, err.code(),
                                             f"expected_key_offset=: {err.str()}",
                                             retriable=err.retriable())
        if isinstance(outcome, PartitionTxnKeys):
            return outcome.take(keys, tombstones)
        self._report(parts, [(e, None) for e in outcome])
        return next((e for e in outcome if e.code() == ec.KEY_OFFSET_MISMATCH), outcome[0])

    def _txn_key_check(self, key: tuple[str, int], keys: list, expected: list[int | None],
                       partitions: int, touched: bool) -> PartitionTxnKeys | list:
        topic, partition = key
        tracked = self._txn_keys.get(key)
        if tracked is None and touched:
            return key_index.batch_failed(
                topic, partition, keys, expected, KafkaError._STATE,
                "this transaction already wrote to the partition outside calls with key "
                "conditions, so its key index cannot be read now (the transaction's own "
                "records are undecided); in a transaction, a partition's first key "
                "condition comes before its other records")
        aging = self._key_topic_aging(topic)  # (refuses a topic that can age a key out)
        if tracked is None:
            # (always looked at: a record appended since would fail the caller's whole
            # transaction, where outside one it only costs a try of the writer's own)
            index = self._key_index(key)
            tracked = self._txn_keys[key] = PartitionTxnKeys(index, index.covered)
        now = self._reader().partition_count(topic)
        pinned = self._key_partitions.setdefault(topic, tracked.index.partitions or partitions)
        if not pinned == partitions == now:
            return [e for e, _ in _count_changed(topic, partition, keys, expected, pinned, now,
                                                 partitions)]
        wrong = key_index.conflicts(tracked, key_index.checks(keys, expected),
                                    self._reader().log_start(topic, partition) if aging else 0)
        if wrong:
            return key_index.record_errors(topic, partition, keys, expected, wrong)
        return tracked

    def txn_ended(self, *, committed: bool) -> None:
        """The caller's transaction ended: a commit puts its answers in the key indexes (once
        its marker is in the log, as after the writer's own commits); an abort leaves them
        as they were, to be read past the aborted records at the next look."""
        held, self._txn_keys = self._txn_keys, {}
        for key, tracked in held.items():
            index = tracked.index
            index.at_end = False
            if not committed or not tracked.count:
                continue
            tracked.committed()
            try:
                self._covered_after_commit(key, index, tracked.last)
            except KafkaException as exc:  # committed all the same: the next look reads on
                log.warning("key conditions: the commit marker in %s[%d] not seen: %s",
                            key[0], key[1], exc.args[0].str())

    def _key_conditional(self, key: tuple[str, int], parts: list[Rows], keys: list,
                         expected: list[int | None], partitions: int) -> list:
        topic, partition = key
        checks = key_index.checks(keys, expected)
        tombstones = [v is None for part in parts for v in part.values]
        producer = self._txn_producer()  # (a configured id fences its predecessor first)
        reader = self._reader()
        deadline = time.monotonic() + self._timeout
        aging = self._key_topic_aging(topic)
        count_now = reader.partition_count_soon(topic)  # answered while the records go
        now: int | None = None
        first_look = True
        while True:
            index = self._key_index(key, trusting_at_end=first_look)
            first_look = False
            # the count now, the one the record was partitioned with, and the one at this
            # writer's first condition (or the index topic's checkpoint) must agree: a key
            # moves with the count
            pinned = self._key_partitions.setdefault(topic, index.partitions or partitions)
            wrong = key_index.conflicts(index, checks,
                                        reader.log_start(topic, partition) if aging else 0)
            if wrong or pinned != partitions:
                now = count_now() if now is None else now
                if not pinned == partitions == now:
                    return _count_changed(topic, partition, keys, expected, pinned, now,
                                          partitions)
                return [(e, None) for e in key_index.record_errors(topic, partition, keys,
                                                                   expected, wrong)]
            start = index.covered
            self._begin(producer)
            try:
                results = self._write_columns(producer, topic, partition, parts)
                misplaced = _misplaced(results, start)
                if misplaced is None:
                    now = count_now() if now is None else now
                if misplaced is None and now == pinned and self._key_index_topic:
                    self._write_snapshot(producer, key, index, keys, tombstones, start,
                                         pinned)
            except KafkaException:
                self._abort(producer)
                raise
            if misplaced is None and now != pinned:
                self._abort(producer)
                return _count_changed(topic, partition, keys, expected, pinned, now,
                                      partitions)
            if misplaced is None:
                self._commit(producer)
                for i, k in enumerate(keys):
                    index.record(k, start + i, tombstones[i])
                if index.dirty is not None:
                    index.dirty.clear()  # (the index topic took them with the records)
                self._covered_after_commit(key, index, start + len(keys) - 1)
                return results
            self._abort(producer)
            if isinstance(misplaced, KafkaError):
                raise KafkaException(misplaced)
            # (the next look waits until this abort's marker, and every other transaction
            # of the partition, is decided)
            self.key_retries += 1
            if time.monotonic() > deadline:
                raise KafkaException(KafkaError(
                    KafkaError._TIMED_OUT, f"other writers kept appending to {topic}"
                    f"[{partition}] for {self._timeout:.0f} s: the conditions could not be "
                    "checked against a still log"))

    def _write_snapshot(self, producer: Any, key: tuple[str, int], index: PartitionKeys,
                        keys: list, tombstones: list[bool], start: int,
                        partitions: int) -> None:
        """In the open transaction: the answers changed since the index topic last took them,
        the call's own records' answers, and the checkpoint (everything below the call's
        last record + 1 is in)."""
        answers = dict(index.dirty or {})
        for i, k in enumerate(keys):
            if k is not None:
                answers[key_index.key_bytes(k)] = KEY_ABSENT if tombstones[i] else start + i
        names, values = key_index.snapshot_records(key[0], key[1], answers,
                                                   start + len(keys), partitions)
        outcome: list = []
        producer.produce_arrays(self._key_index_topic, values, keys=names,
                                partition=self._index_partition(key), per_record=False,
                                on_delivery=lambda err, report: outcome.append(err))
        left = producer.flush(self._timeout)
        error = next((err for err in outcome if err is not None), None)
        if left or error is not None:
            raise KafkaException(error or KafkaError(
                KafkaError._TIMED_OUT, f"the key index topic {self._key_index_topic}: "
                f"{left} records not acknowledged in time"))

    def _index_partition(self, key: tuple[str, int]) -> int:
        if self._key_index_partitions is None:
            if self._admin is None:
                from confluent_kafka.admin import AdminClient

                self._admin = AdminClient(self._connection)
            key_index.ensure_index_topic(self._admin, self._key_index_topic, self._timeout)
            reader = self._reader()
            counts: list[int] = []

            def known() -> bool:  # (a topic just made may take a moment to be everywhere)
                try:
                    counts[:] = [reader.partition_count(self._key_index_topic)]
                except KafkaException:
                    return False
                return counts[0] > 0

            reader.wait(f"the key index topic {self._key_index_topic}", known, self._timeout)
            self._key_index_partitions = counts[0]
        return key_index.index_partition(key[0], key[1], self._key_index_partitions)

    def _load_index(self, key: tuple[str, int]) -> PartitionKeys:
        """A new index: from the index topic's entries and checkpoint when there is one (the
        partition is then read only from the checkpoint on), else empty (read whole)."""
        if not self._key_index_topic:
            return PartitionKeys()
        where = (self._key_index_topic, self._index_partition(key))
        end = self._decided_end(where)
        return key_index.load_snapshot(self._connection, where[0], where[1], end, key[0],
                                       key[1], self._timeout)

    def _decided_end(self, key: tuple[str, int]) -> int:
        """The partition's log end once every transaction of it is decided."""
        reader = self._reader()
        ends: list[int] = []

        def decided() -> bool:
            stable, end = reader.decided_ends(*key)
            ends[:] = [end]
            return stable >= end

        reader.wait(f"every transaction of {key[0]}[{key[1]}] decided", decided, self._timeout)
        return ends[0]

    def _key_topic_aging(self, topic: str) -> bool:
        """Whether the topic's retention can delete a key's last record: refused (the error
        raised) unless kip.emulation.key.retention is true. Asked once per topic."""
        aging = self._key_topics_aging.get(topic)
        if aging is None:
            if self._admin is None:
                from confluent_kafka.admin import AdminClient

                self._admin = AdminClient(self._connection)
            why = key_index.retention_ages_keys_out(self._admin, topic, self._timeout)
            if why is not None and not self._key_retention:
                raise KafkaException(KafkaError(
                    KafkaError.INVALID_CONFIG,
                    f"expected_key_offset= (emulated) on {topic!r}: its {why} can delete a "
                    "key's last record; use a topic that keeps them (cleanup.policy=compact, "
                    "or retention.ms=-1 and retention.bytes=-1), or set "
                    "kip.emulation.key.retention=true to have such keys answer as absent"))
            aging = self._key_topics_aging[topic] = why is not None
        return aging

    def _wait_marker(self, key: tuple[str, int], last: int) -> None:
        """Until the marker of the transaction whose last record is at ``last`` is in (one
        ListOffsets a look: on a 3-node cluster a marker takes several)."""
        reader = self._reader()
        reader.wait(f"the transaction marker in {key[0]}[{key[1]}]",
                    lambda: reader.stable_end(*key) > last, self._timeout)

    def _covered_after_commit(self, key: tuple[str, int], index: PartitionKeys,
                              last: int) -> None:
        """This writer committed records up to ``last`` (in the index already): once the
        marker is in, the index covers them, and the marker too when the log ends right
        after it (nothing else there to read: ``at_end``)."""
        index.covered = last + 1
        self._wait_marker(key, last)
        if self._reader().log_end(*key) == last + 2:
            index.covered, index.at_end = last + 2, True

    def _key_index(self, key: tuple[str, int], *, trusting_at_end: bool = False
                   ) -> PartitionKeys:
        """The partition's key index, read up to the log end once every transaction of the
        partition is decided (another writer's open transaction could commit a key); with
        ``trusting_at_end``, an index whose ``at_end`` holds as it is (key_index.py)."""
        index = self._key_indexes.get(key)
        if index is not None and index.at_end and trusting_at_end:
            return index
        if index is None:
            index = self._key_indexes[key] = self._load_index(key)
        index.at_end = False
        end = self._decided_end(key)
        if end < index.covered:  # the partition was emptied or made again: start over
            index = self._key_indexes[key] = PartitionKeys(
                dirty=None if not self._key_index_topic else {})
        self.key_records_read += key_index.read_committed_keys(
            self._connection, key[0], key[1], index, end, self._timeout)
        return index

    def plain(self, topic: str, partition: int, rows: Rows) -> None:
        """Records without offsets, in the order of an emulated call."""
        key = (topic, partition)
        self._drain(key, final=True)
        self._settle(key)
        results = self._write(self._plain_producer(), topic, partition, [rows])
        self._ends.pop(key, None)  # the log end moved by however many landed
        self._report([rows], results)

    def serve(self, *, final: bool = False) -> int:
        """Write what is due (everything with ``final``, and wait for it) and call the queued
        callbacks."""
        self._drain_keys(list(self._held if final else self._gapped), final=final)
        for key in list(self._sent):
            if final:
                self._settle(key)
            else:
                self._check_sent(key)
        reports, self._reports = self._reports, []
        for callback, err, report in reports:
            callback(err, report)
        return len(reports)

    def purge(self) -> None:
        """Drop the held records (none of them was sent), reported with _PURGE_QUEUE as
        librdkafka reports its queued ones."""
        for key in list(self._held):
            parts = self._take(key, self._count(key))
            self._fail(parts, ProduceOffsetKafkaError(
                KafkaError._PURGE_QUEUE, f"{OFFSETS_CALL}: purged before it was written"))

    def close(self) -> None:
        self.serve(final=True)
        try:
            # bounded: on a cluster the probe refused, the fence may wait out its timeout
            self._join_txn_start(timeout=5.0)
        except Exception:  # noqa: BLE001 - a fence that failed: nothing of it to close
            log.debug("emulation: the transactional producer's start failed", exc_info=True)
        for producer in (self._txn, self._plain):
            if producer is not None:
                producer.flush(5)
        if self._ends_reader is not None:
            self._ends_reader.close()
            self._ends_reader = None

    # ---- clients --------------------------------------------------------------------------

    def _reader(self) -> LogEnds | ConsumerLogEnds:
        if self._ends_reader is None:
            self._ends_reader = log_ends_reader(self._connection)
        return self._ends_reader

    def _plain_producer(self) -> Producer:
        if self._plain is None:
            self._plain = Producer({**self._connection, "enable.idempotence": True,
                                    "linger.ms": 0,
                                    "message.timeout.ms": int(self._timeout * 1000)})
        return self._plain

    def _txn_producer(self) -> Producer:
        """The transactional producer (the engine's transactions: they can add a partition
        without a record); starting it fences a predecessor with the same id and aborts that
        one's open transaction (before any log end is read)."""
        self._join_txn_start()
        if self._txn is None:
            self._txn = self._new_txn_producer()
        if self._txn_unfinished is not None:
            self._finish_transaction(self._txn)
        return self._txn

    def _finish_transaction(self, producer: Producer) -> None:
        """End the transaction an earlier call gave up on. A commit whose answer was lost
        (the call reported a retriable error: its outcome unknown) is asked again: Kafka
        answers a commit it already made as done, and one it never received is made now,
        so a caller that appends again finds its first attempt's record either way. Any
        other transaction left open is aborted. Raises when that fails too (still owed: the
        next call tries again); until it is ended the producer could begin no other."""
        if self._txn_unfinished == "commit":
            try:
                self._commit(producer)
            except KafkaException as exc:
                if not exc.args[0].txn_requires_abort():
                    raise
                self._txn_unfinished = "abort"
        if self._txn_unfinished is not None:
            self._abort(producer)

    def _begin(self, producer: Producer) -> None:
        producer.begin_transaction()
        self._txn_unfinished = "open"

    def _commit(self, producer: Producer) -> None:
        self._txn_unfinished = "commit"
        producer.commit_transaction(self._timeout)
        self._txn_unfinished = None

    def _abort(self, producer: Producer) -> None:
        self._txn_unfinished = "abort"
        producer.abort_transaction(self._timeout)
        self._txn_unfinished = None

    def _new_txn_producer(self) -> Producer:
        txn_id = self._configured_id or f"kip-emulation-{uuid.uuid4().hex}"
        # linger.ms=0: every write is flushed at once anyway, and a linger shows in each
        # transaction's begin-to-EndTxn time
        # The transaction timeout follows the user's message timeout (at least librdkafka's
        # 1 s), and librdkafka refuses a socket timeout above it: a short message.timeout.ms
        # shortens the writer's socket timeout too rather than failing its start.
        txn_ms = max(1000, int(self._timeout * 1000))
        socket_ms = min(int(self._connection.get("socket.timeout.ms", 60_000)), txn_ms)
        producer = self._engine_txns.new_producer({
            **self._connection, "transactional.id": txn_id, "linger.ms": 0,
            "transaction.timeout.ms": txn_ms, "socket.timeout.ms": socket_ms,
            "kip.transaction.protocol": self._txn_protocol})
        producer.init_transactions(self._timeout)
        return producer

    def _start_txn_producer(self) -> None:
        """The background start's thread: the producer, or what it raised, for the joiner."""
        try:
            self._txn_started.append(self._new_txn_producer())
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            self._txn_started.append(exc)

    def _join_txn_start(self, timeout: float | None = None) -> None:
        """Wait for the background start, if one is under way; a start that failed is raised
        once (the next use starts the producer again, in the caller's thread). With
        ``timeout``, a start still under way after it is left to itself."""
        thread = self._txn_starting
        if thread is None:
            return
        thread.join(timeout)
        self._txn_starting = None
        started = self._txn_started.pop() if self._txn_started else None
        if isinstance(started, BaseException):
            raise started
        if started is not None:
            self._txn = started

    # ---- offsets (KIP-391) ----------------------------------------------------------------

    def _log_end_or_fail(self, key: tuple[str, int]) -> int | None:
        """The partition's log end, or None when it cannot be read: then every record held
        for the partition fails with the reason."""
        try:
            return self._log_end(key)
        except KafkaException as exc:
            self._fail(self._take(key, self._count(key)), exc.args[0])
            return None

    def _log_end(self, key: tuple[str, int]) -> int:
        end = self._ends.get(key)
        if end is None:
            if self._configured_id is not None:
                # fence first: a dead predecessor's marker lands now (a random id has no
                # predecessor, and its producer starts at its first transaction)
                self._txn_producer()
            reader = self._reader()
            # A transaction still open here (another writer's) would put its marker in the
            # middle of ours later: wait until it is decided.
            reader.wait(f"every transaction of {key[0]}[{key[1]}] decided",
                        lambda: reader.stable_end(*key) >= reader.log_end(*key), self._timeout)
            end = reader.log_end(*key)
            self._ends[key] = end
        return end

    def _count(self, key: tuple[str, int]) -> int:
        return self._held_per_key.get(key, 0)

    def _held_offsets(self, key: tuple[str, int]) -> np.ndarray:
        held = self._held.get(key) or []
        if len(held) == 1:
            return held[0].offsets  # type: ignore[return-value]
        return (np.concatenate([r.offsets for r in held]) if held  # type: ignore[misc]
                else np.empty(0, np.int64))

    def _drain(self, key: tuple[str, int], *, final: bool) -> None:
        self._drain_keys([key], final=final)

    def _drain_keys(self, keys: list[tuple[str, int]], *, final: bool = False,
                    final_key: tuple[str, int] | None = None) -> None:
        """Write what the held records' gaps decide in these partitions (everything with
        ``final``, or of ``final_key``): all but each partition's last run, which waits for
        the next gap, the bound, or flush(). Gaps ready in several partitions at once share
        one transaction."""
        plans: dict[tuple[str, int], _Plan] = {}
        for key in keys:
            plan = self._plan(key, final=final or key == final_key)
            if plan is not None:
                plans[key] = plan
        self._run_plans(plans)

    def _plan(self, key: tuple[str, int], *, final: bool) -> _Plan | None:
        """The partition's planned actions and the held records they write (taken off the
        held ones), or None when nothing is due."""
        held = self._held.get(key)
        if not held:
            return None
        end = self._log_end_or_fail(key)
        if end is None:
            return None
        offsets = self._held_offsets(key)
        if offsets[0] < end:
            parts = self._take(key, len(offsets))
            self._fail(parts, ProduceOffsetKafkaError(
                INVALID_PRODUCE_OFFSET,
                f"{OFFSETS_CALL}: offset {int(offsets[0])} of {key[0]}[{key[1]}] is below "
                f"the log end {end}; nothing of the run was written", log_end_offset=end))
            return None
        actions = plan_runs(end, offsets)
        if not final and actions and actions[-1].step == Step.PLAIN:
            actions.pop()  # held until the next gap, the bound or flush()
        if not actions:
            self._gapped.discard(key)  # one run at the log end: it waits for flush()
            return None
        taken = max((a.first + a.count for a in actions if a.step == Step.PLAIN), default=0)
        return _Plan(actions, self._take(key, taken))

    def _run_plans(self, plans: dict[tuple[str, int], _Plan]) -> None:
        """Rounds: every partition writes its plain runs up to its next gap; the partitions
        with a gap are settled (their runs acknowledged and checked) and their gaps written
        in ONE transaction; then the next round. A partition whose step fails is left out,
        the records after the failed step reported with its error."""
        while plans:
            gaps: dict[tuple[str, int], Action] = {}
            sent: list[tuple[tuple[str, int], _Plan]] = []
            for key, plan in list(plans.items()):
                error = None
                while plan.next < len(plan.actions) and plan.current.step == Step.PLAIN:
                    error = self._act(key, plan.current, plan.parts)
                    plan.next += 1
                    if error is not None:
                        break
                if error is None and plan.next < len(plan.actions):
                    sent.append((key, plan))  # settled below, once every partition's runs go
                    continue
                if error is not None:
                    self._fail_after(plan, error)
                del plans[key]
            for key, plan in sent:
                # a transaction goes only after every plain run of the partition is in and
                # checked: its fillers and marker must land where the plan says (the runs
                # of all the round's partitions are in flight together meanwhile)
                error = self._settle(key)
                if error is None:
                    gaps[key] = plan.current
                    continue
                self._fail_after(plan, error)
                del plans[key]
            if not gaps:
                return
            for key, error in self._gap_transaction(gaps).items():
                plan = plans[key]
                plan.next += 1
                if error is not None:
                    self._fail_after(plan, error)
                    del plans[key]

    def _fail_after(self, plan: _Plan, error: Any) -> None:
        """What comes after a failed step would land elsewhere: none of it is written."""
        for later in plan.actions[plan.next:]:
            if later.step == Step.PLAIN:
                self._fail(slice_parts(plan.parts, later.first, later.first + later.count),
                           error)
        plan.next = len(plan.actions)

    def _take(self, key: tuple[str, int], count: int) -> list[Rows]:
        """The first ``count`` held records of the partition (cut where a call's rows
        straddle the count)."""
        held = self._held.get(key) or []
        whole, left = 0, count
        while whole < len(held) and len(held[whole]) <= left:
            left -= len(held[whole])
            whole += 1
        taken = held[:whole]
        rest = held[whole:]
        if left and rest:
            taken.append(rest[0].cut(0, left))
            rest[0] = rest[0].cut(left, len(rest[0]))
            left = 0
        self._held[key] = rest
        self._gapped.discard(key)  # what is left is one run (or nothing)
        self._held_count -= count - left
        self._held_per_key[key] = self._held_per_key.get(key, 0) - (count - left)
        return taken

    def _act(self, key: tuple[str, int], action: Action, parts: list[Rows]) -> Any:
        """One planned plain run. None when done; else the error for the records after it
        (the run's own records are reported either way)."""
        run = slice_parts(parts, action.first, action.first + action.count)
        if self._bulk_send is not None and not any(r.sink.per_record for r in run):
            return self._send_bulk(key, action, run)
        error = self._settle(key)
        if error is not None:
            self._fail(run, error)
            return error
        topic, partition = key
        try:
            results = self._write(self._plain_producer(), topic, partition, run)
        except KafkaException as exc:
            results, wrong = None, exc.args[0]
        else:
            wrong = _misplaced(results, action.start)
        if wrong is not None:
            self._ends.pop(key, None)
            error = _offsets_error(wrong, -1)
            self._fail(run, error)
            return error
        self._ends[key] = action.end
        self._report(run, results)
        return None

    def _send_bulk(self, key: tuple[str, int], action: Action, run: list[Rows]) -> Any:
        """A plain run into the bulk lane, not waited for: its delivery reports are checked
        (first offset, no hole between its batches) before anything else touches the
        partition, or when poll() / flush() serve them."""
        topic, partition = key
        sent = _Sent(action.start, action.count, run)
        values, keys, headers, stamps = bulk_columns(run)
        try:
            assert self._bulk_send is not None
            self._bulk_send(topic, partition, values, keys, headers, stamps,
                            lambda err, report: sent.outcome.append((err, report)))
        except KafkaException as exc:
            self._ends.pop(key, None)
            error = _offsets_error(exc.args[0], -1)
            self._fail(run, error)
            return error
        self._sent.setdefault(key, []).append(sent)
        self._ends[key] = action.end
        return None

    def _check_sent(self, key: tuple[str, int], *, wait: bool = False) -> Any:
        """Check (and report) the runs in flight to the partition whose reports are all in;
        with ``wait`` all of them, waiting for their reports. None, or the first error."""
        sent = self._sent.get(key)
        if not sent:
            return None
        if wait and self._bulk_settle is not None:
            done = self._bulk_settle(lambda: all(s.reported() >= s.count for s in sent),
                                     self._timeout)
            if not done:
                error = _offsets_error(KafkaError(
                    KafkaError._TIMED_OUT, "a plain run was not acknowledged in time"), -1)
                self._ends.pop(key, None)
                return error
        first_error = None
        while sent and sent[0].reported() >= sent[0].count:
            error = self._check_run(key, sent.pop(0))
            first_error = first_error or error
        if not sent:
            del self._sent[key]
        return first_error

    def _settle(self, key: tuple[str, int]) -> Any:
        """Wait for every run in flight to the partition and check it."""
        return self._check_sent(key, wait=True)

    def _check_run(self, key: tuple[str, int], sent: _Sent) -> Any:
        wrong = _batches_misplaced(sent.outcome, sent.start, sent.count, "records")
        if wrong is not None:
            self._ends.pop(key, None)
            error = _offsets_error(wrong, -1)
            self._fail(sent.parts, error)
            return error
        index = sent.start
        for part in sent.parts:
            if part.sink.callback is not None:
                self._reports.append((part.sink.callback, None, BatchDelivery(
                    key[0], key[1], index, len(part), None)))
            index += len(part)
        return None

    def _gap_transaction(self, gaps: dict[tuple[str, int], Action]
                         ) -> dict[tuple[str, int], Any]:
        """One aborted transaction writing the gap of every partition in ``gaps`` (each
        settled: its log ends at its gap's start, nothing of it in flight): the partitions of
        gaps of one added without a record, the fillers of the others; EndTxn abort; then
        every partition's marker awaited. Per partition: None when its gap is filled as
        planned, else the error."""
        self.gap_transactions += 1
        ends = dict.fromkeys(gaps, -1)
        wrong: dict[tuple[str, int], Any] = dict.fromkeys(gaps)
        try:
            producer = self._txn_producer()
            self._begin(producer)
            for (topic, partition), action in gaps.items():
                if action.step == Step.MARKER:
                    self._engine_txns.register_partition(producer, topic, partition,
                                                         self._timeout)
            fills = {key: action for key, action in gaps.items() if action.step == Step.FILL}
            wrong.update(self._write_fillers(producer, fills))
            self._abort(producer)
            ends.update(self._ends_after_markers(gaps))
        except KafkaException as exc:
            wrong = dict.fromkeys(gaps, exc.args[0])
        return {key: self._after_transaction(key, action, wrong[key], ends[key])
                for key, action in gaps.items()}

    def _write_fillers(self, producer: Any, fills: dict[tuple[str, int], Action]
                       ) -> dict[tuple[str, int], Any]:
        """Every gap's fillers as columns through the engine's bulk lane (one report per
        batch, no object per record: a gap of a million offsets, a source log start, costs
        about what a million tiny records cost), then every acknowledgement awaited. Per
        partition: None when its fillers landed from the gap's start on, else what went
        wrong."""
        outcomes: dict[tuple[str, int], list] = {}
        for key, action in fills.items():
            found = outcomes[key] = []
            n = action.count
            # an empty key, not none: a compacted topic takes no record without a key
            producer.produce_arrays(key[0], [None] * n, keys=[b""] * n,
                                    headers=[_FILLER_HEADERS] * n, partition=key[1],
                                    per_record=False,
                                    on_delivery=lambda err, report, found=found:
                                    found.append((err, report)))
        left = producer.flush(self._timeout)
        wrong: dict[tuple[str, int], Any] = {}
        for key, action in fills.items():
            wrong[key] = (KafkaError(KafkaError._TIMED_OUT, f"{left} fillers not acknowledged "
                                     "in time") if left else
                          _batches_misplaced(outcomes[key], action.start, action.count,
                                             "fillers"))
        return wrong

    def _after_transaction(self, key: tuple[str, int], action: Action, wrong: Any,
                           end: int) -> Any:
        if wrong is None and end != action.end:
            wrong = (f"the log ends at {end}, not {action.end}: another writer appended (or, "
                     "after a partition leader died, Kafka wrote the transaction marker twice)")
        if wrong is None:
            self._ends[key] = end
            return None
        self._ends.pop(key, None)
        return _offsets_error(wrong, end)

    def _ends_after_markers(self, gaps: dict[tuple[str, int], Action]
                            ) -> dict[tuple[str, int], int]:
        """Each partition's log end once the marker of the transaction just ended is in the
        log past its gap's start: Kafka writes markers after it has answered EndTxn, so
        nothing else may go before it is seen. The last stable offsets of all the
        partitions are asked together (one ListOffsets per leader); a partition whose last
        stable offset is where its plan ends has its answer (the next step checks where it
        lands anyway), the others' log ends are asked together after."""
        reader = self._reader()
        stable: dict[tuple[str, int], int] = {}
        waiting = list(gaps)

        def markers_in() -> bool:
            asked = reader.stable_ends(waiting)
            stable.update(asked)
            waiting[:] = [key for key in waiting if asked[key] <= gaps[key].start]
            return not waiting

        reader.wait("the transaction marker in "
                    + ", ".join(f"{t}[{p}]" for t, p in gaps), markers_in, self._timeout)
        ends = {key: stable[key] for key in gaps if stable[key] == gaps[key].end}
        if len(ends) < len(gaps):
            ends.update(reader.log_ends([key for key in gaps if key not in ends]))
        return ends

    # ---- conditional publish (KIP-27) -----------------------------------------------------

    def _conditional(self, topic: str, partition: int, parts: list[Rows],
                     expected: int) -> None:
        producer = self._txn_producer()
        reader = self._reader()
        try:
            self._begin(producer)
            results = self._write_columns(producer, topic, partition, parts)
            wrong = _misplaced(results, expected)
            if wrong is None:
                self._commit(producer)
                last = expected + sum(len(p) for p in parts) - 1
            else:
                self._abort(producer)
                placed = [msg.offset() for err, msg in results
                          if err is None and msg is not None]
                last = max(placed) if placed else -1
            # Our marker is in once every transaction up to our last record is decided.
            self._wait_marker((topic, partition), last)
        except KafkaException as exc:
            self._fail(parts, ProduceOffsetKafkaError(
                exc.args[0].code(), f"{CONDITIONAL_CALL}: {exc.args[0].str()}"))
            return
        self._ends.pop((topic, partition), None)
        if wrong is None:
            self._report(parts, results)
            return
        end = reader.log_end(topic, partition)
        if isinstance(wrong, KafkaError):
            error = ProduceOffsetKafkaError(wrong.code(), f"{CONDITIONAL_CALL}: {wrong.str()}",
                                            log_end_offset=end)
        else:
            error = ProduceOffsetKafkaError(
                OFFSET_MISMATCH,
                f"{CONDITIONAL_CALL}: {topic}[{partition}] expected at {expected}; {wrong}; "
                f"aborted, the log ends at {end}", log_end_offset=end)
        self._fail(parts, error)

    # ---- writing and reporting ------------------------------------------------------------

    def _write(self, producer: Producer, topic: str, partition: int,
               parts: list[Rows]) -> list:
        """Produce the records in order and wait for every acknowledgement: [(err, Message)]
        in offset order (None for a record never acknowledged)."""
        # One partition, an idempotent producer: reports come in produce order.
        results: list = []
        landed = results.append
        produce = producer.produce

        def report(err, msg) -> None:
            landed((err, msg))

        total = 0
        for part in parts:
            for i in range(len(part)):
                key, value, headers, timestamp = part.row(i)
                kwargs: dict[str, Any] = {"partition": partition, "on_delivery": report}
                if headers:
                    kwargs["headers"] = headers
                if timestamp:
                    kwargs["timestamp"] = timestamp
                while True:
                    try:
                        produce(topic, value, key, **kwargs)
                        break
                    except BufferError:
                        producer.poll(0.01)
            total += len(part)
        left = producer.flush(self._timeout)
        if left:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT,
                                            f"{left} records not acknowledged in time"))
        results.sort(key=lambda outcome: outcome[1].offset() if outcome[0] is None else -1)
        return results + [None] * (total - len(results))

    def _write_columns(self, producer: Producer, topic: str, partition: int,
                       parts: list[Rows]) -> list:
        """As _write, through the engine's bulk lane of the transactional producer (one call
        for the run, no Python frame per record): [(err, report)] per record in offset
        order, None for one never acknowledged. A report is the record's Message (decoded
        by the engine) when a part's reports go per record, else a one-record BatchDelivery
        (only its offset() is read: a part reported per batch takes its first record's)."""
        per_record = any(p.sink.per_record and p.sink.callback is not None for p in parts)
        values, keys, headers, stamps = bulk_columns(parts)
        got: list = []
        producer.produce_arrays(topic, values, keys=keys, headers=headers, timestamps=stamps,
                                partition=partition, per_record=per_record,
                                on_delivery=lambda err, report: got.append((err, report)))
        left = producer.flush(self._timeout)
        if left:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT,
                                            f"{left} records not acknowledged in time"))
        got.sort(key=lambda outcome: outcome[1].offset() if outcome[0] is None else -1)
        if per_record:
            results = got
        else:
            results = []
            for err, report in got:
                first = report.offset() if err is None else -1
                results.extend((err, BatchDelivery(topic, partition, -1 if first < 0 else
                                                   first + i, 1, err))
                               for i in range(len(report)))
        return results + [None] * (len(values) - len(results))

    def _fail(self, parts: Iterable[Rows], error: KafkaError) -> None:
        parts = list(parts)
        self._report(parts, [(error, None)] * sum(len(p) for p in parts))

    def _report(self, parts: list[Rows], outcomes: list) -> None:
        """Queue the reports: one Message per record for per-record sinks, one BatchDelivery
        per call's part for the others (its first outcome's error and offset)."""
        index = 0
        for part in parts:
            sink, n = part.sink, len(part)
            mine = outcomes[index:index + n]
            index += n
            if sink.callback is None:
                continue
            if sink.per_record:
                for i, outcome in enumerate(mine):
                    err, msg = outcome if outcome is not None else (KafkaError(
                        KafkaError._TIMED_OUT, "not acknowledged"), None)
                    self._reports.append((sink.callback, err, msg if msg is not None
                                          else FailedRecord(part, i, err)))
                continue
            err, msg = mine[0] if mine[0] is not None else (KafkaError(
                KafkaError._TIMED_OUT, "not acknowledged"), None)
            offset = msg.offset() if msg is not None and err is None else -1
            self._reports.append((sink.callback, err, BatchDelivery(
                sink.topic, sink.partition, offset, n, err)))


def _count_changed(topic: str, partition: int, keys: list, expected: list[int | None],
                   pinned: int, now: int, partitions: int) -> list:
    return [(e, None) for e in key_index.batch_failed(
        topic, partition, keys, expected, ec.PARTITION_COUNT_MISMATCH,
        f"the topic had {pinned} partitions at this writer's first key condition (or its "
        f"index topic's checkpoint), has {now} now, and the record was partitioned with "
        f"{partitions}: a partition count change refuses every key condition")]


def _misplaced(results: list, start: int) -> Any:
    """None when every record landed in order from ``start``; else the first error (a
    KafkaError) or a sentence saying where they landed."""
    for i, outcome in enumerate(results):
        if outcome is None:
            return KafkaError(KafkaError._TIMED_OUT, "a record was not acknowledged")
        err, msg = outcome
        if err is not None:
            return err
        if msg.offset() != start + i:
            return f"record {i} landed at offset {msg.offset()}, not {start + i}"
    return None


def _offsets_error(wrong: Any, log_end: int) -> ProduceOffsetKafkaError:
    """The report of an offsets step that failed: the client error as it came, or
    INVALID_PRODUCE_OFFSET when records landed elsewhere than asked."""
    if isinstance(wrong, KafkaError):
        return ProduceOffsetKafkaError(wrong.code(), f"{OFFSETS_CALL}: {wrong.str()}",
                                       log_end_offset=log_end)
    return ProduceOffsetKafkaError(INVALID_PRODUCE_OFFSET, f"{OFFSETS_CALL}: {wrong}",
                                   log_end_offset=log_end)
