"""The mirror's fast source reader: Fetch requests of its own, whole record batches out.

A librdkafka consumer turns every record into a Python Message (about 6 us each), and the
mirror then turned those back into columns. This reader asks the partition leaders with Fetch
(v4-v12: topic names, isolation level, aborted transactions, log start offsets; Kafka, our
broker and Tansu all serve them) through the engine's cluster and connection code
(engine/cluster.py, engine/connection.py: metadata, version negotiation, SASL, TLS, and the
per-broker reconnect backoff, so a source broker that is down costs nothing while its
partitions move to new leaders), walks each answer's batch headers (batches.py) and
hands the batches to the writers, which append their records' bytes to the target producer
without decoding them (``Producer._forward_fetched``).

It runs in a thread of its own with its own event loop, so reading the source overlaps with
the main thread appending and the engine's sender thread writing. Answers wait in a small
queue (back pressure: the reader stops fetching while the writers are behind).

Positions: ``assign`` and ``seek`` (the transactional writer reads again from the committed
offsets after an abort) bump a partition's generation; answers of an older generation are
dropped, so nothing read before a seek is written after it.

Errors: OFFSET_OUT_OF_RANGE below the log start (retention, DeleteRecords moved it while the
mirror ran) goes on from the new log start; above the log end it is an error (the source lost
records the mirror had seen). NOT_LEADER and its kind refresh the metadata and try again;
authorization failures stop the mirror.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..engine.cluster import BrokerBackoff, Cluster
from ..engine.config import ConfigError, SaslSettings
from ..engine.config import engine_tls_settings as _tls_settings
from ..engine.config import sasl_settings as _sasl_settings
from ..engine.connection import BrokerConnection, BrokerConnectionError
from ..engine.tls import TlsSettings
from ..protocol import build_request
from ..protocol import error_codes as ec
from ..protocol.api_keys import FETCH, LIST_OFFSETS
from .batches import SourceBatch, SourceBatchError, walk
from .topics import MirrorError

log = logging.getLogger("kipproducer.mirror")

FETCH_VERSIONS = (4, 12)  # 4: v2 batches and isolation; 12: the last one with topic names
EARLIEST = -2
MAX_WAIT_MS = 100
#: Fetched answers waiting for the writers at the most.
QUEUE_ANSWERS = 4
RETRY_BACKOFF_S = 0.1
# Partitions without a reachable leader (none named, or one the metadata does not list: a
# broker that is down) are asked for again after this, doubling up to the max while they stay
# without one (librdkafka refreshes leaderless partitions' metadata with a backoff too).
LEADER_BACKOFF_MAX_S = 1.0
# A batch larger than what a partition may return is answered cut short; the reader then
# asks for more, up to this.
LARGEST_FETCH = 1 << 30

_REFRESH = {ec.error_code(name) for name in (
    "NOT_LEADER_OR_FOLLOWER", "UNKNOWN_TOPIC_OR_PARTITION", "LEADER_NOT_AVAILABLE",
    "FENCED_LEADER_EPOCH", "UNKNOWN_LEADER_EPOCH", "KAFKA_STORAGE_ERROR",
    "REPLICA_NOT_AVAILABLE")}
_FATAL = {ec.error_code(name) for name in (
    "TOPIC_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED")}
OFFSET_OUT_OF_RANGE = ec.error_code("OFFSET_OUT_OF_RANGE")


def unsupported(config: Mapping[str, Any]) -> str | None:
    """Why the fast reader cannot read a source with this librdkafka config, or None."""
    try:
        _sasl_settings(config)
        _tls_settings(config)
    except ConfigError as exc:
        return str(exc)
    return None


@dataclass(slots=True)
class Fetched:
    """One partition's share of a Fetch answer."""

    topic: str
    partition: int
    generation: int
    batches: list[SourceBatch]
    next_offset: int
    high_watermark: int
    at_end: bool


