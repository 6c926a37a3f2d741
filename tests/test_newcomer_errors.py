"""A newcomer's mistakes get one clear error naming what is wrong (issue 26), against the
reference broker: a partition past the topic's end names the topic, the partition asked and
the ones that exist."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException

from kipproducer import Producer


@pytest.fixture(scope="module")
def broker():
    from kipproducer.broker.embedded import EmbeddedBroker

    with EmbeddedBroker(config={"num.partitions": 3}) as b:
        yield b


def test_a_partition_past_the_end_names_topic_partition_and_range(broker) -> None:
    topic = f"t-{uuid.uuid4().hex[:8]}"
    p = Producer({"bootstrap.servers": broker.bootstrap_servers})
    try:
        assert p.append(topic, [b"first"], partition=2) == 0  # creates it: 3 partitions
        reports: list = []
        p.produce_arrays(topic, [b"a"], partition=8,
                         on_delivery=lambda err, report: reports.append(err))
        assert p.flush(10) == 0
        expected = (f"topic {topic!r} has 3 partitions (0-2); partition 8 does not exist: "
                    "produce to one of 0-2, or add partitions to the topic first "
                    "(CreatePartitions)")
        assert [(e.code(), e.str()) for e in reports] == [
            (KafkaError._UNKNOWN_PARTITION, expected)]
        with pytest.raises(KafkaException) as info:
            p.append(topic, [b"b"], partition=8)
        assert info.value.args[0].code() == KafkaError._UNKNOWN_PARTITION
        assert info.value.args[0].str() == expected
    finally:
        p.close()


def test_a_fenced_group_member_gets_a_fatal_error(broker) -> None:
    """Two copies with one transactional.id (the table loader run twice on one host): the
    first is fenced; the error its commit raises is fatal(), as librdkafka's is for a fenced
    producer, so the usual ``if error.fatal(): stop`` ends it instead of abort_transaction()
    raising again."""
    import confluent_kafka

    group, tid = f"g-{uuid.uuid4().hex[:8]}", f"tid-{uuid.uuid4().hex[:8]}"
    topic = f"t-{uuid.uuid4().hex[:8]}"
    first = Producer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group,
                      "source.partition.count": 2, "session.timeout.ms": 6000,
                      "transactional.id": tid})
    try:
        first.init_transactions(30)
        assert first.subscribe(timeout=30) == {0: None, 1: None}
        first.begin_transaction()
        first.produce(topic, b"row 1")
        second = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap_servers,
                                           "transactional.id": tid})
        second.init_transactions(30)  # fences the first
        with pytest.raises(KafkaException) as info:
            first.commit_transaction(30, positions={0: "1"})
        error = info.value.args[0]
        assert error.code() == KafkaError._FENCED, error
        assert error.fatal() and not error.txn_requires_abort(), error
        assert "fenced" in error.str() and group in error.str(), error
    finally:
        try:
            first.close()
        except KafkaException:  # after a fatal error there is nothing to commit on close
            pass
