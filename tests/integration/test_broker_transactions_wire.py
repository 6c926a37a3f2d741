"""Transactions over the wire against an EmbeddedBroker: stock clients and exact requests.

- librdkafka (confluent_kafka) and kafka-python transactional producers commit and abort;
  read_uncommitted consumers see every record, read_committed only the committed ones, and
  each end of a transaction took one offset per partition it touched (the marker);
- a second librdkafka instance with the same transactional.id fences the first (fatal
  _FENCED), and a transaction open longer than transaction.timeout.ms is aborted by the broker
  and its producer fenced;
- raw requests (tests/kip's RawClient) check the error codes Kafka picks per API version:
  transaction verification on Produce, PRODUCER_FENCED vs INVALID_PRODUCER_EPOCH, partition
  errors of AddPartitionsToTxn, DescribeTransactions / ListTransactions / DescribeProducers,
  and the TransactionalId ACLs.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from integration_support import consume_records, create_topics, unique, wait_until

from kipproducer import EmbeddedBroker
from kipproducer.broker.security import AclBinding
from kipproducer.protocol import error_codes as ec
from kipproducer.records import encode_batch

_KIP_TESTS = str(Path(__file__).resolve().parents[1] / "kip")
if _KIP_TESTS not in sys.path:
    sys.path.insert(0, _KIP_TESTS)

from raw_client import RawClient  # noqa: E402

PRODUCE, INIT_PRODUCER_ID, ADD_PARTITIONS, ADD_OFFSETS, END_TXN = 0, 22, 24, 25, 26
API_VERSIONS, DESCRIBE_PRODUCERS, DESCRIBE_TXNS, LIST_TXNS = 18, 61, 65, 66
TRANSACTIONAL_ID_NOT_FOUND = ec.error_code("TRANSACTIONAL_ID_NOT_FOUND")
CLEANUP_MS = 100


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> Iterator[EmbeddedBroker]:
    embedded = EmbeddedBroker(
        tmp_path_factory.mktemp("txn-wire"),
        config={"num.partitions": 2,
                "transaction.abort.timed.out.transaction.cleanup.interval.ms": CLEANUP_MS})
    try:
        yield embedded
    finally:
        embedded.close()


def confluent_producer(bootstrap: str, transactional_id: str, **extra) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                     "linger.ms": 0, **extra})


def watermarks(bootstrap: str, topic: str, partitions: int = 2) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("wm")})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(partitions)}
    finally:
        consumer.close()


def values(records) -> list[bytes]:
    return sorted(r.value for r in records)


# -- stock clients ----------------------------------------------------------------------------


def test_confluent_commit_and_abort(broker: EmbeddedBroker) -> None:
    bootstrap = broker.bootstrap_servers
    topic = unique("txn")
    create_topics(bootstrap, {topic: 2})
    producer = confluent_producer(bootstrap, unique("tid"))
    producer.init_transactions(15)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, b"c%d" % i, partition=0)
    producer.produce(topic, b"c3", partition=1)
    producer.commit_transaction(15)
    producer.begin_transaction()
    for i in range(2):
        producer.produce(topic, b"a%d" % i, partition=0)
    assert producer.flush(15) == 0  # abort_transaction drops what is not sent yet
    producer.abort_transaction(15)
    # p0: 3 records + commit marker + 2 records + abort marker; p1: 1 record + commit marker.
    assert watermarks(bootstrap, topic) == {0: 7, 1: 2}
    everything = consume_records(bootstrap, topic, 6, config={
        "isolation.level": "read_uncommitted"})
    assert values(everything) == [b"a0", b"a1", b"c0", b"c1", b"c2", b"c3"]
    assert [r.offset for r in everything if r.partition == 0] == [0, 1, 2, 4, 5]
    committed = consume_records(bootstrap, topic, 4, config={"isolation.level": "read_committed"})
    assert values(committed) == [b"c0", b"c1", b"c2", b"c3"]


def test_confluent_second_instance_fences_the_first(broker: EmbeddedBroker) -> None:
    bootstrap = broker.bootstrap_servers
    topic = unique("fence")
    create_topics(bootstrap, {topic: 1})
    transactional_id = unique("tid")
    first = confluent_producer(bootstrap, transactional_id)
    first.init_transactions(15)
    first.begin_transaction()
    first.produce(topic, b"zombie", partition=0)
    assert first.flush(15) == 0
    second = confluent_producer(bootstrap, transactional_id)
    second.init_transactions(30)  # aborts the first one's open transaction
    second.begin_transaction()
    second.produce(topic, b"live", partition=0)
    second.commit_transaction(15)
    with pytest.raises(KafkaException) as raised:
        first.commit_transaction(15)
    error = raised.value.args[0]
    assert error.code() == KafkaError._FENCED and error.fatal(), error
    committed = consume_records(bootstrap, topic, 1, config={"isolation.level": "read_committed"})
    assert values(committed) == [b"live"]
    # zombie, its abort marker, live, its commit marker
    assert watermarks(bootstrap, topic, 1) == {0: 4}


def test_confluent_transaction_timeout_aborts_and_fences(broker: EmbeddedBroker) -> None:
    bootstrap = broker.bootstrap_servers
    topic = unique("timeout")
    create_topics(bootstrap, {topic: 1})
    producer = confluent_producer(bootstrap, unique("tid"), **{"transaction.timeout.ms": 1000})
    producer.init_transactions(15)
    producer.begin_transaction()
    producer.produce(topic, b"late", partition=0)
    assert producer.flush(15) == 0
    # The broker aborts it on its own: the abort marker lands and nothing stays unstable.
    wait_until(lambda: watermarks(bootstrap, topic, 1) == {0: 2}, 10, "the timeout's abort")
    with pytest.raises(KafkaException) as raised:
        producer.commit_transaction(15)
    error = raised.value.args[0]
    assert error.code() == KafkaError._FENCED and error.fatal(), error
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("r"),
                       "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    try:
        reader.assign([TopicPartition(topic, 0, 0)])
        messages = [m for m in reader.consume(10, timeout=2) if m.error() is None]
        assert messages == []
        assert reader.position([TopicPartition(topic, 0)])[0].offset in (0, 2)
    finally:
        reader.close()


def test_confluent_offsets_commit_with_the_transaction(broker: EmbeddedBroker) -> None:
    """send_offsets_to_transaction: AddOffsetsToTxn here, TxnOffsetCommit at the group
    coordinator; the offsets become committed with the transaction, and not on an abort."""
    bootstrap = broker.bootstrap_servers
    source, sink, group = unique("src"), unique("sink"), unique("g")
    create_topics(bootstrap, {source: 1, sink: 1})
    seed = Producer({"bootstrap.servers": bootstrap})
    for i in range(4):
        seed.produce(source, b"in%d" % i, partition=0)
    assert seed.flush(15) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    producer = confluent_producer(bootstrap, unique("tid"))
    try:
        consumer.subscribe([source])
        seen = []
        deadline = time.monotonic() + 20
        while len(seen) < 4 and time.monotonic() < deadline:
            seen += [m for m in consumer.consume(4, timeout=1) if m.error() is None]
        assert len(seen) == 4
        producer.init_transactions(15)
        for commit, position in ((False, 2), (True, 4)):
            producer.begin_transaction()
            producer.produce(sink, b"out%d" % position, partition=0)
            producer.send_offsets_to_transaction(
                [TopicPartition(source, 0, position)], consumer.consumer_group_metadata(), 15)
            if commit:
                producer.commit_transaction(15)
            else:
                assert producer.flush(15) == 0
                producer.abort_transaction(15)
            committed = consumer.committed([TopicPartition(source, 0)], timeout=10)[0].offset
            assert committed == (4 if commit else -1001), (commit, committed)
    finally:
        consumer.close()
    assert values(consume_records(bootstrap, sink, 1, config={
        "isolation.level": "read_committed"})) == [b"out4"]


def test_kafka_python_transactional_producer(broker: EmbeddedBroker) -> None:
    kafka = pytest.importorskip("kafka")
    bootstrap = broker.bootstrap_servers
    topic = unique("kpy")
    create_topics(bootstrap, {topic: 2})
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, transactional_id=unique("tid"))
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(4):
            producer.send(topic, b"k%d" % i, partition=i % 2)
        producer.commit_transaction()
        producer.begin_transaction()
        producer.send(topic, b"dropped", partition=0)
        producer.flush()
        producer.abort_transaction()
    finally:
        producer.close(5)
    assert watermarks(bootstrap, topic) == {0: 5, 1: 3}
    assert values(consume_records(bootstrap, topic, 5, config={
        "isolation.level": "read_uncommitted"})) == [b"dropped", b"k0", b"k1", b"k2", b"k3"]
    assert values(consume_records(bootstrap, topic, 4, config={
        "isolation.level": "read_committed"})) == [b"k0", b"k1", b"k2", b"k3"]


# -- exact requests ------------------------------------------------------------------------------


def txn_batch(producer_id: int, epoch: int, sequence: int = 0, value: bytes = b"v",
              transactional: bool = True) -> bytes:
    return encode_batch([(None, value, None, None)], producer_id=producer_id,
                        producer_epoch=epoch, base_sequence=sequence,
                        transactional=transactional)


def produce(client: RawClient, transactional_id: str | None, batches: dict, version: int = 10):
    """{(topic, partition): batch} in one Produce; {(topic, partition): (code, message)}."""
    topics: dict[str, list] = {}
    for (topic, partition), batch in batches.items():
        topics.setdefault(topic, []).append({"index": partition, "records": batch})
    body = client.request(PRODUCE, version, transactional_id=transactional_id, acks=-1,
                          timeout=10000, topic_data=[
                              {"name": name, "partition_data": data}
                              for name, data in topics.items()])
    return {(t.name, p.index): (p.error_code, p.error_message)
            for t in body.responses for p in t.partition_responses}


def init(client: RawClient, transactional_id: str, version: int = 4, **fields):
    return client.request(INIT_PRODUCER_ID, version, transactional_id=transactional_id,
                          transaction_timeout=60000, **fields)


def add_partitions(client: RawClient, transactional_id: str, pid: int, epoch: int,
                   partitions: dict[str, list[int]], version: int = 3) -> dict:
    body = client.request(ADD_PARTITIONS, version, v3_and_below_transactional_id=transactional_id,
                          v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
                          v3_and_below_topics=[{"name": t, "partitions": ps}
                                               for t, ps in partitions.items()])
    return {(t.name, p.partition_index): p.partition_error_code
            for t in body.results_by_topic_v3_and_below for p in t.results_by_partition}


def end_txn(client: RawClient, transactional_id: str, pid: int, epoch: int, commit: bool,
            version: int = 3) -> int:
    return client.request(END_TXN, version, transactional_id=transactional_id, producer_id=pid,
                          producer_epoch=epoch, committed=commit).error_code


def test_api_versions_advertise_tv1_transaction_apis(broker: EmbeddedBroker) -> None:
    client = RawClient(broker.bootstrap_servers)
    body = client.request(API_VERSIONS, 3, client_software_name="t",
                          client_software_version="1")
    ranges = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}
    assert ranges[INIT_PRODUCER_ID] == (0, 5)
    assert ranges[ADD_PARTITIONS] == (0, 5)  # v4+ is broker to broker
    assert ranges[ADD_OFFSETS] == (0, 4)
    assert ranges[END_TXN] == (0, 4)
    assert ranges[DESCRIBE_TXNS] == (0, 0) and ranges[LIST_TXNS] == (0, 1)
    features = {f.name for f in body.supported_features} | {
        f.name for f in body.finalized_features}
    assert "transaction.version" not in features


def test_produce_is_verified_against_the_transaction(broker: EmbeddedBroker) -> None:
    client = RawClient(broker.bootstrap_servers)
    topic = unique("verify")
    client.create_topic(topic, 2)
    tid = unique("tid")
    answer = init(client, tid)
    assert answer.error_code == ec.NONE
    pid, epoch = answer.producer_id, answer.producer_epoch
    t0, t1 = (topic, 0), (topic, 1)
    # Not added to the transaction: 48 with Kafka's message up to v10, 120 from v11.
    assert produce(client, tid, {t0: txn_batch(pid, epoch)}) == {
        t0: (ec.INVALID_TXN_STATE, "Partition was not added to the transaction")}
    assert produce(client, tid, {t0: txn_batch(pid, epoch)}, version=11)[t0][0] == (
        ec.TRANSACTION_ABORTABLE)
    # Transactional records without the request's transactional id: the whole request fails.
    plain = encode_batch([(None, b"plain", None, None)])
    refused = produce(client, None, {t0: txn_batch(pid, epoch), t1: plain})
    assert {key: code for key, (code, _) in refused.items()} == {
        t0: ec.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, t1: ec.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    # One unknown partition fails the AddPartitionsToTxn; the others were not attempted.
    assert add_partitions(client, tid, pid, epoch, {topic: [0, 7]}) == {
        t0: ec.OPERATION_NOT_ATTEMPTED, (topic, 7): ec.UNKNOWN_TOPIC_OR_PARTITION}
    assert add_partitions(client, tid, pid, epoch, {topic: [0, 1]}) == {
        t0: ec.NONE, t1: ec.NONE}
    assert produce(client, tid, {t0: txn_batch(pid, epoch), t1: txn_batch(pid, epoch)}) == {
        t0: (ec.NONE, None), t1: (ec.NONE, None)}
    # Two producer ids in one request's transactional records: the request is refused.
    mixed = produce(client, tid, {t0: txn_batch(pid, epoch, 1), t1: txn_batch(pid + 1, 0)})
    assert {code for code, _ in mixed.values()} == {ec.INVALID_PRODUCER_ID_MAPPING}
    # Epoch checks: fenced producers get 47 before KIP-588's versions, 90 after.
    assert end_txn(client, tid, pid, epoch + 1, True, version=1) == ec.INVALID_PRODUCER_EPOCH
    assert end_txn(client, tid, pid, epoch + 1, True, version=2) == ec.PRODUCER_FENCED
    assert add_partitions(client, tid, pid, epoch + 1, {topic: [0]}, version=1) == {
        t0: ec.INVALID_PRODUCER_EPOCH}
    assert end_txn(client, unique("nobody"), pid, epoch, True) == ec.INVALID_PRODUCER_ID_MAPPING
    # What the admin APIs see of the open transaction.
    described = client.request(DESCRIBE_TXNS, 0, transactional_ids=[tid, "no-such-id"])
    found, missing = described.transaction_states
    assert (found.error_code, found.transaction_state, found.producer_id) == (
        ec.NONE, "Ongoing", pid)
    assert [(t.topic, sorted(t.partitions)) for t in found.topics] == [(topic, [0, 1])]
    assert missing.error_code == TRANSACTIONAL_ID_NOT_FOUND
    listed = client.request(LIST_TXNS, 1, state_filters=["Ongoing", "Nope"],
                            producer_id_filters=[pid], duration_filter=-1)
    assert [t.transactional_id for t in listed.transaction_states] == [tid]
    assert list(listed.unknown_state_filters) == ["Nope"]
    producers = client.request(DESCRIBE_PRODUCERS, 0, topics=[
        {"name": topic, "partition_indexes": [0]}])
    (active,) = producers.topics[0].partitions[0].active_producers
    assert (active.producer_id, active.current_txn_start_offset) == (pid, 0)
    # Commit: every partition gets its marker; a second EndTxn(abort) is an invalid state.
    assert end_txn(client, tid, pid, epoch, True) == ec.NONE
    assert end_txn(client, tid, pid, epoch, False) == ec.INVALID_TXN_STATE
    assert watermarks(broker.bootstrap_servers, topic) == {0: 2, 1: 2}
    producers = client.request(DESCRIBE_PRODUCERS, 0, topics=[
        {"name": topic, "partition_indexes": [0]}])
    (active,) = producers.topics[0].partitions[0].active_producers
    assert active.current_txn_start_offset == -1
    # InitProducerId v3+ naming an epoch that is neither the current nor the last one.
    assert init(client, tid, version=3, producer_id=pid, producer_epoch=epoch + 5).error_code == (
        ec.INVALID_PRODUCER_EPOCH)
    assert init(client, tid, version=4, producer_id=pid, producer_epoch=epoch + 5).error_code == (
        ec.PRODUCER_FENCED)
    assert init(client, tid, version=4, producer_id=pid, producer_epoch=-1).error_code == (
        ec.INVALID_REQUEST)
    too_long = client.request(INIT_PRODUCER_ID, 4, transactional_id=tid,
                              transaction_timeout=900_001)
    assert too_long.error_code == ec.INVALID_TRANSACTION_TIMEOUT


# -- ACLs ---------------------------------------------------------------------------------------


def test_transactional_id_acls(tmp_path) -> None:
    anonymous = "User:ANONYMOUS"
    with EmbeddedBroker(tmp_path / "acl", config={"authorizer.enabled": "true",
                                                  "num.partitions": 1}) as embedded:
        topic, tid, group = "acl-topic", "acl-tid", "acl-group"
        embedded.broker.logs.create_topic(topic, 1)
        embedded.broker.logs.create_topic("closed", 1)
        grant = [AclBinding.of("Topic", topic, anonymous, "Write"),
                 AclBinding.of("Topic", topic, anonymous, "Describe"),
                 AclBinding.of("TransactionalId", "described", anonymous, "Describe")]
        embedded.call(lambda b: b.acls.add(grant))
        client = RawClient(embedded.bootstrap_servers)
        assert init(client, tid).error_code == ec.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        refused = produce(client, tid, {(topic, 0): txn_batch(1, 0)})
        assert refused[(topic, 0)][0] == ec.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert add_partitions(client, tid, 1, 0, {topic: [0]}) == {
            (topic, 0): ec.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
        assert end_txn(client, tid, 1, 0, True) == ec.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        described = client.request(DESCRIBE_TXNS, 0, transactional_ids=[tid, "described"])
        assert [s.error_code for s in described.transaction_states] == [
            ec.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, TRANSACTIONAL_ID_NOT_FOUND]

        embedded.call(lambda b: b.acls.add(
            [AclBinding.of("TransactionalId", tid, anonymous, "Write")]))
        answer = init(client, tid)
        assert answer.error_code == ec.NONE
        pid, epoch = answer.producer_id, answer.producer_epoch
        assert add_partitions(client, tid, pid, epoch, {topic: [0], "closed": [0]}) == {
            (topic, 0): ec.OPERATION_NOT_ATTEMPTED, ("closed", 0): ec.TOPIC_AUTHORIZATION_FAILED}
        offsets = client.request(ADD_OFFSETS, 3, transactional_id=tid, producer_id=pid,
                                 producer_epoch=epoch, group_id=group)
        assert offsets.error_code == ec.GROUP_AUTHORIZATION_FAILED
        # Only ids the principal may describe are listed (Write implies Describe).
        init(client, "hidden")  # refused: no ACL, so it never exists
        listed = client.request(LIST_TXNS, 0)
        assert [t.transactional_id for t in listed.transaction_states] == [tid]
