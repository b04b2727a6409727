/*
 * cost_shm.c -- predicted times of the shared-memory-native collectives
 * (src/algo/shm_*.c), phase by phase: each all-ranks synchronisation costs
 * sync(L) (measured with barrier.shm), data staged by one rank and read by
 * another costs the shm channel's eager exchange rate per byte (the same
 * cross-core movement, far slower than a local memcpy), local copies cost
 * memcpy time, reductions over the slots gamma at cache speed, single-copy reads
 * (process_vm_readv) the shm link's one-way rendezvous rate (big_beta, or
 * mem_beta beyond the cache).  The variant (inline, one shot, chunked, single copy)
 * is picked with the same thresholds as the builders.
 */
#include "../algo/shm_coll.h"
#include "cost.h"

/* The flagged lines' capacity at this rank count, as the builders use it. */
#define LL_MAX(m) ((double)xc__shm_ll_max((m)->t->nranks))

static double sync_cost(const xc__m_t *m)
{
    return m->p->sync_alpha + (m->t->nranks - 1) * m->p->sync_per_rank;
}

/* A staged round of `staged` bytes per rank beyond its synchronisation:
 * through the slots, the call itself and the dependent read of the staged
 * lines after the counter's (measured: a 512-byte allreduce.shm less the
 * rest of its prediction); in the flagged lines (docs/shm.md) the payload
 * comes with its signal, as a barrier's does -- nothing beyond the sync in
 * one line, shm_lines in more. */
static double stage(const xc__m_t *m, double staged)
{
    if (staged > LL_MAX(m)) {
        xc_coll_t c = m->c->coll;
        int moves = c == XC_COLL_ALLGATHER || c == XC_COLL_ALLTOALL || c == XC_COLL_BCAST;
        return moves ? m->p->shm_stage_copy : m->p->shm_stage;
    }
    return staged > XC__SHM_LL_LINE0 ? m->p->shm_lines : 0;
}

/* The same for the blocked layouts (reduce-scatter, all-to-all): L blocks
 * of `block` bytes staged, the own one left out of the lines (ll_gap). */
static double stage_blocks(const xc__m_t *m, double block, int n)
{
    return n * block > LL_MAX(m) ? stage(m, n * block) : stage(m, (n - 1) * block);
}

/* Single-copy read of `bytes` of a peer's user buffer (`fresh`: written
 * in this call, e.g. a block it just reduced). */
static double cma_x(const xc__m_t *m, double bytes, int fresh)
{
    /* A read of the peer's buffer: the one-way line's rate (the exchange
     * line carries the rendezvous handshakes of both directions, which
     * these reads do not have). */
    const xc__line_t *l = &m->p->link[XC__LINK_SHM].line[fresh ? XC__ONEWAY_FRESH : XC__ONEWAY];
    double ws = m->ws > 2 * bytes ? m->ws : 2 * bytes;
    return bytes * xc__m_blend(m, ws, l->big_beta, xc__m_mem_beta(m->p, XC__LINK_SHM, l, ws));
}

/* Moving `bytes` of one rank's staging slot into another rank's buffer
 * (written by one core just before, read by another): the rate at which
 * the library's own code takes a chunk just staged by another rank
 * (shm_take, measured), else the shm channel's eager exchange rate (a
 * copy into a ring and one out of it on the other core); beyond the cache
 * plus memcpy's extra cost there.  With the ring's rate (~190 ps/B on the
 * channels' lines, ~100 fitted through their bulk frames) the 2-32 KiB
 * all-gathers, all-to-alls and reduce-scatters came out 15-20 % over or
 * under from one calibration to the next; a fresh single-copy read's
 * (75 ps/B) put them 25-50 % under: the reader's own loads of lines
 * modified in the writer's cache run at ~145 ps/B, as a broadcast's take
 * (twenty-second session). */
static double xfer(const xc__m_t *m, double bytes)
{
    const xc__line_t *l = &m->p->link[XC__LINK_SHM].line[XC__EXCHANGE];
    double extra = m->p->copy_mem * xc__m_tier(m->p, m->ws) - m->p->copy_cache;
    if (extra < 0) extra = 0;
    double rate = m->p->shm_take > 0 ? m->p->shm_take : l->beta;
    return bytes * (rate + xc__m_mem(m, m->ws) * extra);
}

