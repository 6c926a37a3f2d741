/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as Kafka's RecordBatch v2 uses it.
 *
 * Three implementations share one result:
 *   - the CPU's crc32 instruction (x86 SSE4.2, or ARMv8 CRC extension), three streams interleaved
 *     so the instruction's latency is hidden, joined with a table-driven "append zeros" operator;
 *   - a portable slicing-by-8 table fallback.
 * kip_crc32c() picks the fastest one the running CPU has, once.
 *
 * All functions take and return the finished CRC (pre/post inversion included), so a CRC can be
 * continued: kip_crc32c(kip_crc32c(0, a, n), b, m) == kip_crc32c(0, ab, n + m).
 */
#ifndef KIP_CRC32C_IMPL_H
#define KIP_CRC32C_IMPL_H

#include <stddef.h>
#include <stdint.h>

uint32_t kip_crc32c(uint32_t crc, const void *buf, size_t len);
uint32_t kip_crc32c_sw(uint32_t crc, const void *buf, size_t len);
/* Hardware path; only valid when kip_crc32c_hw_available() returns 1. */
uint32_t kip_crc32c_hw(uint32_t crc, const void *buf, size_t len);
int kip_crc32c_hw_available(void);
/* CRC of A || B from crc(A), crc(B) and the length of B, without reading the data. */
uint32_t kip_crc32c_combine(uint32_t crc_a, uint32_t crc_b, size_t len_b);
/* Human-readable name of the implementation kip_crc32c() uses. */
const char *kip_crc32c_impl_name(void);

#endif
