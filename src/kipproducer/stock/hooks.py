"""The Producer's entry points into the emulation: small functions producer.py calls where a
KIP call meets a topic in emulated mode, so the Producer itself changes only by a few lines.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from ..client_config import parse_bool
from ..errors import (
    KEY_OFFSET_MISMATCH,
    OffsetOrderError,
    ProduceOffsetKafkaError,
    raise_for,
)
from ..protocol.wire_extensions import FEATURE_PRODUCE_CONDITIONAL, FEATURE_PRODUCE_OFFSETS
from .emulation import Emulation, EngineTransactions
from .probe import EmulationUnsupported
from .rows import Rows, Sink
from .txn_keys import LandingCheck  # noqa: F401 - the Producer takes it from here

log = logging.getLogger("kipproducer.stock")
#: The longest the emulation waits for an acknowledgement, a marker or a decided transaction.
MAX_WAIT_S = 60.0


def new_emulation(conf: Mapping[str, Any], bulk_send: Callable, bulk_settle: Callable,
                  engine_transactions: EngineTransactions) -> Emulation:
    """The emulation of a Producer with configuration ``conf``; ``bulk_send`` writes a run at
    the log end into the Producer's engine lane without waiting and ``bulk_settle`` serves
    that lane's reports until a condition holds (see Producer._emulated_bulk_send);
    ``engine_transactions``: what the gap transactions need of the Producer's engine."""
    timeout = int(conf.get("message.timeout.ms", conf.get("delivery.timeout.ms", 300_000)))
    return Emulation(
        conf, transactional_id=str(conf.get("kip.emulation.transactional.id", "")),
        probe_topic=str(conf.get("kip.emulation.probe.topic", "kip-emulation-probe")),
        engine_transactions=engine_transactions, timeout_s=min(MAX_WAIT_S, timeout / 1000),
        bulk_send=bulk_send, bulk_settle=bulk_settle,
        key_retention=parse_bool(conf.get("kip.emulation.key.retention", False)),
        key_index_topic=str(conf.get("kip.emulation.key.index.topic", "")))


#: resolve_mode()'s answer when the topic's leaders cannot be asked now (no metadata: a
#: refused login, no Describe on the topic, no such topic): the call takes the native path,
#: whose records are failed with the reason one by one, and the mode is asked again next time.
UNDECIDED = "undecided"


def resolve_mode(configured: str, topic: str, engine: Callable[[], Any],
                 emulation: Callable[[], Emulation], *, strict: bool = False) -> str:
    """kip.mode for one topic: ``native``, ``emulated``, or with auto, where the leaders lack
    the features and the emulation is refused too, ``unsupported``: the calls then take the
    native path, whose records fail locally with "unsupported by broker" as before, and the
    probe's reason is logged once. With kip.mode=emulated a refused probe raises. With auto,
    leaders that cannot be asked give UNDECIDED, or with ``strict`` raise why."""
    if configured == "native":
        return "native"
    if configured == "auto":
        try:
            if _leaders_native(engine(), topic):
                return "native"
        except KafkaException as exc:
            if strict or exc.args[0].code() == KafkaError._INCONSISTENT:
                raise
            return UNDECIDED
    try:
        emulation().probe()
    except EmulationUnsupported as exc:
        if configured == "emulated":
            raise
        log.warning("kip.mode=auto: %r gets no KIP call: its brokers do not announce %r / %r "
                    "(native mode) and %s", topic, FEATURE_PRODUCE_OFFSETS,
                    FEATURE_PRODUCE_CONDITIONAL, exc.args[0].str())
        return "unsupported"
    return "emulated"


def unsupported_error(emulation: Emulation, topic: str) -> KafkaException:
    """What kip_mode() raises for a topic where neither mode works (kip.mode=auto)."""
    try:
        emulation.probe()
    except EmulationUnsupported as exc:
        why = exc.args[0].str()
    else:  # (cannot happen: the verdict is remembered)
        why = "the emulation was refused"
    return KafkaException(KafkaError(
        KafkaError._UNSUPPORTED_FEATURE,
        f"offset= / expected_offset= to {topic!r} are unsupported by this cluster: its "
        f"brokers do not announce {FEATURE_PRODUCE_OFFSETS!r} / "
        f"{FEATURE_PRODUCE_CONDITIONAL!r} (native mode, docs/protocol.md), and {why}"))


