"""Fuzz the broker's whole request path: socket → framing → decoder → handler → response.

Two hypothesis tests against one in-process EmbeddedBroker (fast to start, and its log records
can be inspected directly):

* well-formed requests with random field values, for every (api_key, version) the broker
  advertises: each must be answered (a decodable response with the right correlation id), or,
  for the old versions advertised only for librdkafka's feature detection, close the connection;
* byte-level mutations of valid requests for several APIs (bit flips, overwritten bytes,
  truncation, appended garbage, lying size prefixes): each connection must get well-formed
  responses or be closed, within a few seconds.

Each connection is half-closed after the request (SHUT_WR), so the broker sees the end of the
stream right behind the request and a truncated frame is detected at once. Afterwards no
handler may have crashed (no exception logged), and a fresh client still gets ApiVersions,
Metadata and the records stored before the run.
"""

from __future__ import annotations

import logging
import os
import socket
import struct
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from kipproducer.broker.api import API_TABLE
from kipproducer.broker.embedded import EmbeddedBroker
from kipproducer.protocol import (
    ProtocolError,
    build_request,
    decode_request,
    decode_response,
    encode_request_frame,
    request_class,
)
from kipproducer.protocol.field_specs import INT_RANGES, FieldSpec, field_specs
from kipproducer.records import decode_batches, encode_batch

TOPIC, KEPT = "fz", "fz-kept-data"
#: More examples for a long local hunt: KIP_FUZZ_EXAMPLES=5000 pytest tests/integration/...
EXAMPLES = int(os.environ.get("KIP_FUZZ_EXAMPLES", "300"))
CONN_TIMEOUT = 5.0  # per connection: every answer (or the close) must come well before this
PRODUCE, FETCH, API_VERSIONS, METADATA, JOIN_GROUP, SYNC_GROUP = 0, 1, 18, 3, 11, 14


def _has_schema(key: int, version: int) -> bool:
    try:
        request_class(key, version)
    except ProtocolError:  # e.g. Produce v0-2: advertised, refused, and unknown to kio
        return False
    return True


#: Every advertised (api_key, version) a request can be encoded for.
SERVED = [
    (key, version)
    for key, spec in sorted(API_TABLE.items())
    for version in range(spec.advertise_min, spec.max_version + 1)
    if _has_schema(key, version)
]


