"""Transactions through kipproducer's engine (engine/transactions.py), against ``kip broker``
and Tansu.

With ``transactional.id`` every produce path (produce, produce_batch, produce_arrays, append)
goes through the engine under one producer id, and the transaction calls are the engine's,
with confluent-kafka's signatures, states and errors. Each test runs against both brokers
where both implement what it checks; Tansu's read_committed fetch returns aborted records
(../shared/reference/tansu.md §5), so only ``kip`` is asked to hide them, and only ``kip``
speaks the conditional-append extension.
"""

from __future__ import annotations

import time
import zlib
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from producer_support import create_topic, read_confluent, unique

from kipproducer import producer as kp
from kipproducer.engine.group_metadata import GroupMetadata, parse_group_metadata

TS = (int(time.time()) - 60) * 1000
READ_COMMITTED = {"isolation.level": "read_committed"}


@pytest.fixture(params=["kip", "tansu"])
def txn_broker(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(request.param)


def txn_producer(broker: Any, **config) -> kp.Producer:
    p = kp.Producer({"bootstrap.servers": getattr(broker, "bootstrap", None),
                     "transactional.id": unique("txn"), "linger.ms": 5, **config})
    assert p._txn is not None, "transactions must go through the engine"
    return p


def raised(call, *args, **kwargs) -> KafkaError:
    with pytest.raises(KafkaException) as info:
        call(*args, **kwargs)
    return info.value.args[0]


def values(records) -> list[bytes]:
    return sorted(r.value for r in records)


# ---- states and bad calls -------------------------------------------------------------------


def test_calls_before_init_are_state_errors(kip):
    topic = create_topic(kip.bootstrap, unique("txn-state"), 1)
    p = txn_producer(kip)
    err = raised(p.produce, topic, b"x")
    assert err.code() == KafkaError._STATE and "Erroneous state" in err.str()
    messages = [{"value": b"a"}, {"value": b"b", "headers": [("h", b"1")]}]
    assert p.produce_batch(topic, messages) == 0
    assert [m["_error"].code() for m in messages] == [KafkaError._STATE] * 2
    assert raised(p.produce_arrays, topic, [b"a", b"b"]).code() == KafkaError._STATE
    for call in (p.begin_transaction, p.commit_transaction, p.abort_transaction):
        err = raised(call)
        assert (err.code(), err.str()) == (KafkaError._STATE,
                                           "Operation not valid in state Init")
        assert not err.fatal() and not err.retriable() and not err.txn_requires_abort()
    assert raised(p.send_offsets_to_transaction, [TopicPartition(topic, 0, 1)],
                  "group").code() == KafkaError._STATE
    assert len(p) == 0
    p.close()


def test_calls_out_of_state(txn_broker):
    topic = create_topic(txn_broker.bootstrap, unique("txn-state"), 1)
    p = txn_producer(txn_broker)
    p.init_transactions(30)
    err = raised(p.init_transactions, 5)
    assert (err.code(), err.str()) == (KafkaError._STATE, "Operation not valid in state Ready")
    assert raised(p.produce, topic, b"outside").code() == KafkaError._STATE
    assert raised(p.append, topic, [b"x"], partition=0).code() == KafkaError._STATE
    for call in (p.commit_transaction, p.abort_transaction):
        assert raised(call, 5).str() == "Operation not valid in state Ready"
    assert raised(p.send_offsets_to_transaction, [TopicPartition(topic, 0, 1)],
                  "group", 5).code() == KafkaError._STATE
    p.begin_transaction()
    err = raised(p.begin_transaction)
    assert (err.code(), err.str()) == (KafkaError._STATE,
                                       "Operation not valid in state InTransaction")
    # Offsets chosen by the producer stay refused in a transaction (KIP-WIRE §4).
    assert raised(p.produce, topic, b"x", partition=0,
                  offset=5).code() == KafkaError._NOT_IMPLEMENTED
    with pytest.raises(KafkaException):
        p.send_offsets_to_transaction([TopicPartition(topic, 0, 1)], b"not metadata")
    p.commit_transaction(30)  # nothing was produced: nothing to send, still a commit
    p.begin_transaction()
    p.abort_transaction(30)
    assert p.flush(5) == 0 and len(p) == 0
    p.close()


# ---- commit and abort rounds ----------------------------------------------------------------


def test_commit_and_abort_rounds(txn_broker):
    topic = create_topic(txn_broker.bootstrap, unique("txn-rounds"), 2)
    p = txn_producer(txn_broker)
    p.init_transactions(30)
    reports: list = []

    def report(err, msg) -> None:
        reports.append(err)

    # Round 1, committed: every produce path, headers and timestamps kept.
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, b"one-%d" % i, b"k%d" % i, on_delivery=report,
                  headers=[("i", b"%d" % i)], timestamp=TS + i)
    messages = [{"value": b"batch-%d" % i, "key": b"k%d" % (i % 3),
                 "headers": [("i", b"%d" % i), ("null", None)], "timestamp": TS + i}
                for i in range(20)]
    assert p.produce_batch(topic, messages, on_delivery=report) == 20
    shared = [("shared", b"1")]
    assert p.produce_arrays(topic, pa.array([b"arrays-%d" % i for i in range(3)]),
                            keys=np.array([b"a", None, b""], dtype=object), headers=shared,
                            timestamps=np.array([TS + 100 + i for i in range(3)]),
                            on_delivery=report, per_record=True) == 3
    assert p.produce_arrays(topic, [b"p1-%d" % i for i in range(4)], partition=1,
                            on_delivery=report) == 4
    p.commit_transaction(30)
    assert len(reports) == 5 + 20 + 3 + 1 and all(e is None for e in reports)
    assert len(p) == 0

    # Round 2, aborted after its records were written: read_committed must not see them.
    p.begin_transaction()
    p.produce(topic, b"aborted-0", partition=0)
    p.produce_batch(topic, [{"value": b"aborted-1", "partition": 1}])
    assert p.flush(30) == 0
    p.abort_transaction(30)

    # Round 3, committed after the abort.
    p.begin_transaction()
    p.produce(topic, b"three", partition=0, on_delivery=report)
    p.commit_transaction(30)
    assert reports[-1] is None

    committed = ([b"one-%d" % i for i in range(5)] + [m["value"] for m in messages]
                 + [b"arrays-%d" % i for i in range(3)] + [b"p1-%d" % i for i in range(4)]
                 + [b"three"])
    records = read_confluent(txn_broker.bootstrap, topic, 2, expected=len(committed),
                             config=READ_COMMITTED)
    if txn_broker.name == "kip":
        assert values(records) == sorted(committed)
    else:  # Tansu's read_committed shows aborted records too
        assert values(records) == sorted(committed + [b"aborted-0", b"aborted-1"])
    by_value = {r.value: r for r in records}
    for i, m in enumerate(messages):
        r = by_value[b"batch-%d" % i]
        assert (r.key, r.headers, r.timestamp) == (m["key"], tuple(m["headers"]),
                                                   (TIMESTAMP_CREATE_TIME, TS + i))
    for i, key in enumerate([b"a", None, b""]):
        r = by_value[b"arrays-%d" % i]
        assert (r.key, r.headers, r.timestamp) == (key, tuple(shared),
                                                   (TIMESTAMP_CREATE_TIME, TS + 100 + i))
    assert {by_value[b"p1-%d" % i].partition for i in range(4)} == {1}
    # produce() picks partitions as librdkafka's consistent_random does (crc32 of the key).
    for i in range(5):
        r = by_value[b"one-%d" % i]
        assert r.partition == zlib.crc32(b"k%d" % i) % 2
        assert (r.key, r.headers, r.timestamp) == (b"k%d" % i, (("i", b"%d" % i),),
                                                   (TIMESTAMP_CREATE_TIME, TS + i))
    # Each transaction end took an offset (the marker) in every partition it wrote to.
    part0 = [r.offset for r in records if r.partition == 0]
    assert part0 == sorted(part0) and len(set(part0)) == len(part0)
    p.close()


