/*
 * store_tcp.c -- the TCP rendezvous store client, presented as an
 * xc_store_t.  Wire protocol: docs/rendezvous.md; its constants and framing
 * live in store_proto.h, shared with the server (store_server.c).
 *
 * Invariants.
 *  - One blocking, close-on-exec socket per client.  Every send and receive
 *    is bounded by a per-call deadline through poll(), and every send uses
 *    MSG_NOSIGNAL: a dead server yields an error, never SIGPIPE or a hang.
 *  - GET and WAIT carry their timeout: the server answers TIMEOUT when it
 *    passes, and the client gives up on its own GRACE_MS later (a hung or
 *    unreachable server).
 *  - The protocol is strictly one answer per request, in order.  When a call
 *    fails without its answer (I/O error, client-side deadline, garbled
 *    answer) the stream can no longer be trusted, so the socket is closed and
 *    the next call reconnects (within that call's own deadline).
 *  - A client (its ctx) may be used by one thread at a time; callers that
 *    share it between threads must serialise the calls.
 *  - Callbacks return 0 or a negative xc_result_t, with the detail left in
 *    the thread-local error (xc__err) naming the key, the store's host:port
 *    and, for timeouts, the timeout.
 */
#include "store.h"
#include "../transport/net.h"
#include "store_proto.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- client tuning */
#define BACKOFF_MIN_MS 10
#define BACKOFF_MAX_MS 200
#define CONNECT_ATTEMPT_MS 3000 /* cap of one connect() to one address */
#define IO_TIMEOUT_MIN_MS 1000  /* floor of the deadline of set/add */
#define GRACE_MS 1000 /* a GET's answer may lag its timeout this much */

struct tcp_client {
    int fd;            /* -1: not connected (reconnect on the next call) */
    int port;
    int io_timeout_ms; /* deadline of set/add/reconnect; -1 = none */
    char host[256];
    char where[300]; /* "host:port" for messages */
    xc__auth_conf_t auth; /* has_token: prove it on every connection */
};

/* One call: what to name in messages and its deadline. */
struct call {
    struct tcp_client *c;
    const char *op;  /* "get", "set", ... */
    const char *key;
    int timeout_ms;
    uint64_t deadline;
};

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void drop_connection(struct tcp_client *c)
{
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
}

/* Deadline-bounded I/O without a message (xc__move_all): the callers
 * name the cause. */
static xc_result_t send_all(int fd, const void *buf, size_t len, uint64_t deadline)
{
    return xc__move_all(fd, (void *)(uintptr_t)buf, len, deadline, 1);
}

static xc_result_t recv_all(int fd, void *buf, size_t len, uint64_t deadline)
{
    return xc__move_all(fd, buf, len, deadline, 0);
}

/* Read and throw away `len` bytes. */
static xc_result_t recv_discard(int fd, size_t len, uint64_t deadline)
{
    uint8_t junk[4096];
    while (len > 0) {
        size_t n = XC__MIN(len, sizeof junk);
        XC_CHECK(recv_all(fd, junk, n, deadline));
        len -= n;
    }
    return XC_OK;
}

/* Deadline of a call that waits `timeout_ms` on the server (< 0: never). */
static uint64_t wait_deadline(int timeout_ms)
{
    return timeout_ms < 0 ? UINT64_MAX
                          : xc__deadline_ns(timeout_ms) + GRACE_MS * 1000000ull;
}

static xc_result_t timed_out(const struct call *k)
{
    return xc__err(XC_ERR_TIMEOUT,
                   "store %s: %s of key '%s' timed out after %d ms (the key "
                   "was not set in time)",
                   k->c->where, k->op, k->key, k->timeout_ms);
}

/* Turn an I/O result of a call into its message; drops the connection. */
static xc_result_t call_fail(struct call *k, xc_result_t rc)
{
    struct tcp_client *c = k->c;
    int e = errno;
    drop_connection(c);
    switch (rc) {
    case XC_ERR_TIMEOUT:
        return xc__err(XC_ERR_TIMEOUT,
                       "store %s: %s of key '%s': no answer from the server "
                       "within %d ms",
                       c->where, k->op, k->key, k->timeout_ms);
    case XC_ERR_PEER_LOST:
        return xc__err(XC_ERR_PEER_LOST,
                       "store server %s closed the connection during %s of "
                       "key '%s'%s%s",
                       c->where, k->op, k->key, e ? ": " : "",
                       e ? strerror(e) : "");
    case XC_ERR_PROTOCOL:
        return xc__err(XC_ERR_PROTOCOL,
                       "store %s: malformed answer to %s of key '%s'",
                       c->where, k->op, k->key);
    default:
        return xc__err(rc, "store %s: %s of key '%s': %s", c->where, k->op,
                       k->key, strerror(e));
    }
}

