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
 * (peer < 0) or our stream 0 to a lower rank, awaiting its answer. */
typedef struct pending {
    int fd;
    int peer;
    size_t off;
    xc__hdr_t h;
} pending_t;

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
            rc = xc__send_all(fd, &hello, sizeof hello, deadline_ns);
            if (rc != XC_OK) {
                rc = xc__err(XC_ERR_PEER_LOST,
                             "rank %d: rank %d closed the connection during set-up", me, j);
                goto out;
            }
            xc__set_nonblock(fd);
        }
        pend[np++] = (pending_t){.fd = slot[j].fd[0], .peer = j};
    }
    /* Answers from lower ranks, introductions from higher ranks. */
    while (missing > 0) {
        int k = 0;
        pfd[k++] = (struct pollfd){lfd, POLLIN, 0};
        for (int i = 0; i < np; i++) pfd[k++] = (struct pollfd){pend[i].fd, POLLIN, 0};
        int ms = xc__poll_ms_left(deadline_ns);
        if (ms == 0) break;
        int r = poll(pfd, (nfds_t)k, ms);
        if (r < 0 && errno != EINTR) {
            rc = xc__err_errno("poll");
            goto out;
        }
        if (r <= 0) continue;
        if ((pfd[0].revents & POLLIN) && np < cap) {
            int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
            if (fd >= 0) {
                xc__set_sockopts(fd, comm->cfg.socket_buf_kb);
                pend[np++] = (pending_t){.fd = fd, .peer = -1};
            }
        }
        for (int i = 0; i < np; i++) {
            if (!pfd[i + 1].revents || pfd[i + 1].fd != pend[i].fd) continue;
            pending_t *p = &pend[i];
            ssize_t got = recv(p->fd, (char *)&p->h + p->off, sizeof p->h - p->off, MSG_DONTWAIT);
            int drop = 0, done = 0;
            if (got > 0) {
                p->off += (size_t)got;
                if (p->off == sizeof p->h) {
                    const xc__hdr_t *h = &p->h;
                    if (!hello_ok(comm, h)) {
                        drop = 1;
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
                pfd[i + 1] = pfd[np + 1];
                i--;
            }
        }
    }
    if (missing > 0) {
        int who = -1;
        for (int j = 0; j < n && who < 0; j++)
            if (j != me && !comm->conns[j]) who = j;
        rc = xc__err(XC_ERR_TIMEOUT,
                     "rank %d: rank %d did not connect within the timeout (%d ms)", me, who,
                     comm->cfg.timeout_ms);
    }
out:
    for (int i = 0; i < np; i++)
        if (pend[i].fd >= 0 && pend[i].peer < 0) close(pend[i].fd); /* slots own the rest */
    if (slot)
        for (int j = 0; j < n; j++) slot_close(&slot[j]);
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
    return xc__model_init(comm);
}
