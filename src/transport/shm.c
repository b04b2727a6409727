/*
 * shm.c -- the node-local shared-memory segment: creation, mapping,
 * unlinking, the ranks' bells (futex words) and the poison word (see shm.h).
 */
#include "shm.h"
#include "../core/membarrier.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define XC__SHM_MAGIC 0x58435348u /* "XCSH" */

typedef struct layout {
    size_t ctl, slots, result, chan_ctl, chan_data, total;
} layout_t;

static layout_t layout(int nranks, size_t slot_bytes, size_t rot, size_t chan_bytes)
{
    layout_t l;
    size_t pairs = (size_t)nranks * (size_t)nranks;
    size_t off = (sizeof(xc__shm_hdr_t) + 4095) & ~(size_t)4095;
    l.ctl = off;
    off += (size_t)nranks * sizeof(xc__shm_ctl_t);
    off = (off + 4095) & ~(size_t)4095;
    l.slots = off;
    off += (size_t)nranks * XC__SHM_NSLOT * rot * slot_bytes;
    l.result = off;
    off += XC__SHM_NSLOT * slot_bytes;
    l.chan_ctl = off;
    if (chan_bytes) off += pairs * sizeof(xc__chan_ctl_t);
    off = (off + 4095) & ~(size_t)4095;
    l.chan_data = off;
    off += chan_bytes * pairs; /* pages of unused pairs are never touched */
    l.total = off;
    return l;
}

static xc_result_t map(int fd, size_t bytes, int nranks, int me, xc__shm_t **out)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return xc__err_errno("mmap (shared memory segment)");
    /* A forked child must never see (and so never write) the segment. */
    madvise(p, bytes, MADV_DONTFORK);
    xc__shm_t *s = calloc(1, sizeof *s);
    if (s) s->ll_buf = calloc((size_t)nranks, XC__SHM_LL_MAX);
    if (!s || !s->ll_buf) {
        if (s) free(s);
        munmap(p, bytes);
        return xc__err(XC_ERR_NOMEM, "out of memory");
    }
    s->base = p;
    s->bytes = bytes;
    s->nranks = nranks;
    s->me = me;
    s->hdr = p;
    s->owner = getpid();
    *out = s;
    return XC_OK;
}

static xc_result_t locate(xc__shm_t *s)
{
    layout_t l = layout(s->nranks, s->slot_bytes, s->rot, s->chan_bytes);
    if (l.total > s->bytes)
        return xc__err(XC_ERR_PROTOCOL, "shared memory segment is smaller than its layout");
    s->ctl = (xc__shm_ctl_t *)((char *)s->base + l.ctl);
    s->slots = (char *)s->base + l.slots;
    s->result = (char *)s->base + l.result;
    s->chan_ctl = s->chan_bytes ? (xc__chan_ctl_t *)((char *)s->base + l.chan_ctl) : NULL;
    s->chan_data = s->chan_bytes ? (char *)s->base + l.chan_data : NULL;
    return XC_OK;
}

/* Segments are unlinked as soon as every rank has mapped them; only a job
 * killed inside that window (milliseconds at set-up) leaves one behind.
 * Their names carry the creator's pid.  `dead` > 0: remove that pid's (its
 * parent reaped it: xc__shm_remove_of).  Otherwise remove those whose
 * creator is gone -- and that are older than ten minutes: "no such
 * process" holds only in this PID namespace, and containers that share
 * /dev/shm but not PIDs would otherwise unlink each other's segments
 * inside that window. */
static void sweep(pid_t dead)
{
    DIR *d = opendir("/dev/shm");
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        int pid = 0, used = 0;
        if (sscanf(e->d_name, "xcoll-%d-%*16[0-9a-f]%n", &pid, &used) != 1 || pid <= 0 ||
            e->d_name[used] != 0)
            continue;
        char name[300];
        struct stat st;
        snprintf(name, sizeof name, "/dev/shm/%s", e->d_name);
        if (dead > 0 ? pid != (int)dead
                     : (kill((pid_t)pid, 0) == 0 || errno != ESRCH || stat(name, &st) != 0 ||
                        time(NULL) - st.st_mtime < 600))
            continue;
        shm_unlink(name + 8); /* "/<name>" */
    }
    closedir(d);
}

void xc__shm_remove_of(pid_t pid)
{
    if (pid > 0) sweep(pid);
}

