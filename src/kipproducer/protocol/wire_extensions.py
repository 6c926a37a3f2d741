"""The kipproducer wire extensions (docs/protocol.md), as constants and kio classes.

* Feature names advertised in ApiVersionsResponse v3+ SupportedFeatures (tag 0).
* ``ProduceMode``: ProduceRequest v9..v13 top-level tagged field 10000, int8, default 0.
* ``LogEndOffset``: ProduceResponse v9..v13 per-partition tagged field 10000, int64,
  written only when set (``None`` = absent).

The extended classes subclass kio's generated ones and add the field with kio-style
metadata (docs/protocol.md §7), so they stay instances of the kio classes, and kio's own
reader/writer as well as this package's codec handle them. ProduceResponse needs its
topic and top-level classes re-declared too, so that their arrays hold the extended
partition class.
"""

from __future__ import annotations

import dataclasses
import struct
from enum import IntEnum
from typing import Any, Final, NamedTuple

import kio.index

FEATURE_PRODUCE_OFFSETS: Final = "kip.produce.offsets"
"""ProduceMode USE_OFFSETS (KIP-391)."""
FEATURE_PRODUCE_CONDITIONAL: Final = "kip.produce.conditional"
"""ProduceMode EXPECTED_OFFSETS (KIP-27)."""
FEATURE_MIN_VERSION: Final = 1
FEATURE_MAX_VERSION: Final = 2
"""Both features are advertised with MinVersion 1 and MaxVersion 2 (docs/protocol.md §1); version 2
adds several batches of one partition in one request (§9)."""
MULTI_BATCH_VERSION: Final = 2
"""The feature version from which a partition may carry several batches (docs/protocol.md §9)."""

FEATURE_PRODUCE_KEY_CONDITIONAL: Final = "kip.produce.key.conditional"
"""Per-key conditions on ProduceMode ASSIGN (docs/protocol.md §10), from KIP-WIRE version 3;
advertised with MinVersion 1 and MaxVersion 1."""
KEY_CONDITIONAL_WIRE_VERSION: Final = 3
"""The KIP-WIRE version that adds per-key conditions (docs/protocol.md §10)."""

PRODUCE_MODE_TAG: Final = 10000
LOG_END_OFFSET_TAG: Final = 10000
KEY_CONDITIONS_TAG: Final = 10001
"""ProduceRequest partition tag: the partition's per-key conditions (docs/protocol.md §10)."""
KEY_CONFLICTS_TAG: Final = 10001
"""ProduceResponse partition tag: the records whose key condition failed (docs/protocol.md §10)."""
EXTENDED_PRODUCE_VERSIONS: Final = range(9, 14)
"""Only flexible Produce versions can carry tagged fields."""


class ProduceMode(IntEnum):
    ASSIGN = 0
    """Stock behaviour: the broker assigns offsets."""
    USE_OFFSETS = 1
    """KIP-391: each batch's baseOffset is the offset of its first record."""
    EXPECTED_OFFSETS = 2
    """KIP-27: each batch's baseOffset is the offset the client expects (-1: none)."""


class ProduceResponseClasses(NamedTuple):
    response: type
    topic: type
    partition: type


def _subclass(base: type, new_fields: list[tuple[str, Any, dataclasses.Field[Any]]]) -> type:
    cls = dataclasses.make_dataclass(
        base.__name__,
        new_fields,
        bases=(base,),
        frozen=True,
        slots=True,
        kw_only=True,
        namespace={"__doc__": f"{base.__module__}.{base.__qualname__} + kipproducer extension"},
    )
    cls.__module__ = __name__
    cls.__qualname__ = f"{base.__name__}V{base.__version__}"  # type: ignore[attr-defined]
    return cls


def _bytes_tag(tag: int) -> dataclasses.Field[Any]:
    return dataclasses.field(default=None, metadata={"kafka_type": "bytes", "tag": tag})


def _extend_produce_request(version: int) -> type:
    base = kio.index.load_request_schema(0, version)
    module = __import__(base.__module__, fromlist=["_"])
    mode_field = dataclasses.field(
        default=0, metadata={"kafka_type": "int8", "tag": PRODUCE_MODE_TAG}
    )
    partition = _subclass(module.PartitionProduceData,
                          [("key_conditions", bytes | None, _bytes_tag(KEY_CONDITIONS_TAG))])
    topic = _subclass(
        module.TopicProduceData,
        [("partition_data", tuple[partition, ...], dataclasses.field())],  # type: ignore[valid-type]
    )
    return _subclass(base, [
        ("topic_data", tuple[topic, ...], dataclasses.field()),  # type: ignore[valid-type]
        ("produce_mode", int, mode_field)])


