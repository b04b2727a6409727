/*
 * test_clip.c -- xc_clip_grad_norm on N real processes:
 *
 *  - a vector sharded unevenly over the ranks (fp32), a tensor replicated
 *    on every rank (replicas = N, fp64), per-rank fp16 and bf16 tensors:
 *    the norm equals the serial reference over the whole model (each
 *    replica counted once) to 1e-12 relative; below max_norm nothing
 *    changes (bit for bit); above it every value is scaled by
 *    max_norm / (norm + 1e-6);
 *  - the caller's scalars come back as their sums over the ranks;
 *  - exactly ONE collective per call (xc_comm_stats: one all-reduce);
 *  - a NaN or an infinity on one rank: nonfinite = 1 on every rank and no
 *    gradient changes anywhere;
 *  - ranks passing different numbers of scalars fail with XC_ERR_MISMATCH
 *    on every rank; bad arguments are XC_ERR_INVALID.
 */
#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { M = 1007, REP = 50, LOW = 33 };

/* Value k of the sharded vector / the replicated tensor / rank r's narrow
 * tensors (exactly representable in fp16 and bf16: multiples of 1/8). */
static double vec(size_t k) { return sin((double)k * 0.37) * 3; }
static double rep(size_t k) { return cos((double)k * 0.11) - 0.25; }
static float narrow(int r, size_t k, int which) { return (float)(((int)(k * 7 + (size_t)r * 3 + (size_t)which) % 17) - 8) / 8.0f; }

typedef struct model {
    size_t lo, n;        /* this rank's shard of the vector */
    float *shard;
    double *rep;
    uint16_t *h, *b;     /* fp16, bf16 */
    xc_grad_t g[4];
} model_t;

static void build(model_t *m)
{
    size_t N = (size_t)H.size, r = (size_t)H.rank;
    m->lo = r * M / N;
    m->n = (r + 1) * M / N - m->lo; /* uneven */
    m->shard = malloc((m->n + 1) * sizeof *m->shard);
    m->rep = malloc(REP * sizeof *m->rep);
    m->h = malloc(LOW * 2);
    m->b = malloc(LOW * 2);
    for (size_t k = 0; k < m->n; k++) m->shard[k] = (float)vec(m->lo + k);
    for (size_t k = 0; k < REP; k++) m->rep[k] = rep(k);
    for (size_t k = 0; k < LOW; k++) {
        m->h[k] = h_float_to_fp16(narrow(H.rank, k, 0));
        m->b[k] = h_float_to_bf16(narrow(H.rank, k, 1));
    }
    m->g[0] = (xc_grad_t){m->shard, m->n, XC_FLOAT32, 1};
    m->g[1] = (xc_grad_t){m->rep, REP, XC_FLOAT64, H.size};
    m->g[2] = (xc_grad_t){m->h, LOW, XC_FLOAT16, 1};
    m->g[3] = (xc_grad_t){m->b, LOW, XC_BFLOAT16, 1};
}

static void drop(model_t *m)
{
    free(m->shard);
    free(m->rep);
    free(m->h);
    free(m->b);
}

/* The serial reference: the whole model's norm. */
static double ref_norm(void)
{
    double s = 0;
    for (size_t k = 0; k < M; k++) {
        double v = (float)vec(k);
        s += v * v;
    }
    for (size_t k = 0; k < REP; k++) s += rep(k) * rep(k);
    for (int r = 0; r < H.size; r++)
        for (size_t k = 0; k < LOW; k++)
            s += (double)narrow(r, k, 0) * narrow(r, k, 0) + (double)narrow(r, k, 1) * narrow(r, k, 1);
    return sqrt(s);
}

/* Collectives this communicator has completed, of every kind. */
static uint64_t all_ops(void)
{
    xc_stats_t st = {.size = sizeof st};
    H_CHECK(H.comm, xc_comm_stats(H.comm, &st));
    uint64_t t = 0;
    for (int c = 0; c < XC_COLL_COUNT; c++) t += st.ops[c];
    return t;
}

static void test_norm_and_scale(void)
{
    model_t m;
    build(&m);
    double want = ref_norm();
    double sc[3] = {H.rank, 1.0, (double)H.rank * H.rank};
    double norm = -1;
    int bad = -1;
    uint64_t before = all_ops();
    /* below the threshold: measured, nothing scaled */
    H_CHECK(H.comm, xc_clip_grad_norm(H.comm, m.g, 4, want * 2, sc, 3, &norm, &bad));
    H.issued[XC_COLL_ALLREDUCE]++;
    uint64_t after = all_ops();
    H_EQ_U64("collectives issued by one clip", after - before, 1);
    h_checked();
    if (!(fabs(norm - want) <= 1e-12 * want))
        h_fail(__FILE__, __LINE__, "norm %.17g, serial reference %.17g", norm, want);
    H_EQ_INT("nonfinite", bad, 0);
    double n = H.size;
    H_EQ_INT("scalar 0: sum of ranks", (long long)sc[0], (long long)(n * (n - 1) / 2));
    H_EQ_INT("scalar 1: count of ranks", (long long)sc[1], H.size);
    H_EQ_INT("scalar 2: sum of squares", (long long)sc[2], (long long)((n - 1) * n * (2 * n - 1) / 6));
    for (size_t k = 0; k < m.n; k++) H_EQ_U64("unscaled shard", m.shard[k] == (float)vec(m.lo + k), 1);
    /* above it: scaled by max / (norm + 1e-6) */
    double max = want / 3;
    H_CHECK(H.comm, xc_clip_grad_norm(H.comm, m.g, 4, max, NULL, 0, &norm, &bad));
    H.issued[XC_COLL_ALLREDUCE]++;
    double f = max / (want + 1e-6);
    size_t wrong = 0;
    for (size_t k = 0; k < m.n; k++)
        if (m.shard[k] != (float)((float)vec(m.lo + k) * f)) wrong++;
    for (size_t k = 0; k < REP; k++)
        if (fabs(m.rep[k] - rep(k) * f) > 1e-15) wrong++;
    for (size_t k = 0; k < LOW; k++)
        if (fabs(h_fp16_to_double(m.h[k]) - narrow(H.rank, k, 0) * f) > 1e-3 ||
            fabs(h_bf16_to_double(m.b[k]) - narrow(H.rank, k, 1) * f) > 1e-2)
            wrong++;
    H_EQ_U64("values not scaled by max / (norm + 1e-6)", wrong, 0);
    /* measuring again: the clipped model's norm is max (to rounding) */
    H_CHECK(H.comm, xc_clip_grad_norm(H.comm, m.g, 4, 0, NULL, 0, &norm, NULL));
    H.issued[XC_COLL_ALLREDUCE]++;
    h_checked();
    if (!(fabs(norm - max) <= 1e-3 * max))
        h_fail(__FILE__, __LINE__, "clipped norm %.9g, want %.9g", norm, max);
    drop(&m);
}

