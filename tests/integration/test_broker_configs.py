"""Topic and broker configs through stock admin clients (librdkafka and kafka-python).

Every Kafka 3.9 topic config is accepted with Kafka's validation, described with its source and
synonyms, altered by AlterConfigs and IncrementalAlterConfigs (SET / DELETE / APPEND /
SUBTRACT); the broker resource lists a Kafka 3.9 key set; internal topic names are reserved.
Recompression (compression.type) has its own module: test_broker_compression_type.py.
"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)
from integration_support import KipBroker, unique
from kafka.admin import ConfigResource as KpResource
from kafka.admin import ConfigResourceType, KafkaAdminClient
from kafka.admin import NewTopic as KpNewTopic

TIMEOUT = 15.0
BROKER_PROPS = {
    "num.partitions": "1",
    "log.retention.hours": "48",
    "log.cleaner.min.cleanable.ratio": "0.3",
}

# What a mirror copies from a Kafka 3.9 source topic: must all be accepted together.
KAFKA_SOURCE_CONFIGS = {
    "cleanup.policy": "compact,delete",
    "compression.type": "lz4",
    "min.cleanable.dirty.ratio": "0.25",
    "max.compaction.lag.ms": "3600000",
    "min.compaction.lag.ms": "1000",
    "message.format.version": "2.8-IV1",
    "message.downconversion.enable": "false",
    "min.insync.replicas": "2",
    "unclean.leader.election.enable": "true",
    "leader.replication.throttled.replicas": "0:1,1:2",
    "follower.replication.throttled.replicas": "*",
    "segment.jitter.ms": "1000",
    "segment.index.bytes": "1048576",
    "file.delete.delay.ms": "1000",
    "preallocate": "true",
    "local.retention.ms": "-2",
    "remote.storage.enable": "false",
    "message.timestamp.difference.max.ms": "86400000",
    "compression.lz4.level": "12",
}


@pytest.fixture(scope="module")
def broker(module_broker_factory) -> KipBroker:
    return module_broker_factory(BROKER_PROPS)


@pytest.fixture
def admin(broker: KipBroker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def result(futures: dict):
    """The one result of a dict of admin futures, or its KafkaError."""
    [future] = futures.values()
    try:
        return future.result(TIMEOUT)
    except KafkaException as exc:
        return exc.args[0]


def describe(admin: AdminClient, kind: ResourceType, name: str) -> dict[str, ConfigEntry]:
    configs = result(admin.describe_configs([ConfigResource(kind, name)]))
    assert not isinstance(configs, KafkaError), configs
    return configs


def incremental(admin: AdminClient, topic: str, *ops: tuple[str, str | None, AlterConfigOpType]):
    entries = [ConfigEntry(n, v, incremental_operation=op) for n, v, op in ops]
    return result(admin.incremental_alter_configs(
        [ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)]))


def create(admin: AdminClient, topic: str, config: dict[str, str]):
    return result(admin.create_topics([NewTopic(topic, 1, 1, config=config)]))


def test_kafka_source_configs_round_trip(admin: AdminClient) -> None:
    topic = unique("cfg-mirror")
    assert create(admin, topic, KAFKA_SOURCE_CONFIGS) is None
    configs = describe(admin, ResourceType.TOPIC, topic)
    for name, value in KAFKA_SOURCE_CONFIGS.items():
        assert configs[name].value == value, name
        assert configs[name].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value, name
        assert not configs[name].is_default and not configs[name].is_read_only
        assert not configs[name].is_sensitive
    # Kafka 3.9's full topic config set, plus kipproducer's check.expected.offsets and
    # key.conditional.partitions.
    assert len(configs) == 38
    assert configs["key.conditional.partitions"].value == "0"
    assert configs["check.expected.offsets"].value == "false"
    assert configs["compression.zstd.level"].value == "3"
    assert configs["remote.log.copy.disable"].source == ConfigSource.DEFAULT_CONFIG.value


def test_sources_and_synonyms_follow_the_broker(admin: AdminClient) -> None:
    topic = unique("cfg-syn")
    assert create(admin, topic, {"segment.ms": "60000"}) is None
    configs = describe(admin, ResourceType.TOPIC, topic)
    # log.retention.hours=48 on the broker is the topic's retention.ms, in ms.
    retention = configs["retention.ms"]
    assert retention.value == str(48 * 3_600_000)
    assert retention.source == ConfigSource.STATIC_BROKER_CONFIG.value
    # librdkafka keys synonyms by name: log.retention.hours is there (set, and defaulted).
    assert set(retention.synonyms) == {"log.retention.hours"}
    ratio = configs["min.cleanable.dirty.ratio"]
    assert (ratio.value, ratio.source) == ("0.3", ConfigSource.STATIC_BROKER_CONFIG.value)
    segment = configs["segment.ms"]
    assert segment.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert "segment.ms" in segment.synonyms and "log.roll.hours" in segment.synonyms
    assert segment.synonyms["log.roll.hours"].value == "168"
    assert segment.synonyms["log.roll.hours"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["min.insync.replicas"].is_default


def test_kafka_python_describe_types_and_synonym_order(broker: KipBroker) -> None:
    topic = unique("cfg-kp")
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([KpNewTopic(topic, 1, 1, topic_configs={
            "min.cleanable.dirty.ratio": "0.2", "retention.ms": "5000"})])
        described = admin.describe_configs(
            [KpResource(ConfigResourceType.TOPIC, topic)], include_synonyms=True,
            config_filter="all")["topic"][topic]
        ratio = described["min.cleanable.dirty.ratio"]
        assert (ratio["value"], ratio["config_type"]) == ("0.2", "DOUBLE")
        assert described["cleanup.policy"]["config_type"] == "LIST"
        assert described["segment.bytes"]["config_type"] == "INT"
        assert described["retention.ms"]["config_type"] == "LONG"
        assert described["preallocate"]["config_type"] == "BOOLEAN"
        # Most specific first: the topic override, the broker's setting, the built-in default.
        assert [(s["name"], s["value"], s["source"])
                for s in described["retention.ms"]["synonyms"]] == [
            ("retention.ms", "5000", "DYNAMIC_TOPIC_CONFIG"),
            ("log.retention.hours", "48", "STATIC_BROKER_CONFIG"),
            ("log.retention.hours", "168", "DEFAULT_CONFIG"),
        ]
        assert [(s["name"], s["source"]) for s in ratio["synonyms"]] == [
            ("min.cleanable.dirty.ratio", "DYNAMIC_TOPIC_CONFIG"),
            ("log.cleaner.min.cleanable.ratio", "STATIC_BROKER_CONFIG"),
            ("log.cleaner.min.cleanable.ratio", "DEFAULT_CONFIG"),
        ]
        # kafka-python's alter_configs keeps the other overrides (it alters incrementally).
        answer = admin.alter_configs([KpResource(ConfigResourceType.TOPIC, topic, configs={
            "compression.type": "zstd", "message.format.version": "3.0"})])
        assert answer == {"topic": {topic: "OK"}}
        after = admin.describe_configs([KpResource(ConfigResourceType.TOPIC, topic)],
                                       config_filter="all")["topic"][topic]
        assert after["compression.type"]["value"] == "zstd"
        assert after["message.format.version"]["value"] == "3.0"
        assert after["min.cleanable.dirty.ratio"]["value"] == "0.2"
        refused = admin.alter_configs([KpResource(ConfigResourceType.TOPIC, topic, configs={
            "compression.type": "brotli"})])["topic"][topic]
        assert "40" in refused and "compression.type" in refused
    finally:
        admin.close()


def test_incremental_alter_list_and_scalar_configs(admin: AdminClient) -> None:
    topic = unique("cfg-incr")
    assert create(admin, topic, {"leader.replication.throttled.replicas": "0:1"}) is None
    set_, delete = AlterConfigOpType.SET, AlterConfigOpType.DELETE
    append, subtract = AlterConfigOpType.APPEND, AlterConfigOpType.SUBTRACT
    assert incremental(
        admin, topic,
        ("leader.replication.throttled.replicas", "1:1,2:1", append),
        ("follower.replication.throttled.replicas", "3:1", append),  # from the empty default
        ("min.cleanable.dirty.ratio", "0.75", set_),
        ("compression.type", "snappy", set_),
    ) is None
    configs = describe(admin, ResourceType.TOPIC, topic)
    assert configs["leader.replication.throttled.replicas"].value == "0:1,1:1,2:1"
    assert configs["follower.replication.throttled.replicas"].value == "3:1"
    assert configs["min.cleanable.dirty.ratio"].value == "0.75"
    assert configs["compression.type"].value == "snappy"

    assert incremental(
        admin, topic,
        ("leader.replication.throttled.replicas", "0:1,2:1", subtract),
        ("compression.type", None, delete),
    ) is None
    configs = describe(admin, ResourceType.TOPIC, topic)
    assert configs["leader.replication.throttled.replicas"].value == "1:1"
    assert configs["compression.type"].value == "producer"
    assert configs["compression.type"].is_default

    # APPEND on a scalar config, and a bad value: refused, nothing changes.
    err = incremental(admin, topic, ("min.cleanable.dirty.ratio", "0.1", append))
    assert isinstance(err, KafkaError) and err.code() == KafkaError.INVALID_CONFIG
    assert err.str() == ("Can't APPEND to key min.cleanable.dirty.ratio because its type is "
                         "not LIST.")
    err = incremental(admin, topic, ("min.cleanable.dirty.ratio", "2", set_),
                      ("segment.jitter.ms", "5", set_))
    assert isinstance(err, KafkaError) and err.code() == KafkaError.INVALID_CONFIG
    configs = describe(admin, ResourceType.TOPIC, topic)
    assert configs["min.cleanable.dirty.ratio"].value == "0.75"
    assert configs["segment.jitter.ms"].is_default


@pytest.mark.parametrize(
    ("config", "words"),
    [
        ({"compression.type": "brotli"}, "must be one of uncompressed, zstd, lz4"),
        ({"compression.type": "none"}, "must be one of"),  # Kafka says "uncompressed"
        ({"min.cleanable.dirty.ratio": "1.5"}, "between 0 and 1"),
        ({"min.cleanable.dirty.ratio": "half"}, "expected a number"),
        ({"message.timestamp.type": "createtime"}, "CreateTime, LogAppendTime"),
        ({"message.format.version": "9.9"}, "Kafka version"),
        ({"remote.storage.enable": "true"}, "tiered storage"),
        ({"leader.replication.throttled.replicas": "a:b"}, "partitionId:brokerId"),
        ({"compression.gzip.level": "10"}, "between 1 and 9"),
        ({"segment.index.bytes": "3"}, "at least 4"),
        ({"max.compaction.lag.ms": "0"}, "at least 1"),
        ({"min.compaction.lag.ms": "5000", "max.compaction.lag.ms": "1000"}, "conflicts"),
        ({"preallocate": "yes"}, "true or false"),
    ],
    ids=lambda v: "-".join(v) if isinstance(v, dict) else None,
)
def test_invalid_values_are_refused_with_a_reason(admin: AdminClient, config, words) -> None:
    topic = unique("cfg-bad")
    err = create(admin, topic, config)
    assert isinstance(err, KafkaError), err
    assert err.code() == KafkaError.INVALID_CONFIG
    assert words in err.str(), err.str()
    assert topic not in admin.list_topics(timeout=TIMEOUT).topics


def test_broker_describe_configs(admin: AdminClient, broker: KipBroker) -> None:
    configs = describe(admin, ResourceType.BROKER, "1")
    expected_static = {
        "listeners": f"PLAINTEXT://127.0.0.1:{broker.port}",
        "log.dirs": str(broker.data_dir),
        "num.partitions": "1",
        "log.retention.hours": "48",
        "log.cleaner.min.cleanable.ratio": "0.3",
    }
    for name, value in expected_static.items():
        assert configs[name].value == value, name
        assert configs[name].source == ConfigSource.STATIC_BROKER_CONFIG.value, name
    expected_default = {
        # Derived from the listener, not given: DEFAULT_CONFIG, as Kafka 3.9 reports it.
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{broker.port}",
        "broker.id": "1",
        "node.id": "1",
        "default.replication.factor": "1",
        "auto.create.topics.enable": "true",
        "log.segment.bytes": "1073741824",
        "log.retention.bytes": "-1",
        "log.cleanup.policy": "delete",
        "message.max.bytes": "1048588",
        "compression.type": "producer",
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "min.insync.replicas": "1",
        "unclean.leader.election.enable": "false",
        "log.roll.hours": "168",
        "log.message.format.version": "3.0-IV1",
    }
    for name, value in expected_default.items():
        assert configs[name].value == value, name
        assert configs[name].source == ConfigSource.DEFAULT_CONFIG.value, name
    # Unset, more specific synonyms have no value, as in Kafka.
    assert configs["log.retention.ms"].value is None
    # Kafka's dynamic configs are writable (test_broker_dynamic_configs.py), the rest not.
    assert not configs["log.retention.hours"].is_read_only
    assert configs["num.partitions"].is_read_only and configs["log.dirs"].is_read_only
    err = result(admin.incremental_alter_configs([ConfigResource(
        ResourceType.BROKER, "1", incremental_configs=[ConfigEntry(
            "node.id", "2", incremental_operation=AlterConfigOpType.SET)])]))
    assert isinstance(err, KafkaError) and err.code() == KafkaError.INVALID_REQUEST
    assert "Cannot update these configs dynamically: Set(node.id)" in err.str()


def test_kafka_python_broker_configs(broker: KipBroker) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        described = admin.describe_configs([KpResource(ConfigResourceType.BROKER, "1")],
                                           config_filter="all")["broker"]["1"]
    finally:
        admin.close()
    assert described["advertised.listeners"]["value"] == f"PLAINTEXT://{broker.bootstrap}"
    assert described["num.partitions"]["config_type"] == "INT"
    assert described["log.cleaner.min.cleanable.ratio"]["config_type"] == "DOUBLE"
    assert described["auto.create.topics.enable"]["config_type"] == "BOOLEAN"
    assert described["process.roles"]["value"] == "broker,controller"


def test_internal_topic_names_are_reserved(admin: AdminClient) -> None:
    for name in ("__consumer_offsets", "__transaction_state"):
        err = create(admin, name, {})
        assert isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS
        assert "internal topic" in err.str()
    err = create(admin, "__cluster_metadata", {})
    assert isinstance(err, KafkaError) and err.code() == KafkaError.INVALID_REQUEST
    # Not auto-created by a metadata request either, and never listed as a user topic.
    meta = admin.list_topics("__consumer_offsets", timeout=TIMEOUT)
    assert meta.topics["__consumer_offsets"].error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    listed = admin.list_topics(timeout=TIMEOUT).topics
    assert "__consumer_offsets" not in listed and "__transaction_state" not in listed
