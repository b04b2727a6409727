/*
 * test_bucketer.c -- the gradient bucketer (xcoll.h, "bucketer") on N real
 * processes:
 *
 *  - equality: ten gradients (fp32 of many sizes, one empty, a bf16, an
 *    fp64), marked in a different random order on every rank and every
 *    step, bucketed with small capacities and with the defaults, copied and
 *    as views, must equal the same inputs all-reduced tensor by tensor
 *    (XC_AVG): bit for bit under XCOLL_DETERMINISTIC=1; otherwise within
 *    2(N+1)u·S/N + 2u'·S/N of each other, where S = sum over ranks of |x|,
 *    u the unit round-off of the accumulation (2^-24 for fp32, bf16 and
 *    fp16 accumulate in fp32; 2^-53 for fp64) and u' that of the result's
 *    dtype (each side is within (N-1)u·S of the exact sum, plus one
 *    rounding of the average);
 *  - order rebuild: after step 1 the layout follows rank 0's arrival order
 *    (not the local one), is identical on every rank, respects the
 *    capacities, and does not change again; with rebuild off it stays the
 *    reverse registration order; a step in which rank 0 missed gradients
 *    postpones the rebuild to the next complete step;
 *  - views: each gradient's address is inside its bucket at its offset, and
 *    the reduced values survive the rebuild's move;
 *  - scaling: XC_AVG and XC_SUM on integer-valued data, exactly;
 *  - launch: a bucket's reduction starts (through a counting hook) inside
 *    the mark_ready that completes it (or, with the launch thread, soon
 *    after), never before its predecessors, in layout order; the hook's
 *    done runs once per bucket; a failing start is reported by finish,
 *    naming the bucket, and the other buckets complete;
 *  - misuse: marked twice, finish with unmarked gradients (named, and the
 *    communicator stays usable), registrations that differ across ranks
 *    (count, number, capacities: every rank fails naming the gradient and
 *    the rank), bad indices, calls out of order, bad options and variables;
 *  - tuner: refuses before a complete step, answers the same on every rank
 *    with one of its candidates.
 */
#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct spec {
    const char *name;
    size_t count;
    xc_dtype_t dtype;
} spec_t;

static const spec_t k_specs[] = {
    {"embed.weight", 70001, XC_FLOAT32}, {"embed.bias", 7, XC_FLOAT32},
    {"l1.weight", 300000, XC_FLOAT32},   {"l1.bias", 1000, XC_FLOAT32},
    {"l2.weight", 0, XC_FLOAT32},        {"l2.scale", 5003, XC_BFLOAT16},
    {"l2.bias", 1, XC_FLOAT32},          {"head.weight", 120000, XC_FLOAT32},
    {"head.scale", 999, XC_FLOAT64},     {"head.bias", 10, XC_FLOAT32},
};
#define NG ((int)(sizeof k_specs / sizeof k_specs[0]))

static int g_det;   /* XCOLL_DETERMINISTIC=1 */
static int g_split; /* the bucketers `make` creates split large gradients */

/* ------------------------------------------------------------ data */

/* Input element i of gradient g on `rank` at `step`: in [-1, 1), or with
 * `integral` a small integer (sums and halves exact). */
static double gen(int step, int rank, int g, size_t i, int integral)
{
    uint64_t h = h_mix64(H.seed ^ ((uint64_t)step << 48) ^ ((uint64_t)rank << 40) ^
                         ((uint64_t)g << 32) ^ (uint64_t)i);
    if (integral) return (double)(rank + 1) * (double)(h % 7 + 1);
    return (double)(h >> 11) * 0x1p-52 - 1.0;
}

static void store(void *buf, size_t i, xc_dtype_t dt, double v)
{
    switch (dt) {
    case XC_FLOAT32: ((float *)buf)[i] = (float)v; break;
    case XC_FLOAT64: ((double *)buf)[i] = v; break;
    case XC_BFLOAT16: ((uint16_t *)buf)[i] = h_float_to_bf16((float)v); break;
    default: abort();
    }
}

static double load(const void *buf, size_t i, xc_dtype_t dt)
{
    return h_to_double(dt, h_load(buf, i, dt));
}

/* The value `rank` actually feeds (rounded to the dtype). */
static double input(int step, int rank, int g, size_t i, int integral)
{
    double v = gen(step, rank, g, i, integral);
    switch (k_specs[g].dtype) {
    case XC_FLOAT32: return (double)(float)v;
    case XC_BFLOAT16: return h_bf16_to_double(h_float_to_bf16((float)v));
    default: return v;
    }
}

static void fill(void *dst, int step, int g, int integral)
{
    for (size_t i = 0; i < k_specs[g].count; i++)
        store(dst, i, k_specs[g].dtype, gen(step, H.rank, g, i, integral));
}

/* A permutation of the gradients, different per (step, rank). */
static void arrival(int step, int rank, int *perm)
{
    for (int g = 0; g < NG; g++) perm[g] = g;
    uint64_t s = h_mix64(H.seed ^ 0xa11 ^ ((uint64_t)step << 20) ^ (uint64_t)rank);
    for (int g = NG - 1; g > 0; g--) {
        s = h_mix64(s);
        int j = (int)(s % (uint64_t)(g + 1)), t = perm[g];
        perm[g] = perm[j];
        perm[j] = t;
    }
}

static void *grad_storage(xc_bucketer_t *b, void **user, int g)
{
    return user ? user[g] : xc_bucketer_grad(b, g);
}

/* ------------------------------------------------------------ helpers */

static xc_bucketer_t *make(double mb, double first_mb, int views, int rebuild, int average,
                           void **user)
{
    xc_bucketer_opts_t o = XC_BUCKETER_OPTS_INIT;
    o.bucket_mb = mb;
    o.first_bucket_mb = first_mb;
    o.views = views;
    o.rebuild = rebuild;
    o.average = average;
    o.split = g_split;
    xc_bucketer_t *b;
    H_CHECK(H.comm, xc_bucketer_create(H.comm, &o, &b));
    for (int g = 0; g < NG; g++) {
        int idx;
        H_CHECK(H.comm, xc_bucketer_register(b, views ? NULL : user[g], k_specs[g].count,
                                             k_specs[g].dtype, k_specs[g].name, &idx));
        H_EQ_INT("registration index", idx, g);
    }
    H_CHECK(H.comm, xc_bucketer_commit(b));
    return b;
}

static void **alloc_user(void)
{
    void **u = calloc(NG, sizeof *u);
    for (int g = 0; g < NG; g++)
        u[g] = h_alloc(k_specs[g].count * xc_dtype_size(k_specs[g].dtype) + 1);
    return u;
}

static void free_user(void **u)
{
    for (int g = 0; u && g < NG; g++) h_free(u[g]);
    free(u);
}

static xc_bucketer_info_t info_of(const xc_bucketer_t *b)
{
    xc_bucketer_info_t i;
    memset(&i, 0, sizeof i);
    i.size = sizeof i;
    H_CHECK(H.comm, xc_bucketer_info(b, &i));
    return i;
}

/* The layout walks `order`: (bucket, offset) strictly increasing over the
 * fp32 gradients (one dtype, so one run of buckets); capacities hold; views
 * point into their buckets; the layout is the same on every rank. */
