/*
 * comm.c -- communicator life cycle (allocation, destroy, abort), queries,
 * statistics and names.
 */
#include "comm.h"
#include "../trace/trace.h"
#include "../transport/shm.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

unsigned xc_version(void) { return XC_VERSION_NUM; }

const char *xc_version_string(void)
{
#define XC__STR2(x) #x
#define XC__STR(x) XC__STR2(x)
    return XC__STR(XC_VERSION_MAJOR) "." XC__STR(XC_VERSION_MINOR) "." XC__STR(
        XC_VERSION_PATCH);
}

const char *xc_coll_name(xc_coll_t coll)
{
    static const char *names[XC_COLL_COUNT] = {
        "allreduce", "reduce_scatter", "allgather", "reduce", "bcast",
        "alltoall",  "alltoallv",      "barrier",   "send",   "recv"};
    return (unsigned)coll < XC_COLL_COUNT ? names[coll] : "invalid";
}

const char *xc_transport_name(xc_transport_kind_t t)
{
    static const char *names[XC_TRANSPORT_COUNT] = {"self", "tcp", "shm"};
    return (unsigned)t < XC_TRANSPORT_COUNT ? names[t] : "invalid";
}

unsigned xc__fork_gen;
static pthread_once_t g_fork_once = PTHREAD_ONCE_INIT;
static void on_fork_child(void) { __atomic_add_fetch(&xc__fork_gen, 1, __ATOMIC_RELAXED); }
static void fork_watch(void) { pthread_atfork(NULL, NULL, on_fork_child); }

xc_result_t xc__comm_forked_err(const char *fn)
{
    return xc__err(XC_ERR_INVALID, "%s: the communicator belongs to the process that created it; "
                   "this is a forked child", fn);
}

xc_result_t xc__comm_alloc(int rank, int size, const xc__config_t *cfg, xc_comm_t **out)
{
    xc_comm_t *c = calloc(1, sizeof *c);
    if (!c) return xc__err(XC_ERR_NOMEM, "out of memory allocating a communicator");
    pthread_once(&g_fork_once, fork_watch);
    c->fork_gen = __atomic_load_n(&xc__fork_gen, __ATOMIC_RELAXED);
    c->rank = rank;
    c->size = size;
    c->cfg = *cfg;
    c->efd = -1;
    c->next_seq = 1;
    c->conns = calloc((size_t)size, sizeof *c->conns);
    c->pq = calloc((size_t)size, sizeof *c->pq);
    c->node_of = calloc((size_t)size, sizeof *c->node_of);
    c->local_of = calloc((size_t)size, sizeof *c->local_of);
    c->node_start = calloc((size_t)size + 1, sizeof *c->node_start);
    c->node_ranks = calloc((size_t)size, sizeof *c->node_ranks);
    c->failed = calloc((size_t)size / 8 + 1, 1);
    c->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    pthread_mutex_init(&c->mu, NULL);
    c->stats.size = sizeof c->stats;
    c->trace_lane = xc__trace_comm_lane(rank);
    xc__flight_init(c);
    c->local_size = 1;
    xc__comm_set_wait(c);
    c->nnodes = 1;
    if (!c->conns || !c->pq || !c->node_of || !c->local_of || !c->node_start ||
        !c->node_ranks || !c->failed || c->efd < 0) {
        xc__comm_free(c);
        return xc__err(XC_ERR_NOMEM, "out of memory (or eventfd) creating a communicator");
    }
    *out = c;
    return XC_OK;
}

void xc__comm_free(xc_comm_t *c)
{
    if (!c) return;
    xc__flight_fini(c); /* first: a SIGUSR1 dump must not see it half freed */
    if (c->conns) {
        xc__match_free(c);
        for (int p = 0; p < c->size; p++) xc__conn_free(c->conns[p]);
    }
    xc__chan_free_all(c);
    free(c->conns);
    free(c->pq);
    free(c->node_of);
    free(c->local_of);
    free(c->node_start);
    free(c->node_ranks);
    free(c->failed);
    xc__shrink_free(c);
    if (c->efd >= 0) close(c->efd);
    if (c->node_shm != c->shm) xc__shm_close(c->node_shm);
    xc__shm_close(c->shm);
    free(c->cma_tmp);
    xc__sched_pool_free(&c->scratch_pool);
    free(c->profile); /* cost model profile and selector state: one block */
    xc__store_server_release(c->store_srv); /* a peer may be in its next init */
    pthread_mutex_destroy(&c->mu);
    free(c);
}

