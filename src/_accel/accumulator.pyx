"""The record accumulator (compiled as kipproducer._accumulator).

Records are encoded straight into one open RecordBatch per (topic, partition). A batch closes
when it is full (batch.size bytes or batch.num.messages records), when it is older than
linger.ms at drain time, or when the next record's explicit offset is not the previous one + 1:
a batch only ever holds consecutive offsets (KIP-391), because Kafka derives a batch's sequence
range and offset range from the same lastOffsetDelta.

Idempotent sequences are assigned per partition when a batch is drained, as Kafka's Java client
does: the base sequence is the partition's next sequence, which then moves on by the record
count and wraps from 2**31-1 to 0. A re-enqueued (retried) batch keeps its sequence; after an
epoch bump sequences restart at 0 and batches still to send are re-stamped.

See kipproducer.accumulator for the documented Python API.
"""
cimport cython
from cpython.buffer cimport (
    PyBUF_SIMPLE, PyBuffer_Release, PyObject_CheckBuffer, PyObject_GetBuffer,
)
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_Next
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from cpython.list cimport PyList_GET_SIZE
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_DECREF, Py_INCREF
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint32_t
from libc.string cimport memcpy
from posix.time cimport CLOCK_MONOTONIC, CLOCK_REALTIME, clock_gettime, timespec

from batch_layout cimport (
    BASE_SEQUENCE_POS, BATCH_HEADER_SIZE, CRC_POS, PRODUCER_EPOCH_POS, PRODUCER_ID_POS,
    ATTRIBUTES_POS, BASE_OFFSET_POS, BASE_TIMESTAMP_POS, BATCH_LENGTH_POS, LOG_OVERHEAD,
    MAX_TIMESTAMP_POS, RECORDS_COUNT_POS, TIMESTAMP_TYPE_MASK, TRANSACTIONAL_FLAG, get_i32,
    get_i64, increment_sequence, put_i16, put_i32, put_i64, put_u32,
)
from batch_writer cimport BatchFields, write_batch_header, write_batch_header_known_records_crc
from crc32c_c cimport kip_crc32c
from record_writer cimport (
    Blob, ByteBuf, blob_from, blob_release, bytebuf_free, bytebuf_reserve, encode_headers,
    header_items, headers_wire_size, record_body_size, write_headers, write_record_head,
)
from varint cimport read_varint32, read_varint64, varint_size, write_varint

import sys
from collections import deque

import numpy as np

from kipproducer.compression import CODEC_NAMES, codec_id
from kipproducer.compression import compress as _compress
from kipproducer.errors import OffsetOrderError, QueueFullError

cdef extern from "Python.h":
    PyObject **PySequence_Fast_ITEMS(object o)

cdef enum:
    MODE_ASSIGN = 0        # broker assigns offsets; batch baseOffset 0
    MODE_USE_OFFSETS = 1   # explicit source offsets (KIP-391)
    MODE_EXPECTED = 2      # conditional: baseOffset = where the batch must land (KIP-27)

# Largest record framing before key/value/headers (Kafka's MAX_RECORD_OVERHEAD) plus the
# worst-case varints of key and value lengths: used to reserve room before writing.
cdef enum:
    RECORD_RESERVE = 21 + 10


# One packed run of explicit offsets (docs/protocol.md §9): a RecordBatch of its own inside a
# ProducerBatch's buffer. Kept in a C array, not as Python tuples: a copy of a compacted topic
# has a run every one or two records, and a tuple of five ints per run was most of the
# accumulator's allocations (and the garbage collections they set off).
cdef struct RunInfo:
    Py_ssize_t start       # header position in the batch's buffer
    int32_t count          # records
    int64_t base_offset
    int64_t base_ts
    int64_t max_ts


cdef struct RunList:
    RunInfo *items
    Py_ssize_t size
    Py_ssize_t capacity


cdef int runlist_push(RunList *runs, Py_ssize_t start, int32_t count, int64_t base_offset,
                      int64_t base_ts, int64_t max_ts) except -1:
    cdef Py_ssize_t capacity
    cdef RunInfo *grown
    if runs.size == runs.capacity:
        capacity = runs.capacity * 2 if runs.capacity else 16
        grown = <RunInfo *>PyMem_Realloc(runs.items, capacity * sizeof(RunInfo))
        if grown == NULL:
            raise MemoryError()
        runs.items = grown
        runs.capacity = capacity
    runs.items[runs.size].start = start
    runs.items[runs.size].count = count
    runs.items[runs.size].base_offset = base_offset
    runs.items[runs.size].base_ts = base_ts
    runs.items[runs.size].max_ts = max_ts
    runs.size += 1
    return 0


cdef void runlist_free(RunList *runs) noexcept:
    PyMem_Free(runs.items)
    runs.items = NULL
    runs.size = 0
    runs.capacity = 0


cdef inline object last_run_opaque(list runs):
    # Indexing is explicit: the module compiles with wraparound=False, so runs[-1] is not
    # "the last one" here.
    return (<tuple>runs[len(runs) - 1])[1]


# ---- reading produce_batch's message dicts ---------------------------------------------------
# The fields a message dict may hold, read in one walk over the dict (read_fields) instead of
# a lookup per field: a produce_batch message has three to five keys and nine possible fields.
cdef enum:
    F_VALUE = 0
    F_KEY = 1
    F_PARTITION = 2
    F_TIMESTAMP = 3
    F_HEADERS = 4
    F_CALLBACK = 5
    F_ON_DELIVERY = 6
    F_OFFSET = 7
    F_EXPECTED_OFFSET = 8
    F_EXPECTED_KEY_OFFSET = 9
    F_COUNT = 10

# Interned, so a key written as a literal in the caller's code is the same object.
FIELD_NAMES = tuple(sys.intern(name) for name in (
    "value", "key", "partition", "timestamp", "headers", "callback", "on_delivery", "offset",
    "expected_offset", "expected_key_offset"))
cdef PyObject *field_names[F_COUNT]
for _j, _name in enumerate(FIELD_NAMES):
    field_names[_j] = <PyObject *>_name    # FIELD_NAMES keeps them alive


cdef tuple lookup_fields(dict m, PyObject **f):
    """read_fields the long way: ``m.get`` per field, with the dict's own equality. That
    equality may run Python code, which may change the dict: the values are kept in the
    tuple returned, which the caller holds while it reads ``f``."""
    cdef tuple values = tuple([m.get(<object>field_names[j]) for j in range(F_COUNT)])
    cdef int j
    for j in range(F_COUNT):
        f[j] = NULL if values[j] is None else <PyObject *>values[j]
    return values


cdef inline tuple read_fields(dict m, PyObject **f):
    """``f[F_...]``: each field's value in ``m`` as a borrowed reference, NULL when absent,
    as ``m.get(name)`` finds it. One walk over the dict, in which no Python code runs: keys
    are compared by identity with the interned names, then by text (a key built at run time).
    A dict with a key that is not exactly a str (whose equality could be anything) is read
    with lookups instead, and the tuple returned holds those values (else None). The caller
    takes references of its own (``field``) before anything that may run Python code."""
    cdef Py_ssize_t pos = 0
    cdef PyObject *k
    cdef PyObject *v
    cdef int j
    for j in range(F_COUNT):
        f[j] = NULL
    while PyDict_Next(m, &pos, &k, &v):
        for j in range(F_COUNT):
            if k == field_names[j]:
                f[j] = v
                break
        else:
            if type(<object>k) is not str:
                return lookup_fields(m, f)
            for j in range(F_COUNT):
                if <str>k == <str>field_names[j]:
                    f[j] = v
                    break
    return None


cdef inline object field(PyObject **f, int j):
    """A field's value, None when absent (the caller holds a reference from here on)."""
    return None if f[j] == NULL else <object>f[j]


# Headers a cache entry may hold: more pairs than this go the general way each time.
cdef enum:
    HEADER_CACHE_MAX_PAIRS = 16


@cython.final
cdef class HeaderWire:
    """The wire bytes of the headers last seen, known again by the identity of their pairs.

    produce_batch users give every record the same headers: the same list, or new lists of
    the same (key, value) tuples (a literal pair is one constant object). Encoding them once
    and copying the bytes into each record costs a few pointer compares instead of a walk
    through the pairs. Only pairs that cannot change are cached: exact tuples of an exact str
    key and an exact bytes or str value or None, held here so that no other object can take
    their address while the bytes stand for them.
    """
    cdef tuple pairs                   # the pairs ``wire`` was encoded from
    cdef bytes wire                    # count varint and every header, as in a record
    cdef const unsigned char *ptr      # wire's bytes and length, for the record writer
    cdef Py_ssize_t size
    cdef readonly Py_ssize_t hits

    cdef inline bint known(self, object headers) noexcept:
        """Are ``headers`` (a list or tuple) the pairs the cached bytes were encoded from?"""
        cdef Py_ssize_t n, j
        cdef PyObject **have
        cdef PyObject **want
        if self.pairs is None:
            return False
        if type(headers) is list:
            n = PyList_GET_SIZE(headers)
        elif type(headers) is tuple:
            n = PyTuple_GET_SIZE(headers)
        else:
            return False
        if n != PyTuple_GET_SIZE(self.pairs):
            return False
        have = PySequence_Fast_ITEMS(headers)
        want = PySequence_Fast_ITEMS(self.pairs)
        for j in range(n):
            if have[j] != want[j]:
                return False
        return True

    cdef bint learn(self, object headers) except -1:
        """Encode and keep ``headers`` when every pair can be cached; False (nothing kept)
        when some pair cannot, and the record takes the general path. Raises what encoding
        the pairs raises (a header value that is not valid UTF-8 text, say)."""
        cdef Py_ssize_t n, j
        cdef PyObject **items
        cdef object pair, value
        if type(headers) is not list and type(headers) is not tuple:
            return False
        n = len(headers)
        if n > HEADER_CACHE_MAX_PAIRS:
            return False
        items = PySequence_Fast_ITEMS(headers)
        for j in range(n):
            pair = <object>items[j]
            if type(pair) is not tuple or PyTuple_GET_SIZE(pair) != 2:
                return False
            if type(<object>PyTuple_GET_ITEM(pair, 0)) is not str:
                return False
            value = <object>PyTuple_GET_ITEM(pair, 1)
            if not (value is None or type(value) is bytes or type(value) is str):
                return False
        self.wire = encode_headers(headers)
        self.ptr = <const unsigned char *>PyBytes_AS_STRING(self.wire)
        self.size = PyBytes_GET_SIZE(self.wire)
        self.pairs = tuple(headers)
        return True

    cdef inline bint find(self, object headers) except -1:
        """True when the wire bytes of ``headers`` are at ``ptr`` / ``size`` (known, or
        learned now)."""
        if self.known(headers):
            self.hits += 1
            return True
        return self.learn(headers)


cdef inline int64_t clock_ms(int which) noexcept nogil:
    cdef timespec ts
    clock_gettime(which, &ts)
    return <int64_t>ts.tv_sec * 1000 + ts.tv_nsec // 1000000


# ---- a pool of batch buffers ---------------------------------------------------------------
# A producer fills and frees batch buffers all day. Handing a freed buffer to the next batch
# keeps its pages mapped and warm; without the pool the allocator returns large frees to the
# kernel and every new batch pays page faults on first touch (measured: about 50 ns per
# 112-byte record, more than the encoding itself), plus the reallocs of growing it again. The
# pool is bounded by a slot count and a byte total; the rest is freed. All callers hold the GIL.
cdef enum:
    POOL_SLOTS = 512
    POOL_MAX_BYTES = 64 << 20
    # A closing batch with more than this much unused room (and using under a quarter of
    # its buffer) moves to a buffer of its own size.
    SHRINK_SLACK = 8192
    # What a batch costs besides its records, counted against queue.buffering.max.kbytes:
    # its header and its objects on both sides of the sender. A copy whose offsets have
    # gaps at every other step holds a batch per two records; uncounted, its memory grew
    # far past the bound.
    BATCH_OVERHEAD = 512

cdef unsigned char *pool_data[POOL_SLOTS]
cdef Py_ssize_t pool_capacity[POOL_SLOTS]
cdef int pool_count = 0
cdef Py_ssize_t pool_bytes = 0


cdef inline void pool_take(ByteBuf *b, Py_ssize_t need) noexcept:
    """Give an empty ByteBuf a pooled buffer of at least ``need`` bytes, if there is one."""
    global pool_count, pool_bytes
    if b.data != NULL or pool_count == 0:
        return
    if pool_capacity[pool_count - 1] < need:
        return
    pool_count -= 1
    b.data = pool_data[pool_count]
    b.capacity = pool_capacity[pool_count]
    b.size = 0
    pool_bytes -= b.capacity


