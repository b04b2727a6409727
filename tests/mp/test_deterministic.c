/*
 * test_deterministic.c -- XCOLL_DETERMINISTIC=1: floating-point reductions
 * are bit-identical to one serial definition, whatever the algorithm, the
 * transport, the message size or how the tensors were fused:
 *
 *     r[i] = ((x_0[i] op x_1[i]) op x_2[i]) ... op x_{N-1}[i]
 *
 * accumulated in the dtype's compute precision (fp32 for fp16/bf16, one
 * rounding at the end), then for XC_AVG divided by N in that precision and
 * rounded.  Inputs span many magnitudes so that any other order gives other
 * bits.  Each case runs all-reduce on the whole buffer, all-reduce on three
 * uneven pieces of it (fused vs not), reduce-scatter and reduce, and every
 * result must equal the serial definition bit for bit.  The ctest variants
 * run it on shared memory, over TCP (XCOLL_SHM=0), across emulated nodes and
 * with the deterministic algorithms forced.
 */
#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Input element `i` of rank `r`: for sum/avg a value of magnitude 2^-12 ..
 * 2^12 with either sign; for prod a value near 1. */
static double value(uint64_t seed, int r, size_t i, xc_op_t op)
{
    uint64_t u = mix(seed ^ mix((uint64_t)r * 0x100000001ull + i));
    double f = (double)(u >> 11) / 9007199254740992.0; /* [0, 1) */
    if (op == XC_PROD) return 1.0 + (f - 0.5) / 64.0;
    int e = (int)((u >> 3) % 25) - 12;
    return ldexp(f - 0.5, e);
}

static size_t esize(xc_dtype_t dt) { return xc_dtype_size(dt); }

static void store(void *buf, size_t i, xc_dtype_t dt, double v)
{
    switch (dt) {
    case XC_FLOAT64: ((double *)buf)[i] = v; break;
    case XC_FLOAT32: ((float *)buf)[i] = (float)v; break;
    case XC_FLOAT16: ((uint16_t *)buf)[i] = h_float_to_fp16((float)v); break;
    default: ((uint16_t *)buf)[i] = h_float_to_bf16((float)v); break;
    }
}

/* The element as it is stored (rounded to the dtype), widened exactly. */
static double stored(xc_dtype_t dt, double v)
{
    uint16_t h;
    switch (dt) {
    case XC_FLOAT64: return v;
    case XC_FLOAT32: return (float)v;
    case XC_FLOAT16: h = h_float_to_fp16((float)v); return h_fp16_to_double(h);
    default: h = h_float_to_bf16((float)v); return h_bf16_to_double(h);
    }
}

/* The serial definition for element i, stored into out[i]. */
static void reference(void *out, size_t i, xc_dtype_t dt, xc_op_t op, uint64_t seed, size_t gi)
{
    int n = H.size;
    if (dt == XC_FLOAT64) {
        double acc = value(seed, 0, gi, op);
        for (int r = 1; r < n; r++) {
            double x = value(seed, r, gi, op);
            acc = op == XC_PROD ? acc * x : acc + x;
        }
        if (op == XC_AVG) acc = acc / (double)n;
        ((double *)out)[i] = acc;
        return;
    }
    /* fp32 arithmetic (C's float, rounded each step on x86-64). */
    volatile float acc = (float)stored(dt, value(seed, 0, gi, op));
    for (int r = 1; r < n; r++) {
        float x = (float)stored(dt, value(seed, r, gi, op));
        acc = op == XC_PROD ? acc * x : acc + x;
    }
    if (dt == XC_FLOAT32) {
        float f = acc;
        if (op == XC_AVG) f = f / (float)n;
        ((float *)out)[i] = f;
        return;
    }
    /* fp16/bf16: the sum rounds once, then the average divides it. */
    float f = acc;
    double r16 = stored(dt, f);
    if (op == XC_AVG) r16 = stored(dt, (float)r16 / (float)n);
    store(out, i, dt, r16);
}

static void compare(const char *what, const void *got, const void *want, size_t count,
                    xc_dtype_t dt, xc_op_t op)
{
    size_t es = esize(dt);
    for (size_t i = 0; i < count; i++) {
        if (memcmp((const char *)got + i * es, (const char *)want + i * es, es) == 0) continue;
        uint64_t g = 0, w = 0;
        memcpy(&g, (const char *)got + i * es, es);
        memcpy(&w, (const char *)want + i * es, es);
        h_fail(__FILE__, __LINE__, "%s %s %s count %zu: element %zu is 0x%llx, serial rank-order "
               "definition 0x%llx", what, xc_dtype_name(dt), xc_op_name(op), count, i,
               (unsigned long long)g, (unsigned long long)w);
        return;
    }
}

static void one_case(xc_dtype_t dt, xc_op_t op, size_t count, uint64_t seed)
{
    int n = H.size, me = H.rank;
    size_t es = esize(dt), total = count * (size_t)n;
    char *in = h_alloc(total * es), *out = h_alloc(total * es), *want = h_alloc(total * es);
    for (size_t i = 0; i < total; i++) {
        store(in, i, dt, value(seed, me, i, op));
        reference(want, i, dt, op, seed, i);
    }
    /* All-reduce, whole. */
    H_CHECK(H.comm, xc_allreduce(in, out, count, dt, op, H.comm));
    compare("allreduce", out, want, count, dt, op);
    /* The same elements in three uneven pieces (unfused). */
    size_t cuts[4] = {0, count / 7, count / 7 + (count * 5) / 9, count};
    for (int p = 0; p < 3; p++) {
        size_t off = cuts[p], c = cuts[p + 1] - cuts[p];
        H_CHECK(H.comm, xc_allreduce(in + off * es, out + off * es, c, dt, op, H.comm));
    }
    compare("allreduce in pieces", out, want, count, dt, op);
    /* Reduce-scatter of n blocks of `count`: this rank gets block me. */
    H_CHECK(H.comm, xc_reduce_scatter(in, out, count, dt, op, H.comm));
    compare("reduce_scatter", out, want + (size_t)me * count * es, count, dt, op);
    /* Reduce to the last rank. */
    H_CHECK(H.comm, xc_reduce(in, out, count, dt, op, n - 1, H.comm));
    if (me == n - 1) compare("reduce", out, want, count, dt, op);
    h_free(in);
    h_free(out);
    h_free(want);
}

int main(int argc, char **argv)
{
    h_init(argc, argv);
    const char *env = getenv("XCOLL_DETERMINISTIC");
    if (!env || strcmp(env, "1")) {
        if (H.rank == 0) printf("SKIP: run with XCOLL_DETERMINISTIC=1\n");
        xc_comm_destroy(H.comm);
        return 77;
    }
    static const xc_dtype_t dts[] = {XC_FLOAT32, XC_FLOAT64, XC_FLOAT16, XC_BFLOAT16};
    static const xc_op_t ops[] = {XC_SUM, XC_AVG, XC_PROD};
    size_t counts[] = {1, 7, 1000, H.full ? 300007 : 70001};
    uint64_t seed = H.seed;
    for (size_t d = 0; d < sizeof dts / sizeof *dts; d++)
        for (size_t o = 0; o < sizeof ops / sizeof *ops; o++)
            for (size_t c = 0; c < sizeof counts / sizeof *counts; c++)
                one_case(dts[d], ops[o], counts[c], seed++);
    return h_finish();
}
