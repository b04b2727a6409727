/*
 * mlp.h -- a multi-layer perceptron with ReLU and softmax cross-entropy:
 * parameters, forward, backward that reports each gradient as soon as it
 * is computed (the hook the bucketer needs), and SGD with momentum.
 *
 * Layout.  Layer l maps in_l -> out_l: W_l is in_l x out_l (row-major, so
 * forward is Y = X W + b), b_l is out_l.  Parameter p = 2l is W_l, 2l+1 is
 * b_l (registration order = forward order).  Gradients are written where
 * grad[p] points -- a flat array, or views into bucket memory -- and
 * overwritten, never accumulated.
 *
 * Token layers.  With tokens T > 1 the first tok_layers layers are shared
 * by the T tokens of a row: a row of the input is T tokens of width
 * widths[0] each (the dataset's row is T x widths[0]), and such a layer
 * runs on B x T rows of one token each (a 1x1 convolution, a transformer's
 * per-token feed-forward) -- T times the compute of a plain layer per
 * parameter.  The first plain layer then sees each row's T token outputs
 * side by side (T x out width: the same memory, row-major).  rows(l) is
 * B x mult[l].
 *
 * Backward walks the layers from the last; per layer it computes dW
 * (X^T dZ), reports it, computes db (column sums of dZ), reports it, then
 * the input gradient for the layer below -- so the all-reduce of dW_l
 * overlaps the rest of the backward pass.  All sums run in a fixed order
 * (gemm.h), so the arithmetic is a pure function of the inputs.
 */
#ifndef TRAIN_MLP_MLP_H
#define TRAIN_MLP_MLP_H

#include "data.h"
#include "gemm.h"

#include <stdlib.h>
#include <string.h>

#define MLP_MAX_LAYERS 32

typedef struct mlp {
    int nlayers;
    int in[MLP_MAX_LAYERS], out[MLP_MAX_LAYERS];
    int mult[MLP_MAX_LAYERS];         /* rows per batch row: T or 1        */
    float *param[2 * MLP_MAX_LAYERS]; /* W_l, b_l                          */
    float *mom[2 * MLP_MAX_LAYERS];   /* momentum                          */
    float *grad[2 * MLP_MAX_LAYERS];  /* set by the caller                 */
    size_t count[2 * MLP_MAX_LAYERS]; /* elements of each parameter        */
    size_t block[2 * MLP_MAX_LAYERS]; /* backward computes weight gradient p
                                       * in blocks of this many elements, each
                                       * reported by `part` (0: whole; must be
                                       * a multiple of the layer's width)    */
    int batch_cap;
    float *act[MLP_MAX_LAYERS + 1];   /* act[0] input, act[l+1] = out of l */
    float *dz, *dx, *xt;              /* backward scratch                  */
} mlp_t;

static int mlp_nparams(const mlp_t *m) { return 2 * m->nlayers; }

static void mlp_free(mlp_t *m)
{
    for (int p = 0; p < 2 * MLP_MAX_LAYERS; p++) {
        free(m->param[p]);
        free(m->mom[p]);
    }
    for (int l = 0; l <= MLP_MAX_LAYERS; l++) free(m->act[l]);
    free(m->dz);
    free(m->dx);
    free(m->xt);
    memset(m, 0, sizeof *m);
}

/* widths[0..nlayers]: input (per token), hidden..., classes; the first
 * tok_layers layers shared by `tokens` tokens (1: a plain MLP).  He-uniform
 * weights (the last layer's scaled by 0.1) and zero biases from `seed`.
 * Returns 0 or -1 (allocation, or tok_layers >= nlayers). */