static void test_nonfinite(void)
{
    for (int kind = 0; kind < 2; kind++) {
        model_t m;
        build(&m);
        int who = H.size - 1;
        if (H.rank == who) {
            if (kind == 0 && m.n) m.shard[m.n / 2] = NAN;
            else m.h[3] = 0x7c00; /* fp16 +inf */
        }
        double norm = 0;
        int bad = 0;
        H_CHECK(H.comm, xc_clip_grad_norm(H.comm, m.g, 4, 1e-3, NULL, 0, &norm, &bad));
        H.issued[XC_COLL_ALLREDUCE]++;
        H_EQ_INT("nonfinite on every rank", bad, 1);
        h_checked();
        if (!isnan(norm)) h_fail(__FILE__, __LINE__, "norm %g with a non-finite value (want NaN)", norm);
        size_t changed = 0;
        for (size_t k = 0; k < m.n; k++)
            if (!(m.shard[k] == (float)vec(m.lo + k)) && !(H.rank == who && kind == 0 && k == m.n / 2))
                changed++;
        for (size_t k = 0; k < REP; k++) changed += m.rep[k] != rep(k);
        H_EQ_U64("gradients untouched after an overflow", changed, 0);
        drop(&m);
    }
}

static void test_misuse(void)
{
    model_t m;
    build(&m);
    xc_grad_t g = m.g[0];
    g.replicas = 0;
    H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_clip_grad_norm(H.comm, &g, 1, 1, NULL, 0, NULL, NULL));
    g = m.g[0];
    g.dtype = XC_INT32;
    H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_clip_grad_norm(H.comm, &g, 1, 1, NULL, 0, NULL, NULL));
    g = m.g[0];
    g.data = NULL;
    g.count = 5;
    H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_clip_grad_norm(H.comm, &g, 1, 1, NULL, 0, NULL, NULL));
    H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_clip_grad_norm(H.comm, m.g, 4, -1, NULL, 0, NULL, NULL));
    H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_clip_grad_norm(H.comm, m.g, 4, 1, NULL, 2, NULL, NULL));
    H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_clip_grad_norm(NULL, m.g, 4, 1, NULL, 0, NULL, NULL));
    H_EQ_INT("xc_comm_status after rejected calls", xc_comm_status(H.comm), XC_OK);
    /* no gradients at all: a norm of 0, scalars still summed */
    double one = 1, norm = -1;
    H_CHECK(H.comm, xc_clip_grad_norm(H.comm, NULL, 0, 1, &one, 1, &norm, NULL));
    H_EQ_INT("no gradients: norm 0", (long long)(norm * 1000), 0);
    H_EQ_INT("no gradients: scalars summed", (long long)one, H.size);
    drop(&m);
}

/* Different numbers of scalars: a mismatch on every rank.  Last: the
 * mismatch leaves the communicator unusable (it is only destroyed).  A
 * barrier first, so that no earlier call is still in flight; a rank still
 * leaving the barrier when the others' report of the mismatch arrives
 * gets the mismatch there (the engine fails every pending operation). */
static void test_mismatch(void)
{
    if (H.size == 1) return;
    model_t m;
    build(&m);
    double sc[2] = {1, 2};
    int ns = H.rank == 0 ? 2 : 1;
    xc_result_t rc = xc_barrier(H.comm);
    if (rc == XC_OK) rc = xc_clip_grad_norm(H.comm, m.g, 4, 1, sc, ns, NULL, NULL);
    H_EQ_INT("nscalars differ: XC_ERR_MISMATCH on every rank", rc, XC_ERR_MISMATCH);
    h_checked();
    if (!strstr(xc_comm_last_error(H.comm), "elements"))
        h_fail(__FILE__, __LINE__, "the message does not name the operations: %s",
               xc_comm_last_error(H.comm));
    drop(&m);
}

int main(int argc, char **argv)
{
    h_init(argc, argv);
    test_norm_and_scale();
    test_nonfinite();
    test_misuse();
    H.issued[XC_COLL_ALLREDUCE]++; /* the empty clip */
    h_check_stats(H.comm, H.base_ops, H.issued, "world");
    test_mismatch();
    return h_finish();
}
