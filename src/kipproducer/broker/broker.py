"""The reference broker: one node, its logs, its group and transaction coordinators and its
listener.

``Broker(data_dir, host=..., port=..., config=...)``; ``await start()`` opens the data dir
(recovering every log), starts the listener and the maintenance timer; ``await stop()`` closes
connections, flushes and closes the logs. Request handlers (``handlers/``) reach everything
through the ``Broker`` passed in their context, typed as the ``BrokerView`` of view.py so that
they need not import this module (which imports them).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
from collections.abc import Awaitable, Mapping
from typing import Any

from . import handlers as _handlers  # noqa: F401  (registers every API handler)
from .broker_config import BrokerConfig
from .dynamic_config import DynamicConfigs, effective_config, listener_tls_context
from .groups import GroupCoordinator
from .listeners import advertised, broker_listeners, tls_context
from .security.authorizer import AclStore
from .security.broker_security import BrokerSecurity
from .security.users import UserStore
from .server import BrokerServer
from .storage.errors import StorageError
from .storage.log_config import LogConfig
from .storage.log_manager import LogManager
from .storage.topic_configs import BROKER_SYNONYMS
from .transactions import TransactionCoordinator

log = logging.getLogger("kipproducer.broker")


async def _closing(closed: Awaitable[None], failures: list[Exception]) -> None:
    """Await a store's close; a disk failure in it is added to ``failures``."""
    try:
        await closed
    except (StorageError, OSError) as exc:
        failures.append(exc)


