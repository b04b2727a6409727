/*
 * bucket_step.c -- one training step of the bucketer: gradients are marked
 * ready (copied into their bucket unless they live there), complete
 * buckets are launched -- strictly in layout order, so every rank issues
 * the same all-reduces in the same order whatever order its gradients
 * arrive in -- and finish waits for them, hands the results back, and after
 * the first complete step rebuilds the layout from rank 0's arrival order.
 *
 * Invariants within a step: bst[k].pending counts the unmarked gradients of
 * bucket k (a piece of a split gradient: 1 until the piece is marked;
 * bst[k].marked says in which step it was); buckets seq[0 .. next_launch)
 * are launched and no other; a request is owned by bst[k].req until finish
 * (or destroy) waits for and frees it.
 * A failure does not stop the step: later buckets are still launched and
 * waited for, so the ranks' collective sequences stay matched; the first
 * error is returned.
 */
#include "bucketer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double mib(size_t bytes) { return (double)bytes / (1024.0 * 1024.0); }

/* Gradient g is (a piece of it is) in bucket k. */
static int in_bucket(const xc__layout_t *lay, int g, int k)
{
    return k >= lay->bucket_of[g] && k < lay->bucket_of[g] + lay->npieces_of[g];
}

/* "bucket 3 (fp32, 4.00 MiB: 'fc2.weight' .. 'fc1.bias', step 7)";
 * a piece: "bucket 5 (fp32, 1.00 MiB: 'fc3.weight' piece 2 of 8, step 7)" */
static void bucket_str(const xc_bucketer_t *b, int k, char *out, size_t cap)
{
    const xc__bucket_t *bk = &b->lay.buckets[k];
    int g0 = b->lay.grads[bk->first];
    const char *first = b->grads[g0].name;
    const char *last = b->grads[b->lay.grads[bk->first + bk->ngrads - 1]].name;
    char piece[48] = "";
    if (b->lay.npieces_of[g0] > 1)
        snprintf(piece, sizeof piece, " piece %d of %d", k - b->lay.bucket_of[g0] + 1,
                 b->lay.npieces_of[g0]);
    snprintf(out, cap, "bucket %d (%s, %.2f MiB: '%.40s'%s%s%.40s%s, step %llu)", k,
             xc_dtype_name(bk->dtype), mib(bk->count * xc__dtype_size(bk->dtype)), first, piece,
             bk->ngrads > 1 ? " .. '" : "", bk->ngrads > 1 ? last : "",
             bk->ngrads > 1 ? "'" : "", (unsigned long long)b->step);
}

xc_result_t xc__bk_launch(xc_bucketer_t *b, int k)
{
    xc_bucket_t v;
    xc__bk_view(b, k, &v);
    xc_request_t *req = NULL;
    xc_result_t rc;
    if (b->has_hook) rc = b->hook.start(b->hook.ctx, b->comm, &v, &req);
    else rc = xc_iallreduce(v.data, v.data, v.count, v.dtype, b->op, b->comm, &req);
    b->bst[k].launched = 1;
    if (rc == XC_OK) {
        b->bst[k].req = req;
        return XC_OK;
    }
    if (req) xc_request_free(req);
    b->bst[k].failed = 1;
    if (b->step_rc == XC_OK) {
        char what[200];
        bucket_str(b, k, what, sizeof what);
        snprintf(b->launch_err, sizeof b->launch_err, "%s of %s failed: %s",
                 b->has_hook ? "the communication hook's start" : "all-reduce", what,
                 b->has_hook ? xc_last_error() : xc_comm_last_error(b->comm));
        b->step_rc = rc;
    }
    return rc;
}

void xc__bk_set_seq(xc_bucketer_t *b, int tail_from)
{
    int n = b->lay.nbuckets;
    if (tail_from < 0 || tail_from > n) tail_from = n;
    b->tail_from = tail_from;
    for (int i = 0; i < n; i++) {
        b->seq[i] = i < tail_from ? i : n - 1 - (i - tail_from);
        b->pos_of[b->seq[i]] = i;
    }
}

