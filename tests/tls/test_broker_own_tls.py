"""kip broker's own TLS transport (broker/tls_transport.py on src/_accel/tls_server.pyx): which
listeners use it, stock clients moving megabytes through it both ways, and its edges:
pipelined requests past the read pause, a refused or abandoned handshake, a client gone in the
middle of a request."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import socket
import ssl
import struct
import threading
import time
import uuid

import pytest
from collect_protocol import Collect
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaConsumer
from kafka.structs import TopicPartition as KafkaTopicPartition
from tls_support import KEY_PASSWORD, broker_tls, rdkafka_ssl

from kipproducer._tls_server import ServerContext
from kipproducer.broker import tls_transport
from kipproducer.broker.broker_config import BrokerConfig
from kipproducer.broker.security.tls import server_context
from kipproducer.broker.server import BrokerServer
from kipproducer.broker.tls_transport import TlsTransport

TIMEOUT = 20.0


def _ssl_listener(broker) -> BrokerServer:
    [server] = [s for s in broker.broker.servers if s.spec.protocol == "SSL"]
    return server


def _tls_client(address: str, cafile: str) -> ssl.SSLSocket:
    host, port = address.rsplit(":", 1)
    context = ssl.create_default_context(cafile=cafile)
    raw = socket.create_connection((host, int(port)), timeout=TIMEOUT)
    return context.wrap_socket(raw, server_hostname=host)


def _api_versions(correlation_id: int) -> bytes:
    """An ApiVersions v0 request frame (empty body)."""
    body = struct.pack(">hhih", 18, 0, correlation_id, 4) + b"test"
    return struct.pack(">i", len(body)) + body


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} of {n} bytes")
        data += chunk
    return bytes(data)


def _read_to_end(sock: socket.socket) -> bytes:
    """Everything until the peer closes (a reset counts as closed)."""
    data = bytearray()
    while True:
        try:
            chunk = sock.recv(4096)
        except ConnectionResetError:
            return bytes(data)
        if not chunk:
            return bytes(data)
        data += chunk


def _answers(sock: socket.socket, n: int) -> list[int]:
    """The correlation ids of the next n answers."""
    ids = []
    for _ in range(n):
        (size,) = struct.unpack(">i", _read_exactly(sock, 4))
        frame = _read_exactly(sock, size)
        ids.append(struct.unpack_from(">i", frame)[0])
    return ids


def test_listeners_without_client_certificates_use_it(certs):
    def context(**extra: str):
        return server_context(BrokerConfig.from_properties(
            broker_tls(certs, listeners="SSL://127.0.0.1:0", **extra)))

    assert isinstance(context().own, ServerContext)
    encrypted = context(**{"ssl.keystore.location": str(certs.server_encrypted),
                           "ssl.key.password": KEY_PASSWORD})
    assert isinstance(encrypted.own, ServerContext)
    inline = context(**{"ssl.keystore.location": "",
                        "ssl.keystore.certificate.chain": certs.server_chain_pem,
                        "ssl.keystore.key": certs.server_key_pem})
    assert isinstance(inline.own, ServerContext)
    # Client certificates and a chosen cipher list stay with asyncio's transport.
    assert context(**{"ssl.client.auth": "requested"}).own is None
    assert context(**{"ssl.client.auth": "required"}).own is None
    assert context(**{"ssl.cipher.suites": "ECDHE-RSA-AES128-GCM-SHA256"}).own is None


def test_stock_clients_move_megabytes_both_ways(embedded, certs):
    """20 MB of distinct random values in through librdkafka and out again to librdkafka
    and kafka-python, byte for byte; librdkafka's consumer has a 16 KB socket buffer, so the
    broker's answers meet a full socket (partial writes, the protocol paused)."""
    broker = embedded(broker_tls(certs, listeners="SSL://127.0.0.1:0"))
    assert _ssl_listener(broker).ssl_context.own is not None
    address = broker.listener_address("SSL")
    topic = f"own-tls-{uuid.uuid4().hex[:8]}"
    values = [os.urandom(10_000) for _ in range(2_000)]
    producer = Producer(rdkafka_ssl(address, certs, **{"linger.ms": 5}))
    errors: list = []
    for value in values:
        producer.produce(topic, value, on_delivery=lambda e, m: e and errors.append(e))
        producer.poll(0)
    assert producer.flush(TIMEOUT) == 0
    assert errors == []

    consumer = Consumer(rdkafka_ssl(address, certs, **{
        "group.id": "g", "enable.auto.commit": False, "socket.receive.buffer.bytes": 16384,
        "fetch.max.bytes": 8 << 20, "max.partition.fetch.bytes": 8 << 20}))
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT
    try:
        while len(got) < len(values) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is None, msg.error()
                got.append(msg.value())
    finally:
        consumer.close()
    assert got == values

    reader = KafkaConsumer(
        bootstrap_servers=address, security_protocol="SSL", ssl_cafile=str(certs.ca),
        enable_auto_commit=False, consumer_timeout_ms=10_000)
    try:
        reader.assign([KafkaTopicPartition(topic, 0)])
        reader.seek_to_beginning()
        read = [record.value for record in itertools.islice(reader, len(values))]
    finally:
        reader.close()
    assert read == values


