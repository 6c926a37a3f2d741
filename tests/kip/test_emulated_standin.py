"""The stand-in for stock Kafka: ``kip broker --config kip.extensions.enable=false``.

It must look like Kafka 3.9 to every client: no KIP-WIRE feature in ApiVersions, the
ProduceMode tag ignored (mode 0 rules: a batch whose baseOffset is not 0 is INVALID_RECORD,
one at 0 is appended at the log end, no LogEndOffset in the answer), while stock clients and
transactions work as usual. kipproducer's native KIP calls fail loud against it.
"""

from __future__ import annotations

import numpy as np
import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from kip_support import read_confluent, unique
from raw_client import RawClient
from test_broker_produce_modes import batch, values

from kipproducer.broker.embedded import EmbeddedBroker
from kipproducer.protocol import error_codes as ec
from kipproducer.protocol.wire_extensions import ProduceMode


@pytest.fixture(scope="module")
def stock():
    with EmbeddedBroker(config={"kip.extensions.enable": False}) as b:
        yield b


@pytest.fixture
def raw(stock):
    c = RawClient(stock.bootstrap_servers)
    yield c
    c.close()


def test_announces_no_kip_feature(raw):
    answer = raw.request(18, 3, client_software_name="t", client_software_version="1")
    assert answer.error_code == 0
    assert not answer.supported_features
    assert {k.api_key for k in answer.api_keys} >= {0, 1, 22, 24, 26}  # produce, fetch, txns


def test_mode_tag_ignored_as_kafka_does(stock, raw):
    topic = unique("standin")
    raw.create_topic(topic)
    # A batch at baseOffset 5 with USE_OFFSETS: Kafka's rule for mode 0 refuses it.
    refused = raw.produce(topic, {0: batch(values(b"a", 2), 5)}, mode=ProduceMode.USE_OFFSETS)[0]
    assert refused.error_code == ec.INVALID_RECORD
    assert "baseOffset" in refused.error_message
    assert refused.log_end_offset is None  # a stock broker sends no tag 10000
    assert raw.produce(topic, {0: batch(values(b"s", 3), 0)}, mode=0)[0].base_offset == 0
    # EXPECTED_OFFSETS expecting 0 while the log ends at 3: a stock broker appends anyway.
    slipped = raw.produce(topic, {0: batch(values(b"e", 1), 0)},
                          mode=ProduceMode.EXPECTED_OFFSETS)[0]
    assert (slipped.error_code, slipped.base_offset, slipped.log_end_offset) == (0, 3, None)
    got = [(r.offset, r.value) for r in read_confluent(stock.bootstrap_servers, topic, 1)]
    assert got == [(0, b"s-0"), (1, b"s-1"), (2, b"s-2"), (3, b"e-0")]


def test_native_kip_calls_fail_loud_and_stock_clients_work(stock):
    from kipproducer import Producer as KipProducer

    bootstrap = stock.bootstrap_servers
    topic = unique("standin-native")
    plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(3):
        plain.produce(topic, b"p%d" % i, partition=0)
    assert plain.flush(20) == 0
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("tid")})
    txn.init_transactions(20)
    txn.begin_transaction()
    txn.produce(topic, b"t", partition=0)
    txn.commit_transaction(20)

    reports: list = []
    with KipProducer({"bootstrap.servers": bootstrap, "kip.mode": "native"}) as p:
        p.produce(topic, b"o", partition=0, offset=10,
                  on_delivery=lambda err, msg: reports.append(err))
        p.produce(topic, b"e", partition=0, expected_offset=5,
                  on_delivery=lambda err, msg: reports.append(err))
        assert p.flush(20) == 0
        with pytest.raises(KafkaException) as info:
            p.append(topic, [b"x"], partition=0, offsets=np.array([30], np.int64))
        reports.append(info.value.args[0])
    assert len(reports) == 3
    for err in reports:
        assert err.code() == KafkaError._UNSUPPORTED_FEATURE, err
        assert "unsupported by broker" in err.str(), err
    got = [(r.offset, r.value) for r in read_confluent(bootstrap, topic, 1)]
    assert got == [(0, b"p0"), (1, b"p1"), (2, b"p2"), (3, b"t")]  # commit marker at 4


def _acked(producer: Producer, topic: str, value, key: bytes = b"", headers=None) -> int:
    """Produce one record to partition 0 and wait for it: its offset."""
    landed: list = []
    producer.produce(topic, value, key, partition=0, headers=headers,
                     on_delivery=lambda err, msg: landed.append((err, msg)))
    assert producer.flush(20) == 0
    assert landed[0][0] is None, landed[0][0]
    return landed[0][1].offset()


def _kafka_python_read(bootstrap: str, topic: str, isolation: str, count: int) -> list:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation,
                             enable_auto_commit=False, group_id=None)
    try:
        consumer.assign([KTP(topic, 0)])
        consumer.seek_to_beginning()
        got: list = []
        for _ in range(100):
            for records in consumer.poll(timeout_ms=100).values():
                got += [(r.offset, r.value) for r in records]
            if len(got) >= count:
                break
        return got
    finally:
        consumer.close()


def test_records_of_other_producers_inside_an_aborted_range_stay_visible(stock):
    """Kafka's read_committed rule (the aborted-transaction index: a Fetch answer lists each
    aborted transaction's producer id and first offset; the reader drops that producer's
    transactional batches from there to its abort marker): records of another producer id
    interleaved with an open transaction's records stay visible once it aborts, the aborted
    ones never are. What a filler transaction left open while a plain writer appends relies
    on; librdkafka and kafka-python read it back, every kept record at its offset."""
    bootstrap = stock.bootstrap_servers
    topic = unique("standin-interleaved")
    Producer({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)  # auto-create
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("fill"),
                    "linger.ms": 0})
    txn.init_transactions(20)
    plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                      "linger.ms": 0})
    filler = [("kip.filler", b"")]
    txn.begin_transaction()
    placed = [_acked(txn, topic, None, headers=filler), _acked(plain, topic, b"k1"),
              _acked(txn, topic, None, headers=filler), _acked(plain, topic, b"k3"),
              _acked(txn, topic, None, headers=filler), _acked(plain, topic, b"k5")]
    assert placed == [0, 1, 2, 3, 4, 5]
    txn.abort_transaction(20)  # its marker takes 6
    assert _acked(plain, topic, b"k7") == 7
    del txn, plain  # (their connections close before the module's broker stops)
    kept = [(1, b"k1"), (3, b"k3"), (5, b"k5"), (7, b"k7")]
    assert [(r.offset, r.value) for r in read_confluent(
        bootstrap, topic, 1, config={"isolation.level": "read_committed"})] == kept
    assert _kafka_python_read(bootstrap, topic, "read_committed", 4) == kept
    everything = [(r.offset, r.value) for r in read_confluent(
        bootstrap, topic, 1, config={"isolation.level": "read_uncommitted"})]
    assert everything == [(0, None), (1, b"k1"), (2, None), (3, b"k3"), (4, None),
                          (5, b"k5"), (7, b"k7")]
