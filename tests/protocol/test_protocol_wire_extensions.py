"""The kipproducer wire extensions (shared/KIP-WIRE.md) and open error codes."""

from __future__ import annotations

import datetime

import pytest
from kio.schema.errors import ErrorCode
from protocol_test_support import kio_read, kio_write

from kipproducer.protocol import (
    FEATURE_PRODUCE_CONDITIONAL,
    FEATURE_PRODUCE_OFFSETS,
    PRODUCE_REQUEST_CLASSES,
    PRODUCE_RESPONSE_CLASSES,
    ProduceMode,
    build_request,
    build_response,
    decode,
    decode_request,
    decode_response,
    encode,
    encode_request_frame,
    encode_response_frame,
    error_codes,
    produce_mode_of,
    request_class,
    response_class,
)
from kipproducer.protocol.wire import uvarint_bytes

TAG_10000 = uvarint_bytes(10000)
EXTENDED = range(9, 14)
BATCH = bytes(range(61)) * 2


def _topic(version: int, **extra: object) -> dict[str, object]:
    topic: dict[str, object] = {"topic_id": None} if version >= 13 else {"name": "orders"}
    topic.update(extra)
    return topic


def produce_request(version: int, mode: int) -> object:
    return build_request(
        0,
        version,
        acks=-1,
        timeout=30_000,
        topic_data=[_topic(version, partition_data=[{"index": 0, "records": BATCH}])],
        produce_mode=mode,
    )


@pytest.mark.parametrize("version", EXTENDED)
@pytest.mark.parametrize("mode", list(ProduceMode))
def test_produce_mode_round_trips(version: int, mode: ProduceMode) -> None:
    request = produce_request(version, mode)
    frame = encode_request_frame(11, "kp", request)
    header, body = decode_request(bytes(frame[4:]))
    assert (header.api_key, header.api_version, header.correlation_id) == (0, version, 11)
    assert body.produce_mode == mode
    assert produce_mode_of(body) == mode
    assert body == request
    # Written only when not the default 0, as a tagged field 10000 of one byte.
    assert (TAG_10000 + b"\x01" + bytes([mode]) in frame) == (mode != 0)


@pytest.mark.parametrize("version", EXTENDED)
def test_stock_request_decodes_with_mode_assign(version: int) -> None:
    stock_class = request_class(0, version).__mro__[1]
    assert stock_class.__module__.startswith("kio.schema.produce")
    stock = stock_class(
        acks=1,
        timeout=datetime.timedelta(seconds=5),
        topic_data=(),
    )
    payload = kio_write(stock_class, stock)
    decoded, _ = decode(request_class(0, version), payload)
    assert decoded.produce_mode == ProduceMode.ASSIGN
    assert decoded.acks == 1 and decoded.timeout == 5000


@pytest.mark.parametrize("version", EXTENDED)
def test_extension_bytes_read_by_kio_with_extended_class(version: int) -> None:
    # KIP-WIRE §7: kio's reader handles the extended class too, and a stock kio class
    # fails on the tag (the reason this layer skips unknown tags itself).
    request = produce_request(version, ProduceMode.EXPECTED_OFFSETS)
    payload = bytes(encode(request))
    assert kio_read(request_class(0, version), payload).produce_mode == 2
    with pytest.raises(KeyError):
        kio_read(request_class(0, version).__mro__[1], payload)
    # Our decoder with the stock class skips the unknown tag instead.
    stock_decoded, _ = decode(request_class(0, version).__mro__[1], payload)
    assert stock_decoded.acks == -1


def test_produce_mode_below_v9_is_assign() -> None:
    request = build_request(0, 8, acks=1, timeout=1000, topic_data=[])
    assert produce_mode_of(request) == 0
    with pytest.raises(TypeError, match="produce_mode"):
        build_request(0, 8, acks=1, produce_mode=1)


def produce_response(version: int, *partitions: dict[str, object]) -> object:
    return build_response(
        0, version, responses=[_topic(version, partition_responses=list(partitions))]
    )


@pytest.mark.parametrize("version", EXTENDED)
def test_log_end_offset_round_trips_and_is_absent_when_unset(version: int) -> None:
    response = produce_response(
        version,
        {"index": 0, "error_code": error_codes.INVALID_PRODUCE_OFFSET, "log_end_offset": 42},
        {"index": 1, "error_code": error_codes.OFFSET_MISMATCH, "log_end_offset": 0},
        {"index": 2, "error_code": error_codes.OPERATION_NOT_ATTEMPTED, "log_end_offset": 7},
        {"index": 3, "base_offset": 5},
    )
    frame = encode_response_frame(99, response)
    correlation_id, body = decode_response(bytes(frame[4:]), 0, version)
    assert correlation_id == 99
    assert body == response
    partitions = body.responses[0].partition_responses
    assert [p.error_code for p in partitions] == [10391, 10027, 55, 0]
    assert [p.log_end_offset for p in partitions] == [42, 0, 7, None]
    assert [type(p.error_code) for p in partitions] == [int] * 4
    # Three partitions carry tag 10000 (8 bytes each); the unset one writes nothing.
    assert frame.count(TAG_10000 + b"\x08") == 3


