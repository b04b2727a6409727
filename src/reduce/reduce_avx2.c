/*
 * reduce_avx2.c -- the k-input reduction kernels and fp16/bf16 block
 * converters with AVX2 and F16C, 32 bytes per register.
 *
 * Every function that uses AVX2 carries the target attribute XC__AVX2, so
 * the rest of the library keeps the baseline ISA; xc__reduce_avx2() (no
 * attribute) checks the CPU and hands out the table only if it runs.  On
 * other architectures the file compiles to that function returning NULL.
 *
 * Each kernel keeps four registers of accumulators per step (see
 * reduce_avx512.c), then single registers, then hands the last
 * count % lanes elements to the scalar kernel of the same (dtype, op),
 * which gives the same bits.  All loads of a position come before its
 * store, so dst may equal any source.
 *
 * Bit-exactness with reduce_scalar.c (the reference):
 *  - integer ops are exact; AVX2 has no 8-bit or 64-bit multiply nor 64-bit
 *    min/max, so 8-bit products are formed in 16-bit lanes, 64-bit ones
 *    from three 32x32->64 products, and 64-bit min/max from vpcmpgtq (with
 *    the sign bit flipped for unsigned order);
 *  - floats: as reduce_avx512.c: same IEEE operation per element and order,
 *    NaNs made canonical before the store, min/max on the bits' order
 *    keys compared as integers, never vminps/vmaxps, whose results depend
 *    on MXCSR.DAZ;
 *  - fp16 uses vcvtph2ps/vcvtps2ph (nearest even from the immediate), bf16
 *    integer shifts with half.c's rounding.
 */
#include "kernels.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>

#define XC__AVX2 __attribute__((target("avx2,f16c")))
#define XC__INL static inline XC__AVX2

/* ------------------------------------------------------------------ */
/* Element kinds: load, store                                          */
/* ------------------------------------------------------------------ */

XC__INL __m256 canon_ps(__m256 v)
{
    __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    return _mm256_blendv_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000)), nan);
}

XC__INL __m256d canon_pd(__m256d v)
{
    __m256d nan = _mm256_cmp_pd(v, v, _CMP_UNORD_Q);
    return _mm256_blendv_pd(
        v, _mm256_castsi256_pd(_mm256_set1_epi64x(0x7ff8000000000000)), nan);
}

XC__INL __m256 ld_f32(const float *p) { return _mm256_loadu_ps(p); }
XC__INL void st_f32(float *p, __m256 v) { _mm256_storeu_ps(p, canon_ps(v)); }

XC__INL __m256d ld_f64(const double *p) { return _mm256_loadu_pd(p); }
XC__INL void st_f64(double *p, __m256d v) { _mm256_storeu_pd(p, canon_pd(v)); }

/* fp16: 8 elements widened to one register of fp32. */
#define XC__RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
XC__INL __m256 ld_f16(const uint16_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}
XC__INL void st_f16(uint16_t *p, __m256 v)
{
    _mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(canon_ps(v), XC__RNE));
}

/* bf16: the top half of fp32 (quiet-bit fix only in the converter, as in
 * reduce_avx512.c). */
XC__INL __m256i widen_bf16(__m128i h)
{
    return _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
}
/* Nearest even, as bf16_narrow in half.c (NaN lanes not handled here). */
XC__INL __m256i round_bf16(__m256i u)
{
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i bias = _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff));
    return _mm256_srli_epi32(_mm256_add_epi32(u, bias), 16);
}
/* Eight 32-bit lanes holding values < 2^16 to eight 16-bit ones. */
XC__INL __m128i pack_u32(__m256i r)
{
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}
XC__INL __m256 ld_bf16(const uint16_t *p)
{
    return _mm256_castsi256_ps(widen_bf16(_mm_loadu_si128((const __m128i *)p)));
}
/* The canonical NaN 0x7fc00000 rounds to 0x7fc0 without a carry. */
XC__INL void st_bf16(uint16_t *p, __m256 v)
{
    __m256i u = _mm256_castps_si256(canon_ps(v));
    _mm_storeu_si128((__m128i *)p, pack_u32(round_bf16(u)));
}

#define XC__INT_KIND(sfx, T)                                                   \
    XC__INL __m256i ld_##sfx(const T *p)                                       \
    {                                                                          \
        return _mm256_loadu_si256((const __m256i *)p);                         \
    }                                                                          \
    XC__INL void st_##sfx(T *p, __m256i v)                                     \
    {                                                                          \
        _mm256_storeu_si256((__m256i *)p, v);                                  \
    }
