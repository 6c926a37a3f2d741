"""The emulated writer: what ``Producer`` does with ``offset=`` / ``expected_offset=`` on a
topic whose brokers lack the KIP-WIRE extension (docs/stock-clusters.md).

Runs that start at the log end go through a plain lane: the Producer's own bulk lane when
their reports are per batch (``bulk``, checked by first offset and log end), else an
idempotent librdkafka producer. A transactional librdkafka producer
(``kip.emulation.transactional.id``) writes committed runs, aborted fillers and conditional
batches. The lanes take turns on a partition, each waiting for the other's acknowledgement,
and after every transaction the writer waits until its marker is in the log (Kafka writes
markers after EndTxn is answered) before the next record goes.

Records with offsets are held per partition until the next gap is known (a run followed by a
gap of one offset must be written in a transaction whose commit marker fills that gap); the
last run goes at flush(), at append(), or when the held records grow past a bound. Delivery
reports are queued and handed to the callbacks from poll() / flush(), as librdkafka does.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from .._accumulator import BatchDelivery
from ..clients import with_logger
from ..errors import INVALID_PRODUCE_OFFSET, OFFSET_MISMATCH, ProduceOffsetKafkaError
from .log_ends import LogEnds
from .plan import FILLER_HEADER, Action, Step, plan_runs, with_empty_markers
from .probe import probe_cluster

log = logging.getLogger("kipproducer.stock")

#: Properties of the user's config that the emulation's own clients must not inherit.
_NOT_INHERITED = ("transactional.id", "enable.idempotence", "on_delivery", "delivery.report.cb",
                  "dr_cb", "dr_msg_cb", "callback", "message.timeout.ms", "delivery.timeout.ms",
                  "acks", "request.required.acks", "max.in.flight",
                  "max.in.flight.requests.per.connection", "enable.gapless.guarantee",
                  "transaction.timeout.ms")
#: Held records of one partition written before more are taken (bounds the memory).
HELD_MAX = 100_000

OFFSETS_CALL = "offset="
CONDITIONAL_CALL = "expected_offset="


@dataclass(slots=True)
class Sink:
    """Where one call's reports go: per record (a Message each) or per written run."""

    callback: Callable | None
    per_record: bool
    topic: str
    partition: int


@dataclass(slots=True)
class Rec:
    offset: int            # asked offset (-1: conditional or plain)
    key: Any
    value: Any
    headers: Any
    timestamp: int | None
    sink: Sink


def connection_of(conf: Mapping[str, Any]) -> dict[str, Any]:
    """The user's librdkafka properties that the emulation's clients share (servers, security,
    client.id, ...), without the kip.* ones and those the emulation sets itself."""
    return {k: v for k, v in conf.items()
            if not k.startswith("kip.") and k not in _NOT_INHERITED}


