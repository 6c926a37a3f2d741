"""The sending engine's configuration, read from the same librdkafka properties users pass.

Only properties that concern the engine are read; the rest stay librdkafka's business. Every
value is documented here with its librdkafka default (see docs/producer.md for the table).
``kip.*`` properties are kipproducer's own: an unknown one is an error at construction.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kipproducer.sasl import MECHANISMS
from kipproducer.sasl.oauthbearer import OAUTHBEARER

from .oauth import OAuthTokens
from .tls import TlsConfigError, TlsSettings, tls_settings

#: kipproducer's own properties and their defaults.
KIP_PROPERTIES: dict[str, Any] = {
    # True: produce_arrays calls on_delivery once per record instead of once per batch.
    "kip.delivery.report.per.record": False,
    # How offset= / expected_offset= reach a topic (docs/stock-clusters.md): native (the
    # KIP-WIRE extension, docs/protocol.md), emulated (Kafka's own transactions, any broker
    # with them) or auto (native where the leaders announce the features, else emulated).
    "kip.mode": "auto",
    # Emulated offset= needs a transactional.id that stays the same for a writer across
    # restarts, so the new one fences the old one and aborts its open transaction before
    # reading the log end. Empty: emulated offset= is refused, naming this property.
    "kip.emulation.transactional.id": "",
    # Where the emulation's capability probe writes (and aborts) its one record.
    "kip.emulation.probe.topic": "kip-emulation-probe",
}

KIP_MODES = ("native", "emulated", "auto")


def kip_mode(value: Any) -> str:
    """A ``kip.mode`` value, checked."""
    text = str(value).strip().lower()
    if text not in KIP_MODES:
        raise ValueError(f"expected one of {', '.join(KIP_MODES)}")
    return text


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("expected a string")
    return value


#: How each kip.* property's value is checked (what is not listed is a boolean).
_KIP_CHECKS: dict[str, Any] = {
    "kip.mode": kip_mode,
    "kip.emulation.transactional.id": _text,
    "kip.emulation.probe.topic": _text,
}


class ConfigError(ValueError):
    """A property the engine reads has a bad value, or a kip.* property is unknown."""


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise ValueError("expected true or false")


def _acks(value: Any) -> int:
    text = str(value).strip().lower()
    if text == "all":
        return -1
    acks = int(text)
    if acks not in (-1, 0, 1):
        raise ValueError("expected all, -1, 0 or 1")
    return acks


#: security.protocol values librdkafka knows; the engine speaks them all.
SECURITY_PROTOCOLS = ("plaintext", "sasl_plaintext", "ssl", "sasl_ssl")
#: librdkafka's default sasl.mechanism.
DEFAULT_SASL_MECHANISM = "GSSAPI"


def _security_protocol(value: Any) -> str:
    text = str(value).strip().lower()
    if text not in SECURITY_PROTOCOLS:
        raise ValueError("expected plaintext, ssl, sasl_plaintext or sasl_ssl")
    return text


@dataclass(frozen=True)
class SaslSettings:
    """How the engine's connections authenticate (security.protocol=SASL_PLAINTEXT)."""

    mechanism: str            # PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER
    username: str
    password: str = field(repr=False)
    #: OAUTHBEARER's token source (oauth_cb, or an unsecured sasl.oauthbearer.config).
    oauth: OAuthTokens | None = field(default=None, repr=False, compare=False)