/* ------------------------------------------------------------------ */
/* Connecting                                                          */
/* ------------------------------------------------------------------ */

/* One attempt on one address.  Returns the connected, greeted, blocking
 * socket, or -1 with *rc (XC_ERR_PROTOCOL: do not retry) and `why`. */
static int connect_one(const struct tcp_client *c, const struct addrinfo *ai,
                       uint64_t deadline, xc_result_t *rc, char *why,
                       size_t whycap)
{
    int fd = socket(ai->ai_family,
                    ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                    ai->ai_protocol);
    if (fd < 0) {
        *rc = XC_ERR_SYSTEM;
        snprintf(why, whycap, "socket: %s", strerror(errno));
        return -1;
    }
    uint64_t cap = xc__now_ns() + CONNECT_ATTEMPT_MS * 1000000ull;
    uint64_t dl = XC__MIN(deadline, cap);
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        if (errno != EINPROGRESS && errno != EINTR) {
            *rc = XC_ERR_SYSTEM;
            snprintf(why, whycap, "connect: %s", strerror(errno));
            goto fail;
        }
        xc_result_t w = xc__wait_fd(fd, POLLOUT, dl);
        if (w != XC_OK) {
            *rc = w;
            snprintf(why, whycap, "connect: %s",
                     w == XC_ERR_TIMEOUT ? "timed out" : strerror(errno));
            goto fail;
        }
        int err = 0;
        socklen_t el = sizeof err;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0) err = errno;
        if (err != 0) {
            *rc = XC_ERR_SYSTEM;
            snprintf(why, whycap, "connect: %s", strerror(err));
            goto fail;
        }
    }
    /* blocking from here on: every call bounds itself with poll() */
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        *rc = XC_ERR_SYSTEM;
        snprintf(why, whycap, "fcntl: %s", strerror(errno));
        goto fail;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);

    if (c->auth.has_token) {
        /* The server is in its poll loop: the handshake deadline bounds it. */
        xc__auth_ctx_t ctx = {.kind = XC__AUTH_STORE, .id = 0, .client = -1, .server = -1};
        char peer[340];
        snprintf(peer, sizeof peer, "the store at %s", c->where);
        uint64_t adl = XC__MIN(dl, xc__deadline_ns(c->auth.handshake_ms));
        xc_result_t a = xc__auth_connect(fd, &c->auth, &ctx, adl, peer);
        if (a != XC_OK) {
            *rc = a;
            snprintf(why, whycap, "%s", xc__tls_error());
            goto fail;
        }
    }

    uint8_t hello[STORE_HELLO_LEN];
    xc__store_put_hello(hello, 0); /* flags */
    xc_result_t r = send_all(fd, hello, sizeof hello, dl);
    if (r == XC_OK) r = recv_all(fd, hello, sizeof hello, dl);
    if (r == XC_ERR_PEER_LOST && errno == 0) {
        /* An orderly close without an answer: the service read the hello
         * and refused it.  An xcoll store answers every hello (a stopping
         * one resets instead, and the retry then finds its successor), so
         * this is someone else's service: no retry. */
        *rc = XC_ERR_PROTOCOL;
        snprintf(why, whycap, "the service there closed the connection without answering "
                 "the hello: not an xcoll store");
        goto fail;
    }
    if (r != XC_OK) {
        *rc = r;
        snprintf(why, whycap, "hello: %s",
                 r == XC_ERR_TIMEOUT    ? "no answer"
                 : r == XC_ERR_PEER_LOST ? "connection reset by the server"
                                         : strerror(errno));
        goto fail;
    }
    if (xc__store_get_u32(hello) != STORE_MAGIC) {
        *rc = XC_ERR_PROTOCOL;
        snprintf(why, whycap,
                 "the service there is not an xcoll store (bad hello)");
        goto fail;
    }
    if (xc__store_get_u16(hello + 6) == STORE_HELLO_AUTH_REQUIRED) {
        *rc = XC_ERR_PROTOCOL;
        snprintf(why, whycap,
                 "authentication failed: the store requires the job token and this "
                 "process has none (set XCOLL_TOKEN or XCOLL_TOKEN_FILE as the store's "
                 "launcher does)");
        goto fail;
    }
    if (xc__store_get_u16(hello + 6) != STORE_HELLO_OK) {
        *rc = XC_ERR_PROTOCOL;
        snprintf(why, whycap,
                 "the store speaks protocol version %u, this client %u",
                 (unsigned)xc__store_get_u16(hello + 4),
                 (unsigned)STORE_VERSION);
        goto fail;
    }
    return fd;