/* Launch (or hand to the launch thread) every complete bucket whose
 * predecessors in the launch sequence are launched. */
static xc_result_t launch_ready(xc_bucketer_t *b)
{
    int upto = b->next_launch;
    while (upto < b->lay.nbuckets && b->bst[b->seq[upto]].pending == 0) upto++;
    if (b->thread) {
        if (upto > b->next_launch) xc__bk_thread_post(b, upto);
        b->next_launch = upto;
        return XC_OK;
    }
    xc_result_t rc = XC_OK;
    while (b->next_launch < upto) {
        xc_result_t r = xc__bk_launch(b, b->seq[b->next_launch++]);
        if (rc == XC_OK) rc = r;
    }
    if (rc != XC_OK) return xc__bk_fail(b, rc, "%s", b->launch_err);
    return XC_OK;
}

static void *slot(const xc_bucketer_t *b, int g)
{
    const xc__bucket_t *bk = &b->lay.buckets[b->lay.bucket_of[g]];
    return b->arena + bk->byte_off + b->lay.offset_of[g] * xc__dtype_size(bk->dtype);
}

/* The checks of a call naming gradient `index` (fn: the call's name). */
static xc_result_t check_grad_call(xc_bucketer_t *b, const char *fn, int index)
{
    if (!b) return xc__err(XC_ERR_INVALID, "%s: bucketer is NULL", fn);
    if (!b->committed)
        return xc__bk_fail(b, XC_ERR_INVALID, "%s(%d): call xc_bucketer_commit first", fn, index);
    if (index < 0 || index >= b->ngrads)
        return xc__bk_fail(b, XC_ERR_INVALID, "%s: gradient %d does not exist (%d registered)",
                           fn, index, b->ngrads);
    return XC_OK;
}

/* Piece i of gradient g (i = 0 and the whole gradient unless split): its
 * elements [*at, *at + *n). */
static void piece_span(const xc_bucketer_t *b, int g, int i, size_t *at, size_t *n)
{
    const xc__bucket_t *bk = &b->lay.buckets[b->lay.bucket_of[g] + i];
    *at = bk->elem0;
    *n = b->lay.npieces_of[g] > 1 ? bk->count : b->grads[g].count;
}

/* Mark pieces of gradient `index` ready: all of them (whole), or those
 * that make up elements [first, first + count).  fn: the caller's name. */
