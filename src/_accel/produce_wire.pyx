"""Produce v9..v12 requests and answers on the wire, in C (compiled as kipproducer._produce_wire).

The public API is kipproducer.protocol.produce_codec; this module is its engine room. A copy
whose offsets have gaps sends one batch per request (docs/protocol.md §4 keeps a batch's offsets
consecutive; Kafka allows one batch per partition per request), so these four functions run
thousands of times a second on each side: the client encodes the request and decodes the
answer, the broker decodes the request and encodes the answer. The generic schema codec
(kio classes compiled to Python) stays the reference for every other API and version, and the
tests hold the two to the same bytes and the same decoded fields.

Layouts (Kafka's Produce schemas, flexible versions 9..12; all integers big-endian):

    request header v2  api_key int16, api_version int16, correlation_id int32,
                       client_id nullable string (int16 length, -1 = null), tag buffer
    request body       transactional_id compact nullable string, acks int16, timeout int32,
                       topic_data compact array of
                         name compact string,
                         partition_data compact array of
                           index int32, records compact nullable bytes,
                           tag buffer {10001: KeyConditions compact bytes (§10)}
                         tag buffer
                       tag buffer {10000: ProduceMode int8 (docs/protocol.md §2)}
    response header v1 correlation_id int32, tag buffer
    response body      responses compact array of
                         name compact string,
                         partition_responses compact array of
                           index int32, error_code int16, base_offset int64,
                           log_append_time int64, log_start_offset int64,
                           record_errors compact array of
                             batch_index int32, message compact nullable string, tag buffer
                           error_message compact nullable string,
                           tag buffer {0: current_leader (v10+, skipped here),
                                       10000: LogEndOffset int64 (docs/protocol.md §3),
                                       10001: KeyConflicts compact bytes (§10)}
                         tag buffer
                       throttle_time int32, tag buffer {0: node_endpoints (v10+, skipped)}

Compact lengths are unsigned varints of length + 1 (0 = null). Decoding follows the generic
decoder's rules: every length is checked against the bytes left before anything is sliced,
unknown tagged fields are skipped, trailing bytes after the body are ignored, and every
failure is a ProtocolError that names the struct and the byte.
"""
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_FromStringAndSize
from cpython.mem cimport PyMem_Free, PyMem_Realloc
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int16_t, int32_t, int64_t, uint64_t
from libc.string cimport memcpy

# Big-endian loads and stores: one home for them, next to the RecordBatch layout.
from batch_layout cimport get_i16, get_i32, get_i64, put_i16, put_i32, put_i64
from varint cimport read_uvarint, uvarint_size, write_uvarint

from kipproducer.protocol.encoder import SPILL_MIN_BYTES
from kipproducer.protocol.errors import ProtocolError

cdef extern from "Python.h":
    const char *PyUnicode_AsUTF8AndSize(object obj, Py_ssize_t *size) except NULL

cdef enum:
    PRODUCE_API_KEY = 0
    MIN_VERSION = 9
    MAX_VERSION = 12
    # Kafka's unsigned varints (array and string lengths, tags) are at most 5 bytes.
    MAX_UVARINT_BYTES = 5
    PRODUCE_MODE_TAG = 10000
    LOG_END_OFFSET_TAG = 10000
    KEY_CONDITIONS_TAG = 10001
    KEY_CONFLICTS_TAG = 10001
    # request header up to client_id, and the fixed part of a partition's answer
    REQUEST_HEAD_SIZE = 14          # size, api key, version, correlation id, client id length
    PARTITION_ANSWER_FIXED = 30     # index, error_code, base_offset, log_append_time,
                                    # log_start_offset
    LOG_END_TAG_SIZE = 12           # tag count 1, tag 10000 (2 bytes), size 8 (1), int64
    MAX_FRAME_SIZE = 0x7FFFFFFF

# The versions this module codes, for produce_codec.DIRECT_VERSIONS.
DIRECT_MIN_VERSION = MIN_VERSION
DIRECT_MAX_VERSION = MAX_VERSION

# Records of at least this many bytes go out as their own buffer (written by the transport
# straight from the batch), smaller ones are copied into the frame: the generic encoder's rule.
cdef Py_ssize_t spill_min_bytes = SPILL_MIN_BYTES


