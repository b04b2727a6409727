/*
 * measure.c -- measuring a profile: the same code runs the quick
 * creation-time measurement (a few milliseconds) and the thorough one of
 * xc_profile_calibrate; only the sizes and repetitions differ.
 *
 *  - alpha/beta of a link class, for both transfer patterns of a round: rank
 *    0 and one peer of that class exchange m bytes (both send, both
 *    receive, grouped: a round of a ring or of recursive doubling, over the
 *    same channels) back to back, and ping-pong m bytes (one way = half the
 *    round trip: a round of a tree or a chain), each with the caller's data
 *    and with data written just before (a copy or reduction of the call:
 *    read across cores from the writer's cache), over the sizes of
 *    the table below; a statistic of the times per exchange (stat(): the
 *    quick run's first quartile, the calibration's median of the slower
 *    of the two ranks, as xcoll-perf reports); a weighted least-squares line
 *    (weights 1/t^2, i.e. relative error, the fidelity metric) is fitted to
 *    the sizes below big_from and another to those from big_from on
 *    (big_from: the shm channels' rendezvous threshold; for TCP, where the
 *    protocol does not change, the same split still separates the
 *    per-message and the bandwidth regimes), and a third to the sizes whose
 *    two buffers exceed the cache (the quick run has none: there the line
 *    is the in-cache one plus memcpy's extra cost per byte beyond the cache).
 *  - shared-memory synchronisation: the same statistic of barrier.shm times.
 *  - memcpy and gamma (rank 0 only, local): median time per byte of memcpy
 *    and of each reduction kernel (xc__reduce2) on cache-resident buffers
 *    and on buffers beyond the cache.  The quick run measures the memory
 *    regime of memcpy only and takes a reduction beyond the cache to cost
 *    max(its cache-resident gamma, 1.5 x memcpy's: 3 streams instead of 2).
 *    The compression codecs' encode (with a residual) and decode-add are
 *    timed the same way over up to 64 blocks of fp32.
 *    The first write to fresh memory is timed against a second one: the
 *    page faults and zeroing that large scratch buffers pay per call.
 *    The calibration also times memcpy at working sets up to 64 MiB (the
 *    ladder): memory beyond the last cache level is slower again, and every
 *    cost beyond the cache is scaled the way memcpy's grows.
 *  - cold calls (calibration only, one node): an all-reduce after 50 ms
 *    asleep against the same call back to back, at 64 KiB and 1 MiB; the
 *    extra, a line in the working set, is what xcoll-plan adds to the
 *    collectives of a training step (model.h, cold_alpha / cold_beta);
 *    measured twice, on malloc'd buffers and on xc_mem_alloc's
 *    (cold_huge_alpha / cold_huge_beta).
 *
 * Only rank 0 times anything and only rank 0's profile is written; the
 * other ranks take part in the barriers only.
 * Nothing else may be in flight on the communicator (creation, or the
 * caller's promise).
 */
#include "../algo/algos.h"
#include "../algo/shm_coll.h"
#include "../algo/shm_common.h"
#include "../transport/shm.h"
#include "../compress/codec.h"
#include "../reduce/reduce.h"
#include "cost.h"
#include "model.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Point-to-point tag of the measurement's messages. */
#define TAG 2143354862

typedef struct plan {
    const size_t *small, *big;   /* sizes (0-terminated) */
    const size_t *tcp_big;       /* the big sizes of a TCP link */
    int reps_small, reps_big;
    int sync_reps;
    int sync_warm;               /* untimed calls before a collective's series */
    int copy_reps, gamma_reps;
    size_t gamma_bytes;          /* cache-resident reduction size */
    int gamma_mem;               /* measure gamma beyond the cache too */
    size_t ladder_max;           /* memcpy ladder up to this size (0: none) */
    int bench_stat;              /* statistic of communication times (stat()) */
    size_t stream_bytes;         /* a one-way stream between nodes carries this much */
} plan_t;

static const size_t k_quick_small[] = {8, 4096, 32768, 0};
static const size_t k_quick_big[] = {65536, 131072, 262144, 0};
/* A TCP link's bandwidth regime needs messages well beyond what a shaped
 * link lets through at once (a token bucket's burst, a switch's buffer):
 * below that, ping-pongs -- idle half the time -- run faster than the
 * sustained rate back-to-back collectives get. */
static const size_t k_quick_tcp_big[] = {65536, 262144, 1 << 20, 0};
/* 1 and 4 KiB: the channels' frames go in bulk from 1 KiB, where their
 * times bend (the points of xc__link_params_t). */
static const size_t k_full_small[] = {8, 64, 512, 1024, 2048, 4096, 8192, 16384, 32768, 49152, 0};
static const size_t k_full_big[] = {65536, 131072, 262144, 1 << 20, 4 << 20, 16 << 20, 0};

static const plan_t k_quick = {k_quick_small, k_quick_big, k_quick_tcp_big, 7, 4, 15, 5, 5, 5, 16384, 0,
                               0, 0, (size_t)2 << 20};
/* The calibration times a link's transfers in short series like
 * xcoll-perf's (5 warm-up, 20-odd timed): the engine's busy-poll budget
 * adapts over long series, and the profile should describe what the
 * benchmark and short bursts of collectives see.  The collective probes
 * (the sync, the staged rounds, the schedule's call and round) get 200
 * calls of warm-up and 61 timed: after 5, the first few dozen 8-byte
 * all-reduces ran 0.24-0.43 us and a series of 21 read 0.32-0.43 where
 * thousands read 0.22-0.25 (twenty-second session), and the sync priced
 * every small collective of the grid 30-60 % high. */
static const plan_t k_full = {k_full_small, k_full_big, k_full_big, 21, 9, 61, 200, 31, 15, 16384, 1,
                              (size_t)64 << 20, 1, (size_t)8 << 20};

static double now_s(void) { return (double)xc__now_ns() * 1e-9; }

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The first quartile of n times.  On a quiet machine it is the median's
 * neighbour; on a loaded one, where a wait either ends while spinning or
 * after the core went to another process (bimodal times), it stays on
 * the machine's own speed, so that every quantity is taken in the same
 * mode and comparisons between algorithms keep their quiet-machine order. */
static double quartile(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return v[(n - 1) / 4];
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* A communication time from per-iteration times: the quick plan takes the
 * first quartile of rank 0's own (robust choices under load, see
 * quartile()); the calibration takes the median of the per-iteration
 * maximum over the ranks involved -- xcoll-perf's statistic, so that a
 * calibrated profile predicts what the benchmark reports (on the machine,
 * and in the mode, in which it was calibrated). */
static double stat(double *own, double *max, int n, int bench)
{
    return bench ? median(max, n) : quartile(own, n);
}

/* Weighted least squares t = a + b m with weights 1/t^2; a, b >= 0. */
static void fit(const double *m, const double *t, int n, double *a, double *b)
{
    double S = 0, Sm = 0, Smm = 0, St = 0, Smt = 0;
    for (int i = 0; i < n; i++) {
        double w = t[i] > 0 ? 1.0 / (t[i] * t[i]) : 1.0;
        S += w, Sm += w * m[i], Smm += w * m[i] * m[i], St += w * t[i], Smt += w * m[i] * t[i];
    }
    double det = S * Smm - Sm * Sm;
    *b = det > 0 ? (S * Smt - Sm * St) / det : 0;
    *a = S > 0 ? (St - *b * Sm) / S : 0;
    if (*b < 0) {
        *b = 0;
        *a = S > 0 ? St / S : 0;
    }
    if (*a < 0) {
        *a = 0;
        *b = Smm > 0 ? Smt / Smm : 0;
    }
}

/* Weighted (1/t^2) least-squares slope of t = a + b m for a given a. */
static double slope(const double *m, const double *t, int n, double a)
{
    double num = 0, den = 0;
    for (int i = 0; i < n; i++) {
        double w = t[i] > 0 ? 1.0 / (t[i] * t[i]) : 1.0;
        num += w * m[i] * (t[i] - a);
        den += w * m[i] * m[i];
    }
    return den > 0 && num > 0 ? num / den : 0;
}

/* Start a series from the engine's initial busy-poll budget, as a fresh
 * job does: the budget adapts to how long waits last (engine.c), and a
 * series of one pattern (e.g. ping-pongs, whose waits are long) would
 * otherwise leave the next series in the state the previous one earned. */
static void fresh_spin(xc_comm_t *comm)
{
    xc__comm_lock(comm);
    comm->spin_ns = comm->spin_max_ns;
    pthread_mutex_unlock(&comm->mu);
}

/* Fresh data: one ordinary store into every cache line of buf, as a
 * computation's results are written -- the lines then sit modified in
 * this core's cache.  Not memset, whose string stores of large blocks
 * may bypass the cache (what xcoll-perf --fresh and training do not). */
static void write_lines(char *buf, size_t bytes, char v)
{
    volatile char *p = buf;
    for (size_t i = 0; i < bytes; i += 64) p[i] = v;
}

/* Ranks a and b exchange `bytes` (both send, both receive, posted as one
 * group: what a round of a schedule algorithm does, over the same
 * channels).  Point-to-point, so the other ranks need not take part and
 * the communicator's collective sequence is untouched. */
static xc_result_t exchange(xc_comm_t *comm, int a, int b, const char *sbuf, char *rbuf,
                            size_t bytes)
{
    int peer = comm->rank == a ? b : a;
    XC_CHECK(xc_group_start());
    xc_result_t rc = xc_send(sbuf, bytes, XC_UINT8, peer, TAG, comm);
    if (rc == XC_OK) rc = xc_recv(rbuf, bytes, XC_UINT8, peer, TAG, comm);
    xc_result_t rc2 = xc_group_end();
    return rc != XC_OK ? rc : rc2;
}

/* Time on rank a of back-to-back transfers of `bytes` between ranks a and
 * b (stat() of them).  XC__EXCHANGE: both send and receive, each waiting
 * for the partner's previous exchange, as consecutive rounds of an
 * algorithm do.  XC__ONEWAY: a ping-pong, half of each round trip timed on
 * rank a (the round trip already contains b's part); XC__ONEWAY_FRESH:
 * the message and an empty acknowledgement (below). */