static xc_result_t mark(xc_bucketer_t *b, const char *fn, int index, int whole, size_t first,
                        size_t count)
{
    XC_CHECK(check_grad_call(b, fn, index));
    xc__grad_t *g = &b->grads[index];
    unsigned long long step = (unsigned long long)b->step;
    int k0 = b->lay.bucket_of[index], np = b->lay.npieces_of[index];
    if (g->marked == b->step)
        return xc__bk_fail(b, XC_ERR_INVALID, "%s: gradient '%s' (index %d) marked ready twice "
                                              "in step %llu", fn, g->name, index, step);
    int i0 = 0, i1 = np; /* the pieces to mark: [i0, i1) */
    if (!whole) {
        if (first > g->count || count > g->count - first)
            return xc__bk_fail(b, XC_ERR_INVALID, "%s: elements [%zu, %zu) are outside gradient "
                                                  "'%s' (index %d) of %zu elements",
                               fn, first, first + count, g->name, index, g->count);
        i0 = i1 = -1;
        for (int i = 0; i < np && i1 < 0; i++) {
            size_t at, n;
            piece_span(b, index, i, &at, &n);
            if (at == first) i0 = i;
            if (i0 >= 0 && at + n == first + count) i1 = i + 1;
        }
        if (i0 < 0 || i1 < 0) {
            if (np > 1) { /* name the piece the range cuts into */
                size_t edge = i0 < 0 ? first : first + count, at = 0, n = 0;
                int i = 0;
                for (; i < np; i++) {
                    piece_span(b, index, i, &at, &n);
                    if (edge < at + n || i == np - 1) break;
                }
                return xc__bk_fail(b, XC_ERR_INVALID, "%s: elements [%zu, %zu) of gradient '%s' "
                                                      "(index %d) are not whole pieces: element "
                                                      "%zu is inside piece %d of %d, elements "
                                                      "[%zu, %zu) (xc_bucket_t.first_elem, count)",
                                   fn, first, first + count, g->name, index, edge, i + 1, np, at,
                                   at + n);
            }
            return xc__bk_fail(b, XC_ERR_INVALID, "%s: elements [%zu, %zu) of gradient '%s' "
                                                  "(index %d): it is not split (opts.split, or "
                                                  "not larger than a bucket), so the range must "
                                                  "be all %zu elements",
                               fn, first, first + count, g->name, index, g->count);
        }
    }
    for (int i = i0; np > 1 && i < i1; i++)
        if (b->bst[k0 + i].marked == b->step) {
            size_t at, n;
            piece_span(b, index, i, &at, &n);
            return xc__bk_fail(b, XC_ERR_INVALID, "%s: piece %d of %d of gradient '%s' (index "
                                                  "%d, elements [%zu, %zu)) marked ready twice "
                                                  "in step %llu",
                               fn, i + 1, np, g->name, index, at, at + n, step);
        }
    uint64_t now = xc__now_ns();
    if (!b->t_first) b->t_first = now;
    if (b->old_arena) { /* a new step: addresses from before the rebuild expire */
        free(b->old_arena);
        b->old_arena = NULL;
    }
    size_t es = xc__dtype_size(g->dtype);
    for (int i = i0; i < i1; i++) {
        size_t at, n;
        piece_span(b, index, i, &at, &n);
        if (!b->views && n)
            xc__copy((unsigned char *)slot(b, index) + at * es, (unsigned char *)g->user + at * es,
                     n * es);
        if (np > 1) b->bst[k0 + i].marked = b->step; /* (a whole bucket may hold others) */
        if (--b->bst[k0 + i].pending == 0) b->bst[k0 + i].t_ready = now - b->t_first;
    }
    int left = 0;
    for (int i = 0; np > 1 && i < np; i++) left += b->bst[k0 + i].marked != b->step;
    if (!left) { /* the gradient is complete */
        g->marked = b->step;
        b->t_mark[index] = now;
        b->arrival[b->narrived++] = index;
    }
    return launch_ready(b);
}

xc_result_t xc_bucketer_mark_ready(xc_bucketer_t *b, int index)
{
    return mark(b, "xc_bucketer_mark_ready", index, 1, 0, 0);
}

xc_result_t xc_bucketer_mark_ready_range(xc_bucketer_t *b, int index, size_t first, size_t count)
{
    return mark(b, "xc_bucketer_mark_ready_range", index, 0, first, count);
}

/* The names of the gradients (of bucket k; k < 0: of every bucket) not
 * marked in this step, into msg; their count. */
static int unmarked(const xc_bucketer_t *b, int k, char *msg, size_t cap)
{
    int n = 0;
    size_t used = 0;
    msg[0] = 0;
    for (int g = 0; g < b->ngrads; g++) {
        if (b->grads[g].marked == b->step || (k >= 0 && !in_bucket(&b->lay, g, k))) continue;
        if (used + 1 < cap) {
            int w = snprintf(msg + used, cap - used, "%s'%s'", n ? ", " : "", b->grads[g].name);
            used += w > 0 ? (size_t)w : 0;
            if (used >= cap - 1 && cap > 4) memcpy(msg + cap - 4, "...", 4);
        }
        n++;
    }
    return n;
}

/* Complete launched bucket k: wait for its reduction, call the hook's
 * done, hand the results back (copy mode).  Once: a bucket completed by
 * xc_bucketer_wait keeps its result code for finish.  With `who` (the
 * caller's name), a failure becomes the bucketer's error message.  A
 * bucket that failed to launch returns XC_OK here: its error is already
 * the step's. */