cdef inline void pool_give(ByteBuf *b) noexcept:
    """Return a ByteBuf's memory to the pool (or free it when the pool is full)."""
    global pool_count, pool_bytes
    if (b.data != NULL and pool_count < POOL_SLOTS
            and pool_bytes + b.capacity <= POOL_MAX_BYTES):
        pool_data[pool_count] = b.data
        pool_capacity[pool_count] = b.capacity
        pool_count += 1
        pool_bytes += b.capacity
        b.data = NULL
        b.size = 0
        b.capacity = 0
        return
    bytebuf_free(b)


def monotonic_ms():
    """The clock linger.ms is measured on (milliseconds, CLOCK_MONOTONIC)."""
    return clock_ms(CLOCK_MONOTONIC)


@cython.final
cdef class ProducerBatch:
    """A closed batch: its bytes (buffer protocol, zero copy) plus what the sender needs.

    ``data`` is valid once the batch has been drained (header, sequence and CRC written).
    """
    cdef ByteBuf buf                 # header (61 bytes) + records, compressed once finished
    cdef Py_ssize_t records_size     # uncompressed records bytes (memory accounting)
    cdef readonly str topic
    cdef readonly int32_t partition
    cdef readonly int64_t base_offset
    cdef readonly int32_t record_count
    cdef readonly int64_t producer_id
    cdef readonly int producer_epoch
    cdef readonly int32_t base_sequence
    cdef readonly bint offsets_explicit
    # ProduceMode of the request this batch must travel in (0 assign, 1 offsets, 2 expected)
    cdef readonly int produce_mode
    cdef readonly bint transactional
    cdef readonly int64_t created_ms
    cdef readonly int64_t first_timestamp
    cdef readonly int64_t max_timestamp
    # Opaque values as runs: [(first record index, opaque), ...], None when none was given.
    # A run covers records up to the next run's index; one produce call's records share one.
    cdef readonly list opaque_runs
    cdef readonly bint finished
    cdef public int attempts         # for the sender: how many times it was sent
    cdef int codec
    cdef Py_ssize_t _exports
    # CRC of the uncompressed records, taken when the batch closed (hot in cache) so finishing
    # the batch later only checksums its 40 header bytes.
    cdef uint32_t records_crc
    cdef bint has_records_crc
    # Packed runs of offsets (docs/protocol.md §9): empty, or one entry per RecordBatch in
    # ``buf``, each stamped with its own header and CRC and sequences continuing from one to
    # the next (``runs`` shows them as tuples).
    cdef RunList run_list
    # Attribute bits kept from a forwarded source batch (the LogAppendTime bit: see
    # RecordAccumulator.append_fetched); 0 for the producer's own records.
    cdef readonly int16_t extra_attributes
    # Per-key conditions (docs/protocol.md §10): None, or (record index, expected last offset,
    # key) per conditioned record, and the partition count the records were partitioned with.
    cdef readonly list key_conditions
    cdef readonly int32_t key_partition_count

    def __cinit__(self):
        self.buf.data = NULL
        self.buf.size = 0
        self.buf.capacity = 0
        self.base_sequence = -1
        self.producer_id = -1
        self.producer_epoch = -1

    def __dealloc__(self):
        pool_give(&self.buf)
        runlist_free(&self.run_list)

    @property
    def run_count(self):
        """How many packed runs of offsets the batch holds (0: it is one RecordBatch)."""
        return self.run_list.size

    @property
    def runs(self):
        """None, or one (header position, records, base offset, base timestamp, max
        timestamp) per packed run of offsets (a RecordBatch of its own in the buffer)."""
        cdef Py_ssize_t i
        cdef RunInfo *r
        if self.run_list.size == 0:
            return None
        out = []
        for i in range(self.run_list.size):
            r = &self.run_list.items[i]
            out.append((r.start, r.count, r.base_offset, r.base_ts, r.max_ts))
        return out

    def __getbuffer__(self, Py_buffer *view, int flags):
        if not self.finished:
            raise BufferError("a batch has no bytes until it is drained")
        if self.buf.data == NULL:
            raise BufferError("a delivered batch's bytes went back to the buffer pool; only "
                              "batches with per-record delivery reports keep them")
        view.buf = self.buf.data
        view.len = self.buf.size
        view.readonly = 1
        view.itemsize = 1
        view.format = NULL
        view.ndim = 1
        view.shape = NULL
        view.strides = NULL
        view.suboffsets = NULL
        view.internal = NULL
        view.obj = self
        self._exports += 1

    def __releasebuffer__(self, Py_buffer *view):
        self._exports -= 1

    @property
    def opaques(self):
        """Per-record opaque values (expanded from the runs), or None when none was given."""
        cdef list out
        if self.opaque_runs is None:
            return None
        out = []
        bounds = [start for start, _ in self.opaque_runs[1:]] + [self.record_count]
        for (start, opaque), end in zip(self.opaque_runs, bounds):
            out.extend([opaque] * (end - start))
        return out

    @property
    def data(self):
        """The finished batch as a read-only memoryview (no copy)."""
        return memoryview(self)

    @property
    def size(self):
        return self.buf.size

    @property
    def last_offset(self):
        cdef RunInfo *run
        if self.run_list.size:
            run = &self.run_list.items[self.run_list.size - 1]
            return run.base_offset + run.count - 1
        return self.base_offset + self.record_count - 1

    def record_offset(self, Py_ssize_t index):
        """The offset record ``index`` of this batch was given (explicit or expected)."""
        cdef Py_ssize_t i
        if self.run_list.size == 0:
            return self.base_offset + index
        for i in range(self.run_list.size):
            if index < self.run_list.items[i].count:
                return self.run_list.items[i].base_offset + index
            index -= self.run_list.items[i].count
        raise IndexError("record index past the batch")

    @property
    def last_sequence(self):
        if self.base_sequence < 0:
            return -1
        return increment_sequence(self.base_sequence, self.record_count - 1)

    @property
    def compression(self):
        return CODEC_NAMES.get(self.codec)

    def __len__(self):
        return self.record_count

    def __repr__(self):
        return (f"ProducerBatch({self.topic!r}, {self.partition}, base_offset={self.base_offset}, "
                f"records={self.record_count}, base_sequence={self.base_sequence}, "
                f"size={self.buf.size}, finished={self.finished})")

    cdef int _finish_runs(self, BatchFields *f) except -1:
        """Write every run's header and CRC in place: f has the producer fields and the
        first run's base sequence."""
        cdef Py_ssize_t i, end
        cdef int32_t sequence = f.base_sequence
        cdef RunInfo *run
        cdef Py_ssize_t n = self.run_list.size
        if self._exports:
            raise BufferError("cannot re-stamp a batch whose bytes are being read")
        for i in range(n):
            run = &self.run_list.items[i]
            end = self.run_list.items[i + 1].start if i + 1 < n else self.buf.size
            f.base_offset = run.base_offset
            f.last_offset_delta = run.count - 1
            f.base_timestamp = run.base_ts
            f.max_timestamp = run.max_ts
            f.records_count = run.count
            f.base_sequence = sequence
            write_batch_header(self.buf.data + run.start, f, end - run.start)
            if sequence >= 0:
                sequence = increment_sequence(sequence, run.count)
        self.finished = True
        return 0

    cdef int _finish(self, BatchFields *f) except -1:
        """Compress (first time only) and write header + CRC in place."""
        cdef bytes packed
        cdef Py_ssize_t n
        if self.run_list.size:
            return self._finish_runs(f)
        if self._exports:
            raise BufferError("cannot re-stamp a batch whose bytes are being read")
        if not self.finished and self.codec:
            packed = _compress(self.codec, self.buf.data[BATCH_HEADER_SIZE:self.buf.size])
            n = PyBytes_GET_SIZE(packed)
            self.buf.size = BATCH_HEADER_SIZE
            bytebuf_reserve(&self.buf, n)
            memcpy(self.buf.data + BATCH_HEADER_SIZE, PyBytes_AS_STRING(packed), n)
            self.buf.size = BATCH_HEADER_SIZE + n
        if self.codec == 0 and self.has_records_crc:
            write_batch_header_known_records_crc(self.buf.data, f, self.buf.size,
                                                 self.records_crc)
        else:
            write_batch_header(self.buf.data, f, self.buf.size)
        self.finished = True
        return 0


@cython.final
cdef class PartitionState:
    """Everything the accumulator knows about one (topic, partition)."""
    cdef readonly str topic
    cdef readonly int32_t partition
    # the open batch
    cdef ByteBuf buf
    cdef int32_t count
    cdef int mode
    cdef int64_t base_offset
    cdef int64_t base_ts
    cdef int64_t max_ts
    cdef int64_t opened_ms
    cdef list opaque_runs
    # packed runs (docs/protocol.md §9): the open batch's earlier runs of explicit offsets, each
    # its own RecordBatch in ``buf`` (see ProducerBatch.runs); count, base_offset, base_ts and
    # max_ts above are the current run's
    cdef RunList runs
    cdef Py_ssize_t run_start          # header position of the current run
    cdef int32_t unit_count            # records in the earlier runs
    # explicit offsets: the last one appended, for the strictly-increasing rule
    cdef readonly int64_t last_offset
    # closed batches, oldest first
    cdef object ready
    # idempotence: the sequence the next drained batch gets
    cdef readonly int32_t next_sequence
    # the open batch's per-key conditions (ProducerBatch.key_conditions), and their keys
    cdef list key_conditions
    cdef set conditioned_keys
    cdef int32_t key_partition_count

    def __cinit__(self, str topic, int32_t partition):
        self.topic = topic
        self.partition = partition
        self.buf.data = NULL
        self.buf.size = 0
        self.buf.capacity = 0
        self.last_offset = -1
        self.ready = deque()

    def __dealloc__(self):
        bytebuf_free(&self.buf)
        runlist_free(&self.runs)

    @property
    def open_records(self):
        return self.count + self.unit_count

    @property
    def ready_batches(self):
        return len(self.ready)


# ---- produce_arrays' copying without the GIL --------------------------------------------------
# produce_arrays copies most records into the open batch without the GIL, so the sender
# thread's Python (requests, TLS writes, answers) runs while the caller copies instead of
# waiting for the caller's slice to end. A stretch's values and keys are gathered first, with
# the GIL (bytes objects held by a reference each, so another thread changing the column
# cannot free one mid-copy); the copy then touches no Python object. The accumulator is used
# by one thread at a time (the engine holds its lock around every call).
cdef enum:
    COPY_STRETCH = 4096   # records gathered, then copied without the GIL, at a time


cdef struct Span:         # a gathered key or value: Blob's bytes (size -1: null)
    const unsigned char *ptr
    Py_ssize_t size


cdef struct Stretch:
    Span values[COPY_STRETCH]
    Span keys[COPY_STRETCH]
    PyObject *held_values[COPY_STRETCH]
    PyObject *held_keys[COPY_STRETCH]


cdef inline bint continues_run(PartitionState st, int mode, int64_t offset,
                               object opaque) noexcept:
    """A record of this mode, offset and report target belongs to st's open batch and its
    current run (if it fits): _append_fast's rule, and produce_arrays' before each stretch."""
    if st.count == 0 or mode != st.mode:
        return False
    if mode != MODE_ASSIGN and offset != st.base_offset + st.count:
        return False
    if st.opaque_runs is None:
        return opaque is None
    return last_run_opaque(st.opaque_runs) is opaque


cdef Py_ssize_t gather_column(Column *c, Py_ssize_t start, Py_ssize_t stop, Span *out,
                              PyObject **held) noexcept:
    """Spans of c's items [start, stop) for a copy without the GIL, up to the first item
    that is neither bytes nor None (str and the rest take column_get's path): how many.
    ``held[k]`` is the reference taken on an object item (NULL for none)."""
    cdef Py_ssize_t k
    cdef PyObject *item
    for k in range(stop - start):
        held[k] = NULL
        if c.kind == COL_ARROW:
            arrow_cell(c, start + k, &out[k].ptr, &out[k].size)
            continue
        item = c.items[start + k]
        if <object>item is None:
            out[k].ptr = NULL
            out[k].size = -1
        elif PyBytes_CheckExact(<object>item):
            Py_INCREF(<object>item)
            held[k] = item
            out[k].ptr = <const unsigned char *>PyBytes_AS_STRING(<object>item)
            out[k].size = PyBytes_GET_SIZE(<object>item)
        else:
            return k
    return stop - start


cdef void release_held(PyObject **held, Py_ssize_t count) noexcept:
    cdef Py_ssize_t k
    for k in range(count):
        if held[k] != NULL:
            Py_DECREF(<object>held[k])
            held[k] = NULL


