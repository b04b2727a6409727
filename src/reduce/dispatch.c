/*
 * dispatch.c -- which SIMD level the reduction kernels and block
 * converters run at, chosen once at first use.
 *
 * The default level is the best one the CPU supports (each level file
 * checks the CPU itself and returns NULL when it cannot run), lowered by
 * XCOLL_SIMD=scalar|avx2|avx512|avx512fp16 when that is set.  XCOLL_SIMD
 * asking for a level the CPU lacks is not an error: the best supported
 * level below it is used, so one job script runs everywhere, and
 * tests/benchmarks can iterate over levels without probing the CPU first.  An unknown value is ignored
 * (logged at WARN when XCOLL_DEBUG asks for it; the library never prints).
 *
 * Invariant: g_impl is NULL or points at one of the constant level tables,
 * which are static data initialised before any code runs; every level gives
 * the same bits, so a thread that briefly uses a stale table after
 * xc__reduce_set_level computes the same results.
 */
#include "kernels.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Relaxed loads and stores suffice: the pointee is constant data that
 * exists before the pointer is ever stored, so nothing else needs to be
 * published with the pointer.  Two threads racing through the first use
 * both compute and store the same value. */
static _Atomic(const xc__reduce_impl_t *) g_impl;

static const char *const level_names[XC__SIMD_COUNT] = {
    [XC__SIMD_SCALAR] = "scalar",
    [XC__SIMD_AVX2] = "avx2",
    [XC__SIMD_AVX512] = "avx512",
    [XC__SIMD_AVX512FP16] = "avx512fp16",
};

const char *xc__reduce_level_name(int level)
{
    return level >= 0 && level < XC__SIMD_COUNT ? level_names[level]
                                                : "invalid";
}

/* The table of `level`, or NULL when this build or CPU cannot run it. */
static const xc__reduce_impl_t *table_of(int level)
{
    switch (level) {
    case XC__SIMD_AVX512FP16: return xc__reduce_avx512fp16();
    case XC__SIMD_AVX512: return xc__reduce_avx512();
    case XC__SIMD_AVX2: return xc__reduce_avx2();
    case XC__SIMD_SCALAR: return &xc__reduce_scalar;
    default: return NULL;
    }
}

/* The best level <= `level` this CPU runs (scalar always does). */
static int supported_at_most(int level)
{
    for (; level > XC__SIMD_SCALAR; level--)
        if (table_of(level) != NULL) return level;
    return XC__SIMD_SCALAR;
}

static int default_level(void)
{
    int want = XC__SIMD_COUNT - 1;
    const char *s = getenv("XCOLL_SIMD");
    if (s != NULL && *s != '\0') {
        int found = -1;
        for (int l = 0; l < XC__SIMD_COUNT; l++)
            if (strcmp(s, level_names[l]) == 0) found = l;
        if (found >= 0)
            want = found;
        else
            XC_WARN("XCOLL_SIMD=\"%s\" is not scalar, avx2, avx512 or avx512fp16; "
                    "using the best level this CPU supports", s);
    }
    return supported_at_most(want);
}

int xc__reduce_set_level(int level)
{
    if (level < 0)
        level = default_level();
    else
        level = supported_at_most(XC__MIN(level, XC__SIMD_COUNT - 1));
    atomic_store_explicit(&g_impl, table_of(level), memory_order_relaxed);
    return level;
}

const xc__reduce_impl_t *xc__reduce_impl(void)
{
    const xc__reduce_impl_t *t =
        atomic_load_explicit(&g_impl, memory_order_relaxed);
    if (XC__LIKELY(t != NULL)) return t;
    xc__reduce_set_level(XC__SIMD_DEFAULT);
    return atomic_load_explicit(&g_impl, memory_order_relaxed);
}

int xc__reduce_level(void)
{
    const xc__reduce_impl_t *t = xc__reduce_impl();
    for (int l = XC__SIMD_COUNT - 1; l > XC__SIMD_SCALAR; l--)
        if (t == table_of(l)) return l;
    return XC__SIMD_SCALAR;
}

/* Block converters at the current level. */
void xc__fp16_to_fp32_n(float *restrict dst, const uint16_t *restrict src,
                        size_t n)
{
    xc__reduce_impl()->fp16_to_fp32(dst, src, n);
}

void xc__fp32_to_fp16_n(uint16_t *restrict dst, const float *restrict src,
                        size_t n)
{
    xc__reduce_impl()->fp32_to_fp16(dst, src, n);
}

void xc__bf16_to_fp32_n(float *restrict dst, const uint16_t *restrict src,
                        size_t n)
{
    xc__reduce_impl()->bf16_to_fp32(dst, src, n);
}

void xc__fp32_to_bf16_n(uint16_t *restrict dst, const float *restrict src,
                        size_t n)
{
    xc__reduce_impl()->fp32_to_bf16(dst, src, n);
}
