/*
 * bucketer.c -- the bucketer object (xcoll.h, "bucketer"): options and
 * their XCOLL_* variables, registration, commit, accessors, errors, and the
 * installation of a layout (shared by commit and the rebuild after step 1).
 *
 * Invariants: before commit only registration is allowed and nothing is
 * allocated but the gradient table; after commit the table is frozen and
 * `lay`, `arena` and `bst` describe the same layout.  With views a
 * gradient's storage is lay.bucket_of/offset_of inside the arena; without,
 * it is the caller's array and the arena is the staging copy.
 */
#include "bucketer.h"
#include "../core/config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIB (1024.0 * 1024.0)

xc_result_t xc__bk_fail(xc_bucketer_t *b, xc_result_t rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    xc__verr(rc, fmt, ap);
    va_end(ap);
    if (b) snprintf(b->err, sizeof b->err, "%s", xc__tls_error());
    return rc;
}

/* A capacity in MiB: the option if set (>= 0), else the variable, else the
 * default.  Fractions are allowed (0.25 = 256 KiB); 0 means "one gradient
 * per bucket" (every gradient overflows an empty capacity). */
static xc_result_t capacity(double opt, const char *var, double dflt, size_t *bytes)
{
    double mb = dflt;
    const char *what = "default";
    if (opt >= 0) {
        mb = opt;
        what = "option";
    } else {
        const char *s = getenv(var);
        if (s && *s) {
            char *end;
            errno = 0;
            mb = strtod(s, &end);
            if (errno || end == s || *end || !(mb >= 0) || mb > 1e6)
                return xc__err(XC_ERR_INVALID, "%s=\"%s\": expected a size in MiB between 0 and "
                                               "1e6 (fractions allowed)", var, s);
            what = var;
        }
    }
    if (!(mb >= 0) || mb > 1e6 || isnan(mb))
        return xc__err(XC_ERR_INVALID, "bucketer: %s capacity %g MiB (%s) is out of range "
                                       "[0, 1e6]", var, mb, what);
    *bytes = (size_t)(mb * MIB);
    return XC_OK;
}

/* XCOLL_COMPRESS=fp16|bf16|int8 (none: unset), XCOLL_COMPRESS_WARMUP
 * (steps, default 10), XCOLL_COMPRESS_FEEDBACK (1), XCOLL_COMPRESS_WHEN
 * (faster|always, default faster): install the compression hook, owned
 * by the bucketer. */
static xc_result_t compress_from_env(xc_bucketer_t *b)
{
    const char *s = getenv("XCOLL_COMPRESS");
    if (!s || !*s) return XC_OK;
    xc_compress_t f;
    if (xc_compress_parse(s, &f) != XC_OK)
        return xc__err(XC_ERR_INVALID,
                       "XCOLL_COMPRESS=\"%s\": expected none, fp16, bf16, int8 or int4", s);
    if (f == XC_COMPRESS_NONE) return XC_OK;
    long warm = 10, fb = 1;
    XC_CHECK(xc__env_int("XCOLL_COMPRESS_WARMUP", 0, 1L << 30, &warm));
    XC_CHECK(xc__env_int("XCOLL_COMPRESS_FEEDBACK", 0, 1, &fb));
    const char *w = getenv("XCOLL_COMPRESS_WHEN");
    xc_compress_when_t when = XC_COMPRESS_WHEN_FASTER;
    if (w && *w) {
        if (!strcmp(w, "always")) when = XC_COMPRESS_WHEN_ALWAYS;
        else if (strcmp(w, "faster"))
            return xc__err(XC_ERR_INVALID, "XCOLL_COMPRESS_WHEN=\"%s\": expected faster or always", w);
    }
    XC_CHECK(xc_compress_hook_create(f, (int)warm, (int)fb, &b->own_compress, &b->hook));
    xc_compress_hook_set_when(b->own_compress, when);
    b->has_hook = 1;
    b->compress_key = 1u | (uint64_t)f << 4 | (uint64_t)when << 8 | (uint64_t)fb << 12 |
                      (uint64_t)warm << 16;
    return XC_OK;
}

/* An option left at -1: the variable `var` ("0" or "1") if set, else dflt. */
static xc_result_t flag_from_env(int *opt, const char *var, int dflt)
{
    if (*opt >= 0) return XC_OK;
    *opt = dflt;
    const char *s = getenv(var);
    if (!s || !*s) return XC_OK;
    if (strcmp(s, "0") && strcmp(s, "1"))
        return xc__err(XC_ERR_INVALID, "%s=\"%s\": expected 0 or 1", var, s);
    *opt = *s == '1';
    return XC_OK;
}

