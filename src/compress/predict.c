/*
 * predict.c -- xc_compress_predict: the cost model's price of a compressed
 * all-reduce on a communicator (src/model/cost_compress.c has the model).
 */
#include "../algo/algos.h"
#include "../core/comm.h"
#include "../model/model.h"

xc_result_t xc_compress_predict(xc_comm_t *comm, size_t count, xc_dtype_t dtype, xc_op_t op,
                                xc_compress_t fmt, double *seconds)
{
    const char *fn = "xc_compress_predict";
    if (!comm || !seconds)
        return xc__err(XC_ERR_INVALID, "%s: %s is NULL", fn, !comm ? "comm" : "seconds");
    *seconds = -1;
    if (dtype != XC_FLOAT32 && dtype != XC_FLOAT16 && dtype != XC_BFLOAT16)
        return xc__err(XC_ERR_INVALID, "%s: dtype %s (compression takes fp32, fp16 or bf16)", fn,
                       xc_dtype_name(dtype) ? xc_dtype_name(dtype) : "?");
    if (op != XC_SUM && op != XC_AVG)
        return xc__err(XC_ERR_INVALID, "%s: op %s (compression takes sum or avg)", fn,
                       xc_op_name(op) ? xc_op_name(op) : "?");
    if ((unsigned)fmt >= XC_COMPRESS_COUNT)
        return xc__err(XC_ERR_INVALID, "%s: unknown format %d", fn, (int)fmt);
    const xc__model_topo_t *t = xc__algo_topo(comm);
    if (!t) return xc__err(XC_ERR_UNSUPPORTED, "%s: the communicator has no cost model yet", fn);
    double v = xc__model_compressed(comm->profile, t, count, dtype, op, fmt);
    if (v < 0) return xc__err(XC_ERR_UNSUPPORTED, "%s: no algorithm can run this here", fn);
    if (t->cores > 0 && t->ppn > t->cores) v *= (double)t->ppn / t->cores;
    *seconds = v;
    return XC_OK;
}
