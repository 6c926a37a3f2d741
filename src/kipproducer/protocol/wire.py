"""Small wire primitives shared by the generated encoders and decoders.

The generated code inlines the common cases (a one-byte varint, a fixed-size run of
fields); these helpers are the slower, rarer paths and the error constructors.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any, Final

from .errors import ProtocolError

ZERO_UUID_BYTES: Final = bytes(16)
_new_uuid = object.__new__
_set_uuid = object.__setattr__
_UUID_SAFE_UNKNOWN: Final = uuid.SafeUUID.unknown

INT8: Final = struct.Struct(">b")
INT16: Final = struct.Struct(">h")
INT32: Final = struct.Struct(">i")
UINT32: Final = struct.Struct(">I")

# Largest array whose Struct is kept; longer arrays build a one-off Struct.
_ARRAY_STRUCT_CACHE_LIMIT: Final = 4096
_array_structs: dict[tuple[str, int], struct.Struct] = {}


# -- varints ---------------------------------------------------------------------------


def uvarint_tail(buf: Any, pos: int, first: int) -> tuple[int, int]:
    """Finish an unsigned varint whose first byte ``first`` (already read, continuation
    bit set) came from ``buf[pos - 1]``. At most 5 bytes, as Kafka's readUnsignedVarint."""
    value = first & 0x7F
    shift = 7
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift >= 35:
            raise ProtocolError(f"varint too long (more than 5 bytes) at byte {pos - 5}")


def read_uvarint(buf: Any, pos: int) -> tuple[int, int]:
    first = buf[pos]
    if first < 0x80:
        return first, pos + 1
    return uvarint_tail(buf, pos + 1, first)


_SMALL_UVARINTS: Final = tuple(bytes((n,)) for n in range(128))


def uvarint_bytes(value: int) -> bytes:
    if value < 128:
        return _SMALL_UVARINTS[value]
    if value < 0 or value > 0xFFFFFFFF:
        raise ValueError(f"unsigned varint out of range: {value}")
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# -- arrays of fixed-size values --------------------------------------------------------


def _array_struct(code: str, count: int) -> struct.Struct:
    key = (code, count)
    found = _array_structs.get(key)
    if found is None:
        found = struct.Struct(f">{count}{code}" if code != "16s" else ">" + "16s" * count)
        if count <= _ARRAY_STRUCT_CACHE_LIMIT:
            _array_structs[key] = found
    return found


SMALL_ARRAY_LIMIT: Final = 32


@cache
def small_array_structs(code: str) -> tuple[struct.Struct, ...]:
    """Structs for arrays of 0 .. SMALL_ARRAY_LIMIT-1 values of one struct code."""
    return tuple(_array_struct(code, count) for count in range(SMALL_ARRAY_LIMIT))


def unpack_array(code: str, count: int, buf: Any, pos: int) -> tuple[Any, ...]:
    if count == 0:
        return ()
    return _array_struct(code, count).unpack_from(buf, pos)


def pack_array(code: str, values: Sequence[Any]) -> bytes:
    return _array_struct(code, len(values)).pack(*values)


# -- uuids -----------------------------------------------------------------------------


def uuid_from_bytes(raw: bytes) -> uuid.UUID | None:
    """kio's rule: the all-zero uuid reads as None."""
    if raw == ZERO_UUID_BYTES:
        return None
    # Skips UUID.__init__'s argument parsing; the two slots are all a UUID holds.
    value = _new_uuid(uuid.UUID)
    _set_uuid(value, "int", int.from_bytes(raw, "big"))
    _set_uuid(value, "is_safe", _UUID_SAFE_UNKNOWN)
    return value  # type: ignore[no-any-return]


def uuid_to_bytes(value: Any) -> bytes:
    if value is None:
        return ZERO_UUID_BYTES
    if isinstance(value, uuid.UUID):
        return value.bytes
    if isinstance(value, bytes | bytearray | memoryview) and len(value) == 16:
        return bytes(value)
    raise TypeError(f"expected a UUID, None or 16 bytes, got {value!r}")


# -- tagged fields (KIP-482) ------------------------------------------------------------

TagDecoder = Callable[[Any, int, int], tuple[Any, int]]


def read_tagged_fields(
    buf: Any, pos: int, end: int, decoders: dict[int, TagDecoder], owner: str
) -> tuple[dict[int, Any], int]:
    """Read a tag buffer; decode the tags in ``decoders`` and skip every other tag."""
    count, pos = read_uvarint(buf, pos)
    if count > (end - pos) // 2:  # each tagged field takes at least 2 bytes
        raise ProtocolError(f"{owner}: {count} tagged fields cannot fit in {end - pos} bytes")
    found: dict[int, Any] = {}
    for _ in range(count):
        tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        stop = pos + size
        if stop > end:
            raise ProtocolError(
                f"{owner}: tagged field {tag} of {size} bytes overruns the buffer"
            )
        decode = decoders.get(tag)
        if decode is not None:
            value, after = decode(buf, pos, stop)
            if after > stop:
                raise ProtocolError(f"{owner}: tagged field {tag} is longer than its size")
            found[tag] = value
        pos = stop
    return found, pos


TagEntry = tuple[int, Callable[[bytearray, Any, Any], None], Any]


def write_tagged_fields(buf: bytearray, entries: list[TagEntry]) -> None:
    buf += uvarint_bytes(len(entries))
    for tag, encode, value in entries:
        scratch = bytearray()
        encode(scratch, None, value)  # tagged values never spill: they are small
        buf += uvarint_bytes(tag)
        buf += uvarint_bytes(len(scratch))
        buf += scratch


# -- error constructors (messages name what was wrong and where) ------------------------


def truncated(owner: str, pos: int) -> ProtocolError:
    return ProtocolError(f"truncated buffer while decoding {owner} (at byte {pos})")


def not_utf8(owner: str, pos: int) -> ProtocolError:
    return ProtocolError(f"{owner}: string is not UTF-8 (near byte {pos})")


def null_not_allowed(where: str) -> ProtocolError:
    return ProtocolError(f"{where}: null for a non-nullable field")


def negative_length(where: str, length: int) -> ProtocolError:
    return ProtocolError(f"{where}: negative length {length}")


def length_overrun(where: str, length: int, remaining: int) -> ProtocolError:
    return ProtocolError(f"{where}: length {length} exceeds the {remaining} bytes remaining")