xc_result_t xc_bucketer_create(xc_comm_t *comm, const xc_bucketer_opts_t *opts,
                               xc_bucketer_t **out)
{
    if (!out) return xc__err(XC_ERR_INVALID, "xc_bucketer_create: out is NULL");
    *out = NULL;
    if (!comm) return xc__err(XC_ERR_INVALID, "xc_bucketer_create: comm is NULL");
    xc_bucketer_opts_t o = XC_BUCKETER_OPTS_INIT;
    if (opts) {
        if (opts->size < sizeof(size_t) || opts->size > sizeof o)
            return xc__err(XC_ERR_INVALID, "xc_bucketer_create: opts->size %zu (start from "
                                           "XC_BUCKETER_OPTS_INIT)", opts->size);
        memcpy(&o, opts, opts->size);
    }
    xc_bucketer_t *b = calloc(1, sizeof *b);
    if (!b) return xc__err(XC_ERR_NOMEM, "xc_bucketer_create: out of memory");
    xc_result_t rc;
    XC_CHECK_GOTO(capacity(o.bucket_mb, "XCOLL_BUCKET_MB", 25.0, &b->cap), rc, fail);
    XC_CHECK_GOTO(capacity(o.first_bucket_mb, "XCOLL_FIRST_BUCKET_MB", 1.0, &b->first_cap), rc,
                  fail);
    if (o.average < -1 || o.average > 1 || o.views < -1 || o.views > 1 || o.rebuild < -1 ||
        o.rebuild > 1 || o.launch_thread < -1 || o.launch_thread > 1 || o.forward_tail < -1 ||
        o.forward_tail > 1 || o.split < -1 || o.split > 1) {
        rc = xc__err(XC_ERR_INVALID, "xc_bucketer_create: average %d, views %d, rebuild %d, "
                                     "launch_thread %d, forward_tail %d, split %d: each must be "
                                     "-1 (default), 0 or 1",
                     o.average, o.views, o.rebuild, o.launch_thread, o.forward_tail, o.split);
        goto fail;
    }
    XC_CHECK_GOTO(flag_from_env(&o.launch_thread, "XCOLL_BUCKET_THREAD", 1), rc, fail);
    XC_CHECK_GOTO(flag_from_env(&o.split, "XCOLL_BUCKET_SPLIT", 0), rc, fail);
    XC_CHECK_GOTO(compress_from_env(b), rc, fail);
    b->comm = comm;
    b->rank = xc_comm_rank(comm);
    b->size = xc_comm_size(comm);
    b->average = o.average != 0;
    b->views = o.views == 1;
    b->rebuild = o.rebuild != 0;
    b->forward_tail = o.forward_tail == 1;
    b->split = o.split == 1;
    b->use_thread = o.launch_thread == 1 && b->size > 1; /* alone: nothing to wait for */
    b->op = b->average ? XC_AVG : XC_SUM;
    b->step = 1;
    *out = b;
    return XC_OK;
fail:
    xc_compress_hook_free(b->own_compress);
    free(b);
    return rc;
}

xc_result_t xc_bucketer_register(xc_bucketer_t *b, void *grad, size_t count, xc_dtype_t dtype,
                                 const char *name, int *index)
{
    if (index) *index = -1;
    if (!b) return xc__err(XC_ERR_INVALID, "xc_bucketer_register: bucketer is NULL");
    char dflt[32];
    snprintf(dflt, sizeof dflt, "grad%d", b->ngrads);
    const char *nm = name ? name : dflt;
    if (b->committed)
        return xc__bk_fail(b, XC_ERR_INVALID, "xc_bucketer_register: '%s' registered after "
                                              "xc_bucketer_commit", nm);
    if (xc__dtype_size(dtype) == 0)
        return xc__bk_fail(b, XC_ERR_INVALID, "xc_bucketer_register: '%s' has invalid dtype %d",
                           nm, (int)dtype);
    if (count > ((size_t)1 << 48))
        return xc__bk_fail(b, XC_ERR_INVALID, "xc_bucketer_register: '%s' has count %zu", nm,
                           count);
    if (b->views && grad)
        return xc__bk_fail(b, XC_ERR_INVALID, "xc_bucketer_register: '%s': with views the "
                                              "gradient lives in bucket memory; pass NULL and "
                                              "use xc_bucketer_grad", nm);
    if (!b->views && !grad && count)
        return xc__bk_fail(b, XC_ERR_INVALID, "xc_bucketer_register: '%s': gradient array is "
                                              "NULL with count %zu", nm, count);
    if (b->ngrads == 1 << 30)
        return xc__bk_fail(b, XC_ERR_INVALID, "xc_bucketer_register: too many gradients");
    if (b->ngrads == b->grads_cap) {
        int cap = b->grads_cap ? 2 * b->grads_cap : 64;
        xc__grad_t *g = realloc(b->grads, (size_t)cap * sizeof *g);
        if (!g) return xc__bk_fail(b, XC_ERR_NOMEM, "xc_bucketer_register: out of memory");
        b->grads = g;
        b->grads_cap = cap;
    }
    char *copy = strdup(nm);
    if (!copy) return xc__bk_fail(b, XC_ERR_NOMEM, "xc_bucketer_register: out of memory");
    b->grads[b->ngrads] = (xc__grad_t){.name = copy, .user = grad, .count = count, .dtype = dtype};
    if (index) *index = b->ngrads;
    b->ngrads++;
    return XC_OK;
}

