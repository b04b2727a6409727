/*
 * crc32c.c -- CRC-32C (Castagnoli), the checksum of checkpoint shards:
 * the SSE4.2 instruction when the CPU has it (~20 GB/s, so a checksum
 * costs far less than the write it protects), a table otherwise.
 */
#include "ckpt.h"

#include <string.h>

static uint32_t table[256];
static int have_hw = -1;

static void init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        table[i] = c;
    }
    __builtin_cpu_init();
    have_hw = __builtin_cpu_supports("sse4.2");
}

__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t c, const unsigned char *p,
                                                          size_t n)
{
    uint64_t c64 = c;
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c64 = __builtin_ia32_crc32di(c64, w);
    }
    c = (uint32_t)c64;
    for (; n; n--) c = __builtin_ia32_crc32qi(c, *p++);
    return c;
}

uint32_t xc__crc32c(uint32_t crc, const void *data, size_t n)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, init);
    const unsigned char *p = data;
    uint32_t c = ~crc;
    if (have_hw) {
        c = crc_hw(c, p, n);
    } else {
        for (size_t i = 0; i < n; i++) c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
    }
    return ~c;
}
