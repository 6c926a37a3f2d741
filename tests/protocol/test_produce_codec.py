"""The direct Produce encoders (protocol/produce_codec.py) against the generic schema codec:
the same bytes, read back by the generic decoders."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kipproducer.protocol import (
    build_request,
    build_response,
    decode_request,
    decode_response,
    encode_request_frame,
    encode_response_frame,
)
from kipproducer.protocol.produce_codec import (
    DIRECT_VERSIONS,
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

