"""The consumer group metadata ``send_offsets_to_transaction`` needs (KIP-447).

``confluent_kafka.Consumer.consumer_group_metadata()`` returns plain ``bytes``: librdkafka's
``rd_kafka_consumer_group_metadata_write()`` output, which confluent-kafka hands back to
librdkafka's reader unchanged. Its layout (librdkafka 1.6 and later, "v2"):

    b"CGMDv2:"            magic and version
    int32                 generation id, in the writing machine's byte order (a memcpy)
    group id  + NUL
    member id + NUL
    1 byte                1: no group instance id; 0: the instance id follows
    [group instance id + NUL]

:func:`parse_group_metadata` reads that, and also takes a :class:`GroupMetadata` (for code
without a confluent Consumer) or a plain group id string (generation -1, no member: the
broker then checks no membership, as for Kafka's ``sendOffsetsToTransaction(offsets,
groupId)``).
"""

from __future__ import annotations

import struct
import sys
from dataclasses import dataclass

MAGIC = b"CGMDv2:"
_GENERATION = struct.Struct("<i" if sys.byteorder == "little" else ">i")


@dataclass(frozen=True)
class GroupMetadata:
    """Who commits offsets in a transaction: the group, and (KIP-447) the member's
    generation, member id and static instance id, which the group coordinator checks."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


def parse_group_metadata(value: object) -> GroupMetadata:
    """A GroupMetadata from what a caller passed as ``group_metadata``; TypeError or
    ValueError (with what is wrong) for anything else."""
    if isinstance(value, GroupMetadata):
        return value
    if isinstance(value, str):
        if not value:
            raise ValueError("group_metadata: the group id is empty")
        return GroupMetadata(value)
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise TypeError("group_metadata must be what Consumer.consumer_group_metadata() "
                        "returns (bytes), a kipproducer GroupMetadata or a group id string, "
                        f"not {type(value).__name__}")
    data = bytes(value)
    if not data.startswith(MAGIC):
        raise ValueError("group_metadata is not librdkafka consumer group metadata "
                         f"(expected the {MAGIC!r} header)")
    pos = len(MAGIC)
    if len(data) < pos + _GENERATION.size:
        raise ValueError("group_metadata is truncated")
    (generation,) = _GENERATION.unpack_from(data, pos)
    pos += _GENERATION.size
    group_id, pos = _cstring(data, pos)
    member_id, pos = _cstring(data, pos)
    if pos >= len(data):
        raise ValueError("group_metadata is truncated")
    instance_is_null = data[pos]
    pos += 1
    instance = None
    if not instance_is_null:
        instance, pos = _cstring(data, pos)
    if not group_id:
        raise ValueError("group_metadata has an empty group id")
    return GroupMetadata(group_id, generation, member_id, instance)


def _cstring(data: bytes, pos: int) -> tuple[str, int]:
    end = data.find(b"\x00", pos)
    if end < 0:
        raise ValueError("group_metadata is truncated")
    return data[pos:end].decode("utf-8"), end + 1
