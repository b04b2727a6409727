/*
 * kernels.h -- the interface between the reduction dispatcher (dispatch.c)
 * and the per-instruction-set kernel files (reduce_scalar.c,
 * reduce_avx2.c, reduce_avx512.c with its two tables).  Private to
 * src/reduce.
 *
 * A level is a table of k-input kernels per (dtype, op) plus the four block
 * converters.  Invariants every table keeps:
 *  - a kernel is called with 2 <= k <= XC__REDUCE_MAX_K (k == 1 is a copy,
 *    done by the dispatcher), any count (0 included), and pointers of any
 *    alignment; it reads every srcs[j][i] before writing dst[i], so dst may
 *    equal any source;
 *  - its bits equal the scalar table's for every input (the scalar kernels
 *    are the reference; tests compare the levels on random data);
 *  - NULL entries are exactly the pairs xc__reduce_check rejects.
 */
#ifndef XC_REDUCE_KERNELS_H
#define XC_REDUCE_KERNELS_H

#include "reduce.h"

typedef void (*xc__reduce_kernel_fn)(void *dst, const void *const *srcs,
                                     int k, size_t n);

typedef struct xc__reduce_impl {
    xc__reduce_kernel_fn kernel[XC_DTYPE_COUNT][XC_OP_COUNT];
    void (*fp16_to_fp32)(float *restrict dst, const uint16_t *restrict src,
                         size_t n);
    void (*fp32_to_fp16)(uint16_t *restrict dst, const float *restrict src,
                         size_t n);
    void (*bf16_to_fp32)(float *restrict dst, const uint16_t *restrict src,
                         size_t n);
    void (*fp32_to_bf16)(uint16_t *restrict dst, const float *restrict src,
                         size_t n);
} xc__reduce_impl_t;

/* The tables.  The scalar one always exists; the others return NULL when
 * this build or this CPU cannot run them (each checks the CPU itself). */
XC__HIDDEN extern const xc__reduce_impl_t xc__reduce_scalar;
XC__HIDDEN const xc__reduce_impl_t *xc__reduce_avx2(void);
XC__HIDDEN const xc__reduce_impl_t *xc__reduce_avx512(void);
XC__HIDDEN const xc__reduce_impl_t *xc__reduce_avx512fp16(void);

/* The table in effect (dispatch.c): chosen at first use, then one relaxed
 * atomic load per call. */
XC__HIDDEN const xc__reduce_impl_t *xc__reduce_impl(void);

/* Scalar block converters (half.c), the reference for the SIMD ones. */
XC__HIDDEN void xc__fp16_to_fp32_scalar(float *restrict dst,
                                        const uint16_t *restrict src, size_t n);
XC__HIDDEN void xc__fp32_to_fp16_scalar(uint16_t *restrict dst,
                                        const float *restrict src, size_t n);
XC__HIDDEN void xc__bf16_to_fp32_scalar(float *restrict dst,
                                        const uint16_t *restrict src, size_t n);
XC__HIDDEN void xc__fp32_to_bf16_scalar(uint16_t *restrict dst,
                                        const float *restrict src, size_t n);

/*
 * Run the scalar kernel on elements [off, off + n) of every source and dst
 * (the SIMD levels without masked loads use it for their tails).
 */
XC__HIDDEN void xc__reduce_scalar_range(xc__reduce_kernel_fn scalar, void *dst,
                                        const void *const *srcs, int k,
                                        size_t elem_size, size_t off,
                                        size_t n);

#endif /* XC_REDUCE_KERNELS_H */
