"""The broker half of KIP-391 (USE_OFFSETS) and KIP-27 (EXPECTED_OFFSETS), on the wire.

Requests are built with the shared protocol layer exactly as KIP-WIRE.md specifies (ProduceMode
tag 10000, LogEndOffset tag 10000, errors 10391 / 10027); stock clients read the result.
"""

import time
import uuid

from confluent_kafka import Consumer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition

from kipproducer.protocol import error_codes as ec
from kipproducer.protocol.wire_extensions import (
    FEATURE_PRODUCE_CONDITIONAL,
    FEATURE_PRODUCE_OFFSETS,
    ProduceMode,
)
from kipproducer.records import decode_batches, encode_batch, rebuild_batch, validate_batch

USE, EXPECT, ASSIGN = ProduceMode.USE_OFFSETS, ProduceMode.EXPECTED_OFFSETS, ProduceMode.ASSIGN


def batch(values, base_offset, **kw):
    # Current timestamps: older ones would be deleted by time retention (retention.ms).
    now = int(time.time() * 1000)
    return encode_batch([(b"k-" + v, v, [("h", b"x")], now + i)
                         for i, v in enumerate(values)], base_offset=base_offset, **kw)


def values(prefix, n):
    return [b"%s-%d" % (prefix, i) for i in range(n)]


def unique_topic(client, **kw):
    name = "t-" + uuid.uuid4().hex[:8]
    client.create_topic(name, **kw)
    return name


def stock_read(bootstrap, topic, partition=0, start=0, expect=None, timeout=20):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "g-" + topic,
                         "check.crcs": True, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, partition, start)])
    out = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and (expect is None or len(out) < expect):
        for msg in consumer.consume(1000, 0.5):
            if msg.error() is None:
                out.append((msg.offset(), msg.value()))
        if expect is None and out:
            break
    consumer.close()
    return out


def test_features_advertised_from_api_versions_v3(client):
    v3 = client.request(18, 3, client_software_name="t", client_software_version="1")
    names = {f.name: (f.min_version, f.max_version) for f in v3.supported_features}
    assert names[FEATURE_PRODUCE_OFFSETS] == (1, 2)  # version 2: KIP-WIRE §9
    assert names[FEATURE_PRODUCE_CONDITIONAL] == (1, 2)


def test_preserved_offsets_seen_by_stock_consumers(broker, client):
    topic = unique_topic(client)
    first = client.produce(topic, {0: batch(values(b"a", 100), 0)}, mode=USE)[0]
    assert (first.error_code, first.base_offset, first.log_end_offset) == (0, 0, 100)
    second = client.produce(topic, {0: batch(values(b"b", 100), 1000)}, mode=USE)[0]
    assert (second.error_code, second.base_offset, second.log_end_offset) == (0, 1000, 1100)
    third = client.produce(topic, {0: batch([b"c"], 5000)}, mode=USE)[0]
    assert (third.error_code, third.base_offset, third.log_end_offset) == (0, 5000, 5001)

    expected = ([(i, b"a-%d" % i) for i in range(100)]
                + [(1000 + i, b"b-%d" % i) for i in range(100)] + [(5000, b"c")])
    assert stock_read(broker.bootstrap_servers, topic, expect=201) == expected

    c = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "wm"})
    assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 5001)
    c.close()
    # A consumer that seeks into the gap gets the next record that exists.
    assert stock_read(broker.bootstrap_servers, topic, start=500)[0] == (1000, b"b-0")



def test_kafka_python_reads_preserved_offsets(broker, client):
    topic = unique_topic(client)
    client.produce(topic, {0: batch(values(b"a", 100), 0)}, mode=USE)
    client.produce(topic, {0: batch(values(b"b", 100), 1000)}, mode=USE)
    client.produce(topic, {0: batch([b"c"], 5000)}, mode=USE)
    expected = ([(i, b"a-%d" % i) for i in range(100)]
                + [(1000 + i, b"b-%d" % i) for i in range(100)] + [(5000, b"c")])
    kp = KafkaConsumer(bootstrap_servers=broker.bootstrap_servers, enable_auto_commit=False)
    tp = KpTopicPartition(topic, 0)
    kp.assign([tp])
    kp.seek(tp, 0)
    got = []
    deadline = time.monotonic() + 20
    while len(got) < 201 and time.monotonic() < deadline:
        for records in kp.poll(500).values():
            got.extend((r.offset, r.value) for r in records)
    kp.close()
    assert got == expected


def test_replay_below_log_end_is_refused_and_writes_nothing(broker, client):
    topic = unique_topic(client)
    client.produce(topic, {0: batch(values(b"a", 100), 0)}, mode=USE)
    client.produce(topic, {0: batch([b"z"], 5000)}, mode=USE)
    again = client.produce(topic, {0: batch(values(b"a", 100), 0)}, mode=USE)[0]
    assert again.error_code == ec.INVALID_PRODUCE_OFFSET
    assert again.log_end_offset == 5001
    assert len(stock_read(broker.bootstrap_servers, topic, expect=101)) == 101


