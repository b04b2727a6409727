/*
 * test_copy.c -- the library's copy of message bytes (src/core/copy.h):
 * xc__copy copies exactly the bytes asked, none before or after, at every
 * distance of the destination from the source within a 64-byte line and
 * at the lengths around the vector loop's bounds (both sides of each);
 * the loop is taken exactly where the destination is off the source's
 * place in a line and the length within the bounds; xc__move keeps
 * memmove's contract where the two overlap, either way round.
 */
#include "expect.h"
#include "core/copy.h"

#include <stdint.h>
#include <stdlib.h>

#define GUARD 64

/* A copy of `n` bytes to a destination `doff` bytes past a line and a
 * source `soff` bytes past one. */
static void check_copy(size_t n, size_t doff, size_t soff)
{
    /* GCC 12 otherwise warns of a memcpy bound of 2^64 - 256 on a path
     * that cannot run (cap = n + 256 wrapped). */
    if (n > ((size_t)1 << 30)) return;
    size_t cap = n + 2 * GUARD + 128;
    unsigned char *src = malloc(cap), *dst = malloc(cap);
    if (!src || !dst) {
        EXPECT(0, "out of memory");
        free(src);
        free(dst);
        return;
    }
    for (size_t i = 0; i < cap; i++) src[i] = (unsigned char)(i * 131 + 7), dst[i] = 0xAA;
    /* each at its distance past a 64-byte boundary */
    unsigned char *d = dst + GUARD - ((uintptr_t)dst & 63) + doff;
    const unsigned char *s = src + GUARD - ((uintptr_t)src & 63) + soff;
    xc__copy(d, s, n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += d[i] != s[i];
    EXPECT(bad == 0, "n=%zu dst+%zu src+%zu: %zu bytes differ", n, doff, soff, bad);
    for (unsigned char *p = dst; p < d; p++)
        if (*p != 0xAA) {
            EXPECT(0, "n=%zu dst+%zu src+%zu: byte %td before the copy written", n, doff, soff,
                   d - p);
            break;
        }
    for (unsigned char *p = d + n; p < dst + cap; p++)
        if (*p != 0xAA) {
            EXPECT(0, "n=%zu dst+%zu src+%zu: byte %td after the copy written", n, doff, soff,
                   p - (d + n));
            break;
        }
    free(src);
    free(dst);
}

static void copies(void)
{
    const size_t lens[] = {0,
                           1,
                           63,
                           XC__COPY_LOOP_MIN - 1,
                           XC__COPY_LOOP_MIN,
                           XC__COPY_LOOP_MIN + 1,
                           XC__COPY_LOOP_MIN + 127,
                           4096 + 13,
                           65536 + 5,
                           XC__COPY_LOOP_MAX,
                           XC__COPY_LOOP_MAX + 1};
    const size_t soffs[] = {0, 5, 32};
    for (size_t i = 0; i < sizeof lens / sizeof *lens; i++)
        for (size_t k = 0; k < sizeof soffs / sizeof *soffs; k++)
            for (size_t doff = 0; doff < 64; doff += lens[i] > 65536 ? 7 : 1)
                check_copy(lens[i], doff, soffs[k]);
}

/* Where the loop is taken: within the bounds, destination off the
 * source's place in a line (either way round). */
static void choice(void)
{
    static char buf[4 << 20];
    char *a = (char *)(((uintptr_t)buf + 63) & ~(uintptr_t)63);
    EXPECT(!xc__copy_shifted(a + 4096, a, 8192), "same place in a line: glibc's memcpy");
    EXPECT(!xc__copy_shifted(a + 4096 + 16, a + 16, 8192), "both 16 past a line: glibc's");
    EXPECT(xc__copy_shifted(a + 4096 + 16, a, 8192), "16 past the source's place: the loop");
    EXPECT(xc__copy_shifted(a + 4096, a + 4, 8192), "4 before the source's place: the loop");
    EXPECT(xc__copy_shifted(a + 4096 + 4, a, XC__COPY_LOOP_MIN), "the loop from its minimum");
    EXPECT(!xc__copy_shifted(a + 4096 + 4, a, XC__COPY_LOOP_MIN - 1), "not below it");
    EXPECT(xc__copy_shifted(a + (2 << 20) + 4, a, XC__COPY_LOOP_MAX), "the loop to its maximum");
    EXPECT(!xc__copy_shifted(a + (2 << 20) + 4, a, XC__COPY_LOOP_MAX + 1), "not above it");
}

/* xc__move over overlapping ranges, forward and backward, and disjoint. */
static void moves(void)
{
    const size_t n = 3 * XC__COPY_LOOP_MIN + 11;
    unsigned char *buf = malloc(2 * n + 256), *want = malloc(2 * n + 256);
    if (!buf || !want) {
        EXPECT(0, "out of memory");
        free(buf);
        free(want);
        return;
    }
    const long shifts[] = {-100, -3, 3, 17, 100, (long)n + 40};
    for (size_t i = 0; i < sizeof shifts / sizeof *shifts; i++) {
        for (size_t j = 0; j < 2 * n + 256; j++) buf[j] = (unsigned char)(j * 31 + 1);
        memcpy(want, buf, 2 * n + 256);
        size_t from = 120, to = (size_t)((long)from + shifts[i]);
        memmove(want + to, want + from, n);
        xc__move(buf + to, buf + from, n);
        EXPECT(memcmp(buf, want, 2 * n + 256) == 0, "move of %zu bytes by %ld differs from memmove",
               n, shifts[i]);
    }
    free(buf);
    free(want);
}

int main(void)
{
    copies();
    choice();
    moves();
    if (failures) fprintf(stderr, "test_copy: %d failures\n", failures);
    else printf("test_copy: ok\n");
    return failures ? 1 : 0;
}