def _leaders_native(engine: Any, topic: str) -> bool:
    try:
        native = engine.leaders_announce(topic, (FEATURE_PRODUCE_OFFSETS,
                                                 FEATURE_PRODUCE_CONDITIONAL))
    except LookupError as exc:
        code = exc.args[0]
        detail = f" ({exc.args[1]})" if len(exc.args) > 1 else ""
        raise KafkaException(KafkaError(code, f"topic {topic!r}: "
                                        f"{KafkaError(code).name()}{detail}")) from None
    if all(native):
        return True
    if any(native):
        raise KafkaException(KafkaError(
            KafkaError._INCONSISTENT,
            f"kip.mode=auto: some leaders of {topic!r} announce the KIP-WIRE features and "
            "some do not (an upgrade under way?); set kip.mode=native or kip.mode=emulated"))
    return False


def produce_one(emulation: Emulation, topic: str, partition: int, key, value, headers, timestamp,
                offset: int | None, expected: int | None, callback: Callable | None) -> None:
    rows = Rows.one(offset, key, value, headers, timestamp,
                    Sink(callback, True, topic, partition))
    if offset is not None:
        emulation.offsets(topic, partition, rows)
    else:
        emulation.conditional(topic, partition, [rows], expected)


def produce_arrays(emulation: Emulation, topic: str, values, keys, headers, timestamps, partition,
                   callback: Callable | None, per_record: bool, offsets,
                   expected: int | None) -> int:
    """An emulated produce_arrays: the columns are cut per partition, never per record."""
    import numpy as np

    from ..record_fields import as_list as _as_list
    from ..record_fields import per_record_headers as _per_record_headers

    def held(column: Any) -> Any:
        """The column as the emulation may hold it past this call: a numpy object array is
        copied as an array (its references: about a hundredth of what a list of a million
        costs to build), anything else becomes a list. A copy either way, so a caller that
        refills its arrays for the next call does not change records still held."""
        if isinstance(column, np.ndarray) and column.dtype == object and column.ndim == 1:
            return column.copy()
        return _as_list(column)

    values = held(values)
    n = len(values)
    key_col = held(keys) if keys is not None else None
    stamps = np.array(timestamps, dtype=np.int64) if timestamps is not None else None
    if headers is None:
        rows = None
    elif _per_record_headers(headers, n):
        rows = list(headers)
    else:
        rows = [headers] * n
    if any(col is not None and len(col) != n for col in (key_col, stamps, rows)):
        raise ValueError("keys, headers, timestamps and values must have the same length")
    parts = (None if isinstance(partition, int)
             else np.asarray([int(p) for p in partition], dtype=np.int64))
    if parts is not None and len(parts) != n:
        raise ValueError("partition and values must have the same length")
    if expected is not None:
        first = int(parts[0]) if parts is not None and n else partition
        sink = Sink(callback, per_record, topic, first)
        emulation.conditional(topic, first, [Rows(None, key_col, values, rows, stamps, sink)],
                              expected)
        return n
    asked = np.array(offsets, dtype=np.int64)  # a copy: held past this call
    if len(asked) != n:
        raise ValueError("offsets and values must have the same length")
    if not n:
        return 0
    if int(asked.min()) < 0:
        raise ValueError(f"offset must be >= 0, not {int(asked.min())}")
    if parts is None or bool((parts == parts[0]).all()):
        groups = [(int(partition) if parts is None else int(parts[0]), None)]
    else:
        groups = [(int(p), np.flatnonzero(parts == p)) for p in np.unique(parts)]
    for _, index in groups:
        mine = asked if index is None else asked[index]
        steps = np.diff(mine)
        if len(steps) and int(steps.min()) <= 0:
            bad = int(np.flatnonzero(steps <= 0)[0]) + 1
            at = bad if index is None else int(index[bad])
            raise OffsetOrderError(f"explicit offsets must strictly increase per partition: "
                                   f"offset {int(mine[bad])} at index {at} does "
                                   f"not follow {int(mine[bad - 1])}")
    for p, index in groups:
        sink = Sink(callback, per_record, topic, p)
        if index is None:
            part = Rows(asked, key_col, values, rows, stamps, sink)
        else:
            pick = index.tolist()
            part = Rows(asked[index], None if key_col is None else [key_col[i] for i in pick],
                        [values[i] for i in pick],
                        None if rows is None else [rows[i] for i in pick],
                        None if stamps is None else stamps[index], sink)
        emulation.offsets(topic, p, part)
    return n


