"""The direct Produce codec (protocol/produce_codec.py) against the generic schema codec:
same bytes for what it encodes, same fields for what it decodes, clean errors on bad bytes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kipproducer.protocol import (
    ProtocolError,
    build_request,
    build_response,
    decode_request,
    decode_response,
    encode_request_frame,
    encode_response_frame,
    parse_request_header,
)
from kipproducer.protocol.produce_codec import (
    DIRECT_VERSIONS,
    decode_produce_request,
    decode_produce_response,
    encode_produce_request,
    encode_produce_response,
)

PRODUCE = 0
names = st.text(min_size=1, max_size=20)
offsets = st.integers(-1, 2**63 - 1)
messages = st.none() | st.text(max_size=30)


def joined(parts) -> bytes:
    return b"".join(bytes(p) for p in parts)


@st.composite
def request_topics(draw):
    topics = {}
    for name in draw(st.lists(names, min_size=1, max_size=3, unique=True)):
        topics[name] = [(index, draw(st.none() | st.binary(max_size=300)))
                        for index in draw(st.lists(st.integers(0, 2**31 - 1), min_size=1,
                                                   max_size=3, unique=True))]
    return topics


@settings(max_examples=150, deadline=None)
@given(version=st.sampled_from(DIRECT_VERSIONS), topics=request_topics(),
       mode=st.sampled_from([0, 1, 2]), acks=st.sampled_from([-1, 0, 1]),
       client_id=st.none() | st.text(max_size=20), correlation_id=st.integers(0, 2**31 - 1))
def test_request_bytes_match_the_generic_codec(version, topics, mode, acks, client_id,
                                                correlation_id):
    direct = joined(encode_produce_request(correlation_id, client_id, version, acks, 30000,
                                           topics, mode))
    body = build_request(
        PRODUCE, version, transactional_id=None, acks=acks, timeout=30000,
        topic_data=[{"name": n, "partition_data": [{"index": i, "records": r} for i, r in ps]}
                    for n, ps in topics.items()],
        **({"produce_mode": mode} if mode else {}))
    assert direct == bytes(encode_request_frame(correlation_id, client_id, body))
    # and the broker's decoder reads it back
    request = decode_request(bytearray(direct[4:]))
    assert request.header.correlation_id == correlation_id
    assert getattr(request.body, "produce_mode", 0) == mode


def test_large_records_are_passed_through_uncopied():
    records = memoryview(bytearray(200_000))
    parts = encode_produce_request(1, "c", 10, -1, 1000, {"t": [(0, records)]}, 1)
    assert any(p is records for p in parts)
    assert decode_request(bytearray(joined(parts)[4:])).body.topic_data[0].partition_data[
        0].records == bytes(200_000)


@st.composite
def answers(draw, with_log_end):
    topics = []
    for name in draw(st.lists(names, min_size=1, max_size=3, unique=True)):
        partitions = []
        for index in draw(st.lists(st.integers(0, 1000), min_size=1, max_size=3, unique=True)):
            p = {"index": index, "error_code": draw(st.integers(-1, 10500)),
                 "base_offset": draw(offsets), "log_append_time": draw(offsets),
                 "log_start_offset": draw(offsets), "error_message": draw(messages),
                 "record_errors": [{"batch_index": draw(st.integers(0, 99)),
                                    "batch_index_error_message": draw(messages)}
                                   for _ in range(draw(st.integers(0, 2)))]}
            if with_log_end:
                p["log_end_offset"] = draw(offsets)
            partitions.append(p)
        topics.append({"name": name, "partition_responses": partitions})
    return topics


def fields(answer) -> list:
    """What a produce caller reads from an answer, from either codec's objects."""
    return [(t.name, [(p.index, p.error_code, p.base_offset, p.log_append_time,
                       p.log_start_offset, p.error_message, getattr(p, "log_end_offset", None),
                       [(e.batch_index, e.batch_index_error_message) for e in p.record_errors])
                      for p in t.partition_responses])
            for t in answer.responses]


@settings(max_examples=150, deadline=None)
@given(version=st.sampled_from(DIRECT_VERSIONS), data=st.data(), with_log_end=st.booleans(),
       correlation_id=st.integers(0, 2**31 - 1))
def test_response_bytes_and_fields_match_the_generic_codec(version, data, with_log_end,
                                                            correlation_id):
    topics = data.draw(answers(with_log_end))
    direct = bytes(encode_produce_response(correlation_id, version, topics))
    generic = bytes(encode_response_frame(
        correlation_id, build_response(PRODUCE, version, responses=topics)))
    assert direct == generic
    frame = bytearray(direct[4:])
    mine = decode_produce_response(frame, version)
    theirs = decode_response(frame, PRODUCE, version).body
    assert fields(mine) == fields(theirs)
    assert mine.throttle_time == theirs.throttle_time


