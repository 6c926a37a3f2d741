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
