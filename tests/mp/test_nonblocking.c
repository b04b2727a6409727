/*
 * test_nonblocking.c -- the specification of the xc_i* forms and requests.
 *
 *   in-flight   ten collectives of every kind issued at once (allreduces and
 *               allgathers of several dtypes, reduce-scatter, reduce, bcast,
 *               alltoall, alltoallv, barrier), then waited in reverse order;
 *   burst       64 small allreduces queued at once, then waitall;
 *   p2p         a receive, a send and collectives in flight together (p2p
 *               is matched independently of the collective queue);
 *   threads     distinct requests of one communicator waited from three
 *               threads at once;
 *   polling     xc_request_test until done; afterwards test and wait keep
 *               returning the same result; waitall skips NULL entries;
 *   progress    an operation completes while the caller sleeps without
 *               calling into it (observed through xc_comm_stats), unless
 *               XCOLL_PROGRESS_THREAD=0 turned the progress thread off;
 *   p2p progress  a large receive completes while its caller sleeps (the
 *               sender blocks in xc_send meanwhile), also one posted inside
 *               a group (xc_group_end does not wait for it); a large send's data
 *               reaches the receiver while its sender waits on another
 *               communicator; small receives posted by a rank that then waits
 *               on another communicator for the sender, who first sends
 *               more than a channel's ring holds: the sender must not
 *               stay stuck (each unless XCOLL_PROGRESS_THREAD=0);
 *   overlap     computation runs while a large allreduce is in flight and
 *               both results are right (the time saved is printed);
 *   free        xc_request_free of a pending request: the operation still
 *               completes in the background, and its result is in the
 *               buffer once the communicator has been destroyed (destroy
 *               lets pending operations finish).
 * Every result is checked against the serial reference and xc_comm_stats
 * counts exactly the completed collectives.
 */
#include "harness.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One non-blocking operation of the in-flight set and its buffers. */
typedef struct flight {
    h_case_t c;
    xc_coll_t kind;
    char *send, *recv;
    size_t *cnt, *dsp; /* alltoallv: same counts and displacements both ways */
    xc_request_t *req;
} flight_t;

static flight_t issue(const char *name, xc_coll_t kind, xc_dtype_t dt,
                      xc_op_t op, size_t count, int root)
{
    flight_t f = {h_case(name, dt, op, count, 0, root), kind, NULL, NULL,
                  NULL, NULL, NULL};
    size_t esz = xc_dtype_size(dt), n = (size_t)H.size;
    int me = H.rank;
    xc_result_t rc = XC_OK;
    switch (kind) {
    case XC_COLL_ALLREDUCE:
    case XC_COLL_REDUCE:
        f.send = h_alloc(count * esz), f.recv = h_alloc(count * esz);
        h_fill(&f.c, f.send, count, me, 0);
        rc = kind == XC_COLL_ALLREDUCE
                 ? xc_iallreduce(f.send, f.recv, count, dt, op, H.comm, &f.req)
                 : xc_ireduce(f.send, f.recv, count, dt, op, root, H.comm,
                              &f.req);
        break;
    case XC_COLL_ALLGATHER:
        f.send = h_alloc(count * esz), f.recv = h_alloc(n * count * esz);
        h_fill(&f.c, f.send, count, me, 0);
        rc = xc_iallgather(f.send, f.recv, count, dt, H.comm, &f.req);
        break;
    case XC_COLL_REDUCE_SCATTER:
        f.send = h_alloc(n * count * esz), f.recv = h_alloc(count * esz);
        h_fill(&f.c, f.send, n * count, me, 0);
        rc = xc_ireduce_scatter(f.send, f.recv, count, dt, op, H.comm, &f.req);
        break;
    case XC_COLL_BCAST:
        f.recv = h_alloc(count * esz);
        if (me == root) h_fill(&f.c, f.recv, count, root, 0);
        rc = xc_ibcast(f.recv, count, dt, root, H.comm, &f.req);
        break;
    case XC_COLL_ALLTOALL:
        f.send = h_alloc(n * count * esz), f.recv = h_alloc(n * count * esz);
        h_fill(&f.c, f.send, n * count, me, 0);
        rc = xc_ialltoall(f.send, f.recv, count, dt, H.comm, &f.req);
        break;
    case XC_COLL_ALLTOALLV: /* rank j gets `count` elements from everyone */
        f.cnt = calloc(n, sizeof *f.cnt), f.dsp = calloc(n, sizeof *f.dsp);
        if (!f.cnt || !f.dsp) abort();
        for (size_t j = 0; j < n; j++) f.cnt[j] = count, f.dsp[j] = j * count;
        f.send = h_alloc(n * count * esz), f.recv = h_alloc(n * count * esz);
        h_fill(&f.c, f.send, n * count, me, 0);
        rc = xc_ialltoallv(f.send, f.cnt, f.dsp, f.recv, f.cnt, f.dsp, dt,
                           H.comm, &f.req);
        break;
    default:
        rc = xc_ibarrier(H.comm, &f.req);
        break;
    }
    if (rc != XC_OK) h_die_rc(__FILE__, __LINE__, name, rc, H.comm);
    return f;
}

