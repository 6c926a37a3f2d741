"""Shared helpers for the protocol tests: value generators and kio round trips.

Samples are generated in *kio's* representation (timedeltas, TZAware datetimes, kio's
ErrorCode enum) so that kio's own writer can encode them; ``normalize`` turns them into
the codec's representation for comparisons.
"""

from __future__ import annotations

import datetime
import io
import uuid
from functools import cache
from typing import Any

from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial.readers import tz_aware_from_i64
from kio.static.primitive import i32Timedelta, i64, i64Timedelta

from kipproducer.protocol.field_specs import INT_RANGES, FieldSpec, field_specs
from kipproducer.protocol.schemas import (
    known_api_keys,
    known_versions,
    request_class,
    response_class,
)

ALL_PAIRS = [(key, version) for key in known_api_keys() for version in known_versions(key)]
ALL_CLASSES = [
    cls
    for key, version in ALL_PAIRS
    for cls in (request_class(key, version), response_class(key, version))
]

# Largest datetime kio can represent and hand back (year 9999, ms precision).
_MAX_DATETIME_MS = 253402300799000
# i64 timedeltas beyond ~2^47 ms lose precision through float seconds in kio's writer.
_MAX_I64_TIMEDELTA_MS = 2**47


def kio_write(cls: type, obj: Any) -> bytes:
    out = io.BytesIO()
    entity_writer(cls)(out, obj)
    return out.getvalue()


def kio_read(cls: type, data: bytes) -> Any:
    obj, _size = entity_reader(cls)(data, 0)
    return obj


def class_id(cls: type) -> str:
    kind = cls.__type__.name  # type: ignore[attr-defined]
    return f"{cls.__name__}-v{cls.__version__}-{kind}"  # type: ignore[attr-defined]


# -- hypothesis strategies in kio representation --------------------------------------


def _scalar_strategy(spec: FieldSpec) -> st.SearchStrategy[Any]:
    kind = spec.kind
    if kind == "error_code":
        return st.sampled_from(list(ErrorCode))
    if kind == "timedelta_i32":
        return st.integers(-(2**31), 2**31 - 1).map(
            lambda ms: i32Timedelta.parse(datetime.timedelta(milliseconds=ms))
        )
    if kind == "timedelta_i64":
        return st.integers(-_MAX_I64_TIMEDELTA_MS, _MAX_I64_TIMEDELTA_MS).map(
            lambda ms: i64Timedelta.parse(datetime.timedelta(milliseconds=ms))
        )
    if kind == "datetime_i64":
        return st.integers(0, _MAX_DATETIME_MS).map(lambda ms: tz_aware_from_i64(i64(ms)))
    if kind in INT_RANGES:
        low, high = INT_RANGES[kind]
        return st.integers(low, high)
    if kind == "bool":
        return st.booleans()
    if kind == "float64":
        return st.floats(allow_nan=False, allow_infinity=False)
    if kind == "uuid":
        return st.uuids().filter(lambda u: u.int != 0)
    if kind == "string":
        return st.text(max_size=6)
    if kind in ("bytes", "records"):
        return st.binary(max_size=12)
    if kind == "entity":
        return entity_strategy(spec.entity)  # type: ignore[arg-type]
    raise AssertionError(kind)


def _field_strategy(spec: FieldSpec) -> st.SearchStrategy[Any]:
    if spec.is_array:
        element = _scalar_strategy(spec)
        if spec.kind == "uuid":
            element = st.one_of(st.none(), element)
        values: st.SearchStrategy[Any] = st.lists(element, max_size=2).map(tuple)
    else:
        values = _scalar_strategy(spec)
    if spec.nullable:
        values = st.one_of(st.none(), values)
    if spec.kind == "uuid" and not spec.is_array:
        values = st.one_of(st.none(), values)
    if spec.tag is not None and spec.has_default:
        # Tagged fields: often absent (default), sometimes set. (No tagged field is a
        # time kind, so the codec-representation default is also kio's.)
        values = st.one_of(st.just(spec.default), values)
    return values


@cache
def entity_strategy(cls: type) -> st.SearchStrategy[Any]:
    """Objects of any kio class, in kio representation, small enough to be quick."""
    fields = {spec.name: _field_strategy(spec) for spec in field_specs(cls)}
    return st.builds(cls, **fields)


# -- one deterministic, fully populated sample per class -------------------------------


def populated(cls: type) -> Any:
    """An instance where every field, tagged ones included, has a non-default value and
    every array one element; in kio representation."""
    values = {}
    for index, spec in enumerate(field_specs(cls)):
        value = _populated_scalar(spec, index)
        values[spec.name] = (value,) if spec.is_array else value
    return cls(**values)


def _populated_scalar(spec: FieldSpec, index: int) -> Any:
    kind = spec.kind
    if kind == "error_code":
        return ErrorCode.unknown_topic_or_partition
    if kind == "timedelta_i32":
        return i32Timedelta.parse(datetime.timedelta(milliseconds=1500 + index))
    if kind == "timedelta_i64":
        return i64Timedelta.parse(datetime.timedelta(milliseconds=2**40 + index))
    if kind == "datetime_i64":
        return tz_aware_from_i64(i64(1_700_000_000_123 + index))
    if kind in INT_RANGES:
        return 3 + index
    if kind == "bool":
        return True
    if kind == "float64":
        return 1.5
    if kind == "uuid":
        return uuid.UUID(int=0x1234_5678 + index)
    if kind == "string":
        return f"s{index}é"
    if kind in ("bytes", "records"):
        return bytes([index % 256]) * 5
    if kind == "entity":
        return populated(spec.entity)  # type: ignore[arg-type]
    raise AssertionError(kind)