XC__INT_KIND(u8, uint8_t)
XC__INT_KIND(u16, uint16_t)
XC__INT_KIND(u32, uint32_t)
XC__INT_KIND(u64, uint64_t)

/* ------------------------------------------------------------------ */
/* Operations                                                          */
/* ------------------------------------------------------------------ */

/* Float min/max of two inputs on the bits, as reduce_avx512.c
 * (MXCSR-independent): "a below b" is the signed integer compare of the
 * bits, flipped where both are negative (their sign: 0 > x); any NaN
 * operand gives the canonical NaN (NAN).  KT ps / pd, W the lane's bits. */
#define XC__PICK(KT, V, W, NAN)                                                \
    XC__INL V pick_##KT##_(V a, V b, int take_min)                             \
    {                                                                          \
        __m256i ua = _mm256_cast##KT##_si256(a), ub = _mm256_cast##KT##_si256(b); \
        __m256i both_neg =                                                     \
            _mm256_cmpgt_epi##W(_mm256_setzero_si256(), _mm256_and_si256(ua, ub)); \
        __m256i take_a = _mm256_xor_si256(take_min ? _mm256_cmpgt_epi##W(ub, ua) \
                                                   : _mm256_cmpgt_epi##W(ua, ub), \
                                          both_neg);                           \
        V r = _mm256_blendv_##KT(b, a, _mm256_castsi256_##KT(take_a));         \
        return _mm256_blendv_##KT(r, _mm256_castsi256_##KT(NAN),               \
                                  _mm256_cmp_##KT(a, b, _CMP_UNORD_Q));        \
    }                                                                          \
    XC__INL V min_##KT##_(V a, V b) { return pick_##KT##_(a, b, 1); }          \
    XC__INL V max_##KT##_(V a, V b) { return pick_##KT##_(a, b, 0); }
XC__PICK(ps, __m256, 32, _mm256_set1_epi32(0x7fc00000))
XC__PICK(pd, __m256d, 64, _mm256_set1_epi64x(0x7ff8000000000000))
#undef XC__PICK

/* Low byte of each 16-bit product is the 8-bit product (mod 256). */
XC__INL __m256i mullo_epi8_(__m256i a, __m256i b)
{
    __m256i even = _mm256_mullo_epi16(a, b);
    __m256i odd = _mm256_mullo_epi16(_mm256_srli_epi16(a, 8), _mm256_srli_epi16(b, 8));
    return _mm256_or_si256(_mm256_and_si256(even, _mm256_set1_epi16(0x00ff)),
                           _mm256_slli_epi16(odd, 8));
}

/* a * b mod 2^64 = alo*blo + ((ahi*blo + alo*bhi) << 32). */
XC__INL __m256i mullo_epi64_(__m256i a, __m256i b)
{
    __m256i lo = _mm256_mul_epu32(a, b);
    __m256i c1 = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), b);
    __m256i c2 = _mm256_mul_epu32(a, _mm256_srli_epi64(b, 32));
    return _mm256_add_epi64(lo, _mm256_slli_epi64(_mm256_add_epi64(c1, c2), 32));
}

XC__INL __m256i min_epi64_(__m256i a, __m256i b)
{
    return _mm256_blendv_epi8(a, b, _mm256_cmpgt_epi64(a, b));
}
XC__INL __m256i max_epi64_(__m256i a, __m256i b)
{
    return _mm256_blendv_epi8(a, b, _mm256_cmpgt_epi64(b, a));
}
/* Unsigned order = signed order with the sign bits flipped. */
XC__INL __m256i gt_epu64(__m256i a, __m256i b)
{
    const __m256i sign = _mm256_set1_epi64x((long long)0x8000000000000000ull);
    return _mm256_cmpgt_epi64(_mm256_xor_si256(a, sign), _mm256_xor_si256(b, sign));
}
XC__INL __m256i min_epu64_(__m256i a, __m256i b)
{
    return _mm256_blendv_epi8(a, b, gt_epu64(a, b));
}
XC__INL __m256i max_epu64_(__m256i a, __m256i b)
{
    return _mm256_blendv_epi8(a, b, gt_epu64(b, a));
}

/* Float min/max in key space, as reduce_avx512.c (MXCSR-independent):
 * keys (the magnitude flipped where the sign is set) folded with integer
 * min/max, NaN lanes gathered from a floating unordered compare, the key
 * turned back and NaN lanes made canonical at the store. */
