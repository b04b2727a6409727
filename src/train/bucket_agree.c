/*
 * bucket_agree.c -- the collectives that keep the ranks' bucketers
 * consistent, through xcoll.h only:
 *
 *  - at commit, rank 0's settings and gradient table are broadcast; every
 *    rank compares them with its own and the lowest rank that differs is
 *    found with a MIN all-reduce; that rank then broadcasts its description
 *    of the first difference, so every rank fails with the same message
 *    naming the gradient and both ranks;
 *  - after a step, rank 0's arrival order is broadcast; it becomes every
 *    rank's layout input, so the rebuilt layouts are identical.
 *
 * Every rank issues the same sequence of collectives whatever it finds
 * (counts come from rank 0's header), so a disagreement never turns into a
 * mismatched collective or a hang.
 */
#include "bucketer.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAGIC 0x78634275636b6574ull /* "xcBucket" */
#define NAME_LEN 40

enum { H_MAGIC, H_N, H_CAP, H_FIRST, H_AVG, H_REBUILD, H_FTAIL, H_SPLIT, H_COMP, H_WORDS };

typedef struct entry { /* 64 bytes on the wire, same layout on every rank */
    uint64_t count;
    uint64_t name_hash;
    uint32_t dtype, pad;
    char name[NAME_LEN]; /* truncated, for messages */
} entry_t;

static void fill_entry(const xc__grad_t *g, entry_t *e)
{
    memset(e, 0, sizeof *e);
    e->count = g->count;
    e->name_hash = xc__hash_str(g->name);
    e->dtype = (uint32_t)g->dtype;
    snprintf(e->name, sizeof e->name, "%s", g->name);
}

static double mib(uint64_t bytes) { return (double)bytes / (1024.0 * 1024.0); }

static void describe(const entry_t *e, char *out, size_t cap)
{
    const char *dt = xc_dtype_name((xc_dtype_t)e->dtype);
    snprintf(out, cap, "'%s' (%s x %llu)", e->name, dt ? dt : "?", (unsigned long long)e->count);
}

/* This rank's first difference from rank 0, described into msg; 0 if none. */
static int compare(const xc_bucketer_t *b, const uint64_t *h0, const entry_t *t0, char *msg,
                   size_t cap)
{
    int r = b->rank;
    if (h0[H_MAGIC] != MAGIC) {
        snprintf(msg, cap, "rank 0 sent no bucketer registration (rank 0 called another "
                           "broadcast?)");
        return 1;
    }
    if (h0[H_CAP] != b->cap || h0[H_FIRST] != b->first_cap) {
        snprintf(msg, cap, "bucket capacities differ: rank 0 has XCOLL_BUCKET_MB %.3f / "
                           "XCOLL_FIRST_BUCKET_MB %.3f, rank %d has %.3f / %.3f",
                 mib(h0[H_CAP]), mib(h0[H_FIRST]), r, mib(b->cap), mib(b->first_cap));
        return 1;
    }
    if (h0[H_AVG] != (uint64_t)b->average) {
        snprintf(msg, cap, "averaging differs: rank 0 %s, rank %d %s",
                 h0[H_AVG] ? "averages" : "sums", r, b->average ? "averages" : "sums");
        return 1;
    }
    if (h0[H_REBUILD] != (uint64_t)b->rebuild || h0[H_FTAIL] != (uint64_t)b->forward_tail) {
        snprintf(msg, cap, "options differ: rank 0 has rebuild %d, forward_tail %d; rank %d has "
                           "%d, %d (each takes part in collectives of its own)",
                 (int)h0[H_REBUILD], (int)h0[H_FTAIL], r, b->rebuild, b->forward_tail);
        return 1;
    }
    if (h0[H_SPLIT] != (uint64_t)b->split) {
        snprintf(msg, cap, "options differ: rank 0 has split %d, rank %d has split %d (the "
                           "buckets would differ)", (int)h0[H_SPLIT], r, b->split);
        return 1;
    }
    if (h0[H_COMP] != b->compress_key) {
        uint64_t k0 = h0[H_COMP], k = b->compress_key;
        snprintf(msg, cap, "compression differs: rank 0 has XCOLL_COMPRESS %s (warm-up %llu, "
                           "feedback %d, when %s), rank %d %s (%llu, %d, %s)",
                 k0 ? xc_compress_name((xc_compress_t)(k0 >> 4 & 15)) : "none",
                 (unsigned long long)(k0 >> 16), (int)(k0 >> 12 & 1),
                 (k0 >> 8 & 15) == XC_COMPRESS_WHEN_ALWAYS ? "always" : "faster", r,
                 k ? xc_compress_name((xc_compress_t)(k >> 4 & 15)) : "none",
                 (unsigned long long)(k >> 16), (int)(k >> 12 & 1),
                 (k >> 8 & 15) == XC_COMPRESS_WHEN_ALWAYS ? "always" : "faster");
        return 1;
    }
    uint64_t n0 = h0[H_N], n = (uint64_t)b->ngrads;
    for (uint64_t i = 0; i < n0 && i < n; i++) {
        entry_t e;
        fill_entry(&b->grads[i], &e);
        if (e.count == t0[i].count && e.dtype == t0[i].dtype && e.name_hash == t0[i].name_hash)
            continue;
        char a[96], c[96];
        describe(&t0[i], a, sizeof a);
        describe(&e, c, sizeof c);
        snprintf(msg, cap, "gradient %llu is %s on rank 0 but %s on rank %d",
                 (unsigned long long)i, a, c, r);
        return 1;
    }
    if (n0 != n) { /* equal up to the shorter list: name the first extra one */
        entry_t e;
        const entry_t *extra = &t0[n];
        if (n > n0) {
            fill_entry(&b->grads[n0], &e);
            extra = &e;
        }
        char a[96];
        describe(extra, a, sizeof a);
        snprintf(msg, cap, "rank 0 registered %llu gradients, rank %d %llu (the first extra one "
                           "is %s on rank %d)",
                 (unsigned long long)n0, r, (unsigned long long)n, a, n > n0 ? r : 0);
        return 1;
    }
    return 0;
}