static xc_result_t time_series(xc_comm_t *comm, int x, int a, int b, char *buf, size_t bytes,
                               int reps, int bench, double *out)
{
    double *t = malloc(2 * (size_t)reps * sizeof *t), *u = t ? t + reps : NULL;
    if (!t) return xc__err(XC_ERR_NOMEM, "out of memory measuring the cost model");
    xc_result_t rc = XC_OK;
    fresh_spin(comm);
    int me = comm->rank == a, peer = me ? b : a;
    int fresh = x == XC__ONEWAY_FRESH || x == XC__EXCHANGE_FRESH;
    int both = x == XC__EXCHANGE || x == XC__EXCHANGE_FRESH;
    /* Fresh one way: a's data, written before the clock starts, to b, and
     * an empty acknowledgement back, less an empty message's one way (the
     * first quartile of a few empty ping-pongs' halves).  An echo of what
     * b just received (a ping-pong) is not data b wrote with its own
     * stores: the kernel's copy into b's buffer may leave it out of b's
     * cache (the slope rose from 68 to 78 ps/B at 64-256 KiB here). */
    int ack = x == XC__ONEWAY_FRESH;
    double ack_s = 0;
    for (int i = 0; ack && i < reps && rc == XC_OK; i++) {
        double t0 = now_s();
        rc = me ? xc_send(buf, 0, XC_UINT8, peer, TAG, comm) : xc_recv(buf, 0, XC_UINT8, peer, TAG, comm);
        if (rc == XC_OK)
            rc = me ? xc_recv(buf, 0, XC_UINT8, peer, TAG, comm) : xc_send(buf, 0, XC_UINT8, peer, TAG, comm);
        t[i] = (now_s() - t0) * 0.5;
    }
    if (ack && rc == XC_OK) ack_s = quartile(t, reps);
    for (int i = -5; i < reps && rc == XC_OK; i++) { /* i < 0: warm-up */
        /* Fresh: the data to send was just written, as an algorithm's
         * copy or reduction leaves it (before the clock starts). */
        if (fresh && (both || me)) write_lines(buf, bytes, (char)(0x3c + (i & 7)));
        /* Both wrote: meet before the clock starts, or each rank's time
         * holds the rest of the other's writing (it doubled the fresh
         * exchange's slope, 131-159 against 69-70 ps/B). */
        if (fresh && both) rc = exchange(comm, a, b, buf, buf + bytes, 0);
        if (rc != XC_OK) break;
        double t0 = now_s();
        if (both) {
            rc = exchange(comm, a, b, buf, buf + bytes, bytes);
        } else if (me) {
            rc = xc_send(buf, bytes, XC_UINT8, peer, TAG, comm);
            if (rc == XC_OK)
                rc = xc_recv(buf + bytes, ack ? 0 : bytes, XC_UINT8, peer, TAG, comm);
        } else {
            rc = xc_recv(buf + bytes, bytes, XC_UINT8, peer, TAG, comm);
            if (rc == XC_OK) rc = xc_send(buf, ack ? 0 : bytes, XC_UINT8, peer, TAG, comm);
        }
        double dt = now_s() - t0;
        if (i >= 0) t[i] = both ? dt : ack ? (dt > ack_s ? dt - ack_s : 0) : dt * 0.5;
    }
    if (rc == XC_OK && bench && both) { /* the slower of the two per exchange */
        if (me) {
            rc = xc_recv(u, (size_t)reps, XC_FLOAT64, b, TAG, comm);
            for (int i = 0; rc == XC_OK && i < reps; i++) u[i] = u[i] > t[i] ? u[i] : t[i];
        } else {
            rc = xc_send(t, (size_t)reps, XC_FLOAT64, a, TAG, comm);
        }
    } else if (u) {
        memcpy(u, t, (size_t)reps * sizeof *t);
    }
    if (rc == XC_OK && me) *out = stat(t, u, reps, bench);
    free(t);
    return rc;
}

/* The pair's probes: `reps` calls of the pair's all-reduce (PAIR_BYTES,
 * buf -> buf + PAIR_BYTES), all-gather (`mv_bytes` in blocks of half; in
 * place where twice that exceeds the buffer, else from buf + mv_bytes),
 * all-to-all (`mv_bytes`, buf -> buf + mv_bytes) or broadcast (`mv_bytes`
 * from rank 0) after `warm` untimed ones, back to back (the all-reduce of
 * `mv_bytes` where not 0), the
 * algorithm forced to the shm one (the caller sets its mode): the median
 * of the slower rank's times (every rank takes part; rank 0 keeps it). */
#define PAIR_BYTES (2u << 20)
#define CMA_PROBE_BYTES (8u << 20)
#define AG_MID_BYTES (512u << 10)  /* all-gather's floor probe */
#define A2A_MID_BYTES (64u << 10)  /* all-to-all's */
#define A2A_HI_BYTES (256u << 10)  /* ... and where it ends (lead_end) */
#define BC_MID_BYTES (64u << 10)   /* broadcast's, likewise */
#define BC_HI_BYTES (256u << 10)
#define PROBE_MAX_REPS 5
#define FLOOR_LEAD 1.1 /* staging's lead that sets a floor */
/* The largest point-to-point size timed through the ring as well, for the
 * rendezvous threshold (lead_end). */
#define RING_PROBE_MAX (1u << 20)
/* How many ways a probe of `coll` that stages `bytes` a rank (the
 * operation's count x size) is timed: 2, ordinary and non-temporal slot
 * writes, where the runtime chooses between them (transport/wcopy.h: the
 * mode measured, an operation of XC__WCOPY_OP_MIN or more,
 * xc__shm_way_measured), else 1 (the mode as it is).  The probe
 * keeps the faster: what the runtime settles on.  Written ordinarily
 * alone, a start calibrated while the host's vCPUs sat far apart (an
 * ordinary store into a line the peer had read costing an invalidation
 * round trip) priced the 2-rank reduce.shm of 256 KiB at 104 us -- it takes
 * 21 with the chosen stores -- and took reduce.rs_gather (~100 us) for the
 * whole job (forty-eighth session). */
static int probe_ways(const xc_comm_t *comm, xc_coll_t coll, size_t bytes)
{
    const xc__wcopy_t *w = comm->shm ? &comm->shm->wcopy : NULL;
    if (!w || !w->probing || bytes < XC__WCOPY_OP_MIN) return 1;
    return xc__shm_way_measured(coll, comm->size) ? 2 : 1;
}

/* The slot writes' way for the next calls (ways > 1: way 0 or 1). */
static void probe_way(xc_comm_t *comm, int ways, int way)
{
    if (ways < 2) return;
    xc__comm_lock(comm); /* advance reads it under the lock */
    comm->shm->wcopy.mode = way;
    pthread_mutex_unlock(&comm->mu);
}

/* Untimed calls (at least `warm`) that take a staged rooted operation of
 * `count` elements of `es` bytes through every place of its writers' ring
 * entries once (xc__shm_ring_off: 32 entries of 2 slots a rank, each cut
 * in places for chunks of a page or more).  A place's first use after
 * creation costs 2-4x its later ones (a 2-rank broadcast of 32 KiB in 8
 * KiB pieces: ~4 us a call until the 64th, then 1.2-1.6; 16 KiB ones had
 * warmed the places of 32 KiB), and the probes' few calls each landed
 * on new places: the 64 KiB broadcast staged was timed at 8-11 us where
 * it runs at 2.2-3 (fifty-first session).  Only where the call is staged
 * in ring entries: a broadcast past the flagged lines, a reduce whose
 * root reads (`rooted`); capped at 256 calls. */
static int ring_warm(const xc_comm_t *comm, int rooted, size_t count, size_t es, int warm)
{
    if (!comm->shm || !rooted || count * es <= xc__shm_ll_max(comm->size)) return warm;
    size_t ce = xc__shm_rooted_ce(comm->shm->slot_bytes, count, es, comm->oversub);
    size_t pos = xc__shm_ring_cycle(comm->shm->slot_bytes, comm->shm->rot, ce * es);
    size_t per = (count + ce - 1) / ce;
    size_t w = (pos + per - 1) / per;
    if (w > 256) w = 256;
    return (int)w > warm ? (int)w : warm;
}

static xc_result_t time_pair_once(xc_comm_t *comm, xc_coll_t coll, int warm, int reps, char *buf,
                                  size_t mv_bytes, double *out)
{
    int algo = coll == XC_COLL_ALLGATHER  ? XC__ALGO_SHM_ALLGATHER
               : coll == XC_COLL_ALLTOALL ? XC__ALGO_SHM_ALLTOALL
               : coll == XC_COLL_BCAST    ? XC__ALGO_SHM_BCAST
                                          : XC__ALGO_SHM_ALLREDUCE;
    size_t half = mv_bytes / 2;
    xc_result_t rc = XC_OK;
    int saved = comm->forced_algo[coll];
    comm->forced_algo[coll] = algo;
    double t[PROBE_MAX_REPS], u[PROBE_MAX_REPS];
    for (int i = -warm; i < reps && rc == XC_OK; i++) {
        double t0 = now_s();
        /* (all-gather in place only where the buffer holds no more) */
        const char *ag_in = 2 * mv_bytes > CMA_PROBE_BYTES ? buf + (size_t)comm->rank * half
                                                           : buf + mv_bytes;
        rc = coll == XC_COLL_ALLGATHER
                 ? xc_allgather(ag_in, buf, half, XC_UINT8, comm)
             : coll == XC_COLL_ALLTOALL
                 ? xc_alltoall(buf, buf + mv_bytes, half, XC_UINT8, comm)
             : coll == XC_COLL_BCAST
                 ? xc_bcast(buf, mv_bytes, XC_UINT8, 0, comm)
                 : xc_allreduce(buf, buf + PAIR_BYTES, (mv_bytes ? mv_bytes : PAIR_BYTES) /
                                sizeof(float), XC_FLOAT32, XC_SUM, comm);
        if (i >= 0) t[i] = now_s() - t0;
    }
    comm->forced_algo[coll] = saved;
    if (rc == XC_OK) rc = xc_allreduce(t, u, (size_t)reps, XC_FLOAT64, XC_MAX, comm);
    if (rc == XC_OK) *out = median(u, reps);
    return rc;
}

/* A probe timed once (`once`, its arguments `arg`) for fastest_way. */
typedef xc_result_t (*probe_once_fn)(xc_comm_t *comm, const void *arg, double *out);

/* `once` timed each of `ways` ways (probe_ways: 2 where the runtime
 * chooses how it writes a slot, else 1): the faster. */
static xc_result_t fastest_way(xc_comm_t *comm, int ways, probe_once_fn once, const void *arg,
                               double *out)
{
    xc_result_t rc = XC_OK;
    for (int way = 0; way < ways && rc == XC_OK; way++) {
        double t = 0;
        probe_way(comm, ways, way);
        rc = once(comm, arg, &t);
        if (rc == XC_OK && (way == 0 || t < *out)) *out = t;
    }
    probe_way(comm, ways, 0);
    return rc;
}

typedef struct pair_arg {
    xc_coll_t coll;
    int warm, reps;
    char *buf;
    size_t mv_bytes;
} pair_arg_t;

static xc_result_t pair_once(xc_comm_t *comm, const void *arg, double *out)
{
    const pair_arg_t *a = arg;
    return time_pair_once(comm, a->coll, a->warm, a->reps, a->buf, a->mv_bytes, out);
}

/* time_pair_once, each way where the probe stages (`staged`) and the
 * runtime chooses: the faster. */
static xc_result_t time_pair_call(xc_comm_t *comm, xc_coll_t coll, int warm, int reps, char *buf,
                                  size_t mv_bytes, int staged, double *out)
{
    size_t per_rank = coll == XC_COLL_ALLGATHER || coll == XC_COLL_ALLTOALL ? mv_bytes / 2
                      : mv_bytes                                           ? mv_bytes
                                                                           : PAIR_BYTES;
    int ways = staged ? probe_ways(comm, coll, per_rank) : 1;
    pair_arg_t a = {coll, staged ? ring_warm(comm, coll == XC_COLL_BCAST, mv_bytes, 1, warm) : warm,
                    reps, buf, mv_bytes};
    return fastest_way(comm, ways, pair_once, &a, out);
}

/* The 2-rank all-reduce of `bytes` (0: PAIR_BYTES) one shot per chunk
 * (mode 1: the single copy held off) or single copy (2): 5 calls after 2. */
static xc_result_t time_pair(xc_comm_t *comm, int mode, char *buf, size_t bytes, double *out)
{
    comm->shm_one_shot = mode;
    xc_result_t rc = time_pair_call(comm, XC_COLL_ALLREDUCE, 2, PROBE_MAX_REPS, buf, bytes,
                                    mode == 1, out);
    comm->shm_one_shot = 0;
    return rc;
}

/* The pair's all-gather, all-to-all or broadcast of `bytes` single copy
 * (cma 1) or staged (0): `reps` calls after 1; staged by a threshold past
 * the probe, single copy with the threshold at most the block (all-to-all's
 * pair threshold is a quarter of XCOLL_SHM_CMA_MIN_KB; the broadcast's
 * threshold 0, the only value that makes it single copy below its floor) and no
 * measured floor or ceiling (comm->shm_probing: a profile already in
 * place, on a recalibration, would have them): the ranks set it alike. */
static xc_result_t time_moving(xc_comm_t *comm, xc_coll_t coll, int cma, char *buf, size_t bytes,
                               int reps, double *out)
{
    int min_kb = comm->cfg.shm_cma_min_kb;
    size_t block = bytes / 2, block_kb = coll == XC_COLL_ALLTOALL ? 4 * block / 1024 : block / 1024;
    comm->shm_probing = 1;
    if (!cma) comm->cfg.shm_cma_min_kb = (int)(CMA_PROBE_BYTES / 1024);
    else if (coll == XC_COLL_BCAST) comm->cfg.shm_cma_min_kb = 0;
    else if ((size_t)min_kb > block_kb) comm->cfg.shm_cma_min_kb = (int)block_kb;
    xc_result_t rc = time_pair_call(comm, coll, 1, reps, buf, bytes, !cma, out);
    comm->cfg.shm_cma_min_kb = min_kb;
    comm->shm_probing = 0;
    return rc;
}

