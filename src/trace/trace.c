/*
 * trace.c -- spans of communication and computation, a Chrome / Perfetto
 * trace file, and per-step overlap summaries (xcoll.h, "trace").
 *
 * Recording is decided once per process from the environment (XCOLL_TRACE,
 * XCOLL_TRACE_SUMMARY); when it is off every hook is one predictable branch
 * on xc__trace_on.  Spans go into one growing array under a mutex, in the
 * order they end: the engine adds one per operation when it completes (its
 * start is the issue time stamped at submission), callers add theirs with
 * xc_trace_begin/end (a per-thread stack).  The array is bounded
 * (XCOLL_TRACE_MAX_EVENTS, default 4M spans, ~250 MB); spans past it are
 * counted and dropped.
 *
 * A step summary looks at the spans that ended since the previous step,
 * clipped to the step's interval: the union of computation spans, the union
 * of communication spans, and the part of the latter not covered by the
 * former (exposed communication).
 *
 * Time stamps are CLOCK_MONOTONIC in microseconds, so the files of the
 * ranks of one machine line up when loaded together.
 *
 * The file is written by xc_trace_flush and at exit -- only by the process
 * that recorded (a forked child inherits the atexit handler, not the job).
 */
#include "trace.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct span {
    uint64_t t0, t1; /* ns, CLOCK_MONOTONIC */
    int lane;        /* thread lane (>= 1) or communicator lane (>= 1000) */
    int comm;        /* 1: communication, 0: computation */
    char name[56];
} span_t;

#define MAX_DEPTH 32
#define COMM_LANE0 1000

int xc__trace_on;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_file;                 /* XCOLL_TRACE given: write a file */
static int g_print;                /* print step summaries */
static char g_path[512];
static span_t *g_spans;
static size_t g_n, g_cap, g_max, g_dropped;
static int g_rank = -1, g_next_lane = 1, g_next_comm = COMM_LANE0;
static pid_t g_owner;
static uint64_t g_step_t, g_steps;
static size_t g_step_from;

static _Thread_local int tls_lane;
static _Thread_local int tls_depth;
static _Thread_local struct {
    uint64_t t0;
    char name[56];
} tls_stack[MAX_DEPTH];

static void write_at_exit(void) { xc_trace_flush(); }

/* A forked child may inherit the lock held; it never writes (owner pid). */
static void after_fork_child(void)
{
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    g_mu = fresh;
}

static void init_once(void)
{
    const char *path = getenv("XCOLL_TRACE");
    const char *sum = getenv("XCOLL_TRACE_SUMMARY");
    g_file = path && *path;
    if (g_file) snprintf(g_path, sizeof g_path, "%s", path);
    g_print = g_file || (sum && !strcmp(sum, "1"));
    if (!g_print) return;
    const char *mx = getenv("XCOLL_TRACE_MAX_EVENTS");
    g_max = mx && atol(mx) > 0 ? (size_t)atol(mx) : (size_t)4 << 20;
    g_owner = getpid();
    g_step_t = xc__now_ns();
    if (g_file) atexit(write_at_exit);
    pthread_atfork(NULL, NULL, after_fork_child);
    __atomic_store_n(&xc__trace_on, 1, __ATOMIC_RELEASE);
}

void xc__trace_init(void) { pthread_once(&g_once, init_once); }

int xc_trace_enabled(void)
{
    xc__trace_init();
    return xc__trace_on;
}

int xc__trace_comm_lane(int rank)
{
    xc__trace_init();
    if (!xc__trace_on) return 0;
    pthread_mutex_lock(&g_mu);
    if (g_rank < 0) g_rank = rank; /* the first communicator: the world */
    int lane = g_next_comm++;
    pthread_mutex_unlock(&g_mu);
    return lane;
}

