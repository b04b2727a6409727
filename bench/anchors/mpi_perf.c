/*
 * mpi_perf.c -- the MPI anchor of bench/compare: times the MPI library's own
 * collectives (whatever algorithm it picks) with the very same sizes, data,
 * timing and CSV columns as xcoll-perf, so that the two can be divided row by
 * row.  Built twice by bench/compare, with mpicc.openmpi and mpicc.mpich.
 *
 *   mpirun -n N mpi_perf -C allreduce -b 8 -e 64M -f 4 -n 20 -w 5 --csv
 *
 * Method, per size, as xcoll-perf (perf_common.h): `warmup` untimed calls,
 * one barrier, `iters` calls each timed on its own, the times reduced with
 * MAX to rank 0, which prints their median and (p90-p10)/median; then one
 * more call on fresh inputs whose result is checked.  Buffers are out of
 * place (broadcast works in one buffer) and allocated once per size
 * (on huge pages with --huge, as xcoll-perf --buffers xcoll).
 */
#include "perf_common.h"

#include <mpi.h>
#include <stdlib.h>

static int run_op(int coll, const perf_layout_t *l, float *send, float *recv,
                  int rank, int n)
{
    int c = (int)l->block;
    switch (coll) {
    case PERF_ALLREDUCE:
        return MPI_Allreduce(send, recv, c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    case PERF_REDUCESCATTER:
        return MPI_Reduce_scatter_block(send, recv, c, MPI_FLOAT, MPI_SUM,
                                        MPI_COMM_WORLD);
    case PERF_ALLGATHER:
        return MPI_Allgather(send, c, MPI_FLOAT, recv, c, MPI_FLOAT,
                             MPI_COMM_WORLD);
    case PERF_BROADCAST:
        return MPI_Bcast(send, c, MPI_FLOAT, 0, MPI_COMM_WORLD);
    case PERF_REDUCE:
        return MPI_Reduce(send, recv, c, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
    case PERF_ALLTOALL:
        return MPI_Alltoall(send, c, MPI_FLOAT, recv, c, MPI_FLOAT,
                            MPI_COMM_WORLD);
    case PERF_SENDRECV:
        return MPI_Sendrecv(send, c, MPI_FLOAT, (rank + 1) % n, 7, recv, c,
                            MPI_FLOAT, (rank + n - 1) % n, 7, MPI_COMM_WORLD,
                            MPI_STATUS_IGNORE);
    default:
        return MPI_ERR_ARG;
    }
}

/* One size: check, warm up, time; rank 0 prints the row. */
static int bench_size(const perf_opts_t *o, const perf_layout_t *l, int rank,
                      int n, double *t, double *tmax)
{
    float *send = (float *)perf_alloc(l->sendc * sizeof(float), o->huge, 0);
    float *recv = (float *)perf_alloc(l->recvc * sizeof(float), o->huge, o->offset);
    if (!send || !recv) {
        fprintf(stderr, "mpi_perf: out of memory at %zu bytes\n", l->bytes);
        perf_free(send, l->sendc * sizeof(float), o->huge, 0);
        perf_free(recv, l->recvc * sizeof(float), o->huge, o->offset);
        return -1;
    }
    long long bad = 0, badsum = -1;
    perf_fill(o->coll, l, rank, send, recv);
    for (int i = 0; i < o->warmup; i++) {
        if (o->fresh) {
            perf_touch(o->coll, l, rank, send);
            MPI_Barrier(MPI_COMM_WORLD);
        }
        run_op(o->coll, l, send, recv, rank, n);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < o->iters; i++) {
        if (o->fresh) {
            perf_touch(o->coll, l, rank, send);
            MPI_Barrier(MPI_COMM_WORLD);
        }
        double t0 = MPI_Wtime();
        run_op(o->coll, l, send, recv, rank, n);
        t[i] = MPI_Wtime() - t0;
    }
    double mean = perf_mean(t, o->iters), mean_max = 0;
    MPI_Reduce(&mean, &mean_max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(t, tmax, o->iters, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (o->check) {
        perf_fill(o->coll, l, rank, send, recv);
        run_op(o->coll, l, send, recv, rank, n);
        bad = (long long)perf_check(o->coll, l, rank, n, send, recv);
        MPI_Reduce(&bad, &badsum, 1, MPI_LONG_LONG, MPI_SUM, 0,
                   MPI_COMM_WORLD);
    }
    if (rank == 0)
        perf_print_row(o->coll, l, "default", tmax, o->iters, badsum, n,
                       o->coll == PERF_BROADCAST, mean_max);
    perf_free(send, l->sendc * sizeof(float), o->huge, 0);
    perf_free(recv, l->recvc * sizeof(float), o->huge, o->offset);
    return 0;
}

int main(int argc, char **argv)
{
    perf_opts_t o;
    int rank, n, rc = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (perf_parse_args(argc, argv, &o) != 0) {
        MPI_Finalize();
        return 2;
    }
    double *t = malloc((size_t)o.iters * sizeof(double));
    double *tmax = malloc((size_t)o.iters * sizeof(double));
    if (!t || !tmax) {
        MPI_Abort(MPI_COMM_WORLD, 1);
        return 1;
    }
    if (rank == 0)
        printf("%s\n", PERF_CSV_HEADER);
    size_t last = 0;
    for (size_t s = o.min_bytes; s <= o.max_bytes && rc == 0; s *= o.factor) {
        perf_layout_t l = perf_layout_of(o.coll, s, n);
        if (l.bytes == 0 || l.bytes == last)
            continue; /* rounded to nothing, or to the last row's size */
        last = l.bytes;
        rc = bench_size(&o, &l, rank, n, t, tmax);
    }
    free(t);
    free(tmax);
    if (rc != 0)
        MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_Finalize();
    return 0;
}