# ---- decoded objects ---------------------------------------------------------------------
# Attribute names are those of kio's ProduceRequest / ProduceResponse classes (and of the
# kipproducer extension fields), so code reads either decoder's result the same way.

cdef class PartitionProduceData:
    cdef readonly int32_t index
    cdef readonly object records
    """A writable memoryview of the request frame (the broker stamps offsets in place), or
    None."""
    cdef readonly object key_conditions
    """The KeyConditions tag's bytes (docs/protocol.md §10), None when absent."""

    def __repr__(self):
        size = None if self.records is None else len(self.records)
        return f"PartitionProduceData(index={self.index}, records=<{size} bytes>)"


cdef class TopicProduceData:
    cdef readonly str name
    cdef readonly tuple partition_data

    def __repr__(self):
        return f"TopicProduceData(name={self.name!r}, partition_data={self.partition_data!r})"


cdef class ProduceRequestBody:
    cdef readonly object transactional_id
    cdef readonly int16_t acks
    cdef readonly int32_t timeout
    cdef readonly tuple topic_data
    cdef readonly int produce_mode

    def __repr__(self):
        return (f"ProduceRequestBody(transactional_id={self.transactional_id!r}, "
                f"acks={self.acks}, timeout={self.timeout}, topic_data={self.topic_data!r}, "
                f"produce_mode={self.produce_mode})")


cdef class BatchIndexAndErrorMessage:
    cdef readonly int32_t batch_index
    cdef readonly object batch_index_error_message

    def __repr__(self):
        return (f"BatchIndexAndErrorMessage(batch_index={self.batch_index}, "
                f"batch_index_error_message={self.batch_index_error_message!r})")


cdef class PartitionProduceResponse:
    cdef readonly int32_t index
    cdef readonly int16_t error_code
    cdef readonly int64_t base_offset
    cdef readonly int64_t log_append_time
    cdef readonly int64_t log_start_offset
    cdef readonly tuple record_errors
    cdef readonly object error_message
    cdef readonly object log_end_offset
    """The KIP-WIRE LogEndOffset tag, None when the broker did not send it."""
    cdef readonly object key_conflicts
    """The KeyConflicts tag's bytes (docs/protocol.md §10), None when absent."""

    def __repr__(self):
        return (f"PartitionProduceResponse(index={self.index}, error_code={self.error_code}, "
                f"base_offset={self.base_offset}, log_append_time={self.log_append_time}, "
                f"log_start_offset={self.log_start_offset}, "
                f"record_errors={self.record_errors!r}, "
                f"error_message={self.error_message!r}, log_end_offset={self.log_end_offset!r}, "
                f"key_conflicts={self.key_conflicts!r})")


cdef class TopicProduceResponse:
    cdef readonly str name
    cdef readonly tuple partition_responses

    def __repr__(self):
        return (f"TopicProduceResponse(name={self.name!r}, "
                f"partition_responses={self.partition_responses!r})")


cdef class ProduceResponseBody:
    cdef readonly tuple responses
    cdef readonly int32_t throttle_time

    def __repr__(self):
        return (f"ProduceResponseBody(responses={self.responses!r}, "
                f"throttle_time={self.throttle_time})")


# ---- reading -----------------------------------------------------------------------------

cdef struct Reader:
    const unsigned char *start
    const unsigned char *p
    const unsigned char *end


cdef object truncated(str owner, Reader *r):
    return ProtocolError(f"truncated buffer while decoding {owner} "
                         f"(at byte {r.p - r.start})")


cdef inline int need(Reader *r, Py_ssize_t n, str owner) except -1:
    if r.end - r.p < n:
        raise truncated(owner, r)
    return 0


cdef inline int32_t read_i32(Reader *r, str owner) except? -1:
    need(r, 4, owner)
    r.p += 4
    return get_i32(r.p - 4)


cdef uint64_t read_length(Reader *r, str owner) except? 0xFFFFFFFFFFFFFFFF:
    """An unsigned varint of at most 5 bytes."""
    cdef uint64_t value
    cdef const unsigned char *after
    if r.p < r.end and r.p[0] < 0x80:  # the usual one-byte case
        value = r.p[0]
        r.p += 1
        return value
    after = read_uvarint(r.p, r.end, &value, MAX_UVARINT_BYTES)
    if after == NULL:
        if r.end - r.p >= MAX_UVARINT_BYTES:
            raise ProtocolError(f"{owner}: varint too long (more than 5 bytes) at byte "
                                f"{r.p - r.start}")
        raise truncated(owner, r)
    r.p = after
    return value


