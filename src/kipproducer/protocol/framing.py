"""Frames and headers: what a broker and a client put around payloads.

A Kafka message on the socket is ``int32 size`` + header + body. Requests carry header
v1 (api_key, api_version, correlation_id, legacy nullable client_id) or v2 (the same +
a tag buffer) depending on whether the body's version is flexible; responses carry
header v0 (correlation_id) or v1 (+ tag buffer), and every ApiVersions response uses
v0 (KIP-511). The header version always follows the payload class's
``__header_schema__`` as kio generated it.

"Frame" below means the bytes after the size prefix (what :func:`read_frame` returns).
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any, Final, NamedTuple

from .._records import extend_receive_buffer, receive_buffer
from . import wire
from .api_keys import API_VERSIONS, PRODUCE
from .decoder import decoder_for
from .encoder import assemble_parts, encode_into
from .errors import ProtocolError
from .schemas import request_class, request_header_version, response_class

DEFAULT_MAX_FRAME_BYTES: Final = 104_857_600
"""Kafka's ``socket.request.max.bytes`` default."""

_HEADER_PREFIX = struct.Struct(">hhih")  # api_key, version, correlation, len
_INT32 = wire.INT32
_MAX_FRAME_SIZE: Final = 2**31 - 1


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    header_version: int
    """1 or 2 (2 = flexible, with a tag buffer)."""


class Request(NamedTuple):
    header: RequestHeader
    body: Any


class Response(NamedTuple):
    correlation_id: int
    body: Any


# -- reading frames --------------------------------------------------------------------


