# Finishing a RecordBatch: header fields, optional compression of the records section, CRC.
# Shared by encode_batch (records.pyx) and the accumulator (accumulator.pyx).
from cpython.buffer cimport PyBUF_READ
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.memoryview cimport PyMemoryView_FromMemory
from libc.stdint cimport int16_t, int32_t, int64_t, uint32_t
from libc.string cimport memcpy

from batch_layout cimport (
    ATTRIBUTES_POS, BASE_OFFSET_POS, BASE_SEQUENCE_POS, BASE_TIMESTAMP_POS, BATCH_HEADER_SIZE,
    BATCH_LENGTH_POS, CRC_POS, LAST_OFFSET_DELTA_POS, LOG_OVERHEAD, MAGIC_POS, MAGIC_V2,
    MAX_TIMESTAMP_POS, PARTITION_LEADER_EPOCH_POS, PRODUCER_EPOCH_POS, PRODUCER_ID_POS,
    RECORDS_COUNT_POS, put_i16, put_i32, put_i64, put_u32,
)
from crc32c_c cimport kip_crc32c, kip_crc32c_combine


cdef struct BatchFields:
    int64_t base_offset
    int32_t partition_leader_epoch
    int16_t attributes
    int32_t last_offset_delta
    int64_t base_timestamp
    int64_t max_timestamp
    int64_t producer_id
    int16_t producer_epoch
    int32_t base_sequence
    int32_t records_count


cdef inline void write_batch_fields(
        unsigned char *p, BatchFields *f, Py_ssize_t total_size) noexcept nogil:
    """Every header field of a batch of total_size bytes except the CRC."""
    put_i64(p + BASE_OFFSET_POS, f.base_offset)
    put_i32(p + BATCH_LENGTH_POS, <int32_t>(total_size - LOG_OVERHEAD))
    put_i32(p + PARTITION_LEADER_EPOCH_POS, f.partition_leader_epoch)
    p[MAGIC_POS] = MAGIC_V2
    put_i16(p + ATTRIBUTES_POS, f.attributes)
    put_i32(p + LAST_OFFSET_DELTA_POS, f.last_offset_delta)
    put_i64(p + BASE_TIMESTAMP_POS, f.base_timestamp)
    put_i64(p + MAX_TIMESTAMP_POS, f.max_timestamp)
    put_i64(p + PRODUCER_ID_POS, f.producer_id)
    put_i16(p + PRODUCER_EPOCH_POS, f.producer_epoch)
    put_i32(p + BASE_SEQUENCE_POS, f.base_sequence)
    put_i32(p + RECORDS_COUNT_POS, f.records_count)


cdef inline void write_batch_header(
        unsigned char *p, BatchFields *f, Py_ssize_t total_size) noexcept nogil:
    """Fill the 61-byte header of a batch of total_size bytes whose records are in place."""
    write_batch_fields(p, f, total_size)
    # The CRC covers attributes..end, so it goes last.
    put_u32(p + CRC_POS, kip_crc32c(0, p + ATTRIBUTES_POS, total_size - ATTRIBUTES_POS))


cdef inline void write_batch_header_known_records_crc(
        unsigned char *p, BatchFields *f, Py_ssize_t total_size,
        uint32_t records_crc) noexcept nogil:
    """As write_batch_header, reusing the CRC of the records section computed earlier."""
    write_batch_fields(p, f, total_size)
    put_u32(p + CRC_POS, kip_crc32c_combine(
        kip_crc32c(0, p + ATTRIBUTES_POS, BATCH_HEADER_SIZE - ATTRIBUTES_POS),
        records_crc, total_size - BATCH_HEADER_SIZE))


cdef inline bytes build_batch(
        BatchFields *f, const unsigned char *records, Py_ssize_t records_size, int codec,
        object compress):
    """A finished batch as bytes; compress(codec, buffer) -> bytes is called when codec != 0."""
    cdef bytes payload
    cdef bytes out
    cdef unsigned char *p
    if codec:
        payload = compress(codec, PyMemoryView_FromMemory(<char *>records, records_size, PyBUF_READ))
        records = <const unsigned char *>PyBytes_AS_STRING(payload)
        records_size = PyBytes_GET_SIZE(payload)
    if BATCH_HEADER_SIZE + records_size > 0x7FFFFFFF:
        raise OverflowError("a record batch cannot exceed 2 GiB")
    out = PyBytes_FromStringAndSize(NULL, BATCH_HEADER_SIZE + records_size)
    p = <unsigned char *>PyBytes_AS_STRING(out)
    memcpy(p + BATCH_HEADER_SIZE, records, records_size)
    write_batch_header(p, f, BATCH_HEADER_SIZE + records_size)
    return out