static int mlp_init(mlp_t *m, int nlayers, const int *widths, int tokens, int tok_layers,
                    int batch_cap, uint64_t seed)
{
    memset(m, 0, sizeof *m);
    if (nlayers < 1 || nlayers > MLP_MAX_LAYERS || tokens < 1) return -1;
    if (tokens == 1) tok_layers = 0;
    if (tok_layers < 0 || tok_layers >= nlayers) return -1;
    m->nlayers = nlayers;
    m->batch_cap = batch_cap;
    uint64_t s = seed ^ 0x3a1f00dull;
    int widest = 0; /* floats per batch row of any activation */
    for (int l = 0; l <= nlayers; l++) {
        int w = widths[l] * (l <= tok_layers ? tokens : 1);
        widest = w > widest ? w : widest;
    }
    for (int l = 0; l < nlayers; l++) {
        m->mult[l] = l < tok_layers ? tokens : 1;
        m->in[l] = widths[l] * (l == tok_layers ? tokens : 1);
        m->out[l] = widths[l + 1];
        m->count[2 * l] = (size_t)m->in[l] * (size_t)widths[l + 1];
        m->count[2 * l + 1] = (size_t)widths[l + 1];
        for (int p = 2 * l; p <= 2 * l + 1; p++) {
            m->param[p] = calloc(m->count[p], sizeof(float));
            m->mom[p] = calloc(m->count[p], sizeof(float));
            if (!m->param[p] || !m->mom[p]) goto fail;
        }
        /* He-uniform; the classifier 10x smaller, so that training starts
         * from near-uniform predictions (loss ~ ln classes) instead of
         * large random logits, whose first steps are violent */
        float a = (float)fm_sqrt(6.0 / m->in[l]) * (l + 1 == nlayers ? 0.1f : 1.0f);
        for (size_t i = 0; i < m->count[2 * l]; i++)
            m->param[2 * l][i] = (float)(2 * rng_uniform(&s) - 1) * a;
    }
    for (int l = 0; l <= nlayers; l++) {
        size_t w = (size_t)widths[l] * (size_t)(l <= tok_layers ? tokens : 1);
        m->act[l] = malloc(sizeof(float) * (size_t)batch_cap * w);
        if (!m->act[l]) goto fail;
    }
    m->dz = malloc(sizeof(float) * (size_t)batch_cap * (size_t)widest);
    m->dx = malloc(sizeof(float) * (size_t)batch_cap * (size_t)widest);
    m->xt = malloc(sizeof(float) * (size_t)batch_cap * (size_t)widest);
    if (!m->dz || !m->dx || !m->xt) goto fail;
    return 0;
fail:
    mlp_free(m);
    return -1;
}

/* Called before layer l's forward (e.g. to finish that layer's update). */
typedef void (*mlp_layer_fn)(void *ctx, int layer);

/* Forward over rows [row0, row0 + B) of the dataset, calling before(ctx, l)
 * (if not NULL) just before layer l; leaves the logits in act[nlayers].
 * Returns 0 or -1. */
static int mlp_forward_with(mlp_t *m, const dataset_t *d, int row0, int B, mlp_layer_fn before,
                            void *ctx)
{
    memcpy(m->act[0], d->x + (size_t)row0 * (size_t)d->dim, sizeof(float) * (size_t)B * (size_t)d->dim);
    for (int l = 0; l < m->nlayers; l++) {
        if (before) before(ctx, l);
        int in = m->in[l], out = m->out[l], R = B * m->mult[l];
        float *y = m->act[l + 1];
        if (gemm((size_t)R, (size_t)out, (size_t)in, m->act[l], (size_t)in, m->param[2 * l],
                 (size_t)out, 0, y, (size_t)out))
            return -1;
        const float *b = m->param[2 * l + 1];
        int relu = l + 1 < m->nlayers;
        for (int i = 0; i < R; i++)
            for (int j = 0; j < out; j++) {
                float v = y[(size_t)i * (size_t)out + (size_t)j] + b[j];
                y[(size_t)i * (size_t)out + (size_t)j] = relu && v < 0 ? 0 : v;
            }
    }
    return 0;
}

static int mlp_forward(mlp_t *m, const dataset_t *d, int row0, int B)
{
    return mlp_forward_with(m, d, row0, B, NULL, NULL);
}

/* Softmax cross-entropy of the logits against labels of rows [row0, row0+B):
 * returns the mean loss (summed in row order, in double) and leaves
 * dL/dlogits * scale in m->dz (scale = 1/B for the mean over this batch). */