fail:
    close(fd);
    return -1;
}

/* Connect, retrying with backoff until `timeout_ms` (< 0: forever). */
static xc_result_t client_connect(struct tcp_client *c, int timeout_ms,
                                  struct sockaddr_storage *local)
{
    uint64_t deadline = xc__deadline_ns(timeout_ms);
    char why[640] = "not attempted";
    int backoff = BACKOFF_MIN_MS;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", c->port);
    for (;;) {
        struct addrinfo hints, *res = NULL;
        memset(&hints, 0, sizeof hints);
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        hints.ai_flags = AI_NUMERICSERV;
        int g = getaddrinfo(c->host, ps, &hints, &res);
        if (g != 0) {
            snprintf(why, sizeof why, "cannot resolve '%s': %s", c->host,
                     g == EAI_SYSTEM ? strerror(errno) : gai_strerror(g));
        } else {
            for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
                xc_result_t rc = XC_OK;
                int fd = connect_one(c, ai, deadline, &rc, why, sizeof why);
                if (fd >= 0) {
                    freeaddrinfo(res);
                    c->fd = fd;
                    if (local) {
                        socklen_t sl = sizeof *local;
                        memset(local, 0, sizeof *local);
                        if (getsockname(fd, (struct sockaddr *)local, &sl) != 0) {
                            drop_connection(c);
                            return xc__err_errno("store client: getsockname");
                        }
                    }
                    return XC_OK;
                }
                if (rc == XC_ERR_PROTOCOL) {
                    freeaddrinfo(res);
                    return xc__err(XC_ERR_PROTOCOL, "store %s: %s", c->where,
                                   why);
                }
            }
            freeaddrinfo(res);
        }
        int left = xc__poll_ms_left(deadline);
        if (left == 0) break;
        sleep_ms(left < 0 ? backoff : XC__MIN(backoff, left));
        backoff = XC__MIN(backoff * 2, BACKOFF_MAX_MS);
    }
    return xc__err(XC_ERR_TIMEOUT,
                   "cannot reach the store at %s within %d ms: %s", c->where,
                   timeout_ms, why);
}

/* ------------------------------------------------------------------ */
/* Requests                                                            */
/* ------------------------------------------------------------------ */

static xc_result_t check_key(const struct tcp_client *c, const char *op,
                             const char *key)
{
    if (!key || !*key)
        return xc__err(XC_ERR_INVALID, "store %s: %s with an empty key",
                       c->where, op);
    size_t n = strlen(key);
    if (n > STORE_MAX_KEY)
        return xc__err(XC_ERR_INVALID,
                       "store %s: %s of key '%.40s...': key is %zu bytes, "
                       "more than the %d-byte limit",
                       c->where, op, key, n, STORE_MAX_KEY);
    return XC_OK;
}

/* Send one request and read the answer's header.  On failure the message is
 * set and the connection dropped.  On success the caller reads *rlen body
 * bytes. */
