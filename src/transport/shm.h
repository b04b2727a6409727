/*
 * shm.h -- the shared-memory segment of a communicator whose ranks all run
 * on one node, and the signalling primitives of the shared-memory
 * collectives (src/algo/shm_*.c).
 *
 * Layout: a header (poison word and message, sleepers),
 * then per local rank a control block of cache lines, each written by that
 * rank only (single writer, many readers; its bell, which others bump to
 * wake it, is the exception), then per rank NSLOT staging
 * slots, then NSLOT shared result slots.  Counters only grow, over the whole
 * life of the communicator: `in` counts chunks a rank has staged, `mid`
 * chunks it has reduced into the result slots, `out` chunks it has finished
 * reading.  Every rank processes the same number of chunks per operation
 * (the operation's description, checked at its first chunk, guarantees it),
 * so the n-th chunk means the same thing on every rank.
 *
 * Memory ordering: a rank writes a slot, then publishes its counter with a
 * release store; readers load counters with acquire before touching slots.
 *
 * Lifetime: local rank 0 creates the segment (named from the communicator
 * id and the node), all map it, and it is unlinked right after, so nothing
 * survives in /dev/shm whatever happens later.  The mapping is MADV_DONTFORK:
 * a forked child (a data-loader worker) never sees, writes or unlinks it.
 */
#ifndef XC_SHM_H
#define XC_SHM_H

#include "../core/common.h"
#include "../engine/msg.h"
#include "wcopy.h"

#include <sys/types.h>

#define XC__SHM_NSLOT 2
/*
 * Each slot has up to XC__SHM_ROT_MAX places ("rot"): whole-slot chunks
 * use the first, the entries of ring operations (a broadcast, a reduce
 * whose root reads: shm_coll.h) turn through all of them (xc__shm_src).
 * A store into a line a peer core has read waits for that core to give the
 * line up: where a reader keeps the entries it read in its own cache, the
 * writer's next copy into the same lines ran at ~6.5 GB/s against ~55
 * into lines of its own (AMD EPYC VM, 64 KiB chunks; bench/RESULTS.md,
 * forty-ninth session).  Turned through more memory than a core's cache
 * holds, the lines have left the reader's cache by the time they are
 * written again.  (Whole-slot chunks of the symmetric collectives, which
 * every rank writes and reads, measured no better turned.)  By default
 * XC__SHM_ROT_AUTO places, fewer where the node's slots would pass
 * XC__SHM_ROT_BUDGET (more than 8 ranks of 256 KiB slots): /dev/shm may be
 * small (64 MiB in a container by default), and a page it cannot give is a
 * SIGBUS.
 */
#define XC__SHM_ROT_MAX 8
#define XC__SHM_ROT_AUTO 4
#define XC__SHM_ROT_BUDGET ((size_t)16 << 20)
static inline size_t xc__shm_rot_for(int nranks, size_t slot_bytes, int want)
{
    if (want > 0) return (size_t)want;
    size_t per = (size_t)nranks * 2 * slot_bytes, r = per ? XC__SHM_ROT_BUDGET / per : 1;
    return r < 1 ? 1 : r > XC__SHM_ROT_AUTO ? XC__SHM_ROT_AUTO : r;
}
/* The adjacent-line prefetcher's unit: it fetches a line's 128-byte pair
 * partner with it (see xc__shm_ctl below). */
#define XC__SHM_PAIR 128
/* Small payloads travel in "flagged lines": per parity XC__SHM_LL_LINES
 * cache lines of 56 payload bytes and an 8-byte tag (the chunk number g),
 * the first line's payload led by the operation's description hash.  The writer fills the lines last to
 * first, each line's payload before its tag (release); a reader waits for
 * the first line's tag, then finds the others there too. */
#define XC__SHM_LL_LINES 12
/* Payload bytes of n flagged lines (the first line also carries the hash). */
#define XC__SHM_LL_BYTES(n) ((n) * 56 - 8)
#define XC__SHM_LL_MAX XC__SHM_LL_BYTES(XC__SHM_LL_LINES)
#define XC__SHM_LL_LINE0 48 /* payload bytes of the first line (after the hash) */
/* What an operation of `nranks` ranks puts in the lines: all twelve lines
 * for 2 ranks; eight (440 B) past 2, where each reader fetches the lines
 * of L-1 ranks (a 512-byte all-reduce of 8 ranks on 2 cores 6.6-6.8 us in
 * a slot, 7.6-8.5 in twelve lines; 4 ranks +6 %; bench/RESULTS.md,
 * twenty-third session).  The runtime and the model both ask here. */
