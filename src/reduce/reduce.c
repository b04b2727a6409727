/*
 * reduce.c -- the entry points of the reduction kernels (xc__reduce_n,
 * xc__reduce2), the AVG finalisation, the (dtype, op) check, and the
 * dtype/op names and sizes of the public API.
 *
 * The kernels themselves live in one file per instruction set
 * (reduce_scalar.c, reduce_avx2.c, reduce_avx512.c); dispatch.c picks the
 * table once.  Entry points here validate cheaply (an invalid pair or k is
 * a caller bug and leaves dst untouched rather than crashing inside the
 * library), handle k == 1 as a copy, and call the table.
 *
 * AVG finalisation stays scalar (gcc-vectorised): it runs once per
 * collective on the result, not once per step.  Integers divide in the
 * signed or unsigned interpretation of the wrapped sum; fp16/bf16 divide in
 * fp32 and round once: fp32 has 24 bits >= 2p + 2 for p = 11 (fp16) and
 * p = 8 (bf16), so that is the correctly rounded narrow quotient.
 */
#if defined(__GNUC__) && !defined(__clang__) && defined(__OPTIMIZE__) &&     \
    !defined(__OPTIMIZE_SIZE__)
/* gcc 12 at plain -O2 vectorises none of the division loops (measured);
 * enable its loop vectoriser, with the default cost model, in this file
 * only. */
#pragma GCC optimize("tree-vectorize")
#endif

#include "kernels.h"

#include <string.h>

/* ------------------------------------------------------------------ */
/* Names and sizes                                                     */
/* ------------------------------------------------------------------ */

static const struct {
    const char *name;
    int is_float;
} dtype_info[XC_DTYPE_COUNT] = {
    [XC_INT8] = {"int8", 0},       [XC_UINT8] = {"uint8", 0},
    [XC_INT16] = {"int16", 0},     [XC_UINT16] = {"uint16", 0},
    [XC_INT32] = {"int32", 0},     [XC_UINT32] = {"uint32", 0},
    [XC_INT64] = {"int64", 0},     [XC_UINT64] = {"uint64", 0},
    [XC_FLOAT16] = {"fp16", 1},    [XC_BFLOAT16] = {"bf16", 1},
    [XC_FLOAT32] = {"fp32", 1},    [XC_FLOAT64] = {"fp64", 1},
};

static const char *const op_names[XC_OP_COUNT] = {
    [XC_SUM] = "sum", [XC_PROD] = "prod", [XC_MIN] = "min",
    [XC_MAX] = "max", [XC_AVG] = "avg",   [XC_BAND] = "band",
    [XC_BOR] = "bor", [XC_BXOR] = "bxor",
};

/* Enums may hold any int; compare as unsigned to reject negatives too. */
static int dtype_valid(xc_dtype_t dtype)
{
    return (unsigned)dtype < (unsigned)XC_DTYPE_COUNT;
}

static int op_valid(xc_op_t op) { return (unsigned)op < (unsigned)XC_OP_COUNT; }

size_t xc_dtype_size(xc_dtype_t dtype)
{
    return xc__dtype_size(dtype);
}

const char *xc_dtype_name(xc_dtype_t dtype)
{
    return dtype_valid(dtype) ? dtype_info[dtype].name : "invalid";
}

const char *xc_op_name(xc_op_t op)
{
    return op_valid(op) ? op_names[op] : "invalid";
}

xc_result_t xc__reduce_check(xc_dtype_t dtype, xc_op_t op)
{
    if (!dtype_valid(dtype))
        return xc__err(XC_ERR_INVALID, "invalid dtype %d (valid: 0..%d)",
                       (int)dtype, (int)XC_DTYPE_COUNT - 1);
    if (!op_valid(op))
        return xc__err(XC_ERR_INVALID, "invalid reduction op %d (valid: 0..%d)",
                       (int)op, (int)XC_OP_COUNT - 1);
    if (dtype_info[dtype].is_float &&
        (op == XC_BAND || op == XC_BOR || op == XC_BXOR))
        return xc__err(XC_ERR_INVALID,
                       "reduction op %s is not defined for dtype %s "
                       "(bitwise ops take integer dtypes only)",
                       op_names[op], dtype_info[dtype].name);
    return XC_OK;
}

/* ------------------------------------------------------------------ */
/* Entry points                                                        */
/* ------------------------------------------------------------------ */

void xc__reduce_n(void *dst, const void *const *srcs, int k, size_t count,
                  xc_dtype_t dtype, xc_op_t op)
{
    if (XC__UNLIKELY(!dtype_valid(dtype) || !op_valid(op) || k < 1 ||
                     k > XC__REDUCE_MAX_K))
        return;
    xc__reduce_kernel_fn fn = xc__reduce_impl()->kernel[dtype][op];
    if (XC__UNLIKELY(fn == NULL) || count == 0) return;
    if (k == 1) {
        if (dst != srcs[0]) memmove(dst, srcs[0], count * xc__dtype_size(dtype));
        return;
    }
    fn(dst, srcs, k, count);
}

void xc__reduce2(void *dst, const void *a, const void *b, size_t count,
                 xc_dtype_t dtype, xc_op_t op)
{
    const void *srcs[2] = {a, b};
    xc__reduce_n(dst, srcs, 2, count, dtype, op);
}