static void verify(flight_t *f)
{
    size_t count = f->c.count, esz = xc_dtype_size(f->c.dtype);
    int me = H.rank;
    switch (f->kind) {
    case XC_COLL_ALLREDUCE:
        h_check_reduced(&f->c, f->recv, count, 0, "recvbuf");
        break;
    case XC_COLL_REDUCE:
        if (me == f->c.root) h_check_reduced(&f->c, f->recv, count, 0, "recvbuf");
        else h_check_untouched(&f->c, f->recv, count * esz, "non-root recvbuf");
        break;
    case XC_COLL_REDUCE_SCATTER:
        h_check_reduced(&f->c, f->recv, count, (size_t)me * count, "recvbuf");
        break;
    case XC_COLL_BCAST:
        h_check_copy(&f->c, f->recv, count, f->c.root, 0, "buf");
        break;
    case XC_COLL_ALLGATHER:
    case XC_COLL_ALLTOALL:
    case XC_COLL_ALLTOALLV:
        for (int r = 0; r < H.size; r++) {
            size_t src0 = f->kind == XC_COLL_ALLGATHER ? 0 : (size_t)me * count;
            h_check_copy(&f->c, f->recv + (size_t)r * count * esz, count, r,
                         src0, "block of recvbuf");
        }
        break;
    default:
        break;
    }
    H.issued[f->kind]++;
    h_free(f->send);
    h_free(f->recv);
    free(f->cnt);
    free(f->dsp);
    xc_request_free(f->req);
}

static void in_flight(void)
{
    int last = H.size - 1, n = 0;
    flight_t f[12]; /* issued one statement at a time: the order matters */
    f[n++] = issue("iallreduce", XC_COLL_ALLREDUCE, XC_FLOAT32, XC_SUM, 1000, -1);
    f[n++] = issue("iallgather", XC_COLL_ALLGATHER, XC_UINT8, H_COPY, 1001, -1);
    f[n++] = issue("iallreduce", XC_COLL_ALLREDUCE, XC_BFLOAT16, XC_SUM, 7, -1);
    f[n++] = issue("iallreduce", XC_COLL_ALLREDUCE, XC_INT32, XC_MAX, 65537, -1);
    f[n++] = issue("iallgather", XC_COLL_ALLGATHER, XC_FLOAT16, H_COPY, 7, -1);
    f[n++] = issue("ireduce_scatter", XC_COLL_REDUCE_SCATTER, XC_INT64, XC_SUM,
                   100, -1);
    f[n++] = issue("ibcast", XC_COLL_BCAST, XC_FLOAT64, H_COPY, 5000, last);
    f[n++] = issue("ialltoall", XC_COLL_ALLTOALL, XC_INT16, H_COPY, 33, -1);
    f[n++] = issue("ialltoallv", XC_COLL_ALLTOALLV, XC_UINT32, H_COPY, 17, -1);
    f[n++] = issue("ireduce", XC_COLL_REDUCE, XC_FLOAT32, XC_PROD, 77, 0);
    f[n++] = issue("ibarrier", XC_COLL_BARRIER, XC_UINT8, H_COPY, 0, -1);
    f[n++] = issue("iallreduce", XC_COLL_ALLREDUCE, XC_FLOAT64, XC_AVG, 1, -1);
    for (int i = n - 1; i >= 0; i--) H_CHECK(H.comm, xc_request_wait(f[i].req));
    for (int i = 0; i < n; i++) verify(&f[i]);
}

