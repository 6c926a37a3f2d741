"""JoinGroup / SyncGroup / Heartbeat / LeaveGroup of the classic group protocol."""

from __future__ import annotations

import asyncio

from kipproducer.protocol import error_codes as errors

if __package__:
    from .test_groups_support import (
        SimulatedMember,
        join,
        join_new,
        make_coordinator,
        run,
        sync,
        sync_all,
        wait_until,
    )
else:
    from test_groups_support import (
        SimulatedMember,
        join,
        join_new,
        make_coordinator,
        run,
        sync,
        sync_all,
        wait_until,
    )


def test_two_members_join_leader_gets_member_list_and_followers_their_assignment(tmp_path):
    async def body():
        async with make_coordinator(tmp_path, initial_rebalance_delay_ms=100) as coordinator:
            a, b = await asyncio.gather(
                join_new(coordinator, "g", client_id="a", protocols=[("range", b"A")]),
                join_new(coordinator, "g", client_id="b", protocols=[("range", b"B")]),
            )
            assert a.error_code == b.error_code == errors.NONE
            assert a.generation_id == b.generation_id == 1
            assert a.leader_id == b.leader_id
            assert a.protocol_type == "consumer" and a.protocol_name == "range"
            assert a.member_id.startswith("a-") and b.member_id.startswith("b-")
            leader, follower = (a, b) if a.member_id == a.leader_id else (b, a)
            assert follower.members == []
            assert {(m.member_id, m.metadata) for m in leader.members} == {
                (a.member_id, b"A"),
                (b.member_id, b"B"),
            }
            synced = await sync_all(coordinator, "g", [a, b])
            assert [s.error_code for s in synced] == [errors.NONE, errors.NONE]
            assert synced[0].assignment == b"assigned-to-" + a.member_id.encode()
            assert synced[1].assignment == b"assigned-to-" + b.member_id.encode()
            assert synced[1].protocol_name == "range"
            assert coordinator.describe_group("g").state == "Stable"
            for r in (a, b):
                assert await coordinator.heartbeat("g", 1, r.member_id, None) == errors.NONE

    run(body)


def test_three_members_one_generation(tmp_path):
    async def body():
        async with make_coordinator(tmp_path, initial_rebalance_delay_ms=100) as coordinator:
            results = await asyncio.gather(
                *(join_new(coordinator, "g", client_id=f"c{i}") for i in range(3))
            )
            assert {r.generation_id for r in results} == {1}
            leaders = [r for r in results if r.member_id == r.leader_id]
            assert len(leaders) == 1 and len(leaders[0].members) == 3
            synced = await sync_all(coordinator, "g", results)
            assert len({s.assignment for s in synced}) == 3
            description = coordinator.describe_group("g")
            assert description.state == "Stable" and description.protocol_name == "range"
            assert {m.assignment for m in description.members} == {s.assignment for s in synced}
            assert {m.client_id for m in description.members} == {"c0", "c1", "c2"}
            assert all(m.metadata == b"range-meta" for m in description.members)

    run(body)


def test_member_id_required_flow(tmp_path):
    async def body():
        async with make_coordinator(tmp_path) as coordinator:
            first = await join(coordinator, "g", client_id="rdkafka")
            assert first.error_code == errors.MEMBER_ID_REQUIRED
            assert first.member_id.startswith("rdkafka-") and first.generation_id == -1
            assert coordinator.debug_state()["g"]["pending_members"] == [first.member_id]
            second = await join(coordinator, "g", first.member_id)
            assert second.error_code == errors.NONE
            assert second.member_id == second.leader_id == first.member_id
            assert [m.member_id for m in second.members] == [first.member_id]
            # JoinGroup v0-3: no round trip, the member is added at once
            old = await join(coordinator, "h", require_known_member_id=False)
            assert old.error_code == errors.NONE and old.member_id.startswith("client-")
            # a made-up member id is refused
            bogus = await join(coordinator, "g", "not-a-member")
            assert bogus.error_code == errors.UNKNOWN_MEMBER_ID
            assert (await join(coordinator, "nope", "x")).error_code == errors.UNKNOWN_MEMBER_ID

    run(body)


