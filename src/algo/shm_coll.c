/*
 * shm_coll.c -- the chunk pipeline that runs every shared-memory
 * collective (see shm_coll.h), and the segment's set-up for a communicator.
 */
#include "shm_common.h"
#include "../core/mem_share.h"
#include "../engine/bias.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

size_t xc__shm_one_shot_max(int nranks)
{
    /* One shot: every rank reads every input whole.  Worth it while the
     * inputs are small next to the second synchronisation it saves. */
    return nranks <= 4 ? 16384 : 4096;
}

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static int desc_eq(const xc__desc_t *a, const xc__desc_t *b)
{
    return a->coll == b->coll && a->dtype == b->dtype && a->op == b->op &&
           a->algo == b->algo && a->root == b->root && a->count == b->count;
}

/* Operation `seq`'s hash, which every rank publishes and compares with its
 * neighbour's (equal hashes: the same operation).  The description's part
 * is kept for the last description hashed: a loop of one collective hashes
 * it once. */
static uint64_t desc_hash(xc_comm_t *comm, uint64_t seq, const xc__desc_t *d)
{
    if (XC__UNLIKELY(!comm->shm_hdh || !desc_eq(&comm->shm_hdesc, d))) {
        uint64_t h = mix((uint64_t)d->coll | (uint64_t)d->dtype << 8 | (uint64_t)d->op << 16 |
                         (uint64_t)d->algo << 24 | (uint64_t)(uint32_t)d->root << 32);
        comm->shm_hdesc = *d;
        comm->shm_hdh = mix(h ^ d->count);
    }
    return mix(comm->shm_hdh + seq);
}

/* Rank j's description of operation `seq` differs from ours (`mine`):
 * poison the communicator with both. */
static void mismatch(xc_comm_t *comm, int j, const xc__shm_desc_t *theirs, const xc__desc_t *mine,
                     uint64_t seq)
{
    char m[200], t[200];
    xc__desc_str(mine, seq, m, sizeof m);
    if (theirs->seq == seq) {
        xc__desc_str(&theirs->d, theirs->seq, t, sizeof t);
        xc__comm_poison(comm, XC_ERR_MISMATCH, 0, "rank %d called %s while this rank called %s",
                        j, t, m);
    } else {
        xc__comm_poison(comm, XC_ERR_MISMATCH, 0,
                        "rank %d is out of step with this rank's %s (its operations "
                        "moved a different amount of data before)",
                        j, m);
    }
}

/* Rank j left the communicator (its `gone` flag) while this rank needs
 * it: lost -- unless the segment is poisoned, when the cause it names
 * (e.g. the mismatch that made j give up) is the error, not j's leaving. */
static void left(xc_comm_t *comm, xc__shm_t *s, int j)
{
    if (!xc__shm_adopt_poison(comm, s)) xc__comm_peer_lost(comm, j, "destroyed its communicator");
}

/* Has rank j published g on `word` (one of its counters)?  If not, 0 --
 * after reporting j lost if it left without doing so, else adopting a
 * poison if there is one.  A rank stores its counters before its `gone`
 * (release), so the look at the word after seeing `gone` is final: one
 * that finished the operation and then left (the peer of a rank
 * descheduled between the two looks) is not lost. */
static int reached(xc_comm_t *comm, xc__shm_t *s, int j, const uint64_t *word, uint64_t g)
{
    if (xc__shm_load(word) >= g) return 1;
    if (__atomic_load_n(&s->ctl[j].gone, __ATOMIC_ACQUIRE)) {
        if (xc__shm_load(word) >= g) return 1;
        left(comm, s, j);
        return 0;
    }
    xc__shm_adopt_poison(comm, s);
    return 0;
}

/* Does rank j run the same operation as ours (its chunk g has arrived)?
 * A rank that left (`gone`) and disagrees is lost, not mismatched. */
static int same_op(xc_comm_t *comm, xc__op_t *op, xc__shm_op_t *o, int j, uint64_t g, int gone)
{
    xc__shm_ctl_t *c = &o->shm->ctl[j];
    /* Relaxed: the hash may already belong to a later chunk of j's; then
     * the ring below decides. */
    if (xc__shm_load(&c->in) == g && __atomic_load_n(&c->in_hash, __ATOMIC_RELAXED) == o->hash)
        return 1;
    const xc__shm_desc_t *e = &c->desc[o->n % XC__SHM_DESC_RING];
    xc__shm_desc_t theirs = *e;
    if (theirs.seq == op->seq && desc_eq(&theirs.d, &op->desc)) return 1;
    if (gone) { /* it left while in another operation */
        left(comm, o->shm, j);
        return 0;
    }
    mismatch(comm, j, &theirs, &op->desc, op->seq);
    return 0;
}

/* Flagged lines (shm.h): line 0 carries the description hash and 48
 * payload bytes, the others 56, each tagged with the chunk number. */
static int ll_lines(size_t bytes) { return bytes <= 48 ? 1 : 1 + (int)((bytes - 48 + 55) / 56); }
/* Line i's share of a `bytes` payload: its `*n` bytes at `*off` of the
 * payload sit at the returned address of the line. */
static char *ll_piece(uint64_t *line, int i, size_t bytes, size_t *off, size_t *n)
{
    size_t cap = i ? 56 : 48;
    *off = i ? 48 + (size_t)(i - 1) * 56 : 0;
    *n = bytes - *off < cap ? bytes - *off : cap;
    return (char *)line + (i ? 0 : 8);
}
_Static_assert(XC__SHM_LL_RING >= XC__SHM_NSLOT * XC__SHM_RING,
               "ring operations' flagged lines: one entry per chunk they may be apart");

/* memcpy of a line's share (n <= 56 bytes) without the call: two moves
 * of the largest power of two up to n, the second ending at n (they
 * overlap). */
static inline void copy_piece(char *dst, const char *src, size_t n)
{
    if (n >= 32) {
        __builtin_memcpy(dst, src, 32);
        __builtin_memcpy(dst + n - 32, src + n - 32, 32);
    } else if (n >= 16) {
        __builtin_memcpy(dst, src, 16);
        __builtin_memcpy(dst + n - 16, src + n - 16, 16);
    } else if (n >= 8) {
        __builtin_memcpy(dst, src, 8);
        __builtin_memcpy(dst + n - 8, src + n - 8, 8);
    } else if (n >= 4) {
        __builtin_memcpy(dst, src, 4);
        __builtin_memcpy(dst + n - 4, src + n - 4, 4);
    } else {
        for (size_t i = 0; i < n; i++) dst[i] = src[i];
    }
}

