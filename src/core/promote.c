/*
 * promote.c -- huge pages for the buffers that peers copy single copy.
 *
 * A peer's process_vm_readv (or _writev) of a buffer pins and copies it
 * one page at a time; on ordinary 4 KiB pages that is most of its cost.
 * Two processes exchanging N bytes by one process_vm_readv each
 * (bench/anchors/duplex.c, AMD EPYC VM): 4 MiB 186-236 us on ordinary
 * pages, 97-106 with the source on huge pages, 135-137 with half of it
 * collapsed; 16 MiB 1.50-1.79 ms, 0.74-0.77, 0.75-0.84 with 14 of its 16
 * MiB collapsed (bench/RESULTS.md, thirty-third session).  xc_mem_alloc
 * gives huge pages to buffers made for communication; this gives them to
 * the rest -- a training loop's buffers, used step after step -- at the
 * cost of one collapse: MADV_COLLAPSE (Linux 6.1) copies each 2 MiB into
 * a fresh huge page, 0.17-0.25 ms per 2 MiB here, up to ~1.5 ms when the
 * kernel must compact memory first.  So a range is collapsed only when it
 * comes back: on its `after`-th publication (XCOLL_SHM_PROMOTE, 4 by
 * default), never for a buffer used once or twice.
 *
 * The 2 MiB pages the buffer covers are collapsed: those wholly inside it,
 * and a page it shares with other memory at either end when it holds at
 * least 64 KiB of the buffer (PART), all but an eighth of the page is
 * resident (mincore) and the page lies inside the mapping that holds the
 * buffer (/proc/self/maps) -- so a collapse populates at most 256 KiB per
 * end page (a posix_memalign'd buffer leaves an untouched page before it)
 * and mostly rearranges what the process already has, touches no other
 * mapping, and costs (a 2 MiB copy) within 32x the bytes it speeds up.
 * Each page is collapsed by a call of its own: a refusal costs only its
 * page.  A collapse keeps every byte, so the owner of the memory around
 * the buffer sees nothing.
 * That is what lets a malloc'd buffer of 64 KiB-2 MiB -- which never holds
 * a whole huge page -- be read at huge-page speed: a 2-rank exchange of
 * 256 KiB / 1 MiB / 2 MiB by one process_vm_readv each, 14 / 49-76 /
 * 106-115 us from ordinary pages, 8.8 / 33 / 64 from huge pages
 * (bench/RESULTS.md, thirty-fourth session).  The contents stay as they
 * were (the kernel copies under its own locks, as khugepaged does); the
 * owner collapses before it publishes the address, when no peer is
 * reading it (the single-copy paths wait for their readers before they
 * return).  Refusals -- a kernel before 6.1 or THP off (EINVAL), pages
 * not yet touched (EINVAL), pinned or shared pages (EAGAIN), no huge page
 * to be had (ENOMEM) -- leave the range as it was and it is not retried.
 *
 * The buffers seen (address and length) are kept in a small table (64,
 * least recently published out) under a mutex: one lock per single-copy
 * publication, next to copies of 64 KiB and more.  A buffer freed and
 * allocated anew at the same address with the same length keeps its
 * "done" mark: not collapsed again (a hint lost, no harm) -- and its
 * "huge" mark (xc__promoted: peers may then read ordinary pages single
 * copy where staging would have been faster; never wrong).  A different
 * buffer over the same huge pages is an entry of its own.
 */
#include "promote.h"

#include <errno.h>
#include <stdio.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

#define HUGE ((uintptr_t)XC__HUGE_PAGE)
#define SLOTS 64
/* A page the buffer shares with other memory is collapsed for no less of
 * the buffer than this. */
#define PART ((uintptr_t)64 << 10)

typedef struct {
    uintptr_t b, e;   /* the buffer [b, e); e == 0: empty */
    uint64_t last;    /* clock of the last publication */
    int uses;         /* publications so far (until done) */
    int done;         /* collapsed, or tried */
    int huge;         /* collapsed: most of the range on huge pages */
} range_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static range_t tab[SLOTS];
static uint64_t clk;

/* The entry of the buffer [b, e), or NULL.  Keyed by the buffer itself,
 * not by the huge pages it covers: another buffer over the same pages --
 * one freed and a different one mapped there -- is a range of its own (it
 * once found the first one's "done" and was never collapsed;
 * test_fast_switch, forty-ninth session). */
static range_t *find(uintptr_t b, uintptr_t e)
{
    for (int i = 0; i < SLOTS; i++)
        if (tab[i].b == b && tab[i].e == e) return &tab[i];
    return NULL;
}

/* The entry of [b, e): found, or the empty / least recent one reset. */
static range_t *lookup(uintptr_t b, uintptr_t e)
{
    range_t *r = find(b, e), *old = &tab[0];
    if (r) return r;
    for (int i = 1; i < SLOTS; i++)
        if (tab[i].last < old->last) old = &tab[i];
    *old = (range_t){.b = b, .e = e};
    return old;
}