def test_pending_member_that_never_rejoins_expires(tmp_path):
    async def body():
        async with make_coordinator(tmp_path) as coordinator:
            first = await join(coordinator, "g", session_ms=50)
            assert first.error_code == errors.MEMBER_ID_REQUIRED
            await asyncio.sleep(0.15)
            assert (
                "g" not in coordinator.debug_state()
                or not coordinator.debug_state()["g"]["pending_members"]
            )

    run(body)


def test_leave_makes_the_others_rebalance(tmp_path):
    async def body():
        async with make_coordinator(tmp_path, initial_rebalance_delay_ms=100) as coordinator:
            a, b = await asyncio.gather(join_new(coordinator, "g"), join_new(coordinator, "g"))
            await sync_all(coordinator, "g", [a, b])
            result = await coordinator.leave_group("g", [(a.member_id, None)])
            assert result.error_code == errors.NONE
            assert result.members[0].error_code == errors.NONE
            assert coordinator.describe_group("g").state == "PreparingRebalance"
            error = await coordinator.heartbeat("g", b.generation_id, b.member_id, None)
            assert error == errors.REBALANCE_IN_PROGRESS
            # a rebalance only needs the remaining member: its rejoin completes it at once
            rejoined = await join(coordinator, "g", b.member_id)
            assert rejoined.error_code == errors.NONE
            assert rejoined.generation_id == b.generation_id + 1
            assert rejoined.leader_id == b.member_id
            assert [m.member_id for m in rejoined.members] == [b.member_id]
            synced = await sync(coordinator, "g", rejoined, {b.member_id: b"all"})
            assert synced.assignment == b"all"
            # the member that left is gone
            gone = await coordinator.heartbeat("g", rejoined.generation_id, a.member_id, None)
            assert gone == errors.UNKNOWN_MEMBER_ID
            unknown = await coordinator.leave_group("g", [(a.member_id, None)])
            assert unknown.members[0].error_code == errors.UNKNOWN_MEMBER_ID
            # the last member leaving empties the group
            await coordinator.leave_group("g", [(b.member_id, None)])
            description = coordinator.describe_group("g")
            assert description.state == "Empty" and description.members == []
            assert description.protocol_type == "consumer"
            unknown_group = await coordinator.leave_group("nope", [("x", None)])
            assert unknown_group.error_code == errors.UNKNOWN_MEMBER_ID

    run(body)


def test_session_timeout_removes_a_silent_member(tmp_path):
    async def body():
        async with make_coordinator(tmp_path, initial_rebalance_delay_ms=100) as coordinator:
            a, b = await asyncio.gather(
                join_new(coordinator, "g", session_ms=200),
                join_new(coordinator, "g", session_ms=200),
            )
            await sync_all(coordinator, "g", [a, b])
            # a heartbeats, b stays silent
            for _ in range(6):
                await asyncio.sleep(0.06)
                error = await coordinator.heartbeat("g", a.generation_id, a.member_id, None)
                if error != errors.NONE:
                    break
            assert error == errors.REBALANCE_IN_PROGRESS
            rejoined = await join(coordinator, "g", a.member_id, session_ms=200)
            assert rejoined.generation_id == a.generation_id + 1
            assert [m.member_id for m in rejoined.members] == [a.member_id]
            expired = await coordinator.heartbeat("g", b.generation_id, b.member_id, None)
            assert expired == errors.UNKNOWN_MEMBER_ID

    run(body)


