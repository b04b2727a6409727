/*
 * bucketer.h -- internals of the gradient bucketer (xcoll.h, "bucketer"),
 * shared by its files:
 *
 *   bucket_layout.c  pure: an arrival order and two capacities -> buckets
 *   bucketer.c       object, options (XCOLL_BUCKET_MB ...), registration,
 *                    accessors, errors
 *   bucket_agree.c   the collectives that keep ranks consistent: the
 *                    registration check at commit, rank 0's arrival order
 *   bucket_step.c    a step: mark ready, launch in layout order, finish,
 *                    rebuild
 *   bucket_thread.c  the launch thread that issues the all-reduces
 *   bucket_tune.c    the bucket-size tuner
 *
 * Invariants.  Between commit and destroy `lay` is the layout of every rank
 * (built by the same pure function from the same agreed input); `arena`
 * holds its buckets, each 64-byte aligned, padding zeroed.  In one step,
 * buckets are launched strictly in launch-sequence order (seq[0],
 * seq[1], ...; next_launch positions done), the same on every rank, so the
 * sequence of collectives on the communicator is the same everywhere.
 * seq is the identity unless forward_tail reversed its tail (decided
 * XC__TAIL_STEPS complete steps after the last rebuild).
 * The bucketer talks to the communicator only through xcoll.h.
 */
#ifndef XC_TRAIN_BUCKETER_H
#define XC_TRAIN_BUCKETER_H

#include "../core/common.h"

#define XC__BUCKET_ALIGN 64 /* bytes: offsets of gradients and buckets */
#define XC__BK_HIST 8       /* complete steps the tuner learns from */
#define XC__TAIL_STEPS 3    /* steps on the final layout forward_tail learns from */
#define XC__TAIL_CANDIDATES 256 /* tail starts tried: the last buckets only */
#define XC__TAIL_MIN_BYTES (64 * 1024) /* XC__LAYOUT_TAIL halves no bucket below */

/* One bucket of a layout (its gradients are a slice of the layout's arrays). */
typedef struct xc__bucket {
    xc_dtype_t dtype;
    size_t count;       /* elements, padding included                      */
    size_t byte_off;    /* of its memory in the arena                      */
    int first, ngrads;  /* its gradients: lay.grads[first .. first+ngrads) */
    int last_pos;       /* arrival position of its last gradient            */
    size_t elem0;       /* a piece of a split gradient: the gradient's element
                         * at which this bucket begins (0 otherwise)         */
} xc__bucket_t;

/* A layout: buckets in all-reduce order and where every gradient lives. */
typedef struct xc__layout {
    int nbuckets, ngrads;
    xc__bucket_t *buckets;
    int *grads;         /* gradient indices, bucket after bucket            */
    size_t *offsets;    /* element offset of grads[j] in its bucket          */
    int *bucket_of;     /* per gradient index (a split one: its first piece) */
    size_t *offset_of;  /* per gradient index                                */
    int *npieces_of;    /* per gradient index: buckets it spans, from
                         * bucket_of (1 unless split)                        */
    size_t arena_bytes; /* sum of the aligned buckets                        */
} xc__layout_t;

/*
 * Build the layout of n gradients (counts, dtypes) that arrive in `order`
 * (a permutation of 0..n-1): walking the order, each dtype fills its own
 * open bucket; a bucket closes when the next gradient would overflow it or
 * when it reaches its capacity -- first_cap for the first bucket of a
 * dtype, cap after.  A gradient larger than the capacity gets a bucket of
 * its own -- or, with XC__LAYOUT_SPLIT (and cap >= XC__BUCKET_ALIGN), one
 * bucket per piece of cap bytes (rounded down to XC__BUCKET_ALIGN),
 * adjacent and in order, so that the gradient stays contiguous in the
 * arena.  With XC__LAYOUT_TAIL (forward_tail) a bucket or piece begun with
 * L bytes of its dtype left to arrive is capped at about L/2 (the capacity
 * halved, not below XC__TAIL_MIN_BYTES): the last buckets and pieces
 * shrink geometrically.  Buckets are numbered by the arrival position of
 * their last gradient (the order in which they complete; a split
 * gradient's pieces in their order).  Pure; XC_ERR_INVALID if `order` is
 * not a permutation or a dtype is invalid.
 */
