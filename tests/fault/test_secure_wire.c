/*
 * test_secure_wire.c -- the secure wire (docs/fault-tolerance.md, "Secure wire")
 * with real processes over real TCP.  Scenarios (argv[1]):
 *
 *   strangers      3 ranks sharing XCOLL_TOKEN.  Ranks 0 and 1 start (rank 0
 *                  hosts the store); rank 2 waits.  Meanwhile the driver
 *                  visits the store and the data ports of ranks 0 and 1
 *                  with: no token (a plain store hello / a plain HELLO
 *                  frame), a well-formed handshake computed with another
 *                  key, a replayed handshake (bytes captured from a
 *                  legitimate handshake of its own), random bytes, a
 *                  truncated handshake and silence.  Each visit must end
 *                  with the far side closing the connection; then rank 2
 *                  joins and the job must compute correct results.  The
 *                  ranks log at WARN into files, which must name each
 *                  reason of rejection.
 *   mismatch_store 2 ranks, rank 1 with another token: rank 1 fails at once
 *                  with XC_ERR_PROTOCOL "authentication failed" (the store's
 *                  proof does not match), rank 0 with XC_ERR_TIMEOUT at its
 *                  deadline, whose message mentions the rejected
 *                  authentication.  Nobody hangs.
 *   mismatch_mesh  the same with a file store (no TCP store): the failure
 *                  is on the rank-to-rank connection.
 *
 * The driver speaks the handshake itself (auth.h's wire format, HMAC-SHA256
 * from libcrypto), independently of the library, which pins the format.
 */
#include "harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#define TOKEN_A "4a6f62546f6b656e4a6f62546f6b656e4a6f62546f6b656e4a6f62546f6b656e"
#define TOKEN_B "0badc0de0badc0de0badc0de0badc0de0badc0de0badc0de0badc0de0badc0de"
#define HS_MS 1500
#define M1 56
#define M2 72
#define M3 40
#define KIND_STORE 1
#define KIND_MESH 2

/* XT_CHECK_INT evaluates its operands twice: calls go through a variable. */
#define CHECK_CALL(call, op, want)                                             \
    do {                                                                       \
        long long got_ = (long long)(call);                                    \
        if (!(got_ op (long long)(want)))                                      \
            xt_fail(__FILE__, __LINE__, "%s: got %lld, want %s %lld", #call,   \
                    got_, #op, (long long)(want));                             \
    } while (0)

static char g_dir[64];

/* ------------------------------------------------------------ wire helpers */

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (24 - 8 * i));
}
static void put64(uint8_t *p, uint64_t v)
{
    put32(p, (uint32_t)(v >> 32));
    put32(p + 4, (uint32_t)v);
}

static void key_of(const char *hex, uint8_t k[32])
{
    for (int i = 0; i < 32; i++) sscanf(hex + 2 * i, "%2hhx", &k[i]);
}

/* One handshake as a client sees it (auth.h). */
typedef struct hs {
    uint8_t key[32], kind;
    uint64_t id;
    int32_t client, server;
    uint8_t nc[32], ns[32];
    uint8_t m1[M1], m3[M3];
} hs_t;

static void hs_init(hs_t *h, const char *hex, uint8_t kind, uint64_t id, int32_t cl, int32_t sv)
{
    memset(h, 0, sizeof *h);
    key_of(hex, h->key);
    h->kind = kind;
    h->id = id;
    h->client = cl;
    h->server = sv;
    if (getrandom(h->nc, sizeof h->nc, 0) != sizeof h->nc) memset(h->nc, 7, sizeof h->nc);
    put32(h->m1, 0x58434131u);
    h->m1[4] = 1;
    h->m1[5] = kind;
    put64(h->m1 + 8, id);
    put32(h->m1 + 16, (uint32_t)cl);
    put32(h->m1 + 20, (uint32_t)sv);
    memcpy(h->m1 + 24, h->nc, 32);
}

