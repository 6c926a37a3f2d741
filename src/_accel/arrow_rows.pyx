"""Kafka record batches decoded straight into Arrow column buffers (kipproducer._arrow_rows).

The Spark source (kipproducer.spark.source) fetches whole record batches with the project's
own Fetch reader and hands their records sections here: every record's offset, timestamp,
key, value and headers are appended to growing C buffers laid out as Arrow wants them
(int32 offsets + data + validity bitmap for binary/string columns, int32 list offsets for
headers), with no Python object per record. ``finish`` returns the buffers as bytes, which
the caller wraps with ``pyarrow.Array.from_buffers`` (no pyarrow C API needed here).

Every read is bounds-checked against the end of the records section, so a malformed batch
raises CorruptRecordError and never reads past the data it was given.
"""
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t
from libc.stdlib cimport free, realloc
from libc.string cimport memcpy, memset

from batch_layout cimport (
    ATTRIBUTES_POS, BASE_OFFSET_POS, BASE_TIMESTAMP_POS, BATCH_HEADER_SIZE, BATCH_LENGTH_POS,
    LAST_OFFSET_DELTA_POS, LOG_OVERHEAD, MAX_TIMESTAMP_POS, RECORDS_COUNT_POS,
    TIMESTAMP_TYPE_MASK, get_i16, get_i32, get_i64,
)
from varint cimport read_varint32, read_varint64

from kipproducer.errors import CorruptRecordError

# Arrow's binary/string columns index their data with int32 offsets.
cdef int64_t MAX_COLUMN_BYTES = 0x7FFFFFFF


cdef struct Grow:
    char *data
    Py_ssize_t size
    Py_ssize_t capacity


cdef int grow_reserve(Grow *g, Py_ssize_t more) except -1:
    cdef Py_ssize_t want = g.size + more
    cdef Py_ssize_t cap
    cdef char *p
    if want <= g.capacity:
        return 0
    cap = g.capacity * 2 if g.capacity else 4096
    while cap < want:
        cap *= 2
    p = <char *>realloc(g.data, cap)
    if p == NULL:
        raise MemoryError()
    g.data = p
    g.capacity = cap
    return 0


cdef inline int grow_put(Grow *g, const void *src, Py_ssize_t n) except -1:
    if g.size + n > g.capacity:
        grow_reserve(g, n)
    memcpy(g.data + g.size, src, n)
    g.size += n
    return 0


cdef inline int grow_i32(Grow *g, int32_t v) except -1:
    return grow_put(g, &v, 4)


cdef inline int grow_i64(Grow *g, int64_t v) except -1:
    return grow_put(g, &v, 8)


cdef inline int set_valid(Grow *g, Py_ssize_t index, bint valid) except -1:
    """Bit ``index`` of a validity bitmap (LSB first, as Arrow), growing it a byte at a
    time with zero bits."""
    cdef Py_ssize_t byte = index >> 3
    if byte >= g.size:
        grow_reserve(g, byte + 1 - g.size)
        memset(g.data + g.size, 0, byte + 1 - g.size)
        g.size = byte + 1
    if valid:
        g.data[byte] = <char>(<uint8_t>g.data[byte] | (1 << (index & 7)))
    return 0


cdef object grow_bytes(Grow *g):
    return PyBytes_FromStringAndSize(g.data, g.size) if g.size else b""


cdef class _Column:
    """A nullable binary (or utf-8 string) column being filled: offsets, data, validity."""
    cdef Grow offsets
    cdef Grow data
    cdef Grow valid
    cdef Py_ssize_t rows
    cdef Py_ssize_t nulls

    def __cinit__(self):
        grow_i32(&self.offsets, 0)

    def __dealloc__(self):
        free(self.offsets.data)
        free(self.data.data)
        free(self.valid.data)

    cdef int append(self, const unsigned char *p, int32_t size) except -1:
        if size < 0:
            set_valid(&self.valid, self.rows, False)
            self.nulls += 1
        else:
            if self.data.size + size > MAX_COLUMN_BYTES:
                raise OverflowError("more than 2 GiB in one Arrow column; finish() sooner")
            set_valid(&self.valid, self.rows, True)
            grow_put(&self.data, p, size)
        grow_i32(&self.offsets, <int32_t>self.data.size)
        self.rows += 1
        return 0

    cdef tuple take(self):
        """(validity or None, offsets, data, null count); the column starts again empty."""
        out = (grow_bytes(&self.valid) if self.nulls else None, grow_bytes(&self.offsets),
               grow_bytes(&self.data), self.nulls)
        self.offsets.size = 0
        self.data.size = 0
        self.valid.size = 0
        self.rows = 0
        self.nulls = 0
        grow_i32(&self.offsets, 0)
        return out


