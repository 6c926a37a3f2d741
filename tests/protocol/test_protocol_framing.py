"""Frames and headers, checked against kio's header classes where kio has them."""

from __future__ import annotations

import asyncio
import struct

import pytest
from kio.schema.request_header.v1 import RequestHeader as KioRequestHeaderV1
from kio.schema.request_header.v2 import RequestHeader as KioRequestHeaderV2
from kio.schema.response_header.v0 import ResponseHeader as KioResponseHeaderV0
from kio.schema.response_header.v1 import ResponseHeader as KioResponseHeaderV1
from protocol_test_support import kio_read, kio_write

from kipproducer._records import extend_receive_buffer, receive_buffer
from kipproducer.protocol import (
    DEFAULT_MAX_FRAME_BYTES,
    FrameReceiver,
    FrameTooLarge,
    ProtocolError,
    build_request,
    build_response,
    decode,
    decode_request,
    decode_response,
    encode,
    encode_request_frame,
    encode_request_frame_parts,
    encode_response_frame,
    encode_response_frame_parts,
    error_codes,
    expects_response,
    frame_size,
    parse_request_header,
    peek_correlation_id,
    read_frame,
    request_header_version,
    response_header_version,
)

ONE_MIB = bytes(range(256)) * 4096


def produce_request(records: bytes, version: int = 9, acks: int = -1) -> object:
    return build_request(0, version, acks=acks, timeout=1000, topic_data=[
        {"name": "t", "partition_data": [{"index": 0, "records": records}]}])


class TestHeaders:
    @pytest.mark.parametrize("client_id", [None, "", "client-é"])
    @pytest.mark.parametrize("header_class", [KioRequestHeaderV1, KioRequestHeaderV2])
    def test_request_header_matches_kio(self, header_class: type, client_id: str | None) -> None:
        version = 12 if header_class is KioRequestHeaderV2 else 8
        kio_header = header_class(request_api_key=3, request_api_version=version,
                                  correlation_id=-5, client_id=client_id)
        kio_bytes = kio_write(header_class, kio_header)
        # Generic codec on kio's header class (client_id stays a legacy string in v2).
        assert bytes(encode(kio_header)) == kio_bytes
        assert decode(header_class, kio_bytes)[0] == kio_header
        # The framing fast path writes the same header.
        body = build_request(3, version)
        frame = bytes(encode_request_frame(-5, client_id, body))
        assert frame[4:].startswith(kio_bytes)
        header, offset = parse_request_header(frame[4:])
        assert offset == len(kio_bytes)
        assert header == (3, version, -5, client_id, header_class.__version__)

    @pytest.mark.parametrize("header_class", [KioResponseHeaderV0, KioResponseHeaderV1])
    def test_response_header_matches_kio(self, header_class: type) -> None:
        kio_header = header_class(correlation_id=77)
        kio_bytes = kio_write(header_class, kio_header)
        assert bytes(encode(kio_header)) == kio_bytes
        version = 12 if header_class is KioResponseHeaderV1 else 8
        frame = bytes(encode_response_frame(77, build_response(3, version)))
        assert frame[4:].startswith(kio_bytes)
        assert kio_read(header_class, frame[4:]) == kio_header

    def test_header_versions(self) -> None:
        assert request_header_version(3, 8) == 1 and request_header_version(3, 9) == 2
        assert response_header_version(3, 8) == 0 and response_header_version(3, 9) == 1
        # ApiVersions responses always use header v0, the request follows flexibility.
        assert [response_header_version(18, v) for v in range(5)] == [0] * 5
        assert [request_header_version(18, v) for v in range(5)] == [1, 1, 1, 2, 2]
        # Versions beyond kio's: the nearest known one decides; unknown keys read as v1.
        assert request_header_version(18, 9) == 2
        assert request_header_version(999, 0) == 1

    def test_api_versions_response_has_no_header_tag_buffer(self) -> None:
        frame = bytes(encode_response_frame(3, build_response(18, 3)))
        assert frame[4:8] == b"\x00\x00\x00\x03"
        assert frame[8:10] == b"\x00\x00"  # error_code follows the correlation id directly

    def test_unknown_header_tags_are_skipped(self) -> None:
        frame = bytearray(encode_request_frame(8, "c", build_request(3, 12)))[4:]
        header, offset = parse_request_header(bytes(frame))
        assert frame[offset - 1] == 0
        forged = bytes(frame[: offset - 1]) + b"\x01\x07\x02zz" + bytes(frame[offset:])
        assert decode_request(forged) == decode_request(bytes(frame))


