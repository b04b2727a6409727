/*
 * test_stranger.c -- a stranger connecting to a running job's ports and
 * sending garbage (or nothing) must not break or stall the job.
 *
 * 2 ranks.  Phase 1 (bootstrap): rank 0 starts and hosts the store; before
 * rank 1 joins, the driver connects to the store port several times --
 * random bytes then close, an abortive close (RST), a few bytes then
 * silence, 0xff bytes (absurd lengths), an HTTP request, and a connection
 * that sends nothing and stays open for the whole job -- and clients that
 * speak the store's documented wire protocol (docs/rendezvous.md) badly:
 * an unsupported version, a bad opcode, absurd key/value lengths, a request
 * cut short, a GET parked forever on a key nobody sets.  Then rank 1 joins.
 * Phase 2 (running): while the ranks loop on collectives and point-to-point
 * exchanges, the driver finds every TCP port the ranks listen on
 * (/proc/PID/fd and /proc/net/tcp{,6}) and does the same to each.
 * The job must complete with correct results on both ranks.
 */
#include "harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_IDLE 64

static int idle_fds[MAX_IDLE];
static int n_idle;
static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* ------------------------------------------------------------ ranks */

static int check_round(xc_comm_t *comm, int rank, int size, int it)
{
    enum { N = 4096 };
    static int32_t v[N], g[2 * N];
    for (int k = 0; k < N; k++) v[k] = rank * 7 + k + it;
    if (xc_allreduce(v, v, N, XC_INT32, XC_SUM, comm) != XC_OK) {
        xt_fail(__FILE__, __LINE__, "round %d allreduce: %s", it,
                xc_comm_last_error(comm));
        return -1;
    }
    for (int k = 0; k < N; k += 97)
        if (!XT_CHECK_INT(v[k], ==, 7 + 2 * (k + it))) break;
    int32_t mine = 1000 * rank + it;
    if (xc_allgather(&mine, g, 1, XC_INT32, comm) != XC_OK) {
        xt_fail(__FILE__, __LINE__, "round %d allgather: %s", it,
                xc_comm_last_error(comm));
        return -1;
    }
    for (int r = 0; r < size; r++)
        if (!XT_CHECK_INT(g[r], ==, 1000 * r + it)) break;
    int32_t out = it * 3 + rank, in = -1;
    XT_CHECK_RC(xc_group_start(), XC_OK);
    XT_CHECK_RC(xc_send(&out, 1, XC_INT32, 1 - rank, it, comm), XC_OK);
    XT_CHECK_RC(xc_recv(&in, 1, XC_INT32, 1 - rank, it, comm), XC_OK);
    xc_result_t rc = xc_group_end();
    if (rc != XC_OK) {
        xt_fail(__FILE__, __LINE__, "round %d p2p: %s: %s", it,
                xc_err_name(rc), xc_comm_last_error(comm));
        return -1;
    }
    XT_CHECK_INT(in, ==, it * 3 + (1 - rank));
    return 0;
}

static int rank_main(int rank, int size, void *arg)
{
    (void)arg;
    if (rank == 1) xt_sync(0, 2, 20); /* driver has pestered the store */
    xc_comm_t *comm = xt_comm_world(10000);
    if (!comm) return 1;
    int it = 0;
    for (; it < 5; it++)
        if (check_round(comm, rank, size, it) != 0) return 1;
    xt_sync(1, 3, 20); /* tell the driver we run; keep running meanwhile */
    double end = xt_now() + 15;
    for (;;) {
        if (check_round(comm, rank, size, it++) != 0) return 1;
        /* Agree on stopping: rank 0 decides, via a bcast. */
        int32_t stop = rank == 0 && (atomic_load(&xt_shm->flag[0]) ||
                                     xt_now() > end);
        XT_REQUIRE_OK(xc_bcast(&stop, 1, XC_INT32, 0, comm));
        if (stop) break;
    }
    XT_CHECK_INT(atomic_load(&xt_shm->flag[0]), ==, 1);
    for (int k = 0; k < 5; k++)
        if (check_round(comm, rank, size, it++) != 0) return 1;
    xt_log("%d rounds done", it);
    XT_CHECK_RC(xc_comm_status(comm), XC_OK);
    XT_CHECK_RC(xc_barrier(comm), XC_OK);
    XT_CHECK_RC(xc_comm_destroy(comm), XC_OK);
    return xt_result();
}

/* ------------------------------------------------------------ stranger */

static int connect_to(const struct sockaddr *sa, socklen_t len)
{
    int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    if (connect(fd, sa, len) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void send_all(int fd, const void *p, size_t n)
{
    /* Best effort: the far side may drop us at any point. */
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w <= 0) return;
        p = (const char *)p + w;
        n -= (size_t)w;
    }
}

