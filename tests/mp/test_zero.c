/*
 * test_zero.c -- ZeRO stages 1, 2, 3 (xc_zero_*) on N real processes:
 *
 *  - buckets (bucket_mb: several tensors in one, and all in one): the
 *    same checks, every tensor's shards tiling it exactly;
 *  - five tensors of uneven sizes (1, 5, 33, 1000, 4099 values: shards
 *    that are short or empty on the last ranks) trained 4 steps with SGD +
 *    momentum through the update callback, every rank's "gradient" a known
 *    function of the rank and the current parameters; after each step the
 *    full parameters (xc_zero_gather) equal the serial reference (the
 *    average over ranks, one process) to 1e-4 relative, on every stage;
 *  - every fetch, forward and backward, returns the current values
 *    (prefetched gathers included);
 *  - stage 3 prefetch: gathers issued = 2 x tensors - 1 per step (the last
 *    of the forward is kept for the backward), never more
 *    than `inflight` at once, for prefetch 0, 1, 2, 4 and inflight 1, 2;
 *  - memory per rank: parameters 1/N (stage 3, outside fetches), gradient
 *    shards 1/N after the step (stages 2-3), state 1/N (every stage);
 *  - misuse: bad options, calls before commit, double release / ready,
 *    ranks registering different tensors (XC_ERR_MISMATCH on every rank).
 */
#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NT = 5, STEPS = 4 };
static const size_t k_count[NT] = {1, 5, 33, 1000, 4099};
static const float LR = 0.1f, MU = 0.9f;

static float init_val(int i, size_t j) { return (float)sin((double)(j * 3 + (size_t)i * 17)) * 0.5f; }
/* Rank r's gradient of value j of tensor i at step k, given the value p. */
static float grad_val(int r, int i, int k, size_t j, float p)
{
    return (float)cos((double)(j + (size_t)i * 7 + (size_t)k * 11 + (size_t)r * 5)) + 0.1f * p;
}

static int update(void *ctx, int tensor, float *param, const float *grad, float *state, size_t n,
                  size_t offset)
{
    (void)ctx, (void)tensor, (void)offset;
    for (size_t j = 0; j < n; j++) {
        state[j] = MU * state[j] + grad[j];
        param[j] -= LR * state[j];
    }
    return 0;
}

typedef struct ref {
    float *p[NT], *v[NT];
} ref_t;

static void ref_init(ref_t *r)
{
    for (int i = 0; i < NT; i++) {
        r->p[i] = malloc(k_count[i] * sizeof(float));
        r->v[i] = calloc(k_count[i], sizeof(float));
        for (size_t j = 0; j < k_count[i]; j++) r->p[i][j] = init_val(i, j);
    }
}

static void ref_step(ref_t *r, int k)
{
    for (int i = 0; i < NT; i++)
        for (size_t j = 0; j < k_count[i]; j++) {
            double g = 0;
            for (int q = 0; q < H.size; q++) g += grad_val(q, i, k, j, r->p[i][j]);
            float gf = (float)(g / H.size);
            r->v[i][j] = MU * r->v[i][j] + gf;
            r->p[i][j] -= LR * r->v[i][j];
        }
}

static void ref_free(ref_t *r)
{
    for (int i = 0; i < NT; i++) free(r->p[i]), free(r->v[i]);
}

static size_t close_count(const float *a, const float *b, size_t n, double tol)
{
    size_t bad = 0;
    for (size_t j = 0; j < n; j++)
        if (!(fabs((double)a[j] - b[j]) <= tol * (fabs((double)b[j]) + 1e-3))) bad++;
    return bad;
}

/* The buckets xc_zero cuts (the documented rule: consecutive tensors up
 * to bucket_mb, a larger one alone): *nb of them, sizes in bsz. */