static void hs_mac(const hs_t *h, uint8_t dir, uint8_t out[32])
{
    uint8_t t[13 + 1 + 8 + 4 + 4 + 64 + 1], *p = t;
    memcpy(p, "xcoll-auth-v1", 13), p += 13;
    *p++ = h->kind;
    put64(p, h->id), p += 8;
    put32(p, (uint32_t)h->client), p += 4;
    put32(p, (uint32_t)h->server), p += 4;
    memcpy(p, h->nc, 32), p += 32;
    memcpy(p, h->ns, 32), p += 32;
    *p++ = dir;
    unsigned len = 32;
    HMAC(EVP_sha256(), h->key, 32, t, (size_t)(p - t), out, &len);
}

/* Take the server's message 2: 1 if its proof holds under our key.  Fills
 * message 3 (our proof under our key) either way. */
static int hs_answer(hs_t *h, const uint8_t m2[M2])
{
    memcpy(h->ns, m2 + 8, 32);
    uint8_t want[32];
    hs_mac(h, 'S', want);
    memcpy(h->m3, h->m1, 8);
    hs_mac(h, 'C', h->m3 + 8);
    return CRYPTO_memcmp(want, m2 + 40, 32) == 0;
}

static int connect_port(int port)
{
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void send_all(int fd, const void *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0) return;
        p = (const char *)p + w;
        n -= (size_t)w;
    }
}

/* Read exactly n bytes within timeout_s: 0, or -1 (closed, error, late). */
static int recv_n(int fd, void *buf, size_t n, double timeout_s)
{
    double end = xt_now() + timeout_s;
    size_t got = 0;
    while (got < n) {
        struct pollfd p = {fd, POLLIN, 0};
        int ms = (int)((end - xt_now()) * 1000);
        if (ms <= 0 || poll(&p, 1, ms) <= 0) return -1;
        ssize_t r = recv(fd, (char *)buf + got, n - got, 0);
        if (r <= 0) return -1;
        got += (size_t)r;
    }
    return 0;
}

/* Does the far side close the connection within timeout_s (reading and
 * discarding whatever it sends first)?  Closes fd. */
static int closed_by_peer(int fd, double timeout_s)
{
    double end = xt_now() + timeout_s;
    char junk[256];
    int closed = 0;
    while (!closed) {
        struct pollfd p = {fd, POLLIN, 0};
        int ms = (int)((end - xt_now()) * 1000);
        if (ms <= 0 || poll(&p, 1, ms) <= 0) break;
        ssize_t r = recv(fd, junk, sizeof junk, 0);
        closed = r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN);
    }
    close(fd);
    return closed;
}

/* ------------------------------------------------------------ ranks */

static int compute(xc_comm_t *comm, int rank, int size)
{
    enum { N = 1000 };
    static int32_t v[N];
    for (int it = 0; it < 5; it++) {
        for (int k = 0; k < N; k++) v[k] = rank + k + it;
        XT_REQUIRE_OK(xc_allreduce(v, v, N, XC_INT32, XC_SUM, comm));
        for (int k = 0; k < N; k += 37)
            if (!XT_CHECK_INT(v[k], ==, size * (size - 1) / 2 + size * (k + it))) return 1;
    }
    return 0;
}

static int rank_strangers(int rank, int size)
{
    char path[128];
    snprintf(path, sizeof path, "%s/rank%d.log", g_dir, rank);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd >= 0) dup2(fd, 2), close(fd); /* WARN lines land here */
    if (rank == 2 && xt_sync(0, 2, 40) != 0) return 1;
    xc_comm_t *comm = xt_comm_world(30000);
    if (!comm) return 1;
    if (compute(comm, rank, size)) return 1;
    XT_CHECK_RC(xc_barrier(comm), XC_OK);
    XT_CHECK_RC(xc_comm_destroy(comm), XC_OK);
    xt_log("done");
    return xt_result();
}

static int rank_mismatch(int rank, int size, int mesh)
{
    (void)size;
    if (mesh) {
        char addr[96];
        snprintf(addr, sizeof addr, "file:%s", g_dir);
        setenv("XCOLL_ADDR", addr, 1);
    }
    if (rank == 1) setenv("XCOLL_TOKEN", TOKEN_B, 1);
    xc_config_t cfg = XC_CONFIG_INIT;
    cfg.timeout_ms = 4000;
    xc_comm_t *comm = NULL;
    double t0 = xt_now();
    xc_result_t rc = xc_comm_init_env(&comm, &cfg);
    double took = xt_now() - t0;
    const char *msg = xc_last_error();
    xt_log("%s after %.2fs: %s", xc_err_name(rc), took, msg);
    XT_CHECK_DBL(took, <, 4.0 + 2.0);
    if (rank == 1) {
        XT_CHECK_RC(rc, XC_ERR_PROTOCOL);
        XT_CHECK_HAS(msg, "authentication failed");
        XT_CHECK_DBL(took, <, 3.0); /* at once, not at the deadline */
    } else {
        XT_CHECK_RC(rc, XC_ERR_TIMEOUT);
        XT_CHECK_HAS(msg, "failed authentication");
    }
    if (comm) xc_comm_destroy(comm);
    return xt_result();
}

