/*
 * reduce_avx512.c -- the k-input reduction kernels and fp16/bf16 block
 * converters with AVX-512, 64 bytes per register, in two tables:
 *  - "avx512": F, BW, DQ, VL (Skylake-SP and later, Zen 4);
 *  - "avx512fp16": the same plus the FP16 and BF16 extensions (Sapphire
 *    Rapids and later), which replace two kernels: fp16 with k = 2 adds,
 *    multiplies, compares in fp16 directly (see below why that gives the
 *    same bits), and bf16 narrows with vcvtne2ps2bf16 when no lane is a
 *    NaN or an fp32 subnormal (the instruction flushes subnormals to zero,
 *    so such groups take the integer rounding of the base table).
 *
 * Every function that uses AVX-512 carries the target attribute XC__AVX512
 * (or XC__AVX512FP16), so the rest of the library keeps the baseline ISA;
 * xc__reduce_avx512() and xc__reduce_avx512fp16() (no attribute) check the
 * CPU and hand out their table only if it runs.  On other architectures
 * the file compiles to those functions returning NULL.
 *
 * Each kernel keeps four registers of accumulators per step: it loads four
 * vectors of srcs[0], combines the same four vectors of srcs[1], ...,
 * srcs[k-1] into them, and stores once; the last partial group of vectors
 * uses masked loads and stores (masked-off lanes are neither read nor
 * written, so no scalar tail and no access past the buffers).  All loads of
 * a position come before its store, so dst may equal any source.
 *
 * Bit-exactness with reduce_scalar.c (the reference):
 *  - integer ops are exact; 8-bit products are formed in 16-bit lanes (low
 *    byte exact), 64-bit ones with vpmullq;
 *  - float sum/prod are the same IEEE operations in the same order per
 *    element; every NaN is replaced by the canonical one before the store,
 *    as the scalar code does, so operand order inside an instruction cannot
 *    leak a payload;
 *  - float min/max compare the bits' order keys as integers, not the
 *    floats (the keys order every non-NaN value as the numbers, with
 *    -0 < +0, as reduce_scalar.c's); the smallest (largest) input is taken
 *    whole, and any NaN input gives the canonical NaN.  vminps /
 *    vmaxps are not used: under MXCSR.DAZ (torch.set_flush_denormal, a
 *    -ffast-math program) they compare subnormals as zeros and return a
 *    flushed zero, so ranks or threads in different modes would disagree
 *    (vrangeps also orders +0 and -0 as equal);
 *  - fp16 widen/narrow use vcvtph2ps/vcvtps2ph with round-to-nearest-even
 *    from the instruction (not MXCSR); they match half.c for every input,
 *    NaNs included (quiet bit set, top payload bits kept), and do not flush
 *    subnormals.  bf16 widens by shifting words into the top halves of
 *    dwords (even and odd elements in two registers) and narrows with the
 *    same integer nearest-even rounding as half.c;
 *  - native fp16 with k = 2: one fp16 +, * of two fp16 values is correctly
 *    rounded, and so is the scalar path (fp32 result rounded again to fp16:
 *    24 >= 2 * 11 + 2 bits, no double-rounding error; subnormal sums are
 *    exact in fp32), so both give the same bits; min/max are exact either
 *    way; NaNs are made canonical in fp16.  With k > 2 the scalar path
 *    rounds once at the end, so those calls widen to fp32 as the base
 *    table does.  AVX512-FP16 arithmetic ignores MXCSR.FTZ/DAZ, and so,
 *    in effect, does the fp32 path for values that come from fp16 (fp16
 *    subnormals are fp32 normals), so the two agree in any MXCSR mode.
 */
#include "kernels.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>

#define XC__AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl")))
#define XC__AVX512FP16                                                         \
    __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,"    \
                          "avx512fp16")))
#define XC__INL static inline XC__AVX512
#define XC__INL16 static inline XC__AVX512FP16

/* ------------------------------------------------------------------ */
/* Element kinds: load, masked load, store, masked store               */
/* ------------------------------------------------------------------ */

/* Mask of the first r < 64 lanes, or all lanes when r >= e. */
static inline uint64_t lanes(size_t r, size_t e)
{
    return r >= e ? ~(uint64_t)0 : ((uint64_t)1 << r) - 1;
}

