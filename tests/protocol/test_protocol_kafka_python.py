"""Cross-check a handful of messages against kafka-python's independent protocol code.

Each message is built once with kafka-python and once with our builder; the framed
bytes (size + header + body) must be identical, and each side decodes the other's.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from kipproducer.protocol import (
    FEATURE_PRODUCE_OFFSETS,
    build_request,
    build_response,
    decode_request,
    decode_response,
    encode_request_frame,
    encode_response_frame,
)

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.consumer import FetchRequest, FetchResponse
    from kafka.protocol.metadata import (
        ApiVersionsRequest,
        ApiVersionsResponse,
        MetadataRequest,
        MetadataResponse,
    )
    from kafka.protocol.producer import ProduceRequest, ProduceResponse

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

CORRELATION_ID = 4242
CLIENT_ID = "kp-cross-check"
BATCH = bytes(range(70))


def kafka_python_request_frame(message: Any, version: int) -> bytes:
    message.API_VERSION = version
    message.with_header(correlation_id=CORRELATION_ID, client_id=CLIENT_ID)
    return bytes(message.encode(header=True, framed=True))


def kafka_python_response_frame(message: Any, version: int) -> bytes:
    message.API_VERSION = version
    message.with_header(correlation_id=CORRELATION_ID)
    return bytes(message.encode(header=True, framed=True))


def check_request(kp_message: Any, ours: Any) -> Any:
    version = type(ours).__version__
    theirs = kafka_python_request_frame(kp_message, version)
    mine = bytes(encode_request_frame(CORRELATION_ID, CLIENT_ID, ours))
    assert mine == theirs
    header, body = decode_request(theirs[4:])
    assert header.correlation_id == CORRELATION_ID and header.client_id == CLIENT_ID
    assert body == ours
    return type(kp_message).decode(mine[4:], version=version, header=True)


def check_response(kp_message: Any, ours: Any) -> Any:
    cls = type(ours)
    theirs = kafka_python_response_frame(kp_message, cls.__version__)
    mine = bytes(encode_response_frame(CORRELATION_ID, ours))
    assert mine == theirs
    correlation_id, body = decode_response(theirs[4:], cls.__api_key__, cls.__version__)
    assert correlation_id == CORRELATION_ID
    assert body == ours
    return type(kp_message).decode(mine[4:], version=cls.__version__, header=True)


@pytest.mark.parametrize("version", [0, 3, 4])
def test_api_versions_request(version: int) -> None:
    fields = {"client_software_name": "kp", "client_software_version": "1.0"}
    if version < 3:
        fields = {}
    decoded = check_request(ApiVersionsRequest(**fields), build_request(18, version, **fields))
    if version >= 3:
        assert decoded.client_software_name == "kp"


@pytest.mark.parametrize("version", [1, 4, 12])
def test_metadata_request(version: int) -> None:
    topic = {"name": "orders"} if version < 10 else {"name": "orders", "topic_id": None}
    extra = {"allow_auto_topic_creation": False} if version >= 4 else {}
    kp = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="orders")], **extra)
    decoded = check_request(kp, build_request(3, version, topics=[topic], **extra))
    assert decoded.topics[0].name == "orders"


@pytest.mark.parametrize("version", [7, 9])
def test_produce_request(version: int) -> None:
    topic_class = ProduceRequest.TopicProduceData
    kp = ProduceRequest(
        transactional_id="tx", acks=-1, timeout_ms=1500,
        topic_data=[topic_class(name="orders", partition_data=[
            topic_class.PartitionProduceData(index=2, records=BATCH)])],
    )
    ours = build_request(0, version, transactional_id="tx", acks=-1, timeout=1500,
                         topic_data=[{"name": "orders",
                                      "partition_data": [{"index": 2, "records": BATCH}]}])
    decoded = check_request(kp, ours)
    assert bytes(decoded.topic_data[0].partition_data[0].records) == BATCH


def test_fetch_request_v12() -> None:
    topic_class = FetchRequest.FetchTopic
    kp = FetchRequest(
        replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=52428800, isolation_level=1,
        session_id=0, session_epoch=-1, rack_id="",
        topics=[topic_class(topic="orders", partitions=[topic_class.FetchPartition(
            partition=0, current_leader_epoch=-1, fetch_offset=17, last_fetched_epoch=-1,
            log_start_offset=-1, partition_max_bytes=1048576)])],
        forgotten_topics_data=[],
    )
    ours = build_request(
        1, 12, replica_id=-1, max_wait=500, min_bytes=1, max_bytes=52428800, isolation_level=1,
        session_id=0, session_epoch=-1,
        topics=[{"topic": "orders", "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 17,
             "last_fetched_epoch": -1, "log_start_offset": -1,
             "partition_max_bytes": 1048576}]}],
    )
    decoded = check_request(kp, ours)
    assert decoded.topics[0].partitions[0].fetch_offset == 17


@pytest.mark.parametrize("version", [0, 3])
def test_api_versions_response(version: int) -> None:
    keys = [{"api_key": 0, "min_version": 3, "max_version": 13},
            {"api_key": 18, "min_version": 0, "max_version": 4}]
    features = [{"name": FEATURE_PRODUCE_OFFSETS, "min_version": 1, "max_version": 1}]
    version_class = ApiVersionsResponse.ApiVersion
    kp_fields: dict[str, Any] = {"error_code": 0, "api_keys": [version_class(**k) for k in keys]}
    our_fields: dict[str, Any] = {"api_keys": keys}
    if version >= 3:
        feature_class = ApiVersionsResponse.SupportedFeatureKey
        kp_fields.update(throttle_time_ms=0, supported_features=[feature_class(**features[0])])
        our_fields["supported_features"] = features
    ours = build_response(18, version, **our_fields)
    decoded = check_response(ApiVersionsResponse(**kp_fields), ours)
    if version >= 3:
        assert decoded.supported_features[0].name == "kip.produce.offsets"


def test_metadata_response_v12() -> None:
    topic_class = MetadataResponse.MetadataResponseTopic
    kp = MetadataResponse(
        throttle_time_ms=0,
        brokers=[MetadataResponse.MetadataResponseBroker(node_id=1, host="h", port=9092)],
        cluster_id="c1", controller_id=1,
        topics=[topic_class(error_code=0, name="orders", topic_id=None, is_internal=False,
                            partitions=[topic_class.MetadataResponsePartition(
                                error_code=0, partition_index=0, leader_id=1, leader_epoch=3,
                                replica_nodes=[1], isr_nodes=[1], offline_replicas=[])],
                            authorized_operations=None)],  # None: -2^31
    )
    ours = build_response(3, 12, brokers=[{"node_id": 1, "host": "h", "port": 9092}],
                          cluster_id="c1", controller_id=1,
                          topics=[{"name": "orders", "partitions": [
                              {"partition_index": 0, "leader_id": 1, "leader_epoch": 3,
                               "replica_nodes": [1], "isr_nodes": [1]}]}])
    decoded = check_response(kp, ours)
    assert decoded.topics[0].partitions[0].leader_epoch == 3


def test_produce_response_v9() -> None:
    topic_class = ProduceResponse.TopicProduceResponse
    kp = ProduceResponse(
        responses=[topic_class(name="orders", partition_responses=[
            topic_class.PartitionProduceResponse(
                index=0, error_code=0, base_offset=100, log_append_time_ms=-1,
                log_start_offset=0, record_errors=[], error_message=None)])],
        throttle_time_ms=0,
    )
    ours = build_response(0, 9, responses=[{"name": "orders", "partition_responses": [
        {"index": 0, "base_offset": 100, "log_start_offset": 0}]}])
    decoded = check_response(kp, ours)
    assert decoded.responses[0].partition_responses[0].base_offset == 100


def test_fetch_response_v12() -> None:
    topic_class = FetchResponse.FetchableTopicResponse
    kp = FetchResponse(
        throttle_time_ms=0, error_code=0, session_id=7,
        responses=[topic_class(topic="orders", partitions=[topic_class.PartitionData(
            partition_index=0, error_code=0, high_watermark=10, last_stable_offset=10,
            log_start_offset=0, aborted_transactions=None, preferred_read_replica=-1,
            records=BATCH)])],
    )
    ours = build_response(1, 12, session_id=7, responses=[{"topic": "orders", "partitions": [
        {"partition_index": 0, "high_watermark": 10, "last_stable_offset": 10,
         "log_start_offset": 0, "aborted_transactions": None, "records": BATCH}]}])
    decoded = check_response(kp, ours)
    assert bytes(decoded.responses[0].partitions[0].records) == BATCH