static const char *g_scenario;

static int rank_main(int rank, int size, void *arg)
{
    (void)arg;
    if (!strcmp(g_scenario, "strangers")) return rank_strangers(rank, size);
    return rank_mismatch(rank, size, !strcmp(g_scenario, "mismatch_mesh"));
}

/* ------------------------------------------------------------ driver */

/* The IPv4 data listener of rank r (any port but the store's), or -1. */
static int data_port(const xt_job_t *job, int r)
{
    FILE *f = fopen("/proc/net/tcp", "r");
    if (!f) return -1;
    char line[512];
    int port = -1;
    if (!fgets(line, sizeof line, f)) line[0] = '\0';
    while (port < 0 && fgets(line, sizeof line, f)) {
        char local[64], remote[64];
        unsigned st;
        unsigned long ino;
        if (sscanf(line, "%*d: %63s %63s %x %*s %*s %*s %*s %*s %lu", local, remote, &st,
                   &ino) != 4 || st != 0x0A)
            continue;
        char *colon = strchr(local, ':');
        int p = colon ? (int)strtol(colon + 1, NULL, 16) : -1;
        if (p > 0 && p != job->port && xt_owns_inode(job->pid[r], ino)) port = p;
    }
    fclose(f);
    return port;
}

/* Store request GET key (timeout 5 s) on an authenticated, greeted socket;
 * returns the value's length (<= cap) or -1. */
static int store_get(int fd, const char *key, void *buf, size_t cap)
{
    uint8_t rq[8 + 64 + 4];
    size_t kl = strlen(key);
    rq[0] = 2;
    rq[1] = 0;
    rq[2] = 0;
    rq[3] = (uint8_t)kl;
    put32(rq + 4, 4);
    memcpy(rq + 8, key, kl);
    put32(rq + 8 + kl, 5000);
    send_all(fd, rq, 8 + kl + 4);
    uint8_t ans[8];
    if (recv_n(fd, ans, 8, 7) != 0 || ans[0] != 0) return -1;
    uint32_t len = (uint32_t)ans[4] << 24 | (uint32_t)ans[5] << 16 | (uint32_t)ans[6] << 8 | ans[7];
    if (len > cap || recv_n(fd, buf, len, 5) != 0) return -1;
    return (int)len;
}

static const uint8_t k_store_hello[8] = {0x58, 0x43, 0x53, 0x54, 0, 1, 0, 0};

/* Every unwelcome visit to the store; returns the captured legitimate
 * handshake in *legit and the communicator id in *uid. */
