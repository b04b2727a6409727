/*
 * harness_data.c -- deterministic test inputs and element access.
 *
 * Element `index` of rank `rank` in a case is shape(mix64(base + index))
 * with base = a hash of (case seed, dtype, op, rank): a pure function, so
 * every rank can regenerate every other rank's input.  The shape depends on
 * the dtype and the reduction the data is meant for:
 *
 *  - integers: full-width random bits, so sums and products wrap in every
 *    type (int8 sums of 2 ranks already overflow half the time); products
 *    are odd 3 times in 4 so they do not all collapse to zero; band inputs
 *    have ~7/8 of their bits set and bor inputs ~1/8, so the results are
 *    neither all-zero nor all-one;
 *  - floats: built from (sign, exponent, mantissa) fields directly, so every
 *    value is exactly representable: random sign, random full mantissa, an
 *    exponent in a per-dtype window wide enough to mix magnitudes yet keep
 *    8-rank sums of fp16 far from overflow; never zero, subnormal, inf or
 *    NaN.  Products use |x| in [0.5, 2) so 8-rank products stay in range;
 *  - H_COPY (data movement): raw random bits of the element width.
 *
 * The fp16/bf16 conversions here are the harness's own, independent of the
 * library's, and round to nearest even.
 */
#include "harness.h"

#include <math.h>
#include <string.h>

uint64_t h_mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int h_is_float(xc_dtype_t dt)
{
    return dt == XC_FLOAT16 || dt == XC_BFLOAT16 || dt == XC_FLOAT32 ||
           dt == XC_FLOAT64;
}

int h_is_signed(xc_dtype_t dt)
{
    return dt == XC_INT8 || dt == XC_INT16 || dt == XC_INT32 || dt == XC_INT64;
}

/* Field layout and generation window of a floating-point dtype. */
typedef struct float_fmt {
    int mbits, ebits, bias;
    int elo, ehi; /* exponent window for sum/avg/min/max */
} float_fmt_t;

static float_fmt_t fmt_of(xc_dtype_t dt)
{
    switch (dt) {
    case XC_FLOAT16: return (float_fmt_t){10, 5, 15, -8, 7};
    case XC_BFLOAT16: return (float_fmt_t){7, 8, 127, -20, 20};
    case XC_FLOAT32: return (float_fmt_t){23, 8, 127, -12, 12};
    default: return (float_fmt_t){52, 11, 1023, -30, 30};
    }
}

