"""RecordBatch v2 encoder and decoder/validator (compiled as kipproducer._records).

The public names are re-exported by kipproducer.records; see that module for the API contract.
Every read is bounds-checked against the end of its buffer, so malformed input raises
CorruptRecordError and never reads past the data it was given.
"""
from cpython.buffer cimport (
    PyBUF_READ, PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer,
)
from cpython.memoryview cimport PyMemoryView_FromMemory
from cpython.bytearray cimport PyByteArray_FromStringAndSize, PyByteArray_Resize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int16_t, int32_t, int64_t, uint16_t, uint32_t
from libc.string cimport memcmp, memcpy
from cpython.object cimport PyObject, PyTypeObject
from cpython.list cimport PyList_GET_ITEM
from cpython.ref cimport Py_INCREF, Py_REFCNT, Py_XDECREF
cimport cython

from batch_layout cimport (
    ATTRIBUTES_POS, BASE_OFFSET_POS, BASE_SEQUENCE_POS, BASE_TIMESTAMP_POS, BATCH_HEADER_SIZE,
    BATCH_LENGTH_POS, CODEC_NONE, CODEC_ZSTD, COMPRESSION_MASK, CONTROL_FLAG, CRC_POS,
    DELETE_HORIZON_FLAG, LAST_OFFSET_DELTA_POS, LOG_OVERHEAD, MAGIC_POS, MAGIC_V2,
    MAX_TIMESTAMP_POS, PARTITION_LEADER_EPOCH_POS, PRODUCER_EPOCH_POS, PRODUCER_ID_POS,
    RECORDS_COUNT_POS, RECORDS_POS, TIMESTAMP_TYPE_MASK, TRANSACTIONAL_FLAG, get_i16, get_i32,
    get_i64, get_u32, increment_sequence, put_i32, put_i64,
)
from batch_writer cimport BatchFields, build_batch
from crc32c_c cimport kip_crc32c
from record_writer cimport (
    Blob, ByteBuf, blob_from, blob_release, bytebuf_free, bytebuf_reserve, header_items,
    headers_wire_size, record_body_size, write_headers, write_record_head,
)
from varint cimport read_varint32, read_varint64, varint_size

import time

from kipproducer.compression import CODEC_NAMES, codec_id
from kipproducer.compression import compress as _compress
from kipproducer.compression import decompress as _decompress
from kipproducer.errors import CorruptRecordError

# The layout as Python constants, for code that patches or peeks at batches without decoding.
BATCH_HEADER_SIZE_ = BATCH_HEADER_SIZE
LAYOUT = {
    "base_offset": BASE_OFFSET_POS,
    "batch_length": BATCH_LENGTH_POS,
    "partition_leader_epoch": PARTITION_LEADER_EPOCH_POS,
    "magic": MAGIC_POS,
    "crc": CRC_POS,
    "attributes": ATTRIBUTES_POS,
    "last_offset_delta": LAST_OFFSET_DELTA_POS,
    "base_timestamp": BASE_TIMESTAMP_POS,
    "max_timestamp": MAX_TIMESTAMP_POS,
    "producer_id": PRODUCER_ID_POS,
    "producer_epoch": PRODUCER_EPOCH_POS,
    "base_sequence": BASE_SEQUENCE_POS,
    "records_count": RECORDS_COUNT_POS,
    "records": RECORDS_POS,
}
LOG_OVERHEAD_ = LOG_OVERHEAD

# Smallest possible record: length, attributes, timestamp delta, offset delta, key length,
# value length and header count, one byte each.
cdef enum:
    MIN_RECORD_SIZE = 7


cdef inline int64_t now_ms():
    return <int64_t>(time.time() * 1000)


# ---- encoding ------------------------------------------------------------------------------

def encode_batch(records, *, int64_t base_offset=0, int64_t producer_id=-1,
                 int producer_epoch=-1, int32_t base_sequence=-1, bint transactional=False,
                 compression=None, int32_t partition_leader_epoch=-1):
    """Encode ``(key, value, headers, timestamp_ms)`` tuples into one RecordBatch v2."""
    cdef Py_ssize_t count = len(records)
    cdef int codec = codec_id(compression)
    cdef ByteBuf buf
    cdef Blob kb, vb
    cdef BatchFields f
    cdef int64_t ts, base_ts = 0, max_ts = -1, now = -1
    cdef Py_ssize_t hsize, hcount, body, i = 0
    cdef unsigned char *p
    if count == 0:
        raise ValueError("a record batch needs at least one record")
    if count > 0x7FFFFFFF:
        raise OverflowError("too many records for one batch")
    if not -32768 <= producer_epoch <= 32767:
        raise OverflowError(f"producer_epoch {producer_epoch} does not fit int16")
    buf.data = NULL
    buf.size = 0
    buf.capacity = 0
    kb.has_view = False
    vb.has_view = False
    try:
        for rec in records:
            try:
                key, value, headers, timestamp = rec
            except (TypeError, ValueError):
                raise TypeError(
                    "each record must be a (key, value, headers, timestamp_ms) tuple") from None
            if timestamp is None:
                if now < 0:
                    now = now_ms()
                ts = now
            else:
                ts = timestamp
            if i == 0:
                base_ts = ts
                max_ts = ts
            elif ts > max_ts:
                max_ts = ts
            hcount = 0
            if headers is None:
                hsize = 1
            else:
                headers = header_items(headers)
                hsize = headers_wire_size(headers, &hcount)
            blob_from(key, &kb, "key")
            blob_from(value, &vb, "value")
            body = record_body_size(ts - base_ts, <int32_t>i, &kb, &vb, hsize)
            bytebuf_reserve(&buf, body + 5 + (BATCH_HEADER_SIZE if i == 0 else 0))
            if i == 0:
                buf.size = BATCH_HEADER_SIZE
            p = write_record_head(buf.data + buf.size, body, ts - base_ts, <int32_t>i, &kb, &vb)
            blob_release(&kb)
            blob_release(&vb)
            if headers is None:
                p[0] = 0
                p += 1
            else:
                p = write_headers(p, headers, hcount)
            buf.size = p - buf.data
            i += 1
        if i != count:
            raise ValueError("records changed size while being encoded")
        f.base_offset = base_offset
        f.partition_leader_epoch = partition_leader_epoch
        f.attributes = codec | (TRANSACTIONAL_FLAG if transactional else 0)
        f.last_offset_delta = <int32_t>(count - 1)
        f.base_timestamp = base_ts
        f.max_timestamp = max_ts
        f.producer_id = producer_id
        f.producer_epoch = <int16_t>producer_epoch
        f.base_sequence = base_sequence
        f.records_count = <int32_t>count
        return build_batch(&f, buf.data + BATCH_HEADER_SIZE, buf.size - BATCH_HEADER_SIZE,
                           codec, _compress)
    finally:
        blob_release(&kb)
        blob_release(&vb)
        bytebuf_free(&buf)


