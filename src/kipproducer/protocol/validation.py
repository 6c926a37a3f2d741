"""Check an object against its schema and name the first field that cannot be encoded.

The generated encoders skip checks for speed; when one fails, this slower walk finds
out which field was wrong (kio's own writer reports e.g. a bare ``TypeError:
Unexpectedly received None value`` without saying where). It can also be called
directly, e.g. in tests of code that builds responses.
"""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from .errors import ProtocolError
from .field_specs import FIXED_KINDS, INT_RANGES, TIME_KINDS, FieldSpec, field_specs

_BLOB_TYPES = (bytes, bytearray, memoryview)


def validate(obj: Any, path: str | None = None) -> None:
    """Raise :class:`ProtocolError` naming the first field of ``obj`` (recursively) whose
    value cannot be encoded; return None when every field is encodable."""
    cls = type(obj)
    where = path or f"{cls.__name__}"
    flexible = getattr(cls, "__flexible__", None)
    if flexible is None:
        raise ProtocolError(f"{where}: {cls.__name__} is not a kio entity")
    for spec in field_specs(cls):
        if spec.tag is not None and not hasattr(obj, spec.name):
            continue  # a stock object where an extended one is declared: tag not sent
        try:
            value = getattr(obj, spec.name)
        except AttributeError:
            raise ProtocolError(f"{where}.{spec.name}: missing") from None
        _check_field(spec, value, f"{where}.{spec.name}", flexible)


def _check_field(spec: FieldSpec, value: Any, where: str, flexible: bool) -> None:
    if value is None:
        if spec.nullable or (spec.kind == "datetime_i64" and not spec.is_array):
            return
        if spec.tag is not None and spec.default is None:
            return  # an unset tagged field is simply not written
        raise ProtocolError(f"{where}: None for a non-nullable {spec.label}")
    if spec.is_array:
        if not isinstance(value, tuple | list):
            raise ProtocolError(f"{where}: expected a tuple for {spec.label}, got {_t(value)}")
        if not flexible and len(value) > 2**31 - 1:
            raise ProtocolError(f"{where}: array too long")
        for index, item in enumerate(value):
            if item is None and spec.kind != "uuid":
                raise ProtocolError(f"{where}[{index}]: None inside an array")
            _check_scalar(spec, item, f"{where}[{index}]", flexible)
        return
    _check_scalar(spec, value, where, flexible)


def _check_scalar(spec: FieldSpec, value: Any, where: str, flexible: bool) -> None:
    kind = spec.kind
    if kind in INT_RANGES:
        if kind in TIME_KINDS and isinstance(value, datetime.timedelta | datetime.datetime):
            return
        if not isinstance(value, int):
            raise ProtocolError(f"{where}: expected int for {kind}, got {_t(value)}")
        low, high = INT_RANGES[kind]
        if not low <= value <= high:
            raise ProtocolError(f"{where}: {value} is out of range for {kind}")
    elif kind == "bool":
        if not isinstance(value, bool | int):
            raise ProtocolError(f"{where}: expected bool, got {_t(value)}")
    elif kind == "float64":
        if not isinstance(value, float | int):
            raise ProtocolError(f"{where}: expected float, got {_t(value)}")
    elif kind == "uuid":
        if value is not None and not isinstance(value, uuid.UUID):
            if not (isinstance(value, _BLOB_TYPES) and len(value) == 16):
                raise ProtocolError(f"{where}: expected UUID or None, got {_t(value)}")
    elif kind == "string":
        if not isinstance(value, str):
            raise ProtocolError(f"{where}: expected str, got {_t(value)}")
        try:
            size = len(value.encode())
        except UnicodeEncodeError:
            raise ProtocolError(f"{where}: string cannot be encoded as UTF-8") from None
        if (spec.legacy_string or not flexible) and size > 2**15 - 1:
            raise ProtocolError(f"{where}: string of {size} bytes is too long for int16 length")
    elif kind in ("bytes", "records"):
        if not isinstance(value, _BLOB_TYPES):
            raise ProtocolError(f"{where}: expected bytes-like, got {_t(value)}")
    elif kind == "entity":
        if not hasattr(type(value), "__flexible__"):
            raise ProtocolError(
                f"{where}: expected {spec.entity.__name__}, got {_t(value)}"  # type: ignore[union-attr]
            )
        validate(value, where)
    elif kind not in FIXED_KINDS:  # pragma: no cover - field_specs rejects other kinds
        raise ProtocolError(f"{where}: unknown kind {kind}")


def _t(value: Any) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"
