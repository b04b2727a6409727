/*
 * mem.c -- xc_mem_alloc / xc_mem_free: memory for communication buffers.
 *
 * A block is its own anonymous mapping, started on a 2 MiB boundary (map
 * 2 MiB more than asked, unmap the slack on both sides) and, from 1 MiB
 * up, rounded to whole 2 MiB pages and marked MADV_HUGEPAGE, so that with
 * THP in "madvise" mode (Debian's default) the kernel backs it with huge
 * pages on first touch.  Why it matters (docs/cost-model.md, "Cold
 * calls"): process_vm_readv pins and walks every page of the peer's buffer,
 * and a collective after compute pays a TLB miss per page; on huge pages
 * a 1 MiB buffer is one page instead of 256.
 *
 * Blocks are kept in a list under a mutex (free needs the length, and a
 * pointer not ours must be refused, not unmapped); a process holds a few
 * communication buffers, so a list is enough.
 */
#include "common.h"
#include "config.h"
#include "mem_share.h"
#include "promote.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>


typedef struct mem_block {
    void *p;
    size_t len;
    int fd; /* xc_mem_alloc_shared: its memfd; -1 */
    struct mem_block *next;
} mem_block_t;

static pthread_mutex_t mem_mu = PTHREAD_MUTEX_INITIALIZER;
static mem_block_t *mem_head;

/* A block of `bytes`, 2 MiB-aligned: private anonymous memory, or with
 * `shared` a memfd mapped MAP_SHARED that node peers can map too
 * (mem_share.c). */
static xc_result_t mem_alloc(size_t bytes, void **ptr, int shared, const char *what)
{
    if (!ptr) return xc__err(XC_ERR_INVALID, "%s: ptr is NULL", what);
    *ptr = NULL;
    if (bytes == 0) return xc__err(XC_ERR_INVALID, "%s: 0 bytes asked", what);
    long want = 1; /* XCOLL_HUGEPAGES */
    XC_CHECK(xc__env_int("XCOLL_HUGEPAGES", 0, 1, &want));
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (bytes > SIZE_MAX / 2 - 2 * XC__HUGE_PAGE)
        return xc__err(XC_ERR_NOMEM, "%s: %zu bytes is more than can be mapped", what, bytes);
    int huge = want && bytes >= XC__HUGE_PAGE / 2;
    size_t unit = huge ? XC__HUGE_PAGE : page;
    size_t len = (bytes + unit - 1) / unit * unit;
    mem_block_t *b = malloc(sizeof *b);
    if (!b) return xc__err(XC_ERR_NOMEM, "%s: out of memory for the block's record", what);
    int fd = -1;
    if (shared) {
        fd = memfd_create("xcoll-mem", MFD_CLOEXEC);
        if (fd < 0 || ftruncate(fd, (off_t)len) != 0) {
            int e = errno;
            if (fd >= 0) close(fd);
            free(b);
            return xc__err(e == ENOMEM || e == ENOSPC ? XC_ERR_NOMEM : XC_ERR_SYSTEM,
                           "%s: a shared-memory file of %zu bytes: %s", what, len, strerror(e));
        }
    }
    /* Reserve 2 MiB more than the block, place it on a boundary, give the
     * slack back on both sides. */
    size_t span = len + XC__HUGE_PAGE;
    char *map = mmap(NULL, span, shared ? PROT_NONE : PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | (shared ? MAP_NORESERVE : 0), -1, 0);
    char *p = map == MAP_FAILED ? NULL
                                : (char *)(((uintptr_t)map + XC__HUGE_PAGE - 1) &
                                           ~(uintptr_t)(XC__HUGE_PAGE - 1));
    if (p && shared &&
        mmap(p, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
        munmap(map, span);
        p = NULL;
    }
    if (!p) {
        int e = errno;
        if (fd >= 0) close(fd);
        free(b);
        return xc__err(XC_ERR_NOMEM, "%s: mmap of %zu bytes: %s", what, span, strerror(e));
    }
    if (p > map) munmap(map, (size_t)(p - map));
    if (map + span > p + len) munmap(p + len, (size_t)(map + span - (p + len)));
    /* Refused only where THP is not built in (EINVAL), or for shared
     * memory where the kernel's shmem THP mode is "never": ordinary pages
     * then.  XCOLL_HUGEPAGES=0 keeps them out even where THP is "always". */
    if ((huge || !want) && madvise(p, len, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE) != 0)
        XC_TRACE("%s: madvise refused (%s): the kernel's default pages", what, strerror(errno));
    if (shared) {
        /* A forked child never gets the block: it would write its
         * parent's memory (and its peers read it). */
        madvise(p, len, MADV_DONTFORK);
        if (xc__share_add(p, len, fd) != 0)
            XC_INFO("%s: the block cannot be listed for node peers (%d listed at most): "
                    "they read it single copy",
                    what, XC__SHARE_MAX);
    }
    b->p = p, b->len = len, b->fd = fd;
    pthread_mutex_lock(&mem_mu);
    b->next = mem_head, mem_head = b;
    pthread_mutex_unlock(&mem_mu);
    *ptr = p;
    return XC_OK;
}

xc_result_t xc_mem_alloc(size_t bytes, void **ptr)
{
    return mem_alloc(bytes, ptr, 0, "xc_mem_alloc");
}

xc_result_t xc_mem_alloc_shared(size_t bytes, void **ptr)
{
    return mem_alloc(bytes, ptr, 1, "xc_mem_alloc_shared");
}

/* The block starting at p, unlinked from the list when `take`; NULL. */
static mem_block_t *mem_find(const void *p, int take)
{
    pthread_mutex_lock(&mem_mu);
    mem_block_t **pp = &mem_head;
    while (*pp && (*pp)->p != p) pp = &(*pp)->next;
    mem_block_t *b = *pp;
    if (b && take) *pp = b->next;
    pthread_mutex_unlock(&mem_mu);
    return b;
}

xc_result_t xc_mem_free(void *ptr)
{
    if (!ptr) return XC_OK;
    mem_block_t *b = mem_find(ptr, 1);
    if (!b)
        return xc__err(XC_ERR_INVALID,
                       "xc_mem_free: %p was not returned by xc_mem_alloc or "
                       "xc_mem_alloc_shared (or is freed already)",
                       ptr);
    if (b->fd >= 0) xc__share_remove(b->p); /* before the descriptor closes */
    munmap(b->p, b->len);
    if (b->fd >= 0) close(b->fd);
    free(b);
    return XC_OK;
}

size_t xc_mem_page_size(const void *ptr)
{
    mem_block_t *b = ptr ? mem_find(ptr, 0) : NULL;
    if (!b) return 0;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return page;
    uintptr_t at = (uintptr_t)ptr;
    char line[512];
    int inside = 0;
    size_t huge_kb = 0;
    while (fgets(line, sizeof line, f)) {
        uintptr_t lo, hi;
        unsigned long long kb;
        if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            if (inside) break; /* past the mapping that held the block */
            inside = at >= lo && at < hi;
        } else if (inside && (sscanf(line, "AnonHugePages: %llu kB", &kb) == 1 ||
                              sscanf(line, "ShmemPmdMapped: %llu kB", &kb) == 1)) {
            huge_kb += (size_t)kb; /* private blocks, shared ones */
        }
    }
    fclose(f);
    return huge_kb > 0 ? XC__HUGE_PAGE : page;
}
