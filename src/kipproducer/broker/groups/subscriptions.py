"""The topics a "consumer" group's members subscribe to, read from their JoinGroup metadata.

The coordinator is otherwise generic over the protocol type; OffsetDelete is the one place where
Kafka looks inside: offsets of a topic that a live member of a consumer group subscribes to must
not be deleted (GROUP_SUBSCRIBED_TO_TOPIC). Every version of the ConsumerProtocol subscription
starts with ``version: int16, topics: [string]`` (int32 count, int16-length strings), which is
all that is read here.
"""

from __future__ import annotations

import struct

from .group import ClassicGroup

CONSUMER_PROTOCOL_TYPE = "consumer"


def subscription_topics(metadata: bytes) -> list[str]:
    """The topic list of one serialized subscription.

    :raises ValueError: for bytes that are not a subscription.
    """
    try:
        version, count = struct.unpack_from(">hi", metadata, 0)
        if version < 0 or count < 0:
            raise ValueError(f"not a consumer subscription (version {version}, {count} topics)")
        pos, topics = 6, []
        for _ in range(count):
            (length,) = struct.unpack_from(">h", metadata, pos)
            pos += 2
            if length < 0 or pos + length > len(metadata):
                raise ValueError("topic name runs past the subscription")
            topics.append(metadata[pos:pos + length].decode("utf-8"))
            pos += length
    except (struct.error, UnicodeDecodeError) as e:
        raise ValueError(f"not a consumer subscription: {e}") from None
    return topics


def subscribed_topics(group: ClassicGroup) -> set[str] | None:
    """The union of the members' subscriptions for the group's selected protocol.

    None when it cannot be known (no protocol selected yet, or a member's metadata does not
    parse): Kafka then treats no topic as subscribed.
    """
    if group.protocol_type != CONSUMER_PROTOCOL_TYPE or group.protocol_name is None:
        return None
    topics: set[str] = set()
    for member in group.members.values():
        try:
            topics.update(subscription_topics(member.metadata(group.protocol_name)))
        except ValueError:
            return None
    return topics
