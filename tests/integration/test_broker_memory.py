"""Memory abuse (issue 16): idle connections, zip bombs, connection limits.

A broker subprocess holds 5,000 idle connections and takes ten gzip batches that inflate to
400 MB each while a librdkafka producer goes on producing: every bomb is refused with
MESSAGE_TOO_LARGE, every produced message is delivered, and the broker's peak RSS stays under
a bound (see RSS_BOUND_MIB). Then max.connections.per.ip (one connection too many is closed at
once, the others go on) and max.connections (the broker stops accepting until one closes).
"""

from __future__ import annotations

import resource
import socket
import struct
import threading
import time
import zlib

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from integration_support import KipBroker, create_topics, unique, wait_until

from kipproducer.crc32c import crc32c
from kipproducer.protocol import build_request, decode_response, encode_request_frame
from kipproducer.protocol import error_codes as ec
from kipproducer.records import encode_batch

PRODUCE, API_VERSIONS = 0, 18
IDLE_CONNECTIONS = 5000
BOMBS = 10
BOMB_INFLATED = 400 * 1000 * 1000
DECOMPRESSED_MAX = 64 * 1024 * 1024  # decompressed.batch.max.bytes' default
# Peak RSS allowed: the broker's own ~60 MiB, ~5 KiB per idle connection (25 MiB here), and
# decompression's at most twice decompressed.batch.max.bytes (the inflated output and its
# final copy), with room to spare. Before the bound, one bomb alone took the peak to 1 GB.
RSS_BOUND_MIB = 60 + 25 + 2 * DECOMPRESSED_MAX // 2**20 + 60


# -- helpers ---------------------------------------------------------------------------------------


def _varint(value: int) -> bytes:
    """Kafka's zigzag varint."""
    zigzag = (value << 1) ^ (value >> 63)
    out = bytearray()
    while zigzag >= 0x80:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


def gzip_bomb(inflated: int) -> bytes:
    """A valid RecordBatch v2, gzip, of one record whose value is ``inflated`` zero bytes;
    compressed in a streaming pass (about 400 KB for 400 MB), never held inflated."""
    body = b"\x00" + _varint(0) + _varint(0) + _varint(-1) + _varint(inflated)
    tail = _varint(0)  # no headers
    record_head = _varint(len(body) + inflated + len(tail)) + body
    deflater = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [deflater.compress(record_head)]
    zeros = bytes(1 << 20)
    left = inflated
    while left:
        step = min(left, len(zeros))
        parts.append(deflater.compress(zeros[:step]))
        left -= step
    parts += [deflater.compress(tail), deflater.flush()]
    records = b"".join(parts)
    now = int(time.time() * 1000)
    # attributes .. records: what the CRC covers
    after_crc = struct.pack(">hiqqqhii", 1, 0, now, now, -1, -1, -1, 1) + records
    crc = crc32c(after_crc)
    head = struct.pack(">qiib", 0, 4 + 1 + 4 + len(after_crc), -1, 2)
    return head + struct.pack(">I", crc) + after_crc