static void visit_store(int port, hs_t *legit, uint64_t *uid, int *slow, int *nslow)
{
    int fd;
    uint8_t m2[M2], ans[8];

    /* The legitimate handshake, captured (and a check of our own code). */
    hs_init(legit, TOKEN_A, KIND_STORE, 0, -1, -1);
    fd = connect_port(port);
    send_all(fd, legit->m1, M1);
    CHECK_CALL(recv_n(fd, m2, M2, 5), ==, 0);
    CHECK_CALL(hs_answer(legit, m2), ==, 1);
    send_all(fd, legit->m3, M3);
    send_all(fd, k_store_hello, 8);
    CHECK_CALL(recv_n(fd, ans, 8, 5), ==, 0);
    XT_CHECK_INT(ans[7], ==, 0); /* STORE_HELLO_OK */
    CHECK_CALL(store_get(fd, "xc/0/uid", uid, sizeof *uid), ==, 8);
    close(fd);

    /* No token: a plain hello gets "authentication required", then EOF. */
    fd = connect_port(port);
    send_all(fd, k_store_hello, 8);
    CHECK_CALL(recv_n(fd, ans, 8, 5), ==, 0);
    XT_CHECK_INT(ans[7], ==, 2); /* STORE_HELLO_AUTH_REQUIRED */
    CHECK_CALL(closed_by_peer(fd, 5), ==, 1);

    /* Another key: the server's proof fails ours, ours fails the server. */
    hs_t wrong;
    hs_init(&wrong, TOKEN_B, KIND_STORE, 0, -1, -1);
    fd = connect_port(port);
    send_all(fd, wrong.m1, M1);
    CHECK_CALL(recv_n(fd, m2, M2, 5), ==, 0);
    CHECK_CALL(hs_answer(&wrong, m2), ==, 0);
    send_all(fd, wrong.m3, M3);
    send_all(fd, k_store_hello, 8);
    CHECK_CALL(closed_by_peer(fd, 5), ==, 1);

    /* Replay of the captured handshake: a fresh nonce defeats it. */
    fd = connect_port(port);
    send_all(fd, legit->m1, M1);
    CHECK_CALL(recv_n(fd, m2, M2, 5), ==, 0);
    XT_CHECK_INT(memcmp(m2 + 8, legit->ns, 32) != 0, ==, 1);
    send_all(fd, legit->m3, M3);
    send_all(fd, k_store_hello, 8);
    CHECK_CALL(closed_by_peer(fd, 5), ==, 1);

    /* Random bytes. */
    uint8_t junk[2048];
    if (getrandom(junk, sizeof junk, 0) != (ssize_t)sizeof junk) memset(junk, 0xa5, sizeof junk);
    fd = connect_port(port);
    send_all(fd, junk, sizeof junk);
    CHECK_CALL(closed_by_peer(fd, 5), ==, 1);

    /* Truncated handshake, and silence: the handshake deadline ends them. */
    fd = connect_port(port);
    send_all(fd, legit->m1, 20);
    slow[(*nslow)++] = fd;
    fd = connect_port(port);
    slow[(*nslow)++] = fd;
}

/* A plain HELLO frame of a rank without a token (frame.h, host order). */
static void plain_hello(uint8_t out[48], uint64_t uid)
{
    memset(out, 0, 48);
    uint32_t magic = 0x31464358u, tag = (uint32_t)uid;
    memcpy(out, &magic, 4);
    out[4] = 5; /* XC__F_HELLO */
    memcpy(out + 8, &tag, 4);
}