/* The right neighbour (no division on every operation's path). */
static inline int right_of(const xc__shm_op_t *o) { return o->me + 1 == o->L ? 0 : o->me + 1; }

/* Rank j's flagged lines for chunk g. */
static uint64_t (*ll_at(const xc__shm_op_t *o, int j, uint64_t g))[8]
{
    xc__shm_ctl_t *c = &o->shm->ctl[j];
    return o->ring ? c->llr[g % XC__SHM_LL_RING] : c->ll[g % 2];
}

/* Where rank j's lines leave a gap in its staging (ll_gap): at block j;
 * none (SIZE_MAX) for the other layouts. */
static inline size_t ll_gap_at(const xc__shm_op_t *o, int j)
{
    return o->ll_gap ? (size_t)j * o->ll_gap : SIZE_MAX;
}

/* Move a line's share of the payload, `n` bytes at payload offset `off`,
 * between the line (`p`) and a staging buffer `buf` that holds `gap` more
 * bytes at `gap_at` which the lines do not carry (put: into the line). */
static inline void ll_move(char *buf, size_t off, char *p, size_t n, size_t gap_at, size_t gap,
                           int put)
{
    if (XC__UNLIKELY(off + n > gap_at)) {
        if (off < gap_at) { /* the share straddles the gap */
            size_t a = gap_at - off;
            put ? copy_piece(p, buf + off, a) : copy_piece(buf + off, p, a);
            put ? copy_piece(p + a, buf + gap_at + gap, n - a)
                : copy_piece(buf + gap_at + gap, p + a, n - a);
            return;
        }
        off += gap; /* after it */
    }
    put ? copy_piece(p, buf + off, n) : copy_piece(buf + off, p, n);
}

/* A payload in one line, whole (no gap): moved without the line loop. */
static inline int ll_one_line(const xc__shm_op_t *o)
{
    return o->ll_bytes <= XC__SHM_LL_LINE0 && !o->ll_gap;
}

/* Copy this rank's staged payload (unpacked in ll_buf) into its flagged
 * lines of chunk g's parity, last line first, each line's payload before
 * its tag: a reader that sees line 0's tag finds the others written. */
static void ll_put_from(xc__shm_op_t *o, uint64_t g, const char *src)
{
    uint64_t (*l)[8] = ll_at(o, o->me, g);
    size_t bytes = o->ll_bytes;
    if (ll_one_line(o)) { /* most small calls */
        if (bytes) copy_piece((char *)l[0] + 8, src, bytes);
        memcpy(l[0], &o->hash, 8);
        __atomic_store_n(&l[0][7], g, __ATOMIC_RELEASE);
        return;
    }
    size_t gap_at = ll_gap_at(o, o->me);
    for (int i = ll_lines(bytes) - 1; i >= 0; i--) {
        size_t off, n;
        char *p = ll_piece(l[i], i, bytes, &off, &n);
        /* (src may be NULL when empty) */
        if (n) ll_move((char *)(uintptr_t)src, off, p, n, gap_at, o->ll_gap, 1);
        if (i == 0) memcpy(l[0], &o->hash, 8);
        __atomic_store_n(&l[i][7], g, __ATOMIC_RELEASE);
    }
}

static void ll_put(xc__shm_op_t *o, uint64_t g) { ll_put_from(o, g, xc__shm_src(o, o->me, g)); }

/* Take `bytes` of lines this rank writes next into its core's cache for
 * writing now, while nobody reads them (every reader of their last
 * contents has staged since): the next operation's stores then do not wait
 * for the lines to come back from the readers' caches. */
static void own_lines(char *p, size_t bytes)
{
    for (size_t i = 0; i < bytes; i += 64) {
#if defined(__x86_64__)
        __asm__ volatile("prefetchw %0" : : "m"(p[i]));
#else
        __builtin_prefetch(p + i, 1, 3);
#endif
    }
}

/* ... the flagged lines of the next chunk's parity (only the line the
 * readers are watching then waits for them) ... */
static void ll_own_next(xc__shm_op_t *o, uint64_t g)
{
    own_lines((char *)ll_at(o, o->me, g + 1), (size_t)ll_lines(o->ll_bytes) * 64);
}

/* ... and after a one-chunk operation through the slots, up to 4 KiB of the
 * next parity's slot (2-rank all-reduce of 1 / 2 KiB 1.04-1.11 / 1.26-1.37
 * us -> 0.93-0.98 / 0.88-0.93 by means, far state; bench/RESULTS.md). */
static void slot_own_next(xc__shm_op_t *o)
{
    size_t b = o->a.count * o->es * xc__shm_blocks(&o->a, o->L);
    own_lines(xc__shm_slot(o->shm, o->me, o->base + 2), b < 4096 ? b : 4096);
}

/* Rank j's flagged lines of chunk g: 0 while any tag is not g yet; else
 * *hash set to the hash it carries, 1.  Line 0's tag first (the writer's
 * last store); once it is there, the other lines are asked for at once
 * (xc__shm_prefetch). */
static int ll_ready(const xc__shm_op_t *o, int j, uint64_t g, uint64_t *hash)
{
    uint64_t (*l)[8] = ll_at(o, j, g);
    int n = ll_lines(o->ll_bytes);
    if (__atomic_load_n(&l[0][7], __ATOMIC_ACQUIRE) != g) return 0;
    if (n > 1) xc__shm_prefetch(l[1], (size_t)(n - 1) * 64);
    for (int i = 1; i < n; i++)
        if (__atomic_load_n(&l[i][7], __ATOMIC_ACQUIRE) != g) return 0;
    memcpy(hash, l[0], 8);
    return 1;
}

/* Copy rank j's payload of chunk g (its lines ready) to dst (laid out as
 * j's staging: the gap of ll_gap left as it is). */
static void ll_unpack(const xc__shm_op_t *o, int j, uint64_t g, char *dst)
{
    uint64_t (*l)[8] = ll_at(o, j, g);
    if (ll_one_line(o)) {
        copy_piece(dst, (const char *)l[0] + 8, o->ll_bytes);
        return;
    }
    size_t gap_at = ll_gap_at(o, j);
    for (int i = 0, n = ll_lines(o->ll_bytes); i < n; i++) {
        size_t off, k;
        char *p = ll_piece(l[i], i, o->ll_bytes, &off, &k);
        ll_move(dst, off, p, k, gap_at, o->ll_gap, 0);
    }
}

