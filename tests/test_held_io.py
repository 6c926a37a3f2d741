"""Socket calls that keep the GIL (kipproducer._held_io) and the engine's HeldSocket: the same
results and errors as the socket module's own methods."""

import asyncio
import os
import socket

import pytest

from kipproducer import _held_io as held_io
from kipproducer.engine.connection import HeldSocket, open_held_socket


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    yield a, b
    a.close()
    b.close()


def test_send_and_recv_into(pair):
    a, b = pair
    assert held_io.send(a.fileno(), b"hello") == 5
    assert held_io.send(a.fileno(), memoryview(b"--world--")[2:7]) == 5
    buf = bytearray(64)
    assert held_io.recv_into(b.fileno(), buf) == 10
    assert bytes(buf[:10]) == b"helloworld"
    held_io.send(a.fileno(), b"abcdef")
    assert held_io.recv_into(b.fileno(), buf, 4) == 4  # nbytes bounds the read
    assert bytes(buf[:4]) == b"abcd"
    assert b.recv(10) == b"ef"


def test_sendmsg_writes_the_buffers_in_order(pair):
    a, b = pair
    parts = [b"ab", bytearray(b"cd"), memoryview(b"ef"), b""]
    assert held_io.sendmsg(a.fileno(), parts) == 6
    assert held_io.sendmsg(a.fileno(), []) == 0
    assert b.recv(16) == b"abcdef"


def test_errors_are_the_socket_modules(pair):
    a, b = pair
    buf = bytearray(8)
    with pytest.raises(BlockingIOError):  # nothing to read on a non-blocking socket
        held_io.recv_into(b.fileno(), buf)
    with pytest.raises(ValueError):
        held_io.recv_into(b.fileno(), buf, 9)
    with pytest.raises(TypeError):
        held_io.recv_into(b.fileno(), b"read-only")
    chunk = os.urandom(1 << 16)
    with pytest.raises(BlockingIOError):  # the socket buffer fills up: EAGAIN, as send() says
        for _ in range(10_000):
            held_io.send(a.fileno(), chunk)
    a.close()
    drained = 0
    while True:
        try:
            n = held_io.recv_into(b.fileno(), bytearray(1 << 16))
        except BlockingIOError:
            continue
        if n == 0:
            break  # the end of the stream
        drained += n
    assert drained > 0
    c, d = socket.socketpair()
    d.close()
    with pytest.raises((BrokenPipeError, ConnectionResetError)):  # EPIPE, no SIGPIPE
        held_io.send(c.fileno(), b"x" * 100)
    with pytest.raises(OSError):
        held_io.send(-1, b"x")
    c.close()


def test_held_socket_methods_match_the_plain_ones():
    a, b = socket.socketpair()
    held = HeldSocket(fileno=a.detach())
    try:
        assert held.send(b"one") == 3
        assert held.sendmsg([b"two", b"three"]) == 8
        assert b.recv(32) == b"onetwothree"
        b.send(b"back")
        buf = bytearray(8)
        assert held.recv_into(buf) == 4 and bytes(buf[:4]) == b"back"
        assert held.send(b"flags", socket.MSG_DONTWAIT) == 5  # flags: the socket's own call
        assert b.recv(8) == b"flags"
    finally:
        held.close()
        b.close()


def test_asyncio_transport_over_held_socket_moves_megabytes():
    """asyncio's transport on a HeldSocket: large writes that the kernel takes in parts
    (EAGAIN, pause and resume writing) and reads into a buffered protocol, echoed back."""
    payload = os.urandom(6 << 20)

    async def main():
        loop = asyncio.get_running_loop()

        async def echo(reader, writer):
            while data := await reader.read(1 << 16):
                writer.write(data)
                await writer.drain()
            writer.close()

        server = await asyncio.start_server(echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        sock = await open_held_socket(loop, "127.0.0.1", port)
        assert type(sock) is HeldSocket
        got = bytearray()
        done = loop.create_future()

        class Collect(asyncio.BufferedProtocol):
            def __init__(self):
                self.buf = bytearray(1 << 16)

            def get_buffer(self, sizehint):
                return self.buf

            def buffer_updated(self, nbytes):
                got.extend(self.buf[:nbytes])
                if len(got) >= len(payload) and not done.done():
                    done.set_result(None)

        transport, _ = await loop.create_connection(Collect, sock=sock)
        transport.writelines([payload[: 1 << 20], memoryview(payload)[1 << 20:]])
        await asyncio.wait_for(done, 60)
        transport.close()
        server.close()
        await server.wait_closed()
        return bytes(got)

    assert asyncio.run(main()) == payload


def test_open_held_socket_refused():
    async def main():
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()  # nothing listens there now
        await open_held_socket(asyncio.get_running_loop(), "127.0.0.1", port)

    with pytest.raises(ConnectionRefusedError):
        asyncio.run(main())
