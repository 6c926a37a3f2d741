"""Every request and response class kio knows, cross-checked against kio's own codec.

For objects kio can write: our encoder's bytes equal kio's writer's bytes, our decoder
reads kio's bytes into the same object kio's native reader returns, and re-encoding
what we decoded gives the same bytes again.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from protocol_test_support import (
    ALL_CLASSES,
    class_id,
    entity_strategy,
    kio_read,
    kio_write,
    populated,
)

from kipproducer.protocol import decode, encode, normalize
from kipproducer.protocol.field_specs import field_specs


def assert_matches_kio(cls: type, obj: Any) -> None:
    expected = kio_write(cls, obj)
    assert bytes(encode(obj)) == expected

    decoded, end = decode(cls, expected)
    assert end == len(expected)
    assert type(decoded) is cls
    assert decoded == normalize(obj)
    assert decoded == normalize(kio_read(cls, expected))
    assert bytes(encode(decoded)) == expected


@pytest.mark.parametrize("cls", ALL_CLASSES, ids=class_id)
def test_populated_instance_matches_kio(cls: type) -> None:
    assert_matches_kio(cls, populated(cls))


@pytest.mark.parametrize("cls", ALL_CLASSES, ids=class_id)
def test_generated_instances_match_kio(cls: type) -> None:
    @settings(
        max_examples=4,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(entity_strategy(cls))
    def check(obj: Any) -> None:
        assert_matches_kio(cls, obj)

    check()


# The classes the project's broker and client exchange most get many more examples.
HOT_CLASSES = [
    cls
    for cls in ALL_CLASSES
    if cls.__api_key__ in (0, 1, 2, 3, 18, 19, 22)  # type: ignore[attr-defined]
    and cls.__version__ >= 7  # type: ignore[attr-defined]
]


@settings(max_examples=150, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_hot_classes_match_kio(data: st.DataObject) -> None:
    cls = data.draw(st.sampled_from(HOT_CLASSES))
    assert_matches_kio(cls, data.draw(entity_strategy(cls)))


def test_every_class_has_a_sample_with_every_tagged_field_set() -> None:
    # Guard for the populated() generator: tagged fields really are written.
    tagged = [cls for cls in ALL_CLASSES if any(s.tag is not None for s in field_specs(cls))]
    assert tagged, "kio should have classes with tagged fields"
    for cls in tagged:
        obj = populated(cls)
        for spec in field_specs(cls):
            if spec.tag is not None:
                assert getattr(obj, spec.name) != spec.default, (cls, spec.name)


@pytest.mark.parametrize("cls", ALL_CLASSES, ids=class_id)
def test_any_buffer_type_decodes_alike(cls: type) -> None:
    payload = bytes(encode(populated(cls)))
    expected, _ = decode(cls, payload)
    framed = b"\xaa\xbb" + payload + b"\xcc"
    for buffer in (bytearray(payload), memoryview(payload), memoryview(framed)[2:-1]):
        assert decode(cls, buffer) == (expected, len(payload))
    # Decoding from an offset inside a larger buffer.
    assert decode(cls, framed, 2) == (expected, len(payload) + 2)
