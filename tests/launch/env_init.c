/*
 * env_init.c -- one rank of a job started by any launcher (xcoll-run, Open
 * MPI's mpirun, MPICH's mpiexec, torchrun-style or Slurm-style variables):
 * create the communicator from the environment with xc_comm_init_env, sum
 * rank+1 over all ranks in a 1000-element fp32 allreduce, check every
 * element, print "rank r/size ok" and exit 0.  Public API only.  Any failure
 * prints the cause and exits 1.
 */
#include "xcoll.h"

#include <stdio.h>

#define COUNT 1000

int main(void)
{
    xc_comm_t *comm = NULL;
    xc_result_t rc = xc_comm_init_env(&comm, NULL);
    if (rc != XC_OK) {
        fprintf(stderr, "env_init: xc_comm_init_env: %s: %s\n", xc_err_name(rc),
                xc_last_error());
        return 1;
    }
    int rank = xc_comm_rank(comm), size = xc_comm_size(comm);
    static float buf[COUNT];
    for (int i = 0; i < COUNT; ++i) buf[i] = (float)(rank + 1);
    rc = xc_allreduce(buf, buf, COUNT, XC_FLOAT32, XC_SUM, comm);
    if (rc != XC_OK) {
        fprintf(stderr, "env_init: rank %d/%d: xc_allreduce: %s: %s\n", rank,
                size, xc_err_name(rc), xc_comm_last_error(comm));
        xc_comm_destroy(comm);
        return 1;
    }
    /* Small integers are exact in fp32, whatever the summation order. */
    float want = (float)size * (float)(size + 1) / 2.0f;
    int bad = 0;
    for (int i = 0; i < COUNT; ++i)
        if (buf[i] != want) {
            if (bad++ < 5)
                fprintf(stderr, "env_init: rank %d/%d: element %d: expected "
                                "%g, got %g\n", rank, size, i, (double)want,
                        (double)buf[i]);
        }
    rc = xc_comm_destroy(comm);
    if (rc != XC_OK) {
        fprintf(stderr, "env_init: rank %d: xc_comm_destroy: %s: %s\n", rank,
                xc_err_name(rc), xc_last_error());
        return 1;
    }
    if (bad) {
        fprintf(stderr, "env_init: rank %d/%d: %d of %d elements wrong\n", rank,
                size, bad, COUNT);
        return 1;
    }
    printf("rank %d/%d ok\n", rank, size);
    return 0;
}
