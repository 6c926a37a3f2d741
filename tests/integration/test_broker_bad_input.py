"""Bad input against a live broker subprocess, over raw sockets on 127.0.0.1.

Each kind of bad input gets a protocol error or a closed connection, promptly, and a log line;
after each one (an autouse fixture checks) the broker is still running, librdkafka clients
produce, consume and administer as usual, and the records acknowledged before the first bad
byte are intact. Raw requests are built with the project's own protocol layer.
"""

from __future__ import annotations

import os
import random
import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from integration_support import KipBroker, consume_records, create_topics, unique

from kipproducer.protocol import (
    build_request,
    decode_response,
    encode_request_frame,
    error_codes,
)
from kipproducer.records import encode_batch

MAX_REQUEST = 1 << 20  # socket.request.max.bytes of this broker
READ_TIMEOUT_MS = 1000  # request.read.timeout.ms of this broker
TOPIC = "acked-before"
ACKED = 500
PROMPT = 3.0  # "promptly": well under any client timeout, well over a loaded CI's jitter
PRODUCE, API_VERSIONS, METADATA = 0, 18, 3


@pytest.fixture(scope="module")
def broker(module_broker_factory) -> KipBroker:
    broker = module_broker_factory(
        {
            "request.read.timeout.ms": READ_TIMEOUT_MS,
            "socket.request.max.bytes": MAX_REQUEST,
        }
    )
    create_topics(broker.bootstrap, {TOPIC: 2})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    for i in range(ACKED):
        producer.produce(TOPIC, b"acked-%d" % i, key=b"%d" % i, partition=i % 2)
    assert producer.flush(15) == 0
    return broker


