/*
 * mem_share.c -- blocks that node peers map: single copy as one memcpy.
 *
 * A single-copy read of a peer's buffer (process_vm_readv) pins and copies
 * its pages one at a time in the kernel; reading the same bytes through a
 * mapping of the peer's memory is an ordinary memcpy.  Two processes
 * exchanging N bytes at once (bench/anchors/duplex.c, AMD EPYC VM): 1 MiB
 * 24 us mapped against 26-32 with the source on huge pages and 50-66 on
 * ordinary ones; 4 MiB 78-93 / 97-125 / 186-284; 16 MiB 508-518 / 649-772
 * / 1497-1790 (bench/RESULTS.md, thirty-third session).  Only shared
 * memory can be mapped by another process, so this serves the blocks of
 * xc_mem_alloc_shared (mem.c): a memfd each, mapped MAP_SHARED.
 *
 * Owner: every process keeps a table of its shared blocks (address,
 * length, the memfd's descriptor number, a block number that is never
 * reused) in a memfd page of its own; the node segment names the table
 * (descriptor number and a random nonce) beside the process's pid
 * (shm_setup.c).  Entries are rewritten under a sequence count (odd while
 * being written) so that readers in other processes never take a torn
 * one.
 *
 * Reader: to move bytes at a peer's address it looks the address up in the
 * peer's table (fetched once with pidfd_getfd, Linux 5.6, which asks the
 * same permission as process_vm_readv), maps the block the same way the
 * first time, and copies.  Mappings are kept per peer (a few blocks, least
 * recently used out, never one a copy is using); a block the peer freed
 * disappears from its table, and its mapping is dropped when the reader
 * next maps one.  Anything that fails -- no table, a table not naming the
 * address, a descriptor that cannot be fetched -- answers "not shared" and
 * the caller reads single copy as before.  A reader that outlives a peer
 * keeps its mappings of that peer's blocks until it exits.
 *
 * fork: the table and the blocks are MADV_DONTFORK (a child, such as a
 * data-loader worker, must never write its parent's memory through a
 * shared mapping: it does not have them); a child that allocates shared
 * blocks makes a table of its own.
 */
#include "mem_share.h"
#include "copy.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#define SHARE_MAGIC 0x7273686c6c6f6378ull /* "xcollshr" */
#define VIEW_BLOCKS 8                    /* a peer's blocks a reader keeps mapped */

typedef struct {
    uint64_t seq; /* even: stable; odd: being rewritten */
    uint64_t gen; /* the block's number, never reused; 0: empty */
    uint64_t base, len;
    int64_t fd;
} ent_t;

typedef struct {
    uint64_t magic, nonce;
    int64_t pid;
    uint32_t listed; /* blocks listed now: 0 spares a reader the scan */
    uint32_t used;   /* entries ever used: a reader scans no further */
    ent_t ent[XC__SHARE_MAX];
} tab_t;

#define TAB_BYTES ((sizeof(tab_t) + 4095) & ~(size_t)4095)

/* ---------------------------------------------------------------- owner */

static pthread_mutex_t own_mu = PTHREAD_MUTEX_INITIALIZER;
static tab_t *own;
static int own_fd = -1;
static pid_t own_pid;
static uint64_t own_gen;