@cython.final
cdef class RecordAccumulator:
    """Per-partition batching of records into RecordBatch v2 bytes. See kipproducer.accumulator."""
    cdef readonly Py_ssize_t batch_size
    cdef readonly int32_t batch_num_messages
    cdef readonly int64_t linger_ms
    cdef readonly Py_ssize_t max_bytes
    cdef readonly Py_ssize_t max_messages
    cdef readonly int codec
    cdef readonly int64_t producer_id
    cdef readonly int producer_epoch
    cdef readonly bint transactional
    cdef readonly Py_ssize_t buffered_bytes
    cdef readonly Py_ssize_t buffered_messages
    # Batches closed so far (full, an offset gap, a mode change, linger, flush): the sender
    # compares it with what it saw before sleeping to know whether an append made one ready.
    cdef readonly int64_t closed_batches
    # Several runs of explicit offsets in one batch (its RecordBatches back to back), for a
    # broker that takes them in one request (KIP-WIRE version 2); the engine sets it from the
    # leader's features. Off: a gap closes the batch.
    cdef public bint pack_runs
    cdef dict _topics                  # topic -> list of PartitionState (index = partition)
    cdef HeaderWire _headers_seen      # the last per-record headers encoded (HeaderWire)
    cdef str _last_topic
    cdef int32_t _last_partition
    cdef PartitionState _last_state
    cdef Stretch *_stretch           # produce_arrays' gathered records (allocated at first use)

    def __dealloc__(self):
        PyMem_Free(self._stretch)

    def __init__(self, *, Py_ssize_t batch_size=1000000, int32_t batch_num_messages=10000,
                 double linger_ms=5, Py_ssize_t max_bytes=1048576 * 1024,
                 Py_ssize_t max_messages=100000, compression=None, int64_t producer_id=-1,
                 int producer_epoch=-1, bint transactional=False):
        if batch_size < BATCH_HEADER_SIZE + 1:
            raise ValueError(f"batch_size must be at least {BATCH_HEADER_SIZE + 1} bytes")
        if batch_num_messages < 1:
            raise ValueError("batch_num_messages must be at least 1")
        if linger_ms < 0:
            raise ValueError("linger_ms must not be negative")
        if max_bytes < 1 or max_messages < 1:
            raise ValueError("max_bytes and max_messages must be positive")
        self.batch_size = batch_size
        self.batch_num_messages = batch_num_messages
        self.linger_ms = <int64_t>linger_ms
        self.max_bytes = max_bytes
        self.max_messages = max_messages
        self.codec = codec_id(compression)
        self.transactional = transactional
        self._topics = {}
        self._headers_seen = HeaderWire()
        self._last_topic = None
        self.set_producer(producer_id, producer_epoch)

    # ---- producer identity ---------------------------------------------------------------

    def set_producer(self, int64_t producer_id, int producer_epoch):
        """Set the idempotent producer id/epoch; every partition's sequence restarts at 0.

        Batches not yet drained (including re-enqueued ones) are stamped with the new identity
        and fresh sequences when drained.
        """
        cdef PartitionState st
        if not -32768 <= producer_epoch <= 32767:
            raise OverflowError(f"producer_epoch {producer_epoch} does not fit int16")
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        for states in self._topics.values():
            for st in states:
                if st is not None:
                    st.next_sequence = 0

    # ---- partition lookup ----------------------------------------------------------------

    cdef PartitionState _state(self, str topic, int32_t partition):
        cdef list states
        cdef PartitionState st
        if partition == self._last_partition and topic is self._last_topic:
            return self._last_state
        if partition < 0:
            raise ValueError(f"partition must be >= 0, not {partition}")
        states = self._topics.get(topic)
        if states is None:
            if not isinstance(topic, str) or not topic:
                raise TypeError("topic must be a non-empty str")
            states = []
            self._topics[topic] = states
        while len(states) <= partition:
            states.append(None)
        st = states[partition]
        if st is None:
            st = PartitionState(topic, partition)
            states[partition] = st
        self._last_topic = topic
        self._last_partition = partition
        self._last_state = st
        return st

    def partition_state(self, str topic, int32_t partition):
        return self._state(topic, partition)

    @property
    def headers_reused(self):
        """Records whose headers were copied from an earlier record's encoding (HeaderWire)."""
        return self._headers_seen.hits

    def close_open(self, str topic not None, int32_t partition):
        """Close the partition's open batch (to its ready queue), so that the next record
        starts a batch: a call's conditional records of one partition then travel in one
        batch of their own, appended whole or not at all (docs/protocol.md §10)."""
        self._close(self._state(topic, partition))

    def set_next_sequence(self, str topic not None, int32_t partition, int32_t sequence):
        """Resume a partition's sequence (e.g. after restoring producer state)."""
        if sequence < 0:
            raise ValueError("sequence must not be negative")
        self._state(topic, partition).next_sequence = sequence

    # ---- appending -----------------------------------------------------------------------

    cdef inline bint _ends_run(self, PartitionState st, int mode, bint has_offset,
                               int64_t offset) noexcept:
        """Whether a record cannot continue the open batch's current run (docs/protocol.md
        §9): another mode, an explicit offset that is not the next one, or the batch full by
        count. (Its size is checked by the caller, with the record's exact encoding.)"""
        return (mode != st.mode
                or (has_offset and offset != st.base_offset + st.count)
                or st.count + st.unit_count >= self.batch_num_messages)

    cdef inline bint _packs_run(self, PartitionState st, int mode,
                                Py_ssize_t first_body) noexcept:
        """Whether a record that ends the current run starts a new run (a RecordBatch of its
        own) inside the same open batch instead of closing it: explicit offsets, packing on,
        no compression, room by count and by bytes for a batch header and the record, whose
        body as a run's first record is ``first_body`` bytes."""
        return (self.pack_runs and mode == MODE_USE_OFFSETS and st.mode == mode
                and self.codec == 0
                and st.count + st.unit_count < self.batch_num_messages
                and st.buf.size + BATCH_HEADER_SIZE + varint_size(first_body) + first_body
                <= self.batch_size)

    cdef int _close(self, PartitionState st) except -1:
        """Move the open batch to the partition's ready queue."""
        cdef ProducerBatch b
        cdef unsigned char *fitted
        cdef Py_ssize_t b_size, i
        if st.count == 0:
            return 0
        if st.buf.capacity - st.buf.size > SHRINK_SLACK and st.buf.size * 4 < st.buf.capacity:
            # A small batch closed early (an offset gap, a mode change, linger): it keeps a
            # copy of just its bytes and the roomy buffer goes back to the pool for the next
            # batch. Otherwise a copy of a compacted topic, a batch per run of offsets, held
            # tens of KiB per tiny batch until its delivery report.
            fitted = <unsigned char *>PyMem_Malloc(st.buf.size)
            if fitted != NULL:
                memcpy(fitted, st.buf.data, st.buf.size)
                b_size = st.buf.size
                pool_give(&st.buf)
                st.buf.data = fitted
                st.buf.size = b_size
                st.buf.capacity = b_size
        b = ProducerBatch.__new__(ProducerBatch)
        b.buf = st.buf                      # ownership moves to the batch
        st.buf.data = NULL
        st.buf.size = 0
        st.buf.capacity = 0
        b.records_size = b.buf.size - BATCH_HEADER_SIZE
        b.topic = st.topic
        b.partition = st.partition
        b.base_offset = st.base_offset if st.mode != MODE_ASSIGN else 0
        b.offsets_explicit = st.mode == MODE_USE_OFFSETS
        b.produce_mode = st.mode
        b.record_count = st.count
        b.created_ms = st.opened_ms
        b.first_timestamp = st.base_ts
        b.max_timestamp = st.max_ts
        b.opaque_runs = st.opaque_runs
        b.codec = self.codec
        if st.runs.size:
            runlist_push(&st.runs, st.run_start, st.count, st.base_offset, st.base_ts,
                         st.max_ts)
            b.run_list = st.runs                # ownership moves to the batch
            st.runs.items = NULL
            st.runs.size = 0
            st.runs.capacity = 0
            b.record_count = st.count + st.unit_count
            b.base_offset = b.run_list.items[0].base_offset
            b.first_timestamp = b.run_list.items[0].base_ts
            b.max_timestamp = b.run_list.items[0].max_ts
            for i in range(1, b.run_list.size):
                if b.run_list.items[i].max_ts > b.max_timestamp:
                    b.max_timestamp = b.run_list.items[i].max_ts
            st.unit_count = 0
            st.run_start = 0
        elif b.codec == 0:
            b.records_crc = kip_crc32c(0, b.buf.data + BATCH_HEADER_SIZE, b.records_size)
            b.has_records_crc = True
        b.transactional = self.transactional
        if st.key_conditions is not None:
            b.key_conditions = st.key_conditions
            b.key_partition_count = st.key_partition_count
            st.key_conditions = None
            st.conditioned_keys = None
        st.opaque_runs = None
        st.count = 0
        st.ready.append(b)
        self.closed_batches += 1
        return 0

    cdef inline bint _write_continuing(self, PartitionState st, Blob *key, Blob *value,
                                       const unsigned char *hwire, Py_ssize_t hwire_size,
                                       int64_t timestamp) noexcept nogil:
        """Encode a record that continues st's open batch and run, if it fits (the batch's
        size and message count, its buffer's room, the queue bounds); False when it does
        not. No Python object is touched: produce_arrays calls it without the GIL."""
        cdef int64_t ts_delta
        cdef Py_ssize_t body, wire
        cdef unsigned char *p
        if st.count + st.unit_count >= self.batch_num_messages:
            return False
        ts_delta = timestamp - st.base_ts
        body = record_body_size(ts_delta, st.count, key, value,
                                hwire_size if hwire != NULL else 1)
        wire = varint_size(body) + body
        if (st.buf.size + wire > self.batch_size or st.buf.size + wire > st.buf.capacity
                or self.buffered_messages >= self.max_messages
                or self.buffered_bytes + wire > self.max_bytes):
            return False
        p = write_record_head(st.buf.data + st.buf.size, body, ts_delta, st.count, key, value)
        if hwire == NULL:
            p[0] = 0  # no headers
            p += 1
        else:
            memcpy(p, hwire, hwire_size)
            p += hwire_size
        st.buf.size = p - st.buf.data
        if timestamp > st.max_ts:
            st.max_ts = timestamp
        st.count += 1
        self.buffered_bytes += wire
        self.buffered_messages += 1
        return True

    cdef Py_ssize_t _copy_stretch(self, PartitionState st, Py_ssize_t count,
                                  const int64_t *timestamps, int64_t now,
                                  const unsigned char *hwire, Py_ssize_t hwire_size) noexcept nogil:
        """The stretch's first ``count`` records into ``st``'s open batch and run, which the
        caller checked they continue, without the GIL: how many fit before one does not
        (that one then takes _append's path, with the GIL)."""
        cdef Stretch *stretch = self._stretch
        cdef Py_ssize_t k
        cdef Blob key, value
        key.has_view = False
        value.has_view = False
        for k in range(count):
            key.ptr = stretch.keys[k].ptr
            key.size = stretch.keys[k].size
            value.ptr = stretch.values[k].ptr
            value.size = stretch.values[k].size
            if not self._write_continuing(st, &key, &value, hwire, hwire_size,
                                          timestamps[k] if timestamps != NULL else now):
                return k
        return count

    cdef inline bint _append_fast(self, PartitionState st, Blob *key, Blob *value,
                                  const unsigned char *hwire, Py_ssize_t hwire_size,
                                  int64_t timestamp, int mode, int64_t offset,
                                  object opaque) noexcept:
        """The common case, with no Python objects: a record that continues the open batch
        (same report target) and fits it. Its headers are ``hwire`` (their wire bytes, count
        varint included, ``hwire_size`` long) or none when ``hwire`` is NULL. Returns False
        to send the caller to _append."""
        if not continues_run(st, mode, offset, opaque):
            return False
        if not self._write_continuing(st, key, value, hwire, hwire_size, timestamp):
            return False
        if mode == MODE_USE_OFFSETS:
            st.last_offset = offset
        return True

    cdef int _make_room(self, PartitionState st, Py_ssize_t wire, bint new_run, int mode,
                        bint has_offset, int64_t offset, int64_t timestamp) except -1:
        """Room for one record of ``wire`` bytes (_append and _append_raw): 0 when the queue
        bounds are reached; else 1, with a new run started, the batch opened, or its buffer
        grown, and the run's timestamps kept."""
        cdef bint opening
        opening = st.count == 0 and st.unit_count == 0
        if (self.buffered_messages >= self.max_messages
                or (self.buffered_bytes + wire + (BATCH_OVERHEAD if opening else 0)
                    + (BATCH_HEADER_SIZE if new_run else 0) > self.max_bytes
                    and self.buffered_messages)):
            return 0
        if new_run:
            # The current run becomes one of the batch's earlier runs; the new one gets a
            # header of its own (written at drain, with the producer fields).
            runlist_push(&st.runs, st.run_start, st.count, st.base_offset, st.base_ts,
                         st.max_ts)
            st.unit_count += st.count
            bytebuf_reserve(&st.buf, BATCH_HEADER_SIZE + wire)
            st.run_start = st.buf.size
            st.buf.size += BATCH_HEADER_SIZE
            st.count = 0
            st.base_offset = offset
            st.base_ts = timestamp
            st.max_ts = timestamp
            self.buffered_bytes += BATCH_HEADER_SIZE
        elif opening:
            self.buffered_bytes += BATCH_OVERHEAD
            # Room for a typical full batch up front, so the buffer rarely grows (and copies).
            pool_take(&st.buf, BATCH_HEADER_SIZE + wire)
            bytebuf_reserve(&st.buf, max(BATCH_HEADER_SIZE + wire, min(self.batch_size, 65536)))
            st.buf.size = BATCH_HEADER_SIZE
            st.run_start = 0
            st.mode = mode
            st.base_offset = offset if has_offset else 0
            st.base_ts = timestamp
            st.max_ts = timestamp
            st.opened_ms = clock_ms(CLOCK_MONOTONIC)
        else:
            bytebuf_reserve(&st.buf, wire)
            if timestamp > st.max_ts:
                st.max_ts = timestamp
        return 1

    cdef inline int _appended(self, PartitionState st, Py_ssize_t wire, int mode,
                              int64_t offset, object opaque) except -1:
        """Bookkeeping after a record is written (_append and _append_raw): its report
        target, the counts and the partition's last offset."""
        cdef Py_ssize_t index
        index = st.unit_count + st.count  # the record's index in the batch
        if st.opaque_runs is None:
            if opaque is not None:
                st.opaque_runs = [(0, None), (index, opaque)] if index else [(0, opaque)]
        elif last_run_opaque(st.opaque_runs) is not opaque:
            st.opaque_runs.append((index, opaque))
        st.count += 1
        if mode == MODE_USE_OFFSETS:
            st.last_offset = offset
        self.buffered_bytes += wire
        self.buffered_messages += 1
        return 1

    cdef int _append(self, PartitionState st, Blob *key, Blob *value, object headers,
                     const unsigned char *hwire, Py_ssize_t hwire_size,
                     int64_t timestamp, int mode, int64_t offset, object opaque) except -1:
        """Append one record; returns 1, or 0 when the buffer bounds are reached. Its headers
        are ``headers`` (pairs, from header_items()), else ``hwire`` (wire bytes as
        _append_fast takes them), else none."""
        cdef Py_ssize_t hsize = 1, hcount = 0, body, wire
        cdef bint has_offset = mode != MODE_ASSIGN
        cdef bint new_run
        cdef unsigned char *p
        cdef int64_t ts_delta
        if has_offset and offset < 0:
            raise ValueError(f"{'expected ' if mode == MODE_EXPECTED else ''}offset must be "
                             f">= 0, not {offset}")
        if mode == MODE_USE_OFFSETS:
            # Source offsets only move forward; an expected offset may go back (a writer
            # that lost a race retries from the log end it was told).
            if offset <= st.last_offset:
                raise OffsetOrderError(
                    f"{st.topic}[{st.partition}]: offset {offset} does not follow offset "
                    f"{st.last_offset}; explicit offsets must strictly increase per partition")
        if headers is not None:
            hsize = headers_wire_size(headers, &hcount)
        elif hwire != NULL:
            hsize = hwire_size
        # A new batch starts on a mode change, an offset gap, or when this record won't fit;
        # with pack_runs an offset gap starts a new run (RecordBatch) in the same batch.
        new_run = False
        if st.count and self._ends_run(st, mode, has_offset, offset):
            if self._packs_run(st, mode, record_body_size(0, 0, key, value, hsize)):
                new_run = True
            else:
                self._close(st)
        ts_delta = timestamp - st.base_ts if (st.count and not new_run) else 0
        body = record_body_size(ts_delta, 0 if new_run else st.count, key, value, hsize)
        wire = varint_size(body) + body
        if st.count and not new_run and st.buf.size + wire > self.batch_size:
            self._close(st)
            ts_delta = 0
            body = record_body_size(0, 0, key, value, hsize)
            wire = varint_size(body) + body
        if not self._make_room(st, wire, new_run, mode, has_offset, offset, timestamp):
            return 0
        p = write_record_head(st.buf.data + st.buf.size, body, ts_delta, st.count, key, value)
        if headers is not None:
            p = write_headers(p, headers, hcount)
        elif hwire != NULL:
            memcpy(p, hwire, hwire_size)
            p += hwire_size
        else:
            p[0] = 0
            p += 1
        st.buf.size = p - st.buf.data
        return self._appended(st, wire, mode, offset, opaque)

    def append(self, str topic not None, int32_t partition, key, value, headers=None, timestamp=None,
               offset=None, opaque=None, expected_offset=None, expected_key_offset=None,
               int32_t partition_count=-1):
        """Append one record. Raises QueueFullError (a BufferError) when the bounds are reached.

        ``expected_key_offset`` (docs/protocol.md §10): the record is appended only if its
        key's last offset in the partition is this one (-1: the key has no live record);
        ``partition_count``: the topic's partition count the record was partitioned with. A
        batch conditions a key once: a second condition on it starts a new batch."""
        cdef PartitionState st
        cdef bytes key_bytes
        if expected_key_offset is None:
            self._append_one(topic, partition, key, value, headers, timestamp, offset, opaque,
                             expected_offset)
            return
        check_key_condition(key, offset, expected_offset, expected_key_offset)
        key_bytes = key.encode() if isinstance(key, str) else bytes(key)
        st = self._state(topic, partition)
        if st.count and (st.mode != MODE_ASSIGN or (
                st.key_conditions is not None and (
                    key_bytes in st.conditioned_keys
                    or st.key_partition_count != partition_count))):
            self._close(st)
        self._append_one(topic, partition, key, value, headers, timestamp, None, opaque, None)
        if st.key_conditions is None:
            st.key_conditions = []
            st.conditioned_keys = set()
            st.key_partition_count = partition_count
        # the record is the open batch's last (appending closes a full batch first)
        st.key_conditions.append((st.count - 1, expected_key_offset, key_bytes))
        st.conditioned_keys.add(key_bytes)

    cdef int _append_one(self, str topic, int32_t partition, key, value, headers, timestamp,
                         offset, opaque, expected_offset) except -1:
        cdef PartitionState st = self._state(topic, partition)
        cdef Blob kb, vb
        cdef int64_t ts = clock_ms(CLOCK_REALTIME) if timestamp is None else timestamp
        cdef int added
        cdef int mode = MODE_ASSIGN
        cdef int64_t off = 0
        if offset is not None:
            if expected_offset is not None:
                raise ValueError("give offset (KIP-391) or expected_offset (KIP-27), not both")
            mode, off = MODE_USE_OFFSETS, offset
        elif expected_offset is not None:
            mode, off = MODE_EXPECTED, expected_offset
        if headers is not None:
            headers = header_items(headers)
        blob_from(key, &kb, "key")
        try:
            blob_from(value, &vb, "value")
        except BaseException:
            blob_release(&kb)
            raise
        try:
            if headers is None and self._append_fast(st, &kb, &vb, NULL, 1, ts, mode, off,
                                                     opaque):
                added = 1
            else:
                added = self._append(st, &kb, &vb, headers, NULL, 0, ts, mode, off, opaque)
        finally:
            blob_release(&kb)
            blob_release(&vb)
        if not added:
            raise QueueFullError(
                f"producer queue is full ({self.buffered_messages} messages, "
                f"{self.buffered_bytes} bytes buffered): poll() or flush() to send, or raise "
                "queue.buffering.max.messages / queue.buffering.max.kbytes")
        return 0

    def append_arrays(self, str topic not None, partition, values, keys=None, timestamps=None,
                      offsets=None, headers=None, opaque=None, expected_offset=None):
        """Append many records from columns with no per-record Python work; see accumulator.py.

        Returns how many records were appended: fewer than given when the buffer bounds were
        reached (append the rest after poll()/flush()).
        """
        cdef Column vcol, kcol
        cdef Py_ssize_t n, i, appended = 0
        cdef const int64_t[::1] ts_arr
        cdef const int64_t[::1] off_arr
        cdef const int32_t[::1] part_arr
        cdef bint has_ts = timestamps is not None
        cdef bint has_off = offsets is not None
        cdef int mode = MODE_USE_OFFSETS if has_off else MODE_ASSIGN
        cdef int64_t expected_base = 0
        cdef bint per_record_part = False
        cdef bint per_record_headers = False
        cdef int32_t part = 0
        cdef int64_t now = clock_ms(CLOCK_REALTIME)
        cdef int64_t ts, off
        cdef Blob kb, vb
        cdef PartitionState st
        cdef object shared_headers = None
        cdef bytes shared_wire = None
        cdef const unsigned char *shared_hwire = NULL   # shared_wire's bytes (NULL: none)
        cdef Py_ssize_t shared_hwire_size = 1
        cdef object h
        cdef const unsigned char *hwire
        cdef Py_ssize_t hwire_size
        cdef list header_list = None
        cdef HeaderWire seen = self._headers_seen
        kb.has_view = False
        vb.has_view = False
        column_init(&vcol)
        column_init(&kcol)
        holders = []
        try:
            n = column_open(&vcol, values, holders, "values")
            if keys is not None:
                if column_open(&kcol, keys, holders, "keys") != n:
                    raise ValueError("keys and values must have the same length")
            if has_ts:
                ts_arr = np.ascontiguousarray(timestamps, dtype=np.int64)
                if ts_arr.shape[0] != n:
                    raise ValueError("timestamps and values must have the same length")
            if has_off:
                if expected_offset is not None:
                    raise ValueError(
                        "give offsets (KIP-391) or expected_offset (KIP-27), not both")
                off_arr = np.ascontiguousarray(offsets, dtype=np.int64)
                if off_arr.shape[0] != n:
                    raise ValueError("offsets and values must have the same length")
            elif expected_offset is not None:
                mode = MODE_EXPECTED
                expected_base = expected_offset
            if isinstance(partition, int):
                part = partition
            else:
                part_arr = np.ascontiguousarray(partition, dtype=np.int32)
                if part_arr.shape[0] != n:
                    raise ValueError("partition array and values must have the same length")
                per_record_part = True
                if mode == MODE_EXPECTED:
                    raise ValueError("expected_offset needs one partition for the whole call")
            if headers is not None:
                if isinstance(headers, dict):
                    shared_headers = header_items(headers)
                else:
                    header_list = list(headers)
                    if len(header_list) == n and n and (
                            header_list[0] is None or isinstance(header_list[0], (list, dict))):
                        per_record_headers = True
                    else:
                        shared_headers = header_list
                        header_list = None
                if shared_headers is not None:
                    # One encoding for every record (a bad pair raises before any append)
                    shared_wire = encode_headers(shared_headers)
                    shared_hwire = <const unsigned char *>PyBytes_AS_STRING(shared_wire)
                    shared_hwire_size = PyBytes_GET_SIZE(shared_wire)
            if not per_record_part:
                st = self._state(topic, part)
            if not per_record_part and not per_record_headers and mode == MODE_ASSIGN:
                return self._append_columns(st, &vcol, &kcol if keys is not None else NULL, n,
                                            &ts_arr[0] if has_ts and n else NULL, now,
                                            shared_hwire, shared_hwire_size, opaque)
            for i in range(n):
                if (i & 8191) == 8191:
                    # A long call holds the GIL for milliseconds: let the sender thread in
                    # now and then, so batches already closed go out while the rest appends.
                    with nogil:
                        pass
                if per_record_part:
                    st = self._state(topic, part_arr[i])
                column_get(&vcol, i, &vb)
                if keys is not None:
                    column_get(&kcol, i, &kb)
                else:
                    kb.ptr = NULL
                    kb.size = -1
                ts = ts_arr[i] if has_ts else now
                off = off_arr[i] if has_off else expected_base + i
                if not per_record_headers:  # none, or the call's (encoded once)
                    if not self._append_fast(st, &kb, &vb, shared_hwire, shared_hwire_size, ts,
                                             mode, off, opaque) and not self._append(
                            st, &kb, &vb, None, shared_hwire, shared_hwire_size, ts, mode, off,
                            opaque):
                        break
                    appended += 1
                    continue
                h = header_list[i]
                hwire = NULL
                hwire_size = 1
                if h is not None:
                    if seen.find(h):
                        h = None
                        hwire = seen.ptr
                        hwire_size = seen.size
                    else:
                        h = header_items(h)
                if h is None and self._append_fast(st, &kb, &vb, hwire, hwire_size, ts, mode,
                                                   off, opaque):
                    appended += 1
                    continue
                if not self._append(st, &kb, &vb, h, hwire, hwire_size, ts, mode, off, opaque):
                    break
                appended += 1
        finally:
            column_close(&vcol)
            column_close(&kcol)
        return appended

    cdef Py_ssize_t _append_columns(self, PartitionState st, Column *vcol, Column *kcol,
                                    Py_ssize_t n, const int64_t *timestamps, int64_t now,
                                    const unsigned char *hwire, Py_ssize_t hwire_size,
                                    object opaque) except -1:
        """append_arrays for one partition, offsets assigned by the broker, the call's headers
        (or none); ``kcol`` NULL: no keys. A record that opens a batch or a run, or does not
        fit, takes _append's path with the GIL; the records that continue the batch are
        copied in stretches without it (see COPY_STRETCH). Returns how many were appended."""
        cdef Stretch *stretch = self._stretch
        cdef Py_ssize_t i = 0, count, copied, k, appended = 0
        cdef Blob kb, vb
        cdef int64_t timestamp
        if stretch == NULL:
            stretch = self._stretch = <Stretch *>PyMem_Malloc(sizeof(Stretch))
            if stretch == NULL:
                raise MemoryError()
        kb.has_view = False
        vb.has_view = False
        while i < n:
            if continues_run(st, MODE_ASSIGN, 0, opaque):
                count = gather_column(vcol, i, min(n, i + COPY_STRETCH), stretch.values,
                                      stretch.held_values)
                if kcol != NULL:
                    k = gather_column(kcol, i, i + count, stretch.keys, stretch.held_keys)
                    release_held(stretch.held_values + k, count - k)
                    count = k
                else:
                    for k in range(count):
                        stretch.keys[k].ptr = NULL
                        stretch.keys[k].size = -1
                        stretch.held_keys[k] = NULL
                if count:
                    with nogil:
                        copied = self._copy_stretch(
                            st, count, timestamps + i if timestamps != NULL else NULL, now,
                            hwire, hwire_size)
                    release_held(stretch.held_values, count)
                    release_held(stretch.held_keys, count)
                    i += copied
                    appended += copied
                    if copied == count:
                        continue
            # One record with the GIL: it opens a batch or a run, did not fit the stretch, or
            # is neither bytes nor None.
            column_get(vcol, i, &vb)
            if kcol != NULL:
                column_get(kcol, i, &kb)
            else:
                kb.ptr = NULL
                kb.size = -1
            timestamp = timestamps[i] if timestamps != NULL else now
            if not self._append_fast(st, &kb, &vb, hwire, hwire_size, timestamp, MODE_ASSIGN,
                                     0, opaque) and not self._append(
                    st, &kb, &vb, None, hwire, hwire_size, timestamp, MODE_ASSIGN, 0, opaque):
                break
            appended += 1
            i += 1
        return appended

    def append_dicts(self, str topic not None, list messages, Py_ssize_t start, Py_ssize_t stop,
                     chosen, int32_t call_partition, Py_ssize_t max_bytes, object default_target,
                     object make_target, tuple kip_refusals, object fail):
        """confluent-kafka's produce_batch, per record in C: ``messages[start:stop]``.

        Each message is a dict with value, key, partition, timestamp, headers, callback /
        on_delivery, and (kipproducer) offset or expected_offset. A record that cannot be
        appended is skipped and ``fail(message, code_name, text)`` records why (confluent's
        ``_error`` rule); code_name is "MSG_SIZE_TOO_LARGE", "_QUEUE_FULL" or "_INVALID_ARG",
        or, for offset / expected-offset records the producer's configuration cannot send,
        ``kip_refusals[0]`` / ``kip_refusals[1]`` (error objects, or None) is stored as is. ``chosen`` gives records without a partition
        theirs: an int, or an int32 array indexed like ``messages``. A record's own callback
        becomes ``make_target(callback)``, the others share ``default_target``.
        Returns how many records were appended.
        """
        cdef Py_ssize_t i, queued = 0
        cdef dict m
        cdef object part_obj, key, value, headers, ts_obj, own, off_obj, exp_obj, target
        cdef object last_own = None, last_target = None, refusal
        cdef PyObject *f[F_COUNT]
        cdef tuple looked_up
        cdef HeaderWire seen = self._headers_seen
        cdef const unsigned char *hwire
        cdef Py_ssize_t hwire_size
        cdef int32_t part
        cdef int64_t now = clock_ms(CLOCK_REALTIME)
        cdef int64_t ts, off
        cdef int mode
        cdef int added
        cdef Blob kb, vb
        cdef PartitionState st
        cdef const int32_t[::1] chosen_arr
        cdef bint per_record_chosen = chosen is not None and not isinstance(chosen, int)
        cdef int32_t chosen_one = chosen if (chosen is not None and not per_record_chosen) else -1
        if per_record_chosen:
            chosen_arr = chosen
        for i in range(start, stop):
            item = messages[i]
            if not isinstance(item, dict):
                raise TypeError(f"messages[{i}] must be a dict, not {type(item).__name__}")
            m = <dict>item
            looked_up = read_fields(m, f)
            # References of our own from here: the code below may run Python code.
            part_obj = field(f, F_PARTITION)
            off_obj = field(f, F_OFFSET)
            exp_obj = field(f, F_EXPECTED_OFFSET)
            value = field(f, F_VALUE)
            key = field(f, F_KEY)
            ts_obj = field(f, F_TIMESTAMP)
            own = field(f, F_CALLBACK)
            if own is None:
                own = field(f, F_ON_DELIVERY)
            headers = field(f, F_HEADERS)
            looked_up = None
            try:
                part = call_partition if part_obj is None else part_obj
            except (TypeError, OverflowError) as exc:
                fail(m, "_INVALID_ARG", f"partition: {exc}")
                continue
            if off_obj is not None or exp_obj is not None:
                if off_obj is not None and exp_obj is not None:
                    fail(m, "_INVALID_ARG",
                         "give offset= (KIP-391) or expected_offset= (KIP-27), not both")
                    continue
                if part < 0:
                    fail(m, "_INVALID_ARG",
                         ("offset=" if off_obj is not None else "expected_offset=")
                         + " needs an explicit partition: an offset means something only in "
                         "one partition's log")
                    continue
                refusal = kip_refusals[0 if off_obj is not None else 1]
                if refusal is not None:
                    m["_error"] = refusal
                    continue
                if off_obj is not None:
                    mode, off = MODE_USE_OFFSETS, off_obj
                else:
                    mode, off = MODE_EXPECTED, exp_obj
            else:
                mode, off = MODE_ASSIGN, 0
            if part < 0:
                part = chosen_arr[i] if per_record_chosen else chosen_one
            try:
                blob_from(key, &kb, "key")
            except TypeError as exc:
                fail(m, "_INVALID_ARG", str(exc))
                continue
            try:
                blob_from(value, &vb, "value")
            except TypeError as exc:
                blob_release(&kb)
                fail(m, "_INVALID_ARG", str(exc))
                continue
            try:
                if (vb.size if vb.size > 0 else 0) + (kb.size if kb.size > 0 else 0) > max_bytes:
                    fail(m, "MSG_SIZE_TOO_LARGE",
                         f"{(vb.size if vb.size > 0 else 0) + (kb.size if kb.size > 0 else 0)} "
                         f"bytes > message.max.bytes={max_bytes}")
                    continue
                ts = now if (ts_obj is None or not ts_obj) else ts_obj
                if own is None:
                    target = default_target
                else:
                    if own is not last_own:
                        last_own, last_target = own, make_target(own)
                    target = last_target
                st = self._state(topic, part)
                hwire = NULL
                hwire_size = 1
                if headers is not None and seen.find(headers):
                    headers = None
                    hwire = seen.ptr
                    hwire_size = seen.size
                if headers is None and self._append_fast(st, &kb, &vb, hwire, hwire_size, ts,
                                                         mode, off, target):
                    added = 1
                else:
                    if headers is not None:
                        headers = header_items(headers)
                    added = self._append(st, &kb, &vb, headers, hwire, hwire_size, ts, mode,
                                         off, target)
            except (TypeError, ValueError, OverflowError) as exc:
                fail(m, "_INVALID_ARG", str(exc))
                continue
            finally:
                blob_release(&kb)
                blob_release(&vb)
            if not added:
                fail(m, "_QUEUE_FULL",
                     f"producer queue is full ({self.buffered_messages} messages, "
                     f"{self.buffered_bytes} bytes buffered): poll() or flush() to send, or "
                     "raise queue.buffering.max.messages / queue.buffering.max.kbytes")
                continue
            queued += 1
        return queued

    # ---- forwarding fetched batches (kip mirror) -----------------------------------------

    cdef int _append_raw(self, PartitionState st, const unsigned char *tail, Py_ssize_t tail_size,
                         int64_t timestamp, int mode, int64_t offset, object opaque) except -1:
        """_append for a record whose key, value and headers are already encoded (``tail``,
        copied as is): the same batch, run and bound rules. Returns 1, or 0 when full."""
        cdef Py_ssize_t body, wire
        cdef bint has_offset = mode != MODE_ASSIGN
        cdef bint new_run = False
        cdef unsigned char *p
        cdef int64_t ts_delta
        if mode == MODE_USE_OFFSETS and offset <= st.last_offset:
            raise OffsetOrderError(
                f"{st.topic}[{st.partition}]: offset {offset} does not follow offset "
                f"{st.last_offset}; explicit offsets must strictly increase per partition")
        if st.count and self._ends_run(st, mode, has_offset, offset):
            if self._packs_run(st, mode, 1 + 1 + 1 + tail_size):
                new_run = True
            else:
                self._close(st)
        ts_delta = timestamp - st.base_ts if (st.count and not new_run) else 0
        body = (1 + varint_size(ts_delta) + varint_size(0 if new_run else st.count)
                + tail_size)
        wire = varint_size(body) + body
        if st.count and not new_run and st.buf.size + wire > self.batch_size:
            self._close(st)
            ts_delta = 0
            body = 1 + 1 + 1 + tail_size
            wire = varint_size(body) + body
        if not self._make_room(st, wire, new_run, mode, has_offset, offset, timestamp):
            return 0
        p = write_varint(st.buf.data + st.buf.size, body)
        p[0] = 0  # record attributes: unused
        p = write_varint(p + 1, ts_delta)
        p = write_varint(p, st.count)
        memcpy(p, tail, tail_size)
        st.buf.size = p + tail_size - st.buf.data
        return self._appended(st, wire, mode, offset, opaque)

    cdef void _close_log_append_time(self, PartitionState st):
        """Close the open batch as a LogAppendTime one: its records' timestamps are the batch's
        max timestamp, so it holds the records of one source batch only."""
        cdef Py_ssize_t before = len(st.ready)
        self._close(st)
        if len(st.ready) > before:
            (<ProducerBatch>st.ready[len(st.ready) - 1]).extra_attributes = TIMESTAMP_TYPE_MASK

    cdef int _append_section(self, PartitionState st, const unsigned char *p,
                             const unsigned char *end, int32_t count, int64_t base_offset,
                             int64_t base_timestamp, int64_t max_timestamp,
                             bint log_append_time, int mode, int64_t min_offset,
                             Py_ssize_t *index, Py_ssize_t *pos, Py_ssize_t *queued,
                             int64_t *last_queued, object opaque) except -1:
        """The records of one batch's records section [p + pos, end), from record ``index``
        on; moves index and pos on. Returns 1 when the section is done, 0 when full."""
        cdef const unsigned char *q
        cdef const unsigned char *record_end
        cdef const unsigned char *at = p + pos[0]
        cdef int32_t length, offset_delta
        cdef int64_t ts_delta, offset, ts
        cdef Py_ssize_t i = index[0]
        cdef int done = 1
        if log_append_time and st.count:
            self._close(st)
        while i < count:
            q = read_varint32(at, end, &length)
            if q == NULL or length < 3 or length > end - q:
                raise ValueError(f"{st.topic}[{st.partition}]: record {i} of the batch at "
                                 f"offset {base_offset} is malformed or truncated")
            record_end = q + length
            q = read_varint64(q + 1, record_end, &ts_delta)  # after the attributes byte
            if q != NULL:
                q = read_varint32(q, record_end, &offset_delta)
            if q == NULL:
                raise ValueError(f"{st.topic}[{st.partition}]: record {i} of the batch at "
                                 f"offset {base_offset} is malformed")
            offset = base_offset + offset_delta
            if offset >= min_offset:
                ts = max_timestamp if log_append_time else base_timestamp + ts_delta
                if not self._append_raw(st, q, record_end - q, ts, mode, offset, opaque):
                    done = 0
                    break
                queued[0] += 1
                last_queued[0] = offset
            at = record_end
            i += 1
        if log_append_time:
            self._close_log_append_time(st)
        index[0] = i
        pos[0] = at - p
        return done

    def append_fetched(self, str topic not None, int32_t partition, records, int32_t count,
                       int64_t base_offset, int64_t base_timestamp, int64_t max_timestamp,
                       bint log_append_time=False, bint with_offsets=False,
                       int64_t min_offset=-1, Py_ssize_t start_record=0,
                       Py_ssize_t start_pos=0, opaque=None):
        """Append the records of one fetched RecordBatch v2 (its uncompressed records section,
        any buffer) without decoding them into Python objects: each record's key, value and
        headers bytes are copied as they are, its offset and timestamp deltas re-framed for
        the batch it joins. ``with_offsets`` (KIP-391): each record keeps its source offset
        (base_offset + its offset delta), gaps included; otherwise the broker assigns them.
        Records below ``min_offset`` are skipped (a fetch answers from the batch holding the
        fetch offset). LogAppendTime: every record's timestamp is ``max_timestamp`` and the
        target batch keeps the LogAppendTime bit (one source batch per target batch).

        Returns (records done, byte position, records queued, last queued offset): done <
        ``count`` when the buffer bounds were reached (call again with start_record/start_pos
        to go on); queued leaves out the skipped ones; the offset is the source's (-1: none
        queued). Raises ValueError on a malformed records section.
        """
        cdef PartitionState st = self._state(topic, partition)
        cdef Py_buffer view
        cdef Py_ssize_t index = start_record, pos = start_pos, queued = 0
        cdef int64_t last_queued = -1
        PyObject_GetBuffer(records, &view, PyBUF_SIMPLE)
        try:
            if not 0 <= pos <= view.len:
                raise ValueError("start_pos is outside the records")
            self._append_section(
                st, <const unsigned char *>view.buf, <const unsigned char *>view.buf + view.len,
                count, base_offset, base_timestamp, max_timestamp, log_append_time,
                MODE_USE_OFFSETS if with_offsets else MODE_ASSIGN, min_offset, &index, &pos,
                &queued, &last_queued, opaque)
        finally:
            PyBuffer_Release(&view)
        return index, pos, queued, last_queued

    def append_fetched_batches(self, str topic not None, int32_t partition, span,
                               bint with_offsets=False, int64_t min_offset=-1,
                               Py_ssize_t batch_pos=0, Py_ssize_t start_record=0,
                               Py_ssize_t start_pos=0, opaque=None):
        """append_fetched for a run of whole fetched batches back to back (``span``: headers
        and records), each v2, uncompressed and CreateTime, as a Fetch answer holds them: one
        call for many small batches (a compacted or KIP-391 source has a batch per run of
        offsets). The caller checked the headers (kipproducer.mirror.batches).

        Returns (done, batch position, record index, record position, records queued, last
        queued offset); not done when the buffer bounds were reached: call again with
        batch_pos, start_record and start_pos to go on.
        """
        cdef PartitionState st = self._state(topic, partition)
        cdef Py_buffer view
        cdef const unsigned char *data
        cdef const unsigned char *batch
        cdef Py_ssize_t size, batch_end, index = start_record, pos = start_pos, queued = 0
        cdef int64_t last_queued = -1
        cdef int mode = MODE_USE_OFFSETS if with_offsets else MODE_ASSIGN
        cdef int done = 1
        PyObject_GetBuffer(span, &view, PyBUF_SIMPLE)
        try:
            data = <const unsigned char *>view.buf
            size = view.len
            while batch_pos < size:
                batch = data + batch_pos
                if size - batch_pos < BATCH_HEADER_SIZE:
                    raise ValueError(f"{topic}[{partition}]: a batch header is cut short")
                batch_end = batch_pos + LOG_OVERHEAD + get_i32(batch + BATCH_LENGTH_POS)
                if batch_end > size or batch_end < batch_pos + BATCH_HEADER_SIZE:
                    raise ValueError(f"{topic}[{partition}]: a batch is cut short")
                if not self._append_section(
                        st, batch + BATCH_HEADER_SIZE, data + batch_end,
                        get_i32(batch + RECORDS_COUNT_POS), get_i64(batch + BASE_OFFSET_POS),
                        get_i64(batch + BASE_TIMESTAMP_POS), get_i64(batch + MAX_TIMESTAMP_POS),
                        False, mode, min_offset, &index, &pos, &queued, &last_queued, opaque):
                    done = 0
                    break
                batch_pos = batch_end
                index = 0
                pos = 0
        finally:
            PyBuffer_Release(&view)
        return bool(done), batch_pos, index, pos, queued, last_queued

    # ---- draining ------------------------------------------------------------------------

    def drain(self, now_ms=None, *, bint flush=False, partitions=None):
        """Close batches that are ready and hand them out finished (bytes, sequence, CRC).

        A batch is ready when full, when its partition has later batches, when it is at least
        linger.ms old, or always with flush=True. partitions optionally limits the drain to a
        set of (topic, partition) pairs. Batches come out oldest first within a partition.
        """
        cdef int64_t now = clock_ms(CLOCK_MONOTONIC) if now_ms is None else now_ms
        cdef PartitionState st
        cdef ProducerBatch b
        cdef list out = []
        for states in self._topics.values():
            for st in states:
                if st is None:
                    continue
                if partitions is not None and (st.topic, st.partition) not in partitions:
                    continue
                if st.count and (flush or now - st.opened_ms >= self.linger_ms):
                    self._close(st)
                while st.ready:
                    b = st.ready.popleft()
                    self._stamp(st, b)
                    out.append(b)
        return out

    cdef int _stamp(self, PartitionState st, ProducerBatch b) except -1:
        cdef BatchFields f
        cdef bint restamp = (b.producer_id != self.producer_id
                             or b.producer_epoch != self.producer_epoch)
        if b.finished and not restamp:
            return 0
        if self.producer_id >= 0:
            if restamp or b.base_sequence < 0:
                b.base_sequence = st.next_sequence
                st.next_sequence = increment_sequence(st.next_sequence, b.record_count)
        else:
            b.base_sequence = -1
        b.producer_id = self.producer_id
        b.producer_epoch = self.producer_epoch
        f.base_offset = b.base_offset
        f.partition_leader_epoch = -1
        f.attributes = (b.codec | (TRANSACTIONAL_FLAG if b.transactional else 0)
                        | b.extra_attributes)
        f.last_offset_delta = b.record_count - 1
        f.base_timestamp = b.first_timestamp
        f.max_timestamp = b.max_timestamp
        f.producer_id = b.producer_id
        f.producer_epoch = <int16_t>b.producer_epoch
        f.base_sequence = b.base_sequence
        f.records_count = b.record_count
        b._finish(&f)
        return 0

    def reenqueue(self, ProducerBatch batch):
        """Put a drained batch back for a retry, ahead of newer batches; it keeps its sequence."""
        cdef PartitionState st = self._state(batch.topic, batch.partition)
        cdef Py_ssize_t i = 0
        cdef ProducerBatch other
        # Keep retries in sequence order ahead of batches that have none yet.
        for other in st.ready:
            if other.base_sequence < 0 or (batch.base_sequence >= 0
                                           and other.base_sequence > batch.base_sequence):
                break
            i += 1
        st.ready.insert(i, batch)

    def release(self, ProducerBatch batch):
        """The batch is done (delivered or failed for good): free its share of the bounds.

        Its bytes go back to the buffer pool now unless a per-record delivery report will
        decode them (a ReportTarget with per_record, or an opaque of another kind) or a view
        of them is still open. Its delivery report waits for the caller's next poll() or
        flush(), and a produce_arrays loop that never blocks calls neither: holding the bytes
        until then kept every batch of the loop alive (a megabyte each), and each new batch
        took fresh memory and its page faults instead of a pooled buffer."""
        self.buffered_bytes -= batch.records_size + BATCH_OVERHEAD
        self.buffered_messages -= batch.record_count
        if batch._exports == 0 and batch.finished and not batch_reports_need_bytes(batch):
            pool_give(&batch.buf)

    def next_ready_ms(self, now_ms=None):
        """Milliseconds until drain() has something to hand out (0 = now, None = nothing)."""
        cdef int64_t now = clock_ms(CLOCK_MONOTONIC) if now_ms is None else now_ms
        cdef PartitionState st
        cdef int64_t best = -1, wait
        for states in self._topics.values():
            for st in states:
                if st is None:
                    continue
                if st.ready:
                    return 0
                if st.count:
                    wait = st.opened_ms + self.linger_ms - now
                    if wait <= 0:
                        return 0
                    if best < 0 or wait < best:
                        best = wait
        return None if best < 0 else best

    def purge(self):
        """Drop everything not yet drained; returns the dropped batches (unfinished)."""
        cdef PartitionState st
        cdef ProducerBatch b
        cdef list out = []
        for states in self._topics.values():
            for st in states:
                if st is None:
                    continue
                self._close(st)
                while st.ready:
                    b = st.ready.popleft()
                    self.release(b)
                    out.append(b)
        return out

    def __len__(self):
        return self.buffered_messages