# ---- decoding ------------------------------------------------------------------------------

cdef struct RecordView:
    int64_t timestamp_delta
    int32_t offset_delta
    const unsigned char *key
    int32_t key_size            # -1 = null
    const unsigned char *value
    int32_t value_size          # -1 = null
    const unsigned char *headers
    int32_t header_count


cdef inline const unsigned char *read_sized(
        const unsigned char *p, const unsigned char *end, int32_t *size,
        bint nullable, Py_ssize_t index, const char *what) except NULL:
    """A length varint then that many bytes; returns the position after the length.

    The error message is built only on failure: this runs for every key, value and header.
    """
    p = read_varint32(p, end, size)
    if p == NULL:
        raise CorruptRecordError(
            f"record {index}: {what.decode()} length is not a valid varint", "varint")
    if size[0] < (-1 if nullable else 0):
        raise CorruptRecordError(
            f"record {index}: {what.decode()} length {size[0]} is negative", "record_size")
    if size[0] > end - p:
        raise CorruptRecordError(
            f"record {index}: {what.decode()} of {size[0]} bytes runs past the end of its "
            "record", "record_size")
    return p


cdef const unsigned char *parse_record(
        const unsigned char *p, const unsigned char *end, RecordView *r, Py_ssize_t index
        ) except NULL:
    """Parse and bound-check one record starting at p; returns the position after it."""
    cdef int32_t length, hkey, hval
    cdef const unsigned char *rec_end
    cdef Py_ssize_t h
    p = read_varint32(p, end, &length)
    if p == NULL:
        raise CorruptRecordError(f"record {index}: length is not a valid varint", "varint")
    if length < MIN_RECORD_SIZE - 1 or length > end - p:
        raise CorruptRecordError(
            f"record {index}: length {length} does not fit the {end - p} bytes left",
            "record_size")
    rec_end = p + length
    p += 1  # attributes, unused
    p = read_varint64(p, rec_end, &r.timestamp_delta)
    if p == NULL:
        raise CorruptRecordError(f"record {index}: timestamp delta is not a valid varlong", "varint")
    p = read_varint32(p, rec_end, &r.offset_delta)
    if p == NULL:
        raise CorruptRecordError(f"record {index}: offset delta is not a valid varint", "varint")
    p = read_sized(p, rec_end, &r.key_size, True, index, "key")
    r.key = p
    if r.key_size > 0:
        p += r.key_size
    p = read_sized(p, rec_end, &r.value_size, True, index, "value")
    r.value = p
    if r.value_size > 0:
        p += r.value_size
    p = read_varint32(p, rec_end, &r.header_count)
    if p == NULL:
        raise CorruptRecordError(f"record {index}: header count is not a valid varint", "varint")
    if r.header_count < 0 or r.header_count > (rec_end - p) // 2:
        raise CorruptRecordError(
            f"record {index}: header count {r.header_count} is impossible", "header_count")
    r.headers = p
    for h in range(r.header_count):
        p = read_sized(p, rec_end, &hkey, False, index, "header key")
        p += hkey
        p = read_sized(p, rec_end, &hval, True, index, "header value")
        if hval > 0:
            p += hval
    if p != rec_end:
        raise CorruptRecordError(
            f"record {index}: {rec_end - p} bytes left over inside its declared length",
            "record_size")
    return p


# ---- delivery-report Messages filled in place (see kipproducer.message_layout) --------------
# confluent_kafka.Message's constructor parses its arguments (about 0.5 us a report); its own
# C code fills the struct instead. kipproducer.message_layout probes the installed struct's
# layout at import, verifies it, and configures this fill; until then (or when the probe
# fails) reports are built with the constructor.

cdef extern from "Python.h":
    ctypedef object (*message_alloc_t)(PyTypeObject *, Py_ssize_t)
    ctypedef struct TypeAlloc "PyTypeObject":
        message_alloc_t tp_alloc

cdef enum:
    MESSAGE_MAX_SIZE = 1024

cdef struct MessageFill:
    Py_ssize_t head, size
    Py_ssize_t topic_at, value_at, key_at, headers_at, error_at
    Py_ssize_t partition_at, offset_at, tstype_at, timestamp_at
    int32_t partition_unset
    int64_t offset_unset
    unsigned char template[MESSAGE_MAX_SIZE]

cdef MessageFill FILL
cdef object FILL_TYPE = None   # the type the fill is for (and a reference keeping it alive)


def configure_message_fill(message_type, dict offsets, bytes template,
                           int32_t partition_unset=-1, int64_t offset_unset=-1):
    """Fill reports of ``message_type`` with this layout (kipproducer.message_layout);
    ``None``: build them with the constructor."""
    global FILL_TYPE
    FILL_TYPE = None
    if message_type is None:
        return
    if not isinstance(message_type, type):
        raise TypeError("message_type must be a type")
    size = (<type>message_type).__basicsize__
    if len(template) != size or size > MESSAGE_MAX_SIZE:
        raise ValueError("the template must be one Message's bytes")
    FILL.head = sizeof(PyObject)
    FILL.size = size
    names = ("topic", "value", "key", "headers", "error", "partition", "offset", "tstype",
             "timestamp")
    widths = (sizeof(PyObject *),) * 5 + (4, 8, 4, 8)
    for name, width in zip(names, widths):
        at = offsets[name]
        if not FILL.head <= at <= size - width or at % width:
            raise ValueError(f"field {name} at {at} is outside the object or misaligned")
    FILL.topic_at = offsets["topic"]
    FILL.value_at = offsets["value"]
    FILL.key_at = offsets["key"]
    FILL.headers_at = offsets["headers"]
    FILL.error_at = offsets["error"]
    FILL.partition_at = offsets["partition"]
    FILL.offset_at = offsets["offset"]
    FILL.tstype_at = offsets["tstype"]
    FILL.timestamp_at = offsets["timestamp"]
    FILL.partition_unset = partition_unset
    FILL.offset_unset = offset_unset
    memcpy(FILL.template, <const char *>template, size)
    FILL_TYPE = message_type


