"""Dynamic broker configs (KIP-226) with Kafka's rules, kept in the data dir.

Two levels, as in Kafka: per-broker (the BROKER resource named after this node's id) and the
cluster default (the BROKER resource with an empty name). The value in force is, most specific
first: per-broker dynamic, cluster-default dynamic, static (``--config`` at start), default.

Kafka's rules for an update (what it refuses, with INVALID_REQUEST and Kafka 4.x's words):

- a config Kafka cannot change at run time (``num.partitions``, ``log.dirs``, ``node.id``,
  ...): "Cannot update these configs dynamically: [name]";
- an SSL keystore or truststore config without a listener prefix
  (``ssl.keystore.location`` rather than ``listener.name.ssl.ssl.keystore.location``):
  "These security configs can be dynamically updated only per-listener using the listener
  prefix: [name]";
- a per-broker config (listeners, listener TLS material) set as a cluster default: "Cannot
  update these configs at default cluster level, broker id must be specified: [name]";
- a bad value: "Invalid value V for configuration NAME: ...".

Names the broker does not know at all are kept and described, as Kafka keeps custom broker
configs (librdkafka's admin test sets ``sasl.kerberos.min.time.before.relogin`` this way).
The two levels live in ``<data dir>/__broker_configs.json``, written atomically, so an update
survives a kill -9.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Iterable, Mapping
from typing import Final

from .broker_config import BrokerConfig, BrokerConfigError
from .storage.durable_files import read_json, write_json_atomically
from .storage.topic_configs import BROKER_SYNONYMS

FILE_NAME: Final = "__broker_configs.json"

#: Kafka's SslConfigs.RECONFIGURABLE_CONFIGS: per listener only (listener.name.X. prefix).
SSL_RECONFIGURABLE: Final = frozenset({
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password",
    "ssl.key.password", "ssl.truststore.type", "ssl.truststore.location",
    "ssl.truststore.password", "ssl.keystore.certificate.chain", "ssl.keystore.key",
    "ssl.truststore.certificates",
})
#: Kafka's listener configs that may change at run time, per broker only.
LISTENER_RECONFIGURABLE: Final = frozenset({
    "listeners", "advertised.listeners", "listener.security.protocol.map",
})
#: Connection configs Kafka takes at both levels (ClusterLevelListenerConfigs and the rest
#: of SocketServer's reconfigurable configs).
CONNECTION_RECONFIGURABLE: Final = frozenset({
    "max.connections", "max.connection.creation.rate", "num.network.threads",
    "max.connections.per.ip", "max.connections.per.ip.overrides",
})
_CLUSTER_LEVEL_LISTENER: Final = frozenset({
    "max.connections", "max.connection.creation.rate", "num.network.threads",
})
#: The rest of Kafka 3.9's dynamic broker configs that this broker has or names.
OTHER_RECONFIGURABLE: Final = frozenset({
    # LogCleaner
    "log.cleaner.threads", "log.cleaner.dedupe.buffer.size", "log.cleaner.io.buffer.size",
    "log.cleaner.io.buffer.load.factor", "log.cleaner.io.max.bytes.per.second",
    "log.cleaner.backoff.ms",
    # DynamicThreadPool
    "num.io.threads", "num.replica.fetchers", "num.recovery.threads.per.data.dir",
    "background.threads",
    # metrics, producer state, replication quotas and throttles
    "metric.reporters", "producer.id.expiration.ms",
    "transaction.partition.verification.enable", "follower.replication.throttled.rate",
    "leader.replication.throttled.rate", "replica.alter.log.dirs.io.max.bytes.per.second",
    "config.providers",
})
#: Log configs Kafka reconfigures (the broker synonyms of topic configs) less the ones it
#: keeps static.
LOG_RECONFIGURABLE: Final = frozenset(BROKER_SYNONYMS) - {"log.message.format.version"}

ALL_DYNAMIC: Final = (SSL_RECONFIGURABLE | LISTENER_RECONFIGURABLE | CONNECTION_RECONFIGURABLE
                      | OTHER_RECONFIGURABLE | LOG_RECONFIGURABLE)
PER_BROKER: Final = (SSL_RECONFIGURABLE | LISTENER_RECONFIGURABLE) - _CLUSTER_LEVEL_LISTENER

_LISTENER_PREFIX: Final = re.compile(r"listener\.name\.([^.]*)\.(.*)")

#: Value checks for dynamic configs this broker does not otherwise parse: name -> (Kafka
#: type, minimum).
_EXTRA_TYPES: Final[dict[str, tuple[str, int]]] = {
    "log.cleaner.threads": ("INT", 0),
    "log.cleaner.dedupe.buffer.size": ("LONG", 0),
    "log.cleaner.io.buffer.size": ("INT", 0),
    "log.cleaner.io.max.bytes.per.second": ("DOUBLE", 0),
    "log.cleaner.io.buffer.load.factor": ("DOUBLE", 0),
    "num.io.threads": ("INT", 1),
    "num.network.threads": ("INT", 1),
    "num.replica.fetchers": ("INT", 1),
    "num.recovery.threads.per.data.dir": ("INT", 1),
    "background.threads": ("INT", 1),
    "max.connection.creation.rate": ("INT", 0),
    "producer.id.expiration.ms": ("INT", 1),
    "follower.replication.throttled.rate": ("LONG", 0),
    "leader.replication.throttled.rate": ("LONG", 0),
    "replica.alter.log.dirs.io.max.bytes.per.second": ("LONG", 0),
}
_INT_BOUNDS: Final = {"INT": 2**31 - 1, "LONG": 2**63 - 1}


class DynamicConfigError(ValueError):
    """An update Kafka refuses; the text is Kafka's (without the resource prefix)."""


