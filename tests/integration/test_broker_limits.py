"""Resource limits: a request that runs the broker out of file descriptors.

Every partition keeps its segment file open, so a CreateTopics for more partitions than the
process has descriptors left fails half-way through. The broker must answer that request with
an error, leave no half-created topic behind, release what it opened and go on accepting
connections.
"""

from __future__ import annotations

import resource

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from integration_support import KipBroker, create_topics, unique

FD_LIMIT = 256  # far fewer than the partitions asked for below


def test_create_topics_beyond_the_descriptor_limit_leaves_the_broker_serving(kip_broker) -> None:
    broker: KipBroker = kip_broker(allow_tracebacks=True)
    kept = unique("kept")
    create_topics(broker.bootstrap, {kept: 1})
    resource.prlimit(broker.pid, resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    name = unique("too-many-files")
    [future] = admin.create_topics(
        [NewTopic(name, FD_LIMIT * 2, 1)], request_timeout=10, operation_timeout=10
    ).values()
    with pytest.raises(KafkaException):
        future.result(15)

    # A new client on a new connection: the broker accepts it and shows no half-made topic.
    fresh = AdminClient({"bootstrap.servers": broker.bootstrap})
    topics = fresh.list_topics(timeout=5).topics
    assert kept in topics
    assert name not in topics
