"""A blocking raw Kafka client for exact wire tests, speaking the shared protocol layer."""

from __future__ import annotations

import socket
import struct

from kipproducer.protocol import build_request, decode_response, encode_request_frame


class RawClient:
    """One blocking connection speaking the shared protocol layer, for exact wire tests."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=15)
        self.correlation = 0

    def request(self, api_key: int, version: int, **fields):
        self.correlation += 1
        frame = encode_request_frame(self.correlation, "kip-tests",
                                     build_request(api_key, version, **fields))
        self.sock.sendall(frame)
        size = struct.unpack(">i", self._read(4))[0]
        response = decode_response(self._read(size), api_key, version)
        assert response.correlation_id == self.correlation
        return response.body

    def _read(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("broker closed the connection")
            out += chunk
        return bytes(out)

    def produce(self, topic: str, batches: dict[int, bytes], *, mode: int, acks: int = -1,
                version: int = 10, key_conditions: dict[int, bytes] | None = None,
                transactional_id: str | None = None):
        """One Produce request; returns {partition: partition response}. ``key_conditions``:
        a partition's KeyConditions tag (docs/protocol.md §10)."""
        conditions = key_conditions or {}
        body = self.request(0, version, transactional_id=transactional_id, acks=acks,
                            timeout=10000, produce_mode=mode, topic_data=[{
                                "name": topic,
                                "partition_data": [{"index": p, "records": b,
                                                    "key_conditions": conditions.get(p)}
                                                   for p, b in batches.items()]}])
        return {p.index: p for t in body.responses for p in t.partition_responses}

    def create_topic(self, name: str, partitions: int = 1, configs: dict | None = None):
        body = self.request(19, 5, topics=[{
            "name": name, "num_partitions": partitions, "replication_factor": 1,
            "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
            timeout=10000)
        assert body.topics[0].error_code == 0, body.topics[0].error_message

    def close(self) -> None:
        self.sock.close()
