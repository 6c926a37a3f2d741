"""``kipproducer.Producer``: a true ``confluent_kafka.Producer`` with a second, bulk lane.

Change the import and nothing else: the same config dict, ``produce()``, ``poll()``,
``flush()``, ``len()``, ``purge()``, ``list_topics()``, transactions and callbacks behave as in
confluent-kafka, because they are confluent-kafka's (per-record ``produce()`` goes through
librdkafka unchanged). What is added:

- ``produce_batch(topic, messages, partition=-1, on_delivery=None)``: confluent-kafka's
  signature and return value, sent by kipproducer's engine, so headers and timestamps are kept.
- ``produce_arrays(topic, values, keys=None, headers=None, timestamps=None, partition=-1,
  on_delivery=None)``: columns (numpy object arrays, pyarrow binary arrays, ``(data,
  offsets)`` tuples, lists) appended with no per-record Python work.

Both bulk calls use librdkafka's ``partitioner`` (default ``consistent_random``), so a key
lands on the same partition whichever lane sends it. One producer keeps one order per topic:
before a topic's records switch lanes, the records the other lane still has in flight for that
topic are delivered first (the first bulk call of a producer first delivers whatever
``produce()`` queued before it). ``poll()``, ``flush()``, ``len()``, ``purge()``, ``close()``
and ``with Producer(...)`` cover both lanes.

With ``transactional.id`` set, every produce path (``produce()``, both bulk calls,
``append()``, ``produce(expected_offset=)``) goes through the engine, under one producer id,
and the engine runs the transaction protocol itself (engine/transactions.py):
``init_transactions``, ``begin_transaction``, ``send_offsets_to_transaction``,
``commit_transaction`` and ``abort_transaction`` keep confluent-kafka's signatures, states and
errors. Only when the engine cannot run with the configuration (TLS, GSSAPI) do transactions
stay librdkafka's, with both bulk calls sent record by record through its ``produce()``.
"""

from __future__ import annotations

import functools
import logging
import operator
import random
import sys
import time
import zlib
from collections.abc import Callable
from typing import Any

import confluent_kafka
from confluent_kafka import KafkaError, KafkaException

from . import _accumulator, client_config
from ._accumulator import (
    BatchDelivery,
    ReportTarget,
    check_key_condition,
    has_kip_keys,
    report_runs,
)
from .clients import with_logger
from .engine.config import ConfigError, EngineConfig
from .engine.group_metadata import GroupMetadata
from .engine.partitioner import choose_partitions
from .engine.transactions import TransactionManager, TxnState
from .errors import NO_KEY_CONDITION
from .message_layout import install as _install_message_fill
from .producer_group import MemberTransactions, ProducerGroup, split_config
from .record_fields import as_list, column_rows, header_rows, per_record_headers
from .records import decode_batches
from .state_fields import state_field
from .stock import hooks as _stock

__all__ = ["BatchDelivery", "GroupMetadata", "Producer"]


def _serves_group(method: Callable) -> Callable:
    """A produce path of a producer-group member serves the group (its callbacks, the
    periodic commit) *after* the records are appended: they were meant for partitions the
    member owned at the call, and an on_revoke that runs now still covers them."""

    @functools.wraps(method)
    def call(self: Producer, *args: Any, **kwargs: Any) -> Any:
        group = self._kip_state.group
        if group is None:
            return method(self, *args, **kwargs)
        try:
            return method(self, *args, **kwargs)
        finally:
            group.tick()

    return call

log = logging.getLogger("kipproducer")

# Per-record delivery reports are filled in place when the installed confluent-kafka's Message
# layout probes consistent (message_layout.py); else built with its constructor.
MESSAGE_FILL_OFF = _install_message_fill()
if MESSAGE_FILL_OFF is not None:
    log.debug("delivery reports use Message's constructor: %s", MESSAGE_FILL_OFF)

RDKAFKA, ENGINE = "librdkafka", "engine"
# confluent-kafka's produce() arguments after (topic, value, key), in positional order.
_PRODUCE_POSITIONAL = ("partition", "on_delivery", "callback", "timestamp", "headers")
_PRODUCE_KEYWORDS = frozenset((*_PRODUCE_POSITIONAL, "offset", "expected_offset",
                               "expected_key_offset"))
_TIMESTAMP_CREATE_TIME = confluent_kafka.TIMESTAMP_CREATE_TIME
# Records appended under one hold of the engine's lock (see produce_arrays).
APPEND_SLICE = 8192


def _unreachable(engine) -> str | None:
    """When the engine never had an answer from any broker: which address it could not reach
    and why (a wrong bootstrap.servers), for the caller's error; None otherwise."""
    cluster = engine.cluster
    if cluster.refreshed or cluster.last_connect_error is None:
        return None
    addresses = ", ".join(f"{host}:{port}" for host, port in cluster.bootstrap)
    return (f"no broker could be reached (bootstrap.servers {addresses}; last attempt: "
            f"{cluster.last_connect_error})")


def _per_record_target(callback: Callable) -> ReportTarget:
    return ReportTarget(callback, True)


def _fail_message(message: dict, code_name: str, text: str) -> None:
    """produce_batch's rule: a message that was not queued carries its error in _error."""
    message["_error"] = KafkaError(getattr(KafkaError, code_name), text)


#: Upper bounds of a record batch's own bytes, of one record's framing and of one header's:
#: a call's conditional records of a partition must fit one batch (_check_fits_one_batch),
#: and the Spark sink cuts its conditional rows into pieces by the same bounds.
BATCH_OVERHEAD_BYTES, RECORD_OVERHEAD_BYTES, HEADER_OVERHEAD_BYTES = 61, 32, 10


def _row_bytes(row: tuple) -> int:
    """An upper bound of one conditional row's bytes in a batch (key, value, headers and the
    record's own framing)."""
    _, key, value, headers, _, _, _ = row
    size = (RECORD_OVERHEAD_BYTES + (len(key) if key is not None else 0)
            + (len(value) if value is not None else 0))
    if headers:
        pairs = headers.items() if isinstance(headers, dict) else headers
        size += sum(HEADER_OVERHEAD_BYTES + len(k) + (len(v) if v is not None else 0)
                    for k, v in pairs)
    return size


def _check_fits_one_batch(topic: str, partition: int, group: list[tuple], batch_size: int,
                          batch_num_messages: int, message_max_bytes: int) -> None:
    """A call's conditional records of one partition travel as one batch (docs/protocol.md
    §10): refuse a call they would not fit, and a key conditioned twice."""
    seen: set[bytes] = set()
    for _, key, _, _, _, expected, _ in group:
        if expected is not None and expected >= -1:
            key_bytes = key.encode() if isinstance(key, str) else bytes(key)
            if key_bytes in seen:
                raise ValueError(f"{topic}[{partition}]: key {key_bytes!r} is conditioned twice "
                                 "in one call; a key's condition goes on one of its records")
            seen.add(key_bytes)
    size = BATCH_OVERHEAD_BYTES + sum(_row_bytes(row) for row in group)
    limit = min(batch_size, message_max_bytes)
    if len(group) > batch_num_messages or size > limit:
        raise ValueError(
            f"{topic}[{partition}]: the call's {len(group)} records with key conditions "
            f"(about {size} bytes) must fit one batch (batch.size / message.max.bytes "
            f"{limit}, batch.num.messages {batch_num_messages}) to be appended together: "
            "split the call")