/* A single-copy read of the caller's buffer: the one-way line of a
 * reused buffer, which the shared-memory collectives' prices were fitted
 * with and which measured within 10-20 % of them.  Priced as fresh data
 * (XC__CALLER_FRESH, as the schedules' first rounds are) the read cost
 * about 2x, and allgather.ring (1.3-2.8x slower) took over from 1 MiB
 * (seventeenth session). */
static double cma(const xc__m_t *m, double bytes) { return cma_x(m, bytes, 0); }

/* As xc__shm_use_cma_from / xc__shm_use_cma. */
static int use_cma_from(const xc__m_t *m, double bytes, double min)
{
    return m->t->cma && bytes > 0 && bytes >= min;
}
static int use_cma(const xc__m_t *m, double bytes) { return use_cma_from(m, bytes, (double)m->t->cma_min); }
/* As xc__shm_move_cma_from: all-gather's and all-to-all's ceiling too. */
static int move_cma_from(const xc__m_t *m, double bytes, double min)
{
    return use_cma_from(m, bytes, min) && (!m->t->cma_max || bytes <= (double)m->t->cma_max);
}

/* The single-copy reductions run from xc__shm_cma_reduce_min bytes
 * (xc__shm_use_cma_reduce; `kind`: XC__SHM_RED_*). */
static int use_cma_reduce(const xc__m_t *m, double bytes, int kind)
{
    size_t min = xc__shm_cma_reduce_min(kind, m->t->nranks, m->t->crowded, m->t->cma_min);
    return bytes >= (double)min && use_cma(m, bytes);
}

/* One block of `blk` bytes reduced single-copy (xc__shm_cma_reduce): pulled
 * from the L-1 peers' inputs, reduced piece by piece, finalised.  The
 * pulled pieces sit in the cache-resident scratch: beyond the cache only
 * the own input and, when `out_mem`, the output (the user's buffer, not
 * the scratch) are memory streams of the reduction. */
static double cma_reduce_block(const xc__m_t *m, double blk, int out_mem)
{
    int n = m->t->nranks;
    return (n - 1) * cma(m, blk) + xc__m_reduce_mix(m, blk, n, m->ws, 1 + out_mem) +
           xc__m_fin(m, blk);
}

/* Elements per chunk of a staged layout of `blocks` blocks (xc__shm_ce). */
static double chunk_elems(const xc__m_t *m, int blocks)
{
    double ce = floor((double)m->t->slot_bytes / (m->es * blocks));
    ce = floor(ce / 16) * 16;
    return ce >= 1 ? ce : 1;
}

/* Full chunks and the last one's elements of `count` cut in chunks of ce
 * (an empty operation is one empty chunk). */
static void chunks(double count, double ce, double *full, double *last)
{
    *full = floor(count / ce);
    *last = count - *full * ce;
    if (count == 0) *last = 0, *full = 0;
}

/* Σ over the call's slot-sized chunks (the full ones and the last) of one
 * chunk's price. */
static double over_chunks(const xc__m_t *m, double (*chunk)(const xc__m_t *m, double bytes))
{
    double ce = chunk_elems(m, 1), full, last;
    chunks((double)m->c->count, ce, &full, &last);
    return full * chunk(m, ce * m->es) + (last > 0 ? chunk(m, last * m->es) : 0);
}

/* Reading a peer's staged chunk of `bytes` across cores: the one-way rate
 * at the chunk's own working set (it stays in cache); `fresh`: written by
 * the peer just before, for this call. */
static double chunk_read(const xc__m_t *m, double bytes, int fresh)
{
    xc__m_t ck = *m;
    ck.ws = 2 * bytes;
    return cma_x(&ck, bytes, fresh);
}

/* A k-way reduction of `bytes` from the slots. */
static double slot_reduce(const xc__m_t *m, double bytes, int k)
{
    return xc__m_reduce_ws(m, bytes, k, (k + 1) * bytes);
}

static double slot_fin(const xc__m_t *m, double bytes)
{
    xc__m_t s = *m;
    s.ws = 2 * bytes;
    return xc__m_fin(&s, bytes);
}

/* One chunk of the chunked all-reduce / large reduce: copy in, sync, reduce
 * a 1/L share from every slot (L-1 of them another rank's), sync, copy out
 * the result slot (L-1 shares of it another rank's). */
