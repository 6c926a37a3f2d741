"""The sending engine's configuration, read from the same librdkafka properties users pass.

Only properties that concern the engine are read; the rest stay librdkafka's business. Every
value is documented here with its librdkafka default (see docs/producer.md for the table).
``kip.*`` properties are kipproducer's own: an unknown one is an error at construction.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: kipproducer's own properties and their defaults.
KIP_PROPERTIES: dict[str, Any] = {
    # True: produce_arrays calls on_delivery once per record instead of once per batch.
    "kip.delivery.report.per.record": False,
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
    metadata_refresh_ms: int = 300_000      # topic.metadata.refresh.interval.ms
    socket_timeout_ms: int = 60_000         # socket.timeout.ms (connect bound here)
    per_record_reports: bool = False        # kip.delivery.report.per.record
    # allow.auto.create.topics: librdkafka's producer default is true (the broker must allow
    # it too), so a topic the librdkafka lane would create is created for the bulk lane too.
    allow_auto_create_topics: bool = True

    @classmethod
    def check_kip_properties(cls, props: Mapping[str, Any]) -> None:
        """ConfigError for an unknown kip.* property or a bad value of a known one."""
        for name, raw in props.items():
            if not name.startswith("kip."):
                continue
            if name not in KIP_PROPERTIES:
                raise ConfigError(
                    f"unknown kipproducer property {name!r}; known: "
                    + ", ".join(sorted(KIP_PROPERTIES)))
            try:
                _bool(raw)  # every kip.* property is a boolean so far
            except ValueError as exc:
                raise ConfigError(f"{name}={raw!r}: {exc}") from None

    @classmethod
    def from_properties(cls, props: Mapping[str, Any]) -> EngineConfig:
        cls.check_kip_properties(props)
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
            "socket.timeout.ms": ("socket_timeout_ms", int),
            "kip.delivery.report.per.record": ("per_record_reports", _bool),
            "allow.auto.create.topics": ("allow_auto_create_topics", _bool),
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
        config = cls(**values)
        if config.compression in ("none", ""):
            config.compression = None
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
