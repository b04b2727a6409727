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

size_t xc__codec_block_bytes(xc_compress_t f)
{
    switch (f) {
    case XC_COMPRESS_FP16:
    case XC_COMPRESS_BF16: return 2 * XC_COMPRESS_BLOCK;
    case XC_COMPRESS_INT8: return XC_COMPRESS_BLOCK;
    case XC_COMPRESS_INT4: return XC_COMPRESS_BLOCK / 2;
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

/* q = round-half-even(x * inv) clamped to [-lim, lim] (clamped as a float,
 * so the conversion is always defined); `div`: x / s. */
XC__CLONES static void int8_quant(const float *src, size_t n, float inv, float s, int div,
                                  float lim, int8_t *q)
{
    const float magic = 12582912.0f; /* 1.5 x 2^23: adding it rounds to an integer */
    if (div) {
        for (size_t i = 0; i < n; i++) {
            float v = src[i] / s;
            v = v > lim ? lim : v < -lim ? -lim : v;
            q[i] = (int8_t)(int)((v + magic) - magic);
        }
        return;
    }
    for (size_t i = 0; i < n; i++) {
        float v = src[i] * inv;
        v = v > lim ? lim : v < -lim ? -lim : v;
        q[i] = (int8_t)(int)((v + magic) - magic);
    }
}

XC__CLONES static void int8_residual(const float *src, const int8_t *q, float s, size_t n,
                                     float *err)
{
    for (size_t i = 0; i < n; i++) err[i] = src[i] - (float)q[i] * s;
}

/* Symmetric block quantization to codes in [-qmax, qmax] (127: INT8, 7:
 * INT4) as int8_t, one per value. */
static void quant_encode(const float *src, size_t n, float qmax, int8_t *q, float *scale,
                         float *err)
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
    float s = m / qmax, inv = m > 0 ? qmax / m : 0.0f;
    /* m near FLT_MAX: m / qmax can round up so that qmax x s, the largest
     * code's value, overflows to infinity (and the block decodes to NaN):
     * one step down keeps it finite (the codes clamp at qmax). */
    if (isinf(qmax * s)) s = nextafterf(s, 0.0f);
    *scale = s;
    /* Tiny blocks (qmax/m would overflow): divide by the scale instead --
     * unless the scale itself rounds to 0 (m < qmax x 2^-150): codes 0, an
     * error below the bound's subnormal term. */
    if (m > 0 && s == 0) {
        memset(q, 0, n);
        if (err) memcpy(err, src, n * sizeof *err);
        return;
    }
    int8_quant(src, n, inv, s, m > 0 && m < 1e-30f, qmax, q);
    if (err) int8_residual(src, q, s, n, err);
}

/* INT4: two codes per byte -- value j in the low nibble of byte j, value
 * j + h in its high nibble (h = n / 2), an odd last value alone in byte h:
 * contiguous on both sides, so both loops vectorise. */
XC__CLONES static void int4_pack(const int8_t *q, size_t n, uint8_t *out)
{
    size_t h = n / 2;
    for (size_t j = 0; j < h; j++) out[j] = (uint8_t)((q[j] & 0x0f) | ((uint8_t)q[j + h] << 4));
    if (n & 1) out[h] = (uint8_t)(q[n - 1] & 0x0f);
}

XC__CLONES static void int4_unpack(const uint8_t *in, size_t n, int8_t *q)
{
    size_t h = n / 2;
    for (size_t j = 0; j < h; j++) {
        q[j] = (int8_t)((int8_t)(in[j] << 4) >> 4); /* sign-extend the low nibble */
        q[j + h] = (int8_t)((int8_t)in[j] >> 4);
    }
    if (n & 1) q[n - 1] = (int8_t)((int8_t)(in[h] << 4) >> 4);
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
        quant_encode(src, n, 127.0f, codes, scale, err);
        return;
    }
    if (f == XC_COMPRESS_INT4) {
        int8_t q[XC_COMPRESS_BLOCK];
        quant_encode(src, n, 7.0f, q, scale, err);
        int4_pack(q, n, codes);
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
    if (f == XC_COMPRESS_INT4) {
        int8_t q[XC_COMPRESS_BLOCK];
        int4_unpack(codes, n, q);
        int8_decode(q, scale, n, dst, add);
        return;
    }
    float tmp[XC_COMPRESS_BLOCK];
    float *out = add ? tmp : dst;
    if (f == XC_COMPRESS_FP16) xc__fp16_to_fp32_n(out, codes, n);
    else xc__bf16_to_fp32_n(out, codes, n);
    if (add)
        for (size_t i = 0; i < n; i++) dst[i] += tmp[i];
}
