"""A partition's log end (markers and aborted records counted) and last stable offset, as
Kafka's ListOffsets reports them to a read_uncommitted and a read_committed reader.

The questions go through the engine's own client (engine/cluster_queries.py: one event loop
thread, the connections kept open, TLS and SASL as the connection config says): one
ListOffsets round trip per question, where a librdkafka consumer's get_watermark_offsets
also goes through librdkafka's threads and, for a fresh consumer, waits for its first
connection and metadata. A connection config the engine cannot speak (a SASL mechanism it
lacks) falls back to two idle librdkafka consumers.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from ..client_config import ConfigError
from ..engine.cluster_queries import (
    EARLIEST,
    LATEST,
    UNKNOWN_TOPIC,
    ClusterQueries,
    ClusterQueryError,
)
from ..engine.connection import BrokerAuthenticationError, BrokerConnectionError

#: Producer properties a user's config may carry that librdkafka's consumers warn about
#: (CONFWARN on stderr) when handed them: the emulation's readers leave them out.
PRODUCER_ONLY = ("linger.ms", "queue.buffering.max.ms", "queue.buffering.max.messages",
                 "queue.buffering.max.kbytes", "batch.num.messages", "batch.size",
                 "compression.type", "compression.codec", "compression.level", "retries",
                 "message.send.max.retries", "partitioner", "sticky.partitioning.linger.ms",
                 "request.timeout.ms", "queuing.strategy", "enable.idempotence",
                 "transactional.id", "transaction.timeout.ms")

#: Pauses between two looks at a condition (wait()): a look is itself a round trip, so the
#: first ones follow at once; a marker that takes a few ms is seen within about one round
#: trip of landing, and a long wait (another writer's open transaction) asks at most 50 times
#: a second.
WAIT_PAUSES_S = (0.0, 0.0, 0.0005, 0.001, 0.002, 0.004, 0.008, 0.016)
WAIT_PAUSE_MAX_S = 0.02
#: The longest one ListOffsets question may take.
QUESTION_TIMEOUT_S = 10.0


#: What a question to the cluster may raise (turned into KafkaException for the emulation).
_QUESTION_ERRORS = (BrokerAuthenticationError, ClusterQueryError, BrokerConnectionError, OSError,
                    TimeoutError, FutureTimeout)


def _list_offsets_error(exc: BaseException, asked: Iterable[tuple[str, int]]) -> KafkaException:
    if isinstance(exc, BrokerAuthenticationError):
        return KafkaException(KafkaError(KafkaError._AUTHENTICATION,
                                         f"emulation: ListOffsets: {exc}"))
    names = ", ".join(f"{t}[{p}]" for t, p in asked)
    # a topic that does not exist is named as librdkafka's consumer names it
    missing = getattr(exc, "error_code", None) == UNKNOWN_TOPIC
    return KafkaException(KafkaError(
        KafkaError.UNKNOWN_TOPIC_OR_PART if missing else KafkaError._TIMED_OUT,
        f"emulation: ListOffsets for {names}: {exc}"))


def consumer_config(connection: Mapping[str, Any]) -> dict[str, Any]:
    """``connection`` without the producer-only properties."""
    return {k: v for k, v in connection.items() if k not in PRODUCER_ONLY}


def wait_until(what: str, test: Callable[[], bool], timeout: float) -> None:
    """Look at ``test()`` until it holds (pausing as WAIT_PAUSES_S says); _TIMED_OUT naming
    ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    looks = 0
    while not test():
        if time.monotonic() > deadline:
            raise KafkaException(KafkaError(
                KafkaError._TIMED_OUT, f"emulation: {what} not seen within {timeout:.0f} s"))
        pause = WAIT_PAUSES_S[looks] if looks < len(WAIT_PAUSES_S) else WAIT_PAUSE_MAX_S
        looks += 1
        if pause:
            time.sleep(pause)


