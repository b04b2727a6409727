/*
 * mesh.c -- node identity, and connecting every pair of ranks of a new
 * communicator.
 *
 * Each rank listens on its advertised address; rank i connects to every
 * rank j < i and accepts every rank j > i.  A connection is one TCP stream,
 * or XCOLL_SOCKETS_PER_PEER of them between ranks on different nodes (the
 * connecting side's setting and node indices decide; docs/tcp.md), so the
 * caller sets the nodes (xc__comm_set_nodes) first.  The connecting side opens every stream with a HELLO frame
 * carrying the communicator's 64-bit id, its rank, the stream's index and
 * the number of streams; the accepting side checks each and, once it holds
 * them all, answers with its own HELLO on stream 0.  A stream that does not
 * present the right id and a plausible rank and index not yet connected is
 * a stranger and is closed without effect.  Everything is bounded by one
 * deadline, so a rank that never shows up yields XC_ERR_TIMEOUT naming it.
 *
 * With a job token (auth.h), every stream first runs the handshake, bound
 * to the communicator's id and both ranks: the connecting side blocks on it
 * (its peer is a rank it chose from the store, within the set-up deadline),
 * the accepting side drives it from its poll loop, so one slow or silent
 * stranger holds nothing but its own slot, which it loses after
 * XCOLL_HANDSHAKE_MS (with or without a token).  A HELLO must then come
 * from the rank the handshake proved.  Rejections are logged (WARN) with the
 * peer's address and the reason.
 */
#include "comm.h"
#include "../algo/shm_coll.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void xc__node_id(const xc__config_t *cfg, char out[XC__NODEID_LEN])
{
    if (cfg->node_id[0]) {
        snprintf(out, XC__NODEID_LEN, "%s", cfg->node_id);
        return;
    }
    char host[64] = "?", boot[40] = "?";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = 0;
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
    if (f) {
        if (!fgets(boot, sizeof boot, f)) snprintf(boot, sizeof boot, "?");
        fclose(f);
        boot[strcspn(boot, "\n")] = 0;
    }
    /* Network namespaces share hostname and boot id but are separate hosts
     * as far as traffic is concerned. */
    struct stat st;
    unsigned long long ns = stat("/proc/self/ns/net", &st) == 0 ? (unsigned long long)st.st_ino : 0;
    snprintf(out, XC__NODEID_LEN, "%s/%s/%llu", host, boot, ns);
}

/* A HELLO: tag = sender's rank, seq = communicator uid, count = size,
 * root = index of the stream it opens, algo = streams of the connection. */
static void hello_fill(const xc_comm_t *comm, xc__hdr_t *h, int stream, int nstreams)
{
    memset(h, 0, sizeof *h);
    h->magic = XC__FRAME_MAGIC;
    h->kind = XC__F_HELLO;
    h->comm_tag = (uint32_t)comm->uid;
    h->tag = comm->rank;
    h->seq = comm->uid;
    h->count = (uint64_t)comm->size;
    h->root = stream;
    h->algo = (uint16_t)nstreams;
}

static int hello_ok(const xc_comm_t *comm, const xc__hdr_t *h)
{
    return h->magic == XC__FRAME_MAGIC && h->kind == XC__F_HELLO &&
           h->seq == comm->uid && h->count == (uint64_t)comm->size && h->tag >= 0 &&
           h->tag < comm->size && h->tag != comm->rank && h->algo >= 1 &&
           h->algo <= XC__MAX_STREAMS && h->root >= 0 && h->root < (int)h->algo;
}

/* A socket whose HELLO is being read: an accepted stranger-until-proven
 * (peer < 0) or our stream 0 to a lower rank, awaiting its answer.  An
 * accepted socket of a job with a token first goes through the handshake's
 * stages. */