def message_fill_type():
    """The type reports are filled for, or None when they are built with the constructor."""
    return FILL_TYPE


cdef inline void put_reference(char *message, Py_ssize_t at, object value) noexcept:
    # The constructor stores NULL for None (the accessors answer None for both).
    if value is None:
        return
    Py_INCREF(value)
    (<PyObject **>(message + at))[0] = <PyObject *>value


cdef object new_message(object topic, int32_t partition, int64_t offset, object key,
                        object value, object headers, object error, int tstype,
                        int64_t timestamp):
    """A report of FILL_TYPE filled in place (the caller checked FILL_TYPE is set): what
    the constructor stores for these arguments, field by field."""
    cdef object message = (<TypeAlloc *>FILL_TYPE).tp_alloc(<PyTypeObject *>FILL_TYPE, 0)
    cdef char *p = <char *><PyObject *>message
    # tp_alloc zeroed the object and set its header; nothing allocates until it is filled, so
    # the garbage collector cannot look at it half-built.
    memcpy(p + FILL.head, FILL.template + FILL.head, FILL.size - FILL.head)
    put_reference(p, FILL.topic_at, topic)
    put_reference(p, FILL.value_at, value)
    put_reference(p, FILL.key_at, key)
    put_reference(p, FILL.headers_at, headers)
    put_reference(p, FILL.error_at, error)
    if partition < 0:
        partition = FILL.partition_unset
    if offset < 0:
        offset = FILL.offset_unset
    memcpy(p + FILL.partition_at, &partition, 4)
    memcpy(p + FILL.offset_at, &offset, 8)
    memcpy(p + FILL.tstype_at, &tstype, 4)
    memcpy(p + FILL.timestamp_at, &timestamp, 8)
    return message


cdef inline void swap_reference(char *message, Py_ssize_t at, object value) noexcept:
    # put_reference over a field that may hold a reference already: the old one is dropped
    # after the new one is in place (dropping a key, value or headers list runs no Python).
    cdef PyObject *old = (<PyObject **>(message + at))[0]
    if value is None:
        (<PyObject **>(message + at))[0] = NULL
    else:
        Py_INCREF(value)
        (<PyObject **>(message + at))[0] = <PyObject *>value
    Py_XDECREF(old)


cdef inline bint recyclable(object message, const char *image) noexcept:
    """The report the last callback got can carry the next record instead of a new one: no
    one else holds it (the callback kept no reference) and its bytes are still the ones the
    fill wrote (``image``; no setter ran on it, so every field is known)."""
    return (message is not None and Py_REFCNT(message) == 1
            and memcmp(<char *><PyObject *>message + FILL.head, image + FILL.head,
                       FILL.size - FILL.head) == 0)


cdef inline void refill_message(object message, int64_t offset, object key, object value,
                                object headers, int64_t timestamp) noexcept:
    """A recyclable report (same topic, partition, error and timestamp type) for the next
    record: what new_message would write for it, over the fields that change per record."""
    cdef char *p = <char *><PyObject *>message
    swap_reference(p, FILL.key_at, key)
    swap_reference(p, FILL.value_at, value)
    cdef PyObject *want = NULL if headers is None else <PyObject *>headers
    if want != (<PyObject **>(p + FILL.headers_at))[0]:  # not the list it holds already
        swap_reference(p, FILL.headers_at, headers)
    if offset < 0:
        offset = FILL.offset_unset
    memcpy(p + FILL.offset_at, &offset, 8)
    memcpy(p + FILL.timestamp_at, &timestamp, 8)


cdef inline object headers_held(object message):
    """The headers list a filled report holds (None for NULL)."""
    cdef PyObject *held = (<PyObject **>(<char *><PyObject *>message + FILL.headers_at))[0]
    return None if held == NULL else <object>held


cdef inline bint same_list(object kept, list pairs) noexcept:
    """``kept`` (a report's headers, maybe NULL-as-None) is an unshared list holding exactly
    ``pairs``' (immutable) items: nothing changed it, it can be handed out again."""
    cdef Py_ssize_t i, n = len(pairs)
    if kept is None or type(kept) is not list or Py_REFCNT(kept) != 2 or len(<list>kept) != n:
        return False
    for i in range(n):
        if PyList_GET_ITEM(<list>kept, i) != PyList_GET_ITEM(pairs, i):
            return False
    return True


def fill_message(topic, int32_t partition, int64_t offset, key, value, headers, error,
                 int tstype, int64_t timestamp):
    """One filled Message (for the layout check and tests); TypeError when the fill is off."""
    if FILL_TYPE is None:
        raise TypeError("the Message fill is off")
    return new_message(topic, partition, offset, key, value, headers, error, tstype,
                       timestamp)


cdef inline object blob_to_bytes(const unsigned char *p, int32_t size):
    if size < 0:
        return None
    return PyBytes_FromStringAndSize(<const char *>p, size)


cdef list read_headers(const unsigned char *p, int32_t count):
    """Headers of an already validated record."""
    cdef list out = []
    cdef int32_t klen = 0, vlen = 0
    cdef int32_t i
    for i in range(count):
        p = read_varint32(p, p + 5, &klen)
        try:
            key = PyUnicode_DecodeUTF8(<const char *>p, klen, "strict")
        except UnicodeDecodeError:
            raise CorruptRecordError("a header key is not valid UTF-8", "header_key") from None
        p += klen
        p = read_varint32(p, p + 5, &vlen)
        out.append((key, blob_to_bytes(p, vlen)))
        if vlen > 0:
            p += vlen
    return out


cdef int check_header_keys(const unsigned char *p, int32_t count) except -1:
    """Raise CorruptRecordError unless every header key of an already parsed record is UTF-8.

    What read_headers checks, without building the headers: validation runs per record on
    every produced batch, and a list of (str, bytes) pairs per record was most of the broker's
    CPU for batches with headers. ASCII keys (nearly all) are checked byte by byte; others
    go through the codec, whose result is dropped."""
    cdef int32_t klen = 0, vlen = 0
    cdef int32_t i, j
    cdef bint ascii
    for i in range(count):
        p = read_varint32(p, p + 5, &klen)
        ascii = True
        for j in range(klen):
            if p[j] & 0x80:
                ascii = False
                break
        if not ascii:
            try:
                PyUnicode_DecodeUTF8(<const char *>p, klen, "strict")
            except UnicodeDecodeError:
                raise CorruptRecordError("a header key is not valid UTF-8",
                                         "header_key") from None
        if klen > 0:
            p += klen
        p = read_varint32(p, p + 5, &vlen)
        if vlen > 0:
            p += vlen
    return 0


