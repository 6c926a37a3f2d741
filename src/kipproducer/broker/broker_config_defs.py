"""What DescribeConfigs reports for the BROKER resource: a Kafka 3.9 set of broker keys.

Three kinds of rows, each with Kafka's name and ConfigType:

- the properties this broker takes (BrokerConfig): their values, STATIC_BROKER_CONFIG when
  given at start, DEFAULT_CONFIG otherwise;
- the broker synonyms of topic configs (log.retention.hours, compression.type, ...): the value
  given, else Kafka's default (null for the more specific synonyms Kafka leaves unset);
- keys tools read that describe the running node (listeners, advertised.listeners, log.dirs,
  the internal topics' settings, ...): what this node actually does, STATIC_BROKER_CONFIG when
  it comes from the command line (--listen, --data-dir), DEFAULT_CONFIG otherwise. Where one
  node makes Kafka's default impossible (a replication factor of 3), the row says 1.

Rows of Kafka 3.9's dynamic configs (dynamic_config.py) are writable; a dynamic value set for
this node is DYNAMIC_BROKER_CONFIG, one set as the cluster default DYNAMIC_DEFAULT_BROKER_CONFIG,
and the synonyms list every level that has a value, most specific first (per-broker, cluster
default, static, default), as Kafka does. The others are read-only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, dataclass
from typing import TYPE_CHECKING, Any, Final

from .broker_config import BrokerConfig
from .dynamic_config import base_name, is_dynamic
from .storage.config_def import (
    SOURCE_DEFAULT_CONFIG,
    SOURCE_STATIC_BROKER_CONFIG,
    TYPE_BOOLEAN,
    TYPE_INT,
    TYPE_LIST,
    TYPE_LONG,
    TYPE_PASSWORD,
    TYPE_SHORT,
    TYPE_STRING,
    render_typed,
)
from .storage.log_config import ConfigSynonym
from .storage.topic_configs import BROKER_SYNONYMS, TOPIC_CONFIG_BY_NAME, TOPIC_CONFIG_DEFS

if TYPE_CHECKING:
    from .view import BrokerView


@dataclass(frozen=True, slots=True)
class BrokerEntry:
    name: str
    value: str | None
    source: int
    config_type: int
    synonyms: tuple[ConfigSynonym, ...]
    documentation: str | None = None
    read_only: bool = True
    sensitive: bool = False


#: DescribeConfigs ConfigSource values of the two dynamic levels.
SOURCE_DYNAMIC_BROKER_CONFIG: Final = 2
SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG: Final = 3


# Kafka's LONG-typed properties among BrokerConfig's; the other ints are INT.
_LONG_PROPERTIES: Final = frozenset({
    "connections.max.idle.ms",
    "log.retention.check.interval.ms",
    "log.flush.scheduler.interval.ms",
    "log.cleaner.backoff.ms",
    "request.read.timeout.ms",
    "connections.max.reauth.ms",
})
_LIST_PROPERTIES: Final = frozenset({"sasl.enabled.mechanisms"})
#: Kafka's PASSWORD-typed properties: DescribeConfigs never shows their values.
_PASSWORD_PROPERTIES: Final = frozenset({
    "ssl.key.password", "ssl.keystore.key", "ssl.keystore.password", "ssl.truststore.password"})


def _listener_name(broker: BrokerView) -> str:
    return broker.server.spec.protocol


def _listeners(broker: BrokerView) -> str:
    return ",".join(f"{s.spec.protocol}://{s.host}:{s.port}" for s in broker.servers)


def _advertised_listeners(broker: BrokerView) -> str:
    return ",".join(f"{s.spec.protocol}://{':'.join(map(str, broker.advertised_address(s)))}"
                    for s in broker.servers)


def _protocol_map(broker: BrokerView) -> str:
    return ",".join(f"{s.spec.protocol}:{s.spec.protocol}" for s in broker.servers)


# Keys that describe the running node: name -> (type, value from the broker, from the command
# line?, documentation).
_NodeValue = Callable[["BrokerView"], Any]
_NODE_KEYS: Final[dict[str, tuple[int, _NodeValue, bool, str]]] = {
    "listeners": (
        TYPE_STRING, _listeners, True, "the addresses --listen and listeners bound"),
    "advertised.listeners": (
        TYPE_STRING, _advertised_listeners,
        False, "the addresses clients are told (advertised.host / advertised.port)"),
    "listener.security.protocol.map": (
        TYPE_STRING, _protocol_map, False,
        "each listener is named after its protocol"),
    "inter.broker.listener.name": (TYPE_STRING, _listener_name, False, "there is no peer"),
    "process.roles": (TYPE_LIST, lambda b: ("broker", "controller"), False,
                      "one process is broker and controller"),
    "broker.id": (TYPE_INT, lambda b: b.config.node_id, False, "the same as node.id"),
    "log.dirs": (TYPE_STRING, lambda b: b.data_dir, True, "the --data-dir"),
    "log.dir": (TYPE_STRING, lambda b: b.data_dir, True, "the --data-dir"),
    "delete.topic.enable": (TYPE_BOOLEAN, lambda b: True, False, "DeleteTopics works"),
    "log.cleaner.enable": (TYPE_BOOLEAN, lambda b: True, False, "the cleaner always runs"),
    "log.cleaner.threads": (TYPE_INT, lambda b: 1, False, "one maintenance thread"),
    "offsets.topic.replication.factor": (
        TYPE_SHORT, lambda b: 1, False, "group offsets live in the data dir's own log"),
    "offsets.topic.num.partitions": (TYPE_INT, lambda b: 1, False, "one offsets log"),
    "transaction.state.log.replication.factor": (
        TYPE_SHORT, lambda b: 1, False, "transaction state lives in the data dir's own log"),
    "transaction.state.log.min.isr": (TYPE_INT, lambda b: 1, False, "one node"),
    "transaction.state.log.num.partitions": (TYPE_INT, lambda b: 1, False, "one log"),
    "replica.fetch.max.bytes": (TYPE_INT, lambda b: 1_048_576, False, "no followers fetch"),
    "fetch.max.bytes": (TYPE_INT, lambda b: 57_671_680, False, "Kafka's default"),
}


def _synonyms(name: str, value: str | None, static: bool) -> tuple[ConfigSynonym, ...]:
    out = []
    if static:
        out.append(ConfigSynonym(name, value or "", SOURCE_STATIC_BROKER_CONFIG))
    return tuple(out)


def _text(config_type: int, value: Any) -> str | None:
    if value is None:
        return None
    return render_typed(TYPE_BOOLEAN if config_type == TYPE_BOOLEAN else TYPE_STRING, value)


def _property_rows(broker: BrokerView) -> list[BrokerEntry]:
    config = broker.config
    rows = []
    for name, spec in BrokerConfig.properties().items():
        if name in _NODE_KEYS:  # listeners: what the node bound, not the text given
            continue
        value = getattr(config, spec.name)
        if name in _PASSWORD_PROPERTIES:
            rows.append(BrokerEntry(
                name, None, SOURCE_STATIC_BROKER_CONFIG if name in config.explicit
                else SOURCE_DEFAULT_CONFIG, TYPE_PASSWORD, (), spec.metadata.get("doc")))
            continue
        if name in _LIST_PROPERTIES:
            config_type = TYPE_LIST
        elif isinstance(value, bool):
            config_type = TYPE_BOOLEAN
        elif isinstance(value, int):
            config_type = TYPE_LONG if name in _LONG_PROPERTIES else TYPE_INT
        else:
            config_type = TYPE_STRING
        text = _text(config_type, value)
        default = _text(config_type, spec.default) if spec.default is not MISSING else None
        static = name in config.explicit
        rows.append(_row(name, text, static, config_type, spec.metadata.get("doc"), default))
    return rows


def _row(name: str, text: str | None, static: bool, config_type: int,
         doc: str | None, default: str | None = None) -> BrokerEntry:
    synonyms = list(_synonyms(name, text, static))
    if default is not None:
        synonyms.append(ConfigSynonym(name, default, SOURCE_DEFAULT_CONFIG))
    return BrokerEntry(
        name=name,
        value=text,
        source=SOURCE_STATIC_BROKER_CONFIG if static else SOURCE_DEFAULT_CONFIG,
        config_type=config_type,
        synonyms=tuple(synonyms),
        documentation=doc,
    )


def _log_rows(broker: BrokerView) -> list[BrokerEntry]:
    """The broker synonyms of every topic config."""
    given = broker.config.log_properties
    rows = []
    for definition in TOPIC_CONFIG_DEFS:
        for index, synonym in enumerate(definition.synonyms):
            last = index == len(definition.synonyms) - 1
            default = None
            if last:
                value = definition.default
                if synonym.unit_ms != 1:
                    value //= synonym.unit_ms
                default = definition.render(value)
            text = given.get(synonym.name, default)
            static = synonym.name in broker.config.explicit
            rows.append(_row(synonym.name, text, static, definition.config_type,
                             f"broker default of the topic config {definition.name}", default))
    return rows


def _node_rows(broker: BrokerView) -> list[BrokerEntry]:
    rows = []
    explicit = broker.config.explicit
    for name, (config_type, value_of, from_command_line, doc) in _NODE_KEYS.items():
        value = value_of(broker)
        if name == "advertised.listeners":
            # Kafka: DEFAULT_CONFIG when the broker derived the value from its listeners.
            from_command_line = bool(explicit & {
                "advertised.listeners", "advertised.host", "advertised.port"})
        rows.append(_row(name, render_typed(config_type, value), from_command_line,
                         config_type, doc))
    return rows


def known_names() -> set[str]:
    """Every broker config name this broker knows: its properties, the log synonyms and the
    keys that describe the running node."""
    return {*BrokerConfig.properties(), *BROKER_SYNONYMS, *_NODE_KEYS}


#: Kafka's LIST-typed broker configs with no row of their own here, and their Kafka default.
_OTHER_LIST_DEFAULTS: Final = {"metric.reporters": "org.apache.kafka.common.metrics.JmxReporter"}


def list_default(name: str) -> str | None:
    """Kafka's built-in default (as text) of the LIST-typed broker config ``name``, or None
    when Kafka does not define ``name`` as a LIST (IncrementalAlterConfigs' APPEND and SUBTRACT
    start from it when the resource holds no value of its own)."""
    if name in BROKER_SYNONYMS:
        definition = TOPIC_CONFIG_BY_NAME[BROKER_SYNONYMS[name][0]]
        return (definition.render(definition.default)
                if definition.config_type == TYPE_LIST else None)
    if name in _LIST_PROPERTIES:
        spec = BrokerConfig.properties()[name]
        return "" if spec.default is MISSING else str(spec.default)
    if name in _NODE_KEYS:
        return "" if _NODE_KEYS[name][0] == TYPE_LIST else None  # Kafka: no default
    return _OTHER_LIST_DEFAULTS.get(name)


def _with_dynamic(row: BrokerEntry, broker: BrokerView) -> BrokerEntry:
    """The row with the dynamic levels laid over it (value, source, synonyms, read-only)."""
    dynamic = broker.dynamic
    name = row.name
    if not is_dynamic(name):
        return row
    per_broker, default = dynamic.per_broker.get(name), dynamic.default.get(name)
    hidden = row.config_type == TYPE_PASSWORD
    synonyms = []
    if per_broker is not None:
        synonyms.append(ConfigSynonym(name, None if hidden else per_broker,
                                      SOURCE_DYNAMIC_BROKER_CONFIG))
    if default is not None:
        synonyms.append(ConfigSynonym(name, None if hidden else default,
                                      SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG))
    given = broker.config.given
    for synonym in row.synonyms:
        if synonym.source == SOURCE_STATIC_BROKER_CONFIG and synonym.name in given:
            synonym = ConfigSynonym(synonym.name, None if hidden else given[synonym.name],
                                    SOURCE_STATIC_BROKER_CONFIG)
        synonyms.append(synonym)
    if per_broker is not None or default is not None:
        value = None if hidden else (per_broker if per_broker is not None else default)
        source = (SOURCE_DYNAMIC_BROKER_CONFIG if per_broker is not None
                  else SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG)
    else:
        value, source = row.value, row.source
    return BrokerEntry(name, value, source, row.config_type, tuple(synonyms),
                       row.documentation, read_only=False, sensitive=hidden)


def _extra_dynamic_rows(broker: BrokerView, names: set[str]) -> list[BrokerEntry]:
    """Dynamic values under names with no row of their own (listener.name.X.*, custom)."""
    rows = []
    for name in names:
        hidden = base_name(name) in _PASSWORD_PROPERTIES
        config_type = (TYPE_PASSWORD if hidden
                       else TYPE_LIST if list_default(name) is not None else TYPE_STRING)
        rows.append(_with_dynamic(BrokerEntry(name, None, SOURCE_DEFAULT_CONFIG, config_type, ()),
                                  broker) if is_dynamic(name) else _custom_row(broker, name))
    return rows


def _custom_row(broker: BrokerView, name: str) -> BrokerEntry:
    per_broker, default = broker.dynamic.per_broker.get(name), broker.dynamic.default.get(name)
    synonyms = []
    if per_broker is not None:
        synonyms.append(ConfigSynonym(name, per_broker, SOURCE_DYNAMIC_BROKER_CONFIG))
    if default is not None:
        synonyms.append(ConfigSynonym(name, default, SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG))
    return BrokerEntry(name, synonyms[0].value, synonyms[0].source, TYPE_STRING,
                       tuple(synonyms), read_only=False)


def describe_default(broker: BrokerView) -> list[BrokerEntry]:
    """The cluster-default resource (empty name): only its dynamic values, as Kafka."""
    rows = []
    for name in sorted(broker.dynamic.default):
        hidden = base_name(name) in _PASSWORD_PROPERTIES
        value = None if hidden else broker.dynamic.default[name]
        rows.append(BrokerEntry(
            name, value, SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG,
            TYPE_PASSWORD if hidden else TYPE_STRING,
            (ConfigSynonym(name, value, SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG),),
            read_only=False, sensitive=hidden))
    return rows


def describe_broker(broker: BrokerView) -> list[BrokerEntry]:
    """Every broker row, sorted by name; a name appears once (BrokerConfig's wins)."""
    rows: dict[str, BrokerEntry] = {}
    for row in [*_node_rows(broker), *_log_rows(broker), *_property_rows(broker)]:
        rows[row.name] = row
    for name, row in rows.items():
        rows[name] = _with_dynamic(row, broker)
    extra = {*broker.dynamic.per_broker, *broker.dynamic.default} - set(rows)
    for row in _extra_dynamic_rows(broker, extra):
        rows[row.name] = row
    return [rows[name] for name in sorted(rows)]