static void check_layout(xc_bucketer_t *b, const int *order, const char *what)
{
    xc_bucketer_info_t in = info_of(b);
    int pb = -1;
    size_t po = 0;
    char w[200];
    for (int p = 0; p < NG; p++) {
        int g = order[p], k;
        size_t off;
        if (k_specs[g].dtype != XC_FLOAT32 || k_specs[g].count == 0) continue;
        H_CHECK(H.comm, xc_bucketer_locate(b, g, &k, &off));
        snprintf(w, sizeof w, "%s: '%s' placed after its predecessor in the order", what,
                 k_specs[g].name);
        H_TRUE(w, k > pb || (k == pb && off > po));
        pb = k;
        po = off;
    }
    uint64_t table[2 * NG];
    int seen_first[XC_DTYPE_COUNT] = {0};
    for (int k = 0; k < in.nbuckets; k++) {
        xc_bucket_t bk;
        H_CHECK(H.comm, xc_bucketer_bucket(b, k, &bk));
        H_EQ_INT("bucket index", bk.index, k);
        size_t es = xc_dtype_size(bk.dtype), cap = seen_first[bk.dtype]++ ? in.bucket_bytes
                                                                           : in.first_bucket_bytes;
        int nonempty = 0;
        if (bk.ngrads == 1 && k_specs[bk.grads[0]].count > bk.count) { /* a piece */
            int g = bk.grads[0];
            snprintf(w, sizeof w, "%s: bucket %d, a piece of '%s' (element %zu of %zu)", what, k,
                     k_specs[g].name, bk.first_elem, k_specs[g].count);
            H_TRUE(w, g_split && bk.offsets[0] == 0 &&
                          bk.first_elem + bk.count <= k_specs[g].count &&
                          bk.count * es <= in.bucket_bytes); /* pieces: the bucket size */
            if (in.views)
                H_TRUE(w, (char *)xc_bucketer_grad(b, g) + bk.first_elem * es == bk.data);
            continue;
        }
        H_EQ_U64("first element of a whole-gradient bucket", bk.first_elem, 0);
        for (int j = 0; j < bk.ngrads; j++) {
            int g = bk.grads[j];
            nonempty += k_specs[g].count > 0;
            H_EQ_INT("gradient's dtype is its bucket's", k_specs[g].dtype, bk.dtype);
            H_TRUE("gradient inside its bucket", bk.offsets[j] + k_specs[g].count <= bk.count);
            if (in.views && k_specs[g].count) {
                snprintf(w, sizeof w, "%s: view of '%s' at its bucket's memory + offset", what,
                         k_specs[g].name);
                H_TRUE(w, xc_bucketer_grad(b, g) == (char *)bk.data + bk.offsets[j] * es);
            }
        }
        if (nonempty > 1) {
            snprintf(w, sizeof w, "%s: bucket %d of %d gradients within its capacity %zu",
                     what, k, nonempty, cap);
            H_TRUE(w, bk.count * es <= cap);
        }
    }
    for (int g = 0; g < NG; g++) {
        int k;
        size_t off;
        H_CHECK(H.comm, xc_bucketer_locate(b, g, &k, &off));
        table[2 * g] = (uint64_t)k;
        table[2 * g + 1] = off;
    }
    h_case_t c = h_case("bucketer layout", XC_UINT64, H_COPY, 2 * NG, -1, -1);
    h_check_identical(&c, H.comm, table, sizeof table);
}

/* Bucketed results (in `got`) against the per-tensor all-reduce of the
 * same inputs. */
/* Gradient g of `step` against its own all-reduce (collective). */
static void check_one(xc_bucketer_t *b, void **user, int step, xc_op_t op, const char *what,
                      int g)
{
    {
        const spec_t *s = &k_specs[g];
        size_t bytes = s->count * xc_dtype_size(s->dtype);
        void *ref = h_alloc(bytes + 1);
        fill(ref, step, g, 0);
        H_CHECK(H.comm, xc_allreduce(ref, ref, s->count, s->dtype, op, H.comm));
        const void *got = grad_storage(b, user, g);
        char w[200];
        snprintf(w, sizeof w, "%s step %d '%s' (%s x %zu)", what, step, s->name,
                 xc_dtype_name(s->dtype), s->count);
        h_checked();
        if (g_det) {
            if (bytes && memcmp(got, ref, bytes) != 0) {
                size_t i = 0;
                while (h_load(got, i, s->dtype) == h_load(ref, i, s->dtype)) i++;
                h_fail(__FILE__, __LINE__, "%s: not bit-identical to the per-tensor "
                       "all-reduce under XCOLL_DETERMINISTIC=1: element %zu is %a, expected %a",
                       w, i, load(got, i, s->dtype), load(ref, i, s->dtype));
            }
        } else {
            double u = s->dtype == XC_FLOAT64 ? 0x1p-53 : 0x1p-24;
            double uo = s->dtype == XC_BFLOAT16 ? 0x1p-8 : u;
            int n = H.size, bad = 0;
            for (size_t i = 0; i < s->count && bad < 3; i++) {
                double sum_abs = 0;
                for (int r = 0; r < n; r++) sum_abs += fabs(input(step, r, g, i, 0));
                double scale = op == XC_AVG ? sum_abs / n : sum_abs;
                double tol = 2.0 * (n + 1) * u * scale + 2.0 * uo * scale;
                double a = load(got, i, s->dtype), e = load(ref, i, s->dtype);
                if (!(fabs(a - e) <= tol)) {
                    bad++;
                    h_fail(__FILE__, __LINE__, "%s: element %zu is %.9g, per-tensor %.9g, "
                           "difference %.3g > tolerance %.3g", w, i, a, e, fabs(a - e), tol);
                }
            }
        }
        h_free(ref);
    }
}

static void check_against_per_tensor(xc_bucketer_t *b, void **user, int step, xc_op_t op,
                                     const char *what)
{
    for (int g = 0; g < NG; g++) check_one(b, user, step, op, what, g);
}

/* ------------------------------------------------------------ tests */

static void test_equality(double mb, double first_mb, int views, int rebuild, int steps)
{
    char what[120];
    snprintf(what, sizeof what, "equality (%g/%g MiB, %s, rebuild %d%s)", mb, first_mb,
             views ? "views" : "copies", rebuild, g_split ? ", split" : "");
    void **user = views ? NULL : alloc_user();
    xc_bucketer_t *b = make(mb, first_mb, views, rebuild, 1, user);
    int perm[NG], rev[NG], perm0[NG];
    for (int g = 0; g < NG; g++) rev[g] = NG - 1 - g;
    check_layout(b, rev, what);
    for (int step = 1; step <= steps; step++) {
        for (int g = 0; g < NG; g++) fill(grad_storage(b, user, g), step, g, 0);
        arrival(step, H.rank, perm);
        void *before[NG];
        for (int g = 0; g < NG; g++) before[g] = grad_storage(b, user, g);
        for (int j = 0; j < NG; j++) H_CHECK(H.comm, xc_bucketer_mark_ready(b, perm[j]));
        H_CHECK(H.comm, xc_bucketer_finish(b));
        /* addresses fetched before a rebuild still read the results */
        for (int g = 0; g < NG; g++) {
            size_t bytes = k_specs[g].count * xc_dtype_size(k_specs[g].dtype);
            char w[320];
            snprintf(w, sizeof w, "%s step %d: '%s' at its address from before finish", what,
                     step, k_specs[g].name);
            H_TRUE(w, !bytes || !memcmp(before[g], grad_storage(b, user, g), bytes));
        }
        xc_bucketer_info_t in = info_of(b);
        H_EQ_U64("step after finish", in.step, (uint64_t)step + 1);
        if (step == 1) arrival(1, 0, perm0); /* rank 0's order decides */
        H_EQ_INT("layout generation", in.layout, rebuild ? 1 : 0);
        check_layout(b, rebuild ? perm0 : rev, what);
        check_against_per_tensor(b, user, step, XC_AVG, what);
    }
    H_CHECK(H.comm, xc_bucketer_destroy(b));
    free_user(user);
}

