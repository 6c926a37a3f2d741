"""IncrementalAlterConfigs' APPEND and SUBTRACT on list configs at every level (issue 47).

Kafka's controller starts an APPEND or SUBTRACT from the value the resource itself holds, else
from the config's built-in default: a broker-level APPEND of ``log.cleanup.policy=compact``
gives ``delete,compact``, not ``compact`` (librdkafka's admin test 0081 caught the broker giving
``compact`` and then keeping it, so that every new topic was compacted). A SUBTRACT may leave an
empty list, which Kafka accepts. APPEND and SUBTRACT on a config that is no list is
INVALID_CONFIG.

``CASES`` is data (steps and the values Kafka answers with) so that the same table can be run
against Apache Kafka by the Java-tool conformance module: ``run_case(case, bootstrap, node)``
then ``reset_broker_levels(bootstrap, node)`` speak only the Kafka protocol. ``NODE`` stands
for the broker's node id and ``TOPIC`` for a topic each case creates. The per-broker and
topic steps go through librdkafka (confluent-kafka); the cluster default (empty broker name),
which librdkafka and kafka-python refuse to address, and the request-level refusals stock
clients cannot send go through kipproducer's blocking client, as in
test_broker_dynamic_configs.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import Collection
from typing import Any, NamedTuple

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)
from integration_support import KipBroker, create_topics, unique

from kipproducer.blocking_client import BlockingClient
from kipproducer.protocol.api_keys import DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS

TIMEOUT = 15.0
SETTLE_S = 10.0
NODE, TOPIC = "<node>", "<topic>"
BROKER, TOPIC_TYPE = 4, 2
SET, DELETE, APPEND, SUBTRACT = "SET", "DELETE", "APPEND", "SUBTRACT"
_OPS = {SET: 0, DELETE: 1, APPEND: 2, SUBTRACT: 3}
NONE, INVALID_REQUEST, INVALID_CONFIG = 0, 42, 40
JMX = "org.apache.kafka.common.metrics.JmxReporter"


class Step(NamedTuple):
    """One IncrementalAlterConfigs resource; ``answer``: (error code, message or None)."""

    resource: int  # BROKER or TOPIC_TYPE
    name: str  # NODE, "" (cluster default) or TOPIC
    ops: tuple[tuple[str, str, str | None], ...]  # (config, operation, value)
    answer: tuple[int, str | None] = (NONE, None)


class Case(NamedTuple):
    id: str
    steps: tuple[Step, ...]
    #: (resource, name, config) -> the value that resource's DescribeConfigs then reports
    expect: dict[tuple[int, str, str], str]
    topic_configs: dict[str, str] = {}  # the topic's configs at creation


def _broker(*ops, answer=(NONE, None)) -> Step:
    return Step(BROKER, NODE, ops, answer)


def _default(*ops, answer=(NONE, None)) -> Step:
    return Step(BROKER, "", ops, answer)


def _topic(*ops, answer=(NONE, None)) -> Step:
    return Step(TOPIC_TYPE, TOPIC, ops, answer)


POLICY, TOPIC_POLICY = "log.cleanup.policy", "cleanup.policy"
LEADER_THROTTLED = "leader.replication.throttled.replicas"
FOLLOWER_THROTTLED = "follower.replication.throttled.replicas"

CASES: tuple[Case, ...] = (
    # -- per broker ----------------------------------------------------------------------------
    Case("broker-append-starts-from-default",
         (_broker((POLICY, APPEND, "compact")),),
         {(BROKER, NODE, POLICY): "delete,compact"}),
    Case("broker-append-then-subtract",  # librdkafka 0081's sequence
         (_broker((POLICY, APPEND, "compact")), _broker((POLICY, SUBTRACT, "compact"))),
         {(BROKER, NODE, POLICY): "delete"}),
    Case("broker-append-present-item-is-no-op",
         (_broker((POLICY, APPEND, "delete")),),
         {(BROKER, NODE, POLICY): "delete"}),
    Case("broker-append-several-items",
         (_broker((POLICY, APPEND, "compact,delete")),),
         {(BROKER, NODE, POLICY): "delete,compact"}),
    Case("broker-append-to-own-value",
         (_broker((POLICY, SET, "compact")), _broker((POLICY, APPEND, "delete"))),
         {(BROKER, NODE, POLICY): "compact,delete"}),
    Case("broker-subtract-to-empty-is-accepted",
         (_broker((POLICY, SUBTRACT, "delete")),),
         {(BROKER, NODE, POLICY): ""}),
    Case("broker-subtract-absent-item-keeps-list",
         (_broker((POLICY, SUBTRACT, "compact")),),
         {(BROKER, NODE, POLICY): "delete"}),
    # The per-broker level starts from its own value, never from the cluster default.
    Case("broker-append-ignores-cluster-default",
         (_default((POLICY, SET, "compact")), _broker((POLICY, APPEND, "delete"))),
         {(BROKER, NODE, POLICY): "delete", (BROKER, "", POLICY): "compact"}),
    Case("broker-metric-reporters-subtract-default",
         (_broker(("metric.reporters", SUBTRACT, JMX)),),
         {(BROKER, NODE, "metric.reporters"): ""}),
    Case("broker-metric-reporters-append-default",
         (_broker(("metric.reporters", APPEND, JMX)),),
         {(BROKER, NODE, "metric.reporters"): JMX}),
    Case("broker-append-non-list",
         (_broker(("log.retention.ms", APPEND, "1"), answer=(
             INVALID_CONFIG,
             "Config value append is not allowed for config key: log.retention.ms")),),
         {}),
    Case("broker-subtract-non-list",
         (_broker(("compression.type", SUBTRACT, "gzip"), answer=(
             INVALID_CONFIG,
             "Config value subtract is not allowed for config key: compression.type")),),
         {}),
    Case("broker-append-bad-item",
         (_broker((POLICY, APPEND, "nope"), answer=(INVALID_REQUEST, None)),),
         {}),
    # -- cluster default -----------------------------------------------------------------------
    Case("default-append-starts-from-default",
         (_default((POLICY, APPEND, "compact")),),
         {(BROKER, "", POLICY): "delete,compact"}),
    Case("default-append-then-subtract",
         (_default((POLICY, APPEND, "compact")), _default((POLICY, SUBTRACT, "compact"))),
         {(BROKER, "", POLICY): "delete"}),
    Case("default-append-ignores-per-broker",
         (_broker((POLICY, SET, "compact")), _default((POLICY, APPEND, "delete"))),
         {(BROKER, "", POLICY): "delete", (BROKER, NODE, POLICY): "compact"}),
    Case("default-subtract-to-empty-is-accepted",
         (_default((POLICY, SUBTRACT, "delete")),),
         {(BROKER, "", POLICY): ""}),
    Case("default-append-non-list",
         (_default(("log.retention.ms", APPEND, "1"), answer=(
             INVALID_CONFIG,
             "Config value append is not allowed for config key: log.retention.ms")),),
         {}),
    # -- topic ---------------------------------------------------------------------------------
    Case("topic-append-starts-from-default",
         (_topic((TOPIC_POLICY, APPEND, "compact")),),
         {(TOPIC_TYPE, TOPIC, TOPIC_POLICY): "delete,compact"}),
    Case("topic-append-to-override",
         (_topic((TOPIC_POLICY, APPEND, "delete")),),
         {(TOPIC_TYPE, TOPIC, TOPIC_POLICY): "compact,delete"},
         {TOPIC_POLICY: "compact"}),
    Case("topic-append-then-subtract",
         (_topic((TOPIC_POLICY, APPEND, "compact")), _topic((TOPIC_POLICY, SUBTRACT, "compact"))),
         {(TOPIC_TYPE, TOPIC, TOPIC_POLICY): "delete"}),
    Case("topic-librdkafka-0081-sequence",
         (_topic(("compression.type", SET, "lz4"), (TOPIC_POLICY, APPEND, "compact")),
          _topic(("compression.type", DELETE, ""), (TOPIC_POLICY, SUBTRACT, "compact"))),
         {(TOPIC_TYPE, TOPIC, TOPIC_POLICY): "delete",
          (TOPIC_TYPE, TOPIC, "compression.type"): "producer"}),
    Case("topic-subtract-to-empty-is-accepted",
         (_topic((TOPIC_POLICY, SUBTRACT, "delete")),),
         {(TOPIC_TYPE, TOPIC, TOPIC_POLICY): ""}),
    # Kafka starts from the topic config's own default, not from the broker's value in force.
    Case("topic-append-ignores-broker-default",
         (_broker((POLICY, SET, "compact")), _topic((TOPIC_POLICY, APPEND, "delete"))),
         {(TOPIC_TYPE, TOPIC, TOPIC_POLICY): "delete"}),
    Case("topic-throttled-replicas",
         (_topic((LEADER_THROTTLED, APPEND, "0:1,1:1")),
          _topic((LEADER_THROTTLED, SUBTRACT, "0:1"), (FOLLOWER_THROTTLED, APPEND, "*"))),
         {(TOPIC_TYPE, TOPIC, LEADER_THROTTLED): "1:1",
          (TOPIC_TYPE, TOPIC, FOLLOWER_THROTTLED): "*"}),
    Case("topic-append-non-list",
         (_topic(("retention.ms", APPEND, "1"), answer=(
             INVALID_CONFIG, "Can't APPEND to key retention.ms because its type is not LIST.")),),
         {}),
    Case("topic-subtract-unknown",
         (_topic(("no.such.config", SUBTRACT, "x"), answer=(
             INVALID_CONFIG,
             "Can't SUBTRACT to key no.such.config because its type is not LIST.")),),
         {}),
    Case("topic-append-bad-item",
         (_topic((TOPIC_POLICY, APPEND, "nope"), answer=(INVALID_CONFIG, None)),),
         {}),
)


# -- running a case against the broker ----------------------------------------------------------


def _send_librdkafka(admin: AdminClient, resource: int, name: str, ops) -> tuple[int, str]:
    entries = [ConfigEntry(n, v, incremental_operation=AlterConfigOpType[op])
               for n, op, v in ops]
    kind = ResourceType.BROKER if resource == BROKER else ResourceType.TOPIC
    [future] = admin.incremental_alter_configs(
        [ConfigResource(kind, name, incremental_configs=entries)]).values()
    try:
        future.result(TIMEOUT)
    except KafkaException as exc:
        error: KafkaError = exc.args[0]
        return error.code(), error.str()
    return NONE, ""


def _send_raw(bootstrap: str, resource: int, name: str, ops) -> tuple[int, str]:
    with BlockingClient(bootstrap) as client:
        answer = client.request(INCREMENTAL_ALTER_CONFIGS, 1, validate_only=False, resources=[{
            "resource_type": resource, "resource_name": name,
            "configs": [{"name": n, "config_operation": _OPS[op], "value": v}
                        for n, op, v in ops]}])
    [result] = answer.responses
    return result.error_code, result.error_message or ""


def _describe_raw(bootstrap: str, resource: int, name: str) -> dict[str, Any]:
    with BlockingClient(bootstrap) as client:
        answer = client.request(DESCRIBE_CONFIGS, 4, resources=[{
            "resource_type": resource, "resource_name": name, "configuration_keys": None}],
            include_synonyms=False, include_documentation=False)
    [result] = answer.results
    assert result.error_code == NONE, result.error_message
    return {c.name: c for c in result.configs}


def _resolve(name: str, node: str, topic: str) -> str:
    return {NODE: node, TOPIC: topic}.get(name, name)


def run_case(case: Case, bootstrap: str, node: str = "1") -> None:
    topic = unique("incr")
    create_topics(bootstrap, {topic: 1}, case.topic_configs)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for step in case.steps:
        name = _resolve(step.name, node, topic)
        if name == "":
            code, message = _send_raw(bootstrap, step.resource, name, step.ops)
        else:
            code, message = _send_librdkafka(admin, step.resource, name, step.ops)
        expected_code, expected_message = step.answer
        assert code == expected_code, (step, code, message)
        if expected_message is not None:
            assert expected_message in message, (step, message)
        elif code != NONE:
            assert message, "a refusal says why"
    for (resource, where, config), value in case.expect.items():
        # Apache Kafka's brokers apply a dynamic config when the controller's record reaches
        # them, a moment after the answer: asked again until then (kip broker answers at once).
        deadline = time.monotonic() + SETTLE_S
        while True:
            # (Kafka's cluster default lists only the configs set there)
            entry = _describe_raw(bootstrap, resource, _resolve(where, node, topic)).get(config)
            if (entry is not None and entry.value == value) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert entry is not None and entry.value == value, (config, where, entry)


def reset_broker_levels(bootstrap: str, node: str = "1", keep: Collection[str] = ()) -> None:
    """DELETE every dynamic value a case left at both broker levels, but those in ``keep``
    (Apache Kafka keeps min.insync.replicas as a cluster default it refuses to delete)."""
    for name in (node, ""):
        dynamic = [n for n, c in _describe_raw(bootstrap, BROKER, name).items()
                   if n not in keep
                   and c.config_source in (ConfigSource.DYNAMIC_BROKER_CONFIG.value,
                                           ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)]
        if dynamic:
            code, message = _send_raw(bootstrap, BROKER, name,
                                      [(n, DELETE, None) for n in dynamic])
            assert code == NONE, message


@pytest.fixture(scope="module")
def shared(module_broker_factory) -> KipBroker:
    return module_broker_factory({})


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_list_operations_answer_as_kafka(shared: KipBroker, case: Case) -> None:
    try:
        run_case(case, shared.bootstrap)
    finally:
        reset_broker_levels(shared.bootstrap)


# -- what the values do, and that they last ----------------------------------------------------


def _produce_without_key(bootstrap: str, topic: str) -> KafkaError | None:
    errors: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 10_000})
    producer.produce(topic, b"no key", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(TIMEOUT)
    assert len(errors) == 1
    return errors[0]


def _stored(broker: KipBroker) -> dict[str, dict[str, str]]:
    return json.loads((broker.data_dir / "__broker_configs.json").read_text())


def test_librdkafka_0081_sequence_leaves_new_topics_deletable(kip_broker) -> None:
    """librdkafka 0081's requests on broker 1 (SET background.threads with APPEND of
    log.cleanup.policy=compact, then DELETE with SUBTRACT): the broker keeps ``delete``, also
    after a restart, and a topic created afterwards takes a record without a key."""
    broker = kip_broker({})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert _send_librdkafka(admin, BROKER, "1", [
        ("background.threads", SET, "9"), (POLICY, APPEND, "compact")]) == (NONE, "")
    assert _stored(broker)["per_broker"] == {"background.threads": "9", POLICY: "delete,compact"}
    compacted = unique("compacted")
    create_topics(broker.bootstrap, {compacted: 1})
    assert _describe_raw(broker.bootstrap, TOPIC_TYPE, compacted)[TOPIC_POLICY].value == (
        "delete,compact")
    refused = _produce_without_key(broker.bootstrap, compacted)
    assert refused is not None and refused.code() == KafkaError.INVALID_RECORD

    assert _send_librdkafka(admin, BROKER, "1", [
        ("background.threads", DELETE, ""), (POLICY, SUBTRACT, "compact")]) == (NONE, "")
    assert _stored(broker)["per_broker"] == {POLICY: "delete"}
    broker.kill()
    broker.start()
    assert _stored(broker)["per_broker"] == {POLICY: "delete"}
    row = _describe_raw(broker.bootstrap, BROKER, "1")[POLICY]
    assert (row.value, row.config_source) == ("delete", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    topic = unique("after")
    create_topics(broker.bootstrap, {topic: 1})
    assert _describe_raw(broker.bootstrap, TOPIC_TYPE, topic)[TOPIC_POLICY].value == "delete"
    assert _produce_without_key(broker.bootstrap, topic) is None


def test_empty_policy_survives_restart_and_takes_keyless_records(kip_broker) -> None:
    """SUBTRACT of the last policy at the cluster default: stored as empty, in force after a
    restart, and a new topic then neither deletes nor compacts (a keyless record is taken)."""
    broker = kip_broker({})
    assert _send_raw(broker.bootstrap, BROKER, "", [(POLICY, SUBTRACT, "delete")]) == (NONE, "")
    broker.kill()
    broker.start()
    assert _stored(broker)["default"] == {POLICY: ""}
    topic = unique("keep-all")
    create_topics(broker.bootstrap, {topic: 1})
    assert _describe_raw(broker.bootstrap, TOPIC_TYPE, topic)[TOPIC_POLICY].value == ""
    assert _produce_without_key(broker.bootstrap, topic) is None


@pytest.mark.parametrize(("ops", "message"), [
    ([(POLICY, APPEND, "compact"), (POLICY, SUBTRACT, "delete")],
     "Error due to duplicate config keys"),
    ([(POLICY, APPEND, None)], "Null value not supported for : log.cleanup.policy"),
])
@pytest.mark.parametrize("resource", ["1", "", TOPIC])
def test_request_level_refusals(shared: KipBroker, ops, message, resource) -> None:
    """Duplicate names and null values in one resource: INVALID_REQUEST, nothing changed."""
    topic = unique("refused")
    create_topics(shared.bootstrap, {topic: 1})
    kind = TOPIC_TYPE if resource == TOPIC else BROKER
    name = topic if resource == TOPIC else resource
    config = TOPIC_POLICY if kind == TOPIC_TYPE else POLICY
    ops = [(config, op, value) for _, op, value in ops]
    message = message.replace(POLICY, config)
    assert _send_raw(shared.bootstrap, kind, name, ops) == (INVALID_REQUEST, message)
    described = _describe_raw(shared.bootstrap, kind, name)
    assert config not in described or described[config].value == "delete"
