/* CRC-32C for Kafka record batches: see crc32c_impl.h for the contract.
 *
 * Why three streams: the crc32 instruction has a latency of about 3 cycles but a throughput of
 * one per cycle. One dependent chain therefore runs at a third of the possible speed. Splitting a
 * block into three equal parts, running three independent chains and then joining them gives the
 * full rate. Joining uses linearity of the raw (non-inverted) CRC register:
 *     raw(A || B, r) = zeros(raw(A, r), |B|) ^ raw(B, 0)
 * where zeros(r, n) is the register after n zero bytes. zeros() for a fixed n is linear in r, so it
 * is four 256-entry table lookups, built once from the 32 single-bit images.
 */
#include "crc32c_impl.h"

#include <string.h>

#define POLY_REFLECTED 0x82F63B78u

/* Block lengths for the three-stream loop: LONG amortises the join for large buffers, SHORT keeps
 * the interleave for the ~16 KiB batches Kafka producers send most. */
#define LONG_BLOCK 2048
#define SHORT_BLOCK 256

static uint32_t sw_table[8][256];
static uint32_t zeros_long[4][256];
static uint32_t zeros_short[4][256];
static int tables_ready = 0;

static uint32_t raw_zeros_slow(uint32_t reg, size_t n) {
    while (n--) reg = (reg >> 8) ^ sw_table[0][reg & 0xff];
    return reg;
}

static void build_zeros_table(uint32_t table[4][256], size_t n) {
    uint32_t bit_image[32];
    for (int i = 0; i < 32; i++) bit_image[i] = raw_zeros_slow((uint32_t)1 << i, n);
    for (int k = 0; k < 4; k++) {
        for (int b = 0; b < 256; b++) {
            uint32_t v = 0;
            for (int j = 0; j < 8; j++)
                if (b & (1 << j)) v ^= bit_image[8 * k + j];
            table[k][b] = v;
        }
    }
}

static void build_tables(void) {
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t c = b;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ POLY_REFLECTED : c >> 1;
        sw_table[0][b] = c;
    }
    for (int b = 0; b < 256; b++) {
        for (int k = 1; k < 8; k++) {
            uint32_t prev = sw_table[k - 1][b];
            sw_table[k][b] = (prev >> 8) ^ sw_table[0][prev & 0xff];
        }
    }
    build_zeros_table(zeros_long, LONG_BLOCK);
    build_zeros_table(zeros_short, SHORT_BLOCK);
    tables_ready = 1;
}

static inline void ensure_tables(void) {
    /* Racing first callers compute identical tables; the flag is set only after they exist. */
    if (!tables_ready) build_tables();
}

static inline uint32_t apply_zeros(uint32_t table[4][256], uint32_t reg) {
    return table[0][reg & 0xff] ^ table[1][(reg >> 8) & 0xff] ^ table[2][(reg >> 16) & 0xff] ^
           table[3][reg >> 24];
}

static inline uint64_t load_le64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

uint32_t kip_crc32c_sw(uint32_t crc, const void *buf, size_t len) {
    const unsigned char *p = (const unsigned char *)buf;
    uint32_t reg = ~crc;
    ensure_tables();
    while (len >= 8) {
        uint64_t w = load_le64(p) ^ reg;
        reg = sw_table[7][w & 0xff] ^ sw_table[6][(w >> 8) & 0xff] ^
              sw_table[5][(w >> 16) & 0xff] ^ sw_table[4][(w >> 24) & 0xff] ^
              sw_table[3][(w >> 32) & 0xff] ^ sw_table[2][(w >> 40) & 0xff] ^
              sw_table[1][(w >> 48) & 0xff] ^ sw_table[0][w >> 56];
        p += 8;
        len -= 8;
    }
    while (len--) reg = (reg >> 8) ^ sw_table[0][(reg ^ *p++) & 0xff];
    return ~reg;
}

/* ---- hardware paths ---------------------------------------------------------------------- */

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define KIP_HW_X86 1
#include <nmmintrin.h>
#define HW_TARGET __attribute__((target("sse4.2")))
#define HW_CRC8(r, v) _mm_crc32_u8((uint32_t)(r), (v))
#if defined(__x86_64__)
#define HW_CRC64(r, v) _mm_crc32_u64((r), (v))
#else
#define HW_CRC64(r, v) \
    _mm_crc32_u32(_mm_crc32_u32((uint32_t)(r), (uint32_t)(v)), (uint32_t)((v) >> 32))
#endif
#elif defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))
#define KIP_HW_ARM 1
#include <arm_acle.h>
#if defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_CRC32
#define HWCAP_CRC32 (1 << 7)
#endif
#endif
#define HW_TARGET __attribute__((target("+crc")))
#define HW_CRC8(r, v) __crc32cb((uint32_t)(r), (v))
#define HW_CRC64(r, v) __crc32cd((uint32_t)(r), (v))
#endif

