"""Dynamic broker configs (KIP-226, issue 27) through stock admin clients.

Per-broker and cluster-default updates by AlterConfigs and IncrementalAlterConfigs, Kafka 3.9's
refusals (read-only, per-broker only, listener prefix, bad value) with INVALID_REQUEST and its
words, validate_only, DescribeConfigs sources and synonyms, survival of kill -9, and the live
effect of max.connections.
"""

from __future__ import annotations

import socket

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)
from integration_support import KipBroker, create_topics, unique
from kafka.admin import ConfigResource as KpResource
from kafka.admin import ConfigResourceType, KafkaAdminClient

from kipproducer.blocking_client import RequestFailed
from kipproducer.configs_cli import ConfigsClient

TIMEOUT = 15.0
SET, DELETE = AlterConfigOpType.SET, AlterConfigOpType.DELETE


def result(futures: dict):
    [future] = futures.values()
    try:
        return future.result(TIMEOUT)
    except KafkaException as exc:
        return exc.args[0]


def describe(admin: AdminClient | str, name: str = "1") -> dict:
    if name == "":
        with ConfigsClient(admin) as client:
            return {c.name: c for c in client.describe("")}
    configs = result(admin.describe_configs([ConfigResource(ResourceType.BROKER, name)]))
    assert not isinstance(configs, KafkaError), configs
    return configs


def incremental(admin: AdminClient | str, name: str, *ops, validate_only: bool = False):
    """IncrementalAlterConfigs; librdkafka takes broker ids only, so the cluster default
    (name "") goes through kip configs' client (``admin`` is then the bootstrap address)."""
    if name == "":
        add = {n: v for n, v, op in ops if op == SET}
        delete = [n for n, v, op in ops if op == DELETE]
        try:
            with ConfigsClient(admin) as client:
                client.alter("", add, delete, validate_only=validate_only)
        except RequestFailed as exc:
            return exc
        return None
    entries = [ConfigEntry(n, v, incremental_operation=op) for n, v, op in ops]
    return result(admin.incremental_alter_configs(
        [ConfigResource(ResourceType.BROKER, name, incremental_configs=entries)],
        validate_only=validate_only))


def alter(admin: AdminClient, name: str, configs: dict[str, str], validate_only=False):
    return result(admin.alter_configs(
        [ConfigResource(ResourceType.BROKER, name, set_config=configs)],
        validate_only=validate_only))


def synonyms(entry: ConfigEntry) -> list[tuple[str, str | None, int]]:
    return [(s.name, s.value, s.source) for s in entry.synonyms.values()]


@pytest.fixture
def broker(kip_broker) -> KipBroker:
    return kip_broker({"log.cleaner.backoff.ms": "20000", "num.partitions": "2"})


