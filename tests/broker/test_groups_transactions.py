"""Transactional offset commits (TxnOffsetCommit, KIP-98 / KIP-447) in the group coordinator:
pending offsets, their commit or abort, durability, zombie fencing and retention."""

from __future__ import annotations

import asyncio
import json

from kipproducer.broker.groups import GroupCoordinatorNotActive, offset_store
from kipproducer.broker.groups.offset_store import SNAPSHOT_NAME, decode_record, encode_record
from kipproducer.protocol import error_codes as errors

if __package__:
    from .test_groups_support import join, join_new, make_coordinator, run, sync, sync_all
else:
    from test_groups_support import join, join_new, make_coordinator, run, sync, sync_all

PID, EPOCH = 4000, 0
NO_MEMBER = ("", -1, None)  # TxnOffsetCommit v0-2: no member id, generation or instance id


async def txn_commit(coordinator, group, offsets, *, pid=PID, epoch=EPOCH, member=NO_MEMBER):
    member_id, generation, instance_id = member
    return await coordinator.txn_commit_offsets(
        group, pid, epoch, member_id, generation, instance_id, offsets
    )


def log_records(directory):
    (log,) = sorted(directory.glob("groups-*.log"))
    return [decode_record(line) for line in log.read_bytes().splitlines()]


async def stable_group(coordinator, group="g", **join_kwargs):
    """One member, joined and synced: its JoinResult."""
    member = await join_new(coordinator, group, **join_kwargs)
    synced = await sync(
        coordinator,
        group,
        member,
        {member.member_id: b"a"},
        instance_id=join_kwargs.get("instance_id"),
    )
    assert synced.error_code == errors.NONE
    return member


def test_pending_offsets_are_invisible_until_the_commit(tmp_path):
    async def body():
        async with make_coordinator(tmp_path) as coordinator:
            await coordinator.commit_offsets("g", -1, "", None, {("t", 0): (5, None, "old")})
            result = await txn_commit(
                coordinator, "g", {("t", 0): (9, 2, "txn"), ("t", 1): (3, None, None)}
            )
            assert result == {("t", 0): errors.NONE, ("t", 1): errors.NONE}
            assert coordinator.fetch_offsets("g") == {("t", 0): (5, -1, "old")}
            assert coordinator.fetch_offsets("g", [("t", 1)]) == {("t", 1): (-1, -1, "")}
            assert coordinator.unstable_partitions("g") == {("t", 0), ("t", 1)}

            await coordinator.complete_transaction("g", PID, EPOCH, True)
            assert coordinator.fetch_offsets("g") == {
                ("t", 0): (9, 2, "txn"),
                ("t", 1): (3, -1, ""),
            }
            assert coordinator.unstable_partitions("g") == set()

    run(body)


def test_abort_keeps_the_old_offset_and_completion_is_idempotent(tmp_path):
    async def body():
        async with make_coordinator(tmp_path) as coordinator:
            await coordinator.commit_offsets("g", -1, "", None, {("t", 0): (5, None, None)})
            await txn_commit(coordinator, "g", {("t", 0): (9, None, None)})
            await coordinator.complete_transaction("g", PID, EPOCH, False)
            assert coordinator.fetch_offsets("g") == {("t", 0): (5, -1, "")}
            written = len(log_records(tmp_path))
            # the transaction coordinator repeats completions after a restart: no-ops, and a
            # repeated "commit" of the aborted transaction must not bring its offsets back
            await coordinator.complete_transaction("g", PID, EPOCH, False)
            await coordinator.complete_transaction("g", PID, EPOCH, True)
            await coordinator.complete_transaction("unknown-group", PID, EPOCH, True)
            assert coordinator.fetch_offsets("g") == {("t", 0): (5, -1, "")}
            assert len(log_records(tmp_path)) == written

    run(body)


