/*
 * compress.c -- the compressed all-reduce against the fp32 one, side by
 * side in one run, and the codecs' speed against memcpy.
 *
 *   xcoll-run -n N build/bench_compress [iters]
 *   bench/netbed.sh -H 2 -k 1 --rate 1gbit -- build/bench_compress
 *
 * Table 1 (rank 0): per size (64 KiB..64 MiB of fp32, XC_AVG), the median
 * time of xc_allreduce and of xc_allreduce_compressed with fp16, bf16,
 * int8 and int4 (with a residual, as training uses it), and each one's speed-up
 * over fp32.  Rounds alternate the four, so drift hits all alike.
 * Table 1b: the cost model's prediction of each (xc_compress_predict), its
 * error against the measurement, and whether the model ranks int8 against
 * plain as the measurement does (what the hook's "faster" policy uses).
 * Table 2 (rank 0, local): encode (without and with the residual) and
 * decode throughput of each format over 16 MiB of fp32 (GB/s of fp32
 * values) and the ratio to memcpy's GB/s.
 */
#include "../src/compress/codec.h"

#include <xcoll.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp);
    return v[n / 2];
}

static void codecs(void)
{
    const size_t n = (size_t)4 << 20; /* 16 MiB of fp32 */
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), *err = malloc(n * sizeof *err);
    unsigned char *codes = malloc(n * 2);
    float *scales = malloc((n / XC_COMPRESS_BLOCK + 1) * sizeof *scales);
    for (size_t i = 0; i < n; i++) x[i] = (float)sin((double)i) * 3;
    double t[9];
    for (int r = 0; r < 9; r++) {
        double t0 = now_s();
        memcpy(y, x, n * sizeof *x);
        t[r] = now_s() - t0;
    }
    double mc = n * sizeof(float) / median(t, 9) / 1e9;
    printf("\n# codecs, 16 MiB of fp32 (GB/s of fp32 values; memcpy %.2f GB/s)\n", mc);
    printf("%-6s %10s %7s %10s %7s %10s %7s\n", "format", "encode", "ratio", "enc+resid", "ratio",
           "decode", "ratio");
    for (int f = XC_COMPRESS_FP16; f < XC_COMPRESS_COUNT; f++) {
        size_t bb = xc__codec_block_bytes((xc_compress_t)f);
        double gb[3];
        for (int k = 0; k < 3; k++) {
            for (int r = 0; r < 9; r++) {
                double t0 = now_s();
                for (size_t b = 0; b < n; b += XC_COMPRESS_BLOCK) {
                    float *sc = xc__codec_scaled((xc_compress_t)f) ? &scales[b / XC_COMPRESS_BLOCK]
                                                                   : NULL;
                    unsigned char *cb = codes + b / XC_COMPRESS_BLOCK * bb;
                    if (k < 2)
                        xc__codec_encode((xc_compress_t)f, x + b, XC_COMPRESS_BLOCK, cb, sc,
                                         k ? err + b : NULL);
                    else
                        xc__codec_decode((xc_compress_t)f, cb, sc ? *sc : 1.0f,
                                         XC_COMPRESS_BLOCK, y + b, 0);
                }
                t[r] = now_s() - t0;
            }
            gb[k] = n * sizeof(float) / median(t, 9) / 1e9;
        }
        printf("%-6s %10.2f %7.2f %10.2f %7.2f %10.2f %7.2f\n", xc_compress_name((xc_compress_t)f),
               gb[0], gb[0] / mc, gb[1], gb[1] / mc, gb[2], gb[2] / mc);
    }
    free(x);
    free(y);
    free(err);
    free(codes);
    free(scales);
}