def frame_size(prefix: bytes, max_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> int:
    """The size announced by a 4-byte prefix, refused if negative or above ``max_bytes``
    (checked before anything is allocated for the frame)."""
    if len(prefix) != 4:
        raise ProtocolError(f"frame size prefix must be 4 bytes, got {len(prefix)}")
    (size,) = _INT32.unpack(prefix)
    if size < 0:
        raise ProtocolError(f"negative frame size {size}")
    if size > max_bytes:
        raise ProtocolError(
            f"frame of {size} bytes exceeds the maximum of {max_bytes} (socket.request.max.bytes)"
        )
    return size


async def read_frame(
    reader: asyncio.StreamReader, max_bytes: int = DEFAULT_MAX_FRAME_BYTES
) -> bytes | None:
    """Read one size-prefixed frame; None on a clean end of stream before a frame.

    :raises ProtocolError: bad size, or the stream ended inside a frame.
    """
    try:
        prefix = await reader.readexactly(4)
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            return None
        raise ProtocolError("stream ended inside a frame size prefix") from None
    size = frame_size(prefix, max_bytes)
    try:
        return await reader.readexactly(size)
    except asyncio.IncompleteReadError as exc:
        raise ProtocolError(
            f"stream ended after {len(exc.partial)} of {size} frame bytes"
        ) from None


class FrameTooLarge(ProtocolError):
    """A size prefix outside 0..limit; nothing was allocated for the frame."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame size {size} outside 0..{limit}")
        self.size = size
        self.limit = limit


class FrameReceiver:
    """Cuts a byte stream into frames with as few copies as the sizes allow.

    Made for ``asyncio.BufferedProtocol``: :meth:`get_buffer` says where the socket's next bytes
    go, :meth:`received` takes how many came and returns the frames they completed. Small
    frames are read, several per receive, into a scratch buffer and copied out; a frame larger
    than the scratch buffer gets its own ``bytearray`` and the socket writes the rest of it
    there directly (one receive per frame, no copy of its bulk). Every frame is a fresh
    ``bytearray``: writable, so the produce path can stamp offsets into it in place.

    Memory follows the bytes that arrived, not the bytes announced or the connections open
    (a broker may hold thousands of idle connections): the scratch buffer is borrowed from a
    shared pool while unparsed bytes are in it and handed back as soon as it is empty, and a
    large frame's buffer holds at most GROWTH times the bytes of it that arrived (at least the
    scratch size, at most the frame), so a client that announces 100 MB and sends 10 bytes
    costs 64 KiB. GROWTH is large so that a frame that arrives at full speed is allocated once
    or twice: growing a buffer in small steps costs more than receiving into it (measured: a
    1 MB frame took 1.2 ms doubling from 64 KiB, 90 us allocated whole). A large frame's buffer
    is not zero-filled (the socket writes every byte before the frame is handed out) and grows
    in place (realloc, which remaps a large buffer instead of copying it): zero-filling 1 MB
    took 24-49 us, allocating it unset under 1 us (a broker takes ~120 such frames per million
    100-byte records).

    ``max_bytes`` is checked on each size prefix before anything is allocated for the frame
    (:class:`FrameTooLarge`); it may change between frames (a tighter limit before SASL
    authentication). :meth:`feed` does the same for code that already holds the bytes.
    """

    SCRATCH_BYTES: Final = 64 * 1024
    GROWTH: Final = 16
    #: Free scratch buffers kept for the next receive (one event loop rarely needs more).
    POOL_SIZE: Final = 32
    _pool: list[bytearray] = []  # shared by every receiver of the process

    def __init__(self, max_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self.max_bytes = max_bytes
        self._scratch: bytearray | None = None  # borrowed while it holds unparsed bytes
        self._start = 0  # unparsed bytes are _scratch[_start:_end]
        self._end = 0
        self._body: bytearray | None = None  # a large frame being received in place
        self._size = 0  # the large frame's announced size; len(_body) grows up to it
        self._filled = 0

    @property
    def partial(self) -> int:
        """Bytes of an unfinished frame (size prefix included) held so far; 0 between frames."""
        if self._body is not None:
            return 4 + self._filled
        return self._end - self._start

    @property
    def partial_size(self) -> int | None:
        """The announced size of the unfinished frame, when its prefix has arrived."""
        if self._body is not None:
            return self._size
        if self._scratch is not None and self._end - self._start >= 4:
            return _INT32.unpack_from(self._scratch, self._start)[0]
        return None

    def get_buffer(self) -> memoryview:
        if self._body is not None:
            if self._filled == len(self._body):
                self._grow_body()
            return memoryview(self._body)[self._filled :]
        scratch = self._scratch
        if scratch is None:
            try:  # pop() alone: another thread's receiver may share the pool
                scratch = FrameReceiver._pool.pop()
            except IndexError:
                scratch = bytearray(self.SCRATCH_BYTES)
            self._scratch = scratch
        if self._end == len(scratch) or (self._start and len(scratch) - self._end < 4096):
            # Move the unparsed tail to the front to make room.
            tail = self._end - self._start
            scratch[:tail] = scratch[self._start : self._end]
            self._start, self._end = 0, tail
        return memoryview(scratch)[self._end :]

    def _grow_body(self) -> None:
        body = self._body
        assert body is not None
        size = min(self._size, self.GROWTH * self._filled)
        try:
            extend_receive_buffer(body, size)
        except BufferError:  # a view of the old buffer is still alive: grow by copying
            grown = receive_buffer(size)
            grown[: self._filled] = memoryview(body)[: self._filled]
            self._body = grown

    def received(self, count: int) -> list[bytearray]:
        if self._body is not None:
            self._filled += count
            if self._filled < self._size:
                return []
            frame, self._body = self._body, None
            return [frame]
        self._end += count
        return self._cut()

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytearray]:
        """Take bytes already received; the frames they complete (maybe none)."""
        frames: list[bytearray] = []
        view = memoryview(data).cast("B")
        while len(view):
            target = self.get_buffer()
            count = min(len(target), len(view))
            target[:count] = view[:count]
            view = view[count:]
            frames += self.received(count)
        return frames

    def _cut(self) -> list[bytearray]:
        frames: list[bytearray] = []
        scratch = self._scratch
        assert scratch is not None
        start, end = self._start, self._end
        while end - start >= 4:
            (size,) = _INT32.unpack_from(scratch, start)
            if size < 0 or size > self.max_bytes:
                self._start = start
                raise FrameTooLarge(size, self.max_bytes)
            have = end - start - 4
            if have >= size:
                frames.append(scratch[start + 4 : start + 4 + size])
                start += 4 + size
                continue
            if 4 + size > len(scratch):
                # Too big for the scratch buffer: its own buffer, filled in place from now on,
                # allocated as the bytes come (see the class docstring).
                body = receive_buffer(min(size, max(self.SCRATCH_BYTES, self.GROWTH * have)))
                body[:have] = memoryview(scratch)[start + 4 : end]  # one copy, not two
                self._body, self._size, self._filled = body, size, have
                start = end
            break
        if start == end:
            start = end = 0
            self._scratch = None  # empty: back to the pool for whoever receives next
            if len(FrameReceiver._pool) < self.POOL_SIZE:
                FrameReceiver._pool.append(scratch)
        self._start, self._end = start, end
        return frames


# -- broker side: requests in, responses out -------------------------------------------


_header_versions: dict[tuple[int, int], int] = {}
_HEADER_VERSION_CACHE_LIMIT: Final = 4096
_new_tuple = tuple.__new__


def parse_request_header(frame: Any) -> tuple[RequestHeader, int]:
    """Parse the request header; return it and the offset of the body.

    The header version comes from the body's (api_key, api_version): see
    ``schemas.request_header_version``. Unknown tagged fields are skipped.
    """
    try:
        api_key, version, correlation_id, length = _HEADER_PREFIX.unpack_from(frame, 0)
    except (struct.error, TypeError):  # short, or not a buffer at all
        raise ProtocolError(f"request header truncated ({len(frame)} bytes)") from None
    pos = 10
    if length < 0:
        if length != -1:
            raise ProtocolError(f"request header: negative client_id length {length}")
        client_id = None
    else:
        stop = pos + length
        if stop > len(frame):
            raise ProtocolError(
                f"request header: client_id length {length} exceeds the frame"
            )
        try:
            client_id = str(frame[pos:stop], "utf-8")
        except UnicodeDecodeError:
            raise ProtocolError("request header: client_id is not UTF-8") from None
        pos = stop
    key = (api_key, version)
    header_version = _header_versions.get(key)
    if header_version is None:
        header_version = request_header_version(api_key, version)
        if len(_header_versions) < _HEADER_VERSION_CACHE_LIMIT:  # peers choose the keys
            _header_versions[key] = header_version
    # tuple.__new__ directly: a NamedTuple's own __new__ is a Python-level wrapper.
    header: RequestHeader = _new_tuple(
        RequestHeader, (api_key, version, correlation_id, client_id, header_version)
    )
    if header_version >= 2:
        if len(frame) > pos and frame[pos] == 0:
            pos += 1
        else:
            pos = _skip_tag_buffer(frame, pos, "request header", header)
    return header, pos


def _skip_tag_buffer(frame: Any, pos: int, owner: str, header: Any = None) -> int:
    try:
        if frame[pos] == 0:
            return pos + 1
        return wire.read_tagged_fields(frame, pos, len(frame), {}, owner)[1]
    except IndexError:
        raise ProtocolError(f"{owner} truncated in its tag buffer", header=header) from None
    except ProtocolError as exc:
        exc.header = header
        raise


def decode_request_body(header: RequestHeader, frame: Any, offset: int) -> Any:
    """Decode the body that follows a parsed header. Trailing bytes are ignored
    (librdkafka's Metadata v9-13 "all topics" requests carry some)."""
    try:
        cls = request_class(header.api_key, header.api_version)
        body, _ = decoder_for(cls)(frame, offset, len(frame))
    except ProtocolError as exc:
        exc.header = header
        raise
    return body


def decode_request(frame: Any) -> Request:
    """Header + body of a request frame.

    :raises ProtocolError: with ``.header`` set whenever the header itself parsed, so
        the caller can still answer (e.g. ApiVersions at an unsupported version).
    """
    header, offset = parse_request_header(frame)
    return Request(header, decode_request_body(header, frame, offset))


def _response_header(buf: bytearray, correlation_id: int, payload_class: type) -> None:
    buf += _INT32.pack(correlation_id)
    if payload_class.__header_schema__.__version__ >= 1:  # type: ignore[attr-defined]
        buf.append(0)  # empty header tag buffer


def _finish_frame(buf: bytearray, spills: list[tuple[int, Any]] | None) -> None:
    size = len(buf) - 4
    if spills:
        size += sum(len(blob) for _, blob in spills)
    if size > _MAX_FRAME_SIZE:
        raise ProtocolError(f"frame of {size} bytes is too large for an int32 size")
    _INT32.pack_into(buf, 0, size)


def encode_response_frame(correlation_id: int, payload: Any) -> bytearray:
    """Size + response header + body, as one buffer. The (api_key, version) and the
    header version come from the payload's class."""
    buf = bytearray(4)
    _response_header(buf, correlation_id, type(payload))
    encode_into(buf, payload)
    _finish_frame(buf, None)
    return buf


def encode_response_frame_parts(correlation_id: int, payload: Any) -> list[Any]:
    """Like :func:`encode_response_frame`, as a list of buffers for ``writelines`` /
    ``sendmsg`` in which large records fields are the caller's own objects (no copy)."""
    buf = bytearray(4)
    spills: list[tuple[int, Any]] = []
    _response_header(buf, correlation_id, type(payload))
    encode_into(buf, payload, spills)
    _finish_frame(buf, spills)
    return assemble_parts(buf, spills)


def expects_response(request: Any) -> bool:
    """False only for a ProduceRequest with acks=0, which Kafka never answers."""
    return not (type(request).__api_key__ == PRODUCE and request.acks == 0)


# -- client side: requests out, responses in -------------------------------------------


def _request_header(
    buf: bytearray, correlation_id: int, client_id: str | None, payload_class: type
) -> None:
    buf += _HEADER_PREFIX.pack(
        payload_class.__api_key__,  # type: ignore[attr-defined]
        payload_class.__version__,  # type: ignore[attr-defined]
        correlation_id,
        -1 if client_id is None else 0,
    )
    if client_id is not None:
        encoded = client_id.encode()
        if len(encoded) > 2**15 - 1:
            raise ProtocolError("client_id is too long for its int16 length")
        wire.INT16.pack_into(buf, len(buf) - 2, len(encoded))
        buf += encoded
    if payload_class.__header_schema__.__version__ >= 2:  # type: ignore[attr-defined]
        buf.append(0)


def encode_request_frame(correlation_id: int, client_id: str | None, payload: Any) -> bytearray:
    """Size + request header (v1 or v2 as the payload class says) + body."""
    buf = bytearray(4)
    _request_header(buf, correlation_id, client_id, type(payload))
    encode_into(buf, payload)
    _finish_frame(buf, None)
    return buf


def encode_request_frame_parts(
    correlation_id: int, client_id: str | None, payload: Any
) -> list[Any]:
    """Like :func:`encode_request_frame`, with large records passed through uncopied."""
    buf = bytearray(4)
    spills: list[tuple[int, Any]] = []
    _request_header(buf, correlation_id, client_id, type(payload))
    encode_into(buf, payload, spills)
    _finish_frame(buf, spills)
    return assemble_parts(buf, spills)


def peek_correlation_id(frame: Any) -> int:
    """The correlation id of a response frame, to find which request it answers."""
    if len(frame) < 4:
        raise ProtocolError(f"response frame of {len(frame)} bytes has no correlation id")
    return int(_INT32.unpack_from(frame, 0)[0])


def decode_response(frame: Any, api_key: int, api_version: int) -> Response:
    """Decode a response to a request sent as (api_key, api_version).

    An ApiVersions response that does not parse at the requested version is read as v0:
    that is how a broker answers a version it does not support (KIP-511).
    """
    correlation_id = peek_correlation_id(frame)
    cls = response_class(api_key, api_version)
    pos = 4
    if cls.__header_schema__.__version__ >= 1:  # type: ignore[attr-defined]
        pos = _skip_tag_buffer(frame, pos, "response header")
    try:
        body, _ = decoder_for(cls)(frame, pos, len(frame))
    except ProtocolError:
        if api_key != API_VERSIONS or api_version == 0:
            raise
        body, _ = decoder_for(response_class(API_VERSIONS, 0))(frame, 4, len(frame))
    return Response(correlation_id, body)