class Emulation:
    def __init__(self, conf: Mapping[str, Any], *, transactional_id: str, probe_topic: str,
                 timeout_s: float = 60.0,
                 bulk: Callable[[str, int, list[Rec]], int] | None = None) -> None:
        self._connection = with_logger(connection_of(conf))
        self._probe_topic = probe_topic
        self._timeout = timeout_s
        self._configured_id = transactional_id or None
        self._txn: Producer | None = None
        self._plain: Producer | None = None
        self._ends_reader: LogEnds | None = None
        self._ends: dict[tuple[str, int], int] = {}
        self._held: dict[tuple[str, int], list[Rec]] = {}
        self._reports: list[tuple[Callable, Any, Any]] = []
        self._held_count = 0
        # partitions whose held records have a gap: only those have a run that can go before
        # flush() (re-planning a dense run at every call would cost O(n) per record)
        self._gapped: set[tuple[str, int]] = set()
        # Runs whose reports are per batch go through the Producer's own bulk lane (the
        # engine's produce_arrays, columns in C); returns the first offset written.
        self._bulk = bulk
        #: Gaps of one offset as empty aborted transactions (the engine's transactional
        #: producer adds the partition without a record) rather than the commit marker of a
        #: transaction carrying the run before the gap: no caller record ever rides in a
        #: transaction, so a writer killed at any point loses nothing its successor cannot
        #: write (docs/stock-clusters.md). False (set before the first write) keeps the
        #: commit-marker plan, which works with librdkafka's transactions.
        self.empty_markers = True

    # ---- what the Producer calls ----------------------------------------------------------

    def probe(self) -> None:
        probe_cluster(self._connection, self._probe_topic, min(self._timeout, 30.0))

    def __len__(self) -> int:
        return self._held_count

    def offsets(self, topic: str, partition: int, recs: list[Rec]) -> None:
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
            self._fail(recs, error)
            return
        key = (topic, partition)
        held = self._held.setdefault(key, [])
        if not recs:
            return
        last = held[-1].offset if held else -1
        if recs[0].offset <= last:
            # (the callers pass strictly increasing offsets: only the first can be too low)
            self._fail(recs, ProduceOffsetKafkaError(
                INVALID_PRODUCE_OFFSET,
                f"{OFFSETS_CALL}: offset {recs[0].offset} of {topic}[{partition}] is below the "
                f"log end {last + 1} (explicit offsets must strictly increase)",
                log_end_offset=last + 1))
            return
        if (held and recs[0].offset != last + 1) or (
                recs[-1].offset - recs[0].offset != len(recs) - 1):
            self._gapped.add(key)
        held.extend(recs)
        self._held_count += len(recs)
        if len(held) >= HELD_MAX or key in self._gapped:
            self._drain(key, final=len(held) >= HELD_MAX, keep_last=True)

    def log_end(self, topic: str, partition: int) -> int:
        """The partition's log end once this writer holds its transactional id: a predecessor
        with the same id is fenced first (its open transaction aborted, its marker in) and
        every transaction of the partition is decided. What a resuming copy starts from."""
        self.probe()
        self._ends.pop((topic, partition), None)
        return self._log_end((topic, partition))

    def pad_to(self, topic: str, partition: int, next_offset: int) -> None:
        """Nothing of the partition lies between its held records (or its log end) and
        ``next_offset``: write the held records now and fill the log up to ``next_offset``
        (a copy that has read its source to a position past markers or aborted records).
        The next records of the partition then start at the log end, so a gap of exactly
        one offset left by the source (a commit marker) is carried by the held run's own
        transaction instead of being refused later at the log end. Without anything held
        a gap of exactly one cannot be padded and is left (the next call reports it)."""
        key = (topic, partition)
        held = self._held.setdefault(key, [])
        if held and self._configured_id is None:
            self._drain(key, final=True)  # (reported there: the id is missing)
            return
        try:
            end = self._log_end(key)
        except KafkaException as exc:
            self._fail(self._take(key, len(held)), exc.args[0])
            return
        last_end = held[-1].offset + 1 if held else end
        if (held and held[0].offset < end) or next_offset <= last_end:
            self._drain(key, final=True)
            return
        actions = self._plan(end, [r.offset for r in held] + [next_offset])
        actions.pop()  # the run at next_offset: not ours to write
        if actions and actions[-1].step == Step.LONE_MARKER:
            return
        self._run_actions(key, actions, self._take(key, len(held)))

    def conditional(self, topic: str, partition: int, recs: list[Rec], expected: int) -> None:
        """One conditional batch: its records land at ``expected``.. or none is visible."""
        self.probe()
        self._drain((topic, partition), final=True)
        self._conditional(topic, partition, recs, expected)

    def plain(self, topic: str, partition: int, recs: list[Rec]) -> None:
        """Records without offsets, in the order of an emulated call."""
        key = (topic, partition)
        self._drain(key, final=True)
        results = self._write(self._plain_producer(), topic, partition, recs)
        self._ends.pop(key, None)  # the log end moved by however many landed
        self._deliver(recs, results)

    def serve(self, *, final: bool = False) -> int:
        """Write what is due (everything with ``final``) and call the queued callbacks."""
        for key in list(self._held if final else self._gapped):
            self._drain(key, final=final)
        reports, self._reports = self._reports, []
        for callback, err, report in reports:
            callback(err, report)
        return len(reports)

    def purge(self) -> None:
        """Drop the held records (none of them was sent), reported with _PURGE_QUEUE as
        librdkafka reports its queued ones."""
        for key in list(self._held):
            recs = self._take(key, len(self._held[key]))
            self._fail(recs, ProduceOffsetKafkaError(
                KafkaError._PURGE_QUEUE, f"{OFFSETS_CALL}: purged before it was written"))

    def close(self) -> None:
        self.serve(final=True)
        for producer in (self._txn, self._plain):
            if producer is not None:
                producer.flush(5)
        if self._ends_reader is not None:
            self._ends_reader.close()
            self._ends_reader = None

    # ---- clients --------------------------------------------------------------------------

    def _reader(self) -> LogEnds:
        if self._ends_reader is None:
            self._ends_reader = LogEnds(self._connection)
        return self._ends_reader

    def _plain_producer(self) -> Producer:
        if self._plain is None:
            self._plain = Producer({**self._connection, "enable.idempotence": True,
                                    "linger.ms": 0,
                                    "message.timeout.ms": int(self._timeout * 1000)})
        return self._plain

    def _txn_producer(self) -> Producer:
        """The transactional producer; starting it fences a predecessor with the same id and
        aborts that one's open transaction (before any log end is read)."""
        if self._txn is None:
            txn_id = self._configured_id or f"kip-emulation-{uuid.uuid4().hex}"
            # linger.ms=0: every write is flushed at once anyway, and a linger shows in
            # each transaction's begin-to-EndTxn time (about 23 ms -> 14 ms per transaction
            # on the stand-in)
            conf = {**self._connection, "transactional.id": txn_id, "linger.ms": 0,
                    "transaction.timeout.ms": int(self._timeout * 1000)}
            if self.empty_markers:
                # The engine's transactions: they can add a partition without a record.
                from ..producer import Producer as EngineProducer

                producer = EngineProducer(conf)
            else:
                producer = Producer(conf)
            producer.init_transactions(self._timeout)
            self._txn = producer
        return self._txn

    # ---- offsets (KIP-391) ----------------------------------------------------------------

    def _log_end(self, key: tuple[str, int]) -> int:
        end = self._ends.get(key)
        if end is None:
            self._txn_producer()  # fence first: a dead predecessor's marker lands now
            reader = self._reader()
            end = reader.log_end(*key)
            # A transaction still open here (another writer's) would put its marker in the
            # middle of ours later: wait until it is decided.
            reader.wait(f"every transaction of {key[0]}[{key[1]}] decided",
                        lambda: reader.stable_end(*key) >= reader.log_end(*key), self._timeout)
            end = reader.log_end(*key)
            self._ends[key] = end
        return end

    def _drain(self, key: tuple[str, int], *, final: bool, keep_last: bool = False) -> None:
        """Write what the held records' gaps decide (everything with ``final``). With
        ``keep_last`` (the held records grew past HELD_MAX) the last record stays held: a gap
        of exactly one after it needs it in the transaction whose commit marker fills it."""
        held = self._held.get(key)
        if not held:
            return
        try:
            end = self._log_end(key)
        except KafkaException as exc:
            self._take(key, len(held))
            self._fail(held, exc.args[0])
            return
        if held[0].offset < end:
            recs = self._take(key, len(held))
            self._fail(recs, ProduceOffsetKafkaError(
                INVALID_PRODUCE_OFFSET,
                f"{OFFSETS_CALL}: offset {recs[0].offset} of {key[0]}[{key[1]}] is below the "
                f"log end {end}; nothing of the run was written", log_end_offset=end))
            return
        actions = self._plan(end, [r.offset for r in held])
        if not final and actions and actions[-1].step == Step.PLAIN:
            actions.pop()  # its successor's gap decides how it is written: wait for it
        elif keep_last and actions and actions[-1].step == Step.PLAIN:
            tail = actions.pop()
            if tail.count > 1:
                actions.append(Action(Step.PLAIN, tail.start, tail.count - 1, tail.first))
        if not actions:
            self._gapped.discard(key)  # one run at the log end: it waits for flush()
            return
        recs = self._take(key, max((a.first + a.count for a in actions if a.first >= 0),
                                   default=0))
        self._run_actions(key, actions, recs)

    def _run_actions(self, key: tuple[str, int], actions: list[Action],
                     recs: list[Rec]) -> None:
        for i, action in enumerate(actions):
            error = self._act(key, action, recs)
            if error is not None:
                # what comes after a failed step would land elsewhere: none of it is written
                rest = [r for later in actions[i + 1:] if later.first >= 0
                        for r in recs[later.first:later.first + later.count]]
                self._fail(rest, error)
                return

    def _plan(self, end: int, offsets: list[int]) -> list[Action]:
        actions = plan_runs(end, offsets)
        return with_empty_markers(actions) if self.empty_markers else actions

    def _take(self, key: tuple[str, int], count: int) -> list[Rec]:
        held = self._held[key]
        taken, self._held[key] = held[:count], held[count:]
        self._gapped.discard(key)  # what is left is one run (or nothing)
        self._held_count -= len(taken)
        return taken

    def _act(self, key: tuple[str, int], action: Action, recs: list[Rec]) -> Any:
        """One planned step. None when done; else the error for the records after it (the
        step's own records are reported either way)."""
        topic, partition = key
        if action.step == Step.LONE_MARKER:
            return ProduceOffsetKafkaError(
                KafkaError._INVALID_ARG,
                f"{OFFSETS_CALL}: offset {action.start + 1} of {topic}[{partition}] is one past "
                f"the log end {action.start}: a gap of exactly one offset right at the log end "
                "cannot be emulated (its marker needs a transaction holding the records just "
                "before it: give those in the same call, before a flush)",
                log_end_offset=action.start)
        if action.step == Step.MARKER:
            return self._empty_abort(key, action)
        if action.step == Step.FILL:
            sink = Sink(None, False, topic, partition)
            # an empty key, not none: a compacted topic takes no record without a key
            fillers = [Rec(-1, b"", None, [(FILLER_HEADER, b"")], None, sink)
                       for _ in range(action.count)]
            return self._transaction(key, action, fillers, commit=False)
        run = recs[action.first:action.first + action.count]
        if action.step == Step.COMMITTED:
            return self._transaction(key, action, run, commit=True)
        if self._bulk is not None and not any(r.sink.per_record for r in run):
            return self._bulk_run(key, action, run)
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
        self._deliver(run, results)
        return None

    def _bulk_run(self, key: tuple[str, int], action: Action, run: list[Rec]) -> Any:
        """A plain run through the bulk lane, checked by its first offset and the log end."""
        topic, partition = key
        try:
            first = self._bulk(topic, partition, run)
            end = self._reader().log_end(topic, partition)
        except KafkaException as exc:
            wrong: Any = exc.args[0]
        else:
            wrong = None if (first, end) == (action.start, action.end) else (
                f"the run landed at {first}..{end - 1}, not {action.start}..{action.end - 1}: "
                "another writer appended")
        if wrong is not None:
            self._ends.pop(key, None)
            error = _offsets_error(wrong, -1)
            self._fail(run, error)
            return error
        self._ends[key] = action.end
        groups: dict[int, list] = {}
        for i, rec in enumerate(run):
            entry = groups.get(id(rec.sink))
            if entry is None:
                groups[id(rec.sink)] = [rec.sink, i, 1]
            else:
                entry[2] += 1
        for sink, index, count in groups.values():
            if sink.callback is not None:
                self._reports.append((sink.callback, None, BatchDelivery(
                    topic, partition, first + index, count, None)))
        return None

    def _transaction(self, key: tuple[str, int], action: Action, recs: list[Rec], *,
                     commit: bool) -> Any:
        """Write ``recs`` at ``action.start`` in a transaction; commit (or abort, for fillers)
        when they landed there, then wait for the marker. None when done, else the error
        (the records of a committed run are reported either way)."""
        topic, partition = key
        end = -1
        try:
            producer = self._txn_producer()
            producer.begin_transaction()
            results = self._write(producer, topic, partition, recs)
            wrong = _misplaced(results, action.start)
            if wrong is None and commit:
                producer.commit_transaction(self._timeout)
            else:
                producer.abort_transaction(self._timeout)
            end = self._end_after_marker(topic, partition, action.start)
        except KafkaException as exc:
            wrong = exc.args[0]
        if wrong is None and end != action.end:
            wrong = f"the log ends at {end}, not {action.end}: another writer appended"
        if wrong is None:
            self._ends[key] = end
            if commit:
                self._deliver(recs, results)
            return None
        self._ends.pop(key, None)
        error = _offsets_error(wrong, end)
        if commit:
            self._fail(recs, error)
        return error

    def _end_after_marker(self, topic: str, partition: int, start: int) -> int:
        """The partition's log end once the marker of the transaction just ended is in the log
        past ``start``: Kafka writes markers after it has answered EndTxn, so nothing else may
        go before it is seen."""
        reader = self._reader()
        reader.wait(f"the transaction marker in {topic}[{partition}]",
                    lambda: reader.stable_end(topic, partition) > start, self._timeout)
        return reader.log_end(topic, partition)

    def _empty_abort(self, key: tuple[str, int], action: Action) -> Any:
        """A gap of one offset: a transaction that adds the partition without a record and
        is aborted; its marker takes ``action.start``. None when done, else the error."""
        from ..producer import register_partition

        topic, partition = key
        end = -1
        try:
            producer = self._txn_producer()
            producer.begin_transaction()
            register_partition(producer, topic, partition, self._timeout)
            producer.abort_transaction(self._timeout)
            end = self._end_after_marker(topic, partition, action.start)
        except KafkaException as exc:
            wrong: Any = exc.args[0]
        else:
            wrong = None if end == action.end else (
                f"the log ends at {end}, not {action.end}: another writer appended")
        if wrong is None:
            self._ends[key] = end
            return None
        self._ends.pop(key, None)
        return _offsets_error(wrong, end)

    # ---- conditional publish (KIP-27) -----------------------------------------------------

    def _conditional(self, topic: str, partition: int, recs: list[Rec], expected: int) -> None:
        producer = self._txn_producer()
        reader = self._reader()
        try:
            producer.begin_transaction()
            results = self._write(producer, topic, partition, recs)
            wrong = _misplaced(results, expected)
            if wrong is None:
                producer.commit_transaction(self._timeout)
                last = expected + len(recs) - 1
            else:
                producer.abort_transaction(self._timeout)
                placed = [msg.offset() for err, msg in results if err is None and msg]
                last = max(placed) if placed else -1
            # Our marker is in once every transaction up to our last record is decided.
            reader.wait(f"the transaction marker in {topic}[{partition}]",
                        lambda: reader.stable_end(topic, partition) > last, self._timeout)
        except KafkaException as exc:
            self._fail(recs, ProduceOffsetKafkaError(
                exc.args[0].code(), f"{CONDITIONAL_CALL}: {exc.args[0].str()}"))
            return
        self._ends.pop((topic, partition), None)
        if wrong is None:
            self._deliver(recs, results)
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
        self._fail(recs, error)

    # ---- writing and reporting ------------------------------------------------------------

    def _write(self, producer: Producer, topic: str, partition: int,
               recs: list[Rec]) -> list:
        """Produce ``recs`` in order and wait for every acknowledgement: [(err, Message)]."""
        # One partition, an idempotent producer: reports come in produce order.
        results: list = []
        landed = results.append
        produce = producer.produce

        def report(err, msg) -> None:
            landed((err, msg))

        for rec in recs:
            kwargs: dict[str, Any] = {"partition": partition, "on_delivery": report}
            if rec.headers:
                kwargs["headers"] = rec.headers
            if rec.timestamp:
                kwargs["timestamp"] = rec.timestamp
            while True:
                try:
                    produce(topic, rec.value, rec.key, **kwargs)
                    break
                except BufferError:
                    producer.poll(0.01)
        left = producer.flush(self._timeout)
        if left:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT,
                                            f"{left} records not acknowledged in time"))
        results.sort(key=lambda outcome: outcome[1].offset() if outcome[0] is None else -1)
        return results + [None] * (len(recs) - len(results))

    def _deliver(self, recs: list[Rec], results: list) -> None:
        self._report(recs, [(err, msg) for err, msg in results])

    def _fail(self, recs: Iterable[Rec], error: KafkaError) -> None:
        recs = list(recs)
        self._report(recs, [(error, None)] * len(recs))

    def _report(self, recs: list[Rec], outcomes: list) -> None:
        """Queue the reports: one Message per record for per-record sinks, one BatchDelivery
        per sink and outcome for the others."""
        batch: dict[int, list] = {}
        for rec, (err, msg) in zip(recs, outcomes, strict=True):
            sink = rec.sink
            if sink.callback is None:
                continue
            if sink.per_record:
                self._reports.append((sink.callback, err, msg if msg is not None
                                      else _FailedRecord(rec, err)))
                continue
            entry = batch.setdefault(id(sink), [sink, err, msg, 0])
            entry[3] += 1
        for sink, err, msg, count in batch.values():
            offset = msg.offset() if msg is not None and err is None else -1
            self._reports.append((sink.callback, err, BatchDelivery(
                sink.topic, sink.partition, offset, count, err)))


class _FailedRecord:
    """The report object of a record that was refused before librdkafka saw it."""

    def __init__(self, rec: Rec, err: Any) -> None:
        self._rec, self._err = rec, err

    def error(self) -> Any:
        return self._err

    def offset(self) -> int:
        return -1

    def topic(self) -> str:
        return self._rec.sink.topic

    def partition(self) -> int:
        return self._rec.sink.partition

    def key(self) -> Any:
        return self._rec.key

    def value(self) -> Any:
        return self._rec.value

    def headers(self) -> Any:
        return self._rec.headers


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