cdef class Record:
    """One record of a decoded batch."""
    cdef readonly int64_t offset
    cdef readonly int64_t timestamp
    cdef readonly object key
    cdef readonly object value
    cdef readonly list headers

    def __repr__(self):
        return (f"Record(offset={self.offset}, timestamp={self.timestamp}, key={self.key!r}, "
                f"value={self.value!r}, headers={self.headers!r})")

    def __eq__(self, other):
        cdef Record o
        if not isinstance(other, Record):
            return NotImplemented
        o = <Record>other
        return (self.offset == o.offset and self.timestamp == o.timestamp and self.key == o.key
                and self.value == o.value and self.headers == o.headers)

    def __reduce__(self):
        return (_make_record, (self.offset, self.timestamp, self.key, self.value, self.headers))


def _make_record(offset, timestamp, key, value, headers):
    cdef Record r = Record.__new__(Record)
    r.offset = offset
    r.timestamp = timestamp
    r.key = key
    r.value = value
    r.headers = headers
    return r


# Not tracked by the garbage collector: a Batch refers to bytes only (its decompressed
# section; the buffer's owner through the Py_buffer), so it can be in no reference cycle, and
# a produce request of a compacted topic's copy makes thousands of them (each tracked one
# counted toward the next collection: the broker collected every ~700 batches).
@cython.no_gc
cdef class Batch:
    """A RecordBatch v2 read from a buffer; iterate it for its Records.

    The batch keeps the buffer it was read from (no copy); a compressed batch also keeps its
    decompressed records section.
    """
    cdef Py_buffer _view
    cdef bint _has_view
    cdef const unsigned char *_p       # start of this batch in _view
    cdef readonly Py_ssize_t size_in_bytes
    cdef object _records_obj           # decompressed records (bytes) or None when uncompressed
    cdef const unsigned char *_records
    cdef Py_ssize_t _records_size
    cdef const unsigned char *_cursor  # deliver(): the record after the last one reported
    cdef Py_ssize_t _cursor_index
    cdef readonly int64_t base_offset
    cdef readonly int32_t partition_leader_epoch
    cdef readonly int magic
    cdef readonly uint32_t crc
    cdef readonly int attributes
    cdef readonly int32_t last_offset_delta
    cdef readonly int64_t base_timestamp
    cdef readonly int64_t max_timestamp
    cdef readonly int64_t producer_id
    cdef readonly int producer_epoch
    cdef readonly int32_t base_sequence
    cdef readonly int32_t record_count
    cdef readonly Py_ssize_t position   # where the batch starts in the buffer it came from

    def __cinit__(self):
        self._has_view = False

    def __dealloc__(self):
        if self._has_view:
            PyBuffer_Release(&self._view)

    @property
    def last_offset(self):
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self):
        return self.base_offset + self.last_offset_delta + 1

    @property
    def last_sequence(self):
        if self.base_sequence < 0:
            return -1
        return increment_sequence(self.base_sequence, self.last_offset_delta)

    @property
    def compression(self):
        return CODEC_NAMES.get(self.attributes & COMPRESSION_MASK)

    @property
    def timestamp_type(self):
        """0 = CreateTime, 1 = LogAppendTime."""
        return 1 if self.attributes & TIMESTAMP_TYPE_MASK else 0

    @property
    def is_transactional(self):
        return bool(self.attributes & TRANSACTIONAL_FLAG)

    @property
    def is_control(self):
        return bool(self.attributes & CONTROL_FLAG)

    @property
    def has_delete_horizon(self):
        return bool(self.attributes & DELETE_HORIZON_FLAG)

    @property
    def raw(self):
        """The batch's bytes as a read-only memoryview of the buffer it was read from."""
        return PyMemoryView_FromMemory_ro(self._p, self.size_in_bytes)

    def __len__(self):
        return self.record_count

    def __iter__(self):
        cdef RecordView r
        cdef const unsigned char *p
        cdef const unsigned char *end
        cdef Record rec
        cdef Py_ssize_t i
        cdef bint log_append = self.attributes & TIMESTAMP_TYPE_MASK
        self._ensure_records()
        p = self._records
        end = self._records + self._records_size
        for i in range(self.record_count):
            p = parse_record(p, end, &r, i)
            rec = Record.__new__(Record)
            rec.offset = self.base_offset + r.offset_delta
            rec.timestamp = (self.max_timestamp if log_append
                             else self.base_timestamp + r.timestamp_delta)
            rec.key = blob_to_bytes(r.key, r.key_size)
            rec.value = blob_to_bytes(r.value, r.value_size)
            rec.headers = read_headers(r.headers, r.header_count) if r.header_count else []
            yield rec

    def records(self):
        return list(self)

    def deliver(self, Py_ssize_t start, Py_ssize_t end, int64_t base_offset, str topic,
                int32_t partition, error, callback, message_type, int timestamp_type):
        """Delivery reports for records start..end-1: ``callback(error, message_type(...))``.

        The producer's per-record delivery path (confluent-kafka's on_delivery contract):
        records are parsed straight from the batch and each Message is filled in place when
        kipproducer.message_layout vouched for ``message_type``'s layout, else built with
        one positional call (the keyword form costs three times as much). A filled Message
        the callback did not keep (nothing else holds it, no setter changed it) is filled
        again for the next record: most callbacks only look at the report, and then the run
        allocates no Message (and no headers list) per record. ``base_offset`` is where the
        broker put record 0 (-1: unknown, every offset reported as -1). Returns how many
        callbacks ran.
        """
        cdef RecordView r
        cdef const unsigned char *p
        cdef const unsigned char *rec_end
        cdef Py_ssize_t i
        cdef int64_t offset, ts, last_ts = 0
        cdef bint log_append = self.attributes & TIMESTAMP_TYPE_MASK
        cdef list headers_of = None
        cdef const unsigned char *headers_at = NULL
        cdef Py_ssize_t headers_len = 0
        cdef object timestamp = None, headers
        # Filled in place when the layout probe vouched for this type (message_layout.py)
        cdef bint fill = FILL_TYPE is not None and message_type is FILL_TYPE
        # The last filled report and its bytes as written: when the callback kept no reference
        # to it, it carries the next record (no allocation, no deallocation, no GC tracking).
        cdef object message = None, kept
        cdef char image[MESSAGE_MAX_SIZE]
        cdef bint same_headers
        if end > self.record_count:
            end = self.record_count
        if start >= end:
            return 0
        self._ensure_records()
        rec_end = self._records + self._records_size
        # Runs of one batch are delivered in order: carry on from where the last run ended
        # instead of parsing the batch from its first record again.
        if self._cursor != NULL and start >= self._cursor_index:
            p = self._cursor
            i = self._cursor_index
        else:
            p = self._records
            i = 0
        while i < start:
            p = parse_record(p, rec_end, &r, i)
            i += 1
        for i in range(start, end):
            p = parse_record(p, rec_end, &r, i)
            self._cursor = p
            self._cursor_index = i + 1
            offset = base_offset + r.offset_delta if base_offset >= 0 else -1
            same_headers = False
            if r.header_count:
                # Records of a batch often carry the same headers: the same bytes give the
                # same (immutable) pairs, in a new list for each Message (or the recycled
                # report's own list, when nothing else holds or changed it).
                if (headers_of is not None and p - r.headers == headers_len
                        and len(headers_of) == r.header_count
                        and memcmp(r.headers, headers_at, headers_len) == 0):
                    same_headers = True
                else:
                    headers_of = read_headers(r.headers, r.header_count)
                    headers_at = r.headers
                    headers_len = p - r.headers
                headers = None
            else:
                headers = None
            ts = self.max_timestamp if log_append else self.base_timestamp + r.timestamp_delta
            if fill:
                if recyclable(message, image):
                    if r.header_count:
                        kept = headers_held(message)
                        headers = kept if same_headers and same_list(kept, headers_of) \
                            else list(headers_of)
                        kept = None
                    refill_message(message, offset, blob_to_bytes(r.key, r.key_size),
                                   blob_to_bytes(r.value, r.value_size), headers, ts)
                else:
                    if r.header_count:
                        headers = list(headers_of)
                    message = new_message(
                        topic, partition, offset, blob_to_bytes(r.key, r.key_size),
                        blob_to_bytes(r.value, r.value_size), headers, error, timestamp_type,
                        ts)
                headers = None
                memcpy(image, <char *><PyObject *>message, FILL.size)
                callback(error, message)
                continue
            if r.header_count:
                headers = list(headers_of)
            if timestamp is None or ts != last_ts:  # an immutable tuple: shared while it holds
                timestamp = (timestamp_type, ts)
                last_ts = ts
            callback(error, message_type(
                topic, partition, offset, blob_to_bytes(r.key, r.key_size),
                blob_to_bytes(r.value, r.value_size), headers, error, timestamp))
        return end - start

    def __repr__(self):
        return (f"Batch(base_offset={self.base_offset}, last_offset={self.last_offset}, "
                f"records={self.record_count}, compression={self.compression!r}, "
                f"producer_id={self.producer_id}, producer_epoch={self.producer_epoch}, "
                f"base_sequence={self.base_sequence}, "
                f"transactional={self.is_transactional}, control={self.is_control})")

    cdef int _ensure_records(self) except -1:
        cdef int codec = self.attributes & COMPRESSION_MASK
        if self._records != NULL or self.record_count == 0:
            return 0
        if codec == CODEC_NONE:
            self._records = self._p + RECORDS_POS
            self._records_size = self.size_in_bytes - RECORDS_POS
            return 0
        section = PyMemoryView_FromMemory_ro(self._p + RECORDS_POS,
                                             self.size_in_bytes - RECORDS_POS)
        self._records_obj = _decompress(codec, section)
        self._records = <const unsigned char *>PyBytes_AS_STRING(self._records_obj)
        self._records_size = PyBytes_GET_SIZE(self._records_obj)
        return 0

    cdef int _validate(self, bint strict) except -1:
        """Everything a broker checks before accepting the batch."""
        cdef uint32_t actual
        cdef RecordView r
        cdef const unsigned char *p
        cdef const unsigned char *end
        cdef Py_ssize_t i
        cdef int32_t previous = -1
        cdef int codec = self.attributes & COMPRESSION_MASK
        actual = kip_crc32c(0, self._p + ATTRIBUTES_POS, self.size_in_bytes - ATTRIBUTES_POS)
        if actual != self.crc:
            raise CorruptRecordError(
                f"batch at offset {self.base_offset}: CRC-32C is {actual:#010x} but the header "
                f"says {self.crc:#010x}", "crc")
        if codec > CODEC_ZSTD:
            raise CorruptRecordError(f"unknown compression codec id {codec}", "compression")
        if self.record_count < 0 or self.last_offset_delta < 0:
            raise CorruptRecordError(
                f"record count {self.record_count} / last offset delta "
                f"{self.last_offset_delta} is negative", "record_count")
        if strict:
            if self.record_count == 0:
                raise CorruptRecordError("a batch must hold at least one record", "record_count")
            if self.record_count != self.last_offset_delta + 1:
                raise CorruptRecordError(
                    f"record count {self.record_count} != last offset delta "
                    f"{self.last_offset_delta} + 1", "record_count")
        elif self.record_count > <int64_t>self.last_offset_delta + 1:
            raise CorruptRecordError(
                f"record count {self.record_count} exceeds the offset range "
                f"0..{self.last_offset_delta}", "record_count")
        if codec == CODEC_NONE and self.record_count > (self.size_in_bytes - RECORDS_POS) // MIN_RECORD_SIZE:
            raise CorruptRecordError(
                f"{self.record_count} records cannot fit {self.size_in_bytes - RECORDS_POS} "
                "bytes", "record_count")
        self._ensure_records()
        p = self._records
        end = self._records + self._records_size
        for i in range(self.record_count):
            p = parse_record(p, end, &r, i)
            if strict:
                if r.offset_delta != i:
                    raise CorruptRecordError(
                        f"record {i} has offset delta {r.offset_delta}; deltas must be 0..n-1",
                        "offset_delta")
            elif r.offset_delta <= previous or r.offset_delta > self.last_offset_delta:
                raise CorruptRecordError(
                    f"record {i} has offset delta {r.offset_delta} out of order or past "
                    f"{self.last_offset_delta}", "offset_delta")
            previous = r.offset_delta
            if r.header_count:
                check_header_keys(r.headers, r.header_count)  # keys must be UTF-8
        if p != end:
            raise CorruptRecordError(
                f"{end - p} bytes follow the last of {self.record_count} records",
                "trailing_bytes")
        return 0


