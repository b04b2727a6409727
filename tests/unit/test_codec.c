/*
 * test_codec.c -- the block codecs of the compressed collectives
 * (src/compress/codec.c) against the error bounds of codec.h /
 * docs/compression.md: random blocks of many scales (1e-30 .. 1e30),
 * zeros, subnormals, one huge outlier per block, short blocks; the
 * residual equals input minus decoded; non-finite values as documented
 * (an INT8 or INT4 block with a NaN or infinity decodes to NaN everywhere,
 * fp16 and bf16 keep them element by element); decode-add adds; INT4's
 * codes are two per byte, odd lengths included.
 */
#include "../../src/compress/codec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "expect.h"

static uint64_t g_rng = 0x243f6a8885a308d3ull;
static double urand(void)
{
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (double)(g_rng >> 11) / 9007199254740992.0;
}

/* The documented per-element bound for value x in a block of max |m|. */
static double bound(xc_compress_t f, double x, double m)
{
    double a = fabs(x);
    switch (f) {
    case XC_COMPRESS_INT8: return m / 254.0 * (1 + 1e-6) + 127 * ldexp(1, -150) + 1e-45;
    case XC_COMPRESS_INT4: return m / 14.0 * (1 + 1e-6) + 7 * ldexp(1, -150) + 1e-45;
    case XC_COMPRESS_FP16:
        return a >= 6.103515625e-05 ? a * ldexp(1, -11) : ldexp(1, -25);
    default: return a * ldexp(1, -8) + ldexp(1, -134); /* bf16: fp32's exponent range */
    }
}

static void check_block(xc_compress_t f, const float *x, size_t n, const char *what)
{
    unsigned char codes[XC_COMPRESS_BLOCK * 2];
    float scale = 0, err[XC_COMPRESS_BLOCK], dec[XC_COMPRESS_BLOCK], m = 0;
    for (size_t i = 0; i < n; i++) m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
    xc__codec_encode(f, x, n, codes, &scale, err);
    xc__codec_decode(f, codes, scale, n, dec, 0);
    for (size_t i = 0; i < n; i++) {
        if (f == XC_COMPRESS_FP16 && fabsf(x[i]) > 65504) continue; /* overflow: documented */
        double e = fabs((double)dec[i] - (double)x[i]);
        if (!(e <= bound(f, x[i], m))) {
            FAIL("%s %s n=%zu [%zu]: x=%.9g decoded %.9g error %.3g > bound %.3g", what,
                 xc_compress_name(f), n, i, x[i], dec[i], e, bound(f, x[i], m));
            return;
        }
        if (err[i] != x[i] - dec[i]) {
            FAIL("%s %s [%zu]: residual %.9g != x - decoded %.9g", what, xc_compress_name(f), i,
                 err[i], x[i] - dec[i]);
            return;
        }
    }
    /* decode-add adds exactly the decoded values to what is there */
    float acc[XC_COMPRESS_BLOCK];
    for (size_t i = 0; i < n; i++) acc[i] = 1.0f;
    xc__codec_decode(f, codes, scale, n, acc, 1);
    for (size_t i = 0; i < n; i++)
        if (acc[i] != 1.0f + dec[i]) {
            FAIL("%s %s: decode-add [%zu] %.9g != 1 + %.9g", what, xc_compress_name(f), i, acc[i],
                 dec[i]);
            return;
        }
}

static void test_bounds(void)
{
    static const size_t lens[] = {1, 7, 100, 255, 256};
    float x[XC_COMPRESS_BLOCK];
    for (int f = XC_COMPRESS_FP16; f < XC_COMPRESS_COUNT; f++)
        for (int sc = -30; sc <= 30; sc += 6)
            for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
                size_t n = lens[li];
                double s = pow(10.0, sc);
                for (size_t i = 0; i < n; i++) x[i] = (float)((urand() * 2 - 1) * s);
                check_block((xc_compress_t)f, x, n, "random");
                x[n / 2] = (float)(s * 1e4); /* one huge outlier */
                check_block((xc_compress_t)f, x, n, "outlier");
            }
    for (int f = XC_COMPRESS_FP16; f < XC_COMPRESS_COUNT; f++) {
        memset(x, 0, sizeof x);
        check_block((xc_compress_t)f, x, XC_COMPRESS_BLOCK, "zeros");
        for (size_t i = 0; i < XC_COMPRESS_BLOCK; i++) x[i] = (float)(1e-40 * (urand() - 0.5));
        check_block((xc_compress_t)f, x, XC_COMPRESS_BLOCK, "subnormals");
        for (size_t i = 0; i < XC_COMPRESS_BLOCK; i++) x[i] = i % 2 ? 3.0f : -3.0f;
        check_block((xc_compress_t)f, x, XC_COMPRESS_BLOCK, "two values");
    }
}

