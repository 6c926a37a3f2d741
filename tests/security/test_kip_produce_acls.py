"""KIP-WIRE §4 authorization, on the wire, with SCRAM users authenticated by hand.

- ProduceMode USE_OFFSETS (KIP-391) needs ReplicatorWrite on the Cluster, else
  CLUSTER_AUTHORIZATION_FAILED for every partition, and the usual WRITE on the topic;
- ProduceMode EXPECTED_OFFSETS (KIP-27) needs WRITE on the topic.
A refused request writes nothing.
"""

from __future__ import annotations

import uuid

import pytest
from security_support import allow, connect, log_end, new_topic
from test_broker_produce_modes import batch, values  # tests/kip: the batches KIP tests send

from kipproducer.protocol import error_codes as ec
from kipproducer.protocol.wire_extensions import ProduceMode

USE, EXPECT = ProduceMode.USE_OFFSETS, ProduceMode.EXPECTED_OFFSETS


@pytest.fixture
def replicator(secured):
    """A fresh SCRAM-SHA-256 user, logged in on its own connection: (principal, client)."""
    name = "repl-" + uuid.uuid4().hex[:6]
    secured.broker.users.add(name, "pw-" + name, "SCRAM-SHA-256")
    c = connect(secured.bootstrap_servers)
    c.login("SCRAM-SHA-256", name, "pw-" + name)
    yield f"User:{name}", c
    c.close()


def test_use_offsets_needs_replicator_write(secured, admin, replicator):
    principal, client = replicator
    topic = new_topic(admin)
    secured.broker.acls.add([allow(principal, "Write", name=topic)])
    request = {0: batch(values(b"a", 10), 1000), 1: batch(values(b"b", 5), 7)}
    refused = client.produce(topic, request, mode=USE)
    for answer in refused.values():
        assert answer.error_code == ec.CLUSTER_AUTHORIZATION_FAILED
        assert "lacks ReplicatorWrite on the cluster" in answer.error_message
        assert answer.base_offset == -1
    assert log_end(admin, topic) == [0, 0]  # nothing written

    secured.broker.acls.add([allow(principal, "ReplicatorWrite", "Cluster", "kafka-cluster")])
    done = client.produce(topic, request, mode=USE)
    assert [(a.error_code, a.base_offset, a.log_end_offset) for a in done.values()] == [
        (0, 1000, 1010), (0, 7, 12)]
    assert log_end(admin, topic) == [1010, 12]


def test_replicator_write_does_not_replace_topic_write(secured, admin, replicator):
    principal, client = replicator
    topic = new_topic(admin, 1)
    secured.broker.acls.add([allow(principal, "ReplicatorWrite", "Cluster", "kafka-cluster")])
    answer = client.produce(topic, {0: batch(values(b"a", 3), 50)}, mode=USE)[0]
    assert answer.error_code == ec.TOPIC_AUTHORIZATION_FAILED
    assert log_end(admin, topic, 1) == [0]


def test_expected_offsets_needs_write_on_the_topic(secured, admin, replicator):
    principal, client = replicator
    topic = new_topic(admin)
    request = {0: batch(values(b"c", 4), 0), 1: batch(values(b"d", 2), -1)}
    refused = client.produce(topic, request, mode=EXPECT)
    for answer in refused.values():
        assert answer.error_code == ec.TOPIC_AUTHORIZATION_FAILED
        assert answer.log_end_offset is None  # not sent: nothing learnt about the log
    assert log_end(admin, topic) == [0, 0]

    secured.broker.acls.add([allow(principal, "Write", name=topic)])
    done = client.produce(topic, request, mode=EXPECT)
    assert [(a.error_code, a.base_offset) for a in done.values()] == [(0, 0), (0, 0)]
    assert log_end(admin, topic) == [4, 2]


def test_unauthorized_and_unknown_topics_look_the_same(replicator):
    _, client = replicator
    answer = client.produce("no-such-topic-" + uuid.uuid4().hex[:6],
                            {0: batch([b"x"], 0)}, mode=EXPECT)[0]
    assert answer.error_code == ec.TOPIC_AUTHORIZATION_FAILED
