/*
 * shrink.c -- xc_comm_shrink: a new communicator of the survivors of a
 * failed one, agreed over the old communicator's own connections (no
 * store: it works when rank 0, the store's host, is the one that died).
 *
 * Protocol (docs/fault-tolerance.md, "Shrink").  Each rank keeps `known`,
 * the bitmap of old ranks it knows failed: the communicator's failed set
 * (filled by xc__comm_peer_lost), peers whose connection is closed or said
 * goodbye, peers silent for the liveness timeout (the operation deadline
 * when liveness is off), and every bit a peer's SHRINK frame carries.  In
 * round r a rank sends {r, known, its new listening address, CPU mask} to
 * every peer whose socket is open, then waits until every rank not in
 * `known` has sent round r (or later).  A round in which nobody learnt
 * anything -- every frame of round r carried exactly the set this rank sent
 * -- ends the agreement: the members are the ranks not in the set, in old
 * rank order, and the new communicator's id is derived from (old id, shrink
 * number, the set), so ranks that ended with different sets cannot connect
 * to each other (the mesh drops strangers) and fail at the connection
 * deadline instead of forming inconsistent communicators.  A rank that
 * settled sends a FINAL frame with its set; a rank still agreeing that sees
 * one settles on it if its own set is the same, and gives up otherwise.  A
 * rank that gives up sends a FINAL frame that lists itself (a withdrawal),
 * and a frame listing its receiver tells the receiver it was excluded.
 *
 * A SHRINK frame poisons a receiver whose communicator is still healthy
 * with the code the sender's failed with (carried in the header's root);
 * from a sender that shrank a healthy communicator, it fails only what
 * waits for the sender (see xc__shrink_header).
 *
 * Frames travel on the old sockets even when the communicator is poisoned:
 * poisoning finishes a started frame and drops the rest, and receivers keep
 * reading and discarding frames, so the streams stay frame-synchronised.
 * Everything here runs under comm->mu (xc__comm_poll releases it while it
 * sleeps); the progress thread keeps sending heartbeats meanwhile.
 */
#include "comm.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FINAL 0xffffffffu /* round of a FINAL frame (settled or withdrawn) */

/* The fixed part of a SHRINK frame's payload; the bitmap follows. */
typedef struct shrink_fixed {
    struct sockaddr_storage addr;
    xc__cpumask_t cpus;
} shrink_fixed_t;
_Static_assert(sizeof(shrink_fixed_t) == XC__FRAME_SHRINK_FIXED, "SHRINK frame layout");

/* The latest complete SHRINK frame of one peer (seq 0: none yet), and the
 * buffer the next one is read into. */
struct xc__shrink_in {
    uint64_t seq; /* shrink number << 32 | round */
    unsigned char *buf, *tmp;
};

static size_t bm_bytes(int n) { return ((size_t)n + 7) / 8; }
static size_t frame_len(int n) { return XC__FRAME_SHRINK_FIXED + bm_bytes(n); }

void xc__shrink_free(xc_comm_t *comm)
{
    if (!comm->shrink_in) return;
    for (int p = 0; p < comm->size; p++) {
        free(comm->shrink_in[p].buf);
        free(comm->shrink_in[p].tmp);
    }
    free(comm->shrink_in);
    comm->shrink_in = NULL;
}