static xc_result_t complete(xc_bucketer_t *b, int k, const char *who)
{
    xc__bstate_t *s = &b->bst[k];
    if (s->done) return s->rc;
    xc_result_t r = XC_OK;
    if (s->req) {
        r = xc_request_wait(s->req);
        xc_request_free(s->req);
        s->req = NULL;
    } else if (!s->launched || s->failed) {
        return XC_OK;
    }
    char what[200];
    if (r != XC_OK) {
        bucket_str(b, k, what, sizeof what);
        if (who) /* the message goes with the first error */
            xc__bk_fail(b, r, "%s: all-reduce of %s failed: %s", who, what,
                        xc_comm_last_error(b->comm));
    } else if (b->has_hook && b->hook.done) {
        xc_bucket_t v;
        xc__bk_view(b, k, &v);
        r = b->hook.done(b->hook.ctx, b->comm, &v);
        if (r != XC_OK && who) {
            bucket_str(b, k, what, sizeof what);
            xc__bk_fail(b, r, "%s: the communication hook's done failed for %s: %s", who, what,
                        xc_last_error());
        }
    }
    if (r == XC_OK && !b->views) { /* hand the results back (a piece: its part) */
        const xc__bucket_t *bk = &b->lay.buckets[k];
        size_t es = xc__dtype_size(bk->dtype);
        for (int j = bk->first; j < bk->first + bk->ngrads; j++) {
            const xc__grad_t *g = &b->grads[b->lay.grads[j]];
            size_t n = XC__MIN(g->count - bk->elem0, bk->count - b->lay.offsets[j]);
            if (n && g->marked == b->step)
                xc__copy((unsigned char *)g->user + bk->elem0 * es,
                         b->arena + bk->byte_off + b->lay.offsets[j] * es, n * es);
        }
    }
    s->done = 1;
    s->rc = r;
    return r;
}

xc_result_t xc_bucketer_wait(xc_bucketer_t *b, int index)
{
    XC_CHECK(check_grad_call(b, "xc_bucketer_wait", index));
    int k0 = b->lay.bucket_of[index], np = b->lay.npieces_of[index];
    int k = k0; /* of its buckets (pieces), the one issued last */
    for (int i = 1; i < np; i++)
        if (b->pos_of[k0 + i] > b->pos_of[k]) k = k0 + i;
    if (b->pos_of[k] >= b->next_launch) { /* not started: waiting could never end */
        int p = 0; /* the first bucket of the sequence still waiting for gradients */
        while (p < b->pos_of[k] && b->bst[b->seq[p]].pending == 0) p++;
        int j = b->seq[p];
        char names[300];
        unmarked(b, j, names, sizeof names);
        return xc__bk_fail(b, XC_ERR_INVALID, "xc_bucketer_wait: gradient '%s' (index %d) is in "
                                              "bucket %d, which cannot start in step %llu before "
                                              "%s of bucket %d %s marked ready",
                           b->grads[index].name, index, k, (unsigned long long)b->step, names, j,
                           b->bst[j].pending == 1 ? "is" : "are");
    }
    uint64_t t0 = xc__now_ns();
    if (!b->t_end) b->t_end = t0;
    for (int i = 0; i < np; i++) { /* when the next forward needs it */
        xc__bstate_t *s = &b->bst[k0 + i];
        if (!s->need_set) s->t_need = t0 - b->t_end - b->wait_ns, s->need_set = 1;
    }
    /* Every posted bucket, not only k's: the caller may issue collectives
     * of its own next, and they must follow the buckets on every rank. */
    if (b->thread) xc__bk_thread_drain(b, b->next_launch);
    for (int i = 0; i < np; i++)
        if (b->bst[k0 + i].failed) { /* its launch failed: there is no result */
            b->wait_ns += xc__now_ns() - t0;
            return xc__bk_fail(b, b->step_rc, "xc_bucketer_wait: %s", b->launch_err);
        }
    xc_result_t r = XC_OK;
    for (int i = 0; i < np; i++) {
        xc_result_t ri = complete(b, k0 + i, r == XC_OK ? "xc_bucketer_wait" : NULL);
        if (r == XC_OK) r = ri;
    }
    b->wait_ns += xc__now_ns() - t0;
    if (r != XC_OK) xc__err(r, "%s", b->err); /* this thread's detail = the bucketer's */
    return r;
}

