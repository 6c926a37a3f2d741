"""OS crashes, simulated (the matrix's rows "OS crash" and "a crash during a segment roll,
retention deletion or compaction swap").

The partition log of the broker (its storage code, in this process) takes appends under the
crash simulator (crash_sim.py), which records a crash point before every file operation and
derives from each the states an OS crash may leave: unsynced data lost, kept, cut at any
byte, or with pages lost. Every state is recovered by opening the log, and checked:

- with ``flush.messages=1`` every append that returned before the crash survives at its
  offset;
- with either setting the log is a gap-free prefix of what was appended, every record at its
  offset with its value (no garbage, nothing never produced), and the next append continues
  at its end;
- opening never fails (no crash loop).

Small segments make the workload roll often, so crash points fall inside rolls too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from crash_sim import CrashPoint, CrashTracer, materialized_states

from kipproducer.broker.storage import LogConfig, LogOfflineError, PartitionLog
from kipproducer.records import decode_batches, encode_batch

APPENDS = 30


def _batch(i: int) -> bytearray:
    records = [(b"k%d" % i, b"value-%d-%d-" % (i, j) + b"z" * 150, None, 1000 + i)
               for j in range(1 + i % 3)]
    return bytearray(encode_batch(records))


def _read_all(log: PartitionLog) -> list[tuple[int, bytes]]:
    return [(offset, value) for offset, _, value in _read_all_keyed(log)]


def _traced(root: Path, config: LogConfig, monkeypatch,
            step: Callable[[PartitionLog, int], None], steps: int = 40) -> CrashTracer:
    """Run ``step(log, i)`` ``steps`` times on a new partition log under the crash tracer,
    the broker's flush timer after each, then close the log; the tracer with its points."""
    tracer = CrashTracer(root)
    tracer.install(monkeypatch)
    log = PartitionLog(root / "t-0", config)
    for i in range(steps):
        step(log, i)
        log.flush_if_due()
    log.close()
    monkeypatch.undo()
    return tracer


def _recovered_states(tracer: CrashTracer, config: LogConfig, *, seed: int
                      ) -> Iterator[tuple[CrashPoint, str, PartitionLog]]:
    """(crash point, its description, the log recovered from it) for each crash state; the
    log is opened (recovered) here, checked by the caller, closed here. Opening never makes a
    partition offline."""
    for point, where, crashed in materialized_states(tracer.points, seed=seed):
        recovered = PartitionLog(crashed / "t-0", config)
        assert not recovered.offline, where
        yield point, where, recovered
        recovered.close()


def _recover_every_state(tracer: CrashTracer, config: LogConfig,
                         allowed: Callable[[CrashPoint], list[tuple[int, bytes]]],
                         must_have: Callable[[CrashPoint], int], *, seed: int) -> int:
    """Check each crash state: ``allowed(point)`` are the records the log may hold, in order
    (it must hold a prefix of them), at least ``must_have(point)`` of them (the
    acknowledged); the next append continues at its end. Returns how many states."""
    states = 0
    for point, where, recovered in _recovered_states(tracer, config, seed=seed):
        states += 1
        got = _read_all(recovered)
        assert got == allowed(point)[: len(got)], where  # a gap-free prefix, no garbage
        assert recovered.log_end_offset == len(got), where
        lost = must_have(point) - len(got)
        assert lost <= 0, f"{where}: {lost} acknowledged records lost"
        assert recovered.append(_batch(0), assign_offsets=True).base_offset == len(got), where
    return states


@pytest.mark.parametrize("flush_messages", [None, 1], ids=["default-flush", "flush-every"])
def test_every_os_crash_state_recovers_to_a_clean_prefix(tmp_path: Path, monkeypatch,
                                                        flush_messages) -> None:
    settings = {"segment_bytes": 1500, "index_interval_bytes": 200}
    if flush_messages is not None:
        settings["flush_messages"] = flush_messages
    config = LogConfig.of(**settings)
    root = tmp_path / "live"
    directory = root / "t-0"
    tracer = CrashTracer(root)
    tracer.install(monkeypatch)
    log = PartitionLog(directory, config)
    appended: list[tuple[int, bytes]] = []  # (offset, value) of every record appended
    acked_at: list[tuple[int, int]] = []  # (operations before the append returned, records)
    for i in range(APPENDS):
        buf = _batch(i)
        result = log.append(buf, assign_offsets=True)
        batch = next(decode_batches(buf, validate=True, strict=False))
        appended.extend((result.base_offset + k, r.value) for k, r in enumerate(batch))
        acked_at.append((tracer.operations, len(appended)))
        log.flush_if_due()  # the broker's timer: rolled segments are flushed
        if i % 10 == 9:
            log.checkpoint()
    log.close()
    monkeypatch.undo()
    assert len(tracer.points) >= 100

    def must_have(point: CrashPoint) -> int:
        if flush_messages != 1:
            return 0
        return max((n for ops, n in acked_at if ops <= point.index), default=0)

    states = _recover_every_state(tracer, config, lambda point: appended, must_have, seed=45)
    assert states >= 400


