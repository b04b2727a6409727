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

/*
 * The SIMD levels' k-input kernels share their head and main loop (the
 * tails differ: masked loads on AVX-512, the scalar kernel on AVX2).  In a
 * kernel of `void (void *dst_, const void *const *srcs, int k, size_t n)`
 * over elements T: declares T *d, the typed sources s[] and size_t i, then
 * from i = 0 reduces four registers V of E lanes at a time -- source 0
 * loaded, the others folded in with OP(acc, x), one store a register --
 * and leaves i at the first element not done (fewer than 4 E remain).
 * Uses the level's ld_<kind> and st_<kind>.
 */
#define XC__K_HEAD_LOOP4(kind, T, V, E, OP)                                    \
    T *d = dst_;                                                               \
    const T *s[XC__REDUCE_MAX_K];                                              \
    for (int j = 0; j < k; j++) s[j] = srcs[j];                                \
    size_t i = 0;                                                              \
    for (; n - i >= 4 * (size_t)(E); i += 4 * (size_t)(E)) {                   \
        const T *p = s[0] + i;                                                 \
        V a0 = ld_##kind(p), a1 = ld_##kind(p + (E));                          \
        V a2 = ld_##kind(p + 2 * (E)), a3 = ld_##kind(p + 3 * (E));            \
        for (int j = 1; j < k; j++) {                                          \
            p = s[j] + i;                                                      \
            a0 = OP(a0, ld_##kind(p));                                         \
            a1 = OP(a1, ld_##kind(p + (E)));                                   \
            a2 = OP(a2, ld_##kind(p + 2 * (E)));                               \
            a3 = OP(a3, ld_##kind(p + 3 * (E)));                               \
        }                                                                      \
        st_##kind(d + i, a0);                                                  \
        st_##kind(d + i + (E), a1);                                            \
        st_##kind(d + i + 2 * (E), a2);                                        \
        st_##kind(d + i + 3 * (E), a3);                                        \
    }

/* Kernel `name`: `two` for k == 2, `many` otherwise (where two inputs
 * have a cheaper form: float min/max pick pairwise, native fp16). */
#define XC__K_TWO_OR_MORE(name, two, many)                                     \
    static void name(void *dst, const void *const *srcs, int k, size_t n)      \
    {                                                                          \
        (k == 2 ? two : many)(dst, srcs, k, n);                                \
    }

#endif /* XC_REDUCE_KERNELS_H */