static void keep(int fd)
{
    if (n_idle < MAX_IDLE) idle_fds[n_idle++] = fd;
    else close(fd);
}

/* Every kind of unwelcome visit to one listening address. */
static int pester(const struct sockaddr *sa, socklen_t len, const char *what)
{
    unsigned char junk[4096];
    int visits = 0, fd;
    for (size_t k = 0; k < sizeof junk; k++) junk[k] = (unsigned char)next_rand();

    if ((fd = connect_to(sa, len)) >= 0) { /* random bytes, close */
        send_all(fd, junk, sizeof junk);
        close(fd);
        visits++;
    }
    if ((fd = connect_to(sa, len)) >= 0) { /* abortive close: RST */
        struct linger lg = {1, 0};
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        send_all(fd, junk, 7);
        close(fd);
        visits++;
    }
    if ((fd = connect_to(sa, len)) >= 0) { /* a few bytes, then silence */
        send_all(fd, junk, 3);
        keep(fd);
        visits++;
    }
    if ((fd = connect_to(sa, len)) >= 0) { /* absurd lengths */
        unsigned char ff[64];
        memset(ff, 0xff, sizeof ff);
        send_all(fd, ff, sizeof ff);
        keep(fd);
        visits++;
    }
    if ((fd = connect_to(sa, len)) >= 0) { /* a confused HTTP client */
        static const char req[] = "GET / HTTP/1.0\r\nHost: x\r\n\r\n";
        send_all(fd, req, sizeof req - 1);
        struct pollfd p = {fd, POLLIN, 0};
        poll(&p, 1, 100);
        close(fd);
        visits++;
    }
    if ((fd = connect_to(sa, len)) >= 0) { /* silent, stays open */
        keep(fd);
        visits++;
    }
    xt_log("pestered %s: %d connections", what, visits);
    return visits;
}

/* Big-endian helpers for the store's wire protocol (docs/rendezvous.md). */
static void put16(unsigned char *p, unsigned v)
{
    p[0] = (unsigned char)(v >> 8);
    p[1] = (unsigned char)v;
}

static void put32(unsigned char *p, uint32_t v)
{
    put16(p, v >> 16);
    put16(p + 2, v & 0xffff);
}

/* Clients that open with the right magic and then misbehave. */
static int pester_protocol(const struct sockaddr *sa, socklen_t len)
{
    unsigned char hello[8], req[64];
    int visits = 0, fd;
    put32(hello, 0x58435354u); /* "XCST" */
    put16(hello + 4, 1);       /* version */
    put16(hello + 6, 0);

    if ((fd = connect_to(sa, len)) >= 0) { /* a version from the future */
        unsigned char h2[8];
        memcpy(h2, hello, 8);
        put16(h2 + 4, 999);
        send_all(fd, h2, 8);
        keep(fd);
        visits++;
    }
    if ((fd = connect_to(sa, len)) >= 0) { /* bad opcode */
        memset(req, 0, sizeof req);
        req[0] = 99;
        put16(req + 2, 4);
        put32(req + 4, 0);
        memcpy(req + 8, "xc/0", 4);
        send_all(fd, hello, 8);
        send_all(fd, req, 12);
        keep(fd);
        visits++;
    }
    if ((fd = connect_to(sa, len)) >= 0) { /* SET with absurd lengths */
        memset(req, 0, sizeof req);
        req[0] = 1;
        put16(req + 2, 0xffff);
        put32(req + 4, 0xffffffffu);
        send_all(fd, hello, 8);
        send_all(fd, req, 8);
        send_all(fd, "xc/0/rank/1", 11);
        keep(fd);
        visits++;
    }
    if ((fd = connect_to(sa, len)) >= 0) { /* SET cut short, then silence */
        memset(req, 0, sizeof req);
        req[0] = 1;
        put16(req + 2, 9);
        put32(req + 4, 100);
        memcpy(req + 8, "xc/0/rank", 9);
        send_all(fd, hello, 8);
        send_all(fd, req, 17); /* the 100 value bytes never come */
        keep(fd);
        visits++;
    }
    if ((fd = connect_to(sa, len)) >= 0) { /* GET parked forever */
        memset(req, 0, sizeof req);
        req[0] = 2;
        put16(req + 2, 13);
        put32(req + 4, 4);
        memcpy(req + 8, "stranger/none", 13);
        put32(req + 21, 0xffffffffu);
        send_all(fd, hello, 8);
        send_all(fd, req, 25);
        keep(fd);
        visits++;
    }
    return visits;
}

