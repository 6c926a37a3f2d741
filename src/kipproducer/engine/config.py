"""The sending engine's configuration, read from the same librdkafka properties users pass.

Only properties that concern the engine are read; the rest stay librdkafka's business. Names,
aliases, defaults, parsers and docs are client_config.py's table (docs/producer.md prints it).
``kip.*`` properties are kipproducer's own: an unknown one is an error at construction.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kipproducer.sasl import MECHANISMS
from kipproducer.sasl.oauthbearer import OAUTHBEARER

from .. import client_config
from ..client_config import ConfigError
from .oauth import OAuthTokens
from .oidc import oidc_settings
from .tls import TlsConfigError, TlsSettings, tls_settings

#: librdkafka's default sasl.mechanism.
DEFAULT_SASL_MECHANISM: str = client_config.default("sasl.mechanism")


@dataclass(frozen=True)
class SaslSettings:
    """How the engine's connections authenticate (security.protocol=SASL_PLAINTEXT)."""

    mechanism: str            # PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER
    username: str
    password: str = field(repr=False)
    #: OAUTHBEARER's token source (oauth_cb, or an unsecured sasl.oauthbearer.config).
    oauth: OAuthTokens | None = field(default=None, repr=False, compare=False)


def _oauth_settings(props: Mapping[str, Any], protocol: str) -> SaslSettings:
    """OAUTHBEARER: oauth_cb, librdkafka's OIDC client (sasl.oauthbearer.method=oidc), or
    unsecured tokens from sasl.oauthbearer.config. oauth_cb wins over oidc, as in librdkafka
    (its OIDC client runs only when no refresh callback is set)."""
    callback = props.get("oauth_cb")
    config = str(client_config.value(props, "sasl.oauthbearer.config") or "")
    method = str(client_config.value(props, "sasl.oauthbearer.method")).strip().lower()
    if callback is not None:
        if not callable(callback):
            raise ConfigError("oauth_cb must be callable: oauth_cb(config) -> (token, expiry)")
        return SaslSettings(OAUTHBEARER, "", "", OAuthTokens.from_callback(callback, config))
    if method == "oidc":
        try:
            return SaslSettings(OAUTHBEARER, "", "", OAuthTokens.oidc(oidc_settings(props)))
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    if client_config.value(props, "enable.sasl.oauthbearer.unsecure.jwt"):
        try:
            return SaslSettings(OAUTHBEARER, "", "", OAuthTokens.unsecured(config))
        except ValueError as exc:
            raise ConfigError(f"sasl.oauthbearer.config={config!r}: {exc}") from None
    raise ConfigError(
        f"sasl.mechanism=OAUTHBEARER with security.protocol={protocol.upper()} needs a token "
        "source for kipproducer's sending engine: oauth_cb, sasl.oauthbearer.method=oidc, or "
        "sasl.oauthbearer.config with enable.sasl.oauthbearer.unsecure.jwt=true")


def sasl_settings(props: Mapping[str, Any]) -> SaslSettings | None:
    """The SASL settings of ``props`` (None: plaintext); ConfigError for what the engine cannot
    speak. librdkafka's names and defaults; on a name given twice (``sasl.mechanism`` and its
    alias ``sasl.mechanisms``) the later one wins, as in librdkafka."""
    protocol = security_protocol(props)
    mechanism = str(client_config.value(props, "sasl.mechanism")).strip()
    username = client_config.value(props, "sasl.username")
    password = client_config.value(props, "sasl.password")
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
    return client_config.value(props, "security.protocol")


def engine_tls_settings(props: Mapping[str, Any]) -> TlsSettings | None:
    """The TLS settings (security.protocol SSL / SASL_SSL), else None; ConfigError naming the
    property when a file is missing or a key does not open."""
    if security_protocol(props) not in ("ssl", "sasl_ssl"):
        return None
    try:
        return tls_settings(props)
    except TlsConfigError as exc:
        raise ConfigError(str(exc)) from None


_default = client_config.default


