"""Read kio's dataclass metadata into one flat description per field.

kio generates a frozen dataclass per (message, version) and records the wire type of
each field in ``field.metadata`` (``kafka_type``, ``tag``), nullability in the type hint
(``X | None``), arrays as ``tuple[X, ...]`` and nested structs as nested dataclasses.
This module turns that into :class:`FieldSpec` records, computed once per class, which
the encoder, decoder, builder and validator all compile from. kio stays the only source
of schemas; nothing here knows any message by name.

Value representation (what decoded objects hold and what builders produce) differs
from kio's in a few places, for speed and openness:

* error codes are plain ``int`` (any int16 accepted, not only kio's closed enum);
* ``timedelta_i32`` / ``timedelta_i64`` / ``datetime_i64`` fields are plain ``int``
  milliseconds exactly as on the wire (a null datetime is -1);
* ``records`` fields decode to ``memoryview`` slices of the decoded buffer;
* uuid fields are ``uuid.UUID``, with the all-zero uuid as ``None`` (as in kio).

Encoders accept both representations (``timedelta``, ``datetime`` and kio's enum too).
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable
from dataclasses import MISSING, dataclass
from functools import cache
from types import EllipsisType, NoneType, UnionType
from typing import Any, Final, Union, get_args, get_origin

from .errors import ProtocolError

# Wire size and struct code of every fixed-size kind.
FIXED_KINDS: Final[dict[str, tuple[int, str]]] = {
    "int8": (1, "b"),
    "int16": (2, "h"),
    "int32": (4, "i"),
    "int64": (8, "q"),
    "uint8": (1, "B"),
    "uint16": (2, "H"),
    "uint32": (4, "I"),
    "uint64": (8, "Q"),
    "float64": (8, "d"),
    "bool": (1, "?"),
    "error_code": (2, "h"),
    "timedelta_i32": (4, "i"),
    "timedelta_i64": (8, "q"),
    "datetime_i64": (8, "q"),
    "uuid": (16, "16s"),
}

INT_RANGES: Final[dict[str, tuple[int, int]]] = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint8": (0, 2**8 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
    "uint64": (0, 2**64 - 1),
    "error_code": (-(2**15), 2**15 - 1),
    "timedelta_i32": (-(2**31), 2**31 - 1),
    "timedelta_i64": (-(2**63), 2**63 - 1),
    "datetime_i64": (-(2**63), 2**63 - 1),
}

TIME_KINDS: Final = frozenset({"timedelta_i32", "timedelta_i64", "datetime_i64"})
BLOB_KINDS: Final = frozenset({"bytes", "records"})


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """How one dataclass field travels on the wire."""

    name: str
    kind: str
    """A key of FIXED_KINDS, or "string", "bytes", "records", "entity"."""
    is_array: bool
    nullable: bool
    """For arrays: the array itself may be null; for entities: KIP-893 nullable struct."""
    tag: int | None
    entity: type | None
    """The nested dataclass for kind "entity"."""
    has_default: bool
    default: Any
    """The default in codec representation (see module doc); meaningful if has_default."""
    legacy_string: bool = False
    """RequestHeader.client_id is a legacy int16-length string even in flexible headers."""

    @property
    def fixed(self) -> bool:
        return not self.is_array and self.kind in FIXED_KINDS

    @property
    def label(self) -> str:
        return f"{self.kind}[]" if self.is_array else self.kind


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    if get_origin(tp) in (UnionType, Union):
        args = [a for a in get_args(tp) if a is not NoneType]
        if len(args) != 1:
            raise TypeError(f"unsupported union type {tp!r}")
        return args[0], True
    return tp, False


def _classify(field: dataclasses.Field[Any]) -> tuple[str, bool, bool, type | None]:
    """(kind, is_array, nullable, entity class) of a kio field."""
    tp, nullable = _unwrap_optional(field.type)
    is_array = False
    if get_origin(tp) is tuple:
        args = get_args(tp)
        if len(args) != 2 or not isinstance(args[1], EllipsisType):
            raise TypeError(f"field {field.name}: unsupported tuple type {tp!r}")
        is_array = True
        # Nullability of array *elements* is not a thing in Kafka (kio writes a uuid
        # array element type as `UUID | None` because zero reads back as None).
        tp, _ = _unwrap_optional(args[0])
    if dataclasses.is_dataclass(tp):
        return "entity", is_array, nullable, tp  # type: ignore[return-value]
    kind = field.metadata.get("kafka_type")
    if not isinstance(kind, str):
        raise TypeError(f"field {field.name}: missing kafka_type metadata")
    if kind not in FIXED_KINDS and kind not in ("string", "bytes", "records"):
        raise TypeError(f"field {field.name}: unknown kafka_type {kind!r}")
    return kind, is_array, nullable, None


def to_wire_millis(value: Any) -> int:
    """A time value (int ms, timedelta, datetime, or None for a null datetime) as ms."""
    if value.__class__ is int:
        return value
    if value is None:
        return -1
    if isinstance(value, datetime.timedelta):
        # Same rounding as kio's writer, so both encoders produce identical bytes.
        return round(value.total_seconds() * 1000)
    if isinstance(value, datetime.datetime):
        return round(value.timestamp() * 1000)
    if isinstance(value, int):
        return int(value)
    raise TypeError(f"expected milliseconds as int, timedelta or datetime, got {value!r}")


def to_codec_value(spec: FieldSpec, value: Any) -> Any:
    """Convert a value in kio's representation to this codec's (see module doc).
    Returns ``value`` itself when it is already in codec representation."""
    if value is None:
        return -1 if spec.kind == "datetime_i64" and not spec.is_array else None
    if spec.is_array:
        if spec.kind == "entity":
            convert: Callable[[Any], Any] = normalize
        elif spec.kind in TIME_KINDS:
            convert = to_wire_millis
        elif spec.kind == "error_code":
            convert = int
        else:
            return value if type(value) is tuple else tuple(value)
        items = tuple(convert(v) for v in value)
        same = type(value) is tuple and all(a is b for a, b in zip(items, value, strict=True))
        return value if same else items
    if spec.kind == "entity":
        return normalize(value)
    if spec.kind in TIME_KINDS:
        return to_wire_millis(value)
    if spec.kind == "error_code" and type(value) is not int:
        return int(value)
    return value


def _kio_tagged_default(field: dataclasses.Field[Any]) -> Any:
    # kio knows the implicit default of a tagged field that has none declared (e.g. a
    # struct built from its fields' defaults); reuse that rule rather than restating it.
    from kio.serial._implicit_defaults import get_tagged_field_default

    return get_tagged_field_default(field)


@cache
def field_specs(cls: type) -> tuple[FieldSpec, ...]:
    """The wire description of every field of a kio entity class, in declaration order."""
    if not dataclasses.is_dataclass(cls):
        raise ProtocolError(f"{cls!r} is not a kio entity class")
    specs = []
    is_request_header = cls.__name__ == "RequestHeader"
    for field in dataclasses.fields(cls):
        kind, is_array, nullable, entity = _classify(field)
        tag = field.metadata.get("tag")
        provisional = FieldSpec(
            name=field.name,
            kind=kind,
            is_array=is_array,
            nullable=nullable,
            tag=tag,
            entity=entity,
            has_default=False,
            default=None,
        )
        has_default = True
        if field.default is not MISSING:
            default = field.default
        elif field.default_factory is not MISSING:
            default = field.default_factory()
        elif tag is not None:
            default = _kio_tagged_default(field)
        else:
            has_default = False
            default = None
        if has_default:
            default = to_codec_value(provisional, default)
        specs.append(
            dataclasses.replace(
                provisional,
                has_default=has_default,
                default=default,
                legacy_string=is_request_header and field.name == "client_id",
            )
        )
    return tuple(specs)


def body_specs(cls: type) -> tuple[FieldSpec, ...]:
    """Fields written in the struct body (all but tagged fields), in wire order."""
    return tuple(s for s in field_specs(cls) if s.tag is None)


def tagged_specs(cls: type) -> tuple[FieldSpec, ...]:
    """Tagged fields, sorted by tag (the order KIP-482 requires on the wire)."""
    tagged = [s for s in field_specs(cls) if s.tag is not None]
    if tagged and not cls.__flexible__:  # type: ignore[attr-defined]
        raise ProtocolError(f"{cls.__name__} declares tagged fields but is not flexible")
    return tuple(sorted(tagged, key=lambda s: s.tag))  # type: ignore[arg-type, return-value]


@cache
def min_wire_size(cls: type) -> int:
    """Fewest bytes one instance can take on the wire (used to bound array counts)."""
    flexible = cls.__flexible__  # type: ignore[attr-defined]
    size = 1 if flexible else 0  # tag buffer count
    for spec in body_specs(cls):
        size += _min_field_size(spec, flexible)
    return size


def _min_field_size(spec: FieldSpec, flexible: bool) -> int:
    if spec.is_array:
        return 1 if flexible else 4
    if spec.kind in FIXED_KINDS:
        return FIXED_KINDS[spec.kind][0]
    if spec.kind == "string":
        return 2 if (spec.legacy_string or not flexible) else 1
    if spec.kind in BLOB_KINDS:
        return 1 if flexible else 4
    if spec.nullable:
        return 1
    return min_wire_size(spec.entity)  # type: ignore[arg-type]


@cache
def slot_setters(cls: type) -> tuple[Callable[[Any, Any], None], ...]:
    """Per-field setters that bypass the frozen ``__setattr__`` (about twice as fast as
    calling the generated ``__init__``; kio classes have no ``__post_init__``)."""
    setters = []
    for field in dataclasses.fields(cls):
        descriptor = getattr(cls, field.name, None)
        setter = getattr(descriptor, "__set__", None)
        if setter is None or not hasattr(descriptor, "__get__") or isinstance(descriptor, property):
            raise TypeError(f"{cls.__name__}.{field.name} is not a slot")
        setters.append(setter)
    return tuple(setters)


@cache
def mutable_mirror(cls: type) -> type | None:
    """A plain class with exactly ``cls``'s slot layout, or None if none can be made.

    Decoders fill an instance of the mirror with ordinary attribute stores (specialised,
    much cheaper than calling each slot descriptor's ``__set__``) and then switch its
    ``__class__`` to ``cls``, which CPython allows between classes of identical layout.
    The switch is tried once here, so an incompatible class falls back to setters.
    """
    chain = [c for c in reversed(cls.__mro__) if c is not object]
    if any("__slots__" not in vars(c) or "__dict__" in vars(c) for c in chain):
        return None
    mirror: type = object
    for klass in chain:
        slots = vars(klass)["__slots__"]
        slots = (slots,) if isinstance(slots, str) else tuple(slots)
        mirror = type(f"_{klass.__name__}Mirror", (mirror,), {"__slots__": slots})
    probe = object.__new__(mirror)
    try:
        probe.__class__ = cls
    except TypeError:
        return None
    return mirror


@cache
def needs_normalizing(cls: type) -> bool:
    """Whether kio-built instances of ``cls`` can hold values in kio's representation."""
    for spec in field_specs(cls):
        if spec.kind in TIME_KINDS or spec.kind == "error_code":
            return True
        if spec.kind == "entity" and needs_normalizing(spec.entity):  # type: ignore[arg-type]
            return True
    return False


def normalize(obj: Any) -> Any:
    """Return ``obj`` with every value in codec representation (timedeltas and datetimes
    as int ms, error codes as int). Objects already in that form are returned as is."""
    cls = type(obj)
    if not needs_normalizing(cls):
        return obj
    specs = field_specs(cls)
    values = [getattr(obj, spec.name) for spec in specs]
    converted = [to_codec_value(spec, value) for spec, value in zip(specs, values, strict=True)]
    if all(a is b for a, b in zip(values, converted, strict=True)):
        return obj
    new_obj = object.__new__(cls)
    for setter, value in zip(slot_setters(cls), converted, strict=True):
        setter(new_obj, value)
    return new_obj
