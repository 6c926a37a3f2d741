"""Broker-wide configuration, with Kafka's property names and defaults.

``BrokerConfig.from_properties({"num.partitions": "3", ...})`` takes what ``kip broker
--config key=value`` and ``EmbeddedBroker(config=...)`` pass. Properties that are topic-config
defaults (``log.segment.bytes``, ``log.retention.ms``, ``log.flush.interval.messages``, ...)
are handed to the log layer as broker defaults under their topic-config names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from .connection_quotas import parse_overrides
from .storage.topic_configs import BROKER_SYNONYMS, TOPIC_CONFIG_BY_NAME

#: Broker property -> topic config it supplies the default for (Kafka's names), for every
#: broker synonym of a topic config (log.retention.hours, log.roll.ms, compression.type, ...).
TOPIC_DEFAULTS_FROM_BROKER = {name: topic for name, (topic, _unit) in BROKER_SYNONYMS.items()}


class BrokerConfigError(ValueError):
    """A broker property is unknown or has a bad value."""


def _bool(text: str) -> bool:
    lowered = str(text).strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError("expected true or false")
    return lowered == "true"


@dataclass
class BrokerConfig:
    """Every broker-level property the reference broker honours (Kafka names in metadata)."""

    node_id: int = field(default=1, metadata={"name": "node.id"})
    cluster_id: str = field(default="kipproducer-cluster", metadata={"name": "cluster.id"})
    advertised_host: str | None = field(
        default=None,
        metadata={
            "name": "advertised.host",
            "doc": "host clients are told to connect to; default: the listen host",
        },
    )
    advertised_port: int = field(
        default=0,
        metadata={
            "name": "advertised.port",
            "doc": "port clients are told to connect to (e.g. a proxy's); default (0): the "
            "listen port",
        },
    )
    socket_request_max_bytes: int = field(
        default=104_857_600, metadata={"name": "socket.request.max.bytes"}
    )
    connections_max_idle_ms: int = field(
        default=600_000, metadata={"name": "connections.max.idle.ms"}
    )
    request_read_timeout_ms: int = field(
        default=30_000,
        metadata={
            "name": "request.read.timeout.ms",
            "doc": "a request "
            "whose bytes take longer than this to arrive (slow-loris) "
            "closes its connection",
        },
    )
    # -- memory bounds (docs/broker.md, "Memory and connection limits") --
    max_connections: int = field(
        default=2_147_483_647,
        metadata={
            "name": "max.connections",
            "doc": "connections the broker holds at once; at the limit it stops accepting "
            "(new clients wait in the listen backlog) until one closes, as Kafka's acceptor",
        },
    )
    max_connections_per_ip: int = field(
        default=2_147_483_647,
        metadata={
            "name": "max.connections.per.ip",
            "doc": "connections from one IP address; one more is closed right after accept",
        },
    )
    max_connections_per_ip_overrides: str = field(
        default="",
        metadata={
            "name": "max.connections.per.ip.overrides",
            "doc": "per-IP or per-hostname limits, comma-separated host:count "
            "(e.g. 10.0.0.7:500,build-host:50)",
        },
    )
    fetch_max_bytes: int = field(
        default=57_671_680,
        metadata={
            "name": "fetch.max.bytes",
            "doc": "the most a Fetch answer holds; a client asking for more gets this much",
        },
    )
    decompressed_batch_max_bytes: int = field(
        default=67_108_864,
        metadata={
            "name": "decompressed.batch.max.bytes",
            "doc": "kipproducer's own: how far a produced compressed batch may inflate while "
            "it is validated; past it the batch gets MESSAGE_TOO_LARGE",
        },
    )
    num_partitions: int = field(default=1, metadata={"name": "num.partitions"})
    auto_create_topics_enable: bool = field(
        default=True, metadata={"name": "auto.create.topics.enable"}
    )
    default_replication_factor: int = field(
        default=1, metadata={"name": "default.replication.factor"}
    )
    group_initial_rebalance_delay_ms: int = field(
        default=0,
        metadata={
            "name": "group.initial.rebalance.delay.ms",
            "doc": "Kafka "
            "defaults to 3000; its sample server.properties sets 0 for "
            "development, which suits an embedded broker",
        },
    )
    group_min_session_timeout_ms: int = field(
        default=6000, metadata={"name": "group.min.session.timeout.ms"}
    )
    group_max_session_timeout_ms: int = field(
        default=1_800_000, metadata={"name": "group.max.session.timeout.ms"}
    )
    offsets_retention_minutes: int = field(
        default=10080, metadata={"name": "offsets.retention.minutes"}
    )
    log_retention_check_interval_ms: int = field(
        default=300_000, metadata={"name": "log.retention.check.interval.ms"}
    )
    log_flush_scheduler_interval_ms: int = field(
        default=1000, metadata={"name": "log.flush.scheduler.interval.ms"}
    )
    log_cleaner_backoff_ms: int = field(
        default=15_000,
        metadata={
            "name": "log.cleaner.backoff.ms",
            "doc": "how long a compacted partition waits between two cleaner passes",
        },
    )
    log_flush_offset_checkpoint_interval_ms: int = field(
        default=60_000,
        metadata={
            "name": "log.flush.offset.checkpoint.interval.ms",
            "doc": "how often each partition's recovery point and log start offset are "
            "written to its partition-state.json",
        },
    )
    # -- transactions (docs/broker.md) --
    transaction_max_timeout_ms: int = field(
        default=900_000,
        metadata={
            "name": "transaction.max.timeout.ms",
            "doc": "the longest transaction.timeout.ms a producer may ask for; InitProducerId "
            "with more gets INVALID_TRANSACTION_TIMEOUT",
        },
    )
    transactional_id_expiration_ms: int = field(
        default=604_800_000,
        metadata={
            "name": "transactional.id.expiration.ms",
            "doc": "a transactional id with no transaction running and no request for this "
            "long is forgotten",
        },
    )
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = field(
        default=10_000,
        metadata={
            "name": "transaction.abort.timed.out.transaction.cleanup.interval.ms",
            "doc": "how often transactions open for longer than their timeout are looked for "
            "(and aborted, fencing their producer)",
        },
    )
    transaction_remove_expired_transaction_cleanup_interval_ms: int = field(
        default=3_600_000,
        metadata={
            "name": "transaction.remove.expired.transaction.cleanup.interval.ms",
            "doc": "how often expired transactional ids are looked for",
        },
    )
    # -- security (docs/security.md) --
    sasl_enabled_mechanisms: str = field(
        default="",
        metadata={
            "name": "sasl.enabled.mechanisms",
            "doc": "SASL mechanisms the listener requires, comma-separated (PLAIN, "
            "SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER with unsecured JWTs); empty: no SASL, "
            "every client is User:ANONYMOUS",
        },
    )
    connections_max_reauth_ms: int = field(
        default=0,
        metadata={
            "name": "connections.max.reauth.ms",
            "doc": "KIP-368: a SASL session lasts this long (or until its OAUTHBEARER token "
            "expires); the client re-authenticates or the connection is closed; 0: no limit",
        },
    )
    connection_failed_authentication_delay_ms: int = field(
        default=100,
        metadata={
            "name": "connection.failed.authentication.delay.ms",
            "doc": "after a failed authentication the answer is sent and the connection is "
            "closed this much later (slows down password guessing; lets the client read it)",
        },
    )
    sasl_server_max_receive_size: int = field(
        default=524_288,
        metadata={
            "name": "sasl.server.max.receive.size",
            "doc": "largest frame accepted before SASL authentication completes",
        },
    )
    authorizer_enabled: bool = field(
        default=False,
        metadata={"name": "authorizer.enabled", "doc": "check every request against the ACLs"},
    )
    authorizer_class_name: str = field(
        default="",
        metadata={
            "name": "authorizer.class.name",
            "doc": "Kafka's switch for the authorizer: any non-empty value turns it on",
        },
    )
    super_users: str = field(
        default="",
        metadata={
            "name": "super.users",
            "doc": "principals allowed everything, semicolon-separated (User:admin;User:ops)",
        },
    )
    allow_everyone_if_no_acl_found: bool = field(
        default=False,
        metadata={
            "name": "allow.everyone.if.no.acl.found",
            "doc": "allow a resource no ACL names at all (authorizer on only)",
        },
    )
    # -- listeners and TLS (docs/security.md, "TLS listeners") --
    listeners: str = field(
        default="",
        metadata={
            "name": "listeners",
            "doc": "comma-separated PROTOCOL://host:port listeners (PLAINTEXT, SSL, "
            "SASL_PLAINTEXT, SASL_SSL; port 0: a free port); empty: the one --listen address",
        },
    )
    advertised_listeners: str = field(
        default="",
        metadata={
            "name": "advertised.listeners",
            "doc": "PROTOCOL://host:port per listener as clients are to reach it (behind NAT "
            "or in a container); a listener not named here is told as it is bound",
        },
    )
    ssl_keystore_type: str = field(default="PEM", metadata={
        "name": "ssl.keystore.type", "doc": "PEM (the only type this broker reads)"})
    ssl_keystore_location: str = field(default="", metadata={
        "name": "ssl.keystore.location",
        "doc": "a PEM file with the private key and the certificate chain"})
    ssl_keystore_certificate_chain: str = field(default="", metadata={
        "name": "ssl.keystore.certificate.chain", "doc": "the certificate chain, PEM text"})
    ssl_keystore_key: str = field(default="", metadata={
        "name": "ssl.keystore.key", "doc": "the private key, PEM text"})
    ssl_key_password: str = field(default="", metadata={
        "name": "ssl.key.password", "doc": "the password of an encrypted private key"})
    ssl_truststore_type: str = field(default="PEM", metadata={
        "name": "ssl.truststore.type", "doc": "PEM (the only type this broker reads)"})
    ssl_truststore_location: str = field(default="", metadata={
        "name": "ssl.truststore.location",
        "doc": "a PEM file of the CA certificates client certificates are checked against"})
    ssl_truststore_certificates: str = field(default="", metadata={
        "name": "ssl.truststore.certificates", "doc": "the same CA certificates, PEM text"})
    ssl_client_auth: str = field(default="none", metadata={
        "name": "ssl.client.auth",
        "doc": "none, requested (checked when given) or required (mTLS)"})
    ssl_principal_mapping_rules: str = field(default="DEFAULT", metadata={
        "name": "ssl.principal.mapping.rules",
        "doc": "RULE:pattern/replacement/[LU] and DEFAULT (the whole subject), in order"})
    ssl_cipher_suites: str = field(default="", metadata={
        "name": "ssl.cipher.suites",
        "doc": "OpenSSL cipher list for TLS 1.2; empty: OpenSSL's defaults"})
    # -- kipproducer's extensions (docs/protocol.md) --
    kip_wire_version: int = field(
        default=3,
        metadata={
            "name": "kip.wire.version",
            "doc": "the highest KIP-WIRE version this broker speaks (docs/protocol.md): 3 adds "
            "per-key conditions (§10, feature kip.produce.key.conditional), 2 several "
            "batches of one partition in one request (§9), 1 keeps Kafka's one batch per "
            "partition (what an older broker does)",
        },
    )
    kip_key_index_max_keys: int = field(
        default=100_000,
        metadata={
            "name": "kip.key.index.max.keys",
            "doc": "per partition, the keys whose last offset the per-key conditional index "
            "(docs/protocol.md §10) keeps in memory; past it the oldest are forgotten and a "
            "condition on a forgotten key is refused with KEY_INDEX_INCOMPLETE, never "
            "answered wrongly",
        },
    )
    kip_extensions_enable: bool = field(
        default=True,
        metadata={
            "name": "kip.extensions.enable",
            "doc": "false: a stand-in for stock Kafka (docs/stock-clusters.md): no KIP-WIRE "
            "feature in ApiVersions and every Produce treated as mode 0, as Kafka 3.9 "
            "treats the unknown tag",
        },
    )
    #: Topic config defaults set on the broker, by topic config name and in its units.
    topic_defaults: dict[str, str] = field(default_factory=dict)
    #: The same properties as given, by their broker names (DescribeConfigs reports these).
    log_properties: dict[str, str] = field(default_factory=dict)
    #: The property names given at start (DescribeConfigs reports them as
    #: STATIC_BROKER_CONFIG, the others as DEFAULT_CONFIG, as Kafka does).
    explicit: frozenset[str] = field(default_factory=frozenset)
    #: The properties given at start, as text (dynamic updates are laid over these).
    given: dict[str, str] = field(default_factory=dict)

    @classmethod
    def properties(cls) -> dict[str, Any]:
        return {f.metadata["name"]: f for f in fields(cls) if "name" in f.metadata}

    @classmethod
    def from_properties(cls, props: Mapping[str, Any] | None = None) -> BrokerConfig:
        known = cls.properties()
        values: dict[str, Any] = {}
        log_properties: dict[str, str] = {}
        for name, raw in (props or {}).items():
            if name in BROKER_SYNONYMS:
                log_properties[name] = str(raw)
                continue
            spec = known.get(name)
            if spec is None:
                raise BrokerConfigError(
                    f"unknown broker property {name!r}; known: "
                    + ", ".join(sorted([*known, *TOPIC_DEFAULTS_FROM_BROKER]))
                )
            try:
                if spec.type in ("int", int):
                    value: Any = int(str(raw).strip())
                elif spec.type in ("bool", bool):
                    value = raw if isinstance(raw, bool) else _bool(raw)
                else:
                    value = None if raw is None else str(raw)
            except ValueError as exc:
                raise BrokerConfigError(f"broker property {name}={raw!r}: {exc}") from None
            values[spec.name] = value
        config = cls(
            **values,
            topic_defaults=_topic_defaults(log_properties),
            log_properties=log_properties,
            explicit=frozenset(props or ()),
            given={name: str(raw).lower() if isinstance(raw, bool) else str(raw)
                   for name, raw in (props or {}).items()},
        )
        if config.socket_request_max_bytes < 1024:
            raise BrokerConfigError("socket.request.max.bytes must be at least 1024")
        for name in ("max.connections", "max.connections.per.ip"):
            if getattr(config, known[name].name) < 0:
                raise BrokerConfigError(f"{name} must be at least 0")
        if config.fetch_max_bytes < 1024:
            raise BrokerConfigError("fetch.max.bytes must be at least 1024")
        if config.decompressed_batch_max_bytes < 1024:
            raise BrokerConfigError("decompressed.batch.max.bytes must be at least 1024")
        try:
            parse_overrides(config.max_connections_per_ip_overrides)
        except ValueError as exc:
            raise BrokerConfigError(f"max.connections.per.ip.overrides: {exc}") from None
        if config.num_partitions < 1:
            raise BrokerConfigError("num.partitions must be at least 1")
        if config.kip_wire_version not in (1, 2, 3):
            raise BrokerConfigError("kip.wire.version must be 1, 2 or 3")
        if config.kip_key_index_max_keys < 1:
            raise BrokerConfigError("kip.key.index.max.keys must be at least 1")
        for name in ("transaction.max.timeout.ms", "transactional.id.expiration.ms",
                     "transaction.abort.timed.out.transaction.cleanup.interval.ms",
                     "transaction.remove.expired.transaction.cleanup.interval.ms"):
            if getattr(config, known[name].name) < 1:
                raise BrokerConfigError(f"{name} must be at least 1")
        return config


def _topic_defaults(log_properties: Mapping[str, str]) -> dict[str, str]:
    """Broker synonyms -> topic config defaults, in the topic config's units.

    Where several synonyms of one config are set, the most specific wins, as in Kafka:
    log.retention.ms over log.retention.minutes over log.retention.hours.
    """
    defaults: dict[str, str] = {}
    for topic_name, definition in TOPIC_CONFIG_BY_NAME.items():
        for synonym in definition.synonyms:
            raw = log_properties.get(synonym.name)
            if raw is None:
                continue
            if synonym.unit_ms != 1:
                try:
                    raw = str(int(raw.strip()) * synonym.unit_ms)
                except ValueError:
                    raise BrokerConfigError(
                        f"broker property {synonym.name}={raw!r}: expected an integer"
                    ) from None
            defaults[topic_name] = raw
            break
    return defaults
