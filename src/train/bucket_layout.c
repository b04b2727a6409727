/*
 * bucket_layout.c -- from an arrival order and two capacities to a bucket
 * layout (bucketer.h, xc__layout_build).  A pure function: every rank that
 * feeds it the same agreed input gets the same layout, which is how the
 * ranks agree on buckets without sending the layout itself.
 *
 * Invariants of the result: every gradient is in exactly one bucket, or,
 * split (a gradient larger than the capacity, when asked), in consecutive
 * buckets that each hold one piece of it and nothing else (cap-sized; with
 * XC__LAYOUT_TAIL the last ones halved, see tail_cap); a
 * bucket holds one dtype; inside a bucket gradients follow the arrival
 * order at XC__BUCKET_ALIGN-byte aligned offsets; buckets are numbered by
 * the arrival position of their last gradient, i.e. in the order they are
 * expected to complete, which is the order they are all-reduced in; the
 * arena places the buckets one after the other, each aligned.
 */
#include "bucketer.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

static size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

void xc__layout_free(xc__layout_t *lay)
{
    if (!lay) return;
    free(lay->buckets);
    free(lay->grads);
    free(lay->offsets);
    free(lay->bucket_of);
    free(lay->offset_of);
    free(lay->npieces_of);
    memset(lay, 0, sizeof *lay);
}

/* A bucket under construction (a piece: elem0, where it begins). */
typedef struct open_bucket {
    xc_dtype_t dtype;
    size_t bytes, cap, elem0;
    int last_pos;
} open_bucket_t;

/* XC__LAYOUT_TAIL: a bucket opened (a piece begun) with `left` bytes of its
 * dtype still to arrive, this one's included, holds at most half of them --
 * the capacity c halved until c <= left/2, but never below
 * XC__TAIL_MIN_BYTES.  So the last buckets shrink geometrically (the
 * mirror of the small first bucket): the next forward's first wait is for
 * a small bucket, and what is on the link when backward ends is small. */
static size_t tail_cap(size_t c, size_t left)
{
    while (c / 2 >= XC__TAIL_MIN_BYTES && c > left / 2) c /= 2;
    return c;
}

/* The next piece of a split gradient: `piece` bytes, or with the tail rule
 * what of it `left` allows, a multiple of XC__BUCKET_ALIGN either way. */
static size_t piece_at(size_t piece, int tail, size_t left)
{
    return tail ? tail_cap(piece, left) / XC__BUCKET_ALIGN * XC__BUCKET_ALIGN : piece;
}

/* Pieces of a gradient of `bytes` whose dtype has `left` bytes still to
 * arrive (its own included); sizes[] (may be NULL) gets each one's. */
static size_t plan_pieces(size_t bytes, size_t piece, int tail, size_t left, size_t *sizes)
{
    if (!sizes && (!tail || piece / 2 < XC__TAIL_MIN_BYTES)) /* all of `piece` bytes */
        return (bytes + piece - 1) / piece;
    size_t np = 0;
    for (size_t at = 0; at < bytes; np++) {
        size_t pb = XC__MIN(piece_at(piece, tail, left - at), bytes - at);
        if (sizes) sizes[np] = pb;
        at += pb;
    }
    return np;
}

/* By completion; the pieces of a split gradient (same last arrival) in
 * construction order, which is their order in the gradient. */
static int by_last_pos(const void *x, const void *y)
{
    const xc__bucket_t *p = x, *q = y;
    if (p->last_pos != q->last_pos)
        return (p->last_pos > q->last_pos) - (p->last_pos < q->last_pos);
    return (p->first > q->first) - (p->first < q->first);
}

/* Bytes of one piece when gradients larger than `cap` are split (0: none). */
static size_t piece_bytes(int split, size_t cap)
{
    size_t piece = cap / XC__BUCKET_ALIGN * XC__BUCKET_ALIGN;
    return split ? piece : 0;
}