class LogEnds:
    """ListOffsets for the latest offset through the engine's client, at either isolation
    level. Errors come as KafkaException (what the emulation's callers catch)."""

    def __init__(self, connection: Mapping[str, Any]) -> None:
        self._queries = ClusterQueries(connection, timeout_s=QUESTION_TIMEOUT_S,
                                       client_id=str(connection.get("client.id",
                                                                    "kipproducer")))

    def log_end(self, topic: str, partition: int) -> int:
        """The offset the next record of the partition gets (the high watermark)."""
        return self.log_ends([(topic, partition)])[(topic, partition)]

    def stable_end(self, topic: str, partition: int) -> int:
        """The last stable offset: below it every transaction is decided."""
        return self.stable_ends([(topic, partition)])[(topic, partition)]

    def log_start(self, topic: str, partition: int) -> int:
        """The partition's first offset (retention and DeleteRecords move it)."""
        return self._latest([(topic, partition)], read_committed=False,
                            at=EARLIEST)[(topic, partition)]

    def partition_count(self, topic: str) -> int:
        """The topic's partition count as the cluster's metadata has it now."""
        return self.partition_count_soon(topic)()

    def partition_count_soon(self, topic: str) -> Callable[[], int]:
        """partition_count(topic) asked now; the function returned waits for the answer (or
        raises what partition_count would), so the caller can do something meanwhile."""
        try:
            asked = self._queries.topics_soon([topic])
        except ClusterQueryError as exc:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT,
                                            f"emulation: metadata of {topic}: {exc}")) from None

        def answer() -> int:
            try:
                meta = asked.result(QUESTION_TIMEOUT_S * 3)[topic]
            except _QUESTION_ERRORS as exc:
                raise KafkaException(KafkaError(
                    KafkaError._TIMED_OUT, f"emulation: metadata of {topic}: {exc}")) from None
            if meta.error_code:
                raise KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART,
                                                f"emulation: metadata of {topic}: error "
                                                f"{meta.error_code}"))
            return meta.partition_count
        return answer

    def decided_ends(self, topic: str, partition: int) -> tuple[int, int]:
        """(last stable offset, log end) of the partition, asked together: every transaction
        below the log end is decided when the first is at least the second (whichever
        Kafka answered first: both only grow)."""
        tp = (topic, partition)
        try:
            stable, end = self._queries.ends([tp])
        except _QUESTION_ERRORS as exc:
            raise _list_offsets_error(exc, [tp]) from None
        return stable[tp], end[tp]

    def log_ends(self, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """log_end() of several partitions: one ListOffsets per leader, asked together."""
        return self._latest(partitions, read_committed=False)

    def stable_ends(self, partitions: Iterable[tuple[str, int]]
                    ) -> dict[tuple[str, int], int]:
        """stable_end() of several partitions: one ListOffsets per leader, asked together."""
        return self._latest(partitions, read_committed=True)

    def _latest(self, partitions: Iterable[tuple[str, int]], *,
                read_committed: bool, at: int = LATEST) -> dict[tuple[str, int], int]:
        wanted = dict.fromkeys(partitions, at)
        try:
            return self._queries.list_offsets(wanted, read_committed=read_committed)
        except _QUESTION_ERRORS as exc:
            raise _list_offsets_error(exc, wanted) from None

    def wait(self, what: str, test: Callable[[], bool], timeout: float) -> None:
        wait_until(what, test, timeout)

    def warm_up(self, topic: str) -> None:
        """Ask once about ``topic`` (any topic: the probe's) without waiting for the answer:
        the connection, its version negotiation and the first ListOffsets' code paths are
        then ready when the first real question comes (the first one costs tens of ms)."""
        def ask() -> None:
            try:
                self.stable_end(topic, 0)
            except Exception:  # noqa: BLE001 - only a warm-up: the real question reports
                pass
        threading.Thread(target=ask, name="kip-emulation-warm-up", daemon=True).start()

    def close(self) -> None:
        self._queries.close()


class ConsumerLogEnds:
    """The same answers from two idle librdkafka consumers (no group joined): for a connection
    config the engine's client cannot speak."""

    def __init__(self, connection: Mapping[str, Any]) -> None:
        base = {**consumer_config(connection),
                "group.id": f"kip-emulation-{uuid.uuid4().hex[:12]}", "enable.auto.commit": False}
        self._uncommitted = Consumer({**base, "isolation.level": "read_uncommitted"})
        self._committed = Consumer({**base, "isolation.level": "read_committed"})

    def log_end(self, topic: str, partition: int) -> int:
        return self._uncommitted.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=QUESTION_TIMEOUT_S, cached=False)[1]

    def stable_end(self, topic: str, partition: int) -> int:
        return self._committed.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=QUESTION_TIMEOUT_S, cached=False)[1]

    def log_start(self, topic: str, partition: int) -> int:
        return self._uncommitted.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=QUESTION_TIMEOUT_S, cached=False)[0]

    def partition_count(self, topic: str) -> int:
        meta = self._uncommitted.list_topics(topic, timeout=QUESTION_TIMEOUT_S).topics[topic]
        if meta.error is not None:
            raise KafkaException(meta.error)
        return len(meta.partitions)

    def partition_count_soon(self, topic: str) -> Callable[[], int]:
        """Asked at once here; the answer, or what asking raised, given by the function."""
        try:
            count = self.partition_count(topic)
        except KafkaException as exc:
            error = exc

            def refused() -> int:
                raise error
            return refused
        return lambda: count

    def decided_ends(self, topic: str, partition: int) -> tuple[int, int]:
        stable = self.stable_end(topic, partition)
        return stable, self.log_end(topic, partition)

    def log_ends(self, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        return {tp: self.log_end(*tp) for tp in partitions}

    def stable_ends(self, partitions: Iterable[tuple[str, int]]
                    ) -> dict[tuple[str, int], int]:
        return {tp: self.stable_end(*tp) for tp in partitions}

    def wait(self, what: str, test: Callable[[], bool], timeout: float) -> None:
        wait_until(what, test, timeout)

    def warm_up(self, topic: str) -> None:
        """Nothing: librdkafka's consumers connect in the background on their own."""

    def close(self) -> None:
        self._uncommitted.close()
        self._committed.close()


def log_ends_reader(connection: Mapping[str, Any]) -> LogEnds | ConsumerLogEnds:
    """The engine's client when it can speak the connection's security settings, else the
    librdkafka consumers."""
    try:
        return LogEnds(connection)
    except ConfigError:
        return ConsumerLogEnds(connection)