static void test_scaling(int average, int views)
{
    void **user = views ? NULL : alloc_user();
    xc_bucketer_t *b = make(0.25, 0.0625, views, 1, average, user);
    for (int step = 1; step <= 2; step++) {
        for (int g = 0; g < NG; g++) fill(grad_storage(b, user, g), step, g, 1);
        for (int g = 0; g < NG; g++) H_CHECK(H.comm, xc_bucketer_mark_ready(b, g));
        H_CHECK(H.comm, xc_bucketer_finish(b));
        for (int g = 0; g < NG; g++) {
            const void *got = grad_storage(b, user, g);
            for (size_t i = 0; i < k_specs[g].count; i++) {
                double sum = 0;
                for (int r = 0; r < H.size; r++) sum += gen(step, r, g, i, 1);
                double e = average ? sum / H.size : sum;
                if (k_specs[g].dtype == XC_BFLOAT16) e = h_bf16_to_double(h_float_to_bf16((float)e));
                else if (k_specs[g].dtype == XC_FLOAT32) e = (double)(float)e;
                double a = load(got, i, k_specs[g].dtype);
                h_checked();
                if (a != e) {
                    h_fail(__FILE__, __LINE__, "%s (%s) step %d '%s'[%zu] = %.17g, expected %.17g",
                           average ? "average" : "sum", views ? "views" : "copies", step,
                           k_specs[g].name, i, a, e);
                    break;
                }
            }
        }
    }
    H_CHECK(H.comm, xc_bucketer_destroy(b));
    free_user(user);
}

static int contains(const char *hay, const char *needle) { return strstr(hay, needle) != NULL; }

static void expect_msg(const xc_bucketer_t *b, const char *needle, const char *what)
{
    char w[300];
    snprintf(w, sizeof w, "%s: message \"%s\" names \"%s\"", what, xc_bucketer_last_error(b),
             needle);
    H_TRUE(w, contains(xc_bucketer_last_error(b), needle));
}

/* A hook that records its calls and sums; done doubles fp32 buckets.  The
 * counters are atomic (relaxed): start may run on the launch thread. */
typedef struct hook_log {
    int starts, dones;
    int order[64];
    int op_seen;
    uint64_t step_seen;
    int fail_index; /* start fails for this bucket (-1: never) */
} hook_log_t;

static int load_int(const int *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }

static xc_result_t hook_start(void *ctx, xc_comm_t *comm, const xc_bucket_t *bk, xc_request_t **req)
{
    hook_log_t *l = ctx;
    int n = load_int(&l->starts);
    if (n < 64) l->order[n] = bk->index;
    l->op_seen = bk->op;
    l->step_seen = bk->step;
    __atomic_store_n(&l->starts, n + 1, __ATOMIC_RELEASE);
    if (bk->index == l->fail_index) {
        *req = NULL;
        return XC_ERR_UNSUPPORTED;
    }
    return xc_iallreduce(bk->data, bk->data, bk->count, bk->dtype, XC_SUM, comm, req);
}

static xc_result_t hook_done(void *ctx, xc_comm_t *comm, const xc_bucket_t *bk)
{
    (void)comm;
    hook_log_t *l = ctx;
    l->dones++;
    if (bk->dtype == XC_FLOAT32)
        for (size_t i = 0; i < bk->count; i++) ((float *)bk->data)[i] *= 2.0f;
    return XC_OK;
}

/* With the launch thread, a launch happens soon after the mark, not in it:
 * wait (bounded) for `want` starts. */
static int starts_reach(const hook_log_t *l, int want, int thread)
{
    double t0 = h_now();
    while (thread && load_int(&l->starts) < want && h_now() - t0 < 10) {
    }
    return load_int(&l->starts);
}

/* n fp32 gradients of c values in u[g] (copy mode), named names[g], one
 * bucket each unless o sets capacities (capacity 0: buckets in reverse
 * registration order), with the logging hook installed: the set-up of the
 * hook tests. */
static xc_bucketer_t *hooked(xc_bucketer_opts_t o, int n, int c, const char *const *names,
                             float **u, hook_log_t *log)
{
    if (o.bucket_mb < 0) o.bucket_mb = 0;
    if (o.first_bucket_mb < 0) o.first_bucket_mb = 0;
    xc_bucketer_t *b;
    H_CHECK(H.comm, xc_bucketer_create(H.comm, &o, &b));
    for (int g = 0; g < n; g++) {
        u[g] = h_alloc((size_t)c * sizeof(float));
        H_CHECK(H.comm, xc_bucketer_register(b, u[g], (size_t)c, XC_FLOAT32, names[g], NULL));
    }
    H_CHECK(H.comm, xc_bucketer_commit(b));
    memset(log, 0, sizeof *log);
    log->fail_index = -1;
    xc_bucket_hook_t hk = {sizeof hk, log, hook_start, hook_done};
    H_CHECK(H.comm, xc_bucketer_set_hook(b, &hk));
    return b;
}

/* This rank's gradient values: (rank + 1)(g + 1) + i % mod. */
static void fill_hooked(float **u, int n, int c, int mod)
{
    for (int g = 0; g < n; g++)
        for (int i = 0; i < c; i++) u[g][i] = (float)((H.rank + 1) * (g + 1) + i % mod);
}

/* After the hook's sum over the ranks and its doubling in done. */
static void check_hooked(float **u, int n, int c, int mod, const char *const *names,
                         const char *what, int step)
{
    int N = H.size;
    for (int g = 0; g < n; g++)
        for (int i = 0; i < c; i++) {
            float e = 2.0f * (float)((g + 1) * N * (N + 1) / 2 + N * (i % mod));
            h_checked();
            if (u[g][i] != e) {
                h_fail(__FILE__, __LINE__, "%s, step %d: '%s'[%d] = %g, expected %g", what, step,
                       names[g], i, u[g][i], e);
                break;
            }
        }
}

