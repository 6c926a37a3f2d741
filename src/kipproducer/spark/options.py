"""Option handling shared by the Spark source and sink: Spark's Kafka option names, checked
on the driver so a mistake names the option before any task runs."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

BOOTSTRAP = "kafka.bootstrap.servers"
# kafka.* options Spark's own Kafka connector refuses, because the connector decides them
# itself; refused here for the same reasons (an explicit error beats a silent override).
_READ_REFUSED = ("group.id", "auto.offset.reset", "enable.auto.commit", "key.deserializer",
                 "value.deserializer", "interceptor.classes")
_WRITE_REFUSED = ("key.serializer", "value.serializer", "transactional.id",
                  "interceptor.classes")


class OptionError(ValueError):
    """An option is missing, unknown in this place, or has a value that cannot work."""


def lower_keys(options: Mapping[str, str]) -> dict[str, str]:
    """Spark hands Python data sources their options with case-insensitive keys; keep one
    spelling (the lower-case one) and look names up lower-cased."""
    return {str(k).lower(): str(v) for k, v in options.items()}


def kafka_properties(options: Mapping[str, str], *, writing: bool) -> dict[str, str]:
    """The ``kafka.*`` options without their prefix: client properties for librdkafka (the
    reader's consumer) or kipproducer's Producer (the sink)."""
    props = {k[len("kafka."):]: v for k, v in options.items() if k.startswith("kafka.")}
    if "bootstrap.servers" not in props:
        raise OptionError(f"option '{BOOTSTRAP}' is required (the Kafka cluster to "
                          f"{'write to' if writing else 'read from'})")
    refused = _WRITE_REFUSED if writing else _READ_REFUSED
    for name in refused:
        if name in props:
            raise OptionError(f"option 'kafka.{name}' is not supported: the kip "
                              f"{'sink' if writing else 'source'} sets it itself "
                              "(see docs/spark.md)")
    return props


def connection(props: Mapping[str, str]) -> dict[str, Any]:
    """What a helper client (admin, consumer probe) needs to reach the cluster."""
    from ..clients import connection_properties

    conf: dict[str, Any] = {k: v for k, v in connection_properties(props).items()}
    # librdkafka's informational lines (level 6) would land on every task's stderr
    conf["log_level"] = int(conf.get("log_level", 3))  # confluent-kafka wants an int
    return conf


def parse_int(options: Mapping[str, str], name: str, default: int, minimum: int = 0) -> int:
    raw = options.get(name.lower())
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(f"option '{name}' must be an integer, got {raw!r}") from None
    if value < minimum:
        raise OptionError(f"option '{name}' must be >= {minimum}, got {value}")
    return value


def parse_bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name.lower())
    if raw is None:
        return default
    if raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    raise OptionError(f"option '{name}' must be true or false, got {raw!r}")


# Spark's time strings (maxTriggerDelay="15m"): an integer and an optional unit, milliseconds
# when there is none.
_TIME_UNITS_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000,
                  "h": 3_600_000, "d": 86_400_000}
_TIME = re.compile(r"(\d+)\s*([a-z]*)")


def parse_duration_ms(options: Mapping[str, str], name: str, default_ms: int) -> int:
    raw = options.get(name.lower())
    if raw is None:
        return default_ms
    match = _TIME.fullmatch(raw.strip().lower())
    if match is None or match.group(2) not in ("", *_TIME_UNITS_MS):
        raise OptionError(f"option '{name}' must be a duration such as 500ms, 30s, 15m, 1h "
                          f"(units: {', '.join(_TIME_UNITS_MS)}), got {raw!r}")
    return int(int(match.group(1)) * _TIME_UNITS_MS[match.group(2) or "ms"])


def parse_json(options: Mapping[str, str], name: str) -> Any:
    raw = options[name.lower()]
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise OptionError(f"option '{name}' is not valid JSON ({exc}): {raw!r}") from None
