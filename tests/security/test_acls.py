"""ACLs enforced on stock clients (confluent-kafka) authenticated with SASL.

Most tests share one broker (authorizer on, ``User:admin`` a super user) and use their own
users and topics; the ones about broker settings or restarts start their own.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding as CkAclBinding,
)
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from security_support import (
    ADMIN,
    ADMIN_PASSWORD,
    ALL_MECHANISMS,
    BrokerFactory,
    allow,
    connect,
    deny,
    sasl_conf,
    unique,
)

from kipproducer.broker.security import UserStore


def new_user(broker, prefix: str = "u") -> tuple[str, dict]:
    """A fresh user on ``broker`` (an EmbeddedBroker); returns (principal, client conf)."""
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    broker.broker.users.add(name, name + "-pw", "SCRAM-SHA-256")
    return f"User:{name}", sasl_conf(broker.bootstrap_servers, "SCRAM-SHA-256", name,
                                     name + "-pw")


def admin_conf(bootstrap: str) -> dict:
    return sasl_conf(bootstrap, "SCRAM-SHA-512", ADMIN, ADMIN_PASSWORD)


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    admin = AdminClient(admin_conf(bootstrap))
    for f in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        f.result(20)


def produce_one(conf: dict, topic: str, value: bytes = b"v",
                timeout: float = 15) -> KafkaError | None:
    """Produce one record; the delivery error (None: written)."""
    producer = Producer({**conf, "message.timeout.ms": int(timeout * 1000)})
    reports: list = []
    producer.produce(topic, value, on_delivery=lambda err, msg: reports.append(err))
    producer.flush(timeout + 5)
    assert reports, "no delivery report"
    return reports[0]


def end_offset(bootstrap: str, topic: str) -> int:
    consumer = Consumer({**admin_conf(bootstrap), "group.id": unique("wm")})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        consumer.close()


def test_write_needs_an_acl(secured):
    bootstrap = secured.bootstrap_servers
    principal, conf = new_user(secured, "writer")
    topic = unique("w")
    create_topic(bootstrap, topic)
    err = produce_one(conf, topic, timeout=5)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert end_offset(bootstrap, topic) == 0  # nothing written
    secured.broker.acls.add([allow(principal, "Write", name=topic)])
    assert produce_one(conf, topic) is None
    assert end_offset(bootstrap, topic) == 1


def test_deny_overrides_allow(secured):
    principal, conf = new_user(secured, "denied")
    open_topic, closed_topic = unique("open"), unique("closed")
    for t in (open_topic, closed_topic):
        create_topic(secured.bootstrap_servers, t)
    secured.broker.acls.add([
        allow(principal, "Write", name="*"),
        deny(principal, "Write", name=closed_topic),
    ])
    assert produce_one(conf, open_topic) is None
    err = produce_one(conf, closed_topic, timeout=5)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_super_user_bypasses_acls(secured):
    topic = unique("super")
    secured.broker.acls.add([deny("User:*", "All", name=topic)])
    assert produce_one({**admin_conf(secured.bootstrap_servers),
                        "enable.idempotence": True}, topic) is None


def test_prefixed_acls_and_idempotent_producers(secured):
    principal, conf = new_user(secured, "prefix")
    prefix = unique("team") + "."
    secured.broker.acls.add([allow(principal, "Write", name=prefix, pattern_type="Prefixed"),
                             allow(principal, "Create", name=prefix, pattern_type="Prefixed")])
    # Auto-created on first metadata (Create is granted), idempotent (Write on some topic).
    assert produce_one({**conf, "enable.idempotence": True}, prefix + "events") is None
    err = produce_one(conf, unique("elsewhere"), timeout=5)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_idempotent_producer_id_needs_write_somewhere(secured):
    principal, _ = new_user(secured, "pid")
    name = principal.split(":", 1)[1]
    c = connect(secured.bootstrap_servers)
    try:
        c.login("SCRAM-SHA-256", name, name + "-pw")
        refused = c.request(22, 4, transactional_id=None, transaction_timeout=60000,
                            producer_id=-1, producer_epoch=-1)
        assert (refused.error_code, refused.producer_id) == (31, -1)
        secured.broker.acls.add([allow(principal, "IdempotentWrite", "Cluster",
                                       "kafka-cluster")])
        granted = c.request(22, 4, transactional_id=None, transaction_timeout=60000,
                            producer_id=-1, producer_epoch=-1)
        assert granted.error_code == 0 and granted.producer_id >= 0
    finally:
        c.close()


def test_consumer_needs_read_on_topic_and_group(secured):
    bootstrap = secured.bootstrap_servers
    principal, conf = new_user(secured, "reader")
    topic, group = unique("r"), unique("group")
    assert produce_one(admin_conf(bootstrap), topic, b"hello") is None
    secured.broker.acls.add([allow(principal, "Read", name=topic)])

    def consume_once() -> tuple[bytes | None, KafkaError | None]:
        consumer = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest"})
        consumer.subscribe([topic])
        try:
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is None:
                    continue
                if msg.error() is not None:
                    return None, msg.error()
                return msg.value(), None
            return None, None
        finally:
            consumer.close()

    value, err = consume_once()
    assert value is None and err is not None
    assert err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    secured.broker.acls.add([allow(principal, "Read", "Group", group)])
    assert consume_once() == (b"hello", None)


def test_metadata_lists_only_topics_the_user_may_describe(secured):
    bootstrap = secured.bootstrap_servers
    principal, conf = new_user(secured, "lister")
    mine, other = unique("mine"), unique("other")
    for t in (mine, other):
        create_topic(bootstrap, t)
    secured.broker.acls.add([allow(principal, "Read", name=mine)])  # Read implies Describe
    topics = AdminClient(conf).list_topics(timeout=10).topics
    assert mine in topics and other not in topics
    named = AdminClient(conf).list_topics(other, timeout=10).topics[other]
    assert named.error is not None
    assert named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_topic_admin_needs_create_delete_and_config_rights(secured):
    principal, conf = new_user(secured, "ops")
    admin = AdminClient(conf)
    topic = unique("ops")
    fut = admin.create_topics([NewTopic(topic, 1, 1)])[topic]
    with pytest.raises(KafkaException) as info:
        fut.result(15)
    assert info.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    secured.broker.acls.add([allow(principal, "Create", name=topic)])
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
    with pytest.raises(KafkaException) as info:
        admin.delete_topics([topic])[topic].result(15)
    assert info.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    secured.broker.acls.add([allow(principal, "Delete", name=topic)])
    admin.delete_topics([topic])[topic].result(15)


def test_confluent_admin_client_manages_acls(secured):
    bootstrap = secured.bootstrap_servers
    principal, conf = new_user(secured, "managed")
    topic = unique("managed")
    create_topic(bootstrap, topic)
    admin = AdminClient(admin_conf(bootstrap))
    binding = CkAclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, principal,
                           "*", AclOperation.WRITE, AclPermissionType.ALLOW)
    for f in admin.create_acls([binding]).values():
        assert f.result(15) is None
    assert produce_one(conf, topic) is None  # the new ACL is in force
    flt = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.ANY, None, None,
                           AclOperation.ANY, AclPermissionType.ANY)
    assert admin.describe_acls(flt).result(15) == [binding]
    deleted = list(admin.delete_acls([flt]).values())[0].result(15)
    assert deleted == [binding]
    assert admin.describe_acls(flt).result(15) == []
    err = produce_one(conf, topic, timeout=5)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def describe_all_acls(bootstrap: str, user: str, password: str):
    """DescribeAcls on the wire: librdkafka drops this response's top-level error code
    (rd_kafka_DescribeAclsResponse_parse), so a refusal would look like an empty list there."""
    c = connect(bootstrap)
    try:
        c.login("PLAIN", user, password)
        return c.request(29, 3, resource_type_filter=1, resource_name_filter=None,
                         pattern_type_filter=1, principal_filter=None, host_filter=None,
                         operation=1, permission_type=1)
    finally:
        c.close()


def test_acl_apis_need_alter_or_describe_on_the_cluster(secured):
    principal, conf = new_user(secured, "nosy")
    admin = AdminClient(conf)
    binding = CkAclBinding(ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, principal,
                           "*", AclOperation.WRITE, AclPermissionType.ALLOW)
    with pytest.raises(KafkaException) as info:
        list(admin.create_acls([binding]).values())[0].result(15)
    assert info.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    name = principal.split(":", 1)[1]
    refused = describe_all_acls(secured.bootstrap_servers, name, name + "-pw")
    assert refused.error_code == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    assert f"{principal} lacks Describe on the cluster" in refused.error_message
    secured.broker.acls.add([allow(principal, "Describe", "Cluster", "kafka-cluster")])
    granted = describe_all_acls(secured.bootstrap_servers, name, name + "-pw")
    assert granted.error_code == 0 and granted.resources


def test_invalid_acls_are_refused_with_a_reason(secured):
    c = connect(secured.bootstrap_servers)
    try:
        c.login("SCRAM-SHA-512", ADMIN, ADMIN_PASSWORD)
        body = c.request(30, 3, creations=[
            {"resource_type": 4, "resource_name": "not-the-cluster", "resource_pattern_type": 3,
             "principal": "User:x", "host": "*", "operation": 7, "permission_type": 3},
            {"resource_type": 2, "resource_name": "t", "resource_pattern_type": 3,
             "principal": "User:x", "host": "*", "operation": 99, "permission_type": 3},
            {"resource_type": 4, "resource_name": "kafka-cluster", "resource_pattern_type": 3,
             "principal": "User:x", "host": "*", "operation": 29, "permission_type": 3},
        ])
        codes = [(r.error_code, r.error_message) for r in body.results]
        assert codes[0][0] == 42 and "kafka-cluster" in codes[0][1]
        assert codes[1][0] == 42 and "99" in codes[1][1]
        assert codes[2] == (0, None)  # ReplicatorWrite (29) on the Cluster is a valid ACL
        bad_filter = c.request(29, 3, resource_type_filter=0, resource_name_filter=None,
                               pattern_type_filter=1, principal_filter=None, host_filter=None,
                               operation=1, permission_type=1)
        assert bad_filter.error_code == 42
    finally:
        c.close()


def test_allow_everyone_if_no_acl_found(embedded):
    broker = embedded({"sasl.enabled.mechanisms": "SCRAM-SHA-256",
                       "authorizer.enabled": "true", "allow.everyone.if.no.acl.found": "true"})
    principal, conf = new_user(broker, "anyone")
    other, _ = new_user(broker, "other")
    topic = unique("free")
    assert produce_one(conf, topic) is None  # no ACL names the topic: allowed (auto-created)
    broker.broker.acls.add([allow(other, "Write", name=topic)])
    err = produce_one(conf, topic, timeout=5)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_authorizer_class_name_turns_the_authorizer_on(embedded):
    broker = embedded({"sasl.enabled.mechanisms": "PLAIN",
                       "authorizer.class.name":
                           "org.apache.kafka.metadata.authorizer.StandardAuthorizer"})
    broker.broker.users.add("pat", "pat-pw")
    conf = sasl_conf(broker.bootstrap_servers, "PLAIN", "pat", "pat-pw")
    err = produce_one(conf, unique("t"), timeout=5)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_without_an_authorizer_everything_is_allowed_and_acl_apis_say_so(embedded):
    broker = embedded({"sasl.enabled.mechanisms": "PLAIN"})
    broker.broker.users.add("pat", "pat-pw")
    conf = sasl_conf(broker.bootstrap_servers, "PLAIN", "pat", "pat-pw")
    assert produce_one(conf, unique("t")) is None
    admin = AdminClient(conf)
    binding = CkAclBinding(ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, "User:pat",
                           "*", AclOperation.WRITE, AclPermissionType.ALLOW)
    with pytest.raises(KafkaException) as info:
        list(admin.create_acls([binding]).values())[0].result(15)
    assert info.value.args[0].code() == KafkaError.SECURITY_DISABLED
    described = describe_all_acls(broker.bootstrap_servers, "pat", "pat-pw")
    assert described.error_code == KafkaError.SECURITY_DISABLED
    assert "authorizer.enabled=true" in described.error_message


def test_acls_and_users_survive_a_restart(tmp_path):
    data = tmp_path / "data"
    UserStore(data).add(ADMIN, ADMIN_PASSWORD)
    UserStore(data).add("kim", "kim-pw")
    factory = BrokerFactory(tmp_path)
    try:
        broker = factory({"sasl.enabled.mechanisms": ALL_MECHANISMS,
                          "authorizer.enabled": "true", "super.users": f"User:{ADMIN}"},
                         data_dir=data)
        admin = AdminClient(admin_conf(broker.bootstrap))
        topic = unique("durable")
        for f in admin.create_topics([NewTopic(topic, 1, 1)]).values():
            f.result(15)
        binding = CkAclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL,
                               "User:kim", "*", AclOperation.WRITE, AclPermissionType.ALLOW)
        for f in admin.create_acls([binding]).values():
            f.result(15)
        del admin
        broker.restart()
        kim = sasl_conf(broker.bootstrap, "SCRAM-SHA-512", "kim", "kim-pw")
        assert produce_one(kim, topic) is None
        flt = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                               AclOperation.ANY, AclPermissionType.ANY)
        assert AdminClient(admin_conf(broker.bootstrap)).describe_acls(flt).result(15) == [
            binding]
    finally:
        factory.close()