static void test_launch_and_hook(int thread)
{
    /* Three fp32 gradients a, b, c, capacity 0: buckets [c] [b] [a] (reverse
     * registration order), rebuild off. */
    enum { N = 3, C = 1000 };
    float *u[N];
    xc_bucketer_opts_t o = XC_BUCKETER_OPTS_INIT;
    o.rebuild = 0;
    o.launch_thread = thread;
    const char *const names[N] = {"a", "b", "c"};
    hook_log_t log;
    xc_bucketer_t *b = hooked(o, N, C, names, u, &log);
    xc_bucketer_info_t in = info_of(b);
    H_EQ_INT("launch thread as asked (one rank: never)", in.launch_thread, thread && H.size > 1);
    thread = in.launch_thread;
    fill_hooked(u, N, C, 5);
    H_CHECK(H.comm, xc_bucketer_mark_ready(b, 1)); /* bucket 1 complete, bucket 0 not */
    if (thread) {
        double t0 = h_now();
        while (h_now() - t0 < 0.05) {
        } /* give a wrong launch the time to happen */
    }
    H_EQ_INT("no launch before the predecessor bucket", load_int(&log.starts), 0);
    H_EQ_INT("set_hook refused inside a step", xc_bucketer_set_hook(b, NULL), XC_ERR_INVALID);
    H_CHECK(H.comm, xc_bucketer_mark_ready(b, 2)); /* bucket 0: launches 0 and 1 */
    H_EQ_INT("launched by (or right after) mark_ready", starts_reach(&log, 2, thread), 2);
    H_CHECK(H.comm, xc_bucketer_mark_ready(b, 0));
    H_EQ_INT("third launch", starts_reach(&log, 3, thread), 3);
    H_EQ_INT("done not before finish", log.dones, 0);
    H_CHECK(H.comm, xc_bucketer_finish(b));
    H_EQ_INT("done once per bucket", log.dones, 3);
    for (int k = 0; k < 3; k++) H_EQ_INT("hook called in layout order", log.order[k], k);
    H_EQ_INT("bucket op shown to the hook", log.op_seen, XC_AVG);
    H_EQ_U64("bucket step shown to the hook", log.step_seen, 1);
    int n = H.size;
    check_hooked(u, N, C, 5, names, "hook result", 1);
    /* A hook whose start fails (on every rank, for the middle bucket): finish
     * reports it, naming the bucket; the other buckets still complete. */
    log.fail_index = 1;
    for (int g = 0; g < N; g++) {
        for (int i = 0; i < C; i++) u[g][i] = 1.0f;
        /* without the thread, the mark that launches bucket 1 fails at once */
        xc_result_t rc = xc_bucketer_mark_ready(b, g);
        H_TRUE("mark_ready: OK, or the launch error without a launch thread",
               rc == XC_OK || (!thread && rc == XC_ERR_UNSUPPORTED));
    }
    H_EXPECT_RC(H.comm, XC_ERR_UNSUPPORTED, xc_bucketer_finish(b));
    expect_msg(b, "hook's start", "failing hook");
    expect_msg(b, "bucket 1 (fp32", "failing hook names the bucket");
    H_EQ_INT("done skipped for the bucket whose start failed", log.dones, 5);
    h_checked();
    if (u[2][0] != 2.0f * n) /* gradient c: bucket 0, summed then doubled */
        h_fail(__FILE__, __LINE__, "bucket 0 next to a failed one: %g, expected %g", u[2][0],
               2.0f * n);
    /* Without the hook: the default all-reduce again. */
    H_CHECK(H.comm, xc_bucketer_set_hook(b, NULL));
    for (int g = 0; g < N; g++) {
        for (int i = 0; i < C; i++) u[g][i] = (float)(H.rank + 1);
        H_CHECK(H.comm, xc_bucketer_mark_ready(b, g));
    }
    H_CHECK(H.comm, xc_bucketer_finish(b));
    H_EQ_INT("hook removed", load_int(&log.starts), 6);
    h_checked();
    if (u[0][0] != (float)(n + 1) / 2)
        h_fail(__FILE__, __LINE__, "default all-reduce after removing the hook: %g, expected %g",
               u[0][0], (float)(n + 1) / 2);
    H_CHECK(H.comm, xc_bucketer_destroy(b));
    for (int g = 0; g < N; g++) h_free(u[g]);
}

/* xc_bucketer_wait: each gradient complete (and right) before finish, in an
 * order unlike the buckets' (the next forward's); refused, naming what is
 * missing, while its bucket cannot have started; finish afterwards ends the
 * step without redoing anything. */
static void test_wait(int views)
{
    char what[80];
    snprintf(what, sizeof what, "wait (%s%s)", views ? "views" : "copies",
             g_split ? ", split" : "");
    void **user = views ? NULL : alloc_user();
    xc_bucketer_t *b = make(0.25, 0.0625, views, 1, 1, user);
    for (int step = 1; step <= 3; step++) {
        for (int g = 0; g < NG; g++) fill(grad_storage(b, user, g), step, g, 0);
        int perm[NG];
        arrival(step, H.rank, perm);
        /* Nothing marked: no bucket can have started. */
        H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_bucketer_wait(b, perm[0]));
        expect_msg(b, "cannot start", "wait before the marks");
        expect_msg(b, "marked ready", "wait before the marks");
        H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_bucketer_wait(b, NG));
        for (int j = 0; j < NG; j++) H_CHECK(H.comm, xc_bucketer_mark_ready(b, perm[j]));
        for (int g = 0; g < NG; g++) { /* registration order: the next forward's */
            H_CHECK(H.comm, xc_bucketer_wait(b, g));
            check_one(b, user, step, XC_AVG, what, g);
        }
        H_CHECK(H.comm, xc_bucketer_wait(b, 0)); /* again: at once */
        H_CHECK(H.comm, xc_bucketer_finish(b));
        H_EQ_U64("step after finish", info_of(b).step, (uint64_t)step + 1);
        check_against_per_tensor(b, user, step, XC_AVG, what);
    }
    H_CHECK(H.comm, xc_bucketer_destroy(b));
    free_user(user);
}

/* With a hook: done runs once per bucket, at the wait that completes it
 * (not again at finish); a wait whose bucket waits for an earlier one's
 * gradient names that gradient. */
static void test_wait_hook(int thread)
{
    enum { N = 3, C = 777 };
    float *u[N];
    xc_bucketer_opts_t o = XC_BUCKETER_OPTS_INIT;
    o.rebuild = 0;
    o.launch_thread = thread;
    const char *const names[N] = {"a", "b", "c"}; /* buckets [c] [b] [a] */
    hook_log_t log;
    xc_bucketer_t *b = hooked(o, N, C, names, u, &log);
    int n = H.size;
    for (int step = 1; step <= 2; step++) {
        fill_hooked(u, N, C, 3);
        H_CHECK(H.comm, xc_bucketer_mark_ready(b, 1)); /* bucket 1 complete, bucket 0 not */
        H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_bucketer_wait(b, 1));
        expect_msg(b, "'c' of bucket 0 is marked ready", "wait behind an incomplete bucket");
        H_CHECK(H.comm, xc_bucketer_mark_ready(b, 2));
        H_CHECK(H.comm, xc_bucketer_mark_ready(b, 0));
        int before = log.dones;
        H_CHECK(H.comm, xc_bucketer_wait(b, 0)); /* 'a': bucket 2 */
        H_EQ_INT("done at the wait", log.dones, before + 1);
        H_CHECK(H.comm, xc_bucketer_wait(b, 0));
        H_EQ_INT("done once", log.dones, before + 1);
        float e0 = 2.0f * (float)(n * (n + 1) / 2 + n * 0);
        H_TRUE("'a' reduced and handed back at the wait", u[0][0] == e0);
        H_CHECK(H.comm, xc_bucketer_finish(b));
        H_EQ_INT("finish completes the others only", log.dones, before + 3);
        check_hooked(u, N, C, 3, names, "wait with a hook (done applied once)", step);
    }
    H_CHECK(H.comm, xc_bucketer_destroy(b));
    for (int g = 0; g < N; g++) h_free(u[g]);
}

/* forward_tail: after three steps on the rebuilt layout the launch
 * sequence is the layout order up to tail_from, then last bucket first
 * (XCOLL_BUCKET_TAIL_FROM forces the split that rank 0's timing would
 * choose); waits and finish still give every gradient its value, and the
 * hook sees the new order. */
