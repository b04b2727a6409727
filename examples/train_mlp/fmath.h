/*
 * fmath.h -- the few elementary functions the MLP example needs (exp, log,
 * sqrt), computed in double and rounded once, accurate to ~1e-10 relative:
 * the examples are linked with libxcoll alone (no libm), and identical code
 * on every rank keeps the ranks' arithmetic identical.
 */
#ifndef TRAIN_MLP_FMATH_H
#define TRAIN_MLP_FMATH_H

#include <stdint.h>
#include <string.h>

#define FM_LN2 0.69314718055994530942

/* 2^n for |n| < 1023, by building the exponent bits. */
static inline double fm_pow2i(int n)
{
    uint64_t bits = (uint64_t)(n + 1023) << 52;
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

/* e^x: x = n ln2 + r with |r| <= ln2/2, e^r by its Taylor series to r^13
 * (error below 1e-16 relative there). */
static inline double fm_exp(double x)
{
    if (x < -700) return 0;
    if (x > 700) x = 700;
    double t = x / FM_LN2;
    int n = (int)(t < 0 ? t - 0.5 : t + 0.5);
    double r = x - n * FM_LN2, term = 1, sum = 1;
    for (int k = 1; k <= 13; k++) {
        term *= r / k;
        sum += term;
    }
    return sum * fm_pow2i(n);
}

/* ln x for x > 0 (finite, normal): x = m 2^e with m in [sqrt(1/2), sqrt(2)),
 * ln m = 2 atanh(s), s = (m-1)/(m+1), |s| <= 0.172. */
static inline double fm_log(double x)
{
    if (!(x > 0)) return -1e300;
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    int e = (int)((bits >> 52) & 0x7ff) - 1023;
    bits = (bits & ~(0x7ffull << 52)) | (1023ull << 52);
    double m;
    memcpy(&m, &bits, sizeof m);
    if (m > 1.41421356237309504880) {
        m *= 0.5;
        e++;
    }
    double s = (m - 1) / (m + 1), s2 = s * s, term = s, sum = 0;
    for (int k = 1; k <= 21; k += 2) {
        sum += term / k;
        term *= s2;
    }
    return 2 * sum + e * FM_LN2;
}

/* sqrt by Newton's method from a power-of-two guess. */
static inline double fm_sqrt(double x)
{
    if (!(x > 0)) return 0;
    double y = x > 1 ? x : 1;
    for (int i = 0; i < 200; i++) {
        double n = 0.5 * (y + x / y);
        if (n == y) break;
        y = n;
    }
    return y;
}

#endif /* TRAIN_MLP_FMATH_H */