static void test_nonfinite(void)
{
    float x[16], dec[16], err[16], scale;
    unsigned char codes[32];
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < 16; i++) x[i] = (float)i;
        x[5] = k == 0 ? NAN : k == 1 ? INFINITY : -INFINITY;
        for (int f = XC_COMPRESS_INT8; f <= XC_COMPRESS_INT4; f++) {
            const char *nm = xc_compress_name((xc_compress_t)f);
            xc__codec_encode((xc_compress_t)f, x, 16, codes, &scale, err);
            xc__codec_decode((xc_compress_t)f, codes, scale, 16, dec, 0);
            for (int i = 0; i < 16; i++) {
                if (!isnan(dec[i]))
                    FAIL("%s block with %g: [%d] decodes to %g, not NaN", nm, x[5], i, dec[i]);
                if (err[i] != 0) FAIL("%s block with %g: residual [%d] %g, not 0", nm, x[5], i, err[i]);
            }
        }
        for (int f = XC_COMPRESS_FP16; f <= XC_COMPRESS_BF16; f++) {
            xc__codec_encode((xc_compress_t)f, x, 16, codes, &scale, err);
            xc__codec_decode((xc_compress_t)f, codes, scale, 16, dec, 0);
            if (k == 0 ? !isnan(dec[5]) : dec[5] != x[5])
                FAIL("%s keeps %g as %g", xc_compress_name((xc_compress_t)f), x[5], dec[5]);
            if (dec[4] != 4.0f) FAIL("%s: a finite neighbour became %g", xc_compress_name((xc_compress_t)f), dec[4]);
            if (!isfinite(err[5]) && err[5] != 0) FAIL("non-finite residual");
        }
    }
    /* fp16 overflow: infinity, and no infinite residual */
    x[0] = 1e6f;
    xc__codec_encode(XC_COMPRESS_FP16, x, 1, codes, &scale, err);
    xc__codec_decode(XC_COMPRESS_FP16, codes, scale, 1, dec, 0);
    if (!isinf(dec[0]) || err[0] != 0) FAIL("fp16 overflow: %g, residual %g", dec[0], err[0]);
}

static void test_names(void)
{
    xc_compress_t f;
    for (int k = 0; k < XC_COMPRESS_COUNT; k++) {
        if (xc_compress_parse(xc_compress_name((xc_compress_t)k), &f) != XC_OK || (int)f != k)
            FAIL("name round trip of %d", k);
    }
    if (xc_compress_parse("int3", &f) != XC_ERR_INVALID) FAIL("int3 accepted");
    if (!strstr(xc_last_error(), "int3")) FAIL("message does not name the value: %s", xc_last_error());
    if (xc_compress_name(XC_COMPRESS_COUNT)) FAIL("name of an unknown format");
    if (xc__codec_block_bytes(XC_COMPRESS_INT8) != XC_COMPRESS_BLOCK ||
        xc__codec_block_bytes(XC_COMPRESS_BF16) != 2 * XC_COMPRESS_BLOCK ||
        xc__codec_block_bytes(XC_COMPRESS_INT4) != XC_COMPRESS_BLOCK / 2)
        FAIL("block sizes");
    /* INT4 packing: value j low, value j + n/2 high, the odd last one
     * alone; signs kept.  n = 5: bytes (x0, x2), (x1, x3), (x4). */
    float x[5] = {7, -7, 3, -1, -7}, dec[5], scale, err[5];
    unsigned char c[3] = {0xaa, 0xaa, 0xaa};
    xc__codec_encode(XC_COMPRESS_INT4, x, 5, c, &scale, err);
    if (scale != 1.0f || c[0] != 0x37 || c[1] != 0xf9 || c[2] != 0x09)
        FAIL("int4 codes %02x %02x %02x (scale %g), expected 37 f9 09 (scale 1)", c[0], c[1], c[2],
             scale);
    xc__codec_decode(XC_COMPRESS_INT4, c, scale, 5, dec, 0);
    for (int i = 0; i < 5; i++)
        if (dec[i] != x[i]) FAIL("int4 round trip [%d]: %g, expected %g", i, dec[i], x[i]);
}

int main(void)
{
    test_bounds();
    test_nonfinite();
    test_names();
    if (failures) {
        fprintf(stderr, "test_codec: %d failures\n", failures);
        return 1;
    }
    printf("test_codec: ok\n");
    return 0;
}