static void add(uint64_t t0, uint64_t t1, int lane, int comm, const char *name)
{
    pthread_mutex_lock(&g_mu);
    if (g_n == g_cap && g_n < g_max) {
        size_t cap = g_cap ? 2 * g_cap : 4096;
        if (cap > g_max) cap = g_max;
        span_t *p = realloc(g_spans, cap * sizeof *p);
        if (p) g_spans = p, g_cap = cap;
    }
    if (g_n < g_cap) {
        span_t *s = &g_spans[g_n++];
        s->t0 = t0;
        s->t1 = t1;
        s->lane = lane;
        s->comm = comm;
        snprintf(s->name, sizeof s->name, "%s", name);
    } else {
        g_dropped++;
    }
    pthread_mutex_unlock(&g_mu);
}

void xc__trace_comm_span(int lane, uint64_t t0, const char *name)
{
    add(t0, xc__now_ns(), lane, 1, name);
}

void xc_trace_begin(const char *name)
{
    if (!xc_trace_enabled()) return;
    if (tls_depth >= MAX_DEPTH) {
        tls_depth++; /* too deep: counted so that ends still match */
        return;
    }
    snprintf(tls_stack[tls_depth].name, sizeof tls_stack[tls_depth].name, "%s",
             name ? name : "span");
    tls_stack[tls_depth++].t0 = xc__now_ns();
}

void xc_trace_end(void)
{
    if (!xc__trace_on || tls_depth == 0) return;
    if (--tls_depth >= MAX_DEPTH) return;
    if (!tls_lane) {
        pthread_mutex_lock(&g_mu);
        tls_lane = g_next_lane++;
        pthread_mutex_unlock(&g_mu);
    }
    add(tls_stack[tls_depth].t0, xc__now_ns(), tls_lane, 0, tls_stack[tls_depth].name);
}

/* Intervals: sort by start and merge in place; returns the count. */
typedef struct iv {
    uint64_t a, b;
} iv_t;

static int iv_cmp(const void *x, const void *y)
{
    const iv_t *p = x, *q = y;
    return p->a < q->a ? -1 : p->a > q->a;
}

static size_t merge(iv_t *v, size_t n)
{
    if (!n) return 0;
    qsort(v, n, sizeof *v, iv_cmp);
    size_t m = 0;
    for (size_t i = 1; i < n; i++) {
        if (v[i].a <= v[m].b) {
            if (v[i].b > v[m].b) v[m].b = v[i].b;
        } else {
            v[++m] = v[i];
        }
    }
    return m + 1;
}

static uint64_t total(const iv_t *v, size_t n)
{
    uint64_t t = 0;
    for (size_t i = 0; i < n; i++) t += v[i].b - v[i].a;
    return t;
}

/* Length of the intersection of two merged lists. */
static uint64_t overlap(const iv_t *x, size_t nx, const iv_t *y, size_t ny)
{
    uint64_t t = 0;
    size_t i = 0, j = 0;
    while (i < nx && j < ny) {
        uint64_t a = x[i].a > y[j].a ? x[i].a : y[j].a, b = x[i].b < y[j].b ? x[i].b : y[j].b;
        if (a < b) t += b - a;
        if (x[i].b < y[j].b) i++;
        else j++;
    }
    return t;
}