cdef Py_ssize_t read_count(Reader *r, str owner, Py_ssize_t min_item_size) except -1:
    """A compact array's element count (no Produce array is nullable). Refuses null, and
    counts whose items cannot fit in the bytes left."""
    cdef uint64_t n = read_length(r, owner)
    if n == 0:
        raise ProtocolError(f"{owner}: null for a non-nullable field")
    n -= 1
    if n > <uint64_t>((r.end - r.p) // min_item_size):
        raise ProtocolError(f"{owner}: length {n} exceeds the {r.end - r.p} bytes remaining")
    return <Py_ssize_t>n


cdef Py_ssize_t read_span(Reader *r, str owner) except -2:
    """The length of a compact string or bytes field, -1 for null; refuses a length that
    runs past the bytes left (the caller then takes that many bytes at r.p)."""
    cdef uint64_t n = read_length(r, owner)
    if n == 0:
        return -1
    n -= 1
    if n > <uint64_t>(r.end - r.p):
        raise ProtocolError(f"{owner}: length {n} exceeds the {r.end - r.p} bytes remaining")
    return <Py_ssize_t>n


cdef object read_string(Reader *r, str owner, bint nullable):
    cdef Py_ssize_t n = read_span(r, owner)
    cdef object text
    if n < 0:
        if not nullable:
            raise ProtocolError(f"{owner}: null for a non-nullable field")
        return None
    try:
        text = PyUnicode_DecodeUTF8(<const char *>r.p, n, NULL)
    except UnicodeDecodeError:
        raise ProtocolError(f"{owner}: string is not UTF-8 (near byte {r.p - r.start})") \
            from None
    r.p += n
    return text


cdef int skip_tags(Reader *r, str owner, int wanted_tag, int64_t *value, int value_size,
                   bint *found, int bytes_tag=-1, list bytes_out=None) except -1:
    """Read a tag buffer, skipping every tag but ``wanted_tag`` (-1: none), whose value (an
    int of ``value_size`` bytes, read within the tag's size) goes to ``value``, and
    ``bytes_tag``, whose value (compact bytes within the tag's size) is appended to
    ``bytes_out``."""
    cdef uint64_t count, tag, size
    cdef uint64_t i
    cdef Reader inner
    cdef Py_ssize_t n
    if r.p < r.end and r.p[0] == 0:  # no tags: the usual case
        r.p += 1
        return 0
    count = read_length(r, owner)
    if count > <uint64_t>((r.end - r.p) // 2):  # each tagged field takes at least 2 bytes
        raise ProtocolError(f"{owner}: {count} tagged fields cannot fit in "
                            f"{r.end - r.p} bytes")
    for i in range(count):
        tag = read_length(r, owner)
        size = read_length(r, owner)
        if size > <uint64_t>(r.end - r.p):
            raise ProtocolError(f"{owner}: tagged field {tag} of {size} bytes overruns the "
                                "buffer")
        if <int64_t>tag == wanted_tag:
            if size < <uint64_t>value_size:
                raise ProtocolError(f"{owner}: tagged field {tag} is longer than its size")
            if value_size == 1:
                value[0] = <signed char>r.p[0]
            else:
                value[0] = get_i64(r.p)
            found[0] = True
        elif <int64_t>tag == bytes_tag:
            inner.start = r.start
            inner.p = r.p
            inner.end = r.p + size
            n = read_span(&inner, owner)
            bytes_out.append(None if n < 0 else (<const char *>inner.p)[:n])
        r.p += size
    return 0


cdef inline int open_frame(object frame, Py_buffer *view, Reader *r, Py_ssize_t pos) except -1:
    PyObject_GetBuffer(frame, view, PyBUF_SIMPLE)
    r.start = <const unsigned char *>view.buf
    r.end = r.start + view.len
    if pos < 0 or pos > view.len:
        PyBuffer_Release(view)
        raise ProtocolError(f"Produce: body offset {pos} outside the {view.len}-byte frame")
    r.p = r.start + pos
    return 0


def decode_request_body(object frame, Py_ssize_t pos, int version):
    """The ProduceRequest body at ``frame[pos:]`` (``frame`` a writable buffer, usually the
    received bytearray): a ProduceRequestBody whose records are memoryviews of ``frame``."""
    cdef Py_buffer view
    cdef Reader r
    cdef Py_ssize_t topic_count, part_count, i, j, size
    cdef int64_t mode = 0
    cdef bint has_mode = False
    cdef ProduceRequestBody body
    cdef TopicProduceData topic
    cdef PartitionProduceData part
    cdef list topics, parts, found_bytes
    cdef str owner = f"ProduceRequest v{version}"
    cdef object frame_view
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"Produce v{version} is not a direct version")
    open_frame(frame, &view, &r, pos)
    try:
        body = ProduceRequestBody.__new__(ProduceRequestBody)
        body.transactional_id = read_string(&r, owner, True)
        need(&r, 6, owner)
        body.acks = get_i16(r.p)
        body.timeout = get_i32(r.p + 2)
        r.p += 6
        # each topic takes at least 3 bytes (name length, partition count, tags)
        topic_count = read_count(&r, owner, 3)
        topics = []
        frame_view = None
        for i in range(topic_count):
            topic = TopicProduceData.__new__(TopicProduceData)
            topic.name = read_string(&r, "TopicProduceData", False)
            # each partition takes at least 6 bytes (index, records length, tags)
            part_count = read_count(&r, "TopicProduceData", 6)
            parts = []
            for j in range(part_count):
                part = PartitionProduceData.__new__(PartitionProduceData)
                part.index = read_i32(&r, "PartitionProduceData")
                size = read_span(&r, "PartitionProduceData")
                if size < 0:
                    part.records = None
                else:
                    if frame_view is None:
                        frame_view = memoryview(frame)
                    part.records = frame_view[r.p - r.start:r.p - r.start + size]
                    r.p += size
                if r.p < r.end and r.p[0] == 0:  # no tags: the usual case
                    r.p += 1
                else:
                    found_bytes = []
                    skip_tags(&r, "PartitionProduceData", -1, NULL, 0, NULL,
                              KEY_CONDITIONS_TAG, found_bytes)
                    if found_bytes:
                        part.key_conditions = found_bytes[0]
                parts.append(part)
            topic.partition_data = tuple(parts)
            skip_tags(&r, "TopicProduceData", -1, NULL, 0, NULL)
            topics.append(topic)
        body.topic_data = tuple(topics)
        skip_tags(&r, owner, PRODUCE_MODE_TAG, &mode, 1, &has_mode)
        body.produce_mode = <int>mode
        return body
    finally:
        PyBuffer_Release(&view)


def decode_response(object frame, int version):
    """The body of a ProduceResponse frame (correlation id, header tags, body): a
    ProduceResponseBody. The v10+ current_leader and node_endpoints tags are skipped (the
    producer refreshes metadata on NOT_LEADER instead)."""
    cdef Py_buffer view
    cdef Reader r
    cdef Py_ssize_t topic_count, part_count, error_count, i, j, k
    cdef int64_t log_end = 0
    cdef bint has_log_end
    cdef ProduceResponseBody body
    cdef TopicProduceResponse topic
    cdef PartitionProduceResponse part
    cdef BatchIndexAndErrorMessage rec_error
    cdef list topics, parts, errors, found_bytes
    cdef str owner = f"ProduceResponse v{version}"
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"Produce v{version} is not a direct version")
    open_frame(frame, &view, &r, 0)
    try:
        need(&r, 4, "response header")
        r.p += 4  # the correlation id: the caller matched it already
        skip_tags(&r, "response header", -1, NULL, 0, NULL)
        body = ProduceResponseBody.__new__(ProduceResponseBody)
        topic_count = read_count(&r, owner, 3)
        topics = []
        for i in range(topic_count):
            topic = TopicProduceResponse.__new__(TopicProduceResponse)
            topic.name = read_string(&r, "TopicProduceResponse", False)
            part_count = read_count(&r, "TopicProduceResponse", PARTITION_ANSWER_FIXED + 3)
            parts = []
            for j in range(part_count):
                part = PartitionProduceResponse.__new__(PartitionProduceResponse)
                need(&r, PARTITION_ANSWER_FIXED, "PartitionProduceResponse")
                part.index = get_i32(r.p)
                part.error_code = get_i16(r.p + 4)
                part.base_offset = get_i64(r.p + 6)
                part.log_append_time = get_i64(r.p + 14)
                part.log_start_offset = get_i64(r.p + 22)
                r.p += PARTITION_ANSWER_FIXED
                error_count = read_count(&r, "PartitionProduceResponse", 6)
                if error_count == 0:
                    part.record_errors = ()
                else:
                    errors = []
                    for k in range(error_count):
                        rec_error = BatchIndexAndErrorMessage.__new__(BatchIndexAndErrorMessage)
                        rec_error.batch_index = read_i32(&r, "BatchIndexAndErrorMessage")
                        rec_error.batch_index_error_message = read_string(
                            &r, "BatchIndexAndErrorMessage", True)
                        skip_tags(&r, "BatchIndexAndErrorMessage", -1, NULL, 0, NULL)
                        errors.append(rec_error)
                    part.record_errors = tuple(errors)
                part.error_message = read_string(&r, "PartitionProduceResponse", True)
                has_log_end = False
                found_bytes = []
                skip_tags(&r, "PartitionProduceResponse", LOG_END_OFFSET_TAG, &log_end, 8,
                          &has_log_end, KEY_CONFLICTS_TAG, found_bytes)
                part.log_end_offset = log_end if has_log_end else None
                if found_bytes:
                    part.key_conflicts = found_bytes[0]
                parts.append(part)
            topic.partition_responses = tuple(parts)
            skip_tags(&r, "TopicProduceResponse", -1, NULL, 0, NULL)
            topics.append(topic)
        body.responses = tuple(topics)
        body.throttle_time = read_i32(&r, owner)
        skip_tags(&r, owner, -1, NULL, 0, NULL)
        return body
    finally:
        PyBuffer_Release(&view)


