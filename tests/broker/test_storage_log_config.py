"""LogConfig: Kafka names, defaults, parsing from strings and DescribeConfigs sources."""

from __future__ import annotations

import pytest

from kipproducer.broker.storage import InvalidConfigError, LogConfig
from kipproducer.broker.storage import errors as storage_errors
from kipproducer.broker.storage.log_config import (
    CONFIG_DEFS,
    LONG_MAX,
    SOURCE_DEFAULT_CONFIG,
    SOURCE_STATIC_BROKER_CONFIG,
    SOURCE_TOPIC_CONFIG,
    TYPE_BOOLEAN,
    TYPE_LIST,
)


def test_defaults_are_kafkas():
    config = LogConfig()
    assert config.segment_bytes == 1_073_741_824
    assert config.segment_ms == 7 * 24 * 3600 * 1000
    assert config.retention_ms == 7 * 24 * 3600 * 1000
    assert config.retention_bytes == -1
    assert config.cleanup_policy == ("delete",) and config.delete and not config.compact
    assert config.delete_retention_ms == 86_400_000
    assert config.min_compaction_lag_ms == 0
    assert config.flush_messages == LONG_MAX and config.flush_ms == LONG_MAX
    assert config.index_interval_bytes == 4096
    assert config.max_message_bytes == 1_048_588
    assert config.message_timestamp_type == "CreateTime"
    assert config.message_timestamp_before_max_ms == LONG_MAX
    assert config.message_timestamp_after_max_ms == 3_600_000
    assert config.min_insync_replicas == 1
    assert config.check_expected_offsets is False
    for definition in CONFIG_DEFS:
        assert getattr(config, definition.attr) == definition.default, definition.name


def test_parse_from_strings():
    config = LogConfig.parse(
        {
            "segment.bytes": " 1048576 ",
            "cleanup.policy": "compact, delete",
            "check.expected.offsets": "TRUE",
            "message.timestamp.type": "LogAppendTime",
            "retention.ms": "-1",
        }
    )
    assert config.segment_bytes == 1_048_576
    assert config.cleanup_policy == ("compact", "delete") and config.compact and config.delete
    assert config.check_expected_offsets is True
    assert config.log_append_time
    assert config.retention_ms == -1
    assert config.overrides["cleanup.policy"] == "compact,delete"
    assert config.overrides["check.expected.offsets"] == "true"
    assert config.value_of("segment.bytes") == 1_048_576


@pytest.mark.parametrize(
    ("name", "value", "reason"),
    [
        ("segment.bytes", "abc", "Not a number of type INT"),
        ("segment.bytes", "1.5", "Not a number of type INT"),
        ("segment.bytes", "3000000000", "Not a number of type INT"),
        ("segment.bytes", "10", "at least 14"),
        ("retention.ms", "-2", "at least -1"),
        ("flush.messages", "0", "at least 1"),
        ("cleanup.policy", "compact,nope", "String must be one of: compact, delete"),
        ("cleanup.policy", "delete,delete", "twice"),
        ("message.timestamp.type", "createtime", "one of"),
        ("check.expected.offsets", "yes", "true or false"),
        ("min.insync.replicas", "0", "at least 1"),
        ("no.such.config", "1", "Unknown topic config name: no.such.config"),
        ("retention.ms", None, "null"),
    ],
)
def test_bad_values_are_refused_with_the_config_name(name, value, reason):
    with pytest.raises(InvalidConfigError) as excinfo:
        LogConfig.parse({name: value})
    assert excinfo.value.name == name
    assert reason in str(excinfo.value)
    assert excinfo.value.error_code == 40


def test_an_empty_cleanup_policy_neither_deletes_nor_compacts():
    """Kafka takes an empty cleanup.policy (what SUBTRACT of the last policy leaves)."""
    config = LogConfig.parse({"cleanup.policy": ""})
    assert config.cleanup_policy == ()
    assert not config.delete and not config.compact
    assert config.overrides["cleanup.policy"] == ""


def test_describe_reports_sources():
    config = LogConfig.parse({"retention.ms": "1000"}, broker_defaults={"segment.ms": "5000"})
    entries = {entry.name: entry for entry in config.describe()}
    assert len(entries) == len(CONFIG_DEFS)
    assert entries["retention.ms"].value == "1000"
    assert entries["retention.ms"].source == SOURCE_TOPIC_CONFIG
    assert entries["segment.ms"].value == "5000"
    assert entries["segment.ms"].source == SOURCE_STATIC_BROKER_CONFIG
    assert entries["segment.bytes"].source == SOURCE_DEFAULT_CONFIG
    assert entries["segment.bytes"].is_default
    assert entries["check.expected.offsets"].config_type == TYPE_BOOLEAN
    assert entries["check.expected.offsets"].value == "false"
    assert entries["cleanup.policy"].config_type == TYPE_LIST
    assert [e.name for e in config.describe(["segment.ms", "unknown"])] == ["segment.ms"]


def test_alter_and_incremental_alter():
    config = LogConfig.parse({"retention.ms": "1000", "segment.ms": "2000"})
    replaced = config.with_overrides({"retention.bytes": "10"})
    assert replaced.overrides == {"retention.bytes": "10"}
    assert replaced.retention_ms == LogConfig().retention_ms
    altered = config.altered({"retention.bytes": "10"}, delete=["segment.ms"])
    assert altered.overrides == {"retention.ms": "1000", "retention.bytes": "10"}
    with pytest.raises(InvalidConfigError):
        config.altered({"retention.bytes": "x"})


def test_of_builds_from_python_values():
    config = LogConfig.of(segment_bytes=2048, cleanup_policy="compact", flush_messages=1)
    assert config.overrides == {
        "segment.bytes": "2048",
        "cleanup.policy": "compact",
        "flush.messages": "1",
    }
    with pytest.raises(InvalidConfigError):
        LogConfig.of(segment_bytes=1)
    with pytest.raises(InvalidConfigError):
        LogConfig(flush_ms=-5)


def test_storage_error_codes_match_the_protocol_table():
    from kipproducer.protocol import error_codes

    for name in (
        "OFFSET_OUT_OF_RANGE",
        "UNKNOWN_TOPIC_OR_PARTITION",
        "INVALID_TOPIC_EXCEPTION",
        "TOPIC_ALREADY_EXISTS",
        "INVALID_PARTITIONS",
        "INVALID_CONFIG",
        "KAFKA_STORAGE_ERROR",
        "OFFSET_MISMATCH",
        "INVALID_PRODUCE_OFFSET",
    ):
        assert getattr(storage_errors, name) == error_codes.error_code(name), name
