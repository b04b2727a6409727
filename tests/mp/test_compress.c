/*
 * test_compress.c -- xc_allreduce_compressed on N real processes:
 *
 *  - bound: fp32 inputs of random scale per rank (1e-3 .. 1e3, an outlier
 *    per block on one rank, zeros, odd counts 0, 1, 255, 256, 257, 1000,
 *    70001), sum and avg, fp16 / bf16 / int8: every element within the
 *    two-hop bound of docs/compression.md against the exact (fp64) result;
 *    fp16 and bf16 inputs too (bound plus the output's rounding);
 *  - identical bits on every rank (hash all-gathered), in place too;
 *  - error feedback: the same input reduced T = 20 times with a residual;
 *    the sum of the T outputs is within ONE call's bound of T x the exact
 *    result (without it the error grows with T: shown, not judged);
 *  - the residual saved with xc_ckpt_save and loaded into a fresh one: the
 *    calls after it give the bits of an uninterrupted run;
 *  - non-finite: a NaN on one rank makes its INT8 block NaN on every rank
 *    and leaves the other blocks finite;
 *  - the bucketer's compression hook (set explicitly, and from
 *    XCOLL_COMPRESS): warm-up steps equal the plain all-reduce bit for bit,
 *    later steps are within the INT8 bound of the exact average and
 *    identical on every rank; a fp64 gradient keeps the plain all-reduce
 *    (policy "always");
 *  - policy "faster" (the default): a small and a large bucket are
 *    compressed exactly when xc_compress_predict says it pays (a plain
 *    bucket is exact), the same on every rank; the prediction shrinks with
 *    the wire bytes (int8 < fp16 on a slow link);
 *  - reduce-scatter (xc_reduce_scatter_compressed): per format, sum and
 *    avg, counts 0 .. 600001 (several chunks): every element of every
 *    rank's part within one encoding per contribution of the exact sum;
 *    with a residual, T calls sum to within one call's bound of T x exact;
 *    a rank with another format, and an all-reduce against a
 *    reduce-scatter, fail with XC_ERR_MISMATCH; in place and a residual
 *    of the wrong size are XC_ERR_INVALID;
 *  - misuse: formats or counts that differ across ranks -> XC_ERR_MISMATCH
 *    on every rank (and the communicator still works); bad dtype, op,
 *    format, residual size -> XC_ERR_INVALID.
 */
#include "harness.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define B XC_COMPRESS_BLOCK

static uint64_t rng_state;
static double urand(void)
{
    rng_state = h_mix64(rng_state + 0x9e3779b97f4a7c15ull);
    return (double)(rng_state >> 11) / 9007199254740992.0;
}

/* Rank r's input: element i of scale 10^(3·(2u-1)) per block, an outlier
 * in block 0 on rank 0. */
static void fill(float *x, size_t count, int rank, uint64_t seed)
{
    rng_state = seed * 1315423911u + (uint64_t)rank;
    for (size_t b = 0; b * B < count; b++) {
        double s = pow(10.0, 3 * (2 * urand() - 1));
        for (size_t i = b * B; i < count && i < (b + 1) * B; i++) x[i] = (float)((2 * urand() - 1) * s);
    }
    if (rank == 0 && count > 3) x[3] = 1e5f;
}

/* INT8 and INT4: one scale per block (errors relative to the block max). */
static int blockwise(xc_compress_t f) { return f == XC_COMPRESS_INT8 || f == XC_COMPRESS_INT4; }

/* Per-format relative unit of one encoding (of the block max for int8/int4). */
static double unit(xc_compress_t f)
{
    return f == XC_COMPRESS_INT8   ? 1.0 / 254
           : f == XC_COMPRESS_INT4 ? 1.0 / 14
           : f == XC_COMPRESS_FP16 ? ldexp(1, -11)
                                   : ldexp(1, -8);
}

/* Absolute error floor of one encoding: fp16 below its normal range
 * (2^-25), bf16 below fp32's (2^-134), INT8/INT4 with a subnormal scale. */
static double floor_abs(xc_compress_t f)
{
    return f == XC_COMPRESS_FP16   ? ldexp(1, -25)
           : f == XC_COMPRESS_BF16 ? ldexp(1, -134)
           : f == XC_COMPRESS_INT4 ? 7 * ldexp(1, -150)
                                   : 127 * ldexp(1, -150);
}

/*
 * Two-hop bound for element i in block b: the first encoding errs by at
 * most u·M_r on rank r's input (M_r: its block max for int8, |x_r,i| for
 * the float formats), the fp32 sum by N·2^-24·Σ|x|, the second encoding by
 * u·S (S: the block max of the (sum + first errors) for int8, |sum| + the
 * first errors for the float formats); avg divides everything by N.
 */
static double bound_at(xc_compress_t f, float *const *in, int n, size_t count, size_t i,
                       double exact_abs_sum, double *blockmax_sum)
{
    size_t b = i / B, b0 = b * B, b1 = b0 + B < count ? b0 + B : count;
    double first = 0;
    for (int r = 0; r < n; r++) {
        double m = 0;
        if (blockwise(f)) {
            for (size_t k = b0; k < b1; k++) m = fabs(in[r][k]) > m ? fabs(in[r][k]) : m;
        } else {
            m = fabs(in[r][i]);
        }
        first += unit(f) * m + floor_abs(f);
    }
    double s2 = blockwise(f) ? blockmax_sum[b] + first : exact_abs_sum + first;
    return first + unit(f) * s2 + floor_abs(f) + n * ldexp(1, -22) * exact_abs_sum + 1e-30;
}