# ---- writing -----------------------------------------------------------------------------

cdef inline Py_ssize_t compact_size(Py_ssize_t n) noexcept:
    return uvarint_size(<uint64_t>(n + 1)) + n


cdef inline unsigned char *put_compact(unsigned char *p, const char *data,
                                       Py_ssize_t n) noexcept:
    p = write_uvarint(p, <uint64_t>(n + 1))
    memcpy(p, data, n)
    return p + n


cdef inline const char *utf8_of(object text, Py_ssize_t *size) except NULL:
    if not isinstance(text, str):
        raise TypeError(f"expected a str, got {type(text).__name__}")
    return PyUnicode_AsUTF8AndSize(text, size)

cdef inline object conditions_of(object item):
    return item[2] if len(item) > 2 else None


cdef Py_ssize_t partition_tags_size(object item) except -1:
    """The bytes of a request partition's tag buffer: 1 without KeyConditions."""
    cdef object conditions = conditions_of(item)
    cdef Py_ssize_t n
    if conditions is None:
        return 1
    n = compact_size(len(conditions))
    return 1 + 2 + uvarint_size(<uint64_t>n) + n  # count, tag 10001 (2 bytes), size, value


cdef unsigned char *write_bytes_tag(unsigned char *p, int tag, object value) except NULL:
    """One tagged field holding compact bytes (the caller wrote the tag count)."""
    cdef const unsigned char[:] data = value
    cdef Py_ssize_t n = data.shape[0]
    p = write_uvarint(p, <uint64_t>tag)
    p = write_uvarint(p, <uint64_t>compact_size(n))
    p = write_uvarint(p, <uint64_t>(n + 1))
    if n:
        memcpy(p, &data[0], n)
    return p + n


