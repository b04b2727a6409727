/*
 * mesh.c -- node identity, and connecting every pair of ranks of a new
 * communicator.
 *
 * Each rank listens on its advertised address; rank i connects to every
 * rank j < i and accepts every rank j > i.  The connecting side opens with a
 * HELLO frame carrying the communicator's 64-bit id and its rank; the
 * accepting side checks it and answers with its own HELLO.  A connection
 * that does not present the right id and a plausible, not yet connected
 * rank is a stranger and is closed without effect.  Everything is bounded
 * by one deadline, so a rank that never shows up yields XC_ERR_TIMEOUT
 * naming it.
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

static void hello_fill(const xc_comm_t *comm, xc__hdr_t *h)
{
    memset(h, 0, sizeof *h);
    h->magic = XC__FRAME_MAGIC;
    h->kind = XC__F_HELLO;
    h->comm_tag = (uint32_t)comm->uid;
    h->tag = comm->rank;
    h->seq = comm->uid;
    h->count = (uint64_t)comm->size;
}

static int hello_ok(const xc_comm_t *comm, const xc__hdr_t *h)
{
    return h->magic == XC__FRAME_MAGIC && h->kind == XC__F_HELLO &&
           h->seq == comm->uid && h->count == (uint64_t)comm->size && h->tag >= 0 &&
           h->tag < comm->size && h->tag != comm->rank;
}

typedef struct pending {
    int fd;
    int peer;          /* >= 0: our connection to that lower rank, awaiting its answer */
    size_t off;
    xc__hdr_t h;
} pending_t;

xc_result_t xc__mesh_connect(xc_comm_t *comm, int lfd,
                             const struct sockaddr_storage *addrs, uint64_t deadline_ns)
{
    int n = comm->size, me = comm->rank;
    int missing = n - 1;
    int cap = 2 * n + 16;
    pending_t *pend = calloc((size_t)cap, sizeof *pend);
    struct pollfd *pfd = calloc((size_t)cap + 1, sizeof *pfd);
    xc_result_t rc = XC_OK;
    int np = 0;
    if (!pend || !pfd) {
        rc = xc__err(XC_ERR_NOMEM, "out of memory connecting ranks");
        goto out;
    }
    xc__hdr_t hello;
    hello_fill(comm, &hello);
    /* Connect to every lower rank and introduce ourselves. */
    for (int j = 0; j < me; j++) {
        int fd;
        rc = xc__connect(&addrs[j], deadline_ns, &fd);
        if (rc != XC_OK) {
            char a[XC__ADDRSTR_LEN];
            xc__addr_str(&addrs[j], a, sizeof a);
            rc = xc__err(rc, "rank %d: cannot connect to rank %d at %s: %s", me, j, a,
                         xc__tls_error());
            goto out;
        }
        rc = xc__send_all(fd, &hello, sizeof hello, deadline_ns);
        if (rc != XC_OK) {
            close(fd);
            rc = xc__err(XC_ERR_PEER_LOST, "rank %d: rank %d closed the connection during set-up", me, j);
            goto out;
        }
        xc__set_nonblock(fd);
        pend[np++] = (pending_t){.fd = fd, .peer = j};
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
                xc__set_sockopts(fd);
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
                    if (!hello_ok(comm, &p->h)) drop = 1;
                    else if (p->peer >= 0) done = p->h.tag == p->peer;
                    else done = p->h.tag > me && !comm->conns[p->h.tag];
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
                if (p->peer < 0 && xc__send_all(p->fd, &hello, sizeof hello, deadline_ns) != XC_OK)
                    drop = 1;
                if (!drop) {
                    char a[XC__ADDRSTR_LEN];
                    xc__addr_str(&addrs[peer], a, sizeof a);
                    comm->conns[peer] = xc__tcp_conn_new(p->fd, peer, a);
                    if (!comm->conns[peer]) {
                        rc = xc__err(XC_ERR_NOMEM, "out of memory");
                        goto out;
                    }
                    missing--;
                    p->fd = -1;
                }
            }
            if (drop || done) {
                if (p->fd >= 0) close(p->fd); /* a stranger, or a failed answer */
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
        if (pend[i].fd >= 0) close(pend[i].fd);
    free(pend);
    free(pfd);
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
