/*
 * half.c -- conversions between fp32 and the two 16-bit float formats,
 * IEEE binary16 ("fp16") and bfloat16 ("bf16").
 *
 * Invariants:
 *  - narrowing rounds to nearest, ties to even, including into and within
 *    the fp16 subnormal range; values too large for the format become
 *    infinity of the same sign;
 *  - widening is exact (every fp16 and bf16 value is an fp32 value);
 *  - a NaN stays a NaN and comes out quiet, with its sign and as many of
 *    its top payload bits as the destination holds;
 *  - the code is branch-free per element (selects, not jumps), so the
 *    block converters below auto-vectorise with plain SSE2.  They are the
 *    scalar level's converters and the reference of the SIMD ones
 *    (reduce_avx2.c, reduce_avx512.c); xc__*_n in dispatch.c picks one.
 * The fp16 narrowing of fp32 subnormal-range values uses one fp32 addition,
 * so it assumes the default round-to-nearest mode (the float kernels
 * assume it too).  It gives the same result when the CPU flushes
 * denormals (FTZ/DAZ): fp32 denormals are far below half the smallest fp16
 * subnormal and round to zero either way.
 */
#if defined(__GNUC__) && !defined(__clang__) && defined(__OPTIMIZE__) &&     \
    !defined(__OPTIMIZE_SIZE__)
/* gcc 12 at plain -O2 does not vectorise these loops (measured); ask for
 * its loop vectoriser with the default cost model in this file only. */
#pragma GCC optimize("tree-vectorize")
#endif

#include "kernels.h"

#include <string.h>

static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* cond ? x : y without a branch: every input has been computed already,
 * and gcc will not if-convert a chain of ?: whose arms hold float
 * arithmetic (it may trap under -ftrapping-math), which blocks
 * vectorisation. */
static inline uint32_t select_u32(int cond, uint32_t x, uint32_t y)
{
    uint32_t m = (uint32_t)0 - (uint32_t)(cond != 0);
    return (x & m) | (y & ~m);
}

/* fp16 -> fp32.  `em` is the 15-bit exponent|mantissa field. */
static inline float fp16_widen(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t em = h & 0x7fffu;
    /* Normal: move the field up 13 bits and rebias the exponent 15 -> 127. */
    uint32_t normal = (em << 13) + ((uint32_t)(127 - 15) << 23);
    /* Inf/NaN: all-ones exponent, mantissa kept; a NaN gets the quiet bit. */
    uint32_t infnan = (em << 13) | 0x7f800000u;
    infnan |= em > 0x7c00u ? 0x00400000u : 0u;
    /* Zero and subnormals: em * 2^-24, exact in fp32 (em < 2^10), and the
     * result is an fp32 normal, so FTZ cannot touch it. */
    uint32_t sub = f32_bits((float)(int32_t)em * 0x1p-24f);
    uint32_t r = select_u32(em >= 0x0400u, normal, sub);
    r = select_u32(em >= 0x7c00u, infnan, r);
    return f32_from_bits(r | sign);
}

/* fp32 -> fp16, round to nearest even. */
static inline uint16_t fp16_narrow(float f)
{
    uint32_t u = f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    /* NaN: quiet, top 10 payload bits kept. */
    uint32_t nan = 0x7e00u | ((a >> 13) & 0x03ffu);
    /* Normal range [2^-14, 65536): rebias, then round the 13 dropped bits
     * to nearest even by adding 0xfff plus the lowest kept bit; a carry
     * out of the mantissa bumps the exponent, up to 0x7c00 = infinity. */
    uint32_t normal =
        (a - ((uint32_t)(127 - 15) << 23) + 0x0fffu + ((a >> 13) & 1u)) >> 13;
    /* Below 2^-14: adding 0.5f leaves an fp32 whose ulp is 2^-24, the fp16
     * subnormal step, so the FPU rounds |f| to a multiple of 2^-24 and the
     * low mantissa bits are the fp16 field (0x400 = smallest normal). */
    uint32_t sub = f32_bits(f32_from_bits(a) + 0.5f) - 0x3f000000u;
    uint32_t r = select_u32(a >= 0x38800000u, normal, sub);
    r = select_u32(a >= 0x47800000u, 0x7c00u, r); /* >= 65536, or inf */
    r = select_u32(a > 0x7f800000u, nan, r);
    return (uint16_t)(r | sign);
}

/* bf16 -> fp32: the top half of the fp32 pattern; a NaN is made quiet. */
static inline float bf16_widen(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    u |= (b & 0x7fffu) > 0x7f80u ? 0x00400000u : 0u;
    return f32_from_bits(u);
}

/* fp32 -> bf16, round to nearest even on the bit pattern, which is right
 * for normals, subnormals and overflow to infinity alike (the carry runs
 * into the exponent); NaNs are kept quiet instead of rounded. */
static inline uint16_t bf16_narrow(float f)
{
    uint32_t u = f32_bits(f);
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t nan = (u >> 16) | 0x0040u;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

float xc__fp16_to_fp32(uint16_t h) { return fp16_widen(h); }
uint16_t xc__fp32_to_fp16(float f) { return fp16_narrow(f); }
float xc__bf16_to_fp32(uint16_t b) { return bf16_widen(b); }
uint16_t xc__fp32_to_bf16(float f) { return bf16_narrow(f); }

void xc__fp16_to_fp32_scalar(float *restrict dst,
                             const uint16_t *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] = fp16_widen(src[i]);
}

void xc__fp32_to_fp16_scalar(uint16_t *restrict dst,
                             const float *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] = fp16_narrow(src[i]);
}

void xc__bf16_to_fp32_scalar(float *restrict dst,
                             const uint16_t *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] = bf16_widen(src[i]);
}

void xc__fp32_to_bf16_scalar(uint16_t *restrict dst,
                             const float *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] = bf16_narrow(src[i]);
}