enum { ST_AUTH1, ST_AUTH3, ST_HELLO };
typedef struct pending {
    int fd;
    int peer;
    int stage;       /* ST_*: what is being read */
    int proven;      /* the rank the handshake proved, -1 without a token */
    size_t off;
    uint64_t since;  /* accepted at (ns) */
    xc__hdr_t h;
    uint8_t abuf[XC__AUTH_MSG1_LEN]; /* a handshake message being read */
    xc__auth_t auth;
    char addr[XC__ADDRSTR_LEN];
} pending_t;

/* Did a socket open with the first bytes of a frame (an xcoll peer that
 * has no token), rather than of a handshake? */
static int frame_magic_prefix(const uint8_t *p, size_t n)
{
    uint32_t m = XC__FRAME_MAGIC;
    return memcmp(p, &m, n < sizeof m ? n : sizeof m) == 0;
}

/* Advance the handshake of accepted socket `p` by one complete message.
 * NULL on success, else the reason to reject it (auth.h's categories). */
static const char *auth_step(xc_comm_t *comm, pending_t *p)
{
    const char *why = NULL;
    if (p->stage == ST_AUTH1) {
        uint8_t m2[XC__AUTH_MSG2_LEN];
        if (xc__auth_server_reply(&p->auth, &comm->cfg.auth, XC__AUTH_MESH, p->abuf, m2,
                                  &why) != XC_OK)
            return why;
        const xc__auth_ctx_t *x = &p->auth.ctx;
        /* Only higher ranks of this communicator connect to us. */
        if (x->id != comm->uid || x->server != comm->rank || x->client <= comm->rank ||
            x->client >= comm->size)
            return "bad frame (a handshake for another communicator or rank)";
        /* A fresh socket's send buffer is empty: this does not wait. */
        if (xc__send_all(p->fd, m2, sizeof m2, xc__deadline_ns(100)) != XC_OK)
            return "closed during the handshake (before our proof was sent)";
        p->stage = ST_AUTH3;
    } else {
        if (xc__auth_server_verify(&p->auth, p->abuf, &why) != XC_OK) return why;
        p->proven = p->auth.ctx.client;
        explicit_bzero(&p->auth, sizeof p->auth);
        p->stage = ST_HELLO;
    }
    p->off = 0;
    return NULL;
}

/* The streams of one peer's connection as they are made. */
typedef struct slot {
    int n;                       /* streams announced (0: none yet) */
    int got;                     /* streams authenticated */
    int fd[XC__MAX_STREAMS];
} slot_t;

static void slot_close(slot_t *sl)
{
    for (int s = 0; s < XC__MAX_STREAMS; s++)
        if (sl->fd[s] >= 0) close(sl->fd[s]), sl->fd[s] = -1;
}

/* Hand the peer's streams to a new connection. */
static xc_result_t slot_commit(xc_comm_t *comm, slot_t *sl, int peer,
                               const struct sockaddr_storage *addrs)
{
    char a[XC__ADDRSTR_LEN];
    xc__addr_str(&addrs[peer], a, sizeof a);
    comm->conns[peer] = xc__tcp_conn_open(sl->fd, sl->n, peer, a);
    for (int s = 0; s < XC__MAX_STREAMS; s++) sl->fd[s] = -1; /* owned (or closed) */
    if (!comm->conns[peer])
        return xc__err(XC_ERR_NOMEM, "rank %d: cannot set up the connection to rank %d",
                       comm->rank, peer);
    return XC_OK;
}

