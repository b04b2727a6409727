/*
 * flight.c -- the flight recorder (flight.h).
 *
 * Each communicator has a ring of records indexed by operation id; the
 * engine fills one at issue and completes it (if it was not overwritten by
 * then) at completion.  Dumps go to XCOLL_FLIGHT_DIR (default $TMPDIR or
 * /tmp) as xcoll-flight-<communicator id>-r<rank>.txt, written to a
 * temporary name and renamed, one line per record:
 *
 *   xcoll-flight 1 comm=<id> rank=<r> size=<n> pid=<p> unix_ms=<t> reason=<text>
 *   op id=<i> seq=<s> coll=<name> dtype=<t> op=<o> count=<c> root=<r> peer=<p>
 *      tag=<t> algo=<a> state=issued|done|failed rc=<code> issued_ms_ago=<x>
 *      dur_ms=<y|->
 *
 * Time stamps are the CPU's time-stamp counter (a few cycles to read),
 * converted at dump time against the clock read when the recorder was set
 * up.  SIGUSR1: a handler (installed only if the signal's disposition is
 * the default, XCOLL_FLIGHT_SIGNAL=0 to never install it) writes a byte to
 * a pipe; a dumper thread, started with the first recorder, reads it and
 * dumps every live communicator of the process -- reading their rings
 * without their locks, since a rank may be stuck inside the engine.
 */
#include "flight.h"
#include "../core/comm.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

static uint64_t stamp(void)
{
#if defined(__x86_64__) || defined(__i386__)
    return __rdtsc();
#else
    return xc__now_ns();
#endif
}

/* Clock and counter at set-up: the base of the conversion. */
static uint64_t g_tsc0, g_ns0;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static xc_comm_t **g_comms; /* live communicators with a recorder */
static size_t g_ncomms, g_cap;
static int g_pipe[2] = {-1, -1};

static void on_sigusr1(int sig)
{
    (void)sig;
    int e = errno;
    ssize_t w = write(g_pipe[1], "d", 1);
    (void)w;
    errno = e;
}

static void *dumper(void *arg)
{
    (void)arg;
    char c;
    for (;;) {
        ssize_t r = read(g_pipe[0], &c, 1);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return NULL;
        pthread_mutex_lock(&g_mu);
        for (size_t i = 0; i < g_ncomms; i++) xc__flight_dump(g_comms[i], "SIGUSR1");
        pthread_mutex_unlock(&g_mu);
    }
}

/* A forked child (a data-loader worker) has no dumper thread and may have
 * inherited the registry's lock held: it gets a fresh lock, an empty
 * registry and no SIGUSR1 handling of ours. */
static void after_fork_child(void)
{
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    g_mu = fresh;
    g_ncomms = 0;
    signal(SIGUSR1, SIG_DFL);
}

static void setup_once(void)
{
    g_tsc0 = stamp();
    g_ns0 = xc__now_ns();
    const char *sig = getenv("XCOLL_FLIGHT_SIGNAL");
    if (sig && !strcmp(sig, "0")) return;
    struct sigaction old;
    if (sigaction(SIGUSR1, NULL, &old) != 0 || old.sa_handler != SIG_DFL) return;
    if (pipe2(g_pipe, O_CLOEXEC) != 0) return;
    /* The handler must never block (a full pipe already means "dump"). */
    fcntl(g_pipe[1], F_SETFL, fcntl(g_pipe[1], F_GETFL) | O_NONBLOCK);
    pthread_atfork(NULL, NULL, after_fork_child);
    pthread_t t;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    /* The dumper must not take SIGUSR1 itself (it blocks in read). */
    sigset_t all, prev;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &prev);
    int rc = pthread_create(&t, &at, dumper, NULL);
    pthread_sigmask(SIG_SETMASK, &prev, NULL);
    pthread_attr_destroy(&at);
    if (rc != 0) return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigusr1;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
}

void xc__flight_init(xc_comm_t *comm)
{
    long n = 256;
    if (xc__env_int("XCOLL_FLIGHT_RECORDER", 0, 1 << 20, &n) != XC_OK) n = 256;
    if (n == 0) return;
    pthread_once(&g_once, setup_once);
    comm->flight.ring = calloc((size_t)n, sizeof *comm->flight.ring);
    if (!comm->flight.ring) return; /* no recorder: not worth failing for */
    comm->flight.n = (uint32_t)n;
    comm->flight.next = 1;
    comm->flight.pos = n == 1 ? 0 : 1;
    pthread_mutex_lock(&g_mu);
    if (g_ncomms == g_cap) {
        size_t cap = g_cap ? 2 * g_cap : 8;
        xc_comm_t **p = realloc(g_comms, cap * sizeof *p);
        if (p) g_comms = p, g_cap = cap;
    }
    if (g_ncomms < g_cap) g_comms[g_ncomms++] = comm;
    pthread_mutex_unlock(&g_mu);
}

void xc__flight_fini(xc_comm_t *comm)
{
    if (!comm->flight.ring) return;
    pthread_mutex_lock(&g_mu); /* not while the dumper reads it */
    for (size_t i = 0; i < g_ncomms; i++)
        if (g_comms[i] == comm) g_comms[i] = g_comms[--g_ncomms];
    pthread_mutex_unlock(&g_mu);
    free(comm->flight.ring);
    comm->flight.ring = NULL;
}

/* Fill the next record for a collective (seq, d) or a point-to-point
 * operation (seq 0); returns it (its id in r->id), NULL with no recorder. */
