"""Fixtures for the KIP extension tests: an embedded broker, a raw protocol client, an embedded
broker behind a Produce-watching proxy, and a per-test time limit (SIGALRM)."""

import signal
import socket
import struct
import threading

import pytest
from kip_support import ProduceWatchProxy

from kipproducer.broker.embedded import EmbeddedBroker
from kipproducer.protocol import build_request, decode_response, encode_request_frame


class RawClient:
    """One blocking connection speaking the shared protocol layer, for exact wire tests."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=15)
        self.correlation = 0

    def request(self, api_key: int, version: int, **fields):
        self.correlation += 1
        frame = encode_request_frame(self.correlation, "kip-tests",
                                     build_request(api_key, version, **fields))
        self.sock.sendall(frame)
        size = struct.unpack(">i", self._read(4))[0]
        response = decode_response(self._read(size), api_key, version)
        assert response.correlation_id == self.correlation
        return response.body

    def _read(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("broker closed the connection")
            out += chunk
        return bytes(out)

    def produce(self, topic: str, batches: dict[int, bytes], *, mode: int, acks: int = -1,
                version: int = 10):
        """One Produce request; returns {partition: partition response}."""
        body = self.request(0, version, transactional_id=None, acks=acks, timeout=10000,
                            produce_mode=mode, topic_data=[{
                                "name": topic,
                                "partition_data": [{"index": p, "records": b}
                                                   for p, b in batches.items()]}])
        return {p.index: p for t in body.responses for p in t.partition_responses}

    def create_topic(self, name: str, partitions: int = 1, configs: dict | None = None):
        body = self.request(19, 5, topics=[{
            "name": name, "num_partitions": partitions, "replication_factor": 1,
            "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
            timeout=10000)
        assert body.topics[0].error_code == 0, body.topics[0].error_message

    def close(self) -> None:
        self.sock.close()


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