def test_abort_drops_records_not_sent(txn_broker):
    """abort_transaction drops what has not been sent (librdkafka's _PURGE_QUEUE), and the
    next transaction continues the partition's sequence where the sent records ended."""
    topic = create_topic(txn_broker.bootstrap, unique("txn-purge"), 1)
    p = txn_producer(txn_broker, **{"linger.ms": 60_000})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, b"kept-0")
    p.flush(30)  # drains the open batch: sent and written
    reports: list = []
    for i in range(3):
        p.produce(topic, b"dropped-%d" % i, on_delivery=lambda e, m: reports.append(e))
    epoch = p._txn.producer_epoch
    p.abort_transaction(30)
    assert [e.code() for e in reports] == [KafkaError._PURGE_QUEUE] * 3
    assert len(p) == 0
    # Nothing dropped had been sent: the sequence numbers were given back, no epoch bump.
    assert p._txn.producer_epoch == epoch
    p.begin_transaction()
    p.produce(topic, b"after", on_delivery=lambda e, m: reports.append(e))
    p.commit_transaction(30)
    assert reports[-1] is None
    records = read_confluent(txn_broker.bootstrap, topic, 1, config=READ_COMMITTED)
    assert b"after" in values(records)
    assert not any(v.startswith(b"dropped") for v in values(records))
    p.close()