def test_commits_of_one_transaction_merge_and_other_producers_stay_apart(tmp_path):
    async def body():
        async with make_coordinator(tmp_path) as coordinator:
            await txn_commit(
                coordinator, "g", {("t", 0): (1, None, None), ("t", 1): (1, None, None)}
            )
            await txn_commit(coordinator, "g", {("t", 1): (2, None, None)})
            await txn_commit(coordinator, "g", {("t", 2): (7, None, None)}, pid=PID + 1)
            await coordinator.complete_transaction("g", PID + 1, EPOCH, False)
            assert coordinator.unstable_partitions("g") == {("t", 0), ("t", 1)}
            await coordinator.complete_transaction("g", PID, EPOCH, True)
            assert coordinator.fetch_offsets("g") == {("t", 0): (1, -1, ""), ("t", 1): (2, -1, "")}

    run(body)


def test_the_most_recently_written_offset_wins_on_commit(tmp_path):
    """Kafka's rule: a plain OffsetCommit that arrives while a transaction is open is kept when
    the transaction's offset for the same partition was written before it."""

    async def body():
        async with make_coordinator(tmp_path) as coordinator:
            await txn_commit(
                coordinator, "g", {("t", 0): (10, None, None), ("t", 1): (10, None, None)}
            )
            await coordinator.commit_offsets("g", -1, "", None, {("t", 0): (20, None, "plain")})
            await txn_commit(coordinator, "g", {("t", 1): (30, None, "txn-later")})
            await coordinator.commit_offsets("g", -1, "", None, {("t", 1): (25, None, "plain")})
            await txn_commit(coordinator, "g", {("t", 1): (40, None, "txn-last")})
            await coordinator.complete_transaction("g", PID, EPOCH, True)
            assert coordinator.fetch_offsets("g") == {
                ("t", 0): (20, -1, "plain"),
                ("t", 1): (40, -1, "txn-last"),
            }

    run(body)


def test_completion_with_an_older_epoch_leaves_a_newer_transaction_alone(tmp_path):
    async def body():
        async with make_coordinator(tmp_path) as coordinator:
            await txn_commit(coordinator, "g", {("t", 0): (3, None, None)}, epoch=5)
            await coordinator.complete_transaction("g", PID, 4, True)
            assert coordinator.fetch_offsets("g") == {}
            assert coordinator.unstable_partitions("g") == {("t", 0)}
            # an abort after a timeout or fencing comes with the bumped epoch
            await coordinator.complete_transaction("g", PID, 6, False)
            assert coordinator.unstable_partitions("g") == set()
            assert coordinator.fetch_offsets("g") == {}

    run(body)


def test_kip_447_member_and_generation_checks_with_a_joined_group(tmp_path):
    async def body():
        async with make_coordinator(tmp_path) as coordinator:
            member = await stable_group(coordinator, instance_id="instance-1")
            current = (member.member_id, member.generation_id, "instance-1")
            offsets = {("t", 0): (1, None, None)}

            assert await txn_commit(coordinator, "g", offsets, member=current) == {
                ("t", 0): errors.NONE
            }
            stale = (member.member_id, member.generation_id - 1, "instance-1")
            assert await txn_commit(coordinator, "g", offsets, member=stale) == {
                ("t", 0): errors.ILLEGAL_GENERATION
            }
            stranger = ("somebody-else", member.generation_id, None)
            assert await txn_commit(coordinator, "g", offsets, member=stranger) == {
                ("t", 0): errors.UNKNOWN_MEMBER_ID
            }
            fenced = ("old-member-id", member.generation_id, "instance-1")
            assert await txn_commit(coordinator, "g", offsets, member=fenced) == {
                ("t", 0): errors.FENCED_INSTANCE_ID
            }
            unknown_instance = (member.member_id, member.generation_id, "instance-2")
            assert await txn_commit(coordinator, "g", offsets, member=unknown_instance) == {
                ("t", 0): errors.UNKNOWN_MEMBER_ID
            }
            # v0-2 requests carry no member: accepted even by a group with members
            assert await txn_commit(coordinator, "g", offsets, pid=PID + 1) == {
                ("t", 0): errors.NONE
            }
            # an unknown group: a standalone producer (-1) is accepted, a generation is not
            assert await txn_commit(coordinator, "lone", offsets) == {("t", 0): errors.NONE}
            assert await txn_commit(coordinator, "nope", offsets, member=("m", 3, None)) == {
                ("t", 0): errors.ILLEGAL_GENERATION
            }
            assert "nope" not in {g.group_id for g in coordinator.list_groups()}
            assert await txn_commit(coordinator, "", offsets) == {("t", 0): errors.INVALID_GROUP_ID}
            assert coordinator.unstable_partitions("g") == {("t", 0)}
            assert coordinator.unstable_partitions("lone") == {("t", 0)}

    run(body)


