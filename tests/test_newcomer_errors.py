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
