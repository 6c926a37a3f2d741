"""compression.type: the broker stores a batch in the topic's codec, whatever the producer sent.

Records are read back by librdkafka and kafka-python (CRCs checked), and the codec of every
stored batch is read from the partition's segment files. Offsets, sequences and producer fields
survive the rewrite: an idempotent retry is still recognised as a duplicate, transactions still
commit and abort.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from integration_support import KipBroker, consume_records, create_topics, unique
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from kipproducer.protocol import error_codes as ec
from kipproducer.records import decode_batches, encode_batch

_KIP_TESTS = str(Path(__file__).resolve().parents[1] / "kip")
if _KIP_TESTS not in sys.path:
    sys.path.insert(0, _KIP_TESTS)

from raw_client import RawClient  # noqa: E402

TIMEOUT = 15.0
PRODUCE, INIT_PRODUCER_ID = 0, 22


@pytest.fixture(scope="module")
def broker(module_broker_factory) -> KipBroker:
    return module_broker_factory({"num.partitions": "1"})


def stored_batches(broker: KipBroker, topic: str, partition: int = 0) -> list:
    """Every batch in the partition's segment files, in offset order (CRC-checked)."""
    directory = broker.data_dir / f"{topic}-{partition}"
    batches = []
    for path in sorted(directory.glob("*.log")):
        batches.extend(decode_batches(path.read_bytes(), validate=True))
    return batches


def codecs(broker: KipBroker, topic: str) -> list[str | None]:
    return [b.compression for b in stored_batches(broker, topic) if not b.is_control]


def confluent_send(broker: KipBroker, topic: str, values: list[bytes], **conf) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, **conf})
    for value in values:
        producer.produce(topic, value=value, key=b"k" + value)
    assert producer.flush(TIMEOUT) == 0


def kafka_python_read(broker: KipBroker, topic: str, n: int) -> list[tuple[int, bytes]]:
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                             check_crcs=True, consumer_timeout_ms=int(TIMEOUT * 1000))
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        out = []
        for message in consumer:
            out.append((message.offset, message.value))
            if len(out) == n:
                break
        return out
    finally:
        consumer.close()


def test_batches_are_recompressed_to_the_topic_codec(broker: KipBroker) -> None:
    topic = unique("ct-lz4")
    create_topics(broker.bootstrap, {topic: 1}, {"compression.type": "lz4"})
    values = [b"v%03d" % i * 20 for i in range(30)]
    # librdkafka sends gzip from an idempotent producer, kafka-python sends uncompressed.
    confluent_send(broker, topic, values[:20], **{"compression.type": "gzip",
                                                   "enable.idempotence": True})
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type=None,
                             enable_idempotence=False)
    for value in values[20:]:
        producer.send(topic, value=value, key=b"k" + value)
    producer.flush(TIMEOUT)
    producer.close()

    batches = stored_batches(broker, topic)
    assert {b.compression for b in batches} == {"lz4"}
    # Offsets contiguous, producer fields as sent: idempotent batches keep id and sequence.
    assert batches[0].base_offset == 0
    for before, after in zip(batches, batches[1:], strict=False):
        assert after.base_offset == before.last_offset + 1
    idempotent = [b for b in batches if b.producer_id >= 0]
    assert idempotent and idempotent[0].base_sequence == 0
    assert sum(b.record_count for b in idempotent) == 20

    got = consume_records(broker.bootstrap, topic, 30, timeout=TIMEOUT)
    assert [(r.offset, r.value, r.key) for r in got] == [
        (i, v, b"k" + v) for i, v in enumerate(values)]
    assert kafka_python_read(broker, topic, 30) == list(enumerate(values))