static uint64_t width_mask(xc_dtype_t dt)
{
    size_t bits = 8 * xc_dtype_size(dt);
    return bits >= 64 ? ~0ull : (1ull << bits) - 1;
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

/* Turn 64 random bits into an element of dt suited to op. */
static uint64_t shape(uint64_t r, xc_dtype_t dt, xc_op_t op)
{
    if (op == H_COPY) return r & width_mask(dt);
    if (!h_is_float(dt)) {
        switch (op) {
        case XC_PROD: r |= (r >> 62) != 0; break;
        case XC_BAND: r |= rotl(r, 21) | rotl(r, 42); break;
        case XC_BOR: r &= rotl(r, 21) & rotl(r, 42); break;
        default: break;
        }
        return r & width_mask(dt);
    }
    float_fmt_t f = fmt_of(dt);
    int lo = f.elo, hi = f.ehi;
    if (op == XC_PROD) { /* |x| in [0.5, 2) */
        lo = -1;
        hi = 0;
    }
    uint64_t sign = r >> 63;
    int e = lo + (int)(((r >> 52) & 0x7ff) % (uint64_t)(hi - lo + 1));
    uint64_t mant = r & ((1ull << f.mbits) - 1);
    return sign << (f.ebits + f.mbits) | (uint64_t)(e + f.bias) << f.mbits |
           mant;
}

static uint64_t stream_base(const h_case_t *c, int rank)
{
    uint64_t k = (uint64_t)c->dtype << 40 ^ (uint64_t)c->op << 32 ^
                 (uint32_t)rank;
    return h_mix64(c->seed ^ h_mix64(k));
}

uint64_t h_gen(const h_case_t *c, int rank, size_t index)
{
    return shape(h_mix64(stream_base(c, rank) + index), c->dtype, c->op);
}

void h_fill(const h_case_t *c, void *buf, size_t count, int rank,
            size_t index0)
{
    uint64_t base = stream_base(c, rank);
    for (size_t i = 0; i < count; i++)
        h_store(buf, i, c->dtype,
                shape(h_mix64(base + index0 + i), c->dtype, c->op));
}

uint64_t h_load(const void *buf, size_t i, xc_dtype_t dt)
{
    const unsigned char *p = (const unsigned char *)buf;
    switch (xc_dtype_size(dt)) {
    case 1: return p[i];
    case 2: { uint16_t v; memcpy(&v, p + 2 * i, 2); return v; }
    case 4: { uint32_t v; memcpy(&v, p + 4 * i, 4); return v; }
    default: { uint64_t v; memcpy(&v, p + 8 * i, 8); return v; }
    }
}

void h_store(void *buf, size_t i, xc_dtype_t dt, uint64_t bits)
{
    unsigned char *p = (unsigned char *)buf;
    switch (xc_dtype_size(dt)) {
    case 1: p[i] = (unsigned char)bits; break;
    case 2: { uint16_t v = (uint16_t)bits; memcpy(p + 2 * i, &v, 2); break; }
    case 4: { uint32_t v = (uint32_t)bits; memcpy(p + 4 * i, &v, 4); break; }
    default: memcpy(p + 8 * i, &bits, 8); break;
    }
}

double h_fp16_to_double(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 0) v = ldexp(m, -24); /* zero or subnormal */
    else if (e == 31) v = m ? NAN : INFINITY;
    else v = ldexp(m + 1024, e - 25);
    return (h >> 15) ? -v : v;
}

double h_bf16_to_double(uint16_t b)
{
    uint32_t x = (uint32_t)b << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

uint16_t h_float_to_fp16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7fffffff;
    if (ax > 0x7f800000) return sign | 0x7e00;  /* NaN stays NaN (quiet)   */
    if (ax >= 0x477ff000) return sign | 0x7c00; /* >= 65520: rounds to inf */
    if (ax >= 0x38800000) {                     /* normal in fp16          */
        uint32_t r = ((ax >> 23) - 127 + 15) << 10 | (ax & 0x7fffff) >> 13;
        uint32_t rem = ax & 0x1fff;
        if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;
        return sign | (uint16_t)r;
    }
    if (ax <= 0x33000000) return sign; /* <= 2^-25: ties to even zero */
    /* Subnormal result: value = m * 2^(E-23); in units of 2^-24 that is
     * m >> shift with shift = -(E + 1), between 14 and 24 here. */
    int E = (int)(ax >> 23) - 127;
    uint32_t m = (ax & 0x7fffff) | 0x800000;
    int shift = -(E + 1);
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1),
             half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) q++;
    return sign | (uint16_t)q;
}

uint16_t h_float_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)((x >> 16) | 0x40);
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

double h_to_double(xc_dtype_t dt, uint64_t bits)
{
    switch (dt) {
    case XC_FLOAT16: return h_fp16_to_double((uint16_t)bits);
    case XC_BFLOAT16: return h_bf16_to_double((uint16_t)bits);
    case XC_FLOAT32: {
        uint32_t v = (uint32_t)bits;
        float f;
        memcpy(&f, &v, 4);
        return f;
    }
    default: {
        double d;
        memcpy(&d, &bits, 8);
        return d;
    }
    }
}

uint64_t h_hash_bytes(const void *p, size_t bytes)
{
    const unsigned char *b = (const unsigned char *)p;
    uint64_t h = 0x243f6a8885a308d3ull ^ bytes;
    size_t i = 0;
    for (; i + 8 <= bytes; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        h = h_mix64(h ^ w);
    }
    uint64_t tail = 0;
    memcpy(&tail, b + i, bytes - i);
    return h_mix64(h ^ tail ^ 0xff);
}
