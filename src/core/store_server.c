/*
 * store_server.c -- the TCP rendezvous store server: one thread running a
 * poll() loop over a listening socket, a self-pipe (stop) and the client
 * connections.  Wire protocol: docs/rendezvous.md; its constants and framing
 * live in store_proto.h, shared with the client (store_tcp.c).
 *
 * Invariants.
 *  - Only the server thread touches the key table and the connections once
 *    started; xc__store_server_stop wakes it through the pipe, joins it, and
 *    only then frees everything, so there is no lock anywhere.
 *    xc__store_server_release (the hosting communicator is destroyed) puts
 *    the server on this process's list of released ones instead: it serves
 *    on while any client is connected -- a rank already waiting in its next
 *    xc_comm_init on this address -- and the next xc__store_server_start on
 *    its port takes it back (keys are namespaced per creation, xc/<n>/);
 *    with no client left it closes its socket and its thread ends
 *    (detached), and that start (or the next on the port) frees it.  The list's lock is taken
 *    only by release, start, and a released thread deciding to end.
 *    (Destroy is not collective: stopping at once cut off a peer that had
 *    moved on to the next communicator, which then failed.)
 *  - Every socket is non-blocking and close-on-exec; every send uses
 *    MSG_NOSIGNAL.  Each connection has an input and an output buffer, so
 *    partial reads and writes at any byte boundary are fine.
 *  - A connection is served strictly in order: while its current request is
 *    parked (GET/WAIT of a missing key) its later requests stay buffered, so
 *    answers always come back in request order and a connection parks at
 *    most once.  A parked connection is linked into the waiter list of the
 *    key's entry (an entry may exist without a value only to hold waiters)
 *    and carries the deadline the client sent; at the deadline it gets a
 *    TIMEOUT answer, so the stream stays in step with the client.
 *  - Memory per connection is bounded: input up to one maximal frame, output
 *    up to OUT_HIGH plus one answer (requests are not processed while the
 *    output is above OUT_HIGH).
 *  - Anything that is not our protocol -- wrong magic in the first bytes, a
 *    bad opcode, an oversized key or value, nonzero reserved bytes, no hello
 *    within HELLO_TIMEOUT_MS -- closes that connection and nothing else; the
 *    store is changed only by complete, valid requests.
 *  - At most `pre_max` connections are in their handshake or hello at
 *    once (preamble_cap: a quarter of the descriptor limit, 16-1024); a
 *    new one past it resets the oldest of them, with a WARN.  A stranger
 *    opening connections that say nothing would otherwise hold a
 *    descriptor each until its deadline, and this process (rank 0: its
 *    mesh, its shared memory) would run out first; a client's hello
 *    follows its connect within milliseconds, so the oldest is a stranger's.
 *  - With a job token (auth.h), a connection must complete the handshake
 *    and its hello within the handshake deadline (XCOLL_HANDSHAKE_MS), and
 *    nothing it sends before is interpreted as a request; a failure is
 *    logged (WARN, with the peer's address and the reason) and closes that
 *    connection only.
 */
#include "auth.h"
#include "store.h"
#include "store_proto.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

/* ---- server limits */
/* one maximal request */
#define IN_MAX (STORE_HDR_LEN + STORE_MAX_KEY + STORE_MAX_VAL)
#define IN_MIN 4096
#define OUT_HIGH (256u * 1024u)
#define HELLO_TIMEOUT_MS 10000
#define ACCEPT_PAUSE_MS 100 /* after EMFILE & co. */

struct conn;

/* A key.  has_value == 0: a placeholder that only holds parked waiters. */
struct entry {
    struct entry *next; /* hash chain */
    uint32_t hash;
    int has_value;
    uint8_t *val;
    uint32_t len;
    struct conn *waiters; /* doubly linked through conn->wprev/wnext */
    uint16_t keylen;
    char key[]; /* keylen bytes + NUL */
};

enum conn_state { CONN_AUTH1, CONN_AUTH3, CONN_HELLO, CONN_READY, CONN_CLOSING };

struct conn {
    int fd;
    enum conn_state state;
    int dead;          /* closed at the end of this loop iteration */
    int eof;           /* the peer closed its side */
    int queued;        /* on the ready list */
    uint64_t accepted_ns;
    char peer[80];
    uint8_t *in;
    size_t in_off, in_len, in_cap;
    uint8_t *out;
    size_t out_off, out_len, out_cap;
    /* parking */
    struct entry *parked_on;
    uint8_t parked_op;
    uint64_t park_deadline_ns; /* UINT64_MAX: none */
    struct conn *wprev, *wnext;
    struct conn *rnext; /* ready list */
    xc__auth_t auth;    /* the handshake in progress (CONN_AUTH3) */
};