xc_result_t xc__layout_build(int n, const size_t *counts, const xc_dtype_t *dtypes,
                             const int *order, size_t first_cap, size_t cap, int flags,
                             xc__layout_t *out)
{
    memset(out, 0, sizeof *out);
    if (n < 0) return xc__err(XC_ERR_INVALID, "bucket layout: %d gradients", n);
    xc_result_t rc = XC_OK;
    int tail = (flags & XC__LAYOUT_TAIL) != 0;
    size_t nn = (size_t)(n ? n : 1), piece = piece_bytes(flags & XC__LAYOUT_SPLIT, cap);
    int *tmp_bucket = malloc(nn * sizeof *tmp_bucket);  /* per gradient */
    int *seen = calloc(nn, sizeof *seen);
    int *renum = NULL;
    size_t *left = malloc(nn * sizeof *left); /* per position: its dtype's bytes from there */
    size_t *psize = NULL;                      /* the pieces of the gradient at hand */
    open_bucket_t *ob = NULL;
    out->bucket_of = malloc(nn * sizeof *out->bucket_of);
    out->offset_of = malloc(nn * sizeof *out->offset_of);
    out->npieces_of = malloc(nn * sizeof *out->npieces_of);
    if (!tmp_bucket || !seen || !left || !out->bucket_of || !out->offset_of ||
        !out->npieces_of) {
        rc = xc__err(XC_ERR_NOMEM, "bucket layout: out of memory for %d gradients", n);
        goto out;
    }
    size_t maxb = 0; /* buckets at most: one per gradient or piece */
    for (int p = 0; p < n; p++) {
        int g = order[p];
        if (g < 0 || g >= n || seen[g]++) {
            rc = xc__err(XC_ERR_INVALID, "bucket layout: the order is not a permutation "
                                         "(entry %d is %d)", p, g);
            goto out;
        }
        if (xc__dtype_size(dtypes[g]) == 0) {
            rc = xc__err(XC_ERR_INVALID, "bucket layout: gradient %d has invalid dtype %d", g,
                         (int)dtypes[g]);
            goto out;
        }
    }
    size_t sum[XC_DTYPE_COUNT] = {0};
    for (int p = n - 1; p >= 0; p--) {
        int g = order[p];
        left[p] = sum[dtypes[g]] += counts[g] * xc__dtype_size(dtypes[g]);
    }
    for (int p = 0; p < n; p++) {
        int g = order[p];
        size_t bytes = counts[g] * xc__dtype_size(dtypes[g]);
        size_t np = piece && bytes > (tail ? piece_at(piece, 1, left[p]) : cap)
                        ? plan_pieces(bytes, piece, tail, left[p], NULL)
                        : 1;
        if (np > (size_t)INT_MAX - maxb) {
            rc = xc__err(XC_ERR_INVALID, "bucket layout: gradient %d (%zu bytes) in pieces of "
                                         "%zu bytes makes more than %d buckets", g, bytes, piece,
                         INT_MAX);
            goto out;
        }
        out->npieces_of[g] = (int)np;
        maxb += np;
    }
    maxb = maxb ? maxb : 1;
    renum = malloc(maxb * sizeof *renum); /* construction id -> index */
    ob = malloc(maxb * sizeof *ob);
    psize = malloc(maxb * sizeof *psize);
    out->buckets = calloc(maxb, sizeof *out->buckets);
    out->grads = malloc(maxb * sizeof *out->grads);
    out->offsets = malloc(maxb * sizeof *out->offsets);
    if (!renum || !ob || !psize || !out->buckets || !out->grads || !out->offsets) {
        rc = xc__err(XC_ERR_NOMEM, "bucket layout: out of memory for %zu buckets", maxb);
        goto out;
    }

    /* Walk the order: one open bucket per dtype. */
    int open[XC_DTYPE_COUNT], created[XC_DTYPE_COUNT];
    for (int d = 0; d < XC_DTYPE_COUNT; d++) open[d] = -1, created[d] = 0;
    int nb = 0;
    for (int p = 0; p < n; p++) {
        int g = order[p];
        xc_dtype_t d = dtypes[g];
        size_t es = xc__dtype_size(d), bytes = counts[g] * es;
        int k = open[d];
        if (out->npieces_of[g] > 1) { /* split: pieces, each a bucket */
            open[d] = -1;
            tmp_bucket[g] = nb;
            out->offset_of[g] = 0;
            plan_pieces(bytes, piece, tail, left[p], psize);
            size_t at = 0;
            for (int i = 0; i < out->npieces_of[g]; i++) {
                ob[nb++] = (open_bucket_t){.dtype = d, .cap = cap, .bytes = psize[i],
                                           .elem0 = at / es, .last_pos = p};
                at += psize[i];
                created[d]++;
            }
            continue;
        }
        if (k >= 0 && ob[k].bytes > 0 && align_up(ob[k].bytes, XC__BUCKET_ALIGN) + bytes > ob[k].cap)
            k = open[d] = -1; /* would overflow: close it first */
        if (k < 0) {
            size_t c = created[d]++ ? cap : first_cap;
            k = open[d] = nb++;
            ob[k] = (open_bucket_t){.dtype = d, .cap = tail ? tail_cap(c, left[p]) : c};
        }
        size_t off = align_up(ob[k].bytes, XC__BUCKET_ALIGN);
        tmp_bucket[g] = k;
        out->offset_of[g] = off / es; /* XC__BUCKET_ALIGN is a multiple of es */
        ob[k].bytes = off + bytes;
        ob[k].last_pos = p;
        if (ob[k].bytes >= ob[k].cap) open[d] = -1;
    }

    /* Number buckets by completion (their last arrival), then lay them out:
     * a split gradient's pieces end up adjacent and in order, and as every
     * piece but the last is a multiple of XC__BUCKET_ALIGN, the gradient is
     * contiguous in the arena. */
    for (int k = 0; k < nb; k++) {
        xc__bucket_t *bk = &out->buckets[k];
        bk->dtype = ob[k].dtype;
        bk->count = ob[k].bytes / xc__dtype_size(ob[k].dtype);
        bk->last_pos = ob[k].last_pos;
        bk->elem0 = ob[k].elem0;
        bk->first = k; /* the construction id, until renumbered below */
    }
    qsort(out->buckets, (size_t)nb, sizeof *out->buckets, by_last_pos);
    for (int k = 0; k < nb; k++) renum[out->buckets[k].first] = k;
    for (int k = 0; k < nb; k++) out->buckets[k].ngrads = 0;
    for (int g = 0; g < n; g++)
        for (int i = 0; i < out->npieces_of[g]; i++)
            out->buckets[renum[tmp_bucket[g]] + i].ngrads++;
    size_t arena = 0;
    int j = 0;
    for (int k = 0; k < nb; k++) {
        xc__bucket_t *bk = &out->buckets[k];
        bk->byte_off = arena;
        arena += align_up(bk->count * xc__dtype_size(bk->dtype), XC__BUCKET_ALIGN);
        bk->first = j;
        j += bk->ngrads;
        bk->ngrads = 0;
    }
    for (int p = 0; p < n; p++) { /* arrival order inside each bucket */
        int g = order[p], k0 = renum[tmp_bucket[g]];
        out->bucket_of[g] = k0;
        for (int i = 0; i < out->npieces_of[g]; i++) {
            xc__bucket_t *bk = &out->buckets[k0 + i];
            int at = bk->first + bk->ngrads++;
            out->grads[at] = g;
            out->offsets[at] = i ? 0 : out->offset_of[g];
        }
    }
    out->nbuckets = nb;
    out->ngrads = n;
    out->arena_bytes = arena;
out:
    free(tmp_bucket);
    free(seen);
    free(renum);
    free(left);
    free(psize);
    free(ob);
    if (rc != XC_OK) xc__layout_free(out);
    return rc;
}