typedef struct kps {
    __m256i key, nan;
} kps_t;
typedef struct kpd {
    __m256i key, nan;
} kpd_t;
XC__INL __m256i okey32(__m256i u)
{
    return _mm256_xor_si256(u, _mm256_srli_epi32(_mm256_srai_epi32(u, 31), 1));
}
XC__INL __m256i okey64(__m256i u)
{
    __m256i sign = _mm256_cmpgt_epi64(_mm256_setzero_si256(), u);
    return _mm256_xor_si256(u, _mm256_srli_epi64(sign, 1));
}
/* kin_<KT>: a register's keys and NaN lanes; kout_<KT>: back to values,
 * NaN lanes canonical. */
#define XC__KEY_CONV(KT, V, KEY, SET1, NAN)                                    \
    XC__INL k##KT##_t kin_##KT(V x)                                            \
    {                                                                          \
        k##KT##_t r = {KEY(_mm256_cast##KT##_si256(x)),                        \
                       _mm256_cast##KT##_si256(_mm256_cmp_##KT(x, x, _CMP_UNORD_Q))}; \
        return r;                                                              \
    }                                                                          \
    XC__INL V kout_##KT(k##KT##_t v)                                           \
    {                                                                          \
        return _mm256_castsi256_##KT(_mm256_blendv_epi8(KEY(v.key), SET1(NAN), v.nan)); \
    }
XC__KEY_CONV(ps, __m256, okey32, _mm256_set1_epi32, 0x7fc00000)
XC__KEY_CONV(pd, __m256d, okey64, _mm256_set1_epi64x, 0x7ff8000000000000)
#define XC__KFOLD(KT, name, OP)                                                \
    XC__INL k##KT##_t name##_##KT(k##KT##_t a, k##KT##_t b)                    \
    {                                                                          \
        k##KT##_t r = {OP(a.key, b.key), _mm256_or_si256(a.nan, b.nan)};      \
        return r;                                                              \
    }
XC__KFOLD(ps, kmin, _mm256_min_epi32)
XC__KFOLD(ps, kmax, _mm256_max_epi32)
XC__KFOLD(pd, kmin, min_epi64_)
XC__KFOLD(pd, kmax, max_epi64_)
/* Key kind k<kind> over float kind `kind`. */
#define XC__KEY_KIND(kind, T, KT)                                              \
    XC__INL k##KT##_t ld_k##kind(const T *p) { return kin_##KT(ld_##kind(p)); } \
    XC__INL void st_k##kind(T *p, k##KT##_t v) { st_##kind(p, kout_##KT(v)); }
XC__KEY_KIND(f32, float, ps)
XC__KEY_KIND(f64, double, pd)
XC__KEY_KIND(f16, uint16_t, ps)
XC__KEY_KIND(bf16, uint16_t, ps)

/* ------------------------------------------------------------------ */
/* Kernel generator                                                    */
/* ------------------------------------------------------------------ */

/* Kernel `name` over elements T of kind `kind` (E lanes, register type V),
 * combining with OP(acc, x); the tail goes to the scalar kernel of
 * (DT, OPC). */
