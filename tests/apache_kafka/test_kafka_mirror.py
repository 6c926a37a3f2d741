"""kip mirror's preserve mode onto Apache Kafka with three nodes: the mirror creates the target
topic, writes it through the emulated KIP-391 (docs/stock-clusters.md), and every record lands
at its source offset. (Issue 43's mirror benchmark once saw the target refused there, the
broker asked not knowing the topic just created; that race is timing-dependent and this test
does not force it.)"""

from __future__ import annotations

import uuid

from kafka_cluster import KafkaCluster
from kafka_support import rdkafka_read

from kipproducer import Producer
from kipproducer.mirror import Mirror

PARTITIONS = 3
PER_PARTITION = 500


def test_preserve_mode_onto_a_new_topic_of_three_nodes(kafka3: KafkaCluster) -> None:
    source = kafka3.unique_topic("mirror-src", partitions=PARTITIONS)
    producer = Producer({"bootstrap.servers": kafka3.bootstrap, "enable.idempotence": True})
    for part in range(PARTITIONS):
        producer.produce_arrays(source, [b"value-%d-%d" % (part, i) for i in range(PER_PARTITION)],
                                keys=[b"key-%d" % i for i in range(PER_PARTITION)],
                                partition=part)
    assert producer.flush(60) == 0
    prefix = f"copy-{uuid.uuid4().hex[:8]}"
    snapshot = Mirror(kafka3.bootstrap, kafka3.bootstrap, source, mode="preserve",
                      group=prefix, rename=prefix + ".{topic}", progress=False).run(once=True)
    assert snapshot["records"] == PARTITIONS * PER_PARTITION
    # every record at its source offset, read_committed (the emulation's markers hidden)
    assert rdkafka_read(kafka3.bootstrap, f"{prefix}.{source}", PARTITIONS) == rdkafka_read(
        kafka3.bootstrap, source, PARTITIONS)
