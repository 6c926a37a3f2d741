"""The emulation's log-end readers (stock/log_ends.py): the engine's client and the librdkafka
fallback give the same answers, with a transaction open and after its commit."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer as StockProducer
from emulated_support import STANDIN_CONFIG, new_topic
from kip_support import unique

from kipproducer.broker.embedded import EmbeddedBroker
from kipproducer.stock.log_ends import ConsumerLogEnds, LogEnds


@pytest.fixture(scope="module")
def stock():
    with EmbeddedBroker(config=STANDIN_CONFIG) as b:
        yield b


@pytest.mark.parametrize("reader_class", [LogEnds, ConsumerLogEnds])
def test_decided_ends_and_the_partition_count_asked_ahead(stock, reader_class):
    bootstrap = stock.bootstrap_servers
    topic = new_topic(bootstrap, "log-ends", 3)
    reader = reader_class({"bootstrap.servers": bootstrap})
    txn = StockProducer({"bootstrap.servers": bootstrap, "transactional.id": unique("t")})
    try:
        count = reader.partition_count_soon(topic)  # asked now, answered below
        txn.init_transactions(20)
        txn.begin_transaction()
        for i in range(3):
            txn.produce(topic, b"v%d" % i, partition=1)
        assert txn.flush(20) == 0
        assert reader.decided_ends(topic, 1) == (0, 3)  # open: nothing below 3 is decided
        assert reader.decided_ends(topic, 0) == (0, 0)
        txn.commit_transaction(20)
        reader.wait("the marker", lambda: reader.decided_ends(topic, 1)[0] > 0, 20)
        assert reader.decided_ends(topic, 1) == (4, 4)  # three records and the marker
        assert count() == 3 == reader.partition_count(topic)
        missing = reader.partition_count_soon(unique("no-such-topic"))
        with pytest.raises(Exception, match="no-such-topic|Unknown topic|UNKNOWN"):
            missing()
    finally:
        reader.close()
