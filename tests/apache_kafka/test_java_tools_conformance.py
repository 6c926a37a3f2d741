"""Kafka's own command-line tools (4.x, the cached jars) against ``kip broker`` and, in the same
test, against a 1-node Apache Kafka: both must print the same thing (issue 47).

Each test runs one list of commands on both brokers (one JVM per broker, tool_runs.py) and
compares what each command printed and its exit code, after ids, addresses and column widths
are taken out. The differences docs/broker.md lists as deliberate ("Kafka's own tools and Java
clients") are taken out by name (conformance.DELIBERATE); anything else fails the test with
both outputs shown.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic
from conformance import BASE_TS, Pair, fill, open_pair, same
from kafka_cluster import KafkaCluster
from tool_runs import (
    CONFIGS,
    FEATURES,
    GET_OFFSETS,
    GROUPS,
    LEADER_ELECTION,
    LOG_DIRS,
    METADATA_QUORUM,
    REASSIGN,
    TOPICS,
    TRANSACTIONS,
    normalize,
    run_batch,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
import test_broker_incremental_configs as incremental  # noqa: E402


@pytest.fixture(scope="module")
def pair(kafka1: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    yield from open_pair(kafka1, tmp_path_factory)


def topics(*args: str) -> tuple[str, ...]:
    return (TOPICS, "--bootstrap-server", "{bs}", *args)


def configs(*args: str) -> tuple[str, ...]:
    return (CONFIGS, "--bootstrap-server", "{bs}", *args)


# -- kafka-topics ---------------------------------------------------------------------------------


def test_kafka_topics(pair: Pair) -> None:
    same(pair.compare([
        topics("--create", "--topic", "kt", "--partitions", "2", "--replication-factor", "1",
               "--config", "retention.ms=12345", "--config", "cleanup.policy=compact"),
        topics("--describe", "--topic", "kt"),
        topics("--list"),
        topics("--alter", "--topic", "kt", "--partitions", "4"),
        topics("--describe", "--topic", "kt"),
        # refusals: the same error on either broker
        topics("--create", "--topic", "kt", "--partitions", "2"),
        topics("--alter", "--topic", "kt", "--partitions", "4"),
        topics("--alter", "--topic", "kt", "--partitions", "3"),
        topics("--create", "--topic", "kt-rf", "--replication-factor", "3"),
        topics("--create", "--topic", "kt-bad", "--config", "retention.ms=abc"),
        topics("--create", "--topic", "kt-bad", "--config", "no.such.config=1"),
        topics("--create", "--topic", "bad/name"),
        topics("--describe", "--topic", "kt-missing"),
        topics("--delete", "--topic", "kt"),
        topics("--list"),
        topics("--describe", "--topic", "kt"),
    ]))


# -- kafka-configs --------------------------------------------------------------------------------


def test_kafka_configs_topic(pair: Pair) -> None:
    same(pair.compare([
        topics("--create", "--topic", "kc", "--config", "retention.ms=1000"),
        configs("--entity-type", "topics", "--entity-name", "kc", "--describe"),
        configs("--entity-type", "topics", "--entity-name", "kc", "--alter", "--add-config",
                "retention.ms=5000,max.message.bytes=2000,cleanup.policy=[compact,delete]"),
        configs("--entity-type", "topics", "--entity-name", "kc", "--describe"),
        configs("--entity-type", "topics", "--entity-name", "kc", "--alter",
                "--delete-config", "retention.ms"),
        configs("--entity-type", "topics", "--entity-name", "kc", "--describe"),
        configs("--entity-type", "topics", "--entity-name", "kc", "--describe", "--all"),
        configs("--entity-type", "topics", "--entity-name", "kc", "--alter", "--add-config",
                "nope=1"),
        configs("--entity-type", "topics", "--entity-name", "kc", "--alter", "--add-config",
                "retention.ms=abc"),
        configs("--entity-type", "topics", "--entity-name", "kc", "--alter", "--add-config",
                "cleanup.policy=nope"),
        configs("--entity-type", "topics", "--entity-name", "kc-missing", "--describe"),
    ]))


def test_kafka_configs_dynamic_broker(pair: Pair) -> None:
    same(pair.compare([
        configs("--entity-type", "brokers", "--entity-name", "{node}", "--alter",
                "--add-config", "max.connections=1000,log.cleaner.backoff.ms=20000"),
        configs("--entity-type", "brokers", "--entity-default", "--alter", "--add-config",
                "log.retention.ms=300000"),
        configs("--entity-type", "brokers", "--entity-name", "{node}", "--describe"),
        configs("--entity-type", "brokers", "--entity-default", "--describe"),
        configs("--entity-type", "topics", "--entity-name", "__consumer_offsets", "--describe"),
        configs("--entity-type", "brokers", "--entity-name", "{node}", "--alter",
                "--delete-config", "max.connections,log.cleaner.backoff.ms"),
        configs("--entity-type", "brokers", "--entity-default", "--alter", "--delete-config",
                "log.retention.ms"),
        configs("--entity-type", "brokers", "--entity-name", "{node}", "--describe"),
        configs("--entity-type", "brokers", "--entity-default", "--describe"),
        # refusals
        configs("--entity-type", "brokers", "--entity-name", "{node}", "--alter",
                "--add-config", "num.partitions=3"),
        configs("--entity-type", "brokers", "--entity-name", "{node}", "--alter",
                "--add-config", "max.connections=many"),
    ]))


def test_kafka_configs_scram_users(pair: Pair) -> None:
    same(pair.compare([
        configs("--entity-type", "users", "--entity-name", "alice", "--alter", "--add-config",
                "SCRAM-SHA-256=[iterations=8192,password=alice-secret],"
                "SCRAM-SHA-512=[password=alice-secret]"),
        configs("--entity-type", "users", "--entity-name", "bob", "--alter", "--add-config",
                "SCRAM-SHA-512=[iterations=4096,password=bob-secret]"),
        configs("--entity-type", "users", "--entity-name", "alice", "--describe"),
        configs("--entity-type", "users", "--describe"),
        configs("--entity-type", "users", "--entity-name", "alice", "--alter",
                "--delete-config", "SCRAM-SHA-256"),
        configs("--entity-type", "users", "--entity-name", "alice", "--describe"),
        configs("--entity-type", "users", "--entity-name", "carol", "--alter",
                "--delete-config", "SCRAM-SHA-256"),
        configs("--entity-type", "users", "--entity-name", "carol", "--alter", "--add-config",
                "SCRAM-SHA-256=[iterations=100,password=x]"),
    ]))


@pytest.mark.parametrize("case", incremental.CASES, ids=[c.id for c in incremental.CASES])
def test_incremental_config_cases_on_apache_kafka(kafka1: KafkaCluster,
                                                  case: incremental.Case) -> None:
    """tests/integration's APPEND / SUBTRACT table (what kip broker answers) holds on Kafka."""
    try:
        incremental.run_case(case, kafka1.bootstrap, "1")
    finally:
        incremental.reset_broker_levels(kafka1.bootstrap, "1", keep={"min.insync.replicas"})


