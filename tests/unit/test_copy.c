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
#include "guarded_copy.h"

#include <stdint.h>
#include <stdlib.h>

/* xc__copy as guarded_copy calls it. */
static void copy_fn(void *dst, const void *src, size_t n, int arg)
{
    (void)arg;
    xc__copy(dst, src, n);
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
                guarded_copy("xc__copy", copy_fn, 0, lens[i], doff, soffs[k]);
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
