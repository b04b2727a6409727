/*
 * codec.c -- block encoders and decoders of the compressed collectives
 * (codec.h).  The INT8 loops are written for the compiler to vectorise
 * (no calls, no branches in the element loops); fp16/bf16 use the
 * reduction layer's SIMD converters.
 */
#include "codec.h"

#include "../reduce/reduce.h"

#include <math.h>
#include <string.h>

size_t xc__codec_esize(xc_compress_t f)
{
    switch (f) {
    case XC_COMPRESS_FP16:
    case XC_COMPRESS_BF16: return 2;
    case XC_COMPRESS_INT8: return 1;
    default: return 0;
    }
}

/* The loops below vectorise (integer max for the magnitude, a magic-number
 * rounding, integer clamps); each is compiled for AVX-512, AVX2 and the
 * baseline, chosen at load time. */
/* Not under ASan/TSan: the clones' ifunc resolvers run before the
 * sanitizer runtime is set up, and the process dies at load time. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define XC__CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define XC__CLONES
#endif

/* Largest |x| as bits (sign cleared); >= 0x7f800000 if any is inf/NaN. */
XC__CLONES static uint32_t absmax_bits(const float *src, size_t n)
{
    uint32_t m = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &src[i], sizeof b);
        b &= 0x7fffffffu;
        m = b > m ? b : m;
    }
    return m;
}

/* q = round-half-even(x * inv) clamped to [-127, 127]; `div`: x / s. */
XC__CLONES static void int8_quant(const float *src, size_t n, float inv, float s, int div,
                                  int8_t *q)
{
    const float magic = 12582912.0f; /* 1.5 x 2^23: adding it rounds to an integer */
    if (div) {
        for (size_t i = 0; i < n; i++) {
            float r = (src[i] / s + magic) - magic;
            int c = (int)r;
            q[i] = (int8_t)(c > 127 ? 127 : c < -127 ? -127 : c);
        }
        return;
    }
    for (size_t i = 0; i < n; i++) {
        float r = (src[i] * inv + magic) - magic;
        int c = (int)r;
        q[i] = (int8_t)(c > 127 ? 127 : c < -127 ? -127 : c);
    }
}

XC__CLONES static void int8_residual(const float *src, const int8_t *q, float s, size_t n,
                                     float *err)
{
    for (size_t i = 0; i < n; i++) err[i] = src[i] - (float)q[i] * s;
}

static void int8_encode(const float *src, size_t n, int8_t *q, float *scale, float *err)
{
    uint32_t mb = absmax_bits(src, n);
    if (mb >= 0x7f800000u) { /* an infinity or a NaN: the whole block */
        *scale = NAN;
        memset(q, 0, n);
        if (err) memset(err, 0, n * sizeof *err); /* nothing to carry */
        return;
    }
    float m;
    memcpy(&m, &mb, sizeof m);
    float s = m / 127.0f, inv = m > 0 ? 127.0f / m : 0.0f;
    *scale = s;
    /* Tiny blocks (127/m would overflow): divide by the scale instead. */
    int8_quant(src, n, inv, s, m > 0 && m < 1e-30f, q);
    if (err) int8_residual(src, q, s, n, err);
}

XC__CLONES static void int8_decode(const int8_t *q, float s, size_t n, float *dst, int add)
{
    if (add)
        for (size_t i = 0; i < n; i++) dst[i] += (float)q[i] * s;
    else
        for (size_t i = 0; i < n; i++) dst[i] = (float)q[i] * s;
}

void xc__codec_encode(xc_compress_t f, const float *src, size_t n, void *codes, float *scale,
                      float *err)
{
    if (f == XC_COMPRESS_INT8) {
        int8_encode(src, n, codes, scale, err);
        return;
    }
    uint16_t *h = codes;
    if (f == XC_COMPRESS_FP16) xc__fp32_to_fp16_n(h, src, n);
    else xc__fp32_to_bf16_n(h, src, n);
    if (scale) *scale = 1.0f;
    if (err) {
        float back[XC_COMPRESS_BLOCK];
        if (f == XC_COMPRESS_FP16) xc__fp16_to_fp32_n(back, h, n);
        else xc__bf16_to_fp32_n(back, h, n);
        /* An infinity from overflow carries no usable error: drop it. */
        for (size_t i = 0; i < n; i++) {
            float e = src[i] - back[i];
            err[i] = isfinite(e) ? e : 0.0f;
        }
    }
}

void xc__codec_decode(xc_compress_t f, const void *codes, float scale, size_t n, float *dst,
                      int add)
{
    if (f == XC_COMPRESS_INT8) {
        int8_decode(codes, scale, n, dst, add);
        return;
    }
    float tmp[XC_COMPRESS_BLOCK];
    float *out = add ? tmp : dst;
    if (f == XC_COMPRESS_FP16) xc__fp16_to_fp32_n(out, codes, n);
    else xc__bf16_to_fp32_n(out, codes, n);
    if (add)
        for (size_t i = 0; i < n; i++) dst[i] += tmp[i];
}