#define XC__LAYOUT_SPLIT 1 /* flags of xc__layout_build */
#define XC__LAYOUT_TAIL 2
XC__HIDDEN xc_result_t xc__layout_build(int n, const size_t *counts,
                                        const xc_dtype_t *dtypes,
                                        const int *order, size_t first_cap,
                                        size_t cap, int flags, xc__layout_t *out);
XC__HIDDEN void xc__layout_free(xc__layout_t *lay);

/* A registered gradient. */
typedef struct xc__grad {
    char *name;
    void *user;         /* the caller's array (copy mode)                   */
    size_t count;
    xc_dtype_t dtype;
    uint64_t marked;    /* step in which it was last marked; 0 never        */
} xc__grad_t;

/* Per-bucket state of the current step. */
typedef struct xc__bstate {
    int pending;        /* gradients not yet marked                          */
    xc_request_t *req;  /* in flight (NULL: not launched or done)            */
    int launched;
    int failed;         /* its launch failed (the step's error says why)    */
    int done;           /* completed early by xc_bucketer_wait; rc kept      */
    uint64_t marked;    /* a piece of a split gradient: the step in which it
                         * was marked ready (0 never)                        */
    uint64_t t_ready;   /* forward_tail timing, ns from the step's first mark:
                         * when it became complete;                         */
    uint64_t t_need;    /* ... compute time after backward (waits excluded)
                         * when the caller first needed it                   */
    int need_set;       /* t_need recorded in this step                      */
    xc_result_t rc;
} xc__bstate_t;

struct xc_bucketer {
    xc_comm_t *comm;
    int rank, size;
    size_t cap, first_cap; /* bytes */
    int average, views, rebuild;
    xc_op_t op;

    xc__grad_t *grads;
    int ngrads, grads_cap;
    int committed;

    xc__layout_t lay;
    int layout_version;
    unsigned char *arena; /* XC__BUCKET_ALIGN-aligned, lay.arena_bytes */
    unsigned char *old_arena; /* the arena before a rebuild, kept (with the
                               * results) until the next step's first mark */
    xc__bstate_t *bst;    /* lay.nbuckets */

    uint64_t step;        /* current step, from 1 */
    int next_launch;      /* buckets seq[0 .. next_launch) have been launched */
    int *seq, *pos_of;    /* launch sequence (bucket indices) and inverse    */
    int forward_tail;     /* opts.forward_tail (rank 0's counts)             */
    int split;            /* opts.split: large gradients in bucket-sized pieces */
    uint64_t compress_key; /* XCOLL_COMPRESS* as one word (0: none), agreed */
    int tail_from;        /* seq reverses from here (= nbuckets: not at all)  */
    uint64_t tail_at;     /* forward_tail: decide at the finish of this step
                           * (3 steps on the final layout; 0: decided)       */
    int *arrival;         /* this step's arrival order (n entries)       */
    /* forward_tail: per complete step on the current layout (up to
     * XC__TAIL_STEPS), each bucket's t_ready and t_need, and the step's
     * backward and exposed times -- what xc__bk_tail_from learns from. */
    uint64_t *tl_ready, *tl_need; /* [XC__TAIL_STEPS][nbuckets]            */
    uint64_t tl_bwd[XC__TAIL_STEPS], tl_exposed[XC__TAIL_STEPS];
    int tl_n;
    int narrived;
    int rebuild_pending;  /* rebuild after the next complete step         */
    xc_result_t step_rc;  /* first failure of a launch in this step       */

