"""OffsetCommit / OffsetFetch rules, retention, and ListGroups / DescribeGroups / DeleteGroups."""

from __future__ import annotations

import asyncio

from kipproducer.broker.groups import NO_COMMITTED_OFFSET, OffsetAndMetadata
from kipproducer.protocol import error_codes as errors

if __package__:
    from .test_groups_support import join, join_new, make_coordinator, run, sync, sync_all
else:
    from test_groups_support import join, join_new, make_coordinator, run, sync, sync_all


def test_commit_and_fetch_with_metadata(tmp_path):
    async def body():
        async with make_coordinator(tmp_path) as coordinator:
            member = await join_new(coordinator, "g")
            await sync(coordinator, "g", member, {member.member_id: b""})
            result = await coordinator.commit_offsets(
                "g",
                member.generation_id,
                member.member_id,
                None,
                {("t", 0): (42, 3, "checkpoint"), ("t", 1): (7, None, None)},
            )
            assert result == {("t", 0): errors.NONE, ("t", 1): errors.NONE}
            fetched = coordinator.fetch_offsets("g", [("t", 0), ("t", 1), ("t", 2)])
            assert fetched == {
                ("t", 0): OffsetAndMetadata(42, 3, "checkpoint"),
                ("t", 1): (7, -1, ""),
                ("t", 2): (-1, -1, ""),
            }
            assert coordinator.fetch_offsets("g") == {
                ("t", 0): (42, 3, "checkpoint"),
                ("t", 1): (7, -1, ""),
            }
            assert coordinator.fetch_offsets("unknown", [("t", 0)]) == {
                ("t", 0): NO_COMMITTED_OFFSET
            }
            assert coordinator.fetch_offsets("unknown") == {}
            # a later commit overwrites
            await coordinator.commit_offsets(
                "g", member.generation_id, member.member_id, None, {("t", 0): (50, 4, "")}
            )
            assert coordinator.fetch_offsets("g", [("t", 0)])[("t", 0)] == (50, 4, "")

    run(body)


def test_commit_from_a_stale_generation_or_unknown_member_is_rejected(tmp_path):
    async def body():
        async with make_coordinator(tmp_path) as coordinator:
            member = await join_new(coordinator, "g")
            await sync(coordinator, "g", member, {member.member_id: b""})
            offsets = {("t", 0): (1, None, None)}
            stale = await coordinator.commit_offsets(
                "g", member.generation_id - 1, member.member_id, None, offsets
            )
            assert stale == {("t", 0): errors.ILLEGAL_GENERATION}
            stranger = await coordinator.commit_offsets(
                "g", member.generation_id, "stranger", None, offsets
            )
            assert stranger == {("t", 0): errors.UNKNOWN_MEMBER_ID}
            # generation -1 without a member id: only while the group has no members
            admin = await coordinator.commit_offsets("g", -1, "", None, offsets)
            assert admin == {("t", 0): errors.UNKNOWN_MEMBER_ID}
            unknown_group = await coordinator.commit_offsets("nope", 3, "m", None, offsets)
            assert unknown_group == {("t", 0): errors.ILLEGAL_GENERATION}
            v9 = await coordinator.commit_offsets(
                "nope", 3, "m", None, offsets, unknown_group_error=errors.GROUP_ID_NOT_FOUND
            )
            assert v9 == {("t", 0): errors.GROUP_ID_NOT_FOUND}
            too_big = await coordinator.commit_offsets(
                "g",
                member.generation_id,
                member.member_id,
                None,
                {("t", 0): (1, None, "x" * 5000), ("t", 1): (2, None, "ok")},
            )
            assert too_big == {("t", 0): errors.OFFSET_METADATA_TOO_LARGE, ("t", 1): errors.NONE}
            assert coordinator.fetch_offsets("g") == {("t", 1): (2, -1, "ok")}

    run(body)


def test_commits_during_rebalances(tmp_path):
    async def body():
        async with make_coordinator(tmp_path, initial_rebalance_delay_ms=100) as coordinator:
            a, b = await asyncio.gather(join_new(coordinator, "g"), join_new(coordinator, "g"))
            offsets = {("t", 0): (5, None, None)}
            # CompletingRebalance: the assignment is not known yet
            during_sync = await coordinator.commit_offsets(
                "g", a.generation_id, a.member_id, None, offsets
            )
            assert during_sync == {("t", 0): errors.REBALANCE_IN_PROGRESS}
            await sync_all(coordinator, "g", [a, b])
            # PreparingRebalance: members may still commit what they processed
            leader = a if a.member_id == a.leader_id else b
            rejoin = asyncio.ensure_future(join(coordinator, "g", leader.member_id))
            await asyncio.sleep(0.01)
            assert coordinator.describe_group("g").state == "PreparingRebalance"
            other = b if leader is a else a
            during_join = await coordinator.commit_offsets(
                "g", other.generation_id, other.member_id, None, offsets
            )
            assert during_join == {("t", 0): errors.NONE}
            rejoin.cancel()

    run(body)