XC__INL __m512 canon_ps(__m512 v)
{
    __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    return _mm512_mask_mov_ps(v, nan, _mm512_castsi512_ps(_mm512_set1_epi32(0x7fc00000)));
}

XC__INL __m512d canon_pd(__m512d v)
{
    __mmask8 nan = _mm512_cmp_pd_mask(v, v, _CMP_UNORD_Q);
    return _mm512_mask_mov_pd(
        v, nan, _mm512_castsi512_pd(_mm512_set1_epi64(0x7ff8000000000000)));
}

/* fp32 */
XC__INL __m512 ld_f32(const float *p) { return _mm512_loadu_ps(p); }
XC__INL __m512 ldm_f32(const float *p, __mmask16 m)
{
    return _mm512_maskz_loadu_ps(m, p);
}
XC__INL void st_f32(float *p, __m512 v) { _mm512_storeu_ps(p, canon_ps(v)); }
XC__INL void stm_f32(float *p, __mmask16 m, __m512 v)
{
    _mm512_mask_storeu_ps(p, m, canon_ps(v));
}

/* fp64 */
XC__INL __m512d ld_f64(const double *p) { return _mm512_loadu_pd(p); }
XC__INL __m512d ldm_f64(const double *p, __mmask8 m)
{
    return _mm512_maskz_loadu_pd(m, p);
}
XC__INL void st_f64(double *p, __m512d v) { _mm512_storeu_pd(p, canon_pd(v)); }
XC__INL void stm_f64(double *p, __mmask8 m, __m512d v)
{
    _mm512_mask_storeu_pd(p, m, canon_pd(v));
}

/* fp16: 16 elements widened to one register of fp32. */
#define XC__RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
XC__INL __m512 ld_f16(const uint16_t *p)
{
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}
XC__INL __m512 ldm_f16(const uint16_t *p, __mmask16 m)
{
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}
XC__INL void st_f16(uint16_t *p, __m512 v)
{
    _mm256_storeu_si256((__m256i *)p, _mm512_cvtps_ph(canon_ps(v), XC__RNE));
}
XC__INL void stm_f16(uint16_t *p, __mmask16 m, __m512 v)
{
    _mm256_mask_storeu_epi16(p, m, _mm512_cvtps_ph(canon_ps(v), XC__RNE));
}

/*
 * bf16: 32 elements in two registers of fp32, split by parity: each dword
 * of the loaded register holds elements 2i (low word) and 2i+1 (high
 * word), so `ev` = dword << 16 is element 2i as fp32 and `od` = dword with
 * the low word cleared is element 2i+1 -- two ALU operations, no shuffles.
 * Narrowing puts the rounded words back in the same places.  Widening
 * without the quiet-bit fix of half.c is fine inside a reduction (a NaN
 * input gives a NaN result, which becomes the canonical one); the block
 * converter below does fix.
 */
typedef struct v2ps {
    __m512 ev, od;
} v2ps_t;

XC__INL v2ps_t widen2_bf16(__m512i h)
{
    v2ps_t v = {_mm512_castsi512_ps(_mm512_slli_epi32(h, 16)),
                _mm512_castsi512_ps(_mm512_and_si512(h, _mm512_set1_epi32((int)0xffff0000u)))};
    return v;
}
XC__INL v2ps_t ld_bf16(const uint16_t *p) { return widen2_bf16(_mm512_loadu_si512(p)); }
XC__INL v2ps_t ldm_bf16(const uint16_t *p, __mmask32 m)
{
    return widen2_bf16(_mm512_maskz_loadu_epi16(m, p));
}
/* u + the nearest-even rounding bias of bf16_narrow in half.c: the bf16
 * result is the top 16 bits (NaN lanes are not handled here). */
XC__INL __m512i bias_bf16(__m512i u)
{
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    return _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
}
XC__INL __m512i round_bf16(__m512i u) { return _mm512_srli_epi32(bias_bf16(u), 16); }
/* The canonical NaN 0x7fc00000 rounds to 0x7fc0 without a carry.
 * vpternlogd 0xd8 = C ? B : A per bit: top words from od, low from ev. */