def base_name(name: str) -> str:
    """``listener.name.ssl.ssl.keystore.location`` -> ``ssl.keystore.location``."""
    match = _LISTENER_PREFIX.fullmatch(name)
    return match.group(2) if match else name


def listener_of(name: str) -> str | None:
    match = _LISTENER_PREFIX.fullmatch(name)
    return match.group(1) if match else None


def is_dynamic(name: str) -> bool:
    return base_name(name) in ALL_DYNAMIC


def _java_set(names: Iterable[str]) -> str:
    return "[" + ", ".join(sorted(names)) + "]"


def _check_value(name: str, value: str) -> None:
    spec = _EXTRA_TYPES.get(name)
    prop = BrokerConfig.properties().get(name)
    if spec is None and prop is not None and prop.type in ("int", int):
        spec = ("LONG" if name.endswith(".ms") else "INT", -(2**63))
    if spec is None:
        return
    kind, minimum = spec
    try:
        number = float(value) if kind == "DOUBLE" else int(value.strip())
    except ValueError:
        raise DynamicConfigError(
            f"Invalid value {value} for configuration {name}: Not a number of type {kind}"
        ) from None
    if kind in _INT_BOUNDS and not -_INT_BOUNDS[kind] - 1 <= number <= _INT_BOUNDS[kind]:
        raise DynamicConfigError(
            f"Invalid value {value} for configuration {name}: Not a number of type {kind}")
    if number < minimum:
        raise DynamicConfigError(
            f"Invalid value {value} for configuration {name}: Value must be at least {minimum}")


