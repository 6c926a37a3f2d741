"""The kipproducer wire extensions (docs/protocol.md), as constants and kio classes.

* Feature names advertised in ApiVersionsResponse v3+ SupportedFeatures (tag 0).
* ``ProduceMode``: ProduceRequest v9..v13 top-level tagged field 10000, int8, default 0.
* ``LogEndOffset``: ProduceResponse v9..v13 per-partition tagged field 10000, int64,
  written only when set (``None`` = absent).

The extended classes subclass kio's generated ones and add the field with kio-style
metadata (KIP-WIRE §7), so they stay instances of the kio classes, and kio's own
reader/writer as well as this package's codec handle them. ProduceResponse needs its
topic and top-level classes re-declared too, so that their arrays hold the extended
partition class.
"""

from __future__ import annotations

import dataclasses
from enum import IntEnum
from typing import Any, Final, NamedTuple

import kio.index

FEATURE_PRODUCE_OFFSETS: Final = "kip.produce.offsets"
"""ProduceMode USE_OFFSETS (KIP-391)."""
FEATURE_PRODUCE_CONDITIONAL: Final = "kip.produce.conditional"
"""ProduceMode EXPECTED_OFFSETS (KIP-27)."""
FEATURE_MIN_VERSION: Final = 1
FEATURE_MAX_VERSION: Final = 2
"""Both features are advertised with MinVersion 1 and MaxVersion 2 (KIP-WIRE §1); version 2
adds several batches of one partition in one request (§9)."""
MULTI_BATCH_VERSION: Final = 2
"""The feature version from which a partition may carry several batches (KIP-WIRE §9)."""

PRODUCE_MODE_TAG: Final = 10000
LOG_END_OFFSET_TAG: Final = 10000
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


def _extend_produce_request(version: int) -> type:
    base = kio.index.load_request_schema(0, version)
    mode_field = dataclasses.field(
        default=0, metadata={"kafka_type": "int8", "tag": PRODUCE_MODE_TAG}
    )
    return _subclass(base, [("produce_mode", int, mode_field)])


def _extend_produce_response(version: int) -> ProduceResponseClasses:
    base = kio.index.load_response_schema(0, version)
    module = __import__(base.__module__, fromlist=["_"])
    leo_field = dataclasses.field(
        default=None, metadata={"kafka_type": "int64", "tag": LOG_END_OFFSET_TAG}
    )
    partition = _subclass(
        module.PartitionProduceResponse, [("log_end_offset", int | None, leo_field)]
    )
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
"""ProduceRequest v9..v13 with ``produce_mode`` (tag 10000)."""

PRODUCE_RESPONSE_CLASSES: Final[dict[int, ProduceResponseClasses]] = {
    v: _extend_produce_response(v) for v in EXTENDED_PRODUCE_VERSIONS
}
"""ProduceResponse v9..v13 whose partitions carry ``log_end_offset`` (tag 10000)."""


def produce_mode_of(request: Any) -> int:
    """The ProduceMode of a decoded ProduceRequest of any version (0 below v9)."""
    return getattr(request, "produce_mode", 0)