static inline size_t xc__shm_ll_max(int nranks)
{
    return nranks <= 2 ? (size_t)XC__SHM_LL_MAX : (size_t)XC__SHM_LL_BYTES(8);
}
/* Ring operations (shm_coll.h: small bcast and reduce) have flagged lines
 * of their own, chunk g in entry g % 32: a writer may run up to 32 of them
 * ahead of its readers while it holds the express bias (engine/bias.h),
 * NSLOT x RING = 8 otherwise (shm_coll.c slot_need). */
#define XC__SHM_LL_RING 32
#define XC__SHM_DESC_RING 128 /* ops; see the static assertion in shm_coll.c */
#define XC__SHM_MAX_RANKS 256 /* larger communicators use TCP */

typedef struct xc__shm_desc {
    uint64_t seq;
    xc__desc_t d;
} xc__shm_desc_t;

/* One rank's control block: every member on cache lines of its own, and
 * on 128-byte pairs of its own: the adjacent-line prefetcher fetches a
 * line's pair partner with it, so a reader of one member would otherwise
 * hold the neighbouring member's line too and its writer would wait to
 * take it back (flagged lines of 2 lines per parity, the parities side
 * by side: 64-byte all-reduce 0.86-0.99 us against 0.29-0.45 with the
 * parities a pair apart; eighteenth session). */
_Static_assert(XC__SHM_LL_LINES % 2 == 0, "a parity's flagged lines must fill whole pairs");
typedef struct xc__shm_ctl {
    _Alignas(XC__SHM_PAIR) uint64_t in;       /* chunks staged            */
    uint64_t in_hash;                         /* description hash of chunk `in`'s op */
    _Alignas(XC__SHM_PAIR) uint64_t mid;      /* chunks reduced           */
    _Alignas(XC__SHM_PAIR) uint64_t out;      /* chunks consumed          */
    _Alignas(XC__SHM_PAIR) uint64_t ll[2][XC__SHM_LL_LINES][8]; /* flagged lines, by parity */
    _Alignas(XC__SHM_PAIR) uint64_t llr[XC__SHM_LL_RING][XC__SHM_LL_LINES][8]; /* ... of ring operations */
    _Alignas(XC__SHM_PAIR) xc__shm_desc_t desc[XC__SHM_DESC_RING]; /* by shm op number % RING */
    /* ... and their hashes, packed: what the left neighbour compares
     * (8 a line, against 2 descriptions: each line it reads, this rank
     * must take back before its next store there). */
    _Alignas(XC__SHM_PAIR) uint64_t desc_hash[XC__SHM_DESC_RING];
    /* ... and whether its input was on huge pages (shm_coll.c
     * xc__shm_op_offer), packed: stored only when it changes, so that the
     * small operations, all 0, leave its lines alone. */
    _Alignas(XC__SHM_PAIR) uint8_t desc_fast[XC__SHM_DESC_RING];
    /* The way this rank wrote operation n's staged chunks, by n % RING,
     * stored only when it changes (a rooted operation between two ranks:
     * its reader times it), and this rank's preference per size class as
     * such a reader (XC__WCOPY_PREF_NONE or way + 1; transport/wcopy.h). */
    _Alignas(XC__SHM_PAIR) uint8_t nt_way[XC__SHM_DESC_RING];
    _Alignas(XC__SHM_PAIR) uint8_t nt_pref[XC__WCOPY_CLASSES];
    _Alignas(XC__SHM_PAIR) uint32_t bell;     /* futex word its threads sleep on */
    uint32_t bell_sleepers;                   /* its threads asleep on it */
    _Alignas(XC__SHM_PAIR) uint32_t gone;     /* destroyed its communicator */
    uint32_t pid;                             /* for single-copy reads (CMA) */
    uint64_t probe;                           /* address of a known value, to test CMA */
    int32_t share_fd;                         /* its table of shared blocks: the */
    uint64_t share_nonce;                     /* descriptor there, and its name;
                                               * -1 / 0: none (core/mem_share.c) */
} xc__shm_ctl_t;

