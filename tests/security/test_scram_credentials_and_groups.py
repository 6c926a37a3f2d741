"""KIP-554 SCRAM credential APIs through confluent-kafka's AdminClient, and the group APIs
under ACLs (DescribeGroups, ListGroups, OffsetCommit, OffsetFetch, DeleteGroups)."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from security_support import ADMIN, ADMIN_PASSWORD, allow, connect, sasl_conf

GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED = 30, 29


def test_admin_client_sets_describes_and_deletes_scram_credentials(secured):
    bootstrap = secured.bootstrap_servers
    admin = AdminClient(sasl_conf(bootstrap, "SCRAM-SHA-512", ADMIN, ADMIN_PASSWORD))
    name = "carl-" + uuid.uuid4().hex[:6]
    upsert = UserScramCredentialUpsertion(
        name, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), b"carl-pw")
    for f in admin.alter_user_scram_credentials([upsert]).values():
        assert f.result(15) is None
    # The credential the client derived (its own salt) works for a login at once.
    c = connect(bootstrap)
    c.login("SCRAM-SHA-256", name, "carl-pw")
    c.close()

    described = admin.describe_user_scram_credentials([name])[name].result(15)
    infos = [(i.mechanism, i.iterations) for i in described.scram_credential_infos]
    assert infos == [(ScramMechanism.SCRAM_SHA_256, 8192)]
    every = admin.describe_user_scram_credentials().result(15)
    assert name in every and ADMIN in every

    with pytest.raises(KafkaException) as info:
        admin.describe_user_scram_credentials(["nobody-here"])["nobody-here"].result(15)
    assert info.value.args[0].code() == KafkaError.RESOURCE_NOT_FOUND

    too_few = UserScramCredentialUpsertion(
        name, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 1000), b"pw")
    with pytest.raises(KafkaException) as info:
        admin.alter_user_scram_credentials([too_few])[name].result(15)
    assert info.value.args[0].code() == KafkaError.UNACCEPTABLE_CREDENTIAL

    delete = UserScramCredentialDeletion(name, ScramMechanism.SCRAM_SHA_256)
    for f in admin.alter_user_scram_credentials([delete]).values():
        assert f.result(15) is None
    assert name not in secured.broker.users
    with pytest.raises(KafkaException) as info:
        admin.alter_user_scram_credentials([delete])[name].result(15)
    assert info.value.args[0].code() == KafkaError.RESOURCE_NOT_FOUND


def test_scram_credential_apis_need_the_cluster_rights(secured):
    name = "eve-" + uuid.uuid4().hex[:6]
    secured.broker.users.add(name, "eve-pw")
    admin = AdminClient(sasl_conf(secured.bootstrap_servers, "PLAIN", name, "eve-pw"))
    upsert = UserScramCredentialUpsertion(
        "admin", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"pwned")
    with pytest.raises(KafkaException) as info:
        admin.alter_user_scram_credentials([upsert])["admin"].result(15)
    assert info.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    assert secured.broker.users.verify_password("admin", ADMIN_PASSWORD)
    # DescribeUserScramCredentials is refused on the wire: confluent-kafka 2.16 (librdkafka
    # 2.16) crashes the process (munmap_chunk: invalid pointer) on any top-level error in this
    # response, which Kafka sends the same way.
    c = connect(secured.bootstrap_servers)
    try:
        c.login("PLAIN", name, "eve-pw")
        refused = c.request(50, 0, users=[{"name": "admin"}])
        assert refused.error_code == KafkaError.CLUSTER_AUTHORIZATION_FAILED
        assert f"User:{name} lacks Describe on the cluster" in refused.error_message
        assert [(r.user, r.error_code) for r in refused.results] == [
            ("admin", KafkaError.CLUSTER_AUTHORIZATION_FAILED)]
        assert c.request(50, 0, users=None).results == ()
    finally:
        c.close()


@pytest.fixture
def member(secured):
    """A fresh user logged in on a raw connection, and the admin's connection."""
    name = "grp-" + uuid.uuid4().hex[:6]
    secured.broker.users.add(name, "pw", "SCRAM-SHA-512")
    user, admin = connect(secured.bootstrap_servers), connect(secured.bootstrap_servers)
    user.login("SCRAM-SHA-512", name, "pw")
    admin.login("PLAIN", ADMIN, ADMIN_PASSWORD)
    yield f"User:{name}", user, admin
    user.close()
    admin.close()


def commit(client, group: str, topic: str):
    body = client.request(8, 9, group_id=group, generation_id_or_member_epoch=-1,
                          member_id="", group_instance_id=None, topics=[{
                              "name": topic, "partitions": [{
                                  "partition_index": 0, "committed_offset": 5,
                                  "committed_leader_epoch": -1, "committed_metadata": ""}]}])
    return body.topics[0].partitions[0].error_code


def fetch(client, group: str, topics):
    body = client.request(8 + 1, 8, require_stable=False, groups=[{
        "group_id": group,
        "topics": None if topics is None else [
            {"name": t, "partition_indexes": [0]} for t in topics]}])
    return body.groups[0]


def test_group_apis_under_acls(secured, member):
    principal, user, admin = member
    group, topic = "g-" + uuid.uuid4().hex[:6], "t-" + uuid.uuid4().hex[:6]
    admin.create_topic(topic)

    assert commit(user, group, topic) == GROUP_AUTHORIZATION_FAILED
    found = user.request(10, 4, key_type=0, coordinator_keys=[group]).coordinators[0]
    assert found.error_code == GROUP_AUTHORIZATION_FAILED
    secured.broker.acls.add([allow(principal, "Read", "Group", group)])
    assert user.request(10, 4, key_type=0, coordinator_keys=[group]).coordinators[0] \
        .error_code == 0
    assert commit(user, group, topic) == TOPIC_AUTHORIZATION_FAILED  # no Read on the topic
    secured.broker.acls.add([allow(principal, "Read", "Topic", topic)])
    assert commit(user, group, topic) == 0

    fetched = fetch(user, group, [topic])
    assert fetched.error_code == 0
    assert fetched.topics[0].partitions[0].committed_offset == 5
    # An admin-committed offset on a topic the user may not see stays invisible.
    hidden = "h-" + uuid.uuid4().hex[:6]
    admin.create_topic(hidden)
    assert commit(admin, group, hidden) == 0
    assert [t.name for t in fetch(user, group, None).topics] == [topic]
    named = fetch(user, group, [hidden]).topics[0].partitions[0]
    assert named.error_code == TOPIC_AUTHORIZATION_FAILED

    listed = user.request(16, 5, states_filter=[], types_filter=[])
    assert [g.group_id for g in listed.groups] == [group]  # only groups it may describe
    described = user.request(15, 5, groups=[group, "other-group"],
                             include_authorized_operations=False).groups
    assert [g.error_code for g in described] == [0, GROUP_AUTHORIZATION_FAILED]
    deleted = user.request(42, 2, groups_names=[group]).results[0]
    assert deleted.error_code == GROUP_AUTHORIZATION_FAILED
    secured.broker.acls.add([allow(principal, "Delete", "Group", group)])
    assert user.request(42, 2, groups_names=[group]).results[0].error_code == 0
