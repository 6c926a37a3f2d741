"""Fixtures of the TLS tests: certificates made for the session, brokers with TLS listeners."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tls_support import Certs, make_certs

from kipproducer.broker.embedded import EmbeddedBroker


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(Path(tmp_path_factory.mktemp("certs")))


@pytest.fixture
def embedded() -> Iterator[Any]:
    """Factory: ``embedded(config)`` -> a started EmbeddedBroker, closed after the test."""
    started: list[EmbeddedBroker] = []

    def start(config: dict[str, Any] | None = None, **kw: Any) -> EmbeddedBroker:
        broker = EmbeddedBroker(config=config, **kw)
        started.append(broker)
        return broker

    yield start
    for broker in started:
        broker.close()
