"""kipproducer.compression.output_limit: every codec stops at the bound, exactly."""

from __future__ import annotations

import os

import cramjam
import pytest

from kipproducer import compression
from kipproducer.compression import DecompressedTooLarge, output_limit
from kipproducer.errors import CorruptRecordError

CODECS = [compression.GZIP, compression.SNAPPY, compression.LZ4, compression.ZSTD]
DATA = os.urandom(2000) * 100 + bytes(300_000)  # some of it incompressible, some not


@pytest.mark.parametrize("codec", CODECS)
def test_output_up_to_the_bound_is_returned_whole(codec: int) -> None:
    packed = compression.compress(codec, DATA)
    with output_limit(len(DATA)):
        assert compression.decompress(codec, packed) == DATA
    assert compression.decompress(codec, packed) == DATA  # the bound ends with the block


@pytest.mark.parametrize("codec", CODECS)
def test_one_byte_past_the_bound_is_refused(codec: int) -> None:
    packed = compression.compress(codec, DATA)
    with output_limit(len(DATA) - 1), pytest.raises(DecompressedTooLarge) as info:
        compression.decompress(codec, packed)
    assert info.value.rule == "decompressed_size"
    assert f"inflates past {len(DATA) - 1} bytes" in str(info.value)


@pytest.mark.parametrize("codec", CODECS)
def test_a_truncated_section_is_still_corrupt_not_too_large(codec: int) -> None:
    packed = compression.compress(codec, DATA)
    with output_limit(10 * len(DATA)), pytest.raises(CorruptRecordError) as info:
        compression.decompress(codec, packed[: len(packed) // 2])
    assert not isinstance(info.value, DecompressedTooLarge)


@pytest.mark.parametrize("codec", CODECS)
def test_a_bomb_stops_at_the_bound(codec: int) -> None:
    bomb = compression.compress(codec, bytes(64 << 20))
    with output_limit(1 << 20), pytest.raises(DecompressedTooLarge):
        compression.decompress(codec, bomb)


def test_raw_snappy_and_multi_member_gzip() -> None:
    raw = bytes(cramjam.snappy.compress_raw(DATA))
    with output_limit(len(DATA)):
        assert compression.decompress(compression.SNAPPY, raw) == DATA
    with output_limit(len(DATA) - 1), pytest.raises(DecompressedTooLarge):
        compression.decompress(compression.SNAPPY, raw)
    two = compression.compress(compression.GZIP, b"one ") + compression.compress(
        compression.GZIP, b"two")
    with output_limit(7):
        assert compression.decompress(compression.GZIP, two) == b"one two"
    with output_limit(6), pytest.raises(DecompressedTooLarge):
        compression.decompress(compression.GZIP, two)