struct xc__store_server {
    int lfd;
    int wake[2]; /* self-pipe: stop request */
    pthread_t thread;
    struct conn **conns;
    size_t nconns, capconns;
    struct pollfd *pfds;
    size_t cappfds;
    struct entry **buckets;
    size_t nbuckets, nentries;
    struct conn *ready; /* connections whose input must be (re)processed */
    uint64_t accept_paused_until_ns;
    size_t pre_max;       /* connections in their preamble at once (preamble_cap) */
    uint64_t pre_dropped; /* ... dropped past it */
    xc__auth_conf_t auth; /* has_token == 0: no handshake */
    int port;             /* bound */
    char host[NI_MAXHOST]; /* as asked to listen on ("" = any) */
    /* On the released list (g_released, under g_rel_mu): */
    int released;         /* 1 while on it */
    int live;             /* counted in g_live (owned by a communicator) */
    int ended;            /* its thread has ended (closed its socket) */
    struct xc__store_server *rel_next;
};

static pthread_mutex_t g_rel_mu = PTHREAD_MUTEX_INITIALIZER;
static xc__store_server_t *g_released;
/* Ports this process's live servers (started or taken back, not yet
 * released or stopped) listen on, with counts (under g_rel_mu): what
 * xc__store_server_hosted answers from. */
enum { LIVE_MAX = 64 };
static struct {
    int port, n;
} g_live[LIVE_MAX];

static void live_count(xc__store_server_t *s, int live)
{
    if (s->live == live) return;
    s->live = live;
    int port = s->port, delta = live ? 1 : -1;
    pthread_mutex_lock(&g_rel_mu);
    int free_at = -1;
    for (int i = 0; i < LIVE_MAX; i++) {
        if (g_live[i].n && g_live[i].port == port) {
            g_live[i].n += delta;
            pthread_mutex_unlock(&g_rel_mu);
            return;
        }
        if (!g_live[i].n && free_at < 0) free_at = i;
    }
    if (delta > 0 && free_at >= 0) g_live[free_at].port = port, g_live[free_at].n = delta;
    pthread_mutex_unlock(&g_rel_mu);
}

int xc__store_server_hosted(int port)
{
    pthread_mutex_lock(&g_rel_mu);
    int yes = 0;
    for (int i = 0; i < LIVE_MAX && !yes; i++) yes = g_live[i].n && g_live[i].port == port;
    pthread_mutex_unlock(&g_rel_mu);
    return yes;
}

/* ------------------------------------------------------------------ */
/* Addresses                                                           */
/* ------------------------------------------------------------------ */

/* "1.2.3.4:80" / "[::1]:80" */
static void fmt_sockaddr(const struct sockaddr *sa, socklen_t len, char *buf,
                         size_t cap)
{
    char h[NI_MAXHOST], s[NI_MAXSERV];
    if (getnameinfo(sa, len, h, sizeof h, s, sizeof s,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
        snprintf(buf, cap, "?");
        return;
    }
    int n = sa->sa_family == AF_INET6 ? snprintf(buf, cap, "[%s]:%s", h, s)
                                      : snprintf(buf, cap, "%s:%s", h, s);
    if (n < 0 || (size_t)n >= cap) snprintf(buf, cap, "?");
}

/* ------------------------------------------------------------------ */
/* Key table                                                           */
/* ------------------------------------------------------------------ */

static uint32_t hash_key(const char *k, size_t n)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < n; ++i) {
        h ^= (uint8_t)k[i];
        h *= 16777619u;
    }
    return h;
}

static struct entry *table_find(xc__store_server_t *s, const char *k,
                                size_t n, uint32_t h)
{
    for (struct entry *e = s->buckets[h & (s->nbuckets - 1)]; e; e = e->next)
        if (e->hash == h && e->keylen == n && memcmp(e->key, k, n) == 0)
            return e;
    return NULL;
}

static void table_grow(xc__store_server_t *s)
{
    size_t nb = s->nbuckets * 2;
    struct entry **b = calloc(nb, sizeof *b);
    if (!b) return; /* keep the old size: slower, still correct */
    for (size_t i = 0; i < s->nbuckets; ++i) {
        struct entry *e = s->buckets[i];
        while (e) {
            struct entry *nx = e->next;
            e->next = b[e->hash & (nb - 1)];
            b[e->hash & (nb - 1)] = e;
            e = nx;
        }
    }
    free(s->buckets);
    s->buckets = b;
    s->nbuckets = nb;
}

/* Find or create the entry for a key (NULL on out-of-memory). */
static struct entry *table_get(xc__store_server_t *s, const char *k, size_t n)
{
    uint32_t h = hash_key(k, n);
    struct entry *e = table_find(s, k, n, h);
    if (e) return e;
    e = calloc(1, sizeof *e + n + 1);
    if (!e) return NULL;
    e->hash = h;
    e->keylen = (uint16_t)n;
    memcpy(e->key, k, n);
    e->key[n] = '\0';
    e->next = s->buckets[h & (s->nbuckets - 1)];
    s->buckets[h & (s->nbuckets - 1)] = e;
    if (++s->nentries > s->nbuckets) table_grow(s);
    return e;
}

static void table_free(xc__store_server_t *s)
{
    for (size_t i = 0; i < s->nbuckets; ++i) {
        struct entry *e = s->buckets[i];
        while (e) {
            struct entry *nx = e->next;
            free(e->val);
            free(e);
            e = nx;
        }
    }
    free(s->buckets);
    s->buckets = NULL;
}