static void run_case(xc_compress_t f, xc_op_t op, size_t count, int inplace)
{
    int n = H.size;
    float **all = calloc((size_t)n, sizeof *all);
    for (int r = 0; r < n; r++) {
        all[r] = malloc((count + 1) * sizeof(float));
        fill(all[r], count, r, 7 + count);
    }
    float *out = malloc((count + 1) * sizeof(float));
    float *src = inplace ? out : all[H.rank];
    if (inplace) memcpy(out, all[H.rank], count * sizeof(float));
    H_CHECK(H.comm, xc_allreduce_compressed(src, out, count, XC_FLOAT32, op, f, NULL, H.comm));
    /* exact sums, block maxima of the sum */
    size_t nb = (count + B - 1) / B;
    double *bm = calloc(nb + 1, sizeof *bm);
    for (size_t i = 0; i < count; i++) {
        double s = 0;
        for (int r = 0; r < n; r++) s += all[r][i];
        if (op == XC_AVG) s /= n;
        if (fabs(s) > bm[i / B]) bm[i / B] = fabs(s);
    }
    size_t bad = 0;
    double div = op == XC_AVG ? n : 1;
    for (size_t i = 0; i < count; i++) {
        double s = 0, a = 0;
        for (int r = 0; r < n; r++) s += all[r][i], a += fabs(all[r][i]);
        double want = s / div;
        /* avg: the inputs were divided by N before the first encoding;
         * bm holds the averaged sum's block maxima (second encoding). */
        double bnd = bound_at(f, all, n, count, i, a, bm);
        if (op == XC_AVG) bnd = bnd / div + unit(f) * bm[i / B];
        /* fp16 overflows beyond 65504 (documented): the outlier's sum */
        if (f == XC_COMPRESS_FP16 && a > 65504.0 / 2) continue;
        if (!(fabs(out[i] - want) <= bnd)) {
            if (bad++ < 3)
                h_fail(__FILE__, __LINE__, "%s %s count=%zu%s [%zu]: %.9g, exact %.9g, error %.3g > bound %.3g",
                       xc_compress_name(f), xc_op_name(op), count, inplace ? " in place" : "", i,
                       out[i], want, fabs(out[i] - want), bnd);
        }
    }
    h_checked();
    /* identical bits everywhere */
    uint64_t h = h_hash_bytes(out, count * sizeof(float)), *hs = calloc((size_t)n, sizeof *hs);
    H_CHECK(H.comm, xc_allgather(&h, hs, 1, XC_UINT64, H.comm));
    for (int r = 0; r < n; r++) H_EQ_U64("hash of the result on every rank", hs[r], hs[0]);
    free(hs);
    free(bm);
    free(out);
    for (int r = 0; r < n; r++) free(all[r]);
    free(all);
}

static void test_bounds(void)
{
    /* 600001: three pipelined chunks of 1024 blocks, the last one short */
    static const size_t counts[] = {0, 1, 255, 256, 257, 1000, 70001, 600001};
    for (int f = XC_COMPRESS_FP16; f < XC_COMPRESS_COUNT; f++)
        for (size_t k = 0; k < sizeof counts / sizeof *counts; k++) {
            run_case((xc_compress_t)f, XC_SUM, counts[k], 0);
            run_case((xc_compress_t)f, XC_AVG, counts[k], k == 5);
        }
}

/* fp16 / bf16 inputs and outputs: the fp32 path's bound plus one rounding
 * of the result into the narrow type. */
static void test_narrow_inputs(void)
{
    size_t count = 1000;
    for (int t = 0; t < 2; t++) {
        xc_dtype_t dt = t ? XC_BFLOAT16 : XC_FLOAT16;
        uint16_t *x = malloc(count * 2), *y = malloc(count * 2);
        for (size_t i = 0; i < count; i++) {
            float v = (float)((H.rank + 1) * 0.25 + (double)(i % 17) / 16);
            x[i] = t ? h_float_to_bf16(v) : h_float_to_fp16(v);
        }
        H_CHECK(H.comm, xc_allreduce_compressed(x, y, count, dt, XC_SUM, XC_COMPRESS_INT8, NULL, H.comm));
        for (size_t i = 0; i < count; i += 37) {
            double want = 0;
            for (int r = 0; r < H.size; r++) {
                float v = (float)((r + 1) * 0.25 + (double)(i % 17) / 16);
                want += t ? h_bf16_to_double(h_float_to_bf16(v)) : h_fp16_to_double(h_float_to_fp16(v));
            }
            double got = t ? h_bf16_to_double(y[i]) : h_fp16_to_double(y[i]);
            double bnd = (2.0 * H.size / 254 + (t ? ldexp(1, -8) : ldexp(1, -11))) * (H.size * 1.5 + 1.1) + 1e-3;
            h_checked();
            if (!(fabs(got - want) <= bnd))
                h_fail(__FILE__, __LINE__, "%s input [%zu]: %g, exact %g, bound %g", xc_dtype_name(dt), i, got, want, bnd);
        }
        free(x);
        free(y);
    }
}

/* Error feedback: T calls with the same input; the outputs' sum stays
 * within one call's error of T x exact. */
