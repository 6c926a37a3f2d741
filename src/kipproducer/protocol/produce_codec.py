"""A direct codec for the one hot request: Produce v9..v12 (flexible, topics by name).

The generic codec builds a kio dataclass per struct and walks the schema; that is right for
the 80-odd other APIs and is how this module is checked (tests/protocol/test_produce_codec.py
compares both, byte for byte and field for field). A copy whose offsets have gaps sends one
batch per request (KIP-WIRE §4: offsets within a batch are consecutive; Kafka: one batch per
partition per request), thousands of requests a second, so Produce gets its own straight-line
code on the three paths that run once per request:

* client: :func:`encode_produce_request` (request frame, records passed through uncopied when
  large) and :func:`decode_produce_response` (light answer objects with the attribute names of
  kio's classes, so callers do not care which codec made them);
* broker: :func:`encode_produce_response` (the answer frame from the handler's dicts).

Layouts (Kafka's Produce schemas, flexible versions):

request  = header v2 (api_key int16, api_version int16, correlation_id int32,
           client_id nullable int16-length string, tags) + transactional_id compact nullable
           string, acks int16, timeout_ms int32, topic_data [name, partition_data [index int32,
           records compact nullable bytes, tags], tags], tags {10000: ProduceMode int8}
response = header v1 (correlation_id int32, tags) + responses [name, partition_responses
           [index int32, error_code int16, base_offset int64, log_append_time_ms int64,
           log_start_offset int64, record_errors [batch_index int32, message compact nullable
           string, tags], error_message compact nullable string, tags {0: current_leader (v10+),
           10000: LogEndOffset int64}], tags], throttle_time_ms int32, tags {0: node_endpoints}
"""

from __future__ import annotations

import struct
from typing import Any, Final, NamedTuple

from .encoder import SPILL_MIN_BYTES
from .errors import ProtocolError
from .wire import uvarint_bytes
from .wire_extensions import LOG_END_OFFSET_TAG, PRODUCE_MODE_TAG

PRODUCE_API_KEY: Final = 0
DIRECT_VERSIONS: Final = range(9, 13)
"""Versions this module encodes and decodes; others go through the generic codec."""

_REQUEST_HEAD: Final = struct.Struct(">ihhih")     # size, api key, version, correlation id,
                                                    # client id length
_ACKS_TIMEOUT: Final = struct.Struct(">hi")
_INT32: Final = struct.Struct(">i")
_INT16: Final = struct.Struct(">h")
_INT64: Final = struct.Struct(">q")
_PARTITION_ANSWER: Final = struct.Struct(">ihqqq")  # index, error, base offset, append time,
                                                    # log start offset
_MODE_TAG: Final = uvarint_bytes(PRODUCE_MODE_TAG) + b"\x01"
_LOG_END_TAG: Final = uvarint_bytes(LOG_END_OFFSET_TAG) + b"\x08"
_MAX_FRAME_SIZE: Final = 2**31 - 1


def _compact_string(buf: bytearray, value: str | None) -> None:
    if value is None:
        buf.append(0)
        return
    raw = value.encode()
    buf += uvarint_bytes(len(raw) + 1)
    buf += raw


# -- client: the request ---------------------------------------------------------------------


def encode_produce_request(correlation_id: int, client_id: str | None, version: int,
                           acks: int, timeout_ms: int,
                           topics: dict[str, list[tuple[int, Any]]],
                           mode: int = 0) -> list[Any]:
    """A Produce request frame as buffers for ``writelines``: ``topics`` maps each topic to
    its (partition, record batch bytes) pairs. Records of at least SPILL_MIN_BYTES are
    passed through as their own buffer, uncopied."""
    if version not in DIRECT_VERSIONS:
        raise ValueError(f"Produce v{version} is not a direct version")
    client = None if client_id is None else client_id.encode()
    if client is not None and len(client) > 2**15 - 1:
        raise ProtocolError("client_id is too long for its int16 length")
    buf = bytearray(_REQUEST_HEAD.pack(0, PRODUCE_API_KEY, version, correlation_id,
                                       -1 if client is None else len(client)))
    if client is not None:
        buf += client
    buf.append(0)  # header tags
    buf.append(0)  # transactional_id: null (transactions go through librdkafka)
    buf += _ACKS_TIMEOUT.pack(acks, timeout_ms)
    parts: list[Any] = []
    spilled = 0
    buf += uvarint_bytes(len(topics) + 1)
    for name, partitions in topics.items():
        _compact_string(buf, name)
        buf += uvarint_bytes(len(partitions) + 1)
        for index, records in partitions:
            buf += _INT32.pack(index)
            if records is None:
                buf.append(0)
            else:
                size = len(records)
                buf += uvarint_bytes(size + 1)
                if size >= SPILL_MIN_BYTES:
                    parts.append(buf)
                    parts.append(records)
                    spilled += size
                    buf = bytearray()
                else:
                    buf += records
            buf.append(0)  # partition tags
        buf.append(0)  # topic tags
    if mode:
        buf.append(1)
        buf += _MODE_TAG
        buf += struct.pack(">b", mode)
    else:
        buf.append(0)
    parts.append(buf)
    size = sum(len(p) for p in parts) - 4
    if size > _MAX_FRAME_SIZE:
        raise ProtocolError(f"frame of {size} bytes is too large for an int32 size")
    _INT32.pack_into(parts[0], 0, size)
    return parts


