"""Fixtures for the KIP extension tests: an embedded broker, a raw protocol client, an embedded
broker behind a Produce-watching proxy, and a per-test time limit (SIGALRM)."""


import pytest
from kip_support import ProduceWatchProxy
from raw_client import RawClient

from kipproducer.broker.embedded import EmbeddedBroker


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker() as b:
        yield b


@pytest.fixture(scope="module")
def version_1_broker():
    """A broker that advertises KIP-WIRE version 1: one batch per partition per request."""
    with EmbeddedBroker(config={"kip.wire.version": 1}) as b:
        yield b


@pytest.fixture
def client(broker):
    c = RawClient(broker.bootstrap_servers)
    yield c
    c.close()




@pytest.fixture
def proxied_broker():
    """(EmbeddedBroker, ProduceWatchProxy): the broker advertises the proxy's port, so every
    client connection after bootstrap goes through the proxy too."""
    proxy = ProduceWatchProxy(0)
    try:
        with EmbeddedBroker(config={"advertised.port": proxy.port}) as b:
            proxy.target_port = b.broker.server.port
            yield b, proxy
    finally:
        proxy.close()