static void test_forward_tail(int thread)
{
    enum { N = 4, C = 500 };
    float *u[N];
    xc_bucketer_opts_t o = XC_BUCKETER_OPTS_INIT;
    o.launch_thread = thread;
    o.forward_tail = 1;
    setenv("XCOLL_BUCKET_TAIL_FROM", "1", 1);
    const char *const names[N] = {"w0", "w1", "w2", "w3"};
    hook_log_t log;
    xc_bucketer_t *b = hooked(o, N, C, names, u, &log);
    /* step 1 rebuilds the layout; steps 2-4 are timed on it; the finish of
     * step 4 decides the tail; steps 5-6 use it. */
    for (int step = 1; step <= 6; step++) {
        fill_hooked(u, N, C, 7);
        for (int g = N - 1; g >= 0; g--) H_CHECK(H.comm, xc_bucketer_mark_ready(b, g)); /* backward */
        if (step > 1) { /* the next forward: first layer first */
            for (int g = 0; g < N; g++) H_CHECK(H.comm, xc_bucketer_wait(b, g));
        }
        H_CHECK(H.comm, xc_bucketer_finish(b));
        xc_bucketer_info_t in = info_of(b);
        H_EQ_INT("tail_from: none before the decision, then rank 0's forced split", in.tail_from,
                 step < 4 ? N : 1);
        if (step > 4) { /* layout: w3 w2 w1 w0; sequence: 0, then 3 2 1 */
            static const int want[N] = {0, 3, 2, 1};
            for (int k = 0; k < N; k++)
                H_EQ_INT("launch sequence with a forward tail", log.order[(step - 1) * N + k],
                         want[k]);
        } else {
            for (int k = 0; k < N; k++)
                H_EQ_INT("launch sequence before the decision", log.order[(step - 1) * N + k], k);
        }
        check_hooked(u, N, C, 7, names, "forward tail", step);
    }
    unsetenv("XCOLL_BUCKET_TAIL_FROM");
    H_CHECK(H.comm, xc_bucketer_destroy(b));
    for (int g = 0; g < N; g++) h_free(u[g]);
}

/* split + forward_tail: three gradients of 12000 bytes with 4096-byte
 * buckets are nine pieces, [w2 a b c] [w1 a b c] [w0 a b c]; a tail forced
 * from bucket 4 issues 0 1 2 3 8 7 6 5 4, which puts w1's later pieces
 * behind w0's: waiting for w1 before w0 is marked is refused, naming w0;
 * every value still arrives (the hook sums and doubles each piece). */
static void test_split_tail(void)
{
    enum { N = 3, C = 3000, NB = 9 };
    float *u[N];
    xc_bucketer_opts_t o = XC_BUCKETER_OPTS_INIT;
    o.forward_tail = 1;
    o.split = 1;
    o.bucket_mb = o.first_bucket_mb = 4096.0 / (1024.0 * 1024.0);
    setenv("XCOLL_BUCKET_TAIL_FROM", "4", 1);
    const char *const names[N] = {"w0", "w1", "w2"};
    hook_log_t log;
    xc_bucketer_t *b = hooked(o, N, C, names, u, &log);
    H_EQ_INT("buckets: three pieces per gradient", info_of(b).nbuckets, NB);
    xc_bucket_t bk;
    H_CHECK(H.comm, xc_bucketer_bucket(b, 5, &bk));
    H_TRUE("bucket 5 is w1's last piece, from element 2048", bk.ngrads == 1 && bk.grads[0] == 1 &&
                                                               bk.first_elem == 2048 &&
                                                               bk.count == C - 2048);
    for (int step = 1; step <= 6; step++) {
        fill_hooked(u, N, C, 5);
        H_CHECK(H.comm, xc_bucketer_mark_ready(b, 2));
        H_CHECK(H.comm, xc_bucketer_mark_ready(b, 1));
        if (step == 6) {
            H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_bucketer_wait(b, 1));
            expect_msg(b, "'w0' of bucket 8 is marked ready", "wait for a piece issued after w0");
        }
        H_CHECK(H.comm, xc_bucketer_mark_ready(b, 0));
        if (step > 1)
            for (int g = 0; g < N; g++) H_CHECK(H.comm, xc_bucketer_wait(b, g));
        H_CHECK(H.comm, xc_bucketer_finish(b));
        static const int tail[NB] = {0, 1, 2, 3, 8, 7, 6, 5, 4};
        for (int k = 0; k < NB; k++)
            H_EQ_INT("launch sequence of the pieces", log.order[(step - 1) * NB + k],
                     step > 4 ? tail[k] : k);
        check_hooked(u, N, C, 5, names, "split with a forward tail", step);
    }
    unsetenv("XCOLL_BUCKET_TAIL_FROM");
    H_CHECK(H.comm, xc_bucketer_destroy(b));
    for (int g = 0; g < N; g++) h_free(u[g]);
}

/* Elements per piece of gradient g (its count if it is not split). */
static size_t piece_elems(xc_bucketer_t *b, int g)
{
    int k;
    size_t off;
    xc_bucket_t bk;
    H_CHECK(H.comm, xc_bucketer_locate(b, g, &k, &off));
    H_CHECK(H.comm, xc_bucketer_bucket(b, k, &bk));
    return bk.ngrads == 1 && bk.count < k_specs[g].count ? bk.count : k_specs[g].count;
}

/* xc_bucketer_mark_ready_range: split gradients marked piece by piece
 * (last piece first, two pieces in one call), the others whole, in a
 * different order on every rank, equal the per-tensor all-reduce; ranges
 * off the piece boundaries, outside the gradient, partial on a gradient
 * that is not split, and a piece marked twice are refused, naming the
 * gradient and changing nothing; a step that leaves a piece unmarked fails
 * in finish naming the gradient, and the next step is right again. */
static void test_ranges(int views)
{
    char what[80];
    snprintf(what, sizeof what, "ranges (%s)", views ? "views" : "copies");
    void **user = views ? NULL : alloc_user();
    xc_bucketer_t *b = make(0.25, 0.0625, views, 1, 1, user); /* g_split: 1 */
    const int l1 = 2, bias = 3; /* l1.weight: 300000 fp32 in 65536-element pieces */
    for (int step = 1; step <= 4; step++) {
        for (int g = 0; g < NG; g++) fill(grad_storage(b, user, g), step, g, 0);
        size_t pe = piece_elems(b, l1), n = k_specs[l1].count;
        H_EQ_U64("l1.weight's pieces", pe, 65536);
        if (step == 1) { /* refusals first: nothing changes */
            H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_bucketer_mark_ready_range(b, l1, 1, pe));
            expect_msg(b, "not whole pieces", "range off the piece boundaries");
            expect_msg(b, "'l1.weight'", "range off the piece boundaries");
            H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_bucketer_mark_ready_range(b, l1, 0, pe + 1));
            expect_msg(b, "not whole pieces", "range ending inside a piece");
            H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_bucketer_mark_ready_range(b, l1, pe, n));
            expect_msg(b, "outside", "range past the end");
            H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_bucketer_mark_ready_range(b, bias, 0, 10));
            expect_msg(b, "not split", "part of a gradient that is not split");
            H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_bucketer_mark_ready_range(b, l1, 0, 0));
            expect_msg(b, "not whole pieces", "an empty range");
            H_CHECK(H.comm, xc_bucketer_mark_ready_range(b, l1, pe, pe));
            H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_bucketer_mark_ready_range(b, l1, 0, 2 * pe));
            expect_msg(b, "piece 2 of 5", "a piece marked twice");
            H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_bucketer_mark_ready(b, l1));
            expect_msg(b, "marked ready twice", "the whole after a piece");
        }
        int perm[NG];
        arrival(step, H.rank, perm);
        for (int j = 0; j < NG; j++) {
            int g = perm[j];
            size_t c = k_specs[g].count, p = piece_elems(b, g);
            if (p == c) {
                H_CHECK(H.comm, c && (j + step) % 2 ? xc_bucketer_mark_ready_range(b, g, 0, c)
                                                    : xc_bucketer_mark_ready(b, g));
                continue;
            }
            size_t np = (c + p - 1) / p;
            for (size_t i = np; i-- > 0;) { /* last piece first */
                if (g == l1 && i == 1 && step == 1) continue; /* marked above */
                if (g == l1 && i == 4 && step == 3) continue; /* left out */
                if (i == 3 && g == l1) { /* pieces 3 and 4 in one call */
                    H_CHECK(H.comm, xc_bucketer_mark_ready_range(b, g, 2 * p, 2 * p));
                    i--;
                    continue;
                }
                size_t len = p < c - i * p ? p : c - i * p;
                H_CHECK(H.comm, xc_bucketer_mark_ready_range(b, g, i * p, len));
            }
        }
        if (step == 3) {
            H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_bucketer_finish(b));
            expect_msg(b, "'l1.weight'", "finish with a piece unmarked");
            continue;
        }
        H_CHECK(H.comm, xc_bucketer_finish(b));
        check_against_per_tensor(b, user, step, XC_AVG, what);
    }
    H_CHECK(H.comm, xc_bucketer_destroy(b));
    free_user(user);
}

