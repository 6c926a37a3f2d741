"""The direct Produce codec (protocol/produce_codec.py, in C) against the generic schema codec:
the encoders write the same bytes, and the decoders read the same fields from any frame the
generic encoder writes and agree with the generic decoder on damaged ones."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from protocol_test_support import entity_strategy

from kipproducer.protocol import (
    PRODUCE_REQUEST_CLASSES,
    PRODUCE_RESPONSE_CLASSES,
    ProtocolError,
    build_request,
    build_response,
    decode_request,
    decode_request_body,
    decode_response,
    encode,
    encode_request_frame,
    encode_response_frame,
    parse_request_header,
)
from kipproducer.protocol.produce_codec import (
    DIRECT_VERSIONS,
    decode_produce_request_body,
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
    """What the engine reads from a decoded answer."""
    return [(t.name, [(p.index, p.error_code, p.base_offset, p.log_append_time,
                       p.log_start_offset, p.error_message, getattr(p, "log_end_offset", None),
                       [(e.batch_index, e.batch_index_error_message) for e in p.record_errors])
                      for p in t.partition_responses])
            for t in answer.responses]


@settings(max_examples=150, deadline=None)
@given(version=st.sampled_from(DIRECT_VERSIONS), data=st.data(), with_log_end=st.booleans(),
       correlation_id=st.integers(0, 2**31 - 1))
def test_response_bytes_match_the_generic_codec(version, data, with_log_end, correlation_id):
    topics = data.draw(answers(with_log_end))
    direct = bytes(encode_produce_response(correlation_id, version, topics))
    generic = bytes(encode_response_frame(
        correlation_id, build_response(PRODUCE, version, responses=topics)))
    assert direct == generic
    theirs = decode_response(bytearray(direct[4:]), PRODUCE, version).body
    assert fields(theirs) == [(t["name"], [
        (p["index"], p["error_code"], p["base_offset"], p["log_append_time"],
         p["log_start_offset"], p["error_message"], p.get("log_end_offset"),
         [(e["batch_index"], e["batch_index_error_message"]) for e in p["record_errors"]])
        for p in t["partition_responses"]]) for t in topics]


def test_other_versions_are_refused():
    with pytest.raises(ValueError):
        encode_produce_request(1, None, 8, -1, 1, {"t": [(0, b"")]})
    with pytest.raises(ValueError):
        encode_produce_response(1, 13, [])



# -- the decoders ------------------------------------------------------------------------------


def request_fields(body) -> tuple:
    """What the broker reads from a decoded ProduceRequest."""
    return (body.transactional_id, body.acks, body.timeout, getattr(body, "produce_mode", 0),
            [(t.name, [(p.index, None if p.records is None else bytes(p.records))
                       for p in t.partition_data]) for t in body.topic_data])


def both_requests(frame: bytearray):
    """(generic, direct) decoding of a request body: fields, or the ProtocolError. Only
    frames whose header still says Produce at a direct version (as the broker chooses)."""
    try:
        header, offset = parse_request_header(frame)
    except ProtocolError:
        assume(False)
    assume(header.api_key == PRODUCE and header.api_version in DIRECT_VERSIONS)
    results = []
    for decode in (decode_request_body, direct_request_body):
        try:
            results.append(request_fields(decode(header, frame, offset)))
        except ProtocolError as exc:
            results.append(type(exc))
    return results


def direct_request_body(header, frame, offset):
    return decode_produce_request_body(frame, offset, header.api_version)


@settings(max_examples=200, deadline=None)
@given(data=st.data(), version=st.sampled_from(DIRECT_VERSIONS),
       client_id=st.none() | st.text(max_size=10))
def test_request_decoder_reads_what_the_generic_encoder_wrote(data, version, client_id):
    body = data.draw(entity_strategy(PRODUCE_REQUEST_CLASSES[version]))
    frame = bytearray(bytes(encode_request_frame(5, client_id, body))[4:])
    generic, direct = both_requests(frame)
    assert generic == direct
    assert direct[4] == [(t.name, [(p.index, p.records) for p in t.partition_data])
                         for t in body.topic_data]


def test_request_records_are_views_of_the_frame():
    parts = encode_produce_request(3, "c", 10, -1, 1000, {"t": [(0, b"abc"), (1, None)]}, 1)
    frame = bytearray(joined(parts)[4:])
    header, offset = parse_request_header(frame)
    body = decode_produce_request_body(frame, offset, 10)
    view = body.topic_data[0].partition_data[0].records
    assert isinstance(view, memoryview) and view.obj is frame and not view.readonly
    assert body.topic_data[0].partition_data[1].records is None
    assert body.produce_mode == 1
    assert "records=<3 bytes>" in repr(body)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), version=st.sampled_from(DIRECT_VERSIONS))
def test_request_decoder_agrees_with_the_generic_one_on_damaged_frames(data, version):
    body = data.draw(entity_strategy(PRODUCE_REQUEST_CLASSES[version]))
    frame = bytearray(bytes(encode_request_frame(5, "c", body))[4:])
    cut = data.draw(st.integers(0, len(frame)))
    if data.draw(st.booleans()):
        frame = frame[:cut]  # truncated
    elif cut < len(frame):
        frame[cut] = data.draw(st.integers(0, 255))  # one byte changed
    generic, direct = both_requests(frame)
    assert generic == direct


def response_fields(body) -> list:
    """What the engine reads from a decoded ProduceResponse."""
    return [(t.name, [(p.index, p.error_code, p.base_offset, p.log_append_time,
                       p.log_start_offset, p.error_message, getattr(p, "log_end_offset", None),
                       [(e.batch_index, e.batch_index_error_message) for e in p.record_errors])
                      for p in t.partition_responses])
            for t in body.responses], body.throttle_time


def response_frame(body) -> bytearray:
    return bytearray(bytes(encode_response_frame(9, body))[4:])


@settings(max_examples=200, deadline=None)
@given(data=st.data(), version=st.sampled_from(DIRECT_VERSIONS))
def test_response_decoder_reads_what_the_generic_encoder_wrote(data, version):
    """With every field drawn, the v10+ current_leader and node_endpoints tags included (the
    direct decoder skips those two)."""
    body = data.draw(entity_strategy(PRODUCE_RESPONSE_CLASSES[version].response))
    frame = response_frame(body)
    direct = response_fields(decode_produce_response(frame, version))
    assert direct == response_fields(decode_response(frame, PRODUCE, version).body)
    assert [name for name, _ in direct[0]] == [t.name for t in body.responses]


@settings(max_examples=300, deadline=None)
@given(data=st.data(), version=st.sampled_from(DIRECT_VERSIONS))
def test_response_decoder_on_damaged_frames(data, version):
    """Whatever the generic decoder reads, the direct one reads the same; where the generic
    one refuses, the direct one refuses too (ProtocolError) or, when the damage is inside a
    tag it skips, reads the rest."""
    body = data.draw(entity_strategy(PRODUCE_RESPONSE_CLASSES[version].response))
    frame = response_frame(body)
    cut = data.draw(st.integers(0, len(frame)))
    if data.draw(st.booleans()):
        frame = frame[:cut]
    elif cut < len(frame):
        frame[cut] = data.draw(st.integers(0, 255))
    try:
        generic = response_fields(decode_response(frame, PRODUCE, version).body)
    except ProtocolError:
        generic = None
    try:
        direct = response_fields(decode_produce_response(frame, version))
    except ProtocolError:
        assert generic is None
        return
    if generic is not None:
        assert direct == generic


@pytest.mark.parametrize("frame", [b"", b"\x00\x00", b"\x00\x00\x00\x01\x00\x02",
                                   b"\x00\x00\x00\x01\x00\xff\xff\xff\xff\xff\x0f"])
def test_response_decoder_refuses_short_and_lying_frames(frame):
    with pytest.raises(ProtocolError):
        decode_produce_response(bytearray(frame), 10)


def test_decoders_refuse_other_versions():
    with pytest.raises(ValueError):
        decode_produce_response(bytearray(20), 8)
    with pytest.raises(ValueError):
        decode_produce_request_body(bytearray(20), 0, 13)


def test_request_body_with_unknown_tags_and_a_mode_tag_of_the_wrong_size():
    body = build_request(PRODUCE, 10, transactional_id="tx", acks=1, timeout=5,
                         topic_data=[{"name": "t", "partition_data": []}])
    raw = encode(body)[:-1]  # drop the empty top-level tag buffer
    # two tags: an unknown one (7, 3 bytes) and ProduceMode (10000) with 2 bytes
    tagged = bytearray(raw) + bytes([2, 7, 3, 1, 2, 3, 0x90, 0x4E, 2, 1, 9])
    assert decode_produce_request_body(tagged, 0, 10).produce_mode == 1
    short = bytearray(raw) + bytes([1, 0x90, 0x4E, 0])  # ProduceMode with 0 bytes
    with pytest.raises(ProtocolError):
        decode_produce_request_body(short, 0, 10)