def test_rebalance_timeout_removes_a_member_that_does_not_rejoin(tmp_path):
    async def body():
        async with make_coordinator(tmp_path, initial_rebalance_delay_ms=100) as coordinator:
            a, b = await asyncio.gather(
                join_new(coordinator, "g", rebalance_ms=300, session_ms=5000),
                join_new(coordinator, "g", rebalance_ms=300, session_ms=5000),
            )
            await sync_all(coordinator, "g", [a, b])
            leader, other = (a, b) if a.member_id == a.leader_id else (b, a)
            # the leader rejoining forces a rebalance; the other member keeps heartbeating
            # (so its session stays alive) but never rejoins
            loop = asyncio.get_running_loop()
            started = loop.time()
            rejoin = asyncio.ensure_future(join(coordinator, "g", leader.member_id))
            await asyncio.sleep(0)
            while not rejoin.done():
                error = await coordinator.heartbeat("g", other.generation_id, other.member_id, None)
                if error == errors.UNKNOWN_MEMBER_ID:
                    # the rebalance timed out while this heartbeat waited (a loaded machine):
                    # the member is already gone, which is what the test is about
                    break
                assert error == errors.REBALANCE_IN_PROGRESS
                await asyncio.sleep(0.05)
            rejoined = await asyncio.wait_for(rejoin, 5)
            assert loop.time() - started >= 0.25
            assert rejoined.generation_id == leader.generation_id + 1
            assert [m.member_id for m in rejoined.members] == [leader.member_id]
            late = await join(coordinator, "g", other.member_id)
            assert late.error_code == errors.UNKNOWN_MEMBER_ID

    run(body)


def test_inconsistent_protocols(tmp_path):
    async def body():
        async with make_coordinator(tmp_path) as coordinator:
            first = await join_new(coordinator, "g", protocols=[("range", b""), ("sticky", b"")])
            assert first.error_code == errors.NONE
            other_type = await join_new(coordinator, "g", protocol_type="connect")
            assert other_type.error_code == errors.INCONSISTENT_GROUP_PROTOCOL
            assert other_type.member_id == ""
            no_common = await join_new(coordinator, "g", protocols=[("roundrobin", b"")])
            assert no_common.error_code == errors.INCONSISTENT_GROUP_PROTOCOL
            # the existing member cannot switch to a protocol nobody else supports either
            switched = await join(coordinator, "g", first.member_id, protocols=[("rr", b"")])
            assert switched.error_code == errors.INCONSISTENT_GROUP_PROTOCOL
            assert switched.member_id == first.member_id
            # an empty group needs a protocol type and at least one protocol
            empty_type = await join(coordinator, "h", protocol_type="")
            assert empty_type.error_code == errors.INCONSISTENT_GROUP_PROTOCOL
            no_protocols = await join(coordinator, "h", protocols=[])
            assert no_protocols.error_code == errors.INCONSISTENT_GROUP_PROTOCOL
            assert "h" not in coordinator.debug_state(), "failed joins leave no group behind"
            # a common protocol is fine even if it is not everybody's favourite
            second = await join_new(coordinator, "g", protocols=[("sticky", b""), ("range", b"")])
            assert second.error_code == errors.NONE

    run(body)


def test_protocol_vote_and_protocol_checks_on_sync(tmp_path):
    async def body():
        async with make_coordinator(tmp_path, initial_rebalance_delay_ms=100) as coordinator:
            results = await asyncio.gather(
                join_new(coordinator, "g", protocols=[("a", b"1"), ("b", b"1")]),
                join_new(coordinator, "g", protocols=[("b", b"2"), ("a", b"2")]),
                join_new(coordinator, "g", protocols=[("b", b"3"), ("c", b"3"), ("a", b"3")]),
            )
            assert {r.protocol_name for r in results} == {"b"}
            leader = next(r for r in results if r.member_id == r.leader_id)
            assert sorted(m.metadata for m in leader.members) == [b"1", b"2", b"3"]
            r = results[0]
            wrong_name = await coordinator.sync_group(
                "g", r.generation_id, r.member_id, None, "consumer", "a", {}
            )
            assert wrong_name.error_code == errors.INCONSISTENT_GROUP_PROTOCOL
            wrong_type = await coordinator.sync_group(
                "g", r.generation_id, r.member_id, None, "connect", None, {}
            )
            assert wrong_type.error_code == errors.INCONSISTENT_GROUP_PROTOCOL
            stale = await coordinator.sync_group("g", 0, r.member_id, None, None, None, {})
            assert stale.error_code == errors.ILLEGAL_GENERATION
            stranger = await coordinator.sync_group("g", 1, "who", None, None, None, {})
            assert stranger.error_code == errors.UNKNOWN_MEMBER_ID
            no_group = await coordinator.sync_group("zz", 1, "who", None, None, None, {})
            assert no_group.error_code == errors.UNKNOWN_MEMBER_ID
            synced = await sync_all(coordinator, "g", results)
            assert all(s.protocol_name == "b" for s in synced)

    run(body)