static double chunk_reduce(const xc__m_t *m, double bytes)
{
    int L = m->t->nranks;
    double share = ceil(bytes / m->es / L) * m->es;
    return 2 * sync_cost(m) + stage(m, bytes) + xfer(m, 2.0 * (L - 1) / L * bytes) +
           slot_reduce(m, share, L) + slot_fin(m, share);
}

/* Inline / one shot: stage, sync, every rank (or the root) reduces all
 * L inputs, L-1 of them staged by other ranks. */
static double one_shot(const xc__m_t *m, double B)
{
    int L = m->t->nranks;
    return sync_cost(m) + stage(m, B) + xfer(m, (L - 1) * B) + slot_reduce(m, B, L) + slot_fin(m, B);
}

static double take_chunk(const xc__m_t *m, double cb, int later);

/* One chunk of the all-reduce on 2 uncrowded ranks (one shot per chunk):
 * stage it (a local copy), sync, reduce both inputs -- the peer's chunk,
 * just written, read across cores and consumed by the reduction (the own
 * input and the output memory streams beyond the cache).  The copy and
 * the read are what a rooted take costs (take_chunk: the stager's copy
 * into lines the peer read last time, and the reader's), where measured:
 * priced as a local copy and a single-copy read, 4 and 8 KiB calls came
 * out 20 % under (0.79 / 1.37 us against 1.0 / 1.7) and took those sizes
 * from allreduce.rd (0.81 / 1.13; forty-eighth session). */
static double one_shot_chunk(const xc__m_t *m, double cb)
{
    double red = xc__m_copy(m, cb) + xc__m_reduce_mix(m, cb, 2, m->ws, 2);
    double mv = m->p->shm_take > 0 ? take_chunk(m, cb, 0) : xc__m_copy(m, cb) + chunk_read(m, cb, 1);
    double v = sync_cost(m) + stage(m, cb) + (mv > red ? mv : red) + xc__m_fin(m, cb);
    /* The measured correction (the profile's pair_chunk), never below half
     * the formula's price. */
    double c = v + cb * m->p->pair_chunk;
    return c > 0.5 * v ? c : 0.5 * v;
}

/* The rate at which this rank's code takes a chunk of `cb` bytes another
 * rank just staged, the first of an operation: shm_take for the probe's
 * chunk (xc__shm_take_probe: an 8 KiB piece on 2 uncrowded ranks, 32 KiB
 * elsewhere), shm_take_big for one of shm_take_big_bytes (a ring entry, the
 * largest chunk), linear in between.  Measured with reduces whose root
 * reads (2 uncrowded ranks, or a crowded node:
 * xc__shm_reduce_root_reads), whose one-chunk time is the stager's copy
 * plus this take: the rate holds the copy's cost beyond memcpy's cache
 * rate too. */
static double take_rate(const xc__m_t *m, double cb)
{
    const xc__profile_t *p = m->p;
    double r = p->shm_take, b1 = p->shm_take_big_bytes;
    double b0 = 4.0 * (double)xc__shm_take_probe(m->t->slot_bytes, m->t->nranks, m->t->crowded);
    if (p->shm_take_big <= 0 || b1 <= b0 || cb <= b0) return r;
    if (cb >= b1) return p->shm_take_big;
    return r + (p->shm_take_big - r) * (cb - b0) / (b1 - b0);
}

/* Taking a chunk of `cb` bytes out of another rank's slot: the first of
 * an operation, after its stager's copy (`later` 0: take_rate, or a fresh
 * single-copy read where it was not measured); or a later one of a
 * pipeline, staged while this rank took the one before: the slower side
 * of the pipeline, shm_take_pipe per byte (whichever side that is: on the
 * Intel VM the stager's copy of a 256 KiB chunk and the root's take each
 * took ~13 us), else the slower of the stager's copy and a single-copy
 * read of the chunk. */
static double take_chunk(const xc__m_t *m, double cb, int later)
{
    if (later && m->p->shm_take_pipe > 0) return cb * m->p->shm_take_pipe;
    if (later) {
        double put = xc__m_copy(m, cb), rd = chunk_read(m, cb, 0);
        return put > rd ? put : rd;
    }
    return m->p->shm_take > 0 ? cb * take_rate(m, cb) : chunk_read(m, cb, 1);
}