xc_result_t xc__bk_reserve(xc_bucketer_t *b, const xc__layout_t *lay, xc__bk_res_t *r)
{
    size_t nbk = (size_t)(lay->nbuckets ? lay->nbuckets : 1);
    *r = (xc__bk_res_t){.bst = calloc(nbk, sizeof *r->bst),
                        .seq = malloc(2 * nbk * sizeof *r->seq),
                        .tl = calloc(2 * XC__TAIL_STEPS * nbk, sizeof *r->tl)};
    if (lay->arena_bytes) r->arena = aligned_alloc(XC__BUCKET_ALIGN, lay->arena_bytes);
    if (!r->bst || !r->seq || !r->tl || (lay->arena_bytes && !r->arena)) {
        xc__bk_res_free(r);
        return xc__bk_fail(b, XC_ERR_NOMEM, "bucketer: out of memory for %zu bytes of buckets",
                           lay->arena_bytes);
    }
    return XC_OK;
}

void xc__bk_res_free(xc__bk_res_t *r)
{
    free(r->arena);
    free(r->bst);
    free(r->seq);
    free(r->tl);
    *r = (xc__bk_res_t){0};
}

void xc__bk_install(xc_bucketer_t *b, xc__layout_t *lay, xc__bk_res_t *r)
{
    unsigned char *arena = r->arena;
    size_t nbk = (size_t)(lay->nbuckets ? lay->nbuckets : 1);
    if (lay->arena_bytes) memset(arena, 0, lay->arena_bytes); /* padding reduces as zeros */
    if (b->views && b->arena) { /* carry the gradients' values over */
        for (int g = 0; g < b->ngrads; g++) {
            size_t bytes = b->grads[g].count * xc__dtype_size(b->grads[g].dtype);
            if (!bytes) continue;
            const xc__bucket_t *ob = &b->lay.buckets[b->lay.bucket_of[g]];
            const xc__bucket_t *nb = &lay->buckets[lay->bucket_of[g]];
            size_t es = xc__dtype_size(b->grads[g].dtype);
            xc__copy(arena + nb->byte_off + lay->offset_of[g] * es,
                     b->arena + ob->byte_off + b->lay.offset_of[g] * es, bytes);
        }
    }
    free(b->old_arena);
    b->old_arena = b->views ? b->arena : NULL;
    if (!b->views) free(b->arena);
    free(b->bst);
    xc__layout_free(&b->lay);
    b->lay = *lay;
    memset(lay, 0, sizeof *lay);
    b->arena = arena;
    b->bst = r->bst;
    free(b->seq);
    b->seq = r->seq;
    b->pos_of = r->seq + nbk;
    free(b->tl_ready);
    b->tl_ready = r->tl;
    b->tl_need = r->tl + XC__TAIL_STEPS * nbk;
    *r = (xc__bk_res_t){0};
    b->tl_n = 0;
    xc__bk_set_seq(b, b->lay.nbuckets);
    for (int k = 0; k < b->lay.nbuckets; k++) b->bst[k].pending = b->lay.buckets[k].ngrads;
    b->next_launch = 0;
    b->narrived = 0;
}