def test_request_validation(tmp_path):
    async def body():
        coordinator = make_coordinator(tmp_path, min_session_timeout_ms=100)
        not_started = await join(coordinator, "g")
        assert not_started.error_code == errors.COORDINATOR_NOT_AVAILABLE
        await coordinator.start()
        assert (await join(coordinator, "g", session_ms=50)).error_code == (
            errors.INVALID_SESSION_TIMEOUT
        )
        assert (await join(coordinator, "g", session_ms=70_000)).error_code == (
            errors.INVALID_SESSION_TIMEOUT
        )
        assert (await join(coordinator, "")).error_code == errors.INVALID_GROUP_ID
        assert (await coordinator.heartbeat("", 1, "m", None)) == errors.INVALID_GROUP_ID
        assert (await coordinator.heartbeat("nope", 1, "m", None)) == errors.UNKNOWN_MEMBER_ID
        await coordinator.close()
        assert (await coordinator.heartbeat("g", 1, "m", None)) == errors.COORDINATOR_NOT_AVAILABLE

    run(body)


def test_rejoins_in_a_stable_group(tmp_path):
    async def body():
        async with make_coordinator(tmp_path, initial_rebalance_delay_ms=100) as coordinator:
            a, b = await asyncio.gather(join_new(coordinator, "g"), join_new(coordinator, "g"))
            synced = await sync_all(coordinator, "g", [a, b])
            leader, follower = (a, b) if a.member_id == a.leader_id else (b, a)
            follower_sync = synced[[a, b].index(follower)]
            # a follower rejoining with unchanged metadata just gets the current generation
            again = await join(coordinator, "g", follower.member_id)
            assert again.error_code == errors.NONE
            assert again.generation_id == follower.generation_id and again.members == []
            assert coordinator.describe_group("g").state == "Stable"
            resync = await sync(coordinator, "g", again)
            assert resync.assignment == follower_sync.assignment
            # changed metadata forces a rebalance
            changed = asyncio.ensure_future(
                join(coordinator, "g", follower.member_id, protocols=[("range", b"new")])
            )
            await asyncio.sleep(0.01)
            assert coordinator.describe_group("g").state == "PreparingRebalance"
            assert await coordinator.heartbeat(
                "g", leader.generation_id, leader.member_id, None
            ) == (errors.REBALANCE_IN_PROGRESS)
            # a stale sync during the rebalance is told about it
            during = await sync(coordinator, "g", leader)
            assert during.error_code == errors.REBALANCE_IN_PROGRESS
            leader_again = await join(coordinator, "g", leader.member_id)
            follower_again = await changed
            assert leader_again.generation_id == follower_again.generation_id == 2
            metadata = {m.member_id: m.metadata for m in leader_again.members}
            assert metadata[follower.member_id] == b"new"

    run(body)


