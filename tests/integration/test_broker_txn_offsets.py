"""Transactional offset commits against the embedded broker: a librdkafka consumer group and a
transactional librdkafka producer doing consume-transform-produce (send_offsets_to_transaction),
plus the exact wire answers of TxnOffsetCommit, OffsetFetch (require_stable) and
FindCoordinator (transaction keys) from a raw client.

The group's committed offsets move only when the transaction commits; an abort leaves the old
ones; a producer that sends the group metadata of an older generation (a zombie, KIP-447) is
refused and must abort.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from integration_support import create_topics, unique, wait_until

from kipproducer.broker.embedded import EmbeddedBroker
from kipproducer.broker.security import AclBinding
from kipproducer.broker.security.acls import (
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
)
from kipproducer.protocol import error_codes as ec

_KIP_TESTS = str(Path(__file__).resolve().parents[1] / "kip")
if _KIP_TESTS not in sys.path:
    sys.path.insert(0, _KIP_TESTS)
from raw_client import RawClient  # noqa: E402  (tests/kip's raw client, imported, not copied)

TIMEOUT = 20.0
PARTITIONS = 2
PER_PARTITION = 10
FIND_COORDINATOR, OFFSET_FETCH, TXN_OFFSET_COMMIT = 10, 9, 28
KEY_TYPE_TRANSACTION = 1


@pytest.fixture
def broker(caplog: pytest.LogCaptureFixture) -> Iterator[EmbeddedBroker]:
    """An embedded broker; a test fails if the broker logged an error (a handler bug must not
    hide behind the clients' retries)."""
    with caplog.at_level(logging.ERROR, logger="kipproducer"):
        with EmbeddedBroker() as embedded:
            yield embedded
    errors = [
        r for r in caplog.records if r.levelno >= logging.ERROR and r.name.startswith("kipproducer")
    ]
    assert not errors, [r.getMessage() for r in errors]


def consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 300,
        }
    )


def transactional_producer(bootstrap: str) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": unique("txn"),
            "transaction.timeout.ms": 60_000,
        }
    )
    producer.init_transactions(TIMEOUT)
    return producer