#define XC__K(name, kind, T, V, E, OP, DT, OPC)                                \
    static XC__AVX2 void name(void *dst_, const void *const *srcs, int k,      \
                              size_t n)                                        \
    {                                                                          \
        XC__K_HEAD_LOOP4(kind, T, V, E, OP)                                    \
        for (; n - i >= (size_t)(E); i += (E)) {                               \
            V a = ld_##kind(s[0] + i);                                         \
            for (int j = 1; j < k; j++) a = OP(a, ld_##kind(s[j] + i));        \
            st_##kind(d + i, a);                                               \
        }                                                                      \
        if (i < n)                                                             \
            xc__reduce_scalar_range(xc__reduce_scalar.kernel[DT][OPC], dst_,   \
                                    srcs, k, sizeof(T), i, n - i);             \
    }

#define XC__INT_KERNELS(sfx, T, E, W, UDT, SDT)                                \
    XC__K(sum_##sfx, sfx, T, __m256i, E, _mm256_add_##W, UDT, XC_SUM)         \
    XC__K(band_##sfx, sfx, T, __m256i, E, _mm256_and_si256, UDT, XC_BAND)     \
    XC__K(bor_##sfx, sfx, T, __m256i, E, _mm256_or_si256, UDT, XC_BOR)        \
    XC__K(bxor_##sfx, sfx, T, __m256i, E, _mm256_xor_si256, UDT, XC_BXOR)

XC__INT_KERNELS(u8, uint8_t, 32, epi8, XC_UINT8, XC_INT8)
XC__INT_KERNELS(u16, uint16_t, 16, epi16, XC_UINT16, XC_INT16)
XC__INT_KERNELS(u32, uint32_t, 8, epi32, XC_UINT32, XC_INT32)
XC__INT_KERNELS(u64, uint64_t, 4, epi64, XC_UINT64, XC_INT64)

XC__K(prod_u8, u8, uint8_t, __m256i, 32, mullo_epi8_, XC_UINT8, XC_PROD)
XC__K(prod_u16, u16, uint16_t, __m256i, 16, _mm256_mullo_epi16, XC_UINT16, XC_PROD)
XC__K(prod_u32, u32, uint32_t, __m256i, 8, _mm256_mullo_epi32, XC_UINT32, XC_PROD)
XC__K(prod_u64, u64, uint64_t, __m256i, 4, mullo_epi64_, XC_UINT64, XC_PROD)

#define XC__MINMAX(sfx, T, E, MIN, MAX, DT)                                    \
    XC__K(min_##DT, sfx, T, __m256i, E, MIN, DT, XC_MIN)                       \
    XC__K(max_##DT, sfx, T, __m256i, E, MAX, DT, XC_MAX)

XC__MINMAX(u8, uint8_t, 32, _mm256_min_epu8, _mm256_max_epu8, XC_UINT8)
XC__MINMAX(u8, uint8_t, 32, _mm256_min_epi8, _mm256_max_epi8, XC_INT8)
XC__MINMAX(u16, uint16_t, 16, _mm256_min_epu16, _mm256_max_epu16, XC_UINT16)
XC__MINMAX(u16, uint16_t, 16, _mm256_min_epi16, _mm256_max_epi16, XC_INT16)
XC__MINMAX(u32, uint32_t, 8, _mm256_min_epu32, _mm256_max_epu32, XC_UINT32)
XC__MINMAX(u32, uint32_t, 8, _mm256_min_epi32, _mm256_max_epi32, XC_INT32)
XC__MINMAX(u64, uint64_t, 4, min_epu64_, max_epu64_, XC_UINT64)
XC__MINMAX(u64, uint64_t, 4, min_epi64_, max_epi64_, XC_INT64)

#define XC__FLOAT_KERNELS(sfx, T, V, E, PS, DT)                                \
    XC__K(sum_##sfx, sfx, T, V, E, _mm256_add_##PS, DT, XC_SUM)                \
    XC__K(prod_##sfx, sfx, T, V, E, _mm256_mul_##PS, DT, XC_PROD)              \
    XC__K(min2_##sfx, sfx, T, V, E, min_##PS##_, DT, XC_MIN)                   \
    XC__K(max2_##sfx, sfx, T, V, E, max_##PS##_, DT, XC_MAX)                   \
    XC__K(mink_##sfx, k##sfx, T, k##PS##_t, E, kmin_##PS, DT, XC_MIN)         \
    XC__K(maxk_##sfx, k##sfx, T, k##PS##_t, E, kmax_##PS, DT, XC_MAX)         \
    XC__K_TWO_OR_MORE(min_##sfx, min2_##sfx, mink_##sfx)                       \
    XC__K_TWO_OR_MORE(max_##sfx, max2_##sfx, maxk_##sfx)

XC__FLOAT_KERNELS(f32, float, __m256, 8, ps, XC_FLOAT32)
XC__FLOAT_KERNELS(f64, double, __m256d, 4, pd, XC_FLOAT64)
XC__FLOAT_KERNELS(f16, uint16_t, __m256, 8, ps, XC_FLOAT16)
XC__FLOAT_KERNELS(bf16, uint16_t, __m256, 8, ps, XC_BFLOAT16)

/* ------------------------------------------------------------------ */
/* Block converters (bit for bit as half.c)                            */
/* ------------------------------------------------------------------ */

static XC__AVX2 void fp16_to_fp32(float *restrict dst,
                                  const uint16_t *restrict src, size_t n)
{
    size_t i = 0;
    for (; n - i >= 8; i += 8) _mm256_storeu_ps(dst + i, ld_f16(src + i));
    xc__fp16_to_fp32_scalar(dst + i, src + i, n - i);
}

static XC__AVX2 void fp32_to_fp16(uint16_t *restrict dst,
                                  const float *restrict src, size_t n)
{
    size_t i = 0;
    for (; n - i >= 8; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), XC__RNE));
    xc__fp32_to_fp16_scalar(dst + i, src + i, n - i);
}

/* NaNs get the quiet bit, as bf16_widen does. */
static XC__AVX2 void bf16_to_fp32(float *restrict dst,
                                  const uint16_t *restrict src, size_t n)
{
    const __m256i abs = _mm256_set1_epi32(0x7fffffff);
    const __m256i inf = _mm256_set1_epi32(0x7f800000);
    const __m256i quiet = _mm256_set1_epi32(0x00400000);
    size_t i = 0;
    for (; n - i >= 8; i += 8) {
        __m256i u = widen_bf16(_mm_loadu_si128((const __m128i *)(src + i)));
        /* |u| > inf as signed compare: both operands are non-negative */
        __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs), inf);
        u = _mm256_or_si256(u, _mm256_and_si256(nan, quiet));
        _mm256_storeu_si256((__m256i *)(dst + i), u);
    }
    xc__bf16_to_fp32_scalar(dst + i, src + i, n - i);
}

/* NaNs keep their top bits and get the quiet bit, as bf16_narrow does. */
static XC__AVX2 void fp32_to_bf16(uint16_t *restrict dst,
                                  const float *restrict src, size_t n)
{
    const __m256i quiet = _mm256_set1_epi32(0x0040);
    size_t i = 0;
    for (; n - i >= 8; i += 8) {
        __m256 v = _mm256_loadu_ps(src + i);
        __m256i u = _mm256_castps_si256(v);
        __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        __m256i qn = _mm256_or_si256(_mm256_srli_epi32(u, 16), quiet);
        __m256i r = _mm256_blendv_epi8(round_bf16(u), qn, nan);
        _mm_storeu_si128((__m128i *)(dst + i), pack_u32(r));
    }
    xc__fp32_to_bf16_scalar(dst + i, src + i, n - i);
}

/* ------------------------------------------------------------------ */
/* Table                                                               */
/* ------------------------------------------------------------------ */

#define XC__INT_ROW(sfx, DT)                                                   \
    {                                                                          \
        [XC_SUM] = sum_##sfx, [XC_PROD] = prod_##sfx, [XC_MIN] = min_##DT,     \
        [XC_MAX] = max_##DT, [XC_AVG] = sum_##sfx, [XC_BAND] = band_##sfx,     \
        [XC_BOR] = bor_##sfx, [XC_BXOR] = bxor_##sfx,                          \
    }
#define XC__FLOAT_ROW(sfx)                                                     \
    {                                                                          \
        [XC_SUM] = sum_##sfx, [XC_PROD] = prod_##sfx, [XC_MIN] = min_##sfx,    \
        [XC_MAX] = max_##sfx, [XC_AVG] = sum_##sfx,                            \
    }

static const xc__reduce_impl_t avx2_impl = {
    .kernel = {
        [XC_INT8] = XC__INT_ROW(u8, XC_INT8),
        [XC_UINT8] = XC__INT_ROW(u8, XC_UINT8),
        [XC_INT16] = XC__INT_ROW(u16, XC_INT16),
        [XC_UINT16] = XC__INT_ROW(u16, XC_UINT16),
        [XC_INT32] = XC__INT_ROW(u32, XC_INT32),
        [XC_UINT32] = XC__INT_ROW(u32, XC_UINT32),
        [XC_INT64] = XC__INT_ROW(u64, XC_INT64),
        [XC_UINT64] = XC__INT_ROW(u64, XC_UINT64),
        [XC_FLOAT16] = XC__FLOAT_ROW(f16),
        [XC_BFLOAT16] = XC__FLOAT_ROW(bf16),
        [XC_FLOAT32] = XC__FLOAT_ROW(f32),
        [XC_FLOAT64] = XC__FLOAT_ROW(f64),
    },
    .fp16_to_fp32 = fp16_to_fp32,
    .fp32_to_fp16 = fp32_to_fp16,
    .bf16_to_fp32 = bf16_to_fp32,
    .fp32_to_bf16 = fp32_to_bf16,
};

/* Not compiled for AVX2: it runs before we know the CPU has it.
 * __builtin_cpu_supports also checks that the OS saves the ymm state. */
const xc__reduce_impl_t *xc__reduce_avx2(void)
{
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c"))
        return &avx2_impl;
    return NULL;
}

#else /* not x86-64 with GNU C */

const xc__reduce_impl_t *xc__reduce_avx2(void) { return NULL; }

#endif