/* Whether the huge page at lo is mapped and all but an eighth of its small
 * pages are resident (a collapse populates the rest: 256 KiB at most). */
static int resident(uintptr_t lo)
{
    long small = sysconf(_SC_PAGESIZE);
    unsigned char vec[HUGE / 4096];
    size_t n = HUGE / (small > 0 ? (size_t)small : 4096);
    if (n > sizeof vec || mincore((void *)lo, HUGE, vec) != 0) return 0;
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += vec[i] & 1;
    return c >= n - n / 8;
}

/* Whether the huge page at `page` lies inside the one mapping that holds
 * `at` (/proc/self/maps): the kernel collapses a page only inside one
 * mapping, and the memory a buffer shares a page with must be of its own
 * mapping -- not a neighbour with other flags that happens to allow it. */
static int in_mapping_of(uintptr_t page, uintptr_t at)
{
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f) return 0;
    char line[256];
    int in = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && at >= lo && at < hi) {
            in = page >= lo && page + HUGE <= hi;
            break;
        }
    }
    fclose(f);
    return in;
}

/* Collapses the kernel refused for want of a huge page (ENOMEM) or with
 * pages busy (EAGAIN): the machine's refusals, not promotion's choices. */
static unsigned long short_count;

unsigned long xc__promote_refusals(void) { return __atomic_load_n(&short_count, __ATOMIC_RELAXED); }

/* Collapse the huge page at lo; 1 if the kernel did (or found it done). */
static int collapse(uintptr_t lo)
{
    if (madvise((void *)lo, HUGE, MADV_COLLAPSE) == 0) return 1;
    if (errno == ENOMEM || errno == EAGAIN) __atomic_add_fetch(&short_count, 1, __ATOMIC_RELAXED);
    XC_TRACE("promote: MADV_COLLAPSE of %zu KiB at %p refused (%s): ordinary pages kept",
             (size_t)(HUGE >> 10), (void *)lo, strerror(errno));
    return 0;
}

/* A page the buffer [b, e) shares with other memory: worth collapsing
 * (64 KiB of the buffer in it), harmless (resident: nothing populated) and
 * the buffer's own mapping's. */
static int end_page_ok(uintptr_t page, uintptr_t b, uintptr_t e)
{
    uintptr_t from = page > b ? page : b, to = page + HUGE < e ? page + HUGE : e;
    return to - from >= PART && resident(page) && in_mapping_of(page, from);
}

void xc__promote(const void *buf, size_t len, int after)
{
    if (after <= 0 || !buf || len < PART) return;
    uintptr_t b = (uintptr_t)buf, e = b + len;
    uintptr_t lo = b & ~(HUGE - 1), hi = (e + HUGE - 1) & ~(HUGE - 1);
    pthread_mutex_lock(&mu);
    range_t *r = lookup(b, e);
    r->last = ++clk;
    int go = !r->done && ++r->uses >= after;
    if (go) r->done = 1;
    pthread_mutex_unlock(&mu);
    if (!go) return;
    uint64_t t0 = xc__now_ns();
    /* The whole pages inside, then each end page the buffer shares with
     * other memory, each page by a call of its own (one refusal must not
     * cost the rest, and `got` counts what the kernel did: bytes of the
     * buffer now on huge pages). */
    uintptr_t ilo = (b + HUGE - 1) & ~(HUGE - 1), ihi = e & ~(HUGE - 1);
    size_t got = 0;
    for (uintptr_t pg = ilo; pg < ihi; pg += HUGE)
        if (collapse(pg)) got += HUGE;
    if (b > lo && end_page_ok(lo, b, e) && collapse(lo))
        got += (lo + HUGE < e ? lo + HUGE : e) - b;
    /* (A buffer inside one page that starts past its boundary was that
     * page's first end already.) */
    if (e < hi && (hi - HUGE > lo || b == lo) && end_page_ok(hi - HUGE, b, e) &&
        collapse(hi - HUGE))
        got += e - (hi - HUGE > b ? hi - HUGE : b);
    XC_TRACE("promote: %zu of %zu KiB at %p on huge pages (%.0f us)", got >> 10, len >> 10, buf,
             (double)(xc__now_ns() - t0) / 1e3);
    /* Most of the range on huge pages: what xc__promoted reports. */
    if (2 * got >= len) {
        pthread_mutex_lock(&mu);
        range_t *r2 = find(b, e); /* still in the table */
        if (r2) r2->huge = 1;
        pthread_mutex_unlock(&mu);
    }
}

int xc__promoted(const void *buf, size_t len)
{
    if (!buf || len < PART) return 0;
    uintptr_t b = (uintptr_t)buf, e = b + len;
    pthread_mutex_lock(&mu);
    const range_t *r = find(b, e);
    int huge = r && r->huge;
    pthread_mutex_unlock(&mu);
    return huge;
}