xc_result_t xc__mesh_connect(xc_comm_t *comm, int lfd,
                             const struct sockaddr_storage *addrs, uint64_t deadline_ns)
{
    int n = comm->size, me = comm->rank, ns = comm->cfg.sockets_per_peer;
    if (ns < 1 || ns > XC__MAX_STREAMS) ns = 1;
    int missing = n - 1;
    int cap = (XC__MAX_STREAMS + 1) * n + 16;
    pending_t *pend = calloc((size_t)cap, sizeof *pend);
    struct pollfd *pfd = calloc((size_t)cap + 1, sizeof *pfd);
    slot_t *slot = calloc((size_t)n, sizeof *slot);
    xc_result_t rc = XC_OK;
    int np = 0;
    if (!pend || !pfd || !slot) {
        rc = xc__err(XC_ERR_NOMEM, "out of memory connecting ranks");
        goto out;
    }
    for (int j = 0; j < n; j++)
        for (int s = 0; s < XC__MAX_STREAMS; s++) slot[j].fd[s] = -1;
    /* Open every stream to every lower rank and introduce ourselves on
     * each; the answer comes on stream 0 once it has them all. */
    for (int j = 0; j < me; j++) {
        /* Several streams only to other nodes: ranks of one node talk
         * through shared memory (shm_chan.c), their socket stays single. */
        int nsj = comm->node_of[j] != comm->node ? ns : 1;
        slot[j].n = nsj;
        for (int s = 0; s < nsj; s++) {
            int fd;
            xc__hdr_t hello;
            hello_fill(comm, &hello, s, nsj);
            rc = xc__connect(&addrs[j], deadline_ns, comm->cfg.socket_buf_kb, &fd);
            if (rc != XC_OK) {
                char a[XC__ADDRSTR_LEN];
                xc__addr_str(&addrs[j], a, sizeof a);
                rc = xc__err(rc, "rank %d: cannot connect to rank %d at %s: %s", me, j, a,
                             xc__tls_error());
                goto out;
            }
            slot[j].fd[s] = fd;
            if (comm->cfg.auth.has_token) {
                char a[XC__ADDRSTR_LEN], peer[XC__ADDRSTR_LEN + 32];
                xc__addr_str(&addrs[j], a, sizeof a);
                snprintf(peer, sizeof peer, "rank %d at %s", j, a);
                xc__auth_ctx_t ctx = {.kind = XC__AUTH_MESH, .id = comm->uid, .client = me,
                                      .server = j};
                rc = xc__auth_connect(fd, &comm->cfg.auth, &ctx, deadline_ns, peer);
                if (rc != XC_OK) {
                    rc = xc__err(rc, "rank %d: %s", me, xc__tls_error());
                    goto out;
                }
            }
            rc = xc__send_all(fd, &hello, sizeof hello, deadline_ns);
            if (rc != XC_OK) {
                rc = xc__err(XC_ERR_PEER_LOST,
                             "rank %d: rank %d closed the connection during set-up", me, j);
                goto out;
            }
            xc__set_nonblock(fd);
        }
        pend[np++] = (pending_t){.fd = slot[j].fd[0], .peer = j, .stage = ST_HELLO,
                                 .proven = -1};
    }
    const int hs_ms = comm->cfg.auth.handshake_ms > 0 ? comm->cfg.auth.handshake_ms
                                                      : XC__AUTH_DEFAULT_MS;
    /* Answers from lower ranks, introductions from higher ranks. */
    while (missing > 0) {
        int k = 0;
        /* (with the table full, connections wait in the backlog: polling
         * the listener then would return at once, a busy loop) */
        pfd[k++] = (struct pollfd){lfd, np < cap ? POLLIN : 0, 0};
        for (int i = 0; i < np; i++) pfd[k++] = (struct pollfd){pend[i].fd, POLLIN, 0};
        int ms = xc__poll_ms_left(deadline_ns);
        if (ms == 0) break;
        for (int i = 0; i < np; i++) /* wake for the first handshake deadline */
            if (pend[i].peer < 0) {
                int left = xc__poll_ms_left(pend[i].since + (uint64_t)hs_ms * 1000000ull);
                if (ms < 0 || left < ms) ms = left;
            }
        int r = poll(pfd, (nfds_t)k, ms);
        if (r < 0 && errno != EINTR) {
            rc = xc__err_errno("poll");
            goto out;
        }
        /* Accepted sockets past the handshake deadline lose their slot. */
        uint64_t now = xc__now_ns();
        for (int i = 0; i < np; i++) {
            if (pend[i].peer >= 0 || now < pend[i].since + (uint64_t)hs_ms * 1000000ull)
                continue;
            xc__auth_reject("mesh", pend[i].addr,
                            "timeout (no complete handshake and hello within "
                            "XCOLL_HANDSHAKE_MS)");
            close(pend[i].fd);
            pend[i] = pend[--np];
            i--;
        }
        if (r <= 0) continue;
        if ((pfd[0].revents & POLLIN) && np < cap) {
            struct sockaddr_storage from;
            socklen_t fl = sizeof from;
            int fd = accept4(lfd, (struct sockaddr *)&from, &fl, SOCK_CLOEXEC | SOCK_NONBLOCK);
            if (fd >= 0) {
                xc__set_sockopts(fd, comm->cfg.socket_buf_kb);
                pend[np] = (pending_t){.fd = fd, .peer = -1, .proven = -1, .since = now,
                                       .stage = comm->cfg.auth.has_token ? ST_AUTH1 : ST_HELLO};
                xc__addr_str(&from, pend[np].addr, sizeof pend[np].addr);
                np++;
            }
        }
        for (int i = 0; i < np; i++) {
            /* The table may have changed since poll(): match by descriptor. */
            int fi = 0;
            while (fi < k - 1 && pfd[fi + 1].fd != pend[i].fd) fi++;
            if (fi == k - 1 || !pfd[fi + 1].revents) continue;
            pending_t *p = &pend[i];
            uint8_t *dst = p->stage == ST_HELLO ? (uint8_t *)&p->h : p->abuf;
            size_t want = p->stage == ST_HELLO  ? sizeof p->h
                          : p->stage == ST_AUTH1 ? XC__AUTH_MSG1_LEN
                                                 : XC__AUTH_MSG3_LEN;
            ssize_t got = recv(p->fd, dst + p->off, want - p->off, MSG_DONTWAIT);
            int drop = 0, done = 0;
            const char *why = NULL;
            if (got > 0) {
                p->off += (size_t)got;
                if (p->stage == ST_AUTH1 && !xc__auth_magic_prefix(p->abuf, p->off)) {
                    why = frame_magic_prefix(p->abuf, p->off)
                              ? "no token (a plain xcoll hello: the peer has no job token)"
                              : "bad frame (not an xcoll handshake)";
                } else if (p->stage != ST_HELLO) {
                    if (p->off == want) why = auth_step(comm, p);
                } else if (p->off == sizeof p->h) {
                    const xc__hdr_t *h = &p->h;
                    if (!hello_ok(comm, h)) {
                        drop = 1;
                        if (p->peer < 0)
                            why = !comm->cfg.auth.has_token &&
                                          xc__auth_magic_prefix((const uint8_t *)h, 4)
                                      ? "no token here: the peer presented a job token, but "
                                        "this rank has none (XCOLL_TOKEN)"
                                      : "bad frame (not a hello of this communicator)";
                    } else if (p->proven >= 0 && h->tag != p->proven) {
                        drop = 1;
                        why = "bad frame (a hello from another rank than the one proven)";
                    } else if (p->peer >= 0) {
                        /* The answer to our stream 0: the peer has them all. */
                        done = h->tag == p->peer && h->algo == slot[p->peer].n;
                    } else {
                        /* A stream of a higher rank: new, and consistent
                         * with the streams of it seen so far. */
                        slot_t *sl = &slot[h->tag];
                        done = h->tag > me && !comm->conns[h->tag] &&
                               (sl->n == 0 || sl->n == h->algo) && sl->fd[h->root] < 0;
                    }
                    if (!done) drop = 1;
                }
            } else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
                drop = 1;
                if (p->peer < 0 && p->stage == ST_AUTH3)
                    why = "closed during the handshake (after our proof: it holds another "
                          "token, or is not an xcoll rank)";
                else if (p->peer < 0 && p->stage == ST_AUTH1 && p->off > 0)
                    why = "bad frame (a truncated handshake)";
            }
            if (why) {
                xc__auth_reject("mesh", p->addr, why);
                drop = 1;
            }
            if (drop && p->peer >= 0) {
                rc = xc__err(XC_ERR_PEER_LOST,
                             "rank %d: the connection to rank %d failed during set-up "
                             "(it exited, or a different job owns its address)",
                             me, p->peer);
                goto out;
            }
            if (done) {
                int peer = p->h.tag;
                slot_t *sl = &slot[peer];
                if (p->peer < 0) {
                    sl->n = p->h.algo;
                    sl->fd[p->h.root] = p->fd;
                    sl->got++;
                    p->fd = -1;
                    if (sl->got == sl->n) {
                        /* Every stream is here: answer on stream 0. */
                        xc__hdr_t hello;
                        hello_fill(comm, &hello, 0, sl->n);
                        if (xc__send_all(sl->fd[0], &hello, sizeof hello, deadline_ns) != XC_OK) {
                            slot_close(sl); /* it vanished: it may still retry */
                            sl->n = sl->got = 0;
                        } else {
                            XC_CHECK_GOTO(slot_commit(comm, sl, peer, addrs), rc, out);
                            missing--;
                        }
                    }
                } else {
                    p->fd = -1; /* slot_commit takes it with the others */
                    XC_CHECK_GOTO(slot_commit(comm, sl, peer, addrs), rc, out);
                    missing--;
                }
            }
            if (drop || done) {
                if (p->fd >= 0) close(p->fd); /* a stranger */
                pend[i] = pend[--np];
                i--;
            }
        }
    }
    if (missing > 0) {
        int who = -1;
        for (int j = 0; j < n && who < 0; j++)
            if (j != me && !comm->conns[j]) who = j;
        rc = xc__err(XC_ERR_TIMEOUT,
                     "rank %d: rank %d did not connect within the timeout (%d ms)%s", me, who,
                     comm->cfg.timeout_ms, xc__auth_hint());
    }