@pytest.fixture(autouse=True)
def still_serving(broker: KipBroker) -> Iterator[None]:
    """After the test's bad input: alive, clients work, acknowledged data intact."""
    yield
    assert broker.alive, f"the broker died\n{broker.stderr_tail()}"
    topic = unique("after-bad")
    create_topics(broker.bootstrap, {topic: 1})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    producer.produce(topic, b"still works")
    assert producer.flush(15) == 0
    [rec] = consume_records(broker.bootstrap, topic, 1, timeout=15)
    assert rec.value == b"still works"
    recs = consume_records(broker.bootstrap, TOPIC, ACKED, timeout=15)
    assert sorted((r.partition, r.offset, r.value) for r in recs) == sorted(
        (i % 2, i // 2, b"acked-%d" % i) for i in range(ACKED)
    )


@pytest.fixture
def log_mark(broker: KipBroker) -> int:
    """Where the broker's stderr stands before the test: new log lines come after it."""
    return len(broker.stderr_text())


# -- raw socket helpers --------------------------------------------------------------------------


def connect(broker: KipBroker) -> socket.socket:
    return socket.create_connection((broker.host, broker.port), timeout=PROMPT)


def recv_exact(sock: socket.socket, n: int, timeout: float) -> bytes | None:
    """n bytes, or None if the broker closed the connection first."""
    sock.settimeout(timeout)
    data = b""
    while len(data) < n:
        try:
            chunk = sock.recv(n - len(data))
        except ConnectionResetError:
            return None
        if not chunk:
            return None
        data += chunk
    return data


def recv_frame(sock: socket.socket, timeout: float = PROMPT) -> bytes | None:
    prefix = recv_exact(sock, 4, timeout)
    if prefix is None:
        return None
    (size,) = struct.unpack(">i", prefix)
    return recv_exact(sock, size, timeout)


def closed_within(sock: socket.socket, timeout: float) -> float | None:
    """Seconds until the broker closed the connection, None if it did not within timeout."""
    started = time.monotonic()
    sock.settimeout(timeout)
    try:
        while True:
            if not sock.recv(65536):
                return time.monotonic() - started
    except ConnectionResetError:
        return time.monotonic() - started
    except TimeoutError:
        return None


def send(sock: socket.socket, data: bytes) -> None:
    try:
        sock.sendall(data)
    except (BrokenPipeError, ConnectionResetError):
        pass  # closed on an earlier part of the data: the close is checked by the caller


def raw_header(api_key: int, version: int, correlation_id: int = 7, body: bytes = b"") -> bytes:
    """A v1 request header (+ body) behind its size prefix, for APIs kio cannot encode."""
    client = b"bad-input"
    payload = struct.pack(">hhih", api_key, version, correlation_id, len(client)) + client + body
    return struct.pack(">i", len(payload)) + payload


def with_version(frame: bytes, version: int) -> bytes:
    """A valid request frame with its header's api_version replaced."""
    return frame[:6] + struct.pack(">h", version) + frame[8:]


def api_versions_roundtrip(sock: socket.socket, correlation_id: int = 99) -> None:
    sock.sendall(encode_request_frame(correlation_id, "ok", build_request(API_VERSIONS, 3)))
    frame = recv_frame(sock)
    assert frame is not None, "connection closed instead of answering ApiVersions"
    response = decode_response(frame, API_VERSIONS, 3)
    assert response.correlation_id == correlation_id and response.body.error_code == 0


def memory_kib(pid: int) -> dict[str, int]:
    out = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name in ("VmPeak", "VmHWM", "VmRSS"):
                out[name] = int(value.split()[0])
    return out


# -- garbage and framing ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
def test_random_bytes_close_the_connection(broker: KipBroker, log_mark: int, seed: int) -> None:
    rng = random.Random(seed)
    # At least a whole size prefix: fewer bytes are an idle connection (connections.max.idle.ms)
    garbage = rng.randbytes(rng.choice((5, 64, 4096)))
    if seed == 0:
        # A plausible size prefix in front of the garbage, so the decoder sees it.
        garbage = struct.pack(">i", len(garbage)) + garbage
    with connect(broker) as sock:
        send(sock, garbage)
        waited = closed_within(sock, READ_TIMEOUT_MS / 1000 + PROMPT)
        assert waited is not None, "the broker kept a connection that sent garbage"
    broker.wait_for_log("closing", start=log_mark)


def test_truncated_frame_then_close(broker: KipBroker, log_mark: int) -> None:
    frame = bytes(encode_request_frame(1, "trunc", build_request(METADATA, 12, topics=None)))
    with connect(broker) as sock:
        sock.sendall(frame[: len(frame) // 2])
    broker.wait_for_log(f"closed inside a {len(frame) - 4}-byte frame", start=log_mark)
    with connect(broker) as sock:
        sock.sendall(frame[:2])
    broker.wait_for_log("closed inside a size prefix", start=log_mark)


@pytest.mark.parametrize(
    "size",
    [2**31 - 1, MAX_REQUEST + 1, 2**32 - 1, -(2**31)],
    ids=["int32-max", "max+1", "-1", "min"],
)
def test_lying_length_prefix(broker: KipBroker, log_mark: int, size: int) -> None:
    before = memory_kib(broker.pid)
    with connect(broker) as sock:
        send(sock, struct.pack(">I" if size >= 0 else ">i", size) + b"\x00" * 64)
        waited = closed_within(sock, PROMPT)
    # Closed on the prefix alone: no waiting for (or allocating) the announced bytes.
    assert waited is not None and waited < 1.0, waited
    shown = size if size < 2**31 else size - 2**32
    broker.wait_for_log(f"frame size {shown} outside 0..{MAX_REQUEST}", start=log_mark)
    after = memory_kib(broker.pid)
    assert after["VmPeak"] - before["VmPeak"] < 128 * 1024, (before, after)
    assert after["VmHWM"] - before["VmHWM"] < 64 * 1024, (before, after)


def test_frame_of_exactly_the_limit_is_waited_for_then_dropped(
    broker: KipBroker, log_mark: int
) -> None:
    """The limit itself is allowed: the broker reads on, and drops the sender that stalls."""
    with connect(broker) as sock:
        sock.sendall(struct.pack(">i", MAX_REQUEST) + b"\x00" * 10)
        waited = closed_within(sock, READ_TIMEOUT_MS / 1000 + PROMPT)
    assert waited is not None and waited >= READ_TIMEOUT_MS / 1000 * 0.9, waited
    broker.wait_for_log(f"a {MAX_REQUEST}-byte request did not arrive", start=log_mark)


# -- APIs and versions ----------------------------------------------------------------------------


@pytest.mark.parametrize("api_key", [999, 17, -1, 32767], ids=["999", "sasl-17", "-1", "max"])
def test_unknown_api_key_closes(broker: KipBroker, log_mark: int, api_key: int) -> None:
    with connect(broker) as sock:
        sock.sendall(raw_header(api_key, 0))
        assert closed_within(sock, PROMPT) is not None
    broker.wait_for_log("closing", start=log_mark)


@pytest.mark.parametrize(
    "api_key, version",
    [(METADATA, 13), (METADATA, 99), (PRODUCE, 2), (PRODUCE, 99), (1, 3), (19, 0)],
    ids=["metadata-13", "metadata-99", "produce-2", "produce-99", "fetch-3", "createtopics-0"],
)
def test_unsupported_version_of_a_known_api_closes(
    broker: KipBroker, log_mark: int, api_key: int, version: int
) -> None:
    with connect(broker) as sock:
        api_versions_roundtrip(sock)  # a healthy connection, then the bad request on it
        sock.sendall(raw_header(api_key, version, body=b"\x00" * 16))
        assert closed_within(sock, PROMPT) is not None
    broker.wait_for_log("closing", start=log_mark)


@pytest.mark.parametrize("version", [5, 99, 32767])
def test_api_versions_at_an_unknown_version_gets_a_v0_answer(
    broker: KipBroker, version: int
) -> None:
    """KIP-511: UNSUPPORTED_VERSION in a v0 response that still lists the versions served."""
    frame = bytes(
        encode_request_frame(
            31,
            "future-client",
            build_request(API_VERSIONS, 3, client_software_name="x", client_software_version="9"),
        )
    )
    with connect(broker) as sock:
        sock.sendall(with_version(frame, version))
        answer = recv_frame(sock)
        assert answer is not None, "closed instead of the KIP-511 answer"
        response = decode_response(answer, API_VERSIONS, 0)
        assert response.correlation_id == 31
        assert response.body.error_code == error_codes.UNSUPPORTED_VERSION
        served = {k.api_key: (k.min_version, k.max_version) for k in response.body.api_keys}
        assert served[API_VERSIONS] == (0, 4)
        assert served[PRODUCE][1] >= 9 and served[METADATA][1] >= 12
        # The connection stays usable: the client retries at a version it now knows.
        api_versions_roundtrip(sock)


def test_absurd_partition_counts_are_refused_at_once(broker: KipBroker) -> None:
    """2**31-1 partitions in one CreateTopics / CreatePartitions: POLICY_VIOLATION, nothing
    created (Kafka caps a request at 10,000 new partitions), and quickly."""
    name = unique("absurd")
    create = build_request(
        19, 7, topics=[{"name": name, "num_partitions": 2**31 - 1, "replication_factor": 1}]
    )
    grow = build_request(37, 3, topics=[{"name": TOPIC, "count": 2**31 - 1}], timeout=1000)
    started = time.monotonic()
    with connect(broker) as sock:
        sock.sendall(encode_request_frame(1, "absurd", create) + encode_request_frame(2, "x", grow))
        created, grown = recv_frame(sock), recv_frame(sock)
    assert created is not None and grown is not None
    assert time.monotonic() - started < PROMPT
    [topic] = decode_response(created, 19, 7).body.topics
    assert topic.error_code == error_codes.error_code("POLICY_VIOLATION")
    [result] = decode_response(grown, 37, 3).body.results
    assert result.error_code == error_codes.error_code("POLICY_VIOLATION")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    meta = admin.list_topics(timeout=10)
    assert name not in meta.topics and len(meta.topics[TOPIC].partitions) == 2


# -- corrupt and invalid batches ------------------------------------------------------------------


def produce_raw(broker: KipBroker, batch: bytes, topic: str = TOPIC) -> object:
    request = build_request(
        PRODUCE,
        9,
        acks=-1,
        timeout=5000,
        topic_data=[{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
    )
    with connect(broker) as sock:
        sock.sendall(encode_request_frame(5, "raw-produce", request))
        answer = recv_frame(sock)
    assert answer is not None, "a bad batch must get an error, not a closed connection"
    [topic] = decode_response(answer, PRODUCE, 9).body.responses
    [part] = topic.partition_responses
    return part


def high_watermarks(broker: KipBroker) -> list[int]:
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique("hw")})
    try:
        return [
            c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10, cached=False)[1]
            for p in (0, 1)
        ]
    finally:
        c.close()


def good_batch(**kwargs) -> bytearray:
    records = [
        (b"k%d" % i, b"bad-%d" % i, [("h", b"v")], int(time.time() * 1000)) for i in range(3)
    ]
    return bytearray(encode_batch(records, **kwargs))


@pytest.mark.parametrize(
    "where",
    ["crc-field", "record-payload", "attributes", "truncated", "length-field"],
)
def test_corrupt_batch_is_refused_and_nothing_appended(
    broker: KipBroker, log_mark: int, where: str
) -> None:
    before = high_watermarks(broker)
    batch = good_batch()
    if where == "crc-field":
        batch[17] ^= 0x01  # the CRC itself (bytes 17..20 of a v2 batch)
    elif where == "record-payload":
        batch[-2] ^= 0x40  # inside the CRC-covered records
    elif where == "attributes":
        batch[21] ^= 0x02  # attributes are CRC-covered too
    elif where == "truncated":
        batch = batch[:-5]
    elif where == "length-field":
        batch[8:12] = struct.pack(">i", len(batch) * 3)  # batchLength lies
    part = produce_raw(broker, bytes(batch))
    assert part.error_code == error_codes.CORRUPT_MESSAGE, (where, part)
    assert part.base_offset == -1
    assert high_watermarks(broker) == before
    broker.wait_for_log(
        f"produce to {TOPIC}-0 from 127.0.0.1 (raw-produce) refused", start=log_mark
    )


def test_batch_with_base_offset_other_than_zero_is_invalid(
    broker: KipBroker, log_mark: int
) -> None:
    before = high_watermarks(broker)
    part = produce_raw(broker, bytes(good_batch(base_offset=42)))
    assert part.error_code == error_codes.INVALID_RECORD, part
    assert "42" in part.error_message  # says why
    assert high_watermarks(broker) == before
    broker.wait_for_log("baseOffset of a produced batch must be 0", start=log_mark)
    # The same records with baseOffset 0 are fine (on a scratch topic: TOPIC stays as it was).
    scratch = unique("scratch")
    create_topics(broker.bootstrap, {scratch: 1})
    assert produce_raw(broker, bytes(good_batch()), scratch).error_code == 0
    ok = produce_raw(broker, bytes(good_batch()), scratch)
    assert (ok.error_code, ok.base_offset) == (0, 3)


# -- slow and idle clients -----------------------------------------------------------------------


def test_slow_loris_is_dropped_and_others_are_served(broker: KipBroker, log_mark: int) -> None:
    frame = bytes(encode_request_frame(3, "slow", build_request(METADATA, 12, topics=None)))
    sent = []
    closed: list[float | None] = []

    def dribble() -> None:
        with connect(broker) as sock:
            sock.sendall(frame[:4])  # the size prefix, then one byte a second
            started = time.monotonic()
            for byte in frame[4:]:
                time.sleep(1.0)
                try:
                    sock.sendall(bytes([byte]))
                except (BrokenPipeError, ConnectionResetError):
                    closed.append(time.monotonic() - started)
                    return
                sent.append(byte)
                if time.monotonic() - started > READ_TIMEOUT_MS / 1000 + PROMPT:
                    closed.append(None)
                    return

    loris = threading.Thread(target=dribble)
    loris.start()
    # Meanwhile other clients are served at once.
    for _ in range(3):
        with connect(broker) as sock:
            api_versions_roundtrip(sock)
        time.sleep(0.2)
    loris.join(READ_TIMEOUT_MS / 1000 + PROMPT + 2)
    assert closed and closed[0] is not None, "the slow sender was never dropped"
    assert len(sent) < len(frame) - 4, "the whole request got through"
    broker.wait_for_log("did not arrive within 1000 ms", start=log_mark)


def test_many_bad_connections_at_once(broker: KipBroker) -> None:
    """Dozens of garbage and stalled connections open together; a client still gets through."""
    socks = []
    try:
        for i in range(40):
            sock = connect(broker)
            if i % 2:
                send(sock, os.urandom(16))
            else:
                send(sock, struct.pack(">i", 200) + b"\x00\x03")  # stalls inside a frame
            socks.append(sock)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        assert TOPIC in admin.list_topics(timeout=10).topics
    finally:
        for sock in socks:
            sock.close()


def test_idle_connection_is_closed_after_connections_max_idle_ms(kip_broker) -> None:
    broker: KipBroker = kip_broker({"connections.max.idle.ms": 1000})
    with connect(broker) as sock:
        api_versions_roundtrip(sock)
        waited = closed_within(sock, 1.0 + PROMPT)
    assert waited is not None and waited >= 0.8, waited