static void test_misuse_steps(int views)
{
    void **user = views ? NULL : alloc_user();
    xc_bucketer_t *b = make(0.25, 0.0625, views, 1, 1, user);

    /* Marked twice: refused, nothing changes, the step completes correctly. */
    for (int g = 0; g < NG; g++) fill(grad_storage(b, user, g), 1, g, 1);
    H_CHECK(H.comm, xc_bucketer_mark_ready(b, 3));
    H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_bucketer_mark_ready(b, 3));
    expect_msg(b, "'l1.bias'", "marked twice");
    expect_msg(b, "twice", "marked twice");
    H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_bucketer_mark_ready(b, NG));
    H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_bucketer_mark_ready(b, -1));
    /* Every rank (rank 0 too, so the rebuild must wait) leaves 'embed.bias'
     * and 'head.bias' unmarked. */
    for (int g = 0; g < NG; g++)
        if (g != 3 && g != 1 && g != 9) H_CHECK(H.comm, xc_bucketer_mark_ready(b, g));
    H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_bucketer_finish(b));
    expect_msg(b, "'embed.bias', 'head.bias'", "finish with unmarked gradients");
    expect_msg(b, "never marked", "finish with unmarked gradients");
    xc_bucketer_info_t in = info_of(b);
    H_EQ_INT("no rebuild after an incomplete step on rank 0", in.layout, 0);
    H_EQ_U64("the step still ends", in.step, 2);
    /* The marked gradients were reduced correctly all the same. */
    const void *got = grad_storage(b, user, 3);
    double e = 0;
    for (int r = 0; r < H.size; r++) e += gen(1, r, 3, 0, 1);
    H_TRUE("marked gradient reduced in the failed step",
           load(got, 0, XC_FLOAT32) == (double)(float)(e / H.size));

    /* Step 2 complete: works, and the rebuild happens now. */
    int perm[NG];
    arrival(2, H.rank, perm);
    for (int g = 0; g < NG; g++) fill(grad_storage(b, user, g), 2, g, 0);
    for (int j = 0; j < NG; j++) H_CHECK(H.comm, xc_bucketer_mark_ready(b, perm[j]));
    H_CHECK(H.comm, xc_bucketer_finish(b));
    in = info_of(b);
    H_EQ_INT("rebuild after the first complete step", in.layout, 1);
    int perm0[NG];
    arrival(2, 0, perm0);
    check_layout(b, perm0, "rebuild postponed to step 2");
    check_against_per_tensor(b, user, 2, XC_AVG, "after misuse");

    /* Step 3: only the last rank leaves 'l1.bias' (3) unmarked.  It
     * contributes zero for it -- not the last step's result (copies) nor
     * what it filled in (views) -- so the others' 'l1.bias' is the
     * average of their values with a zero; only the last rank fails. */
    int last = H.rank == H.size - 1;
    for (int g = 0; g < NG; g++) fill(grad_storage(b, user, g), 3, g, 1);
    for (int g = 0; g < NG; g++)
        if (g != 3 || !last) H_CHECK(H.comm, xc_bucketer_mark_ready(b, g));
    if (last) H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_bucketer_finish(b));
    else H_CHECK(H.comm, xc_bucketer_finish(b));
    got = grad_storage(b, user, 3);
    e = 0;
    for (int r = 0; r < H.size - 1; r++) e += gen(3, r, 3, 0, 1);
    if (!last || views) /* (copies: the result is handed back only where marked) */
        H_TRUE("a gradient one rank left unmarked: that rank's part is zero",
               load(got, 0, XC_FLOAT32) == (double)(float)(e / H.size));
    /* Step 4: the last rank destroys its bucketer after marking one
     * gradient; the others finish the step normally.  The step completes
     * everywhere (the destroying rank finishes it), the others' results
     * count zero for what the last rank left, and the communicator works. */
    for (int g = 0; g < NG; g++) fill(grad_storage(b, user, g), 4, g, 1);
    if (last) {
        H_CHECK(H.comm, xc_bucketer_mark_ready(b, 3));
        H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_bucketer_destroy(b));
    } else {
        for (int g = 0; g < NG; g++) H_CHECK(H.comm, xc_bucketer_mark_ready(b, g));
        H_CHECK(H.comm, xc_bucketer_finish(b));
        got = grad_storage(b, user, 3);
        e = 0;
        for (int r = 0; r < H.size; r++) e += gen(4, r, 3, 0, 1);
        H_TRUE("a bucketer destroyed mid-step: the step completes",
               load(got, 0, XC_FLOAT32) == (double)(float)(e / H.size));
        H_CHECK(H.comm, xc_bucketer_destroy(b));
    }
    H_CHECK(H.comm, xc_barrier(H.comm));
    free_user(user);
}

/* The tuner: refuses before a complete step; then every rank gets the
 * same choice, one of the candidates, with predictions no shorter than the
 * measured backward; measuring alpha and bandwidth gives positive values. */
static void test_tune(void)
{
    void **user = alloc_user();
    xc_bucketer_t *b = make(0.25, 0.0625, 0, 1, 1, user);
    xc_bucket_tune_t t = XC_BUCKET_TUNE_INIT;
    H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_bucketer_tune(b, &t));
    expect_msg(b, "no complete step", "tune before a step");
    for (int step = 1; step <= 3; step++) {
        for (int g = 0; g < NG; g++) fill(user[g], step, g, 0);
        for (int g = NG - 1; g >= 0; g--) H_CHECK(H.comm, xc_bucketer_mark_ready(b, g));
        H_CHECK(H.comm, xc_bucketer_finish(b));
    }
    if (H.size > 1) {
        /* the last rank in the middle of a step (a gradient marked, its
         * bucket not launched): every rank refuses, naming it, and the
         * step then finishes as usual */
        int last = H.rank == H.size - 1;
        char rk[32];
        snprintf(rk, sizeof rk, "rank %d", H.size - 1);
        for (int g = 0; g < NG; g++) fill(user[g], 4, g, 0);
        if (last) H_CHECK(H.comm, xc_bucketer_mark_ready(b, 0));
        t = (xc_bucket_tune_t)XC_BUCKET_TUNE_INIT;
        H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_bucketer_tune(b, &t));
        expect_msg(b, "between steps", "tune mid-step on one rank");
        expect_msg(b, rk, "tune mid-step names the rank");
        for (int g = NG - 1; g >= 0; g--)
            if (!(last && g == 0)) H_CHECK(H.comm, xc_bucketer_mark_ready(b, g));
        H_CHECK(H.comm, xc_bucketer_finish(b));
        check_against_per_tensor(b, user, 4, XC_AVG, "the step after a refused tune");
    }
    t = (xc_bucket_tune_t)XC_BUCKET_TUNE_INIT;
    t.alpha_us = 20;
    t.gbps = 2;
    t.slowdown = 2;
    H_CHECK(H.comm, xc_bucketer_tune(b, &t));
    H_TRUE("candidates", t.ncand > 0 && t.ncand <= XC_BUCKET_TUNE_MAX);
    int found = 0;
    for (int i = 0; i < t.ncand; i++) {
        found |= t.cand_mb[i] == t.best_mb;
        H_TRUE("prediction >= backward", t.cand_ms[i] >= t.backward_ms);
        H_TRUE("at least one bucket", t.cand_buckets[i] >= 1);
    }
    H_TRUE("best is a candidate", found);
    H_TRUE("inputs kept", t.alpha_us == 20 && t.gbps == 2 && t.slowdown == 2);
    double mine[2] = {t.best_mb, t.predicted_ms};
    h_case_t c = h_case("bucketer tune", XC_FLOAT64, H_COPY, 2, -1, -1);
    h_check_identical(&c, H.comm, mine, sizeof mine);
    t = (xc_bucket_tune_t)XC_BUCKET_TUNE_INIT;
    H_CHECK(H.comm, xc_bucketer_tune(b, &t));
    H_TRUE("measured bandwidth", t.gbps > 0);
    H_TRUE("measured alpha", t.alpha_us >= 0);
    H_TRUE("fitted slowdown", t.slowdown >= 1);
    H_CHECK(H.comm, xc_bucketer_destroy(b));
    free_user(user);
}

