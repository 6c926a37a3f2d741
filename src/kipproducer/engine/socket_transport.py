"""The engine's connection transport: a request's buffers go from the batches to the socket
with no copy in Python, over TLS or not.

asyncio's own transports copy every request at least twice on its way out. Without TLS,
Python 3.11's ``writelines`` joins the buffers into one bytes object, and what the kernel does
not take at once is sliced off (a copy) and appended to the transport's buffer (another).
With TLS, its SSL protocol encrypts into a memory BIO (OpenSSL zero-fills and copies each
record into it), reads the BIO out as a new bytes object, then hands that to the socket
transport above. Measured on the engine's sender thread over TLS: memmove 14% and memset 5%
of its CPU, beside 21% for the encryption itself.

This transport writes the buffers themselves: ``sendmsg`` of the whole scatter list without
TLS, and ``SSLSocket.send`` of each buffer with it (OpenSSL encrypts a record at a time from
the buffer and writes it to the socket; nothing is copied in Python, nothing goes through a
memory BIO). A buffer the kernel did not take whole stays in a backlog, as a view, and is
written when the socket is writable again; the protocol is paused above the backlog's high
water mark, as asyncio's transports do. Reading hands the protocol's buffer to ``recv_into``
(``SSLSocket.recv_into`` with TLS: OpenSSL decrypts into it).

Only what the engine's connections use is here: a :class:`asyncio.BufferedProtocol`,
``writelines``, ``close`` / ``abort`` and ``get_extra_info``.
"""

from __future__ import annotations

import asyncio
import collections
import socket
import ssl
from collections.abc import Iterable
from typing import Any

#: Pause the protocol above this many unsent bytes, resume at a quarter of it (asyncio's
#: transports use the same default).
HIGH_WATER_BYTES = 64 * 1024

#: At most this many reads per readiness event: TLS may hold decrypted bytes the socket no
#: longer signals, so reading goes on until OpenSSL wants more; the cap keeps one busy
#: connection from starving the event loop (the rest is read on the next loop round).
MAX_READS_PER_EVENT = 16


def _nbytes(data: Any) -> int:
    """Bytes in a buffer the transport holds: bytes, bytearray, or any other buffer (a
    batch's bytes, a view of the part of a buffer not sent yet)."""
    return len(data) if isinstance(data, (bytes, bytearray)) else memoryview(data).nbytes


async def wait_fd(loop: asyncio.AbstractEventLoop, fd: int, *, writable: bool) -> None:
    """Returns when ``fd`` is readable (or writable)."""
    ready = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    add, remove = ((loop.add_writer, loop.remove_writer) if writable
                   else (loop.add_reader, loop.remove_reader))
    add(fd, wake)
    try:
        await ready
    finally:
        remove(fd)


async def tls_handshake(loop: asyncio.AbstractEventLoop, sock: socket.socket,
                        context: ssl.SSLContext, server_hostname: str | None) -> ssl.SSLSocket:
    """``sock`` (connected, non-blocking) wrapped in TLS, the handshake done. Raises what the
    handshake raises (ssl.SSLError, a certificate error among them; OSError when the peer
    closes or resets); ``sock`` is closed then. The caller bounds the time."""
    tls = context.wrap_socket(sock, server_hostname=server_hostname,
                              do_handshake_on_connect=False)
    try:
        while True:
            try:
                tls.do_handshake()
                return tls
            except ssl.SSLWantReadError:
                await wait_fd(loop, tls.fileno(), writable=False)
            except ssl.SSLWantWriteError:
                await wait_fd(loop, tls.fileno(), writable=True)
    except BaseException:
        tls.close()
        raise