/* A channel's counter: lines of its ring consumed by the receiver (the
 * sender's progress is in the lines' tags: shm_chan.c). */
typedef struct xc__chan_ctl {
    _Alignas(XC__SHM_PAIR) uint64_t tail; /* lines consumed (shm_chan.c) */
} xc__chan_ctl_t;

typedef struct xc__shm_hdr {
    _Alignas(64) uint32_t magic;
    int32_t nranks;
    uint64_t slot_bytes;
    uint64_t slot_rot;             /* places per slot (xc__shm_slot) */
    uint64_t chan_bytes;           /* ring bytes per channel, 0 = none */
    _Alignas(64) int32_t poison;   /* xc_result_t, 0 = healthy; set once */
    int32_t poison_claim;          /* 1 once a rank is writing the message */
    int32_t poison_rank;
    char poison_msg[XC__ERRMSG_LEN];
    _Alignas(64) uint32_t sleepers; /* threads asleep on any rank's bell  */
} xc__shm_hdr_t;

typedef struct xc__shm {
    void *base;
    size_t bytes;
    int nranks, me;
    size_t slot_bytes;
    xc__shm_hdr_t *hdr;
    xc__shm_ctl_t *ctl;     /* [nranks] */
    size_t rot;             /* places each slot turns through (xc__shm_slot) */
    char *slots;            /* [nranks][NSLOT][rot][slot_bytes] */
    char *result;           /* [NSLOT][slot_bytes] */
    size_t chan_bytes;      /* 0: no channels */
    xc__chan_ctl_t *chan_ctl; /* [from][to] */
    char *chan_data;        /* [from][to][chan_bytes] */
    pid_t owner;            /* the process that mapped it */
    char *ll_buf;           /* [nranks][XC__SHM_LL_MAX]: flagged-line payloads,
                             * unpacked (process-local) */
    int asym;               /* publishers skip the wake-up check's fence; a
                             * rank about to sleep makes every rank's
                             * barrier (membarrier; all ranks agreed) */
    uint64_t pubs;          /* this process's publications (rings) here: a
                             * waiter that published since it last looked
                             * made progress (xc__shm_pubs) */
    xc__wcopy_t wcopy;      /* how this process writes chunks into its
                             * slots (wcopy.h; mode: XCOLL_SHM_NT) */
} xc__shm_t;

/* Rank `rank`'s slot of the parity of `chunk`: the first of its rot
 * places, where every whole-slot chunk goes; ring entries run across all
 * of them (xc__shm_src). */