cdef unsigned char *write_partition_tags(unsigned char *p, object item) except NULL:
    cdef object conditions = conditions_of(item)
    if conditions is None:
        p[0] = 0
        return p + 1
    p[0] = 1
    return write_bytes_tag(p + 1, KEY_CONDITIONS_TAG, conditions)


def encode_request(int32_t correlation_id, object client_id, int version, int acks,
                   int32_t timeout_ms, dict topics, int mode=0):
    """A Produce request frame as buffers for ``writelines``: ``topics`` maps each topic to
    its (partition, record batch) or (partition, record batch, key conditions) tuples, the
    key conditions the KeyConditions tag's bytes or None (docs/protocol.md §10). Records of at least the spill size are passed
    through as their own buffer, uncopied; the rest is one bytearray per run."""
    cdef Py_ssize_t client_len = -1, name_len, size, total = 0, rec_len, tags_len
    cdef const char *client = NULL
    cdef const char *name
    cdef Py_buffer rec
    cdef list parts = [], segment_sizes = []
    cdef object buf, records
    cdef unsigned char *p
    cdef Py_ssize_t seg = 0
    cdef int32_t index
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"Produce v{version} is not a direct version")
    if client_id is not None:
        client = utf8_of(client_id, &client_len)
        if client_len > 0x7FFF:
            raise ProtocolError("client_id is too long for its int16 length")
    # Pass 1: the size of each copied run between spilled records.
    size = REQUEST_HEAD_SIZE + max(client_len, 0) + 1 + 1 + 6 + uvarint_size(len(topics) + 1)
    for topic_name, partitions in topics.items():
        utf8_of(topic_name, &name_len)
        size += compact_size(name_len) + uvarint_size(len(partitions) + 1)
        for item in partitions:
            # index, and the partition's tag buffer (after the records)
            tags_len = partition_tags_size(item)
            size += 4 + tags_len
            records = item[1]
            if records is None:
                size += 1
                continue
            PyObject_GetBuffer(records, &rec, PyBUF_SIMPLE)  # bytes, not items
            rec_len = rec.len
            PyBuffer_Release(&rec)
            size += uvarint_size(<uint64_t>(rec_len + 1))
            if rec_len >= spill_min_bytes:
                total += rec_len
                segment_sizes.append(size - tags_len)  # the tag buffer goes after the spill
                size = tags_len
            else:
                size += rec_len
        size += 1  # the topic's tag buffer
    size += 1 if mode == 0 else 5  # top-level tags: none, or {10000: int8}
    segment_sizes.append(size)
    for seg_size in segment_sizes:
        total += <Py_ssize_t>seg_size
    if total - 4 > MAX_FRAME_SIZE:
        raise ProtocolError(f"frame of {total - 4} bytes is too large for an int32 size")
    # Pass 2: write.
    buf = PyByteArray_FromStringAndSize(NULL, segment_sizes[0])
    parts.append(buf)
    p = <unsigned char *>PyByteArray_AS_STRING(buf)
    put_i32(p, <int32_t>(total - 4))
    put_i16(p + 4, PRODUCE_API_KEY)
    put_i16(p + 6, <int16_t>version)
    put_i32(p + 8, correlation_id)
    put_i16(p + 12, <int16_t>client_len)
    p += REQUEST_HEAD_SIZE
    if client_len > 0:
        memcpy(p, client, client_len)
        p += client_len
    p[0] = 0  # header tags
    p[1] = 0  # transactional_id: null (transactions go through librdkafka)
    p += 2
    put_i16(p, <int16_t>acks)
    put_i32(p + 2, timeout_ms)
    p = write_uvarint(p + 6, len(topics) + 1)
    for topic_name, partitions in topics.items():
        name = utf8_of(topic_name, &name_len)
        p = put_compact(p, name, name_len)
        p = write_uvarint(p, len(partitions) + 1)
        for item in partitions:
            index = item[0]
            records = item[1]
            put_i32(p, index)
            p += 4
            if records is None:
                p[0] = 0
                p = write_partition_tags(p + 1, item)
                continue
            PyObject_GetBuffer(records, &rec, PyBUF_SIMPLE)
            try:
                p = write_uvarint(p, <uint64_t>(rec.len + 1))
                if rec.len >= spill_min_bytes:
                    parts.append(records)
                    seg += 1
                    buf = PyByteArray_FromStringAndSize(NULL, segment_sizes[seg])
                    parts.append(buf)
                    p = <unsigned char *>PyByteArray_AS_STRING(buf)
                else:
                    memcpy(p, rec.buf, rec.len)
                    p += rec.len
            finally:
                PyBuffer_Release(&rec)
            p = write_partition_tags(p, item)
        p[0] = 0  # topic tags
        p += 1
    if mode == 0:
        p[0] = 0
    else:
        p[0] = 1
        write_uvarint(p + 1, PRODUCE_MODE_TAG)  # 2 bytes
        p[3] = 1
        p[4] = <unsigned char>(<signed char>mode)
    return parts