static xc_result_t request(struct call *k, uint8_t op, const void *val,
                           uint32_t vlen, uint8_t *status, uint32_t *rlen)
{
    struct tcp_client *c = k->c;
    if (c->fd < 0) {
        /* reconnect within this call's deadline */
        int ms = xc__poll_ms_left(k->deadline);
        xc_result_t rc = client_connect(c, ms, NULL);
        if (rc != XC_OK) {
            char msg[XC__ERRMSG_LEN];
            snprintf(msg, sizeof msg, "%s", xc__tls_error());
            return xc__err(rc, "%s of key '%s': %s", k->op, k->key, msg);
        }
    }
    size_t klen = strlen(k->key);
    uint8_t hdr[STORE_HDR_LEN + STORE_MAX_KEY];
    xc__store_put_hdr(hdr, op, (uint16_t)klen, vlen);
    memcpy(hdr + STORE_HDR_LEN, k->key, klen);
    xc_result_t rc = send_all(c->fd, hdr, STORE_HDR_LEN + klen, k->deadline);
    if (rc == XC_OK && vlen) rc = send_all(c->fd, val, vlen, k->deadline);
    uint8_t ans[STORE_HDR_LEN];
    if (rc == XC_OK) rc = recv_all(c->fd, ans, sizeof ans, k->deadline);
    if (rc != XC_OK) return call_fail(k, rc);
    struct xc__store_hdr h = xc__store_get_hdr(ans);
    *status = h.code;
    *rlen = h.len;
    if (!xc__store_ans_ok(&h)) return call_fail(k, XC_ERR_PROTOCOL);
    if (h.code == STORE_ST_TIMEOUT) return timed_out(k);
    if (h.code == STORE_ST_ERR) {
        char msg[STORE_MAX_ERRMSG + 1];
        rc = recv_all(c->fd, msg, *rlen, k->deadline);
        if (rc != XC_OK) return call_fail(k, rc);
        msg[*rlen] = '\0';
        return xc__err(XC_ERR_INVALID, "store %s refused %s of key '%s': %s",
                       c->where, k->op, k->key, msg);
    }
    return XC_OK;
}

/* An OK answer must have exactly `want` body bytes. */
static xc_result_t expect_len(struct call *k, uint32_t rlen, uint32_t want)
{
    if (rlen != want) return call_fail(k, XC_ERR_PROTOCOL);
    return XC_OK;
}

static int tcp_set(void *ctx, const char *key, const void *val, size_t len)
{
    struct tcp_client *c = ctx;
    XC_CHECK(check_key(c, "set", key));
    if (len > STORE_MAX_VAL)
        return xc__err(XC_ERR_INVALID,
                       "store %s: value of key '%s' is %zu bytes, more than "
                       "the %u-byte limit",
                       c->where, key, len, STORE_MAX_VAL);
    if (len && !val)
        return xc__err(XC_ERR_INVALID, "store %s: set of key '%s' with a "
                       "NULL value", c->where, key);
    struct call k = {c, "set", key, c->io_timeout_ms,
                     xc__deadline_ns(c->io_timeout_ms)};
    uint8_t st;
    uint32_t rlen;
    XC_CHECK(request(&k, STORE_OP_SET, val, (uint32_t)len, &st, &rlen));
    return expect_len(&k, rlen, 0);
}

static int tcp_get(void *ctx, const char *key, void *buf, size_t cap,
                   size_t *len, int timeout_ms)
{
    struct tcp_client *c = ctx;
    XC_CHECK(check_key(c, "get", key));
    if (cap && !buf)
        return xc__err(XC_ERR_INVALID, "store %s: get of key '%s' into a "
                       "NULL buffer", c->where, key);
    struct call k = {c, "get", key, timeout_ms, wait_deadline(timeout_ms)};
    uint8_t st, tmo[STORE_TMO_LEN];
    uint32_t rlen;
    xc__store_put_u32(tmo, timeout_ms < 0 ? STORE_WAIT_FOREVER
                                          : (uint32_t)timeout_ms);
    XC_CHECK(request(&k, STORE_OP_GET, tmo, sizeof tmo, &st, &rlen));
    size_t take = XC__MIN((size_t)rlen, cap);
    xc_result_t rc = recv_all(c->fd, buf, take, k.deadline);
    if (rc == XC_OK) rc = recv_discard(c->fd, rlen - take, k.deadline);
    if (rc != XC_OK) return call_fail(&k, rc);
    if (len) *len = rlen;
    return XC_OK;
}