/* The pair's probes' times (-1: not measured). */
typedef struct pair_times {
    double one, direct;              /* all-reduce one shot, single copy */
    double one_slot, direct_slot;    /* ... of a slot (the corrections' second point) */
    double ag_cma, ag_staged;        /* all-gather of CMA_PROBE_BYTES */
    double ag_mid_cma, ag_mid_staged; /* ... of AG_MID_BYTES */
    double a2a_cma, a2a_staged;      /* all-to-all of A2A_MID_BYTES */
    double a2a_hi_cma, a2a_hi_staged; /* ... of A2A_HI_BYTES */
    double bc_cma, bc_staged;        /* broadcast of BC_MID_BYTES */
    double bc_hi_cma, bc_hi_staged;  /* ... of BC_HI_BYTES */
} pair_times_t;

/* The pair's probes (2 uncrowded ranks that may read each other): the
 * all-reduce one shot and single copy (where it may run), the all-gather
 * and all-to-all single copy and staged (likewise), in one buffer written
 * once -- a page's first touch costs ~10 us on the AMD EPYC VM (12 MiB:
 * 33 ms), more than the probes. */
static xc_result_t pair_probes(xc_comm_t *comm, pair_times_t *pt)
{
    _Static_assert(CMA_PROBE_BYTES >= 2 * PAIR_BYTES && CMA_PROBE_BYTES >= 2 * A2A_HI_BYTES,
                   "one buffer serves every probe");
    char *buf = malloc(CMA_PROBE_BYTES);
    int32_t ok = buf != NULL;
    /* Every rank learns of a failed allocation (none waits alone). */
    xc_result_t rc = xc_allreduce(&ok, &ok, 1, XC_INT32, XC_MIN, comm);
    if (rc != XC_OK || !ok) {
        free(buf);
        return rc != XC_OK ? rc : xc__err(XC_ERR_NOMEM, "out of memory measuring the cost model");
    }
    memset(buf, 0x3c, CMA_PROBE_BYTES);
    size_t slot = comm->shm->slot_bytes;
    rc = time_pair(comm, 1, buf, 0, &pt->one);
    if (rc == XC_OK && slot < PAIR_BYTES) rc = time_pair(comm, 1, buf, slot, &pt->one_slot);
    if (rc == XC_OK && xc__shm_use_cma(comm, PAIR_BYTES) && PAIR_BYTES >= XC__SHM_PAIR_DIRECT_MIN) {
        rc = time_pair(comm, 2, buf, 0, &pt->direct);
        if (rc == XC_OK && slot < PAIR_BYTES && slot >= XC__SHM_PAIR_DIRECT_MIN)
            rc = time_pair(comm, 2, buf, slot, &pt->direct_slot);
    }
    if (rc == XC_OK && xc__shm_use_cma(comm, CMA_PROBE_BYTES / 2)) {
        /* All-gather's and all-to-all's single-copy ceiling (shm_cma_max),
         * all-gather's floor (shm_ag_cma_min), all-to-all's (shm_a2a_cma_min). */
        const struct {
            xc_coll_t coll;
            size_t bytes;
            int reps;
            double *cma, *staged;
        } pr[] = {
            {XC_COLL_ALLGATHER, CMA_PROBE_BYTES, 3, &pt->ag_cma, &pt->ag_staged},
            {XC_COLL_ALLGATHER, AG_MID_BYTES, 3, &pt->ag_mid_cma, &pt->ag_mid_staged},
            {XC_COLL_ALLTOALL, A2A_MID_BYTES, PROBE_MAX_REPS, &pt->a2a_cma, &pt->a2a_staged},
            {XC_COLL_ALLTOALL, A2A_HI_BYTES, PROBE_MAX_REPS, &pt->a2a_hi_cma,
             &pt->a2a_hi_staged},
            {XC_COLL_BCAST, BC_MID_BYTES, PROBE_MAX_REPS, &pt->bc_cma, &pt->bc_staged},
            {XC_COLL_BCAST, BC_HI_BYTES, PROBE_MAX_REPS, &pt->bc_hi_cma, &pt->bc_hi_staged},
        };
        for (size_t i = 0; i < sizeof pr / sizeof pr[0] && rc == XC_OK; i++) {
            rc = time_moving(comm, pr[i].coll, 1, buf, pr[i].bytes, pr[i].reps, pr[i].cma);
            if (rc == XC_OK)
                rc = time_moving(comm, pr[i].coll, 0, buf, pr[i].bytes, pr[i].reps, pr[i].staged);
        }
    }
    free(buf);
    return rc;
}

/* A pair's single-copy floor from its probe of `bytes` (the times single
 * copy and staged): where staging led by FLOOR_LEAD, single copy from the
 * probe's size (twice its block; never, XC__SHM_AG_CMA_NEVER, where
 * `never` -- staging led at the ceiling's probe too); else 0, the
 * configured threshold. */
static double cma_floor(const char *coll, double cma, double staged, size_t bytes, int never)
{
    double v = staged * FLOOR_LEAD < cma ? never ? (double)XC__SHM_AG_CMA_NEVER : (double)bytes : 0;
    XC_TRACE("cost model: 2-rank %s of %zu B took %.1f us single copy, %.1f us staged: its "
             "single copy %s",
             coll, bytes, cma * 1e6, staged * 1e6,
             v == 0 ? "as configured" : never ? "never" : "from this size");
    return v;
}

/* A pair's single-copy floor from its two probes of sizes m (blocks or
 * messages, ascending) timed staged and single copy (the second's -1: not
 * measured): where staging stops leading (xc__lead_end); `from` where it
 * does not lead at the first, twice the last size where it leads at each. */
static double probe_floor(const char *coll, const char *unit, const double m[2],
                          const double st[2], const double cm[2], double from)
{
    int n = cm[1] > 0 && st[1] > 0 ? 2 : 1;
    double v = xc__lead_end(m, st, cm, n, from, 2 * m[n - 1]);
    XC_TRACE("cost model: 2-rank %s, %s of %.0f / %.0f B, took %.1f / %.1f us single copy, "
             "%.1f / %.1f us staged: its single copy from %.0f B (0: as configured)",
             coll, unit, m[0], m[1], cm[0] * 1e6, cm[1] * 1e6, st[0] * 1e6, st[1] * 1e6, v);
    return v;
}

/* The channels' single copy beyond the cache, from the pair's all-gather
 * probe (t: both ranks read CMA_PROBE_BYTES / 2 of the other's at once,
 * the exchange pattern, working set CMA_PROBE_BYTES): the shm link's
 * lines beyond the cache are raised, never lowered, so that they price
 * that exchange at t.  Derived from memcpy alone (derive_mem) they priced
 * it at half its time on the AMD EPYC VM of the twenty-seventh session,
 * whose kernel copy of ordinary pages slows far more than glibc's memcpy
 * there: a 1 MiB allreduce.rhd was priced 97-124 us, took 165-177, and
 * was chosen over allreduce.shm's 110. */
static void cma_beyond_cache(xc__profile_t *p, double t)
{
    double b = CMA_PROBE_BYTES / 2, tier = xc__m_tier(p, CMA_PROBE_BYTES);
    for (int x = 0; x < XC__XFER_COUNT; x++) {
        xc__line_t *l = &p->link[XC__LINK_SHM].line[x];
        double mb = (t - l->big_alpha) / b / (tier > 0 ? tier : 1);
        if (mb > l->mem_beta) l->mem_beta = mb;
    }
}

/* What the pair's PAIR_BYTES all-reduce took (t) beyond its formula
 * (`price`, with the correction `*term` it prices zeroed first), per byte,
 * signed; 0 where the formula is not positive. */
static void pair_excess(xc_comm_t *comm, xc__profile_t *p, double *c0, double *c1,
                        double (*price)(const xc__profile_t *, const xc__model_topo_t *,
                                        const xc__model_call_t *),
                        double t, double t_slot, const char *what)
{
    xc__model_topo_t topo;
    xc__model_topo_of(comm, &topo);
    size_t slot = comm->shm->slot_bytes;
    xc__model_call_t call = {XC_COLL_ALLREDUCE, PAIR_BYTES / sizeof(float), XC_FLOAT32, XC_SUM, 0};
    xc__model_call_t small = {XC_COLL_ALLREDUCE, slot / sizeof(float), XC_FLOAT32, XC_SUM, 0};
    *c0 = *c1 = 0;
    double rest = price(p, &topo, &call), rest_s = t_slot > 0 ? price(p, &topo, &small) : -1;
    if (rest <= 0) return;
    if (rest_s > 0 && slot < PAIR_BYTES) {
        /* affine through both */
        double e = t - rest, es = t_slot - rest_s;
        *c1 = (e - es) / (double)(PAIR_BYTES - slot);
        *c0 = es - *c1 * (double)slot;
    } else {
        *c1 = (t - rest) / PAIR_BYTES;
    }
    XC_TRACE("cost model: 2-rank %s all-reduce of %u B took %.1f us, its formula %.1f us; of "
             "%zu B %.1f / %.1f us: %+.2f us %+.1f ps/B",
             what, PAIR_BYTES, t * 1e6, rest * 1e6, slot, t_slot * 1e6, rest_s * 1e6, *c0 * 1e6,
             *c1 * 1e12);
}

/* The calibration repeats each series: the engine's busy-poll budget
 * makes short series either all fast or all slow (waits ending in yields),
 * and small-message times here switch between modes ~1.3x apart every few
 * hundred milliseconds (the VM's neighbours).  A barrier and a collective
 * keep the fastest of SERIES series in a row; a link's series are repeated
 * as whole sweeps over its sizes -- three of one size in a row all land in
 * one mode -- and each size keeps the median of its SERIES: the mode the
 * machine was in most, as the benchmark's median of rounds does (the
 * fastest described the machine at its best and priced 20-30 % low). */
#define SERIES 3

/* Per-message time of a stream: rank a sends `bytes` back to back, rank b
 * receives them and answers the last with an empty message.  Enough
 * messages to carry `stream_bytes` (at least `reps`, at most 4096), so
 * that what a link lets through at once -- a token bucket's burst, a
 * switch's buffer -- is a small part of the stream: a ping-pong idles
 * each direction half the time and finds the bucket refilled; rounds of
 * collectives called back to back do not.  Fresh: each message written
 * just before it is sent (inside the stream, where the wire hides it). */
static xc_result_t time_stream(xc_comm_t *comm, int x, int a, int b, char *buf, size_t bytes,
                               int reps, size_t stream_bytes, double *out)
{
    int me = comm->rank == a, peer = me ? b : a;
    int fresh = x == XC__ONEWAY_FRESH;
    size_t k = bytes ? stream_bytes / bytes : 4096;
    if (k < (size_t)reps) k = (size_t)reps;
    if (k > 4096) k = 4096;
    char ack = 0;
    xc_result_t rc = XC_OK;
    fresh_spin(comm);
    double t0 = now_s();
    for (size_t i = 0; i < k && rc == XC_OK; i++) {
        if (me) {
            if (fresh) write_lines(buf, bytes, (char)(0x3c + (int)(i & 7)));
            rc = xc_send(buf, bytes, XC_UINT8, peer, TAG, comm);
        } else {
            rc = xc_recv(buf + bytes, bytes, XC_UINT8, peer, TAG, comm);
        }
    }
    if (rc == XC_OK)
        rc = me ? xc_recv(&ack, 0, XC_UINT8, peer, TAG, comm)
                : xc_send(&ack, 0, XC_UINT8, peer, TAG, comm);
    if (rc == XC_OK && me) *out = (now_s() - t0) / (double)k;
    return rc;
}

static int count_sizes(const size_t *s)
{
    int n = 0;
    while (s[n]) n++;
    return n;
}