def test_a_failed_fsync_is_not_durable_in_any_crash_state(tmp_path: Path, monkeypatch) -> None:
    """flush.messages=1 and the 12th fsync of a segment fails (EIO): the append is refused
    (LogOfflineError, KAFKA_STORAGE_ERROR) and cut, the reopened log (a restart) ends at the
    last acknowledged record and takes the rest; in every crash state, before and after the
    restart, every acknowledged append survives and nothing else but a prefix of the
    refused batch (before its cut) or of what came after it."""
    config = LogConfig.of(segment_bytes=1500, index_interval_bytes=200, flush_messages=1)
    root = tmp_path / "live"
    directory = root / "t-0"
    tracer = CrashTracer(root, fail_fsync_at=12)
    tracer.install(monkeypatch)
    log = PartitionLog(directory, config)
    acked: list[tuple[int, bytes]] = []
    refused: list[tuple[int, bytes]] = []
    acked_at: list[tuple[int, int]] = []
    reopened_at = None
    for i in range(20):
        buf = _batch(i)
        values = [r.value for r in next(decode_batches(bytes(buf), validate=True, strict=False))]
        try:
            result = log.append(buf, assign_offsets=True)
        except LogOfflineError:
            assert not refused, "a second failure"
            refused = [(len(acked) + k, v) for k, v in enumerate(values)]
            log.close()
            reopened_at = tracer.operations
            log = PartitionLog(directory, config)  # the broker restarts on the same files
            assert log.log_end_offset == len(acked)
            continue
        acked.extend((result.base_offset + k, v) for k, v in enumerate(values))
        acked_at.append((tracer.operations, len(acked)))
    log.close()
    monkeypatch.undo()
    assert refused and reopened_at is not None
    before_restart = acked[: refused[0][0]] + refused

    states = _recover_every_state(
        tracer, config,
        lambda point: before_restart if point.index < reopened_at else acked,
        lambda point: max((n for ops, n in acked_at if ops <= point.index), default=0),
        seed=4545)
    assert states >= 400


def test_a_crash_during_compaction_loses_or_doubles_no_segment(tmp_path: Path,
                                                               monkeypatch) -> None:
    """cleanup.policy=compact with compaction passes among the appends (each cleaned segment
    is written beside the old one and swapped in by a rename): in every crash state the
    offsets read are strictly increasing (no segment read twice), every record is the one
    appended at its offset, and each key's last record below the log end is there (no
    segment lost)."""
    config = LogConfig.of(segment_bytes=1200, index_interval_bytes=200, cleanup_policy="compact",
                          min_cleanable_dirty_ratio=0.01)
    appended: dict[int, tuple[bytes, bytes]] = {}  # offset -> (key, value)
    compacted = 0

    def step(log: PartitionLog, i: int) -> None:
        nonlocal compacted
        key = b"key-%d" % (i % 5)
        value = b"value-%d-" % i + b"c" * 150
        result = log.append(bytearray(encode_batch([(key, value, None, 1000 + i)])),
                            assign_offsets=True)
        appended[result.base_offset] = (key, value)
        if i % 8 == 7:
            compacted += log.compact().segments_cleaned

    tracer = _traced(tmp_path / "live", config, monkeypatch, step)
    assert compacted, "no compaction pass cleaned a segment"

    states = 0
    for _, where, recovered in _recovered_states(tracer, config, seed=46):
        states += 1
        got = _read_all_keyed(recovered)
        offsets = [offset for offset, _, _ in got]
        assert offsets == sorted(set(offsets)), f"{where}: offsets doubled or unordered"
        assert all(appended[o] == (k, v) for o, k, v in got), f"{where}: garbage"
        end = recovered.log_end_offset
        last = {k: o for o, (k, _) in sorted(appended.items()) if o < end}
        assert set(last.values()) <= set(offsets), f"{where}: a key's last record lost"
    assert states >= 400


def _read_all_keyed(log: PartitionLog) -> list[tuple[int, bytes, bytes]]:
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        result = log.read(offset, 1 << 20)
        if not result.records:
            break
        for batch in decode_batches(result.records, validate=True, strict=False):
            out.extend((r.offset, r.key, r.value) for r in batch)
        offset = result.next_offset
    return out


def test_a_crash_during_retention_leaves_a_gap_free_suffix(tmp_path: Path, monkeypatch) -> None:
    """retention.bytes deletes the oldest segments among the appends (the log start moves in
    partition-state.json, then the files go): in every crash state the log holds every record
    from its log start to its end, each the one appended at its offset (a deleted segment may
    come back only whole, nothing in the middle goes missing)."""
    config = LogConfig.of(segment_bytes=1200, index_interval_bytes=200, retention_bytes=3000)
    appended: list[tuple[int, bytes]] = []
    deleted = 0

    def step(log: PartitionLog, i: int) -> None:
        nonlocal deleted
        buf = _batch(i)
        result = log.append(buf, assign_offsets=True)
        batch = next(decode_batches(buf, validate=True, strict=False))
        appended.extend((result.base_offset + k, r.value) for k, r in enumerate(batch))
        if i % 6 == 5:
            deleted += log.apply_retention()

    tracer = _traced(tmp_path / "live", config, monkeypatch, step)
    assert deleted, "retention deleted nothing"

    states = 0
    for _, where, recovered in _recovered_states(tracer, config, seed=47):
        states += 1
        start, end = recovered.log_start_offset, recovered.log_end_offset
        assert _read_all(recovered) == appended[start:end], where
        assert recovered.append(_batch(0), assign_offsets=True).base_offset == end, where
    assert states >= 400