/* ------------------------------------------------------------------ */
/* AVG finalisation                                                    */
/* ------------------------------------------------------------------ */

/* buf[i] /= n, computed in W: the signed or unsigned interpretation of the
 * wrapped sum.  C division truncates toward zero; W is int or wider, and
 * n >= 1, so INT_MIN / n cannot overflow. */
#define XC__DIV_FN(name, T, W)                                                 \
    static void name(void *buf_, size_t count, int n)                          \
    {                                                                          \
        T *buf = buf_;                                                         \
        W div = (W)n;                                                          \
        for (size_t i = 0; i < count; i++) buf[i] = (T)((W)buf[i] / div);      \
    }

XC__DIV_FN(div_i8, int8_t, int)
XC__DIV_FN(div_u8, uint8_t, unsigned)
XC__DIV_FN(div_i16, int16_t, int)
XC__DIV_FN(div_u16, uint16_t, unsigned)
XC__DIV_FN(div_i32, int32_t, int32_t)
XC__DIV_FN(div_u32, uint32_t, uint32_t)
XC__DIV_FN(div_i64, int64_t, int64_t)
XC__DIV_FN(div_u64, uint64_t, uint64_t)
XC__DIV_FN(div_f32, float, float)   /* one correctly rounded division */
XC__DIV_FN(div_f64, double, double)

/* Elements per block of the fp16/bf16 dividers: 2 KiB of fp32 on the stack. */
#define XC__HALF_BLOCK 512

/* fp16/bf16: divide in fp32, round once more to the narrow type; correctly
 * rounded by the 2p + 2 argument in the file comment (the fp32 buffer is
 * private, so the block converters' `restrict` holds).  (Only bf16 results
 * in the subnormal range with more than 65536 ranks could see a false tie
 * from the fp32 rounding: |q - midpoint| >= 2^-134 / nranks otherwise
 * exceeds half an fp32 subnormal step, 2^-150.) */
#define XC__HALF_DIV_FN(name, fmt)                                             \
    static void name(void *buf_, size_t count, int n)                          \
    {                                                                          \
        uint16_t *buf = buf_;                                                  \
        float f[XC__HALF_BLOCK];                                               \
        for (size_t i = 0; i < count; i += XC__HALF_BLOCK) {                   \
            size_t m = XC__MIN(count - i, (size_t)XC__HALF_BLOCK);             \
            xc__##fmt##_to_fp32_n(f, buf + i, m);                              \
            div_f32(f, m, n);                                                  \
            xc__fp32_to_##fmt##_n(buf + i, f, m);                              \
        }                                                                      \
    }

XC__HALF_DIV_FN(div_f16, fp16)
XC__HALF_DIV_FN(div_bf16, bf16)

typedef void (*div_fn)(void *buf, size_t count, int n);

static const div_fn dividers[XC_DTYPE_COUNT] = {
    [XC_INT8] = div_i8,       [XC_UINT8] = div_u8,   [XC_INT16] = div_i16,
    [XC_UINT16] = div_u16,    [XC_INT32] = div_i32,  [XC_UINT32] = div_u32,
    [XC_INT64] = div_i64,     [XC_UINT64] = div_u64, [XC_FLOAT16] = div_f16,
    [XC_BFLOAT16] = div_bf16, [XC_FLOAT32] = div_f32, [XC_FLOAT64] = div_f64,
};

/* nranks < 1 is meaningless (a bug in the caller) and leaves buf as is;
 * nranks == 1 is skipped because x / 1 == x for every element. */
void xc__reduce_finalize(void *buf, size_t count, xc_dtype_t dtype,
                         xc_op_t op, int nranks)
{
    if (op != XC_AVG || nranks <= 1 || !dtype_valid(dtype)) return;
    dividers[dtype](buf, count, nranks);
}

void xc__reduce_many(void *dst, const void *const *srcs, int k, size_t count, xc_dtype_t dtype,
                     xc_op_t op)
{
    if (k <= XC__REDUCE_MAX_K) {
        xc__reduce_n(dst, srcs, k, count, dtype, op);
        return;
    }
    /* Groups of 64, left to right, a block at a time through a scratch
     * block: dst may be any source, also one of a later group, which must
     * not see the earlier groups' partial result in its place. */
    _Alignas(64) char acc[8192];
    size_t es = xc__dtype_size(dtype);
    if (!es || xc__reduce_check(dtype, op) != XC_OK) return; /* (as xc__reduce_n: dst as is) */
    size_t blk = sizeof acc / es;
    for (size_t off = 0; off < count; off += blk) {
        size_t n = count - off < blk ? count - off : blk;
        const void *g[XC__REDUCE_MAX_K];
        for (int j = 0; j < XC__REDUCE_MAX_K; j++) g[j] = (const char *)srcs[j] + off * es;
        xc__reduce_n(acc, g, XC__REDUCE_MAX_K, n, dtype, op);
        for (int i = XC__REDUCE_MAX_K; i < k; i += XC__REDUCE_MAX_K - 1) {
            int m = k - i < XC__REDUCE_MAX_K - 1 ? k - i : XC__REDUCE_MAX_K - 1;
            g[0] = acc;
            for (int t = 0; t < m; t++) g[t + 1] = (const char *)srcs[i + t] + off * es;
            xc__reduce_n(acc, g, m + 1, n, dtype, op);
        }
        xc__copy((char *)dst + off * es, acc, n * es);
    }
}