#if defined(KIP_HW_X86) || defined(KIP_HW_ARM)

/* Three chains over [p, p+3*block): returns the joined raw register. */
#define THREE_STREAMS(block, table)                                                  \
    while (len >= 3 * (size_t)(block)) {                                             \
        uint64_t c1 = 0, c2 = 0;                                                     \
        const unsigned char *end = p + (block);                                      \
        do {                                                                         \
            c0 = HW_CRC64(c0, load_le64(p));                                         \
            c1 = HW_CRC64(c1, load_le64(p + (block)));                               \
            c2 = HW_CRC64(c2, load_le64(p + 2 * (block)));                           \
            p += 8;                                                                  \
        } while (p < end);                                                           \
        c0 = apply_zeros(table, (uint32_t)c0) ^ (uint32_t)c1;                        \
        c0 = apply_zeros(table, (uint32_t)c0) ^ (uint32_t)c2;                        \
        p += 2 * (block);                                                            \
        len -= 3 * (size_t)(block);                                                  \
    }

HW_TARGET uint32_t kip_crc32c_hw(uint32_t crc, const void *buf, size_t len) {
    const unsigned char *p = (const unsigned char *)buf;
    uint64_t c0 = (uint32_t)~crc;
    ensure_tables();
    while (len && ((uintptr_t)p & 7)) {
        c0 = HW_CRC8(c0, *p++);
        len--;
    }
    THREE_STREAMS(LONG_BLOCK, zeros_long)
    THREE_STREAMS(SHORT_BLOCK, zeros_short)
    while (len >= 8) {
        c0 = HW_CRC64(c0, load_le64(p));
        p += 8;
        len -= 8;
    }
    while (len--) c0 = HW_CRC8(c0, *p++);
    return ~(uint32_t)c0;
}

int kip_crc32c_hw_available(void) {
#if defined(KIP_HW_X86)
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2") ? 1 : 0;
#elif defined(__APPLE__)
    return 1; /* every Apple arm64 CPU has the CRC extension */
#elif defined(__linux__)
    return (getauxval(AT_HWCAP) & HWCAP_CRC32) ? 1 : 0;
#else
    return 0;
#endif
}

#else

uint32_t kip_crc32c_hw(uint32_t crc, const void *buf, size_t len) {
    return kip_crc32c_sw(crc, buf, len);
}
int kip_crc32c_hw_available(void) { return 0; }

#endif

/* ---- combining ---------------------------------------------------------------------------
 * crc(A || B) = (crc(A) * x^(8|B|)) mod P  ^  crc(B), in the reflected bit order. Multiplying by
 * x^(8n) costs one GF(2) multiply per set bit of n, using the powers x^(2^k) mod P, so a batch's
 * CRC can be finished from its records' CRC (computed while the records were hot in cache) and
 * the 40 header bytes written later, without reading the records again.
 */
static uint32_t x_pow_2k[64]; /* x^(2^k) mod P */
static int powers_ready = 0;

static uint32_t gf2_multiply(uint32_t a, uint32_t b) {
    uint32_t product = 0;
    uint32_t bit = (uint32_t)1 << 31; /* x^0 in reflected order */
    while (bit) {
        if (a & bit) product ^= b;
        bit >>= 1;
        b = (b & 1) ? (b >> 1) ^ POLY_REFLECTED : b >> 1; /* b *= x */
    }
    return product;
}

static void build_powers(void) {
    uint32_t p = (uint32_t)1 << 30; /* x^1 */
    for (int k = 0; k < 64; k++) {
        x_pow_2k[k] = p;
        p = gf2_multiply(p, p);
    }
    powers_ready = 1;
}

uint32_t kip_crc32c_combine(uint32_t crc_a, uint32_t crc_b, size_t len_b) {
    uint32_t factor = (uint32_t)1 << 31; /* x^0 */
    uint64_t n = (uint64_t)len_b * 8;
    int k = 0;
    if (!powers_ready) build_powers();
    while (n) {
        if (n & 1) factor = gf2_multiply(factor, x_pow_2k[k]);
        n >>= 1;
        k++;
    }
    return gf2_multiply(factor, crc_a) ^ crc_b;
}

static int chosen = -1; /* -1 unknown, 0 software, 1 hardware */

static inline int choose(void) {
    if (chosen < 0) {
        ensure_tables();
        chosen = kip_crc32c_hw_available();
    }
    return chosen;
}

uint32_t kip_crc32c(uint32_t crc, const void *buf, size_t len) {
    return choose() ? kip_crc32c_hw(crc, buf, len) : kip_crc32c_sw(crc, buf, len);
}

const char *kip_crc32c_impl_name(void) {
#if defined(KIP_HW_X86)
    return choose() ? "sse4.2" : "software";
#elif defined(KIP_HW_ARM)
    return choose() ? "armv8-crc" : "software";
#else
    (void)choose();
    return "software";
#endif
}