static int buckets(double mb, size_t *bsz)
{
    size_t cap = (size_t)(mb * 1048576.0 / sizeof(float));
    int nb = 0;
    for (int i = 0; i < NT; i++) {
        if (!nb || bsz[nb - 1] + k_count[i] > cap) bsz[nb++] = 0;
        bsz[nb - 1] += k_count[i];
    }
    return nb;
}

static void run(int stage, int prefetch, int inflight, double bucket_mb)
{
    xc_zero_opts_t o = XC_ZERO_OPTS_INIT;
    o.stage = stage, o.prefetch = prefetch, o.inflight = inflight, o.state_per_value = 1;
    o.bucket_mb = bucket_mb;
    xc_zero_t *z = NULL;
    H_CHECK(H.comm, xc_zero_create(H.comm, &o, &z));
    ref_t ref;
    ref_init(&ref);
    for (int i = 0; i < NT; i++) {
        int idx = -1;
        H_CHECK(H.comm, xc_zero_register(z, ref.p[i], k_count[i], &idx));
        H_EQ_INT("tensor index", idx, i);
    }
    H_CHECK(H.comm, xc_zero_commit(z));
    size_t nshard = 0, nfull = 0, n = (size_t)H.size, bsz[NT];
    int nb = buckets(bucket_mb, bsz);
    for (int k = 0; k < nb; k++) {
        size_t s = (bsz[k] + n - 1) / n;
        nshard += s, nfull += s * n;
    }
    for (int i = 0; i < NT; i++) {
        size_t off, len;
        H_CHECK(H.comm, xc_zero_shard(z, i, &off, &len));
        if (bucket_mb == 0) { /* a bucket per tensor: rank r owns [r s, (r+1) s) */
            size_t s = (k_count[i] + n - 1) / n;
            size_t lo = s * (size_t)H.rank < k_count[i] ? s * (size_t)H.rank : k_count[i];
            H_EQ_U64("shard offset", off, lo);
            H_EQ_U64("shard length", len, k_count[i] - lo < s ? k_count[i] - lo : s);
        }
        /* every rank's ranges tile the tensor exactly, in rank order */
        uint64_t mine[2] = {off, len}, *all = calloc(2 * n, sizeof *all);
        H_CHECK(H.comm, xc_allgather(mine, all, 2, XC_UINT64, H.comm));
        uint64_t at = 0;
        for (size_t r = 0; r < n; r++) {
            if (all[2 * r + 1] == 0) continue;
            H_EQ_U64("shards are contiguous in rank order", all[2 * r], at);
            at += all[2 * r + 1];
        }
        H_EQ_U64("shards cover the tensor", at, k_count[i]);
        free(all);
    }
    char what[96];
    snprintf(what, sizeof what, "stage %d prefetch %d inflight %d bucket %g MiB", stage, prefetch,
             inflight, bucket_mb);
    xc_zero_memory_t m0;
    H_CHECK(H.comm, xc_zero_memory(z, &m0));
    for (int k = 0; k < STEPS; k++) {
        size_t stale = 0;
        H_CHECK(H.comm, xc_zero_begin(z, XC_ZERO_FORWARD));
        for (int i = 0; i < NT; i++) {
            float *v = NULL;
            H_CHECK(H.comm, xc_zero_fetch(z, i, &v));
            stale += close_count(v, ref.p[i], k_count[i], 1e-4);
            H_CHECK(H.comm, xc_zero_release(z, i));
        }
        H_CHECK(H.comm, xc_zero_begin(z, XC_ZERO_BACKWARD));
        for (int i = NT - 1; i >= 0; i--) {
            float *v = NULL;
            H_CHECK(H.comm, xc_zero_fetch(z, i, &v));
            stale += close_count(v, ref.p[i], k_count[i], 1e-4);
            float *g = xc_zero_grad(z, i);
            h_checked();
            if (!g) h_fail(__FILE__, __LINE__, "%s: xc_zero_grad NULL", what);
            for (size_t j = 0; g && j < k_count[i]; j++) g[j] = grad_val(H.rank, i, k, j, v[j]);
            H_CHECK(H.comm, xc_zero_grad_ready(z, i));
            H_CHECK(H.comm, xc_zero_release(z, i));
        }
        H_EQ_U64("fetched values equal the current parameters (stale values)", stale, 0);
        H_CHECK(H.comm, xc_zero_step(z, update, NULL));
        ref_step(&ref, k);
        size_t bad = 0;
        for (int i = 0; i < NT; i++) {
            float *full = malloc(k_count[i] * sizeof *full);
            H_CHECK(H.comm, xc_zero_gather(z, i, full));
            bad += close_count(full, ref.p[i], k_count[i], 1e-4);
            free(full);
        }
        h_checked();
        if (bad) h_fail(__FILE__, __LINE__, "%s step %d: %zu values differ from the serial reference", what, k, bad);
        xc_zero_memory_t m;
        H_CHECK(H.comm, xc_zero_memory(z, &m));
        H_EQ_U64("state bytes (1/N)", m.state, nshard * 4);
        H_EQ_U64("parameter bytes after the step", m.params, (stage == 3 ? nshard : nfull) * 4);
        H_EQ_U64("gradient bytes after the step", m.grads, (stage == 1 ? nfull + nshard : nshard) * 4);
        if (stage == 3) {
            /* the last of the forward stays gathered for the backward */
            H_EQ_U64("gathers per step: every bucket forward and backward but one", m.gathers,
                     (uint64_t)(k + 1) * (2 * (uint64_t)nb - 1));
            h_checked();
            if (m.max_inflight > (uint64_t)inflight)
                h_fail(__FILE__, __LINE__, "%s: %llu gathers in flight > %d", what,
                       (unsigned long long)m.max_inflight, inflight);
            /* prefetch reached: min(prefetch, inflight, buckets ahead) at once */
            uint64_t want = (uint64_t)(prefetch < inflight ? prefetch : inflight);
            if (want > (uint64_t)nb - 1) want = (uint64_t)nb - 1;
            if (want < 1) want = 1;
            if (prefetch > 0 && H.size > 1 && m.max_inflight < want)
                h_fail(__FILE__, __LINE__, "%s: prefetch not seen (most in flight %llu, want %llu)",
                       what, (unsigned long long)m.max_inflight, (unsigned long long)want);
        }
    }
    if (H.rank == 0) {
        xc_zero_memory_t m;
        H_CHECK(H.comm, xc_zero_memory(z, &m));
        printf("zero %s: peak params %zu B, peak grads %zu B, state %zu B (unsharded %zu B each)\n",
               what, m.peak_params, m.peak_grads, m.state, nfull * 4);
    }
    xc_zero_destroy(z);
    ref_free(&ref);
}

