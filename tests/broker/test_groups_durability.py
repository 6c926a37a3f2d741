"""Committed offsets and group metadata survive restarts, crashes and torn writes."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from kipproducer.broker.groups import offset_store
from kipproducer.broker.groups.offset_store import (
    SNAPSHOT_NAME,
    GroupStore,
    GroupStoreError,
    decode_record,
    encode_record,
)
from kipproducer.protocol import error_codes as errors

if __package__:
    from .test_groups_support import join, join_new, make_coordinator, run, sync, sync_all
else:
    from test_groups_support import join, join_new, make_coordinator, run, sync, sync_all


def log_files(directory):
    return sorted(directory.glob("groups-*.log"))


async def stable_pair_with_commits(coordinator):
    """Two members, synced, with offsets committed. Returns the two join results."""
    a, b = await asyncio.gather(join_new(coordinator, "g"), join_new(coordinator, "g"))
    await sync_all(coordinator, "g", [a, b])
    result = await coordinator.commit_offsets(
        "g", a.generation_id, a.member_id, None, {("t", 0): (10, 2, "m0"), ("t", 1): (20, 2, "")}
    )
    assert set(result.values()) == {errors.NONE}
    await coordinator.commit_offsets("simple", -1, "", None, {("u", 3): (5, None, "admin")})
    return a, b


def test_clean_restart_restores_offsets_and_the_stable_group(tmp_path):
    async def first_life():
        async with make_coordinator(tmp_path, initial_rebalance_delay_ms=100) as coordinator:
            return await stable_pair_with_commits(coordinator)

    a, b = run(first_life)
    assert len(log_files(tmp_path)) == 1 and (tmp_path / SNAPSHOT_NAME).exists()
    assert log_files(tmp_path)[0].stat().st_size == 0, "close() compacts into the snapshot"

    async def second_life():
        async with make_coordinator(tmp_path) as coordinator:
            assert coordinator.fetch_offsets("g") == {
                ("t", 0): (10, 2, "m0"),
                ("t", 1): (20, 2, ""),
            }
            assert coordinator.fetch_offsets("simple") == {("u", 3): (5, -1, "admin")}
            description = coordinator.describe_group("g")
            assert description.state == "Stable" and description.protocol_name == "range"
            assert {m.member_id: m.assignment for m in description.members} == {
                a.member_id: b"assigned-to-" + a.member_id.encode(),
                b.member_id: b"assigned-to-" + b.member_id.encode(),
            }
            # the members carry on in the same generation as if nothing happened
            assert await coordinator.heartbeat("g", a.generation_id, a.member_id, None) == (
                errors.NONE
            )
            follower = a if a.member_id != a.leader_id else b
            again = await join(coordinator, "g", follower.member_id)
            assert again.error_code == errors.NONE
            assert again.generation_id == follower.generation_id
            assert (await sync(coordinator, "g", again)).assignment == (
                b"assigned-to-" + follower.member_id.encode()
            )
            # and commits keep working in that generation
            commit = await coordinator.commit_offsets(
                "g", a.generation_id, a.member_id, None, {("t", 0): (11, 2, None)}
            )
            assert commit == {("t", 0): errors.NONE}

    run(second_life)


def test_members_loaded_after_a_restart_must_heartbeat(tmp_path):
    async def first_life():
        async with make_coordinator(tmp_path, initial_rebalance_delay_ms=100) as coordinator:
            a, b = await asyncio.gather(
                join_new(coordinator, "g", session_ms=150, rebalance_ms=150),
                join_new(coordinator, "g", session_ms=150, rebalance_ms=150),
            )
            await sync_all(coordinator, "g", [a, b])

    run(first_life)

    async def second_life():
        async with make_coordinator(tmp_path) as coordinator:
            assert coordinator.describe_group("g").state == "Stable"
            await asyncio.sleep(0.5)
            description = coordinator.describe_group("g")
            assert description.state == "Empty" and description.members == []

    run(second_life)


def test_abrupt_stop_without_close_loses_nothing_acknowledged(tmp_path):
    async def first_life():
        coordinator = make_coordinator(tmp_path, initial_rebalance_delay_ms=100)
        await coordinator.start()
        return await stable_pair_with_commits(coordinator)
        # no close(): the loop just ends, as if the process died

    a, _ = run(first_life)
    assert log_files(tmp_path)[0].stat().st_size > 0

    async def second_life():
        async with make_coordinator(tmp_path) as coordinator:
            assert coordinator.fetch_offsets("g") == {
                ("t", 0): (10, 2, "m0"),
                ("t", 1): (20, 2, ""),
            }
            assert coordinator.fetch_offsets("simple") == {("u", 3): (5, -1, "admin")}
            description = coordinator.describe_group("g")
            assert description.state == "Stable"
            assert a.member_id in {m.member_id for m in description.members}

    run(second_life)


def test_torn_last_record_is_dropped_and_the_log_keeps_working(tmp_path, caplog):
    async def first_life():
        coordinator = make_coordinator(tmp_path)
        await coordinator.start()
        for offset in (1, 2, 3):
            await coordinator.commit_offsets("g", -1, "", None, {("t", 0): (offset, None, None)})

    run(first_life)
    (log,) = log_files(tmp_path)
    data = log.read_bytes()
    assert data.count(b"\n") == 3
    log.write_bytes(data[:-7])  # the crash hit in the middle of the third commit's write

    async def second_life():
        with caplog.at_level(logging.WARNING, logger="kipproducer.broker.groups"):
            coordinator = make_coordinator(tmp_path)
            await coordinator.start()
        assert "torn or damaged" in caplog.text
        assert coordinator.fetch_offsets("g") == {("t", 0): (2, -1, "")}
        await coordinator.commit_offsets("g", -1, "", None, {("t", 0): (4, None, None)})
        # abrupt again

    run(second_life)
    # recovery folded the intact records into a snapshot and started a fresh segment
    (new_log,) = log_files(tmp_path)
    assert new_log != log and new_log.read_bytes().count(b"\n") == 1

    async def third_life():
        async with make_coordinator(tmp_path) as coordinator:
            assert coordinator.fetch_offsets("g") == {("t", 0): (4, -1, "")}

    run(third_life)


def test_damaged_record_and_garbage_tail(tmp_path):
    async def first_life():
        coordinator = make_coordinator(tmp_path)
        await coordinator.start()
        for offset in (1, 2, 3):
            await coordinator.commit_offsets("g", -1, "", None, {("t", 0): (offset, None, None)})

    run(first_life)
    (log,) = log_files(tmp_path)
    lines = log.read_bytes().split(b"\n")
    # flip a byte in the second record: its CRC no longer matches
    lines[1] = lines[1].replace(b'"offsets"', b'"offsetz"', 1)
    log.write_bytes(b"\n".join(lines) + b"\x00\x00garbage")

    async def second_life():
        async with make_coordinator(tmp_path) as coordinator:
            assert coordinator.fetch_offsets("g") == {("t", 0): (1, -1, "")}

    run(second_life)


def test_compaction_and_restart(tmp_path):
    async def first_life():
        coordinator = make_coordinator(tmp_path, compact_log_after_bytes=600)
        await coordinator.start()
        for i in range(60):
            await coordinator.commit_offsets(
                f"g{i % 3}", -1, "", None, {("t", i % 4): (i, None, f"meta-{i}")}
            )
        assert len(log_files(tmp_path)) == 1
        assert log_files(tmp_path)[0].stat().st_size < 600
        return {f"g{k}": coordinator.fetch_offsets(f"g{k}") for k in range(3)}

    expected = run(first_life)
    snapshot = json.loads((tmp_path / SNAPSHOT_NAME).read_text())
    assert snapshot["segment"] > 1, "several compactions happened"

    async def second_life():
        async with make_coordinator(tmp_path) as coordinator:
            assert {f"g{k}": coordinator.fetch_offsets(f"g{k}") for k in range(3)} == expected

    run(second_life)


def test_crash_in_the_middle_of_a_compaction(tmp_path):
    async def first_life():
        coordinator = make_coordinator(tmp_path)
        await coordinator.start()
        await coordinator.commit_offsets("g", -1, "", None, {("t", 0): (1, None, None)})

    run(first_life)
    (log,) = log_files(tmp_path)
    # the next segment was created but the snapshot naming it was never renamed into place
    stray = log.with_name("groups-%020d.log" % (int(log.stem.split("-")[1]) + 1))
    stray.write_bytes(b"half-written")
    (tmp_path / (SNAPSHOT_NAME + ".tmp")).write_bytes(b"{not json")

    async def second_life():
        async with make_coordinator(tmp_path) as coordinator:
            assert coordinator.fetch_offsets("g") == {("t", 0): (1, -1, "")}
        assert not (tmp_path / (SNAPSHOT_NAME + ".tmp")).exists()
        assert len(log_files(tmp_path)) == 1

    run(second_life)


def test_static_member_replacement_and_deletes_are_durable(tmp_path):
    async def first_life():
        coordinator = make_coordinator(tmp_path, initial_rebalance_delay_ms=100)
        await coordinator.start()
        results = await asyncio.gather(
            join(coordinator, "g", instance_id="i1"), join(coordinator, "g", instance_id="i2")
        )
        await sync_all(coordinator, "g", list(results))
        restarted = await join(coordinator, "g", instance_id="i1")
        await coordinator.commit_offsets("gone", -1, "", None, {("t", 0): (1, None, None)})
        assert coordinator.delete_groups(["gone"]) == {"gone": errors.NONE}
        old = next(r for r in results if r.member_id != restarted.member_id and "i1" in r.member_id)
        return old, restarted

    old, restarted = run(first_life)

    async def second_life():
        async with make_coordinator(tmp_path) as coordinator:
            generation = restarted.generation_id
            assert await coordinator.heartbeat("g", generation, old.member_id, "i1") == (
                errors.FENCED_INSTANCE_ID
            )
            assert await coordinator.heartbeat("g", generation, restarted.member_id, "i1") == (
                errors.NONE
            )
            assert coordinator.fetch_offsets("gone") == {}
            assert "gone" not in {g.group_id for g in coordinator.list_groups()}

    run(second_life)


def test_a_failed_write_is_reported_and_leaves_no_trace(tmp_path, monkeypatch):
    async def body():
        async with make_coordinator(tmp_path) as coordinator:
            await coordinator.commit_offsets("g", -1, "", None, {("t", 0): (1, None, None)})
            real_write_all = offset_store._write_all

            def failing_write_all(fd, data):
                real_write_all(fd, data[:5])  # a partial write, then the disk gives up
                raise OSError(28, "No space left on device")

            monkeypatch.setattr(offset_store, "_write_all", failing_write_all)
            failed = await coordinator.commit_offsets(
                "g", -1, "", None, {("t", 0): (2, None, None)}
            )
            assert failed == {("t", 0): errors.NOT_COORDINATOR}
            assert coordinator.fetch_offsets("g") == {("t", 0): (1, -1, "")}
            monkeypatch.setattr(offset_store, "_write_all", real_write_all)
            ok = await coordinator.commit_offsets("g", -1, "", None, {("t", 0): (3, None, None)})
            assert ok == {("t", 0): errors.NONE}

    run(body)

    async def after_restart():
        async with make_coordinator(tmp_path) as coordinator:
            assert coordinator.fetch_offsets("g") == {("t", 0): (3, -1, "")}

    run(after_restart)


def test_record_encoding():
    record = {"type": "group_deleted", "group_id": "g\nwith newline"}
    line = encode_record(record)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert decode_record(line[:-1]) == record
    assert decode_record(line[:-3]) is None
    assert decode_record(b"zzzzzzzz " + line[9:-1]) is None
    assert decode_record(b"") is None


def test_unreadable_snapshot_is_an_error_not_a_silent_reset(tmp_path):
    (tmp_path / SNAPSHOT_NAME).write_text('{"format": 99, "segment": 0, "groups": []}')
    with pytest.raises(GroupStoreError):
        GroupStore(tmp_path).open()