static void test_feedback(void)
{
    const size_t count = 3000;
    const int T = 20;
    for (int f = XC_COMPRESS_FP16; f < XC_COMPRESS_COUNT; f++) {
        float *x = malloc(count * sizeof *x), *y = malloc(count * sizeof *y);
        double *acc = calloc(count, sizeof *acc), *acc0 = calloc(count, sizeof *acc0);
        fill(x, count, H.rank, 99);
        xc_residual_t *res = NULL;
        H_CHECK(H.comm, xc_residual_create(count, &res));
        for (int t = 0; t < T; t++) {
            H_CHECK(H.comm, xc_allreduce_compressed(x, y, count, XC_FLOAT32, XC_SUM, (xc_compress_t)f, res, H.comm));
            for (size_t i = 0; i < count; i++) acc[i] += y[i];
            H_CHECK(H.comm, xc_allreduce_compressed(x, y, count, XC_FLOAT32, XC_SUM, (xc_compress_t)f, NULL, H.comm));
            for (size_t i = 0; i < count; i++) acc0[i] += y[i];
        }
        /* exact sum, from every rank's input */
        double worst = 0, worst0 = 0, worst_bound = 0;
        float *xr = malloc(count * sizeof *xr);
        double *exact = calloc(count, sizeof *exact), *amax = calloc(count, sizeof *amax);
        for (int r = 0; r < H.size; r++) {
            fill(xr, count, r, 99);
            for (size_t i = 0; i < count; i++) {
                exact[i] += xr[i];
                amax[i] += fabs(xr[i]);
            }
        }
        size_t fails = 0;
        for (size_t b = 0; b * B < count; b++) {
            /* one call's bound for the block: per-rank block maxima (int8) */
            double m_in = 0, m_out = 0;
            for (size_t i = b * B; i < count && i < (b + 1) * B; i++) {
                m_in = amax[i] > m_in ? amax[i] : m_in;
                m_out = fabs(exact[i]) > m_out ? fabs(exact[i]) : m_out;
            }
            for (size_t i = b * B; i < count && i < (b + 1) * B; i++) {
                double one = blockwise((xc_compress_t)f) ? unit((xc_compress_t)f) * (m_in + m_out) * 2
                                                   : unit((xc_compress_t)f) * (amax[i] + fabs(exact[i])) * 2;
                one += T * H.size * ldexp(1, -22) * amax[i] + 1e-6 * m_in;
                if (f == XC_COMPRESS_FP16 && amax[i] > 65504.0 / 2) continue; /* overflow */
                double e = fabs(acc[i] - T * exact[i]), e0 = fabs(acc0[i] - T * exact[i]);
                worst = e / (one + 1e-30) > worst ? e / (one + 1e-30) : worst;
                worst0 = e0 / (one + 1e-30) > worst0 ? e0 / (one + 1e-30) : worst0;
                worst_bound = one > worst_bound ? one : worst_bound;
                if (!(e <= one) && fails++ < 3)
                    h_fail(__FILE__, __LINE__, "%s feedback [%zu]: sum of %d outputs off by %.3g > one call's bound %.3g",
                           xc_compress_name((xc_compress_t)f), i, T, e, one);
            }
        }
        h_checked();
        if (H.rank == 0)
            printf("feedback %s: worst error of the %d-call sum / one call's bound: %.2f with "
                   "feedback, %.2f without\n", xc_compress_name((xc_compress_t)f), T, worst, worst0);
        xc_residual_free(res);
        free(xr);
        free(exact);
        free(amax);
        free(x);
        free(y);
        free(acc);
        free(acc0);
    }
}

/* Rank r's part j of a reduce-scatter input of parts of `count`. */
static void fill_part(float *x, size_t count, int r, int j, uint64_t seed)
{
    fill(x, count, r * 257 + j, seed);
}

/* One reduce-scatter case (T calls with a residual when T > 1): every
 * element of this rank's part against T x the exact sum, within one
 * call's bound -- one encoding per contribution
 * (u x its block max for int8/int4, u x |x| for the float formats; with
 * feedback of x + r, so divided by 1 - u) plus the fp32 sum's rounding;
 * avg divides the inputs by N first. */
static void rs_case(xc_compress_t f, xc_op_t op, size_t count, int T)
{
    int n = H.size, me = H.rank;
    size_t all = count * (size_t)n;
    float *x = malloc((all + 1) * sizeof *x), *y = malloc((count + 1) * sizeof *y);
    double *acc = calloc(count + 1, sizeof *acc);
    for (int j = 0; j < n; j++) fill_part(x + (size_t)j * count, count, me, j, 5 + count);
    xc_residual_t *res = NULL;
    if (T > 1) H_CHECK(H.comm, xc_residual_create(all, &res));
    for (int t = 0; t < T; t++) {
        H_CHECK(H.comm, xc_reduce_scatter_compressed(x, y, count, XC_FLOAT32, op, f, res, H.comm));
        for (size_t i = 0; i < count; i++) acc[i] += y[i];
    }
    /* exact: every rank's part `me` */
    double div = op == XC_AVG ? n : 1;
    double *exact = calloc(count + 1, sizeof *exact), *bnd = calloc(count + 1, sizeof *bnd);
    float *xr = malloc((count + 1) * sizeof *xr);
    for (int r = 0; r < n; r++) {
        fill_part(xr, count, r, me, 5 + count);
        for (size_t b = 0; b * B < count; b++) {
            size_t b0 = b * B, b1 = b0 + B < count ? b0 + B : count;
            double m = 0;
            for (size_t i = b0; i < b1; i++) m = fabs(xr[i]) > m ? fabs(xr[i]) : m;
            for (size_t i = b0; i < b1; i++) {
                exact[i] += xr[i];
                double mi = blockwise(f) ? m : fabs(xr[i]);
                /* the floor is absolute: of the encoded x/N.  With feedback the
                 * encoded value is x + r, |r| <= u M(x + r), so its block max
                 * is at most M(x) / (1 - u): 1.004 x for int8, 1.08 x int4. */
                double fb = T > 1 ? 1.0 / (1.0 - unit(f)) : 1.0;
                bnd[i] += unit(f) * mi * fb / div + floor_abs(f) +
                          T * n * ldexp(1, -22) * fabs(xr[i]);
            }
        }
    }
    size_t bad = 0;
    for (size_t i = 0; i < count; i++) {
        double want = T * exact[i] / div;
        if (f == XC_COMPRESS_FP16 && fabs(exact[i]) > 65504.0 / 4) continue; /* overflow */
        if (!(fabs(acc[i] - want) <= bnd[i] + 1e-30) && bad++ < 3)
            h_fail(__FILE__, __LINE__, "reduce-scatter %s %s count=%zu T=%d [%zu]: %.9g, exact %.9g, "
                   "error %.3g > bound %.3g", xc_compress_name(f), xc_op_name(op), count, T, i,
                   acc[i], want, fabs(acc[i] - want), bnd[i]);
    }
    h_checked();
    xc_residual_free(res);
    free(x);
    free(y);
    free(xr);
    free(acc);
    free(exact);
    free(bnd);
}

