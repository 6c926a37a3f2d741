"""Metadata and ListOffsets for a caller without an event loop (the Spark source's driver).

The questions go through the engine's own cluster and connection code (cluster.py,
connection.py: version negotiation, SASL, TLS, the reconnect backoff), so the driver speaks
to Kafka with the same client as the tasks' Fetch reader (mirror/fetcher.py) and the
producer engine. A daemon thread runs the event loop the connections live on; they stay open
between calls, so a streaming query's micro-batches reuse them instead of connecting anew.

ListOffsets goes to each partition's leader (as Kafka's consumer does): ``-2`` asks for the
earliest offset, ``-1`` for the latest (the high watermark, or the last stable offset under
read_committed), a timestamp for the first offset whose record is at least that recent (-1
when none is). A leader that moved, or is not known yet, refreshes the metadata and is asked
again until the timeout; any other partition error fails the call, naming the partition.
"""

from __future__ import annotations

import asyncio
import threading
import time
import weakref
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

from ..client_config import parse_servers
from ..protocol import build_request
from ..protocol import error_codes as ec
from ..protocol.api_keys import LIST_OFFSETS
from .cluster import Cluster, TopicMetadata
from .config import engine_tls_settings, sasl_settings
from .connection import BrokerAuthenticationError, BrokerConnectionError

EARLIEST, LATEST = -2, -1  # ListOffsets' codes in place of a timestamp
#: Wait between rounds while a partition's leader is moving (librdkafka's retry.backoff.ms).
RETRY_BACKOFF_S = 0.1
# Partition errors that mean "ask the metadata where the leader is now, and again".
_RETRIABLE = {ec.error_code(name) for name in (
    "NOT_LEADER_OR_FOLLOWER", "UNKNOWN_TOPIC_OR_PARTITION", "LEADER_NOT_AVAILABLE",
    "FENCED_LEADER_EPOCH", "UNKNOWN_LEADER_EPOCH", "OFFSET_NOT_AVAILABLE",
    "KAFKA_STORAGE_ERROR", "REPLICA_NOT_AVAILABLE", "REQUEST_TIMED_OUT")}
UNKNOWN_TOPIC = ec.error_code("UNKNOWN_TOPIC_OR_PARTITION")

T = TypeVar("T")
TopicPartition = tuple[str, int]


class ClusterQueryError(RuntimeError):
    """A metadata or ListOffsets question the cluster did not answer (names what and why).
    ``error_code``: the Kafka error behind it when there is one (UNKNOWN_TOPIC_OR_PARTITION
    for a topic that does not exist), else None."""

    def __init__(self, message: str, error_code: int | None = None) -> None:
        super().__init__(message)
        self.error_code = error_code


def bootstrap_addresses(servers: str) -> list[tuple[str, int]]:
    """bootstrap.servers as (host, port)s, read as the engine reads it (the config table's
    parser); an empty host is this machine."""
    try:
        return [(host or "127.0.0.1", port) for host, port in parse_servers(servers)]
    except ValueError as exc:
        raise ClusterQueryError(f"bootstrap.servers: {exc}") from None


async def partitions_of(cluster: Cluster,
                        topics: Sequence[str] | None) -> dict[str, TopicMetadata]:
    """The metadata of ``topics`` (every topic of the cluster when None), errors included: a
    topic that does not exist comes back with UNKNOWN_TOPIC_OR_PARTITION, not created."""
    names = await refresh(cluster, None if topics is None else list(topics),
                          timeout_s=cluster.request_timeout_s)
    return {name: cluster.topics[name] for name in names}


