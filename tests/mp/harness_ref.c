/*
 * harness_ref.c -- serial references and result checks.
 *
 * Integers: the reference is exact, computed on uint64_t (so wrapping is
 * defined) and masked to the element width; min/max compare in the signed
 * or unsigned interpretation of the dtype; avg divides the wrapped sum,
 * read as signed or unsigned, by the rank count truncating toward zero (as
 * xcoll.h documents).
 *
 * Floats: inputs are widened exactly to fp64 and reduced there (sums with
 * Neumaier compensation).  The library may reduce in any order, rounding
 * every partial result to the dtype, so a result is accepted when
 *     |got - ref| <= n * eps * sum_i |x_i| + tiny          (sum)
 *     |got - ref| <= (n + 1) * eps * sum_i |x_i| / n + tiny  (avg: one more
 *                                                         rounding, the /n)
 *     |got - ref| <= n * eps * |ref| + tiny                (prod)
 *     got == ref                                           (min, max)
 * with eps the unit roundoff of the dtype (2^-11 fp16, 2^-8 bf16, 2^-24
 * fp32, 2^-53 fp64), tiny its smallest normal, plus the reference's own
 * error bound n * 2^-53 * (sum|x_i| or |ref|) which matters for fp64 only.
 * With one rank every result is exact, and with two ranks sum and prod
 * must be the correctly rounded a + b and a * b: that pins down rounding
 * (round to nearest even, fp16/bf16 through fp32) where no bound can.
 */
#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DETAIL 3 /* mismatching elements printed per check */

static double unit_roundoff(xc_dtype_t dt)
{
    switch (dt) {
    case XC_FLOAT16: return ldexp(1, -11);
    case XC_BFLOAT16: return ldexp(1, -8);
    case XC_FLOAT32: return ldexp(1, -24);
    default: return ldexp(1, -53);
    }
}

static double smallest_normal(xc_dtype_t dt)
{
    switch (dt) {
    case XC_FLOAT16: return ldexp(1, -14);
    case XC_BFLOAT16:
    case XC_FLOAT32: return ldexp(1, -126);
    default: return ldexp(1, -1022);
    }
}

/* x rounded to nearest even in dt, as a double. */
static double round_to(xc_dtype_t dt, double x)
{
    switch (dt) {
    case XC_FLOAT16: return h_fp16_to_double(h_float_to_fp16((float)x));
    case XC_BFLOAT16: return h_bf16_to_double(h_float_to_bf16((float)x));
    case XC_FLOAT32: return (float)x;
    default: return x;
    }
}

static uint64_t width_mask(xc_dtype_t dt)
{
    size_t bits = 8 * xc_dtype_size(dt);
    return bits >= 64 ? ~0ull : (1ull << bits) - 1;
}

/* Two's complement value of `bits` as a signed element of dt. */
static int64_t sign_extend(uint64_t bits, xc_dtype_t dt)
{
    uint64_t sb = 1ull << (8 * xc_dtype_size(dt) - 1);
    bits &= width_mask(dt);
    return (int64_t)((bits ^ sb) - sb);
}

static int int_less(uint64_t a, uint64_t b, xc_dtype_t dt)
{
    return h_is_signed(dt) ? sign_extend(a, dt) < sign_extend(b, dt) : a < b;
}

static h_expect_t int_reference(xc_dtype_t dt, xc_op_t op, int n,
                                const uint64_t *in)
{
    uint64_t acc = in[0];
    for (int r = 1; r < n; r++) {
        uint64_t x = in[r];
        switch (op) {
        case XC_SUM:
        case XC_AVG: acc += x; break;
        case XC_PROD: acc *= x; break;
        case XC_MIN: acc = int_less(x, acc, dt) ? x : acc; break;
        case XC_MAX: acc = int_less(acc, x, dt) ? x : acc; break;
        case XC_BAND: acc &= x; break;
        case XC_BOR: acc |= x; break;
        case XC_BXOR: acc ^= x; break;
        default: break;
        }
    }
    acc &= width_mask(dt);
    if (op == XC_AVG) {
        if (h_is_signed(dt))
            acc = (uint64_t)(sign_extend(acc, dt) / n); /* truncates to 0 */
        else
            acc /= (uint64_t)n;
        acc &= width_mask(dt);
    }
    return (h_expect_t){acc, 0, 0};
}