/* After a complete step: adopt rank 0's arrival order as the layout input
 * (collective).  The layout is replaced only if it changes, and only if
 * every rank could make the new one (else all keep the old one and try
 * again after the next step). */
static xc_result_t rebuild(xc_bucketer_t *b)
{
    int n = b->ngrads, valid = 0, same = 1;
    int *order = malloc((size_t)(n ? n : 1) * sizeof *order);
    size_t *counts = malloc((size_t)(n ? n : 1) * sizeof *counts);
    xc_dtype_t *dtypes = malloc((size_t)(n ? n : 1) * sizeof *dtypes);
    xc__layout_t lay = {0};
    xc__bk_res_t res = {0};
    xc_result_t rc = XC_OK;
    if (!order || !counts || !dtypes)
        rc = xc__bk_fail(b, XC_ERR_NOMEM, "xc_bucketer_finish: out of memory");
    /* (every rank takes part in the broadcast, or the peers would hang) */
    xc_result_t r = xc__bk_agree_order(b, rc == XC_OK ? order : NULL, &valid);
    if (r != XC_OK) {
        rc = r;
        goto out;
    }
    if (!valid) goto out; /* rank 0 missed gradients: try after the next step */
    if (rc == XC_OK) {
        for (int g = 0; g < n; g++) {
            counts[g] = b->grads[g].count;
            dtypes[g] = b->grads[g].dtype;
        }
        rc = xc__bk_layout_of(b, n, counts, dtypes, order, &lay);
        if (rc != XC_OK) {
            xc__bk_fail(b, rc, "xc_bucketer_finish: rebuilding the buckets: %s", xc__tls_error());
        } else {
            same = lay.nbuckets == b->lay.nbuckets;
            for (int g = 0; same && g < n; g++)
                same = lay.bucket_of[g] == b->lay.bucket_of[g] &&
                       lay.offset_of[g] == b->lay.offset_of[g];
            if (!same) rc = xc__bk_reserve(b, &lay, &res);
        }
    }
    rc = xc__agree_outcome(b->comm, rc, "xc_bucketer_finish: rebuilding the buckets");
    if (rc != XC_OK) {
        xc__bk_fail(b, rc, "%s (the old layout stays; tried again after the next step)",
                    xc__tls_error());
        goto out;
    }
    b->rebuild_pending = 0;
    if (b->forward_tail) { /* learn from the steps on the final layout, not step 1's */
        b->tail_at = b->step + XC__TAIL_STEPS;
        b->tl_n = 0;
    }
    if (!same) {
        xc__bk_install(b, &lay, &res);
        b->layout_version++;
    }
out:
    xc__bk_res_free(&res);
    xc__layout_free(&lay);
    free(order);
    free(counts);
    free(dtypes);
    return rc;
}