void xc__cpumask_self(xc__cpumask_t *m)
{
    memset(m, 0, sizeof *m);
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0) return; /* unknown: empty */
    for (int i = 0; i < CPU_SETSIZE && i < 64 * XC__CPUMASK_WORDS; i++)
        if (CPU_ISSET(i, &set)) m->w[i / 64] |= 1ull << (i % 64);
}

void xc__comm_set_nodes(xc_comm_t *c, char (*ids)[XC__NODEID_LEN], const xc__cpumask_t *cpus)
{
    /* Node index = order of first appearance by rank. */
    int nn = 0;
    for (int r = 0; r < c->size; r++) {
        int found = -1;
        for (int q = 0; q < r && found < 0; q++)
            if (!strcmp(ids[q], ids[r])) found = c->node_of[q];
        c->node_of[r] = found >= 0 ? found : nn++;
    }
    c->nnodes = nn;
    c->node = c->node_of[c->rank];
    /* Members of each node in rank order (counting sort). */
    memset(c->node_start, 0, ((size_t)nn + 1) * sizeof *c->node_start);
    for (int r = 0; r < c->size; r++) c->node_start[c->node_of[r] + 1]++;
    for (int n = 0; n < nn; n++) c->node_start[n + 1] += c->node_start[n];
    for (int n = 0; n < nn; n++) c->local_of[n] = 0; /* members placed so far, per node */
    for (int r = 0; r < c->size; r++) {
        int n = c->node_of[r];
        c->node_ranks[c->node_start[n] + c->local_of[n]++] = r;
    }
    for (int n = 0; n < nn; n++)
        for (int i = c->node_start[n]; i < c->node_start[n + 1]; i++)
            c->local_of[c->node_ranks[i]] = i - c->node_start[n];
    c->local_rank = c->local_of[c->rank];
    c->local_size = c->node_start[c->node + 1] - c->node_start[c->node];
    if (cpus) {
        xc__cpumask_t u = {{0}};
        for (int i = c->node_start[c->node]; i < c->node_start[c->node + 1]; i++)
            for (int w = 0; w < XC__CPUMASK_WORDS; w++) u.w[w] |= cpus[c->node_ranks[i]].w[w];
        c->node_cpus = 0;
        for (int w = 0; w < XC__CPUMASK_WORDS; w++) c->node_cpus += __builtin_popcountll(u.w[w]);
    }
    xc__comm_set_wait(c);
}

/* The waiting policy for this node's crowding.  With more local ranks
 * than CPUs they may run on (the union of their affinity sets, so ranks
 * pinned one per core are not crowded), a spinning rank holds the core
 * its peer needs: yield at once, and yield longer before sleeping (a futex
 * wake-up costs ~30 us, several rounds of every rank taking its turn). */
void xc__comm_set_wait(xc_comm_t *c)
{
    c->oversub = c->cfg.node_crowded >= 0 ? c->cfg.node_crowded
                                          : c->node_cpus > 0 && c->local_size > c->node_cpus;
    long spin = c->cfg.spin_us >= 0 ? c->cfg.spin_us : c->oversub ? 0 : 20;
    long yield = c->cfg.yield_us >= 0 ? c->cfg.yield_us : c->oversub ? 2000 : 200;
    c->spin_max_ns = (uint64_t)spin * 1000ull;
    c->yield_ns = (uint64_t)yield * 1000ull;
    c->spin_ns = c->spin_max_ns;
    xc__comm_set_p2p_cma_min(c, 0);
}

