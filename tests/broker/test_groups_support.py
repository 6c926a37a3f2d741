"""Helpers shared by the group coordinator tests (this module holds no tests).

Imported by the other ``test_groups_*`` modules whether or not ``tests/broker`` is a package.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kipproducer.broker.groups import GroupCoordinator, JoinResult, SyncResult
from kipproducer.protocol import error_codes as errors

# Short timings so the suite runs in seconds; the coordinator allows them via its bounds.
SESSION_MS = 400
REBALANCE_MS = 400
TEST_TIMEOUT_S = 15.0

RANGE = [("range", b"range-meta")]


def run(test: Callable[[], Awaitable[Any]]) -> Any:
    """Run one async test body on a fresh loop, with a hard timeout so a bug cannot hang CI."""

    async def bounded() -> Any:
        return await asyncio.wait_for(test(), TEST_TIMEOUT_S)

    return asyncio.run(bounded())


def make_coordinator(data_dir: Path, **overrides: Any) -> GroupCoordinator:
    settings: dict[str, Any] = {
        "min_session_timeout_ms": 10,
        "max_session_timeout_ms": 60_000,
        "initial_rebalance_delay_ms": 0,
    }
    settings.update(overrides)
    return GroupCoordinator(data_dir, **settings)


async def join(
    coordinator: GroupCoordinator,
    group_id: str,
    member_id: str = "",
    *,
    instance_id: str | None = None,
    protocol_type: str = "consumer",
    protocols: list[tuple[str, bytes]] | None = None,
    session_ms: int = SESSION_MS,
    rebalance_ms: int = REBALANCE_MS,
    client_id: str = "client",
    require_known_member_id: bool = True,
    skip_assignment_supported: bool = False,
) -> JoinResult:
    """One JoinGroup request."""
    return await coordinator.join_group(
        group_id,
        member_id,
        instance_id,
        protocol_type,
        RANGE if protocols is None else protocols,
        session_ms,
        rebalance_ms,
        client_id,
        "/127.0.0.1",
        require_known_member_id=require_known_member_id,
        skip_assignment_supported=skip_assignment_supported,
    )


async def join_new(coordinator: GroupCoordinator, group_id: str, **kwargs: Any) -> JoinResult:
    """JoinGroup v4+ as clients do it: get MEMBER_ID_REQUIRED, rejoin with the given id."""
    first = await join(coordinator, group_id, **kwargs)
    if first.error_code != errors.MEMBER_ID_REQUIRED:
        return first
    return await join(coordinator, group_id, first.member_id, **kwargs)


async def sync(
    coordinator: GroupCoordinator,
    group_id: str,
    joined: JoinResult,
    assignments: dict[str, bytes] | None = None,
    *,
    instance_id: str | None = None,
) -> SyncResult:
    return await coordinator.sync_group(
        group_id,
        joined.generation_id,
        joined.member_id,
        instance_id,
        joined.protocol_type,
        joined.protocol_name,
        assignments or {},
    )


def assign_all(joined: JoinResult) -> dict[str, bytes]:
    """A recognisable assignment for every member the leader was given."""
    return {m.member_id: b"assigned-to-" + m.member_id.encode() for m in joined.members}


async def sync_all(
    coordinator: GroupCoordinator, group_id: str, results: list[JoinResult]
) -> list[SyncResult]:
    """Every member syncs; the leader sends ``assign_all``. Followers first, to show they wait."""
    leader = next(r for r in results if r.member_id == r.leader_id)
    followers = [r for r in results if r is not leader]
    tasks = [asyncio.ensure_future(sync(coordinator, group_id, r)) for r in followers]
    await asyncio.sleep(0.01)
    assert not any(t.done() for t in tasks), "followers must wait for the leader's SyncGroup"
    leader_sync = await sync(coordinator, group_id, leader, assign_all(leader))
    synced = {id(r): s for r, s in zip(followers, await asyncio.gather(*tasks), strict=True)}
    return [leader_sync if r is leader else synced[id(r)] for r in results]


@dataclass
class SimulatedMember:
    """A client that behaves like a consumer: joins (with the MEMBER_ID_REQUIRED dance), syncs,
    heartbeats every ``heartbeat_ms``, and rejoins when told to, until stopped."""

    coordinator: GroupCoordinator
    group_id: str
    name: str
    protocol_type: str = "consumer"
    instance_id: str | None = None
    heartbeat_ms: int = 40
    member_id: str = ""
    generation_id: int = -1
    assignment: bytes | None = None
    history: list[tuple[int, bytes]] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None
    _stopping: bool = False

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def stop(self, *, leave: bool = True) -> None:
        self._stopping = True
        assert self._task is not None
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass
        if leave and self.member_id:
            await self.coordinator.leave_group(self.group_id, [(self.member_id, self.instance_id)])

    async def _run(self) -> None:
        while not self._stopping:
            joined = await join(
                self.coordinator,
                self.group_id,
                self.member_id,
                instance_id=self.instance_id,
                protocol_type=self.protocol_type,
                client_id=self.name,
            )
            if joined.error_code == errors.MEMBER_ID_REQUIRED:
                self.member_id = joined.member_id
                continue
            if joined.error_code == errors.UNKNOWN_MEMBER_ID:
                self.member_id = ""
                continue
            if joined.error_code != errors.NONE:
                await asyncio.sleep(0.01)
                continue
            self.member_id = joined.member_id
            assignments = assign_all(joined) if joined.member_id == joined.leader_id else {}
            synced = await sync(
                self.coordinator, self.group_id, joined, assignments, instance_id=self.instance_id
            )
            if synced.error_code != errors.NONE:
                continue
            self.generation_id = joined.generation_id
            self.assignment = synced.assignment
            self.history.append((self.generation_id, synced.assignment))
            while True:
                await asyncio.sleep(self.heartbeat_ms / 1000)
                error = await self.coordinator.heartbeat(
                    self.group_id, self.generation_id, self.member_id, self.instance_id
                )
                if error != errors.NONE:
                    break


async def wait_until(
    condition: Callable[[], bool], timeout_s: float = 5.0, interval_s: float = 0.01
) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(interval_s)