static xc__flight_rec_t *record(xc_comm_t *comm, uint64_t seq, const xc__desc_t *d, int32_t peer,
                                int32_t tag, uint64_t t)
{
    xc__flight_t *f = &comm->flight;
    if (!f->ring) return NULL;
    xc__flight_rec_t *r = &f->ring[f->pos]; /* the slot of id % n */
    f->pos = f->pos + 1 == f->n ? 0 : f->pos + 1;
    r->id = f->next++;
    r->seq = seq;
    r->count = d->count;
    r->t_issue = t;
    r->t_done = 0;
    r->root = seq ? d->root : -1;
    r->peer = peer;
    r->tag = tag;
    r->rc = 0;
    r->algo = d->algo;
    r->coll = d->coll;
    r->dtype = d->dtype;
    r->op = d->op;
    r->state = XC__FL_ISSUED;
    return r;
}

void xc__flight_issue(xc_comm_t *comm, xc__op_t *op)
{
    int p2p = op->is_p2p;
    int32_t tag = !p2p ? -1 : op->desc.coll == XC_COLL_SEND ? op->ptx.hdr.tag : op->prx.tag;
    xc__flight_rec_t *r =
        record(comm, p2p ? 0 : op->seq, &op->desc, p2p ? op->peer : -1, tag, stamp());
    op->flight_id = r ? r->id : 0;
}

void xc__flight_express(xc_comm_t *comm, uint64_t seq, const xc__desc_t *d, int32_t peer,
                        int32_t tag, xc_result_t rc)
{
    uint64_t t = stamp();
    xc__flight_rec_t *r = record(comm, seq, d, peer, tag, t);
    if (!r) return;
    r->t_done = t;
    r->rc = rc;
    r->state = rc == XC_OK ? XC__FL_DONE : XC__FL_FAILED;
}

void xc__flight_done(xc_comm_t *comm, xc__op_t *op, xc_result_t rc)
{
    xc__flight_t *f = &comm->flight;
    if (!f->ring || !op->flight_id) return;
    xc__flight_rec_t *r = &f->ring[op->flight_id % f->n];
    if (r->id != op->flight_id) return; /* overwritten: too many in flight */
    r->t_done = stamp();
    r->rc = rc;
    if (rc == XC_OK && op->desc.coll == XC_COLL_RECV) r->peer = op->req->source; /* any source */
    r->state = rc == XC_OK ? XC__FL_DONE : XC__FL_FAILED;
}

static const char *state_name(int s)
{
    return s == XC__FL_DONE ? "done" : s == XC__FL_FAILED ? "failed" : "issued";
}

void xc__flight_dump(xc_comm_t *comm, const char *why)
{
    xc__flight_t *f = &comm->flight;
    if (!f->ring) return;
    /* A consistent-enough copy first: the engine may be writing. */
    uint32_t n = f->n;
    uint64_t next = __atomic_load_n(&f->next, __ATOMIC_RELAXED);
    xc__flight_rec_t *copy = malloc((size_t)n * sizeof *copy);
    if (!copy) return;
    memcpy(copy, f->ring, (size_t)n * sizeof *copy);
    uint64_t tsc = stamp(), ns = xc__now_ns();
    double per_ms = ns > g_ns0 && tsc > g_tsc0 ? (double)(tsc - g_tsc0) / ((double)(ns - g_ns0) / 1e6)
                                               : 1e6;
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    const char *dir = getenv("XCOLL_FLIGHT_DIR");
    if (!dir || !*dir) dir = getenv("TMPDIR");
    if (!dir || !*dir) dir = "/tmp";
    char path[600], tmp[640];
    snprintf(path, sizeof path, "%s/xcoll-flight-%016" PRIx64 "-r%d.txt", dir, comm->uid,
             comm->rank);
    static unsigned g_dumps; /* a poison dump and a SIGUSR1 dump may overlap */
    snprintf(tmp, sizeof tmp, "%s.tmp%d.%u", path, (int)getpid(),
             __atomic_add_fetch(&g_dumps, 1, __ATOMIC_RELAXED));
    FILE *out = fopen(tmp, "w");
    if (!out) {
        free(copy);
        return;
    }
    char reason[400];
    snprintf(reason, sizeof reason, "%s", why ? why : "");
    for (char *p = reason; *p; p++)
        if (*p == '\n') *p = ' ';
    fprintf(out, "xcoll-flight 1 comm=%016" PRIx64 " rank=%d size=%d pid=%d unix_ms=%lld reason=%s\n",
            comm->uid, comm->rank, comm->size, (int)getpid(),
            (long long)rt.tv_sec * 1000 + rt.tv_nsec / 1000000, reason);
    uint64_t first = next > n ? next - n : 1;
    for (uint64_t id = first; id < next; id++) {
        const xc__flight_rec_t *r = &copy[id % n];
        if (r->id != id) continue;
        const char *algo = xc_algo_name(r->algo);
        fprintf(out,
                "op id=%" PRIu64 " seq=%" PRIu64 " coll=%s dtype=%s op=%s count=%" PRIu64
                " root=%d peer=%d tag=%d algo=%s state=%s rc=%s issued_ms_ago=%.3f",
                r->id, r->seq, xc_coll_name((xc_coll_t)r->coll), xc_dtype_name((xc_dtype_t)r->dtype),
                xc_op_name((xc_op_t)r->op), r->count, r->root, r->peer, r->tag, algo ? algo : "-",
                state_name(r->state), xc_err_name((xc_result_t)r->rc),
                (double)(tsc - r->t_issue) / per_ms);
        if (r->t_done) fprintf(out, " dur_ms=%.3f\n", (double)(r->t_done - r->t_issue) / per_ms);
        else fprintf(out, " dur_ms=-\n");
    }
    free(copy);
    int bad = ferror(out);
    bad |= fclose(out) != 0;
    if (bad || rename(tmp, path) != 0) unlink(tmp);
}
