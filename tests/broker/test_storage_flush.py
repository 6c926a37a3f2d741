"""Flush policy (flush.messages, flush.ms, rolled segments) and concurrent use."""

from __future__ import annotations

import os
import threading

import pytest

from kipproducer.broker.storage import LogConfig, PartitionLog


@pytest.fixture
def fsync_calls(monkeypatch):
    calls = []
    real_fsync = os.fsync

    def counting_fsync(fd):
        calls.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    return calls


def test_flush_messages_1_fsyncs_every_append_before_it_returns(tmp_path, kit, fsync_calls):
    log = PartitionLog(tmp_path / "t-0", LogConfig.of(flush_messages=1))
    fsync_calls.clear()
    for i in range(5):
        log.append(kit.batch(kit.values(2)), assign_offsets=True)
        assert len(fsync_calls) == i + 1
        assert log.recovery_point == log.log_end_offset
    assert not log.has_unflushed_data()
    log.close()


def test_flush_messages_counts_records(tmp_path, kit, fsync_calls):
    log = PartitionLog(tmp_path / "t-0", LogConfig.of(flush_messages=5))
    fsync_calls.clear()
    log.append(kit.batch(kit.values(3)), assign_offsets=True)
    assert fsync_calls == []
    log.append(kit.batch(kit.values(3)), assign_offsets=True)
    assert len(fsync_calls) == 1
    log.close()


def test_default_policy_leaves_flushing_to_the_os(tmp_path, kit, fsync_calls):
    log = PartitionLog(tmp_path / "t-0")
    fsync_calls.clear()
    for _ in range(20):
        log.append(kit.batch(kit.values(2)), assign_offsets=True)
    assert fsync_calls == []
    assert log.has_unflushed_data() and log.recovery_point == 0
    assert not log.flush_if_due()
    log.close()  # close flushes
    assert fsync_calls


def test_flush_ms_flushes_by_the_timer_and_a_roll_flushes_the_rolled_segment(
        tmp_path, kit, fsync_calls):
    log = PartitionLog(tmp_path / "t-0", LogConfig.of(flush_ms=1000))
    log.append(kit.batch(kit.values(2)), assign_offsets=True)
    fsync_calls.clear()
    now = log.last_flush_ms
    assert not log.flush_if_due(now + 500)
    assert log.flush_if_due(now + 1000)
    assert fsync_calls and log.recovery_point == 2
    assert not log.flush_if_due(now + 5000)  # nothing new to flush

    log.update_config(LogConfig())
    log.append(kit.batch(kit.values(2)), assign_offsets=True)
    fsync_calls.clear()
    log.roll()  # the rolled segment is fsynced before its successor is created
    assert fsync_calls and log.recovery_point == 4
    assert not log.flush_if_due(now)
    log.close()


def test_concurrent_appends_and_reads(tmp_path, kit):
    log = PartitionLog(tmp_path / "t-0", LogConfig.of(segment_bytes=4000, flush_messages=7))
    errors = []
    per_thread = 150

    def writer(tag):
        try:
            for i in range(per_thread):
                log.append(kit.batch([(tag, b"%d" % i)]), assign_offsets=True)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def reader():
        try:
            offset = 0
            while offset < 3 * per_thread:
                result = log.read(offset, 2000)
                offset = result.next_offset
                kit.records(result.records)  # every returned batch is whole and valid
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(t,)) for t in (b"a", b"b", b"c")]
    threads += [threading.Thread(target=reader) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    records = kit.read_all(log)
    assert [r.offset for r in records] == list(range(3 * per_thread))
    for tag in (b"a", b"b", b"c"):
        assert [r.value for r in records if r.key == tag] == [b"%d" % i for i in range(per_thread)]
    log.close()
