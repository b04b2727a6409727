/*
 * test_mem_share.c -- xc_mem_alloc_shared and the mapping of shared blocks
 * (src/core/mem_share.c), with this process as its own peer (pidfd_getfd
 * of one's own descriptors works as of another process's):
 *   - a shared block is 2 MiB-aligned, zero-filled, writable, freed by
 *     xc_mem_free (once; a second free is refused);
 *   - xc__share_copy reads and writes any range inside a listed block
 *     through a mapping, byte-exact, and declines ranges outside or across
 *     a block's end, a wrong nonce, a missing table;
 *   - a block freed and another allocated (perhaps at the same address):
 *     the copy sees the new block, never the stale mapping;
 *   - more blocks than a peer view keeps mapped (8), in turn: all right;
 *   - xc__peer_xfer falls back to process_vm_readv / _writev for memory
 *     that is not shared;
 *   - a forked child inherits neither the blocks nor the table, and makes
 *     a table of its own (another nonce).
 * Where the kernel lacks memfd or pidfd_getfd (before 5.6) the mapping
 * checks are skipped with a note.
 */
#include "../../src/core/mem_share.h"
#include "xcoll.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "expect.h"

#define MIB ((size_t)1 << 20)

/* Is [p, p + 1) in one of this process's mappings? */
static int mapped(const void *p)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    int in = 0;
    while (f && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && (uintptr_t)p >= lo && (uintptr_t)p < hi)
            in = 1;
    }
    if (f) fclose(f);
    return in;
}

static void fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(seed * 31 + i * 7 + (i >> 9));
}

static int same(const unsigned char *p, size_t n, unsigned seed, size_t from)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(seed * 31 + (i + from) * 7 + ((i + from) >> 9))) return 0;
    return 1;
}

