"""The direct codec for the one hot API: Produce v9..v12 (flexible, topics by name).

The generic codec builds a kio dataclass per struct and encodes or decodes it by schema; that
is right for the 80-odd other APIs and is how this module is checked (tests/protocol/
test_produce_codec.py holds both to the same bytes and the same decoded fields). A copy whose
offsets have gaps sends one batch per request (docs/protocol.md §4: offsets within a batch are
consecutive; Kafka: one batch per partition per request), thousands of requests a second, so
the four codings that run once per request are done in C (``src/_accel/produce_wire.pyx``,
where the layouts are spelled out), shared by client and broker:

* client: :func:`encode_produce_request` (records of encoder.SPILL_MIN_BYTES or more are
  passed through as their own buffer, uncopied) and :func:`decode_produce_response`;
* broker: :func:`decode_produce_request_body` (records are memoryviews of the received
  frame, so the log can stamp offsets in place) and :func:`encode_produce_response` (from
  the handler's dicts, wrapped in an :class:`EncodedAnswer` for the connection to finish).

The decoded objects are small C classes with the attribute names of kio's Produce classes
(``topic_data``, ``partition_data``, ``records``, ``produce_mode``; ``responses``,
``partition_responses``, ``error_code``, ``log_end_offset`` ...), so code reads either
decoder's result the same way. Malformed input raises ProtocolError, as the generic decoder
does.
"""

from __future__ import annotations

from typing import Any, Final

from kipproducer import _produce_wire

PRODUCE_API_KEY: Final = 0
DIRECT_VERSIONS: Final = range(_produce_wire.DIRECT_MIN_VERSION,
                               _produce_wire.DIRECT_MAX_VERSION + 1)
"""Versions this module encodes and decodes; others go through the generic codec."""


def is_direct(api_key: int, version: int) -> bool:
    """Whether a message of ``api_key`` at ``version`` goes through this codec (the broker's
    and the engine's connections ask, to pick the decoder)."""
    return api_key == PRODUCE_API_KEY and version in DIRECT_VERSIONS


encode_produce_request = _produce_wire.encode_request
"""``(correlation_id, client_id, version, acks, timeout_ms, topics, mode=0) -> list``: a
Produce request frame as buffers for ``writelines``; ``topics`` maps each topic to its
(partition, record batch) pairs."""

encode_produce_response = _produce_wire.encode_response
"""``(correlation_id, version, responses) -> bytearray``: the answer frame from the produce
handler's dicts (per topic ``name`` and ``partition_responses``; per partition ``index``,
``error_code``, ``base_offset``, ``log_append_time``, ``log_start_offset``,
``record_errors``, ``error_message`` and, with a ProduceMode, ``log_end_offset``)."""

decode_produce_request_body = _produce_wire.decode_request_body
"""``(frame, pos, version)``: the request body that starts at ``frame[pos]`` (after the
request header)."""

decode_produce_response = _produce_wire.decode_response
"""``(frame, version)``: the body of a response frame (the bytes after the size prefix)."""


class EncodedAnswer:
    """A Produce answer the broker's produce handler leaves for this codec to encode (the
    connection calls :meth:`frame_parts` with the request's correlation id)."""

    __slots__ = ("version", "responses")

    def __init__(self, version: int, responses: list[dict]) -> None:
        self.version = version
        self.responses = responses

    def frame_parts(self, correlation_id: int) -> list[Any]:
        return [encode_produce_response(correlation_id, self.version, self.responses)]