xc_result_t xc__bk_agree_registration(xc_bucketer_t *b)
{
    const char *fn = "xc_bucketer_commit";
    uint64_t h[H_WORDS] = {0};
    entry_t *t0 = NULL;
    xc_result_t rc;
    if (b->rank == 0) {
        h[H_MAGIC] = MAGIC;
        h[H_N] = (uint64_t)b->ngrads;
        h[H_CAP] = b->cap;
        h[H_FIRST] = b->first_cap;
        h[H_AVG] = (uint64_t)b->average;
        h[H_REBUILD] = (uint64_t)b->rebuild;
        h[H_FTAIL] = (uint64_t)b->forward_tail;
        h[H_SPLIT] = (uint64_t)b->split;
        h[H_COMP] = b->compress_key;
    }
    rc = xc_bcast(h, H_WORDS, XC_UINT64, 0, b->comm);
    if (rc != XC_OK) goto comm_fail;
    if (h[H_N] > (1u << 30)) {
        h[H_N] = 0; /* not a header of ours; compare() reports it */
        h[H_MAGIC] = 0;
    }
    size_t n0 = (size_t)h[H_N];
    t0 = calloc(n0 ? n0 : 1, sizeof *t0);
    if (!t0) return xc__bk_fail(b, XC_ERR_NOMEM, "%s: out of memory", fn);
    if (b->rank == 0)
        for (size_t i = 0; i < n0; i++) fill_entry(&b->grads[i], &t0[i]);
    rc = xc_bcast(t0, n0 * sizeof *t0, XC_UINT8, 0, b->comm);
    if (rc != XC_OK) goto comm_fail;

    char msg[256] = "";
    int32_t bad = compare(b, h, t0, msg, sizeof msg) ? b->rank : INT32_MAX;
    rc = xc_allreduce(&bad, &bad, 1, XC_INT32, XC_MIN, b->comm);
    if (rc != XC_OK) goto comm_fail;
    free(t0);
    t0 = NULL;
    if (bad == INT32_MAX) return XC_OK;
    rc = xc_bcast(msg, sizeof msg, XC_UINT8, bad, b->comm);
    if (rc != XC_OK) goto comm_fail;
    msg[sizeof msg - 1] = 0;
    return xc__bk_fail(b, XC_ERR_INVALID, "%s: gradient registrations differ across ranks: %s",
                       fn, msg);
comm_fail:
    free(t0);
    return xc__bk_fail(b, rc, "%s: checking the registrations across ranks failed: %s", fn,
                       xc_comm_last_error(b->comm));
}

xc_result_t xc__bk_agree_order(xc_bucketer_t *b, int *order, int *valid)
{
    /* In blocks through the stack: a rank short of memory still takes
     * part (rebuild agrees on the outcome afterwards). */
    enum { BLOCK = 1024 };
    int32_t buf[BLOCK];
    int n = b->ngrads;
    for (int at = -1; at < n; at += BLOCK) { /* entry -1 is "complete" */
        int m = n - at < BLOCK ? n - at : BLOCK;
        for (int i = 0; b->rank == 0 && i < m; i++)
            buf[i] = at + i < 0 ? b->narrived == n
                                : at + i < b->narrived ? b->arrival[at + i] : -1;
        xc_result_t rc = xc_bcast(buf, (size_t)m, XC_INT32, 0, b->comm);
        if (rc != XC_OK)
            return xc__bk_fail(b, rc, "xc_bucketer_finish: broadcasting rank 0's arrival "
                                      "order failed: %s", xc_comm_last_error(b->comm));
        for (int i = 0; i < m; i++) {
            if (at + i < 0) *valid = buf[i] == 1;
            else if (order) order[at + i] = buf[i];
        }
    }
    return XC_OK;
}

xc_result_t xc__bk_agree_tail(xc_bucketer_t *b)
{
    int32_t k = INT32_MAX;
    if (b->rank == 0) {
        k = xc__bk_tail_from(b);
        const char *force = getenv("XCOLL_BUCKET_TAIL_FROM"); /* experiments, tests */
        if (force && *force) {
            char *end;
            long v = strtol(force, &end, 10);
            if (!*end && v >= 0) k = v > INT32_MAX ? INT32_MAX : (int32_t)v;
        }
    }
    xc_result_t rc = xc_bcast(&k, 1, XC_INT32, 0, b->comm);
    if (rc != XC_OK)
        return xc__bk_fail(b, rc, "xc_bucketer_finish: broadcasting rank 0's forward tail "
                                  "failed: %s", xc_comm_last_error(b->comm));
    xc__bk_set_seq(b, k < 0 ? INT32_MAX : k);
    return XC_OK;
}
