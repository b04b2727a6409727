/*
 * predict.c -- xc_compress_predict: the cost model's price of a compressed
 * all-reduce on a communicator (src/model/cost_compress.c has the model).
 */
#include "../algo/algos.h"
#include "../core/comm.h"
#include "../model/model.h"
#include "segment.h"

xc_result_t xc_compress_predict(xc_comm_t *comm, size_t count, xc_dtype_t dtype, xc_op_t op,
                                xc_compress_t fmt, double *seconds)
{
    const char *fn = "xc_compress_predict";
    if (!seconds) return xc__err(XC_ERR_INVALID, "%s: seconds is NULL", fn);
    *seconds = -1;
    /* the call's arguments, without buffers */
    XC_CHECK(xc__compress_check_args(fn, NULL, NULL, 0, dtype, op, fmt, comm));
    const xc__model_topo_t *t = xc__algo_topo(comm);
    if (!t) return xc__err(XC_ERR_UNSUPPORTED, "%s: the communicator has no cost model yet", fn);
    double v = xc__model_compressed(comm->profile, t, count, dtype, op, fmt);
    if (v < 0) return xc__err(XC_ERR_UNSUPPORTED, "%s: no algorithm can run this here", fn);
    if (t->cores > 0 && t->ppn > t->cores) v *= (double)t->ppn / t->cores;
    *seconds = v;
    return XC_OK;
}