cdef object PyMemoryView_FromMemory_ro(const unsigned char *p, Py_ssize_t n):
    return PyMemoryView_FromMemory(<char *>p, n, PyBUF_READ)


cdef Batch read_one(object data, Py_buffer *view, Py_ssize_t pos, bint validate, bint strict):
    """The batch at view[pos:]; the caller has checked that a whole batch is there."""
    cdef const unsigned char *p = <const unsigned char *>view.buf + pos
    cdef Batch b = Batch.__new__(Batch)
    PyObject_GetBuffer(data, &b._view, PyBUF_SIMPLE)
    b._has_view = True
    b._p = <const unsigned char *>b._view.buf + pos
    b.position = pos
    b.size_in_bytes = LOG_OVERHEAD + get_i32(p + BATCH_LENGTH_POS)
    b.base_offset = get_i64(p + BASE_OFFSET_POS)
    b.partition_leader_epoch = get_i32(p + PARTITION_LEADER_EPOCH_POS)
    b.magic = <signed char>p[MAGIC_POS]
    b.crc = get_u32(p + CRC_POS)
    b.attributes = <uint16_t>get_i16(p + ATTRIBUTES_POS)
    b.last_offset_delta = get_i32(p + LAST_OFFSET_DELTA_POS)
    b.base_timestamp = get_i64(p + BASE_TIMESTAMP_POS)
    b.max_timestamp = get_i64(p + MAX_TIMESTAMP_POS)
    b.producer_id = get_i64(p + PRODUCER_ID_POS)
    b.producer_epoch = get_i16(p + PRODUCER_EPOCH_POS)
    b.base_sequence = get_i32(p + BASE_SEQUENCE_POS)
    b.record_count = get_i32(p + RECORDS_COUNT_POS)
    b._records = NULL
    b._cursor = NULL
    if validate:
        b._validate(strict)
    return b



