"""The Spark driver's questions to Kafka: which partitions a topic has, and ListOffsets
(earliest, latest at the query's isolation level, by timestamp).

They go through the project's own connection layer (engine/cluster_queries.py: the engine's
cluster and connection code, as the tasks' Fetch reader and the producer use), so planning a
read makes no librdkafka client. Only where that layer cannot connect (a SASL mechanism the
engine does not speak, such as GSSAPI; the same test as the tasks' reader,
fetch_read.unsupported) does the driver ask with librdkafka's AdminClient instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from ..engine.cluster_queries import EARLIEST, LATEST, ClusterQueries
from ..protocol import error_codes as ec
from .fetch_read import unsupported
from .options import connection

TopicPartition = tuple[str, int]
#: How long the driver waits for the cluster's answers (the AdminClient's former timeout).
TIMEOUT_S = 30.0


class DriverClient(Protocol):
    def partition_counts(self, topics: Sequence[str] | None) -> dict[str, int]:
        """Partition counts of the named topics that exist (every topic when None)."""

    def list_offsets(self, wanted: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """``{(topic, partition): -2 | -1 | timestamp ms}`` -> ListOffsets' offsets."""

    def leaders_lacking(self, topic: str, feature: str) -> list[int]:
        """The partitions whose leader does not announce a KIP-WIRE feature ([] when the
        client cannot tell)."""

    def close(self) -> None: ...


def driver_client(props: Mapping[str, str], isolation: str = "read_uncommitted") -> DriverClient:
    """The client for ``kafka.*`` properties ``props``: the project's own where it can
    connect, else librdkafka's AdminClient."""
    if unsupported(props) is not None:
        return RdkafkaDriverClient(props, isolation)
    return EngineDriverClient(props, isolation)


class EngineDriverClient:
    """Metadata and ListOffsets through the engine's connection code (one set of connections,
    kept for the client's life)."""

    def __init__(self, props: Mapping[str, str], isolation: str) -> None:
        self.queries = ClusterQueries(props, client_id="kip-spark-driver", timeout_s=TIMEOUT_S,
                                      isolation=isolation)

    def partition_counts(self, topics: Sequence[str] | None) -> dict[str, int]:
        return {name: meta.partition_count for name, meta in self.queries.topics(topics).items()
                if meta.error_code == ec.NONE}

    def list_offsets(self, wanted: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        return self.queries.list_offsets(wanted)

    def leaders_lacking(self, topic: str, feature: str) -> list[int]:
        return self.queries.leaders_lacking(topic, feature)

    def close(self) -> None:
        self.queries.close()


class RdkafkaDriverClient:
    """The same questions asked with librdkafka's AdminClient (for what the engine cannot
    connect with)."""

    def __init__(self, props: Mapping[str, str], isolation: str) -> None:
        from confluent_kafka.admin import AdminClient

        self.admin = AdminClient(connection(props))
        self.isolation = isolation

    def partition_counts(self, topics: Sequence[str] | None) -> dict[str, int]:
        found = self.admin.list_topics(timeout=TIMEOUT_S).topics
        names = found if topics is None else [t for t in topics if t in found]
        return {name: len(found[name].partitions) for name in names
                if found[name].error is None}

    def list_offsets(self, wanted: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        if not wanted:
            return {}
        from confluent_kafka import IsolationLevel
        from confluent_kafka import TopicPartition as RdkafkaPartition
        from confluent_kafka.admin import OffsetSpec

        def spec(code: int) -> Any:
            if code == EARLIEST:
                return OffsetSpec.earliest()
            return OffsetSpec.latest() if code == LATEST else OffsetSpec.for_timestamp(code)

        level = (IsolationLevel.READ_COMMITTED if self.isolation == "read_committed"
                 else IsolationLevel.READ_UNCOMMITTED)
        found = self.admin.list_offsets(
            {RdkafkaPartition(t, p): spec(code) for (t, p), code in wanted.items()},
            isolation_level=level, request_timeout=TIMEOUT_S)
        return {(tp.topic, tp.partition): future.result(2 * TIMEOUT_S).offset
                for tp, future in found.items()}

    def leaders_lacking(self, topic: str, feature: str) -> list[int]:
        return []  # librdkafka does not show the broker's features: the tasks find out

    def close(self) -> None:
        pass  # librdkafka closes the AdminClient when it is collected
