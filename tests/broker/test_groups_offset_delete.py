"""OffsetDelete in the group coordinator, and the consumer subscriptions it reads."""

from __future__ import annotations

import struct

import pytest

from kipproducer.broker.groups.subscriptions import subscription_topics
from kipproducer.protocol import error_codes as errors

if __package__:
    from .test_groups_support import join_new, make_coordinator, run, sync
else:
    from test_groups_support import join_new, make_coordinator, run, sync


def subscription(*topics: str, version: int = 1) -> bytes:
    """A ConsumerProtocolSubscription: version, topics, null user data, no owned partitions."""
    out = struct.pack(">hi", version, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1) + struct.pack(">i", 0)


def test_subscription_topics_reads_every_version_prefix():
    assert subscription_topics(subscription("a", "bb", version=0)) == ["a", "bb"]
    assert subscription_topics(subscription("orders", version=3)) == ["orders"]
    for broken in (b"", b"\x00\x01", struct.pack(">hi", 1, 2) + b"\x00\x05ab",
                   struct.pack(">hi", -1, 0)):
        with pytest.raises(ValueError):
            subscription_topics(broken)


def test_delete_offsets_rules(tmp_path):
    async def body():
        async with make_coordinator(tmp_path) as coordinator:
            assert coordinator.delete_offsets("", [("t", 0)]) == (errors.INVALID_GROUP_ID, {})
            assert coordinator.delete_offsets("none", [("t", 0)]) == (
                errors.GROUP_ID_NOT_FOUND, {})
            member = await join_new(coordinator, "g",
                                    protocols=[("range", subscription("watched"))])
            await sync(coordinator, "g", member, {member.member_id: b""})
            await coordinator.commit_offsets(
                "g", member.generation_id, member.member_id, None,
                {("watched", 0): (1, None, None), ("other", 0): (2, None, None)})
            assert coordinator.delete_offsets("g", [("watched", 0), ("other", 0)]) == (
                errors.NONE,
                {("watched", 0): errors.GROUP_SUBSCRIBED_TO_TOPIC, ("other", 0): errors.NONE},
            )
            assert coordinator.fetch_offsets("g") == {("watched", 0): (1, -1, "")}

            # Metadata that is no subscription: nothing counts as subscribed, as in Kafka.
            odd = await join_new(coordinator, "odd", protocols=[("range", b"\xff")])
            await sync(coordinator, "odd", odd, {odd.member_id: b""})
            await coordinator.commit_offsets("odd", odd.generation_id, odd.member_id, None,
                                             {("watched", 0): (3, None, None)})
            assert coordinator.delete_offsets("odd", [("watched", 0)]) == (
                errors.NONE, {("watched", 0): errors.NONE})

            # Another protocol type with members: the whole group is refused.
            other = await join_new(coordinator, "connect", protocol_type="connect")
            assert coordinator.delete_offsets("connect", [("t", 0)]) == (
                errors.NON_EMPTY_GROUP, {})
            assert other.error_code == errors.NONE

    run(body)