XC__INL __m512i narrow2_bf16(v2ps_t v)
{
    __m512i ev = round_bf16(_mm512_castps_si512(canon_ps(v.ev)));
    __m512i od = bias_bf16(_mm512_castps_si512(canon_ps(v.od)));
    return _mm512_ternarylogic_epi32(ev, od, _mm512_set1_epi32((int)0xffff0000u), 0xd8);
}
XC__INL void st_bf16(uint16_t *p, v2ps_t v) { _mm512_storeu_si512(p, narrow2_bf16(v)); }
XC__INL void stm_bf16(uint16_t *p, __mmask32 m, v2ps_t v)
{
    _mm512_mask_storeu_epi16(p, m, narrow2_bf16(v));
}

/* Element-wise ops on a pair of fp32 registers. */
#define XC__LIFT2(name, OP)                                                    \
    XC__INL v2ps_t name(v2ps_t a, v2ps_t b)                                    \
    {                                                                          \
        v2ps_t r = {OP(a.ev, b.ev), OP(a.od, b.od)};                           \
        return r;                                                              \
    }

/* Integers of each width. */
#define XC__INT_KIND(sfx, T, M, W)                                             \
    XC__INL __m512i ld_##sfx(const T *p) { return _mm512_loadu_si512(p); }     \
    XC__INL __m512i ldm_##sfx(const T *p, M m)                                 \
    {                                                                          \
        return _mm512_maskz_loadu_##W(m, p);                                   \
    }                                                                          \
    XC__INL void st_##sfx(T *p, __m512i v) { _mm512_storeu_si512(p, v); }     \
    XC__INL void stm_##sfx(T *p, M m, __m512i v)                               \
    {                                                                          \
        _mm512_mask_storeu_##W(p, m, v);                                       \
    }
XC__INT_KIND(u8, uint8_t, __mmask64, epi8)
XC__INT_KIND(u16, uint16_t, __mmask32, epi16)
XC__INT_KIND(u32, uint32_t, __mmask16, epi32)
XC__INT_KIND(u64, uint64_t, __mmask8, epi64)

/* ------------------------------------------------------------------ */
/* Operations                                                          */
/* ------------------------------------------------------------------ */

XC__INL __m512 add_ps(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }
XC__INL __m512 mul_ps(__m512 a, __m512 b) { return _mm512_mul_ps(a, b); }
XC__INL __m512d add_pd(__m512d a, __m512d b) { return _mm512_add_pd(a, b); }
XC__INL __m512d mul_pd(__m512d a, __m512d b) { return _mm512_mul_pd(a, b); }

/* Float min/max of two inputs on the bits (see the file comment): exact, one of the
 * operands, -0 < +0, any NaN operand the canonical NaN, whatever MXCSR
 * holds.  As signed integers the bits order non-negative floats as the
 * floats and negative ones in reverse: "a below b" is the integer compare
 * flipped where both are negative (then equal bits pick a, the same).
 * The NaN test is a floating compare, which DAZ does not affect. */