static int driver_strangers(void)
{
    setenv("XCOLL_TOKEN", TOKEN_A, 1);
    setenv("XCOLL_HANDSHAKE_MS", "1500", 1);
    setenv("XCOLL_DEBUG", getenv("XT_DEBUG") ? getenv("XT_DEBUG") : "WARN", 1);
    xt_job_t job;
    if (xt_job_start(&job, 3, rank_main, NULL, -1, 60) != 0) return 1;

    /* The store (rank 0) and the data listeners of ranks 0 and 1. */
    int p0 = -1, p1 = -1, up = -1;
    double end = xt_now() + 20;
    while ((up < 0 || p0 < 0 || p1 < 0) && xt_now() < end) {
        if (up < 0 && (up = connect_port(job.port)) >= 0) close(up), up = 1;
        if (p0 < 0) p0 = data_port(&job, 0);
        if (p1 < 0) p1 = data_port(&job, 1);
        usleep(20000);
    }
    XT_CHECK_INT(up, ==, 1);
    XT_CHECK_INT(p0, >, 0);
    XT_CHECK_INT(p1, >, 0);
    xt_log("store port %d, data ports %d %d", job.port, p0, p1);

    int slow[16], nslow = 0;
    hs_t legit;
    uint64_t uid = 0;
    if (up == 1) visit_store(job.port, &legit, &uid, slow, &nslow);
    xt_log("store visited; communicator id %016llx", (unsigned long long)uid);

    /* The data ports, queued while ranks 0 and 1 wait for rank 2. */
    int visits[2][6], nv = 6;
    hs_t wrong[2];
    for (int r = 0; r < 2; r++) {
        int port = r ? p1 : p0;
        uint8_t buf[64], junk[512];
        if (getrandom(junk, sizeof junk, 0) != (ssize_t)sizeof junk) memset(junk, 0x5a, sizeof junk);
        plain_hello(buf, uid);
        visits[r][0] = connect_port(port); /* no token */
        send_all(visits[r][0], buf, 48);
        hs_init(&wrong[r], TOKEN_B, KIND_MESH, uid, 2, r); /* another key */
        visits[r][1] = connect_port(port);
        send_all(visits[r][1], wrong[r].m1, M1);
        visits[r][2] = connect_port(port); /* the store's handshake replayed */
        send_all(visits[r][2], legit.m1, M1);
        send_all(visits[r][2], legit.m3, M3);
        visits[r][3] = connect_port(port); /* random bytes */
        send_all(visits[r][3], junk, sizeof junk);
        visits[r][4] = connect_port(port); /* truncated */
        send_all(visits[r][4], wrong[r].m1, 30);
        visits[r][5] = connect_port(port); /* silent */
    }
    /* The store's handshake deadline ends the truncated and silent ones
     * (the job is still waiting for rank 2, so the store is up). */
    for (int k = 0; k < nslow; k++)
        if (!closed_by_peer(slow[k], HS_MS / 1000.0 + 5))
            xt_fail(__FILE__, __LINE__, "the store kept slow visitor %d open", k);
    xt_sync(0, 2, 20); /* rank 2 joins */

    for (int r = 0; r < 2; r++) {
        uint8_t m2[M2];
        /* The wrong key's proof, once the rank answers (or it closed). */
        if (recv_n(visits[r][1], m2, M2, 20) == 0) {
            CHECK_CALL(hs_answer(&wrong[r], m2), ==, 0);
            send_all(visits[r][1], wrong[r].m3, M3);
        }
        for (int k = 0; k < nv; k++) {
            int ok = closed_by_peer(visits[r][k], 20);
            if (!ok) xt_fail(__FILE__, __LINE__, "rank %d kept visit %d open", r, k);
        }
    }

    xt_job_wait(&job, 50);
    xt_expect_all_ok(&job);

    /* Every reason of rejection is in the ranks' logs. */
    static char log[1 << 16];
    size_t n = 0;
    for (int r = 0; r < 3; r++) {
        char path[128];
        snprintf(path, sizeof path, "%s/rank%d.log", g_dir, r);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        size_t got = fread(log + n, 1, sizeof log - 1 - n, f);
        fclose(f);
        unlink(path);
        fprintf(stderr, "---- rank %d log ----\n%.*s", r, (int)got, log + n);
        n += got;
    }
    log[n] = 0;
    static const char *const reasons[] = {
        "store server: rejected the connection from ",
        "no token (a plain store hello",
        "wrong token",
        "bad frame (neither",
        "timeout",
        "mesh: rejected the connection from 127.0.0.1",
        "no token (a plain xcoll hello",
        "bad frame (not an xcoll handshake)",
        "bad frame (not an xcoll handshake of this kind)"};
    for (size_t i = 0; i < sizeof reasons / sizeof *reasons; i++)
        if (!strstr(log, reasons[i]))
            xt_fail(__FILE__, __LINE__, "the ranks' logs do not mention \"%s\"", reasons[i]);
    return 0;
}

int main(int argc, char **argv)
{
    g_scenario = argc > 1 ? argv[1] : "strangers";
    xt_init(argv[0], g_scenario);
    snprintf(g_dir, sizeof g_dir, "/tmp/xcoll-auth-XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    if (!strcmp(g_scenario, "strangers")) {
        driver_strangers();
    } else if (!strcmp(g_scenario, "mismatch_store") || !strcmp(g_scenario, "mismatch_mesh")) {
        setenv("XCOLL_TOKEN", TOKEN_A, 1);
        xt_job_t job;
        if (xt_job_start(&job, 2, rank_main, NULL, -1, 30) != 0) return 1;
        xt_job_wait(&job, 25);
        xt_expect_all_ok(&job);
    } else {
        fprintf(stderr, "unknown scenario '%s'\n", g_scenario);
        return 2;
    }
    /* the file store's files, if any */
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) xt_log("could not remove %s", g_dir);
    xt_log("%s", xt_failures ? "FAILED" : "passed");
    return xt_result();
}