void xc__shrink_header(xc_comm_t *comm, xc__conn_t *c)
{
    const xc__hdr_t *h = &c->rhdr;
    /* Its sender has left this communicator for the shrink: nothing more
     * comes from it here (frames are FIFO).  If it had failed, so does
     * this one (root: its code); if it shrank a healthy communicator, only
     * what still waits for it fails (a collective this rank is finishing
     * with the others may still complete). */
    c->left = 1;
    if (xc__comm_status(comm) == XC_OK) {
        const xc__peerq_t *q = &comm->pq[c->peer];
        int acks = 0;
        for (xc__tx_t *tx = comm->rndv_wait; tx; tx = tx->next) acks |= tx->peer == c->peer;
        if (xc__wire_code_ok(h->root))
            xc__comm_poison(comm, (xc_result_t)h->root, 1,
                            "rank %d left the communicator to shrink it (xc_comm_shrink) after "
                            "it failed with %s",
                            c->peer, xc_err_name((xc_result_t)h->root));
        else if (q->coll_head || q->p2p_head || acks ||
                 (comm->any_head && xc__no_remote_sender(comm))) /* quiet: the peers hear from it */
            xc__comm_poison(comm, XC_ERR_ABORTED, 1,
                            "rank %d left the communicator to shrink it (xc_comm_shrink) while "
                            "this rank waits for it",
                            c->peer);
    }
    c->rdst = NULL; /* discard unless accepted below */
    if (h->len != frame_len(comm->size) || h->count != (uint64_t)comm->size) {
        XC_WARN("rank %d (%s) sent a shrink frame for a communicator of %llu ranks (%llu "
                "bytes); this one has %d: ignored",
                c->peer, c->addr, (unsigned long long)h->count, (unsigned long long)h->len,
                comm->size);
        return;
    }
    if (!comm->shrink_in && !(comm->shrink_in = calloc((size_t)comm->size, sizeof *comm->shrink_in)))
        return;
    struct xc__shrink_in *in = &comm->shrink_in[c->peer];
    if (!in->tmp && !(in->tmp = malloc(h->len))) return;
    c->rdst = (char *)in->tmp;
}

void xc__shrink_done(xc_comm_t *comm, xc__conn_t *c)
{
    struct xc__shrink_in *in = comm->shrink_in ? &comm->shrink_in[c->peer] : NULL;
    if (!in || !in->tmp || c->rdst != (char *)in->tmp) return; /* discarded */
    unsigned char *t = in->buf;
    in->buf = in->tmp;
    in->tmp = t;
    in->seq = c->rhdr.seq;
    c->rdst = NULL;
}

/* ------------------------------------------------------------ agreement */

typedef struct shrink {
    xc_comm_t *comm;
    uint32_t no;             /* this shrink's number on the communicator */
    xc_result_t cause;       /* what the communicator failed with (XC_OK: healthy) */
    shrink_fixed_t me;       /* this rank's listening address, CPU mask */
    uint8_t *known, *sent;   /* [bm_bytes(n)] */
    uint64_t t0, deadline, silence_ns;
    uint64_t grace;          /* the deadline for a peer that has taken part */
    char why[200];           /* the first failure this shrink found, for the log */
} shrink_t;

/* Queue a SHRINK frame {round, bm} to every peer whose socket is open. */
static void send_all(shrink_t *s, uint32_t round, const uint8_t *bm)
{
    xc_comm_t *comm = s->comm;
    size_t nb = bm_bytes(comm->size), len = frame_len(comm->size);
    for (int p = 0; p < comm->size; p++) {
        xc__conn_t *c = comm->conns[p];
        if (!c || c->state != XC__CONN_OPEN) continue;
        xc__tx_t *tx = calloc(1, sizeof *tx);
        unsigned char *buf = malloc(len);
        if (!tx || !buf) { /* the peer finds this rank silent: it fails */
            free(tx);
            free(buf);
            continue;
        }
        memcpy(buf, &s->me, sizeof s->me);
        memcpy(buf + sizeof s->me, bm, nb);
        tx->hdr.magic = XC__FRAME_MAGIC;
        tx->hdr.kind = XC__F_SHRINK;
        tx->hdr.comm_tag = (uint32_t)comm->uid;
        tx->hdr.seq = (uint64_t)s->no << 32 | round;
        tx->hdr.count = (uint64_t)comm->size;
        tx->hdr.root = (int32_t)s->cause;
        tx->hdr.len = len;
        tx->buf = buf;
        tx->owned = buf;
        c->tp->post_send(comm, c, tx);
    }
}

/* Send a FINAL frame (bm: the settled set, or one listing this rank: a
 * withdrawal) and push it out within 1 s, reading frames meanwhile: this
 * rank stops reading the old sockets afterwards. */