/* The working set that stays cache-resident: half the per-core L2 (the
 * other half holds everything else the process and the library touch,
 * and a transfer's data sits in two cores' caches). */
static double cache_size(void)
{
    long c = sysconf(_SC_LEVEL2_CACHE_SIZE);
    if (c <= 0) c = sysconf(_SC_LEVEL1_DCACHE_SIZE) * 16;
    /* Unknown cache: a conservative boundary of 512 KiB. */
    return c > 0 ? (double)c / 2 : 524288.0;
}

/* The fit's view of the memory regime: a link of class `lc` is priced
 * beyond the cache as mem_alpha + m (mem_beta k + e) with k, e from the
 * working set (xc__m_mem_terms: memcpy's ladder in `lad`, none yet in a
 * quick run); a series' working set is its two buffers, 2 m.  Fitting
 * mem_beta to m k against t - m e makes the priced line pass through the
 * measured points: a slope fitted to raw times and multiplied by the tier
 * again priced a 16 MiB exchange (measured at a working set of 32 MiB,
 * 2.5x memcpy's cost beyond L2 here) at 2.5x its time. */
typedef struct fit_ctx {
    const xc__profile_t *lad;
    int lc;
} fit_ctx_t;

static void mem_terms(const fit_ctx_t *f, double m, double *k, double *e)
{
    xc__m_mem_terms(f->lad, f->lc, 2 * m, k, e);
}

/* Fit the three lines of one pattern to n points: the first k for the
 * line below the split, the rest (m ascending) for the others. */
static void fit_line_k(const fit_ctx_t *f, const double *m, const double *t, int n, int k,
                       double cache, xc__line_t *out)
{
    int j = k;
    while (j < n && 2 * m[j] <= cache) j++;
    if (k >= 2) fit(m, t, k, &out->alpha, &out->beta);
    if (j - k >= 2) fit(m + k, t + k, j - k, &out->big_alpha, &out->big_beta);
    else if (n - k >= 2) fit(m + k, t + k, n - k, &out->big_alpha, &out->big_beta);
    if (k < 2) out->alpha = out->big_alpha, out->beta = out->big_beta;
    if (n - k < 2) out->big_alpha = out->alpha, out->big_beta = out->beta;
    out->mem_alpha = out->big_alpha;
    if (n - j >= 1) {
        /* Few points far from zero: keep the in-cache intercept (the
         * per-message cost does not depend on where the data is), fit the
         * slope. */
        double mk[32], te[32];
        for (int i = j; i < n; i++) {
            double tk, te_;
            mem_terms(f, m[i], &tk, &te_);
            mk[i - j] = m[i] * tk, te[i - j] = t[i] - m[i] * te_;
        }
        /* Not clamped to big_beta: the price is never below the in-cache
         * rate anyway (xc__m_mem_beta), and a clamped slope multiplied by
         * the tier priced fresh exchanges beyond the cache at 2.5x. */
        out->mem_beta = slope(mk, te, n - j, out->mem_alpha);
        if (out->mem_beta < 0) out->mem_beta = 0;
    } else {
        out->mem_beta = -1; /* derived from memcpy by xc__measure */
    }
}

/* The same with the split at big_from (m ascending): a line per regime,
 * below big_from; from there while both buffers fit the cache; beyond the
 * cache (derived later if not measured). */
static void fit_line(const fit_ctx_t *f, const double *m, const double *t, int n, double big_from,
                     double cache, xc__line_t *out)
{
    int k = 0;
    while (k < n && m[k] < big_from) k++;
    fit_line_k(f, m, t, n, k, cache, out);
}

/* What the fitted lines predict for m bytes (mem_beta < 0: not fitted). */
static double line_at(const fit_ctx_t *f, const xc__line_t *l, double big_from, double cache,
                      double m)
{
    if (m < big_from) return l->alpha + m * l->beta;
    if (2 * m <= cache || l->mem_beta < 0) return l->big_alpha + m * l->big_beta;
    return l->mem_alpha + m * xc__m_mem_beta(f->lad, f->lc, l, 2 * m);
}

/* Sum of squared relative errors of one pattern's lines fitted with this
 * split, over every size. */
static double split_error(const fit_ctx_t *f, const double *m, const double *t, int n,
                          double big_from, double cache)
{
    double e = 0;
    xc__line_t l;
    fit_line(f, m, t, n, big_from, cache, &l);
    for (int i = 0; i < n; i++) {
        double r = t[i] > 0 ? (line_at(f, &l, big_from, cache, m[i]) - t[i]) / t[i] : 0;
        e += r * r;
    }
    return e;
}

/* Where a TCP link's per-message regime ends and its bandwidth regime
 * starts: no protocol switch marks it, and on a shaped link the time
 * bends sharply where messages stop fitting the burst, so the split is
 * the one whose two lines fit best (between two measured sizes, at their
 * geometric mean) for patterns x0 .. x1-1: per pattern between nodes,
 * where an exchange's time bends where the burst runs out and a one-way
 * stream's (measure_link) hardly at all, so one split for both fitted
 * neither. */
static double best_split_of(const fit_ctx_t *f, const double *m, double t[][32], int x0, int x1,
                            int n, double cache)
{
    double best = 0, best_e = DBL_MAX;
    for (int k = 2; k + 2 <= n; k++) {
        double from = sqrt(m[k - 1] * m[k]), e = 0;
        for (int x = x0; x < x1; x++) e += split_error(f, m, t[x], n, from, cache);
        if (e < best_e) best_e = e, best = from;
    }
    return best;
}

static double best_split(const fit_ctx_t *f, const double *m, double t[][32], int x, int n,
                         double cache)
{
    return best_split_of(f, m, t, x, x + 1, n, cache);
}

/* One split for every pattern: the least error summed over them. */
static double best_split_all(const fit_ctx_t *f, const double *m, double t[][32], int n,
                             double cache)
{
    return best_split_of(f, m, t, 0, XC__XFER_COUNT, n, cache);
}

/* Where a staged way (through a ring or the slots) stops leading single
 * copy: of the n sizes m (ascending) timed both ways, `staged` and `cma`,
 * the first at which staging no longer leads by FLOOR_LEAD, interpolated
 * from the size before; `from` where it does not lead at the first;
 * `beyond` where it leads at every one.  The point-to-point threshold
 * (measure_link; beyond: the last size, nothing was measured past it) and
 * the 2-rank all-to-all's floor (measure_all; beyond: twice the last
 * block).  On the AMD EPYC VM of the thirty-sixth session a
 * process_vm_readv cost ~2 us plus ~0.25 us a page, and a 2-rank send/recv
 * of 8 / 32 / 64 KiB took 4.5 / 5.7 / 6.7 us single copy against 0.6 / 1.6
 * / 3.2 through the ring; the Intel host of the earlier sessions led single
 * copy from 8 KiB (1.68 against 2.24 us). */
double xc__lead_end(const double *m, const double *staged, const double *cma, int n, double from,
                    double beyond)
{
    double v = from;
    for (int i = 0; i < n; i++) {
        double lead = cma[i] - FLOOR_LEAD * staged[i];
        if (!(staged[i] > 0 && lead > 0)) break;
        if (i + 1 == n) {
            v = beyond;
            break;
        }
        /* Both times affine in the size: the lead, too, between two sizes
         * (where it ends, in whole pages). */
        double next = cma[i + 1] - FLOOR_LEAD * staged[i + 1];
        v = m[i + 1];
        if (next <= 0 && staged[i + 1] > 0)
            v = ceil((m[i] + (m[i + 1] - m[i]) * lead / (lead - next)) / 4096) * 4096;
    }
    return v;
}

/* Both patterns of the link between rank 0 and rank q (only they take
 * part).  big_from < 0: a TCP link (its own big sizes, the split fitted).
 * stream: a link between nodes, whose one-way time is the slower of a
 * ping-pong's half round trip (latency) and a stream's per message
 * (sustained rate: on a shaped link, ping-pongs below the burst run at
 * the veth's speed while back-to-back collectives get the shaped rate). */
