"""confluent-kafka AdminClient against the broker subprocess: topics, configs, partitions.

One broker serves the whole module (each test uses its own topic names); it is started with a
couple of broker properties so DescribeConfigs on the broker has something set to report.
"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicCollection
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)
from integration_support import KipBroker, consume_records, create_topics, unique

TIMEOUT = 15.0
BROKER_PROPS = {"num.partitions": "2", "log.flush.interval.ms": "500"}


@pytest.fixture(scope="module")
def broker(module_broker_factory) -> KipBroker:
    return module_broker_factory(BROKER_PROPS)


@pytest.fixture
def admin(broker: KipBroker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def results(futures: dict, timeout: float = TIMEOUT) -> dict:
    """{key: None or the result, or the KafkaError} for a dict of admin futures."""
    out = {}
    for key, future in futures.items():
        try:
            out[key] = future.result(timeout)
        except KafkaException as exc:
            out[key] = exc.args[0]
    return out


def error_of(futures: dict) -> KafkaError:
    [value] = results(futures).values()
    assert isinstance(value, KafkaError), f"expected an error, got {value!r}"
    return value


def topic_configs(admin: AdminClient, name: str) -> dict:
    value = results(admin.describe_configs([ConfigResource(ResourceType.TOPIC, name)]))
    [entries] = value.values()
    assert not isinstance(entries, KafkaError), entries
    return entries


def partition_count(admin: AdminClient, name: str) -> int:
    meta = admin.list_topics(name, timeout=TIMEOUT)
    topic = meta.topics[name]
    assert topic.error is None, topic.error
    return len(topic.partitions)


def test_create_topic_with_configs_then_describe_and_list(admin: AdminClient, broker) -> None:
    name = unique("admin-create")
    created = results(
        admin.create_topics(
            [
                NewTopic(
                    name,
                    3,
                    1,
                    config={"cleanup.policy": "compact", "retention.ms": "123456"},
                )
            ]
        )
    )
    assert created == {name: None}

    meta = admin.list_topics(timeout=TIMEOUT)
    assert name in meta.topics
    assert meta.cluster_id == "kipproducer-cluster"
    assert [b.id for b in meta.brokers.values()] == [1]
    parts = meta.topics[name].partitions
    assert sorted(parts) == [0, 1, 2]
    for p in parts.values():
        # One node: it leads every partition and is its only replica.
        assert (p.leader, p.replicas, p.isrs) == (1, [1], [1])

    [described] = results(admin.describe_topics(TopicCollection([name]))).values()
    assert described.name == name
    assert [p.id for p in described.partitions] == [0, 1, 2]
    assert all(p.leader.id == 1 for p in described.partitions)

    configs = topic_configs(admin, name)
    # Set at creation: a topic override, not a default.
    for key, value in (("cleanup.policy", "compact"), ("retention.ms", "123456")):
        assert configs[key].value == value
        assert configs[key].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
        assert not configs[key].is_default
    # Not set anywhere: Kafka's default.
    assert configs["segment.bytes"].value == "1073741824"
    assert configs["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["segment.bytes"].is_default
    # log.flush.interval.ms given to the broker is the topic's flush.ms, from the broker.
    assert configs["flush.ms"].value == "500"
    assert configs["flush.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value


def test_create_topic_default_partitions_and_validate_only(admin: AdminClient) -> None:
    name = unique("admin-default")
    # -1 partitions: the broker's num.partitions (2 for this broker).
    assert results(admin.create_topics([NewTopic(name, -1, -1)])) == {name: None}
    assert partition_count(admin, name) == 2

    dry = unique("admin-dry")
    assert results(admin.create_topics([NewTopic(dry, 1, 1)], validate_only=True)) == {dry: None}
    assert dry not in admin.list_topics(timeout=TIMEOUT).topics


def test_describe_broker_configs(admin: AdminClient, broker: KipBroker) -> None:
    [configs] = results(admin.describe_configs([ConfigResource(ResourceType.BROKER, "1")])).values()
    assert not isinstance(configs, KafkaError), configs
    assert configs["num.partitions"].value == "2"
    assert configs["socket.request.max.bytes"].value == "104857600"
    assert configs["auto.create.topics.enable"].value == "true"
    assert configs["node.id"].value == "1"
    # Kafka tells properties set in the broker's configuration from built-in defaults.
    assert configs["num.partitions"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert configs["socket.request.max.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["log.flush.interval.ms"].value == "500"
    assert configs["log.flush.interval.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value


def test_incremental_alter_configs(admin: AdminClient, broker: KipBroker) -> None:
    name = unique("admin-incr")
    create_topics(broker.bootstrap, {name: 1}, {"cleanup.policy": "compact"})

    def alter(*entries: ConfigEntry):
        return results(
            admin.incremental_alter_configs(
                [ConfigResource(ResourceType.TOPIC, name, incremental_configs=list(entries))]
            )
        )

    ok = alter(
        ConfigEntry("retention.ms", "999000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.APPEND),
    )
    assert list(ok.values()) == [None]
    configs = topic_configs(admin, name)
    assert configs["retention.ms"].value == "999000"
    assert configs["cleanup.policy"].value == "compact,delete"

    ok = alter(
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SUBTRACT),
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
    )
    assert list(ok.values()) == [None]
    configs = topic_configs(admin, name)
    assert configs["cleanup.policy"].value == "delete"
    # Deleted override: back to the default, reported as one.
    assert configs["retention.ms"].value == "604800000"
    assert configs["retention.ms"].is_default

    # A bad value is refused and changes nothing.
    [err] = alter(
        ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("segment.bytes", "2000000", incremental_operation=AlterConfigOpType.SET),
    ).values()
    assert isinstance(err, KafkaError) and err.code() == KafkaError.INVALID_CONFIG
    configs = topic_configs(admin, name)
    assert configs["retention.ms"].value == "604800000"
    assert configs["segment.bytes"].is_default

    # num.partitions is read-only in Kafka 3.9: refused, with a reason.
    [err] = results(
        admin.incremental_alter_configs(
            [
                ConfigResource(
                    ResourceType.BROKER,
                    "1",
                    incremental_configs=[
                        ConfigEntry(
                            "num.partitions", "5", incremental_operation=AlterConfigOpType.SET
                        )
                    ],
                )
            ]
        )
    ).values()
    assert isinstance(err, KafkaError)


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_alter_configs_replaces_every_override(admin: AdminClient, broker: KipBroker) -> None:
    name = unique("admin-alter")
    create_topics(broker.bootstrap, {name: 1}, {"retention.ms": "5000"})
    ok = results(
        admin.alter_configs(
            [ConfigResource(ResourceType.TOPIC, name, set_config={"segment.bytes": "1048576"})]
        )
    )
    assert list(ok.values()) == [None]
    configs = topic_configs(admin, name)
    assert configs["segment.bytes"].value == "1048576"
    assert not configs["segment.bytes"].is_default
    # AlterConfigs (not incremental) sets the whole override set: retention.ms is gone.
    assert configs["retention.ms"].is_default


def test_create_partitions(admin: AdminClient, broker: KipBroker) -> None:
    name = unique("admin-parts")
    create_topics(broker.bootstrap, {name: 2})
    assert results(admin.create_partitions([NewPartitions(name, 5)])) == {name: None}
    assert partition_count(admin, name) == 5

    # The new partitions take records like the old ones.
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    for p in range(5):
        producer.produce(name, value=b"p%d" % p, partition=p)
    assert producer.flush(TIMEOUT) == 0
    got = consume_records(broker.bootstrap, name, 5, timeout=TIMEOUT)
    assert sorted((r.partition, r.offset, r.value) for r in got) == [
        (p, 0, b"p%d" % p) for p in range(5)
    ]

    # Fewer or the same: INVALID_PARTITIONS; unknown topic: UNKNOWN_TOPIC_OR_PART.
    assert error_of(admin.create_partitions([NewPartitions(name, 3)])).code() == (
        KafkaError.INVALID_PARTITIONS
    )
    assert error_of(admin.create_partitions([NewPartitions(unique("nope"), 3)])).code() == (
        KafkaError.UNKNOWN_TOPIC_OR_PART
    )
    too_many = admin.create_partitions([NewPartitions(name, 100_000)])
    assert error_of(too_many).code() == KafkaError.POLICY_VIOLATION
    dry = results(admin.create_partitions([NewPartitions(name, 9)], validate_only=True))
    assert dry == {name: None}
    assert partition_count(admin, name) == 5


def test_delete_topics(admin: AdminClient, broker: KipBroker) -> None:
    name = unique("admin-delete")
    create_topics(broker.bootstrap, {name: 1})
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(name, value=b"old")
    assert producer.flush(TIMEOUT) == 0

    assert results(admin.delete_topics([name], operation_timeout=TIMEOUT)) == {name: None}
    assert name not in admin.list_topics(timeout=TIMEOUT).topics
    assert error_of(admin.delete_topics([name])).code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert error_of(admin.delete_topics([unique("never")])).code() == (
        KafkaError.UNKNOWN_TOPIC_OR_PART
    )

    # A topic created again under the name starts empty, at offset 0.
    create_topics(broker.bootstrap, {name: 1})
    producer.produce(name, value=b"new")
    assert producer.flush(TIMEOUT) == 0
    [rec] = consume_records(broker.bootstrap, name, 1, timeout=TIMEOUT)
    assert (rec.offset, rec.value) == (0, b"new")


@pytest.mark.parametrize(
    "topic_args, expected",
    [
        ((3, 3), KafkaError.INVALID_REPLICATION_FACTOR),
        ((1, 1, None, {"retention.ms": "forever"}), KafkaError.INVALID_CONFIG),
        ((1, 1, None, {"cleanup.policy": "shred"}), KafkaError.INVALID_CONFIG),
        ((1, 1, None, {"no.such.config": "1"}), KafkaError.INVALID_CONFIG),
        ((0, 1), KafkaError.INVALID_PARTITIONS),
        # Kafka's cap on partitions one request may create: refused before anything is done.
        ((10_001, 1), KafkaError.POLICY_VIOLATION),
        ((100_000, 1), KafkaError.POLICY_VIOLATION),  # librdkafka's own maximum
    ],
    ids=[
        "replication-3",
        "retention-not-int",
        "bad-policy",
        "unknown-config",
        "0-partitions",
        "10001-partitions",
        "100000-partitions",
    ],
)
def test_create_topic_errors(admin: AdminClient, topic_args: tuple, expected: int) -> None:
    name = unique("admin-bad")
    partitions, replication, *rest = topic_args
    config = rest[1] if len(rest) > 1 else {}
    err = error_of(admin.create_topics([NewTopic(name, partitions, replication, config=config)]))
    assert err.code() == expected, err
    assert err.str()  # the broker says why
    assert name not in admin.list_topics(timeout=TIMEOUT).topics


def test_create_existing_topic(admin: AdminClient, broker: KipBroker) -> None:
    name = unique("admin-exists")
    create_topics(broker.bootstrap, {name: 2})
    err = error_of(admin.create_topics([NewTopic(name, 4, 1)]))
    assert err.code() == KafkaError.TOPIC_ALREADY_EXISTS
    assert partition_count(admin, name) == 2  # untouched
