# Writing one v2 Record into a byte buffer, shared by encode_batch (records.pyx) and the
# accumulator (accumulator.pyx). Everything is inline so both modules compile it in without a
# cross-module call.
#
# Record layout (after the batch header, once per record):
#   length          varint   bytes after this field
#   attributes      int8     unused, 0
#   timestampDelta  varlong  timestamp - batch baseTimestamp
#   offsetDelta     varint   offset - batch baseOffset
#   keyLength       varint   -1 = null key;   then key bytes
#   valueLength     varint   -1 = null value; then value bytes
#   headersCount    varint
#     headerKeyLength varint; key UTF-8 (never null)
#     headerValueLength varint (-1 = null); value bytes
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport (
    PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_FromStringAndSize, PyBytes_GET_SIZE,
)
from cpython.mem cimport PyMem_Free, PyMem_Realloc
from cpython.unicode cimport PyUnicode_Check
from libc.stdint cimport int32_t, int64_t
from libc.string cimport memcpy

from varint cimport varint_size, write_varint

cdef extern from "Python.h":
    const char *PyUnicode_AsUTF8AndSize(object obj, Py_ssize_t *size) except NULL


# A borrowed view of a key, value or header: bytes, str (UTF-8), any contiguous buffer, or None.
cdef struct Blob:
    const unsigned char *ptr
    Py_ssize_t size          # -1 means null
    bint has_view
    Py_buffer view


cdef inline int blob_from(object obj, Blob *b, str what) except -1:
    b.has_view = False
    if obj is None:
        b.ptr = NULL
        b.size = -1
        return 0
    if PyBytes_CheckExact(obj):
        b.ptr = <const unsigned char *>PyBytes_AS_STRING(obj)
        b.size = PyBytes_GET_SIZE(obj)
        return 0
    if PyUnicode_Check(obj):
        b.ptr = <const unsigned char *>PyUnicode_AsUTF8AndSize(obj, &b.size)
        return 0
    try:
        PyObject_GetBuffer(obj, &b.view, PyBUF_SIMPLE)
    except (TypeError, BufferError):
        raise TypeError(
            f"{what} must be bytes, str, a contiguous buffer or None, not {type(obj).__name__}"
        ) from None
    b.has_view = True
    b.ptr = <const unsigned char *>b.view.buf
    b.size = b.view.len
    return 0


cdef inline void blob_release(Blob *b) noexcept:
    if b.has_view:
        PyBuffer_Release(&b.view)
        b.has_view = False


cdef inline Py_ssize_t blob_wire_size(Blob *b) noexcept nogil:
    """Length varint plus payload."""
    if b.size < 0:
        return 1
    return varint_size(b.size) + b.size


cdef inline unsigned char *write_blob(unsigned char *p, Blob *b) noexcept nogil:
    if b.size < 0:
        return write_varint(p, -1)
    p = write_varint(p, b.size)
    if b.size:
        memcpy(p, b.ptr, b.size)
    return p + b.size


cdef inline object header_items(object headers):
    """confluent-kafka accepts headers as a list of (key, value) pairs or as a dict."""
    if isinstance(headers, dict):
        return list((<dict>headers).items())
    return headers


cdef inline Py_ssize_t headers_wire_size(object items, Py_ssize_t *count) except -1:
    """Bytes the headers take (count varint included); items from header_items()."""
    cdef Py_ssize_t size = 0
    cdef Py_ssize_t n = 0
    cdef Blob kb, vb
    for item in items:
        try:
            hkey, hval = item
        except (TypeError, ValueError):
            raise TypeError("each header must be a (key, value) pair") from None
        if hkey is None:
            raise TypeError("a header key must not be None")
        blob_from(hkey, &kb, "header key")
        size += blob_wire_size(&kb)
        blob_release(&kb)
        blob_from(hval, &vb, "header value")
        size += blob_wire_size(&vb)
        blob_release(&vb)
        n += 1
    count[0] = n
    return size + varint_size(n)


cdef inline unsigned char *write_headers(unsigned char *p, object items, Py_ssize_t count) except NULL:
    cdef Blob kb, vb
    p = write_varint(p, count)
    for hkey, hval in items:
        blob_from(hkey, &kb, "header key")
        p = write_blob(p, &kb)
        blob_release(&kb)
        blob_from(hval, &vb, "header value")
        p = write_blob(p, &vb)
        blob_release(&vb)
    return p


cdef inline bytes encode_headers(object items):
    """The headers' wire bytes, count varint included (what write_headers writes), for items
    from header_items(): encoded once, copied into every record that carries them."""
    cdef Py_ssize_t count = 0
    cdef Py_ssize_t size = headers_wire_size(items, &count)
    cdef bytes wire = PyBytes_FromStringAndSize(NULL, size)
    write_headers(<unsigned char *>PyBytes_AS_STRING(wire), items, count)
    return wire


cdef inline Py_ssize_t record_body_size(
        int64_t timestamp_delta, int32_t offset_delta, Blob *key, Blob *value,
        Py_ssize_t headers_size) noexcept nogil:
    """Size of a record after its length varint; headers_size includes the count varint."""
    return (1 + varint_size(timestamp_delta) + varint_size(offset_delta)
            + blob_wire_size(key) + blob_wire_size(value) + headers_size)


cdef inline unsigned char *write_record_head(
        unsigned char *p, Py_ssize_t body_size, int64_t timestamp_delta, int32_t offset_delta,
        Blob *key, Blob *value) noexcept nogil:
    """Everything of a record up to (not including) its headers."""
    p = write_varint(p, body_size)
    p[0] = 0  # record attributes: unused
    p = write_varint(p + 1, timestamp_delta)
    p = write_varint(p, offset_delta)
    p = write_blob(p, key)
    return write_blob(p, value)


# A growable byte buffer owned by C code (PyMem, so it is counted by tracemalloc).
cdef struct ByteBuf:
    unsigned char *data
    Py_ssize_t size
    Py_ssize_t capacity


cdef inline int bytebuf_reserve(ByteBuf *b, Py_ssize_t extra) except -1:
    cdef Py_ssize_t need = b.size + extra
    cdef Py_ssize_t cap
    cdef unsigned char *grown
    if need <= b.capacity:
        return 0
    cap = b.capacity * 2 if b.capacity else 4096
    while cap < need:
        cap *= 2
    grown = <unsigned char *>PyMem_Realloc(b.data, cap)
    if grown == NULL:
        raise MemoryError(f"cannot grow a record buffer to {cap} bytes")
    b.data = grown
    b.capacity = cap
    return 0


cdef inline void bytebuf_free(ByteBuf *b) noexcept:
    if b.data != NULL:
        PyMem_Free(b.data)
    b.data = NULL
    b.size = 0
    b.capacity = 0