# -- kafka-consumer-groups, kafka-get-offsets -----------------------------------------------------

def _commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """Commits ``offsets`` for ``group`` (no member); retried while the coordinator is not
    ready (Kafka creates __consumer_offsets on the first commit)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 60
    while True:
        futures = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
            group, [TopicPartition(t, p, o) for (t, p), o in offsets.items()])])
        try:
            [answer] = [future.result(30) for future in futures.values()]
            errors = [tp.error for tp in answer.topic_partitions if tp.error is not None]
        except KafkaException as exc:
            errors = [exc.args[0]]
        if not errors:
            return
        assert time.monotonic() < deadline, f"commit to {group} failed: {errors}"
        time.sleep(0.5)


def _member(bootstrap: str, group: str, topic: str, partitions: int) -> Consumer:
    """A librdkafka member of ``group``, once it has its assignment."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False, "client.id": "conformance",
                         "session.timeout.ms": 30_000})
    consumer.subscribe([topic])
    deadline = time.monotonic() + 60
    while len(consumer.assignment()) < partitions:
        assert time.monotonic() < deadline, f"no assignment in {group}"
        consumer.poll(0.2)
    return consumer


def groups(*args: str) -> tuple[str, ...]:
    return (GROUPS, "--bootstrap-server", "{bs}", *args)