def test_pipelined_requests_past_the_read_pause(embedded, certs):
    """300 requests in one write: far more than a connection queues before it stops reading
    (ClientLink.MAX_QUEUED_FRAMES); reading resumes from bytes OpenSSL already holds."""
    broker = embedded(broker_tls(certs, listeners="SSL://127.0.0.1:0"))
    assert _ssl_listener(broker).ssl_context.own is not None
    with _tls_client(broker.listener_address("SSL"), str(certs.ca)) as tls:
        tls.sendall(b"".join(_api_versions(i) for i in range(300)))
        assert _answers(tls, 300) == list(range(300))


def test_refused_abandoned_and_cut_connections_leave_it_serving(embedded, certs, caplog,
                                                              monkeypatch):
    monkeypatch.setattr(BrokerServer, "TLS_HANDSHAKE_TIMEOUT_S", 1.0)
    broker = embedded(broker_tls(certs, listeners="SSL://127.0.0.1:0"))
    assert _ssl_listener(broker).ssl_context.own is not None
    address = broker.listener_address("SSL")
    host, port = address.rsplit(":", 1)
    caplog.set_level(logging.INFO, logger="kipproducer.broker")

    # A plaintext Kafka request to the TLS port: the handshake fails, the socket closes
    # (after a TLS alert at most).
    with socket.create_connection((host, int(port)), timeout=TIMEOUT) as plain:
        plain.sendall(_api_versions(1))
        assert len(_read_to_end(plain)) < 100
    # A client that does not trust the broker's certificate gives up in the handshake.
    with pytest.raises(ssl.SSLError):
        _tls_client(address, str(certs.other_ca))
    # Connected, then nothing: the broker stops waiting after the handshake timeout.
    started = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=TIMEOUT) as idle:
        assert _read_to_end(idle) == b""
    assert time.monotonic() - started < 10
    # Half a request, then gone (end of stream in the middle of a frame).
    with _tls_client(address, str(certs.ca)) as tls:
        frame = _api_versions(7)
        tls.sendall(frame[: len(frame) // 2])
    # A client that closes at once after its handshake.
    _tls_client(address, str(certs.ca)).close()

    with _tls_client(address, str(certs.ca)) as tls:
        tls.sendall(_api_versions(9))
        assert _answers(tls, 1) == [9]
    Producer(rdkafka_ssl(address, certs)).list_topics(timeout=10)
    messages = [r.getMessage() for r in caplog.records]
    assert any("could not be set up" in m and "no TLS handshake within 1 s" in m
               for m in messages), messages
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], messages


def _serve_one(certs, client, make_protocol, work):
    """One TLS connection: ``client(port)`` in a thread, the server side a TlsTransport with
    ``make_protocol(loop)``; ``work(transport, protocol)`` runs once the handshake is done."""
    async def main():
        loop = asyncio.get_running_loop()
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen()
            listener.setblocking(False)
            port = listener.getsockname()[1]
            outcome: dict = {}
            thread = threading.Thread(target=lambda: outcome.update(client=client(port)))
            thread.start()
            sock, _ = await loop.sock_accept(listener)
            protocol = make_protocol(loop)
            transport = TlsTransport(loop, sock, ServerContext(str(certs.server)), protocol)
            await asyncio.wait_for(transport.handshake(), TIMEOUT)
            await asyncio.wait_for(work(transport, protocol), TIMEOUT)
            transport.close()
            await asyncio.sleep(0.05)
            await loop.run_in_executor(None, thread.join, TIMEOUT)
            return protocol, outcome.get("client")
    return asyncio.run(main())


def test_reading_resumes_from_bytes_openssl_already_holds(certs):
    """The client's 5,000 bytes arrive in one TLS record, which OpenSSL reads whole; the
    protocol takes 100 bytes at a time and pauses after each. The rest waits inside OpenSSL,
    not in the socket, so resuming must read on without the socket saying so."""
    payload = os.urandom(5000)

    def client(port):
        with _tls_client(f"127.0.0.1:{port}", str(certs.ca)) as tls:
            tls.sendall(payload)
            return _read_to_end(tls)

    async def work(transport, protocol):
        await protocol.done

    protocol, _ = _serve_one(certs, client, lambda loop: Collect(loop, len(payload), 100,
                                                                 stutter=True), work)
    assert bytes(protocol.got) == payload


def test_a_full_socket_pauses_the_protocol_and_loses_nothing(certs):
    """8 MB written to a client that reads nothing for a while: the transport tells the
    protocol to pause, then to resume once the client drains it; every byte arrives, in
    order, and the client sees the close after them."""
    data = os.urandom(8 << 20)

    def client(port):
        with _tls_client(f"127.0.0.1:{port}", str(certs.ca)) as tls:
            time.sleep(0.5)
            return _read_to_end(tls)

    async def work(transport, protocol):
        transport.writelines([data[: 1 << 20], data[1 << 20:]])
        assert (protocol.pauses, protocol.resumes) == (1, 0)
        while not protocol.resumes:
            await asyncio.sleep(0.01)

    protocol, received = _serve_one(certs, client, lambda loop: Collect(loop, 0), work)
    assert (protocol.pauses, protocol.resumes) == (1, 1)
    assert received == data


def test_close_gives_up_on_a_client_that_stopped_reading(certs, monkeypatch):
    """close() sends what is buffered first, but not forever: a client that reads nothing
    loses the connection after CLOSE_TIMEOUT_S."""
    monkeypatch.setattr(tls_transport, "CLOSE_TIMEOUT_S", 0.5)
    stalled = threading.Event()

    def client(port):
        with _tls_client(f"127.0.0.1:{port}", str(certs.ca)) as tls:
            stalled.wait(TIMEOUT)
            return len(_read_to_end(tls))

    async def work(transport, protocol):
        transport.writelines([os.urandom(8 << 20)])
        started = time.monotonic()
        transport.close()
        await protocol.lost
        stalled.set()
        assert time.monotonic() - started < 5

    _, received = _serve_one(certs, client, lambda loop: Collect(loop, 0), work)
    assert received < 8 << 20


def test_a_client_reset_mid_write_reaches_the_protocol_as_an_error(certs):
    """A client that resets the connection while the broker still has megabytes to send:
    the failed write ends the connection, and connection_lost gets the error, not None."""
    def client(port):
        tls = _tls_client(f"127.0.0.1:{port}", str(certs.ca))
        time.sleep(0.3)
        tls.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        tls.close()  # RST: unread data in the receive buffer, linger 0

    async def work(transport, protocol):
        transport.writelines([os.urandom(8 << 20)])
        await protocol.lost

    protocol, _ = _serve_one(certs, client, lambda loop: Collect(loop, 0), work)
    assert isinstance(protocol.lost.result(), OSError), protocol.lost.result()