int main(void)
{
    pid_t me = getpid();
    int tfd = -1;
    uint64_t nonce = 0;
    if (xc__share_table(&tfd, &nonce) != 0) {
        printf("test_mem_share: note: no memfd here: skipped\n");
        return 0;
    }
    EXPECT(tfd >= 0 && nonce != 0, "table %d nonce %llu", tfd, (unsigned long long)nonce);

    /* The block itself. */
    unsigned char *a = NULL;
    EXPECT(xc_mem_alloc_shared(0, (void **)&a) == XC_ERR_INVALID && a == NULL, "0 bytes");
    EXPECT(xc_mem_alloc_shared(64, NULL) == XC_ERR_INVALID, "NULL ptr");
    size_t na = 3 * MIB + 123;
    EXPECT(xc_mem_alloc_shared(na, (void **)&a) == XC_OK && a, "alloc: %s", xc_last_error());
    if (!a) return 1;
    EXPECT(((uintptr_t)a & (2 * MIB - 1)) == 0, "block %p not 2 MiB-aligned", (void *)a);
    int zero = 1;
    for (size_t i = 0; i < na; i++) zero &= a[i] == 0;
    EXPECT(zero, "block not zero-filled");
    fill(a, na, 1);
    EXPECT(xc_mem_page_size(a) > 0, "page size of a shared block");

    /* Reads through the mapping: whole, odd pieces, the last byte. */
    unsigned char *buf = malloc(na);
    int can = buf && xc__share_copy(me, tfd, nonce, buf, (uintptr_t)a, na, 0);
    if (!can) {
        printf("test_mem_share: note: blocks cannot be mapped here (pidfd_getfd: %s): the "
               "mapping checks are skipped\n", strerror(errno));
    } else {
        EXPECT(same(buf, na, 1, 0), "whole block read wrong");
        memset(buf, 0, na);
        EXPECT(xc__share_copy(me, tfd, nonce, buf, (uintptr_t)a + 4093, 70001, 0) == 1 &&
                   same(buf, 70001, 1, 4093), "odd piece read wrong");
        EXPECT(xc__share_copy(me, tfd, nonce, buf, (uintptr_t)a + na - 1, 1, 0) == 1 &&
                   same(buf, 1, 1, na - 1), "last byte");
        /* A write lands in the block. */
        fill(buf, 5000, 9);
        EXPECT(xc__share_copy(me, tfd, nonce, buf, (uintptr_t)a + 777, 5000, 1) == 1, "write");
        EXPECT(same(a + 777, 5000, 9, 0), "written bytes not in the block");
        EXPECT(same(a, 777, 1, 0) && same(a + 5777, na - 5777, 1, 5777),
               "a write touched bytes around it");
        fill(a, na, 1);
        /* Declined: past the end (the block is rounded to 4 MiB: past that),
         * across the end, before it, a wrong nonce, no table. */
        size_t rounded = 4 * MIB;
        EXPECT(xc__share_copy(me, tfd, nonce, buf, (uintptr_t)a + rounded - 10, 20, 0) == 0,
               "a range across the block's end taken");
        EXPECT(xc__share_copy(me, tfd, nonce, buf, (uintptr_t)a - 4096, 16, 0) == 0,
               "a range before the block taken");
        EXPECT(xc__share_copy(me, tfd, nonce ^ 2, buf, (uintptr_t)a, 16, 0) == 0,
               "a wrong nonce taken");
        EXPECT(xc__share_copy(me, -1, nonce, buf, (uintptr_t)a, 16, 0) == 0, "no table taken");
    }

    /* Freed, then a new block (maybe at the same address): the new bytes. */
    EXPECT(xc_mem_free(a) == XC_OK, "free");
    EXPECT(xc_mem_free(a) == XC_ERR_INVALID, "double free accepted");
    if (can) {
        EXPECT(xc__share_copy(me, tfd, nonce, buf, (uintptr_t)a, 16, 0) == 0,
               "a freed block still copied");
        unsigned char *b = NULL;
        EXPECT(xc_mem_alloc_shared(na, (void **)&b) == XC_OK && b, "realloc");
        if (b) {
            fill(b, na, 2);
            memset(buf, 0, na);
            EXPECT(xc__share_copy(me, tfd, nonce, buf, (uintptr_t)b, na, 0) == 1 &&
                       same(buf, na, 2, 0),
                   "new block at %s address read wrong (stale mapping?)",
                   b == a ? "the same" : "another");
            xc_mem_free(b);
        }

        /* 12 blocks, each read twice in turn: the view keeps 8 mapped. */
        enum { NB = 12 };
        unsigned char *many[NB];
        for (int i = 0; i < NB; i++) {
            many[i] = NULL;
            EXPECT(xc_mem_alloc_shared(64 * 1024 + (size_t)i, (void **)&many[i]) == XC_OK,
                   "alloc %d", i);
            if (many[i]) fill(many[i], 64 * 1024, 10 + (unsigned)i);
        }
        for (int round = 0; round < 2; round++)
            for (int i = 0; i < NB; i++) {
                if (!many[i]) continue;
                memset(buf, 0, 64 * 1024);
                EXPECT(xc__share_copy(me, tfd, nonce, buf, (uintptr_t)many[i], 64 * 1024, 0) == 1 &&
                           same(buf, 64 * 1024, 10 + (unsigned)i, 0),
                       "block %d, round %d", i, round);
            }
        for (int i = 0; i < NB; i++) xc_mem_free(many[i]);
    }

    /* Not shared: process_vm_readv / _writev (of oneself). */
    unsigned char *priv = malloc(100000), *out = malloc(100000);
    if (priv && out) {
        fill(priv, 100000, 3);
        EXPECT(xc__share_copy(me, tfd, nonce, out, (uintptr_t)priv, 100000, 0) == 0,
               "private memory taken as shared");
        EXPECT(xc__peer_xfer(me, tfd, nonce, out, (uintptr_t)priv, 100000, 0) == 0 &&
                   same(out, 100000, 3, 0), "single-copy read of private memory");
        fill(out, 1000, 4);
        EXPECT(xc__peer_xfer(me, tfd, nonce, out, (uintptr_t)priv + 5, 1000, 1) == 0 &&
                   same(priv + 5, 1000, 4, 0), "single-copy write of private memory");
    }
    free(priv);
    free(out);

    /* fork: the child has neither the block nor the table's mapping, and a
     * table of its own; the parent's cached mapping of the block (made
     * just before) is not used there: the child's copy either maps the
     * block afresh (right bytes) or declines. */
    unsigned char *c = NULL;
    EXPECT(xc_mem_alloc_shared(MIB, (void **)&c) == XC_OK && c, "alloc for fork");
    if (c) {
        c[0] = 42;
        unsigned char got = 0;
        if (can)
            EXPECT(xc__share_copy(me, tfd, nonce, &got, (uintptr_t)c, 1, 0) == 1 && got == 42,
                   "parent's copy");
        pid_t child = fork();
        if (child == 0) {
            int bad = 0;
            if (mapped(c)) bad |= 1;
            got = 0;
            int r = xc__share_copy(me, tfd, nonce, &got, (uintptr_t)c, 1, 0);
            if (r == 1 && got != 42) bad |= 4;
            int cfd = -1;
            uint64_t cn = 0;
            if (xc__share_table(&cfd, &cn) != 0 || cn == nonce) bad |= 2;
            _exit(bad);
        }
        int st = 0;
        EXPECT(child > 0 && waitpid(child, &st, 0) == child, "fork/wait");
        EXPECT(WIFEXITED(st) && WEXITSTATUS(st) == 0,
               "child: status %d: %s%s%s", st,
               WEXITSTATUS(st) & 1 ? "inherited the shared block; " : "",
               WEXITSTATUS(st) & 2 ? "reused its parent's table; " : "",
               WEXITSTATUS(st) & 4 ? "copied wrong bytes" : "");
        EXPECT(c[0] == 42, "parent's block changed");
        xc_mem_free(c);
    }
    free(buf);
    printf("test_mem_share: %s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
