"""Compile kio entity classes into decoder functions, once per class.

For each class this writes the Python source of one function
``decode(buf, pos, end) -> (object, new_pos)`` with the field reads inlined (a run of
fixed-size fields is one ``Struct.unpack_from``; one-byte varints are read inline) and
``exec``s it. The result is cached, so a decode costs only the straight-line code.

Rules the generated code follows:

* lengths and counts are checked against the bytes remaining before anything is
  sliced or allocated, so a lying length prefix fails at once;
* unknown tagged fields are skipped (KIP-482), known ones are read within their size;
* every failure is a :class:`ProtocolError` naming the struct (truncation, bad UTF-8,
  negative or overrunning lengths, nulls in non-nullable fields, overlong varints);
* objects are built without calling the dataclass ``__init__``: attributes are stored
  on a mutable mirror of the class, whose ``__class__`` is then switched (see
  ``field_specs.mutable_mirror``).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import replace
from functools import cache
from typing import Any

from . import wire
from .codegen import GeneratedSource
from .field_specs import (
    FIXED_KINDS,
    FieldSpec,
    body_specs,
    field_specs,
    min_wire_size,
    mutable_mirror,
    slot_setters,
    tagged_specs,
)

Decoder = Callable[[Any, int, int], tuple[Any, int]]

_BASE_NAMESPACE: dict[str, Any] = {
    "struct_error": struct.error,
    "new": object.__new__,
    "uvarint_tail": wire.uvarint_tail,
    "unpack_array": wire.unpack_array,
    "uuid_from_bytes": wire.uuid_from_bytes,
    "read_tagged_fields": wire.read_tagged_fields,
    "truncated": wire.truncated,
    "not_utf8": wire.not_utf8,
    "null_not_allowed": wire.null_not_allowed,
    "negative_length": wire.negative_length,
    "length_overrun": wire.length_overrun,
    "INT16": wire.INT16,
    "INT32": wire.INT32,
    "memoryview": memoryview,
}


def owner_name(cls: type) -> str:
    return f"{cls.__name__} v{cls.__version__}"  # type: ignore[attr-defined]


def _element_spec(spec: FieldSpec) -> FieldSpec:
    """The spec of one array element: same kind, never null, not an array."""
    return replace(spec, is_array=False, nullable=False, tag=None)


def _min_element_size(spec: FieldSpec, flexible: bool) -> int:
    if spec.kind in FIXED_KINDS:
        return FIXED_KINDS[spec.kind][0]
    if spec.kind == "entity":
        return max(1, min_wire_size(spec.entity))  # type: ignore[arg-type]
    if spec.kind == "string":
        return 1 if flexible else 2
    return 1 if flexible else 4


class _DecoderWriter:
    def __init__(self, cls: type) -> None:
        self.cls = cls
        self.flexible: bool = cls.__flexible__  # type: ignore[attr-defined]
        self.owner = owner_name(cls)
        self.src = GeneratedSource(_BASE_NAMESPACE, f"decoder of {self.owner}")

    # -- value readers: each emits lines that leave the value in `target` --------------

    def _read_compact_length(self, indent: int, var: str) -> None:
        emit = self.src.emit
        emit(indent, f"{var} = buf[pos]")
        emit(indent, "pos += 1")
        emit(indent, f"if {var} > 127:")
        emit(indent + 1, f"{var}, pos = uvarint_tail(buf, pos, {var})")

    def _read_fixed(self, spec: FieldSpec, target: str, indent: int) -> None:
        size, code = FIXED_KINDS[spec.kind]
        packer = self.src.bind("S", struct.Struct(">" + code))
        self.src.emit(indent, f"{target}, = {packer}.unpack_from(buf, pos)")
        self.src.emit(indent, f"pos += {size}")
        if spec.kind == "uuid":
            self.src.emit(indent, f"{target} = uuid_from_bytes({target})")

    def _slice_expression(self, kind: str, start: str, stop: str) -> str:
        if kind == "string":
            return f'str(buf[{start}:{stop}], "utf-8")'
        if kind == "records":
            # Zero copy: a view of the caller's buffer (writable if that is a bytearray).
            return f"memoryview(buf)[{start}:{stop}]"
        return f"bytes(buf[{start}:{stop}])"

    def _read_sized(self, spec: FieldSpec, target: str, indent: int, where: str) -> None:
        """string / bytes / records, compact or legacy, nullable or not."""
        emit = self.src.emit
        n = self.src.fresh("n")
        stop = self.src.fresh("stop")
        where_lit = repr(where)
        compact = self.flexible and not spec.legacy_string
        if compact:
            self._read_compact_length(indent, n)
            emit(indent, f"if {n} == 0:")
            if spec.nullable:
                emit(indent + 1, f"{target} = None")
            else:
                emit(indent + 1, f"raise null_not_allowed({where_lit})")
            emit(indent, "else:")
            emit(indent + 1, f"{n} -= 1")
        else:
            length_struct = "INT16" if spec.kind == "string" else "INT32"
            width = 2 if spec.kind == "string" else 4
            emit(indent, f"{n}, = {length_struct}.unpack_from(buf, pos)")
            emit(indent, f"pos += {width}")
            emit(indent, f"if {n} < 0:")
            if spec.nullable:
                emit(indent + 1, f"if {n} != -1:")
                emit(indent + 2, f"raise negative_length({where_lit}, {n})")
                emit(indent + 1, f"{target} = None")
            else:
                emit(indent + 1, f"raise negative_length({where_lit}, {n})")
            emit(indent, "else:")
        body = indent + 1
        emit(body, f"{stop} = pos + {n}")
        emit(body, f"if {stop} > end:")
        emit(body + 1, f"raise length_overrun({where_lit}, {n}, end - pos)")
        emit(body, f"{target} = {self._slice_expression(spec.kind, 'pos', stop)}")
        emit(body, f"pos = {stop}")

    def _read_entity(self, spec: FieldSpec, target: str, indent: int) -> None:
        child = self.src.bind("D", decoder_for(spec.entity))  # type: ignore[arg-type]
        emit = self.src.emit
        if spec.nullable:
            # KIP-893 nullable struct: an int8 marker, negative = null.
            emit(indent, "if buf[pos] & 0x80:")
            emit(indent + 1, "pos += 1")
            emit(indent + 1, f"{target} = None")
            emit(indent, "else:")
            emit(indent + 1, "pos += 1")
            emit(indent + 1, f"{target}, pos = {child}(buf, pos, end)")
        else:
            emit(indent, f"{target}, pos = {child}(buf, pos, end)")

    def _read_scalar(self, spec: FieldSpec, target: str, indent: int, where: str) -> None:
        if spec.kind in FIXED_KINDS:
            self._read_fixed(spec, target, indent)
        elif spec.kind == "entity":
            self._read_entity(spec, target, indent)
        else:
            self._read_sized(spec, target, indent, where)

    def _read_array(self, spec: FieldSpec, target: str, indent: int, where: str) -> None:
        emit = self.src.emit
        n = self.src.fresh("count")
        where_lit = repr(where)
        if self.flexible:
            self._read_compact_length(indent, n)
            emit(indent, f"if {n} == 0:")
            null_indent = indent + 1
        else:
            emit(indent, f"{n}, = INT32.unpack_from(buf, pos)")
            emit(indent, "pos += 4")
            emit(indent, f"if {n} < 0:")
            null_indent = indent + 1
            emit(null_indent, f"if {n} != -1:")
            emit(null_indent + 1, f"raise negative_length({where_lit}, {n})")
        if spec.nullable:
            emit(null_indent, f"{target} = None")
        else:
            emit(null_indent, f"raise null_not_allowed({where_lit})")
        emit(indent, "else:")
        body = indent + 1
        if self.flexible:
            emit(body, f"{n} -= 1")
        min_size = _min_element_size(spec, self.flexible)
        emit(body, f"if {n} > (end - pos) // {min_size}:")
        emit(body + 1, f"raise length_overrun({where_lit} + ' (array)', {n}, end - pos)")
        if spec.kind in FIXED_KINDS:
            size, code = FIXED_KINDS[spec.kind]
            # Short arrays (the usual replica lists) use a prebuilt Struct per length.
            table = self.src.bind("ARRAYS", wire.small_array_structs(code))
            emit(body, f"if {n} < {wire.SMALL_ARRAY_LIMIT}:")
            emit(body + 1, f"{target} = {table}[{n}].unpack_from(buf, pos)")
            emit(body, "else:")
            emit(body + 1, f"{target} = unpack_array({code!r}, {n}, buf, pos)")
            emit(body, f"pos += {n} * {size}")
            if spec.kind == "uuid":
                emit(body, f"{target} = tuple(map(uuid_from_bytes, {target}))")
            return
        items = self.src.fresh("items")
        item = self.src.fresh("item")
        emit(body, f"{items} = []")
        emit(body, f"for _ in range({n}):")
        self._read_scalar(_element_spec(spec), item, body + 1, where + "[]")
        emit(body + 1, f"{items}.append({item})")
        emit(body, f"{target} = tuple({items})")

    def _read_value(self, spec: FieldSpec, target: str, indent: int) -> None:
        where = f"{self.owner}.{spec.name}"
        if spec.is_array:
            self._read_array(spec, target, indent, where)
        else:
            self._read_scalar(spec, target, indent, where)

    # -- whole struct ------------------------------------------------------------------

    def _fixed_runs(self, specs: tuple[FieldSpec, ...]) -> list[list[FieldSpec] | FieldSpec]:
        """Group consecutive fixed-size fields so each run is one unpack_from."""
        groups: list[list[FieldSpec] | FieldSpec] = []
        for spec in specs:
            if spec.fixed:
                if groups and isinstance(groups[-1], list):
                    groups[-1].append(spec)
                else:
                    groups.append([spec])
            else:
                groups.append(spec)
        return groups

    def _emit_fixed_run(self, run: list[FieldSpec], names: dict[str, str], indent: int) -> None:
        fmt = ">" + "".join(FIXED_KINDS[s.kind][1] for s in run)
        unpacker = self.src.bind("S", struct.Struct(fmt))
        targets = ", ".join(names[s.name] for s in run)
        self.src.emit(indent, f"{targets}, = {unpacker}.unpack_from(buf, pos)")
        self.src.emit(indent, f"pos += {struct.calcsize(fmt)}")
        for spec in run:
            if spec.kind == "uuid":
                var = names[spec.name]
                self.src.emit(indent, f"{var} = uuid_from_bytes({var})")

    def _tag_decoder(self, spec: FieldSpec) -> Decoder:
        """A standalone decoder for one tagged field's value."""
        if spec.kind == "entity" and not spec.is_array and not spec.nullable:
            return decoder_for(spec.entity)  # type: ignore[arg-type]
        writer = _DecoderWriter(self.cls)
        writer.src.emit(0, "def decode_tag(buf, pos, end):")
        writer.src.emit(1, "try:")
        writer._read_value(spec, "value", 2)
        writer.src.emit(2, "return value, pos")
        writer._emit_handlers(1)
        return writer.src.compile("decode_tag")  # type: ignore[no-any-return]

    def _emit_handlers(self, indent: int) -> None:
        owner = repr(self.owner)
        self.src.emit(indent, "except (IndexError, struct_error):")
        self.src.emit(indent + 1, f"raise truncated({owner}, pos) from None")
        self.src.emit(indent, "except UnicodeDecodeError:")
        self.src.emit(indent + 1, f"raise not_utf8({owner}, pos) from None")

    def build(self) -> Decoder:
        cls = self.cls
        src = self.src
        specs = field_specs(cls)
        names = {spec.name: f"v_{spec.name}" for spec in specs}
        src.emit(0, "def decode(buf, pos, end):")
        src.emit(1, "try:")
        for group in self._fixed_runs(body_specs(cls)):
            if isinstance(group, list):
                self._emit_fixed_run(group, names, 2)
            else:
                self._read_value(group, names[group.name], 2)
        if self.flexible:
            self._emit_tag_buffer(tagged_specs(cls), names, 2)
        self._emit_construction(specs, names, 2)
        src.emit(2, "return obj, pos")
        self._emit_handlers(1)
        return src.compile("decode")  # type: ignore[no-any-return]

    def _emit_construction(
        self, specs: tuple[FieldSpec, ...], names: dict[str, str], indent: int
    ) -> None:
        src = self.src
        mirror = mutable_mirror(self.cls)
        if mirror is None:
            src.emit(indent, f"obj = new({src.bind('CLS', self.cls)})")
            for spec, setter in zip(specs, slot_setters(self.cls), strict=True):
                src.emit(indent, f"{src.bind('SET', setter)}(obj, {names[spec.name]})")
            return
        src.emit(indent, f"obj = new({src.bind('MIRROR', mirror)})")
        for spec in specs:
            src.emit(indent, f"obj.{spec.name} = {names[spec.name]}")
        src.emit(indent, f"obj.__class__ = {src.bind('CLS', self.cls)}")

    def _emit_tag_buffer(
        self, tagged: tuple[FieldSpec, ...], names: dict[str, str], indent: int
    ) -> None:
        src = self.src
        decoders = {spec.tag: self._tag_decoder(spec) for spec in tagged}
        defaults = {spec.name: src.bind("DEFAULT", spec.default) for spec in tagged}
        # Nearly every struct arrives with an empty tag buffer: test for it inline.
        src.emit(indent, "if buf[pos] == 0:")
        src.emit(indent + 1, "pos += 1")
        for spec in tagged:
            src.emit(indent + 1, f"{names[spec.name]} = {defaults[spec.name]}")
        src.emit(indent, "else:")
        table = src.bind("TAGS", decoders)
        src.emit(
            indent + 1,
            f"found, pos = read_tagged_fields(buf, pos, end, {table}, {self.owner!r})",
        )
        for spec in tagged:
            src.emit(
                indent + 1, f"{names[spec.name]} = found.get({spec.tag}, {defaults[spec.name]})"
            )


@cache
def decoder_for(cls: type) -> Decoder:
    """The compiled ``decode(buf, pos, end) -> (obj, pos)`` function of a kio class."""
    return _DecoderWriter(cls).build()


def decode(cls: type, data: Any, pos: int = 0) -> tuple[Any, int]:
    """Decode one ``cls`` object from ``data`` (bytes, bytearray or memoryview) starting
    at ``pos``. Returns the object and the position after it; bytes after it are left
    for the caller (never an error here).

    ``records`` fields come back as memoryview slices of ``data``; every other field is
    a plain Python value (see field_specs for the representation).
    """
    return decoder_for(cls)(data, pos, len(data))
