"""A partition's log end (markers and aborted records counted) and last stable offset, as
Kafka's ListOffsets reports them to a read_uncommitted and a read_committed reader."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

#: Producer properties a user's config may carry that librdkafka's consumers warn about
#: (CONFWARN on stderr) when handed them: the emulation's readers leave them out.
PRODUCER_ONLY = ("linger.ms", "queue.buffering.max.ms", "queue.buffering.max.messages",
                 "queue.buffering.max.kbytes", "batch.num.messages", "batch.size",
                 "compression.type", "compression.codec", "compression.level", "retries",
                 "message.send.max.retries", "partitioner", "sticky.partitioning.linger.ms",
                 "request.timeout.ms", "queuing.strategy", "enable.idempotence",
                 "transactional.id", "transaction.timeout.ms")


def consumer_config(connection: Mapping[str, Any]) -> dict[str, Any]:
    """``connection`` without the producer-only properties."""
    return {k: v for k, v in connection.items() if k not in PRODUCER_ONLY}


class LogEnds:
    """Two idle consumers (no group joined) asking ListOffsets for the latest offset."""

    def __init__(self, connection: Mapping[str, Any]) -> None:
        base = {**consumer_config(connection),
                "group.id": f"kip-emulation-{uuid.uuid4().hex[:12]}", "enable.auto.commit": False}
        self._uncommitted = Consumer({**base, "isolation.level": "read_uncommitted"})
        self._committed = Consumer({**base, "isolation.level": "read_committed"})

    def log_end(self, topic: str, partition: int, timeout: float = 10.0) -> int:
        """The offset the next record of the partition gets (the high watermark)."""
        return self._uncommitted.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=timeout, cached=False)[1]

    def stable_end(self, topic: str, partition: int, timeout: float = 10.0) -> int:
        """The last stable offset: below it every transaction is decided."""
        return self._committed.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=timeout, cached=False)[1]

    def wait(self, what: str, test: Callable[[], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        delay = 0.001
        while not test():
            if time.monotonic() > deadline:
                raise KafkaException(KafkaError(
                    KafkaError._TIMED_OUT, f"emulation: {what} not seen within {timeout:.0f} s"))
            time.sleep(delay)
            delay = min(delay * 2, 0.05)

    def close(self) -> None:
        self._uncommitted.close()
        self._committed.close()
