"""Topic-level log configs with Kafka's names, defaults and validation rules.

CreateTopics, AlterConfigs and DescribeConfigs carry configs as strings; ``LogConfig.parse``
turns them into typed values and rejects what Kafka rejects with an ``InvalidConfigError``
naming the config. ``LogConfig.describe`` lists every config with its source (topic
override, broker default or built-in default) as DescribeConfigs reports them.

Values follow today's Kafka (4.x) with two deliberate exceptions, both documented on the
definitions below: ``segment.bytes`` keeps the 3.x minimum of 14 bytes so that tests and small
brokers can roll segments cheaply, and ``check.expected.offsets`` is kipproducer's own config
(docs/KIP-WIRE §4).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

from .errors import InvalidConfigError

LONG_MAX: Final = 2**63 - 1
INT_MAX: Final = 2**31 - 1

CLEANUP_DELETE: Final = "delete"
CLEANUP_COMPACT: Final = "compact"
CREATE_TIME: Final = "CreateTime"
LOG_APPEND_TIME: Final = "LogAppendTime"

# DescribeConfigs ConfigSource values (DescribeConfigsResponse.ConfigSource).
SOURCE_TOPIC_CONFIG: Final = 1  # DYNAMIC_TOPIC_CONFIG
SOURCE_STATIC_BROKER_CONFIG: Final = 4
SOURCE_DEFAULT_CONFIG: Final = 5

# DescribeConfigs v3+ ConfigType values.
TYPE_BOOLEAN: Final = 1
TYPE_STRING: Final = 2
TYPE_INT: Final = 3
TYPE_LONG: Final = 5
TYPE_LIST: Final = 7

_INTEGER = re.compile(r"[+-]?[0-9]+")


@dataclass(frozen=True, slots=True)
class ConfigDef:
    """One topic config: its Kafka name, type, default and what values are valid."""

    name: str
    attr: str  # the LogConfig attribute holding the parsed value
    config_type: int  # TYPE_* (DescribeConfigs ConfigType)
    default: Any
    validate: Callable[[Any], str | None]  # returns why a parsed value is invalid, or None
    broker_name: str | None  # the broker-level property that supplies the default
    doc: str

    def parse(self, text: str | None) -> Any:
        """The typed value of ``text``; raises InvalidConfigError for a malformed or bad one."""
        if text is None:
            raise InvalidConfigError(self.name, text, "null values are not supported")
        if not isinstance(text, str):
            raise InvalidConfigError(self.name, text, "config values are strings")
        stripped = text.strip()
        value: Any
        if self.config_type in (TYPE_INT, TYPE_LONG):
            if not _INTEGER.fullmatch(stripped):
                raise InvalidConfigError(self.name, text, "expected an integer")
            value = int(stripped)
            bound = INT_MAX if self.config_type == TYPE_INT else LONG_MAX
            if not -bound - 1 <= value <= bound:
                kind = "an int" if self.config_type == TYPE_INT else "a long"
                raise InvalidConfigError(self.name, text, f"does not fit {kind}")
        elif self.config_type == TYPE_BOOLEAN:
            lowered = stripped.lower()
            if lowered not in ("true", "false"):
                raise InvalidConfigError(self.name, text, "expected true or false")
            value = lowered == "true"
        elif self.config_type == TYPE_LIST:
            value = tuple(item.strip() for item in stripped.split(",")) if stripped else ()
        else:
            value = stripped
        self.check(value)
        return value

    def check(self, value: Any) -> None:
        reason = self.validate(value)
        if reason is not None:
            raise InvalidConfigError(self.name, self.render(value), reason)

    def render(self, value: Any) -> str:
        """The string form DescribeConfigs reports."""
        if self.config_type == TYPE_BOOLEAN:
            return "true" if value else "false"
        if self.config_type == TYPE_LIST:
            return ",".join(value)
        return str(value)


def _at_least(minimum: int) -> Callable[[Any], str | None]:
    def validate(value: Any) -> str | None:
        return None if value >= minimum else f"must be at least {minimum}"

    return validate


def _any_value(value: Any) -> str | None:
    return None


def _one_of(*choices: str) -> Callable[[Any], str | None]:
    def validate(value: Any) -> str | None:
        return None if value in choices else f"must be one of {', '.join(choices)}"

    return validate


def _cleanup_policy(value: Any) -> str | None:
    if not value:
        return "must name at least one of compact, delete"
    unknown = [item for item in value if item not in (CLEANUP_COMPACT, CLEANUP_DELETE)]
    if unknown:
        return f"unknown policy {unknown[0]!r}; valid values are compact, delete"
    if len(set(value)) != len(value):
        return "lists a policy twice"
    return None


# Kafka's TopicConfig definitions, in the order DescribeConfigs lists them.
CONFIG_DEFS: Final[tuple[ConfigDef, ...]] = (
    ConfigDef(
        name="check.expected.offsets",
        attr="check_expected_offsets",
        config_type=TYPE_BOOLEAN,
        default=False,
        validate=_any_value,
        broker_name=None,
        doc="kipproducer: when true the topic accepts only EXPECTED_OFFSETS produce requests "
        "(KIP-27); any other mode gets POLICY_VIOLATION.",
    ),
    ConfigDef(
        name="cleanup.policy",
        attr="cleanup_policy",
        config_type=TYPE_LIST,
        default=(CLEANUP_DELETE,),
        validate=_cleanup_policy,
        broker_name="log.cleanup.policy",
        doc="delete, compact or both: drop old segments, keep the latest value per key, or both.",
    ),
    ConfigDef(
        name="delete.retention.ms",
        attr="delete_retention_ms",
        config_type=TYPE_LONG,
        default=86_400_000,
        validate=_at_least(0),
        broker_name="log.cleaner.delete.retention.ms",
        doc="How long a tombstone survives compaction, so readers from offset 0 see deletes.",
    ),
    ConfigDef(
        name="flush.messages",
        attr="flush_messages",
        config_type=TYPE_LONG,
        default=LONG_MAX,
        validate=_at_least(1),
        broker_name="log.flush.interval.messages",
        doc="fsync after this many records; 1 syncs every append before it is acknowledged.",
    ),
    ConfigDef(
        name="flush.ms",
        attr="flush_ms",
        config_type=TYPE_LONG,
        default=LONG_MAX,
        validate=_at_least(0),
        broker_name="log.flush.interval.ms",
        doc="fsync when the oldest unflushed data is this old (checked by the periodic task).",
    ),
    ConfigDef(
        name="index.interval.bytes",
        attr="index_interval_bytes",
        config_type=TYPE_INT,
        default=4096,
        validate=_at_least(0),
        broker_name="log.index.interval.bytes",
        doc="Bytes of log between two offset index entries.",
    ),
    ConfigDef(
        name="max.message.bytes",
        attr="max_message_bytes",
        config_type=TYPE_INT,
        default=1_048_588,
        validate=_at_least(0),
        broker_name="message.max.bytes",
        doc="Largest record batch the topic accepts.",
    ),
    ConfigDef(
        name="message.timestamp.after.max.ms",
        attr="message_timestamp_after_max_ms",
        config_type=TYPE_LONG,
        default=3_600_000,
        validate=_at_least(0),
        broker_name="log.message.timestamp.after.max.ms",
        doc="How far in the future a CreateTime timestamp may be (Kafka 4.0 default: 1 hour).",
    ),
    ConfigDef(
        name="message.timestamp.before.max.ms",
        attr="message_timestamp_before_max_ms",
        config_type=TYPE_LONG,
        default=LONG_MAX,
        validate=_at_least(0),
        broker_name="log.message.timestamp.before.max.ms",
        doc="How far in the past a CreateTime timestamp may be.",
    ),
    ConfigDef(
        name="message.timestamp.type",
        attr="message_timestamp_type",
        config_type=TYPE_STRING,
        default=CREATE_TIME,
        validate=_one_of(CREATE_TIME, LOG_APPEND_TIME),
        broker_name="log.message.timestamp.type",
        doc="CreateTime keeps the producer's timestamps; LogAppendTime stamps the broker's clock.",
    ),
    ConfigDef(
        name="min.compaction.lag.ms",
        attr="min_compaction_lag_ms",
        config_type=TYPE_LONG,
        default=0,
        validate=_at_least(0),
        broker_name="log.cleaner.min.compaction.lag.ms",
        doc="A segment is compacted only once its newest record is at least this old.",
    ),
    ConfigDef(
        name="min.insync.replicas",
        attr="min_insync_replicas",
        config_type=TYPE_INT,
        default=1,
        validate=_at_least(1),
        broker_name="min.insync.replicas",
        doc="Replicas that must acknowledge an acks=all produce.",
    ),
    ConfigDef(
        name="retention.bytes",
        attr="retention_bytes",
        config_type=TYPE_LONG,
        default=-1,
        validate=_any_value,
        broker_name="log.retention.bytes",
        doc="Delete old segments while the partition is larger than this; -1 means no limit.",
    ),
    ConfigDef(
        name="retention.ms",
        attr="retention_ms",
        config_type=TYPE_LONG,
        default=604_800_000,
        validate=_at_least(-1),
        broker_name="log.retention.ms",
        doc="Delete segments whose newest record is older than this; -1 means forever.",
    ),
    ConfigDef(
        # Kafka 4.0 raised the minimum to 1 MiB (KIP-1030); 14 bytes (the 3.x minimum) lets
        # tests and small brokers roll segments cheaply.
        name="segment.bytes",
        attr="segment_bytes",
        config_type=TYPE_INT,
        default=1_073_741_824,
        validate=_at_least(14),
        broker_name="log.segment.bytes",
        doc="Roll a new segment when the active one would grow past this size.",
    ),
    ConfigDef(
        name="segment.ms",
        attr="segment_ms",
        config_type=TYPE_LONG,
        default=604_800_000,
        validate=_at_least(1),
        broker_name="log.roll.ms",
        doc="Roll a new segment when the active one spans more than this much time.",
    ),
)

CONFIG_BY_NAME: Final[Mapping[str, ConfigDef]] = {d.name: d for d in CONFIG_DEFS}
_DEF_BY_ATTR: Final[Mapping[str, ConfigDef]] = {d.attr: d for d in CONFIG_DEFS}


class ConfigEntry(NamedTuple):
    """One row of a DescribeConfigs answer."""

    name: str
    value: str
    source: int  # SOURCE_*
    is_default: bool
    read_only: bool
    sensitive: bool
    config_type: int  # TYPE_*
    documentation: str


def _parse_all(
    raw: Mapping[str, str | None], *, what: str, allow_unknown: bool = False
) -> dict[str, Any]:
    parsed: dict[str, Any] = {}
    for name, text in raw.items():
        definition = CONFIG_BY_NAME.get(name)
        if definition is None:
            if allow_unknown:
                continue
            raise InvalidConfigError(name, text, f"unknown {what} config")
        parsed[definition.attr] = definition.parse(text)
    return parsed


@dataclass(frozen=True)
class LogConfig:
    """The effective configs of one topic (all its partitions), immutable.

    Build it with ``LogConfig.parse(overrides, broker_defaults=...)`` from the strings a request
    carries, or ``LogConfig.of(segment_bytes=..., ...)`` from Python values; both validate.
    ``overrides`` keeps the topic-level settings as canonical strings (what is persisted and
    what DescribeConfigs reports as DYNAMIC_TOPIC_CONFIG); ``broker_defaults`` the broker-wide
    values under topic config names (reported as STATIC_BROKER_CONFIG).
    """

    check_expected_offsets: bool = False
    cleanup_policy: tuple[str, ...] = (CLEANUP_DELETE,)
    delete_retention_ms: int = 86_400_000
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    index_interval_bytes: int = 4096
    max_message_bytes: int = 1_048_588
    message_timestamp_after_max_ms: int = 3_600_000
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_type: str = CREATE_TIME
    min_compaction_lag_ms: int = 0
    min_insync_replicas: int = 1
    retention_bytes: int = -1
    retention_ms: int = 604_800_000
    segment_bytes: int = 1_073_741_824
    segment_ms: int = 604_800_000
    overrides: Mapping[str, str] = field(default_factory=dict, compare=False)
    broker_defaults: Mapping[str, str] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        for definition in CONFIG_DEFS:
            definition.check(getattr(self, definition.attr))

    @classmethod
    def parse(
        cls,
        overrides: Mapping[str, str | None] | None = None,
        *,
        broker_defaults: Mapping[str, str] | None = None,
    ) -> LogConfig:
        """Topic overrides (and broker-wide defaults) as strings -> a validated LogConfig.

        Unknown names and malformed or out-of-range values raise InvalidConfigError.
        """
        overrides = dict(overrides or {})
        broker_defaults = dict(broker_defaults or {})
        values = _parse_all(broker_defaults, what="broker default")
        values.update(_parse_all(overrides, what="topic"))
        canonical = {
            name: CONFIG_BY_NAME[name].render(values[CONFIG_BY_NAME[name].attr])
            for name in overrides
        }
        return cls(**values, overrides=canonical, broker_defaults=broker_defaults)

    @classmethod
    def of(cls, **values: Any) -> LogConfig:
        """A config from Python values by attribute name (``segment_bytes=1024``), as overrides."""
        overrides: dict[str, str] = {}
        for attr, value in values.items():
            definition = _DEF_BY_ATTR.get(attr)
            if definition is None:
                raise InvalidConfigError(attr, value, "unknown config attribute")
            if definition.config_type == TYPE_LIST and isinstance(value, str):
                value = tuple(item.strip() for item in value.split(","))
            overrides[definition.name] = definition.render(value)
        return cls.parse(overrides)

    def with_overrides(self, overrides: Mapping[str, str | None]) -> LogConfig:
        """The same broker defaults with a new, complete set of topic overrides (AlterConfigs)."""
        return LogConfig.parse(overrides, broker_defaults=self.broker_defaults)

    def altered(
        self, set_values: Mapping[str, str] | None = None, delete: Iterable[str] = ()
    ) -> LogConfig:
        """IncrementalAlterConfigs SET / DELETE applied to this config's overrides."""
        overrides: dict[str, str | None] = dict(self.overrides)
        for name in delete:
            if name not in CONFIG_BY_NAME:
                raise InvalidConfigError(name, None, "unknown topic config")
            overrides.pop(name, None)
        overrides.update(set_values or {})
        return self.with_overrides(overrides)

    def value_of(self, name: str) -> Any:
        """The typed value of a config by its Kafka name."""
        definition = CONFIG_BY_NAME.get(name)
        if definition is None:
            raise InvalidConfigError(name, None, "unknown topic config")
        return getattr(self, definition.attr)

    @property
    def compact(self) -> bool:
        return CLEANUP_COMPACT in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return CLEANUP_DELETE in self.cleanup_policy

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == LOG_APPEND_TIME

    def describe(self, names: Iterable[str] | None = None) -> list[ConfigEntry]:
        """DescribeConfigs rows, all configs or the ``names`` asked for (unknown ones skipped)."""
        wanted = (
            CONFIG_DEFS
            if names is None
            else [CONFIG_BY_NAME[name] for name in names if name in CONFIG_BY_NAME]
        )
        entries = []
        for definition in wanted:
            if definition.name in self.overrides:
                source = SOURCE_TOPIC_CONFIG
            elif definition.name in self.broker_defaults:
                source = SOURCE_STATIC_BROKER_CONFIG
            else:
                source = SOURCE_DEFAULT_CONFIG
            entries.append(
                ConfigEntry(
                    name=definition.name,
                    value=definition.render(getattr(self, definition.attr)),
                    source=source,
                    is_default=source == SOURCE_DEFAULT_CONFIG,
                    read_only=False,
                    sensitive=False,
                    config_type=definition.config_type,
                    documentation=definition.doc,
                )
            )
        return entries
