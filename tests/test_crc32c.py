import os

import crc32c as reference
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kipproducer import crc32c as ours


def implementations():
    impls = [ours.crc32c, ours.crc32c_software]
    if ours.hardware_available():
        impls.append(ours.crc32c_hardware)
    return impls


def test_known_vectors():
    # RFC 3720 (iSCSI) test vectors for CRC-32C.
    assert ours.crc32c(b"") == 0
    assert ours.crc32c(b"123456789") == 0xE3069283
    assert ours.crc32c(bytes(32)) == 0x8A9136AA
    assert ours.crc32c(b"\xff" * 32) == 0x62A8AB43
    assert ours.crc32c(bytes(range(32))) == 0x46DD794E


@pytest.mark.parametrize(
    "size", [0, 1, 7, 8, 9, 255, 256, 767, 768, 769, 6143, 6144, 6145, 16384, 100_003, 1 << 20]
)
def test_all_implementations_agree_with_reference(size):
    data = os.urandom(size + 8)
    for start in range(8):  # every alignment of the start pointer
        chunk = data[start : start + size]
        expected = reference.crc32c(chunk)
        for impl in implementations():
            assert impl(chunk) == expected, (impl.__name__, size, start)


@given(st.binary(max_size=20000), st.binary(max_size=5000))
def test_continuation_and_agreement(a, b):
    whole = reference.crc32c(a + b)
    for impl in implementations():
        assert impl(a + b) == whole
        assert impl(b, impl(a)) == whole


def test_hardware_is_used_where_the_cpu_has_it():
    if ours.hardware_available():
        assert ours.IMPLEMENTATION in ("sse4.2", "armv8-crc")
    else:
        assert ours.IMPLEMENTATION == "software"
        with pytest.raises(RuntimeError):
            ours.crc32c_hardware(b"x")


def test_accepts_any_buffer():
    data = os.urandom(1000)
    expected = reference.crc32c(data)
    assert ours.crc32c(bytearray(data)) == expected
    assert ours.crc32c(memoryview(data)) == expected
    with pytest.raises(TypeError):
        ours.crc32c("not bytes")


@given(st.binary(max_size=5000), st.binary(max_size=70000))
def test_combine(a, b):
    assert ours.crc32c_combine(ours.crc32c(a), ours.crc32c(b), len(b)) == ours.crc32c(a + b)


def test_combine_large_lengths():
    # Lengths past 2**29 bytes exercise every power of x the combiner keeps.
    a, b = b"head", bytes(1 << 20)
    assert ours.crc32c_combine(ours.crc32c(a), ours.crc32c(b), len(b)) == ours.crc32c(a + b)
    assert ours.crc32c_combine(0, 0, 0) == 0