@dataclass
class EngineConfig:
    """The engine's settings; each field's property, aliases and default are in
    client_config.PROPERTIES (``field=``)."""

    bootstrap_servers: list[tuple[str, int]]
    client_id: str = _default("client.id")
    acks: int = _default("acks")
    enable_idempotence: bool = _default("enable.idempotence")
    linger_ms: float = _default("linger.ms")
    batch_size: int = _default("batch.size")
    batch_num_messages: int = _default("batch.num.messages")
    compression: str | None = _default("compression.type")
    message_max_bytes: int = _default("message.max.bytes")
    max_in_flight: int = _default("max.in.flight")
    retries: int = _default("retries")
    retry_backoff_ms: int = _default("retry.backoff.ms")
    retry_backoff_max_ms: int = _default("retry.backoff.max.ms")
    delivery_timeout_ms: int = _default("delivery.timeout.ms")
    request_timeout_ms: int = _default("request.timeout.ms")
    queue_max_messages: int = _default("queue.buffering.max.messages")
    queue_max_kbytes: int = _default("queue.buffering.max.kbytes")
    partitioner: str = _default("partitioner")
    metadata_refresh_ms: int = _default("topic.metadata.refresh.interval.ms")  # -1: never
    reconnect_backoff_ms: int = _default("reconnect.backoff.ms")
    reconnect_backoff_max_ms: int = _default("reconnect.backoff.max.ms")
    socket_timeout_ms: int = _default("socket.timeout.ms")  # the connect bound here
    per_record_reports: bool = _default("kip.delivery.report.per.record")
    # allow.auto.create.topics: librdkafka's producer default is true (the broker must allow
    # it too), so a topic the librdkafka lane would create is created for the bulk lane too.
    allow_auto_create_topics: bool = _default("allow.auto.create.topics")
    # security.protocol / sasl.mechanism(s) / sasl.username / sasl.password: None is
    # PLAINTEXT (librdkafka's default) or SSL.
    sasl: SaslSettings | None = None
    # security.protocol SSL / SASL_SSL and the ssl.* properties (engine/tls.py); None: no TLS.
    tls: TlsSettings | None = None
    # transactional.id: with it the engine runs the transaction protocol (KIP-98) and
    # idempotence is on, as librdkafka enforces; transaction.timeout.ms is librdkafka's.
    transactional_id: str | None = _default("transactional.id")
    transaction_timeout_ms: int = _default("transaction.timeout.ms")
    # kip.transaction.protocol: auto, classic or v2 (engine/txn_state.speaks_v2)
    transaction_protocol: str = _default("kip.transaction.protocol")

    @classmethod
    def check_engine_properties(cls, props: Mapping[str, Any]) -> None:
        """ConfigError for what the engine cannot run with: the kip.* checks, and a security
        setup it cannot speak (a SASL mechanism other than PLAIN / SCRAM-SHA-256 /
        SCRAM-SHA-512, TLS files that are missing or do not open). Checked when the engine
        starts (the first bulk or KIP call), not
        when the Producer is built: librdkafka's own lane speaks TLS and GSSAPI, and a
        drop-in Producer must keep working for code that never uses the engine."""
        sasl_settings(props)
        engine_tls_settings(props)
        client_config.check_kip_properties(props)

    @classmethod
    def from_properties(cls, props: Mapping[str, Any]) -> EngineConfig:
        cls.check_engine_properties(props)
        values: dict[str, Any] = {}
        for name, raw in props.items():  # a later alias wins, as in librdkafka
            prop = _ENGINE_FIELDS.get(name)
            if prop is not None:
                values[prop.field] = prop.value(raw, name)
        if "bootstrap_servers" not in values:
            raise ConfigError("bootstrap.servers is required")
        values["sasl"] = sasl_settings(props)
        values["tls"] = engine_tls_settings(props)
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
            if not set(client_config.BY_NAME["delivery.timeout.ms"].names) & set(props):
                config.delivery_timeout_ms = min(config.delivery_timeout_ms,
                                                 config.transaction_timeout_ms)
            elif config.delivery_timeout_ms > config.transaction_timeout_ms:
                raise ConfigError("`message.timeout.ms` must be set <= "
                                  "`transaction.timeout.ms`")
        if config.enable_idempotence:
            # librdkafka's rules for idempotence: acks=all, in-flight <= 5, retries > 0.
            if config.acks != -1:
                raise ConfigError("enable.idempotence=true requires acks=all")
            if config.max_in_flight == _default("max.in.flight"):
                config.max_in_flight = 5
            elif config.max_in_flight > 5:
                raise ConfigError(
                    "enable.idempotence=true requires max.in.flight <= 5")
        return config


#: Property name or alias -> the table's entry, for what EngineConfig keeps in a field.
_ENGINE_FIELDS = {name: prop for prop in client_config.PROPERTIES if prop.field
                  for name in prop.names}
