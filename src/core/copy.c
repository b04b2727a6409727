/*
 * copy.c -- the vector loop of xc__copy (copy.h): the destination
 * aligned to its 64-byte line first, then whole lines of unaligned loads
 * and aligned stores, AVX2 where the CPU has it, SSE2 otherwise (every
 * x86-64); other architectures keep memcpy.
 */
#include "copy.h"

#if defined(__x86_64__)
#include <immintrin.h>

__attribute__((target("avx2"))) static void loop_avx2(char *d, const char *s, size_t n)
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
    if (i < n) memcpy(d + i, s + i, n - i);
}

static void loop_sse2(char *d, const char *s, size_t n)
{
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(s + i));
        __m128i b = _mm_loadu_si128((const __m128i *)(s + i + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(s + i + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(s + i + 48));
        _mm_store_si128((__m128i *)(d + i), a);
        _mm_store_si128((__m128i *)(d + i + 16), b);
        _mm_store_si128((__m128i *)(d + i + 32), c);
        _mm_store_si128((__m128i *)(d + i + 48), e);
    }
    if (i < n) memcpy(d + i, s + i, n - i);
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
    size_t head = (size_t)(-(uintptr_t)d & 63); /* n >= XC__COPY_LOOP_MIN > 63 */
    memcpy(d, s, head);
    if (k == 1) loop_avx2(d + head, s + head, n - head);
    else loop_sse2(d + head, s + head, n - head);
}
#else
void xc__copy_loop(void *dst, const void *src, size_t n) { memcpy(dst, src, n); }
#endif