static xc_result_t measure_link(xc_comm_t *comm, int q, double big_from, int stream,
                                const plan_t *pl, const xc__profile_t *lad, int lc,
                                xc__link_params_t *out)
{
    const fit_ctx_t f = {lad, lc};
    if (comm->rank != 0 && comm->rank != q) return XC_OK;
    /* The channels' rings mapped first: their first lap's page faults
     * are paid once per communicator, and timed they priced every
     * exchange from 1 to 32 KiB (fitted through a 4 KiB one at 5.4-6.3 us
     * against 0.5-0.7; forty-eighth session). */
    if (lc == XC__LINK_SHM) xc__chan_prefault(comm, comm->rank == 0 ? q : 0);
    const size_t *bigs = big_from < 0 ? pl->tcp_big : pl->big;
    int ns = count_sizes(pl->small), nb = count_sizes(bigs);
    size_t max = bigs[nb - 1];
    /* Shared-memory channels with single copy: the small sizes are timed
     * through the ring (the rendezvous held off), the big ones single-copy,
     * and each line is fitted to its own points.  The eager line then
     * prices what goes through a ring -- messages below big_from, and the
     * shared-memory collectives' staged moves (cost_shm.c's xfer) -- from
     * ring copies up to the first big size, not from two points under the
     * point-to-point threshold (8 KiB: its slope took the small frames'
     * per-line cost, 2-3x the ring's copy rate, and priced a 32 KiB
     * allgather.shm at 6.8 us against 4.0 measured). */
    int ring_small = big_from > 0 && comm->cma && comm->chans;
    size_t p2p_min = comm->p2p_cma_min;
    /* ... and the small sizes from the point-to-point threshold on are timed
     * single-copy too, for the big line: it prices them (big_from is that
     * threshold), and fitted only from the first big size on its intercept
     * was what a line through 64 KiB-1 MiB extrapolated (fresh one-way 4.1
     * us against 2.6 measured at 8 KiB: a 2-rank bcast.chain of 8 KiB priced
     * at 6.2 us against 2.6). */
    int dual[32], nd = 0;
    /* ... and the big sizes up to RING_PROBE_MAX through the ring, where
     * the threshold is auto: it is where the ring stops leading
     * (lead_end).  On a crowded node too, from XC__P2P_CMA_CROWDED_LO
     * (the caller's big_from), its result held between that and
     * XC__P2P_CMA_CROWDED_HI: the pair's times there are taken while the
     * others wait, and on the AMD EPYC VM (uncrowded) put the ring ahead
     * at 64 KiB, where crowded a 4-rank send/recv took 59 us through the
     * ring against 41 single copy (xc__comm_set_p2p_cma_min). */
    int rbig[32], nr = 0;
    int search = ring_small && comm->cfg.shm_p2p_cma_min_kb < 0;
    double fit_from = ring_small ? (double)bigs[0] : big_from;
    double copy_from = big_from < 0 ? (double)bigs[0] : fit_from;
    char *buf = malloc(2 * max);
    double m[32], t[XC__XFER_COUNT][32];
    if (!buf) return xc__err(XC_ERR_NOMEM, "out of memory measuring the cost model");
    /* Real pages: untouched memory reads as the shared zero page, which
     * single-copy reads would find in the cache. */
    memset(buf, 0x3c, 2 * max);
    xc_result_t rc = XC_OK;
    int n = ns + nb, ser = pl->bench_stat ? SERIES : 1;
    double tp[SERIES][XC__XFER_COUNT][32] = {{{0}}}, ts[SERIES][XC__XFER_COUNT][32] = {{{0}}};
    double td[SERIES][XC__XFER_COUNT][32] = {{{0}}}, tdm[XC__XFER_COUNT][32];
    double tr[SERIES][XC__XFER_COUNT][32] = {{{0}}}, trm[XC__XFER_COUNT][32];
    for (int i = 0; i < n; i++) m[i] = (double)(i < ns ? pl->small[i] : bigs[i - ns]);
    for (int i = 0; ring_small && i < ns; i++)
        if (m[i] >= big_from) dual[nd++] = i;
    for (int i = ns; search && i < n; i++)
        if (m[i] <= RING_PROBE_MAX) rbig[nr++] = i;
    for (int s = 0; s < ser && rc == XC_OK; s++) {
        for (int i = 0; i < n && rc == XC_OK; i++) {
            size_t sz = (size_t)m[i];
            int reps = i < ns ? pl->reps_small : pl->reps_big;
            if (ring_small) comm->p2p_cma_min = i < ns ? SIZE_MAX : p2p_min;
            for (int x = XC__XFER_COUNT - 1; x >= 0 && rc == XC_OK; x--) {
                /* Quick run: below big_from the channels copy through their
                 * rings anyway, so fresh data costs what clean data does
                 * (TCP: below its big sizes, the kernel copies). */
                if (!pl->bench_stat && x >= XC__ONEWAY_FRESH && m[i] < copy_from) continue;
                rc = time_series(comm, x, 0, q, buf, sz, reps, pl->bench_stat, &tp[s][x][i]);
                if (rc != XC_OK || !stream || (x != XC__ONEWAY && x != XC__ONEWAY_FRESH)) continue;
                rc = time_stream(comm, x, 0, q, buf, sz, reps, pl->stream_bytes, &ts[s][x][i]);
            }
        }
        comm->p2p_cma_min = p2p_min;
        for (int d = 0; d < nd && rc == XC_OK; d++)
            for (int x = XC__XFER_COUNT - 1; x >= 0 && rc == XC_OK; x--)
                rc = time_series(comm, x, 0, q, buf, (size_t)m[dual[d]], pl->reps_small,
                                 pl->bench_stat, &td[s][x][d]);
        comm->p2p_cma_min = SIZE_MAX;
        for (int r = 0; r < nr && rc == XC_OK; r++)
            for (int x = XC__XFER_COUNT - 1; x >= 0 && rc == XC_OK; x--)
                rc = time_series(comm, x, 0, q, buf, (size_t)m[rbig[r]], pl->reps_big,
                                 pl->bench_stat, &tr[s][x][r]);
        comm->p2p_cma_min = p2p_min;
    }
    for (int i = 0; i < n; i++) {
        for (int x = 0; x < XC__XFER_COUNT; x++) {
            double a[SERIES], b[SERIES];
            for (int s = 0; s < ser; s++) a[s] = tp[s][x][i], b[s] = ts[s][x][i];
            double p = median(a, ser), st = median(b, ser);
            t[x][i] = st > p ? st : p;
        }
        if (!pl->bench_stat && m[i] < copy_from) {
            t[XC__ONEWAY_FRESH][i] = t[XC__ONEWAY][i];
            t[XC__EXCHANGE_FRESH][i] = t[XC__EXCHANGE][i];
        }
    }
    for (int x = 0; x < XC__XFER_COUNT; x++) {
        double a[SERIES];
        for (int d = 0; d < nd; d++) {
            for (int s = 0; s < ser; s++) a[s] = td[s][x][d];
            tdm[x][d] = median(a, ser);
        }
        for (int r = 0; r < nr; r++) {
            for (int s = 0; s < ser; s++) a[s] = tr[s][x][r];
            trm[x][r] = median(a, ser);
        }
    }
    comm->p2p_cma_min = p2p_min;
    free(buf);
    if (rc != XC_OK || comm->rank != 0) return rc;
    for (int i = 0; i < n; i++)
        XC_TRACE("cost model: %.0f B with rank %d: one way %.2f us, exchange %.2f us, "
                 "fresh: %.2f us, %.2f us", m[i], q, t[XC__ONEWAY][i] * 1e6,
                 t[XC__EXCHANGE][i] * 1e6, t[XC__ONEWAY_FRESH][i] * 1e6,
                 t[XC__EXCHANGE_FRESH][i] * 1e6);
    for (int d = 0; d < nd; d++)
        XC_TRACE("cost model: %.0f B with rank %d single-copy: one way %.2f us, exchange "
                 "%.2f us, fresh: %.2f us, %.2f us", m[dual[d]], q, tdm[XC__ONEWAY][d] * 1e6,
                 tdm[XC__EXCHANGE][d] * 1e6, tdm[XC__ONEWAY_FRESH][d] * 1e6,
                 tdm[XC__EXCHANGE_FRESH][d] * 1e6);
    for (int r = 0; r < nr; r++)
        XC_TRACE("cost model: %.0f B with rank %d through the ring: one way %.2f us, exchange "
                 "%.2f us, fresh: %.2f us, %.2f us", m[rbig[r]], q, trm[XC__ONEWAY][r] * 1e6,
                 trm[XC__EXCHANGE][r] * 1e6, trm[XC__ONEWAY_FRESH][r] * 1e6,
                 trm[XC__EXCHANGE_FRESH][r] * 1e6);
    if (search) {
        /* The sizes timed both ways, ascending: the small ones from the
         * configured threshold, then the big ones the ring was timed at;
         * per size the two patterns of a reused buffer summed, and the two
         * of a fresh one.  The threshold is the smaller of theirs: through
         * the ring only where it leads both (fresh data favours the ring:
         * 2 ranks, send/recv of 128 KiB 12 us through it against 15 single
         * copy, reused 11.5 against 7.4-9.5). */
        double sm[64], ring[2][64], cma[2][64];
        int k = 0;
        for (int i = 0; i < nd + nr; i++, k++) {
            int d = i < nd, j = d ? dual[i] : rbig[i - nd];
            sm[k] = m[j];
            for (int f2 = 0; f2 < 2; f2++) {
                int x1 = f2 ? XC__ONEWAY_FRESH : XC__ONEWAY;
                int x2 = f2 ? XC__EXCHANGE_FRESH : XC__EXCHANGE;
                ring[f2][k] = d ? t[x1][j] + t[x2][j] : trm[x1][i - nd] + trm[x2][i - nd];
                cma[f2][k] = d ? tdm[x1][i] + tdm[x2][i] : t[x1][j] + t[x2][j];
            }
        }
        double reused = k ? xc__lead_end(sm, ring[0], cma[0], k, big_from, sm[k - 1]) : big_from;
        double fresh = k ? xc__lead_end(sm, ring[1], cma[1], k, big_from, sm[k - 1]) : big_from;
        XC_TRACE("cost model: point-to-point through the ring up to %.0f B (a reused buffer) / "
                 "%.0f B (a fresh one), configured %.0f",
                 reused, fresh, big_from);
        big_from = reused < fresh ? reused : fresh;
        if (comm->oversub) big_from = (double)xc__p2p_crowded_hold(big_from);
    }
    double cache = cache_size();
    /* TCP: the split fitted, per pattern between nodes (the one-way times
     * there come from streams, which hardly bend), for all patterns at
     * once on loopback (ping-pongs and exchanges bend alike; fitted per
     * pattern, the one-way split landed at 2 MiB and priced
     * bcast.chain's 256 KiB segments at a third of their time). */
    if (big_from < 0 && !stream) big_from = best_split_all(&f, m, t, n, cache);
    for (int x = 0; x < XC__XFER_COUNT; x++) {
        double from = big_from < 0 ? best_split(&f, m, t, x, n, cache) : fit_from;
        if (nd > 0) {
            /* The ring's points below, the single-copy ones above. */
            double mm[64], tt[64];
            int nn = 0;
            for (int i = 0; i < ns; i++) mm[nn] = m[i], tt[nn++] = t[x][i];
            for (int d = 0; d < nd; d++) mm[nn] = m[dual[d]], tt[nn++] = tdm[x][d];
            for (int i = ns; i < n; i++) mm[nn] = m[i], tt[nn++] = t[x][i];
            fit_line_k(&f, mm, tt, nn, ns, cache, &out->line[x]);
        } else {
            fit_line(&f, m, t[x], n, from, cache, &out->line[x]);
        }
        out->line[x].big_from = big_from < 0 ? from : 0;
        /* The points below the bandwidth regime (on the channels with
         * single copy: the ring's, up to the rendezvous threshold). */
        out->npts[x] = 0;
        for (int i = 0; i < (ring_small ? ns : n) && out->npts[x] < XC__LINK_PTS; i++) {
            if (ring_small ? m[i] > big_from : m[i] >= from) continue;
            out->pts[x][out->npts[x]][0] = m[i];
            out->pts[x][out->npts[x]++][1] = t[x][i];
        }
        for (int r = 0; r < nr && m[rbig[r]] <= big_from && out->npts[x] < XC__LINK_PTS; r++) {
            out->pts[x][out->npts[x]][0] = m[rbig[r]];
            out->pts[x][out->npts[x]++][1] = trm[x][r];
        }
    }
    /* The link's own split (lines without one use it): the exchange's. */
    out->big_from = big_from < 0 ? out->line[XC__EXCHANGE].big_from : big_from;
    return XC_OK;
}

/* Beyond the cache without measurements: the in-cache line plus what one
 * more pass over memory costs per byte (memcpy beyond vs within the cache). */
static void derive_mem(xc__profile_t *p)
{
    double extra = p->copy_mem - p->copy_cache;
    for (int l = 0; l < XC__LINK_COUNT; l++)
        for (int x = 0; x < XC__XFER_COUNT; x++) {
            xc__line_t *ln = &p->link[l].line[x];
            if (ln->mem_beta < 0) ln->mem_beta = ln->big_beta + (extra > 0 ? extra : 0);
        }
}

/* A series of barriers or collectives: `warm` untimed calls, then `reps`
 * timed; `bench`: the calibration's statistic (stat()). */
typedef struct series {
    int reps, warm, bench;
} series_t;

/* The staged round's probe: 1 KiB, past the flagged lines (shm.h). */
#define STAGE_COUNT 256
#define LINES_COUNT 32 /* 128 bytes: three flagged lines */
_Static_assert(LINES_COUNT * 4 > XC__SHM_LL_LINE0 && LINES_COUNT * 4 <= XC__SHM_LL_MAX,
               "the lines probe must need more than one flagged line and no slot");
_Static_assert(STAGE_COUNT * 4 > XC__SHM_LL_MAX, "the staged-round probe must use the slots");
/* The schedule call's probe: 64 bytes, a frame of more than one channel
 * line (see its use). */
#define SCHED_PROBE 16
/* The collective algorithm `algo` belongs to (the registry's). */
static xc_coll_t coll_of(int algo)
{
    const xc__algo_t *a = xc__algo_by_id(algo);
    return a ? a->coll : XC_COLL_ALLREDUCE;
}

/* One series of an int32 all-reduce (or reduce or broadcast, root 0) of
 * `count` elements by algorithm `algo` (forced on every rank: nothing else
 * runs on the communicator meanwhile; an integer sum: allowed in
 * deterministic mode too); stat() of its times (time_probes repeats it). */
static xc_result_t time_call_once(xc_comm_t *comm, int algo, size_t count, const series_t *se,
                                  double *out)
{
    int reps = se->reps;
    double *t = malloc(2 * (size_t)reps * sizeof *t + 2 * (count + 1) * sizeof(int32_t));
    double *u = t ? t + reps : NULL;
    if (!t) return xc__err(XC_ERR_NOMEM, "out of memory measuring the cost model");
    int32_t *x = (int32_t *)(t + 2 * reps), *y = x + count + 1;
    xc_coll_t coll = coll_of(algo);
    int saved = comm->forced_algo[coll];
    comm->forced_algo[coll] = algo;
    xc_result_t rc = XC_OK;
    fresh_spin(comm);
    int rooted = comm->shm && (algo == XC__ALGO_SHM_BCAST ||
                               (algo == XC__ALGO_SHM_REDUCE &&
                                xc__shm_reduce_in_ring(comm, count * sizeof(int32_t))));
    int warm = ring_warm(comm, rooted, count, sizeof(int32_t), se->warm);
    for (int i = -warm; i < reps && rc == XC_OK; i++) {
        /* As xcoll-perf --fresh times a call (the regime the model
         * prices, docs/cost-model.md): the input just written, the ranks
         * met at a barrier (untimed).  Back to back, the calls pipeline: a
         * 64-byte allreduce.shm ran 0.25 us so against 0.45-0.47 after a
         * barrier, allreduce.rd 0.87-0.88 against 0.59-0.76 (twenty-second
         * session). */
        for (size_t k = 0; k < count; k++) x[k] = (int32_t)(i & 7);
        rc = xc_barrier(comm);
        if (rc != XC_OK) break;
        double t0 = now_s();
        rc = coll == XC_COLL_REDUCE  ? xc_reduce(x, y, count, XC_INT32, XC_SUM, 0, comm)
             : coll == XC_COLL_BCAST ? xc_bcast(x, count, XC_INT32, 0, comm)
                                     : xc_allreduce(x, y, count, XC_INT32, XC_SUM, comm);
        if (i >= 0) t[i] = now_s() - t0;
    }
    comm->forced_algo[coll] = saved;
    if (rc == XC_OK && se->bench) rc = xc_allreduce(t, u, (size_t)reps, XC_FLOAT64, XC_MAX, comm);
    if (rc == XC_OK) *out = stat(t, u, reps, se->bench);
    free(t);
    return rc;
}

