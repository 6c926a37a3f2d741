"""Compare this layer's codec with kio's for the broker's and client's hot messages.

Not a test (pytest does not collect it); run:
    PYTHONPATH=src python tests/protocol/bench_protocol_codec.py
Prints the median µs per operation for our codec and for kio's native reader / pure
Python writer.
"""

from __future__ import annotations

import io
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from kio.serial import entity_reader, entity_writer  # noqa: E402
from protocol_test_support import kio_read  # noqa: E402

from kipproducer.protocol import (  # noqa: E402
    build_request,
    build_response,
    decode,
    decode_request,
    encode,
    encode_request_frame,
    encode_request_frame_parts,
    encode_response_frame,
    request_class,
    response_class,
)


def median_us(operation: Callable[[], Any], budget_s: float = 0.4) -> float:
    operation()
    start = time.perf_counter()
    operation()
    single = max(time.perf_counter() - start, 1e-7)
    loops = max(1, min(10_000, int(0.02 / single)))
    samples = []
    deadline = time.perf_counter() + budget_s
    while time.perf_counter() < deadline or len(samples) < 5:
        start = time.perf_counter()
        for _ in range(loops):
            operation()
        samples.append((time.perf_counter() - start) / loops * 1e6)
    return statistics.median(samples)


def kio_encode(obj: Any) -> Callable[[], bytes]:
    writer = entity_writer(type(obj).__mro__[0])

    def run() -> bytes:
        out = io.BytesIO()
        writer(out, obj)
        return out.getvalue()

    return run


def to_kio(cls: type, obj: Any) -> Any:
    """The same object in kio's representation (its writer needs timedeltas/enums)."""
    return kio_read(cls, bytes(encode(obj)))


def row(name: str, ours: float, theirs: float) -> None:
    print(f"{name:<58} {ours:>10.1f} {theirs:>10.1f} {theirs / ours:>7.1f}x")


def main() -> None:
    print(f"{'operation (median µs)':<58} {'ours':>10} {'kio':>10} {'speedup':>8}")

    # -- ProduceRequest v9, 1 partition x 1 MiB -------------------------------------------
    records = bytes(range(256)) * 4096
    produce = build_request(0, 9, acks=-1, timeout=30000, topic_data=[
        {"name": "orders", "partition_data": [{"index": 0, "records": records}]}])
    cls = request_class(0, 9)
    body = bytes(encode(produce))
    frame = bytes(encode_request_frame(1, "bench", produce))[4:]
    kio_obj = to_kio(cls, produce)
    header_cls = cls.__header_schema__
    read_header = entity_reader(header_cls)
    read_body = entity_reader(cls)

    def kio_decode_request() -> Any:
        _, used = read_header(frame, 0)
        return read_body(frame[used:], 0)

    row("ProduceRequest v9 1x1MiB encode frame (one buffer)",
        median_us(lambda: encode_request_frame(1, "bench", produce)),
        median_us(kio_encode(kio_obj)))
    row("ProduceRequest v9 1x1MiB encode frame parts (no records copy)",
        median_us(lambda: encode_request_frame_parts(1, "bench", produce)),
        median_us(kio_encode(kio_obj)))
    row("ProduceRequest v9 1x1MiB decode request (header + body)",
        median_us(lambda: decode_request(frame)), median_us(kio_decode_request))
    row("ProduceRequest v9 1x1MiB decode body only",
        median_us(lambda: decode(cls, body)), median_us(lambda: read_body(body, 0)))
    small_header = bytes(encode_request_frame(7, "rdkafka", build_request(3, 12)))[4:]
    from kipproducer.protocol import parse_request_header

    row("request header v2 parse",
        median_us(lambda: parse_request_header(small_header)),
        median_us(lambda: entity_reader(request_class(3, 12).__header_schema__)(small_header, 0)))

    # -- MetadataResponse v12, 100 topics x 10 partitions --------------------------------
    metadata = build_response(3, 12, brokers=[
        {"node_id": n, "host": f"broker-{n}.example", "port": 9092} for n in range(3)],
        cluster_id="cluster", controller_id=0,
        topics=[{"name": f"topic-{t}", "partitions": [
            {"partition_index": p, "leader_id": p % 3, "leader_epoch": 5,
             "replica_nodes": [0, 1, 2], "isr_nodes": [0, 1, 2]} for p in range(10)]}
            for t in range(100)])
    cls = response_class(3, 12)
    payload = bytes(encode(metadata))
    kio_obj = to_kio(cls, metadata)
    row("MetadataResponse v12 100x10 encode body",
        median_us(lambda: encode(metadata)), median_us(kio_encode(kio_obj)))
    row("MetadataResponse v12 100x10 encode frame",
        median_us(lambda: encode_response_frame(1, metadata)), median_us(kio_encode(kio_obj)))
    row("MetadataResponse v12 100x10 decode body",
        median_us(lambda: decode(cls, payload)),
        median_us(lambda: entity_reader(cls)(payload, 0)))

    # -- FetchResponse, 64 empty partitions ----------------------------------------------
    for version in (12, 16):
        topic_key = {"topic": "orders"} if version < 13 else {"topic_id": None}
        fetch = build_response(1, version, session_id=1, responses=[
            {**topic_key, "partitions": [
                {"partition_index": p, "high_watermark": 1000, "last_stable_offset": 1000,
                 "log_start_offset": 0, "records": b""} for p in range(64)]}])
        cls = response_class(1, version)
        payload = bytes(encode(fetch))
        kio_obj = to_kio(cls, fetch)
        row(f"FetchResponse v{version} 64 empty partitions encode body",
            median_us(lambda fetch=fetch: encode(fetch)), median_us(kio_encode(kio_obj)))
        row(f"FetchResponse v{version} 64 empty partitions decode body",
            median_us(lambda cls=cls, payload=payload: decode(cls, payload)),
            median_us(lambda cls=cls, payload=payload: entity_reader(cls)(payload, 0)))

    # -- FetchResponse v12, 1 partition x 1 MiB ----------------------------------------
    fetch = build_response(1, 12, responses=[{"topic": "orders", "partitions": [
        {"partition_index": 0, "high_watermark": 10, "records": records}]}])
    kio_obj = to_kio(response_class(1, 12), fetch)
    row("FetchResponse v12 1x1MiB encode frame (one buffer)",
        median_us(lambda: encode_response_frame(1, fetch)), median_us(kio_encode(kio_obj)))
    from kipproducer.protocol import encode_response_frame_parts

    row("FetchResponse v12 1x1MiB encode frame parts (no records copy)",
        median_us(lambda: encode_response_frame_parts(1, fetch)), median_us(kio_encode(kio_obj)))

    # -- ProduceResponse v9, 1 partition ----------------------------------------------
    produce_response = build_response(0, 9, responses=[
        {"name": "orders", "partition_responses": [{"index": 0, "base_offset": 10}]}])
    kio_obj = to_kio(response_class(0, 9), produce_response)
    row("ProduceResponse v9 1 partition encode frame",
        median_us(lambda: encode_response_frame(1, produce_response)),
        median_us(kio_encode(kio_obj)))


if __name__ == "__main__":
    main()
