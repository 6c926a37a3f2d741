"""Authorized operations in Metadata, DescribeCluster and DescribeGroups (Kafka's bitfields).

Asked for, each is the set of operations the caller's principal may perform on the resource,
out of those its type supports (all of them without an authorizer); not asked for, -2**31.
confluent-kafka shows the operations librdkafka knows; the raw client checks the exact bits,
including ReplicatorWrite (29) on the Cluster.
"""

from __future__ import annotations

import uuid

from confluent_kafka import Consumer, TopicCollection, TopicPartition
from confluent_kafka.admin import AclOperation as CkOp
from confluent_kafka.admin import AdminClient, NewTopic
from security_support import ADMIN, ADMIN_PASSWORD, allow, connect, sasl_conf, unique

from kipproducer.broker.security import AclOperation as Op

METADATA, DESCRIBE_GROUPS, DESCRIBE_CLUSTER = 3, 15, 60
OMITTED = -(2**31)

TOPIC_OPS = {Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER,
             Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}
GROUP_OPS = {Op.READ, Op.DESCRIBE, Op.DELETE}
CLUSTER_OPS = {Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS,
               Op.IDEMPOTENT_WRITE, Op.ALTER, Op.DESCRIBE, Op.REPLICATOR_WRITE}


def bits(ops) -> int:
    return sum(1 << int(op) for op in set(ops))


def ck(ops) -> set:
    """The confluent-kafka names of the operations it can show (not ReplicatorWrite)."""
    return {CkOp[op.name] for op in ops if op != Op.REPLICATOR_WRITE}


def raw_answers(client, topic: str, group: str, asked: bool) -> tuple[int, int, int, int]:
    """(Metadata v10 cluster, Metadata v12 topic, DescribeCluster, DescribeGroups) fields."""
    v10 = client.request(METADATA, 10, topics=[{"name": topic, "topic_id": None}],
                         allow_auto_topic_creation=False,
                         include_cluster_authorized_operations=asked,
                         include_topic_authorized_operations=asked)
    v12 = client.request(METADATA, 12, topics=[{"name": topic}], allow_auto_topic_creation=False,
                         include_topic_authorized_operations=asked)
    cluster = client.request(DESCRIBE_CLUSTER, 1, include_cluster_authorized_operations=asked,
                             endpoint_type=1)
    groups = client.request(DESCRIBE_GROUPS, 5, groups=[group],
                            include_authorized_operations=asked)
    assert v10.topics[0].error_code == 0 and v12.topics[0].error_code == 0
    assert v10.topics[0].topic_authorized_operations == v12.topics[0].topic_authorized_operations
    return (v10.cluster_authorized_operations, v12.topics[0].topic_authorized_operations,
            cluster.cluster_authorized_operations, groups.groups[0].authorized_operations)


def commit_once(conf: dict, group: str, topic: str) -> None:
    c = Consumer({**conf, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    finally:
        c.close()


def test_without_an_authorizer_every_operation_is_allowed(embedded):
    broker = embedded()
    bootstrap = broker.bootstrap_servers
    topic, group = unique("ops"), unique("group")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        f.result(20)
    commit_once({"bootstrap.servers": bootstrap}, group, topic)

    client = connect(bootstrap)
    try:
        assert raw_answers(client, topic, group, True) == (
            bits(CLUSTER_OPS), bits(TOPIC_OPS), bits(CLUSTER_OPS), bits(GROUP_OPS))
        assert raw_answers(client, topic, group, False) == (OMITTED,) * 4
        # A topic that does not exist is described with the operations too, as in Kafka.
        missing = client.request(METADATA, 12, topics=[{"name": unique("none")}],
                                 allow_auto_topic_creation=False,
                                 include_topic_authorized_operations=True).topics[0]
        assert missing.error_code == 3 and missing.topic_authorized_operations == bits(TOPIC_OPS)
    finally:
        client.close()

    cluster = admin.describe_cluster(include_authorized_operations=True).result(20)
    assert set(cluster.authorized_operations) == ck(CLUSTER_OPS)
    [described] = admin.describe_topics(TopicCollection([topic]),
                                        include_authorized_operations=True).values()
    assert set(described.result(20).authorized_operations) == ck(TOPIC_OPS)
    [g] = admin.describe_consumer_groups([group], include_authorized_operations=True).values()
    assert set(g.result(20).authorized_operations) == ck(GROUP_OPS)
    assert not admin.describe_cluster().result(20).authorized_operations


def test_operations_follow_the_acls_of_the_principal(secured):
    bootstrap = secured.bootstrap_servers
    name = f"ops-{uuid.uuid4().hex[:6]}"
    secured.broker.users.add(name, name + "-pw", "SCRAM-SHA-256")
    principal = f"User:{name}"
    conf = sasl_conf(bootstrap, "SCRAM-SHA-256", name, name + "-pw")
    admin_conf = sasl_conf(bootstrap, "SCRAM-SHA-512", ADMIN, ADMIN_PASSWORD)
    topic, group = unique("acl-ops"), unique("acl-group")
    super_admin = AdminClient(admin_conf)  # kept: a collected client cancels its futures
    for f in super_admin.create_topics([NewTopic(topic, 1, 1)]).values():
        f.result(20)
    commit_once(admin_conf, group, topic)
    secured.broker.acls.add([
        allow(principal, "Read", name=topic),           # Read implies Describe
        allow(principal, "AlterConfigs", name=topic),   # implies DescribeConfigs
        allow(principal, "Read", "Group", group),
        allow(principal, "Describe", "Cluster", "kafka-cluster"),
        allow(principal, "ReplicatorWrite", "Cluster", "kafka-cluster"),
    ])
    topic_ops = {Op.READ, Op.DESCRIBE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS}
    group_ops = {Op.READ, Op.DESCRIBE}
    cluster_ops = {Op.DESCRIBE, Op.REPLICATOR_WRITE}

    client = connect(bootstrap)
    try:
        client.login("SCRAM-SHA-256", name, name + "-pw")
        assert raw_answers(client, topic, group, True) == (
            bits(cluster_ops), bits(topic_ops), bits(cluster_ops), bits(group_ops))
    finally:
        client.close()

    admin = AdminClient(conf)
    cluster = admin.describe_cluster(include_authorized_operations=True).result(20)
    assert set(cluster.authorized_operations) == ck(cluster_ops)
    [described] = admin.describe_topics(TopicCollection([topic]),
                                        include_authorized_operations=True).values()
    assert set(described.result(20).authorized_operations) == ck(topic_ops)
    [g] = admin.describe_consumer_groups([group], include_authorized_operations=True).values()
    assert set(g.result(20).authorized_operations) == ck(group_ops)