xc_result_t xc_bucketer_commit(xc_bucketer_t *b)
{
    if (!b) return xc__err(XC_ERR_INVALID, "xc_bucketer_commit: bucketer is NULL");
    if (b->committed)
        return xc__bk_fail(b, XC_ERR_INVALID, "xc_bucketer_commit: already committed");
    XC_CHECK(xc__bk_agree_registration(b));
    int n = b->ngrads;
    size_t nn = (size_t)(n ? n : 1);
    size_t *counts = malloc(nn * sizeof *counts);
    xc_dtype_t *dtypes = malloc(nn * sizeof *dtypes);
    int *order = malloc(nn * sizeof *order);
    int *arrival = malloc(nn * sizeof *arrival), *last_order = malloc(nn * sizeof *last_order);
    uint64_t *t_mark = calloc(nn, sizeof *t_mark);
    uint64_t *hist_ready = calloc(nn * XC__BK_HIST, sizeof *hist_ready);
    xc__layout_t lay = {0};
    xc__bk_res_t res = {0};
    xc_result_t rc = XC_OK;
    if (!counts || !dtypes || !order || !arrival || !last_order || !t_mark || !hist_ready) {
        rc = xc__bk_fail(b, XC_ERR_NOMEM, "xc_bucketer_commit: out of memory");
    } else {
        for (int g = 0; g < n; g++) {
            counts[g] = b->grads[g].count;
            dtypes[g] = b->grads[g].dtype;
            order[g] = n - 1 - g; /* backward meets the last layers first */
        }
        rc = xc__bk_layout_of(b, n, counts, dtypes, order, &lay);
        if (rc != XC_OK) xc__bk_fail(b, rc, "xc_bucketer_commit: %s", xc__tls_error());
        else rc = xc__bk_reserve(b, &lay, &res);
    }
    if (rc == XC_OK && b->use_thread) rc = xc__bk_thread_start(b);
    /* Every rank commits or none does (a rank out of memory would leave
     * the others launching alone); each can retry. */
    rc = xc__agree_outcome(b->comm, rc, "xc_bucketer_commit");
    if (rc == XC_OK) {
        b->arrival = arrival, b->last_order = last_order;
        b->t_mark = t_mark, b->hist_ready = hist_ready;
        arrival = last_order = NULL, t_mark = hist_ready = NULL;
        xc__bk_install(b, &lay, &res);
        b->committed = 1;
        b->rebuild_pending = b->rebuild;
        if (b->forward_tail && !b->rebuild) b->tail_at = XC__TAIL_STEPS; /* else: after it */
    } else {
        xc__bk_fail(b, rc, "%s", xc__tls_error());
        xc__bk_thread_stop(b);
        xc__bk_res_free(&res);
        xc__layout_free(&lay);
    }
    free(counts);
    free(dtypes);
    free(order);
    free(arrival);
    free(last_order);
    free(t_mark);
    free(hist_ready);
    return rc;
}

void xc__bk_view(const xc_bucketer_t *b, int k, xc_bucket_t *out)
{
    const xc__bucket_t *bk = &b->lay.buckets[k];
    *out = (xc_bucket_t){.index = k,
                         .layout = b->layout_version,
                         .step = b->step,
                         .data = b->arena ? b->arena + bk->byte_off : NULL,
                         .count = bk->count,
                         .dtype = bk->dtype,
                         .op = b->op,
                         .ngrads = bk->ngrads,
                         .grads = b->lay.grads + bk->first,
                         .offsets = b->lay.offsets + bk->first,
                         .first_elem = bk->elem0};
}

void *xc_bucketer_grad(const xc_bucketer_t *b, int index)
{
    if (!b || !b->committed || index < 0 || index >= b->ngrads) return NULL;
    if (!b->views) return b->grads[index].user;
    if (!b->arena) return NULL; /* every gradient is empty */
    const xc__bucket_t *bk = &b->lay.buckets[b->lay.bucket_of[index]];
    return b->arena + bk->byte_off + b->lay.offset_of[index] * xc__dtype_size(bk->dtype);
}

xc_compress_hook_t *xc_bucketer_compress_hook(const xc_bucketer_t *b)
{
    return b ? b->own_compress : NULL;
}

xc_result_t xc_bucketer_set_hook(xc_bucketer_t *b, const xc_bucket_hook_t *hook)
{
    if (!b) return xc__err(XC_ERR_INVALID, "xc_bucketer_set_hook: bucketer is NULL");
    if (b->committed && (b->t_first || b->narrived || b->next_launch))
        return xc__bk_fail(b, XC_ERR_INVALID, "xc_bucketer_set_hook: step %llu is in progress "
                                              "(set hooks between steps)",
                           (unsigned long long)b->step);
    if (!hook) {
        b->has_hook = 0;
        return XC_OK;
    }
    if (hook->size < offsetof(xc_bucket_hook_t, done) + sizeof hook->done || !hook->start)
        return xc__bk_fail(b, XC_ERR_INVALID, "xc_bucketer_set_hook: hook->size %zu or a NULL "
                                              "start function", hook->size);
    memset(&b->hook, 0, sizeof b->hook);
    memcpy(&b->hook, hook, XC__MIN(hook->size, sizeof b->hook));
    b->has_hook = 1;
    return XC_OK;
}

