"""Compile kio entity classes into encoder functions, once per class.

Each class gets one generated function ``encode(buf, spills, obj)`` that appends the
wire form of ``obj`` to the bytearray ``buf``: a run of fixed-size fields is one
``Struct.pack``, short lengths are single appended bytes, tagged fields are written
only when they differ from their default (sorted by tag).

Large ``records``/``bytes`` values need not be copied: when ``spills`` is a list, a
value of at least ``SPILL_MIN_BYTES`` is not appended but recorded as
``(offset in buf, value)``, and :func:`assemble_parts` later interleaves it with slices
of ``buf`` into a list of buffers for ``writelines``/``sendmsg``. With ``spills=None``
everything is appended to ``buf``.

The generated code does no validation of its own: a bad value (None where a value is
required, out-of-range int, wrong type) fails inside ``struct.pack`` / ``len`` / an
attribute access, and :func:`encode_into` then runs :func:`validation.validate` to turn
that into a :class:`ProtocolError` naming the field path.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import replace
from functools import cache
from typing import Any, Final

from . import wire
from .codegen import GeneratedSource
from .errors import ProtocolError
from .field_specs import (
    FIXED_KINDS,
    TIME_KINDS,
    FieldSpec,
    body_specs,
    tagged_specs,
    to_wire_millis,
)

Encoder = Callable[[bytearray, "list[tuple[int, Any]] | None", Any], None]

SPILL_MIN_BYTES: Final = 64 * 1024
"""Blobs at least this large are passed through by reference in the *_parts APIs."""

_BASE_NAMESPACE: dict[str, Any] = {
    "to_ms": to_wire_millis,
    "uuid_bytes": wire.uuid_to_bytes,
    "uvarint_bytes": wire.uvarint_bytes,
    "pack_array": wire.pack_array,
    "write_tagged_fields": wire.write_tagged_fields,
    "INT16": wire.INT16,
    "INT32": wire.INT32,
    "SPILL_MIN": SPILL_MIN_BYTES,
    "len": len,
}


class _EncoderWriter(GeneratedSource):
    def __init__(self, cls: type) -> None:
        version = cls.__version__  # type: ignore[attr-defined]
        super().__init__(_BASE_NAMESPACE, f"encoder of {cls.__name__} v{version}")
        self.cls = cls
        self.flexible: bool = cls.__flexible__  # type: ignore[attr-defined]

    # -- value writers: each emits lines that write the value held in `var` -----------

    def _write_compact_length(self, indent: int, expr: str) -> None:
        """Write uvarint(expr); expr must be a simple variable or arithmetic on one."""
        var = self.fresh("length")
        self.emit(indent, f"{var} = {expr}")
        self.emit(indent, f"if {var} < 128:")
        self.emit(indent + 1, f"buf.append({var})")
        self.emit(indent, "else:")
        self.emit(indent + 1, f"buf += uvarint_bytes({var})")

    def _converted(self, spec: FieldSpec, expr: str) -> str:
        """Expression turning a fixed-kind value into what struct.pack takes."""
        if spec.kind == "uuid":
            return f"uuid_bytes({expr})"
        if spec.kind in TIME_KINDS:
            return f"to_ms({expr})"
        return expr

    def _write_fixed(self, spec: FieldSpec, var: str, indent: int) -> None:
        packer = self.bind("S", struct.Struct(">" + FIXED_KINDS[spec.kind][1]))
        if spec.kind in TIME_KINDS:
            # Plain int ms is the common case; only convert other representations.
            self.emit(indent, f"if {var}.__class__ is not int:")
            self.emit(indent + 1, f"{var} = to_ms({var})")
            self.emit(indent, f"buf += {packer}.pack({var})")
        else:
            self.emit(indent, f"buf += {packer}.pack({self._converted(spec, var)})")

    def _write_sized(self, spec: FieldSpec, var: str, indent: int, may_spill: bool) -> None:
        compact = self.flexible and not spec.legacy_string
        body = indent
        if spec.nullable:
            self.emit(indent, f"if {var} is None:")
            if compact:
                self.emit(indent + 1, "buf.append(0)")
            elif spec.kind == "string":
                self.emit(indent + 1, "buf += b'\\xff\\xff'")
            else:
                self.emit(indent + 1, "buf += b'\\xff\\xff\\xff\\xff'")
            self.emit(indent, "else:")
            body = indent + 1
        data = var
        if spec.kind == "string":
            data = self.fresh("encoded")
            self.emit(body, f"{data} = {var}.encode()")
        size = self.fresh("size")
        self.emit(body, f"{size} = len({data})")
        if compact:
            self._write_compact_length(body, f"{size} + 1")
        elif spec.kind == "string":
            self.emit(body, f"buf += INT16.pack({size})")
        else:
            self.emit(body, f"buf += INT32.pack({size})")
        if may_spill and spec.kind != "string":
            self.emit(body, f"if spills is not None and {size} >= SPILL_MIN:")
            self.emit(body + 1, f"spills.append((len(buf), {data}))")
            self.emit(body, "else:")
            self.emit(body + 1, f"buf += {data}")
        else:
            self.emit(body, f"buf += {data}")

    def _write_entity(self, spec: FieldSpec, var: str, indent: int) -> None:
        child = self.bind("E", encoder_for(spec.entity))  # type: ignore[arg-type]
        if spec.nullable:
            self.emit(indent, f"if {var} is None:")
            self.emit(indent + 1, "buf.append(0xFF)")
            self.emit(indent, "else:")
            self.emit(indent + 1, "buf.append(1)")
            self.emit(indent + 1, f"{child}(buf, spills, {var})")
        else:
            self.emit(indent, f"{child}(buf, spills, {var})")

    def _write_scalar(self, spec: FieldSpec, var: str, indent: int, may_spill: bool) -> None:
        if spec.kind in FIXED_KINDS:
            self._write_fixed(spec, var, indent)
        elif spec.kind == "entity":
            self._write_entity(spec, var, indent)
        else:
            self._write_sized(spec, var, indent, may_spill)

    def _write_array(self, spec: FieldSpec, var: str, indent: int) -> None:
        body = indent
        if spec.nullable:
            self.emit(indent, f"if {var} is None:")
            self.emit(indent + 1, "buf.append(0)" if self.flexible else
                      "buf += b'\\xff\\xff\\xff\\xff'")
            self.emit(indent, "else:")
            body = indent + 1
        count = self.fresh("count")
        self.emit(body, f"{count} = len({var})")
        if self.flexible:
            self._write_compact_length(body, f"{count} + 1")
        else:
            self.emit(body, f"buf += INT32.pack({count})")
        if spec.kind in FIXED_KINDS:
            code = FIXED_KINDS[spec.kind][1]
            self.emit(body, f"if {count}:")
            if spec.kind == "uuid" or spec.kind in TIME_KINDS:
                convert = "uuid_bytes" if spec.kind == "uuid" else "to_ms"
                self.emit(body + 1, f"buf += pack_array({code!r}, [{convert}(x) for x in {var}])")
            else:
                table = self.bind("ARRAYS", wire.small_array_structs(code))
                self.emit(body + 1, f"if {count} < {wire.SMALL_ARRAY_LIMIT}:")
                self.emit(body + 2, f"buf += {table}[{count}].pack(*{var})")
                self.emit(body + 1, "else:")
                self.emit(body + 2, f"buf += pack_array({code!r}, {var})")
            return
        item = self.fresh("item")
        self.emit(body, f"for {item} in {var}:")
        element = replace(spec, is_array=False, nullable=False, tag=None)
        self._write_scalar(element, item, body + 1, may_spill=False)

    def _write_value(self, spec: FieldSpec, var: str, indent: int, may_spill: bool) -> None:
        if spec.is_array:
            self._write_array(spec, var, indent)
        else:
            self._write_scalar(spec, var, indent, may_spill)

    # -- whole struct ------------------------------------------------------------------

    def _emit_fixed_run(self, run: list[FieldSpec], indent: int) -> None:
        fmt = ">" + "".join(FIXED_KINDS[s.kind][1] for s in run)
        packer = self.bind("S", struct.Struct(fmt))
        args = []
        for spec in run:
            if spec.kind in TIME_KINDS:
                var = self.fresh("t")
                self.emit(indent, f"{var} = obj.{spec.name}")
                self.emit(indent, f"if {var}.__class__ is not int:")
                self.emit(indent + 1, f"{var} = to_ms({var})")
                args.append(var)
            else:
                args.append(self._converted(spec, f"obj.{spec.name}"))
        self.emit(indent, f"buf += {packer}.pack({', '.join(args)})")

    def _tag_encoder(self, spec: FieldSpec) -> Encoder:
        if spec.kind == "entity" and not spec.is_array and not spec.nullable:
            return encoder_for(spec.entity)  # type: ignore[arg-type]
        writer = _EncoderWriter(self.cls)
        writer.emit(0, "def encode_tag(buf, spills, value):")
        writer._write_value(spec, "value", 1, may_spill=False)
        return writer.compile("encode_tag")  # type: ignore[no-any-return]

    def _emit_tag_buffer(self, tagged: tuple[FieldSpec, ...], indent: int) -> None:
        if not tagged:
            self.emit(indent, "buf.append(0)")
            return
        self.emit(indent, "tags = None")
        for spec in tagged:
            default = self.bind("DEFAULT", spec.default)
            encode = self.bind("TAG_ENCODER", self._tag_encoder(spec))
            var = self.fresh("tagged")
            # getattr with a default: an object of the stock kio class may be passed
            # where the extended class is declared; it simply has no extension fields.
            self.emit(indent, f"{var} = getattr(obj, {spec.name!r}, {default})")
            self.emit(indent, f"if {var} is not {default} and {var} != {default}:")
            self.emit(indent + 1, "if tags is None:")
            self.emit(indent + 2, "tags = []")
            self.emit(indent + 1, f"tags.append(({spec.tag}, {encode}, {var}))")
        self.emit(indent, "if tags is None:")
        self.emit(indent + 1, "buf.append(0)")
        self.emit(indent, "else:")
        self.emit(indent + 1, "write_tagged_fields(buf, tags)")

    def build(self) -> Encoder:
        cls = self.cls
        self.emit(0, "def encode(buf, spills, obj):")
        run: list[FieldSpec] = []
        for spec in body_specs(cls):
            if spec.fixed:
                run.append(spec)
                continue
            if run:
                self._emit_fixed_run(run, 1)
                run = []
            var = self.fresh("value")
            self.emit(1, f"{var} = obj.{spec.name}")
            self._write_value(spec, var, 1, may_spill=True)
        if run:
            self._emit_fixed_run(run, 1)
        if self.flexible:
            self._emit_tag_buffer(tagged_specs(cls), 1)
        self.emit(1, "return None")
        return self.compile("encode")  # type: ignore[no-any-return]


@cache
def encoder_for(cls: type) -> Encoder:
    """The compiled ``encode(buf, spills, obj)`` function of a kio class."""
    return _EncoderWriter(cls).build()


# Exceptions the generated code raises for a bad value (see module doc).
_VALUE_ERRORS: Final = (
    struct.error,
    TypeError,
    AttributeError,
    ValueError,
    OverflowError,
    UnicodeEncodeError,
)


def encode_into(
    buf: bytearray, obj: Any, spills: list[tuple[int, Any]] | None = None
) -> None:
    """Append the wire form of ``obj`` (a kio entity) to ``buf``.

    :raises ProtocolError: naming the offending field when ``obj`` cannot be encoded;
        ``buf`` and ``spills`` are then left as they were.
    """
    start = len(buf)
    spill_count = len(spills) if spills is not None else 0
    try:
        encoder_for(type(obj))(buf, spills, obj)
    except _VALUE_ERRORS as exc:
        del buf[start:]
        if spills is not None:
            del spills[spill_count:]
        raise _explain(obj, exc) from exc


def _explain(obj: Any, exc: BaseException) -> ProtocolError:
    from .validation import validate

    try:
        validate(obj)
    except ProtocolError as precise:
        return precise
    return ProtocolError(f"cannot encode {type(obj).__name__}: {exc}")


def encode(obj: Any) -> bytearray:
    """The wire form of ``obj`` as a new bytearray (no size prefix, no header)."""
    buf = bytearray()
    encode_into(buf, obj)
    return buf


def assemble_parts(buf: bytearray, spills: list[tuple[int, Any]]) -> list[Any]:
    """Interleave ``buf`` with the spilled blobs recorded by the encoder."""
    if not spills:
        return [buf]
    view = memoryview(buf)
    parts: list[Any] = []
    previous = 0
    for offset, blob in spills:
        if offset > previous:
            parts.append(view[previous:offset])
        parts.append(blob)
        previous = offset
    if previous < len(buf):
        parts.append(view[previous:])
    return parts