static double mlp_loss(mlp_t *m, const dataset_t *d, int row0, int B, float scale)
{
    int C = m->out[m->nlayers - 1];
    const float *z = m->act[m->nlayers];
    double total = 0;
    for (int i = 0; i < B; i++) {
        const float *zi = z + (size_t)i * (size_t)C;
        float *g = m->dz + (size_t)i * (size_t)C;
        float mx = zi[0];
        for (int c = 1; c < C; c++) mx = zi[c] > mx ? zi[c] : mx;
        double sum = 0;
        for (int c = 0; c < C; c++) {
            double e = fm_exp((double)zi[c] - mx);
            g[c] = (float)e;
            sum += e;
        }
        int y = d->y[row0 + i];
        total += fm_log(sum) - ((double)zi[y] - mx);
        for (int c = 0; c < C; c++) g[c] = (float)(g[c] / sum) * scale;
        g[y] -= scale;
    }
    return total / B;
}

/* Backward from m->dz (the loss gradient); ready(ctx, p) is called as soon
 * as grad[p] holds its value -- or, for a weight with m->block[p] set and
 * a `part` callback, part(ctx, p, first, count) as each block of rows of
 * its gradient does (the same arithmetic per element either way).  Returns
 * 0, or the first non-zero value of a callback (backward stops there), or
 * -1 (allocation). */
typedef int (*mlp_ready_fn)(void *ctx, int param);
typedef int (*mlp_part_fn)(void *ctx, int param, size_t first, size_t count);

static int mlp_backward_parts(mlp_t *m, int B, mlp_ready_fn ready, mlp_part_fn part, void *ctx)
{
    for (int l = m->nlayers - 1; l >= 0; l--) {
        int in = m->in[l], out = m->out[l], R = B * m->mult[l], rc;
        /* dW = X^T dZ: (in x R) (R x out), summed over the rows in order
         * (a token layer's R = B x T rows: the sum over the tokens too) */
        transpose((size_t)R, (size_t)in, m->act[l], m->xt);
        size_t blk = m->block[2 * l], rows = (size_t)in;
        if (part && blk && blk % (size_t)out == 0 && blk / (size_t)out < (size_t)in)
            rows = blk / (size_t)out;
        for (size_t r0 = 0; r0 < (size_t)in; r0 += rows) {
            size_t nr = (size_t)in - r0 < rows ? (size_t)in - r0 : rows;
            if (gemm(nr, (size_t)out, (size_t)R, m->xt + r0 * (size_t)R, (size_t)R, m->dz,
                     (size_t)out, 0, m->grad[2 * l] + r0 * (size_t)out, (size_t)out))
                return -1;
            if (rows < (size_t)in &&
                (rc = part(ctx, 2 * l, r0 * (size_t)out, nr * (size_t)out)))
                return rc;
        }
        if (rows == (size_t)in && (rc = ready(ctx, 2 * l))) return rc;
        float *db = m->grad[2 * l + 1];
        for (int j = 0; j < out; j++) db[j] = 0;
        for (int i = 0; i < R; i++)
            for (int j = 0; j < out; j++) db[j] += m->dz[(size_t)i * (size_t)out + (size_t)j];
        if ((rc = ready(ctx, 2 * l + 1))) return rc;
        if (l == 0) break;
        /* dX = dZ W^T (R x in: for the first plain layer, B rows of T token
         * inputs = B x T rows of one), then through the ReLU of layer l-1 */
        if (gemm((size_t)R, (size_t)in, (size_t)out, m->dz, (size_t)out, m->param[2 * l],
                 (size_t)out, 1, m->dx, (size_t)in))
            return -1;
        const float *a = m->act[l];
        for (size_t i = 0; i < (size_t)R * (size_t)in; i++) m->dz[i] = a[i] > 0 ? m->dx[i] : 0;
    }
    return 0;
}

static int mlp_backward(mlp_t *m, int B, mlp_ready_fn ready, void *ctx)
{
    return mlp_backward_parts(m, B, ready, NULL, ctx);
}

/* SGD with momentum on parameter p: v = mu v + g; w -= lr v. */
static void mlp_sgd_param(mlp_t *m, int p, float lr, float mu)
{
    float *w = m->param[p], *v = m->mom[p];
    const float *g = m->grad[p];
    for (size_t i = 0; i < m->count[p]; i++) {
        v[i] = mu * v[i] + g[i];
        w[i] -= lr * v[i];
    }
}

static void mlp_sgd(mlp_t *m, float lr, float mu)
{
    for (int p = 0; p < mlp_nparams(m); p++) mlp_sgd_param(m, p, lr, mu);
}

#endif /* TRAIN_MLP_MLP_H */