def test_admin_commit_on_an_empty_or_unknown_group(tmp_path):
    async def body():
        async with make_coordinator(tmp_path) as coordinator:
            simple = await coordinator.commit_offsets(
                "simple", -1, "", None, {("t", 0): (9, 1, "m")}
            )
            assert simple == {("t", 0): errors.NONE}
            assert coordinator.fetch_offsets("simple") == {("t", 0): (9, 1, "m")}
            assert ("simple", "", "Empty", "classic") in coordinator.list_groups()
            # a group whose members all left accepts admin commits again (offset reset tools)
            member = await join_new(coordinator, "g")
            await sync(coordinator, "g", member, {member.member_id: b""})
            await coordinator.leave_group("g", [(member.member_id, None)])
            reset = await coordinator.commit_offsets("g", -1, "", None, {("t", 0): (0, None, None)})
            assert reset == {("t", 0): errors.NONE}

    run(body)


def test_offsets_of_empty_groups_expire(tmp_path):
    async def body():
        now = [1_000_000]
        async with make_coordinator(
            tmp_path, clock_ms=lambda: now[0], offsets_retention_ms=10_000
        ) as coordinator:
            await coordinator.commit_offsets("simple", -1, "", None, {("t", 0): (1, None, None)})
            member = await join_new(coordinator, "active")
            await sync(coordinator, "active", member, {member.member_id: b""})
            await coordinator.commit_offsets(
                "active", 1, member.member_id, None, {("t", 0): (2, None, None)}
            )
            now[0] += 5_000
            await coordinator.commit_offsets("simple", -1, "", None, {("t", 1): (1, None, None)})
            now[0] += 6_000
            # simple group: each offset has its own clock
            assert coordinator.expire_offsets() == 1
            assert coordinator.fetch_offsets("simple") == {("t", 1): (1, -1, "")}
            # a group with members keeps its offsets however old
            assert coordinator.fetch_offsets("active") == {("t", 0): (2, -1, "")}
            # ... until it has been empty for the retention period
            await coordinator.heartbeat("active", 1, member.member_id, None)
            await coordinator.leave_group("active", [(member.member_id, None)])
            now[0] += 9_000
            assert coordinator.expire_offsets() == 1  # the simple group's second offset
            assert coordinator.fetch_offsets("active") == {("t", 0): (2, -1, "")}
            now[0] += 1_000
            assert coordinator.expire_offsets() == 1
            # groups left empty without offsets are gone
            assert coordinator.list_groups() == []
            assert coordinator.describe_group("active").state == "Dead"

    run(body)


def test_describe_list_and_delete_groups(tmp_path):
    async def body():
        async with make_coordinator(tmp_path) as coordinator:
            member = await join_new(coordinator, "busy", client_id="me")
            description = coordinator.describe_group("busy")
            assert description.state == "CompletingRebalance"
            assert description.protocol_name == "" and description.members[0].metadata == b""
            await sync(coordinator, "busy", member, {member.member_id: b"mine"})
            description = coordinator.describe_group("busy")
            assert description.error_code == errors.NONE and description.exists
            assert (description.state, description.protocol_type, description.protocol_name) == (
                "Stable",
                "consumer",
                "range",
            )
            (me,) = description.members
            assert (me.member_id, me.client_id, me.client_host) == (
                member.member_id,
                "me",
                "/127.0.0.1",
            )
            assert (me.metadata, me.assignment) == (b"range-meta", b"mine")
            await coordinator.commit_offsets("idle", -1, "", None, {("t", 0): (1, None, None)})

            assert sorted(coordinator.list_groups()) == [
                ("busy", "consumer", "Stable", "classic"),
                ("idle", "", "Empty", "classic"),
            ]
            assert [g.group_id for g in coordinator.list_groups(["stable"])] == ["busy"]
            assert [g.group_id for g in coordinator.list_groups(["Empty", "Dead"])] == ["idle"]
            assert coordinator.list_groups(types_filter=["consumer"]) == []
            assert len(coordinator.list_groups(types_filter=["Classic"])) == 2

            unknown = coordinator.describe_group("nope")
            assert (unknown.error_code, unknown.state, unknown.exists) == (
                errors.NONE,
                "Dead",
                False,
            )
            assert coordinator.delete_groups(["busy", "idle", "nope"]) == {
                "busy": errors.NON_EMPTY_GROUP,
                "idle": errors.NONE,
                "nope": errors.GROUP_ID_NOT_FOUND,
            }
            assert coordinator.fetch_offsets("idle") == {}
            assert [g.group_id for g in coordinator.list_groups()] == ["busy"]
            assert coordinator.delete_groups(["idle"]) == {"idle": errors.GROUP_ID_NOT_FOUND}

    run(body)