class TestFrames:
    def test_frame_size_limits(self) -> None:
        assert frame_size(b"\x00\x00\x00\x00") == 0
        assert frame_size(DEFAULT_MAX_FRAME_BYTES.to_bytes(4, "big")) == DEFAULT_MAX_FRAME_BYTES
        with pytest.raises(ProtocolError, match="exceeds the maximum"):
            frame_size((DEFAULT_MAX_FRAME_BYTES + 1).to_bytes(4, "big"))
        with pytest.raises(ProtocolError, match="negative"):
            frame_size(b"\xff\xff\xff\xff")
        with pytest.raises(ProtocolError, match="exceeds the maximum of 10"):
            frame_size(b"\x00\x00\x00\x0b", max_bytes=10)

    def test_read_frame(self) -> None:
        frame = bytes(encode_request_frame(1, "c", build_request(3, 12)))

        async def scenario() -> None:
            reader = asyncio.StreamReader()
            reader.feed_data(frame + frame)
            reader.feed_eof()
            assert await read_frame(reader) == frame[4:]
            assert await read_frame(reader) == frame[4:]
            assert await read_frame(reader) is None  # clean end of stream

            reader = asyncio.StreamReader()
            reader.feed_data(frame[:-1])
            reader.feed_eof()
            with pytest.raises(ProtocolError, match="stream ended after"):
                await read_frame(reader)

            reader = asyncio.StreamReader()
            reader.feed_data(b"\x00\x00")
            reader.feed_eof()
            with pytest.raises(ProtocolError, match="size prefix"):
                await read_frame(reader)

        asyncio.run(scenario())

    def test_frame_receiver_cuts_any_chunking(self) -> None:
        small = [bytes(encode_request_frame(i, "c", build_request(3, 12))) for i in range(3)]
        big = bytes(encode_request_frame(9, "c", build_request(3, 12, topics=[
            {"name": "t" * 200}] * 400)))  # larger than the scratch buffer
        assert len(big) > FrameReceiver.SCRATCH_BYTES
        frames = [small[0], big, small[1], big, small[2]]
        stream = b"".join(frames)
        for chunk in (1, 3, 7, 4096, 70_000, len(stream)):
            receiver = FrameReceiver()
            out: list[bytearray] = []
            for start in range(0, len(stream), chunk):
                out += receiver.feed(stream[start : start + chunk])
            assert out == [f[4:] for f in frames]
            assert all(isinstance(f, bytearray) for f in out)
            assert receiver.partial == 0

    def test_frame_receiver_socket_path_writes_large_frames_in_place(self) -> None:
        payload = bytes(range(256)) * 1000
        receiver = FrameReceiver()
        stream = memoryview(struct.pack(">i", len(payload)) + payload)
        got: list[bytearray] = []
        targets = set()
        while len(stream):
            target = receiver.get_buffer()
            targets.add(target.obj is receiver._scratch)
            count = min(len(target), len(stream))
            target[:count] = stream[:count]
            stream = stream[count:]
            got += receiver.received(count)
        assert got == [bytearray(payload)]
        assert targets == {True, False}  # scratch for the start, the frame's own buffer after

    def test_frame_receiver_memory_follows_the_bytes_that_came(self) -> None:
        receiver = FrameReceiver()
        frame = bytes(encode_request_frame(1, "c", build_request(3, 12)))
        assert receiver.feed(frame) and receiver._scratch is None  # empty: back to the pool
        # A frame announced at 50 MB with 10 bytes sent holds a buffer of the scratch size;
        # it grows to GROWTH times what arrived, never past the frame.
        size = 50 * 1024 * 1024
        scratch, growth = FrameReceiver.SCRATCH_BYTES, FrameReceiver.GROWTH
        assert receiver.feed(struct.pack(">i", size) + bytes(10)) == []
        assert receiver.partial_size == size
        assert len(receiver._body) == scratch
        receiver.feed(bytes(scratch))
        assert len(receiver._body) == growth * scratch
        [big] = receiver.feed(bytes(size - 10 - scratch))
        assert len(big) == size and receiver.partial == 0

    def test_frame_receiver_grows_a_large_frame_whether_or_not_its_buffer_is_viewed(
            self) -> None:
        # The buffer grows in place (not zero-filled); while the socket still holds a view of
        # it, in place is impossible and it is copied instead. Both give the frame's bytes.
        payload = bytes(range(251)) * 8000  # ~2 MB: several growths from a 10-byte start
        stream = struct.pack(">i", len(payload)) + payload
        for keep_views in (False, True):
            receiver = FrameReceiver()
            views = []
            assert receiver.feed(stream[:14]) == []
            pos, frames, buffers = 14, [], set()
            while pos < len(stream):
                target = receiver.get_buffer()
                buffers.add(id(target.obj))
                count = min(len(target), 100_000, len(stream) - pos)
                target[:count] = stream[pos : pos + count]
                if keep_views:
                    views.append(target)
                del target
                pos += count
                frames += receiver.received(count)
            assert frames == [bytearray(payload)] and receiver.partial == 0
            # in place: one buffer throughout; viewed: a new one at each growth
            assert (len(buffers) > 2) if keep_views else (len(buffers) == 1)
            views.clear()

    def test_receive_buffers_refuse_bad_sizes(self) -> None:
        assert len(receive_buffer(0)) == 0
        with pytest.raises(ValueError, match="must not be negative"):
            receive_buffer(-1)
        buf = receive_buffer(8)
        buf[:] = b"abcdefgh"
        extend_receive_buffer(buf, 20)
        assert len(buf) == 20 and buf[:8] == b"abcdefgh"
        with pytest.raises(ValueError, match="cannot shrink"):
            extend_receive_buffer(buf, 4)

    def test_frame_receiver_refuses_sizes_before_allocating(self) -> None:
        frame = bytes(encode_request_frame(1, "c", build_request(3, 12)))
        with pytest.raises(FrameTooLarge, match="outside 0..8") as info:
            FrameReceiver(max_bytes=8).feed(frame)
        assert info.value.size == len(frame) - 4 and info.value.limit == 8
        with pytest.raises(FrameTooLarge):
            FrameReceiver().feed(struct.pack(">i", -1))
        receiver = FrameReceiver()
        assert receiver.feed(frame[:2]) == [] and receiver.partial == 2
        assert receiver.partial_size is None
        assert receiver.feed(frame[2:6]) == [] and receiver.partial_size == len(frame) - 4

    def test_response_correlation_and_decode(self) -> None:
        body = build_response(3, 12, brokers=[{"node_id": 1, "host": "h", "port": 1}])
        frame = bytes(encode_response_frame(123456, body))[4:]
        assert peek_correlation_id(frame) == 123456
        assert decode_response(frame, 3, 12) == (123456, body)
        with pytest.raises(ProtocolError):
            peek_correlation_id(b"\x00")

    def test_api_versions_answered_at_v0_is_read_as_v0(self) -> None:
        # KIP-511: a broker answers an ApiVersions version it does not serve with v0.
        v0 = build_response(18, 0, error_code=error_codes.UNSUPPORTED_VERSION,
                            api_keys=[{"api_key": 18, "min_version": 0, "max_version": 2}])
        frame = bytes(encode_response_frame(5, v0))[4:]
        correlation_id, body = decode_response(frame, 18, 3)
        assert correlation_id == 5
        assert body == v0 and body.error_code == 35

    def test_api_versions_request_at_unknown_version_keeps_its_header(self) -> None:
        frame = bytearray(encode_request_frame(31, "c", build_request(18, 4)))[4:]
        frame[2:4] = b"\x00\x07"  # claim ApiVersions v7
        with pytest.raises(ProtocolError) as caught:
            decode_request(bytes(frame))
        assert caught.value.header == (18, 7, 31, "c", 2)

    def test_expects_response(self) -> None:
        assert not expects_response(produce_request(b"x", acks=0))
        assert expects_response(produce_request(b"x", acks=1))
        assert expects_response(build_request(3, 12))