def test_rebalance_while_followers_wait_for_the_assignment(tmp_path):
    async def body():
        async with make_coordinator(tmp_path, initial_rebalance_delay_ms=100) as coordinator:
            a, b = await asyncio.gather(join_new(coordinator, "g"), join_new(coordinator, "g"))
            leader, follower = (a, b) if a.member_id == a.leader_id else (b, a)
            waiting = asyncio.ensure_future(sync(coordinator, "g", follower))
            await asyncio.sleep(0.01)
            assert not waiting.done()
            # heartbeats are fine while the group completes its rebalance
            assert await coordinator.heartbeat(
                "g", follower.generation_id, follower.member_id, None
            ) == (errors.NONE)
            # a new member arrives before the leader syncs: the waiting follower must rejoin
            newcomer = asyncio.ensure_future(join_new(coordinator, "g"))
            assert (await waiting).error_code == errors.REBALANCE_IN_PROGRESS
            results = await asyncio.gather(
                join(coordinator, "g", leader.member_id),
                join(coordinator, "g", follower.member_id),
                newcomer,
            )
            assert {r.generation_id for r in results} == {2}
            await sync_all(coordinator, "g", list(results))

    run(body)


def test_member_that_never_syncs_is_removed(tmp_path):
    async def body():
        async with make_coordinator(tmp_path, initial_rebalance_delay_ms=100) as coordinator:
            a, b = await asyncio.gather(
                join_new(coordinator, "g", rebalance_ms=200, session_ms=5000),
                join_new(coordinator, "g", rebalance_ms=200, session_ms=5000),
            )
            leader, follower = (a, b) if a.member_id == a.leader_id else (b, a)
            synced = await sync(coordinator, "g", leader, {leader.member_id: b"x"})
            assert synced.error_code == errors.NONE
            await asyncio.sleep(0.3)
            # the follower never sent SyncGroup: removed, and the group rebalances without it
            assert follower.member_id not in coordinator.debug_state()["g"]["members"]
            error = await coordinator.heartbeat("g", leader.generation_id, leader.member_id, None)
            assert error == errors.REBALANCE_IN_PROGRESS

    run(body)


def test_max_group_size(tmp_path):
    async def body():
        settings = {"max_group_size": 2, "initial_rebalance_delay_ms": 100}
        async with make_coordinator(tmp_path, **settings) as coordinator:
            a, b = await asyncio.gather(join_new(coordinator, "g"), join_new(coordinator, "g"))
            await sync_all(coordinator, "g", [a, b])
            third = await join_new(coordinator, "g")
            assert third.error_code == errors.GROUP_MAX_SIZE_REACHED and third.member_id == ""
            # during a rebalance the limit counts members that already rejoined: a newcomer
            # can take the seat of a member that has not rejoined yet, which is then refused
            leader, follower = (a, b) if a.member_id == a.leader_id else (b, a)
            rejoin = asyncio.ensure_future(join(coordinator, "g", leader.member_id))
            await asyncio.sleep(0)
            newcomer = asyncio.ensure_future(join_new(coordinator, "g"))
            await asyncio.sleep(0.01)
            refused = await join(coordinator, "g", follower.member_id)
            assert refused.error_code == errors.GROUP_MAX_SIZE_REACHED
            results = await asyncio.gather(rejoin, newcomer)
            assert {r.error_code for r in results} == {errors.NONE}
            assert len(coordinator.describe_group("g").members) == 2

    run(body)


def test_producer_protocol_type_is_just_another_group(tmp_path):
    """KIP-509 style "producer" groups: the coordinator never looks inside the metadata."""

    async def body():
        async with make_coordinator(tmp_path, initial_rebalance_delay_ms=100) as coordinator:
            metadata = [("txn-assignor", b"\x00\xffopaque\x00")]
            results = await asyncio.gather(
                *(
                    join_new(coordinator, "p", protocol_type="producer", protocols=metadata)
                    for _ in range(2)
                )
            )
            assert {r.protocol_type for r in results} == {"producer"}
            leader = next(r for r in results if r.member_id == r.leader_id)
            assert {m.metadata for m in leader.members} == {b"\x00\xffopaque\x00"}
            synced = await sync_all(coordinator, "p", list(results))
            assert all(s.protocol_type == "producer" for s in synced)
            assert coordinator.list_groups() == [("p", "producer", "Stable", "classic")]
            consumer = await join_new(coordinator, "p", protocol_type="consumer")
            assert consumer.error_code == errors.INCONSISTENT_GROUP_PROTOCOL

    run(body)