def _oauth_settings(props: Mapping[str, Any], protocol: str) -> SaslSettings:
    """OAUTHBEARER: oauth_cb, or unsecured tokens from sasl.oauthbearer.config."""
    callback = props.get("oauth_cb")
    config = str(props.get("sasl.oauthbearer.config", "") or "")
    method = str(props.get("sasl.oauthbearer.method", "default")).strip().lower()
    if callback is not None:
        if not callable(callback):
            raise ConfigError("oauth_cb must be callable: oauth_cb(config) -> (token, expiry)")
        return SaslSettings(OAUTHBEARER, "", "", OAuthTokens.from_callback(callback, config))
    if method == "oidc":
        raise ConfigError(
            "sasl.oauthbearer.method=oidc is librdkafka's own token client and not supported "
            "by kipproducer's sending engine; fetch the token in an oauth_cb instead")
    unsecure = str(props.get("enable.sasl.oauthbearer.unsecure.jwt", "false")).strip().lower()
    if unsecure in ("true", "1"):
        try:
            return SaslSettings(OAUTHBEARER, "", "", OAuthTokens.unsecured(config))
        except ValueError as exc:
            raise ConfigError(f"sasl.oauthbearer.config={config!r}: {exc}") from None
    raise ConfigError(
        f"sasl.mechanism=OAUTHBEARER with security.protocol={protocol.upper()} needs a token "
        "source for kipproducer's sending engine: oauth_cb, or sasl.oauthbearer.config with "
        "enable.sasl.oauthbearer.unsecure.jwt=true")


def _sasl_settings(props: Mapping[str, Any]) -> SaslSettings | None:
    """The SASL settings of ``props`` (None: plaintext); ConfigError for what the engine cannot
    speak. librdkafka's names and defaults; on a name given twice (``sasl.mechanism`` and its
    alias ``sasl.mechanisms``) the later one wins, as in librdkafka."""
    protocol, mechanism, username, password = "plaintext", DEFAULT_SASL_MECHANISM, None, None
    for name, raw in props.items():
        if name == "security.protocol":
            try:
                protocol = _security_protocol(raw)
            except ValueError as exc:
                raise ConfigError(f"{name}={raw!r}: {exc}") from None
        elif name in ("sasl.mechanism", "sasl.mechanisms"):
            mechanism = str(raw).strip()
        elif name == "sasl.username":
            username = str(raw)
        elif name == "sasl.password":
            password = str(raw)
    if protocol in ("plaintext", "ssl"):
        return None  # sasl.* are then ignored, as librdkafka does (it only warns)
    if mechanism == OAUTHBEARER:
        return _oauth_settings(props, protocol)
    if mechanism not in MECHANISMS:
        hint = ""
        if mechanism.upper() in MECHANISMS:
            hint = f" (mechanism names are case-sensitive: {mechanism.upper()})"
        elif mechanism == DEFAULT_SASL_MECHANISM:
            hint = " (librdkafka's default when sasl.mechanism is not set)"
        raise ConfigError(
            f"sasl.mechanism={mechanism!r}{hint} is not supported by kipproducer's sending "
            f"engine; with security.protocol={protocol.upper()} use one of "
            f"{', '.join(MECHANISMS)} or {OAUTHBEARER}")
    if not username or password is None:
        raise ConfigError(
            f"sasl.username and sasl.password must be set for sasl.mechanism={mechanism}")
    return SaslSettings(mechanism, username, password)


def security_protocol(props: Mapping[str, Any]) -> str:
    """security.protocol in lower case (plaintext when unset, librdkafka's default)."""
    raw = props.get("security.protocol", "plaintext")
    try:
        return _security_protocol(raw)
    except ValueError as exc:
        raise ConfigError(f"security.protocol={raw!r}: {exc}") from None


def _tls_settings(props: Mapping[str, Any]) -> TlsSettings | None:
    """The TLS settings (security.protocol SSL / SASL_SSL), else None; ConfigError naming the
    property when a file is missing or a key does not open."""
    if security_protocol(props) not in ("ssl", "sasl_ssl"):
        return None
    try:
        return tls_settings(props)
    except TlsConfigError as exc:
        raise ConfigError(str(exc)) from None


def _servers(value: Any) -> list[tuple[str, int]]:
    out = []
    for item in str(value).split(","):
        item = item.strip()
        if not item:
            continue
        if "://" in item:
            item = item.split("://", 1)[1]
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"{item!r} is not HOST:PORT")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ValueError("no broker address")
    return out


