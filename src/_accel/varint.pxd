# Kafka's variable-length integers (protobuf style): 7 bits a byte, low group first, the high bit
# says "more follows". Signed values are ZigZag-mapped first so small negatives stay short.
# Records use signed varint (int32 range) and varlong (int64 range); both are written here through
# the 64-bit path, and readers check the range they expect.
from libc.stdint cimport int32_t, int64_t, uint64_t

# A varlong never needs more than 10 bytes; a varint (int32) never more than 5.
cdef enum:
    _MAX_VARLONG_BYTES = 10

cdef inline uint64_t zigzag64(int64_t v) noexcept nogil:
    return (<uint64_t>v << 1) ^ <uint64_t>(v >> 63)

cdef inline int64_t unzigzag64(uint64_t u) noexcept nogil:
    return <int64_t>(u >> 1) ^ -<int64_t>(u & 1)

cdef inline Py_ssize_t uvarint_size(uint64_t u) noexcept nogil:
    cdef Py_ssize_t n = 1
    while u >= 0x80:
        u >>= 7
        n += 1
    return n

cdef inline Py_ssize_t varint_size(int64_t v) noexcept nogil:
    return uvarint_size(zigzag64(v))

cdef inline unsigned char *write_uvarint(unsigned char *p, uint64_t u) noexcept nogil:
    while u >= 0x80:
        p[0] = <unsigned char>(u | 0x80)
        u >>= 7
        p += 1
    p[0] = <unsigned char>u
    return p + 1

cdef inline unsigned char *write_varint(unsigned char *p, int64_t v) noexcept nogil:
    return write_uvarint(p, zigzag64(v))

cdef inline const unsigned char *read_uvarint(
        const unsigned char *p, const unsigned char *end, uint64_t *out, int max_bytes) noexcept nogil:
    """Read one unsigned varint of at most max_bytes; NULL when truncated or too long."""
    cdef uint64_t result = 0
    cdef int shift = 0
    cdef int i = 0
    cdef unsigned char b
    while i < max_bytes:
        if p >= end:
            return NULL
        b = p[0]
        p += 1
        result |= (<uint64_t>(b & 0x7F)) << shift
        if not (b & 0x80):
            out[0] = result
            return p
        shift += 7
        i += 1
    return NULL

cdef inline const unsigned char *read_varint32(
        const unsigned char *p, const unsigned char *end, int32_t *out) noexcept nogil:
    """Signed varint that must fit int32 (5 bytes at most); NULL on truncation or overflow."""
    cdef uint64_t u = 0
    cdef int64_t v
    p = read_uvarint(p, end, &u, 5)
    if p == NULL or u > 0xFFFFFFFFULL:
        return NULL
    v = unzigzag64(u)
    out[0] = <int32_t>v
    return p

cdef inline const unsigned char *read_varint64(
        const unsigned char *p, const unsigned char *end, int64_t *out) noexcept nogil:
    cdef uint64_t u = 0
    p = read_uvarint(p, end, &u, _MAX_VARLONG_BYTES)
    if p == NULL:
        return NULL
    out[0] = unzigzag64(u)
    return p