class Broker:
    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        config: BrokerConfig | Mapping[str, Any] | None = None,
        listen_given: bool = False,
    ) -> None:
        if not isinstance(config, BrokerConfig):
            config = BrokerConfig.from_properties(config)
        self.data_dir = os.fspath(data_dir)
        # KIP-226: dynamic updates kept in the data dir are laid over the static properties.
        self.dynamic = DynamicConfigs(self.data_dir)
        self.static_config = config
        if self.dynamic.per_broker or self.dynamic.default:
            config = effective_config(config.given, self.dynamic.merged())
        self.config = config
        # SASL, users and ACLs (docs/security.md); bad security properties fail here.
        self.security = BrokerSecurity(self.data_dir, config)
        # One server per listener (listeners.py); the first is the one bootstrap_servers names.
        specs = broker_listeners(config, host, port, listen_given)
        context = tls_context(config, specs)
        self._advertised = advertised(config, specs)
        self.servers: list[BrokerServer] = []
        for spec in specs:
            quotas = self.servers[0].quotas if self.servers else None
            self.servers.append(BrokerServer(self, spec=spec, ssl_context=context,
                                             quotas=quotas))
        self.server = self.servers[0]
        self._listener_contexts(self.dynamic.merged())  # rotated keystores, kept in data dir
        self.logs: LogManager | None = None
        self.groups: GroupCoordinator | None = None
        self.transactions: TransactionCoordinator | None = None
        self._data_arrived = asyncio.Event()
        self._maintenance: asyncio.Task | None = None
        self._started = False

    def apply_dynamic(self, per_broker: dict[str, str], default: dict[str, str],
                      validate_only: bool = False) -> None:
        """Check a new pair of dynamic levels against the static properties; unless
        validate_only, keep them in the data dir and put them in force where Kafka does so
        without a restart (connection limits, log cleaner backoff, new topics' defaults)."""
        merged = self.dynamic.merged(per_broker, default)
        config = effective_config(self.static_config.given, merged)
        LogConfig.parse(broker_defaults=config.topic_defaults)  # InvalidConfigError
        advertised_now = advertised(config, [server.spec for server in self.servers])
        contexts = self._listener_contexts(merged, install=False)
        if validate_only:
            return
        self.dynamic.per_broker, self.dynamic.default = dict(per_broker), dict(default)
        self.dynamic.save()
        self.config = config
        self._advertised = advertised_now  # what Metadata tells clients from now on
        # A rotated keystore: new connections get the new context, open ones keep theirs.
        for server, context in contexts.items():
            server.ssl_context = context
        quotas = self.server.quotas
        quotas.reconfigure(config.max_connections, config.max_connections_per_ip,
                           config.max_connections_per_ip_overrides)
        if self.logs is not None:
            self.logs.set_broker_defaults(config.topic_defaults)
            self.logs.compaction_backoff_ms = config.log_cleaner_backoff_ms

    def broker_synonym_levels(self) -> dict[str, list[tuple[str, int]]]:
        """Each broker synonym of a topic config that has a value: its levels, most specific
        first (per-broker dynamic, cluster-default dynamic, static), for topic DescribeConfigs
        synonyms as Kafka lists them."""
        levels: dict[str, list[tuple[str, int]]] = {}
        for name in BROKER_SYNONYMS:
            found = [(level[name], source) for level, source in (
                (self.dynamic.per_broker, 2), (self.dynamic.default, 3),
                (self.static_config.log_properties, 4)) if name in level]
            if found:
                levels[name] = found
        return levels

    def _listener_contexts(self, merged: Mapping[str, str],
                           install: bool = True) -> dict[BrokerServer, Any]:
        """Each TLS listener's SSLContext from its listener.name.X.ssl.* dynamic values."""
        contexts = {}
        for server in self.servers:
            if not server.spec.tls:
                continue
            context = listener_tls_context(self.static_config.given, merged, server.spec.protocol)
            if context is None and not install:
                # Its dynamic keystore was deleted: back to the static one.
                context = tls_context(self.static_config, [server.spec])
            if context is not None:
                contexts[server] = context
                if install:
                    server.ssl_context = context
        return contexts

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> tuple[str, int]:
        loop = asyncio.get_running_loop()
        self._data_arrived = asyncio.Event()
        # A corrupt users or ACL file stops the start: no listener that guesses who may do what.
        await loop.run_in_executor(None, self.security.open)
        # Opening recovers every partition (CRC checks of unflushed tails): off the loop.
        self.logs = await loop.run_in_executor(
            None,
            lambda: LogManager(
                self.data_dir,
                broker_defaults=self.config.topic_defaults,
                compaction_backoff_ms=self.config.log_cleaner_backoff_ms,
                checkpoint_interval_ms=self.config.log_flush_offset_checkpoint_interval_ms,
            ),
        )
        self.groups = GroupCoordinator(
            os.path.join(self.data_dir, "__groups"),
            initial_rebalance_delay_ms=self.config.group_initial_rebalance_delay_ms,
            min_session_timeout_ms=self.config.group_min_session_timeout_ms,
            max_session_timeout_ms=self.config.group_max_session_timeout_ms,
            offsets_retention_ms=self.config.offsets_retention_minutes * 60_000,
        )
        await self.groups.start()
        # Before the listener: transactions a crash left half-way are completed first.
        self.transactions = TransactionCoordinator(
            os.path.join(self.data_dir, "__transactions"),
            allocate_producer_id=self.logs.allocate_producer_id,
            logs=self.logs,
            groups=self.groups,
            max_timeout_ms=self.config.transaction_max_timeout_ms,
            expiration_ms=self.config.transactional_id_expiration_ms,
            abort_interval_ms=(
                self.config.transaction_abort_timed_out_transaction_cleanup_interval_ms),
            expire_interval_ms=(
                self.config.transaction_remove_expired_transaction_cleanup_interval_ms),
            on_markers_written=self.notify_appended,
        )
        await self.transactions.start()
        for server in self.servers[1:]:
            await server.start()
        host, port = await self.server.start()
        self._maintenance = asyncio.create_task(self._maintenance_loop())
        self._started = True
        log.info(
            "broker %d listening on %s:%d, data dir %s",
            self.config.node_id,
            host,
            port,
            self.data_dir,
        )
        return host, port

    async def stop(self) -> None:
        if self._maintenance is not None:
            self._maintenance.cancel()
            await asyncio.gather(self._maintenance, return_exceptions=True)
            self._maintenance = None
        for server in self.servers:
            await server.stop()
        # Each store is closed even when one before it fails (a failing disk): the first
        # failure is raised once all are closed.
        failures: list[Exception] = []
        if self.transactions is not None:
            transactions, self.transactions = self.transactions, None
            await _closing(transactions.close(), failures)
        if self.groups is not None:
            groups, self.groups = self.groups, None
            await _closing(groups.close(), failures)
        if self.logs is not None:
            logs, self.logs = self.logs, None
            await _closing(asyncio.get_running_loop().run_in_executor(None, logs.close),
                           failures)
        self._started = False
        if len(failures) == 1:
            raise failures[0]
        if failures:
            raise StorageError("; ".join(str(failure) for failure in failures))

    async def _maintenance_loop(self) -> None:
        """flush.ms and compaction every log.flush.scheduler.interval.ms; retention only every
        log.retention.check.interval.ms, as Kafka schedules them."""
        config = self.config
        interval = config.log_flush_scheduler_interval_ms / 1000
        retention_every = config.log_retention_check_interval_ms / 1000
        loop = asyncio.get_running_loop()
        last_retention = loop.time()
        while True:
            await asyncio.sleep(min(interval, retention_every))
            logs = self.logs
            if logs is None:
                return
            retention = loop.time() - last_retention >= retention_every
            if retention:
                last_retention = loop.time()
            try:
                report = await loop.run_in_executor(
                    None, functools.partial(logs.run_periodic_tasks, retention=retention))
                for error in report.errors:
                    log.warning("maintenance: %s", error)
            except Exception:
                log.exception("maintenance run failed")

    # -- what clients are told --------------------------------------------------------------------

    @property
    def node_id(self) -> int:
        return self.config.node_id

    @property
    def advertised_host(self) -> str:
        return self.config.advertised_host or self.server.host

    @property
    def advertised_port(self) -> int:
        return self.config.advertised_port or self.server.port

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.advertised_host}:{self.advertised_port}"

    def listener_address(self, protocol: str) -> str:
        """``host:port`` of the listener of that security protocol (SSL, SASL_SSL, ...)."""
        for server in self.servers:
            if server.spec.protocol == protocol.upper():
                return f"{server.host}:{server.port}"
        raise KeyError(f"no {protocol} listener (listeners: "
                       f"{', '.join(s.spec.protocol for s in self.servers)})")

    def advertised_for(self, session: Any) -> tuple[str, int]:
        """The address Metadata and FindCoordinator tell a client: the listener it came in
        on (advertised.listeners, else advertised.host / advertised.port for the first
        listener, else the bound address)."""
        return self.advertised_address(getattr(session, "listener", None) or self.server)

    def advertised_address(self, server: BrokerServer) -> tuple[str, int]:
        told = self._advertised.get(server.spec.protocol)
        if told is not None:
            return told
        if server is self.server:
            return self.advertised_host, self.advertised_port
        return server.host, server.port

    # -- authorization ----------------------------------------------------------------------------

    @property
    def users(self) -> UserStore:
        """The SASL user store: ``broker.users.add("alice", "secret")`` (durable, live)."""
        return self.security.users

    @property
    def acls(self) -> AclStore:
        """The ACL store: ``broker.acls.add([AclBinding.of(...)])`` (durable, live)."""
        return self.security.acls

    def authorize(
        self, principal: str, operation: Any, resource_type: Any, name: str, host: str = "*"
    ) -> bool:
        """Whether ``principal`` (from ``host``) may do ``operation`` on the resource.

        Operation and resource type go by Kafka name (``"Write"``, ``"Topic"``), code or
        enum. With the authorizer off (the default) everything is allowed, as in Kafka
        without an authorizer; handlers use the helpers in ``security/checks.py``.
        """
        return self.security.authorize(principal, operation, resource_type, name, host)

    # -- fetch long-poll --------------------------------------------------------------------------

    def notify_appended(self) -> None:
        """Wake fetches waiting for data (they re-read their partitions)."""
        self._data_arrived.set()
        self._data_arrived = asyncio.Event()

    async def wait_for_data(self, timeout_s: float) -> None:
        if timeout_s <= 0:
            return
        event = self._data_arrived
        try:
            await asyncio.wait_for(event.wait(), timeout_s)
        except TimeoutError:
            pass