static void send_final(shrink_t *s, const uint8_t *bm)
{
    xc_comm_t *comm = s->comm;
    send_all(s, FINAL, bm);
    uint64_t deadline = xc__now_ns() + 1000000000ull;
    for (;;) {
        int queued = 0;
        for (int p = 0; p < comm->size; p++) {
            xc__conn_t *c = comm->conns[p];
            queued |= c && c->state != XC__CONN_CLOSED && c->sq_head;
        }
        if (!queued || xc__now_ns() >= deadline) return;
        xc__comm_poll(comm, 10);
    }
}

/* Rank p is failed for this shrink (why: for the log, the first one is
 * kept); `lasting`: for good (it is gone or silent), so that a retry starts
 * from it -- not when it only withdrew from this attempt, or another rank
 * said so, or it was late (another retry may see it take part). */
static void mark(shrink_t *s, int p, const char *why, int lasting)
{
    if (xc__failed_has(s->known, p)) return;
    s->known[p / 8] |= (uint8_t)(1u << (p % 8));
    if (lasting) xc__failed_set(s->comm, p);
    if (!s->why[0]) snprintf(s->why, sizeof s->why, "rank %d %s", p, why);
}

/* Failures the engine saw: lost peers, closed or departed connections. */
static void refresh(shrink_t *s)
{
    xc_comm_t *comm = s->comm;
    for (int p = 0; p < comm->size; p++) {
        if (p == comm->rank) continue;
        xc__conn_t *c = comm->conns[p];
        if (xc__failed_has(comm->failed, p)) mark(s, p, "was lost", 1);
        else if (!c || c->state == XC__CONN_CLOSED) mark(s, p, "closed its connection", 1);
        else if (c->state == XC__CONN_BYE) mark(s, p, "destroyed the communicator", 1);
    }
}

/* A peer whose frame of this shrink lists this rank as failed, or -1.
 * Also a peer this rank has marked failed meanwhile, if its frame is a
 * settled FINAL (not a withdrawal, which lists its sender): peers that
 * settled without this rank send their FINAL and then, leaving the old
 * communicator, a goodbye -- which marks them failed here (refresh) before
 * the verdict before it is looked at.  (A round frame of a peer that has
 * failed since is not a verdict: the others may settle with this rank.) */
static int excluded_by(const shrink_t *s)
{
    const xc_comm_t *comm = s->comm;
    for (int p = 0; comm->shrink_in && p < comm->size; p++) {
        const struct xc__shrink_in *in = &comm->shrink_in[p];
        uint32_t no = (uint32_t)(in->seq >> 32);
        int final = (uint32_t)in->seq == FINAL;
        /* (an earlier shrink's settled FINAL is a verdict too: a retry
         * after this rank missed it must not find itself alone) */
        if (p == comm->rank || !in->buf || no > s->no || (no < s->no && !final)) continue;
        const uint8_t *bm = in->buf + XC__FRAME_SHRINK_FIXED;
        /* A FINAL with its sender in it is a give-up, no verdict: it lists
         * the ranks that withdrew before it as well (a retry of 4 ranks
         * whose first attempt disagreed excluded a rank that had only
         * given up first, and formed a communicator of 2). */
        if (final && xc__failed_has(bm, p)) continue;
        if (!xc__failed_has(bm, comm->rank)) continue;
        if (!xc__failed_has(s->known, p) || final) return p; /* (a settled FINAL) */
    }
    return -1;
}

/* A readable list of the ranks in `bm` ("2, 3" or "none"). */
static void bm_str(const uint8_t *bm, int n, char *buf, size_t cap)
{
    size_t o = 0;
    buf[0] = 0;
    for (int r = 0; r < n && o + 12 < cap; r++)
        if (xc__failed_has(bm, r)) o += (size_t)snprintf(buf + o, cap - o, "%s%d", o ? ", " : "", r);
    if (!o) snprintf(buf, cap, "none");
}