# ---- columns for the bulk path --------------------------------------------------------------
# A column of byte strings, whatever it came as, read by index with no Python calls:
#   ARROW:  one data buffer + int32 or int64 offsets (+ optional validity bitmap), as pyarrow
#           binary/string arrays and (data, offsets) tuples hold them;
#   OBJECTS: a sequence of bytes/None (numpy object array, list, tuple).

cdef enum ColumnKind:
    COL_NONE = 0
    COL_ARROW = 1
    COL_OBJECTS = 2


cdef struct Column:
    ColumnKind kind
    Py_ssize_t length
    const unsigned char *data
    const int32_t *offsets32
    const int64_t *offsets64
    const uint8_t *validity
    Py_ssize_t bit_offset          # pyarrow array .offset
    PyObject **items
    Py_buffer views[3]
    int nviews


cdef void column_init(Column *c) noexcept:
    c.kind = COL_NONE
    c.length = 0
    c.data = NULL
    c.offsets32 = NULL
    c.offsets64 = NULL
    c.validity = NULL
    c.bit_offset = 0
    c.items = NULL
    c.nviews = 0


cdef void column_close(Column *c) noexcept:
    cdef int i
    for i in range(c.nviews):
        PyBuffer_Release(&c.views[i])
    c.nviews = 0