class FetchReader:
    def __init__(self, config: Mapping[str, Any], isolation: str, *, timeout: float = 30.0,
                 max_bytes: int | None = None, partition_max_bytes: int | None = None) -> None:
        reason = unsupported(config)
        if reason is not None:
            raise MirrorError(reason)
        self.sasl: SaslSettings | None = _sasl_settings(config)
        self.tls: TlsSettings | None = _tls_settings(config)
        self.bootstrap = [b.strip() for b in str(config["bootstrap.servers"]).split(",")
                          if b.strip()]
        self.read_committed = isolation == "read_committed"
        self.timeout = timeout
        try:
            self.max_bytes = int(max_bytes or config.get("fetch.max.bytes", 32 << 20))
            self.partition_max_bytes = int(partition_max_bytes
                                           or config.get("max.partition.fetch.bytes", 2 << 20))
        except ValueError as exc:
            raise MirrorError(f"fetch.max.bytes / max.partition.fetch.bytes: {exc}") from None
        if self.max_bytes < 1 or self.partition_max_bytes < 1:
            raise MirrorError("fetch.max.bytes and max.partition.fetch.bytes must be positive")
        self.answers: queue.Queue[Fetched] = queue.Queue(QUEUE_ANSWERS)
        self.high_watermarks: dict[tuple[str, int], int] = {}
        self.fetches = 0  # Fetch requests answered (a test checks this reader ran)
        self._lock = threading.Lock()
        self._positions: dict[tuple[str, int], int] = {}
        self._generations: dict[tuple[str, int], int] = {}
        self._wider: dict[tuple[str, int], int] = {}  # partition -> bytes it may return
        self._error: BaseException | None = None
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task | None = None

    # ---- the main thread's side -------------------------------------------------------------

    def assign(self, positions: Mapping[tuple[str, int], int]) -> None:
        with self._lock:
            for key, offset in positions.items():
                self._positions[key] = offset
                self._generations[key] = self._generations.get(key, 0) + 1
        if self._thread is None:
            self._thread = threading.Thread(target=self._thread_main, name="kip-mirror-fetch",
                                            daemon=True)
            self._thread.start()

    def seek(self, key: tuple[str, int], offset: int) -> None:
        with self._lock:
            self._positions[key] = offset
            self._generations[key] = self._generations.get(key, 0) + 1

    def poll(self, timeout: float) -> list[Fetched]:
        """Answers read since the last call (waiting up to ``timeout`` for the first), those
        of an older generation (before a seek) left out."""
        if self._error is not None:
            raise self._error
        out = []
        try:
            out.append(self.answers.get(timeout=timeout))
            while True:
                out.append(self.answers.get_nowait())
        except queue.Empty:
            pass
        if self._error is not None and not out:
            raise self._error
        with self._lock:
            return [a for a in out
                    if self._generations.get((a.topic, a.partition)) == a.generation]

    def close(self) -> None:
        self._stopping = True
        while True:  # a reader waiting for room in the queue sees the stop
            try:
                self.answers.get_nowait()
            except queue.Empty:
                break
        loop, task = self._loop, self._task
        if loop is not None and task is not None:
            # A fetch waiting out max_wait at a partition's end is not waited for.
            try:
                loop.call_soon_threadsafe(task.cancel)
            except RuntimeError:
                pass  # the loop has ended already
        if self._thread is not None:
            self._thread.join(self.timeout)

    # ---- the reader's thread ----------------------------------------------------------------

    def _thread_main(self) -> None:
        try:
            asyncio.run(self._main())
        except asyncio.CancelledError:
            pass  # close()
        except BaseException as exc:  # handed to the main thread by poll()
            self._error = exc if isinstance(exc, MirrorError) else MirrorError(
                f"reading the source: {type(exc).__name__}: {exc}")

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        if self._stopping:
            return
        await self._fetch_until_stopped()

    def _addresses(self) -> list[tuple[str, int]]:
        addresses = []
        for server in self.bootstrap:
            host, _, port = server.rpartition(":")
            addresses.append((host or "127.0.0.1", int(port)))
        return addresses

    async def _fetch_until_stopped(self) -> None:
        self._cluster = Cluster(self._addresses(), "kip-mirror",
                                request_timeout_s=self.timeout, connect_timeout_s=self.timeout,
                                allow_auto_create_topics=False, sasl=self.sasl, tls=self.tls)
        self._leaders: dict[tuple[str, int], int] = {}
        self._leader_backoff = RETRY_BACKOFF_S
        self._next_leader_refresh = 0.0
        failing_since = None
        try:
            while not self._stopping:
                try:
                    if not self._cluster.brokers:
                        await self._refresh_metadata()
                    await self._round()
                    failing_since = None
                except (BrokerConnectionError, OSError, TimeoutError) as exc:
                    # A source broker restarting, a leader moving: tried again, for up to the
                    # mirror's timeout (librdkafka's consumer would retry for ever; a mirror
                    # that stops says why).
                    now = time.monotonic()
                    failing_since = failing_since or now
                    if now - failing_since > self.timeout:
                        raise MirrorError(f"the source did not answer for "
                                          f"{self.timeout:.0f} s: {exc}") from None
                    if not isinstance(exc, BrokerBackoff):
                        log.warning("source: %s; trying again", exc)
                    self._cluster.brokers = {}  # ask the bootstrap servers again
                    self._leaders.clear()
                    await asyncio.sleep(RETRY_BACKOFF_S * 5)
        finally:
            await self._cluster.close()

    async def _connection(self, node: int) -> BrokerConnection:
        """A connection to broker ``node`` (negative: a bootstrap address), through the
        cluster: BrokerBackoff while the broker's reconnect backoff runs."""
        try:
            return await self._cluster.connection(node)
        except KeyError:  # a leader the last metadata did not list: ask again
            raise BrokerConnectionError(f"source broker {node} is not in the metadata") \
                from None

    async def _refresh_metadata(self) -> None:
        with self._lock:
            topics = sorted({topic for topic, _ in self._positions})
        await self._cluster.refresh(topics)
        for name in topics:
            meta = self._cluster.topics.get(name)
            if meta is None:
                continue
            if meta.error_code in _FATAL:
                raise MirrorError(f"reading the source topic {name}: "
                                  f"{ec.error_name(meta.error_code)}")
            for partition, leader in enumerate(meta.leaders):
                if leader in self._cluster.brokers:
                    self._leaders[(name, partition)] = leader
                else:  # no leader, or one that is not up (not listed): not fetched for now
                    self._leaders.pop((name, partition), None)

    async def _round(self) -> None:
        with self._lock:
            wanted = {key: (offset, self._generations[key])
                      for key, offset in self._positions.items()}
        if not wanted:
            await asyncio.sleep(0.05)
            return
        if (any(key not in self._leaders for key in wanted)
                and time.monotonic() >= self._next_leader_refresh):
            await self._refresh_metadata()
            if any(key not in self._leaders for key in wanted):
                self._next_leader_refresh = time.monotonic() + self._leader_backoff
                self._leader_backoff = min(self._leader_backoff * 2, LEADER_BACKOFF_MAX_S)
            else:
                self._leader_backoff = RETRY_BACKOFF_S
        by_leader: dict[int, dict] = {}
        for key, at in wanted.items():
            leader = self._leaders.get(key)
            if leader is not None:
                by_leader.setdefault(leader, {})[key] = at
        if not by_leader:
            await asyncio.sleep(RETRY_BACKOFF_S)
            return
        results = await asyncio.gather(
            *(self._fetch(leader, parts) for leader, parts in by_leader.items()),
            return_exceptions=True)
        refresh = False
        for result in results:
            if isinstance(result, BrokerBackoff):  # down a moment ago: its leaders may move
                refresh = True
            elif isinstance(result, (BrokerConnectionError, OSError, TimeoutError)):
                log.warning("source fetch failed: %s", result)
                refresh = True
            elif isinstance(result, BaseException):
                raise result  # MirrorError, or a bug: the mirror stops and says so
            elif result:
                refresh = True
        if refresh:
            await asyncio.sleep(RETRY_BACKOFF_S)
            self._leaders.clear()
            await self._refresh_metadata()

    async def _fetch(self, leader: int, parts: dict[tuple[str, int], tuple[int, int]]) -> bool:
        """One Fetch to ``leader``; True when the metadata must be refreshed."""
        conn = await self._connection(leader)
        version = conn.version_for(FETCH, *reversed(FETCH_VERSIONS))
        topics: dict[str, list] = {}
        for (topic, p), (offset, _) in parts.items():
            asked = {"partition": p, "fetch_offset": offset,
                     "partition_max_bytes": self._wider.get((topic, p),
                                                            self.partition_max_bytes)}
            if version >= 5:
                asked["log_start_offset"] = -1
            if version >= 9:
                asked["current_leader_epoch"] = -1
            topics.setdefault(topic, []).append(asked)
        # The fields each version has (v4: isolation; v7: fetch sessions, not used: id 0
        # and epoch -1 ask for a full answer each time; v11: the rack)
        extra: dict[str, Any] = {}
        if version >= 7:
            extra.update(session_id=0, session_epoch=-1, forgotten_topics_data=[])
        if version >= 11:
            extra["rack_id"] = ""
        request = build_request(
            FETCH, version, replica_id=-1, max_wait=MAX_WAIT_MS, min_bytes=1,
            max_bytes=self.max_bytes, isolation_level=1 if self.read_committed else 0,
            topics=[{"topic": t, "partitions": ps} for t, ps in topics.items()], **extra)
        answer = await conn.request(FETCH, version, request,
                                    timeout_s=self.timeout + MAX_WAIT_MS / 1000)
        self.fetches += 1
        error = getattr(answer, "error_code", ec.NONE)  # v7+
        if error != ec.NONE:
            log.warning("source fetch: %s", ec.error_name(error))
            return True
        refresh = False
        for topic in answer.responses:
            for part in topic.partitions:
                key = (topic.topic, part.partition_index)
                asked = parts.get(key)
                if asked is None:
                    continue
                fetched = await self._partition(key, asked, part)
                if fetched is None:
                    refresh = refresh or part.error_code in _REFRESH
                    continue
                while not self._stopping:  # room in the queue, or the writers are behind
                    try:
                        self.answers.put_nowait(fetched)
                        break
                    except queue.Full:
                        await asyncio.sleep(0.002)
        return refresh

    async def _partition(self, key: tuple[str, int], asked: tuple[int, int],
                         part: Any) -> Fetched | None:
        offset, generation = asked
        error = part.error_code
        if error == OFFSET_OUT_OF_RANGE:
            await self._out_of_range(key, offset, generation,
                                     getattr(part, "log_start_offset", -1))
            return None
        if error in _FATAL:
            raise MirrorError(f"reading the source {key[0]}[{key[1]}]: {ec.error_name(error)}")
        if error != ec.NONE:
            if error not in _REFRESH:
                log.warning("source %s[%d]: %s", key[0], key[1], ec.error_name(error))
            return None
        end = part.last_stable_offset if (self.read_committed
                                          and part.last_stable_offset >= 0) \
            else part.high_watermark
        self.high_watermarks[key] = part.high_watermark
        records = part.records
        try:
            walked = walk(records if records is not None else b"", offset,
                          part.aborted_transactions, self.read_committed)
        except SourceBatchError as exc:
            raise MirrorError(f"source {key[0]}[{key[1]}]: {exc}") from None
        if records and not walked.complete:
            # One batch larger than the partition's share: ask for more next time.
            wider = min(max(len(records), self._wider.get(key, self.partition_max_bytes)) * 2,
                        LARGEST_FETCH)
            self._wider[key] = wider
            log.info("source %s[%d]: a batch larger than %d bytes; fetching up to %d",
                     key[0], key[1], len(records), wider)
        with self._lock:
            if self._generations.get(key) != generation:
                return None  # sought meanwhile
            self._positions[key] = walked.next_offset
        return Fetched(key[0], key[1], generation, walked.batches, walked.next_offset,
                       part.high_watermark, walked.next_offset >= end)

    async def _out_of_range(self, key: tuple[str, int], offset: int, generation: int,
                            log_start: int) -> None:
        """The fetch offset is outside the source's log: below its start (retention or
        DeleteRecords moved it), go on from the start; beyond its end, stop."""
        if log_start is None or log_start < 0:
            log_start = await self._log_start(key)
        if offset >= log_start:
            raise MirrorError(
                f"source {key[0]}[{key[1]}]: offset {offset} is beyond the source's log end "
                "(the source lost records the mirror had read, or the target holds records the "
                "source never had)")
        log.warning("source %s[%d]: the log starts at %d now, after %d; going on from there",
                    key[0], key[1], log_start, offset)
        with self._lock:
            if self._generations.get(key) == generation:
                self._positions[key] = log_start

    async def _log_start(self, key: tuple[str, int]) -> int:
        conn = await self._connection(self._leaders.get(key, -1))
        version = conn.version_for(LIST_OFFSETS, 5, 1)
        answer = await conn.request(LIST_OFFSETS, version, build_request(
            LIST_OFFSETS, version, replica_id=-1, isolation_level=0,
            topics=[{"name": key[0], "partitions": [
                {"partition_index": key[1], "timestamp": EARLIEST,
                 "current_leader_epoch": -1}]}]))
        part = answer.topics[0].partitions[0]
        if part.error_code != ec.NONE:
            raise MirrorError(f"log start of source {key[0]}[{key[1]}]: "
                              f"{ec.error_name(part.error_code)}")
        return part.offset