static void test_reduce_scatter(void)
{
    static const size_t counts[] = {0, 1, 257, 1000, 600001};
    for (int f = XC_COMPRESS_FP16; f < XC_COMPRESS_COUNT; f++)
        for (size_t k = 0; k < sizeof counts / sizeof *counts; k++) {
            if (counts[k] > 100000 && H.size > 4) continue; /* memory: N parts */
            rs_case((xc_compress_t)f, XC_SUM, counts[k], 1);
            rs_case((xc_compress_t)f, XC_AVG, counts[k], 1);
        }
    for (int f = XC_COMPRESS_FP16; f < XC_COMPRESS_COUNT; f++)
        rs_case((xc_compress_t)f, XC_SUM, 3000, 20); /* error feedback */
    float x[4 * 600], y[600];
    size_t n = (size_t)H.size;
    for (size_t i = 0; i < 600 * (n < 4 ? n : 4); i++) x[i] = 1;
    if (H.size > 1 && H.size <= 4) {
        xc_compress_t f = H.rank == H.size - 1 ? XC_COMPRESS_BF16 : XC_COMPRESS_FP16;
        H_EXPECT_RC(H.comm, XC_ERR_MISMATCH,
                    xc_reduce_scatter_compressed(x, y, 600 / n, XC_FLOAT32, XC_SUM, f, NULL, H.comm));
    }
    H_EXPECT_RC(H.comm, XC_ERR_INVALID,
                xc_reduce_scatter_compressed(x, x, 10, XC_FLOAT32, XC_SUM, XC_COMPRESS_INT8, NULL, H.comm));
    xc_residual_t *res = NULL;
    H_CHECK(H.comm, xc_residual_create(10, &res)); /* needs 10 x N */
    if (H.size > 1)
        H_EXPECT_RC(H.comm, XC_ERR_INVALID,
                    xc_reduce_scatter_compressed(x, y, 10, XC_FLOAT32, XC_SUM, XC_COMPRESS_INT8, res, H.comm));
    xc_residual_free(res);
}

/* INT8 of a block whose largest value is FLT_MAX: finite results (the
 * scale once rounded up so that 127 x scale overflowed: the block decoded
 * to NaN, and the residual kept an infinity). */
static void test_flt_max(void)
{
    float x[B], y[B];
    for (int i = 0; i < B; i++) x[i] = H.rank == 0 && i == 0 ? FLT_MAX : 1.0f;
    xc_residual_t *res = NULL;
    H_CHECK(H.comm, xc_residual_create(B, &res));
    for (int it = 0; it < 3; it++) {
        H_CHECK(H.comm, xc_allreduce_compressed(x, y, B, XC_FLOAT32, XC_SUM, XC_COMPRESS_INT8, res,
                                                H.comm));
        for (int i = 0; i < B; i++) {
            h_checked();
            if (!isfinite(y[i])) {
                h_fail(__FILE__, __LINE__, "FLT_MAX block, call %d: [%d] = %g", it, i, y[i]);
                break;
            }
        }
    }
    xc_residual_free(res);
}

static void test_nonfinite(void)
{
    size_t count = 4 * B;
    if (H.size == 1) return; /* one rank sends nothing: the input, exactly */
    float *x = malloc(count * sizeof *x), *y = malloc(count * sizeof *y);
    for (size_t i = 0; i < count; i++) x[i] = 1.0f;
    if (H.rank == H.size - 1) x[B + 5] = NAN; /* block 1 */
    H_CHECK(H.comm, xc_allreduce_compressed(x, y, count, XC_FLOAT32, XC_SUM, XC_COMPRESS_INT8, NULL, H.comm));
    for (size_t i = 0; i < count; i++) {
        int in_nan_block = i / B == 1;
        h_checked();
        if (in_nan_block ? !isnan(y[i]) : !(fabs(y[i] - H.size) <= H.size * 0.01))
            h_fail(__FILE__, __LINE__, "NaN in block 1 of the last rank: [%zu] = %g", i, y[i]);
    }
    free(x);
    free(y);
}

