"""What the engine knows of the cluster: brokers, topics, partition leaders, connections.

Every connection, the metadata ones included, authenticates with the configured SASL
settings. A refused authentication is remembered for ``auth_retry_backoff_s``: meanwhile no
connection is attempted and :meth:`Cluster.authentication_failure` tells the engine, which
fails the records waiting to be sent instead of retrying them until delivery.timeout.ms.

Connection attempts to a broker are spaced as librdkafka spaces them
(``reconnect.backoff.ms`` / ``reconnect.backoff.max.ms``): after an attempt the next one
waits the current backoff with -25%..+50% jitter (capped at the max), and the backoff doubles
up to the max; it starts over once the broker's last attempt is more than the max ago. An
attempt refused by the backoff fails at once (:class:`BrokerBackoff`), so a dead broker costs
nothing while its partitions' metadata is refreshed and they move to their new leaders.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from dataclasses import dataclass, field
from typing import Any

from kipproducer.protocol import build_request
from kipproducer.protocol import error_codes as ec

from ..protocol.api_keys import METADATA
from .config import SaslSettings
from .connection import BrokerAuthenticationError, BrokerConnection, BrokerConnectionError
from .tls import TlsSettings

log = logging.getLogger("kipproducer.engine")



@dataclass
class TopicMetadata:
    name: str
    error_code: int = ec.NONE
    leaders: list[int] = field(default_factory=list)  # index = partition, -1 = no leader

    @property
    def partition_count(self) -> int:
        return len(self.leaders)


class BrokerBackoff(BrokerConnectionError):
    """No connection attempt now: the broker's reconnect backoff has not passed."""