cdef Py_ssize_t batch_extent(const unsigned char *p, Py_ssize_t available, Py_ssize_t pos) except -2:
    """Total size of the batch at p, -1 if it is cut short; raises on a bad header."""
    cdef int32_t length
    if available < LOG_OVERHEAD:
        return -1
    length = get_i32(p + BATCH_LENGTH_POS)
    if length < BATCH_HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptRecordError(
            f"batch at byte {pos}: batch length {length} is smaller than the "
            f"{BATCH_HEADER_SIZE - LOG_OVERHEAD}-byte minimum", "batch_length")
    if available < BATCH_HEADER_SIZE:
        return -1
    if p[MAGIC_POS] != MAGIC_V2:
        raise CorruptRecordError(
            f"batch at byte {pos}: magic {<signed char>p[MAGIC_POS]} is not 2 (only RecordBatch "
            "v2 is supported)", "magic")
    if length > available - LOG_OVERHEAD:
        return -1
    return LOG_OVERHEAD + length


def decode_batches(data, *, bint validate=True, bint strict=True, bint allow_partial=False):
    """Yield each Batch in ``data`` (bytes-like), validating it unless told not to.

    strict: a producer's batch (record count == lastOffsetDelta + 1, offset deltas 0..n-1);
    strict=False accepts compacted batches, whose deltas only increase.
    allow_partial: stop quietly at a cut-short last batch (as fetch responses may end)
    instead of raising.
    """
    cdef Py_buffer view
    cdef Py_ssize_t pos = 0, extent
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        while pos < view.len:
            extent = batch_extent(<const unsigned char *>view.buf + pos, view.len - pos, pos)
            if extent < 0:
                if allow_partial:
                    return
                raise CorruptRecordError(
                    f"batch at byte {pos} is truncated: {view.len - pos} bytes left",
                    "truncated")
            yield read_one(data, &view, pos, validate, strict)
            pos += extent
    finally:
        PyBuffer_Release(&view)


def validate_batch(data, *, bint strict=True):
    """Validate a buffer that must hold exactly one batch (a produce request's records)."""
    cdef Py_buffer view
    cdef Py_ssize_t extent
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        if view.len == 0:
            raise CorruptRecordError("no record batch in an empty buffer", "truncated")
        extent = batch_extent(<const unsigned char *>view.buf, view.len, 0)
        if extent < 0:
            raise CorruptRecordError(
                f"record batch is truncated: {view.len} bytes of a longer batch", "truncated")
        if extent != view.len:
            raise CorruptRecordError(
                f"{view.len - extent} bytes follow the record batch; exactly one batch is "
                "allowed", "trailing_bytes")
        return read_one(data, &view, 0, True, strict)
    finally:
        PyBuffer_Release(&view)


class UnitRuleError(ValueError):
    """Batches of one partition's records field that may not travel together (docs/protocol.md §9),
    or a producer batch breaking a header rule; the message names the batch and the rule."""


cdef str _where(Py_ssize_t index):
    return f"batch {index} of the unit"


