/*
 * harness.c -- start-up, shut-down, the test matrix, buffers and failure
 * reporting shared by the multi-process tests (see harness.h).
 *
 * Failures are counted per process (atomically: test_split reports from two
 * threads) and printed with a "[rank r]" prefix, at most PRINT_CAP lines so a
 * systematically broken collective does not flood the log.  A failing result
 * code is fatal (h_die_rc): the communicator is poisoned after most errors,
 * and the peers then fail with XC_ERR_PEER_LOST, which the launcher turns
 * into a non-zero exit.
 */
#include "harness.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define PRINT_CAP 40

h_env_t H;

static unsigned long g_failures; /* atomic: relaxed, a plain counter */
static unsigned long g_printed;  /* atomic: relaxed, a plain counter */
static unsigned long g_checks;   /* atomic: relaxed, a plain counter */
static uint64_t g_cases;         /* cases created (single thread)    */
static double g_start;

double h_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void h_fail(const char *file, int line, const char *fmt, ...)
{
    __atomic_fetch_add(&g_failures, 1, __ATOMIC_RELAXED);
    if (__atomic_fetch_add(&g_printed, 1, __ATOMIC_RELAXED) >= PRINT_CAP)
        return;
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *base = strrchr(file, '/');
    printf("[rank %d] FAIL %s:%d: %s\n", H.rank, base ? base + 1 : file, line,
           msg);
    fflush(stdout);
}

void h_die_rc(const char *file, int line, const char *call, xc_result_t rc,
              const xc_comm_t *comm)
{
    const char *base = strrchr(file, '/');
    printf("[rank %d] FATAL %s:%d: %s returned %s (%s): %s\n", H.rank,
           base ? base + 1 : file, line, call, xc_err_name(rc),
           xc_strerror(rc), comm ? xc_comm_last_error(comm) : xc_last_error());
    fflush(stdout);
    exit(1);
}

void h_checked(void) { __atomic_fetch_add(&g_checks, 1, __ATOMIC_RELAXED); }

unsigned long h_failures(void)
{
    return __atomic_load_n(&g_failures, __ATOMIC_RELAXED);
}

/* ------------------------------------------------------------ buffers */

/* XCOLL_TEST_BUFFERS=shared: every buffer from xc_mem_alloc_shared, which
 * node peers map (their single-copy reads and writes become memcpy:
 * core/mem_share.c; past the 60 blocks a process lists, single copy). */
static int shared_buffers(void)
{
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("XCOLL_TEST_BUFFERS");
        v = e && !strcmp(e, "shared");
    }
    return v;
}

