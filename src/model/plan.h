/*
 * plan.h -- the communication plan of one training step (xcoll-plan,
 * docs/plan.md): per primitive, how many calls, how many bytes each rank
 * sends (the seed's volume formulas), over which links, how long (the
 * runtime selector's cost model), how much of it compute can hide, the
 * pipeline bubble, and what to change.
 */
#ifndef XC_MODEL_PLAN_H
#define XC_MODEL_PLAN_H

#include "model.h"

/* The job: a transformer-like model (or just a parameter count), its
 * training and parallel layout, the cluster. */
typedef struct xc__plan_in {
    double params;            /* total parameters (0: from layers x 12 h^2 + vocab h) */
    int layers, hidden, seq, vocab;
    int mlp_only;             /* layers are MLP blocks (one TP all-reduce per pass), not
                                 transformer layers (two: attention and MLP) */
    int ffn;                  /* MLP inner width (0: 4 hidden) */
    int experts, topk, moe_every; /* MoE: every moe_every-th layer has experts */
    int act_bytes, grad_bytes;    /* 2 (bf16/fp16) or 4 */
    int param_bytes;              /* parameters (ZeRO's all-gathers); 0: grad_bytes */
    int heads;                    /* attention heads (0: not given); TP must divide them */
    int micro_batch, global_batch;
    int grad_accum;               /* micro-batches per step per pipeline (0: from the global
                                     batch); with a global batch they must agree */
    int dp, tp, pp, ep, zero;     /* ep divides dp (experts over data-parallel ranks) */
    int vpp;                      /* virtual pipeline stages per rank (interleaved; 0 or 1: none) */
    int seq_parallel;             /* Megatron sequence parallelism: each TP all-reduce becomes
                                     an all-gather and a reduce-scatter */
    int nodes, rpn;               /* nodes, ranks per node; ranks = tp pp dp, TP innermost */
    double flops;                 /* per rank, FLOP/s (compute estimate) */
    double bucket_mb;             /* DP gradient buckets */
    xc_compress_t compress;       /* DP gradients (ZeRO 0) */
    int shm;                      /* shared-memory collectives within a node (CPU clusters) */
    int no_overlap;               /* communication never overlaps compute (no bucketing or
                                     prefetch): every row on the critical path */
    int hot;                      /* price collectives with their buffers in the cache (as a
                                     back-to-back benchmark runs them); 0: from memory, as
                                     between a step's compute phases */
    int xc_mem;                   /* the job's buffers come from xc_mem_alloc (huge pages):
                                     cold calls priced with that term of the profile */
} xc__plan_in_t;

enum { XC__PLAN_MAX_ROWS = 12 };

typedef struct xc__plan_row {
    const char *what;     /* "dp grad all-reduce", ... */
    xc_coll_t coll;
    int group, span;      /* ranks in the group, nodes it spans */
    double calls;         /* per step */
    double msg;           /* bytes per call (the collective's M) */
    double sent;          /* bytes a rank sends per step (the seed's formula) */
    int algo;             /* the selector's choice (XC__ALGO_NONE for p2p) */
    int link;             /* the link class its heaviest traffic crosses (XC__LINK_*) */
    double t_call, t_step;
    int hidden_by;        /* 0: exposed; 1: overlaps backward; 2: overlaps fwd+bwd */
} xc__plan_row_t;

typedef struct xc__plan_out {
    xc__plan_row_t row[XC__PLAN_MAX_ROWS];
    int nrows;
    int micro;            /* micro-batches per step per pipeline */
    double compute_s;     /* per rank per step */
    double comm_s;        /* all communication */
    double exposed_s;     /* communication not hidden by compute */
    double bubble;        /* pipeline idle fraction (p-1)/(v m+p-1) */
    double step_s;        /* predicted step */
} xc__plan_out_t;

/* Fill `out` for `in` under profile `p` (XC_ERR_INVALID naming the
 * inconsistency: ranks vs layout, batch vs micro-batches, ...). */
XC__HIDDEN xc_result_t xc__plan(const xc__profile_t *p, const xc__plan_in_t *in,
                                xc__plan_out_t *out);

/* A profile for a cluster given by its two link classes (alpha seconds,
 * bandwidth bytes/s), the host terms (copy, reduction) at `host_bps`. */
XC__HIDDEN void xc__plan_profile(xc__profile_t *p, double intra_alpha, double intra_bps,
                                 double inter_alpha, double inter_bps, double host_bps);

#endif
