"""CRC-32C as Kafka's RecordBatch v2 uses it (compiled as kipproducer._crc32c)."""
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport uint32_t

from crc32c_c cimport (
    kip_crc32c, kip_crc32c_combine, kip_crc32c_hw, kip_crc32c_hw_available, kip_crc32c_impl_name, kip_crc32c_sw,
)

ctypedef uint32_t (*crc_fn)(uint32_t, const void *, size_t) noexcept nogil

# Buffers at least this large are checksummed without the GIL.
cdef enum:
    RELEASE_GIL_AT = 65536


cdef uint32_t run(crc_fn fn, object data, uint32_t crc) except? 0xFFFFFFFF:
    cdef Py_buffer view
    cdef uint32_t out
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        if view.len >= RELEASE_GIL_AT:
            with nogil:
                out = fn(crc, view.buf, view.len)
        else:
            out = fn(crc, view.buf, view.len)
    finally:
        PyBuffer_Release(&view)
    return out


def crc32c(data, uint32_t crc=0):
    """CRC-32C of a bytes-like object, continuing from ``crc``."""
    return run(kip_crc32c, data, crc)


def crc32c_software(data, uint32_t crc=0):
    """The portable table-driven implementation (for tests and CPUs without the instruction)."""
    return run(kip_crc32c_sw, data, crc)


def crc32c_hardware(data, uint32_t crc=0):
    """The CPU-instruction implementation; RuntimeError when this CPU has none."""
    if not kip_crc32c_hw_available():
        raise RuntimeError("this CPU has no CRC-32C instruction (SSE4.2 / ARMv8 CRC)")
    return run(kip_crc32c_hw, data, crc)


def crc32c_combine(uint32_t crc_a, uint32_t crc_b, size_t len_b):
    """CRC-32C of A || B given crc32c(A), crc32c(B) and len(B)."""
    return kip_crc32c_combine(crc_a, crc_b, len_b)


def hardware_available():
    return bool(kip_crc32c_hw_available())


IMPLEMENTATION = kip_crc32c_impl_name().decode()