xc_result_t xc_trace_step(xc_step_summary_t *out)
{
    if (!xc_trace_enabled())
        return xc__err(XC_ERR_UNSUPPORTED,
                       "xc_trace_step: recording is off (set XCOLL_TRACE=path or "
                       "XCOLL_TRACE_SUMMARY=1)");
    uint64_t now = xc__now_ns();
    pthread_mutex_lock(&g_mu);
    uint64_t from = g_step_t;
    size_t n = g_n - g_step_from;
    iv_t *cv = malloc((n ? n : 1) * sizeof *cv), *mv = malloc((n ? n : 1) * sizeof *mv);
    size_t nc = 0, nm = 0;
    for (size_t i = g_step_from; cv && mv && i < g_n; i++) {
        const span_t *s = &g_spans[i];
        uint64_t a = s->t0 > from ? s->t0 : from, b = s->t1 < now ? s->t1 : now;
        if (a >= b) continue;
        if (s->comm) mv[nm++] = (iv_t){a, b};
        else cv[nc++] = (iv_t){a, b};
    }
    g_step_from = g_n;
    g_step_t = now;
    uint64_t step = ++g_steps;
    pthread_mutex_unlock(&g_mu);
    if (!cv || !mv) {
        free(cv);
        free(mv);
        return xc__err(XC_ERR_NOMEM, "xc_trace_step: out of memory");
    }
    nc = merge(cv, nc);
    nm = merge(mv, nm);
    uint64_t comp = total(cv, nc), comm = total(mv, nm), hidden = overlap(cv, nc, mv, nm);
    free(cv);
    free(mv);
    xc_step_summary_t s;
    s.step = step;
    s.step_ms = (double)(now - from) / 1e6;
    s.compute_ms = (double)comp / 1e6;
    s.comm_ms = (double)comm / 1e6;
    s.exposed_ms = (double)(comm - hidden) / 1e6;
    s.overlap_pct = comm ? 100.0 * (double)hidden / (double)comm : 100.0;
    if (out) *out = s;
    if (g_print)
        fprintf(stderr,
                "xcoll step %llu (rank %d): %.3f ms, compute %.3f ms, communication %.3f ms, "
                "exposed %.3f ms, overlap %.1f%%\n",
                (unsigned long long)s.step, g_rank, s.step_ms, s.compute_ms, s.comm_ms,
                s.exposed_ms, s.overlap_pct);
    return XC_OK;
}

/* The file name for this rank: "%r" replaced, else ".r<rank>" before a
 * trailing ".json" (or at the end). */
static void rank_path(char *out, size_t cap)
{
    char r[16];
    snprintf(r, sizeof r, "%d", g_rank < 0 ? 0 : g_rank);
    const char *pct = strstr(g_path, "%r");
    if (pct) {
        snprintf(out, cap, "%.*s%s%s", (int)(pct - g_path), g_path, r, pct + 2);
        return;
    }
    size_t n = strlen(g_path);
    if (n > 5 && !strcmp(g_path + n - 5, ".json"))
        snprintf(out, cap, "%.*s.r%s.json", (int)(n - 5), g_path, r);
    else
        snprintf(out, cap, "%s.r%s", g_path, r);
}

/* JSON string body: quotes, backslashes and control characters escaped. */
static void put_str(FILE *f, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
}

xc_result_t xc_trace_flush(void)
{
    xc__trace_init();
    if (!xc__trace_on || !g_file) return XC_OK;
    if (getpid() != g_owner) return XC_OK; /* a forked child */
    char path[600], tmp[640];
    pthread_mutex_lock(&g_mu);
    rank_path(path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.tmp%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) {
        int e = errno;
        pthread_mutex_unlock(&g_mu);
        return xc__err(XC_ERR_SYSTEM, "XCOLL_TRACE: cannot write %s: %s", tmp, strerror(e));
    }
    int pid = g_rank < 0 ? 0 : g_rank;
    fprintf(f, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"rank\":%d,\"dropped\":%zu},"
               "\"traceEvents\":[\n",
            pid, g_dropped);
    fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d\"}}",
            pid, pid);
    for (int l = 1; l < g_next_lane; l++)
        fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                   "\"args\":{\"name\":\"compute (thread %d)\"}}",
                pid, l, l);
    for (int l = COMM_LANE0; l < g_next_comm; l++)
        fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                   "\"args\":{\"name\":\"communication (communicator %d)\"}}",
                pid, l, l - COMM_LANE0);
    for (size_t i = 0; i < g_n; i++) {
        const span_t *s = &g_spans[i];
        fprintf(f, ",\n{\"name\":\"");
        put_str(f, s->name);
        fprintf(f, "\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f}",
                s->comm ? "comm" : "compute", pid, s->lane, (double)s->t0 / 1e3,
                (double)(s->t1 - s->t0) / 1e3);
    }
    fprintf(f, "\n]}\n");
    int bad = ferror(f);
    bad |= fclose(f) != 0;
    if (!bad) bad = rename(tmp, path) != 0;
    pthread_mutex_unlock(&g_mu);
    if (bad) {
        unlink(tmp);
        return xc__err(XC_ERR_SYSTEM, "XCOLL_TRACE: writing %s failed", path);
    }
    return XC_OK;
}