/* ------------------------------------------------------------------ */
/* Connections                                                         */
/* ------------------------------------------------------------------ */

static void unpark(struct conn *c)
{
    struct entry *e = c->parked_on;
    if (!e) return;
    if (c->wprev) c->wprev->wnext = c->wnext;
    else e->waiters = c->wnext;
    if (c->wnext) c->wnext->wprev = c->wprev;
    c->wprev = c->wnext = NULL;
    c->parked_on = NULL;
}

static void conn_drop(struct conn *c, const char *why)
{
    if (c->dead) return;
    if (why) XC_WARN("store server: dropping connection from %s: %s", c->peer, why);
    unpark(c);
    c->dead = 1;
}

static void enqueue_ready(xc__store_server_t *s, struct conn *c)
{
    if (c->queued || c->dead) return;
    c->queued = 1;
    c->rnext = s->ready;
    s->ready = c;
}

/* Append bytes to the output buffer; drops the connection on OOM. */
static int out_append(struct conn *c, const void *p, size_t n)
{
    if (c->dead) return -1;
    if (c->out_len + n > c->out_cap) {
        if (c->out_off > 0) {
            memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
            c->out_len -= c->out_off;
            c->out_off = 0;
        }
        if (c->out_len + n > c->out_cap) {
            size_t cap = c->out_cap ? c->out_cap : 256;
            while (cap < c->out_len + n) cap *= 2;
            uint8_t *nb = realloc(c->out, cap);
            if (!nb) {
                conn_drop(c, "out of memory for the answer");
                return -1;
            }
            c->out = nb;
            c->out_cap = cap;
        }
    }
    memcpy(c->out + c->out_len, p, n);
    c->out_len += n;
    return 0;
}

static void reply(struct conn *c, uint8_t status, const void *body,
                  uint32_t len)
{
    uint8_t h[STORE_HDR_LEN];
    xc__store_put_hdr(h, status, 0, len);
    if (out_append(c, h, sizeof h) == 0 && len) out_append(c, body, len);
}

static void reply_err(struct conn *c, const char *msg)
{
    reply(c, STORE_ST_ERR, msg, (uint32_t)strlen(msg));
}

/* Send what the output buffer holds, without blocking. */
static void conn_flush(struct conn *c)
{
    while (!c->dead && c->out_off < c->out_len) {
        ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
                         MSG_NOSIGNAL);
        if (n > 0) {
            c->out_off += (size_t)n;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return;
        } else {
            conn_drop(c, NULL); /* the peer went away */
            return;
        }
    }
    if (c->out_off == c->out_len) {
        c->out_off = c->out_len = 0;
        if (c->state == CONN_CLOSING) conn_drop(c, NULL);
    }
}

/* Reject a connection during the handshake or the hello (auth.h's
 * categories of `why`). */
static void conn_reject(struct conn *c, const char *why)
{
    if (c->dead) return;
    xc__auth_reject("store server", c->peer, why);
    conn_drop(c, NULL);
}

/* When the connection must have finished its handshake and hello. */
static uint64_t preamble_deadline(const xc__store_server_t *s, const struct conn *c)
{
    int ms = s->auth.has_token ? s->auth.handshake_ms : HELLO_TIMEOUT_MS;
    return c->accepted_ns + (uint64_t)ms * 1000000ull;
}

/* The handshake's steps (CONN_AUTH1, CONN_AUTH3): 1 to go on parsing, 0 to
 * wait for more input or stop. */
static int conn_auth_step(xc__store_server_t *s, struct conn *c)
{
    size_t avail = c->in_len - c->in_off;
    const uint8_t *p = c->in + c->in_off;
    const char *why = "";
    if (c->state == CONN_AUTH1) {
        uint16_t ver;
        int plain = xc__store_parse_hello(p, avail, &ver);
        if (plain > 0) {
            /* A client without the token: tell it so, then close. */
            uint8_t ans[STORE_HELLO_LEN];
            xc__store_put_hello(ans, STORE_HELLO_AUTH_REQUIRED);
            out_append(c, ans, sizeof ans);
            c->in_off += STORE_HELLO_LEN;
            xc__auth_reject("store server", c->peer,
                            "no token (a plain store hello; this store requires the job token)");
            c->state = CONN_CLOSING;
            return 0;
        }
        if (!xc__auth_magic_prefix(p, avail)) {
            if (plain < 0) conn_reject(c, "bad frame (neither a handshake nor a store hello)");
            return 0;
        }
        if (avail < XC__AUTH_MSG1_LEN) return 0;
        uint8_t m2[XC__AUTH_MSG2_LEN];
        if (xc__auth_server_reply(&c->auth, &s->auth, XC__AUTH_STORE, p, m2, &why) != XC_OK) {
            conn_reject(c, why);
            return 0;
        }
        /* A store binds no communicator and no rank. */
        if (c->auth.ctx.id != 0 || c->auth.ctx.client != -1 || c->auth.ctx.server != -1) {
            conn_reject(c, "bad frame (handshake context is not a store's)");
            return 0;
        }
        c->in_off += XC__AUTH_MSG1_LEN;
        if (out_append(c, m2, sizeof m2) != 0) return 0;
        c->state = CONN_AUTH3;
        return 1;
    }
    if (avail < XC__AUTH_MSG3_LEN) return 0;
    if (xc__auth_server_verify(&c->auth, p, &why) != XC_OK) {
        conn_reject(c, why);
        return 0;
    }
    explicit_bzero(&c->auth, sizeof c->auth);
    c->in_off += XC__AUTH_MSG3_LEN;
    c->state = CONN_HELLO;
    XC_TRACE("store server: %s authenticated", c->peer);
    return 1;
}