static void test_misuse(void)
{
    xc_zero_t *z = NULL;
    xc_zero_opts_t o = XC_ZERO_OPTS_INIT;
    o.stage = 4;
    H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_zero_create(H.comm, &o, &z));
    o.stage = 3, o.inflight = 0;
    H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_zero_create(H.comm, &o, &z));
    o.inflight = 2;
    o.state_per_value = 1; /* the update below keeps momentum */
    H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_zero_create(NULL, &o, &z));
    H_CHECK(H.comm, xc_zero_create(H.comm, &o, &z));
    float init[10] = {0};
    int idx;
    H_CHECK(H.comm, xc_zero_register(z, init, 10, &idx));
    float *v;
    H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_zero_fetch(z, 0, &v));
    H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_zero_begin(z, XC_ZERO_FORWARD));
    H_CHECK(H.comm, xc_zero_commit(z));
    H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_zero_register(z, init, 10, &idx));
    H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_zero_fetch(z, 1, &v));
    H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_zero_release(z, 0)); /* not fetched */
    H_CHECK(H.comm, xc_zero_begin(z, XC_ZERO_FORWARD));
    H_CHECK(H.comm, xc_zero_fetch(z, 0, &v));
    H_CHECK(H.comm, xc_zero_release(z, 0));
    H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_zero_release(z, 0));
    H_CHECK(H.comm, xc_zero_fetch(z, 0, &v));
    H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_zero_step(z, update, NULL)); /* still fetched */
    H_CHECK(H.comm, xc_zero_release(z, 0));
    H_CHECK(H.comm, xc_zero_grad_ready(z, 0));
    H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_zero_grad_ready(z, 0));
    H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_zero_step(z, NULL, NULL));
    H_CHECK(H.comm, xc_zero_step(z, update, NULL));
    xc_zero_destroy(z);
    /* different tensors on the last rank: every rank learns it at commit */
    if (H.size > 1) {
        H_CHECK(H.comm, xc_zero_create(H.comm, &o, &z));
        H_CHECK(H.comm, xc_zero_register(z, init, H.rank == H.size - 1 ? 9 : 10, &idx));
        H_EXPECT_RC(H.comm, XC_ERR_MISMATCH, xc_zero_commit(z));
        xc_zero_destroy(z);
        /* the same sizes in another order on the last rank (3 + 4 vs 4 + 3) */
        H_CHECK(H.comm, xc_zero_create(H.comm, &o, &z));
        int last = H.rank == H.size - 1;
        H_CHECK(H.comm, xc_zero_register(z, init, last ? 4 : 3, &idx));
        H_CHECK(H.comm, xc_zero_register(z, init, last ? 3 : 4, &idx));
        H_EXPECT_RC(H.comm, XC_ERR_MISMATCH, xc_zero_commit(z));
        xc_zero_destroy(z);
        /* the same tensors, another bucket size on the last rank */
        xc_zero_opts_t o2 = o;
        if (last) o2.bucket_mb = 1.0;
        H_CHECK(H.comm, xc_zero_create(H.comm, &o2, &z));
        H_CHECK(H.comm, xc_zero_register(z, init, 10, &idx));
        H_EXPECT_RC(H.comm, XC_ERR_MISMATCH, xc_zero_commit(z));
        xc_zero_destroy(z);
    }
    H_EQ_INT("communicator still usable", xc_comm_status(H.comm), XC_OK);
}