#define XC__PICK(KT, V, M, W, NAN)                                             \
    XC__INL V pick_##KT(V a, V b, int take_min)                                \
    {                                                                          \
        __m512i ua = _mm512_cast##KT##_si512(a), ub = _mm512_cast##KT##_si512(b); \
        M both_neg = _mm512_movep##W##_mask(_mm512_and_si512(ua, ub));         \
        M take_a = (take_min ? _mm512_cmplt_ep##W##_mask(ua, ub)               \
                             : _mm512_cmpgt_ep##W##_mask(ua, ub)) ^ both_neg;  \
        __m512i r = _mm512_mask_blend_ep##W(take_a, ub, ua);                   \
        r = _mm512_mask_mov_ep##W(r, _mm512_cmp_##KT##_mask(a, b, _CMP_UNORD_Q), \
                                  _mm512_set1_ep##W(NAN));                     \
        return _mm512_castsi512_##KT(r);                                       \
    }                                                                          \
    XC__INL V min_##KT(V a, V b) { return pick_##KT(a, b, 1); }                \
    XC__INL V max_##KT(V a, V b) { return pick_##KT(a, b, 0); }
XC__PICK(ps, __m512, __mmask16, i32, 0x7fc00000)
XC__PICK(pd, __m512d, __mmask8, i64, 0x7ff8000000000000)

/* Float min/max of more inputs in key space (see the file comment): each input's bits
 * become their order key once -- the magnitude bits flipped where the
 * sign is set (srai, then one vpternlogd: u ^ (s & 0x7fffffff)) -- so that
 * as signed integers the keys order every non-NaN value as the numbers,
 * -0 < +0; the k inputs fold with one integer min/max a register (a
 * one-cycle chain), NaN lanes gather in a mask from a floating unordered
 * compare (which DAZ does not affect); at the store the key turns back
 * (the same flip) and NaN lanes become the canonical NaN.  A key kind
 * wraps a float kind: loads return keys, stores take them. */
typedef struct kps {
    __m512i key;
    __mmask16 nan;
} kps_t;
typedef struct kpd {
    __m512i key;
    __mmask8 nan;
} kpd_t;
typedef struct kv2 {
    kps_t ev, od;
} kv2_t;
XC__INL __m512i okey32(__m512i u)
{
    return _mm512_ternarylogic_epi32(u, _mm512_srai_epi32(u, 31), _mm512_set1_epi32(0x7fffffff),
                                     0x78);
}
XC__INL __m512i okey64(__m512i u)
{
    return _mm512_ternarylogic_epi64(u, _mm512_srai_epi64(u, 63),
                                     _mm512_set1_epi64(0x7fffffffffffffff), 0x78);
}
/* kin_<KT>: a register's keys and NaN lanes; kout_<KT>: back to values,
 * NaN lanes canonical. */
#define XC__KEY_CONV(KT, V, KEY, W, NAN)                                       \
    XC__INL k##KT##_t kin_##KT(V x)                                            \
    {                                                                          \
        k##KT##_t r = {KEY(_mm512_cast##KT##_si512(x)),                        \
                       _mm512_cmp_##KT##_mask(x, x, _CMP_UNORD_Q)};            \
        return r;                                                              \
    }                                                                          \
    XC__INL V kout_##KT(k##KT##_t v)                                           \
    {                                                                          \
        return _mm512_castsi512_##KT(                                          \
            _mm512_mask_mov_##W(KEY(v.key), v.nan, _mm512_set1_##W(NAN)));     \
    }
XC__KEY_CONV(ps, __m512, okey32, epi32, 0x7fc00000)
XC__KEY_CONV(pd, __m512d, okey64, epi64, 0x7ff8000000000000)
XC__INL kv2_t kin_v2(v2ps_t x)
{
    kv2_t r = {kin_ps(x.ev), kin_ps(x.od)};
    return r;
}
XC__INL v2ps_t kout_v2(kv2_t v)
{
    v2ps_t r = {kout_ps(v.ev), kout_ps(v.od)};
    return r;
}
#define XC__KFOLD(KT, W, name, OP)                                             \
    XC__INL k##KT##_t name##_##KT(k##KT##_t a, k##KT##_t b)                    \
    {                                                                          \
        k##KT##_t r = {OP##_##W(a.key, b.key), a.nan | b.nan};                 \
        return r;                                                              \
    }
XC__KFOLD(ps, epi32, kmin, _mm512_min)
XC__KFOLD(ps, epi32, kmax, _mm512_max)
XC__KFOLD(pd, epi64, kmin, _mm512_min)
XC__KFOLD(pd, epi64, kmax, _mm512_max)
XC__INL kv2_t kmin_v2(kv2_t a, kv2_t b)
{
    kv2_t r = {kmin_ps(a.ev, b.ev), kmin_ps(a.od, b.od)};
    return r;
}
XC__INL kv2_t kmax_v2(kv2_t a, kv2_t b)
{
    kv2_t r = {kmax_ps(a.ev, b.ev), kmax_ps(a.od, b.od)};
    return r;
}
/* Key kind k<kind> over float kind `kind` (mask M, key type k<KT>_t). */
#define XC__KEY_KIND(kind, T, M, KT)                                           \
    XC__INL k##KT##_t ld_k##kind(const T *p) { return kin_##KT(ld_##kind(p)); } \
    XC__INL k##KT##_t ldm_k##kind(const T *p, M m)                             \
    {                                                                          \
        return kin_##KT(ldm_##kind(p, m));                                     \
    }                                                                          \
    XC__INL void st_k##kind(T *p, k##KT##_t v) { st_##kind(p, kout_##KT(v)); } \
    XC__INL void stm_k##kind(T *p, M m, k##KT##_t v)                           \
    {                                                                          \
        stm_##kind(p, m, kout_##KT(v));                                        \
    }
XC__KEY_KIND(f32, float, __mmask16, ps)
XC__KEY_KIND(f64, double, __mmask8, pd)
XC__KEY_KIND(f16, uint16_t, __mmask16, ps)
XC__KEY_KIND(bf16, uint16_t, __mmask32, v2)

XC__LIFT2(add_v2, add_ps)
XC__LIFT2(mul_v2, mul_ps)
XC__LIFT2(min_v2, min_ps)
XC__LIFT2(max_v2, max_ps)

/* Low byte of each 16-bit product is the 8-bit product (mod 256). */
XC__INL __m512i mullo_epi8_(__m512i a, __m512i b)
{
    __m512i even = _mm512_mullo_epi16(a, b);
    __m512i odd = _mm512_mullo_epi16(_mm512_srli_epi16(a, 8), _mm512_srli_epi16(b, 8));
    return _mm512_mask_blend_epi8((__mmask64)0xaaaaaaaaaaaaaaaaull, even,
                                  _mm512_slli_epi16(odd, 8));
}

/* ------------------------------------------------------------------ */
/* Kernel generator                                                    */
/* ------------------------------------------------------------------ */

/* Kernel `name` over elements T of kind `kind` (E lanes, mask type M,
 * register type V), combining with OP(acc, x), compiled with ATTR. */
#define XC__KA(ATTR, name, kind, T, V, M, E, OP)                               \
    static ATTR void name(void *dst_, const void *const *srcs, int k,          \
                          size_t n)                                            \
    {                                                                          \
        XC__K_HEAD_LOOP4(kind, T, V, E, OP)                                    \
        for (; i < n; i += (E)) {                                              \
            M m = (M)lanes(n - i, (E));                                        \
            V a = ldm_##kind(s[0] + i, m);                                     \
            for (int j = 1; j < k; j++) a = OP(a, ldm_##kind(s[j] + i, m));    \
            stm_##kind(d + i, m, a);                                           \
        }                                                                      \
    }
#define XC__K(...) XC__KA(XC__AVX512, __VA_ARGS__)

#define XC__INT_KERNELS(sfx, T, M, E, W, UW)                                   \
    XC__K(sum_##sfx, sfx, T, __m512i, M, E, _mm512_add_##W)                    \
    XC__K(band_##sfx, sfx, T, __m512i, M, E, _mm512_and_si512)                 \
    XC__K(bor_##sfx, sfx, T, __m512i, M, E, _mm512_or_si512)                   \
    XC__K(bxor_##sfx, sfx, T, __m512i, M, E, _mm512_xor_si512)                 \
    XC__K(umin_##sfx, sfx, T, __m512i, M, E, _mm512_min_##UW)                  \
    XC__K(umax_##sfx, sfx, T, __m512i, M, E, _mm512_max_##UW)                  \
    XC__K(smin_##sfx, sfx, T, __m512i, M, E, _mm512_min_##W)                   \
    XC__K(smax_##sfx, sfx, T, __m512i, M, E, _mm512_max_##W)

XC__INT_KERNELS(u8, uint8_t, __mmask64, 64, epi8, epu8)
XC__INT_KERNELS(u16, uint16_t, __mmask32, 32, epi16, epu16)
XC__INT_KERNELS(u32, uint32_t, __mmask16, 16, epi32, epu32)
XC__INT_KERNELS(u64, uint64_t, __mmask8, 8, epi64, epu64)
XC__K(prod_u8, u8, uint8_t, __m512i, __mmask64, 64, mullo_epi8_)
XC__K(prod_u16, u16, uint16_t, __m512i, __mmask32, 32, _mm512_mullo_epi16)
XC__K(prod_u32, u32, uint32_t, __m512i, __mmask16, 16, _mm512_mullo_epi32)
XC__K(prod_u64, u64, uint64_t, __m512i, __mmask8, 8, _mm512_mullo_epi64)

#define XC__FLOAT_KERNELS(sfx, T, V, M, E, PS)                                 \
    XC__K(sum_##sfx, sfx, T, V, M, E, add_##PS)                                \
    XC__K(prod_##sfx, sfx, T, V, M, E, mul_##PS)                               \
    XC__K(min2_##sfx, sfx, T, V, M, E, min_##PS)                               \
    XC__K(max2_##sfx, sfx, T, V, M, E, max_##PS)                               \
    XC__K(mink_##sfx, k##sfx, T, k##PS##_t, M, E, kmin_##PS)                   \
    XC__K(maxk_##sfx, k##sfx, T, k##PS##_t, M, E, kmax_##PS)                   \
    XC__K_TWO_OR_MORE(min_##sfx, min2_##sfx, mink_##sfx)                       \
    XC__K_TWO_OR_MORE(max_##sfx, max2_##sfx, maxk_##sfx)

XC__FLOAT_KERNELS(f32, float, __m512, __mmask16, 16, ps)
XC__FLOAT_KERNELS(f64, double, __m512d, __mmask8, 8, pd)
XC__FLOAT_KERNELS(f16, uint16_t, __m512, __mmask16, 16, ps)
XC__FLOAT_KERNELS(bf16, uint16_t, v2ps_t, __mmask32, 32, v2)

/* ------------------------------------------------------------------ */
/* Block converters (bit for bit as half.c)                            */
/* ------------------------------------------------------------------ */

static XC__AVX512 void fp16_to_fp32(float *restrict dst,
                                    const uint16_t *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 m = (__mmask16)lanes(n - i, 16);
        _mm512_mask_storeu_ps(dst + i, m, ldm_f16(src + i, m));
    }
}

static XC__AVX512 void fp32_to_fp16(uint16_t *restrict dst,
                                    const float *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 m = (__mmask16)lanes(n - i, 16);
        __m512 v = _mm512_maskz_loadu_ps(m, src + i);
        _mm256_mask_storeu_epi16(dst + i, m, _mm512_cvtps_ph(v, XC__RNE));
    }
}

/* NaNs get the quiet bit, as bf16_widen does.  (Natural element order
 * here, so zero-extend instead of unpacking.) */
static XC__AVX512 void bf16_to_fp32(float *restrict dst,
                                    const uint16_t *restrict src, size_t n)
{
    const __m512i abs = _mm512_set1_epi32(0x7fffffff);
    const __m512i inf = _mm512_set1_epi32(0x7f800000);
    const __m512i quiet = _mm512_set1_epi32(0x00400000);
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 m = (__mmask16)lanes(n - i, 16);
        __m512i u = _mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, src + i)), 16);
        __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs), inf);
        u = _mm512_mask_or_epi32(u, nan, u, quiet);
        _mm512_mask_storeu_epi32(dst + i, m, u);
    }
}

/* NaNs keep their top bits and get the quiet bit, as bf16_narrow does. */
static XC__AVX512 void fp32_to_bf16(uint16_t *restrict dst,
                                    const float *restrict src, size_t n)
{
    const __m512i quiet = _mm512_set1_epi32(0x0040);
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 m = (__mmask16)lanes(n - i, 16);
        __m512 v = _mm512_maskz_loadu_ps(m, src + i);
        __m512i u = _mm512_castps_si512(v);
        __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        __m512i r = _mm512_mask_or_epi32(round_bf16(u), nan,
                                         _mm512_srli_epi32(u, 16), quiet);
        _mm256_mask_storeu_epi16(dst + i, m, _mm512_cvtepi32_epi16(r));
    }
}

/* ------------------------------------------------------------------ */
/* FP16/BF16 extensions                                                */
/* ------------------------------------------------------------------ */

/* fp16 in fp16: 32 elements per register, k == 2 only. */
XC__INL16 __m512h ld_h16(const uint16_t *p)
{
    return _mm512_castsi512_ph(_mm512_loadu_si512(p));
}
XC__INL16 __m512h ldm_h16(const uint16_t *p, __mmask32 m)
{
    return _mm512_castsi512_ph(_mm512_maskz_loadu_epi16(m, p));
}
XC__INL16 __m512i canon_ph(__m512h v)
{
    __mmask32 nan = _mm512_cmp_ph_mask(v, v, _CMP_UNORD_Q);
    return _mm512_mask_mov_epi16(_mm512_castph_si512(v), nan, _mm512_set1_epi16(0x7e00));
}
XC__INL16 void st_h16(uint16_t *p, __m512h v) { _mm512_storeu_si512(p, canon_ph(v)); }
XC__INL16 void stm_h16(uint16_t *p, __mmask32 m, __m512h v)
{
    _mm512_mask_storeu_epi16(p, m, canon_ph(v));
}
XC__INL16 __m512h add_ph(__m512h a, __m512h b) { return _mm512_add_ph(a, b); }
XC__INL16 __m512h mul_ph(__m512h a, __m512h b) { return _mm512_mul_ph(a, b); }
XC__INL16 __m512h min_ph(__m512h a, __m512h b)
{
    return _mm512_castsi512_ph(_mm512_or_si512(_mm512_castph_si512(_mm512_min_ph(a, b)),
                                               _mm512_castph_si512(_mm512_min_ph(b, a))));
}
XC__INL16 __m512h max_ph(__m512h a, __m512h b)
{
    __m512i r = _mm512_and_si512(_mm512_castph_si512(_mm512_max_ph(a, b)),
                                 _mm512_castph_si512(_mm512_max_ph(b, a)));
    __mmask32 nan = _mm512_cmp_ph_mask(a, b, _CMP_UNORD_Q);
    return _mm512_castsi512_ph(_mm512_mask_mov_epi16(r, nan, _mm512_set1_epi16(0x7e00)));
}

#define XC__K16(...) XC__KA(XC__AVX512FP16, __VA_ARGS__)
XC__K16(sum_h16, h16, uint16_t, __m512h, __mmask32, 32, add_ph)
XC__K16(prod_h16, h16, uint16_t, __m512h, __mmask32, 32, mul_ph)
XC__K16(min_h16, h16, uint16_t, __m512h, __mmask32, 32, min_ph)
XC__K16(max_h16, h16, uint16_t, __m512h, __mmask32, 32, max_ph)

/* fp16 kernels of this table: in fp16 for k == 2, else widened. */
#define XC__F16X(op) XC__K_TWO_OR_MORE(op##_f16x, op##_h16, op##_f16)
XC__F16X(sum)
XC__F16X(prod)
XC__F16X(min)
XC__F16X(max)

/* bf16 narrowed by vcvtne2ps2bf16 (nearest even; words 0-15 from its
 * second operand, 16-31 from its first, so even elements then odd ones),
 * then words put back into element order, unless a lane is a NaN or an
 * fp32 subnormal: then the exact integer path. */
XC__INL16 __m512i narrow2_bf16x(v2ps_t v)
{
    /* vfpclassps classes QNaN | subnormal | SNaN; a literal, since the
     * intrinsic needs an immediate even in unoptimised builds. */
#define XC__ODD_CLASSES (0x01 | 0x20 | 0x80)
    __mmask16 special = _mm512_fpclass_ps_mask(v.ev, XC__ODD_CLASSES) |
                        _mm512_fpclass_ps_mask(v.od, XC__ODD_CLASSES);
#undef XC__ODD_CLASSES
    if (XC__UNLIKELY(special != 0)) return narrow2_bf16(v);
    __m512i r = (__m512i)_mm512_cvtne2ps_pbh(v.od, v.ev);
    /* element w comes from word w / 2 (even w) or 16 + w / 2 (odd w) */
    const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10,
                                         25, 9, 24, 8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3,
                                         18, 2, 17, 1, 16, 0);
    return _mm512_permutexvar_epi16(idx, r);
}
XC__INL16 v2ps_t ld_bf16x(const uint16_t *p) { return ld_bf16(p); }
XC__INL16 v2ps_t ldm_bf16x(const uint16_t *p, __mmask32 m) { return ldm_bf16(p, m); }
XC__INL16 void st_bf16x(uint16_t *p, v2ps_t v) { _mm512_storeu_si512(p, narrow2_bf16x(v)); }
XC__INL16 void stm_bf16x(uint16_t *p, __mmask32 m, v2ps_t v)
{
    _mm512_mask_storeu_epi16(p, m, narrow2_bf16x(v));
}
XC__K16(sum_bf16x, bf16x, uint16_t, v2ps_t, __mmask32, 32, add_v2)
XC__K16(prod_bf16x, bf16x, uint16_t, v2ps_t, __mmask32, 32, mul_v2)
/* (min/max pick one input each: the base table's narrowing is exact) */
static void min_bf16x(void *dst, const void *const *srcs, int k, size_t n)
{
    min_bf16(dst, srcs, k, n);
}
static void max_bf16x(void *dst, const void *const *srcs, int k, size_t n)
{
    max_bf16(dst, srcs, k, n);
}

/* ------------------------------------------------------------------ */
/* Table                                                               */
/* ------------------------------------------------------------------ */

#define XC__INT_ROW(sfx, MIN, MAX)                                             \
    {                                                                          \
        [XC_SUM] = sum_##sfx, [XC_PROD] = prod_##sfx, [XC_MIN] = MIN##_##sfx,  \
        [XC_MAX] = MAX##_##sfx, [XC_AVG] = sum_##sfx, [XC_BAND] = band_##sfx,  \
        [XC_BOR] = bor_##sfx, [XC_BXOR] = bxor_##sfx,                          \
    }
#define XC__FLOAT_ROW(sfx)                                                     \
    {                                                                          \
        [XC_SUM] = sum_##sfx, [XC_PROD] = prod_##sfx, [XC_MIN] = min_##sfx,    \
        [XC_MAX] = max_##sfx, [XC_AVG] = sum_##sfx,                            \
    }

#define XC__AVX512_TABLE(name, f16, bf16)                                     \
    static const xc__reduce_impl_t name = {                                    \
        .kernel = {                                                            \
            [XC_INT8] = XC__INT_ROW(u8, smin, smax),                           \
            [XC_UINT8] = XC__INT_ROW(u8, umin, umax),                          \
            [XC_INT16] = XC__INT_ROW(u16, smin, smax),                         \
            [XC_UINT16] = XC__INT_ROW(u16, umin, umax),                        \
            [XC_INT32] = XC__INT_ROW(u32, smin, smax),                         \
            [XC_UINT32] = XC__INT_ROW(u32, umin, umax),                        \
            [XC_INT64] = XC__INT_ROW(u64, smin, smax),                         \
            [XC_UINT64] = XC__INT_ROW(u64, umin, umax),                        \
            [XC_FLOAT16] = XC__FLOAT_ROW(f16),                                 \
            [XC_BFLOAT16] = XC__FLOAT_ROW(bf16),                               \
            [XC_FLOAT32] = XC__FLOAT_ROW(f32),                                 \
            [XC_FLOAT64] = XC__FLOAT_ROW(f64),                                 \
        },                                                                     \
        .fp16_to_fp32 = fp16_to_fp32,                                          \
        .fp32_to_fp16 = fp32_to_fp16,                                          \
        .bf16_to_fp32 = bf16_to_fp32,                                          \
        .fp32_to_bf16 = fp32_to_bf16,                                          \
    };
XC__AVX512_TABLE(avx512_impl, f16, bf16)
XC__AVX512_TABLE(avx512fp16_impl, f16x, bf16x)

/* Not compiled for AVX-512: these run before we know the CPU has it.
 * __builtin_cpu_supports also checks that the OS saves the zmm state. */
static int has_avx512(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
}

const xc__reduce_impl_t *xc__reduce_avx512(void)
{
    return has_avx512() ? &avx512_impl : NULL;
}

const xc__reduce_impl_t *xc__reduce_avx512fp16(void)
{
    return has_avx512() && __builtin_cpu_supports("avx512bf16") &&
                   __builtin_cpu_supports("avx512fp16")
               ? &avx512fp16_impl
               : NULL;
}

#else /* not x86-64 with GNU C */

const xc__reduce_impl_t *xc__reduce_avx512(void) { return NULL; }
const xc__reduce_impl_t *xc__reduce_avx512fp16(void) { return NULL; }

#endif