xc_result_t xc_bucketer_finish(xc_bucketer_t *b)
{
    if (!b) return xc__err(XC_ERR_INVALID, "xc_bucketer_finish: bucketer is NULL");
    if (!b->committed)
        return xc__bk_fail(b, XC_ERR_INVALID, "xc_bucketer_finish: call xc_bucketer_commit "
                                              "first");
    /* Gradients never marked: count them in so that every bucket goes out. */
    char names[300];
    int missing = unmarked(b, -1, names, sizeof names);
    uint64_t t_enter = xc__now_ns(), wait_before = b->wait_ns;
    int timed = !missing && b->t_first;
    if (timed) { /* a complete step: keep its timing */
        uint64_t *ready = b->hist_ready + (size_t)b->hist_pos * (size_t)b->ngrads;
        b->hist_backward[b->hist_pos] = (b->t_end ? b->t_end : t_enter) - b->t_first;
        for (int g = 0; g < b->ngrads; g++) ready[g] = b->t_mark[g] - b->t_first;
        memcpy(b->last_order, b->arrival, (size_t)b->ngrads * sizeof *b->last_order);
    }
    /* (the pieces not marked) -- they contribute zero: their slots hold
     * the last step's result (copies) or whatever the caller left (views),
     * which would go into the other ranks' sums of gradients they did mark */
    for (int g = 0; missing && g < b->ngrads; g++)
        for (int i = 0; b->grads[g].marked != b->step && i < b->lay.npieces_of[g]; i++)
            if (b->lay.npieces_of[g] == 1 || b->bst[b->lay.bucket_of[g] + i].marked != b->step) {
                size_t at, n, es = xc__dtype_size(b->grads[g].dtype);
                piece_span(b, g, i, &at, &n);
                if (n) memset((unsigned char *)slot(b, g) + at * es, 0, n * es);
                b->bst[b->lay.bucket_of[g] + i].pending--;
            }
    launch_ready(b);
    if (b->thread) xc__bk_thread_drain(b, b->next_launch);
    xc_result_t rc = b->step_rc, r;
    if (rc != XC_OK) xc__bk_fail(b, rc, "xc_bucketer_finish: %s", b->launch_err);

    for (int p = 0; p < b->lay.nbuckets; p++) { /* in launch order */
        r = complete(b, b->seq[p], rc == XC_OK ? "xc_bucketer_finish" : NULL);
        if (rc == XC_OK) rc = r;
    }

    if (timed && b->forward_tail && b->tl_n < XC__TAIL_STEPS) { /* what the tail learns from */
        size_t nb = (size_t)b->lay.nbuckets, i = (size_t)b->tl_n++;
        uint64_t at_finish = b->t_end ? t_enter - b->t_end - wait_before : 0;
        for (size_t k = 0; k < nb; k++) {
            b->tl_ready[i * nb + k] = b->bst[k].t_ready;
            b->tl_need[i * nb + k] = b->bst[k].need_set ? b->bst[k].t_need : at_finish;
        }
        b->tl_bwd[i] = b->hist_backward[b->hist_pos];
        b->tl_exposed[i] = xc__now_ns() - t_enter + b->wait_ns;
    }
    if (timed) { /* the slot is complete now */
        b->hist_exposed[b->hist_pos] = xc__now_ns() - t_enter + b->wait_ns;
        b->hist_pos = (b->hist_pos + 1) % XC__BK_HIST;
        if (b->hist_n < XC__BK_HIST) b->hist_n++;
    }

    /* Rebuild after the first step in which rank 0 saw every gradient.  Every
     * rank takes part whatever happened here, as the broadcast is collective. */
    if (b->rebuild_pending) {
        char keep[XC__ERRMSG_LEN];
        memcpy(keep, b->err, sizeof keep);
        r = rebuild(b);
        if (rc == XC_OK) rc = r;
        else memcpy(b->err, keep, sizeof keep); /* the first error's message */
    }
    /* forward_tail: the launch sequence from the steps on the final layout
     * (a step number every rank agrees on; collective). */
    if (b->tail_at && b->step == b->tail_at) {
        char keep[XC__ERRMSG_LEN];
        memcpy(keep, b->err, sizeof keep);
        b->tail_at = 0;
        r = xc__bk_agree_tail(b);
        if (rc == XC_OK) rc = r;
        else memcpy(b->err, keep, sizeof keep);
    }
    for (int k = 0; k < b->lay.nbuckets; k++) {
        b->bst[k].pending = b->lay.buckets[k].ngrads;
        b->bst[k].launched = 0;
        b->bst[k].failed = 0;
        b->bst[k].done = 0;
        b->bst[k].rc = XC_OK;
        b->bst[k].need_set = 0;
        b->bst[k].t_ready = 0;
    }
    uint64_t step = b->step++;
    if (b->thread) xc__bk_thread_reset(b);
    b->next_launch = 0;
    b->narrived = 0;
    b->t_first = 0;
    b->t_end = 0;
    b->wait_ns = 0;
    b->step_rc = XC_OK;
    if (missing)
        return xc__bk_fail(b, XC_ERR_INVALID, "xc_bucketer_finish: %d gradient%s never marked "
                                              "ready in step %llu: %s", missing,
                           missing == 1 ? " was" : "s were", (unsigned long long)step, names);
    if (rc != XC_OK) xc__err(rc, "%s", b->err); /* this thread's detail = the bucketer's */
    return rc;
}