def test_a_zombie_of_an_older_generation_is_refused(tmp_path):
    """KIP-447: after a rebalance, a producer still working for the old generation's
    assignment cannot commit offsets; the new generation's member can."""

    async def body():
        async with make_coordinator(tmp_path, initial_rebalance_delay_ms=50) as coordinator:
            first = await stable_group(coordinator)
            # a second member joins: the group rebalances into a new generation
            rejoin = asyncio.ensure_future(join(coordinator, "g", first.member_id))
            second = await join_new(coordinator, "g")
            first_again = await rejoin
            assert first_again.generation_id == first.generation_id + 1
            await sync_all(coordinator, "g", [first_again, second])

            offsets = {("t", 0): (11, None, None)}
            zombie = (first.member_id, first.generation_id, None)
            assert await txn_commit(coordinator, "g", offsets, member=zombie) == {
                ("t", 0): errors.ILLEGAL_GENERATION
            }
            assert coordinator.unstable_partitions("g") == set()
            current = (second.member_id, second.generation_id, None)
            assert await txn_commit(coordinator, "g", offsets, pid=PID + 7, member=current) == {
                ("t", 0): errors.NONE
            }
            await coordinator.complete_transaction("g", PID + 7, EPOCH, True)
            assert coordinator.fetch_offsets("g") == {("t", 0): (11, -1, "")}

    run(body)


def test_a_rebalancing_group_still_takes_transactional_commits(tmp_path):
    """Unlike OffsetCommit, TxnOffsetCommit is not refused with REBALANCE_IN_PROGRESS while the
    group awaits its assignment (Kafka: the commit only counts when the transaction does)."""

    async def body():
        async with make_coordinator(tmp_path) as coordinator:
            member = await join_new(coordinator, "g")  # CompletingRebalance until SyncGroup
            assert coordinator.describe_group("g").state == "CompletingRebalance"
            current = (member.member_id, member.generation_id, None)
            plain = await coordinator.commit_offsets(
                "g", member.generation_id, member.member_id, None, {("t", 0): (1, None, None)}
            )
            assert plain == {("t", 0): errors.REBALANCE_IN_PROGRESS}
            assert await txn_commit(
                coordinator, "g", {("t", 0): (1, None, None)}, member=current
            ) == {("t", 0): errors.NONE}

    run(body)


def test_metadata_too_large_is_refused_per_partition(tmp_path):
    async def body():
        async with make_coordinator(tmp_path, max_offset_metadata_bytes=4) as coordinator:
            result = await txn_commit(
                coordinator, "g", {("t", 0): (1, None, "12345"), ("t", 1): (1, None, "1234")}
            )
            assert result == {("t", 0): errors.OFFSET_METADATA_TOO_LARGE, ("t", 1): errors.NONE}
            assert coordinator.unstable_partitions("g") == {("t", 1)}

    run(body)


def test_pending_offsets_survive_a_crash_and_a_clean_restart(tmp_path):
    async def first_life():
        coordinator = make_coordinator(tmp_path)
        await coordinator.start()
        await coordinator.commit_offsets("g", -1, "", None, {("t", 0): (5, None, None)})
        await txn_commit(coordinator, "g", {("t", 0): (8, None, "a")})
        await txn_commit(coordinator, "g", {("t", 1): (2, None, None)}, pid=PID + 1)
        await txn_commit(coordinator, "h", {("u", 0): (4, None, None)}, pid=PID + 2)
        await coordinator.complete_transaction("h", PID + 2, EPOCH, True)
        # killed: no close(), nothing compacted

    run(first_life)
    kinds = [r["type"] for r in log_records(tmp_path)]
    assert kinds == ["offsets", "txn_offsets", "txn_offsets", "txn_offsets", "txn_end"]

    async def second_life():
        async with make_coordinator(tmp_path) as coordinator:
            assert coordinator.fetch_offsets("g") == {("t", 0): (5, -1, "")}
            assert coordinator.fetch_offsets("h") == {("u", 0): (4, -1, "")}
            assert coordinator.unstable_partitions("g") == {("t", 0), ("t", 1)}
            assert coordinator.unstable_partitions("h") == set()
            await coordinator.complete_transaction("g", PID + 1, EPOCH, False)
        # close() compacted the pending offsets of PID into the snapshot

    run(second_life)

    async def third_life():
        async with make_coordinator(tmp_path) as coordinator:
            assert coordinator.unstable_partitions("g") == {("t", 0)}
            # a plain commit after the restart still wins over the older pending offset
            await coordinator.commit_offsets("g", -1, "", None, {("t", 0): (6, None, None)})
            await coordinator.complete_transaction("g", PID, EPOCH, True)
            assert coordinator.fetch_offsets("g") == {("t", 0): (6, -1, "")}

    run(third_life)