class Cluster:
    def __init__(self, bootstrap: list[tuple[str, int]], client_id: str, *,
                 request_timeout_s: float, connect_timeout_s: float,
                 allow_auto_create_topics: bool = True, sasl: SaslSettings | None = None,
                 auth_retry_backoff_s: float = 1.0, tls: TlsSettings | None = None,
                 reconnect_backoff_ms: int = 100, reconnect_backoff_max_ms: int = 10_000) -> None:
        self.reconnect_backoff_ms = max(reconnect_backoff_ms, 0)
        self.reconnect_backoff_max_ms = max(reconnect_backoff_max_ms, self.reconnect_backoff_ms)
        # node id -> (monotonic time its next attempt may start, its current backoff in ms)
        self._reconnect: dict[int, tuple[float, float]] = {}
        # Set when a broker was unreachable or a connection was lost: the leaders it had may
        # have moved. The engine refreshes metadata and clears it.
        self.stale = False
        self.bootstrap = bootstrap
        self.sasl = sasl
        self.tls = tls
        self.auth_retry_backoff_s = auth_retry_backoff_s
        # The last refused authentication: (its message, monotonic time it stops holding).
        self._auth_failure: tuple[str, float] | None = None
        self.allow_auto_create_topics = allow_auto_create_topics
        self.client_id = client_id
        self.request_timeout_s = request_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.brokers: dict[int, tuple[str, int]] = {}
        self.topics: dict[str, TopicMetadata] = {}
        self.refreshed_at: dict[str, float] = {}  # topic -> monotonic time of its metadata
        self.refreshed = 0.0  # monotonic time of the last metadata answer
        self.last_connect_error: str | None = None  # the last failed connection attempt
        self._connections: dict[int, BrokerConnection] = {}
        self._connecting: dict[int, asyncio.Task] = {}
        self._refresh_lock = asyncio.Lock()

    async def connection(self, node_id: int) -> BrokerConnection:
        conn = self._connections.get(node_id)
        if conn is not None and conn.connected:
            return conn
        task = self._connecting.get(node_id)
        if task is None:
            task = asyncio.create_task(self._connect(node_id))
            self._connecting[node_id] = task
        try:
            return await asyncio.shield(task)
        finally:
            if task.done():
                self._connecting.pop(node_id, None)

    async def _connect(self, node_id: int) -> BrokerConnection:
        if node_id < 0:
            host, port = self.bootstrap[(-node_id - 1) % len(self.bootstrap)]
        else:
            host, port = self.brokers[node_id]
        held = self.authentication_failure()
        if held is not None:
            # Refused a moment ago: the same credentials would be refused again.
            raise BrokerAuthenticationError(held)
        self._attempt(node_id, host, port)
        conn = BrokerConnection(node_id, host, port, self.client_id,
                                request_timeout_s=self.request_timeout_s,
                                connect_timeout_s=self.connect_timeout_s, sasl=self.sasl,
                                tls=self.tls)
        try:
            await conn.connect()
        except BrokerAuthenticationError as exc:
            log.error("%s", exc)
            self._auth_failure = (str(exc), time.monotonic() + self.auth_retry_backoff_s)
            raise
        except BrokerConnectionError as exc:
            self.stale = True
            self.last_connect_error = str(exc)  # names the address, for the caller's errors
            raise
        self._auth_failure = None
        self._connections[node_id] = conn
        return conn

    def _attempt(self, node_id: int, host: str, port: int) -> None:
        """A connection attempt to ``node_id`` starts now, or BrokerBackoff if it may not."""
        now = time.monotonic()
        next_at, backoff_ms = self._reconnect.get(node_id, (0.0, 0.0))
        if now < next_at:
            self.stale = True
            raise BrokerBackoff(
                f"broker {node_id} at {host}:{port}: next connection attempt in "
                f"{(next_at - now) * 1000:.0f} ms (reconnect.backoff.ms)")
        if not backoff_ms or now > next_at + self.reconnect_backoff_max_ms / 1000:
            backoff_ms = self.reconnect_backoff_ms  # first attempt, or long since the last
        wait_ms = min(random.uniform(backoff_ms * 0.75, backoff_ms * 1.5),
                      self.reconnect_backoff_max_ms)
        self._reconnect[node_id] = (now + wait_ms / 1000,
                                    min(backoff_ms * 2, self.reconnect_backoff_max_ms))

    def authentication_failure(self) -> str | None:
        """Why the last connection attempt was refused authentication, while that holds
        (``auth_retry_backoff_s`` after it); None otherwise."""
        failure = self._auth_failure
        if failure is None or time.monotonic() >= failure[1]:
            return None
        return failure[0]

    async def any_connection(self) -> BrokerConnection:
        """A connection to some broker: a known one if possible, else a bootstrap address."""
        candidates = list(self.brokers) or [-(i + 1) for i in range(len(self.bootstrap))]
        random.shuffle(candidates)
        if self.brokers:
            candidates += [-(i + 1) for i in range(len(self.bootstrap))]
        errors = []
        for node_id in candidates:
            try:
                return await self.connection(node_id)
            except BrokerAuthenticationError:
                raise  # every broker checks the same credentials: no use asking the others
            except (BrokerConnectionError, KeyError) as exc:
                errors.append(str(exc))
        raise BrokerConnectionError("no broker reachable: " + "; ".join(errors))

    async def refresh(self, topics: list[str] | None = None, *,
                      every_topic: bool = False) -> list[str]:
        """Metadata for ``topics`` (the known ones if None; every topic of the cluster with
        ``every_topic``, a null topic list); serialised, one at a time. The names of the
        topics the answer holds."""
        async with self._refresh_lock:
            wanted = sorted(set(topics if topics is not None else self.topics))
            conn = await self.any_connection()
            version = conn.version_for(METADATA, 12, 1)
            fields: dict[str, Any] = {"topics": None if every_topic
                                      else [{"name": t} for t in wanted]}
            if version >= 4:
                fields["allow_auto_topic_creation"] = self.allow_auto_create_topics
            response = await conn.request(METADATA, version, build_request(
                METADATA, version, **fields))
            self.brokers = {b.node_id: (b.host, b.port) for b in response.brokers}
            now = self.refreshed = time.monotonic()
            for t in response.topics:
                self.refreshed_at[t.name] = now
                if t.error_code != ec.NONE:
                    self.topics[t.name] = TopicMetadata(t.name, t.error_code)
                    continue
                leaders = [-1] * len(t.partitions)
                for p in t.partitions:
                    if 0 <= p.partition_index < len(leaders) and p.error_code == ec.NONE:
                        leaders[p.partition_index] = p.leader_id
                self.topics[t.name] = TopicMetadata(t.name, ec.NONE, leaders)
            for node_id, conn in list(self._connections.items()):
                if node_id >= 0 and node_id not in self.brokers:
                    await conn.close()
                    del self._connections[node_id]
            return [t.name for t in response.topics]

    def leader(self, topic: str, partition: int) -> int:
        meta = self.topics.get(topic)
        if meta is None or not 0 <= partition < meta.partition_count:
            return -1
        return meta.leaders[partition]

    def connections(self) -> list[BrokerConnection]:
        return list(self._connections.values())

    async def close(self) -> None:
        for conn in list(self._connections.values()):
            await conn.close()
        self._connections.clear()
