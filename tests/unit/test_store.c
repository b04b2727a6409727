/*
 * test_store.c -- the rendezvous stores: TCP server and client (concurrent
 * SET/GET/ADD, parked GET, timeouts, strangers on the port, partial and
 * pipelined requests, client before server, server stop under a parked
 * client), the file store (set/get/wait/timeout, key sanitising) and
 * xc__parse_hostport.  Standalone: exit 0 = pass, 1 = a check failed (each
 * failure is printed with both values).
 *
 * The raw-socket tests speak the wire protocol of docs/rendezvous.md
 * directly, so they also pin the documented format.
 */
#include "core/store.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#define EXPECT_RETURN /* a failed check ends its test function */
#include "expect.h"

/* Elapsed milliseconds since t0 (ns). */
static long long ms_since(uint64_t t0)
{
    return (long long)((xc__now_ns() - t0) / 1000000ull);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static int open_client(int port, xc_store_t *st)
{
    EXPECT_OK(xc__tcp_store_open("127.0.0.1", port, 5000, NULL, st, NULL));
    return 0;
}

/* Set key to a NUL-terminated string and read it back. */
static int get_str(xc_store_t *st, const char *key, char *buf, size_t cap,
                   int timeout_ms)
{
    size_t len = 0;
    EXPECT_OK(st->get(st->ctx, key, buf, cap - 1, &len, timeout_ms));
    EXPECT_TRUE(len < cap);
    buf[len] = '\0';
    return 0;
}

/* ------------------------------------------------------------------ */
/* parse_hostport                                                      */
/* ------------------------------------------------------------------ */

static int test_parse_hostport(void)
{
    static const struct {
        const char *in;
        const char *host; /* NULL: must fail */
        int port;
    } cases[] = {
        {"localhost:29500", "localhost", 29500},
        {"10.1.2.3:1", "10.1.2.3", 1},
        {"node-7.cluster:65535", "node-7.cluster", 65535},
        {"[::1]:80", "::1", 80},
        {"[fe80::1%eth0]:8080", "fe80::1%eth0", 8080},
        {"", NULL, 0},
        {"host", NULL, 0},
        {"host:", NULL, 0},
        {":80", NULL, 0},
        {"host:0", NULL, 0},
        {"host:65536", NULL, 0},
        {"host:99999999999999999999", NULL, 0},
        {"host:-1", NULL, 0},
        {"host:+80", NULL, 0},
        {"host: 80", NULL, 0},
        {"host:80x", NULL, 0},
        {"::1:80", NULL, 0},
        {"[::1]80", NULL, 0},
        {"[::1]", NULL, 0},
        {"[::1:80", NULL, 0},
        {"[]:80", NULL, 0},
        {"a]:80", NULL, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        char host[64] = "untouched";
        int port = -7;
        xc_result_t rc = xc__parse_hostport(cases[i].in, "XCOLL_ADDR", host,
                                            sizeof host, &port);
        if (cases[i].host) {
            if (rc != XC_OK)
                FAIL("parse '%s': %s: %s", cases[i].in, xc_err_name(rc),
                     xc_last_error());
            EXPECT_STREQ(host, cases[i].host);
            EXPECT_EQ(port, cases[i].port);
        } else {
            if (rc != XC_ERR_INVALID)
                FAIL("parse '%s' gave %s (host '%s' port %d), want "
                     "XC_ERR_INVALID",
                     cases[i].in, xc_err_name(rc), host, port);
            EXPECT_CONTAINS(xc_last_error(), "XCOLL_ADDR");
            if (cases[i].in[0]) EXPECT_CONTAINS(xc_last_error(), cases[i].in);
        }
    }
    char small[5];
    int port;
    EXPECT_RC(xc__parse_hostport("longhostname:80", "addr", small, sizeof small,
                                 &port),
              XC_ERR_INVALID);
    EXPECT_RC(xc__parse_hostport(NULL, "addr", small, sizeof small, &port),
              XC_ERR_INVALID);
    /* Loopback spellings (a job on this machine) against names, which may
     * resolve to a loopback alias here and elsewhere to a routable address. */
    static const char *const loop[] = {"localhost", "127.0.0.1", "127.0.1.1", "127.255.0.9", "::1"};
    static const char *const other[] = {"10.77.0.1", "vm", "localhost.example", "128.0.0.1",
                                        "::2", "fe80::1", "0.0.0.0"};
    for (size_t i = 0; i < sizeof loop / sizeof *loop; i++)
        EXPECT(xc__host_is_loopback(loop[i]) && xc__host_is_numeric(loop[i]) == (i > 0),
               "%s: a loopback spelling", loop[i]);
    for (size_t i = 0; i < sizeof other / sizeof *other; i++)
        EXPECT(!xc__host_is_loopback(other[i]), "%s: not a loopback spelling", other[i]);
    EXPECT(xc__host_is_numeric("10.77.0.1") && xc__host_is_numeric("fe80::1") &&
           !xc__host_is_numeric("vm") && !xc__host_is_numeric("localhost.example"),
           "numeric addresses against names");
    return 0;
}

/* ------------------------------------------------------------------ */
/* TCP basics                                                          */
/* ------------------------------------------------------------------ */

struct later_set {
    int port;
    int delay_ms;
    const char *keys[4];
    size_t nkeys;
};

static int later_set_run(struct later_set *a)
{
    xc_store_t st;
    if (open_client(a->port, &st)) return 1;
    sleep_ms(a->delay_ms);
    for (size_t i = 0; i < a->nkeys; ++i)
        EXPECT_OK(st.set(st.ctx, a->keys[i], a->keys[i], strlen(a->keys[i])));
    xc__tcp_store_close(&st);
    return 0;
}

static void *later_set_thread(void *p)
{
    later_set_run(p);
    return NULL;
}

static int test_tcp_basic(int port)
{
    xc_store_t st;
    struct sockaddr_storage local;
    EXPECT_OK(xc__tcp_store_open("127.0.0.1", port, 5000, NULL, &st, &local));
    EXPECT_EQ(st.size, sizeof(xc_store_t));
    EXPECT_TRUE(st.set && st.get && st.wait && st.ctx);
    EXPECT_EQ(local.ss_family, AF_INET);
    EXPECT_EQ(((struct sockaddr_in *)&local)->sin_addr.s_addr,
              htonl(INADDR_LOOPBACK));
    EXPECT_TRUE(((struct sockaddr_in *)&local)->sin_port != 0);

    /* value sizes 0, 1, 64 KiB and the 1 MiB maximum */
    size_t sizes[] = {0, 1, 64 * 1024, 1u << 20};
    unsigned char *val = malloc(1u << 20), *got = malloc((1u << 20) + 16);
    EXPECT_TRUE(val && got);
    for (size_t i = 0; i < (1u << 20); ++i) val[i] = (unsigned char)(i * 131 + 7);
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; ++s) {
        char key[32];
        snprintf(key, sizeof key, "size/%zu", sizes[s]);
        size_t len = 12345;
        int rc = st.set(st.ctx, key, val, sizes[s]);
        if (rc == 0) rc = st.get(st.ctx, key, got, (1u << 20) + 16, &len, 5000);
        if (rc != 0) {
            free(val);
            free(got);
            FAIL("size %zu: %s", sizes[s], xc_last_error());
        }
        if (len != sizes[s] || memcmp(val, got, sizes[s]) != 0) {
            free(val);
            free(got);
            FAIL("size %zu: got %zu bytes or different content", sizes[s], len);
        }
    }
    /* too big a value, too long a key, empty key */
    int rbig = st.set(st.ctx, "toobig", val, (1u << 20) + 1);
    free(val);
    free(got);
    EXPECT_EQ(rbig, XC_ERR_INVALID);
    EXPECT_CONTAINS(xc_last_error(), "toobig");
    char longkey[600];
    memset(longkey, 'k', sizeof longkey);
    longkey[512] = '\0';
    EXPECT_OK(st.set(st.ctx, longkey, "x", 1)); /* 512 bytes: allowed */
    longkey[512] = 'k';
    longkey[513] = '\0';
    EXPECT_RC(st.set(st.ctx, longkey, "x", 1), XC_ERR_INVALID);
    EXPECT_RC(st.set(st.ctx, "", "x", 1), XC_ERR_INVALID);

    /* overwrite; short buffer gets a prefix and the full length */
    char buf[64];
    EXPECT_OK(st.set(st.ctx, "k", "first", 5));
    EXPECT_OK(st.set(st.ctx, "k", "second value", 12));
    size_t len = 0;
    EXPECT_OK(st.get(st.ctx, "k", buf, 6, &len, 1000));
    EXPECT_EQ(len, 12);
    EXPECT_TRUE(memcmp(buf, "second", 6) == 0);
    EXPECT_OK(st.get(st.ctx, "k", NULL, 0, &len, 1000));
    EXPECT_EQ(len, 12);

    /* ADD: missing = 0, stored as decimal text; non-integer refused */
    int64_t v = 0;
    EXPECT_OK(xc__tcp_store_add(&st, "ctr", 5, &v));
    EXPECT_EQ(v, 5);
    EXPECT_OK(xc__tcp_store_add(&st, "ctr", -7, &v));
    EXPECT_EQ(v, -2);
    EXPECT_OK(get_str(&st, "ctr", buf, sizeof buf, 1000));
    EXPECT_STREQ(buf, "-2");
    EXPECT_RC(xc__tcp_store_add(&st, "k", 1, &v), XC_ERR_INVALID);
    EXPECT_CONTAINS(xc_last_error(), "'k'");
    EXPECT_OK(get_str(&st, "k", buf, sizeof buf, 1000)); /* still connected */
    EXPECT_STREQ(buf, "second value");

    /* wait for several keys set later by another client */
    struct later_set ls = {port, 150, {"w/a", "w/b", "w/c"}, 3};
    pthread_t th;
    EXPECT_EQ(pthread_create(&th, NULL, later_set_thread, &ls), 0);
    const char *keys[] = {"w/a", "w/b", "w/c"};
    uint64_t t0 = xc__now_ns();
    int wrc = st.wait(st.ctx, keys, 3, 10000);
    pthread_join(th, NULL);
    EXPECT_OK(wrc);
    EXPECT_TRUE(ms_since(t0) >= 100);
    const char *missing[] = {"w/a", "w/never"};
    EXPECT_RC(st.wait(st.ctx, missing, 2, 200), XC_ERR_TIMEOUT);
    EXPECT_CONTAINS(xc_last_error(), "w/never");

    xc__tcp_store_close(&st);
    xc__tcp_store_close(&st); /* closed twice: no-op */
    xc__tcp_store_close(NULL);

    /* names and IPv6 */
    EXPECT_OK(xc__tcp_store_open("localhost", port, 5000, NULL, &st, NULL));
    EXPECT_OK(get_str(&st, "ctr", buf, sizeof buf, 1000));
    EXPECT_STREQ(buf, "-2");
    xc__tcp_store_close(&st);
    int s6 = socket(AF_INET6, SOCK_STREAM, 0);
    if (s6 >= 0) {
        struct sockaddr_in6 a6 = {.sin6_family = AF_INET6,
                                  .sin6_addr = IN6ADDR_LOOPBACK_INIT};
        int v6 = bind(s6, (struct sockaddr *)&a6, sizeof a6) == 0;
        close(s6);
        if (v6) {
            EXPECT_OK(xc__tcp_store_open("::1", port, 5000, NULL, &st, &local));
            EXPECT_EQ(local.ss_family, AF_INET6);
            EXPECT_OK(get_str(&st, "ctr", buf, sizeof buf, 1000));
            EXPECT_STREQ(buf, "-2");
            xc__tcp_store_close(&st);
        } else {
            printf("note: no IPv6 loopback, IPv6 client check skipped\n");
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* Concurrency                                                         */
/* ------------------------------------------------------------------ */

#define NTHREADS 8
#define NADDS 1000

struct worker {
    int port;
    int id;
    int64_t last;
};

static int worker_run(struct worker *w)
{
    xc_store_t st;
    if (open_client(w->port, &st)) return 1;
    int64_t prev = 0;
    for (int i = 0; i < NADDS; ++i) {
        int64_t v;
        if (xc__tcp_store_add(&st, "conc/ctr", 1, &v) != 0) {
            xc__tcp_store_close(&st);
            FAIL("thread %d add %d: %s", w->id, i, xc_last_error());
        }
        if (v <= prev) {
            xc__tcp_store_close(&st);
            FAIL("thread %d: add returned %lld after %lld", w->id,
                 (long long)v, (long long)prev);
        }
        prev = v;
        if (i % 50 == 0) {
            char key[32], val[32], got[32];
            snprintf(key, sizeof key, "conc/%d", w->id);
            int n = snprintf(val, sizeof val, "%d-%d", w->id, i);
            size_t len = 0;
            int rc = st.set(st.ctx, key, val, (size_t)n);
            if (rc == 0) rc = st.get(st.ctx, key, got, sizeof got, &len, 5000);
            if (rc != 0 || len != (size_t)n || memcmp(got, val, len) != 0) {
                xc__tcp_store_close(&st);
                FAIL("thread %d set/get of %s: rc %d len %zu: %s", w->id, key,
                     rc, len, xc_last_error());
            }
        }
    }
    w->last = prev;
    xc__tcp_store_close(&st);
    return 0;
}

static void *worker_thread(void *p)
{
    worker_run(p);
    return NULL;
}

static int test_tcp_concurrent(int port)
{
    pthread_t th[NTHREADS];
    struct worker w[NTHREADS];
    for (int i = 0; i < NTHREADS; ++i) {
        w[i] = (struct worker){port, i, 0};
        EXPECT_EQ(pthread_create(&th[i], NULL, worker_thread, &w[i]), 0);
    }
    int64_t maxlast = 0;
    for (int i = 0; i < NTHREADS; ++i) {
        pthread_join(th[i], NULL);
        if (w[i].last > maxlast) maxlast = w[i].last;
    }
    EXPECT_EQ(maxlast, NTHREADS * NADDS);
    xc_store_t st;
    if (open_client(port, &st)) return 1;
    char buf[32];
    int rc = get_str(&st, "conc/ctr", buf, sizeof buf, 1000);
    xc__tcp_store_close(&st);
    if (rc) return 1;
    EXPECT_STREQ(buf, "8000");
    return 0;
}

/* ------------------------------------------------------------------ */
/* Parked GET, timeouts                                                */
/* ------------------------------------------------------------------ */

struct getter {
    int port;
    const char *key;
    int timeout_ms;
    int rc;
    char val[64];
    size_t len;
    long long elapsed_ms;
    char err[XC__ERRMSG_LEN];
    xc_store_t *st; /* if set, use this client instead of opening one */
};

static void *getter_thread(void *p)
{
    struct getter *g = p;
    xc_store_t own, *st = g->st;
    if (!st) {
        if (xc__tcp_store_open("127.0.0.1", g->port, 5000, NULL, &own, NULL) != 0) {
            g->rc = -100;
            snprintf(g->err, sizeof g->err, "%s", xc_last_error());
            return NULL;
        }
        st = &own;
    }
    uint64_t t0 = xc__now_ns();
    g->rc = st->get(st->ctx, g->key, g->val, sizeof g->val, &g->len,
                    g->timeout_ms);
    g->elapsed_ms = ms_since(t0);
    snprintf(g->err, sizeof g->err, "%s", xc_last_error());
    if (!g->st) xc__tcp_store_close(&own);
    return NULL;
}

static int test_tcp_parked_and_timeout(int port)
{
    /* a GET that blocks until another client SETs 200 ms later */
    struct getter g = {.port = port, .key = "late", .timeout_ms = -1};
    pthread_t th;
    EXPECT_EQ(pthread_create(&th, NULL, getter_thread, &g), 0);
    sleep_ms(200);
    xc_store_t st;
    if (open_client(port, &st)) return 1;
    int src = st.set(st.ctx, "late", "here", 4);
    pthread_join(th, NULL);
    EXPECT_OK(src);
    if (g.rc != 0) FAIL("parked get: %d: %s", g.rc, g.err);
    EXPECT_EQ(g.len, 4);
    EXPECT_TRUE(memcmp(g.val, "here", 4) == 0);
    EXPECT_TRUE(g.elapsed_ms >= 100);

    /* a GET of a key nobody sets times out in about its timeout */
    char buf[32];
    size_t len;
    uint64_t t0 = xc__now_ns();
    EXPECT_RC(st.get(st.ctx, "never", buf, sizeof buf, &len, 300),
              XC_ERR_TIMEOUT);
    long long el = ms_since(t0);
    if (el < 250 || el > 3000) FAIL("get timeout of 300 ms took %lld ms", el);
    EXPECT_CONTAINS(xc_last_error(), "'never'");
    EXPECT_CONTAINS(xc_last_error(), "300 ms");
    /* the client recovers (it reconnects) */
    EXPECT_OK(st.set(st.ctx, "after-timeout", "ok", 2));
    EXPECT_OK(get_str(&st, "after-timeout", buf, sizeof buf, 1000));
    EXPECT_STREQ(buf, "ok");
    /* timeout 0 on a present key succeeds, on a missing one fails at once */
    EXPECT_OK(get_str(&st, "late", buf, sizeof buf, 0));
    t0 = xc__now_ns();
    EXPECT_RC(st.get(st.ctx, "never", buf, sizeof buf, &len, 0),
              XC_ERR_TIMEOUT);
    EXPECT_TRUE(ms_since(t0) < 1000);
    xc__tcp_store_close(&st);
    return 0;
}

/* ------------------------------------------------------------------ */
/* Raw wire: strangers, partial and pipelined requests                 */
/* ------------------------------------------------------------------ */

static int raw_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int raw_send(int fd, const void *p, size_t n)
{
    return send(fd, p, n, MSG_NOSIGNAL) == (ssize_t)n ? 0 : -1;
}

/* Read exactly n bytes within ms; 0 on success. */
static int raw_recv(int fd, void *p, size_t n, int ms)
{
    uint64_t dl = xc__deadline_ns(ms);
    size_t got = 0;
    while (got < n) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (poll(&pf, 1, xc__poll_ms_left(dl)) <= 0) return -1;
        ssize_t r = recv(fd, (char *)p + got, n - got, 0);
        if (r <= 0) return -1;
        got += (size_t)r;
    }
    return 0;
}

/* 1 if the server closes fd within ms (any data before EOF is ignored). */
static int closed_within(int fd, int ms)
{
    uint64_t dl = xc__deadline_ns(ms);
    char junk[256];
    for (;;) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (poll(&pf, 1, xc__poll_ms_left(dl)) <= 0) return 0;
        errno = 0; /* left 0 by an orderly close, ECONNRESET by a reset */
        ssize_t r = recv(fd, junk, sizeof junk, 0);
        if (r == 0 || (r < 0 && errno == ECONNRESET)) return 1;
        if (r < 0) return 0;
    }
}

static size_t put_hello(unsigned char *p)
{
    memcpy(p, "XCST\x00\x01\x00\x00", 8);
    return 8;
}

static size_t put_req(unsigned char *p, int op, const char *key,
                      const void *val, uint32_t vlen)
{
    size_t k = strlen(key);
    p[0] = (unsigned char)op;
    p[1] = 0;
    p[2] = (unsigned char)(k >> 8);
    p[3] = (unsigned char)k;
    p[4] = (unsigned char)(vlen >> 24);
    p[5] = (unsigned char)(vlen >> 16);
    p[6] = (unsigned char)(vlen >> 8);
    p[7] = (unsigned char)vlen;
    memcpy(p + 8, key, k);
    if (vlen) memcpy(p + 8 + k, val, vlen);
    return 8 + k + vlen;
}

static int test_tcp_strangers(int port)
{
    xc_store_t st;
    if (open_client(port, &st)) return 1;
    EXPECT_OK(st.set(st.ctx, "precious", "gold", 4));

    /* a silent connection must not block anyone */
    int silent = raw_connect(port);
    EXPECT_TRUE(silent >= 0);

    const char *garbage = "\x01\x02garbage that is not a hello at all";
    const char *http = "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n";
    const char *strangers[] = {garbage, http, "Y", "XCSX"};
    for (size_t i = 0; i < 4; ++i) {
        int fd = raw_connect(port);
        EXPECT_TRUE(fd >= 0);
        raw_send(fd, strangers[i], strlen(strangers[i]));
        int closed = closed_within(fd, 3000);
        close(fd);
        if (!closed) FAIL("stranger %zu ('%.8s') not dropped", i, strangers[i]);
    }

    /* correct hello, then malformed requests: each is dropped */
    unsigned char req[64];
    static const unsigned char bad[][8] = {
        {2, 0, 0x02, 0x01, 0, 0, 0, 4},      /* key 513 bytes     */
        {1, 0, 0, 1, 0, 0x10, 0, 1},         /* value 1 MiB + 1   */
        {9, 0, 0, 1, 0, 0, 0, 0},            /* unknown op        */
        {2, 0, 0, 0, 0, 0, 0, 4},            /* empty key         */
        {2, 7, 0, 1, 0, 0, 0, 4},            /* reserved byte set */
        {2, 0, 0, 1, 0, 0, 0, 0},            /* GET without timeout */
        {3, 0, 0, 1, 0, 0, 0, 4},            /* ADD without 8 B   */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
        int fd = raw_connect(port);
        EXPECT_TRUE(fd >= 0);
        size_t n = put_hello(req);
        memcpy(req + n, bad[i], 8);
        raw_send(fd, req, n + 8);
        int closed = closed_within(fd, 3000);
        close(fd);
        if (!closed) FAIL("malformed request %zu not dropped", i);
    }

    /* byte-by-byte hello and SET (partial reads on the server) */
    int fd = raw_connect(port);
    EXPECT_TRUE(fd >= 0);
    size_t n = put_hello(req);
    n += put_req(req + n, 1, "slow", "drip", 4);
    for (size_t i = 0; i < n; ++i) {
        raw_send(fd, req + i, 1);
        sleep_ms(2);
    }
    unsigned char ans[32];
    EXPECT_OK(raw_recv(fd, ans, 8 + 8, 3000));
    EXPECT_TRUE(memcmp(ans, "XCST\x00\x01\x00\x00", 8) == 0);
    EXPECT_EQ(ans[8], 0);         /* status OK */
    EXPECT_EQ(ans[12] | ans[15], 0); /* empty body */
    close(fd);
    char buf[32];
    EXPECT_OK(get_str(&st, "slow", buf, sizeof buf, 1000));
    EXPECT_STREQ(buf, "drip");

    /* pipelined hello + GET(missing) + SET(other) in one send: the SET waits
     * behind the parked GET, and the answers come back in order */
    fd = raw_connect(port);
    EXPECT_TRUE(fd >= 0);
    n = put_hello(req);
    n += put_req(req + n, 2, "pipe/k", "\xff\xff\xff\xff", 4); /* forever */
    n += put_req(req + n, 1, "pipe/other", "o", 1);
    EXPECT_OK(raw_send(fd, req, n));
    EXPECT_OK(raw_recv(fd, ans, 8, 3000)); /* hello answer */
    size_t len;
    EXPECT_RC(st.get(st.ctx, "pipe/other", buf, sizeof buf, &len, 200),
              XC_ERR_TIMEOUT);
    EXPECT_OK(st.set(st.ctx, "pipe/k", "v", 1));
    EXPECT_OK(raw_recv(fd, ans, 9 + 8, 3000));
    EXPECT_EQ(ans[0], 0);
    EXPECT_EQ(ans[7], 1);
    EXPECT_EQ(ans[8], 'v');
    EXPECT_EQ(ans[9], 0); /* SET answer */
    EXPECT_EQ(ans[16], 0);
    close(fd);
    EXPECT_OK(get_str(&st, "pipe/other", buf, sizeof buf, 1000));
    EXPECT_STREQ(buf, "o");

    /* wrong protocol version: answered, then closed */
    fd = raw_connect(port);
    EXPECT_TRUE(fd >= 0);
    EXPECT_OK(raw_send(fd, "XCST\x00\x63\x00\x00", 8));
    EXPECT_OK(raw_recv(fd, ans, 8, 3000));
    EXPECT_EQ(ans[6] << 8 | ans[7], 1);
    EXPECT_TRUE(closed_within(fd, 3000));
    close(fd);

    /* the legit client and the store are unharmed */
    EXPECT_OK(get_str(&st, "precious", buf, sizeof buf, 1000));
    EXPECT_STREQ(buf, "gold");
    EXPECT_OK(st.set(st.ctx, "still", "works", 5));
    EXPECT_OK(get_str(&st, "still", buf, sizeof buf, 1000));
    EXPECT_STREQ(buf, "works");
    close(silent);
    xc__tcp_store_close(&st);
    return 0;
}

/* A port that is not a store: answers like a web server. */
struct fake_http {
    int lfd;
};

static void *fake_http_thread(void *p)
{
    struct fake_http *f = p;
    int fd = accept(f->lfd, NULL, NULL);
    if (fd < 0) return NULL;
    char junk[64];
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    if (poll(&pf, 1, 3000) > 0) {
        ssize_t r = recv(fd, junk, sizeof junk, 0);
        (void)r;
    }
    const char *ans = "HTTP/1.0 400 Bad Request\r\n\r\n";
    ssize_t w = send(fd, ans, strlen(ans), MSG_NOSIGNAL);
    (void)w;
    close(fd);
    return NULL;
}

static int test_tcp_wrong_service(void)
{
    struct fake_http f;
    f.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    EXPECT_TRUE(f.lfd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    EXPECT_EQ(bind(f.lfd, (struct sockaddr *)&a, sizeof a), 0);
    EXPECT_EQ(listen(f.lfd, 4), 0);
    EXPECT_EQ(getsockname(f.lfd, (struct sockaddr *)&a, &al), 0);
    pthread_t th;
    EXPECT_EQ(pthread_create(&th, NULL, fake_http_thread, &f), 0);
    xc_store_t st;
    uint64_t t0 = xc__now_ns();
    int rc = xc__tcp_store_open("127.0.0.1", ntohs(a.sin_port), 8000, NULL, &st,
                                NULL);
    long long el = ms_since(t0);
    pthread_join(th, NULL);
    close(f.lfd);
    EXPECT_EQ(rc, XC_ERR_PROTOCOL);
    EXPECT_CONTAINS(xc_last_error(), "not an xcoll store");
    if (el > 4000) FAIL("wrong service detected only after %lld ms", el);
    EXPECT_TRUE(st.ctx == NULL);
    return 0;
}

/* ------------------------------------------------------------------ */
/* Client before server, server stop, no server                         */
/* ------------------------------------------------------------------ */

struct early {
    int port;
    int rc;
    long long elapsed_ms;
    char err[XC__ERRMSG_LEN];
    xc_store_t st;
};

static void *early_thread(void *p)
{
    struct early *e = p;
    uint64_t t0 = xc__now_ns();
    e->rc = xc__tcp_store_open("127.0.0.1", e->port, 10000, NULL, &e->st, NULL);
    e->elapsed_ms = ms_since(t0);
    snprintf(e->err, sizeof e->err, "%s", xc_last_error());
    return NULL;
}

/* A released server is taken back by a start on the same host, port and
 * token (its entries kept: clients of the destroyed communicator may still
 * read them); a start on another host stops it and binds anew. */
static int test_release_take_back(void)
{
    xc__store_server_t *srv, *again;
    int port = 0, port2 = 0;
    EXPECT_OK(xc__store_server_start("127.0.0.1", 0, NULL, &srv, &port));
    xc_store_t st;
    EXPECT_OK(xc__tcp_store_open("127.0.0.1", port, 2000, NULL, &st, NULL));
    EXPECT_OK(st.set(st.ctx, "kept", "v", 1));
    xc__store_server_release(srv); /* a client is connected: it serves on */
    EXPECT_OK(xc__store_server_start("127.0.0.1", port, NULL, &again, &port2));
    EXPECT_TRUE(again == srv);
    EXPECT_EQ(port2, port);
    char buf[16];
    EXPECT_OK(get_str(&st, "kept", buf, sizeof buf, 1000));
    EXPECT_TRUE(strcmp(buf, "v") == 0);
    xc__store_server_release(again);
    /* another listen host on that port: the released one is stopped */
    int rc = xc__store_server_start("127.0.0.2", port, NULL, &srv, &port2);
    xc__tcp_store_close(&st);
    EXPECT_OK(rc);
    EXPECT_EQ(port2, port);
    xc_store_t st2;
    EXPECT_OK(xc__tcp_store_open("127.0.0.2", port, 2000, NULL, &st2, NULL));
    size_t len = 0;
    EXPECT_RC(st2.get(st2.ctx, "kept", buf, sizeof buf, &len, 200), XC_ERR_TIMEOUT);
    xc__tcp_store_close(&st2);
    xc__store_server_stop(srv);
    return 0;
}

static int test_tcp_client_first(void)
{
    /* find a free port, then release it */
    xc__store_server_t *srv;
    int port = 0;
    EXPECT_OK(xc__store_server_start("127.0.0.1", 0, NULL, &srv, &port));
    xc__store_server_stop(srv);

    /* nobody there: open fails after about its timeout, naming host:port */
    char where[32];
    snprintf(where, sizeof where, "127.0.0.1:%d", port);
    xc_store_t st;
    uint64_t t0 = xc__now_ns();
    EXPECT_RC(xc__tcp_store_open("127.0.0.1", port, 300, NULL, &st, NULL),
              XC_ERR_TIMEOUT);
    long long el = ms_since(t0);
    if (el < 250 || el > 3000) FAIL("open timeout of 300 ms took %lld ms", el);
    EXPECT_CONTAINS(xc_last_error(), where);

    struct early e = {.port = port};
    pthread_t th;
    EXPECT_EQ(pthread_create(&th, NULL, early_thread, &e), 0);
    sleep_ms(300);
    int rc = -1;
    for (int i = 0; i < 50 && rc != 0; ++i) { /* TIME_WAIT is fine, but retry */
        rc = xc__store_server_start("127.0.0.1", port, NULL, &srv, NULL);
        if (rc != 0) sleep_ms(20);
    }
    pthread_join(th, NULL);
    if (rc != 0) {
        if (e.rc == 0) xc__tcp_store_close(&e.st);
        FAIL("restart server on port %d: %s", port, xc_last_error());
    }
    if (e.rc != 0) {
        xc__store_server_stop(srv);
        FAIL("client started first: %s", e.err);
    }
    char buf[16];
    int ok = e.elapsed_ms >= 250 && e.st.set(e.st.ctx, "k", "v", 1) == 0 &&
             get_str(&e.st, "k", buf, sizeof buf, 1000) == 0 &&
             strcmp(buf, "v") == 0;
    long long early_ms = e.elapsed_ms;
    xc__tcp_store_close(&e.st);

    /* server stop while a client is parked in GET: error, no hang */
    struct getter g = {.port = port, .key = "never", .timeout_ms = 30000};
    EXPECT_EQ(pthread_create(&th, NULL, getter_thread, &g), 0);
    xc_store_t idle; /* short timeout: its later reconnect fails fast */
    int orc = xc__tcp_store_open("127.0.0.1", port, 300, NULL, &idle, NULL);
    sleep_ms(200);
    t0 = xc__now_ns();
    xc__store_server_stop(srv);
    pthread_join(th, NULL);
    el = ms_since(t0);
    if (!ok) {
        if (orc == 0) xc__tcp_store_close(&idle);
        FAIL("client-first store unusable (opened after %lld ms): %s",
             early_ms, xc_last_error());
    }
    if (orc) return 1;
    if (g.rc == 0 || el > 3000) {
        xc__tcp_store_close(&idle);
        FAIL("parked get at server stop: rc %d after %lld ms", g.rc, el);
    }
    EXPECT_CONTAINS(g.err, where);

    /* an idle client whose server died: a large set errors, no SIGPIPE */
    unsigned char *big = calloc(1, 1u << 20);
    int brc = big ? idle.set(idle.ctx, "big", big, 1u << 20) : -1;
    int brc2 = big ? idle.set(idle.ctx, "big", big, 1u << 20) : -1;
    free(big);
    char err[XC__ERRMSG_LEN];
    snprintf(err, sizeof err, "%s", xc_last_error());
    xc__tcp_store_close(&idle);
    if (brc == 0 || brc2 == 0) FAIL("set to a dead server succeeded");
    EXPECT_CONTAINS(err, where);
    return 0;
}

/* ------------------------------------------------------------------ */
/* File store                                                          */
/* ------------------------------------------------------------------ */

static int count_entries(const char *dir, char *first, size_t cap)
{
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        if (n == 0 && first) snprintf(first, cap, "%s", de->d_name);
        ++n;
    }
    closedir(d);
    return n;
}

static void remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *de;
    char path[4096];
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        struct stat sb;
        if (lstat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) remove_tree(path);
        else unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

struct file_later {
    xc_store_t *st;
    int delay_ms;
};

static void *file_later_thread(void *p)
{
    struct file_later *f = p;
    sleep_ms(f->delay_ms);
    f->st->set(f->st->ctx, "f/late", "late!", 5);
    f->st->set(f->st->ctx, "f/w2", "", 0);
    return NULL;
}

static int file_store_checks(const char *root)
{
    char dir[4096], buf[64];
    snprintf(dir, sizeof dir, "%s/sub/store/", root); /* trailing '/' ok */
    xc_store_t st;
    EXPECT_OK(xc__file_store_open(dir, &st));
    EXPECT_EQ(st.size, sizeof(xc_store_t));
    EXPECT_TRUE(st.set && st.get && st.wait && st.ctx);

    /* sizes 0, 1, 64 KiB; overwrite */
    size_t sizes[] = {0, 1, 64 * 1024};
    static unsigned char val[64 * 1024], got[64 * 1024 + 8];
    for (size_t i = 0; i < sizeof val; ++i) val[i] = (unsigned char)(i * 7 + 1);
    for (size_t s = 0; s < 3; ++s) {
        char key[32];
        snprintf(key, sizeof key, "size/%zu", sizes[s]);
        size_t len = 999999;
        EXPECT_OK(st.set(st.ctx, key, val, sizes[s]));
        EXPECT_OK(st.get(st.ctx, key, got, sizeof got, &len, 1000));
        EXPECT_EQ(len, sizes[s]);
        EXPECT_TRUE(memcmp(got, val, sizes[s]) == 0);
    }
    size_t len;
    EXPECT_OK(st.get(st.ctx, "size/65536", got, 10, &len, 1000));
    EXPECT_EQ(len, 65536);
    EXPECT_TRUE(memcmp(got, val, 10) == 0);
    EXPECT_OK(st.set(st.ctx, "ow", "one", 3));
    EXPECT_OK(st.set(st.ctx, "ow", "three", 5));
    EXPECT_OK(get_str(&st, "ow", buf, sizeof buf, 1000));
    EXPECT_STREQ(buf, "three");

    /* timeout */
    uint64_t t0 = xc__now_ns();
    EXPECT_RC(st.get(st.ctx, "f/never", buf, sizeof buf, &len, 200),
              XC_ERR_TIMEOUT);
    long long el = ms_since(t0);
    if (el < 150 || el > 3000) FAIL("file get timeout 200 ms took %lld ms", el);
    EXPECT_CONTAINS(xc_last_error(), "f/never");
    EXPECT_CONTAINS(xc_last_error(), "200 ms");

    /* a get and a wait that block until another thread sets the keys */
    struct file_later fl = {&st, 150};
    pthread_t th;
    EXPECT_EQ(pthread_create(&th, NULL, file_later_thread, &fl), 0);
    t0 = xc__now_ns();
    int grc = get_str(&st, "f/late", buf, sizeof buf, 10000);
    const char *wk[] = {"ow", "f/late", "f/w2"};
    int wrc = st.wait(st.ctx, wk, 3, 10000);
    pthread_join(th, NULL);
    if (grc) return 1;
    EXPECT_OK(wrc);
    EXPECT_STREQ(buf, "late!");
    EXPECT_TRUE(ms_since(t0) >= 100);
    const char *wmiss[] = {"ow", "f/nope"};
    EXPECT_RC(st.wait(st.ctx, wmiss, 2, 100), XC_ERR_TIMEOUT);
    EXPECT_CONTAINS(xc_last_error(), "f/nope");

    /* hostile and colliding keys stay inside the directory, distinct */
    const char *keys[] = {"../escape", "..",     ".",        "a/b",
                          "a%2Fb",     "a_2Fb",  ".hidden",  "/abs/path",
                          "xc/rank/0", "sp ace", "uni\xc3\xa9"};
    size_t nk = sizeof keys / sizeof keys[0];
    for (size_t i = 0; i < nk; ++i) {
        char v[16];
        int n = snprintf(v, sizeof v, "v%zu", i);
        EXPECT_OK(st.set(st.ctx, keys[i], v, (size_t)n));
    }
    for (size_t i = 0; i < nk; ++i) {
        char v[16];
        snprintf(v, sizeof v, "v%zu", i);
        EXPECT_OK(get_str(&st, keys[i], buf, sizeof buf, 1000));
        EXPECT_STREQ(buf, v);
    }
    char first[256];
    EXPECT_EQ(count_entries(root, first, sizeof first), 1);
    EXPECT_STREQ(first, "sub");
    char subdir[4200];
    snprintf(subdir, sizeof subdir, "%s/sub", root);
    EXPECT_EQ(count_entries(subdir, first, sizeof first), 1);
    EXPECT_STREQ(first, "store");
    /* one file per key, no leftover temporary ('.'-prefixed) file */
    DIR *d = opendir(dir);
    EXPECT_TRUE(d != NULL);
    int files = 0, dotfiles = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        ++files;
        if (de->d_name[0] == '.') ++dotfiles;
    }
    closedir(d);
    EXPECT_EQ(dotfiles, 0);
    /* 3 sizes + ow + f/late + f/w2 + hostile keys */
    EXPECT_EQ(files, 3 + 1 + 2 + (int)nk);

    /* refused keys */
    EXPECT_RC(st.set(st.ctx, "", "x", 1), XC_ERR_INVALID);
    char huge[300];
    memset(huge, '/', sizeof huge - 1);
    huge[sizeof huge - 1] = '\0';
    EXPECT_RC(st.set(st.ctx, huge, "x", 1), XC_ERR_INVALID); /* name too long */

    int64_t v;
    EXPECT_RC(xc__tcp_store_add(&st, "ctr", 1, &v), XC_ERR_UNSUPPORTED);
    xc__tcp_store_close(&st); /* not a TCP store: ignored */
    EXPECT_TRUE(st.ctx != NULL);
    xc__file_store_close(&st);
    EXPECT_TRUE(st.ctx == NULL);
    xc__file_store_close(&st);
    xc__file_store_close(NULL);

    /* a directory that is a file */
    char fpath[4200];
    snprintf(fpath, sizeof fpath, "%s/sub/store/ow", root);
    EXPECT_RC(xc__file_store_open(fpath, &st), XC_ERR_INVALID);
    return 0;
}

static int test_file_store(void)
{
    char root[] = "/tmp/xc_test_store.XXXXXX";
    if (!mkdtemp(root)) FAIL("mkdtemp: %s", strerror(errno));
    int rc = file_store_checks(root);
    remove_tree(root);
    struct stat sb;
    EXPECT_TRUE(stat(root, &sb) != 0);
    return rc;
}

/* ------------------------------------------------------------------ */

/* A stranger opening many connections that say nothing: the server keeps
 * at most a quarter of the descriptor limit of them in their preamble
 * (dropping the oldest), so that its process keeps descriptors of its own,
 * and serves a client at once. */
static int test_tcp_preamble_flood(void)
{
    struct rlimit old, rl;
    if (getrlimit(RLIMIT_NOFILE, &old) != 0 || old.rlim_max < 512) {
        printf("tcp preamble flood: skipped (descriptor limit below 512)\n");
        return 0;
    }
    rl = old;
    rl.rlim_cur = 512; /* the cap: 128 */
    EXPECT_TRUE(setrlimit(RLIMIT_NOFILE, &rl) == 0);
    xc__store_server_t *srv = NULL;
    int port = 0;
    EXPECT_OK(xc__store_server_start("127.0.0.1", 0, NULL, &srv, &port));
    enum { FLOOD = 200, CAP = 128 };
    int fds[FLOOD];
    int opened = 0;
    for (int i = 0; i < FLOOD; i++) {
        fds[i] = raw_connect(port);
        if (fds[i] >= 0) opened++;
    }
    EXPECT_TRUE(opened == FLOOD);
    /* a client is served at once, the flood still connected */
    xc_store_t st;
    uint64_t t0 = xc__now_ns();
    if (open_client(port, &st) == 0) {
        EXPECT_OK(st.set(st.ctx, "after-flood", "ok", 2));
        char buf[8];
        size_t n = 0;
        EXPECT_OK(st.get(st.ctx, "after-flood", buf, sizeof buf, &n, 2000));
        EXPECT_TRUE(n == 2 && !memcmp(buf, "ok", 2));
        xc__tcp_store_close(&st);
    }
    EXPECT_TRUE(ms_since(t0) < 2000);
    /* the server reset the oldest past the cap, and no more: the flood's
     * first FLOOD - CAP, and one more when the client's connection came
     * (in its preamble until its hello).  Reset, not closed: a client
     * reads an orderly close before the hello's answer as "not an xcoll
     * store" and gives up, a reset as a reason to connect again. */
    int closed = 0, drop = FLOOD - CAP + 1;
    for (int i = 0; i < FLOOD; i++) {
        int c = fds[i] >= 0 && closed_within(fds[i], i < drop ? 2000 : 0);
        if (c != (i < drop)) FAIL("flood connection %d %s", i, c ? "dropped" : "kept");
        if (c && errno != ECONNRESET) FAIL("flood connection %d closed, not reset", i);
        closed += c;
    }
    EXPECT_TRUE(closed == drop);
    for (int i = 0; i < FLOOD; i++)
        if (fds[i] >= 0) close(fds[i]);
    xc__store_server_stop(srv);
    setrlimit(RLIMIT_NOFILE, &old);
    return 0;
}

int main(void)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    uint64_t t0 = xc__now_ns();
    test_parse_hostport();
    printf("parse_hostport: done (%lld ms)\n", ms_since(t0));

    xc__store_server_t *srv = NULL;
    int port = 0;
    if (xc__store_server_start(NULL, 0, NULL, &srv, &port) != XC_OK) {
        fprintf(stderr, "FAIL: server start: %s\n", xc_last_error());
        return 1;
    }
    if (port <= 0 || port > 65535) {
        fprintf(stderr, "FAIL: bound port %d\n", port);
        return 1;
    }
    test_tcp_basic(port);
    printf("tcp basic: done (%lld ms)\n", ms_since(t0));
    test_tcp_concurrent(port);
    printf("tcp concurrent: done (%lld ms)\n", ms_since(t0));
    test_tcp_parked_and_timeout(port);
    printf("tcp parked/timeout: done (%lld ms)\n", ms_since(t0));
    test_tcp_strangers(port);
    printf("tcp strangers: done (%lld ms)\n", ms_since(t0));
    xc__store_server_stop(srv);
    xc__store_server_stop(NULL);

    test_tcp_preamble_flood();
    printf("tcp preamble flood: done (%lld ms)\n", ms_since(t0));
    test_tcp_wrong_service();
    printf("tcp wrong service: done (%lld ms)\n", ms_since(t0));
    test_tcp_client_first();
    test_release_take_back();
    printf("tcp client first / server stop: done (%lld ms)\n", ms_since(t0));
    test_file_store();
    printf("file store: done (%lld ms)\n", ms_since(t0));

    int f = failures;
    if (f) {
        fprintf(stderr, "test_store: %d check(s) failed\n", f);
        return 1;
    }
    printf("test_store: all checks passed\n");
    return 0;
}