/* Many small operations queued at once (a bucketed backward pass). */
static void burst(int nops)
{
    flight_t *f = calloc((size_t)nops, sizeof *f);
    xc_request_t **reqs = calloc((size_t)nops, sizeof *reqs);
    if (!f || !reqs) abort();
    for (int i = 0; i < nops; i++) {
        f[i] = issue("iallreduce (burst)", XC_COLL_ALLREDUCE,
                     i % 3 ? XC_INT32 : XC_BFLOAT16, XC_SUM, 1 + (size_t)i * 37,
                     -1);
        reqs[i] = f[i].req;
    }
    H_CHECK(H.comm, xc_request_waitall(reqs, (size_t)nops));
    for (int i = 0; i < nops; i++) verify(&f[i]);
    free(reqs);
    free(f);
}

/* Point-to-point operations overlap queued collectives: they are matched
 * independently of the collective queue. */
static void p2p_among_collectives(void)
{
    int left = (H.rank + H.size - 1) % H.size, right = (H.rank + 1) % H.size;
    h_case_t pc = h_case("irecv among collectives", XC_FLOAT64, H_COPY, 4097,
                         -1, -1);
    double *out = h_alloc(4097 * 8), *in = h_alloc(4097 * 8);
    h_fill(&pc, out, 4097, H.rank, 0);
    xc_request_t *rr = NULL, *sr = NULL;
    H_CHECK(H.comm, xc_irecv(in, 4097, XC_FLOAT64, left, 21, H.comm, &rr));
    flight_t a = issue("iallreduce", XC_COLL_ALLREDUCE, XC_FLOAT32, XC_SUM,
                       100000, -1);
    H_CHECK(H.comm, xc_isend(out, 4097, XC_FLOAT64, right, 21, H.comm, &sr));
    flight_t b = issue("ibcast", XC_COLL_BCAST, XC_INT8, H_COPY, 3000, 0);
    H_CHECK(H.comm, xc_request_wait(rr));
    H_CHECK(H.comm, xc_request_wait(b.req));
    H_CHECK(H.comm, xc_request_wait(sr));
    H_CHECK(H.comm, xc_request_wait(a.req));
    h_check_copy(&pc, in, 4097, left, 0, "message received among collectives");
    H.issued[XC_COLL_SEND]++;
    H.issued[XC_COLL_RECV]++;
    verify(&a);
    verify(&b);
    xc_request_free(rr);
    xc_request_free(sr);
    h_free(out);
    h_free(in);
}

static void *wait_thread(void *arg)
{
    flight_t *f = arg;
    H_CHECK(H.comm, xc_request_wait(f->req));
    return NULL;
}

/* Distinct requests of one communicator waited from different threads. */
static void waits_from_threads(void)
{
    flight_t f[3];
    f[0] = issue("iallreduce (thread wait)", XC_COLL_ALLREDUCE, XC_FLOAT32,
                 XC_SUM, (size_t)1 << 18, -1);
    f[1] = issue("iallgather (thread wait)", XC_COLL_ALLGATHER, XC_UINT16,
                 H_COPY, 50000, -1);
    f[2] = issue("iallreduce (thread wait)", XC_COLL_ALLREDUCE, XC_INT64,
                 XC_BXOR, 30000, -1);
    pthread_t th[3];
    for (int i = 0; i < 3; i++)
        if (pthread_create(&th[i], NULL, wait_thread, &f[i]) != 0) {
            printf("[rank %d] FATAL: pthread_create failed\n", H.rank);
            exit(1);
        }
    for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 3; i++) verify(&f[i]);
}

