/*
 * outcome.c -- one outcome for a step every rank takes locally and that
 * must succeed everywhere or nowhere (a commit's allocations, a checkpoint
 * shard's write): the lowest failing rank's code and message, on every
 * rank.
 */
#include "common.h"

#include <stdint.h>
#include <stdio.h>

xc_result_t xc__agree_outcome(xc_comm_t *comm, xc_result_t mine, const char *what)
{
    int size = xc_comm_size(comm), rank = xc_comm_rank(comm);
    char msg[XC__ERRMSG_LEN];
    snprintf(msg, sizeof msg, "%s", mine == XC_OK ? "" : xc__tls_error());
    int32_t who = mine == XC_OK ? size : rank;
    xc_result_t rc = xc_allreduce(&who, &who, 1, XC_INT32, XC_MIN, comm);
    if (rc != XC_OK) return rc;
    if (who == size) return XC_OK;
    int32_t code = (int32_t)mine;
    if ((rc = xc_bcast(&code, 1, XC_INT32, who, comm)) != XC_OK) return rc;
    if ((rc = xc_bcast(msg, sizeof msg, XC_UINT8, who, comm)) != XC_OK) return rc;
    msg[sizeof msg - 1] = 0;
    if (code >= 0 || code < XC_ERR_REVOKED) code = XC_ERR_INTERNAL; /* not a code of ours */
    return xc__err((xc_result_t)code, "%s failed on rank %d: %s", what, who, msg);
}
