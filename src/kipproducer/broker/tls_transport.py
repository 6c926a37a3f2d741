"""kip broker's own TLS transport: OpenSSL reads the socket and decrypts, the event loop only
says when (see src/_accel/tls_server.pyx for why it is faster than asyncio's).

It serves TLS listeners whose clients present no certificate and that keep Python's cipher
choice (``ssl.client.auth=none``, no ``ssl.cipher.suites``): security/tls.py builds its
:class:`~kipproducer._tls_server.ServerContext` beside the listener's ``ssl.SSLContext`` then,
and the listener hands accepted sockets here. It gives :class:`~.server.ClientLink` what
asyncio's transports give a buffered protocol: ``get_buffer`` / ``buffer_updated`` as bytes
arrive, ``eof_received`` and ``connection_lost``, ``pause_writing`` / ``resume_writing``
around a full output buffer, and ``pause_reading`` / ``resume_reading``, ``writelines``,
``close`` and ``abort`` for the protocol to call.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from .._tls_server import WANT_READ, ServerConnection, ServerContext

#: Output bytes above which the protocol is told to stop writing, and below which to go on
#: (asyncio's defaults for its own transports).
HIGH_WATER = 64 * 1024
LOW_WATER = 16 * 1024
#: How long close() waits for a client to take the buffered output before dropping it (a
#: client that stopped reading must not hold a socket forever).
CLOSE_TIMEOUT_S = 30.0


class TlsTransport(asyncio.Transport):
    """One accepted socket's TLS session, handshake first (:meth:`handshake`)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket,
                 context: ServerContext, protocol: asyncio.BufferedProtocol) -> None:
        super().__init__()
        self._loop = loop
        self._sock = sock
        self._protocol = protocol
        sock.setblocking(False)
        self._fd = sock.fileno()
        self._tls = ServerConnection(context, self._fd)
        self._handshaken: asyncio.Future[None] = loop.create_future()
        self._reading = False  # the loop watches the socket for input
        self._read_paused = False  # the protocol asked for no more input for now
        self._closing = False
        self._failed = False  # a read or write failed: connection_lost gets the error
        self._lost = False
        self._out = bytearray()  # encrypted and sent from the front
        self._watching_output = False
        self._write_paused = False  # the protocol was told pause_writing()
        self._close_timer: asyncio.TimerHandle | None = None  # close()'s deadline for output

    # -- the handshake ------------------------------------------------------------------------

    async def handshake(self) -> None:
        """Complete the TLS handshake, then start the protocol (connection_made) and reading.
        Raises what the handshake failed with; the caller closes the socket then."""
        self._step_handshake()
        try:
            await self._handshaken
        finally:
            self._loop.remove_reader(self._fd)
            self._loop.remove_writer(self._fd)
        self._protocol.connection_made(self)
        self._start_reading()

    def _step_handshake(self) -> None:
        self._loop.remove_reader(self._fd)
        self._loop.remove_writer(self._fd)
        if self._handshaken.done():
            return
        try:
            wanted = self._tls.handshake()
        except OSError as exc:
            self._handshaken.set_exception(exc)
            return
        if wanted == 0:
            self._handshaken.set_result(None)
        elif wanted == WANT_READ:
            self._loop.add_reader(self._fd, self._step_handshake)
        else:
            self._loop.add_writer(self._fd, self._step_handshake)

    # -- input --------------------------------------------------------------------------------

    def _start_reading(self) -> None:
        if self._reading or self._read_paused or self._closing:
            return
        self._reading = True
        self._loop.add_reader(self._fd, self._read_ready)
        # OpenSSL may hold bytes it read ahead (during the handshake, or before a pause):
        # the socket will not say they are there.
        self._loop.call_soon(self._read_ready)

    def _stop_reading(self) -> None:
        if self._reading:
            self._reading = False
            self._loop.remove_reader(self._fd)

    def _read_ready(self) -> None:
        protocol = self._protocol
        while self._reading and not self._closing:
            try:
                count = self._tls.read_into(protocol.get_buffer(-1))
            except OSError as exc:
                self._fail(exc)
                return
            if count > 0:
                protocol.buffer_updated(count)
                continue
            if count < 0:  # the client closed its side (close_notify or end of stream)
                self._stop_reading()
                if not protocol.eof_received():
                    self.close()
            return

    def pause_reading(self) -> None:
        self._read_paused = True
        self._stop_reading()

    def resume_reading(self) -> None:
        if self._read_paused:
            self._read_paused = False
            self._start_reading()

    def is_reading(self) -> bool:
        return self._reading

    # -- output -------------------------------------------------------------------------------

    def write(self, data: Any) -> None:
        self.writelines([data])

    def writelines(self, list_of_data: Any) -> None:
        if self._closing:
            return
        for part in list_of_data:
            self._out += part
        self._flush()
        if not self._write_paused and len(self._out) > HIGH_WATER:
            self._write_paused = True
            self._protocol.pause_writing()

    def _flush(self) -> None:
        sent = 0
        out = self._out
        try:
            with memoryview(out) as view:
                while sent < len(out):
                    count = self._tls.write(view[sent:])
                    if count == 0:
                        break
                    sent += count
        except OSError as exc:
            self._fail(exc)
            return
        if sent:
            del out[:sent]
        if out and not self._watching_output:
            self._watching_output = True
            self._loop.add_writer(self._fd, self._write_ready)
        elif not out and self._watching_output:
            self._watching_output = False
            self._loop.remove_writer(self._fd)

    def _write_ready(self) -> None:
        self._flush()
        if self._lost or self._failed:
            return
        if self._write_paused and len(self._out) <= LOW_WATER:
            self._write_paused = False
            self._protocol.resume_writing()
        if self._closing and not self._out:
            self._finish(None)

    def get_write_buffer_size(self) -> int:
        return len(self._out)

    def can_write_eof(self) -> bool:
        return False  # TLS cannot half-close

    # -- the end ------------------------------------------------------------------------------

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        """Send what is buffered, then close_notify, then close the socket."""
        if self._closing:
            return
        self._closing = True
        self._stop_reading()
        if not self._out:
            self._loop.call_soon(self._finish, None)
        else:
            self._close_timer = self._loop.call_later(CLOSE_TIMEOUT_S, self._finish, None,
                                                      False)

    def abort(self) -> None:
        """Close at once: buffered output dropped, no close_notify."""
        self._closing = True
        self._stop_reading()
        self._out.clear()
        self._loop.call_soon(self._finish, None, False)

    def _fail(self, exc: BaseException) -> None:
        self._failed = True
        self._closing = True
        self._stop_reading()
        self._out.clear()
        self._loop.call_soon(self._finish, exc, False)

    def _finish(self, exc: BaseException | None, notify: bool = True) -> None:
        if self._lost:
            return
        self._lost = True
        if self._close_timer is not None:  # the output went out in time: drop the deadline
            self._close_timer.cancel()
        if self._watching_output:
            self._watching_output = False
            self._loop.remove_writer(self._fd)
        if notify:
            self._tls.shutdown()
        try:
            self._protocol.connection_lost(exc)
        finally:
            self._sock.close()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "socket":
            return self._sock
        if name == "peername":
            try:
                return self._sock.getpeername()
            except OSError:
                return default
        if name == "peercert":
            return None  # these listeners ask for no client certificate
        return default
