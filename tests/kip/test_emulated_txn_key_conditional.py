"""Emulated key conditions inside the Producer's own transaction, on the stand-in for stock
Kafka (the scenarios: txn_key_scenarios.py; the same run on Apache Kafka in
tests/apache_kafka/test_kafka_key_conditional.py)."""

from __future__ import annotations

import pytest
from emulated_support import STANDIN_CONFIG, committed, keyed_topic
from txn_key_scenarios import SCENARIOS

from kipproducer.broker.embedded import EmbeddedBroker


@pytest.fixture(scope="module")
def stock():
    with EmbeddedBroker(config=STANDIN_CONFIG) as b:
        yield b


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
def test_key_conditions_inside_a_transaction(stock, scenario):
    bootstrap = stock.bootstrap_servers

    def read(topic: str):
        return [(r.offset, r.key, r.value) for r in committed(bootstrap, topic)]

    scenario(bootstrap, keyed_topic(bootstrap, "emk-txn"), read)


def test_a_record_drained_but_not_sent_yet_is_the_transactions(stock, monkeypatch):
    """A record of the transaction that left the accumulator but waits to be sent (here:
    held until its partition is in the transaction) is the transaction's all the same: the
    partition's first key condition is refused with _STATE at once, not checked against an
    index that record would land in front of."""
    import time

    from confluent_kafka import KafkaError
    from kip_support import KeyReports
    from txn_key_scenarios import txn_producer

    from kipproducer.engine.partition_send import PartitionSendState
    from kipproducer.errors import KEY_ABSENT

    bootstrap = stock.bootstrap_servers
    topic = keyed_topic(bootstrap, "emk-txn-held")
    p = txn_producer(bootstrap)
    try:
        p.begin_transaction()
        monkeypatch.setattr(PartitionSendState, "may_send", lambda self: False)
        p.produce(topic, b"plain", b"k", partition=0)
        deadline = time.monotonic() + 10
        while not getattr(p._engine._partitions.get((topic, 0)), "pending", None):
            assert time.monotonic() < deadline, "the record was never drained"
            time.sleep(0.005)
        reports = KeyReports()
        p.produce_batch(topic, [{"key": b"k", "value": b"next",
                                 "expected_key_offset": KEY_ABSENT}],
                        partition=0, on_delivery=reports)
        p.poll(0)
        [(err, _, _, _)] = reports.items
        assert err is not None and err.code() == KafkaError._STATE
        monkeypatch.undo()
        p.abort_transaction(30)
    finally:
        monkeypatch.undo()
        p.close()