def test_a_torn_transaction_end_is_completed_again_after_the_restart(tmp_path):
    async def first_life():
        coordinator = make_coordinator(tmp_path)
        await coordinator.start()
        await coordinator.commit_offsets("g", -1, "", None, {("t", 0): (1, None, None)})
        await txn_commit(coordinator, "g", {("t", 0): (2, None, None)})
        await coordinator.complete_transaction("g", PID, EPOCH, True)

    run(first_life)
    (log,) = sorted(tmp_path.glob("groups-*.log"))
    data = log.read_bytes()
    log.write_bytes(data[:-5])  # the crash hit while the txn_end record was written

    async def second_life():
        async with make_coordinator(tmp_path) as coordinator:
            # the end was not durable, so the transaction is still open here...
            assert coordinator.fetch_offsets("g") == {("t", 0): (1, -1, "")}
            assert coordinator.unstable_partitions("g") == {("t", 0)}
            # ...and the transaction coordinator's repeated completion settles it
            await coordinator.complete_transaction("g", PID, EPOCH, True)
            assert coordinator.fetch_offsets("g") == {("t", 0): (2, -1, "")}

    run(second_life)

    async def third_life():
        async with make_coordinator(tmp_path) as coordinator:
            assert coordinator.fetch_offsets("g") == {("t", 0): (2, -1, "")}
            assert coordinator.unstable_partitions("g") == set()

    run(third_life)


def test_compaction_keeps_pending_offsets_and_the_write_order(tmp_path):
    async def first_life():
        coordinator = make_coordinator(tmp_path, compact_log_after_bytes=400)
        await coordinator.start()
        await txn_commit(coordinator, "g", {("t", 0): (100, None, None)})
        for i in range(20):  # several compactions, each snapshotting the pending offsets
            await coordinator.commit_offsets("g", -1, "", None, {("t", i % 3): (i, None, None)})
        await txn_commit(coordinator, "g", {("t", 2): (200, None, None)})

    run(first_life)

    async def second_life():
        async with make_coordinator(tmp_path) as coordinator:
            await coordinator.complete_transaction("g", PID, EPOCH, True)
            # (t,0) was committed plainly after the transaction wrote it; (t,2) before
            assert coordinator.fetch_offsets("g") == {
                ("t", 0): (18, -1, ""),
                ("t", 1): (19, -1, ""),
                ("t", 2): (200, -1, ""),
            }

    run(second_life)


def test_retention_spares_open_transactions(tmp_path):
    async def body():
        now = [1_000_000]
        async with make_coordinator(
            tmp_path, clock_ms=lambda: now[0], offsets_retention_ms=10_000
        ) as coordinator:
            await coordinator.commit_offsets("g", -1, "", None, {("t", 0): (1, None, None)})
            await coordinator.commit_offsets("g", -1, "", None, {("t", 1): (1, None, None)})
            await txn_commit(coordinator, "g", {("t", 0): (2, None, None)})
            await txn_commit(coordinator, "only-pending", {("t", 0): (3, None, None)})
            now[0] += 20_000
            assert coordinator.expire_offsets() == 1  # (t,1) only: (t,0) has a pending offset
            assert coordinator.fetch_offsets("g") == {("t", 0): (1, -1, "")}
            assert {g.group_id for g in coordinator.list_groups()} == {"g", "only-pending"}
            await coordinator.complete_transaction("only-pending", PID, EPOCH, False)
            assert coordinator.expire_offsets() == 0
            assert {g.group_id for g in coordinator.list_groups()} == {"g"}
            await coordinator.complete_transaction("g", PID, EPOCH, True)
            assert coordinator.fetch_offsets("g") == {("t", 0): (2, -1, "")}

    run(body)