static int sub_grad(void *ctx, int tensor, float *param, const float *grad, float *state, size_t n,
                    size_t offset)
{
    (void)ctx, (void)tensor, (void)state, (void)offset;
    for (size_t j = 0; j < n; j++) param[j] -= grad[j];
    return 0;
}

static int fail_on_0(void *ctx, int tensor, float *param, const float *grad, float *state,
                     size_t n, size_t offset)
{
    (void)ctx, (void)tensor, (void)param, (void)grad, (void)state, (void)n, (void)offset;
    return H.rank == 0; /* (rank 0's shards are never empty) */
}

/* A committed ZeRO of `n` zero-initialised tensors (at most 64 values). */
static xc_zero_t *zero_of(int stage, const size_t *counts, int n)
{
    xc_zero_opts_t o = XC_ZERO_OPTS_INIT;
    o.stage = stage;
    xc_zero_t *z = NULL;
    H_CHECK(H.comm, xc_zero_create(H.comm, &o, &z));
    float init[64] = {0};
    for (int i = 0; i < n; i++) H_CHECK(H.comm, xc_zero_register(z, init, counts[i], NULL));
    H_CHECK(H.comm, xc_zero_commit(z));
    return z;
}

/* Stages 2-3 with gradients marked in a rank-dependent order and one
 * tensor left unmarked on the last rank: every rank's reduce-scatters
 * pair bucket with bucket (they go in reverse bucket order), and the
 * unmarked tensor counts zero from that rank.  Then an update that fails
 * on one rank: that rank reports it, and the gathers still run. */