/* The last rank out of memory at commit and at the rebuild: every rank
 * fails alike, naming it; nothing changes (the old layout stays); the
 * retry -- the next commit, the next step's finish -- works. */
static void test_oom(void)
{
    enum { BIG = 8 << 20 }; /* values: 32 MiB gradients, so the arena is 64 MiB */
    int last = H.rank == H.size - 1;
    char rk[48];
    snprintf(rk, sizeof rk, "failed on rank %d", H.size - 1);
    xc_bucketer_opts_t o = XC_BUCKETER_OPTS_INIT;
    o.views = 1;
    o.rebuild = 1;
    xc_bucketer_t *b;
    H_CHECK(H.comm, xc_bucketer_create(H.comm, &o, &b));
    H_CHECK(H.comm, xc_bucketer_register(b, NULL, BIG, XC_FLOAT32, "big.a", NULL));
    H_CHECK(H.comm, xc_bucketer_register(b, NULL, BIG, XC_FLOAT32, "big.b", NULL));
    int lim = last && h_limit_memory(16u << 20);
    H_CHECK(H.comm, xc_allreduce(&lim, &lim, 1, XC_INT32, XC_MAX, H.comm));
    if (!lim) {
        if (H.rank == 0) printf("bucketer out of memory: skipped (sanitizer build)\n");
        H_CHECK(H.comm, xc_bucketer_destroy(b));
        return;
    }
    H_EXPECT_RC(H.comm, XC_ERR_NOMEM, xc_bucketer_commit(b));
    expect_msg(b, rk, "commit out of memory on one rank");
    if (last) h_unlimit_memory();
    H_CHECK(H.comm, xc_bucketer_commit(b));
    for (int step = 1; step <= 2; step++) {
        for (int g = 0; g < 2; g++) {
            float *v = xc_bucketer_grad(b, g);
            for (size_t i = 0; i < BIG; i++) v[i] = (float)(H.rank + 1 + g + (i & 7));
        }
        /* forward order: the rebuild makes a new layout (commit's is reversed) */
        for (int g = 0; g < 2; g++) H_CHECK(H.comm, xc_bucketer_mark_ready(b, g));
        /* (the buckets complete first: only the rebuild is short of memory) */
        for (int g = 0; g < 2; g++) H_CHECK(H.comm, xc_bucketer_wait(b, g));
        if (step == 1 && last) h_limit_memory(16u << 20);
        if (step == 1) {
            H_EXPECT_RC(H.comm, XC_ERR_NOMEM, xc_bucketer_finish(b));
            expect_msg(b, rk, "rebuild out of memory on one rank");
            if (last) h_unlimit_memory();
        } else {
            H_CHECK(H.comm, xc_bucketer_finish(b));
        }
        H_EQ_INT("layout: kept after a failed rebuild, then rebuilt", info_of(b).layout,
                 step - 1);
        size_t wrong = 0;
        for (int g = 0; g < 2; g++) {
            const float *v = xc_bucketer_grad(b, g);
            for (size_t i = 0; i < BIG; i++)
            {
                double want = (H.size + 1) / 2.0 + g + (double)(i & 7);
                wrong += !(fabs(v[i] - want) <= 1e-6 * want);
            }
        }
        H_EQ_U64("averages around the rebuild", wrong, 0);
    }
    H_CHECK(H.comm, xc_bucketer_destroy(b));
}

static void test_mismatch(void)
{
    if (H.size < 2) return;
    int last = H.rank == H.size - 1;
    char rk[32];
    snprintf(rk, sizeof rk, "rank %d", H.size - 1);
    for (int variant = 0; variant < 8; variant++) {
        if (last && variant == 7) setenv("XCOLL_COMPRESS", "int8", 1);
        xc_bucketer_opts_t o = XC_BUCKETER_OPTS_INIT;
        o.views = 1;
        o.rebuild = last && variant == 4 ? 0 : 1;
        o.forward_tail = last && variant == 5 ? 1 : 0;
        o.split = last && variant == 6 ? 1 : 0;
        o.bucket_mb = last && variant == 2 ? 8 : 4;
        o.average = last && variant == 3 ? 0 : 1;
        xc_bucketer_t *b;
        H_CHECK(H.comm, xc_bucketer_create(H.comm, &o, &b));
        if (last && variant == 7) unsetenv("XCOLL_COMPRESS");
        for (int g = 0; g < NG; g++) {
            size_t count = k_specs[g].count + (last && variant == 0 && g == 2);
            H_CHECK(H.comm, xc_bucketer_register(b, NULL, count, k_specs[g].dtype,
                                                 k_specs[g].name, NULL));
        }
        if (last && variant == 1)
            H_CHECK(H.comm, xc_bucketer_register(b, NULL, 5, XC_FLOAT32, "extra.bias", NULL));
        H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_bucketer_commit(b));
        expect_msg(b, "differ across ranks", "registration mismatch");
        expect_msg(b, rk, "registration mismatch names the rank");
        if (variant == 0) expect_msg(b, "'l1.weight'", "mismatch names the gradient");
        if (variant == 1) expect_msg(b, "'extra.bias'", "mismatch names the extra gradient");
        if (variant == 2) expect_msg(b, "XCOLL_BUCKET_MB", "mismatch names the capacity");
        if (variant == 3) expect_msg(b, "averag", "mismatch names averaging");
        if (variant == 4) expect_msg(b, "rebuild", "mismatch names rebuild");
        if (variant == 5) expect_msg(b, "forward_tail", "mismatch names forward_tail");
        if (variant == 6) expect_msg(b, "split", "mismatch names split");
        if (variant == 7) expect_msg(b, "XCOLL_COMPRESS", "mismatch names compression");
        H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_bucketer_mark_ready(b, 0));
        H_CHECK(H.comm, xc_bucketer_destroy(b));
    }
    /* The communicator is still in step. */
    int x = 1;
    H_CHECK(H.comm, xc_allreduce(&x, &x, 1, XC_INT32, XC_SUM, H.comm));
    H_EQ_INT("communicator usable after mismatches", x, H.size);
}

