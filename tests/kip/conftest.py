"""Fixtures for the KIP extension tests: an embedded broker, a raw protocol client, an embedded
broker behind a Produce-watching proxy, and a per-test time limit (SIGALRM)."""

import signal
import threading

import pytest
from kip_support import ProduceWatchProxy
from raw_client import RawClient

from kipproducer.broker.embedded import EmbeddedBroker


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker() as b:
        yield b


@pytest.fixture
def client(broker):
    c = RawClient(broker.bootstrap_servers)
    yield c
    c.close()


TEST_TIMEOUT_S = 120


@pytest.fixture(autouse=True)
def _time_limit(request):
    """A hang fails its test instead of the run (``@pytest.mark.time_limit(s)`` to change)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    marker = request.node.get_closest_marker("time_limit")
    limit = marker.args[0] if marker else TEST_TIMEOUT_S

    def expired(signum, frame):
        raise TimeoutError(f"test ran longer than {limit} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def pytest_configure(config):
    config.addinivalue_line("markers", "time_limit(seconds): per-test time limit")


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