static int ll_take(xc__shm_op_t *o, int j, uint64_t g, uint64_t *hash)
{
    if (!ll_ready(o, j, g, hash)) return 0;
    ll_unpack(o, j, g, xc__shm_src(o, j, g));
    return 1;
}

/* The lowest `out` every other rank must have reached before this rank
 * stages chunk g (its slot, ring entry or inline area of that parity was
 * last read at that chunk). */
static uint64_t slot_need(const xc_comm_t *comm, const xc__shm_op_t *o, uint64_t g)
{
    if (comm->shm_synced + XC__SHM_NSLOT > g) return 0; /* all are past g - NSLOT */
    if (!o->ring) return g - XC__SHM_NSLOT;
    uint64_t span = XC__SHM_NSLOT * XC__SHM_RING, full = comm->shm_full[g % XC__SHM_NSLOT];
    if (o->ll) {
        /* Lines of their own (no whole-slot chunk overwrote them), all 32
         * entries while this thread holds the bias: without it the lock's
         * every acquire waits for the lines just written, and a writer 32
         * ahead ran twice as slow as one 8 ahead (bench/RESULTS.md,
         * thirty-first session). */
        if (xc__bias_held(comm)) span = XC__SHM_LL_RING;
        return g > span ? g - span : 0;
    }
    uint64_t need = g > span ? g - span : 0;
    return full > need ? full : need;
}

/* Is every other rank done with what this rank last staged where chunk g
 * goes (o->need set)?  The others' `out` lines are read only when the
 * bound last read does not cover it: a rank that reads nobody would
 * otherwise fetch them at every operation (see the neighbour's check in
 * shm_advance). */
static uint64_t out_min(xc_comm_t *comm, const xc__shm_op_t *o)
{
    uint64_t lo = UINT64_MAX;
    for (int j = 0; j < o->L; j++) {
        uint64_t v = j == o->me ? UINT64_MAX : xc__shm_load(&o->shm->ctl[j].out);
        if (v < lo) lo = v;
    }
    return comm->shm_out_min = lo;
}

static int slot_free(xc_comm_t *comm, xc__shm_op_t *o, uint64_t g)
{
    o->need = slot_need(comm, o, g);
    return o->need <= comm->shm_out_min || out_min(comm, o) >= o->need;
}

/*
 * Description checks of a rank with its right neighbour when it does not
 * read it (a bcast root, a reduce's non-roots): so that ranks which read
 * nobody still meet a rank that disagrees.  Waiting for the neighbour's
 * arrival would tie every such operation to it, and reading its lines at
 * every operation would make it wait to take them back, so every check is
 * queued and made in a batch against both ranks' description rings when
 * the queue is full (or at an operation that reads the neighbour anyway)
 * -- at the latest NBQ_CAP operations later.  Returns 0 to wait (or on
 * error).
 * "Operations" here are shared-memory ones (o->n), which index the ring:
 * not the communicator's op seq, since other operations (over TCP, or
 * point-to-point algorithms) may run between two of them -- a check
 * deferred across 32 of those once read an entry already overwritten.
 */
#define NBQ_CAP ((int)(sizeof ((xc_comm_t *)0)->shm_nbq / sizeof ((xc_comm_t *)0)->shm_nbq[0]))
/* A check is made at most NBQ_CAP operations late, when the neighbour may
 * be LL_RING + 1 operations further: both description entries must still
 * be there. */
_Static_assert(XC__SHM_DESC_RING > NBQ_CAP + XC__SHM_LL_RING + 1,
               "deferred checks must fit the description ring");
static int nb_resolve(xc_comm_t *comm, xc__shm_op_t *o)
{
    xc__shm_t *s = o->shm;
    int nb = right_of(o);
    while (comm->shm_nbq_n > 0) {
        uint64_t n = comm->shm_nbq[comm->shm_nbq_head][0], g = comm->shm_nbq[comm->shm_nbq_head][1];
        if (xc__shm_load(&s->ctl[nb].in) < g) {
            if (comm->shm_nbq_n < NBQ_CAP && n + NBQ_CAP > o->n) return 1; /* later */
            if (!reached(comm, s, nb, &s->ctl[nb].in, g)) return 0;
        }
        /* The hashes first (packed, fewer of the neighbour's lines), the
         * descriptions only when they differ. */
        uint64_t e = n % XC__SHM_DESC_RING;
        if (s->ctl[nb].desc_hash[e] != s->ctl[o->me].desc_hash[e]) {
            const xc__shm_desc_t *mine = &s->ctl[o->me].desc[e];
            xc__shm_desc_t theirs = s->ctl[nb].desc[e];
            if (theirs.seq != mine->seq || !desc_eq(&theirs.d, &mine->d)) {
                mismatch(comm, nb, &theirs, &mine->d, mine->seq);
                return 0;
            }
        }
        comm->shm_nbq_head = (comm->shm_nbq_head + 1) % NBQ_CAP;
        comm->shm_nbq_n--;
    }
    return 1;
}

/* This rank's description of its operation o->n (o->hash set), for the
 * ranks that check it: ordered before them by the publication of `in`. */
static void put_desc(xc__shm_ctl_t *me, const xc__shm_op_t *o, uint64_t seq, const xc__desc_t *d,
                     int fast)
{
    xc__shm_desc_t *e = &me->desc[o->n % XC__SHM_DESC_RING];
    e->seq = seq;
    e->d = *d;
    uint8_t *f = &me->desc_fast[o->n % XC__SHM_DESC_RING];
    if (__atomic_load_n(f, __ATOMIC_RELAXED) != (uint8_t)fast)
        __atomic_store_n(f, (uint8_t)fast, __ATOMIC_RELAXED); /* ordered by `in` */
    me->desc_hash[o->n % XC__SHM_DESC_RING] = o->hash;
}

/* Statistics of a completed operation: bytes_sent counts the payload this
 * rank published to its peers (its input), bytes_recv what it took in (its
 * output), whether it moved through staging slots or single-copy reads. */
static void account(xc_comm_t *comm, const xc__shm_op_t *o)
{
    uint64_t n = o->a.count * o->es, L = (uint64_t)o->L, in = 0, out = 0;
    int root = o->me == o->a.root;
    switch (o->a.coll) {
    case XC_COLL_ALLREDUCE: in = out = n; break;
    case XC_COLL_REDUCE_SCATTER: in = L * n, out = n; break;
    case XC_COLL_ALLGATHER: in = n, out = L * n; break;
    case XC_COLL_BCAST: in = root ? n : 0, out = root ? 0 : n; break;
    case XC_COLL_REDUCE: in = n, out = root ? n : 0; break;
    case XC_COLL_ALLTOALL: in = out = L * n; break;
    default: break;
    }
    comm->stats.bytes_sent[XC_TRANSPORT_SHM] += in;
    comm->stats.bytes_recv[XC_TRANSPORT_SHM] += out;
    comm->stats.single_copy_bytes += o->xfer;
}