cdef class ArrowRows:
    """Rows of one topic partition being decoded into Arrow buffers.

    ``add_records`` takes one batch's records section (decompressed) and the batch header
    fields it needs; ``add_framed`` a run of whole uncompressed batches as a Fetch answer
    holds them (headers included). Records below ``min_offset`` or at/after ``end_offset``
    are left out. ``finish`` hands over what was decoded and starts again empty."""
    cdef Grow offsets
    cdef Grow timestamps
    cdef Grow types
    cdef Grow header_offsets
    cdef _Column keys
    cdef _Column values
    cdef _Column header_keys
    cdef _Column header_values
    cdef readonly bint include_headers
    cdef readonly Py_ssize_t rows
    cdef readonly int64_t last_offset

    def __cinit__(self, bint include_headers=False):
        self.include_headers = include_headers
        self.keys = _Column()
        self.values = _Column()
        self.header_keys = _Column()
        self.header_values = _Column()
        grow_i32(&self.header_offsets, 0)
        self.last_offset = -1

    def __dealloc__(self):
        free(self.offsets.data)
        free(self.timestamps.data)
        free(self.types.data)
        free(self.header_offsets.data)

    @property
    def data_bytes(self) -> int:
        """Key, value and header bytes held: the caller finishes before 2 GiB."""
        return (self.keys.data.size + self.values.data.size + self.header_keys.data.size
                + self.header_values.data.size)

    cdef int _decode(self, const unsigned char *p, const unsigned char *end, int32_t count,
                     int64_t base_offset, int64_t base_ts, bint log_append_time,
                     int64_t max_ts, int64_t min_offset, int64_t end_offset) except -1:
        cdef int32_t i, h, length, offset_delta, key_size, value_size, header_count
        cdef int32_t hkey, hval
        cdef int64_t ts_delta, offset
        cdef const unsigned char *rec_end
        cdef const unsigned char *key
        cdef const unsigned char *value
        cdef const unsigned char *headers
        cdef int32_t ts_type = 1 if log_append_time else 0
        for i in range(count):
            p = read_varint32(p, end, &length)
            if p == NULL or length < 6 or length > end - p:
                raise CorruptRecordError(
                    f"batch at offset {base_offset}: record {i} has a bad length", "record_size")
            rec_end = p + length
            p += 1  # attributes, unused
            p = read_varint64(p, rec_end, &ts_delta)
            if p == NULL:
                raise CorruptRecordError(f"record {i}: bad timestamp delta", "varint")
            p = read_varint32(p, rec_end, &offset_delta)
            if p == NULL:
                raise CorruptRecordError(f"record {i}: bad offset delta", "varint")
            p = read_varint32(p, rec_end, &key_size)
            if p == NULL or key_size < -1 or key_size > rec_end - p:
                raise CorruptRecordError(f"record {i}: bad key length", "record_size")
            key = p
            if key_size > 0:
                p += key_size
            p = read_varint32(p, rec_end, &value_size)
            if p == NULL or value_size < -1 or value_size > rec_end - p:
                raise CorruptRecordError(f"record {i}: bad value length", "record_size")
            value = p
            if value_size > 0:
                p += value_size
            p = read_varint32(p, rec_end, &header_count)
            if p == NULL or header_count < 0 or header_count > (rec_end - p) // 2:
                raise CorruptRecordError(f"record {i}: bad header count", "header_count")
            headers = p
            offset = base_offset + offset_delta
            if offset < min_offset:
                p = rec_end
                continue
            if offset >= end_offset:
                return 1  # past the range: the rest of the partition is not wanted
            for h in range(header_count):
                p = read_varint32(p, rec_end, &hkey)
                if p == NULL or hkey < 0 or hkey > rec_end - p:
                    raise CorruptRecordError(f"record {i}: bad header key", "record_size")
                if self.include_headers:
                    self.header_keys.append(p, hkey)
                p += hkey
                p = read_varint32(p, rec_end, &hval)
                if p == NULL or hval < -1 or hval > rec_end - p:
                    raise CorruptRecordError(f"record {i}: bad header value", "record_size")
                if self.include_headers:
                    self.header_values.append(p, hval)
                if hval > 0:
                    p += hval
            if p != rec_end:
                raise CorruptRecordError(
                    f"record {i}: {rec_end - p} bytes left over inside its length", "record_size")
            self.keys.append(key, key_size)
            self.values.append(value, value_size)
            grow_i64(&self.offsets, offset)
            # Spark's timestamp column is in microseconds
            grow_i64(&self.timestamps, (max_ts if log_append_time else base_ts + ts_delta) * 1000)
            grow_i32(&self.types, ts_type)
            if self.include_headers:
                grow_i32(&self.header_offsets, <int32_t>self.header_keys.rows)
            self.rows += 1
            self.last_offset = offset
        return 0

    def add_records(self, records, int32_t count, int64_t base_offset, int64_t base_timestamp,
                    bint log_append_time, int64_t max_timestamp, int64_t min_offset,
                    int64_t end_offset) -> bool:
        """One batch's records section; True when a record at/after ``end_offset`` was met."""
        cdef Py_buffer view
        cdef const unsigned char *p
        cdef int done
        PyObject_GetBuffer(records, &view, PyBUF_SIMPLE)
        try:
            p = <const unsigned char *>view.buf
            done = self._decode(p, p + view.len, count, base_offset, base_timestamp,
                                log_append_time, max_timestamp, min_offset, end_offset)
        finally:
            PyBuffer_Release(&view)
        return done == 1

    def add_framed(self, batches, int64_t min_offset, int64_t end_offset) -> bool:
        """Whole uncompressed batches back to back (headers included); True when a record
        at/after ``end_offset`` was met."""
        cdef Py_buffer view
        cdef const unsigned char *p
        cdef Py_ssize_t pos = 0, size, batch_end
        cdef int32_t length
        cdef int16_t attributes
        cdef int done = 0
        PyObject_GetBuffer(batches, &view, PyBUF_SIMPLE)
        try:
            p = <const unsigned char *>view.buf
            size = view.len
            while size - pos >= BATCH_HEADER_SIZE and not done:
                length = get_i32(p + pos + BATCH_LENGTH_POS)
                batch_end = pos + LOG_OVERHEAD + length
                if length < BATCH_HEADER_SIZE - LOG_OVERHEAD or batch_end > size:
                    raise CorruptRecordError("a framed batch runs past its run", "record_size")
                attributes = get_i16(p + pos + ATTRIBUTES_POS)
                if get_i64(p + pos + BASE_OFFSET_POS) + get_i32(
                        p + pos + LAST_OFFSET_DELTA_POS) >= min_offset:
                    done = self._decode(
                        p + pos + BATCH_HEADER_SIZE, p + batch_end,
                        get_i32(p + pos + RECORDS_COUNT_POS),
                        get_i64(p + pos + BASE_OFFSET_POS),
                        get_i64(p + pos + BASE_TIMESTAMP_POS),
                        (attributes & TIMESTAMP_TYPE_MASK) != 0,
                        get_i64(p + pos + MAX_TIMESTAMP_POS), min_offset, end_offset)
                pos = batch_end
        finally:
            PyBuffer_Release(&view)
        return done == 1

    def finish(self) -> dict:
        """The buffers decoded since the last call, as bytes: ``rows``, ``offset`` /
        ``timestamp`` (int64 LE), ``timestampType`` (int32 LE), ``key`` / ``value``
        ((validity or None, int32 offsets, data, null count)) and, with headers,
        ``headers`` (int32 list offsets), ``header_key``, ``header_value``."""
        out = {"rows": self.rows, "offset": grow_bytes(&self.offsets),
               "timestamp": grow_bytes(&self.timestamps),
               "timestampType": grow_bytes(&self.types),
               "key": self.keys.take(), "value": self.values.take()}
        if self.include_headers:
            out["headers"] = grow_bytes(&self.header_offsets)
            out["header_key"] = self.header_keys.take()
            out["header_value"] = self.header_values.take()
        self.offsets.size = 0
        self.timestamps.size = 0
        self.types.size = 0
        self.header_offsets.size = 0
        grow_i32(&self.header_offsets, 0)
        self.rows = 0
        return out