# -- client: the answer ----------------------------------------------------------------------


class PartitionAnswer(NamedTuple):
    """One partition of a Produce answer; field names as kio's PartitionProduceResponse."""

    index: int
    error_code: int
    base_offset: int
    log_append_time: int
    log_start_offset: int
    record_errors: tuple[RecordError, ...]
    error_message: str | None
    log_end_offset: int | None  # KIP-WIRE LogEndOffset; None when the broker sent none


class RecordError(NamedTuple):
    batch_index: int
    batch_index_error_message: str | None


class TopicAnswer(NamedTuple):
    name: str
    partition_responses: list[PartitionAnswer]


class ProduceAnswer(NamedTuple):
    responses: list[TopicAnswer]
    throttle_time: int


# tuple.__new__ directly: a NamedTuple's own __new__ is a Python-level wrapper.
_new = tuple.__new__


class _Reader:
    """Bounds-checked reads from one frame; every failure is a ProtocolError."""

    __slots__ = ("buf", "pos", "end", "owner")

    def __init__(self, buf: Any, pos: int, owner: str) -> None:
        self.buf = buf
        self.pos = pos
        self.end = len(buf)
        self.owner = owner

    def need(self, count: int) -> int:
        pos = self.pos
        if pos + count > self.end:
            raise ProtocolError(f"{self.owner} truncated at byte {pos}")
        self.pos = pos + count
        return pos

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            byte = self.buf[self.need(1)]
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7
            if shift > 28:
                raise ProtocolError(f"{self.owner}: varint too long at byte {self.pos}")

    def count(self) -> int:
        """A compact array's length (null arrays are read as empty: the fields here are not
        nullable, and a broker that sends null meant nothing)."""
        return max(self.uvarint() - 1, 0)

    def strict_count(self, minimum_bytes: int) -> int:
        """A non-nullable compact array's length, checked against the bytes left."""
        count = self.uvarint() - 1
        if count < 0:
            raise ProtocolError(f"{self.owner}: null array at byte {self.pos}")
        if count * minimum_bytes > self.end - self.pos:
            raise ProtocolError(f"{self.owner}: {count} entries cannot fit at byte {self.pos}")
        return count

    def blob(self) -> memoryview | None:
        """Compact nullable bytes, as a writable view of the frame (records are stamped
        in place by the log)."""
        length = self.uvarint() - 1
        if length < 0:
            return None
        start = self.need(length)
        return memoryview(self.buf)[start:start + length]

    def string(self) -> str | None:
        length = self.uvarint() - 1
        if length < 0:
            return None
        start = self.need(length)
        try:
            return bytes(self.buf[start:start + length]).decode()
        except UnicodeDecodeError:
            raise ProtocolError(f"{self.owner}: string at byte {start} is not UTF-8") from None

    def tags(self, known: int = -1, known_size: int = 0) -> int | None:
        """Skip a tag buffer; the signed value of tag ``known`` (``known_size`` bytes at
        least, as the generic codec reads it) when it is there."""
        value = None
        count = self.uvarint()
        if count > (self.end - self.pos) // 2:  # a tagged field takes 2 bytes at least
            raise ProtocolError(f"{self.owner}: {count} tagged fields cannot fit")
        for _ in range(count):
            tag = self.uvarint()
            size = self.uvarint()
            start = self.need(size)
            if tag == known:
                if size < known_size:
                    raise ProtocolError(f"{self.owner}: tagged field {tag} of {size} bytes")
                value = int.from_bytes(self.buf[start:start + known_size], "big", signed=True)
        return value


def decode_produce_response(frame: Any, version: int) -> ProduceAnswer:
    """The answer in a Produce response frame (size prefix removed), read at ``version``."""
    if version not in DIRECT_VERSIONS:
        raise ValueError(f"Produce v{version} is not a direct version")
    r = _Reader(frame, 4, "Produce response")  # after the correlation id
    r.tags()  # response header tags
    buf = frame
    topics = []
    for _ in range(r.count()):
        name = r.string()
        if name is None:
            raise ProtocolError("Produce response: null topic name")
        partitions = []
        for _ in range(r.count()):
            index, error_code, base_offset, append_time, log_start = (
                _PARTITION_ANSWER.unpack_from(buf, r.need(_PARTITION_ANSWER.size)))
            record_errors = []
            for _ in range(r.count()):
                batch_index = _INT32.unpack_from(buf, r.need(4))[0]
                record_errors.append(_new(RecordError, (batch_index, r.string())))
                r.tags()
            message = r.string()
            log_end = r.tags(LOG_END_OFFSET_TAG, 8)
            partitions.append(_new(PartitionAnswer, (
                index, error_code, base_offset, append_time, log_start, tuple(record_errors),
                message, log_end)))
        topics.append(_new(TopicAnswer, (name, partitions)))
        r.tags()
    throttle = _INT32.unpack_from(buf, r.need(4))[0]
    r.tags()
    return _new(ProduceAnswer, (topics, throttle))


