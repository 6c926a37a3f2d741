"""A buffered protocol for transport tests (the engine's and the broker's): keeps every byte
received, counts write pauses and resumes, and says how the connection ended."""

from __future__ import annotations

import asyncio


class Collect(asyncio.BufferedProtocol):
    """``expect``: bytes after which ``done`` resolves. ``chunk``: the receive buffer's size;
    with ``stutter`` the protocol pauses reading after each receive and resumes on the next
    loop turn (what a protocol with a full queue does)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, expect: int, chunk: int = 1 << 16,
                 stutter: bool = False) -> None:
        self.loop = loop
        self.buf = bytearray(chunk)
        self.got = bytearray()
        self.expect = expect
        self.stutter = stutter
        self.done = loop.create_future()
        self.lost = loop.create_future()
        self.pauses = self.resumes = 0
        self.eof = False
        self.transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        return memoryview(self.buf)

    def buffer_updated(self, nbytes: int) -> None:
        self.got += self.buf[:nbytes]
        if len(self.got) >= self.expect and not self.done.done():
            self.done.set_result(None)
        elif self.stutter and isinstance(self.transport, asyncio.ReadTransport):
            self.transport.pause_reading()
            self.loop.call_soon(self.transport.resume_reading)

    def pause_writing(self) -> None:
        self.pauses += 1

    def resume_writing(self) -> None:
        self.resumes += 1

    def eof_received(self) -> bool:
        self.eof = True
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(exc)
