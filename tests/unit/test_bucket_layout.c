/*
 * test_bucket_layout.c -- the bucketer's pure layout function
 * (src/train/bucket_layout.c): capacities (small first bucket, then the
 * normal one, a gradient larger than a bucket alone), one dtype per bucket
 * with interleaved dtypes, buckets numbered by the arrival of their last
 * gradient, arrival order inside a bucket, 64-byte aligned offsets, the
 * arena, a rebuild from another order, empty gradients, zero capacity,
 * splitting large gradients into pieces, the tail rule (forward_tail:
 * the last buckets and pieces halved), and the rejection of orders that
 * are not permutations.  Plus a randomised
 * check of every invariant on 300 random inputs.  Standalone: exit 0 on
 * success, 1 on any failure, each failure printed with both values.
 */
#include "train/bucketer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_failures;

#define CHECK_I64(got, exp)                                                    \
    do {                                                                       \
        long long g_ = (long long)(got), e_ = (long long)(exp);                \
        if (g_ != e_ && ++g_failures <= 50)                                    \
            fprintf(stderr, "FAIL %s:%d: %s == %lld, expected %lld\n", __FILE__, \
                    __LINE__, #got, g_, e_);                                   \
    } while (0)

#define KIB 1024u

/* The tail rule, restated: with `left` bytes of the dtype still to arrive
 * a new bucket (piece) gets capacity c halved until c <= left/2, but not
 * below 64 KiB. */
static size_t tail_limit(size_t c, size_t left)
{
    while (c > left / 2 && c / 2 >= 64 * KIB) c /= 2;
    return c;
}

/* The size of the piece of a split gradient that begins with `left` bytes
 * of its dtype to arrive, of full pieces of `piece` bytes. */
static size_t piece_size(size_t piece, int tail, size_t left)
{
    return tail ? tail_limit(piece, left) / 64 * 64 : piece;
}

/* Every invariant of a layout of n gradients built from `order` with
 * `flags` (XC__LAYOUT_SPLIT: gradients larger than cap were to be cut into
 * cap-sized pieces; XC__LAYOUT_TAIL: the last ones halved, and so are the
 * capacities of the last buckets). */
static void check_invariants(int n, const size_t *counts, const xc_dtype_t *dt, const int *order,
                             size_t first_cap, size_t cap, int flags, const xc__layout_t *l)
{
    int split = flags & XC__LAYOUT_SPLIT, tail = (flags & XC__LAYOUT_TAIL) != 0;
    CHECK_I64(l->ngrads, n);
    int *pos = malloc(sizeof(int) * (size_t)(n + 1)), *seen = calloc((size_t)n + 1, sizeof(int));
    size_t *left = calloc((size_t)n + 1, sizeof(size_t)); /* per gradient: dtype bytes from it */
    for (int p = 0; p < n; p++) pos[order[p]] = p;
    for (int p = 0; p < n; p++)
        for (int q = p; q < n; q++)
            if (dt[order[q]] == dt[order[p]])
                left[order[p]] += counts[order[q]] * xc_dtype_size(dt[order[q]]);
    int j = 0, entries = 0, first_of[XC_DTYPE_COUNT];
    for (int d = 0; d < XC_DTYPE_COUNT; d++) first_of[d] = -1;
    size_t arena = 0, piece = cap / 64 * 64;
    for (int g = 0; g < n; g++) {
        size_t bytes = counts[g] * xc_dtype_size(dt[g]);
        int want = 1;
        if (split && piece && bytes > (tail ? piece_size(piece, 1, left[g]) : cap))
            for (size_t at = want = 0; at < bytes; want++)
                at += piece_size(piece, tail, left[g] - at);
        CHECK_I64(l->npieces_of[g], want);
        entries += l->npieces_of[g];
    }
    for (int k = 0; k < l->nbuckets; k++) {
        const xc__bucket_t *b = &l->buckets[k];
        size_t es = xc_dtype_size(b->dtype);
        CHECK_I64(b->first, j);
        CHECK_I64(b->byte_off % 64, 0);
        CHECK_I64(b->byte_off, arena);
        arena += (b->count * es + 63) / 64 * 64;
        if (b->ngrads < 1) CHECK_I64(b->ngrads, 1);
        int g0 = l->grads[b->first], is_piece = l->npieces_of[g0] > 1;
        if (k > 0 && !(is_piece && k > l->bucket_of[g0])) /* pieces share their arrival */
            CHECK_I64(l->buckets[k - 1].last_pos < b->last_pos, 1);
        if (is_piece) { /* one piece of one gradient, where it belongs */
            int i = k - l->bucket_of[g0];
            CHECK_I64(b->ngrads, 1);
            CHECK_I64(i >= 0 && i < l->npieces_of[g0], 1);
            size_t e0 = i ? l->buckets[k - 1].elem0 + l->buckets[k - 1].count : 0;
            CHECK_I64(b->elem0, e0); /* contiguous, in order */
            size_t want = piece_size(piece, tail, left[g0] - e0 * es) / es;
            CHECK_I64(b->count, XC__MIN(want, counts[g0] - b->elem0));
            CHECK_I64(b->byte_off, l->buckets[l->bucket_of[g0]].byte_off + b->elem0 * es);
            CHECK_I64(b->last_pos, pos[g0]);
            CHECK_I64(l->offsets[j], 0);
            CHECK_I64(l->offset_of[g0], 0);
            seen[g0]++;
            j++;
            first_of[b->dtype] = k;
            continue;
        }
        CHECK_I64(b->elem0, 0);
        size_t end = 0;
        int lastp = -1, nonempty = 0;
        for (int i = 0; i < b->ngrads; i++, j++) {
            int g = l->grads[j];
            seen[g]++;
            CHECK_I64(dt[g], b->dtype);
            CHECK_I64(l->bucket_of[g], k);
            CHECK_I64(l->npieces_of[g], 1);
            CHECK_I64(l->offsets[j], l->offset_of[g]);
            CHECK_I64(l->offsets[j] * es % 64, 0);
            CHECK_I64(l->offsets[j] >= end, 1); /* no overlap, memory order */
            end = l->offsets[j] + counts[g];
            nonempty += counts[g] > 0;
            CHECK_I64(pos[g] > lastp, 1); /* arrival order inside */
            lastp = pos[g];
        }
        CHECK_I64(b->count, end);
        CHECK_I64(b->last_pos, lastp);
        /* capacity: exceeded only by one (non-empty) gradient alone */
        size_t lim = first_of[b->dtype] < 0 ? first_cap : cap;
        if (tail) lim = tail_limit(lim, left[l->grads[b->first]]);
        if (nonempty > 1 && b->count * es > lim && ++g_failures <= 50) {
            fprintf(stderr, "FAIL: bucket %d holds %d gradients, %zu bytes > capacity %zu\n", k,
                    b->ngrads, b->count * es, lim);
        }
        first_of[b->dtype] = k; /* a dtype's buckets complete in creation order */
    }
    CHECK_I64(j, entries);
    CHECK_I64(l->arena_bytes, arena);
    for (int g = 0; g < n; g++) CHECK_I64(seen[g], l->npieces_of[g]);
    free(pos);
    free(seen);
    free(left);
}

/* Split: a 2.5 MiB gradient with 1 MiB buckets becomes pieces of 1, 1 and
 * 0.5 MiB, adjacent and in order (so contiguous), between the buckets of
 * the gradients that arrive around it; without split it is one bucket. */
static void test_split(void)
{
    enum { N = 4 };
    size_t counts[N] = {1000, 640 * KIB, 100, 10}; /* fp32: g1 = 2.5 MiB */
    xc_dtype_t dt[N] = {XC_FLOAT32, XC_FLOAT32, XC_FLOAT32, XC_FLOAT32};
    int order[N] = {3, 2, 1, 0};
    xc__layout_t l;
    CHECK_I64(xc__layout_build(N, counts, dt, order, 1024 * KIB, 1024 * KIB, 1, &l), XC_OK);
    check_invariants(N, counts, dt, order, 1024 * KIB, 1024 * KIB, 1, &l);
    /* [3 2] [1a] [1b] [1c] [0] */
    CHECK_I64(l.nbuckets, 5);
    CHECK_I64(l.bucket_of[3], 0);
    CHECK_I64(l.bucket_of[2], 0);
    CHECK_I64(l.bucket_of[1], 1);
    CHECK_I64(l.npieces_of[1], 3);
    CHECK_I64(l.buckets[1].count, 256 * KIB);
    CHECK_I64(l.buckets[2].count, 256 * KIB);
    CHECK_I64(l.buckets[3].count, 128 * KIB);
    CHECK_I64(l.buckets[3].elem0, 512 * KIB);
    CHECK_I64(l.buckets[2].byte_off, l.buckets[1].byte_off + 1024 * KIB);
    CHECK_I64(l.bucket_of[0], 4);
    xc__layout_free(&l);
    CHECK_I64(xc__layout_build(N, counts, dt, order, 1024 * KIB, 1024 * KIB, 0, &l), XC_OK);
    CHECK_I64(l.nbuckets, 3);
    CHECK_I64(l.npieces_of[1], 1);
    xc__layout_free(&l);
    /* A capacity below 64 bytes cannot be cut to: no split. */
    CHECK_I64(xc__layout_build(N, counts, dt, order, 0, 48, 1, &l), XC_OK);
    check_invariants(N, counts, dt, order, 0, 48, 1, &l);
    CHECK_I64(l.nbuckets, 4);
    xc__layout_free(&l);
    /* A piece size that is not a multiple of 64 bytes rounds down. */
    CHECK_I64(xc__layout_build(N, counts, dt, order, 0, 1000, 1, &l), XC_OK);
    check_invariants(N, counts, dt, order, 0, 1000, 1, &l);
    CHECK_I64(l.buckets[l.bucket_of[1]].count, 960 / 4);
    xc__layout_free(&l);
}

/* The tail rule (forward_tail) on the shape of train_mlp's token model:
 * backward delivers 4 hidden layers (1 MiB weights), an 8 MiB weight,
 * then the token layers' 256, 256 and 32 KiB weights, each with its bias.
 * Without it the three token layers share one 0.54 MiB bucket that the
 * next forward waits for whole; with it each bucket holds at most half of
 * what is left to arrive, so the big weight ends in two half pieces and
 * the token layers come in buckets of their own, the first layer's last. */
static void test_tail(void)
{
    enum { N = 16 };
    size_t counts[N] = {8 * KIB,   256, 64 * KIB,  256, 64 * KIB,  256, 2048 * KIB, 512,
                        256 * KIB, 512, 256 * KIB, 512, 256 * KIB, 512, 256 * KIB,  512};
    xc_dtype_t dt[N];
    int order[N];
    for (int g = 0; g < N; g++) {
        dt[g] = XC_FLOAT32;
        order[g] = N - 1 - (g ^ 1); /* the weight, then its bias, last layer first */
    }
    xc__layout_t l;
    int flags = XC__LAYOUT_SPLIT | XC__LAYOUT_TAIL;
    CHECK_I64(xc__layout_build(N, counts, dt, order, 1024 * KIB, 1024 * KIB, flags, &l), XC_OK);
    check_invariants(N, counts, dt, order, 1024 * KIB, 1024 * KIB, flags, &l);
    /* the big weight (6): 7 pieces of 1 MiB (more than 2 MiB left after
     * each), then 0.5 + 0.5 MiB (1.54 MiB left: halved once) */
    CHECK_I64(l.npieces_of[6], 9);
    CHECK_I64(l.buckets[l.bucket_of[6] + 6].count, 256 * KIB);
    CHECK_I64(l.buckets[l.bucket_of[6] + 7].count, 128 * KIB);
    CHECK_I64(l.buckets[l.bucket_of[6] + 8].count, 128 * KIB);
    CHECK_I64(l.buckets[l.bucket_of[6] + 8].elem0, 1920 * KIB);
    /* its bias opens a bucket with 0.54 MiB left: capacity 256 KiB, so
     * the 256 KiB weight of layer 2 (4) does not fit beside it */
    CHECK_I64(l.bucket_of[7] == l.bucket_of[4], 0);
    /* layer 2's weight (4) and layer 1's (2, in pieces of 128, 64 and 64
     * KiB) in buckets apart; the last bucket: layer 1's bias and layer 0's
     * weight and bias (0, 1), 34 KiB */
    CHECK_I64(l.npieces_of[2], 3);
    CHECK_I64(l.bucket_of[4] == l.bucket_of[2], 0);
    CHECK_I64(l.bucket_of[0], l.nbuckets - 1);
    CHECK_I64(l.bucket_of[1], l.nbuckets - 1);
    CHECK_I64(l.buckets[l.nbuckets - 1].ngrads, 3); /* and layer 1's bias */
    xc__layout_free(&l);
    /* Without the rule: the three token layers and the big bias share a
     * bucket; the big weight is 8 whole pieces. */
    CHECK_I64(xc__layout_build(N, counts, dt, order, 1024 * KIB, 1024 * KIB, XC__LAYOUT_SPLIT, &l),
              XC_OK);
    CHECK_I64(l.npieces_of[6], 8);
    CHECK_I64(l.bucket_of[0], l.bucket_of[4]);
    CHECK_I64(l.bucket_of[7], l.bucket_of[4]);
    xc__layout_free(&l);
    /* Small capacities are not halved (64 KiB floor), and the rule alone
     * (no split) leaves the big weight whole. */
    CHECK_I64(xc__layout_build(N, counts, dt, order, 64 * KIB, 64 * KIB, flags, &l), XC_OK);
    check_invariants(N, counts, dt, order, 64 * KIB, 64 * KIB, flags, &l);
    CHECK_I64(l.npieces_of[6], 128);
    xc__layout_free(&l);
    CHECK_I64(xc__layout_build(N, counts, dt, order, 1024 * KIB, 1024 * KIB, XC__LAYOUT_TAIL, &l),
              XC_OK);
    check_invariants(N, counts, dt, order, 1024 * KIB, 1024 * KIB, XC__LAYOUT_TAIL, &l);
    CHECK_I64(l.npieces_of[6], 1);
    CHECK_I64(l.bucket_of[0], l.nbuckets - 1);
    xc__layout_free(&l);
}

static void test_capacities(void)
{
    /* 8 fp32 gradients of 100 KiB, in reverse registration order; first
     * bucket 150 KiB, then 300 KiB: [7] [6 5 4] [3 2 1] [0]. */
    enum { N = 8 };
    size_t counts[N];
    xc_dtype_t dt[N];
    int order[N];
    for (int g = 0; g < N; g++) counts[g] = 25 * KIB, dt[g] = XC_FLOAT32, order[g] = N - 1 - g;
    xc__layout_t l;
    CHECK_I64(xc__layout_build(N, counts, dt, order, 150 * KIB, 300 * KIB, 0, &l), XC_OK);
    check_invariants(N, counts, dt, order, 150 * KIB, 300 * KIB, 0, &l);
    CHECK_I64(l.nbuckets, 4);
    int expect_bucket[N] = {3, 2, 2, 2, 1, 1, 1, 0};
    for (int g = 0; g < N; g++) CHECK_I64(l.bucket_of[g], expect_bucket[g]);
    CHECK_I64(l.offset_of[6], 0);
    CHECK_I64(l.offset_of[5], 25 * KIB);
    CHECK_I64(l.offset_of[4], 50 * KIB);
    CHECK_I64(l.buckets[1].count, 75 * KIB);
    xc__layout_free(&l);

    /* A gradient larger than the capacity gets a bucket of its own, and the
     * open bucket is closed before it: [0 1] [2: 1 MiB] [3]. */
    size_t c2[4] = {1000, 1000, 256 * KIB, 1000};
    xc_dtype_t d2[4] = {XC_FLOAT32, XC_FLOAT32, XC_FLOAT32, XC_FLOAT32};
    int o2[4] = {0, 1, 2, 3};
    CHECK_I64(xc__layout_build(4, c2, d2, o2, 100 * KIB, 100 * KIB, 0, &l), XC_OK);
    check_invariants(4, c2, d2, o2, 100 * KIB, 100 * KIB, 0, &l);
    CHECK_I64(l.nbuckets, 3);
    CHECK_I64(l.bucket_of[0], 0);
    CHECK_I64(l.bucket_of[1], 0);
    CHECK_I64(l.bucket_of[2], 1);
    CHECK_I64(l.bucket_of[3], 2);
    CHECK_I64(l.offset_of[1], 1008); /* 4000 bytes rounded up to 64: 4032 / 4 */
    xc__layout_free(&l);

    /* Capacity 0: one gradient per bucket. */
    CHECK_I64(xc__layout_build(4, c2, d2, o2, 0, 0, 0, &l), XC_OK);
    CHECK_I64(l.nbuckets, 4);
    xc__layout_free(&l);
}

static void test_dtypes(void)
{
    /* Interleaved dtypes, arrival 0..5: fp32 {0,2,4} (12 KiB each), bf16
     * {1,3} (6 KiB each), fp64 {5}; first capacity 16 KiB, then 24 KiB:
     * fp32 [0] [2 4]; bf16 [1 3]; fp64 [5].  Completion order: fp32 [0]
     * (pos 0), bf16 [1 3] (pos 3), fp32 [2 4] (pos 4), fp64 [5] (pos 5). */
    size_t counts[6] = {3 * KIB, 3 * KIB, 3 * KIB, 3 * KIB, 3 * KIB, 10};
    xc_dtype_t dt[6] = {XC_FLOAT32, XC_BFLOAT16, XC_FLOAT32, XC_BFLOAT16, XC_FLOAT32, XC_FLOAT64};
    int order[6] = {0, 1, 2, 3, 4, 5};
    xc__layout_t l;
    CHECK_I64(xc__layout_build(6, counts, dt, order, 16 * KIB, 24 * KIB, 0, &l), XC_OK);
    check_invariants(6, counts, dt, order, 16 * KIB, 24 * KIB, 0, &l);
    CHECK_I64(l.nbuckets, 4);
    int expect[6] = {0, 1, 2, 1, 2, 3};
    for (int g = 0; g < 6; g++) CHECK_I64(l.bucket_of[g], expect[g]);
    CHECK_I64(l.buckets[1].dtype, XC_BFLOAT16);
    CHECK_I64(l.buckets[3].dtype, XC_FLOAT64);
    xc__layout_free(&l);
}

static void test_rebuild_order(void)
{
    /* The same gradients in two orders give layouts following each order. */
    enum { N = 6 };
    size_t counts[N] = {100, 200, 300, 400, 500, 600};
    xc_dtype_t dt[N];
    for (int g = 0; g < N; g++) dt[g] = XC_FLOAT32;
    int o1[N] = {5, 4, 3, 2, 1, 0}, o2[N] = {2, 0, 5, 1, 4, 3};
    xc__layout_t a, b;
    CHECK_I64(xc__layout_build(N, counts, dt, o1, 0, 1 << 20, 0, &a), XC_OK);
    CHECK_I64(xc__layout_build(N, counts, dt, o2, 0, 1 << 20, 0, &b), XC_OK);
    check_invariants(N, counts, dt, o1, 0, 1 << 20, 0, &a);
    check_invariants(N, counts, dt, o2, 0, 1 << 20, 0, &b);
    /* first bucket (capacity 0) holds the first arrival alone, the rest
     * share one bucket in arrival order */
    CHECK_I64(a.nbuckets, 2);
    CHECK_I64(b.nbuckets, 2);
    CHECK_I64(a.grads[0], 5);
    CHECK_I64(b.grads[0], 2);
    for (int j = 1; j < N; j++) CHECK_I64(b.grads[j], o2[j]);
    xc__layout_free(&a);
    xc__layout_free(&b);
}

static void test_edges(void)
{
    xc__layout_t l;
    size_t counts[3] = {0, 5, 0};
    xc_dtype_t dt[3] = {XC_FLOAT32, XC_FLOAT32, XC_INT8};
    int order[3] = {0, 1, 2};
    CHECK_I64(xc__layout_build(3, counts, dt, order, 64, 1024, 0, &l), XC_OK);
    check_invariants(3, counts, dt, order, 64, 1024, 0, &l);
    CHECK_I64(l.nbuckets, 2);
    xc__layout_free(&l);
    CHECK_I64(xc__layout_build(0, counts, dt, order, 64, 1024, 0, &l), XC_OK);
    CHECK_I64(l.nbuckets, 0);
    CHECK_I64(l.arena_bytes, 0);
    xc__layout_free(&l);
    int dup[3] = {0, 1, 1}, out_of_range[3] = {0, 1, 3};
    CHECK_I64(xc__layout_build(3, counts, dt, dup, 64, 1024, 0, &l), XC_ERR_INVALID);
    CHECK_I64(strstr(xc_last_error(), "not a permutation") != NULL, 1);
    CHECK_I64(xc__layout_build(3, counts, dt, out_of_range, 64, 1024, 0, &l), XC_ERR_INVALID);
    xc_dtype_t bad[3] = {XC_FLOAT32, XC_DTYPE_COUNT, XC_FLOAT32};
    CHECK_I64(xc__layout_build(3, counts, bad, order, 64, 1024, 0, &l), XC_ERR_INVALID);
}

static void test_random(void)
{
    srand(12345);
    const xc_dtype_t kinds[4] = {XC_FLOAT32, XC_BFLOAT16, XC_FLOAT64, XC_FLOAT16};
    for (int it = 0; it < 300; it++) {
        int n = 1 + rand() % 60;
        size_t *counts = malloc(sizeof(size_t) * (size_t)n);
        xc_dtype_t *dt = malloc(sizeof(xc_dtype_t) * (size_t)n);
        int *order = malloc(sizeof(int) * (size_t)n);
        for (int g = 0; g < n; g++) {
            counts[g] = rand() % 5 == 0 ? 0 : (size_t)(rand() % 20000);
            dt[g] = kinds[rand() % (it % 2 ? 4 : 1)];
            order[g] = g;
        }
        for (int g = n - 1; g > 0; g--) {
            int s = rand() % (g + 1), t = order[g];
            order[g] = order[s];
            order[s] = t;
        }
        size_t first = (size_t)(rand() % 40000), cap = (size_t)(rand() % 100000);
        xc__layout_t l;
        int flags = (it % 3 == 0 ? XC__LAYOUT_SPLIT : 0) | (it % 4 < 2 ? XC__LAYOUT_TAIL : 0);
        if (flags & XC__LAYOUT_TAIL) first *= 16, cap *= 16; /* sizes the rule halves */
        CHECK_I64(xc__layout_build(n, counts, dt, order, first, cap, flags, &l), XC_OK);
        check_invariants(n, counts, dt, order, first, cap, flags, &l);
        xc__layout_free(&l);
        free(counts);
        free(dt);
        free(order);
    }
}

int main(void)
{
    test_capacities();
    test_dtypes();
    test_rebuild_order();
    test_edges();
    test_split();
    test_tail();
    test_random();
    if (g_failures) {
        fprintf(stderr, "test_bucket_layout: %d failure(s)\n", g_failures);
        return 1;
    }
    printf("test_bucket_layout: ok\n");
    return 0;
}