def produce_request(topic: str, batch: bytes, correlation_id: int) -> bytes:
    request = build_request(
        PRODUCE, 9, acks=-1, timeout=5000,
        topic_data=[{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
    )
    return bytes(encode_request_frame(correlation_id, "bomber", request))


def recv_frame(sock: socket.socket, timeout: float) -> bytes | None:
    sock.settimeout(timeout)
    data = b""
    try:
        while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
            chunk = sock.recv(1 << 16)
            if not chunk:
                return None
            data += chunk
    except (TimeoutError, ConnectionResetError):
        return None
    return data[4:]


def produce_raw(bootstrap: str, topic: str, batch: bytes) -> object:
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(produce_request(topic, batch, 5))
        answer = recv_frame(sock, 30)
    assert answer is not None, "the batch got a closed connection, not an answer"
    [part] = decode_response(answer, PRODUCE, 9).body.responses[0].partition_responses
    return part


def peak_rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def end_offset(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("hw")})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        consumer.close()


def api_versions_ok(sock: socket.socket, correlation_id: int = 1) -> bool:
    try:
        sock.sendall(encode_request_frame(correlation_id, "c", build_request(API_VERSIONS, 3)))
    except OSError:
        return False
    frame = recv_frame(sock, 5)
    if frame is None:
        return False
    return decode_response(frame, API_VERSIONS, 3).body.error_code == 0


def closed_by_peer(sock: socket.socket, timeout: float) -> bool:
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def connect_from(port: int, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.socket()
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", port))
    return sock


class ProducerLoop(threading.Thread):
    """A librdkafka producer that produces until stopped, counting deliveries."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                  "linger.ms": 5, "compression.type": "gzip"})
        self.topic = topic
        self.stop = threading.Event()
        self.sent = 0
        self.delivered = 0
        self.errors: list[str] = []

    def _on_delivery(self, err, msg) -> None:
        if err is None:
            self.delivered += 1
        else:
            self.errors.append(str(err))

    def run(self) -> None:
        while not self.stop.is_set():
            self.producer.produce(self.topic, b"value-%d" % self.sent, key=b"%d" % self.sent,
                                  on_delivery=self._on_delivery)
            self.sent += 1
            self.producer.poll(0)
            time.sleep(0.002)
        self.producer.flush(30)


# -- tests -----------------------------------------------------------------------------------------


def test_decompression_bound_is_exact(kip_broker) -> None:
    """A compressed batch that inflates to the bound is taken; one more byte is refused with
    MESSAGE_TOO_LARGE, nothing of it written, the connection answered."""
    bound = 1 << 20
    broker: KipBroker = kip_broker({"decompressed.batch.max.bytes": bound})
    topic = unique("bound")
    create_topics(broker.bootstrap, {topic: 1})
    value = bytes(bound - 64)

    def batch_inflating_to(size: int, codec: str) -> bytes:
        # One record; its overhead is a few bytes: find the value size that makes ``size``.
        trial = encode_batch([(None, value, None, None)])
        overhead = len(trial) - 61 - len(value)
        return encode_batch([(None, bytes(size - overhead), None, None)], compression=codec)

    for codec in ("gzip", "snappy", "lz4", "zstd"):
        fits = produce_raw(broker.bootstrap, topic, batch_inflating_to(bound, codec))
        assert fits.error_code == 0, (codec, fits.error_message)
        over = produce_raw(broker.bootstrap, topic, batch_inflating_to(bound + 1, codec))
        assert over.error_code == ec.MESSAGE_TOO_LARGE, (codec, over)
        assert "decompressed.batch.max.bytes" in over.error_message
    assert end_offset(broker.bootstrap, topic) == 4


@pytest.mark.slow
def test_idle_connections_and_gzip_bombs_leave_memory_bounded(kip_broker) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = IDLE_CONNECTIONS + 500
    if soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            pytest.skip(f"needs {needed} open files, the hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    broker: KipBroker = kip_broker()
    topic, bombed = unique("steady"), unique("bombed")
    create_topics(broker.bootstrap, {topic: 1, bombed: 1})
    bomb = gzip_bomb(BOMB_INFLATED)
    assert len(bomb) < 1_000_000  # fits max.message.bytes: only inflating finds it out

    idle: list[socket.socket] = []
    loop = ProducerLoop(broker.bootstrap, topic)
    try:
        loop.start()
        for _ in range(IDLE_CONNECTIONS):
            idle.append(socket.create_connection(("127.0.0.1", broker.port), timeout=10))
        answers: list[object] = []
        failures: list[BaseException] = []

        def send_bomb() -> None:
            try:
                answers.append(produce_raw(broker.bootstrap, bombed, bomb))
            except BaseException as exc:  # reported below, with the others
                failures.append(exc)

        bombers = [threading.Thread(target=send_bomb) for _ in range(BOMBS)]
        for thread in bombers:
            thread.start()
        for thread in bombers:
            thread.join(40)
        assert not failures, failures
        assert len(answers) == BOMBS
        for part in answers:
            assert part.error_code == ec.MESSAGE_TOO_LARGE, part
            assert "inflates past 67108864 bytes" in part.error_message
        # The idle connections are all still there: one of them answers.
        assert api_versions_ok(idle[-1])
    finally:
        loop.stop.set()
        loop.join(40)
        for sock in idle:
            sock.close()
    peak = peak_rss_mib(broker.pid)
    print(f"broker peak RSS {peak:.0f} MiB with {IDLE_CONNECTIONS} idle connections and "
          f"{BOMBS} bombs; producer delivered {loop.delivered}")
    assert peak < RSS_BOUND_MIB, f"peak RSS {peak:.0f} MiB >= {RSS_BOUND_MIB} MiB"
    assert loop.errors == [] and loop.delivered == loop.sent > 0
    assert end_offset(broker.bootstrap, bombed) == 0
    assert end_offset(broker.bootstrap, topic) == loop.sent
    broker.wait_for_log("inflates past")


def test_max_connections_per_ip_closes_the_one_too_many(kip_broker) -> None:
    broker: KipBroker = kip_broker({
        "max.connections.per.ip": 3,
        "max.connections.per.ip.overrides": "127.0.0.2:5",
    })
    first = [connect_from(broker.port) for _ in range(3)]
    extra = connect_from(broker.port)
    try:
        assert closed_by_peer(extra, 3), "the fourth connection from 127.0.0.1 was kept"
        assert all(api_versions_ok(sock) for sock in first)
        broker.wait_for_log("rejected connection from 127.0.0.1")
        # The override: five from 127.0.0.2, the sixth closed.
        other = [connect_from(broker.port, "127.0.0.2") for _ in range(5)]
        assert all(api_versions_ok(sock) for sock in other)
        sixth = connect_from(broker.port, "127.0.0.2")
        assert closed_by_peer(sixth, 3)
        sixth.close()
        for sock in other:
            sock.close()
        # A closed connection frees its slot (once the broker has seen the close: retry).
        first.pop().close()

        def reconnect() -> bool:
            sock = connect_from(broker.port)
            if api_versions_ok(sock):
                first.append(sock)
                return True
            sock.close()
            return False

        wait_until(reconnect, 5, "a connection in the freed slot")
        # A stock client from the same address is refused too while the slots are taken.
        producer = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 2000})
        outcome: list[object] = []
        producer.produce("t", b"v", on_delivery=lambda err, msg: outcome.append(err))
        producer.flush(10)
        assert len(outcome) == 1 and outcome[0] is not None  # timed out: no connection
    finally:
        extra.close()
        for sock in first:
            sock.close()


def test_max_connections_stops_accepting_until_one_closes(kip_broker) -> None:
    broker: KipBroker = kip_broker({"max.connections": 2})
    held = [connect_from(broker.port) for _ in range(2)]
    assert all(api_versions_ok(sock, i) for i, sock in enumerate(held))
    waiting = connect_from(broker.port)  # the kernel completes the handshake: backlog
    try:
        waiting.sendall(encode_request_frame(9, "c", build_request(API_VERSIONS, 3)))
        assert recv_frame(waiting, 1.5) is None, "answered beyond max.connections"
        broker.wait_for_log("max.connections")
        held.pop().close()
        frame = recv_frame(waiting, 5)  # accepted now: the queued request is answered
        assert frame is not None
        assert decode_response(frame, API_VERSIONS, 3).body.error_code == 0
        assert api_versions_ok(held[0])
    finally:
        waiting.close()
        for sock in held:
            sock.close()


def test_fetch_max_bytes_caps_what_a_client_asks_for(kip_broker) -> None:
    """A Fetch asking for 64 MiB gets at most fetch.max.bytes (beyond a first batch)."""
    cap = 4096
    broker: KipBroker = kip_broker({"fetch.max.bytes": cap})
    topic = unique("capped")
    create_topics(broker.bootstrap, {topic: 1})
    for i in range(20):  # twenty ~1 KB batches
        batch = encode_batch([(b"k", bytes(1000), None, None)])
        assert produce_raw(broker.bootstrap, topic, batch).error_code == 0, i
    request = build_request(
        1, 11, replica_id=-1, max_wait=0, min_bytes=1, max_bytes=64 << 20, isolation_level=0,
        topics=[{"topic": topic, "partitions": [
            {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 64 << 20}]}],
    )
    with socket.create_connection((broker.host, broker.port), timeout=10) as sock:
        sock.sendall(encode_request_frame(7, "raw", request))
        answer = recv_frame(sock, 10)
    assert answer is not None
    [partition] = decode_response(answer, 1, 11).body.responses[0].partitions
    assert partition.high_watermark == 20
    assert 1000 < len(partition.records) <= cap
