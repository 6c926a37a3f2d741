"""``kip transactions`` against a running broker: list, describe, describe-producers,
find-hanging and abort, with a real librdkafka transactional producer.

A *hanging* transaction cannot be made with a correct client (the broker refuses
transactional data for a partition the coordinator did not add), so the test writes one the
way a lost coordinator would leave it: a transactional batch appended to the partition log
directly, with no transaction at the coordinator. It holds the last stable offset back until
``kip transactions abort`` writes its abort marker.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer
from integration_support import create_topics, unique, wait_until
from txn_clients import END_OFFSETS, READERS

from kipproducer import cli
from kipproducer.broker.embedded import EmbeddedBroker
from kipproducer.records import encode_batch


@pytest.fixture(scope="module")
def embedded():
    with EmbeddedBroker(config={"num.partitions": 1}) as broker:
        yield broker


def kip_transactions(capsys, bootstrap: str, *args: str) -> tuple[int, list[list[str]], str]:
    """Run the command; its exit code, its output table split into cells, and its stderr."""
    capsys.readouterr()
    code = cli.main(["transactions", "--bootstrap-server", bootstrap, *args])
    out, err = capsys.readouterr()
    return code, [line.split() for line in out.splitlines()], err


def as_dicts(table: list[list[str]]) -> list[dict[str, str]]:
    header, *rows = table
    return [dict(zip(header, row, strict=False)) for row in rows]


def test_list_describe_and_describe_producers(embedded, capsys) -> None:
    bootstrap = embedded.bootstrap_servers
    topic, tid = unique("cli-txn"), unique("cli-tid")
    create_topics(bootstrap, {topic: 1})
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, f"v{i}".encode(), partition=0)
    assert p.flush(10) == 0

    code, table, _ = kip_transactions(capsys, bootstrap, "list")
    assert code == 0
    mine = [row for row in as_dicts(table) if row["TransactionalId"] == tid]
    assert len(mine) == 1 and mine[0]["TransactionState"] == "Ongoing"
    producer_id = int(mine[0]["ProducerId"])

    code, table, _ = kip_transactions(capsys, bootstrap, "describe", "--transactional-id", tid)
    assert code == 0
    (described,) = as_dicts(table)
    assert described["TransactionState"] == "Ongoing"
    assert described["TopicPartitions"] == f"{topic}-0"
    assert int(described["ProducerId"]) == producer_id

    code, table, _ = kip_transactions(capsys, bootstrap, "describe-producers", "--topic", topic,
                                   "--partition", "0")
    assert code == 0
    (producer,) = as_dicts(table)
    assert int(producer["ProducerId"]) == producer_id
    assert producer["CurrentTransactionStartOffset"] == "0"
    assert producer["LastSequence"] == "2"

    p.commit_transaction(30)
    code, table, _ = kip_transactions(capsys, bootstrap, "list")
    mine = [row for row in as_dicts(table) if row["TransactionalId"] == tid]
    assert mine[0]["TransactionState"] == "CompleteCommit"
    code, table, _ = kip_transactions(capsys, bootstrap, "describe-producers", "--topic", topic,
                                   "--partition", "0")
    assert as_dicts(table)[0]["CurrentTransactionStartOffset"] == "-1"

    code, _, err = kip_transactions(capsys, bootstrap, "describe", "--transactional-id",
                                    "nobody")
    assert code == 1
    assert "TRANSACTIONAL_ID_NOT_FOUND" in err


def test_find_hanging_and_abort(embedded, capsys) -> None:
    bootstrap = embedded.bootstrap_servers
    topic = unique("cli-hanging")
    create_topics(bootstrap, {topic: 1})
    plain = Producer({"bootstrap.servers": bootstrap})
    plain.produce(topic, b"before", partition=0)
    assert plain.flush(10) == 0

    # The data of a transaction no coordinator knows about (producer id far from any issued).
    orphan = bytearray(encode_batch([(None, b"orphan", [], int(time.time() * 1000) - 60_000)],
                                    producer_id=987_654, producer_epoch=3, base_sequence=0,
                                    transactional=True))
    log = embedded.broker.logs.get_log(topic, 0)
    log.append(orphan, assign_offsets=True)
    plain.produce(topic, b"after", partition=0)
    assert plain.flush(10) == 0
    assert END_OFFSETS["confluent"](bootstrap, topic, 1, "read_committed") == {0: 1}

    code, table, _ = kip_transactions(capsys, bootstrap, "find-hanging",
                                   "--max-transaction-timeout", "0.5")
    assert code == 0
    hanging = [row for row in as_dicts(table) if row["Topic"] == topic]
    assert [(row["ProducerId"], row["ProducerEpoch"], row["StartOffset"])
            for row in hanging] == [("987654", "3", "1")]

    code, _, err = kip_transactions(capsys, bootstrap, "abort", "--topic", topic,
                                    "--partition", "0", "--start-offset", "7")
    assert code == 1
    assert "no open transaction starts at offset 7" in err

    code, _, _ = kip_transactions(capsys, bootstrap, "abort", "--topic", topic,
                                  "--partition", "0", "--start-offset", "1")
    assert code == 0
    wait_until(lambda: END_OFFSETS["confluent"](bootstrap, topic, 1, "read_committed") == {0: 4},
               timeout=10, what="the last stable offset to pass the aborted transaction")
    seen = READERS["confluent"](bootstrap, topic, 1, "read_committed", 2)
    assert [value for _, value in seen[0]] == [b"before", b"after"]
    code, table, _ = kip_transactions(capsys, bootstrap, "find-hanging",
                                   "--max-transaction-timeout", "0.5")
    assert not [row for row in as_dicts(table) if row["Topic"] == topic]