def produce_plain(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for n in range(count):
        for p in range(PARTITIONS):
            producer.produce(topic, b"in-%d-%d" % (p, n), partition=p)
    assert producer.flush(TIMEOUT) == 0


def consume_n(c: Consumer, n: int) -> list:
    got: list = []
    deadline = time.monotonic() + TIMEOUT
    while len(got) < n:
        assert time.monotonic() < deadline, f"consumed {len(got)} of {n}"
        for msg in c.consume(n - len(got), timeout=0.5):
            assert msg.error() is None, msg.error()
            got.append(msg)
    return got


def positions(c: Consumer) -> list[TopicPartition]:
    return c.position(c.assignment())


def committed(c: Consumer, topic: str, timeout: float = TIMEOUT) -> dict[int, int]:
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    return {tp.partition: tp.offset for tp in c.committed(tps, timeout=timeout)}


def fetch_offsets_raw(
    raw: RawClient, group: str, topic: str, *, version: int, require_stable: bool
) -> dict[int, tuple[int, int]]:
    """OffsetFetch at ``version``: {partition: (committed offset, error code)}."""
    partitions = list(range(PARTITIONS))
    if version >= 8:
        body = raw.request(
            OFFSET_FETCH,
            version,
            groups=[
                {"group_id": group, "topics": [{"name": topic, "partition_indexes": partitions}]}
            ],
            require_stable=require_stable,
        )
        (answer,) = body.groups
        assert answer.error_code == ec.NONE
        topics = answer.topics
    else:
        body = raw.request(
            OFFSET_FETCH,
            version,
            group_id=group,
            topics=[{"name": topic, "partition_indexes": partitions}],
            require_stable=require_stable,
        )
        assert body.error_code == ec.NONE
        topics = body.topics
    return {
        p.partition_index: (p.committed_offset, p.error_code) for t in topics for p in t.partitions
    }


def test_offsets_commit_with_the_transaction_and_an_abort_keeps_the_old_ones(broker):
    bootstrap = broker.bootstrap_servers
    source, sink, group = unique("in"), unique("out"), unique("group")
    create_topics(bootstrap, {source: PARTITIONS, sink: 1})
    produce_plain(bootstrap, source, PER_PARTITION)
    c = consumer(bootstrap, group)
    producer = transactional_producer(bootstrap)
    raw = RawClient(bootstrap)
    try:
        c.subscribe([source])
        consumed = consume_n(c, PARTITIONS * PER_PARTITION)
        producer.begin_transaction()
        for msg in consumed:
            producer.produce(sink, msg.value().upper(), partition=0)
        first = positions(c)
        assert sorted(tp.offset for tp in first) == [PER_PARTITION] * PARTITIONS
        producer.send_offsets_to_transaction(first, c.consumer_group_metadata(), TIMEOUT)

        # open transaction: invisible to a plain fetch, unstable to a require_stable one
        for version in (7, 8):
            assert fetch_offsets_raw(raw, group, source, version=version, require_stable=True) == {
                p: (-1, ec.UNSTABLE_OFFSET_COMMIT) for p in range(PARTITIONS)
            }
            assert fetch_offsets_raw(raw, group, source, version=version, require_stable=False) == {
                p: (-1, ec.NONE) for p in range(PARTITIONS)
            }
        # librdkafka's committed() asks for stable offsets and keeps retrying until it times out
        with pytest.raises(KafkaException) as info:
            committed(c, source, timeout=2.0)
        assert info.value.args[0].code() == KafkaError._TIMED_OUT

        producer.commit_transaction(TIMEOUT)
        assert committed(c, source) == {p: PER_PARTITION for p in range(PARTITIONS)}
        assert fetch_offsets_raw(raw, group, source, version=8, require_stable=True) == {
            p: (PER_PARTITION, ec.NONE) for p in range(PARTITIONS)
        }

        # a second round that aborts: the committed offsets stay where the first one left them
        produce_plain(bootstrap, source, 5)
        consume_n(c, PARTITIONS * 5)
        producer.begin_transaction()
        producer.produce(sink, b"doomed", partition=0)
        producer.send_offsets_to_transaction(positions(c), c.consumer_group_metadata(), TIMEOUT)
        assert fetch_offsets_raw(raw, group, source, version=7, require_stable=False) == {
            p: (PER_PARTITION, ec.NONE) for p in range(PARTITIONS)
        }
        assert fetch_offsets_raw(raw, group, source, version=7, require_stable=True) == {
            p: (-1, ec.UNSTABLE_OFFSET_COMMIT) for p in range(PARTITIONS)
        }
        producer.abort_transaction(TIMEOUT)
        assert committed(c, source) == {p: PER_PARTITION for p in range(PARTITIONS)}
    finally:
        raw.close()
        c.close()
        producer.flush(1)
        producer.close()


def test_a_producer_with_an_older_generations_metadata_is_refused(broker):
    bootstrap = broker.bootstrap_servers
    source, group = unique("in"), unique("group")
    create_topics(bootstrap, {source: PARTITIONS})
    produce_plain(bootstrap, source, PER_PARTITION)
    first, second = consumer(bootstrap, group), consumer(bootstrap, group)
    producer = transactional_producer(bootstrap)
    try:
        first.subscribe([source])
        consume_n(first, PARTITIONS * PER_PARTITION)
        old_metadata = first.consumer_group_metadata()  # a copy: generation 1, both partitions

        second.subscribe([source])

        def split() -> bool:
            for c in (first, second):
                c.poll(0.1)
            return len(first.assignment()) == 1 and len(second.assignment()) == 1

        wait_until(split, TIMEOUT, "the rebalance to give each member one partition")

        stale = [TopicPartition(source, p, PER_PARTITION) for p in range(PARTITIONS)]
        producer.begin_transaction()
        with pytest.raises(KafkaException) as info:
            producer.send_offsets_to_transaction(stale, old_metadata, TIMEOUT)
        error = info.value.args[0]
        assert error.txn_requires_abort(), error
        assert error.code() == KafkaError.ILLEGAL_GENERATION, error
        producer.abort_transaction(TIMEOUT)
        assert committed(first, source) == {p: -1001 for p in range(PARTITIONS)}

        # the current generation's member may commit what it owns
        (owned,) = first.assignment()
        producer.begin_transaction()
        producer.send_offsets_to_transaction(
            [TopicPartition(source, owned.partition, 3)], first.consumer_group_metadata(), TIMEOUT
        )
        producer.commit_transaction(TIMEOUT)
        assert committed(first, source)[owned.partition] == 3
    finally:
        first.close()
        second.close()
        producer.flush(1)
        producer.close()


def test_wire_answers_of_find_coordinator_and_txn_offset_commit(broker):
    bootstrap = broker.bootstrap_servers
    topic = unique("t")
    create_topics(bootstrap, {topic: PARTITIONS})
    raw = RawClient(bootstrap)
    try:
        body = raw.request(
            FIND_COORDINATOR, 4, key_type=KEY_TYPE_TRANSACTION, coordinator_keys=["a", "b"]
        )
        assert [(c.key, c.error_code, c.port) for c in body.coordinators] == [
            ("a", ec.NONE, broker.port),
            ("b", ec.NONE, broker.port),
        ]
        body = raw.request(FIND_COORDINATOR, 3, key="tx", key_type=KEY_TYPE_TRANSACTION)
        assert (body.error_code, body.node_id, body.port) == (
            ec.NONE,
            broker.broker.node_id,
            broker.port,
        )

        # no transaction for this id: the transaction coordinator's verdict goes to every valid
        # partition; an unknown topic or partition is answered before it is asked
        for version in range(5):
            fields = {
                "transactional_id": "nobody",
                "group_id": "g",
                "producer_id": 77,
                "producer_epoch": 0,
                "topics": [
                    {
                        "name": topic,
                        "partitions": [
                            {
                                "partition_index": p,
                                "committed_offset": 5,
                                "committed_metadata": None,
                            }
                            for p in (0, 1, 9)
                        ],
                    },
                    {
                        "name": "no-such-topic",
                        "partitions": [
                            {"partition_index": 0, "committed_offset": 5, "committed_metadata": ""}
                        ],
                    },
                ],
            }
            if version >= 3:
                fields.update(generation_id=-1, member_id="", group_instance_id=None)
            body = raw.request(TXN_OFFSET_COMMIT, version, **fields)
            answers = {
                (t.name, p.partition_index): p.error_code for t in body.topics for p in t.partitions
            }
            assert answers == {
                (topic, 0): ec.INVALID_PRODUCER_ID_MAPPING,
                (topic, 1): ec.INVALID_PRODUCER_ID_MAPPING,
                (topic, 9): ec.UNKNOWN_TOPIC_OR_PARTITION,
                ("no-such-topic", 0): ec.UNKNOWN_TOPIC_OR_PARTITION,
            }, version
        assert fetch_offsets_raw(raw, "g", topic, version=8, require_stable=True) == {
            p: (-1, ec.NONE) for p in range(PARTITIONS)
        }
    finally:
        raw.close()


def _acl(resource_type: ResourceType, name: str, operation: AclOperation) -> AclBinding:
    return AclBinding(
        resource_type,
        name,
        PatternType.LITERAL,
        "User:somebody-else",
        "*",
        operation,
        AclPermission.ALLOW,
    )


def test_acls_refuse_in_kafkas_order(caplog):
    """Without SASL the client is User:ANONYMOUS; an ACL naming only another principal takes
    the resource away from it (allow.everyone.if.no.acl.found lets everything else through)."""
    config = {"authorizer.enabled": "true", "allow.everyone.if.no.acl.found": "true"}
    with EmbeddedBroker(config=config) as broker:
        topic, secret = unique("t"), unique("secret")
        create_topics(broker.bootstrap_servers, {topic: 1, secret: 1})
        broker.broker.acls.add(
            [
                _acl(ResourceType.TRANSACTIONAL_ID, "locked", AclOperation.WRITE),
                _acl(ResourceType.GROUP, "locked-group", AclOperation.READ),
                _acl(ResourceType.TOPIC, secret, AclOperation.READ),
            ]
        )
        raw = RawClient(broker.bootstrap_servers)
        try:
            body = raw.request(
                FIND_COORDINATOR, 4, key_type=KEY_TYPE_TRANSACTION, coordinator_keys=["locked", "x"]
            )
            assert [c.error_code for c in body.coordinators] == [
                ec.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                ec.NONE,
            ]

            def commit(transactional_id: str, group: str) -> dict[str, int]:
                body = raw.request(
                    TXN_OFFSET_COMMIT,
                    3,
                    transactional_id=transactional_id,
                    group_id=group,
                    producer_id=1,
                    producer_epoch=0,
                    generation_id=-1,
                    member_id="",
                    group_instance_id=None,
                    topics=[
                        {
                            "name": name,
                            "partitions": [
                                {
                                    "partition_index": 0,
                                    "committed_offset": 1,
                                    "committed_metadata": "",
                                }
                            ],
                        }
                        for name in (topic, secret)
                    ],
                )
                return {t.name: t.partitions[0].error_code for t in body.topics}

            assert commit("locked", "locked-group") == {
                topic: ec.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                secret: ec.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            }
            assert commit("free", "locked-group") == {
                topic: ec.GROUP_AUTHORIZATION_FAILED,
                secret: ec.GROUP_AUTHORIZATION_FAILED,
            }
            assert commit("free", "g") == {
                topic: ec.INVALID_PRODUCER_ID_MAPPING,  # (no such transaction)
                secret: ec.TOPIC_AUTHORIZATION_FAILED,
            }
        finally:
            raw.close()


def test_pending_offsets_survive_a_broker_restart_and_commit_after_it(tmp_path, caplog):
    """The broker stops while a transaction holding offsets is open; the same producer commits
    once it is back (on the same port and data dir): the offsets come out of the group store."""
    data_dir = tmp_path / "data"
    source, group = unique("in"), unique("group")
    with caplog.at_level(logging.ERROR, logger="kipproducer"):
        first_life = EmbeddedBroker(data_dir)
        port = first_life.port
        bootstrap = first_life.bootstrap_servers
        producer = None
        try:
            create_topics(bootstrap, {source: PARTITIONS})
            produce_plain(bootstrap, source, PER_PARTITION)
            producer = transactional_producer(bootstrap)
            c = consumer(bootstrap, group)
            try:
                c.subscribe([source])
                consume_n(c, PARTITIONS * PER_PARTITION)
                producer.begin_transaction()
                producer.send_offsets_to_transaction(
                    positions(c), c.consumer_group_metadata(), TIMEOUT
                )
            finally:
                c.close()
        finally:
            first_life.close()
        assert producer is not None
        with EmbeddedBroker(data_dir, port=port) as second_life:
            raw = RawClient(second_life.bootstrap_servers)
            try:
                assert fetch_offsets_raw(raw, group, source, version=8, require_stable=True) == {
                    p: (-1, ec.UNSTABLE_OFFSET_COMMIT) for p in range(PARTITIONS)
                }
                producer.commit_transaction(TIMEOUT)
                assert fetch_offsets_raw(raw, group, source, version=8, require_stable=True) == {
                    p: (PER_PARTITION, ec.NONE) for p in range(PARTITIONS)
                }
            finally:
                raw.close()
                producer.close()
    errors = [r for r in caplog.records if r.name.startswith("kipproducer")]
    assert not [r for r in errors if r.levelno >= logging.ERROR], [r.getMessage() for r in errors]
