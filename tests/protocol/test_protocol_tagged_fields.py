"""Unknown tagged fields are skipped at every nesting level; trailing bytes tolerated.

To put unknown tags everywhere, each flexible class gets a derived "peer" class (the
KIP-WIRE §7 mechanism) with two extra tagged fields — tag 77 and tag 20000, numbers
no kio class uses — in every struct down the tree. A peer object encodes with those
tags in every tag buffer; decoding with the stock class must give the original object.
"""

from __future__ import annotations

import dataclasses
from functools import cache
from typing import Any

import pytest
from protocol_test_support import ALL_CLASSES, class_id, kio_read, populated

from kipproducer.protocol import (
    ProtocolError,
    decode,
    decode_request,
    encode,
    encode_request_frame,
    normalize,
    request_class,
)
from kipproducer.protocol.field_specs import field_specs
from kipproducer.protocol.wire import uvarint_bytes

LOW_TAG, HIGH_TAG = 77, 20000


@cache
def peer_class(cls: type) -> type:
    """``cls`` plus two unknown tagged fields, recursively in every flexible struct."""
    low = {"kafka_type": "int32", "tag": LOW_TAG}
    high = {"kafka_type": "string", "tag": HIGH_TAG}
    extra: list[tuple[str, Any, Any]] = [
        ("zz_low", int, dataclasses.field(default=0, metadata=low)),
        ("zz_high", str, dataclasses.field(default="", metadata=high)),
    ]
    originals = {f.name: f for f in dataclasses.fields(cls)}
    for spec in field_specs(cls):
        if spec.kind != "entity":
            continue
        child: Any = peer_class(spec.entity)  # type: ignore[arg-type]
        tp: Any = tuple[child, ...] if spec.is_array else child
        if spec.nullable:
            tp = tp | None
        original = originals[spec.name]
        kwargs: dict[str, Any] = {"metadata": original.metadata}
        if original.default is not dataclasses.MISSING:
            kwargs["default"] = original.default
        extra.append((spec.name, tp, dataclasses.field(**kwargs)))
    return dataclasses.make_dataclass(
        cls.__name__, extra, bases=(cls,), frozen=True, slots=True, kw_only=True
    )


def to_peer(obj: Any) -> Any:
    cls = type(obj)
    values: dict[str, Any] = {}
    for spec in field_specs(cls):
        value = getattr(obj, spec.name)
        if spec.kind == "entity" and value is not None:
            value = tuple(map(to_peer, value)) if spec.is_array else to_peer(value)
        values[spec.name] = value
    return peer_class(cls)(**values, zz_low=123456, zz_high="unknown to you")


FLEXIBLE_CLASSES = [cls for cls in ALL_CLASSES if cls.__flexible__]  # type: ignore[attr-defined]


@pytest.mark.parametrize("cls", FLEXIBLE_CLASSES, ids=class_id)
def test_unknown_tags_at_every_level_are_skipped(cls: type) -> None:
    original = populated(cls)
    with_unknown_tags = bytes(encode(to_peer(original)))
    plain = bytes(encode(original))
    assert len(with_unknown_tags) > len(plain)
    assert uvarint_bytes(HIGH_TAG) in with_unknown_tags

    decoded, end = decode(cls, with_unknown_tags)
    assert end == len(with_unknown_tags)
    assert decoded == normalize(original)


def test_kio_itself_fails_on_unknown_tags() -> None:
    # Why the layer exists: kio's native reader raises instead of skipping.
    cls = request_class(3, 12)
    payload = bytes(encode(to_peer(populated(cls))))
    with pytest.raises(KeyError):
        kio_read(cls, payload)


def test_known_tag_with_short_size_is_a_protocol_error() -> None:
    # ProduceRequest v9 top level: produce_mode (int8) announced with size 0, followed by
    # nothing: the decoder must not read past the tag.
    cls = request_class(0, 9)
    body = bytes(encode(cls(acks=1, timeout=1, topic_data=(), produce_mode=0)))
    assert body.endswith(b"\x00")
    forged = body[:-1] + b"\x01" + uvarint_bytes(10000) + b"\x00"
    with pytest.raises(ProtocolError, match="truncated"):
        decode(cls, forged)
    # With bytes after it, the read would succeed: the size check must catch it.
    with pytest.raises(ProtocolError, match="tagged field 10000 is longer than its size"):
        decode(cls, forged + b"\x02\x02")


def test_tag_size_beyond_buffer_is_a_protocol_error() -> None:
    cls = request_class(0, 9)
    body = bytes(encode(cls(acks=1, timeout=1, topic_data=())))
    forged = body[:-1] + b"\x01" + uvarint_bytes(5) + uvarint_bytes(1000) + b"xx"
    with pytest.raises(ProtocolError, match="overruns"):
        decode(cls, forged)


def test_tag_count_beyond_buffer_is_a_protocol_error() -> None:
    cls = request_class(0, 9)
    body = bytes(encode(cls(acks=1, timeout=1, topic_data=())))
    forged = body[:-1] + uvarint_bytes(2**31 - 1)
    with pytest.raises(ProtocolError, match="cannot fit"):
        decode(cls, forged)


@pytest.mark.parametrize("cls", [c for c in ALL_CLASSES if c.__type__.name == "request"],
                         ids=class_id)
def test_trailing_bytes_in_a_request_are_ignored(cls: type) -> None:
    request = populated(cls)
    frame = bytes(encode_request_frame(5, "client", request))[4:]
    for trailer in (b"\x00", b"\x00\x00\x00", b"\xff\xff\xff\xff\x01"):
        header, body = decode_request(frame + trailer)
        assert header.correlation_id == 5
        assert body == normalize(request)


# librdkafka 2.16 Metadata "all topics" requests (AdminClient.list_topics()), captured
# from the real client in test_protocol_real_clients (frames without the size prefix).
# After the body it sends a 4-byte placeholder: at v9/v10 its first byte lands where the
# body's tag buffer is (one tag 0 of size 0, which kio fails on), at v11+ it leaves
# 3 unread trailing bytes.
LIBRDKAFKA_ALL_TOPICS_METADATA = {
    9: "0003000900000003000772646b61666b61000000000001000000",
    10: "0003000a00000003000772646b61666b61000000000001000000",
    11: "0003000b00000003000772646b61666b610000000000010000",
    12: "0003000c00000003000772646b61666b610000000000010000",
    13: "0003000d00000003000772646b61666b610000000000010000",
}


@pytest.mark.parametrize("version", sorted(LIBRDKAFKA_ALL_TOPICS_METADATA))
def test_librdkafka_all_topics_metadata_request_decodes(version: int) -> None:
    frame = bytes.fromhex(LIBRDKAFKA_ALL_TOPICS_METADATA[version])
    header, body = decode_request(frame)
    assert (header.api_key, header.api_version, header.client_id) == (3, version, "rdkafka")
    assert body.topics is None
    assert body.allow_auto_topic_creation is False