/* The root of a reduce that reads (xc__shm_reduce_root_reads) reduces the
 * other ranks' chunks with its own input (the reads and the reduction one
 * pass: the slower). */
static double take_reduce(const xc__m_t *m, double cb, int later)
{
    int n = m->t->nranks;
    double rd = (n - 1) * take_chunk(m, cb, later), red = xc__m_reduce_mix(m, cb, n, m->ws, n);
    return (rd > red ? rd : red) + xc__m_fin(m, cb);
}

/* A rooted operation staged in the slots (more than xc__shm_ll_max bytes):
 * one rank stages each chunk (a local copy), the other takes it out of the
 * slot (`take`).  The first chunk (up to a ring entry, 64 KiB by default:
 * xc__shm_rooted_ce) is put, sync, taken, in turn: the chunk just written
 * sits modified in the writer's cache (priced as the slowest side of a
 * pipeline, the 2-128 KiB broadcasts and reduces of the grid came out
 * 65-80 % under, twenty-second session).  Every later chunk is staged while the
 * one before is taken: the slower side each (take_chunk), and a sync on a
 * crowded node only (elsewhere its flag arrives meanwhile; with a sync each,
 * the calibration's 32 KiB reduce in four pieces was priced above the 2.3 us
 * it took, its take rate solved negative).  With the later chunks priced as
 * single-copy reads and the one chunk at the 32 KiB rate, a 512 KiB reduce
 * was priced 21.5 us (39.3 measured) and a 256 KiB one > 31 (25.3), and
 * reduce.rs_gather took 256 KiB (twenty-third session). */
static double rooted_staged(const xc__m_t *m, double (*take)(const xc__m_t *, double, int))
{
    double ce = (double)xc__shm_rooted_ce(m->t->slot_bytes, m->c->count, (size_t)m->es,
                                          m->t->crowded);
    double full, last;
    chunks((double)m->c->count, ce, &full, &last);
    double cb = ce * m->es, first = full > 0 ? cb : last * m->es;
    double t = sync_cost(m) + stage(m, first) + xc__m_copy(m, first) + take(m, first, 0);
    /* A later chunk's flag arrives while the one before is taken (the
     * writer runs ahead), except where the two share cores. */
    double later = m->t->crowded ? sync_cost(m) : 0;
    if (full > 1) t += (full - 1) * (later + take(m, cb, 1));
    if (full > 0 && last > 0) t += later + take(m, last * m->es, 1);
    return t;
}

/* A broadcast or reduce in the flagged lines (ring operations): its sync
 * and the rooted round's own term, no multi-line term (the writer does
 * not wait for its reader's lines). */
static double rooted_lines(const xc__m_t *m) { return sync_cost(m) + m->p->shm_rooted; }

static int one_shot_size(const xc__m_t *m, double B)
{
    return B <= LL_MAX(m) || B <= (double)xc__shm_one_shot_max(m->t->nranks);
}

/* The single-copy all-reduce: three syncs; block r of every input
 * reduced, then the other blocks pulled from their owners.  On 2
 * uncrowded ranks with the measured correction (the profile's
 * pair_direct), never below half the formula's price. */
static double allreduce_direct(const xc__m_t *m)
{
    int n = m->t->nranks;
    double blk = xc__m_blk(m, n);
    double v = 3 * sync_cost(m) + cma_reduce_block(m, blk, 1) + (n - 1) * cma_x(m, blk, 1);
    if (!xc__shm_allreduce_one_shot_all(n, m->t->crowded)) return v;
    double c = v + m->p->pair_direct0 + xc__m_bytes(m) * m->p->pair_direct;
    return c > 0.5 * v ? c : 0.5 * v;
}

/* One shot per slot-sized chunk, each chunk with the per-byte correction
 * (one_shot_chunk), the call with the constant one (pair_chunk0), never
 * below half of the rest.  The constant was fitted through a call of a
 * slot and one of 2 MiB: below a slot it shrinks with the call, so that
 * it does not price the small calls from what the large ones cost (+2.7
 * us on every 2-rank all-reduce from 1 KiB, which then took 0.41 us,
 * priced 3.0: allreduce.rd took them at 0.56; forty-eighth session). */