async def refresh(cluster: Cluster, topics: list[str] | None, *,
                  timeout_s: float) -> list[str]:
    """``cluster.refresh`` (every topic when ``topics`` is None), asked again while no broker
    answers (one restarting, the reconnect backoff) until ``timeout_s``; a refused
    authentication fails at once. The names of the topics answered."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return await cluster.refresh(topics, every_topic=topics is None)
        except BrokerAuthenticationError:
            raise
        except (BrokerConnectionError, OSError, TimeoutError) as exc:
            if time.monotonic() >= deadline:
                raise ClusterQueryError(f"metadata: no broker answered within "
                                        f"{timeout_s:.0f} s ({exc})") from None
            await asyncio.sleep(RETRY_BACKOFF_S)


async def _leaders_lacking(cluster: Cluster, topic: str, feature: str) -> list[int]:
    # the metadata a caller just asked for (topics()) serves; asked for only when missing
    meta = cluster.topics.get(topic)
    if meta is None or meta.error_code != ec.NONE:
        meta = (await partitions_of(cluster, [topic]))[topic]
    lacking = []
    for partition in range(meta.partition_count):
        conn = await cluster.connection(cluster.leader(topic, partition))
        if not conn.supports_feature(feature):
            lacking.append(partition)
    return lacking


async def list_offsets(cluster: Cluster, wanted: Mapping[TopicPartition, int], *,
                       read_committed: bool, timeout_s: float) -> dict[TopicPartition, int]:
    """The offset ListOffsets answers for each partition: ``wanted`` maps it to -2
    (earliest), -1 (latest) or a timestamp in ms."""
    left = dict(wanted)
    found: dict[TopicPartition, int] = {}
    deadline = time.monotonic() + timeout_s
    last_problem = ""
    refresh = any(cluster.leader(t, p) < 0 for t, p in left)
    while left:
        if refresh:
            await _refresh_leaders(cluster, left)
        by_leader: dict[int, dict[TopicPartition, int]] = {}
        refresh = False
        for tp, spec in left.items():
            leader = cluster.leader(*tp)
            if leader >= 0 and leader in cluster.brokers:
                by_leader.setdefault(leader, {})[tp] = spec
            else:  # none, or one the metadata does not list (down): asked again later
                last_problem, refresh = f"{tp[0]}-{tp[1]} has no leader", True
        answers = await asyncio.gather(
            *(_ask_leader(cluster, leader, asked, read_committed, timeout_s)
              for leader, asked in by_leader.items()), return_exceptions=True)
        for answer in answers:
            if isinstance(answer, BrokerAuthenticationError):
                raise answer  # the same credentials would be refused again
            if isinstance(answer, (BrokerConnectionError, OSError, TimeoutError)):
                last_problem, refresh = str(answer), True
                continue
            if isinstance(answer, BaseException):
                raise answer
            for tp, (error, offset) in answer.items():
                if error == ec.NONE:
                    found[tp] = offset
                    del left[tp]
                elif error in _RETRIABLE:
                    last_problem, refresh = f"{tp[0]}-{tp[1]}: {ec.error_name(error)}", True
                else:
                    raise ClusterQueryError(f"ListOffsets for {tp[0]}-{tp[1]}: "
                                            f"{ec.error_name(error)}")
        if left:
            if time.monotonic() >= deadline:
                raise ClusterQueryError(
                    f"ListOffsets: no answer for {', '.join(f'{t}-{p}' for t, p in left)} "
                    f"within {timeout_s:.0f} s ({last_problem})")
            await asyncio.sleep(RETRY_BACKOFF_S)
    return found


async def _both_ends(cluster: Cluster, latest: Mapping[TopicPartition, int], timeout_s: float
                     ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
    stable, end = await asyncio.gather(
        list_offsets(cluster, latest, read_committed=True, timeout_s=timeout_s),
        list_offsets(cluster, latest, read_committed=False, timeout_s=timeout_s))
    return stable, end


async def _refresh_leaders(cluster: Cluster, left: Mapping[TopicPartition, int]) -> None:
    """New metadata for the topics of ``left``; a topic that no longer exists fails at once
    (asking again would not bring it back)."""
    topics = sorted({t for t, _ in left})
    await refresh(cluster, topics, timeout_s=cluster.request_timeout_s)
    for topic in topics:
        meta = cluster.topics.get(topic)
        if meta is not None and meta.error_code == UNKNOWN_TOPIC:
            raise ClusterQueryError(f"ListOffsets: topic {topic!r} does not exist",
                                    UNKNOWN_TOPIC)


async def _ask_leader(cluster: Cluster, leader: int, asked: Mapping[TopicPartition, int],
                      read_committed: bool,
                      timeout_s: float) -> dict[TopicPartition, tuple[int, int]]:
    """One ListOffsets to ``leader``: (error code, offset) per partition asked."""
    conn = await cluster.connection(leader)
    # v2 adds the isolation level (the last stable offset under read_committed); v1 is enough
    # for earliest / latest / a timestamp otherwise.
    version = conn.version_for(LIST_OFFSETS, 7, 2 if read_committed else 1)
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), spec in asked.items():
        part: dict[str, Any] = {"partition_index": partition, "timestamp": spec}
        if version >= 4:
            part["current_leader_epoch"] = -1
        topics.setdefault(topic, []).append(part)
    fields: dict[str, Any] = {"replica_id": -1, "topics": [
        {"name": name, "partitions": parts} for name, parts in topics.items()]}
    if version >= 2:
        fields["isolation_level"] = 1 if read_committed else 0
    answer = await conn.request(LIST_OFFSETS, version,
                                build_request(LIST_OFFSETS, version, **fields),
                                timeout_s=timeout_s)
    out: dict[TopicPartition, tuple[int, int]] = {}
    for topic in answer.topics:
        for part in topic.partitions:
            tp = (topic.name, part.partition_index)
            if tp in asked:
                out[tp] = (part.error_code, part.offset)
    for tp in asked:  # a partition the answer left out: asked again
        out.setdefault(tp, (ec.error_code("UNKNOWN_TOPIC_OR_PARTITION"), -1))
    return out


async def _close_everything(cluster: Cluster) -> None:
    """Close the connections, then cancel and await every task still on the loop (a call
    whose caller gave up, a connection attempt): left pending, each is destroyed with the
    closed loop when collected, and its coroutine runs its cleanup then, in whatever thread
    and code the collector interrupts, against a loop that is gone."""
    await cluster.close()
    current = asyncio.current_task()
    pending = [task for task in asyncio.all_tasks() if task is not current]
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)


def _shut_down(loop: asyncio.AbstractEventLoop, cluster: Cluster,
               thread: threading.Thread) -> None:
    if not loop.is_closed() and thread.is_alive():
        try:
            asyncio.run_coroutine_threadsafe(_close_everything(cluster), loop).result(5)
        except Exception:  # noqa: BLE001 - closing sockets of a client going away
            pass
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
    if not thread.is_alive() and not loop.is_closed():
        loop.close()


class ClusterQueries:
    """Blocking metadata and ListOffsets calls through the engine's connection code.

    ``config`` takes librdkafka's property names (bootstrap.servers, security.protocol,
    sasl.*, ssl.*); a SASL mechanism or TLS setting the engine cannot use raises
    engine.config.ConfigError at once. Call :meth:`close` when done (a client that is only
    dropped is closed when collected).
    """

    def __init__(self, config: Mapping[str, Any], *, client_id: str = "kipproducer",
                 timeout_s: float = 30.0, isolation: str = "read_uncommitted") -> None:
        sasl = sasl_settings(config)
        tls = engine_tls_settings(config)
        self.timeout_s = timeout_s
        self.read_committed = isolation == "read_committed"
        self.cluster = Cluster(bootstrap_addresses(str(config["bootstrap.servers"])),
                               client_id, request_timeout_s=timeout_s,
                               connect_timeout_s=timeout_s, allow_auto_create_topics=False,
                               sasl=sasl, tls=tls)
        self._loop = asyncio.new_event_loop()
        thread = threading.Thread(target=self._loop.run_forever, name="kip-cluster-queries",
                                  daemon=True)
        thread.start()
        self._close = weakref.finalize(self, _shut_down, self._loop, self.cluster, thread)

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        if not self._close.alive:
            coro.close()
            raise ClusterQueryError("this ClusterQueries is closed")
        # the timeouts inside bound the wait; this one only guards against a stuck loop
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(self.timeout_s * 3)

    def topics(self, names: Sequence[str] | None = None) -> dict[str, TopicMetadata]:
        """Metadata of the named topics (all of the cluster's when None), as
        ``{name: TopicMetadata}``; a missing topic has error_code UNKNOWN_TOPIC_OR_PARTITION."""
        return self._run(partitions_of(self.cluster, names))

    def list_offsets(self, wanted: Mapping[TopicPartition, int], *,
                     read_committed: bool | None = None) -> dict[TopicPartition, int]:
        """``{(topic, partition): -2 | -1 | timestamp}`` -> the offsets ListOffsets answers
        (at this client's isolation level, or read_committed / read_uncommitted when
        ``read_committed`` says which: one client asks both, the stock emulation's log end
        and last stable offset)."""
        if not wanted:
            return {}
        committed = self.read_committed if read_committed is None else read_committed
        return self._run(list_offsets(self.cluster, wanted, read_committed=committed,
                                      timeout_s=self.timeout_s))

    def ends(self, wanted: Iterable[TopicPartition]
             ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
        """(last stable offsets, log ends) of the partitions: the latest offset at
        read_committed and at read_uncommitted, the two ListOffsets asked together (one
        round trip's wait, not two)."""
        latest = dict.fromkeys(wanted, LATEST)
        if not latest:
            return {}, {}
        return self._run(_both_ends(self.cluster, latest, self.timeout_s))

    def topics_soon(self, names: Sequence[str]) -> Future[dict[str, TopicMetadata]]:
        """topics(names), asked now and answered later: the caller goes on meanwhile and
        takes ``.result()`` when it needs the answer."""
        if not self._close.alive:
            raise ClusterQueryError("this ClusterQueries is closed")
        return asyncio.run_coroutine_threadsafe(partitions_of(self.cluster, names), self._loop)

    def leaders_lacking(self, topic: str, feature: str) -> list[int]:
        """The partitions of ``topic`` whose leader does not announce the KIP-WIRE
        ``feature`` (docs/protocol.md §1): all of them on a stock cluster."""
        return self._run(_leaders_lacking(self.cluster, topic, feature))

    def close(self) -> None:
        self._close()

    def __enter__(self) -> ClusterQueries:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