class ErrorLog(logging.Handler):
    """Collects ERROR records of the broker and asyncio: a crashed handler logs one."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class Target:
    def __init__(self, broker: EmbeddedBroker, errors: ErrorLog, topic_id: uuid.UUID) -> None:
        self.broker = broker
        self.errors = errors
        self.topic_id = topic_id
        self.address = (broker.host, broker.port)


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> Iterator[Target]:
    errors = ErrorLog()
    loggers = [logging.getLogger("kipproducer"), logging.getLogger("asyncio")]
    for lg in loggers:
        lg.addHandler(errors)
    broker = EmbeddedBroker(
        tmp_path_factory.mktemp("fuzz-broker"),
        config={"request.read.timeout.ms": 2000, "num.partitions": 1},
    )
    try:
        info = broker.call(lambda b: b.logs.create_topic(TOPIC, 2))
        broker.call(lambda b: b.logs.create_topic(KEPT, 1))
        # Records acknowledged before the fuzzing: they must be intact after it.
        produce = build_request(
            PRODUCE,
            9,
            acks=-1,
            timeout=5000,
            topic_data=[{"name": KEPT, "partition_data": [{"index": 0, "records": kept_batch()}]}],
        )
        [frame] = exchange(encode_request_frame(1, "setup", produce), (broker.host, broker.port))
        answer = decode_response(frame, PRODUCE, 9).body
        assert answer.responses[0].partition_responses[0].error_code == 0
        yield Target(broker, errors, info.topic_id)
    finally:
        broker.close()
        for lg in loggers:
            lg.removeHandler(errors)


def kept_batch() -> bytes:
    # Timestamps of now: older ones would be due for retention (7 days) during the run.
    now = int(time.time() * 1000)
    return encode_batch([(b"k%d" % i, b"kept-%d" % i, [], now + i) for i in range(5)])


def exchange(data: bytes, address: tuple[str, int], timeout: float = CONN_TIMEOUT) -> list[bytes]:
    """Send ``data``, half-close, read every response frame until the broker closes.

    Fails if the broker neither answers nor closes within ``timeout``; returns the frames
    (without their size prefixes). A frame cut short by the close is an error too.
    """
    deadline = time.monotonic() + timeout
    with socket.create_connection(address, timeout=timeout) as sock:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the broker already closed on an early part of the data: fine
        received = bytearray()
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no answer and no close within {timeout} s")
            sock.settimeout(left)
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            except TimeoutError:
                raise AssertionError(f"no answer and no close within {timeout} s") from None
            if not chunk:
                break
            received += chunk
    frames = []
    pos = 0
    while pos < len(received):
        assert len(received) - pos >= 4, "a response size prefix cut short"
        (size,) = struct.unpack_from(">i", received, pos)
        assert 0 <= size <= len(received) - pos - 4, "a response frame cut short"
        frames.append(bytes(received[pos + 4 : pos + 4 + size]))
        pos += 4 + size
    return frames


def api_versions_frame(correlation_id: int) -> bytes:
    return bytes(encode_request_frame(correlation_id, "fuzz", build_request(API_VERSIONS, 3)))


def assert_no_crash(target: Target) -> None:
    if target.errors.records:
        record = target.errors.records[0]
        text = logging.Formatter().format(record)
        target.errors.records.clear()
        raise AssertionError(f"the broker logged an error:\n{text}")


# -- well-formed requests with random values -----------------------------------------------------

NAMES = st.one_of(
    st.sampled_from([TOPIC, "fz-other", "", "bad/name", "a" * 250, "__consumer_offsets"]),
    st.text(max_size=8),
)
CONFIG_NAMES = st.sampled_from(
    [
        "cleanup.policy",
        "retention.ms",
        "segment.bytes",
        "max.message.bytes",
        "flush.messages",
        "message.timestamp.type",
        "num.partitions",
        "no.such.config",
        "",
    ]
)
CONFIG_TEXT = st.sampled_from(["1", "-1", "0", "compact", "delete", "LogAppendTime", "x", ""])
CONFIG_VALUES = st.one_of(st.none(), CONFIG_TEXT)


def record_batches() -> st.SearchStrategy[bytes | None]:
    records = st.lists(
        st.tuples(
            st.one_of(st.none(), st.binary(max_size=8)),
            st.one_of(st.none(), st.binary(max_size=16)),
            st.just([]),
            st.integers(1_600_000_000_000, 1_800_000_000_000),
        ),
        min_size=1,
        max_size=3,
    )
    valid = st.builds(
        lambda recs, base, pid, seq, comp: bytes(
            encode_batch(
                recs,
                base_offset=base,
                producer_id=pid,
                producer_epoch=0 if pid >= 0 else -1,
                base_sequence=seq if pid >= 0 else -1,
                compression=comp,
            )
        ),
        records,
        st.sampled_from([0, 0, 0, 5]),
        st.sampled_from([-1, -1, 0, 1, 12345]),
        st.integers(0, 3),
        st.sampled_from([None, None, "gzip", "zstd"]),
    )
    return st.one_of(valid, st.binary(max_size=80), st.none())


def int_values(spec: FieldSpec) -> st.SearchStrategy[int]:
    low, high = INT_RANGES[spec.kind]
    name = spec.name
    # Fields whose large values make a request legitimately slow or huge are kept small: the
    # broker may wait max_wait for data, and creates what num_partitions asks for (capped).
    if name == "max_wait":
        return st.integers(-1, 50)
    if name in ("num_partitions", "count"):
        # Small, or far above the 10,000 new partitions a request may add (refused at once):
        # a few thousand real partitions per example would take seconds and file descriptors.
        return st.sampled_from([-1, 0, 1, 2, 3, 20_001, 2**31 - 1, -(2**31)])
    if name == "acks":
        return st.sampled_from([-1, 0, 1, 2, -2])
    if name in ("partition_index", "partition", "index"):
        return st.sampled_from([0, 1, 2, -1, 2**31 - 1])
    edges = [v for v in (low, high, -1, 0, 1) if low <= v <= high]
    return st.one_of(st.sampled_from(edges), st.integers(low, high), st.integers(-2, 8))


def scalar(spec: FieldSpec, topic_id: uuid.UUID) -> st.SearchStrategy[Any]:
    kind = spec.kind
    if kind == "entity":
        return entity(spec.entity, topic_id)  # type: ignore[arg-type]
    if kind in INT_RANGES:
        return int_values(spec)
    if kind == "bool":
        return st.booleans()
    if kind == "float64":
        return st.floats(allow_nan=True)
    if kind == "uuid":
        return st.one_of(st.none(), st.just(topic_id), st.uuids())
    if kind == "string":
        if spec.name == "group_id":
            # A fresh group each time: a JoinGroup never waits for members of another example.
            return st.uuids().map(str)
        if spec.name == "name" or spec.name in ("topic", "resource_name", "key"):
            return NAMES
        return st.one_of(NAMES, CONFIG_NAMES, CONFIG_TEXT)
    if kind == "records":
        return record_batches()
    if kind == "bytes":
        return st.binary(max_size=24)
    raise AssertionError(kind)


def field(spec: FieldSpec, topic_id: uuid.UUID) -> st.SearchStrategy[Any]:
    if spec.is_array:
        values: st.SearchStrategy[Any] = st.lists(scalar(spec, topic_id), max_size=3).map(tuple)
    elif spec.kind == "string" and spec.name == "value":
        values = CONFIG_VALUES
    elif spec.kind == "string" and spec.name == "name" and spec.nullable:
        values = NAMES
    else:
        values = scalar(spec, topic_id)
    if spec.nullable:
        values = st.one_of(st.none(), values)
    return values


def entity(cls: type, topic_id: uuid.UUID) -> st.SearchStrategy[Any]:
    return st.builds(cls, **{s.name: field(s, topic_id) for s in field_specs(cls)})


@st.composite
def wellformed_requests(draw, topic_id: uuid.UUID) -> tuple[int, int, Any]:
    key, version = draw(st.sampled_from(SERVED))
    body = draw(entity(request_class(key, version), topic_id))
    return key, version, body


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_wellformed_requests_are_answered(target: Target, data: st.DataObject) -> None:
    target.errors.records.clear()  # an earlier failing example may have left its own
    key, version, body = data.draw(wellformed_requests(target.topic_id), label="request")
    try:
        request = bytes(encode_request_frame(41, "fuzz", body))
    except ProtocolError:
        event("not encodable")
        return  # a value this version cannot carry (e.g. a null where none is allowed)
    event(f"api {key}")
    frames = exchange(request + api_versions_frame(42), target.address)
    spec = API_TABLE[key]
    if version < spec.min_version:
        # Advertised for librdkafka's feature detection only: refused by closing (as Kafka
        # does for a version it does not serve), before anything else is read.
        assert frames == [], f"api {key} v{version} was answered"
    else:
        silent = key == PRODUCE and body.acks == 0
        assert len(frames) == (1 if silent else 2), f"api {key} v{version}: {len(frames)} frames"
        if not silent:
            response = decode_response(frames[0], key, version)
            assert response.correlation_id == 41
        # The connection kept going in order: the ApiVersions behind it was answered too.
        assert decode_response(frames[-1], API_VERSIONS, 3).correlation_id == 42
    assert_no_crash(target)


# -- byte-level mutations of valid requests ------------------------------------------------------


def seeds(topic_id: uuid.UUID) -> list[bytes]:
    group = f"fz-group-{uuid.uuid4().hex[:6]}"
    batch = bytes(encode_batch([(b"k", b"v", [("h", b"1")], 1_700_000_000_000)]))
    bodies = [
        build_request(API_VERSIONS, 3, client_software_name="fz", client_software_version="1"),
        build_request(API_VERSIONS, 0),
        build_request(METADATA, 12, topics=[{"name": TOPIC}], allow_auto_topic_creation=False),
        build_request(METADATA, 4, topics=None),
        build_request(
            PRODUCE,
            9,
            acks=-1,
            timeout=1000,
            topic_data=[{"name": TOPIC, "partition_data": [{"index": 0, "records": batch}]}],
        ),
        build_request(
            PRODUCE,
            3,
            acks=1,
            timeout=1000,
            topic_data=[{"name": TOPIC, "partition_data": [{"index": 1, "records": batch}]}],
        ),
        build_request(
            FETCH,
            12,
            max_wait=10,
            min_bytes=1,
            max_bytes=1 << 20,
            topics=[
                {
                    "topic": TOPIC,
                    "partitions": [
                        {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
                    ],
                }
            ],
        ),
        build_request(
            FETCH,
            16,
            max_wait=10,
            topics=[
                {
                    "topic_id": topic_id,
                    "partitions": [{"partition": 1, "partition_max_bytes": 65536}],
                }
            ],
        ),
        build_request(
            2, 7, topics=[{"name": TOPIC, "partitions": [{"partition_index": 0, "timestamp": -1}]}]
        ),
        build_request(
            19,
            7,
            topics=[
                {
                    "name": "fz-made",
                    "num_partitions": 1,
                    "replication_factor": 1,
                    "configs": [{"name": "retention.ms", "value": "1000"}],
                }
            ],
        ),
        build_request(10, 4, key_type=0, coordinator_keys=[group]),
        build_request(
            8,
            8,
            group_id=group,
            generation_id_or_member_epoch=-1,
            topics=[{"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": 1}]}],
        ),
        build_request(9, 8, groups=[{"group_id": group, "topics": None}]),
        build_request(
            JOIN_GROUP,
            6,
            group_id=group,
            session_timeout=10_000,
            rebalance_timeout=1000,
            member_id="",
            protocol_type="consumer",
            protocols=[{"name": "range", "metadata": b"\x00\x01"}],
        ),
        build_request(12, 4, group_id=group, generation_id=1, member_id="m"),
        build_request(
            32,
            4,
            resources=[{"resource_type": 2, "resource_name": TOPIC, "configuration_keys": None}],
        ),
        build_request(
            44,
            1,
            resources=[
                {
                    "resource_type": 2,
                    "resource_name": "fz-other",
                    "configs": [{"name": "retention.ms", "config_operation": 0, "value": "5000"}],
                }
            ],
        ),
        build_request(
            21,
            2,
            topics=[{"name": "fz-other", "partitions": [{"partition_index": 0, "offset": 0}]}],
        ),
        build_request(22, 4, transactional_id=None, producer_id=-1, producer_epoch=-1),
        build_request(60, 1),
    ]
    return [bytes(encode_request_frame(7, "fuzz", body)) for body in bodies]


@st.composite
def mutated_frames(draw, seed_frames: list[bytes]) -> bytes:
    frame = bytearray(draw(st.sampled_from(seed_frames)))
    payload_len = len(frame) - 4
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["flip", "byte", "truncate", "append", "prefix", "splice"]))
        if op == "flip" and len(frame) > 4:
            pos = draw(st.integers(4, len(frame) - 1))
            frame[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "byte" and len(frame) > 4:
            pos = draw(st.integers(4, len(frame) - 1))
            frame[pos] = draw(st.sampled_from([0x00, 0xFF, 0x7F, 0x80, 0x01]))
        elif op == "truncate":
            frame = frame[: draw(st.integers(0, len(frame)))]
        elif op == "append":
            frame += draw(st.binary(min_size=1, max_size=64))
        elif op == "prefix" and len(frame) >= 4:
            frame[0:4] = struct.pack(
                ">i",
                draw(
                    st.one_of(
                        st.sampled_from([0, -1, 2**31 - 1, -(2**31), 3, payload_len + 1]),
                        st.integers(-(2**31), 2**31 - 1),
                    )
                ),
            )
        elif op == "splice" and len(frame) > 4:
            pos = draw(st.integers(4, len(frame)))
            frame[pos:pos] = draw(st.binary(min_size=1, max_size=16))
    if draw(st.booleans()) and len(frame) >= 4:
        # Keep the size prefix truthful half the time, so mutations reach the decoder.
        frame[0:4] = struct.pack(">i", len(frame) - 4)
    return bytes(frame)


def may_wait(frame: bytes) -> bool:
    """A request the broker may legitimately hold past CONN_TIMEOUT (as Kafka would)."""
    try:
        (size,) = struct.unpack_from(">i", frame, 0)
        request = decode_request(frame[4 : 4 + size])
    except (ProtocolError, struct.error):
        return False
    key = request.header.api_key
    if key == FETCH:
        return request.body.max_wait >= CONN_TIMEOUT * 1000 / 2
    # A join / sync of a group another example joined waits for its rebalance.
    return key in (JOIN_GROUP, SYNC_GROUP)


@pytest.fixture(scope="module")
def seed_frames(target: Target) -> list[bytes]:
    return seeds(target.topic_id)


@settings(
    max_examples=EXAMPLES * 2,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_mutated_frames_get_answers_or_a_close(
    target: Target, seed_frames: list[bytes], data: st.DataObject
) -> None:
    target.errors.records.clear()  # an earlier failing example may have left its own
    frame = data.draw(mutated_frames(seed_frames), label="frame")
    try:
        frames = exchange(frame, target.address)
    except AssertionError:
        if may_wait(frame):
            return
        raise
    event(f"{len(frames)} responses")
    for response in frames:
        # Whatever was answered is a whole frame that starts with a correlation id.
        assert len(response) >= 4
    assert_no_crash(target)


# -- after the run -----------------------------------------------------------------------------


def test_broker_still_serves_after_fuzzing(target: Target) -> None:
    """Runs after the fuzz tests (file order): the broker answers a fresh client in full."""
    metadata = build_request(METADATA, 12, topics=[{"name": KEPT}], allow_auto_topic_creation=False)
    fetch = build_request(
        FETCH,
        12,
        max_wait=0,
        max_bytes=1 << 20,
        topics=[
            {
                "topic": KEPT,
                "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}],
            }
        ],
    )
    wire = (
        api_versions_frame(1)
        + bytes(encode_request_frame(2, "after", metadata))
        + bytes(encode_request_frame(3, "after", fetch))
    )
    versions, meta, fetched = exchange(wire, target.address)
    assert decode_response(versions, API_VERSIONS, 3).body.error_code == 0
    [topic] = decode_response(meta, METADATA, 12).body.topics
    assert (topic.name, topic.error_code, len(topic.partitions)) == (KEPT, 0, 1)
    [part] = decode_response(fetched, FETCH, 12).body.responses[0].partitions
    assert part.error_code == 0 and part.high_watermark == 5
    records = [r for b in decode_batches(bytes(part.records), validate=True) for r in b]
    assert [(r.offset, r.value) for r in records] == [(i, b"kept-%d" % i) for i in range(5)]
    assert_no_crash(target)