def test_idempotent_retry_succeeds_with_original_offsets(client):
    topic = unique_topic(client)
    data = batch(values(b"i", 10), 40, producer_id=77, producer_epoch=0, base_sequence=0)
    first = client.produce(topic, {0: data}, mode=USE)[0]
    assert (first.error_code, first.base_offset) == (0, 40)
    retry = client.produce(topic, {0: data}, mode=USE)[0]  # duplicate check before offsets
    assert (retry.error_code, retry.base_offset, retry.log_end_offset) == (0, 40, 50)


def test_batches_must_hold_consecutive_offsets(client):
    topic = unique_topic(client)
    whole = validate_batch(batch(values(b"g", 5), 10))
    holey = rebuild_batch(whole, [r for r in whole if r.offset != 12])
    answer = client.produce(topic, {0: holey}, mode=USE)[0]
    assert answer.error_code == ec.INVALID_RECORD
    assert answer.log_end_offset == 0


def test_transactional_batches_refused_with_offsets(client):
    topic = unique_topic(client)
    data = batch([b"t"], 0, producer_id=5, producer_epoch=0, base_sequence=0,
                 transactional=True)
    assert client.produce(topic, {0: data}, mode=USE)[0].error_code == ec.INVALID_TXN_STATE


def test_expected_offsets_all_or_nothing(broker, client):
    topic = unique_topic(client, partitions=2)
    ok = client.produce(topic, {0: batch(values(b"x", 3), 0), 1: batch(values(b"y", 2), -1)},
                        mode=EXPECT)
    assert [(ok[p].error_code, ok[p].base_offset, ok[p].log_end_offset) for p in (0, 1)] == [
        (0, 0, 3), (0, 0, 2)]
    bad = client.produce(topic, {0: batch([b"p0"], 3), 1: batch([b"p1"], 7)}, mode=EXPECT)
    assert (bad[0].error_code, bad[0].log_end_offset) == (ec.OPERATION_NOT_ATTEMPTED, 3)
    assert (bad[1].error_code, bad[1].log_end_offset) == (ec.OFFSET_MISMATCH, 2)
    assert len(stock_read(broker.bootstrap_servers, topic, 0, expect=3)) == 3
    assert len(stock_read(broker.bootstrap_servers, topic, 1, expect=2)) == 2


def test_kip27_worked_example_leader_bootstrap(client):
    """A commit-log leader appends [A,B,C] at 0, then [D,E,F] at 3; a deposed leader that
    still believes the log ends at 3 is refused and told the true end."""
    topic = unique_topic(client)
    abc = client.produce(topic, {0: batch([b"A", b"B", b"C"], 0)}, mode=EXPECT)[0]
    assert (abc.error_code, abc.base_offset, abc.log_end_offset) == (0, 0, 3)
    defs = client.produce(topic, {0: batch([b"D", b"E", b"F"], 3)}, mode=EXPECT)[0]
    assert (defs.error_code, defs.base_offset, defs.log_end_offset) == (0, 3, 6)
    stale = client.produce(topic, {0: batch([b"X"], 3)}, mode=EXPECT)[0]
    assert (stale.error_code, stale.log_end_offset) == (ec.OFFSET_MISMATCH, 6)


def test_check_expected_offsets_topic_config(client):
    topic = unique_topic(client, configs={"check.expected.offsets": "true"})
    plain = client.produce(topic, {0: batch([b"p"], 0)}, mode=ASSIGN)[0]
    assert plain.error_code == ec.POLICY_VIOLATION
    with_offsets = client.produce(topic, {0: batch([b"p"], 0)}, mode=USE)[0]
    assert with_offsets.error_code == ec.POLICY_VIOLATION
    assert client.produce(topic, {0: batch([b"p"], 0)}, mode=EXPECT)[0].error_code == 0


def test_plain_produce_unchanged_by_extensions(client):
    topic = unique_topic(client)
    answer = client.produce(topic, {0: batch([b"x"], 0)}, mode=ASSIGN)[0]
    assert answer.error_code == 0 and answer.log_end_offset is None
    wrong = client.produce(topic, {0: batch([b"x"], 5)}, mode=ASSIGN)[0]
    assert wrong.error_code == ec.INVALID_RECORD


def test_acks_zero_still_applies_the_rules(broker, client):
    topic = unique_topic(client)
    client.produce(topic, {0: batch(values(b"a", 5), 0)}, mode=USE)
    c2 = type(client)(broker.bootstrap_servers)
    body = c2.request  # an acks=0 request has no response: send it raw and go on
    from kipproducer.protocol import build_request, encode_request_frame

    c2.sock.sendall(encode_request_frame(1, "t", build_request(
        0, 10, transactional_id=None, acks=0, timeout=1000, produce_mode=USE,
        topic_data=[{"name": topic, "partition_data": [
            {"index": 0, "records": batch([b"late"], 2)}]}])))
    del body
    c2.close()
    time.sleep(0.3)
    answer = client.produce(topic, {0: batch([b"next"], 5)}, mode=USE)[0]
    assert (answer.error_code, answer.log_end_offset) == (0, 6)
    assert [b for b in decode_batches(batch([b"x"], 0))]