static inline char *xc__shm_slot(const xc__shm_t *s, int rank, uint64_t chunk)
{
    return s->slots +
           ((size_t)rank * XC__SHM_NSLOT + chunk % XC__SHM_NSLOT) * s->rot * s->slot_bytes;
}
static inline char *xc__shm_result(const xc__shm_t *s, uint64_t chunk)
{
    return s->result + (chunk % XC__SHM_NSLOT) * s->slot_bytes;
}
/* The channel from rank `from` to rank `to`. */
static inline xc__chan_ctl_t *xc__shm_chan_ctl(const xc__shm_t *s, int from, int to)
{
    return s->chan_ctl + (size_t)from * (size_t)s->nranks + (size_t)to;
}
static inline char *xc__shm_chan_data(const xc__shm_t *s, int from, int to)
{
    return s->chan_data + ((size_t)from * (size_t)s->nranks + (size_t)to) * s->chan_bytes;
}
static inline uint64_t xc__shm_load(const uint64_t *p)
{
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
/* Publish a counter (release: the slot writes before it are visible first)
 * and wake the ranks that may wait for it if they sleep: every rank (the
 * collectives' stages) or local rank `to` alone (a channel's peer).  Each
 * rank sleeps on a bell of its own, so a rank asleep in a collective is
 * not woken by its neighbours' point-to-point traffic (on a crowded node
 * that woke it for every message and slowed the pair's exchanges 20x). */
XC__HIDDEN void xc__shm_publish(xc__shm_t *s, uint64_t *counter, uint64_t v);
/* How many times this process rang s's bells (published); NULL: 0. */
static inline uint64_t xc__shm_pubs(const xc__shm_t *s)
{
    return s ? __atomic_load_n(&s->pubs, __ATOMIC_RELAXED) : 0;
}
XC__HIDDEN void xc__shm_publish_to(xc__shm_t *s, uint64_t *counter, uint64_t v, int to);
/* If a rank has poisoned segment `s`, poison `comm` with its cause (unless
 * already poisoned) and return 1; else 0.  A failing rank poisons the
 * segment before it gives up its buffers, so a read of a peer's buffer
 * that fails after that blames the cause, not the peer (engine.c). */
XC__HIDDEN int xc__shm_adopt_poison(xc_comm_t *comm, xc__shm_t *s);
/* Wake every sleeping rank of the node / local rank `to`. */
XC__HIDDEN void xc__shm_ring(xc__shm_t *s);
XC__HIDDEN void xc__shm_ring_rank(xc__shm_t *s, int to);
/* This rank's sleep (Dekker with the publishers): announce (returns the
 * bell's value to sleep on), re-check for progress, then sleep until the
 * bell moves from `seen` or `timeout_ms` passes, then withdraw. */
XC__HIDDEN uint32_t xc__shm_sleep_begin(xc__shm_t *s);
XC__HIDDEN void xc__shm_sleep(xc__shm_t *s, uint32_t seen, int timeout_ms);
XC__HIDDEN void xc__shm_sleep_end(xc__shm_t *s);
/* The progress thread's idle sleep on the same bell (engine.c): it reads
 * the bell before it looks for work, sleeps on that value (xc__shm_sleep,
 * timeout_ms < 0: no timeout) without announcing itself, so publications
 * do not ring for it; a local kick moves the bell and wakes it
 * (xc__shm_bump of its own rank).  Announcing it on this rank's bell alone
 * *arms* it: a peer's next publication to this rank (xc__shm_ring_rank,
 * the channels) wakes it; the node-wide publications (xc__shm_ring) do
 * not.  xc__shm_bump of another rank wakes its thread unconditionally (a
 * rank stuck on a peer's channel nudges it before it sleeps). */
XC__HIDDEN uint32_t xc__shm_bell(xc__shm_t *s);
XC__HIDDEN void xc__shm_bump(xc__shm_t *s, int r);
XC__HIDDEN void xc__shm_arm(xc__shm_t *s);
XC__HIDDEN void xc__shm_disarm(xc__shm_t *s);

/* Remove the segments process `pid` created (/dev/shm/xcoll-<pid>-*): its
 * parent -- a launcher -- calls it once it has reaped that process, whose
 * segment may outlive it if it died inside the set-up window. */
XC__HIDDEN void xc__shm_remove_of(pid_t pid);

/* Create (local rank 0) or open the segment `name` for `nranks` ranks,
 * with channels of `chan_bytes` (a power of two, or 0 for none). */
XC__HIDDEN xc_result_t xc__shm_create(const char *name, int nranks, int me,
                                      size_t slot_bytes, size_t rot, size_t chan_bytes,
                                      xc__shm_t **out);
XC__HIDDEN xc_result_t xc__shm_open(const char *name, int nranks, int me,
                                    xc__shm_t **out);
XC__HIDDEN void xc__shm_unlink(const char *name);
/* Set up a new communicator's shared memory (shm_setup.c): a segment per
 * node with two or more ranks, its channels, and on a single node the
 * segment of the shared-memory collectives.  Collective over `comm`. */
XC__HIDDEN xc_result_t xc__shm_attach(xc_comm_t *comm);
/* Unmap (NULL ok). */
XC__HIDDEN void xc__shm_close(xc__shm_t *s);
/* Map this rank's slot areas now (they are only written by it), so that
 * neither its first operations nor the cost model's probes at creation pay
 * a page fault per 4 KiB of the places they turn through.  Only by
 * MADV_POPULATE_WRITE (Linux 5.14), which fails where /dev/shm has no room
 * left; a store per page would raise SIGBUS there. */
XC__HIDDEN void xc__shm_prefault_own(xc__shm_t *s);
/* Mark the segment poisoned (first caller wins) so that every local rank
 * sees it at its next check, and wake sleepers. */
XC__HIDDEN void xc__shm_poison(xc__shm_t *s, xc_result_t rc, const char *msg);

#endif