@pytest.fixture
def admin(broker: KipBroker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


@pytest.fixture(scope="module")
def shared(module_broker_factory) -> KipBroker:
    """One broker for the tests that change nothing (refusals, validate_only)."""
    return module_broker_factory({"num.partitions": "2"})


@pytest.fixture
def shared_admin(shared: KipBroker) -> AdminClient:
    return AdminClient({"bootstrap.servers": shared.bootstrap})


def test_per_broker_and_default_levels_with_sources_and_synonyms(admin, broker) -> None:
    # librdkafka's 0081 test: a custom/unknown broker config on broker 1 is accepted.
    assert incremental(admin, "1", ("sasl.kerberos.min.time.before.relogin", "58000", SET),
                       ("log.cleaner.backoff.ms", "30000", SET)) is None
    assert incremental(broker.bootstrap, "", ("log.cleaner.backoff.ms", "25000", SET),
                       ("log.cleaner.threads", "2", SET)) is None
    configs = describe(admin)
    backoff = configs["log.cleaner.backoff.ms"]
    assert (backoff.value, backoff.source) == (
        "30000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert not backoff.is_read_only
    # librdkafka keys synonyms by name, so its dict keeps the last (least specific) one.
    assert backoff.synonyms["log.cleaner.backoff.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    threads = configs["log.cleaner.threads"]
    assert (threads.value, threads.source) == (
        "2", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    assert configs["sasl.kerberos.min.time.before.relogin"].value == "58000"
    assert configs["num.partitions"].is_read_only
    assert configs["num.partitions"].source == ConfigSource.STATIC_BROKER_CONFIG.value

    # The default resource describes only the cluster-default values.
    default = describe(broker.bootstrap, "")
    assert {n: (e.value, e.config_source) for n, e in default.items()} == {
        "log.cleaner.backoff.ms": ("25000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value),
        "log.cleaner.threads": ("2", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value),
    }

    # kafka-python lists every synonym in Kafka's order: per-broker, default, static, default.
    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        described = kp.describe_configs([KpResource(ConfigResourceType.BROKER, "1")],
                                        include_synonyms=True,
                                        config_filter="all")["broker"]["1"]
    finally:
        kp.close()
    assert [(s["value"], s["source"]) for s in described["log.cleaner.backoff.ms"]["synonyms"]
            ] == [("30000", "DYNAMIC_BROKER_CONFIG"), ("25000", "DYNAMIC_DEFAULT_BROKER_CONFIG"),
                  ("20000", "STATIC_BROKER_CONFIG"), ("15000", "DEFAULT_CONFIG")]
    assert described["log.cleaner.backoff.ms"]["config_type"] == "LONG"
    # Derived by the broker: DEFAULT_CONFIG, as Kafka 3.9 reports it.
    assert described["advertised.listeners"]["config_source"] == "DEFAULT_CONFIG"
    assert described["log.cleaner.backoff.ms"]["config_source"] == "DYNAMIC_BROKER_CONFIG"

    # DELETE falls back to the next level.
    assert incremental(admin, "1", ("log.cleaner.backoff.ms", None, DELETE)) is None
    backoff = describe(admin)["log.cleaner.backoff.ms"]
    assert (backoff.value, backoff.source) == (
        "25000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    # AlterConfigs replaces the whole level: the custom config goes, the new one stays.
    assert alter(admin, "1", {"max.connections.per.ip": "100"}) is None
    configs = describe(admin)
    assert "sasl.kerberos.min.time.before.relogin" not in configs
    assert configs["max.connections.per.ip"].value == "100"
    assert configs["log.cleaner.threads"].value == "2"  # the default level is untouched


@pytest.mark.parametrize(("name", "entity", "value", "words"), [
    ("num.partitions", "1", "3", "Cannot update these configs dynamically: [num.partitions]"),
    ("log.dirs", "", "/tmp/x", "Cannot update these configs dynamically: [log.dirs]"),
    ("ssl.keystore.location", "1", "/tmp/k.pem",
     "These security configs can be dynamically updated only per-listener using the listener "
     "prefix: [ssl.keystore.location]"),
    ("listener.name.ssl.ssl.keystore.location", "", "/tmp/k.pem",
     "Cannot update these configs at default cluster level, broker id must be specified: "
     "[listener.name.ssl.ssl.keystore.location]"),
    ("advertised.listeners", "", "PLAINTEXT://h:1",
     "Cannot update these configs at default cluster level, broker id must be specified"),
    ("max.connections", "1", "many",
     "Invalid value many for configuration max.connections: Not a number of type INT"),
    ("log.cleaner.threads", "", "-1",
     "Invalid value -1 for configuration log.cleaner.threads: Value must be at least 0"),
])
def test_refusals_have_kafkas_code_and_words(shared_admin, shared, name, entity, value,
                                             words) -> None:
    admin, broker = shared_admin, shared
    if entity == "":
        err = incremental(broker.bootstrap, "", (name, value, SET))
        assert isinstance(err, RequestFailed), err
        assert str(err).startswith(f"INVALID_REQUEST: {words}"), str(err)
    for call in (lambda: incremental(admin, entity, (name, value, SET)),
                 lambda: alter(admin, entity, {name: value})):
        if entity == "":
            break
        err = call()
        assert isinstance(err, KafkaError), err
        assert err.code() == KafkaError.INVALID_REQUEST
        assert err.str().startswith(words), err.str()
    assert describe(broker.bootstrap, "") == {}
    assert describe(admin)[name if name in describe(admin) else "node.id"].source != (
        ConfigSource.DYNAMIC_BROKER_CONFIG.value)


def test_other_broker_id_and_validate_only(shared_admin, shared) -> None:
    admin, broker = shared_admin, shared
    # librdkafka sends a broker's configs to that broker: ask this one about broker 2.
    with ConfigsClient(broker.bootstrap) as client, pytest.raises(
            RequestFailed, match="INVALID_REQUEST: Unexpected broker id, expected 1 or empty "
            "string, but received 2"):
        client.alter("2", {"log.cleaner.threads": "2"}, [])
    assert incremental(admin, "1", ("log.cleaner.threads", "3", SET), validate_only=True) is None
    assert incremental(broker.bootstrap, "", ("log.cleaner.threads", "3", SET),
                       validate_only=True) is None
    threads = describe(admin)["log.cleaner.threads"]
    assert threads.source == ConfigSource.DEFAULT_CONFIG.value
    assert describe(broker.bootstrap, "") == {}


def test_updates_survive_kill_9(admin, broker) -> None:
    assert incremental(admin, "1", ("log.retention.hours", "12", SET)) is None
    assert incremental(broker.bootstrap, "", ("max.connections", "500", SET)) is None
    broker.kill()
    broker.start()
    after = AdminClient({"bootstrap.servers": broker.bootstrap})
    configs = describe(after)
    assert (configs["log.retention.hours"].value, configs["log.retention.hours"].source) == (
        "12", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert (configs["max.connections"].value, configs["max.connections"].source) == (
        "500", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)


def _refused(host: str, port: int) -> bool:
    """Does the broker close a new connection at once (max.connections.per.ip reached)?"""
    with socket.create_connection((host, port), timeout=5) as sock:
        sock.settimeout(0.5)
        try:
            return sock.recv(1) == b""
        except TimeoutError:
            return False


def test_max_connections_per_ip_takes_effect_live(broker) -> None:
    # kip configs' client holds one connection; a limit of 1 per IP refuses the next one.
    with ConfigsClient(broker.bootstrap) as client:
        assert not _refused(broker.host, broker.port)
        client.alter("1", {"max.connections.per.ip": "1"}, [])
        assert _refused(broker.host, broker.port)
        # The connection that was open keeps working, and lifts the limit again.
        assert any(c.name == "max.connections.per.ip" and c.value == "1"
                   for c in client.describe("1"))
        client.alter("1", {}, ["max.connections.per.ip"])
        assert not _refused(broker.host, broker.port)


def test_log_defaults_reach_existing_topics_with_dynamic_synonyms(admin, broker) -> None:
    topic = unique("dyn-log")
    create_topics(broker.bootstrap, {topic: 1}, {"segment.ms": "60000"})
    assert incremental(broker.bootstrap, "", ("log.retention.hours", "10", SET)) is None
    assert incremental(admin, "1", ("log.retention.minutes", "30", SET)) is None
    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        described = kp.describe_configs([KpResource(ConfigResourceType.TOPIC, topic)],
                                        include_synonyms=True,
                                        config_filter="all")["topic"][topic]
    finally:
        kp.close()
    retention = described["retention.ms"]
    assert retention["value"] == str(30 * 60_000)
    assert [(s["name"], s["value"], s["source"]) for s in retention["synonyms"]] == [
        ("log.retention.minutes", "30", "DYNAMIC_BROKER_CONFIG"),
        ("log.retention.hours", "10", "DYNAMIC_DEFAULT_BROKER_CONFIG"),
        ("log.retention.hours", "168", "DEFAULT_CONFIG"),
    ]
    # A value the topic config refuses is refused at the broker level too.
    err = incremental(admin, "1", ("log.cleaner.min.cleanable.ratio", "2", SET))
    assert isinstance(err, KafkaError) and err.code() == KafkaError.INVALID_REQUEST
    assert "between 0 and 1" in err.str(), err.str()


def test_advertised_listeners_update_reaches_metadata(admin, broker) -> None:
    told = f"PLAINTEXT://localhost:{broker.port}"
    assert incremental(admin, "1", ("advertised.listeners", told, SET)) is None
    fresh = AdminClient({"bootstrap.servers": broker.bootstrap})
    brokers = fresh.list_topics(timeout=TIMEOUT).brokers
    assert [f"{b.host}:{b.port}" for b in brokers.values()] == [f"localhost:{broker.port}"]
    entry = describe(fresh)["advertised.listeners"]
    assert (entry.value, entry.source) == (told, ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    # Naming a listener the broker does not have is refused.
    err = incremental(admin, "1", ("advertised.listeners", "SSL://localhost:1", SET))
    assert isinstance(err, KafkaError) and err.code() == KafkaError.INVALID_REQUEST