static void test_order(int stage)
{
    static const size_t counts[3] = {8, 8, 8};
    xc_zero_t *z = zero_of(stage, counts, 3);
    H_CHECK(H.comm, xc_zero_begin(z, XC_ZERO_BACKWARD));
    int last = H.rank == H.size - 1;
    for (int j = 0; j < 3; j++) {
        int i = H.rank % 2 ? j : 2 - j; /* odd ranks forward, even backward */
        float *g = xc_zero_grad(z, i);
        for (int k = 0; k < 8; k++) g[k] = (float)(10 * (i + 1));
        if (!(last && i == 1)) H_CHECK(H.comm, xc_zero_grad_ready(z, i));
    }
    H_CHECK(H.comm, xc_zero_step(z, sub_grad, NULL));
    float out[8];
    for (int i = 0; i < 3; i++) {
        H_CHECK(H.comm, xc_zero_gather(z, i, out));
        /* the average of 10 (i + 1) over the ranks, one rank's 0 for tensor 1 */
        double want = -10.0 * (i + 1) * (i == 1 ? (double)(H.size - 1) / H.size : 1.0);
        H_TRUE("gradients marked in different orders / one left unmarked",
               fabs(out[0] - want) <= 1e-5 * fabs(want) &&
                   fabs(out[7] - want) <= 1e-5 * fabs(want));
    }
    H_CHECK(H.comm, xc_zero_begin(z, XC_ZERO_BACKWARD));
    if (H.size > 1) {
        /* rank 0's update fails: it reports it, the others do not know;
         * the gathers ran (nobody hangs) and the parameters agree */
        xc_result_t rc = xc_zero_step(z, fail_on_0, NULL);
        H_EQ_INT("a failed update is reported where it failed", rc,
                 H.rank == 0 ? XC_ERR_INVALID : XC_OK);
        H_EQ_INT("communicator still usable after a failed update", xc_comm_status(H.comm),
                 XC_OK);
        float a[8], mx[8], mn[8];
        H_CHECK(H.comm, xc_zero_gather(z, 0, a));
        H_CHECK(H.comm, xc_allreduce(a, mx, 8, XC_FLOAT32, XC_MAX, H.comm));
        H_CHECK(H.comm, xc_allreduce(a, mn, 8, XC_FLOAT32, XC_MIN, H.comm));
        H_TRUE("parameters equal on every rank after a failed update",
               !memcmp(mx, mn, sizeof mx));
    }
    xc_zero_destroy(z);
}

/* Clipping with ZeRO: the norm over the shards of every rank is the norm
 * of the whole averaged gradient; above max_norm the update sees the
 * scaled gradient; a NaN on one rank skips every rank's update. */
static void test_clip(int stage)
{
    static const size_t counts[2] = {5, 37};
    xc_zero_t *z = zero_of(stage, counts, 2);
    for (int round = 0; round < 2; round++) {
        H_CHECK(H.comm, xc_zero_begin(z, XC_ZERO_BACKWARD));
        double want2 = 0; /* the averaged gradient is 3 + (i + j) % 4 on every rank */
        for (int i = 1; i >= 0; i--) {
            float *g = xc_zero_grad(z, i);
            size_t c = i ? 37 : 5;
            for (size_t j = 0; j < c; j++) {
                g[j] = (float)(3 + (i + j) % 4);
                want2 += (double)g[j] * g[j];
            }
            if (round == 1 && i == 1 && H.rank == H.size - 1) g[7] = NAN;
            H_CHECK(H.comm, xc_zero_grad_ready(z, i));
        }
        double norm = -1;
        int nf = -1;
        H_CHECK(H.comm, xc_zero_step_clip(z, 1.0, &norm, &nf, sub_grad, NULL));
        float out[37];
        H_CHECK(H.comm, xc_zero_gather(z, 1, out));
        if (round == 0) {
            H_TRUE("the clip's norm is the whole gradient's",
                   fabs(norm - sqrt(want2)) <= 1e-6 * sqrt(want2));
            H_EQ_INT("finite", nf, 0);
            /* params were 0: now -g x 1 / (norm + 1e-6) */
            double w = -(3 + 7 % 4) / (sqrt(want2) + 1e-6);
            H_TRUE("the update saw the scaled gradient", fabs(out[6] - w) <= 1e-5);
        } else {
            H_EQ_INT("a NaN on one rank: every rank skips", nf, 1);
            double w = -(3 + 7 % 4) / (sqrt(want2) + 1e-6); /* unchanged since round 0 */
            H_TRUE("parameters unchanged after a skipped step", fabs(out[6] - w) <= 1e-5);
        }
    }
    xc_zero_destroy(z);
}