static void test_local_misuse(void)
{
    xc_bucketer_t *b;
    xc_bucketer_opts_t o = XC_BUCKETER_OPTS_INIT;
    o.size = 0;
    H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_bucketer_create(H.comm, &o, &b));
    H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_bucketer_create(NULL, NULL, &b));
    o = (xc_bucketer_opts_t)XC_BUCKETER_OPTS_INIT;
    o.views = 2;
    H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_bucketer_create(H.comm, &o, &b));

    /* Variables, and options overriding them. */
    setenv("XCOLL_BUCKET_MB", "lots", 1);
    H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_bucketer_create(H.comm, NULL, &b));
    H_TRUE("bad XCOLL_BUCKET_MB named", contains(xc_last_error(), "XCOLL_BUCKET_MB=\"lots\""));
    setenv("XCOLL_BUCKET_MB", "0.5", 1);
    setenv("XCOLL_FIRST_BUCKET_MB", "-1", 1);
    H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_bucketer_create(H.comm, NULL, &b));
    H_TRUE("bad XCOLL_FIRST_BUCKET_MB named", contains(xc_last_error(), "XCOLL_FIRST_BUCKET_MB"));
    setenv("XCOLL_FIRST_BUCKET_MB", "0.125", 1);
    H_CHECK(H.comm, xc_bucketer_create(H.comm, NULL, &b));
    xc_bucketer_info_t in = info_of(b);
    H_EQ_U64("XCOLL_BUCKET_MB=0.5", in.bucket_bytes, 512 * 1024);
    H_EQ_U64("XCOLL_FIRST_BUCKET_MB=0.125", in.first_bucket_bytes, 128 * 1024);
    H_EQ_INT("default average", in.average, 1);
    H_EQ_INT("default views", in.views, 0);
    H_EQ_INT("default rebuild", in.rebuild, 1);
    H_EQ_INT("default split", in.split, 0);
    H_CHECK(H.comm, xc_bucketer_destroy(b));
    setenv("XCOLL_BUCKET_SPLIT", "yes", 1);
    H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_bucketer_create(H.comm, NULL, &b));
    H_TRUE("bad XCOLL_BUCKET_SPLIT named",
           contains(xc_last_error(), "XCOLL_BUCKET_SPLIT=\"yes\""));
    setenv("XCOLL_BUCKET_SPLIT", "1", 1);
    H_CHECK(H.comm, xc_bucketer_create(H.comm, NULL, &b));
    H_EQ_INT("XCOLL_BUCKET_SPLIT=1", info_of(b).split, 1);
    H_CHECK(H.comm, xc_bucketer_destroy(b));
    o = (xc_bucketer_opts_t)XC_BUCKETER_OPTS_INIT;
    o.split = 0;
    H_CHECK(H.comm, xc_bucketer_create(H.comm, &o, &b));
    H_EQ_INT("opts.split over XCOLL_BUCKET_SPLIT", info_of(b).split, 0);
    H_CHECK(H.comm, xc_bucketer_destroy(b));
    unsetenv("XCOLL_BUCKET_SPLIT");
    o.split = 2;
    H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_bucketer_create(H.comm, &o, &b));
    H_TRUE("split 2 refused, named", contains(xc_last_error(), "split 2"));
    o = (xc_bucketer_opts_t)XC_BUCKETER_OPTS_INIT;
    o.bucket_mb = 2;
    H_CHECK(H.comm, xc_bucketer_create(H.comm, &o, &b));
    in = info_of(b);
    H_EQ_U64("option over variable", in.bucket_bytes, 2 * 1024 * 1024);
    H_EQ_U64("variable for the unset option", in.first_bucket_bytes, 128 * 1024);
    H_CHECK(H.comm, xc_bucketer_destroy(b));
    unsetenv("XCOLL_BUCKET_MB");
    unsetenv("XCOLL_FIRST_BUCKET_MB");
    H_CHECK(H.comm, xc_bucketer_create(H.comm, NULL, &b));
    in = info_of(b);
    H_EQ_U64("default XCOLL_BUCKET_MB 25", in.bucket_bytes, 25 * 1024 * 1024);
    H_EQ_U64("default XCOLL_FIRST_BUCKET_MB 1", in.first_bucket_bytes, 1024 * 1024);

    /* Calls out of order and bad arguments (copy mode). */
    float g0[4] = {0};
    H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_bucketer_mark_ready(b, 0));
    expect_msg(b, "commit", "mark before commit");
    H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_bucketer_finish(b));
    H_EXPECT_RC(H.comm, XC_ERR_INVALID,
                xc_bucketer_register(b, NULL, 4, XC_FLOAT32, "w.null", NULL));
    expect_msg(b, "'w.null'", "NULL gradient in copy mode");
    H_EXPECT_RC(H.comm, XC_ERR_INVALID,
                xc_bucketer_register(b, g0, 4, XC_DTYPE_COUNT, "w.dtype", NULL));
    H_CHECK(H.comm, xc_bucketer_register(b, g0, 4, XC_FLOAT32, NULL, NULL));
    H_TRUE("no view before commit", xc_bucketer_grad(b, 0) == NULL);
    H_CHECK(H.comm, xc_bucketer_commit(b));
    H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_bucketer_commit(b));
    H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_bucketer_register(b, g0, 4, XC_FLOAT32, "late", NULL));
    expect_msg(b, "after xc_bucketer_commit", "register after commit");
    H_TRUE("copy mode: grad is the caller's array", xc_bucketer_grad(b, 0) == g0);
    H_TRUE("bad index: NULL", xc_bucketer_grad(b, 1) == NULL);
    H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_bucketer_locate(b, 1, NULL, NULL));
    xc_bucket_t bk;
    H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_bucketer_bucket(b, 1, &bk));
    /* the default name of an unnamed gradient appears in errors */
    H_CHECK(H.comm, xc_bucketer_mark_ready(b, 0));
    H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_bucketer_mark_ready(b, 0));
    expect_msg(b, "'grad0'", "default name");
    H_CHECK(H.comm, xc_bucketer_finish(b));
    H_CHECK(H.comm, xc_bucketer_destroy(b));

    /* Views refuse a caller's array. */
    o = (xc_bucketer_opts_t)XC_BUCKETER_OPTS_INIT;
    o.views = 1;
    H_CHECK(H.comm, xc_bucketer_create(H.comm, &o, &b));
    H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_bucketer_register(b, g0, 4, XC_FLOAT32, "w.v", NULL));
    expect_msg(b, "'w.v'", "views with an array");
    H_CHECK(H.comm, xc_bucketer_destroy(b));
    H_EQ_INT("destroy(NULL)", xc_bucketer_destroy(NULL), XC_OK);
}

int main(int argc, char **argv)
{
    h_init(argc, argv);
    const char *det = getenv("XCOLL_DETERMINISTIC");
    g_det = det && !strcmp(det, "1");
    unsetenv("XCOLL_BUCKET_MB");
    unsetenv("XCOLL_FIRST_BUCKET_MB");
    test_local_misuse();
    test_equality(0.5, 0.125, 0, 1, 3);
    test_equality(0.5, 0.125, 1, 1, 3);
    test_equality(0.25, 0.0, 1, 0, 2);
    test_equality(-1, -1, 1, 1, 2); /* defaults: 25 MiB / 1 MiB */
    if (H.full) {
        test_equality(0.0, 0.0, 0, 1, 3);
        test_equality(2.0, 0.5, 1, 1, 4);
    }
    test_scaling(1, 0);
    test_scaling(1, 1);
    test_scaling(0, 1);
    test_launch_and_hook(0);
    test_launch_and_hook(1);
    test_wait(0);
    test_wait(1);
    test_wait_hook(0);
    test_wait_hook(1);
    test_forward_tail(0);
    test_forward_tail(1);
    g_split = 1; /* large gradients in bucket-sized pieces */
    test_equality(0.5, 0.125, 0, 1, 3);
    test_equality(0.25, 0.0625, 1, 1, 3);
    test_wait(0);
    test_wait(1);
    test_split_tail();
    test_ranges(0);
    test_ranges(1);
    g_split = 0;
    test_misuse_steps(0);
    test_misuse_steps(1);
    test_mismatch();
    test_tune();
    test_oom();
    return h_finish();
}