static void test_misuse(void)
{
    float x[600], y[600];
    for (int i = 0; i < 600; i++) x[i] = 1;
    if (H.size > 1) {
        /* the last rank uses another format of the same size (fp16 vs bf16) */
        xc_compress_t f = H.rank == H.size - 1 ? XC_COMPRESS_BF16 : XC_COMPRESS_FP16;
        H_EXPECT_RC(H.comm, XC_ERR_MISMATCH,
                    xc_allreduce_compressed(x, y, 600, XC_FLOAT32, XC_SUM, f, NULL, H.comm));
        /* the last rank's dtype (bf16 against fp32), then its op (avg
         * against sum) differs: the same segments, the header tells */
        uint16_t hx[600], hy[600];
        for (int i = 0; i < 600; i++) hx[i] = 0x3f80; /* bf16 1.0 */
        int last = H.rank == H.size - 1;
        H_EXPECT_RC(H.comm, XC_ERR_MISMATCH,
                    last ? xc_allreduce_compressed(hx, hy, 600, XC_BFLOAT16, XC_SUM,
                                                   XC_COMPRESS_INT8, NULL, H.comm)
                         : xc_allreduce_compressed(x, y, 600, XC_FLOAT32, XC_SUM,
                                                   XC_COMPRESS_INT8, NULL, H.comm));
        H_EXPECT_RC(H.comm, XC_ERR_MISMATCH,
                    xc_allreduce_compressed(x, y, 600, XC_FLOAT32, last ? XC_AVG : XC_SUM,
                                            XC_COMPRESS_INT8, NULL, H.comm));
        if (H.size <= 4)
            H_EXPECT_RC(H.comm, XC_ERR_MISMATCH,
                        xc_reduce_scatter_compressed(x, y, 600 / H.size, XC_FLOAT32,
                                                     last ? XC_AVG : XC_SUM, XC_COMPRESS_INT8,
                                                     NULL, H.comm));
    }
    xc_comm_t *c2 = NULL;
    if (H.size == 2) {
        /* an all-reduce against a reduce-scatter of one block each: both
         * fail (the first all-to-all's sizes differ), neither waits */
        H_CHECK(H.comm, xc_comm_split(H.comm, 0, H.rank, &c2, NULL));
        H_EXPECT_RC(c2, XC_ERR_MISMATCH,
                    H.rank == 0 ? xc_allreduce_compressed(x, y, 1, XC_FLOAT32, XC_SUM,
                                                          XC_COMPRESS_INT8, NULL, c2)
                                : xc_reduce_scatter_compressed(x, y, 1, XC_FLOAT32, XC_SUM,
                                                               XC_COMPRESS_INT8, NULL, c2));
        xc_comm_destroy(c2);
        c2 = NULL;
    }
    /* the mismatch may have poisoned nothing: a fresh comm for the rest */
    H_CHECK(H.comm, xc_comm_split(H.comm, 0, H.rank, &c2, NULL));
    if (H.size > 1) {
        /* 590 and 600 values: both 3 blocks, equal segments; the header's
         * count tells them apart */
        size_t cnt = H.rank == 0 ? 590 : 600;
        H_EXPECT_RC(c2, XC_ERR_MISMATCH,
                    xc_allreduce_compressed(x, y, cnt, XC_FLOAT32, XC_SUM, XC_COMPRESS_INT8, NULL, c2));
    }
    xc_comm_destroy(c2);
    if (H.size > 1) { /* several chunks: the counts are agreed first */
        size_t cnt = H.rank == 0 ? 300000 : 300001;
        float *bx = calloc(300001, sizeof *bx), *by = calloc(300001, sizeof *by);
        H_EXPECT_RC(H.comm, XC_ERR_MISMATCH,
                    xc_allreduce_compressed(bx, by, cnt, XC_FLOAT32, XC_SUM, XC_COMPRESS_INT8, NULL, H.comm));
        free(bx);
        free(by);
    }
    H_CHECK(H.comm, xc_comm_split(H.comm, 0, H.rank, &c2, NULL));
    H_CHECK(c2, xc_allreduce_compressed(x, y, 600, XC_FLOAT32, XC_SUM, XC_COMPRESS_INT8, NULL, c2));
    H_EQ_INT("after the mismatches a fresh communicator works", (long long)y[599], H.size);
    xc_comm_destroy(c2);
    xc_residual_t *res = NULL;
    H_CHECK(H.comm, xc_residual_create(10, &res));
    H_EXPECT_RC(H.comm, XC_ERR_INVALID,
                xc_allreduce_compressed(x, y, 600, XC_FLOAT32, XC_SUM, XC_COMPRESS_INT8, res, H.comm));
    H_EXPECT_RC(H.comm, XC_ERR_INVALID,
                xc_allreduce_compressed(x, y, 600, XC_INT32, XC_SUM, XC_COMPRESS_INT8, NULL, H.comm));
    H_EXPECT_RC(H.comm, XC_ERR_INVALID,
                xc_allreduce_compressed(x, y, 600, XC_FLOAT32, XC_MAX, XC_COMPRESS_INT8, NULL, H.comm));
    H_EXPECT_RC(H.comm, XC_ERR_INVALID,
                xc_allreduce_compressed(x, y, 600, XC_FLOAT32, XC_SUM, (xc_compress_t)9, NULL, H.comm));
    void *data = NULL;
    size_t bytes = 0;
    H_CHECK(H.comm, xc_residual_data(res, &data, &bytes));
    H_EQ_INT("residual bytes", bytes, 2 * 10 * sizeof(float));
    xc_residual_free(res);
}

/* Three gradients (fp32, fp32, fp64) over 4 steps through a bucketer with
 * small buckets and the INT8 hook (warm-up 2). */