static void polling(void)
{
    flight_t f = issue("iallreduce (polled)", XC_COLL_ALLREDUCE, XC_FLOAT32,
                       XC_SUM, (size_t)1 << 20, -1);
    int done = 0;
    long polls = 0;
    double deadline = h_now() + 120;
    while (!done && h_now() < deadline) {
        H_CHECK(H.comm, xc_request_test(f.req, &done));
        polls++;
    }
    H_TRUE("xc_request_test reports completion", done == 1);
    if (H.verbose && H.rank == 0) printf("polled %ld times\n", polls);
    done = 0;
    H_CHECK(H.comm, xc_request_test(f.req, &done)); /* still complete */
    H_EQ_INT("xc_request_test after completion: done", done, 1);
    H_CHECK(H.comm, xc_request_wait(f.req));
    H_CHECK(H.comm, xc_request_wait(f.req)); /* waiting twice is allowed */
    verify(&f);

    /* waitall with NULL entries. */
    flight_t a = issue("iallreduce", XC_COLL_ALLREDUCE, XC_UINT64, XC_BXOR, 9, -1);
    flight_t b = issue("iallgather", XC_COLL_ALLGATHER, XC_INT8, H_COPY, 9, -1);
    xc_request_t *reqs[] = {NULL, a.req, NULL, b.req, NULL};
    H_CHECK(H.comm, xc_request_waitall(reqs, 5));
    verify(&a);
    verify(&b);
    xc_request_free(NULL); /* a no-op */
}

static int progress_thread_off(void)
{
    const char *pt = getenv("XCOLL_PROGRESS_THREAD");
    return pt && !strcmp(pt, "0");
}

/* The operation must complete while this thread does not call into xcoll
 * except xc_comm_stats, which reads counters. */
static void background_progress(void)
{
    if (progress_thread_off()) {
        if (H.rank == 0)
            printf("XCOLL_PROGRESS_THREAD=0: skipping the background-progress "
                   "check\n");
        return;
    }
    uint64_t before[XC_COLL_COUNT], now[XC_COLL_COUNT];
    h_stats_ops(H.comm, before);
    flight_t f = issue("iallreduce (background)", XC_COLL_ALLREDUCE,
                       XC_FLOAT32, XC_SUM, (size_t)1 << 18, -1);
    double t0 = h_now(), deadline = t0 + 30;
    do {
        struct timespec ts = {0, 2000000}; /* 2 ms: "computing" elsewhere */
        nanosleep(&ts, NULL);
        h_stats_ops(H.comm, now);
    } while (now[XC_COLL_ALLREDUCE] == before[XC_COLL_ALLREDUCE] &&
             h_now() < deadline);
    if (now[XC_COLL_ALLREDUCE] == before[XC_COLL_ALLREDUCE])
        h_fail(__FILE__, __LINE__, "an iallreduce of 1 MiB did not complete "
               "in %.0f s while the caller slept: no background progress",
               h_now() - t0);
    H_CHECK(H.comm, xc_request_wait(f.req));
    verify(&f);
}

/* Sleep in 2 ms steps until ops[kind] of H.comm passes `before`; fail
 * after 30 s. */
static void sleep_until_done(xc_coll_t kind, uint64_t before, const char *what)
{
    uint64_t now[XC_COLL_COUNT];
    double t0 = h_now();
    do {
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
        h_stats_ops(H.comm, now);
    } while (now[kind] == before && h_now() < t0 + 30);
    if (now[kind] == before)
        h_fail(__FILE__, __LINE__, "%s did not complete in %.0f s while the caller "
               "slept: no background progress", what, h_now() - t0);
}

/* Point-to-point operations nobody waits for move in the background: a
 * 1 MiB receive (the peer's blocking send waits for it to be read), a 1 MiB
 * send whose sender waits on another communicator, and small receives
 * that the sender fills faster than a channel's ring holds while their
 * owner waits on another communicator (ranks in pairs 0-1, 2-3, ...; an
 * odd one out only splits). */
