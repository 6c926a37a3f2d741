"""Fixtures for the broker integration tests (helpers live in integration_support.py).

``kip_broker(config={...})`` starts the broker the way a user does, as a subprocess (see
:class:`integration_support.KipBroker`); every broker a test started is stopped by PID at
teardown, and a broker that logged a traceback fails the test: a handler bug must not hide
behind a client's retries.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest
from integration_support import BrokerFactory

#: Safety net only: every wait in the tests has its own, much shorter, timeout.


@pytest.fixture
def kip_broker(tmp_path: Path) -> Iterator[BrokerFactory]:
    """Factory: ``kip_broker(config={...})`` → a started :class:`KipBroker`."""
    factory = BrokerFactory(tmp_path)
    yield factory
    for broker in factory.brokers:
        # Shown by pytest only when the test failed: the broker's side of the story.
        print(broker.stderr_tail(40))
    factory.close()


@pytest.fixture(scope="module")
def module_broker_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerFactory]:
    """Like ``kip_broker``, for a broker that a whole module shares."""
    factory = BrokerFactory(tmp_path_factory.mktemp("module-broker"))
    yield factory
    factory.close()


@pytest.fixture(autouse=True)
def _release_clients() -> Iterator[None]:
    """Destroy the test's librdkafka clients now, not at some later garbage collection.

    A Producer kept alive by a reference cycle (its delivery callback) would otherwise go on
    reconnecting to a broker that is already stopped, filling stderr with connection errors.
    """
    yield
    gc.collect()