int main(int argc, char **argv)
{
    int iters = argc > 1 ? atoi(argv[1]) : 5;
    xc_comm_t *c;
    xc_result_t rc = xc_comm_init_env(&c, NULL);
    if (rc != XC_OK) {
        fprintf(stderr, "init: %s: %s\n", xc_err_name(rc), xc_last_error());
        return 1;
    }
    int me = xc_comm_rank(c), n = xc_comm_size(c);
    if (me == 0)
        printf("# compressed all-reduce, fp32 avg, %d ranks on %d nodes, median of %d\n"
               "%10s %10s %10s %10s %10s %10s %7s %7s %7s %7s\n", n, xc_comm_node_count(c), iters,
               "bytes", "fp32 ms", "fp16 ms", "bf16 ms", "int8 ms", "int4 ms", "fp16 x", "bf16 x",
               "int8 x", "int4 x");
    enum { MAXROWS = 8 };
    double meas[MAXROWS][XC_COMPRESS_COUNT], pred[MAXROWS][XC_COMPRESS_COUNT];
    size_t rowbytes[MAXROWS];
    int rows = 0;
    for (size_t bytes = (size_t)64 << 10; bytes <= (size_t)64 << 20 && rows < MAXROWS; bytes *= 4) {
        size_t count = bytes / sizeof(float);
        float *x = malloc(bytes), *y = malloc(bytes);
        for (size_t i = 0; i < count; i++) x[i] = (float)sin((double)(i + (size_t)me));
        xc_residual_t *res[XC_COMPRESS_COUNT] = {0};
        double *t[XC_COMPRESS_COUNT];
        for (int f = 0; f < XC_COMPRESS_COUNT; f++) {
            t[f] = calloc((size_t)iters, sizeof(double));
            if (f) xc_residual_create(count, &res[f]);
            /* warm-up */
            rc = xc_allreduce_compressed(x, y, count, XC_FLOAT32, XC_AVG, (xc_compress_t)f, res[f], c);
            if (rc != XC_OK) goto fail;
        }
        for (int i = 0; i < iters; i++)
            for (int f = 0; f < XC_COMPRESS_COUNT; f++) {
                xc_barrier(c);
                double t0 = now_s();
                rc = xc_allreduce_compressed(x, y, count, XC_FLOAT32, XC_AVG, (xc_compress_t)f, res[f], c);
                if (rc != XC_OK) goto fail;
                t[f][i] = now_s() - t0;
            }
        double *m = meas[rows];
        rowbytes[rows] = bytes;
        for (int f = 0; f < XC_COMPRESS_COUNT; f++) {
            m[f] = median(t[f], iters) * 1e3;
            if (xc_compress_predict(c, count, XC_FLOAT32, XC_AVG, (xc_compress_t)f, &pred[rows][f]) != XC_OK)
                pred[rows][f] = -1;
            pred[rows][f] *= 1e3;
            free(t[f]);
            xc_residual_free(res[f]);
        }
        if (me == 0)
            printf("%10zu %10.2f %10.2f %10.2f %10.2f %10.2f %7.2f %7.2f %7.2f %7.2f\n", bytes,
                   m[0], m[1], m[2], m[3], m[4], m[0] / m[1], m[0] / m[2], m[0] / m[3],
                   m[0] / m[4]);
        free(x);
        free(y);
        rows++;
    }
    if (me == 0) {
        printf("\n# model: predicted ms (error vs measured); int8 vs plain as measured?\n"
               "%10s %16s %16s %16s %16s %16s %6s\n", "bytes", "fp32", "fp16", "bf16", "int8",
               "int4", "rank");
        int agree = 0;
        for (int r = 0; r < rows; r++) {
            printf("%10zu", rowbytes[r]);
            for (int f = 0; f < XC_COMPRESS_COUNT; f++)
                printf(" %8.2f (%+4.0f%%)", pred[r][f],
                       100 * (pred[r][f] - meas[r][f]) / meas[r][f]);
            int ok = (pred[r][3] < pred[r][0]) == (meas[r][3] < meas[r][0]);
            agree += ok;
            printf(" %6s\n", ok ? "yes" : "NO");
        }
        printf("# int8-vs-plain ranked as measured at %d of %d sizes\n", agree, rows);
        codecs();
    }
    xc_comm_destroy(c);
    return 0;
fail:
    fprintf(stderr, "rank %d: %s: %s\n", me, xc_err_name(rc), xc_comm_last_error(c));
    xc_comm_destroy(c);
    return 1;
}
