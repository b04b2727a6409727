/*
 * guarded_copy.h -- the unit tests' check of a copy routine: `n` bytes
 * from a source `soff` bytes past a 64-byte line to a destination `doff`
 * bytes past one, with guard bytes on both sides; every byte copied, none
 * before or after written (test_copy.c, test_wcopy.c).  Include after
 * expect.h.
 */
#ifndef XCOLL_TEST_GUARDED_COPY_H
#define XCOLL_TEST_GUARDED_COPY_H

#include <stdint.h>
#include <stdlib.h>

#define GC_GUARD 64

/* The routine under test; `arg` is passed through (a mode, or unused). */
typedef void (*gc_copy_fn)(void *dst, const void *src, size_t n, int arg);

static void guarded_copy(const char *what, gc_copy_fn fn, int arg, size_t n, size_t doff,
                         size_t soff)
{
    /* GCC 12 otherwise warns of a memcpy bound of 2^64 - 256 on a path
     * that cannot run (cap = n + 256 wrapped). */
    if (n > ((size_t)1 << 30)) return;
    size_t cap = n + 2 * GC_GUARD + 128;
    unsigned char *src = malloc(cap), *dst = malloc(cap);
    if (!src || !dst) {
        EXPECT(0, "out of memory");
        free(src);
        free(dst);
        return;
    }
    for (size_t i = 0; i < cap; i++) src[i] = (unsigned char)(i * 131 + 7), dst[i] = 0xAA;
    unsigned char *d = dst + GC_GUARD - ((uintptr_t)dst & 63) + doff;
    const unsigned char *s = src + GC_GUARD - ((uintptr_t)src & 63) + soff;
    fn(d, s, n, arg);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += d[i] != s[i];
    EXPECT(bad == 0, "%s n=%zu dst+%zu src+%zu: %zu bytes differ", what, n, doff, soff, bad);
    for (unsigned char *p = dst; p < d; p++)
        if (*p != 0xAA) {
            EXPECT(0, "%s n=%zu dst+%zu src+%zu: byte %td before the copy written", what, n, doff,
                   soff, d - p);
            break;
        }
    for (unsigned char *p = d + n; p < dst + cap; p++)
        if (*p != 0xAA) {
            EXPECT(0, "%s n=%zu dst+%zu src+%zu: byte %td after the copy written", what, n, doff,
                   soff, p - (d + n));
            break;
        }
    free(src);
    free(dst);
}

#endif