    /* Timing of this step and of the last XC__BK_HIST complete ones, for
     * the tuner (which takes medians): when each gradient was marked, from
     * the step's first mark; when finish was called; how long it waited. */
    uint64_t t_first;       /* the step's first mark (0: none yet)         */
    uint64_t t_end;         /* the step's first wait or finish (0: none)   */
    uint64_t wait_ns;       /* this step's time inside xc_bucketer_wait    */
    uint64_t *t_mark;       /* per gradient, this step                     */
    uint64_t *hist_ready;   /* [XC__BK_HIST][ngrads], from t_first          */
    uint64_t hist_backward[XC__BK_HIST]; /* first mark -> first wait/finish */
    uint64_t hist_exposed[XC__BK_HIST];  /* inside waits and finish        */
    int hist_n, hist_pos;   /* complete steps recorded, next slot          */
    int *last_order;        /* the last complete step's arrival order      */

    xc_bucket_hook_t hook;
    int has_hook;
    xc_compress_hook_t *own_compress; /* XCOLL_COMPRESS's hook, owned */

    int use_thread;                 /* launch through `thread`            */
    struct xc__bk_thread *thread;   /* bucket_thread.c; NULL: none         */
    char launch_err[XC__ERRMSG_LEN]; /* detail of step_rc (any thread)      */

    char err[XC__ERRMSG_LEN];
};

/* The xc__layout_build flags of b's options (split, forward_tail). */
static inline int xc__bk_layout_flags(const xc_bucketer_t *b)
{
    return (b->split ? XC__LAYOUT_SPLIT : 0) | (b->forward_tail ? XC__LAYOUT_TAIL : 0);
}

/* b's layout of its n gradients (counts, dtypes) arriving in `order`: its
 * capacities and options. */
static inline xc_result_t xc__bk_layout_of(const xc_bucketer_t *b, int n, const size_t *counts,
                                           const xc_dtype_t *dtypes, const int *order,
                                           xc__layout_t *out)
{
    return xc__layout_build(n, counts, dtypes, order, b->first_cap, b->cap,
                            xc__bk_layout_flags(b), out);
}

/* Record an error as the bucketer's and the thread's last error. */
XC__HIDDEN xc_result_t xc__bk_fail(xc_bucketer_t *b, xc_result_t rc,
                                   const char *fmt, ...) XC__PRINTF(3, 4);
/* The public view of bucket k. */
XC__HIDDEN void xc__bk_view(const xc_bucketer_t *b, int k, xc_bucket_t *out);
/* The allocations a layout needs, made before anything is replaced (so a
 * failure changes nothing, and the ranks can agree before any installs). */
typedef struct xc__bk_res {
    unsigned char *arena;
    xc__bstate_t *bst;
    int *seq;
    uint64_t *tl;
} xc__bk_res_t;
XC__HIDDEN xc_result_t xc__bk_reserve(xc_bucketer_t *b, const xc__layout_t *lay,
                                      xc__bk_res_t *r);
XC__HIDDEN void xc__bk_res_free(xc__bk_res_t *r);
/* Install layout `lay` with its reserved memory (taking ownership of
 * both): copy the values of gradients living in the old arena (views; the
 * old arena is kept until the next step's first mark, so addresses fetched
 * before the rebuild still read the results), reset step state. */
XC__HIDDEN void xc__bk_install(xc_bucketer_t *b, xc__layout_t *lay, xc__bk_res_t *r);

/* bucket_step.c: start bucket k's reduction (hook or all-reduce); a failure
 * goes to step_rc / launch_err only (safe from the launch thread). */
XC__HIDDEN xc_result_t xc__bk_launch(xc_bucketer_t *b, int k);

/* bucket_thread.c: the launch thread.  post: buckets [0, upto) may be
 * launched; drain: wait until buckets [0, upto) are (upto <= what was
 * posted); reset: a new step (only when drained); stop: launch what was
 * posted, join, free. */