def split_unit(data, int mode):
    """The batches of a produce request's records field, each validated as a producer batch
    (strict), checked against each other when there are several (docs/protocol.md §9) and against
    the header rules every produced batch obeys: a list of Batch (``position``: where each
    starts in ``data``). One C pass, whatever the number of batches.

    ``mode``: the request's ProduceMode; 0 allows one batch only (Kafka's rule), 1 (explicit
    offsets) rising, non-overlapping base offsets, 2 (expected offsets) each later batch
    expecting -1 or exactly where the previous one ends. Raises CorruptRecordError for a
    batch's bytes, UnitRuleError for a rule.
    """
    cdef Py_buffer view
    cdef Py_ssize_t pos = 0, extent, index = 0
    cdef list out = []
    cdef Batch b, first = None, previous = None
    cdef int32_t want
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        if view.len == 0:
            raise CorruptRecordError("no record batch in an empty buffer", "truncated")
        while pos < view.len:
            extent = batch_extent(<const unsigned char *>view.buf + pos, view.len - pos, pos)
            if extent < 0:
                raise CorruptRecordError(
                    f"batch at byte {pos} is truncated: {view.len - pos} bytes left",
                    "truncated")
            if index == 1 and mode == 0:
                raise CorruptRecordError(
                    f"{view.len - pos} bytes follow the record batch; exactly one batch is "
                    "allowed", "trailing_bytes")
            b = read_one(data, &view, pos, True, True)
            if b.attributes & CONTROL_FLAG:
                raise UnitRuleError("clients may not produce control batches")
            if b.producer_id >= 0 and b.base_sequence < 0:
                raise UnitRuleError(f"producer id {b.producer_id} sent no base sequence")
            if first is None:
                first = b
            else:
                # (the rule texts name the batch with _where(index), built only when one is
                # broken: this loop runs once per batch of every produce request)
                if b.producer_id != first.producer_id or b.producer_epoch != first.producer_epoch:
                    raise UnitRuleError(
                        f"{_where(index)}: producer {b.producer_id} epoch {b.producer_epoch} differs "
                        f"from the first batch's ({first.producer_id}, "
                        f"{first.producer_epoch})")
                if (b.attributes & TRANSACTIONAL_FLAG) != (first.attributes & TRANSACTIONAL_FLAG):
                    raise UnitRuleError(f"{_where(index)}: transactional flag differs from the first "
                                        "batch's")
                if first.producer_id >= 0 and first.base_sequence >= 0:
                    want = increment_sequence(
                        increment_sequence(previous.base_sequence, previous.last_offset_delta), 1)
                    if b.base_sequence != want:
                        raise UnitRuleError(
                            f"{_where(index)}: base sequence {b.base_sequence} does not continue the "
                            f"previous batch (expected {want})")
                if mode == 1:
                    if b.base_offset < previous.base_offset + previous.record_count:
                        raise UnitRuleError(
                            f"{_where(index)}: base offset {b.base_offset} overlaps or goes back (the "
                            f"previous batch ends at "
                            f"{previous.base_offset + previous.record_count - 1}); offsets "
                            "must rise")
                elif b.base_offset != -1:
                    if previous.base_offset == -1:
                        raise UnitRuleError(
                            f"{_where(index)}: expects offset {b.base_offset} after a batch with no "
                            "expectation; later batches must then expect nothing (-1)")
                    if b.base_offset != previous.base_offset + previous.record_count:
                        raise UnitRuleError(
                            f"{_where(index)}: expects offset {b.base_offset}, but the previous batch "
                            f"ends at {previous.base_offset + previous.record_count - 1}; a "
                            "later batch expects -1 or exactly "
                            f"{previous.base_offset + previous.record_count}")
            out.append(b)
            previous = b
            pos += extent
            index += 1
        return out
    finally:
        PyBuffer_Release(&view)


def unit_summary(list batches):
    """(largest size_in_bytes, total records, newest max_timestamp, any batch compressed) of
    a unit's batches (split_unit's list, not empty), in one C pass: the broker checks these
    for every produce request, and a copy of a compacted topic sends thousands of batches
    per request (Python generator expressions over them cost more than reading them)."""
    cdef Batch b = batches[0]
    cdef Py_ssize_t largest = b.size_in_bytes
    cdef int64_t records = 0
    cdef int64_t newest = b.max_timestamp
    cdef bint compressed = False
    for b in batches:
        if b.size_in_bytes > largest:
            largest = b.size_in_bytes
        records += b.record_count
        if b.max_timestamp > newest:
            newest = b.max_timestamp
        if b.attributes & COMPRESSION_MASK:
            compressed = True
    return largest, records, newest, compressed


def place_unit(data, list batches, int64_t first_offset, int32_t leader_epoch):
    """Write where each batch of a unit lands into ``data`` in place: with ``first_offset``
    >= 0 the batches go back to back from it (offsets assigned), else each keeps its own base
    offset; every partitionLeaderEpoch becomes ``leader_epoch``. Returns (first offset, last
    offset, max timestamp) of the unit."""
    cdef Batch b
    cdef int64_t base, next_offset = first_offset, first = -1, max_ts = -1
    for b in batches:
        base = next_offset if first_offset >= 0 else b.base_offset
        if base != b.base_offset:
            patch_header(data, b.position, BASE_OFFSET_POS, base, True)
        patch_header(data, b.position, PARTITION_LEADER_EPOCH_POS, leader_epoch, False)
        if first < 0:
            first = base
        if b.max_timestamp > max_ts:
            max_ts = b.max_timestamp
        next_offset = base + b.last_offset_delta + 1
    return first, next_offset - 1, max_ts


def null_key_indexes(Batch batch not None):
    """Indexes of the records with a null key (a compacted topic refuses them)."""
    cdef RecordView r
    cdef const unsigned char *p
    cdef const unsigned char *end
    cdef Py_ssize_t i
    cdef list out = []
    batch._ensure_records()
    p = batch._records
    end = batch._records + batch._records_size
    for i in range(batch.record_count):
        p = parse_record(p, end, &r, i)
        if r.key_size < 0:
            out.append(i)
    return out


cdef int patch_header(object buf, Py_ssize_t pos, Py_ssize_t field_pos, int64_t value,
                      bint wide) except -1:
    """Overwrite one header field of the batch at buf[pos:] in place: an int64 (wide) or an
    int32 at ``field_pos``. Only fields outside the CRC'd range may be patched this way."""
    cdef Py_buffer view
    PyObject_GetBuffer(buf, &view, PyBUF_WRITABLE)
    try:
        if pos < 0 or view.len - pos < BATCH_HEADER_SIZE:
            raise ValueError("no batch header at that position")
        if wide:
            put_i64(<unsigned char *>view.buf + pos + field_pos, value)
        else:
            put_i32(<unsigned char *>view.buf + pos + field_pos, <int32_t>value)
    finally:
        PyBuffer_Release(&view)
    return 0


def set_base_offset(buf, int64_t base_offset, Py_ssize_t pos=0):
    """Overwrite the baseOffset of the batch at buf[pos:] in place (outside the CRC)."""
    patch_header(buf, pos, BASE_OFFSET_POS, base_offset, True)


def set_partition_leader_epoch(buf, int32_t epoch, Py_ssize_t pos=0):
    """Overwrite the partitionLeaderEpoch of the batch at buf[pos:] in place (outside the CRC)."""
    patch_header(buf, pos, PARTITION_LEADER_EPOCH_POS, epoch, False)


