/*
 * shm_barrier.c -- barrier through shared memory: one chunk with nothing
 * staged; every rank waits for every other rank's `in`.
 */
#include "shm_common.h"

static const xc__shm_coll_t vt = {xc__shm_one, xc__shm_reads_all, NULL, NULL, NULL, 0};

xc_result_t xc__build_shm_barrier(xc_comm_t *comm, xc__op_t *op, const xc__args_t *a)
{
    return xc__shm_op_init(comm, op, a, &vt, 1, XC__SHM_LINES_INPUT);
}