/* This rank is done with chunk g.  A ring operation's `out` is published
 * at every OUT_EVERY-th chunk only (or before this rank waits for
 * anything: xc__shm_out_flush), since the rank that runs ahead reads it
 * at every operation once it is a ring's depth ahead, and each read made
 * the next publication wait to take the line back. */
#define OUT_EVERY 4
static void publish_out(xc_comm_t *comm, const xc__shm_op_t *o, uint64_t g)
{
    if (o->ring && g % OUT_EVERY) {
        comm->shm_out_late = g;
        return;
    }
    comm->shm_out_late = 0;
    xc__shm_publish(o->shm, &o->shm->ctl[o->me].out, g);
    /* A barrier drains it where publications go without a fence: left in
     * the store buffer, what ran next after the barrier was slow in half
     * the runs (docs/shm.md "Waiting"); after every operation it cost
     * small back-to-back all-reduces 2-5 %. */
    if (o->a.coll == XC_COLL_BARRIER && o->shm->asym) __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

void xc__shm_out_flush(xc_comm_t *comm)
{
    if (XC__LIKELY(!comm->shm_out_late)) return;
    xc__shm_t *s = comm->shm;
    xc__shm_publish(s, &s->ctl[s->me].out, comm->shm_out_late);
    comm->shm_out_late = 0;
}

static int advance(xc_comm_t *comm, xc__op_t *op);
static void take_offer(xc_comm_t *comm, xc__op_t *op, xc__shm_op_t *o);

/* Stage chunk g (the operation's k-th) and publish it: `in` = g. */
static void stage_chunk(xc_comm_t *comm, xc__shm_op_t *o, uint64_t seq, const xc__desc_t *d,
                        uint64_t g)
{
    xc__shm_t *s = o->shm;
    xc__shm_ctl_t *me = &s->ctl[o->me];
    if (o->k == 0) put_desc(me, o, seq, d, o->fast);
    if (o->vt->stage) o->vt->stage(o, o->k, xc__shm_src(o, o->me, g));
    if (o->ll) ll_put(o, g);
    /* Fence-free publication (shm.c) suits a rank that moves on (a
     * ring's writer, a channel's sender), not one that polls the peers
     * polling its own lines next: drain the lines before `in` (the 2-rank
     * 64-byte all-reduce 0.24-0.32 us, against 0.41-0.47 with the fence
     * after `in` and 0.38-0.57 with none; twenty-first session). */
    if (o->ll && !o->ring) __atomic_thread_fence(__ATOMIC_SEQ_CST);
    __atomic_store_n(&me->in_hash, o->hash, __ATOMIC_RELAXED); /* ordered by `in` */
    xc__shm_publish(s, &me->in, g);
    comm->stats.msgs_sent[XC_TRANSPORT_SHM]++;
}

/* A broadcast or reduce between two ranks: one writes the chunks, the
 * other reads them (xc__shm_reduce_root_reads); 1 on the reader. */
static int pair_reader(const xc__shm_op_t *o)
{
    if (o->L != 2 || (o->a.coll != XC_COLL_BCAST && o->a.coll != XC_COLL_REDUCE)) return -1;
    return (o->a.coll == XC_COLL_BCAST) != (o->me == o->a.root);
}

/* How this rank writes the operation's staged chunks (transport/wcopy.h):
 * measured on the operation where every rank stages and reads; between
 * the two ranks of a rooted one, as its reader prefers (the writer
 * publishes the way it took, the reader times its operation by it);
 * ordinarily where it is not measured (xc__shm_way_measured). */
static void slot_way_begin(xc__shm_t *s, xc__shm_op_t *o)
{
    size_t bytes = o->a.count * o->es;
    int r = pair_reader(o);
    if (r < 0) {
        o->nt = xc__wcopy_begin(&s->wcopy, bytes, xc__shm_way_measured(o->a.coll, o->L), &o->t0);
    } else if (r) {
        xc__wcopy_read_begin(&s->wcopy, bytes, &o->t0);
    } else {
        const uint8_t *pref = &s->ctl[1 - o->me].nt_pref[xc__wcopy_class(bytes)];
        o->nt = xc__wcopy_rooted_way(&s->wcopy, bytes, __atomic_load_n(pref, __ATOMIC_RELAXED));
        uint8_t *f = &s->ctl[o->me].nt_way[o->n % XC__SHM_DESC_RING];
        if (__atomic_load_n(f, __ATOMIC_RELAXED) != (uint8_t)o->nt)
            __atomic_store_n(f, (uint8_t)o->nt, __ATOMIC_RELAXED); /* ordered by `in` */
    }
}

/* A timed operation ended: its time joins its way's cost; a pair's
 * reader publishes its preference when it changes. */
static void slot_way_end(xc__shm_op_t *o)
{
    xc__shm_t *s = o->shm;
    size_t bytes = o->a.count * o->es;
    if (pair_reader(o) != 1) {
        xc__wcopy_end(&s->wcopy, bytes, o->staged, o->nt, o->t0);
        return;
    }
    /* the writer's way of this operation: stored before its first chunk */
    const uint8_t *w = &s->ctl[1 - o->me].nt_way[o->n % XC__SHM_DESC_RING];
    int way = __atomic_load_n(w, __ATOMIC_RELAXED);
    uint8_t pref = (uint8_t)xc__wcopy_read_end(&s->wcopy, bytes, way, o->t0);
    uint8_t *p = &s->ctl[o->me].nt_pref[xc__wcopy_class(bytes)];
    if (__atomic_load_n(p, __ATOMIC_RELAXED) != pref) __atomic_store_n(p, pref, __ATOMIC_RELAXED);
}

/* After a one-chunk ring operation a pair's writer stages (a
 * broadcast's root, a reduce's other rank), up to 2 KiB of the entry the
 * next such operation of its size takes, if the reader is done with it
 * by the bound last read (else taking its lines would slow the reader):
 * 2 ranks, 2 KiB broadcast / reduce 0.60-0.65 / 0.56-0.60 -> 0.44-0.48 /
 * 0.46-0.48 us back to back; 4-8 KiB, bound by the reader's take, level
 * (and with 4 KiB owned, 2-4 % slower; fifty-sixth session). */
static void ring_own_next(xc_comm_t *comm, xc__shm_op_t *o)
{
    uint64_t g = o->base + 2;
    if (slot_need(comm, o, g) > comm->shm_out_min) return;
    size_t b = o->a.count * o->es;
    own_lines(xc__shm_src(o, o->me, g), b < 2048 ? b : 2048);
}

/* After the last chunk: the lines or slot this rank writes next taken
 * for writing, the statistics counted. */
static void finish(xc_comm_t *comm, xc__shm_op_t *o)
{
    if (o->ll) ll_own_next(o, o->base + o->nk);
    else if (o->nk == 1 && !o->ring && o->vt->stage) slot_own_next(o);
    else if (o->nk == 1 && o->ring && pair_reader(o) == 0 && !o->nt) ring_own_next(comm, o);
    if (o->t0) slot_way_end(o);
    account(comm, o);
}

static int args_eq(const xc__args_t *a, const xc__args_t *b)
{
    return a->coll == b->coll && a->sbuf == b->sbuf && a->rbuf == b->rbuf &&
           a->count == b->count && a->dtype == b->dtype && a->op == b->op && a->root == b->root;
}

/* The operation the express path began (comm->shm_begun) is this one --
 * the same seq, description and buffers: it takes over the express path's
 * state (so it goes on exactly as it began, whatever its own build chose)
 * and resumes where that stopped -- staged and published, reading its
 * peers. */
static int resume(xc_comm_t *comm, xc__op_t *op, xc__shm_op_t *o)
{
    struct xc__shm_begun *b = &comm->shm_begun;
    const xc__shm_op_t *was = (const xc__shm_op_t *)(const void *)b->state;
    b->on = 0;
    if (XC__UNLIKELY(b->seq != op->seq || !desc_eq(&b->d, &op->desc) || !args_eq(&was->a, &o->a))) {
        char m[200];
        xc__desc_str(&op->desc, op->seq, m, sizeof m);
        xc__comm_poison(comm, XC_ERR_INTERNAL, 0,
                        "%s started where another collective had begun (collectives "
                        "called on one communicator from two threads at once?)", m);
        return 0;
    }
    *o = *was;
    comm->stats.express_resumed++;
    return 1;
}

static int shm_advance(xc_comm_t *comm, xc__op_t *op)
{
    xc__shm_op_t *o = (xc__shm_op_t *)op->privbuf;
    if (o->phase < 0 && !o->ring) xc__shm_out_flush(comm);
    int done = advance(comm, op);
    if (!done) xc__shm_out_flush(comm);
    return done;
}

/* A single-copy transfer of this rank's failed (o->err): the error. */
static void xfer_failed(xc_comm_t *comm, xc__shm_t *s, const xc__shm_op_t *o)
{
    /* A peer that failed first freed its buffer: its cause. */
    if (xc__shm_adopt_poison(comm, s)) return;
    if (o->err == ESRCH || __atomic_load_n(&s->ctl[o->err_peer].gone, __ATOMIC_ACQUIRE))
        xc__comm_peer_lost(comm, o->err_peer, "vanished during a single-copy transfer");
    else
        xc__comm_poison(comm, XC_ERR_SYSTEM, 0,
                        "single-copy transfer with rank %d failed (process_vm_readv/writev): %s",
                        o->err_peer, strerror(o->err));
}

static int advance(xc_comm_t *comm, xc__op_t *op)
{
    xc__shm_op_t *o = (xc__shm_op_t *)op->privbuf;
    xc__shm_t *s = o->shm;
    xc__shm_ctl_t *me = &s->ctl[o->me];
    if (o->phase < 0) { /* first call: the operation starts now */
        /* A rank arriving after the others failed fails too (its peers'
         * error frames may still be on their way). */
        if (xc__shm_adopt_poison(comm, s)) {
            comm->shm_begun.on = 0;
            return 0;
        }
        if (XC__UNLIKELY(comm->shm_begun.on)) {
            if (!resume(comm, op, o)) return 0;
        } else {
            if (o->alt) take_offer(comm, op, o);
            o->base = xc__shm_load(&me->in);
            o->n = comm->shm_ops++;
            o->hash = desc_hash(comm, op->seq, &op->desc);
            if (o->vt->stage && !o->ll) slot_way_begin(s, o);
            o->phase = 0;
        }
    }
    while (o->k < o->nk) {
        uint64_t g = o->base + o->k + 1;
        switch (o->phase) {
        case 0: /* our slot (entry) for g must be free */
            if (!slot_free(comm, o, g)) {
                /* (A reader that left without reading it is lost.) */
                for (int j = 0; j < o->L; j++)
                    if (j != o->me && !reached(comm, s, j, &s->ctl[j].out, o->need)) break;
                return 0;
            }
            if (!o->ll && !o->ring) comm->shm_full[g % XC__SHM_NSLOT] = g;
            o->phase = 1;
            /* fall through */
        case 1: /* stage and publish */
            stage_chunk(comm, o, op->seq, &op->desc, g);
            o->phase = 2;
            /* fall through */
        case 2: { /* the chunks we read (and, at the first, our neighbour) */
            int all = 1;
            for (int j = 0; j < o->L; j++) {
                if (j == o->me) continue;
                int reads = o->vt->reads(o, j);
                all &= reads;
                if (!reads) continue;
                uint64_t h;
                /* Flagged lines: the payload is its own signal; the
                 * counter only when it is not all there. */
                if (o->ll && ll_take(o, j, g, &h)) {
                    if (h != o->hash && !same_op(comm, op, o, j, g, 0)) return 0;
                    continue;
                }
                /* A rank that left may still have left what we need;
                 * only what it never staged is lost. */
                if (!reached(comm, s, j, &s->ctl[j].in, g)) return 0;
                int gone = __atomic_load_n(&s->ctl[j].gone, __ATOMIC_ACQUIRE);
                if (o->k == 0 && !same_op(comm, op, o, j, g, gone)) return 0;
                if (o->ll && !ll_take(o, j, g, &h)) {
                    /* It staged chunk g, the same operation, not in the
                     * flagged lines: the ranks' builds disagree. */
                    xc__comm_poison(comm, XC_ERR_MISMATCH, 0,
                                    "rank %d staged chunk %" PRIu64 " outside the flagged lines "
                                    "(the ranks chose different paths: different xcoll builds, "
                                    "or arguments that differ)", j, g);
                    return 0;
                }
            }
            int nb = right_of(o);
            if (o->k == 0 && !o->vt->reads(o, nb)) {
                /* Queued, and made in a batch once the queue is full:
                 * reading the neighbour's lines at every operation made
                 * it wait to take them back at each of its publications
                 * (a small broadcast's reader 0.60 against 0.43 us). */
                if (comm->shm_nbq_n == NBQ_CAP && !nb_resolve(comm, o)) return 0;
                int t = (comm->shm_nbq_head + comm->shm_nbq_n++) % NBQ_CAP;
                comm->shm_nbq[t][0] = o->n;
                comm->shm_nbq[t][1] = g;
            } else if (o->k == 0 && comm->shm_nbq_n && !nb_resolve(comm, o)) {
                return 0;
            }
            if (all) comm->shm_synced = g;
            o->phase = 3;
        }
            /* fall through */
        case 3:
            if (o->vt->mid) {
                o->vt->mid(o, o->k);
                if (o->err) { /* published, peers would copy a partial block */
                    xfer_failed(comm, s, o);
                    return 0;
                }
                xc__shm_publish(s, &me->mid, g);
                o->phase = 4;
            } else {
                o->phase = 5;
                continue;
            }
            /* fall through */
        case 4:
            for (int j = 0; j < o->L; j++)
                if (j != o->me && !reached(comm, s, j, &s->ctl[j].mid, g)) return 0;
            o->phase = 5;
            /* fall through */
        case 5:
            if (o->vt->out) o->vt->out(o, o->k);
            if (o->err) {
                xfer_failed(comm, s, o);
                return 0;
            }
            publish_out(comm, o, g);
            o->phase = 6;
            /* fall through */
        case 6: /* single copy: our buffer is in use until every reader is done */
            if (o->vt->wait_out)
                for (int j = 0; j < o->L; j++)
                    if (j != o->me && !reached(comm, s, j, &s->ctl[j].out, g)) return 0;
            o->phase = 0;
            o->k++;
            break;
        }
    }
    finish(comm, o);
    return 1;
}

/* A reader of a ring operation's lines asks for rank j's next two entries'
 * lines, once the writer may be 32 ahead (it holds the bias, and so does
 * this thread, as a rule): a writer that runs ahead has written them
 * already, and the reader's loads would otherwise fetch them call by call
 * (8-byte broadcast back to back, medians 0.19-0.22 -> 0.10-0.15 us with
 * the bias; under the lock, 8 entries deep, it was slower: 0.21-0.23 ->
 * 0.24; bench/RESULTS.md, thirty-first session).  Every line the payload
 * takes, not the first alone (the adjacent-line prefetcher brings its
 * pair partner, no more): 2 ranks, 128-512 B broadcast 0.16-0.20 -> 0.08-
 * 0.10 us, reduce 0.18-0.24 -> 0.10-0.12 (fifty-sixth session). */
static void ll_ask_ahead(const xc_comm_t *comm, const xc__shm_op_t *o, int j, uint64_t g)
{
    if (!xc__bias_held(comm)) return;
    uint64_t(*a)[8] = ll_at(o, j, g + 1), (*b)[8] = ll_at(o, j, g + 2);
    for (int i = 0, n = ll_lines(o->ll_bytes); i < n; i++) {
        __builtin_prefetch(a[i], 0, 3);
        __builtin_prefetch(b[i], 0, 3);
    }
}

/* How long an express call polls for its peers (pause instructions): a
 * peer a little late then costs no trip through the engine's queue and
 * its wait.  Crowded, or when waits stopped spinning, they are looked at
 * once: they may be waiting for this core. */
#define EXPRESS_POLLS 128
static int express_polls(const xc_comm_t *comm)
{
    return comm->oversub || !comm->spin_ns ? 1 : EXPRESS_POLLS;
}

/* A writer of ring operations a whole ring ahead of its readers (slot_free
 * fails) waits a little, spinning, for them to take half of it: then its
 * next calls find their entries free on the bound it read, without reading
 * the readers' `out` lines again -- each read pulls a line its reader
 * writes at every call, and at one read per call the pair ran in lock
 * step, a line's round trip a call.  1: room for chunk g. */
static int express_room(xc_comm_t *comm, xc__shm_op_t *o, uint64_t g)
{
    if (slot_free(comm, o, g)) return 1;
    if (express_polls(comm) == 1) return 0;
    uint64_t want = o->need + (g - o->need) / 2;
    for (int i = 0; i < EXPRESS_POLLS / 4; i++) {
        for (int k = 0; k < 8; k++) __builtin_ia32_pause();
        if (out_min(comm, o) >= want) return 1;
    }
    return comm->shm_out_min >= o->need;
}

/*
 * Express (docs/shm.md): a blocking broadcast or reduce whose payload fits
 * one ring entry's flagged lines, run as one step without an operation --
 * or not at all.  Everything that could make it wait is looked at before
 * anything is written: the ranks it reads must have staged chunk g with
 * this operation's hash, a rank that writes needs its ring entry free, and
 * a full queue of neighbour checks must resolve.  Then it does what
 * shm_advance does for such an operation in one pass, and returns 1; else
 * it has changed nothing a later shm_advance would not redo and returns 0
 * (the caller runs the operation the ordinary way, which waits, and
 * reports whatever mismatch or failure stopped this).  A rank that only
 * reads skips staging its lines: nobody reads them (a rank that disagrees
 * and reads them anyway finds their tag old and checks the description).
 * `writes`: this rank stages (broadcast root, reduce non-root).
 */
int xc__shm_express(xc_comm_t *comm, const xc__args_t *a, const xc__desc_t *d, uint64_t seq,
                    int writes)
{
    xc__shm_t *s = comm->shm;
    xc__shm_ctl_t *me = &s->ctl[comm->rank];
    xc__shm_op_t o;
    o.shm = s;
    o.L = comm->size;
    o.me = comm->rank;
    o.a = *a;
    o.es = xc__dtype_size(a->dtype);
    o.ll = 1;
    o.ring = 1;
    o.ll_bytes = a->count * o.es;
    o.ll_gap = 0;
    o.xfer = 0;
    o.base = xc__shm_load(&me->in);
    o.n = comm->shm_ops;
    o.ce = a->count ? a->count : 1;
    o.k = 0;
    o.nk = 1;
    o.hash = desc_hash(comm, seq, d);
    /* A rank arriving after another failed fails too: the ordinary way. */
    if (__atomic_load_n(&s->hdr->poison, __ATOMIC_ACQUIRE)) return 0;
    uint64_t g = o.base + 1, h;
    int nb = right_of(&o), reads_nb = 0;
    /* Nothing written before this point. */
    if (writes) {
        if (!express_room(comm, &o, g)) return 0;
    } else {
        int polls = express_polls(comm);
        for (int j = 0; j < o.L; j++) {
            if (j == o.me || (a->coll == XC_COLL_BCAST && j != a->root)) continue;
            while (!ll_ready(&o, j, g, &h)) {
                if (--polls <= 0) return 0;
                __builtin_ia32_pause();
            }
            if (h != o.hash) return 0;
        }
        reads_nb = a->coll == XC_COLL_REDUCE || nb == a->root;
    }
    if (reads_nb ? comm->shm_nbq_n > 0 : comm->shm_nbq_n == NBQ_CAP)
        if (!nb_resolve(comm, &o)) return 0;
    comm->shm_ops++;
    put_desc(me, &o, seq, d, 0);
    if (writes) ll_put_from(&o, g, a->sbuf);
    __atomic_store_n(&me->in_hash, o.hash, __ATOMIC_RELAXED); /* ordered by `in` */
    xc__shm_publish(s, &me->in, g);
    comm->stats.msgs_sent[XC_TRANSPORT_SHM]++;
    if (!reads_nb) {
        int t = (comm->shm_nbq_head + comm->shm_nbq_n++) % NBQ_CAP;
        comm->shm_nbq[t][0] = o.n;
        comm->shm_nbq[t][1] = g;
    }
    if (!writes) {
        if (a->coll == XC_COLL_BCAST) {
            if (o.ll_bytes) ll_unpack(&o, a->root, g, a->rbuf);
            ll_ask_ahead(comm, &o, a->root, g);
        } else {
            for (int j = 0; j < o.L; j++) {
                if (j == o.me) continue;
                ll_unpack(&o, j, g, xc__shm_src(&o, j, g));
                ll_ask_ahead(comm, &o, j, g);
            }
            xc__shm_reduce_all(&o, 0, a->rbuf, a->sbuf);
        }
        if (a->coll == XC_COLL_REDUCE || o.L == 2) comm->shm_synced = g;
    }
    publish_out(comm, &o, g);
    if (writes) ll_own_next(&o, g);
    account(comm, &o);
    return 1;
}

/*
 * Express of the symmetric collectives (docs/shm.md): a small blocking
 * all-reduce, reduce-scatter, all-gather, all-to-all or barrier that its
 * builder makes one chunk (in the flagged lines or a slot), read from
 * every rank, without a reduction phase or single copy, runs outside the
 * engine's queue: built here by the algorithm's own builder, staged and
 * published as advance() does, then the peers polled a little while.
 * All there: it finishes here (XC__EXPRESS_DONE).  A peer later than that,
 * or anything unexpected (a hash that differs, a peer a chunk further):
 * comm->shm_begun keeps what the operation the engine builds for this seq
 * resumes from (advance, phase 2), which waits the ordinary way and tells
 * a mismatch from a rank that left (XC__EXPRESS_BEGUN).  Nothing written
 * when it cannot stage at once (XC__EXPRESS_NO).  Crowded, or when waits
 * stopped spinning, the peers are looked at once: they may be waiting for
 * this core.
 */
/* Has rank j staged chunk g of this operation?  -1 not yet, 1 yes (its
 * lines taken), 0 something else is there (another hash, a later chunk):
 * the ordinary path tells what. */
static int peer_staged(xc__shm_op_t *o, int j, uint64_t g)
{
    uint64_t h;
    if (o->ll) return ll_take(o, j, g, &h) ? h == o->hash : -1;
    const xc__shm_ctl_t *c = &o->shm->ctl[j];
    if (xc__shm_load(&c->in) < g) return -1;
    return __atomic_load_n(&c->in_hash, __ATOMIC_RELAXED) == o->hash && xc__shm_load(&c->in) == g;
}

#define EXPRESS_MAX (64 * 1024) /* staged bytes; larger ones gain little */
int xc__shm_express_all(xc_comm_t *comm, const xc__algo_t *algo, const xc__args_t *a,
                        const xc__desc_t *d, uint64_t seq)
{
    xc__shm_t *s = comm->shm;
    size_t staged = a->count * xc__dtype_size(a->dtype) * xc__shm_blocks(a, comm->size);
    if (__atomic_load_n(&s->hdr->poison, __ATOMIC_ACQUIRE) || staged > EXPRESS_MAX ||
        staged > s->slot_bytes || comm->shm_begun.on)
        return XC__EXPRESS_NO; /* (larger ones are not built twice) */
    xc__op_t op; /* its privbuf only: the builder's state */
    if (algo->build(comm, &op, a) != XC_OK) return XC__EXPRESS_NO;
    xc__shm_op_t *o = (xc__shm_op_t *)op.privbuf;
    if (o->ring || o->nk != 1 || o->vt->mid || o->vt->wait_out || o->alt) return XC__EXPRESS_NO;
    for (int j = 0; j < o->L; j++)
        if (!o->vt->reads(o, j)) return XC__EXPRESS_NO;
    xc__shm_out_flush(comm);
    o->base = xc__shm_load(&s->ctl[o->me].in);
    o->n = comm->shm_ops;
    o->hash = desc_hash(comm, seq, d);
    uint64_t g = o->base + 1;
    if (!slot_free(comm, o, g) || (comm->shm_nbq_n && !nb_resolve(comm, o)))
        return XC__EXPRESS_NO;
    if (!o->ll) comm->shm_full[g % XC__SHM_NSLOT] = g;
    comm->shm_ops++;
    stage_chunk(comm, o, seq, d, g);
    int polls = express_polls(comm), r;
    for (int j = 0; j < o->L; j++) {
        if (j == o->me) continue;
        while ((r = peer_staged(o, j, g)) < 0) {
            if (--polls <= 0) goto begun;
            __builtin_ia32_pause();
        }
        if (!r) goto begun;
    }
    comm->shm_synced = g;
    if (o->vt->out) o->vt->out(o, 0);
    publish_out(comm, o, g);
    finish(comm, o);
    return XC__EXPRESS_DONE;
begun:
    _Static_assert(sizeof(xc__shm_op_t) <= sizeof comm->shm_begun.state, "begun state");
    o->phase = 2;
    memcpy(comm->shm_begun.state, o, sizeof *o);
    comm->shm_begun.seq = seq;
    comm->shm_begun.d = *d;
    comm->shm_begun.on = 1;
    return XC__EXPRESS_BEGUN;
}

static void shm_waiting(const xc__op_t *op, char *buf, size_t cap)
{
    const xc__shm_op_t *o = (const xc__shm_op_t *)op->privbuf;
    if (o->phase < 0) {
        snprintf(buf, cap, "not started");
        return;
    }
    uint64_t g = o->base + o->k + 1;
    for (int j = 0; j < o->L; j++) {
        if (j == o->me) continue;
        const xc__shm_ctl_t *c = &o->shm->ctl[j];
        if ((o->phase == 2 && (o->vt->reads(o, j) || (o->k == 0 && j == right_of(o))) &&
             xc__shm_load(&c->in) < g) ||
            (o->phase == 4 && xc__shm_load(&c->mid) < g) ||
            (o->phase == 0 && xc__shm_load(&c->out) < o->need) ||
            (o->phase == 6 && xc__shm_load(&c->out) < g)) {
            snprintf(buf, cap, "waiting for rank %d in shared memory, chunk %" PRIu64 "/%" PRIu64,
                     j, o->k + 1, o->nk);
            return;
        }
    }
    snprintf(buf, cap, "in shared memory, chunk %" PRIu64 "/%" PRIu64, o->k + 1, o->nk);
}

/* One single-copy transfer between this rank's `local` and `len` bytes at
 * `off` of the `which`-th address rank j published: a read or a write --
 * a memcpy through a mapping when the address is in one of rank j's shared
 * blocks, else process_vm_readv / _writev (xc__peer_xfer).  A failure sets
 * o->err (an errno) and o->err_peer; a write into a peer that left or a
 * poisoned segment is refused (ECANCELED). */
static void cma_xfer(xc__shm_op_t *o, int j, int which, size_t off, char *local, size_t len,
                     int write)
{
    if (o->err || len == 0) return;
    /* A peer that failed (it poisons the segment first) or left may have
     * returned and reused its buffer: write into it no more.  This narrows
     * the window, it cannot close it (docs/shm.md). */
    if (write && (__atomic_load_n(&o->shm->hdr->poison, __ATOMIC_ACQUIRE) ||
                  __atomic_load_n(&o->shm->ctl[j].gone, __ATOMIC_ACQUIRE))) {
        o->err = ECANCELED, o->err_peer = j;
        return;
    }
    uint64_t base;
    memcpy(&base, xc__shm_src(o, j, o->base + o->k + 1) + 8 * which, sizeof base);
    const xc__shm_ctl_t *pc = &o->shm->ctl[j];
    int e = xc__peer_xfer((pid_t)pc->pid, pc->share_fd, pc->share_nonce, local,
                          (uintptr_t)base + off, len, write);
    if (e) o->err = e, o->err_peer = j;
    else o->xfer += len;
}

void xc__shm_cma_read(xc__shm_op_t *o, int j, int which, size_t off, void *dst, size_t len)
{
    cma_xfer(o, j, which, off, dst, len, 0);
}

void xc__shm_cma_write(xc__shm_op_t *o, int j, int which, size_t off, const void *src, size_t len)
{
    cma_xfer(o, j, which, off, (char *)(uintptr_t)src, len, 1);
}

static void op_fields(const xc_comm_t *comm, xc__shm_op_t *o, const xc__args_t *a,
                      const xc__shm_coll_t *vt, size_t ce, int lines)
{
    memset(o, 0, sizeof *o);
    o->vt = vt;
    o->shm = comm->shm;
    o->L = comm->size;
    o->me = comm->rank;
    o->a = *a;
    o->es = xc__dtype_size(a->dtype);
    o->ce = ce ? ce : 1;
    o->promote = comm->cfg.shm_promote;
    o->ll = lines != 0;
    if (lines == XC__SHM_LINES_ADDRS) {
        o->ll_bytes = XC__SHM_ADDR_BYTES;
    } else if (lines) {
        size_t blocks = xc__shm_blocks(a, comm->size);
        /* A block for every rank: its own stays out of the lines. */
        if (blocks > 1) o->ll_gap = a->count * o->es, blocks--;
        o->ll_bytes = a->count * o->es * blocks;
    }
    o->phase = -1;
    o->nk = vt->nchunks(o);
}

xc_result_t xc__shm_op_init(xc_comm_t *comm, xc__op_t *op, const xc__args_t *a,
                            const xc__shm_coll_t *vt, size_t ce, int lines)
{
    _Static_assert(sizeof(xc__shm_op_t) <= XC__OP_PRIVBUF, "shm op state must fit the op");
    op_fields(comm, (xc__shm_op_t *)op->privbuf, a, vt, ce, lines);
    op->advance = shm_advance;
    op->waiting = shm_waiting;
    return XC_OK;
}

void xc__shm_op_offer(xc_comm_t *comm, xc__op_t *op, const xc__shm_coll_t *vt,
                      const void *src, size_t bytes, size_t block)
{
    xc__shm_op_t *o = (xc__shm_op_t *)op->privbuf;
    if (o->promote <= 0 || !src || comm->oversub || block < XC__SHM_FAST_MIN ||
        !xc__shm_use_cma(comm, block))
        return;
    o->alt = vt;
    xc__promote(src, bytes, o->promote);
    o->fast = xc__promoted(src, bytes);
}

/* At the start of an operation offered single copy: switch when the
 * shared-memory operation before it was one like it (the same
 * description) in which every rank's input was fast -- this rank's own
 * entry included, whose bit only an offer sets.  Every rank finished that
 * one, so each has read every other's description of it (written before
 * its first publication, kept until XC__SHM_DESC_RING operations later):
 * all decide alike. */
static void take_offer(xc_comm_t *comm, xc__op_t *op, xc__shm_op_t *o)
{
    uint64_t n = comm->shm_ops; /* this operation's number (advance) */
    if (n == 0) return;
    size_t i = (n - 1) % XC__SHM_DESC_RING;
    const xc__shm_desc_t *mine = &o->shm->ctl[o->me].desc[i];
    for (int j = 0; j < o->L; j++) {
        const xc__shm_ctl_t *c = &o->shm->ctl[j];
        if (!__atomic_load_n(&c->desc_fast[i], __ATOMIC_RELAXED) || c->desc[i].seq != mine->seq ||
            !desc_eq(&c->desc[i].d, &op->desc))
            return;
    }
    xc__args_t a = o->a;
    const xc__shm_coll_t *vt = o->alt;
    int fast = o->fast;
    op_fields(comm, o, &a, vt, a.count, XC__SHM_LINES_ADDRS);
    o->fast = fast; /* so that the next one like it may switch too */
    XC_TRACE("shm %s of %" PRIu64 " x %zu B: every rank's input on huge pages, single copy",
             xc_coll_name((xc_coll_t)a.coll), (uint64_t)a.count, o->es);
}