xc_result_t xc_bucketer_info(const xc_bucketer_t *b, xc_bucketer_info_t *out)
{
    if (!b || !out || out->size < sizeof(size_t))
        return xc__err(XC_ERR_INVALID, "xc_bucketer_info: NULL argument or out->size unset");
    xc_bucketer_info_t i;
    memset(&i, 0, sizeof i);
    i.size = sizeof i;
    i.ngrads = b->ngrads;
    i.nbuckets = b->lay.nbuckets;
    i.layout = b->layout_version;
    i.step = b->step;
    i.bucket_bytes = b->cap;
    i.first_bucket_bytes = b->first_cap;
    i.total_bytes = b->lay.arena_bytes;
    i.views = b->views;
    i.average = b->average;
    i.rebuild = b->rebuild;
    i.launch_thread = b->thread != NULL;
    i.tail_from = b->tail_from;
    i.split = b->split;
    size_t n = XC__MIN(out->size, sizeof i);
    memcpy(out, &i, n);
    out->size = n;
    return XC_OK;
}

xc_result_t xc_bucketer_bucket(const xc_bucketer_t *b, int k, xc_bucket_t *out)
{
    if (!b || !out) return xc__err(XC_ERR_INVALID, "xc_bucketer_bucket: NULL argument");
    if (!b->committed || k < 0 || k >= b->lay.nbuckets)
        return xc__err(XC_ERR_INVALID, "xc_bucketer_bucket: bucket %d of %d%s", k,
                           b->lay.nbuckets, b->committed ? "" : " (not committed)");
    xc__bk_view(b, k, out);
    return XC_OK;
}

xc_result_t xc_bucketer_locate(const xc_bucketer_t *b, int index, int *bucket, size_t *offset)
{
    if (!b) return xc__err(XC_ERR_INVALID, "xc_bucketer_locate: bucketer is NULL");
    if (!b->committed || index < 0 || index >= b->ngrads)
        return xc__err(XC_ERR_INVALID, "xc_bucketer_locate: gradient %d of %d%s", index,
                       b->ngrads, b->committed ? "" : " (not committed)");
    if (bucket) *bucket = b->lay.bucket_of[index];
    if (offset) *offset = b->lay.offset_of[index];
    return XC_OK;
}

const char *xc_bucketer_last_error(const xc_bucketer_t *b) { return b ? b->err : xc_last_error(); }

xc_result_t xc_bucketer_destroy(xc_bucketer_t *b)
{
    if (!b) return XC_OK;
    xc_result_t rc = XC_OK;
    if (b->committed && (b->t_first || b->next_launch || b->narrived)) {
        /* Destroyed mid-step: the peers launch every bucket of this step
         * and wait in finish; finish it here (unmarked gradients count
         * zero), so that they complete and the communicator stays usable. */
        uint64_t step = b->step;
        xc_bucketer_finish(b);
        rc = xc__bk_fail(b, XC_ERR_INVALID, "xc_bucketer_destroy: step %llu was in progress; "
                                            "it was finished first (its unmarked gradients "
                                            "counted zero)", (unsigned long long)step);
    }
    xc__bk_thread_stop(b); /* launches what it was given: the peers expect it */
    for (int k = 0; b->bst && k < b->lay.nbuckets; k++) {
        if (!b->bst[k].req) continue;
        xc_result_t r = xc_request_wait(b->bst[k].req);
        if (r != XC_OK && rc == XC_OK)
            rc = xc__bk_fail(b, r, "xc_bucketer_destroy: bucket %d still in flight failed: %s", k,
                             xc_comm_last_error(b->comm));
        xc_request_free(b->bst[k].req);
    }
    for (int g = 0; g < b->ngrads; g++) free(b->grads[g].name);
    free(b->grads);
    free(b->arena);
    free(b->old_arena);
    free(b->bst);
    free(b->seq);
    free(b->arrival);
    free(b->last_order);
    free(b->t_mark);
    free(b->hist_ready);
    free(b->tl_ready);
    xc__layout_free(&b->lay);
    xc_compress_hook_free(b->own_compress);
    free(b);
    return rc;
}
