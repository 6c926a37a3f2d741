"""One config definition: a Kafka name, a type, a default, a validator and its broker synonyms.

Shared by the topic config table (topic_configs.py) and the broker config table
(../broker_config_defs.py): both parse the strings requests carry, render values the way
Kafka's DescribeConfigs prints them and report the DescribeConfigs ConfigType.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from .errors import InvalidConfigError

LONG_MAX: Final = 2**63 - 1
INT_MAX: Final = 2**31 - 1

# DescribeConfigs ConfigSource values (DescribeConfigsResponse.ConfigSource).
SOURCE_TOPIC_CONFIG: Final = 1  # DYNAMIC_TOPIC_CONFIG
SOURCE_STATIC_BROKER_CONFIG: Final = 4
SOURCE_DEFAULT_CONFIG: Final = 5

# DescribeConfigs v3+ ConfigType values.
TYPE_BOOLEAN: Final = 1
TYPE_STRING: Final = 2
TYPE_INT: Final = 3
TYPE_SHORT: Final = 4
TYPE_LONG: Final = 5
TYPE_DOUBLE: Final = 6
TYPE_LIST: Final = 7
TYPE_PASSWORD: Final = 9

# What the reference broker does with a topic config (the docs table is built from these).
HONOURED: Final = "honoured"
NO_OP: Final = "accepted, no effect on one node"
PARTLY: Final = "accepted; some values refused"

_INTEGER = re.compile(r"[+-]?[0-9]+")
_DOUBLE = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")

_KIND = {TYPE_INT: "INT", TYPE_LONG: "LONG", TYPE_SHORT: "SHORT"}  # Kafka's ConfigDef.Type names

Validator = Callable[[Any], "str | None"]


class Synonym(NamedTuple):
    """A broker property that supplies a topic config's default.

    ``unit_ms``: the broker property counts in units of this many of the topic config's
    (log.retention.hours: 3600000 ms), 1 when both count the same.
    """

    name: str
    unit_ms: int = 1


@dataclass(frozen=True, slots=True)
class ConfigDef:
    """One config: its Kafka name, type, default and which values are valid."""

    name: str
    attr: str  # the attribute holding the parsed value
    config_type: int  # TYPE_* (DescribeConfigs ConfigType)
    default: Any
    validate: Validator  # why a parsed value is invalid, or None
    doc: str
    # Broker properties that supply the default, the one that wins first; the last one is the
    # one with a built-in default (Kafka reports it as the DEFAULT_CONFIG synonym).
    synonyms: tuple[Synonym, ...] = ()
    support: str = HONOURED
    # Why a valid value cannot be honoured by a single-node broker without remote storage
    # (refused with INVALID_CONFIG), or None.
    unsupported: Validator | None = None

    @property
    def broker_name(self) -> str | None:
        return self.synonyms[0].name if self.synonyms else None

    def parse(self, text: str | None) -> Any:
        """The typed value of ``text``; raises InvalidConfigError for a malformed or bad one."""
        if text is None:
            raise InvalidConfigError(self.name, text, "null values are not supported")
        if not isinstance(text, str):
            raise InvalidConfigError(self.name, text, "config values are strings")
        value = parse_typed(self.name, self.config_type, text)
        self.check(value)
        return value

    def check(self, value: Any) -> None:
        reason = self.validate(value)
        if reason is None and self.unsupported is not None:
            reason = self.unsupported(value)
        if reason is not None:
            raise InvalidConfigError(self.name, self.render(value), reason)

    def render(self, value: Any) -> str:
        """The string form DescribeConfigs reports."""
        return render_typed(self.config_type, value)


def parse_typed(name: str, config_type: int, text: str) -> Any:
    """``text`` as a value of ``config_type``, with Kafka's ConfigDef parsing rules."""
    stripped = text.strip()
    if config_type in (TYPE_INT, TYPE_LONG, TYPE_SHORT):
        if not _INTEGER.fullmatch(stripped):
            raise InvalidConfigError(name, text, f"Not a number of type {_KIND[config_type]}")
        value = int(stripped)
        bound = {TYPE_INT: INT_MAX, TYPE_LONG: LONG_MAX, TYPE_SHORT: 2**15 - 1}[config_type]
        if not -bound - 1 <= value <= bound:  # Java's parse fails on it: the same words
            raise InvalidConfigError(name, text, f"Not a number of type {_KIND[config_type]}")
        return value
    if config_type == TYPE_BOOLEAN:
        lowered = stripped.lower()
        if lowered not in ("true", "false"):
            raise InvalidConfigError(name, text, "Expected value to be either true or false")
        return lowered == "true"
    if config_type == TYPE_DOUBLE:
        if not _DOUBLE.fullmatch(stripped):
            raise InvalidConfigError(name, text, "Not a number of type DOUBLE")
        number = float(stripped)
        if not math.isfinite(number):
            raise InvalidConfigError(name, text, "expected a finite number")
        return number
    if config_type == TYPE_LIST:
        return tuple(item.strip() for item in stripped.split(",")) if stripped else ()
    return stripped


def render_typed(config_type: int, value: Any) -> str:
    if config_type == TYPE_BOOLEAN:
        return "true" if value else "false"
    if config_type == TYPE_LIST:
        return ",".join(value)
    if config_type == TYPE_DOUBLE:
        return repr(float(value))  # Java prints doubles the same way: 0.5, 1.0
    return str(value)


def altered_list(current: str, items: str, append: bool) -> str:
    """IncrementalAlterConfigs' APPEND (``append``) or SUBTRACT of ``items`` on a LIST value.

    ``current`` is the value the resource itself holds for the config, else the config's
    built-in default: Kafka's controller starts from that, not from the value in force (a topic
    without an override starts from ``delete``, never from ``log.cleanup.policy``). APPEND adds
    the items not yet listed, in order; SUBTRACT removes one occurrence of each. Empty items of
    ``current`` are dropped; ``items`` is split as Java's String.split splits it (trailing empty
    items dropped), so the result is what Kafka stores, before validation.
    """
    parts = [part for part in current.split(",") if part]
    pieces = items.split(",")
    while len(pieces) > 1 and pieces[-1] == "":
        pieces.pop()
    if pieces == [""] and "," in items:  # "," or ",,": Java splits them into nothing
        pieces = []
    for item in pieces:
        if append and item not in parts:
            parts.append(item)
        elif not append and item in parts:
            parts.remove(item)
    return ",".join(parts)


# -- validators ---------------------------------------------------------------------------------


def at_least(minimum: int) -> Validator:
    def validate(value: Any) -> str | None:
        return None if value >= minimum else f"must be at least {minimum}"

    return validate


def between(low: float, high: float) -> Validator:
    def validate(value: Any) -> str | None:
        return None if low <= value <= high else f"must be between {low} and {high}"

    return validate


def any_value(value: Any) -> str | None:
    return None


def one_of(*choices: str) -> Validator:
    def validate(value: Any) -> str | None:
        return None if value in choices else f"must be one of {', '.join(map(str, choices))}"

    return validate


def either(first: Validator, second: Validator) -> Validator:
    """Valid when either validator accepts (Kafka's ConfigDef.LambdaValidator unions)."""

    def validate(value: Any) -> str | None:
        if first(value) is None or second(value) is None:
            return None
        return f"{first(value)}, or {second(value)}"

    return validate