def _utc(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[
        :-3] + "Z"


def test_kafka_consumer_groups(pair: Pair) -> None:
    topic, group = "cg", "cg-group"
    members = []
    for target in (pair.kafka, pair.kip):
        fill(target.bootstrap, topic)
        _commit(target.bootstrap, group, {(topic, 0): 3, (topic, 1): 5})
    same(pair.compare([
        groups("--list"),
        groups("--list", "--state"),
        groups("--describe", "--group", group),
        groups("--describe", "--group", group, "--members", "--verbose"),
        groups("--describe", "--group", group, "--state"),
        groups("--describe", "--all-groups", "--offsets"),
    ]))
    try:
        for target in (pair.kafka, pair.kip):
            members.append(_member(target.bootstrap, group, topic, 2))
        same(pair.compare([
            groups("--list", "--state"),
            groups("--describe", "--group", group),
            groups("--describe", "--group", group, "--members", "--verbose"),
            groups("--describe", "--group", group, "--state"),
            # a group with members is refused a reset
            groups("--reset-offsets", "--group", group, "--topic", topic, "--to-earliest",
                   "--execute"),
            groups("--delete", "--group", group),
        ]))
        assert "cg-group Stable" in pair.runs[0] and "range Stable 1" in pair.runs[3]
    finally:
        for member in members:
            member.close()
    same(pair.compare([
        groups("--reset-offsets", "--group", group, "--topic", topic, "--to-earliest",
               "--dry-run"),
        groups("--reset-offsets", "--group", group, "--topic", topic, "--to-earliest",
               "--execute"),
        groups("--reset-offsets", "--group", group, "--topic", topic, "--to-datetime",
               _utc(BASE_TS + 2500), "--execute"),
        groups("--describe", "--group", group),
        groups("--reset-offsets", "--group", group, "--topic", f"{topic}:1", "--shift-by", "-1",
               "--execute"),
        groups("--reset-offsets", "--group", group, "--topic", topic, "--shift-by", "100",
               "--execute"),
        groups("--reset-offsets", "--group", group, "--all-topics", "--to-offset", "2",
               "--execute"),
        groups("--describe", "--group", group),
        groups("--delete-offsets", "--group", group, "--topic", f"{topic}:0"),
        groups("--delete-offsets", "--group", group, "--topic", "cg-missing"),
        groups("--describe", "--group", group),
        groups("--delete", "--group", group),
        groups("--delete", "--group", group),
        groups("--list"),
    ]))
    assert pair.runs[2].splitlines()[1:] == ["cg-group cg 1 3", "cg-group cg 0 3"]


def get_offsets(*args: str) -> tuple[str, ...]:
    return (GET_OFFSETS, "--bootstrap-server", "{bs}", *args)


def test_kafka_get_offsets(pair: Pair) -> None:
    topic = "go"
    for target in (pair.kafka, pair.kip):
        fill(target.bootstrap, topic)
    same(pair.compare([
        get_offsets("--topic", topic),
        get_offsets("--topic", topic, "--time", "-2"),
        get_offsets("--topic", topic, "--time", "earliest"),
        get_offsets("--topic", topic, "--time", "-1"),
        get_offsets("--topic", topic, "--time", "-3"),  # max timestamp
        get_offsets("--topic", topic, "--time", str(BASE_TS + 2050)),
        get_offsets("--topic", topic, "--time", str(BASE_TS + 3_600_000)),
        get_offsets("--topic-partitions", f"{topic}:1", "--time", str(BASE_TS)),
        get_offsets("--topic", "go-missing"),
    ]))
    assert pair.runs[5] == "go:0:3\ngo:1:2"


# -- kafka-transactions ---------------------------------------------------------------------------

# Times differ between two runs: epoch milliseconds, and a transaction's duration so far.
TIMES = ((r"\b1\d{12}\b", "<time>"),
         (r"((?:Ongoing|Complete\w+|Prepare\w+|Empty)[ \t]+\d+[ \t]+<time>[ \t]+)\d+",
          r"\1<ms>"))


def transactions(*args: str) -> tuple[str, ...]:
    return (TRANSACTIONS, "--bootstrap-server", "{bs}", *args)


def _transactions(bootstrap: str, topic: str) -> Producer:
    """One committed transaction (``<topic>-done``, 1 record) and one left open
    (``<topic>-open``, 2 records from offset 2); returns the open one's producer."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    done = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-done"})
    done.init_transactions(60)
    done.begin_transaction()
    done.produce(topic, b"committed", partition=0)
    done.commit_transaction(30)
    open_ = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-open",
                      "transaction.timeout.ms": 120_000})
    open_.init_transactions(60)
    open_.begin_transaction()
    for value in (b"open-1", b"open-2"):
        open_.produce(topic, value, partition=0)
    assert open_.flush(30) == 0
    return open_


def test_kafka_transactions(pair: Pair) -> None:
    topic = "tx"
    producers = [_transactions(target.bootstrap, topic) for target in (pair.kafka, pair.kip)]
    try:
        same(pair.compare([
            transactions("list"),
            transactions("describe", "--transactional-id", f"{topic}-open"),
            transactions("describe", "--transactional-id", f"{topic}-done"),
            transactions("describe", "--transactional-id", "tx-missing"),
            transactions("describe-producers", "--topic", topic, "--partition", "0"),
            transactions("find-hanging", "--broker-id", "{node}"),
            transactions("find-hanging", "--topic", topic),
            # the open transaction aborted by hand: its partition's markers written
            transactions("abort", "--topic", topic, "--partition", "0", "--start-offset", "2"),
            transactions("describe-producers", "--topic", topic, "--partition", "0"),
            transactions("list"),
        ], *TIMES, unordered={0, 9}))
        assert "Ongoing" in pair.runs[1] and pair.runs[4].splitlines()[2].endswith(" 2")
        assert pair.runs[8].splitlines()[2].endswith(" None")
    finally:
        for producer in producers:
            producer.abort_transaction(30)
        producers.clear()  # before the brokers stop


# -- kafka-log-dirs, kafka-leader-election, kafka-reassign-partitions (one node) ------------------

# Where each broker keeps its data.
DATA_DIRS = ((r'"logDir":"[^"]*"', '"logDir":"<dir>"'),
             (r'"log_dirs":\["/[^"]*"', '"log_dirs":["<dir>"'))


def test_log_dirs_leader_election_reassign(pair: Pair) -> None:
    topic = "mv"
    for target in (pair.kafka, pair.kip):
        fill(target.bootstrap, topic)
        (target.scratch / "move.json").write_text(json.dumps({"version": 1, "partitions": [
            {"topic": topic, "partition": p, "replicas": [int(target.node)]}
            for p in (0, 1)]}))
        (target.scratch / "elsewhere.json").write_text(json.dumps({"version": 1, "partitions": [
            {"topic": topic, "partition": 0, "replicas": [int(target.node) + 1]}]}))
        (target.scratch / "topics.json").write_text(json.dumps(
            {"version": 1, "topics": [{"topic": topic}]}))
        (target.scratch / "elect.json").write_text(json.dumps(
            {"partitions": [{"topic": topic, "partition": 0}]}))
    same(pair.compare([
        (LOG_DIRS, "--bootstrap-server", "{bs}", "--describe", "--topic-list", topic),
        (LOG_DIRS, "--bootstrap-server", "{bs}", "--describe", "--topic-list", topic,
         "--broker-list", "{node}"),
        (LEADER_ELECTION, "--bootstrap-server", "{bs}", "--election-type", "preferred",
         "--all-topic-partitions"),
        (LEADER_ELECTION, "--bootstrap-server", "{bs}", "--election-type", "preferred",
         "--topic", topic, "--partition", "0"),
        (LEADER_ELECTION, "--bootstrap-server", "{bs}", "--election-type", "unclean",
         "--path-to-json-file", "{dir}/elect.json"),
        (LEADER_ELECTION, "--bootstrap-server", "{bs}", "--election-type", "preferred",
         "--topic", "mv-missing", "--partition", "0"),
        (LEADER_ELECTION, "--bootstrap-server", "{bs}", "--election-type", "preferred",
         "--topic", topic, "--partition", "7"),
        (REASSIGN, "--bootstrap-server", "{bs}", "--generate", "--topics-to-move-json-file",
         "{dir}/topics.json", "--broker-list", "{node}"),
        (REASSIGN, "--bootstrap-server", "{bs}", "--execute", "--reassignment-json-file",
         "{dir}/move.json"),
        (REASSIGN, "--bootstrap-server", "{bs}", "--verify", "--reassignment-json-file",
         "{dir}/move.json"),
        (REASSIGN, "--bootstrap-server", "{bs}", "--list"),
        (REASSIGN, "--bootstrap-server", "{bs}", "--cancel", "--reassignment-json-file",
         "{dir}/move.json"),
        (REASSIGN, "--bootstrap-server", "{bs}", "--execute", "--reassignment-json-file",
         "{dir}/elsewhere.json"),
    ], *DATA_DIRS))
    assert '"partition":"mv-0","size":' in pair.runs[0]
    assert "Successfully started partition reassignments for mv-0,mv-1" in pair.runs[8]


# -- kafka-features, kafka-metadata-quorum --------------------------------------------------------


def test_features_and_metadata_quorum_on_kip_broker(pair: Pair) -> None:
    """Not compared: Apache Kafka finalizes its own features (metadata.version, ...) and runs
    a KRaft quorum; kip broker has neither (docs/broker.md): kafka-features lists its KIP
    extension features and refuses an upgrade, kafka-metadata-quorum gets one clear error."""
    runs = run_batch(pair.kip, [
        (FEATURES, "--bootstrap-server", "{bs}", "describe"),
        (FEATURES, "--bootstrap-server", "{bs}", "upgrade", "--feature",
         "transaction.version=2"),
        (METADATA_QUORUM, "--bootstrap-server", "{bs}", "describe", "--status"),
    ])
    described = normalize(runs[0].text)
    assert runs[0].exit == 0 and described.splitlines() == [
        "Feature: kip.produce.conditional SupportedMinVersion: 1 SupportedMaxVersion: 2 "
        "FinalizedVersionLevel: 0 Epoch: -",
        "Feature: kip.produce.key.conditional SupportedMinVersion: 1 SupportedMaxVersion: 1 "
        "FinalizedVersionLevel: 0 Epoch: -",
        "Feature: kip.produce.offsets SupportedMinVersion: 1 SupportedMaxVersion: 2 "
        "FinalizedVersionLevel: 0 Epoch: -",
    ], described
    assert runs[1].exit == 1 and "does not support UPDATE_FEATURES" in runs[1].text, runs[1]
    assert runs[2].exit == 1 and "does not support DESCRIBE_QUORUM" in runs[2].text, runs[2]