static void p2p_background(void)
{
    xc_comm_t *other = NULL;
    uint64_t before[XC_COLL_COUNT], after[XC_COLL_COUNT];
    h_stats_ops(H.comm, before);
    H_CHECK(H.comm, xc_comm_split(H.comm, 0, H.rank, &other, NULL));
    h_stats_ops(H.comm, after);
    for (int k = 0; k < XC_COLL_COUNT; k++) H.base_ops[k] += after[k] - before[k];
    const size_t big = (size_t)1 << 20, small = 4096, nsmall = 64;
    h_case_t pc = h_case("p2p background", XC_UINT8, H_COPY, big, -1, -1); /* every rank */
    int peer = H.rank ^ 1;
    if (progress_thread_off() || peer >= H.size) {
        if (H.rank == 0 && progress_thread_off())
            printf("XCOLL_PROGRESS_THREAD=0: skipping the point-to-point "
                   "background-progress checks\n");
        H_CHECK(other, xc_comm_destroy(other));
        return;
    }
    unsigned char *out = h_alloc(big), *in = h_alloc(big);
    h_fill(&pc, out, big, H.rank, 0);
    /* A 1 MiB receive completes while its caller sleeps: the sender's
     * blocking send waits for this rank to read it. */
    int receives = (H.rank & 1) == 0;
    if (receives) {
        xc_request_t *r = NULL;
        h_stats_ops(H.comm, before);
        H_CHECK(H.comm, xc_irecv(in, big, XC_UINT8, peer, 31, H.comm, &r));
        sleep_until_done(XC_COLL_RECV, before[XC_COLL_RECV], "a 1 MiB irecv");
        H_CHECK(H.comm, xc_request_wait(r));
        xc_request_free(r);
        h_check_copy(&pc, in, big, peer, 0, "1 MiB message received in the background");
        H.issued[XC_COLL_RECV]++;
        /* The same inside a group: xc_group_end waits for none of it. */
        memset(in, 0, big);
        h_stats_ops(H.comm, before);
        H_CHECK(H.comm, xc_group_start());
        H_CHECK(H.comm, xc_irecv(in, big, XC_UINT8, peer, 36, H.comm, &r));
        H_CHECK(H.comm, xc_group_end());
        sleep_until_done(XC_COLL_RECV, before[XC_COLL_RECV], "a 1 MiB irecv in a group");
        H_CHECK(H.comm, xc_request_wait(r));
        xc_request_free(r);
        h_check_copy(&pc, in, big, peer, 0, "1 MiB message received in the background (group)");
        H.issued[XC_COLL_RECV]++;
    } else {
        H_CHECK(H.comm, xc_send(out, big, XC_UINT8, peer, 31, H.comm));
        H_CHECK(H.comm, xc_send(out, big, XC_UINT8, peer, 36, H.comm));
        H.issued[XC_COLL_SEND] += 2;
    }
    /* A 1 MiB isend's data moves while its sender waits on the other
     * communicator for the receiver's word that it has it. */
    uint64_t word = 0x5eed;
    if (!receives) {
        xc_request_t *r = NULL;
        H_CHECK(H.comm, xc_isend(out, big, XC_UINT8, peer, 34, H.comm, &r));
        H_CHECK(other, xc_recv(&word, 1, XC_UINT64, peer, 35, other));
        H_CHECK(H.comm, xc_request_wait(r));
        xc_request_free(r);
        H.issued[XC_COLL_SEND]++;
    } else {
        memset(in, 0, big);
        H_CHECK(H.comm, xc_recv(in, big, XC_UINT8, peer, 34, H.comm));
        h_check_copy(&pc, in, big, peer, 0, "1 MiB message sent in the background");
        H_CHECK(other, xc_send(&word, 1, XC_UINT64, peer, 35, other));
        H.issued[XC_COLL_RECV]++;
    }
    /* Small receives, then a wait on the other communicator. */
    if ((H.rank & 1) == 0) {
        xc_request_t *rs[64];
        for (size_t i = 0; i < nsmall; i++)
            H_CHECK(H.comm, xc_irecv(in + i * small, small, XC_UINT8, peer, 32, H.comm, &rs[i]));
        uint64_t token = 0;
        H_CHECK(other, xc_recv(&token, 1, XC_UINT64, peer, 33, other));
        if (token != 0x5eed) h_fail(__FILE__, __LINE__, "token %llx", (unsigned long long)token);
        H_CHECK(H.comm, xc_request_waitall(rs, nsmall));
        for (size_t i = 0; i < nsmall; i++) xc_request_free(rs[i]);
        h_check_copy(&pc, in, small * nsmall, peer, 0, "small messages behind a full ring");
        H.issued[XC_COLL_RECV] += nsmall;
    } else {
        for (size_t i = 0; i < nsmall; i++)
            H_CHECK(H.comm, xc_send(out + i * small, small, XC_UINT8, peer, 32, H.comm));
        uint64_t token = 0x5eed;
        H_CHECK(other, xc_send(&token, 1, XC_UINT64, peer, 33, other));
        H.issued[XC_COLL_SEND] += nsmall;
    }
    H_CHECK(other, xc_comm_destroy(other));
    h_free(out);
    h_free(in);
}