static int tcp_wait(void *ctx, const char *const *keys, size_t nkeys,
                    int timeout_ms)
{
    struct tcp_client *c = ctx;
    uint64_t deadline = xc__deadline_ns(timeout_ms); /* of the whole wait */
    if (nkeys && !keys)
        return xc__err(XC_ERR_INVALID, "store %s: wait with NULL keys",
                       c->where);
    for (size_t i = 0; i < nkeys; ++i) {
        XC_CHECK(check_key(c, "wait", keys[i]));
        int left = xc__poll_ms_left(deadline);
        struct call k = {c, "wait", keys[i], timeout_ms, wait_deadline(left)};
        uint8_t st, tmo[STORE_TMO_LEN];
        uint32_t rlen;
        xc__store_put_u32(tmo, left < 0 ? STORE_WAIT_FOREVER : (uint32_t)left);
        XC_CHECK(request(&k, STORE_OP_WAIT, tmo, sizeof tmo, &st, &rlen));
        XC_CHECK(expect_len(&k, rlen, 0));
    }
    return XC_OK;
}

xc_result_t xc__tcp_store_add(xc_store_t *store, const char *key,
                              int64_t delta, int64_t *out)
{
    if (!store || !store->ctx || store->set != tcp_set)
        return xc__err(XC_ERR_UNSUPPORTED,
                       "store add of key '%s': only TCP stores have counters",
                       key ? key : "(null)");
    struct tcp_client *c = store->ctx;
    XC_CHECK(check_key(c, "add", key));
    struct call k = {c, "add", key, c->io_timeout_ms,
                     xc__deadline_ns(c->io_timeout_ms)};
    uint8_t d[STORE_ADD_LEN], v[STORE_ADD_LEN];
    xc__store_put_u64(d, (uint64_t)delta);
    uint8_t st;
    uint32_t rlen;
    XC_CHECK(request(&k, STORE_OP_ADD, d, sizeof d, &st, &rlen));
    XC_CHECK(expect_len(&k, rlen, sizeof v));
    xc_result_t rc = recv_all(c->fd, v, sizeof v, k.deadline);
    if (rc != XC_OK) return call_fail(&k, rc);
    if (out) *out = (int64_t)xc__store_get_u64(v);
    return XC_OK;
}

/* ------------------------------------------------------------------ */
/* Open / close                                                        */
/* ------------------------------------------------------------------ */

xc_result_t xc__tcp_store_open(const char *host, int port, int timeout_ms,
                               const xc__auth_conf_t *auth, xc_store_t *out,
                               struct sockaddr_storage *local)
{
    if (!out) return xc__err(XC_ERR_INVALID, "store client: NULL output");
    memset(out, 0, sizeof *out);
    if (!host || !*host)
        return xc__err(XC_ERR_INVALID, "store client: empty host");
    if (port < 1 || port > 65535)
        return xc__err(XC_ERR_INVALID, "store client: port %d of host '%s' "
                       "is not in 1..65535", port, host);
    struct tcp_client *c = calloc(1, sizeof *c);
    if (!c) return xc__err(XC_ERR_NOMEM, "store client: out of memory");
    c->fd = -1;
    c->port = port;
    if (auth) c->auth = *auth;
    c->io_timeout_ms =
        timeout_ms < 0 ? -1 : XC__MAX(timeout_ms, IO_TIMEOUT_MIN_MS);
    size_t hl = strlen(host);
    if (hl >= sizeof c->host) {
        free(c);
        return xc__err(XC_ERR_INVALID, "store client: host name '%.40s...' "
                       "too long", host);
    }
    memcpy(c->host, host, hl + 1);
    if (strchr(host, ':'))
        snprintf(c->where, sizeof c->where, "[%s]:%d", host, port);
    else snprintf(c->where, sizeof c->where, "%s:%d", host, port);
    xc_result_t rc = client_connect(c, timeout_ms, local);
    if (rc != XC_OK) {
        explicit_bzero(c, sizeof *c);
        free(c);
        return rc;
    }
    out->size = sizeof *out;
    out->ctx = c;
    out->set = tcp_set;
    out->get = tcp_get;
    out->wait = tcp_wait;
    return XC_OK;
}

void xc__tcp_store_close(xc_store_t *store)
{
    if (!store || !store->ctx || store->set != tcp_set) return;
    struct tcp_client *c = store->ctx;
    drop_connection(c);
    explicit_bzero(c, sizeof *c);
    free(c);
    memset(store, 0, sizeof *store);
}