typedef struct call_arg {
    int algo;
    size_t count;
    const series_t *se;
} call_arg_t;

static xc_result_t call_once(xc_comm_t *comm, const void *arg, double *out)
{
    const call_arg_t *a = arg;
    return time_call_once(comm, a->algo, a->count, a->se, out);
}

/* time_call_once, each way where the runtime chooses: the faster. */
static xc_result_t time_call(xc_comm_t *comm, int algo, size_t count, const series_t *se,
                             double *out)
{
    call_arg_t a = {algo, count, se};
    return fastest_way(comm, probe_ways(comm, coll_of(algo), count * sizeof(int32_t)), call_once, &a,
                       out);
}

/* Probes of the collectives: an algorithm, a count, where its time goes. */
typedef struct probe {
    int algo;
    size_t count;
    double *t;
} probe_t;
#define MAX_PROBES 10

/* Every probe timed in SERIES sweeps over all of them (the calibration;
 * one for the quick run), each keeping the median of its series: the
 * host switches between modes on a scale of seconds, and three series
 * of one probe in a row, of which the calibration kept the fastest until
 * the twenty-second session, all landed in one -- its schedule call read
 * 0.11-0.53 us between calibrations minutes apart. */
static xc_result_t time_probes(xc_comm_t *comm, const probe_t *pr, int n, const series_t *se)
{
    int ser = se->bench ? SERIES : 1;
    double v[MAX_PROBES][SERIES];
    for (int s = 0; s < ser; s++)
        for (int i = 0; i < n; i++) XC_CHECK(time_call(comm, pr[i].algo, pr[i].count, se, &v[i][s]));
    for (int i = 0; i < n; i++) *pr[i].t = median(v[i], ser);
    return XC_OK;
}

/* A term of the profile measured as what a call of `count` int32 by
 * `algo` (time_call's) took (t seconds) beyond the model's prediction for
 * it without the term; `fallback` when the prediction is not below t. */
static double excess(xc_comm_t *comm, xc__profile_t *p, double *term, int algo, size_t count,
                     double t, double fallback)
{
    xc__model_topo_t topo;
    xc__model_topo_of(comm, &topo);
    xc__model_call_t call = {coll_of(algo), count, XC_INT32, XC_SUM, 0};
    *term = 0;
    double rest = xc__model_predict(p, &topo, algo, &call);
    XC_TRACE("cost model: %s of %zu int32 took %.2f us, the model without the term %.2f us",
             xc_algo_name(algo), count, t * 1e6, rest * 1e6);
    return rest >= 0 && t > rest ? t - rest : fallback;
}

/* The model's price of a 16-element (SCHED_PROBE) all-reduce by `algo`
 * with the intra-node link's round_delta at `d`. */
static double probe_price(xc_comm_t *comm, xc__profile_t *p, int lc, int algo, double d)
{
    xc__model_topo_t topo;
    xc__model_topo_of(comm, &topo);
    xc__model_call_t call = {XC_COLL_ALLREDUCE, SCHED_PROBE, XC_INT32, XC_SUM, 0};
    p->link[lc].round_delta = d;
    return xc__model_predict(p, &topo, algo, &call);
}

/* A schedule's round on link class `lc` against the link's lines (its
 * round_delta): allreduce.ring and allreduce.rd of SCHED_PROBE elements
 * took t_ring and t_rd; their prices without the term differ by as many
 * rounds as the prices' derivatives in the term do (2(N-1) against
 * log2 N, and a non-power-of-two's fold), the call's own cost cancels.
 * The lines are measured with point-to-point calls (a group send and
 * receive each, ~1600 instructions), which a schedule's round does not
 * make: on the Intel VM of the twenty-second session an exchange took
 * 0.42-0.44 us, a round of allreduce.ring 0.27-0.34, and every schedule
 * algorithm of more than one round was priced 25-50 % high at 8-128 B. */
static double round_delta(xc_comm_t *comm, xc__profile_t *p, int lc, double t_rd, double t_ring)
{
    double rd0 = probe_price(comm, p, lc, XC__ALGO_ALLREDUCE_RD, 0);
    double ring0 = probe_price(comm, p, lc, XC__ALGO_ALLREDUCE_RING, 0);
    double us = 1e-6;
    double k_rd = (probe_price(comm, p, lc, XC__ALGO_ALLREDUCE_RD, us) - rd0) / us;
    double k_ring = (probe_price(comm, p, lc, XC__ALGO_ALLREDUCE_RING, us) - ring0) / us;
    p->link[lc].round_delta = 0;
    if (rd0 < 0 || ring0 < 0 || k_ring - k_rd < 0.5) return 0;
    double d = ((t_ring - ring0) - (t_rd - rd0)) / (k_ring - k_rd);
    /* A round costs at least half its lines' price: one slow probe (an
     * allreduce.rd of 1.04 us where other starts took 0.57, as long as
     * the ring's two rounds) made a round -0.42 us, all but free, and
     * moved the 2-rank 1 KiB all-reduce to allreduce.tree (1.55-1.6 us
     * against allreduce.shm's 0.95) in one start of three. */
    double lowest = -0.5 * (ring0 - rd0) / (k_ring - k_rd);
    int floored = d < lowest;
    if (floored) d = lowest;
    XC_TRACE("cost model: allreduce.rd / ring of %d int32 took %.2f / %.2f us, priced %.2f / "
             "%.2f without the call; a round %+.3f us against the link's lines%s",
             SCHED_PROBE, t_rd * 1e6, t_ring * 1e6, rd0 * 1e6, ring0 * 1e6, d * 1e6,
             floored ? " (at its floor)" : "");
    return d;
}

/* A take rate of the profile (`*rate`: shm_take, shm_take_big or
 * shm_take_pipe) from a reduce.shm of `count` int32 that took t: its price
 * is linear in the rate where the read is slower than the reduction (1000
 * and 2000 ps/B are), so the rate that prices it at t lies on the line
 * through those two (which may be negative: the rest of the price is
 * more than t); 0 when the call cannot be priced. */
static double solve_take(xc_comm_t *comm, xc__profile_t *p, double *rate, size_t count, double t)
{
    xc__model_topo_t topo;
    xc__model_topo_of(comm, &topo);
    xc__model_call_t call = {XC_COLL_REDUCE, count, XC_INT32, XC_SUM, 0};
    double r1 = 1e-9, r2 = 2e-9;
    *rate = r1;
    double p1 = xc__model_predict(p, &topo, XC__ALGO_SHM_REDUCE, &call);
    *rate = r2;
    double p2 = xc__model_predict(p, &topo, XC__ALGO_SHM_REDUCE, &call);
    *rate = 0;
    double r = p1 >= 0 && p2 > p1 ? r1 + (t - p1) * (r2 - r1) / (p2 - p1) : 0;
    XC_TRACE("cost model: reduce.shm of %zu int32 took %.2f us: a staged chunk taken at %.1f ps/B",
             count, t * 1e6, r * 1e12);
    return r;
}

/* Calls per timed sample of a local pass over `bytes`: enough for a
 * sample of ~256 KiB of traffic (a few microseconds), since a single
 * 16 KiB pass takes 150-300 ns -- a few ticks of the clock and its own
 * overhead -- and its median moved by 1.4x between calibrations. */
static int batch_of(size_t bytes)
{
    size_t k = bytes ? ((size_t)256 << 10) / bytes : 1;
    return k < 1 ? 1 : k > 64 ? 64 : (int)k;
}

/* Median seconds per byte of memcpy of `bytes` (src and dst touched first). */
static double time_copy(char *dst, const char *src, size_t bytes, int reps)
{
    double t[64];
    int k = batch_of(bytes);
    if (reps > 64) reps = 64;
    memcpy(dst, src, bytes);
    for (int i = 0; i < reps; i++) {
        double t0 = now_s();
        for (int j = 0; j < k; j++) memcpy(dst, src, bytes);
        t[i] = (now_s() - t0) / k;
    }
    return median(t, reps) / (double)bytes;
}

static double time_reduce(char *dst, const char *a, const char *b, size_t bytes, xc_dtype_t d,
                          xc_op_t op, int reps)
{
    double t[64];
    size_t count = bytes / xc__dtype_size(d);
    int k = batch_of(bytes);
    if (reps > 64) reps = 64;
    xc__reduce2(dst, a, b, count, d, op);
    for (int i = 0; i < reps; i++) {
        double t0 = now_s();
        for (int j = 0; j < k; j++) xc__reduce2(dst, a, b, count, d, op);
        t[i] = (now_s() - t0) / k;
    }
    return median(t, reps) / (double)(count * xc__dtype_size(d));
}

/* The compression codecs over n cache-resident fp32 values (x, residual
 * res, codes): median seconds per byte of fp32 of the encode with a
 * residual and of the decode-add, block by block as the compressed
 * all-reduce runs them. */
static void measure_codecs(const plan_t *pl, float *x, float *res, char *codes, size_t n,
                           xc__profile_t *p)
{
    for (size_t i = 0; i < n; i++) x[i] = (float)((double)(i % 1000) * 1e-3 - 0.5), res[i] = 0;
    size_t nb = n / XC_COMPRESS_BLOCK, B = XC_COMPRESS_BLOCK;
    float scales[64];
    if (nb > 64) nb = 64;
    if (nb == 0) return;
    int reps = pl->gamma_reps < 31 ? pl->gamma_reps : 31;
    double t[31];
    for (int f = XC_COMPRESS_FP16; f < XC_COMPRESS_COUNT; f++) {
        size_t bb = xc__codec_block_bytes((xc_compress_t)f);
        for (int w = 0; w < 2; w++) {
            for (int i = 0; i < reps; i++) {
                double t0 = now_s();
                for (size_t b = 0; b < nb; b++) {
                    if (w == 0)
                        xc__codec_encode((xc_compress_t)f, x + b * B, B, codes + b * bb,
                                         &scales[b], res + b * B);
                    else
                        xc__codec_decode((xc_compress_t)f, codes + b * bb,
                                         xc__codec_scaled((xc_compress_t)f) ? scales[b] : 1.0f, B,
                                         res + b * B, 1);
                }
                t[i] = now_s() - t0;
            }
            p->codec[f][w] = median(t, reps) / (double)(nb * B * sizeof(float));
        }
    }
}