/* A stand-in for a backward pass: deterministic floating-point work. */
static double compute(float *a, size_t n, int rounds)
{
    double acc = 0;
    for (int r = 0; r < rounds; r++)
        for (size_t i = 0; i < n; i++) {
            a[i] = a[i] * 0.999f + 0.5f;
            acc += a[i];
        }
    return acc;
}

static void overlap(void)
{
    const size_t cn = (size_t)1 << 16;
    const int rounds = H.full ? 400 : 100;
    float *work = malloc(cn * sizeof *work);
    if (!work) abort();
    for (size_t i = 0; i < cn; i++) work[i] = (float)i;
    double t0 = h_now();
    double serial = compute(work, cn, rounds);
    double t_comp = h_now() - t0;

    flight_t f = issue("iallreduce (overlapped)", XC_COLL_ALLREDUCE,
                       XC_FLOAT32, XC_SUM, (size_t)1 << 22, -1);
    for (size_t i = 0; i < cn; i++) work[i] = (float)i;
    t0 = h_now();
    double overlapped = compute(work, cn, rounds);
    H_CHECK(H.comm, xc_request_wait(f.req));
    double t_both = h_now() - t0;
    if (overlapped != serial)
        h_fail(__FILE__, __LINE__, "computation during iallreduce: got %.17g, "
               "expected %.17g", overlapped, serial);
    verify(&f);
    if (H.rank == 0)
        printf("overlap: compute %.1f ms alone, compute + 16 MiB iallreduce "
               "%.1f ms\n", t_comp * 1e3, t_both * 1e3);
    free(work);
}

int main(int argc, char **argv)
{
    h_init(argc, argv);
    int reps = H.full ? 10 : 2;
    for (int i = 0; i < reps; i++) in_flight();
    burst(H.full ? 256 : 64);
    p2p_among_collectives();
    waits_from_threads();
    polling();
    background_progress();
    p2p_background();
    overlap();
    h_check_stats(H.comm, H.base_ops, H.issued, "world");

    /* Free a pending request; its buffers stay valid until the end. */
    flight_t freed = issue("iallreduce (freed)", XC_COLL_ALLREDUCE, XC_INT32,
                           XC_SUM, 100003, -1);
    xc_request_free(freed.req);
    freed.req = NULL;
    flight_t after = issue("iallreduce (after freed)", XC_COLL_ALLREDUCE,
                           XC_FLOAT64, XC_MIN, 1000, -1);
    H_CHECK(H.comm, xc_request_wait(after.req));
    verify(&after);
    H_CHECK(H.comm, xc_comm_destroy(H.comm)); /* lets pending ops finish */
    H.comm = NULL;
    verify(&freed);
    return h_finish();
}