/* Give the waiters of a key that now has a value their answers. */
static void wake_waiters(xc__store_server_t *s, struct entry *e)
{
    while (e->waiters) {
        struct conn *w = e->waiters;
        uint8_t op = w->parked_op;
        unpark(w);
        if (op == STORE_OP_GET) reply(w, STORE_ST_OK, e->val, e->len);
        else reply(w, STORE_ST_OK, NULL, 0);
        enqueue_ready(s, w); /* flush and resume its buffered requests */
    }
}

static int entry_set(xc__store_server_t *s, struct entry *e, const void *v,
                     uint32_t len)
{
    uint8_t *nv = malloc(len ? len : 1);
    if (!nv) return -1;
    memcpy(nv, v, len);
    free(e->val);
    e->val = nv;
    e->len = len;
    e->has_value = 1;
    wake_waiters(s, e);
    return 0;
}

/* Counter values are stored as decimal text (so GET shows them). */
static int parse_counter(const struct entry *e, int64_t *out)
{
    if (!e || !e->has_value) {
        *out = 0;
        return 0;
    }
    if (e->len == 0 || e->len > 20) return -1;
    char tmp[24];
    memcpy(tmp, e->val, e->len);
    tmp[e->len] = '\0';
    char *end;
    errno = 0;
    long long v = strtoll(tmp, &end, 10);
    if (errno || *end || end == tmp) return -1;
    *out = v;
    return 0;
}

static void handle_request(xc__store_server_t *s, struct conn *c, uint8_t op,
                           const char *key, uint16_t klen, const uint8_t *val,
                           uint32_t vlen)
{
    struct entry *e;
    switch (op) {
    case STORE_OP_SET:
        e = table_get(s, key, klen);
        if (!e || entry_set(s, e, val, vlen) != 0) {
            reply_err(c, "server out of memory");
            return;
        }
        reply(c, STORE_ST_OK, NULL, 0);
        return;
    case STORE_OP_GET:
    case STORE_OP_WAIT:
        e = table_get(s, key, klen);
        if (!e) {
            reply_err(c, "server out of memory");
            return;
        }
        if (e->has_value) {
            if (op == STORE_OP_GET) reply(c, STORE_ST_OK, e->val, e->len);
            else reply(c, STORE_ST_OK, NULL, 0);
            return;
        }
        uint32_t tmo = xc__store_get_u32(val);
        if (tmo == 0) {
            reply(c, STORE_ST_TIMEOUT, NULL, 0);
            return;
        }
        c->parked_on = e;
        c->parked_op = op;
        c->park_deadline_ns = tmo == STORE_WAIT_FOREVER
                                  ? UINT64_MAX
                                  : xc__now_ns() + tmo * 1000000ull;
        c->wprev = NULL;
        c->wnext = e->waiters;
        if (e->waiters) e->waiters->wprev = c;
        e->waiters = c;
        return;
    case STORE_OP_ADD: {
        int64_t cur;
        e = table_get(s, key, klen);
        if (!e) {
            reply_err(c, "server out of memory");
            return;
        }
        if (parse_counter(e, &cur) != 0) {
            reply_err(c, "the key holds a value that is not a decimal integer");
            return;
        }
        /* two's complement wrap, like the integer reductions */
        int64_t nv = (int64_t)((uint64_t)cur + xc__store_get_u64(val));
        char txt[24];
        int n = snprintf(txt, sizeof txt, "%" PRId64, nv);
        if (entry_set(s, e, txt, (uint32_t)n) != 0) {
            reply_err(c, "server out of memory");
            return;
        }
        uint8_t b[STORE_ADD_LEN];
        xc__store_put_u64(b, (uint64_t)nv);
        reply(c, STORE_ST_OK, b, sizeof b);
        return;
    }
    }
}

/* Parse and execute complete buffered requests, in order, until the input
 * runs out, the connection parks, or its output is backed up. */
