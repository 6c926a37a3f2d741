"""Every Kafka 3.9 topic config, spelled out once as data, plus kipproducer's own.

Names, types, defaults, valid values and broker synonyms are Kafka's (TopicConfig and the
broker's log config), with two deliberate differences documented on their rows:
``message.timestamp.after.max.ms`` has Kafka 4.0's one-hour default, and
``check.expected.offsets`` is kipproducer's (docs/protocol.md §4). ``support`` says what this
single-node broker does with each (docs/broker.md has the table).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from .config_def import (
    HONOURED,
    LONG_MAX,
    NO_OP,
    PARTLY,
    TYPE_BOOLEAN,
    TYPE_DOUBLE,
    TYPE_INT,
    TYPE_LIST,
    TYPE_LONG,
    TYPE_STRING,
    ConfigDef,
    Synonym,
    any_value,
    at_least,
    between,
    either,
    one_of,
)

CLEANUP_DELETE: Final = "delete"
CLEANUP_COMPACT: Final = "compact"
CREATE_TIME: Final = "CreateTime"
LOG_APPEND_TIME: Final = "LogAppendTime"
#: compression.type values: a codec, "uncompressed", or "producer" (keep what was sent).
COMPRESSION_TYPES: Final = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")

HOUR_MS: Final = 3_600_000
MINUTE_MS: Final = 60_000

_THROTTLED_REPLICA = re.compile(r"[0-9]+:[0-9]+")
# Kafka releases a message.format.version may name (any 0.8 .. 3.x release or IV level).
_KAFKA_VERSION = re.compile(r"(0\.(8|9|10|11)(\.[0-9]+){0,2}|[1-3]\.[0-9]+(\.[0-9]+)?)(-IV[0-9]+)?")


def _cleanup_policy(value: Any) -> str | None:
    # Empty is valid, as in Kafka (its ValidList takes an empty list): neither delete nor
    # compact, so the topic keeps every record (what IncrementalAlterConfigs' SUBTRACT of the
    # last policy leaves).
    unknown = [item for item in value if item not in (CLEANUP_COMPACT, CLEANUP_DELETE)]
    if unknown:
        return f"unknown policy {unknown[0]!r}; valid values are compact, delete"
    if len(set(value)) != len(value):
        return "lists a policy twice"
    return None


def _throttled_replicas(value: Any) -> str | None:
    # Kafka: empty, "*", or partitionId:brokerId pairs.
    if value == ("*",) or all(_THROTTLED_REPLICA.fullmatch(item) for item in value):
        return None
    return "must be * or a list of partitionId:brokerId pairs"


def _kafka_version(value: Any) -> str | None:
    if _KAFKA_VERSION.fullmatch(value):
        return None
    return "must be a Kafka version up to 3.9 (like 2.8 or 3.0-IV1)"


def _no_remote_storage(value: Any) -> str | None:
    if value:
        return (
            "tiered storage needs a remote log manager and a remote storage plugin; this "
            "single-node reference broker has neither, so topics keep every segment locally"
        )
    return None


def _topic(name: str, config_type: int, default: Any, validate, doc: str, *synonyms: Synonym,
           support: str = HONOURED, unsupported=None) -> ConfigDef:
    return ConfigDef(
        name=name,
        attr=name.replace(".", "_"),
        config_type=config_type,
        default=default,
        validate=validate,
        doc=doc,
        synonyms=synonyms,
        support=support,
        unsupported=unsupported,
    )


# In the order DescribeConfigs lists them (by name, as Kafka does).
TOPIC_CONFIG_DEFS: Final[tuple[ConfigDef, ...]] = (
    _topic("check.expected.offsets", TYPE_BOOLEAN, False, any_value,
           "kipproducer: when true the topic accepts only EXPECTED_OFFSETS produce requests "
           "(KIP-27); any other mode gets POLICY_VIOLATION."),
    _topic("cleanup.policy", TYPE_LIST, (CLEANUP_DELETE,), _cleanup_policy,
           ("delete, compact, both or neither (empty): drop old segments, keep the latest value "
            "per key, both, or keep every record."),
           Synonym("log.cleanup.policy")),
    _topic("compression.gzip.level", TYPE_INT, -1, either(one_of(-1), between(1, 9)),
           "Level used when the broker gzips a batch; -1: the codec's default.",
           Synonym("compression.gzip.level")),
    _topic("compression.lz4.level", TYPE_INT, 9, between(1, 17),
           "Level used when the broker lz4-compresses a batch.",
           Synonym("compression.lz4.level")),
    _topic("compression.type", TYPE_STRING, "producer", one_of(*COMPRESSION_TYPES),
           "Codec of the stored batches: the broker recompresses a batch sent with another one; "
           "'producer' keeps what was sent, 'uncompressed' stores it uncompressed.",
           Synonym("compression.type")),
    _topic("compression.zstd.level", TYPE_INT, 3, between(-131072, 22),
           "Level used when the broker zstd-compresses a batch.",
           Synonym("compression.zstd.level")),
    _topic("delete.retention.ms", TYPE_LONG, 86_400_000, at_least(0),
           "How long a tombstone survives compaction, so readers from offset 0 see deletes.",
           Synonym("log.cleaner.delete.retention.ms")),
    _topic("file.delete.delay.ms", TYPE_LONG, 60_000, at_least(0),
           "Kafka waits this long before removing a deleted segment's files; here they are "
           "removed at once (open readers keep their file handles).",
           Synonym("log.segment.delete.delay.ms"), support=NO_OP),
    _topic("flush.messages", TYPE_LONG, LONG_MAX, at_least(1),
           "fsync after this many records; 1 syncs every append before it is acknowledged.",
           Synonym("log.flush.interval.messages")),
    _topic("flush.ms", TYPE_LONG, LONG_MAX, at_least(0),
           "fsync when the oldest unflushed data is this old (checked by the periodic task).",
           Synonym("log.flush.interval.ms")),
    _topic("follower.replication.throttled.replicas", TYPE_LIST, (), _throttled_replicas,
           "Replication throttling; there is no follower on one node.", support=NO_OP),
    _topic("index.interval.bytes", TYPE_INT, 4096, at_least(0),
           "Bytes of log between two offset index entries.",
           Synonym("log.index.interval.bytes")),
    _topic("key.conditional.partitions", TYPE_INT, 0, at_least(0),
           "kipproducer: the partition count per-key conditions (docs/protocol.md §10) were "
           "first made with, set by the broker at the first one; a condition made with another "
           "count, or on the topic once its count changed, gets PARTITION_COUNT_MISMATCH. 0: "
           "not set yet (delete it to take the current count again)."),
    _topic("leader.replication.throttled.replicas", TYPE_LIST, (), _throttled_replicas,
           "Replication throttling; there is no follower on one node.", support=NO_OP),
    _topic("local.retention.bytes", TYPE_LONG, -2, at_least(-2),
           "Local part of a tiered topic; without tiered storage retention.bytes rules.",
           Synonym("log.local.retention.bytes"), support=NO_OP),
    _topic("local.retention.ms", TYPE_LONG, -2, at_least(-2),
           "Local part of a tiered topic; without tiered storage retention.ms rules.",
           Synonym("log.local.retention.ms"), support=NO_OP),
    _topic("max.compaction.lag.ms", TYPE_LONG, LONG_MAX, at_least(1),
           "A record stays uncompacted at most this long: the cleaner then cleans the "
           "partition whatever its dirty ratio, and the active segment rolls in time for it.",
           Synonym("log.cleaner.max.compaction.lag.ms")),
    _topic("max.message.bytes", TYPE_INT, 1_048_588, at_least(0),
           "Largest record batch the topic accepts.",
           Synonym("message.max.bytes")),
    _topic("message.downconversion.enable", TYPE_BOOLEAN, True, any_value,
           "Down-conversion for old fetch versions; this broker serves v2 batches only.",
           Synonym("log.message.downconversion.enable"), support=NO_OP),
    _topic("message.format.version", TYPE_STRING, "3.0-IV1", _kafka_version,
           "Deprecated in Kafka 3.0; batches are always written in the v2 format.",
           Synonym("log.message.format.version"), support=NO_OP),
    # Kafka 3.9's default is Long.MAX_VALUE; 4.0 lowered it to one hour, which is kept here.
    _topic("message.timestamp.after.max.ms", TYPE_LONG, 3_600_000, at_least(0),
           "How far in the future a CreateTime timestamp may be (Kafka 4.0 default: 1 hour).",
           Synonym("log.message.timestamp.after.max.ms")),
    _topic("message.timestamp.before.max.ms", TYPE_LONG, LONG_MAX, at_least(0),
           "How far in the past a CreateTime timestamp may be.",
           Synonym("log.message.timestamp.before.max.ms")),
    _topic("message.timestamp.difference.max.ms", TYPE_LONG, LONG_MAX, at_least(0),
           "Deprecated since Kafka 3.6; the before/after configs decide here.",
           Synonym("log.message.timestamp.difference.max.ms"), support=NO_OP),
    _topic("message.timestamp.type", TYPE_STRING, CREATE_TIME,
           one_of(CREATE_TIME, LOG_APPEND_TIME),
           "CreateTime keeps the producer's timestamps; LogAppendTime stamps the broker's clock.",
           Synonym("log.message.timestamp.type")),
    _topic("min.cleanable.dirty.ratio", TYPE_DOUBLE, 0.5, between(0, 1),
           "The cleaner compacts a partition once its uncleaned bytes are at least this share "
           "of its cleanable bytes.",
           Synonym("log.cleaner.min.cleanable.ratio")),
    _topic("min.compaction.lag.ms", TYPE_LONG, 0, at_least(0),
           "A segment is compacted only once its newest record is at least this old.",
           Synonym("log.cleaner.min.compaction.lag.ms")),
    _topic("min.insync.replicas", TYPE_INT, 1, at_least(1),
           "Replicas that must acknowledge an acks=all produce; one node is always enough.",
           Synonym("min.insync.replicas"), support=NO_OP),
    _topic("preallocate", TYPE_BOOLEAN, False, any_value,
           "Kafka preallocates segment files; here segment files grow as they are written.",
           Synonym("log.preallocate"), support=NO_OP),
    _topic("remote.log.copy.disable", TYPE_BOOLEAN, False, any_value,
           "Tiered storage read-only mode; there is no remote storage here.", support=NO_OP),
    _topic("remote.log.delete.on.disable", TYPE_BOOLEAN, False, any_value,
           "Tiered storage clean-up on disable; there is no remote storage here.", support=NO_OP),
    _topic("remote.storage.enable", TYPE_BOOLEAN, False, any_value,
           "Tiered storage; true is refused: this broker keeps every segment locally.",
           support=PARTLY, unsupported=_no_remote_storage),
    _topic("retention.bytes", TYPE_LONG, -1, any_value,
           "Delete old segments while the partition is larger than this; -1 means no limit.",
           Synonym("log.retention.bytes")),
    _topic("retention.ms", TYPE_LONG, 604_800_000, at_least(-1),
           "Delete segments whose newest record is older than this; -1 means forever.",
           Synonym("log.retention.ms"), Synonym("log.retention.minutes", MINUTE_MS),
           Synonym("log.retention.hours", HOUR_MS)),
    _topic("segment.bytes", TYPE_INT, 1_073_741_824, at_least(14),
           "Roll a new segment when the active one would grow past this size.",
           Synonym("log.segment.bytes")),
    _topic("segment.index.bytes", TYPE_INT, 10_485_760, at_least(4),
           "Size limit of a segment's offset index (8 bytes an entry): a segment whose index "
           "is full rolls.",
           Synonym("log.index.size.max.bytes")),
    _topic("segment.jitter.ms", TYPE_LONG, 0, at_least(0),
           "Each segment rolls up to this much earlier than segment.ms (random per segment).",
           Synonym("log.roll.jitter.ms"), Synonym("log.roll.jitter.hours", HOUR_MS)),
    _topic("segment.ms", TYPE_LONG, 604_800_000, at_least(1),
           "Roll a new segment when the active one spans more than this much time.",
           Synonym("log.roll.ms"), Synonym("log.roll.hours", HOUR_MS)),
    _topic("unclean.leader.election.enable", TYPE_BOOLEAN, False, any_value,
           "Leader election among out-of-sync replicas; one node is the only replica.",
           Synonym("unclean.leader.election.enable"), support=NO_OP),
)

TOPIC_CONFIG_BY_NAME: Final[Mapping[str, ConfigDef]] = {d.name: d for d in TOPIC_CONFIG_DEFS}

#: Broker property -> (topic config it supplies the default for, its unit in ms or 1).
BROKER_SYNONYMS: Final[Mapping[str, tuple[str, int]]] = {
    synonym.name: (definition.name, synonym.unit_ms)
    for definition in TOPIC_CONFIG_DEFS
    for synonym in definition.synonyms
}


def synonym_default(definition: ConfigDef) -> tuple[str, str] | None:
    """(broker property, its built-in default as text) for the DEFAULT_CONFIG synonym."""
    if not definition.synonyms:
        return None
    last = definition.synonyms[-1]
    value = definition.default
    if last.unit_ms != 1:
        value //= last.unit_ms
    return last.name, definition.render(value)