/* Give up: withdraw (peers then stop waiting for this rank) and fail. */
static xc_result_t give_up(shrink_t *s, xc_result_t rc, const char *fmt, ...) XC__PRINTF(3, 4);
static xc_result_t give_up(shrink_t *s, xc_result_t rc, const char *fmt, ...)
{
    xc_comm_t *comm = s->comm;
    size_t nb = bm_bytes(comm->size);
    uint8_t *w = malloc(nb);
    if (w) {
        memcpy(w, s->known, nb);
        w[comm->rank / 8] |= (uint8_t)(1u << (comm->rank % 8));
        send_final(s, w);
        free(w);
    }
    va_list ap;
    va_start(ap, fmt);
    xc_result_t r = xc__verr(rc, fmt, ap);
    va_end(ap);
    return r;
}

/*
 * Run the agreement (lock held).  XC_OK with s->known the agreed failed
 * set, or an error (this rank excluded, the survivors disagreeing, a
 * deadline) after withdrawing.
 */
static xc_result_t agree(shrink_t *s)
{
    xc_comm_t *comm = s->comm;
    const int n = comm->size, me = comm->rank;
    const size_t nb = bm_bytes(n);
    char list[160];
    for (uint32_t round = 1;; round++) {
        refresh(s);
        memcpy(s->sent, s->known, nb);
        send_all(s, round, s->sent);
        const uint8_t *settled = NULL; /* a peer's FINAL set */
        int settled_by = -1;
        for (;;) {
            xc__comm_poll(comm, 10);
            refresh(s);
            int judge = excluded_by(s);
            if (judge >= 0) comm->shrink_excluded_by = judge + 1;
            if (judge >= 0)
                return give_up(s, XC_ERR_PEER_LOST,
                               "xc_comm_shrink: rank %d of the old communicator declared "
                               "this rank (%d) failed (it found it silent, late or its "
                               "connection broken): this rank is not a member of the "
                               "shrunk communicator",
                               judge, me);
            uint64_t now = xc__now_ns();
            int waiting = 0;
            for (int p = 0; p < n; p++) {
                if (p == me || xc__failed_has(s->known, p)) continue;
                const struct xc__shrink_in *in = comm->shrink_in ? &comm->shrink_in[p] : NULL;
                uint32_t rd = in ? (uint32_t)in->seq : 0;
                if (in && in->seq >> 32 == s->no && rd >= round) {
                    const uint8_t *bm = in->buf + XC__FRAME_SHRINK_FIXED;
                    if (rd == FINAL && xc__failed_has(bm, p)) {
                        mark(s, p, "withdrew from the shrink (it gave up)", 0);
                        continue;
                    }
                    if (rd == FINAL) {
                        settled = bm;
                        settled_by = p;
                        continue;
                    }
                    char by[48];
                    snprintf(by, sizeof by, "was reported failed by rank %d", p);
                    for (int q = 0; q < n; q++)
                        if (xc__failed_has(bm, q)) mark(s, q, by, 0);
                    continue;
                }
                /* Not heard from in this round: silent, or too late?  A
                 * peer that has sent a frame of this shrink takes part:
                 * its clock started when it called, so past this rank's
                 * deadline it may still be finishing the round before;
                 * it is waited for until the grace deadline (or found
                 * silent). */
                int took_part = in && in->buf && in->seq >> 32 == s->no;
                uint64_t last = comm->conns[p] ? comm->conns[p]->last_rx_ns : 0;
                if (last < s->t0) last = s->t0;
                char why[120];
                if (now - last > s->silence_ns) {
                    snprintf(why, sizeof why, "sent nothing, not even a heartbeat, for %.1f s "
                             "during the shrink", (double)(now - last) * 1e-9);
                    mark(s, p, why, 1);
                } else if (now >= (took_part ? s->grace : s->deadline)) {
                    snprintf(why, sizeof why, "did not take part in the shrink within "
                             "XCOLL_TIMEOUT_MS=%d ms", comm->cfg.timeout_ms);
                    mark(s, p, why, 0);
                } else {
                    waiting++;
                }
            }
            if (!waiting) break;
        }
        if (settled) {
            if (!memcmp(settled, s->known, nb)) return XC_OK;
            bm_str(s->known, n, list, sizeof list);
            char other[160];
            bm_str(settled, n, other, sizeof other);
            return give_up(s, XC_ERR_PEER_LOST,
                           "xc_comm_shrink: the membership could not be agreed: rank %d settled "
                           "on failed ranks {%s} while this rank found {%s} (a further failure "
                           "during the shrink%s%s)",
                           settled_by, other, list, s->why[0] ? ": " : "", s->why);
        }
        int quiet = !memcmp(s->known, s->sent, nb);
        for (int p = 0; p < n && quiet; p++) {
            if (p == me || xc__failed_has(s->known, p)) continue;
            const struct xc__shrink_in *in = &comm->shrink_in[p];
            quiet = (uint32_t)in->seq == round &&
                    !memcmp(in->buf + XC__FRAME_SHRINK_FIXED, s->sent, nb);
        }
        if (quiet) return XC_OK;
        /* Each round without a new failure makes every set the union of
         * the last ones: more rounds than ranks mean failures keep coming. */
        if (round > (uint32_t)n + 2)
            return give_up(s, XC_ERR_PEER_LOST,
                           "xc_comm_shrink: the membership could not be agreed in %u rounds "
                           "(failures kept coming: %s)",
                           round, s->why);
    }
}