def test_failed_delivery_makes_the_transaction_abortable(txn_broker):
    topic = create_topic(txn_broker.bootstrap, unique("txn-fail"), 1)
    p = txn_producer(txn_broker)
    p.init_transactions(30)
    p.begin_transaction()
    reports: list = []
    p.produce(topic, b"ok", partition=0, on_delivery=lambda e, m: reports.append(e))
    p.produce(topic, b"nowhere", partition=5, on_delivery=lambda e, m: reports.append(e))
    err = raised(p.commit_transaction, 30)
    assert err.txn_requires_abort() and not err.fatal()
    assert err.code() == KafkaError._UNKNOWN_PARTITION
    assert KafkaError._UNKNOWN_PARTITION in [e.code() for e in reports if e is not None]
    # Until it is aborted, the transaction refuses everything else with the same error.
    assert raised(p.commit_transaction, 5).txn_requires_abort()
    assert raised(p.begin_transaction).txn_requires_abort()
    assert raised(p.produce, topic, b"late").code() == KafkaError._STATE
    epoch = p._txn.producer_epoch
    p.abort_transaction(30)
    # A failed batch had a sequence number: the abort bumped the epoch (KIP-360, or a
    # re-initialisation where the broker refuses that form).
    assert p._txn.producer_epoch > epoch
    p.begin_transaction()
    p.produce(topic, b"next", partition=0, on_delivery=lambda e, m: reports.append(e))
    p.commit_transaction(30)
    assert reports[-1] is None
    records = read_confluent(txn_broker.bootstrap, topic, 1, config=READ_COMMITTED)
    assert b"next" in values(records)
    if txn_broker.name == "kip":
        assert values(records) == [b"next"]
    p.close()


# ---- offsets in the transaction -------------------------------------------------------------


