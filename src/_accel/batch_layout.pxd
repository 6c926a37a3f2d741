# RecordBatch v2 (magic 2): the on-wire and on-disk layout, spelled out once.
#
#   offset  size  field
#   0       8     baseOffset            int64   (outside the CRC: brokers rewrite it)
#   8       4     batchLength           int32   bytes after this field
#   12      4     partitionLeaderEpoch  int32   (outside the CRC)
#   16      1     magic                 int8    = 2
#   17      4     crc                   uint32  CRC-32C of bytes [21, end)
#   21      2     attributes            int16
#   23      4     lastOffsetDelta       int32
#   27      8     baseTimestamp         int64
#   35      8     maxTimestamp          int64
#   43      8     producerId            int64
#   51      2     producerEpoch         int16
#   53      4     baseSequence          int32
#   57      4     recordsCount          int32
#   61      ...   records (compressed as one block when attributes say so)
#
# All integers are big-endian.
from libc.stdint cimport int16_t, int32_t, int64_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy

cdef enum:
    BASE_OFFSET_POS = 0
    BATCH_LENGTH_POS = 8
    PARTITION_LEADER_EPOCH_POS = 12
    MAGIC_POS = 16
    CRC_POS = 17
    ATTRIBUTES_POS = 21
    LAST_OFFSET_DELTA_POS = 23
    BASE_TIMESTAMP_POS = 27
    MAX_TIMESTAMP_POS = 35
    PRODUCER_ID_POS = 43
    PRODUCER_EPOCH_POS = 51
    BASE_SEQUENCE_POS = 53
    RECORDS_COUNT_POS = 57
    RECORDS_POS = 61
    BATCH_HEADER_SIZE = 61
    # batchLength counts from the byte after itself.
    LOG_OVERHEAD = 12
    MAGIC_V2 = 2

    # attributes bits
    COMPRESSION_MASK = 0x07
    TIMESTAMP_TYPE_MASK = 0x08
    TRANSACTIONAL_FLAG = 0x10
    CONTROL_FLAG = 0x20
    DELETE_HORIZON_FLAG = 0x40

    # compression codec ids in attributes bits 0-2
    CODEC_NONE = 0
    CODEC_GZIP = 1
    CODEC_SNAPPY = 2
    CODEC_LZ4 = 3
    CODEC_ZSTD = 4

    # Largest per-record framing: length varint (5) + attributes (1) + timestamp delta (10)
    # + offset delta (5) = 21, Kafka's MAX_RECORD_OVERHEAD before key/value/headers.
    MAX_RECORD_OVERHEAD = 21

cdef extern from *:
    """
    static inline uint16_t kip_bswap16(uint16_t v) {
    #if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        return v;
    #else
        return (uint16_t)((v >> 8) | (v << 8));
    #endif
    }
    static inline uint32_t kip_bswap32(uint32_t v) {
    #if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        return v;
    #else
        return __builtin_bswap32(v);
    #endif
    }
    static inline uint64_t kip_bswap64(uint64_t v) {
    #if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        return v;
    #else
        return __builtin_bswap64(v);
    #endif
    }
    """
    uint16_t kip_bswap16(uint16_t v) nogil
    uint32_t kip_bswap32(uint32_t v) nogil
    uint64_t kip_bswap64(uint64_t v) nogil


cdef inline void put_i16(unsigned char *p, int16_t v) noexcept nogil:
    cdef uint16_t u = kip_bswap16(<uint16_t>v)
    memcpy(p, &u, 2)

cdef inline void put_i32(unsigned char *p, int32_t v) noexcept nogil:
    cdef uint32_t u = kip_bswap32(<uint32_t>v)
    memcpy(p, &u, 4)

cdef inline void put_u32(unsigned char *p, uint32_t v) noexcept nogil:
    cdef uint32_t u = kip_bswap32(v)
    memcpy(p, &u, 4)

cdef inline void put_i64(unsigned char *p, int64_t v) noexcept nogil:
    cdef uint64_t u = kip_bswap64(<uint64_t>v)
    memcpy(p, &u, 8)

cdef inline int16_t get_i16(const unsigned char *p) noexcept nogil:
    cdef uint16_t u
    memcpy(&u, p, 2)
    return <int16_t>kip_bswap16(u)

cdef inline int32_t get_i32(const unsigned char *p) noexcept nogil:
    cdef uint32_t u
    memcpy(&u, p, 4)
    return <int32_t>kip_bswap32(u)

cdef inline uint32_t get_u32(const unsigned char *p) noexcept nogil:
    cdef uint32_t u
    memcpy(&u, p, 4)
    return kip_bswap32(u)

cdef inline int64_t get_i64(const unsigned char *p) noexcept nogil:
    cdef uint64_t u
    memcpy(&u, p, 8)
    return <int64_t>kip_bswap64(u)

# Kafka's sequence arithmetic: sequences wrap from 2^31-1 to 0 (DefaultRecordBatch.incrementSequence).
cdef inline int32_t increment_sequence(int32_t seq, int32_t increment) noexcept nogil:
    if seq > 0x7FFFFFFF - increment:
        return increment - (0x7FFFFFFF - seq) - 1
    return seq + increment