xc_result_t xc__shm_create(const char *name, int nranks, int me, size_t slot_bytes, size_t rot,
                           size_t chan_bytes, xc__shm_t **out)
{
    sweep(0);
    size_t bytes = layout(nranks, slot_bytes, rot, chan_bytes).total;
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return xc__err(XC_ERR_SYSTEM, "shm_open(%s): %s", name, strerror(errno));
    if (ftruncate(fd, (off_t)bytes) != 0) {
        int e = errno;
        close(fd);
        shm_unlink(name);
        return xc__err(XC_ERR_SYSTEM, "ftruncate(%s, %zu): %s (is /dev/shm large enough?)",
                       name, bytes, strerror(e));
    }
    xc_result_t rc = map(fd, bytes, nranks, me, out);
    close(fd);
    if (rc != XC_OK) {
        shm_unlink(name);
        return rc;
    }
    xc__shm_t *s = *out;
    s->slot_bytes = slot_bytes;
    s->rot = rot;
    s->chan_bytes = chan_bytes;
    s->hdr->nranks = nranks;
    s->hdr->slot_bytes = slot_bytes;
    s->hdr->slot_rot = rot;
    s->hdr->chan_bytes = chan_bytes;
    locate(s); /* cannot fail: the segment was sized from the same layout */
    /* Counters start at 0 (ftruncate zero-fills); publish the magic last. */
    __atomic_store_n(&s->hdr->magic, XC__SHM_MAGIC, __ATOMIC_RELEASE);
    return XC_OK;
}

xc_result_t xc__shm_open(const char *name, int nranks, int me, xc__shm_t **out)
{
    int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) return xc__err(XC_ERR_SYSTEM, "shm_open(%s): %s", name, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < (off_t)sizeof(xc__shm_hdr_t)) {
        close(fd);
        return xc__err(XC_ERR_PROTOCOL, "shared memory segment %s is truncated", name);
    }
    xc_result_t rc = map(fd, (size_t)st.st_size, nranks, me, out);
    close(fd);
    if (rc != XC_OK) return rc;
    xc__shm_t *s = *out;
    if (__atomic_load_n(&s->hdr->magic, __ATOMIC_ACQUIRE) != XC__SHM_MAGIC ||
        s->hdr->nranks != nranks) {
        xc__shm_close(s);
        *out = NULL;
        return xc__err(XC_ERR_PROTOCOL, "shared memory segment %s is not xcoll's", name);
    }
    s->slot_bytes = s->hdr->slot_bytes;
    s->rot = (size_t)s->hdr->slot_rot;
    s->chan_bytes = s->hdr->chan_bytes;
    if ((s->chan_bytes & (s->chan_bytes - 1)) != 0 || s->rot < 1 || s->rot > XC__SHM_ROT_MAX ||
        (rc = locate(s)) != XC_OK) {
        xc__shm_close(s);
        *out = NULL;
        return rc != XC_OK ? rc : xc__err(XC_ERR_PROTOCOL, "shared memory segment %s is not xcoll's", name);
    }
    return XC_OK;
}

void xc__shm_unlink(const char *name) { shm_unlink(name); }

void xc__shm_prefault_own(xc__shm_t *s)
{
    char *p = xc__shm_slot(s, s->me, 0);
    size_t n = XC__SHM_NSLOT * s->rot * s->slot_bytes;
#ifdef MADV_POPULATE_WRITE
    (void)madvise(p, n, MADV_POPULATE_WRITE);
#else
    (void)p, (void)n;
#endif
}

void xc__shm_close(xc__shm_t *s)
{
    if (!s) return;
    /* In a forked child the mapping does not exist (MADV_DONTFORK). */
    if (s->owner == getpid()) munmap(s->base, s->bytes);
    free(s->ll_buf);
    free(s);
}

static long futex(uint32_t *uaddr, int op, uint32_t val, const struct timespec *ts)
{
    /* Shared (not FUTEX_PRIVATE): the word lives in memory of several
     * processes. */
    return syscall(SYS_futex, uaddr, op, val, ts, NULL, 0);
}

/*
 * The wake-up check is Dekker's: a publisher stores its counter, then
 * reads whether anybody sleeps; a sleeper announces itself, then re-reads
 * the counter.  Each side needs a full barrier between its store and its
 * load -- on the publisher's side, at every publication, a locked
 * instruction that waits for every store before it (the fence was 98 % of
 * a publication's samples, 13 % of a small broadcast reader's time).  With
 * `asym` the barrier is asymmetric: publishers only keep the compiler from
 * reordering, and a sleeper, after announcing itself and before
 * re-reading, runs membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED), which
 * makes every running thread of every registered process pass a full
 * barrier.  A publisher whose load came before that barrier had its store
 * drained by it, so the sleeper sees the store; one whose load came after
 * sees the announcement.  All ranks must be registered
 * (xc__membarrier_register(XC__MB_GLOBAL); shm_setup.c agrees on it);
 * sleeping is rare and slow anyway.
 */