cdef struct Writer:
    unsigned char *data
    Py_ssize_t size
    Py_ssize_t capacity


cdef unsigned char *reserve(Writer *w, Py_ssize_t n) except NULL:
    cdef Py_ssize_t cap
    cdef unsigned char *grown
    if w.size + n > w.capacity:
        cap = max(w.capacity * 2, w.size + n, 256)
        grown = <unsigned char *>PyMem_Realloc(w.data, cap)
        if grown == NULL:
            raise MemoryError()
        w.data = grown
        w.capacity = cap
    return w.data + w.size


cdef int write_byte(Writer *w, unsigned char b) except -1:
    reserve(w, 1)[0] = b
    w.size += 1
    return 0


cdef int write_nullable_string(Writer *w, object text) except -1:
    cdef Py_ssize_t n
    cdef const char *data
    cdef unsigned char *p
    if text is None:
        return write_byte(w, 0)
    data = utf8_of(text, &n)
    p = reserve(w, n + MAX_UVARINT_BYTES)
    w.size = put_compact(p, data, n) - w.data
    return 0


def encode_response(int32_t correlation_id, int version, list responses):
    """The answer frame from the produce handler's dicts: per topic ``name`` and
    ``partition_responses``, per partition ``index``, ``error_code`` (default 0),
    ``base_offset``, ``log_append_time``, ``log_start_offset``, ``record_errors`` (dicts with
    ``batch_index`` and ``batch_index_error_message``), ``error_message`` and, with a
    ProduceMode, ``log_end_offset``."""
    cdef Writer w
    cdef unsigned char *p
    cdef dict topic, answer, rec_error
    cdef list partitions
    cdef object errors, log_end, code, conflicts
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"Produce v{version} is not a direct version")
    w.data = NULL
    w.size = 0
    w.capacity = 0
    try:
        p = reserve(&w, 9 + MAX_UVARINT_BYTES)
        put_i32(p + 4, correlation_id)
        p[8] = 0  # header tags
        w.size = write_uvarint(p + 9, len(responses) + 1) - w.data
        for topic in responses:
            write_nullable_string(&w, topic["name"])
            partitions = topic["partition_responses"]
            p = reserve(&w, MAX_UVARINT_BYTES)
            w.size = write_uvarint(p, len(partitions) + 1) - w.data
            for answer in partitions:
                p = reserve(&w, PARTITION_ANSWER_FIXED + MAX_UVARINT_BYTES)
                put_i32(p, <int32_t>answer["index"])
                code = answer.get("error_code")
                put_i16(p + 4, 0 if code is None else <int16_t>code)
                put_i64(p + 6, <int64_t>answer["base_offset"])
                put_i64(p + 14, <int64_t>answer["log_append_time"])
                put_i64(p + 22, <int64_t>answer["log_start_offset"])
                errors = answer.get("record_errors") or ()
                w.size = write_uvarint(p + PARTITION_ANSWER_FIXED, len(errors) + 1) - w.data
                for rec_error in errors:
                    p = reserve(&w, 4)
                    put_i32(p, <int32_t>rec_error["batch_index"])
                    w.size += 4
                    write_nullable_string(&w, rec_error.get("batch_index_error_message"))
                    write_byte(&w, 0)  # tags
                write_nullable_string(&w, answer.get("error_message"))
                log_end = answer.get("log_end_offset")
                conflicts = answer.get("key_conflicts")
                if conflicts is None and log_end is None:
                    write_byte(&w, 0)  # no tags
                    continue
                p = reserve(&w, LOG_END_TAG_SIZE + (
                    0 if conflicts is None else 3 * MAX_UVARINT_BYTES + len(conflicts)))
                p[0] = (log_end is not None) + (conflicts is not None)
                p += 1
                if log_end is not None:  # tags in ascending order: 10000, then 10001
                    p = write_uvarint(p, LOG_END_OFFSET_TAG)  # 2 bytes
                    p[0] = 8
                    put_i64(p + 1, <int64_t>log_end)
                    p += 9
                if conflicts is not None:
                    p = write_bytes_tag(p, KEY_CONFLICTS_TAG, conflicts)
                w.size = p - w.data
            write_byte(&w, 0)  # topic tags
        p = reserve(&w, 5)
        put_i32(p, 0)  # throttle_time
        p[4] = 0  # no tags
        w.size += 5
        put_i32(w.data, <int32_t>(w.size - 4))
        return PyByteArray_FromStringAndSize(<const char *>w.data, w.size)
    finally:
        PyMem_Free(w.data)