class TestRecordsWithoutCopies:
    def test_decoded_records_are_views_of_the_frame(self) -> None:
        frame = bytearray(encode_request_frame(1, "c", produce_request(ONE_MIB)))[4:]
        body = decode_request(frame).body
        records = body.topic_data[0].partition_data[0].records
        assert isinstance(records, memoryview)
        assert records.obj is frame and not records.readonly
        assert records == ONE_MIB
        # A broker can stamp the base offset in place.
        records[0:8] = (42).to_bytes(8, "big")
        assert frame.find((42).to_bytes(8, "big")) > 0

    def test_parts_pass_large_records_through_by_reference(self) -> None:
        request = produce_request(ONE_MIB)
        parts = encode_request_frame_parts(1, "c", request)
        assert any(part is ONE_MIB for part in parts)
        assert b"".join(parts) == bytes(encode_request_frame(1, "c", request))

        response = build_response(1, 12, responses=[{"topic": "t", "partitions": [
            {"partition_index": 0, "records": ONE_MIB},
            {"partition_index": 1, "records": ONE_MIB}]}])
        parts = encode_response_frame_parts(9, response)
        assert sum(part is ONE_MIB for part in parts) == 2
        joined = b"".join(parts)
        assert joined == bytes(encode_response_frame(9, response))
        assert decode_response(joined[4:], 1, 12).body == response

    def test_small_records_are_copied_inline(self) -> None:
        parts = encode_request_frame_parts(1, "c", produce_request(b"small"))
        assert len(parts) == 1