/* The publisher's half: a full fence, or (asym) only the compiler's. */
static inline void publish_barrier(const xc__shm_t *s)
{
    if (s->asym) __atomic_signal_fence(__ATOMIC_SEQ_CST);
    else __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

/* The sleeper's half, after its announcement (an atomic read-modify-write,
 * a full barrier of its own). */
static void sleeper_barrier(const xc__shm_t *s)
{
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (s->asym && xc__membarrier(XC__MB_GLOBAL) != 0)
        XC_WARN("membarrier failed after registering: a wake-up may be missed");
}

/* Wake local rank r's sleepers if it has any.  Called after the
 * publisher's barrier that follows its store (above). */
static void wake_rank(xc__shm_t *s, int r)
{
    xc__shm_ctl_t *c = &s->ctl[r];
    if (!__atomic_load_n(&c->bell_sleepers, __ATOMIC_SEQ_CST)) return;
    xc__shm_bump(s, r);
}

/* One more publication (a count only looked at for change: threads that
 * race here may lose an increment, never tear it). */
static void count_pub(xc__shm_t *s)
{
    __atomic_store_n(&s->pubs, __atomic_load_n(&s->pubs, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
}

void xc__shm_ring_rank(xc__shm_t *s, int to)
{
    count_pub(s);
    publish_barrier(s);
    wake_rank(s, to); /* its own count: an armed thread is only there */
}

void xc__shm_ring(xc__shm_t *s)
{
    count_pub(s);
    publish_barrier(s);
    if (!__atomic_load_n(&s->hdr->sleepers, __ATOMIC_SEQ_CST)) return;
    for (int r = 0; r < s->nranks; r++) wake_rank(s, r);
}

void xc__shm_publish(xc__shm_t *s, uint64_t *counter, uint64_t v)
{
    __atomic_store_n(counter, v, __ATOMIC_RELEASE);
    xc__shm_ring(s);
}

void xc__shm_publish_to(xc__shm_t *s, uint64_t *counter, uint64_t v, int to)
{
    __atomic_store_n(counter, v, __ATOMIC_RELEASE);
    xc__shm_ring_rank(s, to);
}

uint32_t xc__shm_sleep_begin(xc__shm_t *s)
{
    xc__shm_ctl_t *c = &s->ctl[s->me];
    __atomic_add_fetch(&s->hdr->sleepers, 1, __ATOMIC_SEQ_CST);
    __atomic_add_fetch(&c->bell_sleepers, 1, __ATOMIC_SEQ_CST);
    sleeper_barrier(s); /* pairs with the publishers' */
    return __atomic_load_n(&c->bell, __ATOMIC_SEQ_CST);
}

void xc__shm_sleep(xc__shm_t *s, uint32_t seen, int timeout_ms)
{
    struct timespec ts = {timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000L};
    futex(&s->ctl[s->me].bell, FUTEX_WAIT, seen, timeout_ms < 0 ? NULL : &ts);
}

uint32_t xc__shm_bell(xc__shm_t *s)
{
    return __atomic_load_n(&s->ctl[s->me].bell, __ATOMIC_SEQ_CST);
}

void xc__shm_bump(xc__shm_t *s, int r)
{
    __atomic_add_fetch(&s->ctl[r].bell, 1, __ATOMIC_SEQ_CST);
    futex(&s->ctl[r].bell, FUTEX_WAKE, INT32_MAX, NULL);
}

void xc__shm_arm(xc__shm_t *s)
{
    __atomic_add_fetch(&s->ctl[s->me].bell_sleepers, 1, __ATOMIC_SEQ_CST);
    sleeper_barrier(s);
}

void xc__shm_disarm(xc__shm_t *s)
{
    __atomic_sub_fetch(&s->ctl[s->me].bell_sleepers, 1, __ATOMIC_RELAXED);
}

void xc__shm_sleep_end(xc__shm_t *s)
{
    __atomic_sub_fetch(&s->ctl[s->me].bell_sleepers, 1, __ATOMIC_SEQ_CST);
    __atomic_sub_fetch(&s->hdr->sleepers, 1, __ATOMIC_SEQ_CST);
}

void xc__shm_poison(xc__shm_t *s, xc_result_t rc, const char *msg)
{
    int32_t zero = 0;
    /* Claim first, so one rank writes the message; publish the code after
     * it (release) so readers that see the code see the message. */
    if (!__atomic_compare_exchange_n(&s->hdr->poison_claim, &zero, 1, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_RELAXED))
        return;
    snprintf(s->hdr->poison_msg, sizeof s->hdr->poison_msg, "%s", msg);
    s->hdr->poison_rank = s->me;
    __atomic_store_n(&s->hdr->poison, (int32_t)rc, __ATOMIC_RELEASE);
    xc__shm_ring(s);
}