static void test_hook(int from_env)
{
    enum { NG = 3 };
    static const size_t cnt[NG] = {5000, 1234, 300};
    static const xc_dtype_t dts[NG] = {XC_FLOAT32, XC_FLOAT32, XC_FLOAT64};
    xc_bucketer_opts_t o = XC_BUCKETER_OPTS_INIT;
    o.bucket_mb = 0.01;
    o.first_bucket_mb = 0.01;
    xc_bucketer_t *b = NULL;
    xc_compress_hook_t *h = NULL;
    xc_bucket_hook_t hook;
    if (from_env) {
        setenv("XCOLL_COMPRESS", "int8", 1);
        setenv("XCOLL_COMPRESS_WARMUP", "2", 1);
        setenv("XCOLL_COMPRESS_WHEN", "always", 1);
    }
    H_CHECK(H.comm, xc_bucketer_create(H.comm, &o, &b));
    if (from_env) {
        unsetenv("XCOLL_COMPRESS");
        unsetenv("XCOLL_COMPRESS_WARMUP");
        unsetenv("XCOLL_COMPRESS_WHEN");
    } else {
        H_CHECK(H.comm, xc_compress_hook_create(XC_COMPRESS_INT8, 2, 1, &h, &hook));
        H_CHECK(H.comm, xc_compress_hook_set_when(h, XC_COMPRESS_WHEN_ALWAYS));
        H_CHECK(H.comm, xc_bucketer_set_hook(b, &hook));
    }
    void *g[NG];
    for (int i = 0; i < NG; i++) {
        g[i] = malloc(cnt[i] * xc_dtype_size(dts[i]));
        H_CHECK(H.comm, xc_bucketer_register(b, g[i], cnt[i], dts[i], NULL, NULL));
    }
    H_CHECK(H.comm, xc_bucketer_commit(b));
    for (int step = 1; step <= 4; step++) {
        for (int i = 0; i < NG; i++)
            for (size_t k = 0; k < cnt[i]; k++) {
                double v = sin((double)(k * 7 + (size_t)i * 3 + (size_t)H.rank * 11 + (size_t)step));
                if (dts[i] == XC_FLOAT32) ((float *)g[i])[k] = (float)v;
                else ((double *)g[i])[k] = v;
            }
        for (int i = NG - 1; i >= 0; i--) H_CHECK(H.comm, xc_bucketer_mark_ready(b, i));
        H_CHECK(H.comm, xc_bucketer_finish(b));
        for (int i = 0; i < NG; i++) {
            double worst = 0;
            for (size_t k = 0; k < cnt[i]; k++) {
                double want = 0, got;
                for (int r = 0; r < H.size; r++)
                    want += dts[i] == XC_FLOAT32
                                ? (double)(float)sin((double)(k * 7 + (size_t)i * 3 + (size_t)r * 11 + (size_t)step))
                                : sin((double)(k * 7 + (size_t)i * 3 + (size_t)r * 11 + (size_t)step));
                want /= H.size;
                got = dts[i] == XC_FLOAT32 ? ((float *)g[i])[k] : ((double *)g[i])[k];
                worst = fabs(got - want) > worst ? fabs(got - want) : worst;
            }
            /* plain all-reduce: rounding only; INT8: inputs <= 1, two
             * encodings of at most 1/254 each (avg: /N), fp32 sums; from
             * the second compressed step on, the output also carries the
             * previous step's error back (feedback): twice that */
            int compressed = step > 2 && dts[i] == XC_FLOAT32 && H.size > 1;
            double bound = compressed ? (step > 3 ? 2 : 1) * 2.0 / 254 + 1e-5 : 1e-6;
            h_checked();
            if (!(worst <= bound))
                h_fail(__FILE__, __LINE__, "hook%s step %d grad %d: error %.3g > %.3g",
                       from_env ? " (XCOLL_COMPRESS)" : "", step, i, worst, bound);
            if (compressed && H.size > 1 && worst == 0)
                h_fail(__FILE__, __LINE__, "hook step %d grad %d: exact -- not compressed?", step, i);
            uint64_t hh = h_hash_bytes(g[i], cnt[i] * xc_dtype_size(dts[i]));
            uint64_t *hs = calloc((size_t)H.size, sizeof *hs);
            H_CHECK(H.comm, xc_allgather(&hh, hs, 1, XC_UINT64, H.comm));
            for (int r = 0; r < H.size; r++) H_EQ_U64("hook: same bits on every rank", hs[r], hs[0]);
            free(hs);
        }
    }
    /* the hook XCOLL_COMPRESS installed is the bucketer's to show */
    xc_compress_hook_t *own = xc_bucketer_compress_hook(b);
    H_TRUE("xc_bucketer_compress_hook: the XCOLL_COMPRESS hook, else NULL",
           from_env ? own != NULL : own == NULL);
    if (h || own) {
        /* the fp32 buckets have residuals (the fp64 one none) */
        int with = 0;
        for (int k = 0; k < 16; k++) {
            void *d = NULL;
            size_t bytes = 0;
            H_CHECK(H.comm, xc_compress_hook_residual(h ? h : own, k, &d, &bytes));
            with += d && bytes;
        }
        h_checked();
        if (H.size > 1 && with == 0) h_fail(__FILE__, __LINE__, "no bucket has a residual");
    }
    H_CHECK(H.comm, xc_bucketer_destroy(b));
    xc_compress_hook_free(h);
    for (int i = 0; i < NG; i++) free(g[i]);
}

/* A hook's residuals saved after compressed steps and restored into a
 * fresh bucketer and hook (xc_compress_hook_residual_of, before its first
 * step): the next step ends with the same bits as the uninterrupted run. */
static xc_bucketer_t *hooked_pair(float **g, const size_t *cnt, int ng, xc_compress_hook_t **h)
{
    xc_bucketer_opts_t o = XC_BUCKETER_OPTS_INIT;
    o.bucket_mb = 0.01;
    o.first_bucket_mb = 0.01;
    xc_bucketer_t *b = NULL;
    xc_bucket_hook_t hook;
    H_CHECK(H.comm, xc_bucketer_create(H.comm, &o, &b));
    H_CHECK(H.comm, xc_compress_hook_create(XC_COMPRESS_INT8, 0, 1, h, &hook));
    H_CHECK(H.comm, xc_compress_hook_set_when(*h, XC_COMPRESS_WHEN_ALWAYS));
    H_CHECK(H.comm, xc_bucketer_set_hook(b, &hook));
    for (int i = 0; i < ng; i++)
        H_CHECK(H.comm, xc_bucketer_register(b, g[i], cnt[i], XC_FLOAT32, NULL, NULL));
    H_CHECK(H.comm, xc_bucketer_commit(b));
    return b;
}

static void hooked_step(xc_bucketer_t *b, float **g, const size_t *cnt, int ng, int step)
{
    for (int i = 0; i < ng; i++)
        for (size_t k = 0; k < cnt[i]; k++)
            g[i][k] = (float)sin((double)(k * 5 + (size_t)i * 13 + (size_t)H.rank * 7 + (size_t)step));
    for (int i = ng - 1; i >= 0; i--) H_CHECK(H.comm, xc_bucketer_mark_ready(b, i));
    H_CHECK(H.comm, xc_bucketer_finish(b));
}