cdef const void *column_view(Column *c, object obj) except NULL:
    cdef Py_buffer *v = &c.views[c.nviews]
    PyObject_GetBuffer(obj, v, PyBUF_SIMPLE)
    c.nviews += 1
    return v.buf if v.buf != NULL else <const void *>b""


cdef Py_ssize_t column_open(Column *c, object obj, list holders, str what) except -1:
    """Set up c to read obj; returns its length."""
    cdef Py_ssize_t n
    if hasattr(obj, "combine_chunks"):      # pyarrow.ChunkedArray
        obj = obj.combine_chunks()
    if hasattr(obj, "buffers") and hasattr(obj, "type"):   # pyarrow Binary/String array
        return column_open_arrow(c, obj, holders, what)
    if isinstance(obj, tuple) and len(obj) == 2 and not isinstance(obj[0], (bytes, type(None))):
        return column_open_pair(c, obj[0], obj[1], holders, what)
    if isinstance(obj, np.ndarray) and obj.dtype != object:
        raise TypeError(
            f"{what}: a numpy array of dtype {obj.dtype} is not a column of byte strings; pass "
            "an object array of bytes, a pyarrow binary array or a (data, offsets) tuple")
    if (isinstance(obj, np.ndarray) and obj.ndim == 1 and obj.flags.c_contiguous):
        # An object array stores PyObject pointers contiguously: read them in place.
        holders.append(obj)
        c.kind = COL_OBJECTS
        c.length = obj.shape[0]
        c.items = <PyObject **><size_t>obj.__array_interface__["data"][0]
        return c.length
    seq = obj if isinstance(obj, (list, tuple)) else list(obj)
    holders.append(seq)
    n = len(seq)
    c.kind = COL_OBJECTS
    c.length = n
    c.items = PySequence_Fast_ITEMS(seq)
    return n


