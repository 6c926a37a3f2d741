"""The single-node answers of OffsetDelete, ElectLeaders, DescribeLogDirs, AlterReplicaLogDirs,
AlterPartitionReassignments and ListPartitionReassignments, through stock clients.

confluent-kafka 2.16's AdminClient has elect_leaders but no offset deletion, log dir or
reassignment calls: kafka-python's KafkaAdminClient drives those, and the raw protocol client
checks what neither client shows (a group of another protocol type).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ElectionType, KafkaError, Producer
from confluent_kafka import TopicPartition as CTP
from confluent_kafka.admin import AdminClient
from integration_support import KipBroker, create_topics, unique, wait_until
from kafka import TopicPartition
from kafka import errors as kerr
from kafka.admin import KafkaAdminClient

from kipproducer.protocol import error_codes as ec

_KIP_TESTS = str(Path(__file__).resolve().parents[1] / "kip")
if _KIP_TESTS not in sys.path:
    sys.path.insert(0, _KIP_TESTS)

from raw_client import RawClient  # noqa: E402

TIMEOUT = 20.0
JOIN_GROUP, OFFSET_DELETE = 11, 47


def kadmin(broker: KipBroker) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15000)


def commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """Commit from outside group management (generation -1), as tools do."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "enable.auto.commit": False})
    try:
        c.commit(offsets=[CTP(t, p, o) for (t, p), o in offsets.items()], asynchronous=False)
    finally:
        c.close()


def committed(admin: KafkaAdminClient, group: str) -> dict[tuple[str, int], int]:
    return {(tp.topic, tp.partition): om.offset
            for tp, om in admin.list_group_offsets({group: None})[group].items()}


def test_offset_delete_rules_and_restart(kip_broker) -> None:
    broker: KipBroker = kip_broker()
    watched, other, group = unique("watched"), unique("other"), unique("group")
    create_topics(broker.bootstrap, {watched: 2, other: 1})
    commit(broker.bootstrap, group, {(watched, 0): 5, (watched, 1): 6, (other, 0): 7})

    member = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                       "enable.auto.commit": False, "session.timeout.ms": 6000,
                       "heartbeat.interval.ms": 300})
    admin = kadmin(broker)
    try:
        member.subscribe([watched])
        wait_until(lambda: member.poll(0.1) is None and len(member.assignment()) == 2,
                   TIMEOUT, "the member's assignment")
        # A live consumer member subscribes to `watched`: its offsets stay, the others go.
        answer = admin.delete_group_offsets(
            group, [TopicPartition(watched, 0), TopicPartition(other, 0),
                    TopicPartition(watched, 9)])
        assert answer == {
            TopicPartition(watched, 0): kerr.GroupSubscribedToTopicError,
            TopicPartition(other, 0): kerr.NoError,
            TopicPartition(watched, 9): kerr.UnknownTopicOrPartitionError,
        }
        assert committed(admin, group) == {(watched, 0): 5, (watched, 1): 6}
    finally:
        member.close()
    # Empty now (the member left): every named partition's offset can go.
    assert admin.delete_group_offsets(group, [TopicPartition(watched, 0)]) == {
        TopicPartition(watched, 0): kerr.NoError}
    with pytest.raises(kerr.GroupIdNotFoundError):
        admin.delete_group_offsets(unique("nobody"), [TopicPartition(watched, 0)])
    admin.close()

    broker.stop()
    broker.start()
    admin = kadmin(broker)
    try:
        assert committed(admin, group) == {(watched, 1): 6}  # the deletions were durable
        # Its last offset deleted, an Empty group is gone, as in Kafka.
        admin.delete_group_offsets(group, [TopicPartition(watched, 1)])
        with pytest.raises(kerr.GroupIdNotFoundError):
            admin.delete_group_offsets(group, [TopicPartition(watched, 1)])
    finally:
        admin.close()


