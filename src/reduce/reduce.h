/*
 * reduce.h -- element-wise reduction kernels for every dtype x op.
 *
 * Contract shared by all kernels:
 *  - integers wrap (two's complement), computed through unsigned arithmetic
 *    so no C undefined behaviour occurs; results are exact;
 *  - fp16 and bf16 are widened to fp32, reduced, and rounded back to nearest
 *    even (NaN stays NaN; overflow gives infinity);
 *  - min/max of floats follow fminf/fmaxf semantics except that a NaN
 *    operand propagates (result NaN), so all ranks agree bit for bit;
 *  - XC_AVG reduces as XC_SUM; the division by the rank count is a separate
 *    finalisation step (xc__reduce_finalize) applied once to the fully
 *    reduced data;
 *  - buffers may alias exactly (dst == a or dst == b) but not partially.
 * The implementation is chosen at run time (scalar today; SIMD variants are
 * separate files).
 */
#ifndef XC_REDUCE_H
#define XC_REDUCE_H

#include "../core/common.h"

/* XC_OK if `op` is defined for `dtype` (bitwise ops: integers only),
 * else XC_ERR_INVALID with a message naming both. */
XC__HIDDEN xc_result_t xc__reduce_check(xc_dtype_t dtype, xc_op_t op);

/* dst[i] = a[i] op b[i] for i < count. */
XC__HIDDEN void xc__reduce2(void *dst, const void *a, const void *b,
                            size_t count, xc_dtype_t dtype, xc_op_t op);

/* Finalise an XC_AVG reduction in place: buf[i] /= nranks (integers divide
 * truncating toward zero, after interpreting the wrapped sum in the signed or
 * unsigned type; floats divide in their compute precision -- fp32 for
 * fp16/bf16 -- and round once).  No-op for any other op. */
XC__HIDDEN void xc__reduce_finalize(void *buf, size_t count, xc_dtype_t dtype,
                                    xc_op_t op, int nranks);

/* Scalar conversions, exported for tests and the compression layer. */
XC__HIDDEN float xc__fp16_to_fp32(uint16_t h);
XC__HIDDEN uint16_t xc__fp32_to_fp16(float f);   /* round to nearest even */
XC__HIDDEN float xc__bf16_to_fp32(uint16_t b);
XC__HIDDEN uint16_t xc__fp32_to_bf16(float f);   /* round to nearest even */

#endif /* XC_REDUCE_H */
