/*
 * test_reduce.c -- the reduction kernels (src/reduce) against simple
 * references: every dtype x op at odd counts, k-input reduce_n, integer
 * wrap-around, float NaN/zero rules of min/max, canonical NaNs, exact
 * aliasing, AVG finalisation, the (dtype, op) check, and the fp16/bf16
 * conversions (every 16-bit pattern, ties, subnormals, overflow).  Every
 * kernel check runs at every SIMD level the CPU has (scalar, AVX2,
 * AVX-512, AVX-512 with FP16/BF16), and each SIMD level is compared with the scalar one bit for bit
 * on random data (NaN payloads, infinities, subnormals, -0) at all counts
 * 0..200 and some large odd ones, misaligned pointers, aliasing, and
 * k = 1..16 inputs.  A level the CPU lacks is reported as skipped.
 * Standalone: exit 0 on success, 1 on any failure, each failure printed
 * with both values.
 */
#include "reduce/reduce.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_failures;
/* The SIMD level the checks are running at (named in every failure). */
static const char *g_level = "default";

#define FAIL(...)                                                              \
    do {                                                                       \
        if (++g_failures <= 50) {                                              \
            fprintf(stderr, "FAIL %s:%d [%s]: ", __FILE__, __LINE__, g_level); \
            fprintf(stderr, __VA_ARGS__);                                      \
            fputc('\n', stderr);                                               \
        }                                                                      \
    } while (0)

