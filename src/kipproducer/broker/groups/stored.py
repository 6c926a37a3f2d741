"""The durable part of the coordinator's state, and its JSON form.

Only what Kafka itself writes to ``__consumer_offsets`` survives a restart: committed offsets
and the group metadata of the last completed rebalance (protocol, generation, leader, members
with their subscription and assignment). In-flight joins and syncs are soft state; after a
restart members learn about it through UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION and rejoin.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

from .results import TopicPartition


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int


@dataclass(frozen=True, slots=True)
class StoredMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    # metadata for the group's selected protocol only, as Kafka stores it
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class StoredGroupMetadata:
    group_id: str
    protocol_type: str | None
    generation_id: int
    protocol_name: str | None
    leader_id: str | None
    state_timestamp_ms: int | None
    members: tuple[StoredMember, ...] = ()


@dataclass(slots=True)
class StoredGroup:
    """Everything durable about one group: its last metadata record (None for a group that only
    ever received admin commits) and its committed offsets."""

    metadata: StoredGroupMetadata | None = None
    offsets: dict[TopicPartition, CommittedOffset] = field(default_factory=dict)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


def metadata_to_json(metadata: StoredGroupMetadata) -> dict[str, Any]:
    return {
        "group_id": metadata.group_id,
        "protocol_type": metadata.protocol_type,
        "generation_id": metadata.generation_id,
        "protocol_name": metadata.protocol_name,
        "leader_id": metadata.leader_id,
        "state_timestamp_ms": metadata.state_timestamp_ms,
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "rebalance_timeout_ms": m.rebalance_timeout_ms,
                "session_timeout_ms": m.session_timeout_ms,
                "subscription": _b64(m.subscription),
                "assignment": _b64(m.assignment),
            }
            for m in metadata.members
        ],
    }


def metadata_from_json(doc: dict[str, Any]) -> StoredGroupMetadata:
    return StoredGroupMetadata(
        group_id=str(doc["group_id"]),
        protocol_type=doc["protocol_type"],
        generation_id=int(doc["generation_id"]),
        protocol_name=doc["protocol_name"],
        leader_id=doc["leader_id"],
        state_timestamp_ms=doc["state_timestamp_ms"],
        members=tuple(
            StoredMember(
                member_id=str(m["member_id"]),
                group_instance_id=m["group_instance_id"],
                client_id=str(m["client_id"]),
                client_host=str(m["client_host"]),
                rebalance_timeout_ms=int(m["rebalance_timeout_ms"]),
                session_timeout_ms=int(m["session_timeout_ms"]),
                subscription=_unb64(m["subscription"]),
                assignment=_unb64(m["assignment"]),
            )
            for m in doc["members"]
        ),
    )


def offsets_to_json(offsets: dict[TopicPartition, CommittedOffset]) -> list[list[Any]]:
    """Compact rows: [topic, partition, offset, leader_epoch, metadata, commit_timestamp_ms]."""
    return [
        [topic, partition, o.offset, o.leader_epoch, o.metadata, o.commit_timestamp_ms]
        for (topic, partition), o in offsets.items()
    ]


def offsets_from_json(rows: list[list[Any]]) -> dict[TopicPartition, CommittedOffset]:
    return {
        (str(topic), int(partition)): CommittedOffset(int(offset), int(epoch), str(meta), int(ts))
        for topic, partition, offset, epoch, meta, ts in rows
    }


def partitions_to_json(partitions: list[TopicPartition]) -> list[list[Any]]:
    return [[topic, partition] for topic, partition in partitions]


def partitions_from_json(rows: list[list[Any]]) -> list[TopicPartition]:
    return [(str(topic), int(partition)) for topic, partition in rows]
