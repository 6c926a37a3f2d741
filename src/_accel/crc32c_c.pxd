# C-level boundary of the CRC-32C implementation in crc32c_impl.c.
from libc.stdint cimport uint32_t

cdef extern from "crc32c_impl.h" nogil:
    uint32_t kip_crc32c(uint32_t crc, const void *buf, size_t length)
    uint32_t kip_crc32c_sw(uint32_t crc, const void *buf, size_t length)
    uint32_t kip_crc32c_hw(uint32_t crc, const void *buf, size_t length)
    int kip_crc32c_hw_available()
    uint32_t kip_crc32c_combine(uint32_t crc_a, uint32_t crc_b, size_t len_b)
    const char *kip_crc32c_impl_name()