#define CHECK_U64(got, exp, ...)                                               \
    do {                                                                       \
        unsigned long long g_ = (unsigned long long)(got);                     \
        unsigned long long e_ = (unsigned long long)(exp);                     \
        if (g_ != e_) {                                                        \
            FAIL("%s == 0x%llx, expected 0x%llx", #got, g_, e_);               \
            fprintf(stderr, "    context: ");                                  \
            fprintf(stderr, __VA_ARGS__);                                      \
            fputc('\n', stderr);                                               \
        }                                                                      \
    } while (0)

#define CHECK_I64(got, exp)                                                    \
    do {                                                                       \
        long long g_ = (long long)(got), e_ = (long long)(exp);                \
        if (g_ != e_) FAIL("%s == %lld, expected %lld", #got, g_, e_);        \
    } while (0)

#define CHECK_STR(got, exp)                                                    \
    do {                                                                       \
        const char *g_ = (got), *e_ = (exp);                                   \
        if (g_ == NULL || strcmp(g_, e_) != 0)                                 \
            FAIL("%s == \"%s\", expected \"%s\"", #got, g_ ? g_ : "(null)", e_); \
    } while (0)

#define CHECK_CONTAINS(hay, needle)                                            \
    do {                                                                       \
        const char *h_ = (hay), *n_ = (needle);                                \
        if (strstr(h_, n_) == NULL)                                            \
            FAIL("\"%s\" does not contain \"%s\"", h_, n_);                    \
    } while (0)

/* ------------------------------------------------------------------ */
/* Helpers                                                             */
/* ------------------------------------------------------------------ */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void) /* splitmix64 */
{
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bitsf(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint64_t dbits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

static double bitsd(uint64_t u)
{
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

/* Test buffers are malloc'd: they have no declared type, so the kernels may
 * access them as any element type (C11 6.5p6-7). */
static void *xmalloc(size_t n)
{
    void *p = malloc(n);
    if (!p) {
        fprintf(stderr, "test_reduce: out of memory\n");
        exit(1);
    }
    return p;
}

static int is_float_dtype(xc_dtype_t t) { return t >= XC_FLOAT16; }
static int is_signed_int(xc_dtype_t t)
{
    return t == XC_INT8 || t == XC_INT16 || t == XC_INT32 || t == XC_INT64;
}
static int is_bitwise(xc_op_t op)
{
    return op == XC_BAND || op == XC_BOR || op == XC_BXOR;
}

/* Raw bits of element i, zero-extended. */
static uint64_t load_raw(xc_dtype_t t, const void *p, size_t i)
{
    switch (xc_dtype_size(t)) {
    case 1: return ((const uint8_t *)p)[i];
    case 2: return ((const uint16_t *)p)[i];
    case 4: return ((const uint32_t *)p)[i];
    default: return ((const uint64_t *)p)[i];
    }
}

static void store_raw(xc_dtype_t t, void *p, size_t i, uint64_t v)
{
    switch (xc_dtype_size(t)) {
    case 1: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case 2: ((uint16_t *)p)[i] = (uint16_t)v; break;
    case 4: ((uint32_t *)p)[i] = (uint32_t)v; break;
    default: ((uint64_t *)p)[i] = v; break;
    }
}

static uint64_t width_mask(xc_dtype_t t)
{
    size_t w = xc_dtype_size(t) * 8;
    return w == 64 ? UINT64_MAX : ((uint64_t)1 << w) - 1;
}

/* Two's complement value of the low bits of `raw` for a signed dtype. */
static int64_t sign_extend(xc_dtype_t t, uint64_t raw)
{
    size_t w = xc_dtype_size(t) * 8;
    if (w == 64) {
        int64_t v;
        memcpy(&v, &raw, sizeof v);
        return v;
    }
    uint64_t sign = (uint64_t)1 << (w - 1);
    raw &= width_mask(t);
    return (raw & sign) ? (int64_t)raw - (int64_t)((uint64_t)1 << w)
                        : (int64_t)raw;
}

/* An element of a float dtype as double (exact for all four). */
static double load_float(xc_dtype_t t, uint64_t raw)
{
    switch (t) {
    case XC_FLOAT16: return xc__fp16_to_fp32((uint16_t)raw);
    case XC_BFLOAT16: return xc__bf16_to_fp32((uint16_t)raw);
    case XC_FLOAT32: return bitsf((uint32_t)raw);
    default: return bitsd(raw);
    }
}

/* ------------------------------------------------------------------ */
/* Reference reduction of one element                                  */
/* ------------------------------------------------------------------ */

static uint64_t ref_int(xc_dtype_t t, xc_op_t op, uint64_t x, uint64_t y)
{
    uint64_t m = width_mask(t);
    int sgn = is_signed_int(t);
    int64_t sx = sign_extend(t, x), sy = sign_extend(t, y);
    switch (op) {
    case XC_SUM:
    case XC_AVG: return (x + y) & m;
    case XC_PROD: return (x * y) & m;
    case XC_MIN: return (sgn ? sx < sy : x < y) ? x : y;
    case XC_MAX: return (sgn ? sx > sy : x > y) ? x : y;
    case XC_BAND: return x & y;
    case XC_BOR: return x | y;
    case XC_BXOR: return x ^ y;
    default: return 0;
    }
}

/* min/max on non-NaN values with -0 < +0. */
static double ref_minmax(xc_op_t op, double x, double y)
{
    if (x == y) {
        int neg = op == XC_MIN ? (signbit(x) || signbit(y))
                               : (signbit(x) && signbit(y));
        return neg ? -fabs(x) : fabs(x);
    }
    return op == XC_MIN ? (x < y ? x : y) : (x > y ? x : y);
}

/* The canonical quiet NaN every float reduction of k >= 2 inputs gives. */
static uint64_t canonical_nan(xc_dtype_t t)
{
    switch (t) {
    case XC_FLOAT16: return 0x7e00;
    case XC_BFLOAT16: return 0x7fc0;
    case XC_FLOAT32: return 0x7fc00000;
    default: return 0x7ff8000000000000ull;
    }
}

/* Expected bits of x[0] op x[1] op ... op x[k-1], folded left to right:
 * integers wrap; floats in their compute precision (fp32 for fp16/bf16,
 * rounded back once); any NaN result is the canonical one; k == 1 is a
 * copy of the bits. */
static uint64_t ref_fold(xc_dtype_t t, xc_op_t op, const uint64_t *x, int k)
{
    if (k == 1) return x[0];
    if (!is_float_dtype(t)) {
        uint64_t r = x[0];
        for (int j = 1; j < k; j++) r = ref_int(t, op, r, x[j]);
        return r;
    }
    if (op == XC_MIN || op == XC_MAX) {
        for (int j = 0; j < k; j++)
            if (isnan(load_float(t, x[j]))) return canonical_nan(t);
        double r = load_float(t, x[0]);
        for (int j = 1; j < k; j++) r = ref_minmax(op, r, load_float(t, x[j]));
        switch (t) { /* r is one of the inputs: exact in t */
        case XC_FLOAT16: return xc__fp32_to_fp16((float)r);
        case XC_BFLOAT16: return xc__fp32_to_bf16((float)r);
        case XC_FLOAT32: return fbits((float)r);
        default: return dbits(r);
        }
    }
    int mul = op == XC_PROD;
    if (t == XC_FLOAT64) {
        double r = bitsd(x[0]);
        for (int j = 1; j < k; j++) r = mul ? r * bitsd(x[j]) : r + bitsd(x[j]);
        return isnan(r) ? canonical_nan(t) : dbits(r);
    }
    /* fp32, and fp16/bf16 widened to fp32 and rounded once at the end. */
    float r = (float)load_float(t, x[0]);
    for (int j = 1; j < k; j++) {
        float y = (float)load_float(t, x[j]);
        r = mul ? r * y : r + y;
    }
    if (isnan(r)) return canonical_nan(t);
    if (t == XC_FLOAT16) return xc__fp32_to_fp16(r);
    if (t == XC_BFLOAT16) return xc__fp32_to_bf16(r);
    return fbits(r);
}

/* ------------------------------------------------------------------ */
/* Inputs                                                              */
/* ------------------------------------------------------------------ */

static uint64_t special_int(xc_dtype_t t, unsigned k)
{
    uint64_t m = width_mask(t), half = m >> 1;
    const uint64_t v[] = {0, 1, m /* -1 */, half /* INT_MAX */,
                          half + 1 /* INT_MIN */, 2, half - 1, m - 1};
    return v[k % (sizeof v / sizeof v[0])];
}

static uint64_t special_float(xc_dtype_t t, unsigned k)
{
    static const double v[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 1.0,
                               -1.0, 65504.0, 3.0e38, 1e-40, -2.5, 0.1};
    double d = v[k % (sizeof v / sizeof v[0])];
    switch (t) {
    case XC_FLOAT16: return xc__fp32_to_fp16((float)d);
    case XC_BFLOAT16: return xc__fp32_to_bf16((float)d);
    case XC_FLOAT32: return fbits((float)d);
    default: return dbits(d);
    }
}

/* Element i of an input: specials often, otherwise random bits (floats:
 * half random patterns, half ordinary values in +-1000). */
static uint64_t gen_elem(xc_dtype_t t)
{
    uint64_t r = rnd();
    if (r % 5 == 0)
        return is_float_dtype(t) ? special_float(t, (unsigned)(r >> 8))
                                 : special_int(t, (unsigned)(r >> 8));
    if (!is_float_dtype(t) || (r & 2)) return rnd() & width_mask(t);
    double d = ((double)(rnd() >> 11) / 9007199254740992.0 - 0.5) * 2000.0;
    switch (t) {
    case XC_FLOAT16: return xc__fp32_to_fp16((float)d);
    case XC_BFLOAT16: return xc__fp32_to_bf16((float)d);
    case XC_FLOAT32: return fbits((float)d);
    default: return dbits(d);
    }
}

static void fill(xc_dtype_t t, void *p, size_t n)
{
    for (size_t i = 0; i < n; i++) store_raw(t, p, i, gen_elem(t));
}

/* Compare element i of `got` with the reference of a[i] op b[i]. */
static void check_elem(xc_dtype_t t, xc_op_t op, const void *got,
                       const void *a, const void *b, size_t i, size_t n,
                       const char *how)
{
    uint64_t x = load_raw(t, a, i), y = load_raw(t, b, i);
    uint64_t g = load_raw(t, got, i);
    if (!is_float_dtype(t)) {
        uint64_t xy[2] = {x, y};
        uint64_t e = ref_fold(t, op, xy, 2);
        if (g != e) {
            if (is_signed_int(t))
                FAIL("%s %s n=%zu [%zu] (%s): %lld op %lld = %lld, expected "
                     "%lld",
                     xc_dtype_name(t), xc_op_name(op), n, i, how,
                     (long long)sign_extend(t, x), (long long)sign_extend(t, y),
                     (long long)sign_extend(t, g), (long long)sign_extend(t, e));
            else
                FAIL("%s %s n=%zu [%zu] (%s): %llu op %llu = %llu, expected "
                     "%llu",
                     xc_dtype_name(t), xc_op_name(op), n, i, how,
                     (unsigned long long)x, (unsigned long long)y,
                     (unsigned long long)g, (unsigned long long)e);
        }
        return;
    }
    uint64_t xy[2] = {x, y};
    uint64_t e = ref_fold(t, op, xy, 2);
    if (g != e)
        FAIL("%s %s n=%zu [%zu] (%s): %a op %a = %a (0x%llx), expected %a "
             "(0x%llx)",
             xc_dtype_name(t), xc_op_name(op), n, i, how, load_float(t, x),
             load_float(t, y), load_float(t, g), (unsigned long long)g,
             load_float(t, e), (unsigned long long)e);
}

/* ------------------------------------------------------------------ */
/* Tests                                                               */
/* ------------------------------------------------------------------ */

static void test_names(void)
{
    static const char *const dn[] = {"int8",  "uint8",  "int16", "uint16",
                                     "int32", "uint32", "int64", "uint64",
                                     "fp16",  "bf16",   "fp32",  "fp64"};
    static const size_t ds[] = {1, 1, 2, 2, 4, 4, 8, 8, 2, 2, 4, 8};
    static const char *const on[] = {"sum", "prod", "min",  "max",
                                     "avg", "band", "bor", "bxor"};
    for (int t = 0; t < XC_DTYPE_COUNT; t++) {
        CHECK_STR(xc_dtype_name((xc_dtype_t)t), dn[t]);
        CHECK_U64(xc_dtype_size((xc_dtype_t)t), ds[t], "dtype %d", t);
    }
    for (int o = 0; o < XC_OP_COUNT; o++) CHECK_STR(xc_op_name((xc_op_t)o), on[o]);
    CHECK_STR(xc_dtype_name(XC_DTYPE_COUNT), "invalid");
    CHECK_STR(xc_dtype_name((xc_dtype_t)-1), "invalid");
    CHECK_U64(xc_dtype_size(XC_DTYPE_COUNT), 0, "size of XC_DTYPE_COUNT");
    CHECK_U64(xc_dtype_size((xc_dtype_t)-1), 0, "size of dtype -1");
    CHECK_STR(xc_op_name(XC_OP_COUNT), "invalid");
    CHECK_STR(xc_op_name((xc_op_t)-3), "invalid");
}

static void test_check(void)
{
    for (int t = 0; t < XC_DTYPE_COUNT; t++)
        for (int o = 0; o < XC_OP_COUNT; o++) {
            xc_dtype_t dt = (xc_dtype_t)t;
            xc_op_t op = (xc_op_t)o;
            xc_result_t want =
                is_float_dtype(dt) && is_bitwise(op) ? XC_ERR_INVALID : XC_OK;
            xc_result_t rc = xc__reduce_check(dt, op);
            if (rc != want)
                FAIL("xc__reduce_check(%s, %s) == %s, expected %s",
                     xc_dtype_name(dt), xc_op_name(op), xc_err_name(rc),
                     xc_err_name(want));
            if (rc == XC_ERR_INVALID) {
                CHECK_CONTAINS(xc_last_error(), xc_dtype_name(dt));
                CHECK_CONTAINS(xc_last_error(), xc_op_name(op));
            }
        }
    CHECK_I64(xc__reduce_check(XC_DTYPE_COUNT, XC_SUM), XC_ERR_INVALID);
    CHECK_CONTAINS(xc_last_error(), "dtype");
    CHECK_I64(xc__reduce_check((xc_dtype_t)-1, XC_SUM), XC_ERR_INVALID);
    CHECK_I64(xc__reduce_check(XC_INT32, XC_OP_COUNT), XC_ERR_INVALID);
    CHECK_CONTAINS(xc_last_error(), "op");
    CHECK_I64(xc__reduce_check(XC_FLOAT32, (xc_op_t)-1), XC_ERR_INVALID);

    /* A pair the check rejects leaves dst untouched if it reaches the
     * kernels anyway (a caller bug must not corrupt memory). */
    float fa[3] = {1, 2, 3}, fd[3] = {7, 7, 7};
    xc__reduce2(fd, fa, fa, 3, XC_FLOAT32, XC_BXOR);
    xc__reduce2(fd, fa, fa, 3, XC_DTYPE_COUNT, XC_SUM);
    xc__reduce2(fd, fa, fa, 3, XC_FLOAT32, XC_OP_COUNT);
    for (int i = 0; i < 3; i++) CHECK_U64(fbits(fd[i]), fbits(7.0f), "invalid pair wrote [%d]", i);
}

/* fp16 value of a bit pattern computed from its fields; exponent 31 is
 * decoded as if it were finite (0x7c00 -> 65536), which is exactly the
 * "unbounded exponent" value IEEE rounding compares against. */
static double ref_fp16_value(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
    return (h & 0x8000) ? -v : v;
}

static double ref_bf16_value(uint16_t b)
{
    if ((b & 0x7fff) == 0x7f80) return (b & 0x8000) ? -ldexp(1, 128) : ldexp(1, 128);
    return bitsf((uint32_t)b << 16);
}

/* Nearest-even narrowing by searching the sorted positive patterns
 * 0..top (top = the infinity pattern) for the neighbours of |x|. */
static uint16_t ref_narrow(float x, double (*value)(uint16_t), uint16_t top)
{
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    double ax = fabs((double)x);
    if (isinf(ax)) return (uint16_t)(sign | top);
    unsigned lo = 0, hi = top; /* value(lo) <= ax; find largest such */
    if (ax >= value(top)) return (uint16_t)(sign | top);
    while (hi - lo > 1) {
        unsigned mid = (lo + hi) / 2;
        if (value((uint16_t)mid) <= ax) lo = mid;
        else hi = mid;
    }
    double dl = ax - value((uint16_t)lo), dh = value((uint16_t)hi) - ax;
    unsigned r = dl < dh ? lo : dh < dl ? hi : (lo & 1) ? hi : lo;
    return (uint16_t)(sign | r);
}

static void check_narrow(float x, const char *why)
{
    uint16_t g16 = xc__fp32_to_fp16(x), gb = xc__fp32_to_bf16(x);
    if (isnan(x)) {
        if ((g16 & 0x7c00) != 0x7c00 || (g16 & 0x3ff) == 0 || !(g16 & 0x200))
            FAIL("fp16(NaN 0x%08x) = 0x%04x, not a quiet NaN", fbits(x), g16);
        if ((gb & 0x7f80) != 0x7f80 || (gb & 0x7f) == 0 || !(gb & 0x40))
            FAIL("bf16(NaN 0x%08x) = 0x%04x, not a quiet NaN", fbits(x), gb);
        return;
    }
    uint16_t e16 = ref_narrow(x, ref_fp16_value, 0x7c00);
    uint16_t eb = ref_narrow(x, ref_bf16_value, 0x7f80);
    if (g16 != e16)
        FAIL("fp32->fp16(%a = 0x%08x) = 0x%04x, expected 0x%04x (%s)", x,
             fbits(x), g16, e16, why);
    if (gb != eb)
        FAIL("fp32->bf16(%a = 0x%08x) = 0x%04x, expected 0x%04x (%s)", x,
             fbits(x), gb, eb, why);
}

static void test_conversions(void)
{
    /* Every 16-bit pattern: widening is exact, narrowing back restores it;
     * NaNs stay (quiet) NaNs. */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = xc__fp16_to_fp32((uint16_t)h);
        int hnan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
        if (hnan) {
            if (!isnan(f) || !(fbits(f) & 0x00400000))
                FAIL("fp16 NaN 0x%04x widened to 0x%08x, not a quiet NaN", h,
                     fbits(f));
            uint16_t back = xc__fp32_to_fp16(f);
            if ((back & 0x7c00) != 0x7c00 || !(back & 0x200) ||
                (back & 0x8000) != (h & 0x8000))
                FAIL("fp16 NaN 0x%04x round trip gave 0x%04x", h, back);
        } else {
            double want = (h & 0x7c00) == 0x7c00
                              ? ((h & 0x8000) ? -INFINITY : INFINITY)
                              : ref_fp16_value((uint16_t)h);
            if ((double)f != want || !signbit(f) != !signbit(want))
                FAIL("fp16 0x%04x widened to %a, expected %a", h, f, want);
            CHECK_U64(xc__fp32_to_fp16(f), h, "fp16 round trip");
        }
        float g = xc__bf16_to_fp32((uint16_t)h);
        int bnan = (h & 0x7f80) == 0x7f80 && (h & 0x7f);
        if (bnan) {
            if (!isnan(g) || !(fbits(g) & 0x00400000))
                FAIL("bf16 NaN 0x%04x widened to 0x%08x, not a quiet NaN", h,
                     fbits(g));
            uint16_t back = xc__fp32_to_bf16(g);
            if ((back & 0x7f80) != 0x7f80 || !(back & 0x40) ||
                (back & 0x8000) != (h & 0x8000))
                FAIL("bf16 NaN 0x%04x round trip gave 0x%04x", h, back);
        } else {
            CHECK_U64(fbits(g), h << 16, "bf16 widen 0x%04x", h);
            CHECK_U64(xc__fp32_to_bf16(g), h, "bf16 round trip");
        }
    }

    /* Named cases (fp16). */
    struct { float x; uint16_t h; } c16[] = {
        {1.0f, 0x3c00}, {-2.0f, 0xc000}, {65504.0f, 0x7bff},
        {65519.99f, 0x7bff},           /* just below the overflow tie */
        {65520.0f, 0x7c00},            /* tie between max and 2^16: even */
        {1e10f, 0x7c00}, {-1e10f, 0xfc00}, {FLT_MAX, 0x7c00},
        {-INFINITY, 0xfc00}, {-0.0f, 0x8000},
        {0x1p-24f, 0x0001},            /* smallest subnormal */
        {0x1p-25f, 0x0000},            /* tie 0 / 2^-24: even is 0 */
        {0x1.000002p-25f, 0x0001},     /* just above the tie */
        {0x3p-25f, 0x0002},            /* tie 1 / 2: even is 2 */
        {0x5p-25f, 0x0002},            /* tie 2 / 3: even is 2 */
        {0x1p-14f - 0x1p-25f, 0x0400}, /* tie 0x3ff / 0x400 */
        {0x1p-14f, 0x0400},            /* smallest normal */
        {1.0f + 0x1p-11f, 0x3c00},     /* tie: even is 1.0 */
        {1.0f + 0x3p-11f, 0x3c02},     /* tie 0x3c01/0x3c02: even */
        {0x1p-149f, 0x0000},           /* fp32 denormal */
    };
    for (size_t i = 0; i < sizeof c16 / sizeof c16[0]; i++)
        CHECK_U64(xc__fp32_to_fp16(c16[i].x), c16[i].h, "fp16(%a)", c16[i].x);
    /* Named cases (bf16). */
    struct { float x; uint16_t b; } cb[] = {
        {1.0f, 0x3f80}, {1.0f + 0x1p-8f, 0x3f80}, {1.0f + 0x3p-8f, 0x3f82},
        {0x1.010002p+0f, 0x3f81}, {FLT_MAX, 0x7f80},
        {0x1.fefffep127f, 0x7f7f}, {0x1.ff0000p127f, 0x7f80}, {-0.0f, 0x8000},
        {0x1p-149f, 0x0000}, {0x1p-133f, 0x0001}, {0x3p-134f, 0x0002},
        {-INFINITY, 0xff80},
    };
    for (size_t i = 0; i < sizeof cb / sizeof cb[0]; i++)
        CHECK_U64(xc__fp32_to_bf16(cb[i].x), cb[i].b, "bf16(%a)", cb[i].x);

    /* Every fp16 tie (midpoint of neighbours, exact in fp32) and the fp32
     * values either side of it, against the reference search. */
    for (uint32_t k = 0; k < 0x7c00; k++) {
        float mid = (float)((ref_fp16_value((uint16_t)k) +
                             ref_fp16_value((uint16_t)(k + 1))) / 2);
        check_narrow(mid, "tie");
        check_narrow(-mid, "negative tie");
        check_narrow(nextafterf(mid, 0.0f), "below tie");
        check_narrow(nextafterf(mid, INFINITY), "above tie");
    }
    /* bf16 ties. */
    for (uint32_t k = 0; k < 0x7f80; k += 7) {
        float mid = bitsf((k << 16) | 0x8000);
        check_narrow(mid, "bf16 tie");
        check_narrow(nextafterf(mid, INFINITY), "above bf16 tie");
    }
    /* A spread of fp32 patterns (all exponents) and random ones, NaN too. */
    for (uint64_t u = 0; u < (1ull << 32); u += 4093) check_narrow(bitsf((uint32_t)u), "stride");
    for (int i = 0; i < 200000; i++) check_narrow(bitsf((uint32_t)rnd()), "random");
}

/* Every dtype x op at odd counts, distinct and aliased buffers. */
static void test_kernels(void)
{
    static const size_t counts[] = {0, 1, 7, 33, 1000, 1537};
    enum { MAXN = 1537 };
    const size_t bytes = MAXN * sizeof(uint64_t);
    void *a = xmalloc(bytes), *b = xmalloc(bytes), *d = xmalloc(bytes);
    void *d2 = xmalloc(bytes);
    for (int t = 0; t < XC_DTYPE_COUNT; t++)
        for (int o = 0; o < XC_OP_COUNT; o++) {
            xc_dtype_t dt = (xc_dtype_t)t;
            xc_op_t op = (xc_op_t)o;
            if (xc__reduce_check(dt, op) != XC_OK) continue;
            size_t es = xc_dtype_size(dt);
            for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
                size_t n = counts[c];
                fill(dt, a, MAXN);
                fill(dt, b, MAXN);
                /* Sentinel past the end must survive. */
                memset(d, 0xa5, bytes);
                xc__reduce2(d, a, b, n, dt, op);
                for (size_t i = 0; i < n; i++) check_elem(dt, op, d, a, b, i, n, "distinct");
                for (size_t i = n * es; i < bytes; i++)
                    if (((unsigned char *)d)[i] != 0xa5) {
                        FAIL("%s %s n=%zu wrote byte %zu past the end",
                             xc_dtype_name(dt), xc_op_name(op), n, i);
                        break;
                    }
                /* dst == a */
                memcpy(d2, a, bytes);
                xc__reduce2(d2, d2, b, n, dt, op);
                for (size_t i = 0; i < n; i++) check_elem(dt, op, d2, a, b, i, n, "dst==a");
                /* dst == b */
                memcpy(d2, b, bytes);
                xc__reduce2(d2, a, d2, n, dt, op);
                for (size_t i = 0; i < n; i++) check_elem(dt, op, d2, a, b, i, n, "dst==b");
                /* dst == a == b */
                memcpy(d2, a, bytes);
                xc__reduce2(d2, d2, d2, n, dt, op);
                for (size_t i = 0; i < n; i++) check_elem(dt, op, d2, a, a, i, n, "dst==a==b");
            }
        }
    free(a);
    free(b);
    free(d);
    free(d2);
}

/* Wrap-around and sign cases with literal expectations. */
static void test_int_edges(void)
{
    int8_t i8a[] = {INT8_MAX, INT8_MIN, -1, 100, -128};
    int8_t i8b[] = {1, -1, -1, 100, -1};
    int8_t i8d[5];
    xc__reduce2(i8d, i8a, i8b, 5, XC_INT8, XC_SUM);
    CHECK_I64(i8d[0], INT8_MIN); /* INT8_MAX + 1 */
    CHECK_I64(i8d[1], INT8_MAX); /* INT8_MIN - 1 */
    CHECK_I64(i8d[2], -2);
    CHECK_I64(i8d[3], -56);      /* 200 wraps */
    xc__reduce2(i8d, i8a, i8b, 5, XC_INT8, XC_PROD);
    CHECK_I64(i8d[1], INT8_MIN); /* INT8_MIN * -1 */
    CHECK_I64(i8d[3], 16);       /* 10000 mod 256 */
    CHECK_I64(i8d[4], INT8_MIN);
    xc__reduce2(i8d, i8a, i8b, 5, XC_INT8, XC_MIN);
    CHECK_I64(i8d[0], 1);
    CHECK_I64(i8d[1], INT8_MIN);
    xc__reduce2(i8d, i8a, i8b, 5, XC_INT8, XC_MAX);
    CHECK_I64(i8d[1], -1);

    uint16_t u16a[] = {65535, 65535, 0}, u16b[] = {65535, 1, 1}, u16d[3];
    xc__reduce2(u16d, u16a, u16b, 3, XC_UINT16, XC_PROD);
    CHECK_U64(u16d[0], 1, "65535*65535 mod 2^16");
    xc__reduce2(u16d, u16a, u16b, 3, XC_UINT16, XC_SUM);
    CHECK_U64(u16d[1], 0, "65535+1");
    xc__reduce2(u16d, u16a, u16b, 3, XC_UINT16, XC_MIN);
    CHECK_U64(u16d[2], 0, "unsigned min");

    int16_t i16a[] = {INT16_MIN, 300}, i16b[] = {-1, 300}, i16d[2];
    xc__reduce2(i16d, i16a, i16b, 2, XC_INT16, XC_PROD);
    CHECK_I64(i16d[0], INT16_MIN);
    CHECK_I64(i16d[1], 24464); /* 90000 - 65536 */

    int32_t i32a[] = {INT32_MIN, INT32_MAX, -5}, i32b[] = {-1, INT32_MAX, 3};
    int32_t i32d[3];
    xc__reduce2(i32d, i32a, i32b, 3, XC_INT32, XC_SUM);
    CHECK_I64(i32d[0], INT32_MAX);
    CHECK_I64(i32d[1], -2);
    xc__reduce2(i32d, i32a, i32b, 3, XC_INT32, XC_PROD);
    CHECK_I64(i32d[0], INT32_MIN);
    CHECK_I64(i32d[1], 1);
    CHECK_I64(i32d[2], -15);
    xc__reduce2(i32d, i32a, i32b, 3, XC_INT32, XC_BXOR);
    CHECK_I64(i32d[2], -5 ^ 3);

    int64_t i64a[] = {INT64_MIN, INT64_MAX, INT64_MIN}, i64b[] = {-1, 1, INT64_MAX};
    int64_t i64d[3];
    xc__reduce2(i64d, i64a, i64b, 3, XC_INT64, XC_PROD);
    CHECK_I64(i64d[0], INT64_MIN); /* INT64_MIN * -1 */
    CHECK_I64(i64d[1], INT64_MAX);
    xc__reduce2(i64d, i64a, i64b, 3, XC_INT64, XC_SUM);
    CHECK_I64(i64d[0], INT64_MAX); /* INT64_MIN - 1 */
    CHECK_I64(i64d[1], INT64_MIN); /* INT64_MAX + 1 */
    CHECK_I64(i64d[2], -1);
    xc__reduce2(i64d, i64a, i64b, 3, XC_INT64, XC_MIN);
    CHECK_I64(i64d[2], INT64_MIN);

    uint64_t u64a[] = {UINT64_MAX, 1ull << 63}, u64b[] = {UINT64_MAX, 2}, u64d[2];
    xc__reduce2(u64d, u64a, u64b, 2, XC_UINT64, XC_PROD);
    CHECK_U64(u64d[0], 1, "UINT64_MAX^2");
    CHECK_U64(u64d[1], 0, "2^63*2");
    xc__reduce2(u64d, u64a, u64b, 2, XC_UINT64, XC_MAX);
    CHECK_U64(u64d[1], 1ull << 63, "unsigned max");
}

/* Float min/max: NaN propagates, -0 < +0, and the result bits do not depend
 * on operand order (so ranks combining in different orders agree). */
static void test_float_minmax(void)
{
    float fa[] = {NAN, 1.0f, -0.0f, 0.0f, bitsf(0x7fc00001), -INFINITY, 2.0f, bitsf(0x7f800001)};
    float fb[] = {1.0f, NAN, 0.0f, -0.0f, bitsf(0xffc00abc), 5.0f, 2.0f, 3.0f};
    enum { N = sizeof fa / sizeof fa[0] };
    float r1[N], r2[N];
    for (int o = XC_MIN; o <= XC_MAX; o++) {
        xc_op_t op = (xc_op_t)o;
        xc__reduce2(r1, fa, fb, N, XC_FLOAT32, op);
        xc__reduce2(r2, fb, fa, N, XC_FLOAT32, op);
        for (int i = 0; i < N; i++)
            CHECK_U64(fbits(r1[i]), fbits(r2[i]), "fp32 %s commutes [%d]", xc_op_name(op), i);
        for (int i = 0; i < 2; i++)
            if (!isnan(r1[i])) FAIL("fp32 %s [%d] = %a, expected NaN", xc_op_name(op), i, r1[i]);
        if (!isnan(r1[4]) || !isnan(r1[7]))
            FAIL("fp32 %s of NaNs = %a, %a, expected NaN", xc_op_name(op), r1[4], r1[7]);
        uint32_t zero = op == XC_MIN ? 0x80000000u : 0u;
        CHECK_U64(fbits(r1[2]), zero, "fp32 %s(-0, +0)", xc_op_name(op));
        CHECK_U64(fbits(r1[3]), zero, "fp32 %s(+0, -0)", xc_op_name(op));
        CHECK_U64(fbits(r1[5]), fbits(op == XC_MIN ? -INFINITY : 5.0f),
                  "fp32 %s(-inf, 5)", xc_op_name(op));
        CHECK_U64(fbits(r1[6]), fbits(2.0f), "fp32 %s(2, 2)", xc_op_name(op));
    }
    double da[] = {NAN, -0.0, 3.0, bitsd(0x7ff0000000000001ull)};
    double db[] = {-1.0, 0.0, -INFINITY, bitsd(0xfff8000000000123ull)};
    double q1[4], q2[4];
    for (int o = XC_MIN; o <= XC_MAX; o++) {
        xc_op_t op = (xc_op_t)o;
        xc__reduce2(q1, da, db, 4, XC_FLOAT64, op);
        xc__reduce2(q2, db, da, 4, XC_FLOAT64, op);
        for (int i = 0; i < 4; i++)
            CHECK_U64(dbits(q1[i]), dbits(q2[i]), "fp64 %s commutes [%d]", xc_op_name(op), i);
        if (!isnan(q1[0]) || !isnan(q1[3])) FAIL("fp64 %s NaN lost", xc_op_name(op));
        CHECK_U64(dbits(q1[1]), op == XC_MIN ? dbits(-0.0) : 0, "fp64 %s(-0, +0)", xc_op_name(op));
        CHECK_U64(dbits(q1[2]), dbits(op == XC_MIN ? -INFINITY : 3.0),
                  "fp64 %s(3, -inf)", xc_op_name(op));
    }
    /* Every float dtype on random bit patterns: order does not matter and
     * three-way combination is associative, bit for bit. */
    enum { M = 4096 };
    void *ha = xmalloc(M * 8), *hb = xmalloc(M * 8), *hc = xmalloc(M * 8);
    void *s1 = xmalloc(M * 8), *s2 = xmalloc(M * 8), *t1 = xmalloc(M * 8);
    void *t2 = xmalloc(M * 8);
    for (int t = XC_FLOAT16; t <= XC_FLOAT64; t++) {
        xc_dtype_t dt = (xc_dtype_t)t;
        size_t n = M;
        for (size_t i = 0; i < n; i++) { /* random patterns: many NaNs */
            store_raw(dt, ha, i, rnd());
            store_raw(dt, hb, i, rnd());
            store_raw(dt, hc, i, rnd());
        }
        for (int o = XC_MIN; o <= XC_MAX; o++) {
            xc_op_t op = (xc_op_t)o;
            xc__reduce2(s1, ha, hb, n, dt, op);
            xc__reduce2(s2, hb, ha, n, dt, op);
            if (memcmp(s1, s2, n * xc_dtype_size(dt)) != 0)
                FAIL("%s %s is not commutative bit for bit", xc_dtype_name(dt), xc_op_name(op));
            xc__reduce2(t1, s1, hc, n, dt, op);  /* (a op b) op c */
            xc__reduce2(s2, hb, hc, n, dt, op);
            xc__reduce2(t2, ha, s2, n, dt, op);  /* a op (b op c) */
            if (memcmp(t1, t2, n * xc_dtype_size(dt)) != 0)
                FAIL("%s %s is not associative bit for bit", xc_dtype_name(dt), xc_op_name(op));
        }
    }
    free(ha);
    free(hb);
    free(hc);
    free(s1);
    free(s2);
    free(t1);
    free(t2);
}

/* Float min/max in every MXCSR mode: with DAZ (torch.set_flush_denormal,
 * -ffast-math) hardware min/max compare subnormals as zeros and return a
 * flushed zero; the kernels must still pick the exact operand, at every
 * level alike.  Pairs (a, b, min, max), repeated past the vector widths. */
static void test_minmax_daz(void)
{
#if defined(__x86_64__)
    static const uint32_t p32[][4] = {
        {0x5, 0x3, 0x3, 0x5},
        {0x80000005u, 0x3, 0x80000005u, 0x3},
        {0x5, 0x0, 0x0, 0x5},
        {0x80000001u, 0x80000000u, 0x80000001u, 0x80000000u},
        {0x007fffffu, 0x00800000u, 0x007fffffu, 0x00800000u},
    };
    static const uint64_t p64[][4] = {
        {0x5, 0x3, 0x3, 0x5},
        {0x8000000000000005ull, 0x1, 0x8000000000000005ull, 0x1},
        {0x0, 0x8000000000000000ull, 0x8000000000000000ull, 0x0},
    };
    static const uint16_t pbf[][4] = {
        {0x0005, 0x0003, 0x0003, 0x0005},
        {0x8002, 0x0001, 0x8002, 0x0001},
    };
    enum { N = 53 };
    uint32_t a32[N], b32[N], r32[N];
    uint64_t a64[N], b64[N], r64[N];
    uint16_t abf[N], bbf[N], rbf[N];
    unsigned csr = __builtin_ia32_stmxcsr();
    __builtin_ia32_ldmxcsr(csr | 0x8040); /* FTZ | DAZ */
    for (int o = XC_MIN; o <= XC_MAX; o++) {
        xc_op_t op = (xc_op_t)o;
        int w = op == XC_MIN ? 2 : 3;
        for (int i = 0; i < N; i++) {
            const uint32_t *q = p32[i % 5];
            a32[i] = q[i & 1], b32[i] = q[!(i & 1)];
            const uint64_t *d = p64[i % 3];
            a64[i] = d[i & 1], b64[i] = d[!(i & 1)];
            const uint16_t *h = pbf[i % 2];
            abf[i] = h[i & 1], bbf[i] = h[!(i & 1)];
        }
        xc__reduce2(r32, a32, b32, N, XC_FLOAT32, op);
        xc__reduce2(r64, a64, b64, N, XC_FLOAT64, op);
        xc__reduce2(rbf, abf, bbf, N, XC_BFLOAT16, op);
        for (int i = 0; i < N; i++) {
            CHECK_U64(r32[i], p32[i % 5][w], "fp32 %s under DAZ [%d]", xc_op_name(op), i);
            CHECK_U64(r64[i], p64[i % 3][w], "fp64 %s under DAZ [%d]", xc_op_name(op), i);
            CHECK_U64(rbf[i], pbf[i % 2][w], "bf16 %s under DAZ [%d]", xc_op_name(op), i);
        }
    }
    __builtin_ia32_ldmxcsr(csr);
#endif
}

/* More inputs than one kernel call takes (xc__reduce_many: groups of 64),
 * out of place and in place -- dst one of the first group's sources or of
 * a later group's -- against a serial left-to-right sum. */
static void test_reduce_many(void)
{
    enum { K = 130, C = 3001 };
    static const int ks[] = {65, 70, K};
    float *in = xmalloc((size_t)K * C * sizeof *in), *ref = xmalloc(C * sizeof *ref);
    float *out = xmalloc(C * sizeof *out), *save = xmalloc(C * sizeof *save);
    int32_t *iin = xmalloc((size_t)K * C * sizeof *iin), *iout = xmalloc(C * sizeof *iout);
    int32_t *isave = xmalloc(C * sizeof *isave);
    const void *srcs[K], *isrcs[K];
    for (size_t i = 0; i < (size_t)K * C; i++) {
        in[i] = (float)(int)(rnd() % 2001 - 1000) / 64.0f;
        iin[i] = (int32_t)(rnd() % 100000);
    }
    for (int j = 0; j < K; j++) srcs[j] = in + (size_t)j * C, isrcs[j] = iin + (size_t)j * C;
    for (size_t t = 0; t < sizeof ks / sizeof ks[0]; t++) {
        int k = ks[t];
        for (size_t i = 0; i < C; i++) {
            float acc = in[i];
            for (int j = 1; j < k; j++) acc += in[(size_t)j * C + i];
            ref[i] = acc;
        }
        for (int where = -1; where < k; where += where < 1 ? 1 : 64) { /* -1: out of place */
            float *dst = where < 0 ? out : in + (size_t)where * C;
            if (where >= 0) memcpy(save, dst, C * sizeof *dst);
            xc__reduce_many(dst, srcs, k, C, XC_FLOAT32, XC_SUM);
            for (size_t i = 0; i < C; i++)
                if (fbits(dst[i]) != fbits(ref[i])) {
                    FAIL("reduce_many k=%d, dst = %s%d: [%zu] = %a, expected %a", k,
                         where < 0 ? "separate" : "source ", where, i, dst[i], ref[i]);
                    break;
                }
            if (where >= 0) memcpy(dst, save, C * sizeof *dst);
            int32_t *idst = where < 0 ? iout : iin + (size_t)where * C;
            if (where >= 0) memcpy(isave, idst, C * sizeof *idst);
            uint32_t want = 0;
            for (int j = 0; j < k; j++) want += (uint32_t)iin[(size_t)j * C + C - 1];
            xc__reduce_many(idst, isrcs, k, C, XC_INT32, XC_SUM);
            CHECK_I64(idst[C - 1], (int32_t)want);
            if (where >= 0) memcpy(idst, isave, C * sizeof *idst);
        }
    }
    free(in);
    free(ref);
    free(out);
    free(save);
    free(iin);
    free(iout);
    free(isave);
}

/* AVG: reduce as SUM, then finalise. */
static void test_avg(void)
{
    int8_t i8a[] = {-7, 100, -100, 7, INT8_MIN}, i8b[] = {0, 100, -100, 0, 0};
    int8_t i8d[5];
    xc__reduce2(i8d, i8a, i8b, 5, XC_INT8, XC_AVG);
    CHECK_I64(i8d[1], -56); /* wrapped sum */
    xc__reduce_finalize(i8d, 5, XC_INT8, XC_AVG, 2);
    CHECK_I64(i8d[0], -3);  /* -7 / 2 truncates toward zero */
    CHECK_I64(i8d[1], -28); /* the wrapped sum, read as signed, / 2 */
    CHECK_I64(i8d[2], 28);  /* -200 wraps to 56 */
    CHECK_I64(i8d[3], 3);
    CHECK_I64(i8d[4], -64);

    uint8_t u8[] = {255, 200, 1};
    xc__reduce_finalize(u8, 3, XC_UINT8, XC_AVG, 2);
    CHECK_U64(u8[0], 127, "uint8 255/2");
    CHECK_U64(u8[1], 100, "uint8 200/2");
    CHECK_U64(u8[2], 0, "uint8 1/2");

    int16_t i16[] = {-32768, 32767, -5};
    xc__reduce_finalize(i16, 3, XC_INT16, XC_AVG, 3);
    CHECK_I64(i16[0], -10922);
    CHECK_I64(i16[1], 10922);
    CHECK_I64(i16[2], -1);
    uint16_t u16[] = {65535};
    xc__reduce_finalize(u16, 1, XC_UINT16, XC_AVG, 3);
    CHECK_U64(u16[0], 21845, "uint16 65535/3");
    int32_t i32[] = {INT32_MIN, -1};
    xc__reduce_finalize(i32, 2, XC_INT32, XC_AVG, 7);
    CHECK_I64(i32[0], INT32_MIN / 7);
    CHECK_I64(i32[1], 0);
    uint32_t u32[] = {0x80000000u};
    xc__reduce_finalize(u32, 1, XC_UINT32, XC_AVG, 2);
    CHECK_U64(u32[0], 0x40000000u, "uint32 2^31/2 (unsigned, not negative)");
    int64_t i64[] = {INT64_MIN, -9};
    xc__reduce_finalize(i64, 2, XC_INT64, XC_AVG, 4);
    CHECK_I64(i64[0], INT64_MIN / 4);
    CHECK_I64(i64[1], -2);
    uint64_t u64[] = {UINT64_MAX};
    xc__reduce_finalize(u64, 1, XC_UINT64, XC_AVG, 5);
    CHECK_U64(u64[0], UINT64_MAX / 5, "uint64 max/5");

    float f[] = {1.0f, -7.0f, NAN, INFINITY};
    xc__reduce_finalize(f, 4, XC_FLOAT32, XC_AVG, 3);
    CHECK_U64(fbits(f[0]), fbits(1.0f / 3.0f), "fp32 1/3");
    CHECK_U64(fbits(f[1]), fbits(-7.0f / 3.0f), "fp32 -7/3");
    if (!isnan(f[2])) FAIL("fp32 NaN/3 = %a", f[2]);
    CHECK_U64(fbits(f[3]), fbits(INFINITY), "fp32 inf/3");
    double dd[] = {1.0, 1e308};
    xc__reduce_finalize(dd, 2, XC_FLOAT64, XC_AVG, 3);
    CHECK_U64(dbits(dd[0]), dbits(1.0 / 3.0), "fp64 1/3");
    CHECK_U64(dbits(dd[1]), dbits(1e308 / 3.0), "fp64 1e308/3");

    /* Large counts: every element against its own reference. */
    enum { N = 1037 };
    const size_t bytes = N * sizeof(uint64_t);
    void *buf = xmalloc(bytes), *orig = xmalloc(bytes);
    for (int t = 0; t < XC_DTYPE_COUNT; t++) {
        xc_dtype_t dt = (xc_dtype_t)t;
        fill(dt, orig, N);
        memcpy(buf, orig, bytes);
        xc__reduce_finalize(buf, N, dt, XC_AVG, 6);
        for (size_t i = 0; i < N; i++) {
            uint64_t x = load_raw(dt, orig, i), g = load_raw(dt, buf, i), e;
            if (is_signed_int(dt)) e = (uint64_t)(sign_extend(dt, x) / 6) & width_mask(dt);
            else if (!is_float_dtype(dt)) e = x / 6;
            else if (dt == XC_FLOAT64) e = dbits(bitsd(x) / 6.0);
            else if (dt == XC_FLOAT32) e = fbits(bitsf((uint32_t)x) / 6.0f);
            else if (dt == XC_FLOAT16) e = xc__fp32_to_fp16(xc__fp16_to_fp32((uint16_t)x) / 6.0f);
            else e = xc__fp32_to_bf16(xc__bf16_to_fp32((uint16_t)x) / 6.0f);
            int nan = is_float_dtype(dt) && isnan(load_float(dt, x));
            if (nan ? !isnan(load_float(dt, g)) : g != e)
                FAIL("%s avg finalize [%zu]: 0x%llx / 6 = 0x%llx, expected 0x%llx",
                     xc_dtype_name(dt), i, (unsigned long long)x,
                     (unsigned long long)g, (unsigned long long)e);
        }
        /* Not AVG, or one rank: untouched. */
        memcpy(buf, orig, bytes);
        xc__reduce_finalize(buf, N, dt, XC_SUM, 6);
        xc__reduce_finalize(buf, N, dt, XC_AVG, 1);
        if (memcmp(buf, orig, bytes) != 0)
            FAIL("%s: finalize with op=sum or nranks=1 changed the data", xc_dtype_name(dt));
    }
    free(buf);
    free(orig);
    /* fp16: divide in fp32 and round once. */
    uint16_t h[] = {0x3c00 /* 1 */, 0x0001 /* 2^-24 */, 0x7bff};
    xc__reduce_finalize(h, 3, XC_FLOAT16, XC_AVG, 3);
    CHECK_U64(h[0], 0x3555, "fp16 1/3");
    CHECK_U64(h[1], 0x0000, "fp16 2^-24/3 rounds to 0");
    CHECK_U64(h[2], xc__fp32_to_fp16(65504.0f / 3.0f), "fp16 65504/3");
}

/* fp16 sums that overflow, underflow and hit ties when rounded back. */
static void test_half_sums(void)
{
    uint16_t a[] = {0x7bff, 0x3c00, 0x0001, 0xfbff, 0x3c00};
    uint16_t b[] = {0x7bff, 0x1000, 0x8001, 0xfbff, 0x3c00};
    uint16_t d[5];
    xc__reduce2(d, a, b, 5, XC_FLOAT16, XC_SUM);
    CHECK_U64(d[0], 0x7c00, "fp16 65504+65504 = inf");
    CHECK_U64(d[1], 0x3c00, "fp16 1 + 2^-11 rounds to even 1");
    CHECK_U64(d[2], 0x0000, "fp16 2^-24 - 2^-24 = +0");
    CHECK_U64(d[3], 0xfc00, "fp16 -65504-65504 = -inf");
    CHECK_U64(d[4], 0x4000, "fp16 1+1");
    uint16_t ba[] = {0x3f80, 0x7f7f}, bb[] = {0x3b80 /* 2^-8 */, 0x7f7f};
    xc__reduce2(d, ba, bb, 2, XC_BFLOAT16, XC_SUM);
    CHECK_U64(d[0], 0x3f80, "bf16 1 + 2^-8 rounds to even 1");
    CHECK_U64(d[1], 0x7f80, "bf16 max+max = inf");
}

/* ------------------------------------------------------------------ */
/* SIMD levels, k-input reductions, block converters                   */
/* ------------------------------------------------------------------ */

/* Level selection: names, clamping to what the CPU has, XCOLL_SIMD. */
static void test_level_api(void)
{
    CHECK_STR(xc__reduce_level_name(XC__SIMD_SCALAR), "scalar");
    CHECK_STR(xc__reduce_level_name(XC__SIMD_AVX2), "avx2");
    CHECK_STR(xc__reduce_level_name(XC__SIMD_AVX512), "avx512");
    CHECK_STR(xc__reduce_level_name(XC__SIMD_AVX512FP16), "avx512fp16");
    CHECK_STR(xc__reduce_level_name(XC__SIMD_COUNT), "invalid");
    CHECK_STR(xc__reduce_level_name(-1), "invalid");

    int best = xc__reduce_set_level(XC__SIMD_COUNT - 1);
    CHECK_I64(xc__reduce_level(), best);
#if defined(__x86_64__)
    /* The dispatcher picks the best level this CPU runs. */
    int want = XC__SIMD_SCALAR;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c"))
        want = XC__SIMD_AVX2;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        want = XC__SIMD_AVX512;
    if (want == XC__SIMD_AVX512 && __builtin_cpu_supports("avx512fp16") &&
        __builtin_cpu_supports("avx512bf16"))
        want = XC__SIMD_AVX512FP16;
    CHECK_I64(best, want);
#endif
    CHECK_I64(xc__reduce_set_level(1000), best); /* above the top: the best */
    CHECK_I64(xc__reduce_set_level(XC__SIMD_SCALAR), XC__SIMD_SCALAR);
    CHECK_I64(xc__reduce_level(), XC__SIMD_SCALAR);
    for (int l = 0; l < XC__SIMD_COUNT; l++) {
        int got = xc__reduce_set_level(l);
        CHECK_I64(got, l <= best ? l : best);
        CHECK_I64(xc__reduce_level(), got);
    }

    /* XCOLL_SIMD, consulted when the default is (re)resolved. */
    const char *saved = getenv("XCOLL_SIMD");
    char *copy = saved ? strdup(saved) : NULL;
    setenv("XCOLL_SIMD", "scalar", 1);
    CHECK_I64(xc__reduce_set_level(XC__SIMD_DEFAULT), XC__SIMD_SCALAR);
    setenv("XCOLL_SIMD", "avx2", 1);
    CHECK_I64(xc__reduce_set_level(XC__SIMD_DEFAULT), XC__MIN(best, XC__SIMD_AVX2));
    setenv("XCOLL_SIMD", "avx512", 1);
    CHECK_I64(xc__reduce_set_level(XC__SIMD_DEFAULT), XC__MIN(best, XC__SIMD_AVX512));
    setenv("XCOLL_SIMD", "avx512fp16", 1);
    CHECK_I64(xc__reduce_set_level(XC__SIMD_DEFAULT), best);
    setenv("XCOLL_SIMD", "sse9", 1); /* unknown: ignored */
    CHECK_I64(xc__reduce_set_level(XC__SIMD_DEFAULT), best);
    unsetenv("XCOLL_SIMD");
    CHECK_I64(xc__reduce_set_level(XC__SIMD_DEFAULT), best);
    if (copy) {
        setenv("XCOLL_SIMD", copy, 1);
        free(copy);
    }
}

/* Float bit patterns that hit every special rule: +-0, +-inf, quiet and
 * signalling NaNs of both signs with payloads, subnormals (smallest,
 * largest), the smallest normal, the largest finite, +-1. */
static uint64_t special_float_bits(xc_dtype_t t, unsigned k)
{
    static const uint16_t h[] = {0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0xfe00,
                                 0x7c01, 0xfd55, 0x7fff, 0x0001, 0x8001, 0x03ff,
                                 0x0400, 0x7bff, 0xfbff, 0x3c00, 0xbc00, 0x3555};
    static const uint16_t b[] = {0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0xffc0,
                                 0x7f81, 0xff81, 0x7fff, 0x0001, 0x8001, 0x007f,
                                 0x0080, 0x7f7f, 0xff7f, 0x3f80, 0xbf80, 0x3eab};
    static const uint32_t f[] = {
        0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00000,
        0x7f800001, 0xff812345, 0x7fffffff, 0x00000001, 0x80000001, 0x007fffff,
        0x00800000, 0x7f7fffff, 0xff7fffff, 0x3f800000, 0xbf800000, 0x3eaaaaab};
    static const uint64_t d[] = {
        0, 0x8000000000000000ull, 0x7ff0000000000000ull, 0xfff0000000000000ull,
        0x7ff8000000000000ull, 0xfff8000000000000ull, 0x7ff0000000000001ull,
        0xfff0000012345678ull, 0x7fffffffffffffffull, 1, 0x8000000000000001ull,
        0x000fffffffffffffull, 0x0010000000000000ull, 0x7fefffffffffffffull,
        0xffefffffffffffffull, 0x3ff0000000000000ull, 0xbff0000000000000ull,
        0x3fd5555555555555ull};
    k %= sizeof h / sizeof h[0];
    switch (t) {
    case XC_FLOAT16: return h[k];
    case XC_BFLOAT16: return b[k];
    case XC_FLOAT32: return f[k];
    default: return d[k];
    }
}

/*
 * A random element.  Floats: specials a quarter of the time, random bit
 * patterns a quarter, and otherwise values of random sign whose exponents
 * lie in a band of 16 binades (near the smallest normal, around 1, or near
 * overflow), so sums cancel, tie, round, underflow and overflow often.
 * `clean` leaves out NaNs and subnormals (but keeps +-0, +-inf and the
 * extremes), so whole registers of ordinary data take the SIMD fast paths
 * that only run when no lane is special.
 */
static uint64_t gen_any(xc_dtype_t t, int clean)
{
    static const unsigned ordinary[] = {0, 1, 2, 3, 12, 13, 14, 15, 16, 17};
    uint64_t r = rnd();
    unsigned pick = (unsigned)(r & 7);
    if (!is_float_dtype(t))
        return pick < 2 ? special_int(t, (unsigned)(r >> 8)) : rnd() & width_mask(t);
    if (clean && pick == 0)
        return special_float_bits(t, ordinary[(r >> 8) % 10]);
    if (!clean && pick < 2) return special_float_bits(t, (unsigned)(r >> 8));
    if (!clean && pick < 4) return rnd() & width_mask(t);
    uint64_t m = rnd(), sign = (r >> 8) & 1, e = (r >> 16) % 16;
    unsigned band = (unsigned)(r >> 24) % 8; /* 0: tiny, 1: huge, else ~1 */
    switch (t) {
    case XC_FLOAT16:
        e += band == 0 ? 1 : band == 1 ? 15 : 8;
        return sign << 15 | e << 10 | (m & 0x3ff);
    case XC_BFLOAT16:
        e += band == 0 ? 1 : band == 1 ? 239 : 120;
        return sign << 15 | e << 7 | (m & 0x7f);
    case XC_FLOAT32:
        e += band == 0 ? 1 : band == 1 ? 239 : 120;
        return sign << 31 | e << 23 | (m & 0x7fffff);
    default:
        e += band == 0 ? 1 : band == 1 ? 2031 : 1016;
        return sign << 63 | e << 52 | (m & 0xfffffffffffffull);
    }
}

/* Inputs alternate between stretches of any data and of clean data. */
static int clean_at(size_t i) { return (i / 96) % 2 == 1; }

enum { XK = 16 };   /* most inputs any test reduces */
static const int g_ks[] = {1, 2, 3, 4, 7, 8, 16};

/* reduce_n at the current level against ref_fold, element by element,
 * plus the no-op cases. */
static void test_reduce_n_ref(void)
{
    static const size_t counts[] = {0, 1, 5, 63, 64, 65, 130, 1000};
    enum { MAXN = 1000, GUARD = 64 };
    void *src[XK];
    for (int j = 0; j < XK; j++) src[j] = xmalloc(MAXN * 8);
    unsigned char *d = xmalloc(MAXN * 8 + GUARD);
    for (int t = 0; t < XC_DTYPE_COUNT; t++) {
        xc_dtype_t dt = (xc_dtype_t)t;
        size_t es = xc_dtype_size(dt);
        for (int j = 0; j < XK; j++)
            for (size_t i = 0; i < MAXN; i++)
                store_raw(dt, src[j], i, gen_any(dt, clean_at(i)));
        for (int o = 0; o < XC_OP_COUNT; o++) {
            xc_op_t op = (xc_op_t)o;
            if (xc__reduce_check(dt, op) != XC_OK) continue;
            for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
                for (size_t q = 0; q < sizeof g_ks / sizeof g_ks[0]; q++) {
                    size_t n = counts[c];
                    int k = g_ks[q];
                    memset(d, 0xa5, MAXN * 8 + GUARD);
                    xc__reduce_n(d, (const void *const *)src, k, n, dt, op);
                    int bad = 0;
                    for (size_t i = 0; i < n && bad < 3; i++) {
                        uint64_t x[XK];
                        for (int j = 0; j < k; j++) x[j] = load_raw(dt, src[j], i);
                        uint64_t e = ref_fold(dt, op, x, k), g = load_raw(dt, d, i);
                        if (g != e) {
                            bad++;
                            FAIL("reduce_n %s %s k=%d n=%zu [%zu]: 0x%llx, expected "
                                 "0x%llx (inputs 0x%llx 0x%llx 0x%llx ...)",
                                 xc_dtype_name(dt), xc_op_name(op), k, n, i,
                                 (unsigned long long)g, (unsigned long long)e,
                                 (unsigned long long)x[0],
                                 (unsigned long long)(k > 1 ? x[1] : 0),
                                 (unsigned long long)(k > 2 ? x[2] : 0));
                        }
                    }
                    for (size_t b = n * es; b < MAXN * 8 + GUARD; b++)
                        if (d[b] != 0xa5) {
                            FAIL("reduce_n %s %s k=%d n=%zu wrote byte %zu past the end",
                                 xc_dtype_name(dt), xc_op_name(op), k, n, b);
                            break;
                        }
                }
        }
    }
    /* k == 1 copies bits, even a signalling NaN; k outside 1..64 and an
     * invalid pair leave dst untouched. */
    uint32_t snan[3] = {0x7f800001, 0xff812345, 0x3f800000}, out[3];
    const void *one[1] = {snan};
    xc__reduce_n(out, one, 1, 3, XC_FLOAT32, XC_SUM);
    for (int i = 0; i < 3; i++) CHECK_U64(out[i], snan[i], "k=1 copy [%d]", i);
    xc__reduce_n(snan, one, 1, 3, XC_FLOAT32, XC_SUM); /* dst == src */
    CHECK_U64(snan[1], 0xff812345, "k=1 in place");
    const void *many[XC__REDUCE_MAX_K + 1];
    for (int j = 0; j <= XC__REDUCE_MAX_K; j++) many[j] = snan;
    memset(out, 0x5a, sizeof out);
    xc__reduce_n(out, many, 0, 3, XC_FLOAT32, XC_SUM);
    xc__reduce_n(out, many, -1, 3, XC_FLOAT32, XC_SUM);
    xc__reduce_n(out, many, XC__REDUCE_MAX_K + 1, 3, XC_FLOAT32, XC_SUM);
    xc__reduce_n(out, many, 2, 3, XC_FLOAT32, XC_BAND);
    for (int i = 0; i < 3; i++) CHECK_U64(out[i], 0x5a5a5a5a, "invalid k/pair wrote [%d]", i);
    /* k == 64: 64 copies of the same int32 values sum to 64x. */
    int32_t v[5] = {1, -3, INT32_MAX, 7, 0}, s64[5];
    for (int j = 0; j < XC__REDUCE_MAX_K; j++) many[j] = v;
    xc__reduce_n(s64, many, XC__REDUCE_MAX_K, 5, XC_INT32, XC_SUM);
    CHECK_I64(s64[0], 64);
    CHECK_I64(s64[1], -192);
    CHECK_I64(s64[2], -64); /* INT32_MAX * 64 wraps to -64 */
    for (int j = 0; j < XK; j++) free(src[j]);
    free(d);
}

/* The current level against the scalar one, bit for bit. */
enum { BIGN = 32771, PAD = 64 };
#define XC__POOL_BYTES ((size_t)BIGN * 8 + 3 * PAD)

/* One case: k sources at misaligned offsets (1..63 bytes past a 64-byte
 * boundary, kept a multiple of the element size as C requires), dst
 * distinct (variant 0) or equal to srcs[0] (1) or srcs[k-1] (2); both
 * results and the guard bytes around dst must be identical. */
static void compare_levels(int level, xc_dtype_t t, xc_op_t op, size_t n, int k,
                           unsigned variant, unsigned char *const *pool,
                           unsigned char *ref, unsigned char *got)
{
    size_t es = xc_dtype_size(t), span = 63 / es;
    const void *sr[XK], *sg[XK], *orig[XK];
    for (int j = 0; j < k; j++)
        orig[j] = sr[j] = sg[j] =
            pool[j] + PAD + es * (1 + (n + 5u * (unsigned)j + (unsigned)k) % span);
    size_t doff = PAD + es * (1 + (3 * n + (unsigned)k) % span);
    size_t total = doff + n * es + PAD;
    memset(ref, 0xa5, total);
    memset(got, 0xa5, total);
    unsigned char *dr = ref + doff, *dg = got + doff;
    if (variant != 0) {
        int j = variant == 1 ? 0 : k - 1;
        memcpy(dr, sr[j], n * es);
        memcpy(dg, sr[j], n * es);
        sr[j] = dr;
        sg[j] = dg;
    }
    xc__reduce_set_level(XC__SIMD_SCALAR);
    xc__reduce_n(dr, sr, k, n, t, op);
    xc__reduce_set_level(level);
    xc__reduce_n(dg, sg, k, n, t, op);
    for (size_t b = 0; b < total; b++) {
        if (ref[b] == got[b]) continue;
        if (b < doff || b >= doff + n * es) {
            FAIL("%s %s k=%d n=%zu variant %u: byte %ld from dst = 0x%02x, "
                 "expected untouched 0x%02x",
                 xc_dtype_name(t), xc_op_name(op), k, n, variant,
                 (long)b - (long)doff, got[b], ref[b]);
        } else {
            size_t i = (b - doff) / es;
            FAIL("%s %s k=%d n=%zu variant %u [%zu]: 0x%llx, scalar gives 0x%llx "
                 "(inputs 0x%llx 0x%llx 0x%llx ...)",
                 xc_dtype_name(t), xc_op_name(op), k, n, variant, i,
                 (unsigned long long)load_raw(t, dg, i),
                 (unsigned long long)load_raw(t, dr, i),
                 (unsigned long long)load_raw(t, orig[0], i),
                 (unsigned long long)(k > 1 ? load_raw(t, orig[1], i) : 0),
                 (unsigned long long)(k > 2 ? load_raw(t, orig[2], i) : 0));
        }
        return;
    }
    for (size_t b = 0; b < total; b++)
        if ((b < doff || b >= doff + n * es) && ref[b] != 0xa5) {
            FAIL("%s %s k=%d n=%zu: scalar wrote byte %ld from dst",
                 xc_dtype_name(t), xc_op_name(op), k, n, (long)b - (long)doff);
            return;
        }
}

static void test_levels_match(int level)
{
    static const size_t big[] = {1021, 4099, BIGN};
    static const int big_ks[] = {2, 3, 8, 16};
    unsigned char *pool[XK];
    for (int j = 0; j < XK; j++) pool[j] = xmalloc(XC__POOL_BYTES);
    unsigned char *ref = xmalloc(XC__POOL_BYTES), *got = xmalloc(XC__POOL_BYTES);
    for (int t = 0; t < XC_DTYPE_COUNT; t++) {
        xc_dtype_t dt = (xc_dtype_t)t;
        size_t es = xc_dtype_size(dt);
        for (int j = 0; j < XK; j++)
            for (size_t i = 0; i < XC__POOL_BYTES / es; i++)
                store_raw(dt, pool[j], i, gen_any(dt, clean_at(i)));
        for (int o = 0; o < XC_OP_COUNT; o++) {
            xc_op_t op = (xc_op_t)o;
            if (xc__reduce_check(dt, op) != XC_OK) continue;
            for (size_t n = 0; n <= 200; n++)
                for (size_t q = 0; q < sizeof g_ks / sizeof g_ks[0]; q++)
                    compare_levels(level, dt, op, n, g_ks[q],
                                   (unsigned)(n + (size_t)q) % 3, pool, ref, got);
            for (size_t c = 0; c < sizeof big / sizeof big[0]; c++)
                for (size_t q = 0; q < sizeof big_ks / sizeof big_ks[0]; q++)
                    compare_levels(level, dt, op, big[c], big_ks[q],
                                   (unsigned)(c + q) % 3, pool, ref, got);
        }
    }
    xc__reduce_set_level(level);
    for (int j = 0; j < XK; j++) free(pool[j]);
    free(ref);
    free(got);
}

/* Block converters at the current level against the scalar converters:
 * every 16-bit pattern widened, a spread of fp32 patterns (every exponent,
 * every fp16 tie, bf16 ties, random) narrowed, at misaligned addresses, and
 * every tail length with a guard after it. */
static void test_block_converters(void)
{
    enum { NH = 65536, NF = (1 << 20) + 3 * 0x7c00 };
    uint16_t *h = xmalloc((NH + 8) * 2), *h2 = xmalloc((NF + 8) * 2);
    float *f = xmalloc((NF + 8) * 4), *w = xmalloc((NH + 8) * 4);
    for (uint32_t i = 0; i < NH; i++) h[1 + i] = (uint16_t)i;
    xc__fp16_to_fp32_n(w + 3, h + 1, NH);
    for (uint32_t i = 0; i < NH; i++)
        if (fbits(w[3 + i]) != fbits(xc__fp16_to_fp32((uint16_t)i)))
            FAIL("fp16_to_fp32_n(0x%04x) = 0x%08x, scalar 0x%08x", i, fbits(w[3 + i]),
                 fbits(xc__fp16_to_fp32((uint16_t)i)));
    xc__bf16_to_fp32_n(w + 3, h + 1, NH);
    for (uint32_t i = 0; i < NH; i++)
        if (fbits(w[3 + i]) != fbits(xc__bf16_to_fp32((uint16_t)i)))
            FAIL("bf16_to_fp32_n(0x%04x) = 0x%08x, scalar 0x%08x", i, fbits(w[3 + i]),
                 fbits(xc__bf16_to_fp32((uint16_t)i)));

    size_t n = 0;
    for (uint32_t k = 0; k < 0x7c00; k++) { /* fp16 ties, both signs, and above */
        float mid = (float)((ref_fp16_value((uint16_t)k) +
                             ref_fp16_value((uint16_t)(k + 1))) / 2);
        f[1 + n++] = mid;
        f[1 + n++] = -mid;
        f[1 + n++] = nextafterf(mid, INFINITY);
    }
    for (uint32_t i = 0; i < (1u << 20); i++) /* stride, bf16 ties, random */
        f[1 + n++] = bitsf(i % 3 == 0   ? i * 4099u
                           : i % 3 == 1 ? ((uint32_t)rnd() & 0xffff0000u) | 0x8000u
                                        : (uint32_t)rnd());
    xc__fp32_to_fp16_n(h2 + 1, f + 1, n);
    for (size_t i = 0; i < n; i++)
        if (h2[1 + i] != xc__fp32_to_fp16(f[1 + i]))
            FAIL("fp32_to_fp16_n(0x%08x) = 0x%04x, scalar 0x%04x", fbits(f[1 + i]),
                 h2[1 + i], xc__fp32_to_fp16(f[1 + i]));
    xc__fp32_to_bf16_n(h2 + 1, f + 1, n);
    for (size_t i = 0; i < n; i++)
        if (h2[1 + i] != xc__fp32_to_bf16(f[1 + i]))
            FAIL("fp32_to_bf16_n(0x%08x) = 0x%04x, scalar 0x%04x", fbits(f[1 + i]),
                 h2[1 + i], xc__fp32_to_bf16(f[1 + i]));

    /* Tails: n = 0..40 from an odd start; nothing written past n. */
    for (size_t m = 0; m <= 40; m++) {
        for (int which = 0; which < 4; which++) {
            memset(h2, 0xa5, 64 * 2);
            memset(w, 0xa5, 64 * 4);
            if (which == 0) xc__fp32_to_fp16_n(h2 + 1, f + 5, m);
            if (which == 1) xc__fp32_to_bf16_n(h2 + 1, f + 5, m);
            if (which == 2) xc__fp16_to_fp32_n(w + 1, h + 7, m);
            if (which == 3) xc__bf16_to_fp32_n(w + 1, h + 7, m);
            for (size_t i = 0; i < m; i++) {
                uint64_t g = which < 2 ? h2[1 + i] : fbits(w[1 + i]);
                uint64_t e = which == 0   ? xc__fp32_to_fp16(f[5 + i])
                             : which == 1 ? xc__fp32_to_bf16(f[5 + i])
                             : which == 2 ? fbits(xc__fp16_to_fp32(h[7 + i]))
                                          : fbits(xc__bf16_to_fp32(h[7 + i]));
                CHECK_U64(g, e, "converter %d n=%zu [%zu]", which, m, i);
            }
            for (size_t i = m + 1; i < 40; i++) {
                uint64_t g = which < 2 ? h2[i] : fbits(w[i]);
                uint64_t e = which < 2 ? 0xa5a5u : 0xa5a5a5a5u;
                CHECK_U64(g, e, "converter %d n=%zu wrote past the end [%zu]", which, m, i);
            }
            uint64_t g0 = which < 2 ? h2[0] : fbits(w[0]);
            CHECK_U64(g0, which < 2 ? 0xa5a5u : 0xa5a5a5a5u,
                      "converter %d n=%zu wrote before the start", which, m);
        }
    }
    free(h);
    free(h2);
    free(f);
    free(w);
}

int main(void)
{
    test_names();
    test_check();
    test_level_api();
    test_conversions();
    /* Every kernel check at every level; SIMD levels also against scalar. */
    for (int l = 0; l < XC__SIMD_COUNT; l++) {
        g_level = xc__reduce_level_name(l);
        int got = xc__reduce_set_level(l);
        if (got != l) {
            printf("test_reduce: level %s skipped: this CPU does not support it\n",
                   g_level);
            continue;
        }
        test_block_converters();
        test_int_edges();
        test_float_minmax();
        test_minmax_daz();
        test_reduce_many();
        test_half_sums();
        test_avg();
        test_kernels();
        test_reduce_n_ref();
        if (l != XC__SIMD_SCALAR) test_levels_match(l);
        printf("test_reduce: level %s checked\n", g_level);
    }
    xc__reduce_set_level(XC__SIMD_DEFAULT);
    if (g_failures) {
        fprintf(stderr, "test_reduce: %d failure(s)\n", g_failures);
        return 1;
    }
    printf("test_reduce: all passed\n");
    return 0;
}
