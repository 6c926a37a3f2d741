"""build_* fills omitted fields with Kafka's defaults; encode failures name the field."""

from __future__ import annotations

import datetime

import pytest
from protocol_test_support import ALL_CLASSES, class_id

from kipproducer.protocol import (
    ProtocolError,
    build,
    build_request,
    build_response,
    decode,
    encode,
    encode_response_frame,
    fields_of,
    validate,
)


@pytest.mark.parametrize("cls", ALL_CLASSES, ids=class_id)
def test_all_defaults_object_round_trips(cls: type) -> None:
    obj = build(cls)
    validate(obj)
    payload = bytes(encode(obj))
    assert decode(cls, payload)[0] == obj


def test_produce_response_defaults_follow_kafka() -> None:
    response = build_response(0, 10, responses=[
        {"name": "t", "partition_responses": [{"index": 3, "base_offset": 17}]}])
    partition = response.responses[0].partition_responses[0]
    assert partition.error_code == 0
    assert partition.log_append_time == -1  # null timestamp, as on the wire
    assert partition.log_start_offset == -1
    assert partition.record_errors == () and partition.error_message is None
    assert partition.current_leader.leader_id == -1
    assert partition.log_end_offset is None
    assert response.throttle_time == 0
    assert response.node_endpoints == ()


def test_metadata_defaults_follow_kafka() -> None:
    response = build_response(3, 12, topics=[{"name": "t", "partitions": [{}]}])
    topic = response.topics[0]
    assert topic.topic_id is None and topic.is_internal is False
    assert topic.topic_authorized_operations == -(2**31)
    assert topic.partitions[0].leader_epoch == -1
    assert response.controller_id == -1 and response.cluster_id is None


def test_fetch_response_defaults_follow_kafka() -> None:
    response = build_response(1, 16, responses=[{"partitions": [{"partition_index": 0}]}])
    partition = response.responses[0].partitions[0]
    assert partition.last_stable_offset == -1 and partition.log_start_offset == -1
    assert partition.preferred_read_replica == -1
    assert partition.records is None  # nullable records: absent


def test_times_accept_timedelta_and_datetime() -> None:
    request = build_request(0, 9, timeout=datetime.timedelta(seconds=2))
    assert request.timeout == 2000
    when = datetime.datetime(2024, 1, 2, tzinfo=datetime.timezone.utc)
    response = build_response(0, 9, responses=[
        {"name": "t", "partition_responses": [{"log_append_time": when}]}])
    assert response.responses[0].partition_responses[0].log_append_time == int(
        when.timestamp() * 1000)


def test_objects_and_lists_are_accepted_for_nested_fields() -> None:
    partition = build_response(3, 12, topics=[{"partitions": [{}]}]).topics[0].partitions[0]
    response = build_response(3, 12, topics=[{"name": "t", "partitions": [partition]}])
    assert response.topics[0].partitions == (partition,)
    assert isinstance(response.topics, tuple)


def test_unknown_fields_are_rejected() -> None:
    with pytest.raises(TypeError, match="no field"):
        build_response(3, 12, topicz=[])
    with pytest.raises(TypeError, match="no field"):
        build_response(3, 12, topics=[{"nam": "t"}])
    assert "produce_mode" in fields_of(type(build_request(0, 9)))


class TestEncodeErrorsNameTheField:
    def bad_produce_response(self, **partition: object) -> object:
        return build_response(0, 9, responses=[
            {"name": "t", "partition_responses": [{"index": 0}, {"index": 1, **partition}]}])

    def test_none_in_a_required_field(self) -> None:
        response = self.bad_produce_response(base_offset=None)
        with pytest.raises(ProtocolError,
                           match=r"responses\[0\]\.partition_responses\[1\]\.base_offset: None"):
            encode(response)

    def test_out_of_range_int(self) -> None:
        response = self.bad_produce_response(error_code=40000)
        with pytest.raises(ProtocolError, match=r"error_code: 40000 is out of range"):
            encode_response_frame(1, response)

    def test_unencodable_string(self) -> None:
        response = self.bad_produce_response(error_message="\ud800")
        with pytest.raises(ProtocolError, match="error_message: string cannot be encoded"):
            encode(response)

    def test_wrong_type(self) -> None:
        response = build_response(3, 12, brokers=[{"host": 5}])
        with pytest.raises(ProtocolError, match=r"brokers\[0\]\.host: expected str"):
            encode(response)

    def test_failed_encode_leaves_the_buffer_alone(self) -> None:
        from kipproducer.protocol import encode_into

        buf = bytearray(b"keep")
        with pytest.raises(ProtocolError):
            encode_into(buf, self.bad_produce_response(base_offset="x"))
        assert buf == b"keep"

    def test_validate_accepts_good_objects(self) -> None:
        validate(self.bad_produce_response(base_offset=5))