static void conn_process(xc__store_server_t *s, struct conn *c)
{
    while (!c->dead && !c->parked_on && c->state != CONN_CLOSING &&
           c->out_len - c->out_off < OUT_HIGH) {
        size_t avail = c->in_len - c->in_off;
        if (avail == 0) break;
        const uint8_t *p = c->in + c->in_off;
        if (c->state == CONN_AUTH1 || c->state == CONN_AUTH3) {
            if (!conn_auth_step(s, c)) break;
            continue;
        }
        if (c->state == CONN_HELLO) {
            uint16_t ver = 0;
            int hl = xc__store_parse_hello(p, avail, &ver);
            if (hl < 0) {
                if (!s->auth.has_token && xc__auth_magic_prefix(p, avail) && avail >= 4)
                    conn_reject(c, "no token here: the client presented a job token, but this "
                                   "store has none (set XCOLL_TOKEN where the store runs)");
                else conn_drop(c, "not an xcoll store client (bad magic)");
                return;
            }
            if (hl == 0) break;
            uint8_t ans[STORE_HELLO_LEN];
            xc__store_put_hello(ans, ver == STORE_VERSION
                                         ? STORE_HELLO_OK
                                         : STORE_HELLO_BAD_VERSION);
            out_append(c, ans, sizeof ans);
            c->in_off += STORE_HELLO_LEN;
            if (ver != STORE_VERSION) {
                XC_WARN("store server: client %s speaks protocol version %u, "
                        "we speak %u",
                        c->peer, (unsigned)ver, (unsigned)STORE_VERSION);
                c->state = CONN_CLOSING; /* after the answer is sent */
                break;
            }
            c->state = CONN_READY;
            continue;
        }
        struct xc__store_req rq;
        long need = xc__store_parse_req(p, avail, &rq);
        if (need < 0) {
            conn_drop(c, "malformed or oversized request");
            return;
        }
        if (need == 0) break;
        handle_request(s, c, rq.op, rq.key, rq.keylen, rq.val, rq.vlen);
        c->in_off += (size_t)need;
    }
    if (c->in_off == c->in_len) c->in_off = c->in_len = 0;
}

/* Read what the socket holds into the input buffer. */
static void conn_read(struct conn *c)
{
    while (!c->dead) {
        if (c->in_off > 0 && c->in_cap - c->in_len < IN_MIN) {
            memmove(c->in, c->in + c->in_off, c->in_len - c->in_off);
            c->in_len -= c->in_off;
            c->in_off = 0;
        }
        if (c->in_len == c->in_cap) {
            if (c->in_cap >= IN_MAX) return; /* full: wait for processing */
            size_t cap = c->in_cap ? c->in_cap * 2 : IN_MIN;
            if (cap > IN_MAX) cap = IN_MAX;
            uint8_t *nb = realloc(c->in, cap);
            if (!nb) {
                conn_drop(c, "out of memory for the request");
                return;
            }
            c->in = nb;
            c->in_cap = cap;
        }
        ssize_t n = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, 0);
        if (n > 0) {
            c->in_len += (size_t)n;
        } else if (n == 0) {
            c->eof = 1; /* orderly close: dropped once its input is parsed */
            return;
        } else if (errno == EINTR) {
            continue;
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            return;
        } else {
            conn_drop(c, NULL);
            return;
        }
    }
}

static void conn_free(struct conn *c)
{
    if (!c) return;
    unpark(c);
    if (c->fd >= 0) close(c->fd);
    explicit_bzero(&c->auth, sizeof c->auth); /* holds a copy of the token */
    free(c->in);
    free(c->out);
    free(c);
}

/* The most connections in their handshake or hello at once: a quarter
 * of this process's descriptor limit, 16 to 1024. */
static size_t preamble_cap(void)
{
    struct rlimit rl;
    rlim_t n = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? rl.rlim_cur / 4 : 256;
    return n < 16 ? 16 : n > 1024 ? 1024 : (size_t)n;
}

/* Past s->pre_max connections in their preamble, reset the oldest (only
 * counted when there are more connections than that in all). */
static void cap_preamble(xc__store_server_t *s)
{
    if (s->nconns <= s->pre_max) return;
    size_t n = 0;
    struct conn *oldest = NULL;
    for (size_t i = 0; i < s->nconns; ++i) {
        struct conn *c = s->conns[i];
        if (c->dead || c->state >= CONN_READY) continue;
        n++;
        if (!oldest || c->accepted_ns < oldest->accepted_ns) oldest = c;
    }
    if (n <= s->pre_max) return;
    /* warned at the 1st, 2nd, 4th, ... drop: a flood does not flood the log */
    uint64_t k = ++s->pre_dropped;
    if (!(k & (k - 1)))
        XC_WARN("store server: %zu connections without a hello (at most %zu at once): dropping "
                "the oldest, from %s (%" PRIu64 " dropped so far)",
                n, s->pre_max, oldest->peer, k);
    /* A reset, not an orderly close: a client whose connection this was
     * (descheduled between its connect and its hello) reads it as a
     * reset and connects again; an orderly close without an answer means
     * "not an xcoll store" to it (store_tcp.c), which it does not retry. */
    struct linger lg = {1, 0};
    setsockopt(oldest->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    conn_drop(oldest, NULL);
}

static void accept_all(xc__store_server_t *s)
{
    for (int i = 0; i < 64; ++i) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        int fd = accept4(s->lfd, (struct sockaddr *)&ss, &sl,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO)
                continue;
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
                errno == ENOMEM) {
                XC_WARN("store server: accept: %s; pausing %d ms",
                        strerror(errno), ACCEPT_PAUSE_MS);
                s->accept_paused_until_ns =
                    xc__now_ns() + ACCEPT_PAUSE_MS * 1000000ull;
            }
            return; /* EAGAIN, or paused */
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct conn *c = calloc(1, sizeof *c);
        if (c && s->nconns == s->capconns) {
            size_t cap = s->capconns ? s->capconns * 2 : 16;
            struct conn **nc = realloc(s->conns, cap * sizeof *nc);
            if (nc) {
                s->conns = nc;
                s->capconns = cap;
            }
        }
        if (!c || s->nconns == s->capconns) {
            free(c);
            close(fd);
            XC_WARN("store server: out of memory, refused a connection");
            continue;
        }
        c->fd = fd;
        c->state = s->auth.has_token ? CONN_AUTH1 : CONN_HELLO;
        c->accepted_ns = xc__now_ns();
        fmt_sockaddr((struct sockaddr *)&ss, sl, c->peer, sizeof c->peer);
        s->conns[s->nconns++] = c;
        XC_TRACE("store server: connection from %s", c->peer);
        cap_preamble(s);
    }
}