cdef Py_ssize_t column_open_pair(Column *c, object data, object offsets, list holders,
                                 str what) except -1:
    offsets = np.ascontiguousarray(offsets)
    if offsets.dtype == np.int32:
        pass
    elif offsets.dtype == np.int64:
        pass
    else:
        offsets = offsets.astype(np.int64)
    holders.append(offsets)
    if offsets.ndim != 1 or offsets.shape[0] < 1:
        raise ValueError(f"{what}: offsets must be a 1-d array of n + 1 positions")
    c.kind = COL_ARROW
    c.length = offsets.shape[0] - 1
    c.data = <const unsigned char *>column_view(c, data)
    if offsets.dtype == np.int32:
        c.offsets32 = <const int32_t *>column_view(c, offsets)
    else:
        c.offsets64 = <const int64_t *>column_view(c, offsets)
    column_check_offsets(c, c.views[0].len, what)
    return c.length


cdef Py_ssize_t column_open_arrow(Column *c, object arr, list holders, str what) except -1:
    type_name = str(arr.type)
    if type_name in ("binary", "string", "utf8"):
        wide = False
    elif type_name in ("large_binary", "large_string", "large_utf8"):
        wide = True
    else:
        raise TypeError(f"{what}: pyarrow array of type {type_name} is not binary or string")
    cdef Py_ssize_t first = arr.offset
    holders.append(arr)
    validity, offsets, data = arr.buffers()[:3]
    c.kind = COL_ARROW
    c.length = len(arr)
    c.bit_offset = first
    if data is None:
        data = b""
    c.data = <const unsigned char *>column_view(c, data)
    if wide:
        c.offsets64 = (<const int64_t *>column_view(c, offsets)) + first
    else:
        c.offsets32 = (<const int32_t *>column_view(c, offsets)) + first
    if validity is not None and arr.null_count:
        c.validity = <const uint8_t *>column_view(c, validity)
    column_check_offsets(c, c.views[0].len, what)
    return c.length