/* The new communicator's id: (old id, shrink number, agreed set). */
static uint64_t child_uid(const xc_comm_t *comm, uint32_t no, const uint8_t *bm, size_t nb)
{
    uint64_t h = xc__mix64(comm->uid ^ xc__mix64(0x5348524bull << 32 | no)); /* "SHRK" */
    for (size_t i = 0; i < nb; i += 8) {
        uint64_t w = 0;
        memcpy(&w, bm + i, nb - i < 8 ? nb - i : 8);
        h = xc__mix64(h ^ w);
    }
    return h;
}

xc_result_t xc_comm_shrink(xc_comm_t *comm, xc_comm_t **newcomm)
{
    if (!newcomm)
        return xc__comm_fail(comm, xc__err(XC_ERR_INVALID, "xc_comm_shrink: newcomm is NULL"));
    *newcomm = NULL;
    if (!comm) return xc__err(XC_ERR_INVALID, "xc_comm_shrink: comm is NULL");
    if (xc__comm_forked(comm))
        return xc__comm_forked_err("xc_comm_shrink");
    const int n = comm->size;
    if ((unsigned)n > XC__FRAME_SHRINK_MAX_RANKS)
        return xc__comm_fail(comm, xc__err(XC_ERR_UNSUPPORTED,
                                           "xc_comm_shrink: at most %u ranks (this has %d)",
                                           XC__FRAME_SHRINK_MAX_RANKS, n));
    const size_t nb = bm_bytes(n);
    shrink_t s = {.comm = comm};
    s.known = calloc(nb, 1);
    s.sent = calloc(nb, 1);
    struct sockaddr_storage *addrs = calloc((size_t)n, sizeof *addrs);
    char(*ids)[XC__NODEID_LEN] = calloc((size_t)n, sizeof *ids);
    xc__cpumask_t *cpus = calloc((size_t)n, sizeof *cpus);
    xc_result_t rc = XC_OK;
    int lfd = -1, size = 0, rank = -1;
    uint64_t uid = 0;
    if (!s.known || !s.sent || !addrs || !ids || !cpus) {
        rc = xc__err(XC_ERR_NOMEM, "xc_comm_shrink: out of memory");
        goto out;
    }
    xc__cpumask_self(&s.me.cpus);

    xc__comm_lock(comm);
    /* A healthy communicator is poisoned here only: peers may still be
     * finishing the last collective with the others (an error frame or the
     * shared-memory poison word would fail it); they learn from the SHRINK
     * frame that this rank has left. */
    s.cause = xc__comm_status(comm);
    if (s.cause == XC_OK)
        xc__comm_poison(comm, XC_ERR_ABORTED, 1, "rank %d called xc_comm_shrink", comm->rank);
    s.no = (uint32_t)++comm->shrink_count;
    if (comm->shrink_excluded_by) { /* a retry: the verdict stands */
        rc = xc__err(XC_ERR_PEER_LOST, "xc_comm_shrink: rank %d of the old communicator "
                     "declared this rank (%d) failed in an earlier shrink: this rank is not a "
                     "member of any shrunk communicator", comm->shrink_excluded_by - 1,
                     comm->rank);
        pthread_mutex_unlock(&comm->mu);
        goto out;
    }
    const xc__config_t *cfg = &comm->cfg;
    int silence_ms = xc__liveness_on(comm) ? cfg->liveness_ms : cfg->timeout_ms;
    s.t0 = xc__now_ns();
    s.deadline = xc__deadline_ns(cfg->timeout_ms);
    s.silence_ns = silence_ms < 0 ? UINT64_MAX : (uint64_t)silence_ms * 1000000ull;
    /* A participant gets the timeout again (at least 1 s) past it. */
    s.grace = cfg->timeout_ms < 0 ? UINT64_MAX
              : s.deadline + 1000000ull * (uint64_t)(cfg->timeout_ms < 1000 ? 1000 : cfg->timeout_ms);
    memcpy(s.known, comm->failed, nb);
    __atomic_add_fetch(&comm->waiters, 1, __ATOMIC_RELAXED); /* the progress thread keeps to its heartbeats */
    /* The new communicator's socket; without it this rank withdraws, so
     * that nobody waits for it. */
    rc = xc__listen(&comm->my_addr, &lfd, &s.me.addr);
    if (rc != XC_OK) {
        char msg[XC__ERRMSG_LEN];
        snprintf(msg, sizeof msg, "%s", xc__tls_error());
        rc = give_up(&s, rc, "xc_comm_shrink: this rank (%d) cannot take part: %s", comm->rank,
                     msg);
    } else {
        rc = agree(&s);
    }
    if (rc == XC_OK) {
        send_final(&s, s.known); /* peers still agreeing may settle on it */
        for (int p = 0; p < n; p++) {
            if (xc__failed_has(s.known, p)) continue;
            if (p == comm->rank) {
                rank = size;
                addrs[size] = s.me.addr;
                cpus[size] = s.me.cpus;
            } else {
                shrink_fixed_t f;
                memcpy(&f, comm->shrink_in[p].buf, sizeof f);
                addrs[size] = f.addr;
                cpus[size] = f.cpus;
            }
            /* Old node indices stand in for node identities (as in split). */
            snprintf(ids[size], XC__NODEID_LEN, "%d", comm->node_of[p]);
            size++;
        }
        uid = child_uid(comm, s.no, s.known, nb);
    }
    __atomic_sub_fetch(&comm->waiters, 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&comm->mu);
    if (rc != XC_OK) goto out;

    char list[160];
    bm_str(s.known, n, list, sizeof list);
    XC_INFO("xc_comm_shrink #%u: failed ranks {%s}%s%s; rank %d of %d becomes rank %d of %d", s.no,
            list, s.why[0] ? ", first: " : "", s.why, comm->rank, n, rank, size);
    /* Survivors connect within the liveness time (at least 10 s: they
     * settled within a round trip of each other), never past the deadline. */
    int conn_ms = silence_ms < 10000 ? 10000 : silence_ms;
    if (cfg->timeout_ms >= 0 && conn_ms > cfg->timeout_ms) conn_ms = cfg->timeout_ms;
    rc = xc__comm_build(cfg, uid, rank, size, &comm->my_addr, lfd, addrs, ids, cpus,
                        xc__deadline_ns(conn_ms), newcomm);
    if (rc != XC_OK) {
        char msg[XC__ERRMSG_LEN];
        memcpy(msg, xc__tls_error(), sizeof msg);
        rc = xc__err(rc,
                     "xc_comm_shrink: the %d survivors (failed ranks {%s}) could not form the new "
                     "communicator -- a further failure during the shrink, or survivors that "
                     "could not agree on the membership: %s",
                     size, list, msg);
    }
out:
    if (lfd >= 0) close(lfd);
    free(s.known);
    free(s.sent);
    free(addrs);
    free(ids);
    free(cpus);
    return xc__comm_fail(comm, rc);
}