/* Answer TIMEOUT to parked requests whose deadline has passed. */
static void expire_parked(xc__store_server_t *s)
{
    uint64_t now = xc__now_ns();
    for (size_t i = 0; i < s->nconns; ++i) {
        struct conn *c = s->conns[i];
        if (c->dead || !c->parked_on || now < c->park_deadline_ns) continue;
        unpark(c);
        reply(c, STORE_ST_TIMEOUT, NULL, 0);
        enqueue_ready(s, c);
    }
}

/* Drain the ready list: flush answers and resume parked-then-woken
 * connections (which may wake others, hence the loop). */
static void drain_ready(xc__store_server_t *s)
{
    while (s->ready) {
        struct conn *c = s->ready;
        s->ready = c->rnext;
        c->rnext = NULL;
        c->queued = 0;
        if (c->dead) continue;
        conn_process(s, c);
        conn_flush(c);
    }
}

static void server_free(xc__store_server_t *s);

static void *server_main(void *arg)
{
    xc__store_server_t *s = arg;
    int orphan = 0; /* released (told through the pipe; s->released decides) */
    for (;;) {
        size_t need = s->nconns + 2;
        if (need > s->cappfds) {
            size_t cap = need * 2;
            struct pollfd *np = realloc(s->pfds, cap * sizeof *np);
            if (!np) {
                XC_WARN("store server: out of memory for poll set");
                struct timespec ts = {0, 10 * 1000000L};
                nanosleep(&ts, NULL);
                continue;
            }
            s->pfds = np;
            s->cappfds = cap;
        }
        uint64_t now = xc__now_ns();
        uint64_t wake_at = UINT64_MAX;
        struct pollfd *pf = s->pfds;
        pf[0] = (struct pollfd){.fd = s->wake[0], .events = POLLIN};
        int listening = now >= s->accept_paused_until_ns;
        pf[1] = (struct pollfd){.fd = listening ? s->lfd : -1, .events = POLLIN};
        if (!listening) wake_at = s->accept_paused_until_ns;
        for (size_t i = 0; i < s->nconns; ++i) {
            struct conn *c = s->conns[i];
            short ev = POLLRDHUP;
            if (c->state != CONN_CLOSING && c->in_len - c->in_off < IN_MAX)
                ev |= POLLIN;
            if (c->out_off < c->out_len) ev |= POLLOUT;
            pf[i + 2] = (struct pollfd){.fd = c->fd, .events = ev};
            if (c->state < CONN_READY) {
                uint64_t t = preamble_deadline(s, c);
                if (t < wake_at) wake_at = t;
            }
            if (c->parked_on && c->park_deadline_ns < wake_at)
                wake_at = c->park_deadline_ns;
        }
        int rc = poll(pf, (nfds_t)(s->nconns + 2), xc__poll_ms_left(wake_at));
        if (rc < 0) {
            if (errno == EINTR) continue;
            XC_WARN("store server: poll: %s", strerror(errno));
            struct timespec ts = {0, 10 * 1000000L};
            nanosleep(&ts, NULL);
            continue;
        }
        if (pf[0].revents) {
            /* 1: stop (the owner joins); 2: released (serve on, alone). */
            char b[8];
            ssize_t got, stop = 0;
            while ((got = read(s->wake[0], b, sizeof b)) > 0)
                for (ssize_t i = 0; i < got; i++) stop |= b[i] == 1, orphan |= b[i] == 2;
            if (stop) break;
        }
        size_t n = s->nconns; /* accept_all may append; their revents are 0 */
        for (size_t i = 0; i < n; ++i) {
            struct conn *c = s->conns[i];
            short re = pf[i + 2].revents;
            if (c->dead || !re) continue;
            if (re & POLLOUT) {
                conn_flush(c);
                if (c->out_len - c->out_off < OUT_HIGH) enqueue_ready(s, c);
            }
            if (re & (POLLIN | POLLRDHUP | POLLHUP | POLLERR)) {
                conn_read(c);
                conn_process(s, c);
                conn_flush(c);
                if ((re & (POLLRDHUP | POLLHUP | POLLERR)) || c->eof) {
                    if (c->state == CONN_AUTH3)
                        conn_reject(c, "closed during the handshake (after our proof: it "
                                       "holds another token, or is not an xcoll client)");
                    else if (c->state == CONN_AUTH1 && c->in_len > c->in_off)
                        conn_reject(c, "bad frame (a truncated handshake)");
                    conn_drop(c, NULL);
                }
            }
        }
        expire_parked(s);
        drain_ready(s);
        if (pf[1].revents) accept_all(s);
        /* hello deadline, then sweep the dead */
        now = xc__now_ns();
        size_t j = 0;
        for (size_t i = 0; i < s->nconns; ++i) {
            struct conn *c = s->conns[i];
            if (!c->dead && c->state < CONN_READY && now >= preamble_deadline(s, c)) {
                if (c->state == CONN_HELLO) conn_drop(c, "no hello in time");
                else conn_reject(c, "timeout (no complete handshake within XCOLL_HANDSHAKE_MS)");
            }
            if (c->dead) conn_free(c);
            else s->conns[j++] = c;
        }
        s->nconns = j;
        if (orphan && s->nconns == 0) {
            /* Released and idle: end, unless a start took it back. */
            pthread_mutex_lock(&g_rel_mu);
            int end = s->released;
            if (end) {
                close(s->lfd); /* the port is free for the next start */
                s->lfd = -1;
                s->ended = 1; /* s is not touched after the unlock */
                pthread_detach(pthread_self());
            }
            pthread_mutex_unlock(&g_rel_mu);
            if (end) return NULL;
            orphan = 0;
        }
    }
    return NULL;
}