@pytest.mark.parametrize("version", EXTENDED)
def test_response_without_log_end_offset_is_byte_identical_to_stock(version: int) -> None:
    response = produce_response(version, {"index": 0, "base_offset": 100})
    stock_class = response_class(0, version).__mro__[1]
    stock_bytes = kio_write(stock_class, kio_read(stock_class, bytes(encode(response))))
    assert bytes(encode(response)) == stock_bytes


@pytest.mark.parametrize("code", [10391, 10027, -1, 0, 133, 4242, 32767, -32768])
def test_any_int16_error_code_round_trips(code: int) -> None:
    response = produce_response(9, {"index": 0, "error_code": code})
    decoded, _ = decode(response_class(0, 9), bytes(encode(response)))
    assert decoded.responses[0].partition_responses[0].error_code == code


def test_kio_error_code_enum_encodes_too() -> None:
    response = produce_response(9, {"index": 0, "error_code": ErrorCode.not_leader_or_follower})
    decoded, _ = decode(response_class(0, 9), bytes(encode(response)))
    assert decoded.responses[0].partition_responses[0].error_code == 6


def test_supported_features_advertised_in_api_versions() -> None:
    features = [
        {"name": name, "min_version": 1, "max_version": 1}
        for name in (FEATURE_PRODUCE_OFFSETS, FEATURE_PRODUCE_CONDITIONAL)
    ]
    for version in (3, 4):
        response = build_response(
            18, version, api_keys=[{"api_key": 0, "min_version": 3, "max_version": 13}],
            supported_features=features,
        )
        payload = bytes(encode(response))
        kio_view = kio_read(response_class(18, version), payload)
        assert [f.name for f in kio_view.supported_features] == [
            "kip.produce.offsets",
            "kip.produce.conditional",
        ]
        assert decode(response_class(18, version), payload)[0] == response


def test_extended_classes_are_kio_subclasses() -> None:
    for version in EXTENDED:
        assert issubclass(PRODUCE_REQUEST_CLASSES[version], request_class(0, version).__mro__[1])
        classes = PRODUCE_RESPONSE_CLASSES[version]
        assert classes.response is response_class(0, version)
        assert "log_end_offset" in classes.partition.__dataclass_fields__


class TestErrorCodeTable:
    def test_named_constants_match_the_table(self) -> None:
        constants = {
            name: value
            for name, value in vars(error_codes).items()
            if name.isupper() and isinstance(value, int) and name != "ERRORS"
        }
        assert len(constants) > 50
        for name, value in constants.items():
            assert error_codes.error_name(value) == name
            assert error_codes.error_code(name) == value

    def test_table_covers_every_kio_code_and_the_extensions(self) -> None:
        extensions = {10391, 10027, 10044, 10045, 10046}
        assert {int(c) for c in ErrorCode} | extensions == set(error_codes.ERRORS)
        assert error_codes.KafkaErrorCode.STALE_BROKER_EPOCH == 77
        assert error_codes.KafkaErrorCode(10391).name == "INVALID_PRODUCE_OFFSET"

    def test_project_codes(self) -> None:
        expected = {
            "NONE": 0, "CORRUPT_MESSAGE": 2, "UNKNOWN_TOPIC_OR_PARTITION": 3,
            "CLUSTER_AUTHORIZATION_FAILED": 31, "UNSUPPORTED_VERSION": 35,
            "POLICY_VIOLATION": 44, "OUT_OF_ORDER_SEQUENCE_NUMBER": 45,
            "INVALID_PRODUCER_EPOCH": 47, "INVALID_TXN_STATE": 48,
            "OPERATION_NOT_ATTEMPTED": 55, "INVALID_RECORD": 87,
            "INVALID_PRODUCE_OFFSET": 10391, "OFFSET_MISMATCH": 10027,
            "KEY_OFFSET_MISMATCH": 10044, "KEY_INDEX_INCOMPLETE": 10045,
            "PARTITION_COUNT_MISMATCH": 10046,
        }
        for name, code in expected.items():
            assert getattr(error_codes, name) == code
            assert error_codes.error_code(name.lower()) == code

    def test_retriable_flags(self) -> None:
        assert error_codes.is_retriable(error_codes.NOT_LEADER_OR_FOLLOWER)
        assert error_codes.is_retriable(error_codes.UNKNOWN_TOPIC_OR_PARTITION)
        assert not error_codes.is_retriable(error_codes.INVALID_PRODUCE_OFFSET)
        assert not error_codes.is_retriable(error_codes.OFFSET_MISMATCH)
        assert not error_codes.is_retriable(error_codes.INVALID_RECORD)
        assert not error_codes.is_retriable(31337)  # unknown: like UNKNOWN_SERVER_ERROR

    def test_unknown_codes_have_a_name(self) -> None:
        assert error_codes.error_name(31337) == "UNKNOWN_ERROR_31337"
        assert error_codes.error_info(31337) is None
        with pytest.raises(KeyError):
            error_codes.error_code("NO_SUCH_ERROR")

    def test_feature_names_and_modes(self) -> None:
        assert FEATURE_PRODUCE_OFFSETS == "kip.produce.offsets"
        assert FEATURE_PRODUCE_CONDITIONAL == "kip.produce.conditional"
        assert [int(m) for m in ProduceMode] == [0, 1, 2]
        assert ProduceMode.USE_OFFSETS.name == "USE_OFFSETS"