cdef int column_check_offsets(Column *c, Py_ssize_t data_len, str what) except -1:
    """Offsets must be non-decreasing and inside the data buffer: checked once, up front."""
    cdef Py_ssize_t i
    cdef int64_t prev, cur
    prev = c.offsets32[0] if c.offsets32 != NULL else c.offsets64[0]
    if prev < 0:
        raise ValueError(f"{what}: offsets must not be negative")
    for i in range(1, c.length + 1):
        cur = c.offsets32[i] if c.offsets32 != NULL else c.offsets64[i]
        if cur < prev:
            raise ValueError(f"{what}: offsets decrease at position {i}")
        prev = cur
    if prev > data_len:
        raise ValueError(f"{what}: offsets point past the end of the data buffer")
    return 0


cdef inline void arrow_cell(Column *c, Py_ssize_t i, const unsigned char **ptr,
                            Py_ssize_t *size) noexcept nogil:
    """Cell i of an Arrow column: its bytes, or NULL and size -1 for a null."""
    cdef int64_t start, end
    cdef Py_ssize_t bit
    if c.validity != NULL:
        bit = c.bit_offset + i
        if not (c.validity[bit >> 3] >> (bit & 7)) & 1:
            ptr[0] = NULL
            size[0] = -1
            return
    if c.offsets32 != NULL:
        start = c.offsets32[i]
        end = c.offsets32[i + 1]
    else:
        start = c.offsets64[i]
        end = c.offsets64[i + 1]
    ptr[0] = c.data + start
    size[0] = end - start


cdef int column_get(Column *c, Py_ssize_t i, Blob *b) except -1:
    cdef PyObject *item
    b.has_view = False
    if c.kind == COL_ARROW:
        arrow_cell(c, i, &b.ptr, &b.size)
        return 0
    item = c.items[i]
    if PyBytes_CheckExact(<object>item):
        b.ptr = <const unsigned char *>PyBytes_AS_STRING(<object>item)
        b.size = PyBytes_GET_SIZE(<object>item)
        return 0
    # None, str and other buffers: the general path (borrowed views must not outlive the item;
    # the caller's sequence keeps it alive and the record is copied before the next item).
    blob_from(<object>item, b, "column item")
    if b.has_view:
        # Copying happens immediately in _append, so releasing right away is not possible here;
        # refuse buffers that need a view to keep the hot path simple and leak-free.
        blob_release(b)
        raise TypeError("column items must be bytes, str or None")
    return 0


# ---- key hashing for the partitioners --------------------------------------------------------
# librdkafka's keyed partitioners, reproduced so the bulk lane puts a key on the same partition
# as the librdkafka lane: "consistent" = CRC-32 (IEEE) of the key, "murmur2" = Java's murmur2
# with the sign bit cleared, "fnv1a" = 32-bit FNV-1a; each modulo the partition count.

cdef uint32_t CRC32_IEEE_TABLE[256]
cdef bint crc32_table_ready = False


cdef void build_crc32_table() noexcept:
    global crc32_table_ready
    cdef uint32_t c
    cdef int b, k
    for b in range(256):
        c = b
        for k in range(8):
            c = (c >> 1) ^ <uint32_t>0xEDB88320 if c & 1 else c >> 1
        CRC32_IEEE_TABLE[b] = c
    crc32_table_ready = True


cdef inline uint32_t crc32_ieee(const unsigned char *p, Py_ssize_t n) noexcept nogil:
    cdef uint32_t c = <uint32_t>0xFFFFFFFF
    cdef Py_ssize_t i
    for i in range(n):
        c = CRC32_IEEE_TABLE[(c ^ p[i]) & 0xFF] ^ (c >> 8)
    return ~c


cdef inline uint32_t murmur2_java(const unsigned char *p, Py_ssize_t n) noexcept nogil:
    cdef uint32_t m = <uint32_t>0x5BD1E995
    cdef uint32_t h = (<uint32_t>0x9747B28C) ^ <uint32_t>n
    cdef uint32_t k
    cdef Py_ssize_t i, whole = n & ~3
    for i in range(0, whole, 4):
        k = p[i] | (<uint32_t>p[i + 1] << 8) | (<uint32_t>p[i + 2] << 16) | (<uint32_t>p[i + 3] << 24)
        k *= m
        k ^= k >> 24
        k *= m
        h *= m
        h ^= k
    if n & 3 == 3:
        h ^= <uint32_t>p[whole + 2] << 16
    if n & 3 >= 2:
        h ^= <uint32_t>p[whole + 1] << 8
    if n & 3 >= 1:
        h ^= p[whole]
        h *= m
    h ^= h >> 13
    h *= m
    h ^= h >> 15
    return h


cdef inline uint32_t fnv1a_32(const unsigned char *p, Py_ssize_t n) noexcept nogil:
    cdef uint32_t h = <uint32_t>0x811C9DC5
    cdef Py_ssize_t i
    for i in range(n):
        h ^= p[i]
        h *= <uint32_t>0x01000193
    return h


cdef enum KeyScan:
    SCAN_LENGTH = -1
    SCAN_CRC32 = 0
    SCAN_MURMUR2 = 1
    SCAN_FNV1A = 2


cdef object scan_keys(object keys, int which, object dtype):
    """One number per key of a column: its length (-1 for null) or its hash (null hashes as
    empty), into a new numpy array of ``dtype``."""
    cdef Column col
    cdef Blob kb
    cdef Py_ssize_t i, n
    cdef uint32_t[::1] hashes
    cdef int64_t[::1] lengths
    column_init(&col)
    holders = []
    try:
        n = column_open(&col, keys, holders, "keys")
        result = np.empty(n, dtype=dtype)
        if which == SCAN_LENGTH:
            lengths = result
            for i in range(n):
                column_get(&col, i, &kb)
                lengths[i] = kb.size
            return result
        hashes = result
        for i in range(n):
            column_get(&col, i, &kb)
            if kb.size <= 0:
                kb.size = 0
                kb.ptr = <const unsigned char *>b""
            if which == SCAN_CRC32:
                hashes[i] = crc32_ieee(kb.ptr, kb.size)
            elif which == SCAN_MURMUR2:
                hashes[i] = murmur2_java(kb.ptr, kb.size)
            else:
                hashes[i] = fnv1a_32(kb.ptr, kb.size)
        return result
    finally:
        column_close(&col)


_HASHES = {"crc32": SCAN_CRC32, "murmur2": SCAN_MURMUR2, "fnv1a": SCAN_FNV1A}


def key_hashes(keys, str algorithm not None):
    """uint32 hash of every key of a column ("crc32", "murmur2", "fnv1a"); null keys hash as
    empty. Callers pick what null/empty keys do (librdkafka: random for the *_random ones)."""
    which = _HASHES.get(algorithm)
    if which is None:
        raise ValueError(f"unknown key hash {algorithm!r}")
    if not crc32_table_ready:
        build_crc32_table()
    return scan_keys(keys, which, np.uint32)


def key_lengths(keys):
    """int64 length of every key of a column, -1 for null keys."""
    return scan_keys(keys, SCAN_LENGTH, np.int64)


def largest_record(values, keys=None):
    """``(count, index, size)``: how many records the columns hold, and which one's key and
    value bytes add up to the most (a null counts 0) and how many that is, in one pass over
    both columns with no arrays built: produce_arrays checks message.max.bytes with it before
    it appends anything. ``(0, -1, 0)`` for no records."""
    cdef Column vcol, kcol
    cdef Blob vb, kb
    cdef Py_ssize_t i, n, size, best = -1, best_size = 0
    cdef bint has_keys = keys is not None
    column_init(&vcol)
    column_init(&kcol)
    holders = []
    try:
        n = column_open(&vcol, values, holders, "values")
        if has_keys and column_open(&kcol, keys, holders, "keys") != n:
            raise ValueError("keys and values must have the same length")
        for i in range(n):
            column_get(&vcol, i, &vb)
            size = vb.size if vb.size > 0 else 0
            if has_keys:
                column_get(&kcol, i, &kb)
                if kb.size > 0:
                    size += kb.size
            if size > best_size or best < 0:
                best, best_size = i, size
        return n, best, best_size
    finally:
        column_close(&vcol)
        column_close(&kcol)


cdef inline int check_payload(object value, str name, Py_ssize_t index) except -1:
    """confluent-kafka's check of a message's value or key (None passes)."""
    if (value is None or PyBytes_CheckExact(value) or isinstance(value, (bytes, str))
            or PyObject_CheckBuffer(value)):
        return 0
    raise TypeError(f"Message {name} at index {index} must be bytes or str")


def scan_messages(list messages, int32_t call_partition, list conditioned=None):
    """produce_batch's check before anything is queued, with confluent-kafka's errors: every
    message a dict, value and key bytes, str, a buffer or None, partition an int, headers a
    list, tuple or dict (TypeError / ValueError naming the index). Returns True when some
    message has no partition of its own and the call gives none (the partitioner runs).
    ``conditioned``: gets the index of each message with an ``expected_key_offset``."""
    cdef Py_ssize_t i
    cdef dict m
    cdef object part, value, key, headers
    cdef PyObject *f[F_COUNT]
    cdef tuple looked_up
    cdef bint needs = False
    for i in range(len(messages)):
        item = messages[i]
        if not isinstance(item, dict):
            raise TypeError(f"expected list of dicts, message at index {i} is "
                            f"{type(item).__name__}")
        m = <dict>item
        looked_up = read_fields(m, f)
        # References of our own before the checks (isinstance may run Python code)
        value = field(f, F_VALUE)
        key = field(f, F_KEY)
        part = field(f, F_PARTITION)
        headers = field(f, F_HEADERS)
        check_payload(value, "value", i)
        check_payload(key, "key", i)
        if part is None:
            needs = needs or call_partition < 0
        elif not isinstance(part, int):
            raise TypeError(f"Message partition at index {i} must be int")
        elif part < 0:
            needs = needs or call_partition < 0
        if headers is not None and not isinstance(headers, (list, tuple, dict)):
            raise ValueError(f"Invalid headers at index {i}")
        if f[F_EXPECTED_KEY_OFFSET] != NULL and conditioned is not None:
            conditioned.append(i)
    return needs


def check_key_condition(key, offset, expected_offset, expected_key_offset):
    """Refuse what a per-key condition cannot go with (docs/protocol.md §10): ValueError."""
    if offset is not None or expected_offset is not None:
        raise ValueError("expected_key_offset= goes with neither offset= nor "
                         "expected_offset=")
    if key is None:
        raise ValueError("expected_key_offset= needs a key: a record without one has no "
                         "last offset to compare")
    if expected_key_offset < -1:
        raise ValueError(f"expected_key_offset must be -1 (KEY_ABSENT) or an offset, not "
                         f"{expected_key_offset}")


def has_kip_keys(list messages):
    """Some message names an ``offset`` or ``expected_offset`` (produce_batch's KIP fields,
    served by the emulation on a broker without the extension): ``"offset" in m`` per
    message, with a dict's own lookup, not a Python loop over every message of every call."""
    for item in messages:
        if type(item) is dict:
            if "offset" in <dict>item or "expected_offset" in <dict>item:
                return True
        elif "offset" in item or "expected_offset" in item:
            return True
    return False


def message_keys(list messages):
    """The key of every message (None where it has none), for the partitioner."""
    return [(<dict>m).get("key") if isinstance(m, dict) else None for m in messages]



