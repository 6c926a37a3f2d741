"""The durable part of the coordinator's state, and its JSON form.

Only what Kafka itself writes to ``__consumer_offsets`` survives a restart: committed offsets,
the pending offsets of open transactions (TxnOffsetCommit, not yet committed or aborted), and
the group metadata of the last completed rebalance (protocol, generation, leader, members with
their subscription and assignment). In-flight joins and syncs are soft state; after a restart
members learn about it through UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION and rejoin.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

from .results import TopicPartition


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    """One partition's offset as a commit wrote it.

    ``record_seq`` is the position of the commit's record in the store's history (Kafka uses the
    record's offset in ``__consumer_offsets``): when a transaction commits, its offsets replace
    the committed ones only if they were written later, so a plain OffsetCommit that arrived
    while the transaction was open is not overwritten by older transactional offsets.
    """

    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    record_seq: int = 0


@dataclass(frozen=True, slots=True)
class PendingTxnOffsets:
    """The offsets one producer committed to a group inside its open transaction
    (TxnOffsetCommit): invisible to OffsetFetch until the transaction commits. Immutable, so
    the store and the coordinator can share one value."""

    producer_epoch: int
    offsets: dict[TopicPartition, CommittedOffset]


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
    ever received admin commits), its committed offsets and the pending transactional offsets
    per producer id."""

    metadata: StoredGroupMetadata | None = None
    offsets: dict[TopicPartition, CommittedOffset] = field(default_factory=dict)
    pending: dict[int, PendingTxnOffsets] = field(default_factory=dict)


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
    """Compact rows: [topic, partition, offset, leader_epoch, metadata, commit_timestamp_ms,
    record_seq]."""
    return [
        [
            topic,
            partition,
            o.offset,
            o.leader_epoch,
            o.metadata,
            o.commit_timestamp_ms,
            o.record_seq,
        ]
        for (topic, partition), o in offsets.items()
    ]


def offsets_from_json(rows: list[list[Any]]) -> dict[TopicPartition, CommittedOffset]:
    """Rows of 7 columns, or of 6 (written before ``record_seq`` existed: sequence 0)."""
    found: dict[TopicPartition, CommittedOffset] = {}
    for row in rows:
        topic, partition, offset, epoch, meta, ts = row[:6]
        (seq,) = row[6:] or (0,)
        found[(str(topic), int(partition))] = CommittedOffset(
            int(offset), int(epoch), str(meta), int(ts), int(seq)
        )
    return found


def pending_to_json(pending: dict[int, PendingTxnOffsets]) -> list[list[Any]]:
    """Rows: [producer_id, producer_epoch, offset rows]."""
    return [
        [producer_id, p.producer_epoch, offsets_to_json(p.offsets)]
        for producer_id, p in pending.items()
    ]


def pending_from_json(rows: list[list[Any]]) -> dict[int, PendingTxnOffsets]:
    return {
        int(producer_id): PendingTxnOffsets(int(epoch), offsets_from_json(offsets))
        for producer_id, epoch, offsets in rows
    }


def partitions_to_json(partitions: list[TopicPartition]) -> list[list[Any]]:
    return [[topic, partition] for topic, partition in partitions]


def partitions_from_json(rows: list[list[Any]]) -> list[TopicPartition]:
    return [(str(topic), int(partition)) for topic, partition in rows]
