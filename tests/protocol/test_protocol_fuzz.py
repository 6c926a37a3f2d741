"""Malformed input never raises anything but ProtocolError, and fails fast.

For every request (api_key, version) kio knows: every truncation of a valid frame,
random bit flips, and random bodies behind a valid header. Plus lying length prefixes
(up to 2^31-1 / 2^32-1), which must fail before allocating anything of that size.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from protocol_test_support import ALL_PAIRS, class_id, populated

from kipproducer.protocol import (
    ProtocolError,
    build_request,
    decode_request,
    decode_response,
    encode,
    encode_request_frame,
    parse_request_header,
    read_frame,
    request_class,
)
from kipproducer.protocol.wire import uvarint_bytes

REQUEST_CLASSES = [request_class(key, version) for key, version in ALL_PAIRS]


def decodes_or_protocol_error(frame: bytes) -> bool:
    try:
        decode_request(frame)
    except ProtocolError:
        return False
    return True


def valid_frame(cls: type) -> bytes:
    return bytes(encode_request_frame(1, "fuzz", populated(cls)))[4:]


@pytest.mark.parametrize("cls", REQUEST_CLASSES, ids=class_id)
def test_truncations_bit_flips_and_noise(cls: type) -> None:
    frame = valid_frame(cls)
    rng = random.Random(class_id(cls))
    started = time.perf_counter()
    for cut in range(len(frame)):
        with pytest.raises(ProtocolError):
            decode_request(frame[:cut])
    for _ in range(60):
        mutated = bytearray(frame)
        for _flip in range(rng.randint(1, 3)):
            position = rng.randrange(len(mutated))
            mutated[position] ^= 1 << rng.randrange(8)
        decodes_or_protocol_error(bytes(mutated))
    header_length = len(frame) - len(bytes(encode(populated(cls))))
    for _ in range(30):
        noise = rng.randbytes(rng.randint(0, 80))
        decodes_or_protocol_error(frame[:header_length] + noise)
    assert time.perf_counter() - started < 5.0


@settings(max_examples=400, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(st.binary(max_size=120))
def test_random_frames(frame: bytes) -> None:
    decodes_or_protocol_error(frame)


@settings(max_examples=300, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(st.sampled_from(ALL_PAIRS), st.binary(max_size=100))
def test_random_bodies_behind_valid_headers(pair: tuple[int, int], body: bytes) -> None:
    frame = bytes(encode_request_frame(9, None, populated(request_class(*pair))))[4:]
    header_length, _ = _header_length(frame)
    decodes_or_protocol_error(frame[:header_length] + body)


@settings(max_examples=200, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(st.sampled_from([(3, 12), (0, 9), (18, 3), (1, 12), (2, 7)]), st.binary(max_size=60))
def test_random_response_frames(pair: tuple[int, int], body: bytes) -> None:
    try:
        decode_response(b"\x00\x00\x00\x07" + body, *pair)
    except ProtocolError:
        pass


def _header_length(frame: bytes) -> tuple[int, Any]:
    header, offset = parse_request_header(frame)
    return offset, header


# -- lying lengths ------------------------------------------------------------------


def assert_fails_small_and_fast(frame: bytes, match: str) -> None:
    # Warm up first so that compiling the decoder is not counted.
    with contextlib.suppress(ProtocolError):
        decode_request(frame)
    tracemalloc.start()
    started = time.perf_counter()
    try:
        with pytest.raises(ProtocolError, match=match):
            decode_request(frame)
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.perf_counter() - started < 0.5
    assert peak < 1 << 20, f"decoder allocated {peak} bytes for a lying length"


def header_bytes(api_key: int, version: int) -> bytes:
    sample = build_request(api_key, version)
    frame = bytes(encode_request_frame(1, "liar", sample))[4:]
    return frame[: _header_length(frame)[0]]


LIES: dict[str, Callable[[], tuple[bytes, str]]] = {
    # Metadata v12: topics is a compact array; count 2^32-2.
    "compact array count": lambda: (
        header_bytes(3, 12) + uvarint_bytes(0xFFFFFFFF), "exceeds"),
    # Metadata v4: topics is an int32-counted array; count 2^31-1.
    "legacy array count": lambda: (
        header_bytes(3, 4) + b"\x7f\xff\xff\xff", "exceeds"),
    # Produce v8: transactional_id null, acks, timeout, 1 topic "t", 1 partition whose
    # records claim 2^31-1 bytes.
    "legacy records length": lambda: (
        header_bytes(0, 8) + b"\xff\xff" + b"\x00\x01" + b"\x00\x00\x03\xe8"
        + b"\x00\x00\x00\x01" + b"\x00\x01t" + b"\x00\x00\x00\x01" + b"\x00\x00\x00\x00"
        + b"\x7f\xff\xff\xff" + b"only a few bytes", "exceeds"),
    # Produce v9, same shape with compact encodings and a 2^32-2 records length.
    "compact records length": lambda: (
        header_bytes(0, 9) + b"\x00" + b"\x00\x01" + b"\x00\x00\x03\xe8" + b"\x02"
        + b"\x02t" + b"\x02" + b"\x00\x00\x00\x00" + uvarint_bytes(0xFFFFFFFF) + b"abc",
        "exceeds"),
    # FindCoordinator v0: key is an int16-length string claiming 32767 bytes.
    "legacy string length": lambda: (header_bytes(10, 0) + b"\x7f\xff" + b"abc", "exceeds"),
    "negative string length": lambda: (header_bytes(10, 0) + b"\xff\xf0", "negative"),
    "varint too long": lambda: (
        header_bytes(3, 12) + b"\xff\xff\xff\xff\xff\x01", "varint too long"),
    "string not utf-8": lambda: (
        header_bytes(10, 0) + b"\x00\x02\xff\xfe" + b"\x00", "not UTF-8"),
    "tagged field size": lambda: (
        header_bytes(18, 3) + b"\x02a\x02b" + b"\x01" + b"\x05" + uvarint_bytes(2**31),
        "overruns"),
}


@pytest.mark.parametrize("name", sorted(LIES))
def test_lying_lengths_fail_without_allocating(name: str) -> None:
    frame, match = LIES[name]()
    assert_fails_small_and_fast(frame, match)


def test_lying_frame_size_prefix_is_refused_before_reading() -> None:
    async def scenario() -> None:
        reader = asyncio.StreamReader()
        reader.feed_data(b"\x7f\xff\xff\xff" + b"x" * 100)
        reader.feed_eof()
        tracemalloc.start()
        try:
            with pytest.raises(ProtocolError, match="exceeds the maximum"):
                await read_frame(reader)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 1 << 20

    asyncio.run(scenario())


def test_unknown_api_key_and_version_carry_the_header() -> None:
    frame = b"\x03\xe7\x00\x01\x00\x00\x00\x05\xff\xff" + b"rest"
    with pytest.raises(ProtocolError, match="unknown api key 999") as caught:
        decode_request(frame)
    assert caught.value.header.correlation_id == 5
    # Produce v2 is gone from kio (Kafka 4.x); the header still parses.
    frame = b"\x00\x00\x00\x02\x00\x00\x00\x06\x00\x01k" + b"body"
    with pytest.raises(ProtocolError, match="unsupported version 2") as caught:
        decode_request(frame)
    assert caught.value.header.api_version == 2
    assert caught.value.header.client_id == "k"