void *h_alloc(size_t bytes)
{
    void *p = NULL;
    if (shared_buffers()) {
        if (xc_mem_alloc_shared(bytes + H_GUARD, &p) != XC_OK) p = NULL;
    } else {
        p = malloc(bytes + H_GUARD);
    }
    if (!p) {
        printf("[rank %d] FATAL: out of memory allocating %zu bytes\n", H.rank,
               bytes);
        exit(1);
    }
    h_poison(p, bytes + H_GUARD);
    return p;
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define H_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define H_SANITIZED 1
#endif
#endif

#ifndef H_SANITIZED
static struct rlimit g_as_saved;
#endif

int h_limit_memory(size_t headroom)
{
#ifdef H_SANITIZED
    (void)headroom;
    return 0;
#else
    unsigned long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    int ok = fscanf(f, "%lu", &pages) == 1;
    fclose(f);
    if (!ok || getrlimit(RLIMIT_AS, &g_as_saved) != 0) return 0;
    struct rlimit r = g_as_saved;
    r.rlim_cur = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + headroom;
    return setrlimit(RLIMIT_AS, &r) == 0;
#endif
}

void h_unlimit_memory(void)
{
#ifndef H_SANITIZED
    setrlimit(RLIMIT_AS, &g_as_saved);
#endif
}

/* A block of xc_mem_alloc_shared (XCOLL_TEST_BUFFERS=shared), else
 * malloc's. */
void h_free(void *p)
{
    if (shared_buffers())
        xc_mem_free(p); /* NULL: a no-op */
    else
        free(p);
}

void h_poison(void *p, size_t bytes) { memset(p, 0xCD, bytes); }

/* ------------------------------------------------------------ matrix */

int h_next_cell(h_cell_t *c, int reductions)
{
    static const size_t counts[] = {0, 1, 7, 1000, H_BIG_COUNT};
    const int nc = (int)(sizeof counts / sizeof counts[0]);
    const int nop = reductions ? XC_OP_COUNT : 1;
    for (int i; (i = c->next++) < XC_DTYPE_COUNT * nop * nc;) {
        c->dt = (xc_dtype_t)(i / (nop * nc));
        c->op = reductions ? (xc_op_t)(i / nc % nop) : H_COPY;
        c->count = counts[i % nc];
        if (h_in_matrix(c->dt, c->op, c->count)) return 1;
    }
    return 0;
}

int h_op_valid(xc_dtype_t dt, xc_op_t op)
{
    if (op == H_COPY) return 1;
    if (op == XC_BAND || op == XC_BOR || op == XC_BXOR) return !h_is_float(dt);
    return op >= XC_SUM && op < XC_OP_COUNT;
}

int h_in_matrix(xc_dtype_t dt, xc_op_t op, size_t count)
{
    if (!h_op_valid(dt, op)) return 0;
    if (H.full || count < H_BIG_COUNT) return 1;
    return (dt == XC_FLOAT32 || dt == XC_INT32) &&
           (op == XC_SUM || op == H_COPY);
}

h_case_t h_case(const char *coll, xc_dtype_t dt, xc_op_t op, size_t count,
                int inplace, int root)
{
    h_case_t c = {coll, dt, op, count, inplace, root, H.size, 0};
    c.seed = h_mix64(H.seed ^ h_mix64(++g_cases));
    return c;
}

const char *h_case_str(const h_case_t *c, char *buf, size_t len)
{
    int n = snprintf(buf, len, "%s %s", c->coll, xc_dtype_name(c->dtype));
    if (n < 0 || (size_t)n >= len) return buf;
    if (c->op != H_COPY)
        n += snprintf(buf + n, len - (size_t)n, " %s", xc_op_name(c->op));
    if ((size_t)n < len)
        n += snprintf(buf + n, len - (size_t)n, " count=%zu", c->count);
    if (c->inplace >= 0 && (size_t)n < len)
        n += snprintf(buf + n, len - (size_t)n, " %s",
                      c->inplace ? "in-place" : "out-of-place");
    if (c->root >= 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, " root=%d", c->root);
    return buf;
}

void h_announce(const h_case_t *c)
{
    if (!H.verbose || H.rank != 0) return;
    char cs[160];
    printf("[rank 0] case %s\n", h_case_str(c, cs, sizeof cs));
}

/* ------------------------------------------------------------ stats */


static void stats_of(xc_comm_t *comm, xc_stats_t *st)
{
    memset(st, 0, sizeof *st);
    st->size = sizeof *st;
    H_CHECK(comm, xc_comm_stats(comm, st));
}

/* Id of the algorithm called `name` (length len), or -1. */
static int algo_id(const char *name, size_t len)
{
    for (int id = 0; id < XC_STATS_MAX_ALGOS; id++) {
        const char *a = xc_algo_name(id);
        if (a && strlen(a) == len && !strncmp(a, name, len)) return id;
    }
    return -1;
}

/* The collective an algorithm name belongs to ("allreduce" of
 * "allreduce.ring"), or -1. */
static int algo_coll(const char *name, size_t len)
{
    const char *dot = memchr(name, '.', len);
    size_t n = dot ? (size_t)(dot - name) : len;
    for (int k = 0; k < XC_COLL_COUNT; k++) {
        const char *c = xc_coll_name((xc_coll_t)k);
        if (strlen(c) == n && !strncmp(c, name, n)) return k;
    }
    return -1;
}

void h_stats_ops(xc_comm_t *comm, uint64_t *out)
{
    xc_stats_t st;
    stats_of(comm, &st);
    memcpy(out, st.ops, sizeof st.ops);
}

static void check_forced_algos(const xc_stats_t *st, const uint64_t *issued)
{
    const char *env = getenv("XCOLL_ALGO");
    for (const char *p = env; p && *p;) {
        size_t len = strcspn(p, ",");
        int id = algo_id(p, len), coll = algo_coll(p, len);
        char w[160];
        snprintf(w, sizeof w, "XCOLL_ALGO names a known algorithm (\"%.*s\")",
                 (int)len, p);
        H_TRUE(w, id >= 0 && coll >= 0);
        if (id >= 0 && coll >= 0) {
            snprintf(w, sizeof w, "xc_comm_stats algo_ops[%.*s] (delta) under "
                     "XCOLL_ALGO", (int)len, p);
            H_EQ_U64(w, st->algo_ops[id] - H.base_algo[id], issued[coll]);
        }
        p += len;
        if (*p == ',') p++;
    }
}

void h_check_stats(xc_comm_t *comm, const uint64_t *base,
                   const uint64_t *issued, const char *what)
{
    xc_stats_t st;
    stats_of(comm, &st);
    for (int k = 0; k < XC_COLL_COUNT; k++) {
        char w[128];
        snprintf(w, sizeof w, "%s: xc_comm_stats ops[%s] (delta)", what,
                 xc_coll_name((xc_coll_t)k));
        H_EQ_U64(w, st.ops[k] - (base ? base[k] : 0), issued[k]);
    }
    if (comm == H.comm) check_forced_algos(&st, issued);
}

/* ------------------------------------------------------------ lifecycle */

/* The harness's own fp16/bf16 conversions must be right before any dtype
 * check can be trusted: round trips and the round-to-nearest-even ties. */
static void self_test_conversions(void)
{
    for (uint32_t b = 0; b < 65536; b++) {
        uint16_t h = (uint16_t)b;
        double f16 = h_fp16_to_double(h), b16 = h_bf16_to_double(h);
        if (f16 == f16 && h_float_to_fp16((float)f16) != h)
            h_fail(__FILE__, __LINE__, "harness fp16 round trip of 0x%04x", h);
        if (b16 == b16 && h_float_to_bf16((float)b16) != h)
            h_fail(__FILE__, __LINE__, "harness bf16 round trip of 0x%04x", h);
    }
    static const struct { float in; uint16_t fp16; } ties16[] = {
        {1.0f + 0x1p-11f, 0x3c00},      /* tie: stays even      */
        {1.0f + 3 * 0x1p-11f, 0x3c02},  /* tie: rounds up, even */
        {65519.0f, 0x7bff}, {65520.0f, 0x7c00}, {-65520.0f, 0xfc00},
        {0x1p-25f, 0x0000},             /* tie between 0 and 2^-24 */
        {0x1.8p-25f, 0x0001}, {0x1.8p-24f, 0x0002}, {0x1p-14f, 0x0400},
    };
    for (size_t i = 0; i < sizeof ties16 / sizeof ties16[0]; i++)
        H_EQ_U64("harness fp16 rounding", h_float_to_fp16(ties16[i].in),
                 ties16[i].fp16);
    H_EQ_U64("harness bf16 tie", h_float_to_bf16(1.0f + 0x1p-8f), 0x3f80);
    H_EQ_U64("harness bf16 tie up", h_float_to_bf16(1.0f + 3 * 0x1p-8f),
             0x3f82);
}

static int launched(void)
{
    static const char *const vars[] = {"XCOLL_RANK", "RANK", "SLURM_PROCID",
                                       "OMPI_COMM_WORLD_RANK", "PMI_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i])) return 1;
    return 0;
}

static void usage(const char *prog)
{
    fprintf(stderr, "usage: xcoll-run -n N %s [--quick|--full] [--seed N] "
            "[--verbose]\n", prog);
    exit(2);
}

void h_init(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *slash = strrchr(argv[0], '/');
    H.prog = slash ? slash + 1 : argv[0];
    H.seed = 0x5eedc011ull;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) H.full = 0;
        else if (!strcmp(argv[i], "--full")) H.full = 1;
        else if (!strcmp(argv[i], "--verbose")) H.verbose = 1;
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            H.seed = strtoull(argv[++i], NULL, 0);
        else usage(H.prog);
    }
    if (!launched()) {
        printf("%s: SKIP: no launcher environment (XCOLL_RANK, RANK, ...); "
               "run it as: xcoll-run -n N %s --quick\n", H.prog, H.prog);
        exit(77);
    }
    self_test_conversions();
    xc_result_t rc = xc_comm_init_env(&H.comm, NULL);
    if (rc != XC_OK) h_die_rc(__FILE__, __LINE__, "xc_comm_init_env", rc, NULL);
    H.rank = xc_comm_rank(H.comm);
    H.size = xc_comm_size(H.comm);
    xc_stats_t st;
    stats_of(H.comm, &st);
    memcpy(H.base_ops, st.ops, sizeof st.ops);
    memcpy(H.base_algo, st.algo_ops, sizeof st.algo_ops);
    g_start = h_now();
    const char *algo = getenv("XCOLL_ALGO");
    if (H.rank == 0)
        printf("%s: %d rank%s, %s matrix, seed 0x%llx%s%s\n", H.prog, H.size,
               H.size == 1 ? "" : "s", H.full ? "full" : "quick",
               (unsigned long long)H.seed, algo ? ", XCOLL_ALGO=" : "",
               algo ? algo : "");
}

int h_finish(void)
{
    if (H.comm) H_CHECK(H.comm, xc_comm_destroy(H.comm));
    H.comm = NULL;
    unsigned long f = h_failures();
    unsigned long checks = __atomic_load_n(&g_checks, __ATOMIC_RELAXED);
    printf("[rank %d] %s: %s: %llu cases, %lu checks, %lu failure%s, %.2f s\n",
           H.rank, H.prog, f ? "FAIL" : "PASS", (unsigned long long)g_cases,
           checks, f, f == 1 ? "" : "s", h_now() - g_start);
    if (checks == 0) {
        printf("[rank %d] %s: FAIL: no check was performed\n", H.rank, H.prog);
        return 1;
    }
    return f ? 1 : 0;
}