def test_offset_delete_in_a_non_consumer_group_with_members(kip_broker) -> None:
    broker: KipBroker = kip_broker()
    topic, group = unique("t"), unique("connect-group")
    create_topics(broker.bootstrap, {topic: 1})
    commit(broker.bootstrap, group, {(topic, 0): 3})
    client = RawClient(broker.bootstrap)
    try:
        joined = client.request(JOIN_GROUP, 3, group_id=group, session_timeout=6000,
                                rebalance_timeout=6000, member_id="", protocol_type="connect",
                                protocols=[{"name": "default", "metadata": b"\x00"}])
        assert joined.error_code == ec.NONE
        body = client.request(OFFSET_DELETE, 0, group_id=group, topics=[
            {"name": topic, "partitions": [{"partition_index": 0}]}])
        # A group error carries no partitions.
        assert (body.error_code, body.topics) == (ec.error_code("NON_EMPTY_GROUP"), ())
    finally:
        client.close()


def test_elect_leaders_is_never_needed(kip_broker) -> None:
    broker: KipBroker = kip_broker()
    topic = unique("elect")
    create_topics(broker.bootstrap, {topic: 2})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for kind in (ElectionType.PREFERRED, ElectionType.UNCLEAN):
        result = admin.elect_leaders(kind, [CTP(topic, 0), CTP(topic, 1), CTP(unique("no"), 0)]
                                     ).result(TIMEOUT)
        codes = {(tp.topic, tp.partition): e.code() for tp, e in result.items()}
        assert codes[(topic, 0)] == codes[(topic, 1)] == KafkaError.ELECTION_NOT_NEEDED
        assert [c for (t, _), c in codes.items() if t != topic] == [
            KafkaError.UNKNOWN_TOPIC_OR_PART]
        # "All partitions" lists only those that needed an election: none.
        assert admin.elect_leaders(kind, None).result(TIMEOUT) == {}


def test_log_dirs_are_the_data_dir(kip_broker) -> None:
    broker: KipBroker = kip_broker()
    topic = unique("sizes")
    create_topics(broker.bootstrap, {topic: 2})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for _ in range(20):
        producer.produce(topic, b"v" * 200, partition=0)
    assert producer.flush(TIMEOUT) == 0
    data_dir = str(Path(broker.data_dir).absolute())
    admin = kadmin(broker)
    try:
        [described] = admin.describe_log_dirs({topic: [0, 1, 7]})
        [log_dir] = described["log_dirs"]
        assert log_dir["log_dir"] == data_dir and log_dir["error_code"] == 0
        assert 0 < log_dir["usable_bytes"] <= log_dir["total_bytes"]
        [entry] = log_dir["topics"]
        sizes = {p["partition_index"]: p["partition_size"] for p in entry["partitions"]}
        on_disk = {p: sum(f.stat().st_size for f in Path(data_dir, f"{topic}-{p}").glob("*.log"))
                   for p in (0, 1)}
        assert sizes == on_disk and sizes[0] > 20 * 200 and sizes[1] == 0  # 7 does not exist
        assert {p["offset_lag"] for p in entry["partitions"]} == {0}

        moved = admin.alter_replica_log_dirs({
            (topic, 0, 1): data_dir,
            (topic, 1, 1): data_dir + "-elsewhere",
            (unique("none"), 0, 1): data_dir,
        })
        assert sorted((r.topic == topic, r.partition, e) for r, e in moved.items()) == [
            (False, 0, kerr.UnknownTopicOrPartitionError),
            (True, 0, kerr.NoError),
            (True, 1, kerr.LogDirNotFoundError),
        ]
    finally:
        admin.close()


def test_reassignments_on_the_only_replica(kip_broker) -> None:
    broker: KipBroker = kip_broker()
    topic = unique("reassign")
    create_topics(broker.bootstrap, {topic: 2})
    admin = kadmin(broker)
    try:
        answer = admin.alter_partition_reassignments({
            TopicPartition(topic, 0): [1],       # its replica set already: done at once
            TopicPartition(topic, 1): [1, 2],    # broker 2 does not exist
            TopicPartition(unique("none"), 0): [1],
        })
        assert answer[TopicPartition(topic, 0)] is None
        assert answer[TopicPartition(topic, 1)] is kerr.InvalidReplicationAssignmentError
        assert kerr.UnknownTopicOrPartitionError in answer.values()
        assert admin.alter_partition_reassignments({TopicPartition(topic, 0): None}) == {
            TopicPartition(topic, 0): kerr.NoReassignmentInProgressError}
        assert admin.list_partition_reassignments() == {}
        assert admin.list_partition_reassignments({topic: [0, 1]}) == {}
    finally:
        admin.close()