def _extend_produce_response(version: int) -> ProduceResponseClasses:
    base = kio.index.load_response_schema(0, version)
    module = __import__(base.__module__, fromlist=["_"])
    leo_field = dataclasses.field(
        default=None, metadata={"kafka_type": "int64", "tag": LOG_END_OFFSET_TAG}
    )
    partition = _subclass(
        module.PartitionProduceResponse, [
            ("log_end_offset", int | None, leo_field),
            ("key_conflicts", bytes | None, _bytes_tag(KEY_CONFLICTS_TAG))])
    # Re-declare the array fields with the extended element type; dataclasses keeps the
    # base field order when a subclass redefines a field.
    topic = _subclass(
        module.TopicProduceResponse,
        [("partition_responses", tuple[partition, ...], dataclasses.field())],  # type: ignore[valid-type]
    )
    response = _subclass(
        base, [("responses", tuple[topic, ...], dataclasses.field())]  # type: ignore[valid-type]
    )
    return ProduceResponseClasses(response, topic, partition)


PRODUCE_REQUEST_CLASSES: Final[dict[int, type]] = {
    v: _extend_produce_request(v) for v in EXTENDED_PRODUCE_VERSIONS
}
"""ProduceRequest v9..v13 with ``produce_mode`` (tag 10000) and, per partition,
``key_conditions`` (tag 10001)."""

PRODUCE_RESPONSE_CLASSES: Final[dict[int, ProduceResponseClasses]] = {
    v: _extend_produce_response(v) for v in EXTENDED_PRODUCE_VERSIONS
}
"""ProduceResponse v9..v13 whose partitions carry ``log_end_offset`` (tag 10000) and
``key_conflicts`` (tag 10001)."""


def produce_mode_of(request: Any) -> int:
    """The ProduceMode of a decoded ProduceRequest of any version (0 below v9)."""
    return getattr(request, "produce_mode", 0)


# ---- per-key conditions (docs/protocol.md §10) ----------------------------------------------
# The two tags hold compact bytes with a fixed big-endian layout, read and written here only.

_I32: Final = struct.Struct(">i")
_CONDITIONS_HEAD: Final = struct.Struct(">ii")  # PartitionCount, Count
_ENTRY: Final = struct.Struct(">iq")  # RecordIndex, offset


class KeyConditionsFormatError(ValueError):
    """A KeyConditions or KeyConflicts tag whose bytes do not follow docs/protocol.md §10."""


def encode_key_conditions(partition_count: int, conditions: list[tuple[int, int]]) -> bytes:
    """KeyConditions: the topic's partition count the client partitioned with, then
    (record index, expected offset) per conditional record, record indexes rising."""
    out = bytearray(_CONDITIONS_HEAD.pack(partition_count, len(conditions)))
    for index, expected in conditions:
        out += _ENTRY.pack(index, expected)
    return bytes(out)


def decode_key_conditions(data: bytes) -> tuple[int, list[tuple[int, int]]]:
    """(partition count, [(record index, expected offset)]) of a KeyConditions tag."""
    if len(data) < _CONDITIONS_HEAD.size:
        raise KeyConditionsFormatError(
            f"KeyConditions of {len(data)} bytes: at least {_CONDITIONS_HEAD.size} needed")
    partition_count, count = _CONDITIONS_HEAD.unpack_from(data)
    return partition_count, _entries(data, _CONDITIONS_HEAD.size, count, "KeyConditions")


def encode_key_conflicts(conflicts: list[tuple[int, int]]) -> bytes:
    """KeyConflicts: (record index, actual last offset) per record whose condition failed."""
    out = bytearray(_I32.pack(len(conflicts)))
    for index, actual in conflicts:
        out += _ENTRY.pack(index, actual)
    return bytes(out)


def decode_key_conflicts(data: bytes) -> list[tuple[int, int]]:
    """[(record index, actual offset)] of a KeyConflicts tag."""
    if len(data) < _I32.size:
        raise KeyConditionsFormatError(f"KeyConflicts of {len(data)} bytes: at least 4 needed")
    return _entries(data, _I32.size, _I32.unpack_from(data)[0], "KeyConflicts")


def _entries(data: bytes, pos: int, count: int, owner: str) -> list[tuple[int, int]]:
    if count < 0 or len(data) != pos + count * _ENTRY.size:
        raise KeyConditionsFormatError(
            f"{owner} says {count} entries of {_ENTRY.size} bytes but holds "
            f"{len(data) - pos} bytes after its head")
    return list(_ENTRY.iter_unpack(memoryview(data)[pos:]))