/* The last rank out of memory at commit: every rank fails, naming it,
 * nothing is committed anywhere, and the retry commits and steps. */
static void test_oom(int stage)
{
    enum { BIG = 8 << 20 }; /* 32 MiB of values */
    int last = H.rank == H.size - 1;
    xc_zero_opts_t o = XC_ZERO_OPTS_INIT;
    o.stage = stage;
    xc_zero_t *z = NULL;
    H_CHECK(H.comm, xc_zero_create(H.comm, &o, &z));
    float *init = malloc((size_t)BIG * sizeof *init);
    for (size_t j = 0; j < BIG; j++) init[j] = (float)(j & 15);
    H_CHECK(H.comm, xc_zero_register(z, init, BIG, NULL));
    int lim = last && h_limit_memory(2u << 20); /* (stage 3 shards: 32 MiB / N) */
    H_CHECK(H.comm, xc_allreduce(&lim, &lim, 1, XC_INT32, XC_MAX, H.comm));
    if (lim) {
        H_EXPECT_RC(H.comm, XC_ERR_NOMEM, xc_zero_commit(z));
        char rk[48];
        snprintf(rk, sizeof rk, "failed on rank %d", H.size - 1);
        H_TRUE("commit out of memory on one rank: named", strstr(xc_last_error(), rk) != NULL);
        H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_zero_begin(z, XC_ZERO_BACKWARD));
        if (last) h_unlimit_memory();
    } else if (H.rank == 0) {
        printf("zero out of memory: skipped (sanitizer build)\n");
    }
    H_CHECK(H.comm, xc_zero_commit(z));
    H_CHECK(H.comm, xc_zero_begin(z, XC_ZERO_BACKWARD));
    float *g = xc_zero_grad(z, 0);
    for (size_t j = 0; j < BIG; j++) g[j] = 1.0f;
    H_CHECK(H.comm, xc_zero_grad_ready(z, 0));
    H_CHECK(H.comm, xc_zero_step(z, sub_grad, NULL));
    H_CHECK(H.comm, xc_zero_gather(z, 0, init));
    size_t wrong = 0;
    for (size_t j = 0; j < BIG; j++) wrong += init[j] != (float)(j & 15) - 1.0f;
    H_EQ_U64("the step after a retried commit", wrong, 0);
    free(init);
    xc_zero_destroy(z);
}

int main(int argc, char **argv)
{
    h_init(argc, argv);
    run(1, 0, 1, 0);
    run(2, 0, 1, 0);
    run(3, 0, 1, 0);
    run(3, 1, 1, 0);
    run(3, 2, 2, 0);
    run(3, 4, 2, 0);
    /* buckets: 1 + 5 + 33 + 1000 values share one (4 KiB cap ~ 1039), 4099 alone */
    run(1, 0, 1, 0.004);
    run(2, 0, 1, 0.004);
    run(3, 2, 2, 0.004);
    run(3, 1, 1, 1.0); /* one bucket for everything */
    test_misuse();
    test_order(2);
    test_order(3);
    for (int st = 1; st <= 3; st++) test_clip(st);
    test_oom(1);
    test_oom(3);
    return h_finish();
}
