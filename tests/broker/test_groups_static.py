"""Static membership (KIP-345): restarts without rebalances, fencing, removal by instance id."""

from __future__ import annotations

import asyncio

from kipproducer.protocol import error_codes as errors

if __package__:
    from .test_groups_support import join, join_new, make_coordinator, run, sync, sync_all
else:
    from test_groups_support import join, join_new, make_coordinator, run, sync, sync_all


async def stable_static_group(coordinator, group_id="g", **kwargs):
    """Two static members "i1" and "i2", synced. Returns their (join, sync) results by instance."""
    results = await asyncio.gather(
        join(coordinator, group_id, instance_id="i1", client_id="one", **kwargs),
        join(coordinator, group_id, instance_id="i2", client_id="two", **kwargs),
    )
    assert {r.error_code for r in results} == {errors.NONE}, (
        "static members skip MEMBER_ID_REQUIRED"
    )
    synced = await sync_all(coordinator, group_id, list(results))
    return {"i1": (results[0], synced[0]), "i2": (results[1], synced[1])}


def test_static_member_restart_gets_its_assignment_back_without_a_rebalance(tmp_path):
    async def body():
        async with make_coordinator(tmp_path, initial_rebalance_delay_ms=100) as coordinator:
            group = await stable_static_group(coordinator)
            (old_join, old_sync), (other_join, _) = group["i1"], group["i2"]
            assert old_join.member_id.startswith("i1-")
            # the client restarts: empty member id, same instance id
            restarted = await join(coordinator, "g", instance_id="i1", client_id="one-again")
            assert restarted.error_code == errors.NONE
            assert restarted.member_id != old_join.member_id
            assert restarted.generation_id == old_join.generation_id, "no new generation"
            assert restarted.members == []
            # the leader id stays the old leader's, so a restarted leader does not assign
            assert restarted.leader_id == old_join.leader_id
            assert coordinator.describe_group("g").state == "Stable"
            synced = await sync(coordinator, "g", restarted, instance_id="i1")
            assert synced.error_code == errors.NONE
            assert synced.assignment == old_sync.assignment
            # the other member did not notice anything
            assert (
                await coordinator.heartbeat(
                    "g", other_join.generation_id, other_join.member_id, "i2"
                )
                == errors.NONE
            )
            # the old incarnation is fenced wherever it shows up with its instance id
            old_id, generation = old_join.member_id, old_join.generation_id
            assert await coordinator.heartbeat("g", generation, old_id, "i1") == (
                errors.FENCED_INSTANCE_ID
            )
            fenced_sync = await coordinator.sync_group(
                "g", generation, old_id, "i1", None, None, {}
            )
            assert fenced_sync.error_code == errors.FENCED_INSTANCE_ID
            fenced_join = await join(coordinator, "g", old_id, instance_id="i1")
            assert fenced_join.error_code == errors.FENCED_INSTANCE_ID
            commit = await coordinator.commit_offsets(
                "g", generation, old_id, "i1", {("t", 0): (1, None, None)}
            )
            assert commit == {("t", 0): errors.FENCED_INSTANCE_ID}
            leave = await coordinator.leave_group("g", [(old_id, "i1")])
            assert leave.members[0].error_code == errors.FENCED_INSTANCE_ID
            # the new incarnation works
            assert await coordinator.heartbeat("g", generation, restarted.member_id, "i1") == (
                errors.NONE
            )
            description = coordinator.describe_group("g")
            me = next(m for m in description.members if m.group_instance_id == "i1")
            assert me.member_id == restarted.member_id and me.client_id == "one-again"

    run(body)


def test_restarted_static_leader_with_skip_assignment(tmp_path):
    async def body():
        async with make_coordinator(tmp_path, initial_rebalance_delay_ms=100) as coordinator:
            group = await stable_static_group(coordinator)
            leader_instance = next(i for i, (j, _) in group.items() if j.member_id == j.leader_id)
            restarted = await join(
                coordinator, "g", instance_id=leader_instance, skip_assignment_supported=True
            )
            assert restarted.error_code == errors.NONE
            assert restarted.leader_id == restarted.member_id
            assert restarted.skip_assignment is True
            assert len(restarted.members) == 2
            assert coordinator.describe_group("g").state == "Stable"

    run(body)


def test_static_member_restart_with_a_protocol_change_rebalances(tmp_path):
    async def body():
        async with make_coordinator(tmp_path, initial_rebalance_delay_ms=100) as coordinator:
            protocols = [("range", b""), ("sticky", b"")]
            group = await stable_static_group(coordinator, protocols=protocols)
            other_join = group["i2"][0]
            # i1 comes back supporting only "sticky": the group's choice ("range") must change
            restarted = asyncio.ensure_future(
                join(coordinator, "g", instance_id="i1", protocols=[("sticky", b"")])
            )
            await asyncio.sleep(0.01)
            assert coordinator.describe_group("g").state == "PreparingRebalance"
            other = await join(
                coordinator, "g", other_join.member_id, instance_id="i2", protocols=protocols
            )
            first = await restarted
            assert first.generation_id == other.generation_id == other_join.generation_id + 1
            assert first.protocol_name == "sticky"

    run(body)


def test_static_member_that_misses_a_rebalance_is_kept_in_the_new_generation(tmp_path):
    async def body():
        async with make_coordinator(tmp_path, initial_rebalance_delay_ms=100) as coordinator:
            group = await stable_static_group(coordinator, rebalance_ms=100, session_ms=600)
            (one, _), (two, _) = group["i1"], group["i2"]
            # a dynamic member joins; i2 neither rejoins nor heartbeats
            newcomer = asyncio.ensure_future(join_new(coordinator, "g", rebalance_ms=100))
            await asyncio.sleep(0.01)
            rejoined = await join(coordinator, "g", one.member_id, instance_id="i1")
            joined = await newcomer
            assert rejoined.generation_id == joined.generation_id == one.generation_id + 1
            members = {m.member_id for m in coordinator.describe_group("g").members}
            assert two.member_id in members, "static members survive the rebalance timeout"
            # ... but one that neither syncs nor heartbeats is eventually removed
            await asyncio.sleep(0.8)
            members = {m.member_id for m in coordinator.describe_group("g").members}
            assert two.member_id not in members

    run(body)


def test_static_member_leaves_by_instance_id(tmp_path):
    async def body():
        async with make_coordinator(tmp_path, initial_rebalance_delay_ms=100) as coordinator:
            group = await stable_static_group(coordinator)
            (one, _), (two, _) = group["i1"], group["i2"]
            # the admin path: no member id, just the instance id
            result = await coordinator.leave_group("g", [("", "i1"), ("", "ghost")])
            assert [m.error_code for m in result.members] == [
                errors.NONE,
                errors.UNKNOWN_MEMBER_ID,
            ]
            assert await coordinator.heartbeat("g", two.generation_id, two.member_id, "i2") == (
                errors.REBALANCE_IN_PROGRESS
            )
            rejoined = await join(coordinator, "g", two.member_id, instance_id="i2")
            assert [m.group_instance_id for m in rejoined.members] == ["i2"]
            # the member's own LeaveGroup (member id + instance id) works too
            await sync(coordinator, "g", rejoined, {two.member_id: b""}, instance_id="i2")
            own = await coordinator.leave_group("g", [(two.member_id, "i2")])
            assert own.members[0].error_code == errors.NONE
            assert coordinator.describe_group("g").state == "Empty"
            # a later join with the same instance id is a brand new member
            fresh = await join(coordinator, "g", instance_id="i1")
            assert fresh.error_code == errors.NONE and fresh.member_id != one.member_id

    run(body)