static void test_hook_restore(void)
{
    enum { NG = 2, MAXB = 16 };
    static const size_t cnt[NG] = {3000, 777};
    float *g[NG], *g2[NG];
    for (int i = 0; i < NG; i++) {
        g[i] = malloc(cnt[i] * sizeof(float));
        g2[i] = malloc(cnt[i] * sizeof(float));
    }
    xc_compress_hook_t *h = NULL, *h2 = NULL;
    xc_bucketer_t *b = hooked_pair(g, cnt, NG, &h);
    for (int step = 1; step <= 3; step++) hooked_step(b, g, cnt, NG, step);
    /* the checkpoint: every bucket's residual */
    void *saved[MAXB] = {0};
    size_t sbytes[MAXB] = {0};
    int with = 0;
    xc_bucketer_info_t in = {.size = sizeof in};
    H_CHECK(H.comm, xc_bucketer_info(b, &in));
    int nb = in.nbuckets < MAXB ? in.nbuckets : MAXB;
    for (int k = 0; k < nb; k++) {
        void *d = NULL;
        H_CHECK(H.comm, xc_compress_hook_residual(h, k, &d, &sbytes[k]));
        saved[k] = malloc(sbytes[k] ? sbytes[k] : 1);
        if (sbytes[k]) memcpy(saved[k], d, sbytes[k]);
        with += sbytes[k] > 0;
    }
    H_TRUE("residuals to save", with > 0);
    hooked_step(b, g, cnt, NG, 4); /* the uninterrupted run's next step */

    xc_bucketer_t *b2 = hooked_pair(g2, cnt, NG, &h2);
    void *d = NULL;
    size_t bytes = 0;
    H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_compress_hook_residual_of(h2, NULL, &d, &bytes));
    for (int k = 0; k < nb; k++) {
        xc_bucket_t bk;
        H_CHECK(H.comm, xc_bucketer_bucket(b2, k, &bk));
        H_CHECK(H.comm, xc_compress_hook_residual_of(h2, &bk, &d, &bytes));
        H_EQ_U64("restored residual's size", bytes, sbytes[k]);
        if (bytes == sbytes[k] && bytes) memcpy(d, saved[k], bytes);
    }
    hooked_step(b2, g2, cnt, NG, 4);
    for (int i = 0; i < NG; i++)
        H_TRUE("restored residuals: the same bits as the uninterrupted run",
               !memcmp(g[i], g2[i], cnt[i] * sizeof(float)));
    for (int k = 0; k < nb; k++) free(saved[k]);
    H_CHECK(H.comm, xc_bucketer_destroy(b));
    H_CHECK(H.comm, xc_bucketer_destroy(b2));
    xc_compress_hook_free(h);
    xc_compress_hook_free(h2);
    for (int i = 0; i < NG; i++) {
        free(g[i]);
        free(g2[i]);
    }
}

/* Policy "faster": two fp32 gradients in buckets of their own, a small and
 * a large one, no warm-up: each is compressed iff the model says so. */
static void test_hook_faster(void)
{
    enum { NG = 2 };
    static const size_t cnt[NG] = {300, 1 << 20};
    xc_bucketer_opts_t o = XC_BUCKETER_OPTS_INIT;
    o.bucket_mb = 0.001;
    o.first_bucket_mb = 0.001;
    xc_bucketer_t *b = NULL;
    xc_compress_hook_t *h = NULL;
    xc_bucket_hook_t hook;
    H_CHECK(H.comm, xc_bucketer_create(H.comm, &o, &b));
    H_CHECK(H.comm, xc_compress_hook_create(XC_COMPRESS_INT8, 0, 1, &h, &hook));
    H_CHECK(H.comm, xc_bucketer_set_hook(b, &hook));
    float *g[NG];
    int want[NG];
    for (int i = 0; i < NG; i++) {
        g[i] = malloc(cnt[i] * sizeof(float));
        H_CHECK(H.comm, xc_bucketer_register(b, g[i], cnt[i], XC_FLOAT32, NULL, NULL));
        double tc, tp;
        H_CHECK(H.comm, xc_compress_predict(H.comm, cnt[i], XC_FLOAT32, XC_AVG, XC_COMPRESS_INT8, &tc));
        H_CHECK(H.comm, xc_compress_predict(H.comm, cnt[i], XC_FLOAT32, XC_AVG, XC_COMPRESS_NONE, &tp));
        h_checked();
        if (!(tc > 0 && tp > 0) && H.size > 1)
            h_fail(__FILE__, __LINE__, "predictions %g (int8), %g (plain) for %zu values", tc, tp,
                   cnt[i]);
        want[i] = H.size > 1 && tc < tp;
        if (H.rank == 0)
            printf("policy faster: %zu values: int8 %.3f ms, plain %.3f ms -> %s\n", cnt[i],
                   tc * 1e3, tp * 1e3, want[i] ? "compressed" : "plain");
    }
    H_CHECK(H.comm, xc_bucketer_commit(b));
    for (int step = 1; step <= 2; step++) {
        for (int i = 0; i < NG; i++)
            for (size_t k = 0; k < cnt[i]; k++)
                g[i][k] = (float)sin((double)(k * 7 + (size_t)H.rank * 11 + (size_t)step));
        for (int i = NG - 1; i >= 0; i--) H_CHECK(H.comm, xc_bucketer_mark_ready(b, i));
        H_CHECK(H.comm, xc_bucketer_finish(b));
        for (int i = 0; i < NG; i++) {
            double worst = 0;
            for (size_t k = 0; k < cnt[i]; k++) {
                double w = 0;
                for (int r = 0; r < H.size; r++)
                    w += (double)(float)sin((double)(k * 7 + (size_t)r * 11 + (size_t)step));
                w /= H.size;
                worst = fabs(g[i][k] - w) > worst ? fabs(g[i][k] - w) : worst;
            }
            h_checked();
            if (want[i] && (worst == 0 || worst > 2 * 2.0 / 254 + 1e-5))
                h_fail(__FILE__, __LINE__, "faster: %zu values step %d: error %.3g (compressed "
                       "as predicted?)", cnt[i], step, worst);
            if (!want[i] && worst > 1e-6)
                h_fail(__FILE__, __LINE__, "faster: %zu values step %d: error %.3g (the model "
                       "said plain)", cnt[i], step, worst);
            uint64_t hh = h_hash_bytes(g[i], cnt[i] * sizeof(float));
            uint64_t *hs = calloc((size_t)H.size, sizeof *hs);
            H_CHECK(H.comm, xc_allgather(&hh, hs, 1, XC_UINT64, H.comm));
            for (int r = 0; r < H.size; r++) H_EQ_U64("faster: same bits on every rank", hs[r], hs[0]);
            free(hs);
        }
    }
    /* Wire bytes: int8 (1 B + scales) is predicted below fp16 (2 B) at
     * 16 Mi values wherever the wire costs anything; both below plain. */
    double t8, t16, tp;
    H_CHECK(H.comm, xc_compress_predict(H.comm, 16u << 20, XC_FLOAT32, XC_SUM, XC_COMPRESS_INT8, &t8));
    H_CHECK(H.comm, xc_compress_predict(H.comm, 16u << 20, XC_FLOAT32, XC_SUM, XC_COMPRESS_FP16, &t16));
    H_CHECK(H.comm, xc_compress_predict(H.comm, 16u << 20, XC_FLOAT32, XC_SUM, XC_COMPRESS_NONE, &tp));
    if (H.rank == 0)
        printf("predicted at 16 Mi values: int8 %.2f ms, fp16 %.2f ms, plain %.2f ms\n",
               t8 * 1e3, t16 * 1e3, tp * 1e3);
    double bad;
    H_EXPECT_RC(H.comm, XC_ERR_INVALID,
                xc_compress_predict(H.comm, 10, XC_INT32, XC_SUM, XC_COMPRESS_INT8, &bad));
    H_EXPECT_RC(H.comm, XC_ERR_INVALID,
                xc_compress_predict(H.comm, 10, XC_FLOAT32, XC_MAX, XC_COMPRESS_INT8, &bad));
    H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_compress_predict(NULL, 10, XC_FLOAT32, XC_SUM,
                                                            XC_COMPRESS_INT8, &bad));
    H_CHECK(H.comm, xc_bucketer_destroy(b));
    xc_compress_hook_free(h);
    for (int i = 0; i < NG; i++) free(g[i]);
}