def validate(updates: Mapping[str, str | None], per_broker: bool,
             known_names: Collection[str]) -> None:
    """Kafka's checks of an update at one level (the names set or deleted); ``known_names``:
    every broker config name the broker knows (broker_config_defs.known_names), those of them
    that are not dynamic being refused."""
    names = set(updates)
    static = {n for n in names if n in known_names and not is_dynamic(n)}
    if static:
        raise DynamicConfigError(f"Cannot update these configs dynamically: {_java_set(static)}")
    unprefixed = names & SSL_RECONFIGURABLE
    if unprefixed:
        raise DynamicConfigError(
            "These security configs can be dynamically updated only per-listener using the "
            f"listener prefix: {_java_set(unprefixed)}")
    for name, value in updates.items():
        if value is not None:
            _check_value(base_name(name), value)
    if not per_broker:
        only_per_broker = {
            n for n in names
            if n in PER_BROKER
            or (listener_of(n) is not None and base_name(n) not in _CLUSTER_LEVEL_LISTENER)
        }
        if only_per_broker:
            raise DynamicConfigError(
                "Cannot update these configs at default cluster level, broker id must be "
                f"specified: {_java_set(only_per_broker)}")


class DynamicConfigs:
    """The two dynamic levels of one broker, loaded from and saved to its data dir."""

    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        self.path = os.path.join(os.fspath(data_dir), FILE_NAME)
        stored = read_json(self.path) if os.path.exists(self.path) else None
        stored = stored or {}
        self.per_broker: dict[str, str] = dict(stored.get("per_broker", {}))
        self.default: dict[str, str] = dict(stored.get("default", {}))

    def level(self, per_broker: bool) -> dict[str, str]:
        return self.per_broker if per_broker else self.default

    def save(self) -> None:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        write_json_atomically(self.path, {"per_broker": self.per_broker,
                                          "default": self.default})
        os.chmod(self.path, 0o600)  # keystore keys and passwords may be among the values

    def merged(self, per_broker: dict[str, str] | None = None,
               default: dict[str, str] | None = None) -> dict[str, str]:
        """Default then per-broker, the latter winning."""
        return {**(self.default if default is None else default),
                **(self.per_broker if per_broker is None else per_broker)}


def effective_config(static: Mapping[str, str], dynamic: Mapping[str, str]) -> BrokerConfig:
    """The BrokerConfig in force: static properties overlaid by the dynamic ones this broker
    parses; the static names stay the ones reported as STATIC_BROKER_CONFIG."""
    known = {*BrokerConfig.properties(), *BROKER_SYNONYMS}
    props = {**static, **{k: v for k, v in dynamic.items() if k in known}}
    try:
        config = BrokerConfig.from_properties(props)
    except BrokerConfigError as exc:
        raise DynamicConfigError(str(exc)) from None
    config.explicit = frozenset(static)
    config.given = dict(static)
    return config


def listener_overrides(dynamic: Mapping[str, str], listener: str) -> dict[str, str]:
    """The ``listener.name.<listener>.ssl.*`` values of one listener, by their base names
    (listener names are matched without regard to case, as Kafka lower-cases them)."""
    found = {}
    for name, value in dynamic.items():
        owner = listener_of(name)
        if owner is not None and owner.lower() == listener.lower():
            if base_name(name) in SSL_RECONFIGURABLE:
                found[base_name(name)] = value
    return found


def listener_tls_context(static: Mapping[str, str], dynamic: Mapping[str, str],
                         listener: str):  # -> ssl.SSLContext | None
    """A new SSLContext for a TLS listener with its dynamic keystore / truststore, or None
    when it has none (the listener keeps the context built at start)."""
    overrides = listener_overrides(dynamic, listener)
    if not overrides:
        return None
    from .security.tls import server_context  # noqa: PLC0415 (ssl only for TLS listeners)

    props = dict(static)
    if {"ssl.keystore.certificate.chain", "ssl.keystore.key"} & set(overrides):
        props.pop("ssl.keystore.location", None)
    if "ssl.keystore.location" in overrides:
        props.pop("ssl.keystore.certificate.chain", None)
        props.pop("ssl.keystore.key", None)
    props.update({k: v for k, v in overrides.items() if k in BrokerConfig.properties()})
    try:
        return server_context(BrokerConfig.from_properties(props))
    except BrokerConfigError as exc:
        raise DynamicConfigError(
            f"Validation of dynamic config update of SSLFactory failed: {exc}") from None
