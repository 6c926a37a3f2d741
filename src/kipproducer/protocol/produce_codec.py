"""Direct encoders for the one hot request: Produce v9..v12 (flexible, topics by name).

The generic codec builds a kio dataclass per struct (the builder fills defaults and converts
dicts), then encodes it by schema; that is right for the 80-odd other APIs and is how this
module is checked (tests/protocol/test_produce_codec.py compares the bytes). A copy whose
offsets have gaps sends one batch per request (KIP-WIRE §4: offsets within a batch are
consecutive; Kafka: one batch per partition per request), thousands of requests a second, so
the two encodings that run once per request are written out by hand, about 3x faster than
build + encode:

* client: :func:`encode_produce_request`, the request frame (records of 64 KiB or more are
  passed through as their own buffer, uncopied);
* broker: :func:`encode_produce_response`, the answer frame from the handler's dicts
  (wrapped in an :class:`EncodedAnswer` for the connection to finish).

Decoding stays generic: the generated decoders are as fast as hand-written ones here.

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
from typing import Any, Final

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