/* memcpy and gamma, on this rank. */
static xc_result_t measure_host(const plan_t *pl, xc__profile_t *p)
{
    static const xc_op_t rep_op[XC__GOP_COUNT] = {XC_SUM, XC_PROD, XC_MAX};
    p->cache_bytes = cache_size();
    /* Beyond the cache: buffers of twice the cache-resident working set
     * (src + dst four times it: fully out of the cache, xc__m_mem). */
    size_t big = 2 * (size_t)p->cache_bytes, small = pl->gamma_bytes;
    size_t nbig = pl->gamma_mem ? 3 : 2;
    char *mem = malloc(nbig * big), *sm = malloc(3 * small);
    if (!mem || !sm) {
        free(mem);
        free(sm);
        return xc__err(XC_ERR_NOMEM, "out of memory measuring the cost model");
    }
    /* 0x3c bytes are normal numbers near 1 or 0.01 in every float type:
     * no NaN, infinity or denormal takes a slow path. */
    memset(sm, 0x3c, 3 * small);
    /* The sources; a destination is faulted in by the untimed first copy
     * (half the page faults of the quick run's few milliseconds). */
    double f0 = now_s();
    memset(mem, 0x3c, small * 32); /* fresh pages: faults and zeroing */
    double f1 = now_s();
    memset(mem, 0x3c, small * 32); /* the same pages again */
    double f2 = now_s();
    p->fault = ((f1 - f0) - (f2 - f1)) / (double)(small * 32);
    if (p->fault < 0) p->fault = 0;
    memset(mem, 0x3c, big);
    if (nbig > 2) memset(mem + big, 0x3c, (nbig - 1) * big);
    uint64_t t0 = xc__now_ns();
    p->copy_cache = time_copy(sm + small, sm, small, pl->copy_reps);
    p->copy_mem = time_copy(mem + big, mem, big, pl->gamma_mem ? pl->copy_reps : 3);
    p->ladder[0][0] = 2 * (double)big;
    p->ladder[0][1] = p->copy_mem;
    p->nladder = 1;
    /* Larger working sets, while the plan asks: memory beyond the last
     * cache level may be much slower than just beyond the per-core one. */
    for (size_t sz = 4 * big; sz <= pl->ladder_max && p->nladder < XC__LADDER_MAX; sz *= 4) {
        char *x = malloc(2 * sz);
        if (!x) break;
        memset(x, 0x3c, 2 * sz);
        p->ladder[p->nladder][0] = 2 * (double)sz;
        p->ladder[p->nladder][1] = time_copy(x + sz, x, sz, 5);
        p->nladder++;
        free(x);
    }
    uint64_t t1 = xc__now_ns();
    for (int d = 0; d < XC_DTYPE_COUNT; d++) {
        for (int g = 0; g < XC__GOP_COUNT; g++) {
            double *gm = p->gamma[d][g];
            gm[0] = time_reduce(sm + 2 * small, sm, sm + small, small, (xc_dtype_t)d, rep_op[g],
                                pl->gamma_reps);
            if (pl->gamma_mem)
                gm[1] = time_reduce(mem + 2 * big, mem, mem + big, big, (xc_dtype_t)d,
                                    rep_op[g], 3);
            else
                gm[1] = gm[0] > 1.5 * p->copy_mem ? gm[0] : 1.5 * p->copy_mem;
        }
    }
    uint64_t t2 = xc__now_ns();
    measure_codecs(pl, (float *)sm, (float *)(sm + small), (char *)(sm + 2 * small),
                   small / sizeof(float), p);
    XC_TRACE("cost model: memcpy %.2f ms, reductions %.2f ms, codecs %.2f ms",
             (double)(t1 - t0) * 1e-6, (double)(t2 - t1) * 1e-6,
             (double)(xc__now_ns() - t2) * 1e-6);
    free(mem);
    free(sm);
    return XC_OK;
}

/* First rank on rank 0's node (same_node) or off it, other than 0; -1. */
/* The cold-call term (model.h): an fp32 sum all-reduce of 64 KiB and of
 * 1 MiB, the selector's algorithm, timed back to back and after every
 * rank slept COLD_PAUSE_MS (then a barrier, as a step's compute ends
 * unevenly); the extra of each size fitted as a line in the working set
 * (2 x the buffer).  `xc_mem`: the buffers of each size from xc_mem_alloc
 * (the 1 MiB ones on huge pages), else one malloc'd block.  Every rank
 * takes part; rank 0 keeps the result. */
#define COLD_PAUSE_MS 50
#define COLD_REPS 9
static xc_result_t measure_cold(xc_comm_t *comm, int xc_mem, double *alpha, double *beta)
{
    static const size_t sizes[2] = {64 << 10, 1 << 20};
    char *buf = xc_mem ? NULL : malloc(2 * sizes[1]);
    double t[2 * 16], u[2 * 16], extra[2] = {0, 0};
    if (!xc_mem && !buf) return xc__err(XC_ERR_NOMEM, "out of memory measuring the cost model");
    if (buf) memset(buf, 0x3c, 2 * sizes[1]);
    xc_result_t rc = XC_OK;
    for (int s = 0; s < 2 && rc == XC_OK; s++) {
        size_t count = sizes[s] / sizeof(float);
        double hot = 0, cold = 0;
        char *in = buf, *out = buf ? buf + sizes[1] : NULL;
        if (xc_mem) {
            /* Every rank learns of a failed allocation (none waits alone). */
            xc_result_t ar = xc_mem_alloc(sizes[s], (void **)&in);
            if (ar == XC_OK) ar = xc_mem_alloc(sizes[s], (void **)&out);
            int32_t ok = ar == XC_OK;
            rc = xc_allreduce(&ok, &ok, 1, XC_INT32, XC_MIN, comm);
            if (rc == XC_OK && !ok)
                rc = ar != XC_OK ? ar
                                 : xc__err(XC_ERR_NOMEM, "a peer ran out of memory measuring the "
                                                         "cost model's cold calls");
            if (rc == XC_OK) memset(in, 0x3c, sizes[s]), memset(out, 0, sizes[s]);
        }
        for (int i = -3; i < 15 && rc == XC_OK; i++) {
            double t0 = now_s();
            rc = xc_allreduce(in, out, count, XC_FLOAT32, XC_SUM, comm);
            if (i >= 0) t[i] = now_s() - t0;
        }
        if (rc == XC_OK) rc = xc_allreduce(t, u, 15, XC_FLOAT64, XC_MAX, comm);
        if (rc == XC_OK) hot = median(u, 15);
        for (int i = 0; i < COLD_REPS && rc == XC_OK; i++) {
            struct timespec ts = {0, COLD_PAUSE_MS * 1000000L};
            nanosleep(&ts, NULL);
            rc = xc_barrier(comm);
            double t0 = now_s();
            if (rc == XC_OK) rc = xc_allreduce(in, out, count, XC_FLOAT32, XC_SUM, comm);
            t[i] = now_s() - t0;
        }
        if (rc == XC_OK) rc = xc_allreduce(t, u, COLD_REPS, XC_FLOAT64, XC_MAX, comm);
        /* The first quartile: after a pause the times are bimodal here
         * (1 MiB: ~0.45 or ~1 ms, the mode switching with the neighbours'
         * activity); a step's calls meet the lower one. */
        if (rc == XC_OK) cold = quartile(u, COLD_REPS);
        extra[s] = cold > hot ? cold - hot : 0;
        if (xc_mem) xc_mem_free(in), xc_mem_free(out);
    }
    free(buf);
    if (rc != XC_OK || comm->rank != 0) return rc;
    double w0 = 2.0 * (double)sizes[0], w1 = 2.0 * (double)sizes[1];
    double b = (extra[1] - extra[0]) / (w1 - w0);
    if (b < 0) b = 0;
    double a = extra[0] - b * w0;
    if (a < 0) a = 0, b = extra[1] / w1;
    *alpha = a, *beta = b;
    return XC_OK;
}

static int peer_of(const xc_comm_t *comm, int same_node)
{
    for (int r = 1; r < comm->size; r++)
        if ((comm->node_of[r] == comm->node_of[0]) == same_node) return r;
    return -1;
}