class SocketTransport(asyncio.Transport):
    """A connected non-blocking socket (a plain one or an :class:`ssl.SSLSocket` whose
    handshake is done) driven by the event loop for a :class:`asyncio.BufferedProtocol`."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket,
                 protocol: asyncio.BufferedProtocol) -> None:
        super().__init__({"socket": sock})
        self._loop = loop
        self._sock = sock
        self._fd = sock.fileno()
        self._protocol = protocol
        self._tls = isinstance(sock, ssl.SSLSocket)
        self._scatter = hasattr(sock, "sendmsg")  # not on Windows: one buffer per send there
        # Unsent buffers in order; the first may be a view of the rest of a buffer that went
        # out in part (with TLS OpenSSL wants the same buffer again after WANT_WRITE, so
        # there it is the whole buffer: OpenSSL knows how much of it it wrote).
        self._backlog: collections.deque[Any] = collections.deque()
        self._backlog_bytes = 0
        self._writer_added = False
        self._write_wants_read = False  # TLS renegotiation: the write waits for a read
        self._paused = False
        self._closing = False  # close(): no more writes, the backlog is flushed, then closed
        self._lost = False
        protocol.connection_made(self)
        loop.add_reader(self._fd, self._read_ready)

    # ---- asyncio.Transport ----

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "ssl_object" and self._tls:
            return self._sock
        return super().get_extra_info(name, default)

    def is_closing(self) -> bool:
        return self._closing or self._lost

    def get_write_buffer_size(self) -> int:
        return self._backlog_bytes

    def write(self, data: Any) -> None:
        self.writelines((data,))

    def writelines(self, list_of_data: Iterable[Any]) -> None:
        if self._closing or self._lost:
            return  # the connection already failed or is closing; its waiters hear of it
        backlog = self._backlog
        for data in list_of_data:
            size = _nbytes(data)
            if size:
                backlog.append(data)
                self._backlog_bytes += size
        if not self._writer_added and not self._write_wants_read:
            self._flush()
        if self._backlog_bytes > HIGH_WATER_BYTES and not self._paused and not self._lost:
            self._paused = True
            self._protocol.pause_writing()

    def close(self) -> None:
        """Stop reading; what is still unsent goes out first (as asyncio's close), then the
        socket is closed and the protocol told."""
        if self._closing or self._lost:
            return
        self._closing = True
        self._loop.remove_reader(self._fd)
        if not self._backlog:
            self._connection_lost(None)
            return
        # The backlog may view a batch's bytes, and the engine re-stamps a batch for a new
        # producer id after a connection fails: views of it must not outlive this call.
        self._backlog = collections.deque(bytes(data) for data in self._backlog)

    def abort(self) -> None:
        self._connection_lost(None)

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        raise NotImplementedError("the engine's transport has fixed limits")

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return HIGH_WATER_BYTES // 4, HIGH_WATER_BYTES

    def pause_reading(self) -> None:
        raise NotImplementedError("the engine's transport always reads")

    def resume_reading(self) -> None:
        raise NotImplementedError("the engine's transport always reads")

    def is_reading(self) -> bool:
        return not (self._closing or self._lost)

    # ---- writing ----

    def _flush(self) -> None:
        """Write what the socket takes now; wait for writability if something is left."""
        try:
            if self._tls:
                self._send_tls()
            else:
                self._send_plain()
        except (BlockingIOError, InterruptedError, ssl.SSLWantWriteError):
            pass
        except ssl.SSLWantReadError:
            # TLS 1.2 renegotiation: the write goes on once the peer's message is read.
            self._write_wants_read = True
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
            self._connection_lost(exc)
            return
        if self._backlog and not self._write_wants_read:
            if not self._writer_added:
                self._loop.add_writer(self._fd, self._write_ready)
                self._writer_added = True
        elif self._writer_added:
            self._loop.remove_writer(self._fd)
            self._writer_added = False

    def _send_plain(self) -> None:
        backlog = self._backlog
        sock = self._sock
        while backlog:
            sent = (sock.sendmsg(backlog) if self._scatter and len(backlog) > 1
                    else sock.send(backlog[0]))
            self._backlog_bytes -= sent
            while sent:
                first = backlog[0]
                size = _nbytes(first)
                if sent < size:
                    backlog[0] = memoryview(first).cast("B")[sent:]
                    return  # the kernel's buffer is full
                backlog.popleft()
                sent -= size

    def _send_tls(self) -> None:
        backlog = self._backlog
        sock = self._sock
        while backlog:
            first = backlog[0]
            sent = sock.send(first)  # type: ignore[arg-type]
            size = _nbytes(first)
            self._backlog_bytes -= sent
            if sent < size:
                backlog[0] = memoryview(first).cast("B")[sent:]
            else:
                backlog.popleft()

    def _write_ready(self) -> None:
        if self._lost:
            return
        self._flush()
        if self._lost:
            return
        if self._paused and self._backlog_bytes <= HIGH_WATER_BYTES // 4:
            self._paused = False
            self._protocol.resume_writing()  # may write again, at once
        if self._closing and not self._backlog:
            self._connection_lost(None)

    # ---- reading ----

    def _read_ready(self) -> None:
        protocol = self._protocol
        try:
            for _ in range(MAX_READS_PER_EVENT):
                if self._lost or self._closing:
                    return
                buffer = protocol.get_buffer(-1)
                try:
                    count = self._sock.recv_into(buffer)
                except (BlockingIOError, InterruptedError, ssl.SSLWantReadError):
                    break
                except ssl.SSLWantWriteError:
                    break  # renegotiation: our next write or readiness carries it on
                if count == 0:
                    self._eof()
                    return
                protocol.buffer_updated(count)
                if not self._tls:
                    break  # the socket signals again if more is there
            else:
                if self._tls and self._sock.pending():  # type: ignore[attr-defined]
                    self._loop.call_soon(self._read_ready)
        except (OSError, ValueError) as exc:
            self._connection_lost(exc)
            return
        if self._write_wants_read and not self._lost:
            self._write_wants_read = False
            self._flush()

    def _eof(self) -> None:
        keep_open = self._protocol.eof_received()
        if not keep_open:
            self._connection_lost(None)

    # ---- closing ----

    def _connection_lost(self, exc: BaseException | None) -> None:
        """Close the socket now; the protocol hears of it on the next loop round (as from
        asyncio's transports: never inside a write or a read callback)."""
        if self._lost:
            return
        self._lost = True
        self._backlog.clear()
        self._backlog_bytes = 0
        loop = self._loop
        if not loop.is_closed():
            loop.remove_reader(self._fd)
            if self._writer_added:
                loop.remove_writer(self._fd)
        self._writer_added = False
        if self._tls and exc is None:
            try:  # close_notify, as a TLS peer expects; its answer is not waited for
                self._sock.unwrap()  # type: ignore[attr-defined]
            except (OSError, ValueError):
                pass
        self._sock.close()
        if not loop.is_closed():
            loop.call_soon(self._protocol.connection_lost, exc)