out:
    for (int i = 0; i < np; i++)
        if (pend[i].fd >= 0 && pend[i].peer < 0) close(pend[i].fd); /* slots own the rest */
    if (slot)
        for (int j = 0; j < n; j++) slot_close(&slot[j]);
    if (pend) explicit_bzero(pend, (size_t)cap * sizeof *pend); /* token copies */
    free(pend);
    free(pfd);
    free(slot);
    return rc;
}

xc_result_t xc__comm_start(xc_comm_t *comm)
{
    XC_CHECK(xc__algo_parse_env(comm));
    if (comm->cfg.progress_thread) {
        if (pthread_create(&comm->thread, NULL, xc__progress_main, comm) != 0)
            return xc__err(XC_ERR_SYSTEM, "cannot start the progress thread");
        comm->has_thread = 1;
    }
    /* Every rank has every connection once this barrier completes. */
    xc_result_t rc = xc_barrier(comm);
    if (rc != XC_OK)
        return xc__err(rc, "rank %d: start-up barrier failed: %s", comm->rank, xc__tls_error());
    /* Ranks that all share a node also share memory. */
    rc = xc__shm_attach(comm);
    if (rc != XC_OK)
        return xc__err(rc, "rank %d: shared memory set-up failed: %s", comm->rank,
                       xc__tls_error());
    XC_CHECK(xc__model_init(comm));
    /* Every rank has finished setting up once this barrier completes: a
     * rank that returned first could otherwise fail its next operation
     * (e.g. on a mismatch) and leave while a peer still set up, and that
     * peer would learn only that it had left, not why. */
    rc = xc_barrier(comm);
    if (rc != XC_OK)
        return xc__err(rc, "rank %d: closing start-up barrier failed: %s", comm->rank,
                       xc__tls_error());
    return XC_OK;
}
