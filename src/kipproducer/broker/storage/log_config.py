"""Topic-level log configs: the effective values of one topic, parsed and validated.

CreateTopics, AlterConfigs and DescribeConfigs carry configs as strings; ``LogConfig.parse``
turns them into typed values and rejects what Kafka rejects with an ``InvalidConfigError``
naming the config. ``LogConfig.describe`` lists every config with its source (topic
override, broker default or built-in default) and its broker synonyms, as DescribeConfigs
reports them. The configs themselves (names, types, defaults, validation) are the table in
topic_configs.py; ``segment.bytes`` keeps the 3.x minimum of 14 bytes so that tests and small
brokers can roll segments cheaply.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

from .config_def import (
    INT_MAX,
    LONG_MAX,
    SOURCE_DEFAULT_CONFIG,
    SOURCE_STATIC_BROKER_CONFIG,
    SOURCE_TOPIC_CONFIG,
    TYPE_BOOLEAN,
    TYPE_DOUBLE,
    TYPE_INT,
    TYPE_LIST,
    TYPE_LONG,
    TYPE_STRING,
    ConfigDef,
)
from .errors import InvalidConfigError
from .topic_configs import (
    CLEANUP_COMPACT,
    CLEANUP_DELETE,
    CREATE_TIME,
    LOG_APPEND_TIME,
    TOPIC_CONFIG_BY_NAME,
    TOPIC_CONFIG_DEFS,
    synonym_default,
)

__all__ = [
    "CLEANUP_COMPACT", "CLEANUP_DELETE", "CONFIG_BY_NAME", "CONFIG_DEFS", "CREATE_TIME",
    "INT_MAX", "LOG_APPEND_TIME", "LONG_MAX", "SOURCE_DEFAULT_CONFIG",
    "SOURCE_STATIC_BROKER_CONFIG", "SOURCE_TOPIC_CONFIG", "TYPE_BOOLEAN", "TYPE_DOUBLE",
    "TYPE_INT", "TYPE_LIST", "TYPE_LONG", "TYPE_STRING", "ConfigDef", "ConfigEntry",
    "ConfigSynonym", "LogConfig",
]

CONFIG_DEFS: Final[tuple[ConfigDef, ...]] = TOPIC_CONFIG_DEFS
CONFIG_BY_NAME: Final[Mapping[str, ConfigDef]] = TOPIC_CONFIG_BY_NAME
_DEF_BY_ATTR: Final[Mapping[str, ConfigDef]] = {d.attr: d for d in CONFIG_DEFS}


class ConfigSynonym(NamedTuple):
    """One DescribeConfigs synonym: where a value could come from, most specific first."""

    name: str
    value: str
    source: int  # SOURCE_*


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
    synonyms: tuple[ConfigSynonym, ...] = ()


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
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_type: str = "producer"
    compression_zstd_level: int = 3
    delete_retention_ms: int = 86_400_000
    file_delete_delay_ms: int = 60_000
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    follower_replication_throttled_replicas: tuple[str, ...] = ()
    index_interval_bytes: int = 4096
    key_conditional_partitions: int = 0
    leader_replication_throttled_replicas: tuple[str, ...] = ()
    local_retention_bytes: int = -2
    local_retention_ms: int = -2
    max_compaction_lag_ms: int = LONG_MAX
    max_message_bytes: int = 1_048_588
    message_downconversion_enable: bool = True
    message_format_version: str = "3.0-IV1"
    message_timestamp_after_max_ms: int = 3_600_000
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_difference_max_ms: int = LONG_MAX
    message_timestamp_type: str = CREATE_TIME
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    min_insync_replicas: int = 1
    preallocate: bool = False
    remote_log_copy_disable: bool = False
    remote_log_delete_on_disable: bool = False
    remote_storage_enable: bool = False
    retention_bytes: int = -1
    retention_ms: int = 604_800_000
    segment_bytes: int = 1_073_741_824
    segment_index_bytes: int = 10_485_760
    segment_jitter_ms: int = 0
    segment_ms: int = 604_800_000
    unclean_leader_election_enable: bool = False
    overrides: Mapping[str, str] = field(default_factory=dict, compare=False)
    broker_defaults: Mapping[str, str] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        for definition in CONFIG_DEFS:
            definition.check(getattr(self, definition.attr))
        # Kafka's one rule across two configs (LogConfig.validateValues).
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:
            raise InvalidConfigError(
                "min.compaction.lag.ms",
                str(self.min_compaction_lag_ms),
                f"conflicts with max.compaction.lag.ms={self.max_compaction_lag_ms}: the minimum "
                "lag may not exceed the maximum",
            )

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

    def describe(
        self,
        names: Iterable[str] | None = None,
        broker_properties: Mapping[str, str] | None = None,
    ) -> list[ConfigEntry]:
        """DescribeConfigs rows, all configs or the ``names`` asked for (unknown ones skipped).

        ``broker_properties``: the broker properties set at start, by their broker names
        (log.retention.hours, ...), for the synonyms, each a value or a list of (value,
        source) most specific first (dynamic broker configs); without them the broker
        defaults stand in under each config's first broker synonym.
        """
        wanted = (
            CONFIG_DEFS
            if names is None
            else [CONFIG_BY_NAME[name] for name in names if name in CONFIG_BY_NAME]
        )
        if broker_properties is None:
            broker_properties = {
                CONFIG_BY_NAME[name].broker_name or name: value
                for name, value in self.broker_defaults.items()
                if name in CONFIG_BY_NAME
            }
        entries = []
        for definition in wanted:
            synonyms = self._synonyms(definition, broker_properties)
            # Kafka: the value's source is its most specific synonym's.
            source = synonyms[0].source if synonyms else SOURCE_DEFAULT_CONFIG
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
                    synonyms=tuple(synonyms),
                )
            )
        return entries

    def _synonyms(
        self, definition: ConfigDef, broker_properties: Mapping[str, str]
    ) -> list[ConfigSynonym]:
        """Where the value could come from, in precedence order, as Kafka lists synonyms: the
        topic override, each broker property set at start, the broker's built-in default."""
        out = []
        if definition.name in self.overrides:
            out.append(
                ConfigSynonym(definition.name, self.overrides[definition.name], SOURCE_TOPIC_CONFIG)
            )
        for synonym in definition.synonyms:
            if synonym.name in broker_properties:
                given = broker_properties[synonym.name]
                # A value set at start, or (dynamic broker configs) its levels, most specific
                # first: [(value, source), ...].
                levels = given if isinstance(given, list) else [
                    (given, SOURCE_STATIC_BROKER_CONFIG)]
                for value, source in levels:
                    out.append(ConfigSynonym(synonym.name, str(value), source))
        default = synonym_default(definition)
        if default is not None:
            out.append(ConfigSynonym(*default, SOURCE_DEFAULT_CONFIG))
        return out