# -- broker: the request --------------------------------------------------------------------


class PartitionData(NamedTuple):
    index: int
    records: memoryview | None


class TopicData(NamedTuple):
    name: str
    partition_data: list[PartitionData]


class ProduceRequestBody(NamedTuple):
    """A Produce request body; field names as kio's ProduceRequest (+ produce_mode)."""

    transactional_id: str | None
    acks: int
    timeout: int
    topic_data: list[TopicData]
    produce_mode: int


def decode_produce_request(frame: Any, pos: int, version: int) -> ProduceRequestBody:
    """The body of a Produce request frame from ``pos`` (after the header), at ``version``.
    Records are writable views of ``frame``; trailing bytes are ignored, unknown tags
    skipped; anything malformed raises ProtocolError (as the generic decoder)."""
    if version not in DIRECT_VERSIONS:
        raise ValueError(f"Produce v{version} is not a direct version")
    r = _Reader(frame, pos, "ProduceRequest")
    buf = frame
    transactional_id = r.string()
    acks, timeout = _ACKS_TIMEOUT.unpack_from(buf, r.need(_ACKS_TIMEOUT.size))
    topics = []
    for _ in range(r.strict_count(3)):
        name = r.string()
        if name is None:
            raise ProtocolError("ProduceRequest: null topic name")
        partitions = []
        for _ in range(r.strict_count(6)):
            index = _INT32.unpack_from(buf, r.need(4))[0]
            partitions.append(_new(PartitionData, (index, r.blob())))
            r.tags()
        topics.append(_new(TopicData, (name, partitions)))
        r.tags()
    mode = r.tags(PRODUCE_MODE_TAG, 1)
    return _new(ProduceRequestBody, (transactional_id, acks, timeout, topics,
                                     0 if mode is None else mode))


# -- broker: the answer ----------------------------------------------------------------------


def encode_produce_response(correlation_id: int, version: int,
                            responses: list[dict]) -> bytearray:
    """The answer frame from the produce handler's dicts: per topic ``name`` and
    ``partition_responses``, per partition ``index``, ``error_code`` (default 0),
    ``base_offset``, ``log_append_time``, ``log_start_offset``, ``record_errors`` (dicts with
    ``batch_index`` and ``batch_index_error_message``), ``error_message`` and, with a
    ProduceMode, ``log_end_offset``."""
    if version not in DIRECT_VERSIONS:
        raise ValueError(f"Produce v{version} is not a direct version")
    buf = bytearray(9)  # size, correlation id, header tags
    _INT32.pack_into(buf, 4, correlation_id)
    buf += uvarint_bytes(len(responses) + 1)
    for topic in responses:
        _compact_string(buf, topic["name"])
        partitions = topic["partition_responses"]
        buf += uvarint_bytes(len(partitions) + 1)
        for p in partitions:
            buf += _PARTITION_ANSWER.pack(p["index"], p.get("error_code", 0), p["base_offset"],
                                          p["log_append_time"], p["log_start_offset"])
            errors = p.get("record_errors") or ()
            buf += uvarint_bytes(len(errors) + 1)
            for e in errors:
                buf += _INT32.pack(e["batch_index"])
                _compact_string(buf, e.get("batch_index_error_message"))
                buf.append(0)
            _compact_string(buf, p.get("error_message"))
            log_end = p.get("log_end_offset")
            if log_end is None:
                buf.append(0)
            else:
                buf.append(1)
                buf += _LOG_END_TAG
                buf += _INT64.pack(log_end)
        buf.append(0)  # topic tags
    buf += b"\x00\x00\x00\x00\x00"  # throttle_time_ms 0, no tags
    _INT32.pack_into(buf, 0, len(buf) - 4)
    return buf


class EncodedAnswer:
    """A Produce answer the broker's produce handler leaves for this codec to encode (the
    connection calls :meth:`frame_parts` with the request's correlation id)."""

    __slots__ = ("version", "responses")

    def __init__(self, version: int, responses: list[dict]) -> None:
        self.version = version
        self.responses = responses

    def frame_parts(self, correlation_id: int) -> list[Any]:
        return [encode_produce_response(correlation_id, self.version, self.responses)]