@dataclass
class EngineConfig:
    bootstrap_servers: list[tuple[str, int]]
    client_id: str = "rdkafka"
    acks: int = -1                          # acks / request.required.acks: all
    enable_idempotence: bool = False
    linger_ms: float = 5.0                  # linger.ms / queue.buffering.max.ms
    batch_size: int = 1_000_000
    batch_num_messages: int = 10_000
    compression: str | None = None          # compression.type / compression.codec
    message_max_bytes: int = 1_000_000
    max_in_flight: int = 1_000_000          # max.in.flight(.requests.per.connection)
    retries: int = 2_147_483_647            # retries / message.send.max.retries
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1000
    delivery_timeout_ms: int = 300_000      # delivery.timeout.ms / message.timeout.ms
    request_timeout_ms: int = 30_000        # request.timeout.ms
    queue_max_messages: int = 100_000       # queue.buffering.max.messages
    queue_max_kbytes: int = 1_048_576       # queue.buffering.max.kbytes
    partitioner: str = "consistent_random"
    metadata_refresh_ms: int = 300_000      # topic.metadata.refresh.interval.ms (-1: never)
    reconnect_backoff_ms: int = 100         # reconnect.backoff.ms
    reconnect_backoff_max_ms: int = 10_000  # reconnect.backoff.max.ms
    socket_timeout_ms: int = 60_000         # socket.timeout.ms (connect bound here)
    per_record_reports: bool = False        # kip.delivery.report.per.record
    # allow.auto.create.topics: librdkafka's producer default is true (the broker must allow
    # it too), so a topic the librdkafka lane would create is created for the bulk lane too.
    allow_auto_create_topics: bool = True
    # security.protocol / sasl.mechanism(s) / sasl.username / sasl.password: None is
    # PLAINTEXT (librdkafka's default) or SSL.
    sasl: SaslSettings | None = None
    # security.protocol SSL / SASL_SSL and the ssl.* properties (engine/tls.py); None: no TLS.
    tls: TlsSettings | None = None
    # transactional.id: with it the engine runs the transaction protocol (KIP-98) and
    # idempotence is on, as librdkafka enforces; transaction.timeout.ms is librdkafka's.
    transactional_id: str | None = None
    transaction_timeout_ms: int = 60_000

    @classmethod
    def check_engine_properties(cls, props: Mapping[str, Any]) -> None:
        """ConfigError for what the engine cannot run with: the kip.* checks, and a security
        setup it cannot speak (a SASL mechanism other than PLAIN / SCRAM-SHA-256 /
        SCRAM-SHA-512, TLS files that are missing or do not open). Checked when the engine
        starts (the first bulk or KIP call), not
        when the Producer is built: librdkafka's own lane speaks TLS and GSSAPI, and a
        drop-in Producer must keep working for code that never uses the engine."""
        _sasl_settings(props)
        _tls_settings(props)
        cls.check_kip_properties(props)

    @classmethod
    def check_kip_properties(cls, props: Mapping[str, Any]) -> None:
        """ConfigError for an unknown kip.* property or a bad value of a known one (the
        Producer checks these when it is built)."""
        for name, raw in props.items():
            if not name.startswith("kip."):
                continue
            if name not in KIP_PROPERTIES:
                raise ConfigError(
                    f"unknown kipproducer property {name!r}; known: "
                    + ", ".join(sorted(KIP_PROPERTIES)))
            try:
                _KIP_CHECKS.get(name, _bool)(raw)
            except ValueError as exc:
                raise ConfigError(f"{name}={raw!r}: {exc}") from None

    @classmethod
    def from_properties(cls, props: Mapping[str, Any]) -> EngineConfig:
        cls.check_engine_properties(props)
        readers: dict[str, tuple[str, Any]] = {
            "bootstrap.servers": ("bootstrap_servers", _servers),
            "metadata.broker.list": ("bootstrap_servers", _servers),
            "client.id": ("client_id", str),
            "acks": ("acks", _acks),
            "request.required.acks": ("acks", _acks),
            "enable.idempotence": ("enable_idempotence", _bool),
            "linger.ms": ("linger_ms", float),
            "queue.buffering.max.ms": ("linger_ms", float),
            "batch.size": ("batch_size", int),
            "batch.num.messages": ("batch_num_messages", int),
            "compression.type": ("compression", str),
            "compression.codec": ("compression", str),
            "message.max.bytes": ("message_max_bytes", int),
            "max.in.flight": ("max_in_flight", int),
            "max.in.flight.requests.per.connection": ("max_in_flight", int),
            "retries": ("retries", int),
            "message.send.max.retries": ("retries", int),
            "retry.backoff.ms": ("retry_backoff_ms", int),
            "retry.backoff.max.ms": ("retry_backoff_max_ms", int),
            "delivery.timeout.ms": ("delivery_timeout_ms", int),
            "message.timeout.ms": ("delivery_timeout_ms", int),
            "request.timeout.ms": ("request_timeout_ms", int),
            "queue.buffering.max.messages": ("queue_max_messages", int),
            "queue.buffering.max.kbytes": ("queue_max_kbytes", int),
            "partitioner": ("partitioner", str),
            "topic.metadata.refresh.interval.ms": ("metadata_refresh_ms", int),
            "reconnect.backoff.ms": ("reconnect_backoff_ms", int),
            "reconnect.backoff.max.ms": ("reconnect_backoff_max_ms", int),
            "socket.timeout.ms": ("socket_timeout_ms", int),
            "kip.delivery.report.per.record": ("per_record_reports", _bool),
            "allow.auto.create.topics": ("allow_auto_create_topics", _bool),
            "transactional.id": ("transactional_id", str),
            "transaction.timeout.ms": ("transaction_timeout_ms", int),
        }
        values: dict[str, Any] = {}
        for name, raw in props.items():
            reader = readers.get(name)
            if reader is None:
                continue
            attr, convert = reader
            try:
                values[attr] = convert(raw)
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"{name}={raw!r}: {exc}") from None
        if "bootstrap_servers" not in values:
            raise ConfigError("bootstrap.servers is required")
        values["sasl"] = _sasl_settings(props)
        values["tls"] = _tls_settings(props)
        config = cls(**values)
        if config.compression in ("none", ""):
            config.compression = None
        if config.transactional_id == "":
            config.transactional_id = None
        if config.transactional_id is not None:
            # librdkafka: a transactional producer is idempotent, and a record may not
            # outlive its transaction (message.timeout.ms defaults to, and may not exceed,
            # transaction.timeout.ms).
            config.enable_idempotence = True
            if not {"delivery.timeout.ms", "message.timeout.ms"} & set(props):
                config.delivery_timeout_ms = min(config.delivery_timeout_ms,
                                                 config.transaction_timeout_ms)
            elif config.delivery_timeout_ms > config.transaction_timeout_ms:
                raise ConfigError("`message.timeout.ms` must be set <= "
                                  "`transaction.timeout.ms`")
        if config.enable_idempotence:
            # librdkafka's rules for idempotence: acks=all, in-flight <= 5, retries > 0.
            if config.acks != -1:
                raise ConfigError("enable.idempotence=true requires acks=all")
            if config.max_in_flight == 1_000_000:
                config.max_in_flight = 5
            elif config.max_in_flight > 5:
                raise ConfigError(
                    "enable.idempotence=true requires max.in.flight <= 5")
        if config.partitioner not in PARTITIONERS:
            raise ConfigError(
                f"partitioner={config.partitioner!r} is not supported by the bulk lane; "
                f"use one of {', '.join(PARTITIONERS)}")
        return config


#: librdkafka partitioners the engine reproduces exactly (see engine/partitioner.py).
PARTITIONERS = ("consistent_random", "consistent", "random", "murmur2", "murmur2_random",
                "fnv1a", "fnv1a_random")