@cython.final
cdef class BatchDelivery:
    """What a produce_arrays delivery callback gets by default: one Kafka batch's outcome.

    ``topic()``, ``partition()``, ``offset()`` (of the first record; -1 when unknown or
    failed), ``count`` (records) and ``error()``. Built in C: a copy whose offsets have many
    gaps reports a batch per run of offsets.
    """
    cdef readonly str _topic
    cdef readonly int32_t _partition
    cdef readonly int64_t _offset
    cdef public Py_ssize_t count
    cdef readonly object _error

    def __init__(self, str topic, int32_t partition, int64_t offset, Py_ssize_t count,
                 error):
        self._topic = topic
        self._partition = partition
        self._offset = offset
        self.count = count
        self._error = error

    def topic(self):
        return self._topic

    def partition(self):
        return self._partition

    def offset(self):
        """Offset of the first record of this report (-1 when unknown or failed)."""
        return self._offset

    def error(self):
        return self._error

    def __len__(self):
        return self.count

    def __repr__(self):
        return (f"BatchDelivery({self._topic!r}, partition={self._partition}, "
                f"offset={self._offset}, count={self.count}, error={self._error})")


cdef BatchDelivery new_report(str topic, int32_t partition, int64_t offset, Py_ssize_t count,
                              error):
    cdef BatchDelivery r = BatchDelivery.__new__(BatchDelivery)
    r._topic = topic
    r._partition = partition
    r._offset = offset
    r.count = count
    r._error = error
    return r


def report_runs(ProducerBatch batch not None, Py_ssize_t start, Py_ssize_t end, bint placed,
                error, callback):
    """One ``callback(error, BatchDelivery)`` per run of records start..end-1 of a batch
    packed with runs of offsets (each run a Kafka batch); ``placed``: the broker took them
    (offsets known), else every offset is -1. Returns how many callbacks ran."""
    cdef Py_ssize_t run_first = 0, lo, hi, count, served = 0, i
    cdef int64_t base
    for i in range(batch.run_list.size):
        count = batch.run_list.items[i].count
        lo = start if start > run_first else run_first
        hi = end if end < run_first + count else run_first + count
        if lo < hi:
            base = batch.run_list.items[i].base_offset
            callback(error, new_report(batch.topic, batch.partition,
                                       base + lo - run_first if placed else -1, hi - lo, error))
            served += 1
        run_first += count
    return served


# ---- per-record produce(offset=) / produce(expected_offset=) (issue 15) -----------------------
# kipproducer.Producer.produce: the common KIP call (offset= or expected_offset=, an explicit
# partition, keywords only, a producer whose configuration allows it, its engine running and
# the topic already on the engine's lane) is appended here with no Python frame; every other
# call, and every call that must raise, goes to the Python implementation
# (Producer._produce_general), which keeps each rule and error. A plain produce() of a producer
# whose engine is not in use goes straight to confluent-kafka's produce().

cdef object _general_produce = None   # Producer._produce_general
cdef object _librdkafka_produce = None  # confluent_kafka.Producer.produce
cdef object _engine_lane = None       # producer.ENGINE
cdef frozenset _produce_keywords = frozenset()
# The Producer's `_kip_state` slot (a member descriptor): produce() gets each producer's
# ProduceState through it, by reference, not by looking a name up per call.
cdef object _state_slot = None

ctypedef object (*KeywordsFunction)(object self, object args, object kwargs)

cdef extern from "Python.h":
    ctypedef struct PyMethodDef:
        void *ml_meth
        int ml_flags
    ctypedef struct PyMethodDescrObject:
        PyMethodDef *d_method
    int METH_VARARGS
    int METH_KEYWORDS
    PyTypeObject PyMethodDescr_Type

# confluent-kafka's produce() as the C function behind its method descriptor, when it is a
# METH_VARARGS | METH_KEYWORDS one (it is: it parses a tuple and a dict). Called with our own
# tuple and keyword dict; through the descriptor, Cython's **kwargs call copied the dict and
# turned it into vectorcall keywords, which the descriptor then turned back into a dict (330 ns
# of a 1 us produce() measured).
cdef KeywordsFunction _librdkafka_produce_c = NULL
cdef type _librdkafka_class = None     # the class that function takes as self


cdef extern from *:
    """
    /* The value of a data descriptor (here a __slots__ member) on obj, as obj.name would
       give it, without the name: the descriptor's own tp_descr_get. */
    static PyObject *kip_descriptor_get(PyObject *descriptor, PyObject *obj) {
        return Py_TYPE(descriptor)->tp_descr_get(descriptor, obj, (PyObject *)Py_TYPE(obj));
    }
    """
    object kip_descriptor_get(object descriptor, object obj)


def configure_produce(general, librdkafka_produce, engine_lane, keywords, state_slot=None):
    """Wire the C produce() to the Python layer (kipproducer.producer does this once).
    ``state_slot``: the member descriptor of the Producer's ``__slots__`` entry that holds
    its ProduceState (None keeps the one given before)."""
    global _general_produce, _librdkafka_produce, _engine_lane, _produce_keywords
    global _librdkafka_produce_c, _librdkafka_class, _state_slot
    cdef PyMethodDef *method
    if state_slot is not None:
        import types
        if not isinstance(state_slot, types.MemberDescriptorType):
            raise TypeError(f"state_slot must be a __slots__ member descriptor, "
                            f"not {type(state_slot).__name__}")
        _state_slot = state_slot
    elif _state_slot is None:
        raise TypeError("configure_produce() needs state_slot the first time")
    _general_produce = general
    _librdkafka_produce = librdkafka_produce
    _engine_lane = engine_lane
    _produce_keywords = frozenset(keywords)
    _librdkafka_produce_c = NULL
    _librdkafka_class = None
    if type(librdkafka_produce) is <object>&PyMethodDescr_Type:
        method = (<PyMethodDescrObject *><PyObject *>librdkafka_produce).d_method
        if method.ml_flags == METH_VARARGS | METH_KEYWORDS:
            _librdkafka_produce_c = <KeywordsFunction>method.ml_meth
            _librdkafka_class = librdkafka_produce.__objclass__


cdef inline object librdkafka_produce(self, topic, value, key, dict kwargs):
    """confluent-kafka's produce(self, topic, value, key, **kwargs)."""
    if _librdkafka_produce_c != NULL and isinstance(self, _librdkafka_class):
        return _librdkafka_produce_c(self, (topic, value, key), kwargs)
    return _librdkafka_produce(self, topic, value, key, **kwargs)


cdef class EngineState:
    # (fields: kipproducer/_accumulator.pxd)
    def __cinit__(self, RecordAccumulator acc not None, lock, reports_cv,
                  Py_ssize_t message_max_bytes, wake, fail_held):
        self.acc = acc
        self.lock = lock
        self.reports_cv = reports_cv
        self.message_max_bytes = message_max_bytes
        self.wake = wake
        self.fail_held = fail_held
        self.outstanding = 0
        self.dead = False
        self.sender_idle = True
        self.idle_closed = -1
        self.idle_until_ms = 0


cdef class ReportTarget:
    # (fields: kipproducer/_accumulator.pxd)
    def __init__(self, callback, bint per_record):
        self.callback = callback
        self.per_record = per_record


cdef bint batch_reports_need_bytes(ProducerBatch batch):
    """Whether the batch's delivery reports decode its records (per-record reports to a
    callback) or may (an opaque this module does not know)."""
    cdef ReportTarget report_target
    if batch.opaque_runs is None:
        return False  # reported per batch, through the producer's default callback
    for _, target in batch.opaque_runs:
        if target is None:
            continue
        if type(target) is not ReportTarget:
            return True
        report_target = <ReportTarget>target
        if report_target.per_record and report_target.callback is not None:
            return True
    return False


cdef class ProduceState:
    # (fields: kipproducer/_accumulator.pxd)
    def __cinit__(self):
        self.lanes = {}

    def use_engine(self, engine, EngineState sender):
        """The producer's engine (None: none) and that engine's EngineState, together."""
        if (engine is None) != (sender is None):
            raise ValueError("an engine and its EngineState are given together")
        self.engine = engine
        self.sender = sender


# The C-typed fields of the boundary are read and written in these nogil functions: there
# Cython refuses, at compile time, a name that is not a field declared in the .pxd (with the
# GIL it would compile a Python attribute lookup instead, which fails only when it runs).
# Called with the GIL held, they release nothing and inline to plain struct accesses.

cdef inline bint sender_is_dead(EngineState shared) noexcept nogil:
    return shared.dead


cdef inline Py_ssize_t max_message_bytes(EngineState shared) noexcept nogil:
    return shared.message_max_bytes


cdef inline void add_outstanding(EngineState shared, Py_ssize_t count) noexcept nogil:
    shared.outstanding += count


cdef inline bint sender_needs_waking(EngineState shared, RecordAccumulator acc) noexcept nogil:
    return shared.sender_idle and not (
        acc.closed_batches == shared.idle_closed
        and shared.idle_until_ms + 2 <= clock_ms(CLOCK_MONOTONIC) + acc.linger_ms)


cdef inline bint offsets_direct(ProduceState state) noexcept nogil:
    return state.kip_direct


cdef bint appended_c(EngineState shared, Py_ssize_t count) except -1:
    """note_appended's rule (see there)."""
    cdef RecordAccumulator acc = <RecordAccumulator>shared.acc  # typed in EngineState()
    cv = shared.reports_cv
    cv.acquire()   # (a Condition's acquire/release are its lock's own, no Python frame)
    try:
        add_outstanding(shared, count)
    finally:
        cv.release()
    if sender_is_dead(shared):
        return True
    if sender_needs_waking(shared, acc):
        shared.wake()
    return False


def note_appended(EngineState shared not None, Py_ssize_t count):
    """Engine.appended's rule (one home, in C for produce()'s per-record path): count the
    records as outstanding, and wake the sender unless it sleeps and its alarm rings no later
    than a batch opened now would be ready with nothing closed since it went to sleep (waking
    it, a self-pipe write and a round of its loop per record of a produce() loop, gains
    nothing). Returns True when the engine has died: the caller fails what it holds."""
    return appended_c(shared, count)


cdef inline Py_ssize_t length_or_zero(object field) except -1:
    return 0 if field is None else len(field)


def produce(self, topic, value=None, key=None, *args, **kwargs):
    """confluent-kafka's produce(topic, [value], [key], [partition], [on_delivery],
    [timestamp], [headers]) plus offset= (KIP-391) and expected_offset= (KIP-27); see
    kipproducer.producer."""
    cdef RecordAccumulator acc
    cdef ProduceState state
    cdef EngineState sender
    cdef list lane
    if _state_slot is None:
        raise TypeError("kipproducer._accumulator.produce is not configured")
    state = <ProduceState?>kip_descriptor_get(_state_slot, self)
    if args or state.group is not None:
        return _general_produce(self, topic, value, key, *args, **kwargs)
    offset = kwargs.get("offset")
    expected = kwargs.get("expected_offset")
    sender = state.sender
    if offset is None and expected is None:
        if (sender is None and state.txn is None and "offset" not in kwargs
                and "expected_offset" not in kwargs and "expected_key_offset" not in kwargs):
            return librdkafka_produce(self, topic, value, key, kwargs)
        return _general_produce(self, topic, value, key, **kwargs)
    partition = kwargs.get("partition", -1)
    if (offset is not None and expected is not None) or type(partition) is not int \
            or partition < 0 or not offsets_direct(state) or type(topic) is not str \
            or sender is None or sender_is_dead(sender):
        return _general_produce(self, topic, value, key, **kwargs)
    for name in kwargs:
        if name not in _produce_keywords:
            return _general_produce(self, topic, value, key, **kwargs)
    acc = <RecordAccumulator>sender.acc  # typed in EngineState()
    if length_or_zero(value) + length_or_zero(key) > max_message_bytes(sender):
        return _general_produce(self, topic, value, key, **kwargs)
    lane = state.lanes.get(topic)
    if lane is None or lane[0] != _engine_lane:
        return _general_produce(self, topic, value, key, **kwargs)
    user = kwargs.get("on_delivery") or kwargs.get("callback") or state.default_on_delivery
    target = state.last_target
    if target is None or (target.callback is not user and target.callback != user):
        # (== too: a bound method is a new object at every call) Records with the same target
        # share a run in their batch.
        target = ReportTarget(user, True)
        state.last_target = target
    lock = sender.lock
    lock.acquire()
    try:
        acc._append_one(topic, partition, key, value, kwargs.get("headers"),
                        kwargs.get("timestamp") or None, offset, target, expected)
    finally:
        lock.release()
    lane[1] += 1
    if appended_c(sender, 1):
        sender.fail_held()  # the engine died meanwhile: it fails what it holds
