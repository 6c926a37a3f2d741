"""The Spark source's driver asks Kafka with the project's own client (engine/cluster_queries.py
through spark/driver_client.py), never librdkafka: Metadata and ListOffsets (earliest, latest
at both isolation levels, by timestamp) against a real `kip broker`, and a batch and a
streaming plan made with confluent_kafka's clients made unusable. No SparkSession: the
readers' driver side is called as Spark calls it."""

from __future__ import annotations

import pickle
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kipproducer.broker.embedded import EmbeddedBroker
from kipproducer.engine.cluster_queries import ClusterQueries, ClusterQueryError
from kipproducer.engine.connection import BrokerAuthenticationError
from kipproducer.protocol import error_codes as ec
from kipproducer.spark.driver_client import EngineDriverClient, driver_client
from kipproducer.spark.source import EARLIEST, LATEST, KipBatchReader, KipStreamReader

PARTITIONS = 12
PER_PARTITION = 5
BASE_TS = 1_700_000_000_000  # record i of a partition has timestamp BASE_TS + 1000 * i


@pytest.fixture(scope="module")
def topic(source) -> Iterator[str]:
    """A 12-partition topic, PER_PARTITION records in each, timestamps a second apart."""
    name = "driver-client"
    bootstrap = source.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})  # referenced until the answer
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 3})
    for p in range(PARTITIONS):
        for i in range(PER_PARTITION):
            producer.produce(name, b"v%d" % i, partition=p, timestamp=BASE_TS + 1000 * i)
    assert producer.flush(30) == 0
    yield name


@pytest.fixture
def queries(source) -> Iterator[ClusterQueries]:
    with ClusterQueries({"bootstrap.servers": source.bootstrap_servers}, timeout_s=10) as q:
        yield q


def test_metadata_named_every_topic_and_missing_not_created(queries, topic) -> None:
    named = queries.topics([topic, "driver-client-absent"])
    assert named[topic].error_code == ec.NONE and named[topic].partition_count == PARTITIONS
    assert named["driver-client-absent"].error_code == ec.error_code(
        "UNKNOWN_TOPIC_OR_PARTITION")
    every = queries.topics(None)
    assert every[topic].partition_count == PARTITIONS
    assert "driver-client-absent" not in every  # asking did not create it


def test_list_offsets_earliest_latest_and_by_timestamp(queries, topic) -> None:
    tps = [(topic, p) for p in range(PARTITIONS)]
    assert queries.list_offsets({tp: EARLIEST for tp in tps}) == {tp: 0 for tp in tps}
    assert queries.list_offsets({tp: LATEST for tp in tps}) == {tp: PER_PARTITION for tp in tps}
    # the first record at or after a timestamp; -1 when none is that recent
    stamps = {(topic, 0): BASE_TS + 2000, (topic, 1): BASE_TS + 2500, (topic, 2): 0,
              (topic, 3): BASE_TS + 1000 * PER_PARTITION}
    assert queries.list_offsets(stamps) == {(topic, 0): 2, (topic, 1): 3, (topic, 2): 0,
                                            (topic, 3): -1}
    with pytest.raises(ClusterQueryError, match="'driver-client-gone' does not exist"):
        queries.list_offsets({("driver-client-gone", 0): LATEST})


def test_read_committed_latest_is_the_last_stable_offset(source) -> None:
    name = "driver-client-txn"
    bootstrap = source.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "driver-client",
                         "log_level": 3})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(name, b"open %d" % i, partition=0)
    assert producer.flush(30) == 0
    try:
        wanted = {(name, 0): LATEST}
        for isolation, expected in (("read_uncommitted", 3), ("read_committed", 0)):
            with ClusterQueries({"bootstrap.servers": bootstrap}, isolation=isolation,
                                timeout_s=10) as q:
                assert q.list_offsets(wanted) == {(name, 0): expected}, isolation
    finally:
        producer.abort_transaction(30)


def test_unreachable_bootstrap_fails_with_one_clear_error(dead_address) -> None:
    started = time.monotonic()
    with ClusterQueries({"bootstrap.servers": dead_address}, timeout_s=2) as q:
        with pytest.raises(ClusterQueryError, match="no broker answered") as info:
            q.topics(None)
    assert dead_address in str(info.value)
    assert time.monotonic() - started < 10


