"""Build kio objects from keyword arguments with every omitted field defaulted.

kio's classes have many required fields and their field sets differ per version, which
makes broker code long. ``build_response(3, 12, brokers=[...], topics=[...])`` fills in
what is omitted:

* the field's default from kio (which carries Kafka's JSON defaults, e.g. -1 for
  ``leader_epoch``, ``log_start_offset``, ``last_stable_offset``);
* otherwise 0 for numbers, error codes and times, ``False``, ``""`` / ``b""`` for
  non-nullable strings and bytes, ``None`` for nullable fields and uuids, ``()`` for
  arrays, and a struct built from its own defaults for a non-nullable struct.

Nested structs may be given as dicts (or as objects), arrays as lists, times as int
milliseconds or timedeltas. The result holds values in codec representation (see
field_specs), so a built object compares equal to its decoded round trip.
Fields a version does not have are rejected with TypeError, so code that targets
several versions passes only what the version defines (``fields_of`` tells).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from .field_specs import (
    FIXED_KINDS,
    TIME_KINDS,
    FieldSpec,
    field_specs,
    slot_setters,
    to_wire_millis,
)
from .schemas import request_class, response_class

_MISSING = object()


@dataclass(frozen=True, slots=True)
class _FieldPlan:
    name: str
    setter: Callable[[Any, Any], None]
    default: Any
    convert: Callable[[Any], Any] | None


def _implicit_default(spec: FieldSpec) -> Any:
    if spec.is_array:
        return ()
    if spec.nullable:
        return None
    if spec.kind == "entity":
        return build(spec.entity)  # type: ignore[arg-type]
    if spec.kind == "string":
        return ""
    if spec.kind in ("bytes", "records"):
        return b""
    if spec.kind == "bool":
        return False
    if spec.kind == "float64":
        return 0.0
    if spec.kind == "uuid":
        return None
    if spec.kind in FIXED_KINDS:
        return 0
    raise TypeError(f"no default for {spec.kind}")  # pragma: no cover


def _struct_converter(child: type) -> Callable[[Any], Any]:
    def convert(value: Any) -> Any:
        if isinstance(value, Mapping):
            return build(child, **value)
        return value

    return convert


def _struct_array_converter(child: type) -> Callable[[Any], Any]:
    def convert(values: Any) -> Any:
        if values is None:
            return None
        return tuple(build(child, **v) if isinstance(v, Mapping) else v for v in values)

    return convert


def _time_converter(value: Any) -> Any:
    return value if value.__class__ is int else to_wire_millis(value)


def _time_array_converter(values: Any) -> Any:
    return None if values is None else tuple(_time_converter(v) for v in values)


def _error_code_converter(value: Any) -> Any:
    return value if value.__class__ is int else int(value)


def _tuple_converter(values: Any) -> Any:
    return values if values is None or values.__class__ is tuple else tuple(values)


def _converter(spec: FieldSpec) -> Callable[[Any], Any] | None:
    if spec.kind == "entity":
        child = spec.entity
        return _struct_array_converter(child) if spec.is_array else _struct_converter(child)  # type: ignore[arg-type]
    if spec.kind in TIME_KINDS:
        return _time_array_converter if spec.is_array else _time_converter
    if spec.is_array:
        return _tuple_converter
    if spec.kind == "error_code":
        return _error_code_converter
    return None


@cache
def _plan(cls: type) -> tuple[_FieldPlan, ...]:
    plans = []
    for spec, setter in zip(field_specs(cls), slot_setters(cls), strict=True):
        default = spec.default if spec.has_default else _implicit_default(spec)
        plans.append(_FieldPlan(spec.name, setter, default, _converter(spec)))
    return tuple(plans)


def build(cls: type, /, **values: Any) -> Any:
    """An instance of the kio class ``cls`` from ``values``, defaults for the rest.

    :raises TypeError: for a keyword that is not a field of ``cls``.
    """
    obj = object.__new__(cls)
    remaining = len(values)
    for plan in _plan(cls):
        value = values.get(plan.name, _MISSING)
        if value is _MISSING:
            value = plan.default
        else:
            remaining -= 1
            if plan.convert is not None:
                value = plan.convert(value)
        plan.setter(obj, value)
    if remaining:
        known = {plan.name for plan in _plan(cls)}
        unknown = sorted(set(values) - known)
        raise TypeError(
            f"{cls.__name__} v{cls.__version__} has no field(s) {unknown}; "  # type: ignore[attr-defined]
            f"fields are {sorted(known)}"
        )
    return obj


def build_request(api_key: int, version: int, /, **values: Any) -> Any:
    """A request payload for (api_key, version); Produce v9+ gets the extended class."""
    return build(request_class(api_key, version), **values)


def build_response(api_key: int, version: int, /, **values: Any) -> Any:
    """A response payload for (api_key, version); Produce v9+ gets the extended class."""
    return build(response_class(api_key, version), **values)


def fields_of(cls: type) -> tuple[str, ...]:
    """Field names of a kio class, in declaration order."""
    return tuple(spec.name for spec in field_specs(cls))