static int own_table_locked(void)
{
    if (own && own_pid == getpid()) return 0;
    own = NULL, own_fd = -1; /* a forked child: its parent's table is not its own */
    int fd = memfd_create("xcoll-share", MFD_CLOEXEC);
    if (fd < 0) return -1;
    tab_t *t = MAP_FAILED;
    if (ftruncate(fd, (off_t)TAB_BYTES) == 0)
        t = mmap(NULL, TAB_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (t == MAP_FAILED) {
        close(fd);
        return -1;
    }
    madvise(t, TAB_BYTES, MADV_DONTFORK);
    t->nonce = (xc__random64() ^ (uint64_t)(uintptr_t)t) | 1;
    t->pid = getpid();
    __atomic_store_n(&t->magic, SHARE_MAGIC, __ATOMIC_RELEASE);
    own = t, own_fd = fd, own_pid = getpid();
    return 0;
}

int xc__share_table(int *fd, uint64_t *nonce)
{
    pthread_mutex_lock(&own_mu);
    int rc = own_table_locked();
    if (rc == 0) *fd = own_fd, *nonce = own->nonce;
    pthread_mutex_unlock(&own_mu);
    return rc;
}

/* Rewrite entry e under its sequence count. */
static void ent_set(ent_t *e, uint64_t gen, uint64_t base, uint64_t len, int64_t fd)
{
    uint64_t s = __atomic_load_n(&e->seq, __ATOMIC_RELAXED);
    __atomic_store_n(&e->seq, s + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    __atomic_store_n(&e->base, base, __ATOMIC_RELAXED);
    __atomic_store_n(&e->len, len, __ATOMIC_RELAXED);
    __atomic_store_n(&e->fd, fd, __ATOMIC_RELAXED);
    __atomic_store_n(&e->gen, gen, __ATOMIC_RELAXED);
    __atomic_store_n(&e->seq, s + 2, __ATOMIC_RELEASE);
}

int xc__share_add(void *base, size_t len, int fd)
{
    int rc = -1;
    pthread_mutex_lock(&own_mu);
    if (own_table_locked() == 0)
        for (int i = 0; i < XC__SHARE_MAX; i++)
            if (!own->ent[i].gen) {
                ent_set(&own->ent[i], ++own_gen, (uint64_t)(uintptr_t)base, len, fd);
                if ((uint32_t)i >= own->used)
                    __atomic_store_n(&own->used, (uint32_t)i + 1, __ATOMIC_RELEASE);
                __atomic_store_n(&own->listed, own->listed + 1, __ATOMIC_RELEASE);
                rc = 0;
                break;
            }
    pthread_mutex_unlock(&own_mu);
    return rc;
}

void xc__share_remove(void *base)
{
    pthread_mutex_lock(&own_mu);
    if (own && own_pid == getpid())
        for (int i = 0; i < XC__SHARE_MAX; i++)
            if (own->ent[i].gen && own->ent[i].base == (uint64_t)(uintptr_t)base) {
                ent_set(&own->ent[i], 0, 0, 0, -1);
                __atomic_store_n(&own->listed, own->listed - 1, __ATOMIC_RELEASE);
            }
    pthread_mutex_unlock(&own_mu);
}

/* --------------------------------------------------------------- reader */

typedef struct {
    uint64_t gen, base, len;
    char *map; /* NULL: free */
    int busy;  /* copies using it now */
    uint64_t last;
} blk_t;

typedef struct view {
    pid_t pid;
    uint64_t nonce;
    int pidfd;          /* -1 once the peer cannot be reached */
    const tab_t *tab;   /* NULL: not shared (bad) */
    blk_t blk[VIEW_BLOCKS];
    struct view *next;
} view_t;

static pthread_mutex_t view_mu = PTHREAD_MUTEX_INITIALIZER;
static view_t *views;
static pid_t views_pid; /* the process the views' mappings belong to */
static uint64_t view_clk;

static int fetch_fd(int pidfd, int fd)
{
#ifdef SYS_pidfd_getfd
    return (int)syscall(SYS_pidfd_getfd, pidfd, fd, 0);
#else
    (void)pidfd, (void)fd;
    errno = ENOSYS;
    return -1;
#endif
}

/* The view of (pid, nonce): found, or made (a bad one if the table cannot
 * be fetched or does not match, so that it is not tried again). */
static view_t *view_of(pid_t pid, int tab_fd, uint64_t nonce)
{
    if (views_pid != getpid()) {
        /* A forked child: its parent's mappings were not inherited
         * (MADV_DONTFORK); forget the views that name them. */
        views = NULL;
        views_pid = getpid();
    }
    for (view_t *v = views; v; v = v->next)
        if (v->pid == pid && v->nonce == nonce) return v;
    view_t *v = calloc(1, sizeof *v);
    if (!v) return NULL;
    v->pid = pid, v->nonce = nonce, v->pidfd = -1;
#ifdef SYS_pidfd_open
    v->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
#endif
    int fd = v->pidfd >= 0 ? fetch_fd(v->pidfd, tab_fd) : -1;
    if (fd >= 0) {
        const tab_t *t = mmap(NULL, TAB_BYTES, PROT_READ, MAP_SHARED, fd, 0);
        close(fd);
        if (t != MAP_FAILED && __atomic_load_n(&t->magic, __ATOMIC_ACQUIRE) == SHARE_MAGIC &&
            t->nonce == nonce && t->pid == pid) {
            madvise((void *)t, TAB_BYTES, MADV_DONTFORK);
            v->tab = t;
        } else if (t != MAP_FAILED) {
            munmap((void *)t, TAB_BYTES);
        }
    }
    if (!v->tab) XC_TRACE("mem_share: process %d's shared blocks cannot be mapped: single copy",
                          (int)pid);
    v->next = views, views = v;
    return v;
}

/* Entry i of a peer's table, read consistently; 0 if empty or changing. */
static int ent_get(const tab_t *t, int i, ent_t *out)
{
    const ent_t *e = &t->ent[i];
    uint64_t s = __atomic_load_n(&e->seq, __ATOMIC_ACQUIRE);
    if (s & 1) return 0;
    out->seq = s;
    out->gen = __atomic_load_n(&e->gen, __ATOMIC_RELAXED);
    out->base = __atomic_load_n(&e->base, __ATOMIC_RELAXED);
    out->len = __atomic_load_n(&e->len, __ATOMIC_RELAXED);
    out->fd = __atomic_load_n(&e->fd, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    return out->gen && __atomic_load_n(&e->seq, __ATOMIC_RELAXED) == s;
}

/* Entries a reader need look at: none while nothing is listed. */
static int tab_span(const tab_t *t)
{
    if (!__atomic_load_n(&t->listed, __ATOMIC_ACQUIRE)) return 0;
    uint32_t u = __atomic_load_n(&t->used, __ATOMIC_ACQUIRE);
    return u < XC__SHARE_MAX ? (int)u : XC__SHARE_MAX;
}

static int gen_listed(const tab_t *t, uint64_t gen)
{
    ent_t e;
    for (int i = 0, n = tab_span(t); i < n; i++)
        if (ent_get(t, i, &e) && e.gen == gen) return 1;
    return 0;
}

/* The mapped block of view v holding [r, r + len): kept, or mapped now
 * into a free (or the least recently used idle) place; NULL. */
static blk_t *block_of(view_t *v, uintptr_t r, size_t len)
{
    ent_t e, again;
    int i, n = tab_span(v->tab);
    for (i = 0; i < n; i++)
        if (ent_get(v->tab, i, &e) && r >= e.base && len <= e.len && r - e.base <= e.len - len)
            break;
    if (i == n) return NULL;
    for (int k = 0; k < VIEW_BLOCKS; k++)
        if (v->blk[k].map && v->blk[k].gen == e.gen) return &v->blk[k];
    /* A new block: drop the mappings of blocks the peer freed, then take
     * a free place or the least recently used idle one. */
    blk_t *pick = NULL;
    for (int k = 0; k < VIEW_BLOCKS; k++) {
        blk_t *b = &v->blk[k];
        if (b->map && !b->busy && !gen_listed(v->tab, b->gen))
            munmap(b->map, b->len), b->map = NULL;
    }
    for (int k = 0; k < VIEW_BLOCKS && !pick; k++)
        if (!v->blk[k].map) pick = &v->blk[k];
    for (int k = 0; k < VIEW_BLOCKS && !pick; k++)
        if (!v->blk[k].busy) pick = &v->blk[k];
    for (int k = 0; k < VIEW_BLOCKS; k++)
        if (pick && pick->map && !v->blk[k].busy && v->blk[k].last < pick->last) pick = &v->blk[k];
    if (!pick || v->pidfd < 0) return NULL;
    int fd = fetch_fd(v->pidfd, (int)e.fd);
    if (fd < 0) return NULL;
    /* The owner takes a block out of its table before it closes the
     * descriptor: the entry still unchanged now means `fd` is that block
     * (not whatever reused the number after a free). */
    if (!ent_get(v->tab, i, &again) || again.seq != e.seq) {
        close(fd);
        return NULL;
    }
    char *m = mmap(NULL, e.len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) return NULL;
    madvise(m, e.len, MADV_DONTFORK);
    if (pick->map) munmap(pick->map, pick->len);
    *pick = (blk_t){.gen = e.gen, .base = e.base, .len = e.len, .map = m};
    return pick;
}

int xc__share_copy(pid_t pid, int tab_fd, uint64_t nonce, void *local, uintptr_t remote,
                   size_t len, int write)
{
    if (tab_fd < 0 || !nonce || !len) return 0;
    pthread_mutex_lock(&view_mu);
    view_t *v = view_of(pid, tab_fd, nonce);
    blk_t *b = v && v->tab ? block_of(v, remote, len) : NULL;
    if (b) b->busy++, b->last = ++view_clk;
    pthread_mutex_unlock(&view_mu);
    if (!b) return 0;
    char *at = b->map + (remote - b->base);
    if (write)
        xc__copy(at, local, len);
    else
        xc__copy(local, at, len);
    pthread_mutex_lock(&view_mu);
    b->busy--;
    pthread_mutex_unlock(&view_mu);
    return 1;
}

/*
 * The kernel copies a single-copy transfer with `rep movsb` too, and is as
 * slow as glibc's memcpy where the destination sits 1-31 bytes past the
 * source's place in a 64-byte line (copy.h): process_vm_readv of 64 KiB-8
 * MiB at 1.5-2.2 GB/s against 6-10.5 at other offsets (AMD EPYC VM).
 * Such a transfer goes through a bounce buffer of this thread's at the
 * remote side's offset in a line, BOUNCE bytes at a time: the kernel's
 * copy line to line, then xc__copy between the bounce buffer and the
 * local bytes -- 6-7.7 GB/s in all (fifty-fifth session).
 */
#define BOUNCE ((size_t)128 << 10)
#define BOUNCE_MIN ((size_t)4 << 10)

static pthread_key_t bounce_key;
static pthread_once_t bounce_once = PTHREAD_ONCE_INIT;
static int bounce_ok;
static void bounce_init(void) { bounce_ok = pthread_key_create(&bounce_key, free) == 0; }

/* This thread's bounce buffer (BOUNCE + 64 bytes, line-aligned), or NULL. */
static char *bounce_buf(void)
{
    pthread_once(&bounce_once, bounce_init);
    if (!bounce_ok) return NULL;
    char *b = pthread_getspecific(bounce_key);
    if (b) return b;
    if (posix_memalign((void **)&b, 64, BOUNCE + 64) != 0) return NULL;
    if (pthread_setspecific(bounce_key, b) != 0) {
        free(b);
        return NULL;
    }
    return b;
}

/* Is the kernel's copy from `src` to `dst` at one of its slow offsets?
 * Only the measured cliff (1-31 bytes past): the bounce buffer costs a
 * second copy, and 32-63 was not measured through the kernel. */
static int kernel_shifted(uintptr_t dst, uintptr_t src, size_t len)
{
    size_t d = (size_t)((dst - src) & 63);
    return len >= BOUNCE_MIN && d != 0 && d < 32;
}

static int vm_xfer(pid_t pid, char *l, uintptr_t remote, size_t len, int write)
{
    while (len > 0) {
        struct iovec li = {l, len}, ri = {(void *)remote, len};
        ssize_t n = write ? process_vm_writev(pid, &li, 1, &ri, 1, 0)
                          : process_vm_readv(pid, &li, 1, &ri, 1, 0);
        if (n <= 0) return n < 0 ? errno : EIO;
        l += n;
        remote += (size_t)n;
        len -= (size_t)n;
    }
    return 0;
}

int xc__peer_xfer(pid_t pid, int tab_fd, uint64_t nonce, void *local, uintptr_t remote,
                  size_t len, int write)
{
    if (xc__share_copy(pid, tab_fd, nonce, local, remote, len, write)) return 0;
    char *l = local;
    uintptr_t lu = (uintptr_t)local;
    char *b = kernel_shifted(write ? remote : lu, write ? lu : remote, len) ? bounce_buf() : NULL;
    if (b) {
        b += remote & 63; /* the remote bytes' place in a line */
        for (size_t off = 0; off < len; off += BOUNCE) {
            size_t k = len - off < BOUNCE ? len - off : BOUNCE;
            if (write) xc__copy(b, l + off, k);
            int e = vm_xfer(pid, b, remote + off, k, write);
            if (e) return e;
            if (!write) xc__copy(l + off, b, k);
        }
        return 0;
    }
    return vm_xfer(pid, l, remote, len, write);
}
