"""Fixtures for the security tests: brokers with SASL and ACLs, and a raw SASL client.

Brokers are started as users start them: ``EmbeddedBroker(config=...)`` in this process, or
``kip broker`` as a subprocess (tests/integration's BrokerFactory, stopped by PID). The raw
client is tests/kip's RawClient plus SaslHandshake / SaslAuthenticate done by hand.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from security_support import (
    ADMIN,
    ADMIN_PASSWORD,
    ALL_MECHANISMS,
    BrokerFactory,
    SaslRawClient,
    connect,
)

from kipproducer.broker.embedded import EmbeddedBroker


@pytest.fixture(scope="module")
def secured() -> Iterator[EmbeddedBroker]:
    """A module-wide broker with every mechanism, the authorizer on and an admin super user."""
    with EmbeddedBroker(config={
        "sasl.enabled.mechanisms": ALL_MECHANISMS,
        "authorizer.enabled": "true",
        "super.users": f"User:{ADMIN}",
    }) as broker:
        broker.broker.users.add(ADMIN, ADMIN_PASSWORD)
        yield broker


@pytest.fixture
def admin(secured: EmbeddedBroker) -> Iterator[SaslRawClient]:
    """The super user of ``secured``, logged in on a raw connection (topics, log ends, ACLs)."""
    client = connect(secured.bootstrap_servers)
    client.login("SCRAM-SHA-512", ADMIN, ADMIN_PASSWORD)
    yield client
    client.close()


@pytest.fixture
def kip_broker(tmp_path: Path) -> Iterator[BrokerFactory]:
    """Factory: ``kip_broker(config={...})`` -> a ``kip broker`` subprocess, stopped by PID."""
    factory = BrokerFactory(tmp_path)
    yield factory
    for broker in factory.brokers:
        print(broker.stderr_tail(40))  # shown only when the test failed
    factory.close()


class _BrokerErrors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info:
            self.records.append(record)


@pytest.fixture(autouse=True)
def _no_broker_tracebacks() -> Iterator[None]:
    """An in-process broker that logged an exception fails the test (as the subprocess
    brokers of BrokerFactory do): a handler bug must not hide behind a closed connection."""
    handler = _BrokerErrors()
    logger = logging.getLogger("kipproducer.broker")
    logger.addHandler(handler)
    yield
    logger.removeHandler(handler)
    assert not handler.records, "\n".join(
        handler.format(r) for r in handler.records)


@pytest.fixture(autouse=True)
def _release_clients() -> Iterator[None]:
    """Destroy librdkafka clients now: one left behind keeps reconnecting to a closed broker."""
    yield
    gc.collect()