def test_sasl_scram_and_a_refused_password() -> None:
    """The driver's client authenticates as the engine does (librdkafka's sasl.* names); a
    wrong password is refused at once with the broker's reason, not retried to a timeout."""
    with EmbeddedBroker(config={"sasl.enabled.mechanisms": "SCRAM-SHA-256",
                                "num.partitions": 2}) as broker:
        broker.broker.users.add("spark", "pw-spark")
        conf = {"bootstrap.servers": broker.bootstrap_servers,
                "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                "sasl.username": "spark", "sasl.password": "pw-spark", "log_level": 3}
        admin = AdminClient(conf)
        admin.create_topics([NewTopic("sasl-driver", 2, 1)])["sasl-driver"].result(30)
        producer = Producer(conf)
        producer.produce("sasl-driver", b"x", partition=1)
        assert producer.flush(30) == 0
        with ClusterQueries(conf, timeout_s=10) as q:
            assert q.topics(["sasl-driver"])["sasl-driver"].partition_count == 2
            assert q.list_offsets({("sasl-driver", 0): LATEST, ("sasl-driver", 1): LATEST}) \
                == {("sasl-driver", 0): 0, ("sasl-driver", 1): 1}
        started = time.monotonic()
        with ClusterQueries({**conf, "sasl.password": "wrong"}, timeout_s=10) as q:
            with pytest.raises(BrokerAuthenticationError, match="invalid username or password"):
                q.topics(None)
        assert time.monotonic() - started < 5


@pytest.fixture
def no_librdkafka(monkeypatch) -> None:
    """confluent_kafka's clients fail when made: a driver that still used one fails."""
    import confluent_kafka
    import confluent_kafka.admin

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the driver made a librdkafka client")

    for module in (confluent_kafka, confluent_kafka.admin):
        for name in ("AdminClient", "Consumer", "Producer"):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, refuse)


def test_batch_plan_makes_no_librdkafka_client(source, topic, no_librdkafka) -> None:
    options = {"kafka.bootstrap.servers": source.bootstrap_servers, "subscribe": topic}
    assert isinstance(driver_client({"bootstrap.servers": source.bootstrap_servers}),
                      EngineDriverClient)
    reader = KipBatchReader(options)
    ranges = reader.partitions()
    assert sorted((r.partition, r.start, r.end) for r in ranges) == [
        (p, 0, PER_PARTITION) for p in range(PARTITIONS)]
    pickle.dumps(reader)  # Spark ships the reader to its tasks: no socket or thread in it
    by_time = KipBatchReader({**options, "startingTimestamp": str(BASE_TS + 3000)})
    assert {(r.start, r.end) for r in by_time.partitions()} == {(3, PER_PARTITION)}
    assigned = KipBatchReader({"kafka.bootstrap.servers": source.bootstrap_servers,
                               "assign": f'{{"{topic}":[4,7]}}',
                               "endingOffsets": f'{{"{topic}":{{"4":2,"7":-1}}}}'})
    assert [(r.partition, r.start, r.end) for r in assigned.partitions()] == [
        (4, 0, 2), (7, 0, PER_PARTITION)]


def test_stream_plan_makes_no_librdkafka_client(source, topic, no_librdkafka) -> None:
    reader = KipStreamReader({"kafka.bootstrap.servers": source.bootstrap_servers,
                              "subscribePattern": "driver-client$",
                              "startingOffsets": "earliest", "maxOffsetsPerTrigger": "24"})
    try:
        start = reader.initialOffset()
        assert start == {topic: {str(p): 0 for p in range(PARTITIONS)}}
        first = reader.latestOffset(start, reader.getDefaultReadLimit())
        assert sum(first[topic].values()) == 24  # the limit, shared among the partitions
        clients = reader.plan._client
        second = reader.latestOffset(first, reader.getDefaultReadLimit())
        assert reader.plan._client is clients  # one client for the query's micro-batches
        assert sum(second[topic].values()) == 48
        ranges = reader.partitions(first, second)
        assert sum(r.end - r.start for r in ranges) == 24
        pickle.dumps(reader)
    finally:
        reader.stop()
    assert reader.plan._client is None