/* The residual saved with a checkpoint and loaded into a fresh one: the
 * calls after the restore give the same bits as an uninterrupted run
 * (the error feedback survives a restart). */
static void test_residual_checkpoint(void)
{
    enum { COUNT = 3001, T1 = 3, T2 = 3 };
    char dir[128];
    int32_t tag = (int32_t)getpid(); /* rank 0's, for every rank */
    H_CHECK(H.comm, xc_bcast(&tag, 1, XC_INT32, 0, H.comm));
    snprintf(dir, sizeof dir, "/tmp/xc_test_residual_ckpt.%d", (int)tag);
    float *x = malloc(COUNT * sizeof *x), *ref = malloc(T2 * COUNT * sizeof *ref),
          *y = malloc(COUNT * sizeof *y);
    for (int i = 0; i < COUNT; i++) /* values that INT8 rounds visibly */
        x[i] = (float)sin(0.37 * i + H.rank) * (1.0f + (float)(i % 13) / 7.0f);
    for (int pass = 0; pass < 2; pass++) {
        xc_residual_t *res = NULL;
        H_CHECK(H.comm, xc_residual_create(COUNT, &res));
        for (int t = 0; t < T1; t++)
            H_CHECK(H.comm, xc_allreduce_compressed(x, y, COUNT, XC_FLOAT32, XC_AVG,
                                                    XC_COMPRESS_INT8, res, H.comm));
        if (pass == 1) { /* save, drop, restore into a fresh residual */
            xc_ckpt_part_t part = {"residual", NULL, 0};
            H_CHECK(H.comm, xc_residual_data(res, &part.data, &part.bytes));
            H_CHECK(H.comm, xc_ckpt_save(H.comm, dir, T1, &part, 1));
            xc_residual_free(res);
            H_CHECK(H.comm, xc_residual_create(COUNT, &res));
            H_CHECK(H.comm, xc_residual_data(res, &part.data, &part.bytes));
            uint64_t step = 0;
            H_CHECK(H.comm, xc_ckpt_load(H.comm, dir, XC_CKPT_LATEST, &part, 1, &step));
            H_EQ_U64("checkpoint step", step, T1);
        }
        for (int t = 0; t < T2; t++) {
            H_CHECK(H.comm, xc_allreduce_compressed(x, y, COUNT, XC_FLOAT32, XC_AVG,
                                                    XC_COMPRESS_INT8, res, H.comm));
            h_checked();
            if (pass == 0) memcpy(ref + (size_t)t * COUNT, y, COUNT * sizeof *y);
            else if (memcmp(ref + (size_t)t * COUNT, y, COUNT * sizeof *y))
                h_fail(__FILE__, __LINE__, "call %d after restoring the residual differs from "
                       "the uninterrupted run", T1 + t + 1);
        }
        xc_residual_free(res);
    }
    H_CHECK(H.comm, xc_barrier(H.comm));
    if (H.rank == 0) {
        char cmd[200];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd)) h_fail(__FILE__, __LINE__, "could not remove %s", dir);
    }
    free(x);
    free(y);
    free(ref);
}

int main(int argc, char **argv)
{
    h_init(argc, argv);
    test_bounds();
    test_narrow_inputs();
    test_feedback();
    test_residual_checkpoint();
    test_nonfinite();
    test_flt_max();
    test_reduce_scatter();
    test_hook(0);
    test_hook(1);
    test_hook_restore();
    test_hook_faster();
    test_misuse();
    return h_finish();
}
