/*
 * copy.c -- the vector loops of xc__copy and xc__copy_nt (copy.h): the
 * destination's head up to its 64-byte line copied first, then whole
 * lines of unaligned loads and aligned stores -- AVX2 where the CPU has
 * it, SSE2 otherwise (every x86-64), non-temporal SSE2 stores for
 * xc__copy_nt -- and the tail; other architectures keep memcpy.
 */
#include "copy.h"

#if defined(__x86_64__)
#include <immintrin.h>

/* Bytes up to `d`'s next line boundary, at most n. */
static size_t head_of(const char *d, size_t n)
{
    size_t head = (size_t)(-(uintptr_t)d & 63);
    return head < n ? head : n;
}

__attribute__((target("avx2"))) static void lines_avx2(char *d, const char *s, size_t n)
{
    size_t i = 0;
    for (; i + 128 <= n; i += 128) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(s + i));
        __m256i b = _mm256_loadu_si256((const __m256i *)(s + i + 32));
        __m256i c = _mm256_loadu_si256((const __m256i *)(s + i + 64));
        __m256i e = _mm256_loadu_si256((const __m256i *)(s + i + 96));
        _mm256_store_si256((__m256i *)(d + i), a);
        _mm256_store_si256((__m256i *)(d + i + 32), b);
        _mm256_store_si256((__m256i *)(d + i + 64), c);
        _mm256_store_si256((__m256i *)(d + i + 96), e);
    }
    memcpy(d + i, s + i, n - i);
}

/* Whole lines with ordinary or (nt) non-temporal stores, then the tail. */
static inline void put16(char *p, __m128i v, int nt)
{
    if (nt) _mm_stream_si128((__m128i *)p, v);
    else _mm_store_si128((__m128i *)p, v);
}
static void lines_sse2(char *d, const char *s, size_t n, int nt)
{
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(s + i));
        __m128i b = _mm_loadu_si128((const __m128i *)(s + i + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(s + i + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(s + i + 48));
        put16(d + i, a, nt);
        put16(d + i + 16, b, nt);
        put16(d + i + 32, c, nt);
        put16(d + i + 48, e, nt);
    }
    memcpy(d + i, s + i, n - i);
}

void xc__copy_loop(void *dst, const void *src, size_t n)
{
    /* 1: AVX2, 2: SSE2 only; 0 until asked (idempotent: a race writes
     * the same value). */
    static int kind;
    int k = __atomic_load_n(&kind, __ATOMIC_RELAXED);
    if (!k) {
        __builtin_cpu_init();
        k = __builtin_cpu_supports("avx2") ? 1 : 2;
        __atomic_store_n(&kind, k, __ATOMIC_RELAXED);
    }
    char *d = dst;
    const char *s = src;
    size_t head = head_of(d, n);
    memcpy(d, s, head);
    if (k == 1) lines_avx2(d + head, s + head, n - head);
    else lines_sse2(d + head, s + head, n - head, 0);
}

void xc__copy_nt(void *dst, const void *src, size_t n)
{
    char *d = dst;
    const char *s = src;
    size_t head = head_of(d, n);
    memcpy(d, s, head);
    lines_sse2(d + head, s + head, n - head, 1);
    _mm_sfence();
}
#else
void xc__copy_loop(void *dst, const void *src, size_t n) { memcpy(dst, src, n); }
void xc__copy_nt(void *dst, const void *src, size_t n) { memcpy(dst, src, n); }
#endif