/* The point-to-point single-copy threshold: XCOLL_SHM_P2P_CMA_MIN_KB if
 * given; else 8 KiB or, if larger (and sane), `measured`: where the cost
 * model's calibration found the ring to stop leading (model_init.c passes
 * the profile's shared-memory big_from, 0 before there is one).  On a
 * crowded node 64 KiB until measured, then the measurement held between
 * 32 and 64 KiB: there a send waits for its receiver to run before it
 * completes, and through the ring it does not, but the ring's two copies
 * share the cores too.  Which costs more is the host's: on the AMD EPYC
 * VM (thirty-fifth session) 4 ranks on 2 cores, send/recv of 8 / 16 / 32
 * KiB, means 29-31 single copy against 9-12 / 20 us through the ring; on
 * an Intel VM (fifty-sixth session) 32 KiB means 16.7 through the ring
 * against 9.0 single copy, medians 43 against 10 (8 ranks: 27.5 / 50.5
 * against 20.7 / 21.9), 16 KiB level by means.  The pair's measurement
 * (ranks 0 and 1 while the others wait) ends the ring's lead below 32
 * KiB on the second; on the first, uncrowded, it ended at 94-110 KiB
 * (thirty-sixth session), which would keep 64 there -- not measured on a
 * crowded node of that host since. */
void xc__comm_set_p2p_cma_min(xc_comm_t *c, double measured)
{
    size_t v = c->cfg.shm_p2p_cma_min_kb >= 0 ? (size_t)c->cfg.shm_p2p_cma_min_kb * 1024
               : c->oversub                  ? XC__P2P_CMA_CROWDED_HI
                                             : (size_t)8 << 10;
    if (c->cfg.shm_p2p_cma_min_kb < 0 && c->oversub && measured > 0)
        v = xc__p2p_crowded_hold(measured);
    else if (c->cfg.shm_p2p_cma_min_kb < 0 && measured > (double)v &&
             measured <= (double)XC__P2P_CMA_MIN_MAX)
        v = (size_t)measured;
    c->p2p_cma_min = v;
}

xc_result_t xc__comm_record_fail(xc_comm_t *comm, xc_result_t rc)
{
    if (comm && rc != XC_OK)
        snprintf(comm->lastmsg, sizeof comm->lastmsg, "%s", xc__tls_error());
    return rc;
}

int xc_comm_rank(const xc_comm_t *c) { return c ? c->rank : -1; }
int xc_comm_size(const xc_comm_t *c) { return c ? c->size : -1; }
int xc_comm_local_rank(const xc_comm_t *c) { return c ? c->local_rank : -1; }
int xc_comm_local_size(const xc_comm_t *c) { return c ? c->local_size : -1; }
int xc_comm_node(const xc_comm_t *c) { return c ? c->node : -1; }
int xc_comm_node_count(const xc_comm_t *c) { return c ? c->nnodes : -1; }

const char *xc_comm_last_error(const xc_comm_t *c)
{
    if (!c) return xc_last_error();
    if (c->lastmsg[0]) return c->lastmsg;
    if (xc__comm_status(c) != XC_OK) return c->errmsg;
    return "";
}

xc_result_t xc_comm_status(const xc_comm_t *c)
{
    if (!c) return xc__err(XC_ERR_INVALID, "xc_comm_status: comm is NULL");
    return xc__comm_status(c);
}

xc_result_t xc_comm_stats(const xc_comm_t *c, xc_stats_t *out)
{
    if (!c || !out)
        return xc__err(XC_ERR_INVALID, "xc_comm_stats: %s is NULL", c ? "out" : "comm");
    size_t n = out->size;
    if (n < sizeof(size_t) || n > sizeof *out)
        return xc__err(XC_ERR_INVALID, "xc_comm_stats: out->size must be sizeof(xc_stats_t)");
    if (xc__comm_forked(c))
        return xc__comm_forked_err("xc_comm_stats");
    xc__comm_lock((xc_comm_t *)c);
    memcpy(out, &c->stats, n);
    pthread_mutex_unlock((pthread_mutex_t *)&c->mu);
    out->size = n;
    return XC_OK;
}

xc_result_t xc_comm_abort(xc_comm_t *c)
{
    if (!c || xc__comm_forked(c)) return XC_OK; /* (a forked child: not its communicator) */
    xc__comm_poison_now(c, XC_ERR_ABORTED, 0, "rank %d called xc_comm_abort", c->rank);
    return XC_OK;
}