/* ------------------------------------------------------------------ */
/* Start / stop                                                        */
/* ------------------------------------------------------------------ */

/* Create a listening socket bound to `sa`.  -1 with errno on failure. */
static int listen_on(const struct sockaddr *sa, socklen_t len, int dual)
{
    int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                    0);
    if (fd < 0) return -1;
    int one = 1, zero = 0;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0)
        goto fail;
    if (sa->sa_family == AF_INET6 &&
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, dual ? &zero : &one,
                   sizeof one) != 0)
        goto fail;
    if (bind(fd, sa, len) != 0) goto fail;
    if (listen(fd, SOMAXCONN) != 0) goto fail;
    return fd;
fail:;
    int e = errno;
    close(fd);
    errno = e;
    return -1;
}

static xc_result_t open_listener(const char *host, int port, int *fd_out)
{
    if (!host || !*host) {
        struct sockaddr_in6 a6;
        memset(&a6, 0, sizeof a6);
        a6.sin6_family = AF_INET6;
        a6.sin6_addr = in6addr_any;
        a6.sin6_port = htons((uint16_t)port);
        int fd = listen_on((struct sockaddr *)&a6, sizeof a6, 1);
        if (fd >= 0) {
            *fd_out = fd;
            return XC_OK;
        }
        if (errno != EAFNOSUPPORT && errno != EADDRNOTAVAIL &&
            errno != EPROTONOSUPPORT && errno != EINVAL)
            return xc__err(XC_ERR_SYSTEM,
                           "store server: cannot listen on [::]:%d: %s", port,
                           strerror(errno));
        struct sockaddr_in a4;
        memset(&a4, 0, sizeof a4);
        a4.sin_family = AF_INET;
        a4.sin_addr.s_addr = htonl(INADDR_ANY);
        a4.sin_port = htons((uint16_t)port);
        fd = listen_on((struct sockaddr *)&a4, sizeof a4, 0);
        if (fd < 0)
            return xc__err(XC_ERR_SYSTEM,
                           "store server: cannot listen on 0.0.0.0:%d: %s",
                           port, strerror(errno));
        *fd_out = fd;
        return XC_OK;
    }
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    int g = getaddrinfo(host, ps, &hints, &res);
    if (g != 0)
        return xc__err(XC_ERR_INVALID,
                       "store server: cannot resolve listen host '%s': %s",
                       host, gai_strerror(g));
    int err = 0;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        int fd = listen_on(ai->ai_addr, ai->ai_addrlen, 0);
        if (fd >= 0) {
            freeaddrinfo(res);
            *fd_out = fd;
            return XC_OK;
        }
        if (!err) err = errno;
    }
    freeaddrinfo(res);
    return xc__err(XC_ERR_SYSTEM, "store server: cannot listen on %s:%d: %s",
                   host, port, strerror(err ? err : EADDRNOTAVAIL));
}

static xc__store_server_t *take_back(const char *host, int port, const xc__auth_conf_t *auth);