def test_deleting_a_group_drops_its_pending_offsets_for_good(tmp_path):
    """Kafka 4 deletes an Empty group with its pending transactional offsets; the transaction's
    later commit must not bring them back, before or after a restart."""

    async def first_life():
        coordinator = make_coordinator(tmp_path)
        await coordinator.start()
        await txn_commit(coordinator, "g", {("t", 0): (2, None, None)})
        assert coordinator.delete_groups(["g"]) == {"g": errors.NONE}
        assert coordinator.unstable_partitions("g") == set()

    run(first_life)

    async def second_life():
        async with make_coordinator(tmp_path) as coordinator:
            assert coordinator.unstable_partitions("g") == set()
            await coordinator.complete_transaction("g", PID, EPOCH, True)
            assert coordinator.fetch_offsets("g") == {}
            assert "g" not in {g.group_id for g in coordinator.list_groups()}

    run(second_life)


def test_a_failed_write_is_refused_and_leaves_nothing_pending(tmp_path, monkeypatch):
    async def body():
        async with make_coordinator(tmp_path) as coordinator:
            await txn_commit(coordinator, "g", {("t", 0): (1, None, None)})
            real_write_all = offset_store._write_all

            def failing_write_all(fd, data):
                real_write_all(fd, data[:5])
                raise OSError(28, "No space left on device")

            monkeypatch.setattr(offset_store, "_write_all", failing_write_all)
            failed = await txn_commit(coordinator, "g", {("t", 1): (1, None, None)})
            assert failed == {("t", 1): errors.NOT_COORDINATOR}
            try:
                await coordinator.complete_transaction("g", PID, EPOCH, True)
            except OSError:
                pass
            else:
                raise AssertionError("a completion that was not stored must raise")
            monkeypatch.setattr(offset_store, "_write_all", real_write_all)
            assert coordinator.unstable_partitions("g") == {("t", 0)}
            assert coordinator.fetch_offsets("g") == {}
            await coordinator.complete_transaction("g", PID, EPOCH, True)
            assert coordinator.fetch_offsets("g") == {("t", 0): (1, -1, "")}

    run(body)


def test_not_running(tmp_path):
    async def body():
        coordinator = make_coordinator(tmp_path)
        assert await txn_commit(coordinator, "g", {("t", 0): (1, None, None)}) == {
            ("t", 0): errors.COORDINATOR_NOT_AVAILABLE
        }
        try:
            await coordinator.complete_transaction("g", PID, EPOCH, True)
        except GroupCoordinatorNotActive:
            pass
        else:
            raise AssertionError("completing on a stopped coordinator must raise")
        assert coordinator.unstable_partitions("g") == set()

    run(body)


def test_a_store_written_before_transactions_still_opens(tmp_path):
    """Snapshots and log rows without record sequence numbers or pending offsets (the format
    before transactional commits) load as committed offsets written before anything new."""
    snapshot = {
        "format": 1,
        "segment": 3,
        "groups": [{"group_id": "g", "metadata": None, "offsets": [["t", 0, 5, -1, "", 1000]]}],
    }
    (tmp_path / SNAPSHOT_NAME).write_text(json.dumps(snapshot))
    old_row = {"type": "offsets", "group_id": "g", "offsets": [["t", 1, 6, -1, "", 1000]]}
    (tmp_path / ("groups-%020d.log" % 3)).write_bytes(encode_record(old_row))

    async def body():
        async with make_coordinator(tmp_path) as coordinator:
            assert coordinator.fetch_offsets("g") == {("t", 0): (5, -1, ""), ("t", 1): (6, -1, "")}
            await txn_commit(
                coordinator, "g", {("t", 0): (9, None, None), ("t", 1): (9, None, None)}
            )
            await coordinator.complete_transaction("g", PID, EPOCH, True)
            assert coordinator.fetch_offsets("g") == {("t", 0): (9, -1, ""), ("t", 1): (9, -1, "")}

    run(body)