def test_unknown_tags_are_skipped():
    """A newer broker may add tagged fields anywhere; readers skip them (Kafka's rule)."""
    frame = bytearray(encode_produce_response(5, 10, [{"name": "t", "partition_responses": [
        {"index": 0, "base_offset": 7, "log_append_time": -1, "log_start_offset": 0,
         "log_end_offset": 9}]}])[4:])
    # header tags: one unknown tag 3 with 2 bytes
    patched = frame[:4] + bytearray(b"\x01\x03\x02ab") + frame[5:]
    answer = decode_produce_response(patched, 10)
    p = answer.responses[0].partition_responses[0]
    assert (p.base_offset, p.log_end_offset) == (7, 9)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_malformed_answers_raise_protocol_error(data):
    frame = bytearray(encode_produce_response(5, 10, [{"name": "topic", "partition_responses": [
        {"index": 0, "base_offset": 7, "log_append_time": -1, "log_start_offset": 0,
         "error_message": "m", "log_end_offset": 9}]}])[4:])
    cut = data.draw(st.integers(0, len(frame) - 1))
    with pytest.raises(ProtocolError):
        decode_produce_response(frame[:cut], 10)
    flipped = bytearray(frame)
    at = data.draw(st.integers(4, len(frame) - 1))
    flipped[at] = data.draw(st.integers(0, 255))
    try:
        decode_produce_response(flipped, 10)
    except ProtocolError:
        pass  # anything else (IndexError, struct.error, UnicodeDecodeError) fails the test


def test_other_versions_are_refused():
    with pytest.raises(ValueError):
        encode_produce_request(1, None, 8, -1, 1, {"t": [(0, b"")]})
    with pytest.raises(ValueError):
        encode_produce_response(1, 13, [])


def request_fields(body) -> tuple:
    """What the broker's produce handler reads from a request, from either codec's objects."""
    return (body.transactional_id, body.acks, body.timeout,
            getattr(body, "produce_mode", 0),
            [(t.name, [(p.index, None if p.records is None else bytes(p.records))
                       for p in t.partition_data]) for t in body.topic_data])


def both_decoders(frame: bytearray):
    """(direct, generic) outcome for one request frame: fields, or "error". The direct side
    dispatches as the broker does: Produce v9-v12 to the direct decoder, the rest (a damaged
    header may name another API or version) to the generic one."""
    outcomes = []
    for direct in (True, False):
        try:
            header, pos = parse_request_header(frame)
            if direct and header.api_key == PRODUCE and header.api_version in DIRECT_VERSIONS:
                body = decode_produce_request(frame, pos, header.api_version)
            else:
                body = decode_request(frame).body
            outcomes.append(request_fields(body))
        except ProtocolError:
            outcomes.append("error")
    return outcomes


@settings(max_examples=150, deadline=None)
@given(version=st.sampled_from(DIRECT_VERSIONS), topics=request_topics(),
       mode=st.sampled_from([0, 1, 2]), data=st.data())
def test_the_broker_reads_requests_as_the_generic_codec_does(version, topics, mode, data):
    frame = bytearray(joined(encode_produce_request(9, "client", version, -1, 30000, topics,
                                                    mode))[4:])
    direct, generic = both_decoders(frame)
    assert direct == generic != "error"
    # the records are writable views of the frame: the log stamps offsets in place
    header, pos = parse_request_header(frame)
    for t in decode_produce_request(frame, pos, version).topic_data:
        for p in t.partition_data:
            assert p.records is None or (p.records.obj is frame and not p.records.readonly)
    # damaged frames: both refuse, or both read the same fields
    cut = data.draw(st.integers(0, len(frame)))
    assert len(set(map(repr, both_decoders(frame[:cut])))) == 1
    flipped = bytearray(frame)
    at = data.draw(st.integers(0, len(frame) - 1))
    flipped[at] = data.draw(st.integers(0, 255))
    direct, generic = both_decoders(flipped)
    assert direct == generic


def test_unknown_request_tags_are_skipped_and_the_mode_read():
    frame = bytearray(joined(encode_produce_request(9, None, 10, -1, 5, {"t": [(3, b"abc")]},
                                                    2))[4:])
    # top-level tags are the frame's tail: 1 tag (10000, 1 byte, 2); add an unknown tag 7
    assert frame[-5:] == bytearray(b"\x01\x90\x4e\x01\x02")
    patched = frame[:-5] + bytearray(b"\x02\x07\x03xyz\x90\x4e\x01\x02")
    header, pos = parse_request_header(patched)
    body = decode_produce_request(patched, pos, 10)
    assert body.produce_mode == 2
    assert bytes(body.topic_data[0].partition_data[0].records) == b"abc"