def test_simulated_consumers_converge_through_churn(tmp_path):
    """Three realistic clients; one leaves and one joins; everybody ends on one generation."""

    async def body():
        async with make_coordinator(tmp_path) as coordinator:
            members = [SimulatedMember(coordinator, "g", f"m{i}") for i in range(3)]
            for m in members:
                m.start()

            def converged(active):
                generations = {m.generation_id for m in active}
                description = coordinator.describe_group("g")
                return (
                    len(generations) == 1
                    and -1 not in generations
                    and description.state == "Stable"
                    and len(description.members) == len(active)
                    and all(m.assignment == b"assigned-to-" + m.member_id.encode() for m in active)
                )

            await wait_until(lambda: converged(members))
            await members[0].stop()
            late = SimulatedMember(coordinator, "g", "late", protocol_type="consumer")
            late.start()
            active = [*members[1:], late]
            await wait_until(lambda: converged(active))
            assert coordinator.describe_group("g").state == "Stable"
            for m in active:
                await m.stop()
            assert coordinator.describe_group("g").state == "Empty"

    run(body)


def test_cancelled_join_waiter_does_not_break_the_group(tmp_path):
    async def body():
        async with make_coordinator(tmp_path, initial_rebalance_delay_ms=50) as coordinator:
            first = await join(coordinator, "g")
            waiter = asyncio.ensure_future(join(coordinator, "g", first.member_id))
            await asyncio.sleep(0)
            waiter.cancel()
            other = await join_new(coordinator, "g")
            assert other.error_code == errors.NONE
            # the cancelled request's member is still part of the generation
            assert len(coordinator.describe_group("g").members) == 2

    run(body)


def test_close_answers_parked_requests(tmp_path):
    async def body():
        coordinator = make_coordinator(tmp_path, initial_rebalance_delay_ms=5000)
        await coordinator.start()
        parked = asyncio.ensure_future(join_new(coordinator, "g"))
        await asyncio.sleep(0.01)
        await coordinator.close()
        assert (await parked).error_code == errors.NOT_COORDINATOR

    run(body)


def test_initial_rebalance_delay_waits_for_stragglers(tmp_path):
    """group.initial.rebalance.delay.ms: each newcomer extends the first rebalance a little."""

    async def body():
        async with make_coordinator(tmp_path, initial_rebalance_delay_ms=120) as coordinator:
            loop = asyncio.get_running_loop()
            started = loop.time()
            joins = []
            for _ in range(3):
                joins.append(asyncio.ensure_future(join_new(coordinator, "g", rebalance_ms=2000)))
                await asyncio.sleep(0.08)  # each arrives before the current delay runs out
            results = await asyncio.gather(*joins)
            assert {r.generation_id for r in results} == {1}
            assert loop.time() - started >= 0.3

    run(body)


def test_lost_join_response_is_answered_again(tmp_path):
    async def body():
        async with make_coordinator(tmp_path, initial_rebalance_delay_ms=100) as coordinator:
            a, b = await asyncio.gather(join_new(coordinator, "g"), join_new(coordinator, "g"))
            assert coordinator.describe_group("g").state == "CompletingRebalance"
            leader = a if a.member_id == a.leader_id else b
            again = await join(coordinator, "g", leader.member_id)
            assert again == leader, "same generation, same member list"
            await sync_all(coordinator, "g", [a, b])

    run(body)


def test_pending_member_can_leave(tmp_path):
    async def body():
        async with make_coordinator(tmp_path) as coordinator:
            member = await join_new(coordinator, "g")
            await sync(coordinator, "g", member, {member.member_id: b""})
            pending = await join(coordinator, "g")
            assert pending.error_code == errors.MEMBER_ID_REQUIRED
            result = await coordinator.leave_group("g", [(pending.member_id, None)])
            assert result.members[0].error_code == errors.NONE
            assert coordinator.debug_state()["g"]["pending_members"] == []
            assert coordinator.describe_group("g").state == "Stable"

    run(body)