def next_sequence(int32_t sequence, int32_t increment):
    """Kafka's sequence arithmetic: sequence + increment, wrapping after 2**31 - 1 to 0."""
    if increment < 0:
        raise ValueError("increment must not be negative")
    return increment_sequence(sequence, increment)


def rebuild_batch(Batch batch not None, records):
    """Re-encode a subset of ``batch``'s records, keeping their offsets (log compaction).

    The header keeps base offset, lastOffsetDelta, producer fields, attributes (codec,
    transactional, control) and timestamps' base; records keep their offset and timestamp.
    ``records`` must come from the batch in offset order; an empty list gives an empty batch
    (record count 0), which Kafka keeps to preserve the producer's last sequence.
    """
    cdef ByteBuf buf
    cdef Blob kb, vb
    cdef BatchFields f
    cdef Record rec
    cdef int64_t previous = -1, max_ts = -1, delta
    cdef Py_ssize_t hsize, hcount, body, n = 0
    cdef unsigned char *p
    cdef int codec = batch.attributes & COMPRESSION_MASK
    buf.data = NULL
    buf.size = 0
    buf.capacity = 0
    kb.has_view = False
    vb.has_view = False
    try:
        bytebuf_reserve(&buf, BATCH_HEADER_SIZE)
        buf.size = BATCH_HEADER_SIZE
        for obj in records:
            rec = <Record?>obj
            delta = rec.offset - batch.base_offset
            if delta <= previous or delta > batch.last_offset_delta:
                raise ValueError(
                    f"record offset {rec.offset} is not inside batch "
                    f"{batch.base_offset}..{batch.last_offset} in increasing order")
            previous = delta
            if rec.timestamp > max_ts:
                max_ts = rec.timestamp
            hcount = 0
            hsize = headers_wire_size(rec.headers, &hcount) if rec.headers else 1
            blob_from(rec.key, &kb, "key")
            blob_from(rec.value, &vb, "value")
            body = record_body_size(rec.timestamp - batch.base_timestamp, <int32_t>delta,
                                    &kb, &vb, hsize)
            bytebuf_reserve(&buf, body + 5)
            p = write_record_head(buf.data + buf.size, body, rec.timestamp - batch.base_timestamp,
                                  <int32_t>delta, &kb, &vb)
            blob_release(&kb)
            blob_release(&vb)
            if rec.headers:
                p = write_headers(p, rec.headers, hcount)
            else:
                p[0] = 0
                p += 1
            buf.size = p - buf.data
            n += 1
        f.base_offset = batch.base_offset
        f.partition_leader_epoch = batch.partition_leader_epoch
        # An empty batch has no records section to compress: clear the codec bits.
        f.attributes = <int16_t>(batch.attributes if n else batch.attributes & ~COMPRESSION_MASK)
        f.last_offset_delta = batch.last_offset_delta
        f.base_timestamp = batch.base_timestamp
        f.max_timestamp = batch.max_timestamp if n == 0 else max_ts
        f.producer_id = batch.producer_id
        f.producer_epoch = <int16_t>batch.producer_epoch
        f.base_sequence = batch.base_sequence
        f.records_count = <int32_t>n
        return build_batch(&f, buf.data + BATCH_HEADER_SIZE, buf.size - BATCH_HEADER_SIZE,
                           codec if n else 0, _compress)
    finally:
        blob_release(&kb)
        blob_release(&vb)
        bytebuf_free(&buf)


def plain_run(data, Py_ssize_t pos, bint stop_at_transactional):
    """The run of batches from ``pos`` that kip mirror's fast path forwards as they are (whole
    v2 batches, uncompressed, CreateTime, not control, and not transactional when
    ``stop_at_transactional``): (end position, batches, records, next offset, last max
    timestamp). The run stops before any other batch, before a batch cut short and at the
    end; (pos, 0, 0, -1, -1) when the batch at ``pos`` is not such a batch. Only headers are
    read (kipproducer.mirror.batches checks the rest)."""
    cdef Py_buffer view
    cdef const unsigned char *p
    cdef Py_ssize_t size, end
    cdef Py_ssize_t batches = 0, records = 0
    cdef int64_t next_offset = -1, max_ts = -1
    cdef int16_t attributes
    cdef int32_t length, count, last_delta
    cdef int16_t stop = COMPRESSION_MASK | TIMESTAMP_TYPE_MASK | CONTROL_FLAG
    if stop_at_transactional:
        stop |= TRANSACTIONAL_FLAG
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        p = <const unsigned char *>view.buf
        size = view.len
        if pos < 0:
            raise ValueError("pos must not be negative")
        while size - pos >= BATCH_HEADER_SIZE:
            length = get_i32(p + pos + BATCH_LENGTH_POS)
            end = pos + LOG_OVERHEAD + length
            if length < BATCH_HEADER_SIZE - LOG_OVERHEAD or end > size:
                break
            attributes = get_i16(p + pos + ATTRIBUTES_POS)
            count = get_i32(p + pos + RECORDS_COUNT_POS)
            last_delta = get_i32(p + pos + LAST_OFFSET_DELTA_POS)
            if (p[pos + MAGIC_POS] != MAGIC_V2 or attributes & stop or count <= 0
                    or last_delta < 0):
                break
            batches += 1
            records += count
            next_offset = get_i64(p + pos + BASE_OFFSET_POS) + last_delta + 1
            max_ts = get_i64(p + pos + MAX_TIMESTAMP_POS)
            pos = end
    finally:
        PyBuffer_Release(&view)
    return pos, batches, records, next_offset, max_ts


# -- receive buffers (protocol.framing.FrameReceiver) -------------------------------------------


def receive_buffer(Py_ssize_t size):
    """A bytearray of ``size`` bytes whose content is unset (not zero-filled): for a buffer the
    socket is about to fill. Its bytes must be written before they are read."""
    if size < 0:
        raise ValueError(f"receive_buffer size must not be negative, got {size}")
    return PyByteArray_FromStringAndSize(NULL, size)


def extend_receive_buffer(bytearray buf, Py_ssize_t size):
    """Grow ``buf`` to ``size`` bytes in place, the new bytes unset (realloc: a large buffer is
    usually remapped, not copied). BufferError while a view of ``buf`` is alive."""
    if size < len(buf):
        raise ValueError(f"extend_receive_buffer cannot shrink {len(buf)} bytes to {size}")
    PyByteArray_Resize(buf, size)
