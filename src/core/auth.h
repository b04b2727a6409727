/*
 * auth.h -- the job token and the mutual challenge-response that opens every
 * TCP connection of a job that has one (docs/fault-tolerance.md, "Secure
 * wire").  One piece of code for both kinds of connection: a rendezvous
 * store client to its server, and a rank to a rank.
 *
 * The token is 256 random bits shared by the ranks of a job (XCOLL_TOKEN as
 * 64 hex digits, or XCOLL_TOKEN_FILE naming a file of mode 0600 holding
 * them).  Three messages, fixed sizes, sent before anything else:
 *
 *   1. client -> server  HELLO  magic "XCA1" | version | kind | 0 | 0
 *                               | id u64 | client u32 | server u32 | nc[32]
 *   2. server -> client  PROOF  magic | version | kind | 0 | 0 | ns[32]
 *                               | HMAC(token, T(server))
 *   3. client -> server  PROOF  magic | version | kind | 0 | 0
 *                               | HMAC(token, T(client))
 *
 * where T(dir) = label "xcoll-auth-v1" | kind | id | client | server | nc |
 * ns | dir, every integer big-endian.  Fresh nonces on both sides defeat a
 * replayed handshake, the direction byte a reflected one, and the context
 * (kind, communicator id, both ranks) a handshake made for another
 * connection.  MACs are compared in constant time (CRYPTO_memcmp).
 *
 * The functions on messages are pure (buffers in, buffers out): the store
 * server drives them from its poll loop, the mesh from its own, and the
 * blocking client helper from a socket.  They set no thread-local error;
 * they return XC_OK or XC_ERR_PROTOCOL and a short reason.
 */
#ifndef XC_AUTH_H
#define XC_AUTH_H

#include "common.h"

#define XC__TOKEN_LEN 32
#define XC__AUTH_NONCE_LEN 32
#define XC__AUTH_MAC_LEN 32
#define XC__AUTH_HDR_LEN 8
#define XC__AUTH_MSG1_LEN (XC__AUTH_HDR_LEN + 16 + XC__AUTH_NONCE_LEN)                 /* 56 */
#define XC__AUTH_MSG2_LEN (XC__AUTH_HDR_LEN + XC__AUTH_NONCE_LEN + XC__AUTH_MAC_LEN)  /* 72 */
#define XC__AUTH_MSG3_LEN (XC__AUTH_HDR_LEN + XC__AUTH_MAC_LEN)                       /* 40 */
#define XC__AUTH_MAGIC 0x58434131u /* "XCA1" */
#define XC__AUTH_VERSION 1
#define XC__AUTH_DEFAULT_MS 5000

/* What a connection is for (part of the MAC'd context). */
enum { XC__AUTH_STORE = 1, XC__AUTH_MESH = 2 };

/* The job's wire security settings (part of xc__config_t). */
typedef struct xc__auth_conf {
    int has_token;    /* 0: connections are not authenticated */
    int handshake_ms; /* deadline of one handshake (XCOLL_HANDSHAKE_MS) */
    uint8_t token[XC__TOKEN_LEN];
} xc__auth_conf_t;

/* Read XCOLL_TOKEN, XCOLL_TOKEN_FILE, XCOLL_REQUIRE_TOKEN and
 * XCOLL_HANDSHAKE_MS.  XC_ERR_INVALID naming the variable when a token is
 * malformed, its file unreadable or readable by others, both variables are
 * set, or XCOLL_REQUIRE_TOKEN=1 and there is none.  Without a token, logs
 * once per process at INFO that the wire is unauthenticated. */
XC__HIDDEN xc_result_t xc__auth_conf_env(xc__auth_conf_t *out);

/* Parse 64 hex digits (surrounding whitespace allowed) into a token: 0, or
 * -1 if `s` is anything else. */
XC__HIDDEN int xc__auth_parse_hex(const char *s, uint8_t out[XC__TOKEN_LEN]);

/* The binding of one connection: kind, communicator id (0 for a store) and
 * the ranks of the two ends (-1 where unknown, e.g. a store client). */
typedef struct xc__auth_ctx {
    uint8_t kind;
    uint64_t id;
    int32_t client, server;
} xc__auth_ctx_t;

/* One side of one handshake. */
typedef struct xc__auth {
    xc__auth_ctx_t ctx;
    uint8_t key[XC__TOKEN_LEN];
    uint8_t nc[XC__AUTH_NONCE_LEN], ns[XC__AUTH_NONCE_LEN];
} xc__auth_t;

/* Client: draw a nonce and write message 1 for `ctx`. */
XC__HIDDEN xc_result_t xc__auth_client_hello(xc__auth_t *a, const xc__auth_conf_t *conf,
                                             const xc__auth_ctx_t *ctx,
                                             uint8_t msg1[XC__AUTH_MSG1_LEN]);
/* Client: check the server's proof in message 2 and write message 3.
 * XC_ERR_PROTOCOL with *why = "bad frame" or "wrong token" otherwise. */
XC__HIDDEN xc_result_t xc__auth_client_finish(xc__auth_t *a, const uint8_t msg2[XC__AUTH_MSG2_LEN],
                                              uint8_t msg3[XC__AUTH_MSG3_LEN], const char **why);
/* Server: parse message 1 (its context lands in a->ctx, which the caller
 * must check against what it expects before answering), draw a nonce and
 * write message 2.  XC_ERR_PROTOCOL ("bad frame") if malformed or of
 * another kind than `kind`. */
XC__HIDDEN xc_result_t xc__auth_server_reply(xc__auth_t *a, const xc__auth_conf_t *conf,
                                             uint8_t kind, const uint8_t msg1[XC__AUTH_MSG1_LEN],
                                             uint8_t msg2[XC__AUTH_MSG2_LEN], const char **why);
/* Server: check the client's proof in message 3. */
XC__HIDDEN xc_result_t xc__auth_server_verify(const xc__auth_t *a,
                                              const uint8_t msg3[XC__AUTH_MSG3_LEN],
                                              const char **why);
/* Do the first `n` (<= 4) bytes of `p` agree with the handshake's magic? */
XC__HIDDEN int xc__auth_magic_prefix(const uint8_t *p, size_t n);

/* Client side on a connected socket, before `deadline_ns` (the caller
 * caps it).  XC_ERR_PROTOCOL "authentication failed ..." when the peer's
 * proof is wrong (it holds another token) or a store closes the connection
 * during the handshake (it holds none); XC_ERR_PEER_LOST when a rank does
 * (it exited, or holds no token); XC_ERR_TIMEOUT.  Sets the thread-local
 * detail, naming `peer` (e.g. "the store at host:port", "rank 2 at ..."). */
XC__HIDDEN xc_result_t xc__auth_connect(int fd, const xc__auth_conf_t *conf,
                                        const xc__auth_ctx_t *ctx, uint64_t deadline_ns,
                                        const char *peer);

/* Record a rejected connection: a WARN naming `who` (the listener), `from`
 * (the peer's address) and `why`, which starts with the category: "no
 * token", "wrong token", "closed during the handshake", "bad frame" or
 * "timeout".  The first three count as token failures. */
XC__HIDDEN void xc__auth_reject(const char *who, const char *from, const char *why);
/* Connections this process rejected for a token failure (a hint in time-out
 * messages: a rank started with another token, or none). */
XC__HIDDEN unsigned xc__auth_rejections(void);
/* "" if there were none, else a sentence (starting "; ") saying how many,
 * to append to a time-out message (thread-local storage). */
XC__HIDDEN const char *xc__auth_hint(void);

#endif /* XC_AUTH_H */