def _member(bootstrap: str, topic: str, group: str) -> Consumer:
    """A confluent Consumer in ``group`` that has its assignment of ``topic``."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                         "isolation.level": "read_committed"})
    consumer.subscribe([topic])
    deadline = time.monotonic() + 30
    while not consumer.assignment():
        assert time.monotonic() < deadline, "no assignment"
        consumer.poll(0.1)
    return consumer


def _committed(bootstrap: str, topic: str, group: str) -> int:
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                       "enable.auto.commit": False})
    try:
        return reader.committed([TopicPartition(topic, 0)], timeout=10)[0].offset
    finally:
        reader.close()


def test_send_offsets_to_transaction(txn_broker):
    bootstrap = txn_broker.bootstrap
    source = create_topic(bootstrap, unique("txn-in"), 1)
    sink = create_topic(bootstrap, unique("txn-out"), 1)
    group = unique("txn-group")
    seed = txn_producer(txn_broker)
    seed.init_transactions(30)
    seed.begin_transaction()
    seed.produce_batch(source, [{"value": b"in-%d" % i} for i in range(6)])
    seed.commit_transaction(30)
    seed.close()

    consumer = _member(bootstrap, source, group)
    metadata = consumer.consumer_group_metadata()
    parsed = parse_group_metadata(metadata)
    assert parsed.group_id == group and parsed.member_id and parsed.generation_id >= 0
    p = txn_producer(txn_broker)
    p.init_transactions(30)
    got: list = []
    while len(got) < 3:
        msg = consumer.poll(1)
        if msg is not None and msg.error() is None:
            got.append(msg)
    # Round 1: the first three records copied, the group's position committed with them.
    p.begin_transaction()
    for msg in got:
        p.produce(sink, msg.value().upper(), partition=0)
    positions = [TopicPartition(source, 0, got[-1].offset() + 1)]
    p.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
    p.commit_transaction(30)
    assert _committed(bootstrap, source, group) == got[-1].offset() + 1

    # Round 2, aborted: the group's committed offset does not move.
    p.begin_transaction()
    p.produce(sink, b"aborted", partition=0)
    p.send_offsets_to_transaction([TopicPartition(source, 0, got[-1].offset() + 3)],
                                  consumer.consumer_group_metadata(), 30)
    p.abort_transaction(30)
    assert _committed(bootstrap, source, group) == got[-1].offset() + 1

    # Round 3: a kipproducer GroupMetadata and a plain group id string are taken too. (Each
    # round produces too: Tansu drops the offsets of a transaction that wrote no record.)
    p.begin_transaction()
    p.produce(sink, b"round-3", partition=0)
    p.send_offsets_to_transaction([TopicPartition(source, 0, got[-1].offset() + 2)],
                                  GroupMetadata(group, parsed.generation_id,
                                                parsed.member_id), 30)
    p.commit_transaction(30)
    assert _committed(bootstrap, source, group) == got[-1].offset() + 2
    consumer.close()
    other = unique("txn-standalone")
    p.begin_transaction()
    p.produce(sink, b"standalone", partition=0)
    p.send_offsets_to_transaction([TopicPartition(source, 0, 4)], other, 30)
    p.commit_transaction(30)
    assert _committed(bootstrap, source, other) == 4
    records = read_confluent(bootstrap, sink, 1, expected=5, config=READ_COMMITTED)
    committed = [b"IN-0", b"IN-1", b"IN-2", b"round-3", b"standalone"]
    if txn_broker.name == "kip":
        assert values(records) == committed
    else:
        assert set(committed) <= set(values(records))
    p.close()


def test_group_metadata_from_librdkafka():
    """The bytes confluent-kafka returns (librdkafka's writer) parse back."""
    consumer = Consumer({"bootstrap.servers": "127.0.0.1:1", "group.id": "g-meta",
                         "group.instance.id": "static-1", "log_level": 0})
    try:
        parsed = parse_group_metadata(consumer.consumer_group_metadata())
    finally:
        consumer.close()
    assert parsed == GroupMetadata("g-meta", -1, "", "static-1")
    assert parse_group_metadata(b"CGMDv2:\x04\x03\x02\x01grp\x00mem\x00\x01") == \
        GroupMetadata("grp", 0x01020304, "mem", None)
    for bad in (b"", b"CGMDv2:\x00", b"CGMDv1:\x00\x00\x00\x00g\x00m\x00\x01",
                b"CGMDv2:\x00\x00\x00\x00g\x00m"):
        with pytest.raises(ValueError):
            parse_group_metadata(bad)
    with pytest.raises(TypeError):
        parse_group_metadata(42)


# ---- fencing --------------------------------------------------------------------------------


def test_second_producer_fences_the_first(txn_broker):
    topic = create_topic(txn_broker.bootstrap, unique("txn-fence"), 1)
    txn_id = unique("txn-fenced")
    first = kp.Producer({"bootstrap.servers": txn_broker.bootstrap, "transactional.id": txn_id})
    first.init_transactions(30)
    first.begin_transaction()
    first.produce(topic, b"zombie", partition=0)
    first.flush(30)
    second = kp.Producer({"bootstrap.servers": txn_broker.bootstrap,
                          "transactional.id": txn_id})
    second.init_transactions(30)  # bumps the epoch: the first producer is a zombie now
    reports: list = []
    first.produce(topic, b"zombie-2", partition=0, on_delivery=lambda e, m: reports.append(e))
    err = raised(first.commit_transaction, 30)
    assert err.code() == KafkaError._FENCED and err.fatal()
    assert not err.txn_requires_abort() and not err.retriable()
    # The record failed with the broker's fencing error (or was dropped when that came
    # from AddPartitionsToTxn first).
    assert reports and reports[0].code() in (KafkaError.INVALID_PRODUCER_EPOCH,
                                             KafkaError.PRODUCER_FENCED,
                                             KafkaError._FENCED, KafkaError._PURGE_QUEUE)
    for call in (first.begin_transaction, first.abort_transaction):
        again = raised(call)
        assert again.code() == KafkaError._FENCED and again.fatal()
    assert raised(first.produce, topic, b"x").code() == KafkaError._FATAL
    first.close()
    # The new producer works.
    second.begin_transaction()
    second.produce(topic, b"live", partition=0)
    second.commit_transaction(30)
    records = read_confluent(txn_broker.bootstrap, topic, 1, config=READ_COMMITTED)
    assert b"live" in values(records)
    if txn_broker.name == "kip":
        assert values(records) == [b"live"]
    second.close()


# ---- authorization --------------------------------------------------------------------------


def test_authorization_errors():
    """A transactional id the user may not write is fatal; a topic or a group it may not
    write is abortable (librdkafka's classes), and the producer goes on after the abort."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from kipproducer.broker.embedded import EmbeddedBroker
    from kipproducer.broker.security import AclBinding

    def allow(operation: str, resource_type: str, name: str) -> AclBinding:
        return AclBinding.of(resource_type, name, "User:u", operation, "Allow")

    with EmbeddedBroker(config={"sasl.enabled.mechanisms": "PLAIN",
                                "authorizer.enabled": "true",
                                "super.users": "User:admin"}) as broker:
        broker.broker.users.add("admin", "pw")
        broker.broker.users.add("u", "pw")

        def conf(user: str, **extra) -> dict:
            return {"bootstrap.servers": broker.bootstrap_servers, "sasl.username": user,
                    "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                    "sasl.password": "pw", **extra}

        admin = AdminClient(conf("admin"))
        for future in admin.create_topics([NewTopic("open", 1, 1),
                                           NewTopic("closed", 1, 1)]).values():
            future.result(10)
        broker.broker.acls.add([allow("Write", "Topic", "open"),
                                allow("Describe", "Topic", "open"),
                                allow("Write", "TransactionalId", "granted")])
        refused = kp.Producer(conf("u", **{"transactional.id": "not-granted"}))
        err = raised(refused.init_transactions, 10)
        assert err.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED and err.fatal()
        assert raised(refused.begin_transaction).fatal()
        refused.close()

        p = kp.Producer(conf("u", **{"transactional.id": "granted"}))
        assert p._txn is not None
        p.init_transactions(10)
        p.begin_transaction()
        p.produce("closed", b"x", partition=0)
        err = raised(p.commit_transaction, 10)
        assert err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert err.txn_requires_abort() and not err.fatal()
        p.abort_transaction(10)
        p.begin_transaction()
        p.produce("open", b"x", partition=0)
        err = raised(p.send_offsets_to_transaction, [TopicPartition("open", 0, 1)], "group",
                     10)
        assert err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
        assert err.txn_requires_abort() and not err.fatal()
        p.abort_transaction(10)
        p.begin_transaction()
        p.produce("open", b"committed", partition=0)
        p.commit_transaction(10)
        p.close()


# ---- faults ---------------------------------------------------------------------------------


@pytest.mark.timeout(100)
def test_commit_timeout_is_retriable_and_cuts_lose_nothing(kip_process, tcp_proxy):
    """A commit that runs out of time is retriable (called again, it finishes the same
    transaction); connections cut inside transactions lose and duplicate nothing."""
    proxy = tcp_proxy(0)
    broker = kip_process({"advertised.port": proxy.port, "num.partitions": 2})
    proxy.target_port = broker.port
    topic = create_topic(broker.bootstrap, unique("txn-cuts"), 2)
    p = txn_producer(Any, **{"bootstrap.servers": f"127.0.0.1:{proxy.port}",
                             "request.timeout.ms": 1500, "retry.backoff.ms": 20,
                             "retry.backoff.max.ms": 200, "socket.timeout.ms": 5000})
    p.init_transactions(30)
    errors: list = []

    def report(err, msg) -> None:
        if err is not None:
            errors.append(err)

    p.begin_transaction()
    p.produce_arrays(topic, [b"s-%05d" % i for i in range(1000)], on_delivery=report)
    assert p.flush(30) == 0
    assert proxy.stall() >= 1  # the broker stops answering on every open connection
    p.produce_arrays(topic, [b"s-%05d" % i for i in range(1000, 2000)], on_delivery=report)
    err = raised(p.commit_transaction, 0.3)
    assert err.code() == KafkaError._TIMED_OUT and err.retriable()
    assert not err.txn_requires_abort() and not err.fatal()
    assert raised(p.begin_transaction).code() == KafkaError._STATE  # still committing
    p.commit_transaction(60)  # new connections after request.timeout.ms: same transaction
    expected = [b"s-%05d" % i for i in range(2000)]
    for round_ in range(4):
        p.begin_transaction()
        batch = [b"r%d-%05d" % (round_, i) for i in range(3000)]
        p.produce_arrays(topic, batch[:1500], on_delivery=report)
        proxy.cut()
        p.produce_arrays(topic, batch[1500:], on_delivery=report)
        p.flush(0.01)
        proxy.cut()
        if round_ == 2:
            p.abort_transaction(60)
        else:
            p.commit_transaction(60)
            expected += batch
    assert not [e for e in errors if e.code() != KafkaError._PURGE_QUEUE], errors[:3]
    records = read_confluent(broker.bootstrap, topic, 2, expected=len(expected),
                             config=READ_COMMITTED)
    assert values(records) == sorted(expected)
    p.close()


@pytest.mark.timeout(100)
@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_transaction_goes_on_across_a_broker_restart(kip_process, how):
    """The broker (coordinator and partition leader) restarts inside a transaction: the
    engine finds the coordinator again, resends, and the transaction commits whole."""
    broker = kip_process({"num.partitions": 1})
    topic = create_topic(broker.bootstrap, unique("txn-restart"), 1)
    p = txn_producer(broker, **{"request.timeout.ms": 3000, "retry.backoff.ms": 50,
                                "retry.backoff.max.ms": 200, "socket.timeout.ms": 3000})
    p.init_transactions(30)
    errors: list = []

    def report(err, msg) -> None:
        if err is not None:
            errors.append(err)

    p.begin_transaction()
    p.produce_arrays(topic, [b"before-%d" % i for i in range(100)], on_delivery=report)
    assert p.flush(30) == 0
    if how == "sigterm":
        broker.stop()
    else:
        broker.kill()
    broker.start()
    p.produce_arrays(topic, [b"after-%d" % i for i in range(100)], on_delivery=report)
    p.commit_transaction(60)
    assert not errors, errors[:3]
    p.begin_transaction()
    p.produce(topic, b"next", on_delivery=report)
    p.commit_transaction(60)
    records = read_confluent(broker.bootstrap, topic, 1, config=READ_COMMITTED)
    assert values(records) == sorted([b"before-%d" % i for i in range(100)]
                                     + [b"after-%d" % i for i in range(100)] + [b"next"])
    p.close()


# ---- conditional append in a transaction (KIP-27, KIP-WIRE §8) -------------------------------


def test_append_expected_offset_in_transaction(kip):
    topic = create_topic(kip.bootstrap, unique("txn-append"), 1)
    p = txn_producer(kip)
    p.init_transactions(30)
    p.begin_transaction()
    assert p.append(topic, [b"a0", b"a1", b"a2"], partition=0, expected_offset=0) == 0
    p.produce(topic, b"a3", partition=0, expected_offset=3)
    p.commit_transaction(30)  # marker at offset 4
    p.begin_transaction()
    assert p.append(topic, [b"x0", b"x1"], partition=0, expected_offset=5) == 5
    p.abort_transaction(30)   # marker at offset 7
    p.begin_transaction()
    err = raised(p.append, topic, [b"late"], partition=0, expected_offset=5)
    assert err.code() == 10027 and getattr(err, "log_end_offset", None) == 8
    # A refused conditional batch fails the transaction like any other delivery failure.
    assert raised(p.commit_transaction, 30).txn_requires_abort()
    p.abort_transaction(30)
    p.begin_transaction()
    assert p.append(topic, [b"b0"], partition=0, expected_offset=9) == 9
    p.commit_transaction(30)
    records = read_confluent(kip.bootstrap, topic, 1, config=READ_COMMITTED)
    assert [(r.offset, r.value) for r in records] == [
        (0, b"a0"), (1, b"a1"), (2, b"a2"), (3, b"a3"), (9, b"b0")]
    p.close()


# ---- configuration --------------------------------------------------------------------------


def test_transactions_stay_librdkafkas_when_the_engine_cannot_run():
    """OAUTHBEARER without a token source is librdkafka's only: with it, transactions and both
    bulk calls stay on librdkafka's lane (record by record), as before the engine took part
    in transactions."""
    p = kp.Producer({"bootstrap.servers": "127.0.0.1:1", "transactional.id": unique("oauth"),
                     "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
                     "log_level": 0})
    assert p._txn is None
    # librdkafka's own refusal before init_transactions(), from both bulk calls.
    messages = [{"value": b"a"}]
    assert p.produce_batch("t", messages) == 0
    assert messages[0]["_error"].code() == KafkaError._STATE
    assert raised(p.produce_arrays, "t", [b"a"]).code() == KafkaError._STATE
    assert raised(p.append, "t", [b"a"], partition=0).code() == KafkaError._NOT_IMPLEMENTED


def test_record_timeout_is_bounded_by_the_transaction_timeout():
    from kipproducer.engine.config import ConfigError, EngineConfig

    base = {"bootstrap.servers": "127.0.0.1:1", "transactional.id": "t"}
    config = EngineConfig.from_properties({**base, "transaction.timeout.ms": 10_000})
    assert config.enable_idempotence and config.delivery_timeout_ms == 10_000
    assert config.transaction_timeout_ms == 10_000 and config.max_in_flight == 5
    with pytest.raises(ConfigError):
        EngineConfig.from_properties({**base, "transaction.timeout.ms": 10_000,
                                      "message.timeout.ms": 20_000})