static int pester_port(int port)
{
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    char what[64];
    snprintf(what, sizeof what, "127.0.0.1:%d", port);
    int visits = pester((struct sockaddr *)&a, sizeof a, what);
    if (visits > 0) {
        int v = pester_protocol((struct sockaddr *)&a, sizeof a);
        xt_log("misused the store protocol at %s: %d connections", what, v);
        visits += v;
    }
    return visits;
}

/* Pester every TCP port a rank listens on.  Returns how many ports. */
static int pester_listeners(const xt_job_t *job)
{
    int ports = 0;
    for (int v6 = 0; v6 < 2; v6++) {
        FILE *f = fopen(v6 ? "/proc/net/tcp6" : "/proc/net/tcp", "r");
        if (!f) continue;
        char line[512];
        if (!fgets(line, sizeof line, f)) line[0] = '\0'; /* header */
        while (fgets(line, sizeof line, f)) {
            char local[64], remote[64];
            unsigned st;
            unsigned long ino;
            if (sscanf(line, "%*d: %63s %63s %x %*s %*s %*s %*s %*s %lu",
                       local, remote, &st, &ino) != 4 || st != 0x0A)
                continue;
            char *colon = strchr(local, ':');
            if (!colon) continue;
            int port = (int)strtol(colon + 1, NULL, 16);
            int owner = -1;
            for (int r = 0; r < job->size && owner < 0; r++)
                if (xt_owns_inode(job->pid[r], ino)) owner = r;
            if (owner < 0) continue;
            char what[96];
            if (!v6) {
                struct sockaddr_in a;
                memset(&a, 0, sizeof a);
                a.sin_family = AF_INET;
                a.sin_port = htons((uint16_t)port);
                unsigned long ip = strtoul(local, NULL, 16); /* host order of
                                                                 raw bytes */
                a.sin_addr.s_addr = (in_addr_t)ip;
                if (a.sin_addr.s_addr == 0)
                    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
                snprintf(what, sizeof what, "rank %d listener %s:%d", owner,
                         inet_ntoa(a.sin_addr), port);
                pester((struct sockaddr *)&a, sizeof a, what);
            } else {
                struct sockaddr_in6 a;
                memset(&a, 0, sizeof a);
                a.sin6_family = AF_INET6;
                a.sin6_port = htons((uint16_t)port);
                a.sin6_addr = in6addr_loopback;
                snprintf(what, sizeof what, "rank %d listener [::1]:%d", owner,
                         port);
                pester((struct sockaddr *)&a, sizeof a, what);
            }
            ports++;
        }
        fclose(f);
    }
    return ports;
}

/* The job's store is at 127.0.0.1: it must listen on loopback only.
 * Connect to its port on this machine's first non-loopback IPv4 address
 * (none: nothing to check): refused.  1 if reachable there. */
static int store_reachable_off_loopback(int port)
{
    struct ifaddrs *ifs = NULL, *i;
    if (getifaddrs(&ifs) != 0) return 0;
    int reachable = 0, tried = 0;
    for (i = ifs; i && !tried; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
        struct sockaddr_in a = *(struct sockaddr_in *)i->ifa_addr;
        if ((ntohl(a.sin_addr.s_addr) >> 24) == 127) continue;
        tried = 1;
        a.sin_port = htons((uint16_t)port);
        char s[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &a.sin_addr, s, sizeof s);
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0) break;
        reachable = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
        xt_log("store port %d on %s (%s): %s", port, s, i->ifa_name,
               reachable ? "REACHABLE" : strerror(errno));
        close(fd);
    }
    freeifaddrs(ifs);
    return reachable;
}

int main(int argc, char **argv)
{
    (void)argc;
    xt_init(argv[0], NULL);
    xt_job_t job;
    if (xt_job_start(&job, 2, rank_main, NULL, -1, 40) != 0) return 1;

    /* Phase 1: the store, before rank 1 joins. */
    int visits = 0;
    double end = xt_now() + 10;
    while (visits == 0 && xt_now() < end) {
        visits = pester_port(job.port);
        if (visits == 0) usleep(20000);
    }
    XT_CHECK_INT(visits, >, 0);
    XT_CHECK_INT(store_reachable_off_loopback(job.port), ==, 0);
    xt_sync(0, 2, 20);

    /* Phase 2: every port of the running job. */
    xt_sync(1, 3, 30);
    int ports = pester_listeners(&job);
    xt_log("pestered %d listening ports of the running job", ports);
    pester_port(job.port); /* the store again, if it is still open */
    usleep(200000);        /* let the ranks run with the garbage queued */
    atomic_store(&xt_shm->flag[0], 1);

    xt_job_wait(&job, 45);
    for (int k = 0; k < n_idle; k++) close(idle_fds[k]);
    xt_expect_all_ok(&job);
    xt_log("%s", xt_failures ? "FAILED" : "passed");
    return xt_result();
}