xc_result_t xc_comm_revoke(xc_comm_t *c)
{
    if (!c) return xc__err(XC_ERR_INVALID, "xc_comm_revoke: communicator is NULL");
    if (xc__comm_forked(c))
        return xc__comm_forked_err("xc_comm_revoke");
    xc__comm_poison_now(c, XC_ERR_REVOKED, XC__POISON_LOCAL,
                        "rank %d revoked the communicator (xc_comm_revoke)", c->rank);
    return XC_OK;
}

/* Say goodbye to every open peer so that they know the closing is not a
 * failure, and push it out (bounded). */
static void send_bye(xc_comm_t *c)
{
    uint64_t deadline = xc__now_ns() + 1000000000ull;
    xc__chan_flush(c, deadline); /* what the channels still hold goes first */
    for (int p = 0; p < c->size; p++) xc__send_control(c, p, XC__F_BYE, 0);
    xc__conns_flush(c, deadline);
}

/* xc_comm_destroy in a forked child (a data-loader worker whose interpreter
 * ends, say): the parent's progress thread, segments and peers are not this
 * process's -- locking (the mutex may have been held at the fork), writing
 * a segment (not mapped here) or saying goodbye (on the parent's sockets)
 * would hang, crash or break the parent's communicator.  Close this
 * process's copies of the descriptors (the parent keeps its own) and leave
 * the memory, a copy of the parent's. */
static xc_result_t destroy_forked(xc_comm_t *c)
{
    for (int p = 0; c->conns && p < c->size; p++) {
        xc__conn_t *k = c->conns[p];
        if (!k || k->tp->kind != XC_TRANSPORT_TCP) continue;
        if (k->fd >= 0) close(k->fd);
        for (int s = 0; k->nstreams > 1 && s < k->nstreams; s++) close(k->sfd[s]);
    }
    if (c->efd >= 0) close(c->efd);
    return XC_OK;
}

xc_result_t xc_comm_destroy(xc_comm_t *c)
{
    if (!c) return XC_OK;
    if (xc__comm_forked(c)) return destroy_forked(c);
    xc__comm_lock(c);
    /* Let pending operations finish (each within its own deadline).  As a
     * waiter, destroy keeps the progress thread off: the deadline ends in
     * XC_ERR_ABORTED here, not in a timeout there. */
    __atomic_add_fetch(&c->waiters, 1, __ATOMIC_RELAXED);
    while (c->npending > 0 && xc__comm_status(c) == XC_OK) {
        uint64_t nearest = UINT64_MAX;
        if (c->coll_head) nearest = xc__op_deadline(c, c->coll_head);
        for (xc__op_t *op = c->p2p_ops; op; op = op->next)
            if (xc__op_deadline(c, op) < nearest) nearest = op->deadline_ns;
        if (xc__now_ns() >= nearest) {
            /* Local only: peers learn from the goodbye that this rank left
             * and fail with XC_ERR_PEER_LOST when they need it. */
            xc__comm_poison(c, XC_ERR_ABORTED, 1,
                            "rank %d destroyed the communicator with %d operations "
                            "still pending at their deadline",
                            c->rank, c->npending);
            break;
        }
        int ms = xc__poll_ms_left(nearest);
        xc__comm_poll(c, ms < 0 || ms > 100 ? 100 : ms);
    }
    __atomic_sub_fetch(&c->waiters, 1, __ATOMIC_RELAXED);
    if (c->shm) { /* local peers see it before the goodbye */
        __atomic_store_n(&c->shm->ctl[c->rank].gone, 1, __ATOMIC_RELEASE);
        xc__shm_ring(c->shm);
    }
    send_bye(c);
    __atomic_store_n(&c->stop, 1, __ATOMIC_RELAXED);
    xc__comm_kick(c);
    int has_thread = c->has_thread;
    pthread_mutex_unlock(&c->mu);
    if (has_thread) pthread_join(c->thread, NULL);
    xc__comm_free(c);
    return XC_OK;
}