def test_uncompressed_producer_and_a_change_at_run_time(broker: KipBroker) -> None:
    topic = unique("ct-change")
    create_topics(broker.bootstrap, {topic: 1}, {"compression.type": "uncompressed"})
    confluent_send(broker, topic, [b"a" * 100], **{"compression.type": "zstd"})
    assert codecs(broker, topic) == [None]

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    def set_type(value: str) -> None:
        futures = admin.incremental_alter_configs([ConfigResource(
            ResourceType.TOPIC, topic, incremental_configs=[ConfigEntry(
                "compression.type", value, incremental_operation=AlterConfigOpType.SET)])])
        for future in futures.values():
            future.result(TIMEOUT)

    set_type("gzip")
    confluent_send(broker, topic, [b"b" * 100], **{"compression.type": "snappy"})
    set_type("producer")  # keep what the producer sent
    confluent_send(broker, topic, [b"c" * 100], **{"compression.type": "snappy"})
    assert codecs(broker, topic) == [None, "gzip", "snappy"]
    got = consume_records(broker.bootstrap, topic, 3, timeout=TIMEOUT)
    assert [r.value for r in got] == [b"a" * 100, b"b" * 100, b"c" * 100]
    assert [v for _, v in kafka_python_read(broker, topic, 3)] == [r.value for r in got]


def _produce(client: RawClient, topic: str, batch: bytes):
    body = client.request(PRODUCE, 9, transactional_id=None, acks=-1, timeout=10000,
                          topic_data=[{"name": topic,
                                       "partition_data": [{"index": 0, "records": batch}]}])
    [answer] = body.responses[0].partition_responses
    return answer.error_code, answer.base_offset


def test_idempotent_retry_is_deduplicated_on_a_recompressing_topic(broker: KipBroker) -> None:
    topic = unique("ct-idem")
    create_topics(broker.bootstrap, {topic: 1}, {"compression.type": "zstd"})
    client = RawClient(broker.bootstrap)
    try:
        init = client.request(INIT_PRODUCER_ID, 4, transactional_id=None,
                              transaction_timeout=60000, producer_id=-1, producer_epoch=-1)
        assert init.error_code == ec.NONE
        pid, epoch = init.producer_id, init.producer_epoch

        def batch(sequence: int, n: int) -> bytes:
            return encode_batch([(None, b"r%d" % (sequence + i), None, None) for i in range(n)],
                                producer_id=pid, producer_epoch=epoch, base_sequence=sequence,
                                compression="gzip")

        first = batch(0, 3)
        assert _produce(client, topic, first) == (ec.NONE, 0)
        # The same bytes again (a retry after a lost answer): its first offsets, nothing new.
        assert _produce(client, topic, first) == (ec.NONE, 0)
        assert _produce(client, topic, batch(3, 2)) == (ec.NONE, 3)
        code, _ = _produce(client, topic, batch(9, 1))  # a gap in the sequence
        assert code == ec.OUT_OF_ORDER_SEQUENCE_NUMBER
    finally:
        client.close()
    batches = stored_batches(broker, topic)
    assert [(b.compression, b.base_offset, b.base_sequence, b.producer_id) for b in batches] == [
        ("zstd", 0, 0, pid), ("zstd", 3, 3, pid)]
    got = consume_records(broker.bootstrap, topic, 5, timeout=TIMEOUT)
    assert [r.value for r in got] == [b"r0", b"r1", b"r2", b"r3", b"r4"]


def test_transactions_on_a_recompressing_topic(broker: KipBroker) -> None:
    topic = unique("ct-txn")
    create_topics(broker.bootstrap, {topic: 1}, {"compression.type": "zstd"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0,
                         "transactional.id": unique("tid"), "compression.type": "snappy"})
    producer.init_transactions(TIMEOUT)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, value=b"keep%d" % i)
    producer.commit_transaction(TIMEOUT)
    producer.begin_transaction()
    producer.produce(topic, value=b"drop")
    assert producer.flush(TIMEOUT) == 0
    producer.abort_transaction(TIMEOUT)

    data = [b for b in stored_batches(broker, topic) if not b.is_control]
    assert data and all(b.compression == "zstd" and b.is_transactional for b in data)
    committed = consume_records(broker.bootstrap, topic, 3, timeout=TIMEOUT,
                                config={"isolation.level": "read_committed"})
    assert [r.value for r in committed] == [b"keep0", b"keep1", b"keep2"]
    everything = consume_records(broker.bootstrap, topic, 4, timeout=TIMEOUT,
                                 config={"isolation.level": "read_uncommitted"})
    assert sorted(r.value for r in everything) == [b"drop", b"keep0", b"keep1", b"keep2"]