def produce_batch(emulation: Emulation, topic: str, messages: list[dict], partition: int,
                  callback: Callable | None) -> int:
    """An emulated produce_batch: messages in order; ``offset`` ones as offsets, runs of
    ``expected_offset`` ones (same partition, consecutive expectations) as one conditional
    batch each, the others as plain records. Every message needs a partition here."""
    queued = 0
    group: list[Rows] = []
    group_start = group_part = -1

    def close_group() -> None:
        nonlocal group
        if group:
            emulation.conditional(topic, group_part, group, group_start)
            group = []

    for m in messages:
        part = m.get("partition", partition)
        part = -1 if part is None else part
        if part < 0:
            m["_error"] = KafkaError(KafkaError._INVALID_ARG, "an emulated produce_batch "
                                     "(offset / expected_offset keys) needs each message's "
                                     "partition")
            continue
        if "offset" in m and "expected_offset" in m:
            m["_error"] = KafkaError(KafkaError._INVALID_ARG, "give offset (KIP-391) or "
                                     "expected_offset (KIP-27), not both")
            continue
        sink = Sink(m.get("callback") or m.get("on_delivery") or callback, True, topic, part)
        rec = Rows.one(int(m["offset"]) if "offset" in m else None, m.get("key"),
                       m.get("value"), m.get("headers"), m.get("timestamp"), sink)
        expected = m.get("expected_offset")
        if expected is not None and group and part == group_part \
                and expected == group_start + len(group):
            group.append(rec)
        else:
            close_group()
            if expected is not None:
                group, group_start, group_part = [rec], int(expected), part
            elif "offset" in m:
                emulation.offsets(topic, part, rec)
            else:
                emulation.plain(topic, part, rec)
        queued += 1
    close_group()
    return queued


def key_conditional(emulation: Emulation, topic: str, partition: int, group: list[tuple],
                    target: Any, partitions: int) -> None:
    """One partition's records of a call with key conditions (rows: partition, key, value,
    headers, timestamp, expected key offset or None / NO_KEY_CONDITION, report target or
    None for ``target``), partitioned with ``partitions``."""
    parts, expected = _key_parts(topic, partition, group, target)
    emulation.key_conditional(topic, partition, parts, expected, partitions)


def txn_key_conditional(emulation: Emulation, topic: str, partition: int, group: list[tuple],
                        target: Any, partitions: int, touched: bool) -> int | KafkaError:
    """key_conditional inside the Producer's own open transaction (Emulation.
    txn_key_conditional): the offset the records must land at, or the error that fails
    the transaction."""
    parts, expected = _key_parts(topic, partition, group, target)
    return emulation.txn_key_conditional(topic, partition, parts, expected, partitions,
                                         touched=touched)


def _key_parts(topic: str, partition: int, group: list[tuple],
               target: Any) -> tuple[list[Rows], list[int | None]]:
    """The rows as columns, one part per run of records with the same report target, and
    each record's condition (None: none)."""
    import numpy as np

    parts: list[Rows] = []
    expected: list[int | None] = []
    run: list[tuple] = []

    def close_run() -> None:
        if not run:
            return
        sink_of = run[0][6] or target
        stamps = [row[4] or 0 for row in run]
        parts.append(Rows(None, [row[1] for row in run], [row[2] for row in run],
                          [row[3] for row in run] if any(row[3] for row in run) else None,
                          np.array(stamps, np.int64) if any(stamps) else None,
                          Sink(sink_of.callback, sink_of.per_record, topic, partition)))
        run.clear()

    for row in group:
        if run and (row[6] or target) is not (run[0][6] or target):
            close_run()
        run.append(row)
        wanted = row[5]
        expected.append(None if wanted is None or wanted < -1 else int(wanted))
    close_run()
    return parts, expected


def _first_failure(outcome: list) -> KafkaError | None:
    """The error append() raises of its reports ``(err, report)``: a failed key condition
    before the others (the records refused with it only because it failed carry
    OPERATION_NOT_ATTEMPTED), else the first in delivery order; None when all succeeded."""
    errors = [err for err, _ in outcome if err is not None]
    return next((err for err in errors if err.code() == KEY_OFFSET_MISMATCH),
                errors[0] if errors else None)


def append_verdict(outcome: list, where: str = "append",
                   unreachable: str | None = None) -> int:
    """What append() returns or raises once every report of the call is in. ``unreachable``:
    why no broker ever answered (a timed-out record's error then says so, after ``where``)."""
    err = _first_failure(outcome)
    if err is not None:
        if isinstance(err, ProduceOffsetKafkaError):
            raise_for(err)
        if unreachable and err.code() == KafkaError._MSG_TIMED_OUT:
            err = KafkaError(err.code(), f"{where}: {err.str()}: {unreachable}")
        raise KafkaException(err)
    return min(report.offset() for _, report in outcome) if outcome else -1