static double pair_one_shot(const xc__m_t *m)
{
    double B = xc__m_bytes(m), slot = (double)m->t->slot_bytes;
    double part = slot > 0 && B < slot ? B / slot : 1;
    double v = over_chunks(m, one_shot_chunk), c = v + m->p->pair_chunk0 * part;
    return c > 0.5 * v ? c : 0.5 * v;
}

/* On 2 ranks of an uncrowded node the all-reduce runs one shot per
 * slot-sized chunk, or -- from XC__SHM_PAIR_DIRECT_MIN (and
 * XCOLL_SHM_CMA_MIN_KB), when the ranks may read each other -- single
 * copy where the profile prices that lower: the two measured 1.15-2.1x
 * apart one way on one machine and 1.7-1.9x the other way on another
 * (bench/RESULTS.md, sixteenth and nineteenth sessions).  The runtime
 * (shm_allreduce.c) asks this with the communicator's profile, which every
 * rank shares, so the ranks agree. */
int xc__model_shm_pair_direct(const xc__profile_t *p_, const xc__model_topo_t *t_,
                              const xc__model_call_t *c_)
{
    /* Every 2-rank all-reduce asks: the small ones before the set-up. */
    if (c_->count * xc__dtype_size(c_->dtype) < XC__SHM_PAIR_DIRECT_MIN) return 0;
    XC__COST_SETUP();
    if (!t_->shm || !xc__shm_allreduce_one_shot_all(n, t_->crowded)) return 0;
    double B = xc__m_bytes(m);
    if (!use_cma(m, B)) return 0;
    return allreduce_direct(m) < pair_one_shot(m);
}

double xc__model_shm_pair_one_shot(const xc__profile_t *p_, const xc__model_topo_t *t_,
                                   const xc__model_call_t *c_)
{
    XC__COST_SETUP();
    return pair_one_shot(m);
}

double xc__model_shm_pair_single_copy(const xc__profile_t *p_, const xc__model_topo_t *t_,
                                      const xc__model_call_t *c_)
{
    XC__COST_SETUP();
    return allreduce_direct(m);
}

XC__COST(shm_allreduce)
{
    XC__COST_SETUP();
    if (!t_->shm) return -1;
    double B = xc__m_bytes(m);
    if (use_cma_reduce(m, B, XC__SHM_RED_ALL) || xc__model_shm_pair_direct(p_, t_, c_))
        return allreduce_direct(m);
    if (xc__shm_allreduce_one_shot_all(n, m->t->crowded) && B > LL_MAX(m))
        return pair_one_shot(m); /* one shot per slot-sized chunk */
    if (one_shot_size(m, B)) return one_shot(m, B);
    return over_chunks(m, chunk_reduce);
}

XC__COST(shm_reduce)
{
    XC__COST_SETUP();
    if (!t_->shm) return -1;
    double B = xc__m_bytes(m);
    if (use_cma_reduce(m, B, XC__SHM_RED_ROOTED)) {
        /* Two syncs; block r of every input reduced, and (off the root)
         * written, piece by piece from the scratch, into the root's output
         * with process_vm_writev. */
        double blk = xc__m_blk(m, n);
        return 2 * sync_cost(m) + cma_reduce_block(m, blk, n == 1) +
               (n > 1 ? cma_x(m, blk, 0) : 0);
    }
    if (xc__shm_reduce_root_reads(n, m->t->crowded) && B > LL_MAX(m))
        return rooted_staged(m, take_reduce); /* the root reads */
    if (B <= LL_MAX(m))
        return rooted_lines(m) + xfer(m, (n - 1) * B) + slot_reduce(m, B, n) + slot_fin(m, B);
    if (one_shot_size(m, B)) return one_shot(m, B);
    return over_chunks(m, chunk_reduce);
}

/* Per chunk of c elements per block: stage L blocks, sync, reduce the own
 * block from every slot into recvbuf. */
