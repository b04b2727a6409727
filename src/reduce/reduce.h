/*
 * reduce.h -- element-wise reduction kernels for every dtype x op.
 *
 * Contract shared by all kernels:
 *  - integers wrap (two's complement), computed through unsigned arithmetic
 *    so no C undefined behaviour occurs; results are exact;
 *  - fp16 and bf16 are widened to fp32, reduced in fp32 (all k inputs of one
 *    call), and rounded back to nearest even once per element per call
 *    (overflow gives infinity);
 *  - every NaN produced by a float reduction of k >= 2 inputs is the
 *    canonical quiet NaN (positive, only the quiet bit set: fp32 0x7fc00000,
 *    fp64 0x7ff8000000000000, fp16 0x7e00, bf16 0x7fc0), so results never
 *    depend on which NaN operand the hardware happened to propagate;
 *  - min/max of floats: any NaN operand gives the canonical NaN, -0 < +0,
 *    so the result bits do not depend on operand order;
 *  - XC_AVG reduces as XC_SUM; the division by the rank count is a separate
 *    finalisation step (xc__reduce_finalize) applied once to the fully
 *    reduced data;
 *  - buffers may alias exactly (dst equal to any source) but not partially;
 *  - every SIMD level (scalar, AVX2, AVX-512, AVX-512 with FP16/BF16) gives
 *    the same bits; the level is chosen once, at first use, from the CPU
 *    and XCOLL_SIMD.
 * All functions here are thread-safe and never fail: the caller validates
 * (dtype, op) with xc__reduce_check first; an invalid pair or k leaves dst
 * untouched.
 */
#ifndef XC_REDUCE_H
#define XC_REDUCE_H

#include "../core/common.h"

/* Largest k accepted by xc__reduce_n. */
#define XC__REDUCE_MAX_K 64

/* XC_OK if `op` is defined for `dtype` (bitwise ops: integers only),
 * else XC_ERR_INVALID with a message naming both. */
XC__HIDDEN xc_result_t xc__reduce_check(xc_dtype_t dtype, xc_op_t op);

/*
 * dst[i] = (((srcs[0][i] op srcs[1][i]) op srcs[2][i]) ... op srcs[k-1][i])
 * for i < count, 1 <= k <= XC__REDUCE_MAX_K: each input is read once and dst
 * written once, in this fixed left-to-right order, so the result is
 * deterministic.  k == 1 copies srcs[0] bit for bit.  dst may equal any
 * srcs[j]; the sources may equal each other.  For fp16/bf16, reduce_n of k
 * inputs rounds once, so it can differ in the last bit from a chain of k-1
 * xc__reduce2 calls (which rounds after each); every rank combining the same
 * chunk must therefore use the same grouping, as it must for fp32 anyway.
 */
XC__HIDDEN void xc__reduce_n(void *dst, const void *const *srcs, int k,
                             size_t count, xc_dtype_t dtype, xc_op_t op);

/* The same for any k >= 1: groups of XC__REDUCE_MAX_K, left to right
 * (acc = reduce_n(first 64), then acc = reduce_n(acc, next 63), ...; dst
 * may equal any srcs[j], also past the first group). */
XC__HIDDEN void xc__reduce_many(void *dst, const void *const *srcs, int k, size_t count,
                                xc_dtype_t dtype, xc_op_t op);

/* dst[i] = a[i] op b[i] for i < count: xc__reduce_n with k = 2. */
XC__HIDDEN void xc__reduce2(void *dst, const void *a, const void *b,
                            size_t count, xc_dtype_t dtype, xc_op_t op);

/* Finalise an XC_AVG reduction in place: buf[i] /= nranks (integers divide
 * truncating toward zero, after interpreting the wrapped sum in the signed or
 * unsigned type; floats divide in their compute precision -- fp32 for
 * fp16/bf16 -- and round once).  No-op for any other op. */
XC__HIDDEN void xc__reduce_finalize(void *buf, size_t count, xc_dtype_t dtype,
                                    xc_op_t op, int nranks);

/* Scalar conversions, exported for tests and the compression layer.
 * Narrowing rounds to nearest even (subnormals included; overflow gives
 * infinity); widening is exact; a NaN stays a NaN, made quiet, keeping its
 * sign and as many top payload bits as the destination holds. */
XC__HIDDEN float xc__fp16_to_fp32(uint16_t h);
XC__HIDDEN uint16_t xc__fp32_to_fp16(float f);
XC__HIDDEN float xc__bf16_to_fp32(uint16_t b);
XC__HIDDEN uint16_t xc__fp32_to_bf16(float f);

/* Block conversions of n elements, bit for bit equal to the scalar ones
 * above, at the current SIMD level.  dst and src must not overlap. */
XC__HIDDEN void xc__fp16_to_fp32_n(float *restrict dst,
                                   const uint16_t *restrict src, size_t n);
XC__HIDDEN void xc__fp32_to_fp16_n(uint16_t *restrict dst,
                                   const float *restrict src, size_t n);
XC__HIDDEN void xc__bf16_to_fp32_n(float *restrict dst,
                                   const uint16_t *restrict src, size_t n);
XC__HIDDEN void xc__fp32_to_bf16_n(uint16_t *restrict dst,
                                   const float *restrict src, size_t n);

/*
 * SIMD level.  The default is the best level the CPU supports, or the one
 * named by XCOLL_SIMD=scalar|avx2|avx512|avx512fp16 (read at first use and
 * by xc__reduce_set_level(XC__SIMD_DEFAULT)).  A level the CPU lacks falls
 * back to the best one below it, silently, so a job script can set it on
 * any machine; an unknown value is ignored with a warning in the
 * XCOLL_DEBUG log.
 */
enum {
    XC__SIMD_DEFAULT = -1, /* for xc__reduce_set_level: CPU / XCOLL_SIMD */
    XC__SIMD_SCALAR = 0,
    XC__SIMD_AVX2 = 1,
    XC__SIMD_AVX512 = 2,     /* F, BW, DQ, VL */
    XC__SIMD_AVX512FP16 = 3, /* the above + AVX512-FP16 + AVX512-BF16 */
    XC__SIMD_COUNT
};

/* Switch every later call (all threads) to `level`, or the best supported
 * level below it; returns the level now in effect.  A hook for tests and
 * benchmarks: do not call it while other threads are reducing (they may use
 * either level for a call in flight, which gives the same bits anyway). */
XC__HIDDEN int xc__reduce_set_level(int level);
/* The level in effect (resolving the default on first call). */
XC__HIDDEN int xc__reduce_level(void);
/* "scalar", "avx2", "avx512", "avx512fp16" ("invalid" otherwise). */
XC__HIDDEN const char *xc__reduce_level_name(int level);

#endif /* XC_REDUCE_H */