xc_result_t xc__store_server_start(const char *host, int port,
                                   const xc__auth_conf_t *auth,
                                   xc__store_server_t **out, int *port_out)
{
    if (!out)
        return xc__err(XC_ERR_INVALID, "store server: NULL output pointer");
    *out = NULL;
    if (port < 0 || port > 65535)
        return xc__err(XC_ERR_INVALID, "store server: port %d out of range",
                       port);
    xc__store_server_t *s = port ? take_back(host, port, auth) : NULL;
    if (s) {
        XC_INFO("store server on port %d taken back (released by a destroyed communicator)",
                port);
        if (port_out) *port_out = s->port;
        live_count(s, 1);
        *out = s;
        return XC_OK;
    }
    s = calloc(1, sizeof *s);
    if (!s) return xc__err(XC_ERR_NOMEM, "store server: out of memory");
    s->lfd = s->wake[0] = s->wake[1] = -1;
    s->pre_max = preamble_cap();
    if (auth) s->auth = *auth;
    snprintf(s->host, sizeof s->host, "%s", host ? host : "");
    xc_result_t rc = XC_OK;
    s->nbuckets = 64;
    s->buckets = calloc(s->nbuckets, sizeof *s->buckets);
    if (!s->buckets) {
        rc = xc__err(XC_ERR_NOMEM, "store server: out of memory");
        goto fail;
    }
    if (pipe2(s->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        rc = xc__err_errno("store server: pipe2");
        goto fail;
    }
    XC_CHECK_GOTO(open_listener(host, port, &s->lfd), rc, fail);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(s->lfd, (struct sockaddr *)&ss, &sl) != 0) {
        rc = xc__err_errno("store server: getsockname");
        goto fail;
    }
    int bound = ntohs(ss.ss_family == AF_INET6
                          ? ((struct sockaddr_in6 *)&ss)->sin6_port
                          : ((struct sockaddr_in *)&ss)->sin_port);
    /* The thread takes no asynchronous signals: they stay with the
     * application's threads (the mask is inherited at creation). */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int e = pthread_create(&s->thread, NULL, server_main, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (e != 0) {
        rc = xc__err(XC_ERR_SYSTEM, "store server: pthread_create: %s",
                     strerror(e));
        goto fail;
    }
    char where[NI_MAXHOST + 16];
    fmt_sockaddr((struct sockaddr *)&ss, sl, where, sizeof where);
    XC_INFO("store server listening on %s (%s)", where,
            s->auth.has_token ? "clients must prove the job token" : "unauthenticated");
    s->port = bound;
    if (port_out) *port_out = bound;
    live_count(s, 1);
    *out = s;
    return XC_OK;
fail:
    if (s->lfd >= 0) close(s->lfd);
    if (s->wake[0] >= 0) close(s->wake[0]);
    if (s->wake[1] >= 0) close(s->wake[1]);
    free(s->buckets);
    free(s);
    return rc;
}

/* Wake the server's thread with `b` (see server_main). */
static void wake(int fd, char b)
{
    ssize_t w;
    do {
        w = write(fd, &b, 1);
    } while (w < 0 && errno == EINTR);
    /* A full pipe (EAGAIN) holds a wake-up already: fine. */
}

void xc__store_server_stop(xc__store_server_t *s)
{
    if (!s) return;
    live_count(s, 0);
    wake(s->wake[1], 1);
    pthread_join(s->thread, NULL);
    server_free(s);
}

void xc__store_server_release(xc__store_server_t *s)
{
    if (!s) return;
    live_count(s, 0);
    pthread_mutex_lock(&g_rel_mu);
    s->released = 1;
    s->rel_next = g_released;
    g_released = s;
    pthread_mutex_unlock(&g_rel_mu);
    wake(s->wake[1], 2);
}

/* A released server on `port`: taken off the list and returned if it still
 * serves on the same listen host with the same token, else joined and freed
 * (NULL: the caller binds anew). */
static xc__store_server_t *take_back(const char *host, int port, const xc__auth_conf_t *auth)
{
    xc__store_server_t *found = NULL;
    pthread_mutex_lock(&g_rel_mu);
    for (xc__store_server_t **pp = &g_released; *pp; pp = &(*pp)->rel_next) {
        if ((*pp)->port != port) continue;
        found = *pp;
        *pp = found->rel_next;
        found->released = 0;
        break;
    }
    pthread_mutex_unlock(&g_rel_mu);
    if (!found) return NULL;
    int same = !found->ended && !strcmp(found->host, host ? host : "") &&
               found->auth.has_token == (auth && auth->has_token) &&
               (!found->auth.has_token ||
                !memcmp(found->auth.token, auth->token, sizeof auth->token));
    if (same) return found;
    if (found->ended) server_free(found); /* its thread is gone (detached) */
    else xc__store_server_stop(found);    /* another token or host */
    return NULL;
}

static void server_free(xc__store_server_t *s)
{
    for (size_t i = 0; i < s->nconns; ++i) conn_free(s->conns[i]);
    free(s->conns);
    free(s->pfds);
    table_free(s);
    if (s->lfd >= 0) close(s->lfd);
    close(s->wake[0]);
    close(s->wake[1]);
    explicit_bzero(&s->auth, sizeof s->auth);
    free(s);
}