XC__COST(shm_reduce_scatter)
{
    XC__COST_SETUP();
    if (!t_->shm) return -1;
    /* Single copy: two syncs; block r of every input reduced into recvbuf. */
    if (use_cma_reduce(m, xc__m_bytes(m) * n, XC__SHM_RED_SCATTER))
        return 2 * sync_cost(m) + cma_reduce_block(m, xc__m_bytes(m), 1);
    double ce = chunk_elems(m, n), full, last;
    if (xc__m_bytes(m) * n <= LL_MAX(m)) ce = c_->count ? (double)c_->count : 1;
    chunks((double)c_->count, ce, &full, &last);
    double T = 0;
    for (int i = 0; i < 2; i++) {
        double cnt = i ? last : ce, times = i ? (last > 0 || c_->count == 0) : full;
        if (times <= 0) continue;
        double bytes = cnt * m->es;
        T += times * (sync_cost(m) + stage_blocks(m, bytes, n) + xfer(m, (n - 1) * bytes) +
                      slot_reduce(m, bytes, n) + slot_fin(m, bytes));
    }
    return T;
}

/* Single copy: two syncs, L-1 blocks read from their owners, the own one
 * copied.  Staged: per chunk, stage it, sync, copy L chunks out. */
XC__COST(shm_allgather)
{
    XC__COST_SETUP();
    if (!t_->shm) return -1;
    double b = xc__m_bytes(m);
    if (move_cma_from(m, b, (double)xc__shm_allgather_cma_min(m->t->crowded, m->t->cma_min,
                                                                m->t->ag_cma_min)))
        return 2 * sync_cost(m) + (n - 1) * cma(m, b) + xc__m_copy(m, b);
    double ce = b <= LL_MAX(m) ? (c_->count ? (double)c_->count : 1) : chunk_elems(m, 1);
    double full, last;
    chunks((double)c_->count, ce, &full, &last);
    double T = full * (sync_cost(m) + stage(m, ce * m->es) + xfer(m, (n - 1) * ce * m->es) +
                       xc__m_copy(m, ce * m->es));
    if (last > 0 || c_->count == 0)
        T += sync_cost(m) + stage(m, last * m->es) + xfer(m, (n - 1) * last * m->es) +
             xc__m_copy(m, last * m->es);
    return T;
}

/* Single copy: every rank reads the root's buffer (two syncs); with
 * `coop` the root writes the head of the message into each of them
 * meanwhile (xc__shm_bcast_share), the slower of the two sides counts.
 * Staged: the root stages chunk k+1 while the others copy chunk k out. */
XC__COST(shm_bcast)
{
    XC__COST_SETUP();
    if (!t_->shm) return -1;
    double B = xc__m_bytes(m);
    if (use_cma(m, B) && B >= (double)xc__shm_bcast_cma_min(n, m->t->crowded, m->t->cma_min,
                                                                m->t->bcast_cma_min)) {
        double h = (double)xc__shm_bcast_share((size_t)B, n, m->t->coop);
        if (h <= 0) return 2 * sync_cost(m) + cma(m, B);
        double root = (n - 1) * cma(m, h), reader = cma(m, B - h);
        return 2 * sync_cost(m) + (root > reader ? root : reader);
    }
    if (B > LL_MAX(m)) return rooted_staged(m, take_chunk); /* the reader copies out */
    double rd = cma_x(m, B, 0), cp = xc__m_copy(m, B);
    return rooted_lines(m) + (rd > cp ? rd : cp);
}

/* Single copy (not in place): two syncs, L-1 blocks read.  Staged: per
 * chunk stage the L-1 blocks others read, sync, copy those L-1 out and the
 * own block from the input. */
XC__COST(shm_alltoall)
{
    XC__COST_SETUP();
    if (!t_->shm) return -1;
    double b = xc__m_bytes(m);
    if (move_cma_from(m, b, (double)xc__shm_cma_floor(xc__shm_alltoall_cma_min(n, m->t->crowded,
                                                                                m->t->cma_min),
                                                       m->t->a2a_cma_min)))
        return 2 * sync_cost(m) + (n - 1) * cma(m, b) + xc__m_copy(m, b);
    double ce = b * n <= LL_MAX(m) ? (c_->count ? (double)c_->count : 1) : chunk_elems(m, n);
    double nk = c_->count ? ceil((double)c_->count / ce) : 1;
    double cnt = ce < (double)c_->count ? ce : (double)c_->count;
    return nk * (sync_cost(m) + stage_blocks(m, cnt * m->es, n) + xfer(m, (n - 1) * cnt * m->es) +
                 xc__m_copy(m, cnt * m->es));
}

XC__COST(shm_barrier)
{
    XC__COST_SETUP();
    if (!t_->shm) return -1;
    return sync_cost(m);
}