def _rows_of_columns(values, keys, headers, timestamps, partition, expected_key_offsets,
                     n: int) -> list[tuple]:
    """produce_arrays' columns as conditional rows (see Producer._append_conditional)."""
    value_list = as_list(values)
    key_list = as_list(keys) if keys is not None else [None] * n
    expected_list = as_list(expected_key_offsets) if hasattr(
        expected_key_offsets, "to_pylist") else list(expected_key_offsets)
    if len(expected_list) != n or len(key_list) != n:
        raise ValueError(f"expected_key_offsets and keys need one entry per record ({n})")
    if per_record_headers(headers, n):
        header_list = list(headers)
    else:
        header_list = [headers] * n
    stamps = [None] * n if timestamps is None else [int(t) for t in timestamps]
    if isinstance(partition, int):
        parts = [partition] * n
    else:
        parts = [int(p) for p in partition]
    return [(parts[i], key_list[i], value_list[i], header_list[i], stamps[i],
             None if expected_list[i] is None else int(expected_list[i]), None)
            for i in range(n)]


def _set_engine(producer: Producer, engine: Any) -> None:
    producer._kip_state.use_engine(engine, None if engine is None else engine.shared)


class Producer(confluent_kafka.Producer):
    # The C produce() (kipproducer._accumulator.produce) finds a producer's ProduceState
    # through this slot's descriptor, and reads these attributes there as typed fields.
    __slots__ = ("_kip_state", "__dict__", "__weakref__")
    _group = state_field("_kip_state", "group")
    _engine = property(operator.attrgetter("_kip_state.engine"), _set_engine)
    _txn = state_field("_kip_state", "txn")
    _kip_direct = state_field("_kip_state", "kip_direct")
    _lanes = state_field("_kip_state", "lanes", writable=False)
    _last_target = state_field("_kip_state", "last_target")
    _default_on_delivery = state_field("_kip_state", "default_on_delivery")

    # produce() in C for its common cases (see _accumulator.produce, wired by
    # configure_produce below); the rest is _produce_general.
    produce = _accumulator.produce  # type: ignore[assignment]

    def __init__(self, config: dict[str, Any] | None = None, /, **kwargs: Any) -> None:
        self._kip_state = _accumulator.ProduceState()
        conf = dict(config or {})
        conf.update(kwargs)
        # kip.* names and values are checked now, not at the first bulk call.
        client_config.check_kip_properties(conf)
        # Producer groups (KIP-509): their properties are not librdkafka's producer's.
        conf, group_settings = split_config(conf)
        # librdkafka's log lines go to Python logging (clients.LIBRDKAFKA_LOGGER, repeats
        # dropped) unless the config gives a logger.
        super().__init__(with_logger(client_config.librdkafka_properties(conf)))
        self._conf = conf
        self._group: ProducerGroup | None = (
            ProducerGroup(self, MemberTransactions(self._txn_state, self._commit_txn_only),
                          conf, group_settings) if group_settings is not None else None)
        self._engine = None
        self._default_on_delivery = conf.get("on_delivery") or conf.get("delivery.report.cb")
        # With transactional.id: the engine's transaction manager, or None when the engine
        # cannot run with this configuration and transactions stay librdkafka's
        # (self._transactional then routes the bulk calls through librdkafka's produce()).
        self._txn: TransactionManager | None = None
        if conf.get("transactional.id"):
            try:
                txn_config = EngineConfig.from_properties(conf)
            except ConfigError as exc:
                log.info("transactions go through librdkafka: %s", exc)
            else:
                self._txn = TransactionManager(
                    str(conf["transactional.id"]), txn_config.transaction_timeout_ms,
                    txn_config.retry_backoff_ms, txn_config.transaction_protocol)
        self._transactional = bool(conf.get("transactional.id")) and self._txn is None
        self._per_record_reports = client_config.value(conf, "kip.delivery.report.per.record")
        self._switch_interval_s = client_config.value(conf, "kip.switch.interval.ms") / 1000
        # Why records with offsets / expected offsets cannot go (the configuration is fixed).
        self._kip_refusals = (self._kip_refusal(True), self._kip_refusal(False))
        # The C produce() appends offset= / expected_offset= records itself only when nothing
        # about this configuration needs a check per call (no transactions, acks != 0).
        # (`is None` each: KafkaError's == against None leaves an exception set)
        self._kip_direct = (self._kip_refusals[0] is None and self._kip_refusals[1] is None
                            and self._txn is None
                            and not self._transactional and not self._acks_zero())
        # kip.mode (docs/stock-clusters.md): offset= / expected_offset= on a topic whose
        # brokers lack the extension go to the emulation (kipproducer.stock); the C produce()
        # takes them only once a topic is known native.
        self._kip_mode = client_config.value(conf, "kip.mode")
        self._kip_topic_modes: dict[str, str] = {}
        self._emulation = None
        self._kip_direct_native = self._kip_direct
        if self._kip_mode != "native":
            self._kip_direct = False
        # self._lanes (topic -> [lane, records of that lane not yet reported], once the engine
        # is in use) starts empty in the ProduceState.
        self._last_target: ReportTarget | None = None  # produce()'s last report target

    # ---- the engine lane ----------------------------------------------------------------------

    def _engine_or_start(self):
        if self._engine is None:
            from .engine.engine import Engine

            # the sender thread must get the interpreter lock soon after it asks for it
            # (kip.switch.interval.ms in docs/producer.md says why)
            if 0 < self._switch_interval_s < sys.getswitchinterval():
                sys.setswitchinterval(self._switch_interval_s)
            config = EngineConfig.from_properties(self._conf)
            if super().__len__():
                # produce() calls made before the engine existed were not counted per topic
                # (that costs nothing until a bulk call is made): deliver them all first, so
                # no bulk record overtakes them.
                left = super().flush(config.delivery_timeout_ms / 1000 + 5)
                if left:
                    raise KafkaException(KafkaError(
                        KafkaError._TIMED_OUT,
                        f"{left} records produced before the first bulk call were not "
                        "delivered in time"))
            self._engine = Engine(config, self._txn)
        self._engine.check()
        return self._engine

    def _enter_lane(self, topic: str, lane: str, count: int) -> None:
        """Wait for the other lane's in-flight records of ``topic``, then count ours."""
        state = self._lanes.get(topic)
        if state is not None and state[0] != lane and state[1] > 0:
            deadline = time.monotonic() + self._engine.config.delivery_timeout_ms / 1000 + 5
            # The other lane sends what it holds now (linger.ms is not waited out).
            while state[1] > 0 and time.monotonic() < deadline:
                if state[0] == ENGINE:
                    self._engine.begin_flush()
                    try:
                        self._serve_engine(0.05)
                    finally:
                        self._engine.end_flush()
                else:
                    super().flush(0.05)
            if state[1] > 0:
                raise KafkaException(KafkaError(
                    KafkaError._TIMED_OUT,
                    f"records for {topic} on the {state[0]} lane were not delivered in time"))
        if state is None or state[0] != lane:
            state = self._lanes[topic] = [lane, 0]
        state[1] += count

    def _lane_done(self, topic: str, lane: str, count: int) -> None:
        state = self._lanes.get(topic)
        if state is not None and state[0] == lane:
            state[1] -= count

    def _partitions_for(self, topic: str, keys, count: int, partition) -> Any:
        engine = self._engine_or_start()
        if isinstance(partition, int) and partition >= 0:
            return partition
        if not isinstance(partition, int):
            return partition
        # No partition count without metadata: wait for it, but no longer than a record may
        # wait for its delivery (fresh metadata answers at once, in this thread).
        total = self._partition_count(topic)
        if total == 1:
            return 0  # every partitioner picks the only partition: skip hashing the keys
        return choose_partitions(keys, count, total, engine.config.partitioner)

    @_serves_group
    def produce_batch(self, topic: str, messages: list[dict], partition: int = -1,
                      on_delivery: Callable | None = None, **kwargs: Any) -> int:
        """confluent-kafka's produce_batch, through the engine: headers and timestamps kept."""
        on_delivery = on_delivery or kwargs.pop("callback", None)
        if not isinstance(messages, list):
            raise TypeError("messages must be a list of dicts")
        if self._transactional:
            return self._batch_through_librdkafka(topic, messages, partition, on_delivery)
        if self._txn is not None:
            refused = self._txn.produce_error()
            if refused is not None:  # as librdkafka's produce() outside a transaction
                for m in messages:
                    m["_error"] = refused
                return 0
        if self._kip_mode != "native" and self._kip_topic_modes.get(topic) != "native" \
                and has_kip_keys(messages) and self._kip_topic_mode(topic) == "emulated":
            return _stock.produce_batch(self._emulation_or_start(), topic, messages, partition,
                                        on_delivery or self._default_on_delivery)
        from ._accumulator import message_keys, scan_messages

        engine = self._engine_or_start()
        call_partition = -1 if partition is None else partition
        chosen = None
        conditioned: list[int] = []
        needs_partitioner = scan_messages(messages, call_partition, conditioned)
        if conditioned:
            return self._produce_batch_conditional(topic, messages, call_partition,
                                                   on_delivery or self._default_on_delivery)
        if needs_partitioner:
            chosen = self._partitions_for(topic, message_keys(messages), len(messages), -1)
            if not isinstance(chosen, int):
                chosen = chosen.astype("int32", copy=False)
        default_target = ReportTarget(on_delivery or self._default_on_delivery, True)
        queued = 0
        self._enter_lane(topic, ENGINE, 0)
        lane = self._lanes[topic]
        for begin in range(0, len(messages), APPEND_SLICE):
            # A slice at a time under the engine's lock, announced as it is appended, as
            # produce_arrays does: the batches a slice closes go out while the next appends
            # (announced once per call, a 100k-message call sent nothing for its first ~17 ms).
            with engine.lock:
                added = engine.acc.append_dicts(
                    topic, messages, begin, min(begin + APPEND_SLICE, len(messages)), chosen,
                    call_partition, engine.config.message_max_bytes, default_target,
                    _per_record_target, self._kip_refusals, _fail_message)
            lane[1] += added
            engine.appended(added)
            queued += added
        return queued

    @_serves_group
    def produce_arrays(self, topic: str, values, keys=None, headers=None, timestamps=None,
                       partition: Any = -1, on_delivery: Callable | None = None, *,
                       per_record: bool | None = None, offsets=None,
                       expected_offset: int | None = None, expected_key_offsets=None) -> int:
        """Append columns of records in one call; returns how many were enqueued (all).

        Blocks (serving delivery reports) while the queue bounds are reached. ``on_delivery``
        gets one :class:`BatchDelivery` per Kafka batch, or one ``Message`` per record with
        ``per_record=True`` (or ``kip.delivery.report.per.record=true``).

        ``offsets`` (int64 array, KIP-391): each record is written at its offset, which must
        be at or above the partition's log end and strictly increase; gaps are kept.
        ``expected_offset`` (KIP-27): the first record must land at this offset, the others
        follow it; a batch is appended only if the log ends where it expects. Both need an
        explicit ``partition``.
        ``expected_key_offsets`` (docs/per-key-conditional.md): one entry per record, the
        offset its key's last record must have, ``KEY_ABSENT`` (-1) for "no live record",
        or None / ``NO_KEY_CONDITION`` (-2) for no condition; a call's conditional records
        of one partition are appended together or not at all.
        """
        from ._accumulator import largest_record

        if expected_key_offsets is not None:
            if offsets is not None or expected_offset is not None:
                raise ValueError("expected_key_offsets= goes with neither offsets= nor "
                                 "expected_offset=")
            n = len(as_list(values))
            rows = _rows_of_columns(values, keys, headers, timestamps, partition,
                                    expected_key_offsets, n)
            per = self._per_record_reports if per_record is None else per_record
            return self._append_conditional(
                topic, rows, ReportTarget(on_delivery or self._default_on_delivery, per))

        self._check_kip_call(offsets, expected_offset, partition)
        if (offsets is not None or expected_offset is not None) and self._kip_mode != "native" \
                and self._kip_topic_mode(topic) == "emulated":
            return _stock.produce_arrays(
                self._emulation_or_start(), topic, values, keys, headers, timestamps, partition,
                on_delivery or self._default_on_delivery,
                self._per_record_reports if per_record is None else per_record,
                offsets, expected_offset)
        if self._transactional:
            return self._arrays_through_librdkafka(topic, values, keys, headers, timestamps,
                                                   partition, on_delivery)
        if self._txn is not None:
            self._txn.check_produce()
        engine = self._engine_or_start()
        n, index, size = largest_record(values, keys)
        if size > engine.config.message_max_bytes:
            raise KafkaException(KafkaError(
                KafkaError.MSG_SIZE_TOO_LARGE,
                f"record {index} is {size} bytes > message.max.bytes="
                f"{engine.config.message_max_bytes}"))
        parts = self._partitions_for(topic, keys, n, partition)
        if per_record is None:
            per_record = self._per_record_reports
        target = ReportTarget(on_delivery or self._default_on_delivery, per_record)
        self._enter_lane(topic, ENGINE, 0)
        done = 0
        stalled_since = None
        while done < n:
            # A slice at a time under the engine's lock: the sender thread drains and gives
            # back room under the same lock, and a whole 100k-record call held it for tens of
            # milliseconds (the sender's event loop blocked that long). Sliced, it waits one
            # slice at most, and the new batches are announced (appended) as they close.
            stop = min(done + APPEND_SLICE, n)
            sl = slice(done, stop)
            with engine.lock:
                added = engine.acc.append_arrays(
                    topic, parts if isinstance(parts, int) else parts[sl],
                    column_rows(values, done, stop), keys=column_rows(keys, done, stop),
                    timestamps=None if timestamps is None else timestamps[sl],
                    offsets=None if offsets is None else offsets[sl],
                    headers=header_rows(headers, done, stop, n), opaque=target,
                    expected_offset=None if expected_offset is None
                    else expected_offset + done)
            self._lanes[topic][1] += added
            engine.appended(added)
            done += added
            if done < n and added < stop - sl.start:  # the queue is full: wait for room
                now = time.monotonic()
                stalled_since = stalled_since if added == 0 and stalled_since else now
                if now - stalled_since > engine.config.delivery_timeout_ms / 1000:
                    raise BufferError(f"queue stayed full; {done} of {n} records enqueued")
                engine.begin_flush()
                try:
                    self._serve_engine(0.01)
                finally:
                    engine.end_flush()
        return n

    def _produce_batch_conditional(self, topic: str, messages: list[dict],
                                   call_partition: int, on_delivery) -> int:
        """produce_batch with some ``expected_key_offset`` fields (docs/protocol.md §10)."""
        default_target = ReportTarget(on_delivery, True)
        targets: dict[Any, ReportTarget] = {}
        rows = []
        for i, m in enumerate(messages):
            if "offset" in m or "expected_offset" in m:
                raise ValueError(f"message {i}: expected_key_offset goes with neither offset "
                                 "nor expected_offset, in one produce_batch call")
            part = m.get("partition")
            callback = m.get("callback") or m.get("on_delivery")
            target = default_target
            if callback is not None:
                target = targets.get(id(callback)) or targets.setdefault(
                    id(callback), ReportTarget(callback, True))
            rows.append((call_partition if part is None or part < 0 else part, m.get("key"),
                         m.get("value"), m.get("headers"), m.get("timestamp"),
                         m.get("expected_key_offset"), target))
        return self._append_conditional(topic, rows, default_target)

    def _append_conditional(self, topic: str, rows: list[tuple], target: ReportTarget) -> int:
        """Records some of which carry a key condition (rows: partition or -1, key, value,
        headers, timestamp, expected key offset or None, report target or None). Each
        partition's records of the call go in one batch of their own, so they are appended
        together or not at all; a call whose records of one partition cannot fit one batch,
        or that conditions one key twice in a partition, is refused before anything is
        queued."""
        for _, key, _, _, _, expected, _ in rows:
            if expected is not None and expected != NO_KEY_CONDITION:
                self._check_key_condition(None, None, key, expected)
        emulated = self._kip_mode != "native" and self._kip_topic_mode(topic) == "emulated"
        if self._txn is not None:
            self._txn.check_produce()
        engine = self._engine_or_start()
        total = self._partition_count(topic)
        partitioner = engine.config.partitioner
        groups: dict[int, list[tuple]] = {}
        for row in rows:
            part = row[0]
            if part < 0:
                part = _one_partition(row[1], total, partitioner)
                part = part if isinstance(part, int) else int(part[0])
            elif part >= total:
                raise KafkaException(KafkaError(
                    KafkaError._UNKNOWN_PARTITION, f"topic {topic!r} has {total} partitions; "
                    f"partition {part} does not exist"))
            groups.setdefault(part, []).append(row)
        acc = engine.acc
        for part, group in groups.items():
            _check_fits_one_batch(topic, part, group, acc.batch_size, acc.batch_num_messages,
                                  engine.config.message_max_bytes)
        if emulated and self._txn is not None:
            return self._txn_key_conditional(topic, groups, target, total)
        if emulated:  # each partition's records in a transaction of the emulation's writer
            for part, group in groups.items():
                _stock.key_conditional(self._emulation_or_start(), topic, part, group, target,
                                       total)
            return len(rows)
        return self._append_groups(topic, groups, target, total)

    def _txn_key_conditional(self, topic: str, groups: dict[int, list[tuple]],
                             target: ReportTarget, total: int) -> int:
        """Emulated key conditions inside this producer's own transaction
        (stock/txn_keys.py): each partition's records checked against its key index as the
        transaction sees it, then appended to the transaction as one batch whose reports are
        checked to have landed where that index ends. A refusal fails the transaction."""
        txn = self._txn
        assert txn is not None
        emulation = self._emulation_or_start()
        engine = self._engine_or_start()
        checked: dict[int, list[tuple]] = {}
        for part, group in groups.items():
            start = _stock.txn_key_conditional(emulation, topic, part, group, target, total,
                                               engine.holds_records(topic, part))
            if isinstance(start, KafkaError):
                txn.records_failed(len(group), start)
                continue
            check = _stock.LandingCheck(topic, part, start, len(group), txn.records_failed)
            checked[part] = [(*row[:5], None, check.target(row[6] or target))
                             for row in group]
        if checked:
            self._append_groups(topic, checked, target, total)
        return sum(len(group) for group in groups.values())

    def _append_groups(self, topic: str, groups: dict[int, list[tuple]], target: ReportTarget,
                       total: int) -> int:
        """Each partition's rows in a batch of their own, into the engine."""
        engine = self._engine_or_start()
        acc = engine.acc
        rows = [row for group in groups.values() for row in group]
        self._enter_lane(topic, ENGINE, 0)
        need = sum(_row_bytes(row) for row in rows)
        deadline = time.monotonic() + engine.config.delivery_timeout_ms / 1000
        while (acc.buffered_messages + len(rows) > acc.max_messages
               or acc.buffered_bytes + need > acc.max_bytes):
            if time.monotonic() > deadline:  # nothing queued: the call may be made again
                raise BufferError("queue stayed full; none of the call's records enqueued")
            engine.begin_flush()
            try:
                self._serve_engine(0.01)
            finally:
                engine.end_flush()
        with engine.lock:
            for part, group in groups.items():
                acc.close_open(topic, part)
                for _, key, value, headers, timestamp, expected, row_target in group:
                    if expected is not None and expected < -1:
                        expected = None  # NO_KEY_CONDITION
                    acc.append(topic, part, key, value, headers, timestamp or None, None,
                               row_target or target, None, expected, total)
                acc.close_open(topic, part)
        self._lanes[topic][1] += len(rows)
        engine.appended(len(rows))
        return len(rows)

    def _forward_fetched(self, topic: str, partition: int, records, *, framed: bool,
                         count: int, base_offset: int, base_timestamp: int, max_timestamp: int,
                         log_append_time: bool, with_offsets: bool, min_offset: int,
                         on_delivery: Callable | None) -> tuple[int, int]:
        """kip mirror's entry (mirror/fetcher.py): fetched records appended as they are,
        re-framed in C, never decoded: ``framed``, whole uncompressed CreateTime batches back
        to back (RecordAccumulator.append_fetched_batches; the other fields unused), else one
        batch's uncompressed records section (append_fetched). ``with_offsets`` keeps the
        source offsets (KIP-391). Blocks, serving delivery reports, while the queue bounds are
        reached. ``on_delivery`` (keep passing the same one) gets one BatchDelivery per target
        batch. Returns (records queued, the last one's source offset or -1)."""
        if self._transactional:
            raise KafkaException(KafkaError(
                KafkaError._NOT_IMPLEMENTED, "forwarding fetched batches needs the engine's "
                "transactions (this configuration keeps librdkafka's)"))
        self._check_kip_call(0 if with_offsets else None, None, partition)
        if self._txn is not None:
            self._txn.check_produce()
        engine = self._engine_or_start()
        # One opaque per callback: consecutive source batches share a target batch's opaque
        # run, and so its one report.
        reports = self.__dict__.setdefault("_forward_reports", {})
        target = reports.get(on_delivery)
        if target is None:
            target = reports[on_delivery] = ReportTarget(on_delivery or self._default_on_delivery,
                                                      False)
        self._enter_lane(topic, ENGINE, 0)
        batch_pos = index = pos = total = 0
        last = -1
        stalled_since = None
        acc = engine.acc
        while True:
            with engine.lock:
                if framed:
                    done, batch_pos, index, pos, queued, last_now = acc.append_fetched_batches(
                        topic, partition, records, with_offsets, min_offset, batch_pos, index,
                        pos, target)
                else:
                    index, pos, queued, last_now = acc.append_fetched(
                        topic, partition, records, count, base_offset, base_timestamp,
                        max_timestamp, log_append_time, with_offsets, min_offset, index, pos,
                        target)
                    done = index >= count
            self._lanes[topic][1] += queued
            engine.appended(queued)
            total += queued
            last = max(last, last_now)
            if done:
                return total, last
            now = time.monotonic()
            stalled_since = stalled_since if not queued and stalled_since else now
            if now - stalled_since > engine.config.delivery_timeout_ms / 1000:
                raise BufferError(f"queue stayed full; {total} records of a fetched batch "
                                  "enqueued")
            engine.begin_flush()
            try:
                self._serve_engine(0.01)
            finally:
                engine.end_flush()

    # ---- the librdkafka lane ------------------------------------------------------------------

    @_serves_group
    def _produce_general(self, topic, value=None, key=None, *args, **kwargs):
        """produce(), every case: the C produce() (Producer.produce, set in the class body)
        appends the common offset= / expected_offset= call itself and hands the rest here."""
        state = self._kip_state  # (its fields read directly: a property costs a call each)
        if ("offset" in kwargs or "expected_offset" in kwargs or "expected_key_offset" in kwargs
                or state.txn is not None):
            return self._produce_kip(topic, value, key, args, kwargs)
        if state.engine is None:
            return super().produce(topic, value, key, *args, **kwargs)
        # Both lanes in use: count this record until librdkafka reports it.
        if len(args) > len(_PRODUCE_POSITIONAL):
            raise TypeError(f"produce() takes at most {3 + len(_PRODUCE_POSITIONAL)} "
                            "positional arguments")
        for name, arg in zip(_PRODUCE_POSITIONAL, args, strict=False):
            if name in kwargs:
                raise TypeError(f"produce() got multiple values for argument {name!r}")
            kwargs[name] = arg
        args = ()
        on_delivery, callback = kwargs.pop("on_delivery", None), kwargs.pop("callback", None)
        user = on_delivery or callback or state.default_on_delivery
        self._enter_lane(topic, RDKAFKA, 1)

        def delivered(err, msg, _user=user, _topic=topic):
            self._lane_done(_topic, RDKAFKA, 1)
            if _user is not None:
                _user(err, msg)

        try:
            return super().produce(topic, value, key, *args, on_delivery=delivered, **kwargs)
        except BaseException:
            self._lane_done(topic, RDKAFKA, 1)
            raise

    def _produce_kip(self, topic, value, key, args, kwargs) -> None:
        """produce(..., offset=N) (KIP-391) or produce(..., expected_offset=N) (KIP-27):
        through the engine, since librdkafka cannot send a record's offset; and every
        produce() of a transactional producer (its records share the engine's producer id).
        Called once per record: the common case does only dictionary lookups in Python."""
        if args:
            if len(args) > len(_PRODUCE_POSITIONAL):
                raise TypeError(f"produce() takes at most {3 + len(_PRODUCE_POSITIONAL)} "
                                "positional arguments")
            kwargs = dict(zip(_PRODUCE_POSITIONAL, args, strict=False)) | kwargs
        if not _PRODUCE_KEYWORDS.issuperset(kwargs):
            unknown = sorted(set(kwargs) - _PRODUCE_KEYWORDS)
            raise TypeError(f"produce() got unexpected keyword arguments {unknown}")
        get = kwargs.get
        state = self._kip_state  # (its fields read directly: a property costs a call each)
        offset, expected = get("offset"), get("expected_offset")
        expected_key = get("expected_key_offset")
        partition = get("partition", -1)
        if partition is None:
            partition = -1
        if expected_key is not None:
            self._check_key_condition(offset, expected, key, expected_key)
            if self._kip_mode != "native" and self._kip_topic_mode(topic) == "emulated":
                return self._append_conditional(
                    topic, [(partition, key, value, get("headers"), get("timestamp"),
                             expected_key, None)],
                    ReportTarget(get("on_delivery") or get("callback")
                                 or state.default_on_delivery, True))
        elif offset is not None or expected is not None:
            self._check_kip_call(offset, expected, partition)
            if self._kip_mode != "native" and self._kip_topic_mode(topic) == "emulated":
                return _stock.produce_one(self._emulation_or_start(), topic, partition, key,
                                          value, get("headers"),
                                          get("timestamp"), offset, expected,
                                          get("on_delivery") or get("callback")
                                          or state.default_on_delivery)
        if state.txn is not None:
            state.txn.check_produce()
        engine = state.engine
        if engine is None or engine.dead:
            engine = self._engine_or_start()
        total = -1
        if partition < 0 or expected_key is not None:
            # One record: the partition count as the engine knows it now when that is fresh
            # (asking the sender thread costs a round trip per record), else fetched. A key
            # condition carries the count (docs/protocol.md §10).
            total = engine.known_partition_count(topic)
            if total is None:
                total = self._partition_count(topic)
            if partition < 0:
                partition = _one_partition(key, total, engine.config.partitioner)
                if not isinstance(partition, int):
                    partition = int(partition[0])
        size = (len(value) if value is not None else 0) + (len(key) if key is not None else 0)
        if size > engine.config.message_max_bytes:
            raise KafkaException(KafkaError(
                KafkaError.MSG_SIZE_TOO_LARGE,
                f"{size} bytes > message.max.bytes={engine.config.message_max_bytes}"))
        user = get("on_delivery") or get("callback") or state.default_on_delivery
        target = state.last_target
        if target is None or (target.callback is not user and target.callback != user):
            # (== too: a bound method, say obj.on_delivery, is a new object at every call)
            # Records with the same target share a run in their batch (one per callback).
            target = state.last_target = ReportTarget(user, True)
        lane = state.lanes.get(topic)
        if lane is None or lane[0] != ENGINE:
            self._enter_lane(topic, ENGINE, 0)
            lane = state.lanes[topic]
        with engine.lock:
            if expected_key is None:
                engine.acc.append(topic, partition, key, value, get("headers"),
                                  get("timestamp") or None, offset, target, expected)
            else:
                engine.acc.append(topic, partition, key, value, get("headers"),
                                  get("timestamp") or None, None, target, None, expected_key,
                                  total)
        lane[1] += 1
        engine.appended(1)

    def _check_key_condition(self, offset, expected, key, expected_key) -> None:
        """Refuse at the call what a per-key condition cannot do (docs/protocol.md §10)."""
        check_key_condition(key, offset, expected, expected_key)
        if self._acks_zero():
            raise ValueError("expected_key_offset= cannot be used with acks=0: the broker's "
                             "refusal would never be seen")
        if self._transactional:
            raise KafkaException(KafkaError(
                KafkaError._NOT_IMPLEMENTED,
                "expected_key_offset= with transactional.id: with this configuration "
                "transactions are librdkafka's, and kipproducer's engine takes no part in "
                "them"))

    def _partition_count(self, topic: str) -> int:
        engine = self._engine_or_start()
        try:
            return engine.partition_count(
                topic, timeout=min(30.0, max(2.0, engine.config.delivery_timeout_ms / 1000)))
        except LookupError as exc:
            code = exc.args[0]
            detail = f" ({exc.args[1]})" if len(exc.args) > 1 else ""
            raise KafkaException(KafkaError(code, f"topic {topic!r}: "
                                            f"{KafkaError(code).name()}{detail}")) from None

    def _check_kip_call(self, offset, expected, partition) -> None:
        """Refuse at the call what the KIP modes cannot do (docs/protocol.md §6, §8)."""
        if offset is None and expected is None:
            return
        if offset is not None and expected is not None:
            raise ValueError("give offset= (KIP-391) or expected_offset= (KIP-27), not both")
        what = "offset=" if offset is not None else "expected_offset="
        # One partition, or (offsets only) an array giving each record's partition.
        explicit = partition >= 0 if isinstance(partition, int) else offset is not None
        if not explicit:
            raise ValueError(f"{what} needs an explicit partition: an offset means "
                             "something only in one partition's log")
        if self._acks_zero():
            raise ValueError(f"{what} cannot be used with acks=0: the broker's refusal "
                             "(an offset below the log end, a mismatch) would never be seen")
        refusal = self._kip_refusals[offset is None]
        if refusal is not None:
            raise KafkaException(refusal)

    def _acks_zero(self) -> bool:
        return str(self._conf.get("acks", self._conf.get("request.required.acks", "all"))) == "0"

    def _kip_refusal(self, with_offsets: bool = True) -> KafkaError | None:
        """Why this producer's configuration cannot send records with offsets (KIP-391;
        ``with_offsets=False``: expected offsets, KIP-27), or None."""
        if self._acks_zero():
            return KafkaError(KafkaError._INVALID_ARG,
                              "offset= / expected_offset= cannot be used with acks=0: the "
                              "broker's refusal would never be seen")
        if self._conf.get("transactional.id") and (with_offsets or self._transactional):
            what = "offset=" if with_offsets else "expected_offset="
            reason = ("offsets chosen by the producer cannot be transactional (commit "
                      "markers would take offsets the source owns)" if with_offsets else
                      "with this configuration transactions are librdkafka's, and "
                      "kipproducer's engine takes no part in them")
            return KafkaError(KafkaError._NOT_IMPLEMENTED,
                              f"{what} with transactional.id: {reason}")
        return None

    def append(self, topic: str, values, *, partition: int, keys=None, headers=None,
               timestamps=None, offsets=None, expected_offset: int | None = None,
               expected_key_offsets=None, timeout: float | None = None) -> int:
        """Write columns of records to one partition and wait for the verdict; returns the
        offset of the first record.

        The waiting form of ``produce_arrays``: with ``expected_offset=N`` (KIP-27) the
        records are appended only if the log ends at N, else :class:`OffsetMismatchError`
        (``log_end_offset`` tells where it ends); with ``offsets=`` (KIP-391)
        :class:`InvalidProduceOffsetError` when an offset is below the log end; with
        ``expected_key_offsets=`` (one entry per record, docs/per-key-conditional.md) the
        records are appended together only if every key's last offset is the one expected,
        else :class:`KeyOffsetMismatchError` naming the first key whose condition failed
        (``key``, ``expected``, ``actual``). Other failures raise ``KafkaException``. More
        records than one batch holds are several batches, each checked as it is written (see
        docs/guarantees.md), except with ``expected_key_offsets=``, where they are refused.
        Serves other callbacks while it waits, as flush() does. ``timeout`` None:
        delivery.timeout.ms.
        """
        if self._transactional:
            raise KafkaException(KafkaError(KafkaError._NOT_IMPLEMENTED, "append() sends "
                                            "through kipproducer's engine, which takes no "
                                            "part in librdkafka's transactions (this "
                                            "configuration keeps transactions there)"))
        outcome: list = []

        def on_delivery(err, report) -> None:
            outcome.append((err, report))

        # Key conditions report per record: each refused record has its own error, and the
        # one to raise is a failed condition, not a neighbour's OPERATION_NOT_ATTEMPTED.
        per_record = expected_key_offsets is not None
        count = self.produce_arrays(topic, values, keys=keys, headers=headers,
                                    timestamps=timestamps, partition=partition,
                                    on_delivery=on_delivery, offsets=offsets,
                                    expected_offset=expected_offset,
                                    expected_key_offsets=expected_key_offsets,
                                    per_record=per_record)

        def reported() -> int:
            return len(outcome) if per_record else sum(r.count for _, r in outcome)

        if self._emulation is not None:  # emulated calls are settled here, synchronously
            self._emulation.serve(final=True)
            if reported() >= count:
                return _stock.append_verdict(outcome)
        engine = self._engine_or_start()
        wait = engine.config.delivery_timeout_ms / 1000 + 5 if timeout is None else timeout
        deadline = time.monotonic() + wait
        engine.begin_flush()
        try:
            while reported() < count:
                if time.monotonic() > deadline:
                    raise KafkaException(KafkaError(
                        KafkaError._TIMED_OUT, f"append to {topic}[{partition}]: no verdict "
                        f"within {wait:.0f} s; " + (_unreachable(engine) or
                                                    "the records may still be written")))
                self._serve_engine(0.01)
        finally:
            engine.end_flush()
        return _stock.append_verdict(outcome, f"append to {topic}[{partition}]",
                                     _unreachable(engine))

    def _batch_through_librdkafka(self, topic, messages, partition, on_delivery) -> int:
        queued = 0
        for m in messages:
            kwargs = {k: m[k] for k in ("headers", "timestamp") if m.get(k) is not None}
            part = m.get("partition", partition)
            if part is not None and part >= 0:
                kwargs["partition"] = part
            callback = m.get("callback") or m.get("on_delivery") or on_delivery
            if callback is not None:
                kwargs["on_delivery"] = callback
            try:
                super().produce(topic, m.get("value"), m.get("key"), **kwargs)
                queued += 1
            except (BufferError, KafkaException) as exc:
                m["_error"] = exc.args[0] if exc.args and isinstance(
                    exc.args[0], KafkaError) else KafkaError(KafkaError._QUEUE_FULL, str(exc))
        return queued

    def _arrays_through_librdkafka(self, topic, values, keys, headers, timestamps, partition,
                                   on_delivery) -> int:
        values = as_list(values)
        keys = as_list(keys) if keys is not None else [None] * len(values)
        n = len(values)
        per_record = per_record_headers(headers, n)
        for i in range(n):
            kwargs: dict[str, Any] = {}
            if timestamps is not None:
                kwargs["timestamp"] = int(timestamps[i])
            h = headers[i] if per_record else headers
            if h is not None:
                kwargs["headers"] = h
            part = partition if isinstance(partition, int) else int(partition[i])
            if part >= 0:
                kwargs["partition"] = part
            if on_delivery is not None:
                kwargs["on_delivery"] = on_delivery
            deadline = None
            while True:  # blocks while the queue is full, as the engine lane does
                try:
                    super().produce(topic, values[i], keys[i], **kwargs)
                    break
                except BufferError:
                    now = time.monotonic()
                    deadline = deadline or now + _delivery_timeout_s(self._conf)
                    if now > deadline:
                        raise
                    super().poll(0.01)
        return n

    # ---- transactions (the engine's, unless they stay librdkafka's) ---------------------------

    def kip_mode(self, topic: str) -> str:
        """``"native"`` or ``"emulated"``: how ``offset=`` / ``expected_offset=`` reach
        ``topic`` under ``kip.mode`` (docs/stock-clusters.md). Emulated mode is checked with
        the capability probe first; a cluster where neither works raises ``KafkaException``
        naming what is missing."""
        mode = self._kip_topic_mode(topic, strict=True)
        if mode == "unsupported":
            raise _stock.unsupported_error(self._emulation_or_start(), topic)
        return mode

    def _kip_topic_mode(self, topic: str, *, strict: bool = False) -> str:
        """kip_mode() without raising: ``unsupported`` takes the native path (refused there),
        and so does a topic whose leaders cannot be asked now (asked again at the next call)."""
        mode = self._kip_topic_modes.get(topic)
        if mode is None:
            mode = _stock.resolve_mode(self._kip_mode, topic, self._engine_or_start,
                                       self._emulation_or_start, strict=strict)
            if mode == _stock.UNDECIDED:
                return "native"
            self._kip_topic_modes[topic] = mode
            if mode == "native" and self._kip_mode == "auto":
                self._kip_direct = self._kip_direct_native
        return mode

    def _emulation_or_start(self) -> _stock.Emulation:
        """The stock-cluster emulation (kipproducer.stock), made at its first use."""
        if self._emulation is None:
            self._emulation = _stock.new_emulation(
                self._conf, self._emulated_bulk_send, self._emulated_bulk_settle,
                _stock.EngineTransactions(Producer, register_partition))
        return self._emulation

    def _emulated_bulk_send(self, topic: str, partition: int, values: list, keys, headers,
                            timestamps, on_delivery: Callable) -> None:
        """The emulation's plain lane: a run of records at the log end into the engine's bulk
        lane, not waited for; ``on_delivery`` gets its BatchDelivery reports."""
        self.produce_arrays(topic, values, keys=keys, headers=headers, timestamps=timestamps,
                            partition=partition, per_record=False, on_delivery=on_delivery)

    def _emulated_bulk_settle(self, done: Callable[[], bool], timeout_s: float) -> bool:
        """Serves the engine's reports (the bulk lane's) until ``done()``; False when it did
        not hold within ``timeout_s``."""
        engine = self._engine
        if engine is None:
            return done()
        deadline = time.monotonic() + timeout_s
        engine.begin_flush()
        try:
            while not done():
                if time.monotonic() > deadline:
                    return False
                self._serve_engine(0.005)
        finally:
            engine.end_flush()
        return True

    def init_transactions(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        """confluent-kafka's init_transactions([timeout]): InitProducerId for
        ``transactional.id`` (fencing any older producer with the same id). ``timeout`` in
        seconds; None or negative: transaction.timeout.ms, as librdkafka."""
        if self._txn is None:
            return super().init_transactions(*args, **kwargs)
        timeout = _timeout_arg("init_transactions", args, kwargs)
        self._txn.require(TxnState.INIT)
        self._engine_or_start()
        self._txn.init(timeout)

    def resume_transaction(self, producer_id: int, producer_epoch: int) -> None:
        """Two-phase commit: end a transaction that another producer with this
        ``transactional.id`` began and left open, known by its producer id and epoch (what
        :meth:`transaction_producer` returned there). Instead of init_transactions(); then
        only commit_transaction() or abort_transaction(). See docs/spark.md."""
        if self._txn is None:
            raise KafkaException(KafkaError(KafkaError._NOT_IMPLEMENTED, "resume_transaction "
                                            "needs transactional.id and the engine's "
                                            "transactions (not TLS / GSSAPI)"))
        self._engine_or_start()
        self._txn.resume(int(producer_id), int(producer_epoch))

    def transaction_producer(self) -> tuple[int, int]:
        """(producer id, epoch) of this transactional producer; (-1, -1) before
        init_transactions()."""
        if self._txn is None:
            raise KafkaException(KafkaError(KafkaError._NOT_IMPLEMENTED, "transaction_producer"
                                            " needs the engine's transactions"))
        return self._txn.producer_id, self._txn.producer_epoch

    def begin_transaction(self) -> None:  # type: ignore[override]
        if self._txn is None:
            return super().begin_transaction()
        self._txn.begin()

    def send_offsets_to_transaction(self, positions, group_metadata,  # type: ignore[override]
                                    *args: Any, **kwargs: Any) -> None:
        """confluent-kafka's send_offsets_to_transaction(positions, group_metadata,
        [timeout]): ``group_metadata`` is what ``Consumer.consumer_group_metadata()``
        returns, a :class:`GroupMetadata` (kipproducer.producer.GroupMetadata), or a group id
        string."""
        if self._txn is None:
            return super().send_offsets_to_transaction(positions, group_metadata, *args,
                                                       **kwargs)
        timeout = _timeout_arg("send_offsets_to_transaction", args, kwargs)
        self._txn.send_offsets(positions, group_metadata, timeout)

    def commit_transaction(self, *args: Any, positions: dict | None = None,
                           **kwargs: Any) -> None:  # type: ignore[override]
        """Flushes (serving delivery callbacks), then commits; see docs/producer.md.

        ``positions`` (producer groups, KIP-509): {source partition: position str or None},
        committed in this transaction with the member's generation (KIP-447); the
        ``update_offsets_cb`` hook is asked first (docs/producer-groups.md)."""
        if self._group is None:
            if positions is not None:
                raise KafkaException(KafkaError(
                    KafkaError._INVALID_ARG, "commit_transaction(positions=...) needs a "
                    "producer group (group.id and source.partition.count)"))
            return self._commit_txn_only(*args, **kwargs)
        group = self._group
        timeout = _timeout_arg("commit_transaction", args, kwargs)
        updates = group.prepare(positions, "commit_transaction")
        if updates:
            group.add_to_transaction(updates, timeout)
        self._commit_txn_only(*(() if timeout is None else (timeout,)))
        group.committed(updates)

    def _txn_state(self) -> TxnState | None:
        """The engine's transaction state (None: no engine transactions), for the group."""
        return None if self._txn is None else self._txn.state

    def _commit_txn_only(self, *args: Any, **kwargs: Any) -> None:
        if self._txn is None:
            return super().commit_transaction(*args, **kwargs)
        self._txn.commit(_timeout_arg("commit_transaction", args, kwargs), self.flush)
        if self._emulation is not None:
            self._emulation.txn_ended(committed=True)

    # ---- producer groups (KIP-509, KIP-910; producer_group.py) --------------------------------

    def _require_group(self, call: str) -> ProducerGroup:
        if self._group is None:
            raise KafkaException(KafkaError(
                KafkaError._INVALID_ARG, f"{call}() needs a producer group: set group.id and "
                "source.partition.count (docs/producer-groups.md)"))
        return self._group

    def subscribe(self, on_assign: Callable | None = None, on_revoke: Callable | None = None,
                  on_lost: Callable | None = None, *,
                  timeout: float | None = None) -> dict[int, str | None]:
        """Join the producer group; returns {source partition: position or None} for the
        partitions this member owns after its first assignment ({} for a standby member).
        ``on_assign(producer, {partition: position})``, ``on_revoke(producer, [partitions])``
        and ``on_lost(producer, [partitions])`` run later from inside this producer's calls.
        With ``transactional.id``, init_transactions() is called first when it was not.
        ``timeout`` (s; default positions.commit.timeout.ms) bounds the wait."""
        group = self._require_group("subscribe")
        if self._txn is not None and self._txn.state is TxnState.INIT:
            self.init_transactions()
        return group.subscribe(on_assign, on_revoke, on_lost, timeout)

    def alive(self) -> dict[int, str | None]:
        """Liveness while the source is idle: serves the group (callbacks run here) and the
        periodic positions commit. Returns the owned partitions and their positions."""
        group = self._require_group("alive")
        group.require_member()
        group.poll(0)
        group.periodic_commit()
        return dict(group.positions)

    def assignment_positions(self) -> dict[int, str | None]:
        """The owned source partitions and their last committed positions (no call out)."""
        return dict(self._require_group("assignment_positions").positions)

    def commit_positions(self, positions: dict, timeout: float = -1) -> None:
        """At-least-once mode (no transactional.id): flush the data, then commit
        {source partition: position str or None}; refused, with nothing committed, for a
        partition this member does not own."""
        group = self._require_group("commit_positions")
        if self._conf.get("transactional.id"):
            raise KafkaException(KafkaError(
                KafkaError._STATE, "commit_positions() is the at-least-once mode; with "
                "transactional.id commit positions with commit_transaction(positions=...)"))
        group.require_member()
        group.poll(0)
        group.check_owned(positions, "commit_positions")
        wait = None if timeout is None or timeout < 0 else float(timeout)
        deadline = None if wait is None else time.monotonic() + wait
        updates = group.prepare(positions, "commit_positions")
        delivered = group.write_records(updates)
        left = self.flush(-1 if wait is None else wait)
        if left:
            raise KafkaException(KafkaError(
                KafkaError._TIMED_OUT, f"commit_positions: {left} record(s) not delivered in "
                "time; no position was committed", retriable=True))
        if updates:
            group.check_owned(updates, "commit_positions")  # a callback may have run
            group.commit_direct(updates, group.offsets(updates, delivered),
                                None if deadline is None
                                else max(deadline - time.monotonic(), 0.1))

    def abort_transaction(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        """Drops records not sent yet (_PURGE_QUEUE), waits for those in flight, aborts."""
        if self._txn is None:
            return super().abort_transaction(*args, **kwargs)
        self._txn.abort(_timeout_arg("abort_transaction", args, kwargs), self.flush)
        if self._emulation is not None:
            self._emulation.txn_ended(committed=False)

    # ---- both lanes ---------------------------------------------------------------------------

    def _serve_engine(self, timeout: float | None, *, prompt: bool = True) -> int:
        engine = self._engine
        if engine is None:
            return 0
        served = 0
        done: dict[str, int] = {}  # records reported per topic, settled once per pile
        try:
            for report in engine.take_reports(timeout, prompt=prompt):
                batch = report.batch
                done[batch.topic] = done.get(batch.topic, 0) + batch.record_count
                served += self._deliver(report)
        finally:
            if done:
                engine.report_done(sum(done.values()))
                for topic, count in done.items():
                    self._lane_done(topic, ENGINE, count)
        return served

    def _deliver(self, report) -> int:
        batch = report.batch
        if getattr(report.error, "per_record", None) is not None:
            return self._deliver_per_record(report)
        decoded = None
        served = 0
        for start, end, target, callback in self._report_runs(batch):
            if target is None or not target.per_record:
                if batch.runs is None:
                    first = report.base_offset + start if report.base_offset >= 0 else -1
                    callback(report.error, BatchDelivery(batch.topic, batch.partition, first,
                                                         end - start, report.error))
                    served += 1
                    continue
                # Packed runs of explicit offsets: one report per Kafka batch (run), so a
                # report's offset() + count is still where its records end.
                served += report_runs(batch, start, end, report.base_offset >= 0, report.error,
                                      callback)
                continue
            if decoded is None:  # our own batch: no need to check its CRC again
                decoded = list(decode_batches(batch.data, validate=False))
            if len(decoded) == 1:
                served += decoded[0].deliver(start, end, report.base_offset, batch.topic,
                                             batch.partition, report.error, callback,
                                             confluent_kafka.Message, _TIMESTAMP_CREATE_TIME)
                continue
            first_index = 0  # packed runs: each RecordBatch reports its part of [start, end)
            for run in decoded:
                stop = first_index + run.record_count
                if stop > start and first_index < end:
                    served += run.deliver(
                        max(start, first_index) - first_index, min(end, stop) - first_index,
                        run.base_offset if report.base_offset >= 0 else -1, batch.topic,
                        batch.partition, report.error, callback, confluent_kafka.Message,
                        _TIMESTAMP_CREATE_TIME)
                first_index = stop
        return served

    def _report_runs(self, batch):
        """(first record, end, report target, callback) per run of a batch's records that
        share a report target and have a callback."""
        runs = batch.opaque_runs or [(0, None)]
        bounds = [start for start, _ in runs[1:]] + [batch.record_count]
        for (start, target), end in zip(runs, bounds, strict=True):
            callback = target.callback if target is not None else self._default_on_delivery
            if callback is not None:
                yield start, end, target, callback

    def _deliver_per_record(self, report) -> int:
        """A refused batch whose records each have their own error (per-key conditions,
        docs/protocol.md §10): one report per record, none of them written."""
        batch = report.batch
        errors = report.error.per_record
        decoded = None
        served = 0
        for start, end, target, callback in self._report_runs(batch):
            for index in range(start, end):
                if target is None or not target.per_record:
                    callback(errors[index], BatchDelivery(batch.topic, batch.partition, -1, 1,
                                                          errors[index]))
                else:
                    if decoded is None:
                        decoded = next(decode_batches(batch.data, validate=False))
                    decoded.deliver(index, index + 1, -1, batch.topic, batch.partition,
                                    errors[index], callback, confluent_kafka.Message,
                                    _TIMESTAMP_CREATE_TIME)
                served += 1
        return served

    def poll(self, timeout: float | None = None) -> int:  # type: ignore[override]
        if self._emulation is not None:
            emulated = self._emulation.serve()
            if emulated:
                return emulated + self.poll(0) if timeout != 0 else emulated
        if self._engine is None:
            return super().poll(-1 if timeout is None else timeout)
        deadline = None if timeout is None or timeout < 0 else time.monotonic() + timeout
        while True:
            served = self._serve_engine(0) + super().poll(0)
            remaining = None if deadline is None else deadline - time.monotonic()
            if served or (remaining is not None and remaining <= 0):
                return served
            slice_s = 0.01 if remaining is None else min(0.01, remaining)
            served = self._serve_engine(slice_s) + super().poll(0)
            if served:
                return served

    def flush(self, timeout: float | None = None) -> int:  # type: ignore[override]
        if self._emulation is not None:
            self._emulation.serve(final=True)
        if self._engine is None:
            return super().flush(-1 if timeout is None else timeout)
        engine = self._engine
        deadline = None if timeout is None or timeout < 0 else time.monotonic() + timeout
        engine.begin_flush()
        try:
            while len(self):
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    break
                # Callbacks run in piles every 5 ms, and at once when the last record is in.
                self._serve_engine(0.005, prompt=False)
                if super().__len__():  # librdkafka's flush(0) is not free: only when needed
                    super().flush(0 if len(engine) else min(0.1, remaining or 0.1))
            self._serve_engine(0)
        finally:
            engine.end_flush()
        return len(self)

    def __len__(self) -> int:
        return (super().__len__() + (len(self._engine) if self._engine is not None else 0)
                + (len(self._emulation) if self._emulation is not None else 0))

    def purge(self, in_queue: bool = True, in_flight: bool = True,  # type: ignore[override]
              blocking: bool = True) -> None:
        super().purge(in_queue=in_queue, in_flight=in_flight, blocking=blocking)
        if self._emulation is not None and in_queue:
            self._emulation.purge()
        if self._engine is not None and in_queue:
            self._engine.purge()

    def close(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        self._close_group()
        self._close_engine()
        parent = getattr(super(), "close", None)
        return parent(*args, **kwargs) if parent is not None else None

    def __exit__(self, *exc_info: Any) -> Any:
        # confluent-kafka's __exit__ flushes librdkafka only: the engine's records must be
        # delivered (and their callbacks served) too before the producer goes away.
        self._close_group()
        self._close_engine()
        return super().__exit__(*exc_info)

    def _close_group(self) -> None:
        group = getattr(self, "_group", None)
        if group is not None:
            group.close()

    def _close_engine(self) -> None:
        if self._emulation is not None:
            self._emulation.close()
        if self._engine is not None:
            self.flush(30)
            self._engine.close()

    def __del__(self) -> None:
        # Dropped without close(): let the sender thread finish what it holds and exit.
        engine = getattr(self, "_engine", None)
        if engine is not None:
            engine.close(timeout=0)


_accumulator.configure_produce(Producer._produce_general, confluent_kafka.Producer.produce,
                               ENGINE, _PRODUCE_KEYWORDS, Producer._kip_state)


def _one_partition(key, total: int, partitioner: str) -> int:
    """choose_partitions for one record, without numpy for the default partitioners (the
    per-record produce() of a transactional producer runs it for every record)."""
    if total == 1:
        return 0
    if partitioner in ("consistent", "consistent_random"):
        if isinstance(key, str):
            key = key.encode()
        if partitioner == "consistent_random" and not key:
            return random.randrange(total)
        return zlib.crc32(key or b"") % total  # librdkafka's crc32 is zlib's
    return int(choose_partitions([key], 1, total, partitioner)[0])


def _timeout_arg(call: str, args: tuple, kwargs: dict) -> float | None:
    """The optional ``timeout`` of confluent-kafka's transaction calls (seconds)."""
    if len(args) > 1 or set(kwargs) - {"timeout"} or (args and kwargs):
        raise TypeError(f"{call}() takes an optional timeout only")
    timeout = args[0] if args else kwargs.get("timeout")
    if timeout is not None and not isinstance(timeout, (int, float)):
        raise TypeError(f"{call}(): timeout must be a number of seconds")
    return None if timeout is None else float(timeout)


def _delivery_timeout_s(conf: dict) -> float:
    return client_config.value(conf, "delivery.timeout.ms") / 1000


# ---- kip mirror's entry points (mirror/writers.py) -------------------------------------------
# The mirror forwards fetched record batches through a target Producer's engine. These three
# calls are the whole of what it uses, so the Producer's attributes stay its own.


def forwards_fetched(producer: Producer) -> bool:
    """Whether ``producer`` takes fetched batches as they are: its engine runs the writes (a
    transactional configuration that keeps librdkafka's transactions does not)."""
    return not producer._transactional


def forward_fetched(producer: Producer, topic: str, partition: int, records: Any,
                    **batch: Any) -> tuple[int, int]:
    """Appends one fetched answer's records to ``producer`` (see Producer._forward_fetched for
    the fields); returns (records queued, the last one's source offset or -1)."""
    return producer._forward_fetched(topic, partition, records, **batch)


def emulation_of(producer: Producer) -> _stock.Emulation:
    """``producer``'s stock-cluster emulation (made at its first use): the preserve mirror
    asks it for fenced log ends and pads a copied partition to the source's position."""
    return producer._emulation_or_start()


def register_partition(producer: Producer, topic: str, partition: int,
                       timeout_s: float) -> None:
    """Adds ``topic[partition]`` to ``producer``'s open transaction (the engine's) without a
    record: see TransactionManager.register."""
    if producer._txn is None:
        raise KafkaException(KafkaError(KafkaError._STATE, "not a transactional producer "
                                        "running the engine's transactions"))
    producer._txn.register(topic, partition, timeout_s)


def wait_for_producer_id(producer: Producer, timeout_s: float) -> bool:
    """Starts ``producer``'s engine and waits up to ``timeout_s`` for its producer id: the first
    answer from the target, which says whether runs of offsets may share a batch
    (docs/protocol.md §9). Returns whether it came."""
    engine = producer._engine_or_start()
    deadline = time.monotonic() + timeout_s
    while engine.acc.producer_id < 0 and time.monotonic() < deadline:
        engine.check()
        time.sleep(0.005)
    return engine.acc.producer_id >= 0