typedef struct xc__bk_thread xc__bk_thread_t;
XC__HIDDEN xc_result_t xc__bk_thread_start(xc_bucketer_t *b);
XC__HIDDEN void xc__bk_thread_post(xc_bucketer_t *b, int upto);
XC__HIDDEN void xc__bk_thread_drain(xc_bucketer_t *b, int upto);
XC__HIDDEN void xc__bk_thread_reset(xc_bucketer_t *b);
XC__HIDDEN void xc__bk_thread_stop(xc_bucketer_t *b);

/* bucket_agree.c: the commit-time check (collective), and the broadcast of
 * rank 0's arrival order after a step (collective): *valid = 0 when rank 0
 * did not see every gradient; else order[] is rank 0's (order may be NULL:
 * take part only).  agree_tail: rank 0's xc__bk_tail_from (or
 * XCOLL_BUCKET_TAIL_FROM) broadcast and made the launch sequence. */
XC__HIDDEN xc_result_t xc__bk_agree_registration(xc_bucketer_t *b);
XC__HIDDEN xc_result_t xc__bk_agree_order(xc_bucketer_t *b, int *order,
                                          int *valid);
XC__HIDDEN xc_result_t xc__bk_agree_tail(xc_bucketer_t *b);

/* bucket_tune.c: the model of a step's communication.  Gradients are ready
 * at ready_ns[g] (arriving in `order`), backward ends at backward_ns; the
 * buckets for capacities (first_cap, cap) are all-reduced one after the
 * other, each as soon as it is complete and its predecessor done, at a cost
 * of alpha_ns + bytes * ns_per_byte -- `slowdown` times longer while
 * backward still runs (computation and communication share the cores).
 * Returns the end of the last all-reduce (ns from the first gradient; 0
 * if there are no buckets) and the number of buckets.  Pure; -1 on
 * allocation failure. */
typedef struct xc__bk_model {
    double alpha_ns, ns_per_byte, slowdown;
    uint64_t backward_ns;
    int layout_flags;   /* of the layouts (xc__bk_layout_flags)             */
} xc__bk_model_t;
/* Rank 0, with forward_tail: where the launch sequence turns (the tail,
 * issued last-arrived first, starts there), learnt from the complete steps
 * recorded on this layout (tl_*): one time per byte is fitted so that the
 * buckets, issued in layout order one at a time, end where the median
 * step's communication ended (end of backward + exposed time); then
 * xc__bk_tail_choose.  nbuckets: no tail (the communication kept up, or no
 * complete step). */
XC__HIDDEN int xc__bk_tail_from(const xc_bucketer_t *b);
/* The tail start t (0..nb) with the least exposed time predicted over m
 * steps (ties: the larger t).  Bucket k of bytes[k] is complete at
 * ready[i*nb + k] in step i and needed by the next forward at need[i*nb +
 * k] (compute time after backward, which ends at bwd[i]); the sequence is
 * 0 .. t-1, then nb-1 down to t, each bucket launched when complete and
 * its predecessor launched, run one at a time at ns_per_byte; the forward
 * waits for each bucket when it needs it.  t >= nb - XC__TAIL_CANDIDATES
 * (O(m nb) per candidate).  *exposed: the prediction (sum
 * over the steps, ns; may be NULL).  Pure; -1 on allocation failure. */
XC__HIDDEN int xc__bk_tail_choose(int nb, const double *bytes, int m, const uint64_t *ready,
                                  const uint64_t *need, const uint64_t *bwd, double ns_per_byte,
                                  double *exposed);
/* Set the launch sequence: identity up to tail_from, reversed after. */
XC__HIDDEN void xc__bk_set_seq(xc_bucketer_t *b, int tail_from);

XC__HIDDEN double xc__bk_comm_end(int n, const size_t *counts, const xc_dtype_t *dtypes,
                                  const int *order, const uint64_t *ready_ns,
                                  const xc__bk_model_t *m, size_t first_cap, size_t cap,
                                  int *nbuckets);

#endif /* XC_TRAIN_BUCKETER_H */