static xc_result_t measure_all(xc_comm_t *comm, uint32_t what, int thorough, xc__profile_t *p)
{
    const plan_t *pl = thorough ? &k_full : &k_quick;
    xc__profile_t tmp;
    xc__profile_t *out = comm->rank == 0 ? p : &tmp;
    uint64_t t0 = xc__now_ns();
    int shm_link_from_copy = 0;
    double t_sync = -1, t_stage = -1, t_stage_copy = -1, t_lines = -1, t_rooted = -1, t_take = -1;
    pair_times_t pt = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
    double t_take_big = -1, t_take_pipe = -1;
    /* int32 in a ring entry (the largest chunk a rooted operation
     * stages) and in a slot */
    size_t take_entry = comm->shm ? comm->shm->slot_bytes / XC__SHM_RING / 4 : 0;
    size_t take_slot = comm->shm ? comm->shm->slot_bytes / 4 : 0;
    /* ... and in the take's probe (one chunk: xc__shm_take_probe) */
    size_t take_count =
        comm->shm ? xc__shm_take_probe(comm->shm->slot_bytes, comm->size, comm->oversub) : 0;
    double t_rd = -1, t_ring = -1;
    probe_t pr[MAX_PROBES];
    int np = 0;
    /* Oversubscribed (one node, so every rank agrees): a synchronisation
     * takes as long as the scheduler's turns, whose times scatter widely;
     * a few reps would pick the shm or the schedule algorithms at random. */
    const series_t se = {pl->sync_reps * (comm->nnodes == 1 && comm->oversub ? 6 : 1),
                         pl->sync_warm, pl->bench_stat};
    /* The host first: the links' lines beyond the cache are fitted through
     * memcpy's ladder (fit_line).  The other ranks wait in the first
     * measurement meanwhile. */
    if ((what & XC__HAVE_HOST) && comm->rank == 0) {
        uint64_t t1 = xc__now_ns();
        XC_CHECK(measure_host(pl, out));
        XC_TRACE("cost model: memcpy and gamma measured in %.2f ms",
                 (double)(xc__now_ns() - t1) * 1e-6);
    }
    if ((what & XC__HAVE_SHM) && !comm->shm) {
        /* Several nodes: the channels between node peers, priced from
         * memcpy (no shared-memory collectives, no sync to measure). */
        shm_link_from_copy = 1;
        out->sync_alpha = 0;
        out->sync_per_rank = 0;
    } else if (what & XC__HAVE_SHM) {
        if (comm->chans) {
            /* (a crowded node searches from XC__P2P_CMA_CROWDED_LO: its
             * threshold until then is the highest it may take) */
            size_t saved = comm->p2p_cma_min;
            if (comm->oversub && comm->cfg.shm_p2p_cma_min_kb < 0)
                comm->p2p_cma_min = XC__P2P_CMA_CROWDED_LO;
            double big_from = comm->cma ? (double)comm->p2p_cma_min : 0;
            xc_result_t lrc =
                measure_link(comm, 1, big_from, 0, pl, out, XC__LINK_SHM, &out->link[XC__LINK_SHM]);
            comm->p2p_cma_min = saved;
            XC_CHECK(lrc);
        } else {
            /* No channels (frames go over loopback TCP): the class only
             * prices the shm collectives' single-copy reads; take memcpy's. */
            shm_link_from_copy = 1;
        }
        /* The synchronisation: one exchange of flagged lines, as an
         * 8-byte all-reduce.shm makes it.  Back-to-back barriers, the
         * probe until the twenty-second session, took 0.18-0.20 us where
         * every one-line collective of the grid took 0.20-0.24 after its
         * barrier; and before the warm-up of 200 calls they landed in a
         * slow mode of the host in half the calibrations (0.39 against
         * 0.21 us). */
        pr[np++] = (probe_t){XC__ALGO_SHM_ALLREDUCE, 2, &t_sync};
        /* A staged round's own cost: a 512-byte all-reduce (past the
         * flagged lines, so its data goes through a slot), priced below
         * once the host's figures are in. */
        pr[np++] = (probe_t){XC__ALGO_SHM_ALLREDUCE, STAGE_COUNT, &t_stage};
        /* ... and a staged round that only moves data: a 512-byte
         * broadcast (the reducing collectives' rounds at 512 bytes took
         * 0.1 us more than the all-gather's, all-to-all's, broadcast's). */
        pr[np++] = (probe_t){XC__ALGO_SHM_BCAST, STAGE_COUNT, &t_stage_copy};
        /* A round in several flagged lines: a 128-byte all-reduce. */
        pr[np++] = (probe_t){XC__ALGO_SHM_ALLREDUCE, LINES_COUNT, &t_lines};
        /* A rooted operation in the flagged lines: an 8-byte reduce. */
        pr[np++] = (probe_t){XC__ALGO_SHM_REDUCE, 2, &t_rooted};
        /* A staged chunk taken out of a slot: a reduce of one chunk (on 2
         * uncrowded ranks an 8 KiB piece, on a crowded node 32 KiB: the
         * root takes the other ranks' chunks, xc__shm_reduce_root_reads,
         * agreed: comm->oversub; elsewhere 32 KiB of the chunked reduce's
         * shares; xc__shm_take_probe). */
        if (take_count * 4 <= comm->shm->slot_bytes) {
            pr[np++] = (probe_t){XC__ALGO_SHM_REDUCE, take_count, &t_take};
            /* ... one of two whole ring entries (within an entry the
             * chunks are pieces: xc__shm_rooted_ce), and two slots in a
             * pipeline. */
            if (xc__shm_reduce_root_reads(comm->size, comm->oversub) && take_entry > take_count) {
                pr[np++] = (probe_t){XC__ALGO_SHM_REDUCE, 2 * take_entry, &t_take_big};
                pr[np++] = (probe_t){XC__ALGO_SHM_REDUCE, 2 * take_slot, &t_take_pipe};
            }
        }
        /* The pair's one-shot all-reduce, where the single copy is the
         * alternative (cost_shm.c, xc__model_shm_pair_direct), and that
         * single copy where it may run. */
        if (comm->cma && xc__shm_allreduce_one_shot_all(comm->size, comm->oversub))
            XC_CHECK(pair_probes(comm, &pt));
        XC_TRACE("cost model: shm link measured in %.2f ms",
                 (double)(xc__now_ns() - t0) * 1e-6);
    }
    if (what & XC__HAVE_TCP_NET) {
        int q = peer_of(comm, 0);
        if (q < 0) return xc__err(XC_ERR_INTERNAL, "cost model: no pair across nodes to measure");
        XC_CHECK(measure_link(comm, q, -1, 1, pl, out, XC__LINK_TCP_NET, &out->link[XC__LINK_TCP_NET]));
    }
    if (what & XC__HAVE_TCP_LOCAL) {
        int q = peer_of(comm, 1);
        if (q >= 0)
            XC_CHECK(measure_link(comm, q, -1, 0, pl, out, XC__LINK_TCP_LOCAL,
                                  &out->link[XC__LINK_TCP_LOCAL]));
        else if (what & XC__HAVE_TCP_NET) /* rank 0 alone on its node: loopback ~ network */
            out->link[XC__LINK_TCP_LOCAL] = out->link[XC__LINK_TCP_NET];
        else
            return xc__err(XC_ERR_INTERNAL, "cost model: no same-node TCP pair to measure");
    }
    /* A schedule algorithm's round and its own call cost (select, build
     * with its scratch, queue, complete), one node (one link class):
     * a 16-element allreduce.ring and allreduce.rd, whose rounds differ
     * in number, less what the model predicts for them (round_delta,
     * excess). */
    uint32_t links = what & (XC__HAVE_SHM | XC__HAVE_TCP_LOCAL);
    if (comm->nnodes == 1 && comm->size > 1 && (comm->chans ? (links & XC__HAVE_SHM)
                                                            : (links & XC__HAVE_TCP_LOCAL))) {
        pr[np++] = (probe_t){XC__ALGO_ALLREDUCE_RD, SCHED_PROBE, &t_rd};
        /* The round only on the channels, where the calls' ~0.15 us is a
         * third of an exchange: over loopback TCP it is 3 % of one, within
         * the noise of the difference (-0.8 to +1.4 us a round measured). */
        if (comm->chans) pr[np++] = (probe_t){XC__ALGO_ALLREDUCE_RING, SCHED_PROBE, &t_ring};
    }
    XC_CHECK(time_probes(comm, pr, np, &se));
    if (t_sync >= 0) {
        out->sync_alpha = 0;
        out->sync_per_rank = t_sync / (comm->size - 1);
    }
    if (t_rd >= 0 && comm->rank == 0) {
        if (t_ring >= 0)
            out->link[XC__LINK_SHM].round_delta = round_delta(comm, out, XC__LINK_SHM, t_rd, t_ring);
        out->sched_call = excess(comm, out, &out->sched_call, XC__ALGO_ALLREDUCE_RD, SCHED_PROBE,
                                 t_rd, out->sched_call > 0 ? out->sched_call : 0);
    }
    /* The calibration (one node, several ranks): what a call after a pause
     * costs beyond the same call back to back. */
    if (thorough && comm->nnodes == 1 && comm->size > 1 && (what & XC__HAVE_HOST)) {
        uint64_t t1 = xc__now_ns();
        XC_CHECK(measure_cold(comm, 0, &out->cold_alpha, &out->cold_beta));
        XC_CHECK(measure_cold(comm, 1, &out->cold_huge_alpha, &out->cold_huge_beta));
        out->cold_xcmem = 1;
        XC_TRACE("cost model: cold calls measured in %.2f ms", (double)(xc__now_ns() - t1) * 1e-6);
    }
    if (comm->rank == 0) {
        p->have |= what;
        if (shm_link_from_copy) {
            xc__link_params_t *l = &p->link[XC__LINK_SHM];
            l->big_from = (double)comm->p2p_cma_min;
            for (int x = 0; x < XC__XFER_COUNT; x++) {
                l->line[x] = (xc__line_t){0, p->copy_cache, 0, p->copy_cache, 0, p->copy_mem, 0};
                l->npts[x] = 0;
            }
            l->round_delta = 0;
        }
        derive_mem(p);
        /* After the host's figures: the staged copies and the reduction
         * are priced with them. */
        if (t_lines >= 0)
            p->shm_lines =
                excess(comm, p, &p->shm_lines, XC__ALGO_SHM_ALLREDUCE, LINES_COUNT, t_lines, 0);
        if (t_rooted >= 0)
            p->shm_rooted = excess(comm, p, &p->shm_rooted, XC__ALGO_SHM_REDUCE, 2, t_rooted, 0);
        if (t_stage >= 0)
            p->shm_stage =
                excess(comm, p, &p->shm_stage, XC__ALGO_SHM_ALLREDUCE, STAGE_COUNT, t_stage, 0);
        if (t_stage_copy >= 0)
            p->shm_stage_copy = excess(comm, p, &p->shm_stage_copy, XC__ALGO_SHM_BCAST, STAGE_COUNT,
                                       t_stage_copy, 0);
        /* After the stage term, in turn: each probe's price holds the
         * rates solved before it. */
        if (t_take >= 0) {
            /* A time below the rest of its price (8 ranks on 2 cores: the
             * syncs, priced ranks/cores times over, are more than the whole
             * call took): not measured, the staged reads priced at the
             * channels' rate as before.  Priced as a local copy there, the
             * 8-rank all-to-all of 32 KiB blocks went to alltoall.shm, 213 us
             * against alltoall.pairwise's 136 (twenty-fourth session). */
            double r = solve_take(comm, p, &p->shm_take, take_count, t_take);
            p->shm_take = r > 0 ? r : 0;
            p->shm_take_big = p->shm_take_pipe = 0;
        }
        if (t_take_big >= 0) {
            p->shm_take_big_bytes = (double)take_entry * 4; /* the price asks it */
            double r = solve_take(comm, p, &p->shm_take_big, 2 * take_entry, t_take_big);
            p->shm_take_big = r > 0 ? r : 0;
            if (r <= 0) p->shm_take_big_bytes = 0;
        }
        if (t_take_pipe >= 0 && p->shm_take_big > 0) {
            double r = solve_take(comm, p, &p->shm_take_pipe, 2 * take_slot, t_take_pipe);
            p->shm_take_pipe = r > 0 ? r : 0;
        }
        /* The channels' single copy beyond the cache first: the pair's
         * formulas below price with it. */
        if (pt.ag_cma > 0 && pt.ag_staged > 0) {
            cma_beyond_cache(p, pt.ag_cma);
            p->shm_cma_max = pt.ag_staged < pt.ag_cma ? CMA_PROBE_BYTES / 4 : 0;
            XC_TRACE("cost model: 2-rank all-gather of %u B took %.1f us single copy, %.1f us "
                     "staged: single copy %s",
                     CMA_PROBE_BYTES, pt.ag_cma * 1e6, pt.ag_staged * 1e6,
                     p->shm_cma_max > 0 ? "up to 2 MiB blocks" : "at every size");
        }
        /* The floors: where staging led at the probe by FLOOR_LEAD, single
         * copy from twice its block (all-gather: never, if staging led at
         * the ceiling's probe too).  Within it the two are a tie that
         * flips from one start to the next (the VM's state moves them
         * 10-30 %): the configured threshold stays. */
        if (pt.ag_mid_cma > 0 && pt.ag_mid_staged > 0) {
            int big_staged = pt.ag_staged > 0 && pt.ag_staged < pt.ag_cma;
            p->shm_ag_cma_min = cma_floor("all-gather", pt.ag_mid_cma, pt.ag_mid_staged,
                                          AG_MID_BYTES, big_staged);
        }
        if (pt.a2a_cma > 0 && pt.a2a_staged > 0) {
            /* All-to-all: where staging stops leading between the two
             * probes' blocks (twice the second's where it leads at both).
             * Extrapolated from the first alone (single copy from twice its
             * block), 2-rank all-to-alls of 64 KiB blocks went single copy
             * at 8.8-9.8 us against 5.2-5.4 staged (thirty-sixth session). */
            double blk[2] = {A2A_MID_BYTES / 2, A2A_HI_BYTES / 2};
            double st[2] = {pt.a2a_staged, pt.a2a_hi_staged}, cm[2] = {pt.a2a_cma, pt.a2a_hi_cma};
            p->shm_a2a_cma_min = probe_floor("all-to-all", "blocks", blk, st, cm, 0);
        }
        if (pt.bc_cma > 0 && pt.bc_staged > 0) {
            /* Broadcast: likewise, from a page (XCOLL_SHM_CMA_MIN_KB
             * decides) where single copy leads at the first probe. */
            double msg[2] = {BC_MID_BYTES, BC_HI_BYTES};
            double st[2] = {pt.bc_staged, pt.bc_hi_staged}, cm[2] = {pt.bc_cma, pt.bc_hi_cma};
            p->shm_bcast_cma_min = probe_floor("broadcast", "messages", msg, st, cm, 4096);
        }
        if (pt.one > 0)
            pair_excess(comm, p, &p->pair_chunk0, &p->pair_chunk, xc__model_shm_pair_one_shot,
                        pt.one, pt.one_slot, "one-shot");
        if (pt.direct > 0)
            pair_excess(comm, p, &p->pair_direct0, &p->pair_direct, xc__model_shm_pair_single_copy,
                        pt.direct, pt.direct_slot, "single-copy");
    }
    return XC_OK;
}

/* The calibration prices ordinary user buffers: its probes reuse one
 * buffer many times, which would otherwise go on huge pages in the middle
 * of the measurement (XCOLL_SHM_PROMOTE, core/promote.c).  Its staged
 * probes write one way at a time: measured slot writes (transport/wcopy.h)
 * would try both ways in them, one probe's repetitions partly the one way
 * and partly the other (the 512 KiB reduce probe took 48-54 us against
 * 23-30).  Where the runtime chooses, a probe is timed each way and keeps
 * the faster (probe_ways); elsewhere ordinarily. */
xc_result_t xc__measure(xc_comm_t *comm, uint32_t what, int thorough, xc__profile_t *p)
{
    int promote = comm->cfg.shm_promote;
    comm->cfg.shm_promote = 0;
    xc__wcopy_t *w = comm->shm ? &comm->shm->wcopy : NULL;
    xc__comm_lock(comm); /* advance reads it under the lock */
    int wmode = w ? w->mode : 0;
    if (w && wmode < 0) w->mode = 0, w->probing = 1;
    pthread_mutex_unlock(&comm->mu);
    xc_result_t rc = measure_all(comm, what, thorough, p);
    xc__comm_lock(comm);
    if (w) w->mode = wmode, w->probing = 0;
    pthread_mutex_unlock(&comm->mu);
    comm->cfg.shm_promote = promote;
    return rc;
}