static h_expect_t float_reference(xc_dtype_t dt, xc_op_t op, int n,
                                  const uint64_t *in)
{
    double eps = unit_roundoff(dt), tiny = smallest_normal(dt);
    double ref_eps = ldexp(1, -53) * n; /* the reference's own error */
    double sum = 0, comp = 0, abs_sum = 0, prod = 1;
    double lo = INFINITY, hi = -INFINITY;
    for (int r = 0; r < n; r++) {
        double x = h_to_double(dt, in[r]);
        double t = sum + x; /* Neumaier's compensated summation */
        comp += fabs(sum) >= fabs(x) ? (sum - t) + x : (x - t) + sum;
        sum = t;
        abs_sum += fabs(x);
        prod *= x;
        lo = x < lo ? x : lo;
        hi = x > hi ? x : hi;
    }
    sum += comp;
    h_expect_t e = {0, 0, 0};
    /* One or two ranks leave the library no choice of order: the result is
     * the correctly rounded sum or product, bit for bit.  (Computing in fp32
     * then rounding to fp16/bf16, or in fp64 then to fp32, is such a double
     * rounding that is known to be innocuous: 24 >= 2*11+2, 53 >= 2*24+2.)
     * In fp64 a + b and a * b of the narrower types are exact. */
    if (n == 1 || (n == 2 && (op == XC_SUM || op == XC_PROD))) {
        double exact = n == 1 ? h_to_double(dt, in[0])
                       : op == XC_SUM ? h_to_double(dt, in[0]) +
                                            h_to_double(dt, in[1])
                                      : h_to_double(dt, in[0]) *
                                            h_to_double(dt, in[1]);
        e.value = round_to(dt, exact);
        return e;
    }
    switch (op) {
    case XC_SUM:
        e.value = sum;
        e.tol = (n * eps + ref_eps) * abs_sum + tiny;
        break;
    case XC_AVG:
        e.value = sum / n;
        e.tol = ((n + 1) * eps + ref_eps) * abs_sum / n + tiny;
        break;
    case XC_PROD:
        e.value = prod;
        e.tol = (n * eps + ref_eps) * fabs(prod) + tiny;
        break;
    case XC_MIN: e.value = lo; break;
    case XC_MAX: e.value = hi; break;
    default: break;
    }
    return e;
}

h_expect_t h_reference(xc_dtype_t dt, xc_op_t op, int n, const uint64_t *in)
{
    return h_is_float(dt) ? float_reference(dt, op, n, in)
                          : int_reference(dt, op, n, in);
}

int h_matches(xc_dtype_t dt, uint64_t got, const h_expect_t *e)
{
    if (!h_is_float(dt)) return got == e->bits;
    double g = h_to_double(dt, got);
    if (e->tol == 0) return g == e->value;
    return fabs(g - e->value) <= e->tol; /* false for NaN */
}

/* "123 (0x7b)" for integers, "1.25 (0x3d00)" for floats. */
static const char *fmt_val(xc_dtype_t dt, uint64_t bits, char *out,
                           size_t len)
{
    int hexw = (int)(2 * xc_dtype_size(dt));
    if (h_is_float(dt))
        snprintf(out, len, "%.17g (0x%0*llx)", h_to_double(dt, bits), hexw,
                 (unsigned long long)bits);
    else if (h_is_signed(dt))
        snprintf(out, len, "%lld (0x%0*llx)", (long long)sign_extend(bits, dt),
                 hexw, (unsigned long long)bits);
    else
        snprintf(out, len, "%llu (0x%0*llx)", (unsigned long long)bits, hexw,
                 (unsigned long long)bits);
    return out;
}

static const char *fmt_expect(xc_dtype_t dt, const h_expect_t *e, char *out,
                              size_t len)
{
    if (!h_is_float(dt)) return fmt_val(dt, e->bits, out, len);
    if (e->tol == 0)
        snprintf(out, len, "%.17g exactly", e->value);
    else
        snprintf(out, len, "%.17g (tol %.3g)", e->value, e->tol);
    return out;
}

