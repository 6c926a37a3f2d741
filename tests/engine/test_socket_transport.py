"""The engine's transport (engine/socket_transport.py) against real peers: asyncio echo servers
over TCP and over TLS (Python's ssl module, OpenSSL on both sides). Megabytes go through in
parts the kernel takes bit by bit, so the backlog, pause / resume and TLS's WANT_WRITE retries
all run; what comes back must be what went out, in order."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl

import pytest
import trustme
from collect_protocol import Collect

from kipproducer.engine.connection import open_held_socket
from kipproducer.engine.socket_transport import HIGH_WATER_BYTES, SocketTransport, tls_handshake


@pytest.fixture(scope="module")
def tls_contexts() -> tuple[ssl.SSLContext, ssl.SSLContext]:
    ca = trustme.CA()
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.1").configure_cert(server)
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ca.configure_trust(client)
    return server, client


async def echo_server(server_tls: ssl.SSLContext | None) -> asyncio.Server:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
        writer.close()

    return await asyncio.start_server(echo, "127.0.0.1", 0, ssl=server_tls)


async def connect(port: int, client_tls: ssl.SSLContext | None) -> socket.socket:
    loop = asyncio.get_running_loop()
    sock = await open_held_socket(loop, "127.0.0.1", port)
    if client_tls is not None:
        sock = await tls_handshake(loop, sock, client_tls, "127.0.0.1")
    return sock


@pytest.mark.parametrize("tls", [False, True], ids=["tcp", "tls"])
def test_megabytes_of_scatter_lists_echo_back_in_order(tls, tls_contexts):
    payload = os.urandom(6 << 20)
    # a request's shape: a small head, a large view of a batch's bytes, a small tail; then
    # more, so later writes queue behind a backlog
    pieces = [payload[:61], memoryview(payload)[61:(3 << 20)], bytearray(payload[3 << 20:
                                                                                (3 << 20) + 5])]
    rest = [memoryview(payload)[(3 << 20) + 5:(5 << 20)], payload[5 << 20:]]

    async def main() -> Collect:
        loop = asyncio.get_running_loop()
        server = await echo_server(tls_contexts[0] if tls else None)
        port = server.sockets[0].getsockname()[1]
        sock = await connect(port, tls_contexts[1] if tls else None)
        assert isinstance(sock, ssl.SSLSocket) == tls
        got = Collect(loop, len(payload))
        transport = SocketTransport(loop, sock, got)
        transport.writelines(pieces)
        transport.writelines(rest)
        assert transport.get_write_buffer_size() > HIGH_WATER_BYTES and got.pauses == 1
        await asyncio.wait_for(got.done, 60)
        assert transport.get_write_buffer_size() == 0 and got.resumes == 1
        transport.close()
        assert await asyncio.wait_for(got.lost, 10) is None
        server.close()
        await server.wait_closed()
        return got

    got = asyncio.run(main())
    assert bytes(got.got) == payload


@pytest.mark.parametrize("tls", [False, True], ids=["tcp", "tls"])
def test_close_sends_the_backlog_and_lets_go_of_the_callers_buffers(tls, tls_contexts):
    """A closed connection's unsent bytes still go out (as with asyncio's transports), but
    as copies: the engine re-stamps a batch whose request failed, and a view would forbid it."""
    batch = bytearray(os.urandom(4 << 20))

    async def main() -> bytes:
        loop = asyncio.get_running_loop()
        received = bytearray()
        finished = loop.create_future()

        async def drain_slowly(reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
            await asyncio.sleep(0.2)  # the sender's backlog fills up first
            while data := await reader.read(1 << 16):
                received.extend(data)
            writer.close()
            finished.set_result(None)

        server = await asyncio.start_server(drain_slowly, "127.0.0.1", 0,
                                            ssl=tls_contexts[0] if tls else None)
        sock = await connect(server.sockets[0].getsockname()[1],
                             tls_contexts[1] if tls else None)
        got = Collect(loop, 0)
        transport = SocketTransport(loop, sock, got)
        transport.writelines([b"head", memoryview(batch)])
        assert transport.get_write_buffer_size() > 0  # the kernel did not take 4 MB at once
        transport.close()
        batch.extend(b"!")  # resizing needs no view of it left
        await asyncio.wait_for(finished, 60)
        assert await asyncio.wait_for(got.lost, 10) is None
        server.close()
        await server.wait_closed()
        return bytes(received)

    assert asyncio.run(main()) == b"head" + bytes(batch[:-1])


def test_a_reset_by_the_peer_is_reported_once_after_the_write():
    """A write into a reset connection: connection_lost gets the error on the next loop round
    (never inside writelines, whose caller is in the middle of sending), and later writes are
    dropped quietly."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        listener = socket.create_server(("127.0.0.1", 0))
        listener.setblocking(False)
        sock = await open_held_socket(loop, "127.0.0.1", listener.getsockname()[1])
        peer, _ = await loop.sock_accept(listener)
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        peer.close()  # linger 0: a reset
        listener.close()
        got = Collect(loop, 1)
        transport = SocketTransport(loop, sock, got)
        transport.writelines([b"x" * 100])  # the reset is known before the reader runs
        assert not got.lost.done()
        exc = await asyncio.wait_for(got.lost, 10)
        assert isinstance(exc, (ConnectionResetError, BrokenPipeError)), exc
        transport.writelines([b"more"])  # after the loss: nothing happens
        assert transport.is_closing()

    asyncio.run(main())