size_t h_check_reduced(const h_case_t *c, const void *buf, size_t count,
                       size_t index0, const char *what)
{
    int n = c->nranks;
    uint64_t *in = malloc(sizeof(uint64_t) * (size_t)n);
    if (!in) abort();
    size_t bad = 0, first = 0;
    char cs[160], g[64], w[80];
    h_checked();
    for (size_t i = 0; i < count; i++) {
        for (int r = 0; r < n; r++) in[r] = h_gen(c, r, index0 + i);
        h_expect_t e = h_reference(c->dtype, c->op, n, in);
        uint64_t got = h_load(buf, i, c->dtype);
        if (h_matches(c->dtype, got, &e)) continue;
        if (bad++ == 0) first = i;
        if (bad > MAX_DETAIL) continue;
        char inputs[512] = "";
        size_t used = 0;
        for (int r = 0; r < n && r < 8 && used < sizeof inputs - 80; r++)
            used += (size_t)snprintf(inputs + used, sizeof inputs - used,
                                     "%s%s", r ? ", " : "",
                                     fmt_val(c->dtype, in[r], g, sizeof g));
        h_fail(__FILE__, __LINE__,
               "%s: %s index=%zu: got %s, expected %s; inputs by rank: %s%s",
               h_case_str(c, cs, sizeof cs), what, i,
               fmt_val(c->dtype, got, g, sizeof g),
               fmt_expect(c->dtype, &e, w, sizeof w), inputs,
               n > 8 ? ", ..." : "");
    }
    if (bad > MAX_DETAIL)
        h_fail(__FILE__, __LINE__, "%s: %s: %zu of %zu elements wrong "
               "(first at index %zu)", h_case_str(c, cs, sizeof cs), what,
               bad, count, first);
    free(in);
    return bad;
}

size_t h_check_copy(const h_case_t *c, const void *buf, size_t count,
                    int src_rank, size_t src_index0, const char *what)
{
    size_t bad = 0, first = 0;
    char cs[160], g[64], w[64];
    h_checked();
    for (size_t i = 0; i < count; i++) {
        uint64_t want = h_gen(c, src_rank, src_index0 + i);
        uint64_t got = h_load(buf, i, c->dtype);
        if (got == want) continue;
        if (bad++ == 0) first = i;
        if (bad > MAX_DETAIL) continue;
        h_fail(__FILE__, __LINE__,
               "%s: %s index=%zu: got %s, expected %s (element %zu of rank "
               "%d)", h_case_str(c, cs, sizeof cs), what, i,
               fmt_val(c->dtype, got, g, sizeof g),
               fmt_val(c->dtype, want, w, sizeof w), src_index0 + i, src_rank);
    }
    if (bad > MAX_DETAIL)
        h_fail(__FILE__, __LINE__, "%s: %s: %zu of %zu elements wrong "
               "(first at index %zu)", h_case_str(c, cs, sizeof cs), what,
               bad, count, first);
    return bad;
}

size_t h_check_untouched(const h_case_t *c, const void *p, size_t bytes,
                         const char *what)
{
    const unsigned char *b = (const unsigned char *)p;
    size_t bad = 0, first = 0;
    h_checked();
    for (size_t i = 0; i < bytes; i++)
        if (b[i] != 0xCD && bad++ == 0) first = i;
    if (bad) {
        char cs[160];
        h_fail(__FILE__, __LINE__, "%s: %s: %zu of %zu bytes that must not "
               "be written were (first at byte %zu: 0x%02x)",
               h_case_str(c, cs, sizeof cs), what, bad, bytes, first,
               b[first]);
    }
    return bad;
}

size_t h_check_guard(const h_case_t *c, const void *p, size_t bytes,
                     const char *what)
{
    char w[128];
    snprintf(w, sizeof w, "guard after %s (%zu bytes)", what, bytes);
    return h_check_untouched(c, (const char *)p + bytes, H_GUARD, w);
}

size_t h_check_identical(const h_case_t *c, xc_comm_t *comm, const void *buf,
                         size_t bytes)
{
    int n = xc_comm_size(comm), me = xc_comm_rank(comm);
    uint64_t mine = h_hash_bytes(buf, bytes);
    uint64_t *all = h_alloc(sizeof(uint64_t) * (size_t)n);
    H_CHECK(comm, xc_allgather(&mine, all, 1, XC_UINT64, comm));
    size_t bad = 0;
    char cs[160];
    h_checked();
    for (int r = 0; r < n; r++) {
        if (all[r] == mine) continue;
        bad++;
        h_fail(__FILE__, __LINE__, "%s: results not bit-identical across "
               "ranks: hash 0x%016llx on rank %d, 0x%016llx on rank %d",
               h_case_str(c, cs, sizeof cs), (unsigned long long)mine, me,
               (unsigned long long)all[r], r);
        break;
    }
    h_free(all);
    return bad;
}
