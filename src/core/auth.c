/*
 * auth.c -- the job token and the handshake that proves it on every
 * connection (auth.h has the wire format).  HMAC-SHA256 and the
 * constant-time comparison come from OpenSSL's libcrypto; nothing here is a
 * cryptographic primitive of our own.
 *
 * Invariants.
 *  - A handshake never accepts a message that is not exactly its fixed
 *    size, magic, version and kind, with zero reserved bytes.
 *  - Every nonce comes from getrandom(); failing to get one is an error,
 *    never a predictable nonce.
 *  - The token is never logged, printed or put in an error message.
 */
#include "auth.h"
#include "config.h"
#include "../transport/net.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#define LABEL "xcoll-auth-v1"
#define LABEL_LEN (sizeof LABEL - 1)
#define DIR_SERVER 0x53 /* 'S': the server's proof */
#define DIR_CLIENT 0x43 /* 'C': the client's proof */
#define TOKEN_FILE_MAX 4096

static atomic_uint g_rejections; /* relaxed: a statistic for messages */
static atomic_int g_said_open;   /* relaxed: log "unauthenticated" once */

/* ------------------------------------------------------------ the token */

static int hexval(int ch)
{
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

static int is_space(int ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r';
}

int xc__auth_parse_hex(const char *s, uint8_t out[XC__TOKEN_LEN])
{
    while (is_space((unsigned char)*s)) s++;
    for (int i = 0; i < XC__TOKEN_LEN; i++) {
        int hi = hexval((unsigned char)s[2 * i]);
        int lo = hi < 0 ? -1 : hexval((unsigned char)s[2 * i + 1]);
        if (hi < 0 || lo < 0) return -1;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    s += 2 * XC__TOKEN_LEN;
    while (is_space((unsigned char)*s)) s++;
    return *s ? -1 : 0;
}

/* The token in file `path`: the owner's alone (no group/other access). */
static xc_result_t token_from_file(const char *path, uint8_t out[XC__TOKEN_LEN])
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return xc__err(XC_ERR_INVALID, "XCOLL_TOKEN_FILE=\"%s\": cannot open: %s", path,
                       strerror(errno));
    xc_result_t rc = XC_OK;
    struct stat st;
    char buf[TOKEN_FILE_MAX + 1];
    ssize_t n = 0;
    if (fstat(fd, &st) != 0) {
        rc = xc__err(XC_ERR_INVALID, "XCOLL_TOKEN_FILE=\"%s\": fstat: %s", path, strerror(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = xc__err(XC_ERR_INVALID, "XCOLL_TOKEN_FILE=\"%s\" is not a regular file", path);
        goto out;
    }
    if (st.st_mode & (S_IRWXG | S_IRWXO)) {
        rc = xc__err(XC_ERR_INVALID,
                     "XCOLL_TOKEN_FILE=\"%s\" is accessible by group or others (mode %03o): "
                     "a token file must be mode 0600 (chmod 600)",
                     path, (unsigned)(st.st_mode & 0777));
        goto out;
    }
    for (;;) {
        ssize_t r = read(fd, buf + n, (size_t)(TOKEN_FILE_MAX - n));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            rc = xc__err(XC_ERR_INVALID, "XCOLL_TOKEN_FILE=\"%s\": read: %s", path,
                         strerror(errno));
            goto out;
        }
        if (r == 0 || (n += r) == TOKEN_FILE_MAX) break;
    }
    buf[n] = 0;
    if (xc__auth_parse_hex(buf, out) != 0)
        rc = xc__err(XC_ERR_INVALID,
                     "XCOLL_TOKEN_FILE=\"%s\": the file must hold exactly 64 hex digits "
                     "(a 256-bit token)",
                     path);
out:
    explicit_bzero(buf, sizeof buf);
    close(fd);
    return rc;
}

xc_result_t xc__auth_conf_env(xc__auth_conf_t *out)
{
    memset(out, 0, sizeof *out);
    long v = XC__AUTH_DEFAULT_MS;
    XC_CHECK(xc__env_int("XCOLL_HANDSHAKE_MS", 1, 600000, &v));
    out->handshake_ms = (int)v;
    long require = 0;
    XC_CHECK(xc__env_int("XCOLL_REQUIRE_TOKEN", 0, 1, &require));
    const char *hex = getenv("XCOLL_TOKEN"), *file = getenv("XCOLL_TOKEN_FILE");
    if (hex && !*hex) hex = NULL;
    if (file && !*file) file = NULL;
    if (hex && file)
        return xc__err(XC_ERR_INVALID,
                       "both XCOLL_TOKEN and XCOLL_TOKEN_FILE are set: give the token one way");
    if (hex) {
        if (xc__auth_parse_hex(hex, out->token) != 0) {
            memset(out, 0, sizeof *out);
            return xc__err(XC_ERR_INVALID,
                           "XCOLL_TOKEN is malformed: expected exactly 64 hex digits (a "
                           "256-bit token), got %zu characters",
                           strlen(hex));
        }
        out->has_token = 1;
    } else if (file) {
        xc_result_t rc = token_from_file(file, out->token);
        if (rc != XC_OK) {
            explicit_bzero(out->token, sizeof out->token);
            return rc;
        }
        out->has_token = 1;
    } else if (require) {
        return xc__err(XC_ERR_INVALID,
                       "XCOLL_REQUIRE_TOKEN=1 but no job token: set XCOLL_TOKEN (64 hex "
                       "digits) or XCOLL_TOKEN_FILE, or launch with xcoll-run");
    } else if (!atomic_exchange_explicit(&g_said_open, 1, memory_order_relaxed)) {
        XC_INFO("no job token (XCOLL_TOKEN / XCOLL_TOKEN_FILE): connections are not "
                "authenticated");
    }
    return XC_OK;
}

/* ------------------------------------------------------------ messages */

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (24 - 8 * i));
}
static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (56 - 8 * i));
}
static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static uint64_t get64(const uint8_t *p)
{
    return (uint64_t)get32(p) << 32 | get32(p + 4);
}

static void put_hdr(uint8_t *p, uint8_t kind)
{
    put32(p, XC__AUTH_MAGIC);
    p[4] = XC__AUTH_VERSION;
    p[5] = kind;
    p[6] = p[7] = 0;
}

static int hdr_ok(const uint8_t *p, uint8_t kind)
{
    return get32(p) == XC__AUTH_MAGIC && p[4] == XC__AUTH_VERSION && p[5] == kind && !p[6] &&
           !p[7];
}

int xc__auth_magic_prefix(const uint8_t *p, size_t n)
{
    uint8_t m[4];
    put32(m, XC__AUTH_MAGIC);
    return memcmp(p, m, n < 4 ? n : 4) == 0;
}

static xc_result_t nonce(uint8_t out[XC__AUTH_NONCE_LEN])
{
    size_t got = 0;
    while (got < XC__AUTH_NONCE_LEN) {
        ssize_t r = getrandom(out + got, XC__AUTH_NONCE_LEN - got, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return xc__err_errno("authentication: getrandom");
        got += (size_t)r;
    }
    return XC_OK;
}

/* HMAC(key, T(dir)), T as in auth.h. */
static int proof(const xc__auth_t *a, uint8_t dir, uint8_t mac[XC__AUTH_MAC_LEN])
{
    uint8_t t[LABEL_LEN + 1 + 8 + 4 + 4 + 2 * XC__AUTH_NONCE_LEN + 1], *p = t;
    memcpy(p, LABEL, LABEL_LEN), p += LABEL_LEN;
    *p++ = a->ctx.kind;
    put64(p, a->ctx.id), p += 8;
    put32(p, (uint32_t)a->ctx.client), p += 4;
    put32(p, (uint32_t)a->ctx.server), p += 4;
    memcpy(p, a->nc, XC__AUTH_NONCE_LEN), p += XC__AUTH_NONCE_LEN;
    memcpy(p, a->ns, XC__AUTH_NONCE_LEN), p += XC__AUTH_NONCE_LEN;
    *p++ = dir;
    unsigned len = 0;
    return HMAC(EVP_sha256(), a->key, XC__TOKEN_LEN, t, (size_t)(p - t), mac, &len) &&
                   len == XC__AUTH_MAC_LEN
               ? 0
               : -1;
}

static xc_result_t check_proof(const xc__auth_t *a, uint8_t dir, const uint8_t *mac,
                               const char **why)
{
    uint8_t want[XC__AUTH_MAC_LEN];
    if (proof(a, dir, want) != 0) {
        *why = "HMAC failed (libcrypto)";
        return XC_ERR_PROTOCOL;
    }
    int bad = CRYPTO_memcmp(want, mac, XC__AUTH_MAC_LEN);
    explicit_bzero(want, sizeof want);
    if (bad) {
        *why = "wrong token (the proof does not match; or a replayed handshake)";
        return XC_ERR_PROTOCOL;
    }
    return XC_OK;
}

xc_result_t xc__auth_client_hello(xc__auth_t *a, const xc__auth_conf_t *conf,
                                  const xc__auth_ctx_t *ctx, uint8_t msg1[XC__AUTH_MSG1_LEN])
{
    memset(a, 0, sizeof *a);
    a->ctx = *ctx;
    memcpy(a->key, conf->token, XC__TOKEN_LEN);
    XC_CHECK(nonce(a->nc));
    put_hdr(msg1, ctx->kind);
    put64(msg1 + 8, ctx->id);
    put32(msg1 + 16, (uint32_t)ctx->client);
    put32(msg1 + 20, (uint32_t)ctx->server);
    memcpy(msg1 + 24, a->nc, XC__AUTH_NONCE_LEN);
    return XC_OK;
}

xc_result_t xc__auth_client_finish(xc__auth_t *a, const uint8_t msg2[XC__AUTH_MSG2_LEN],
                                   uint8_t msg3[XC__AUTH_MSG3_LEN], const char **why)
{
    if (!hdr_ok(msg2, a->ctx.kind)) {
        *why = "bad frame (not an xcoll handshake answer)";
        return XC_ERR_PROTOCOL;
    }
    memcpy(a->ns, msg2 + XC__AUTH_HDR_LEN, XC__AUTH_NONCE_LEN);
    XC_CHECK(check_proof(a, DIR_SERVER, msg2 + XC__AUTH_HDR_LEN + XC__AUTH_NONCE_LEN, why));
    put_hdr(msg3, a->ctx.kind);
    if (proof(a, DIR_CLIENT, msg3 + XC__AUTH_HDR_LEN) != 0) {
        *why = "HMAC failed (libcrypto)";
        return XC_ERR_PROTOCOL;
    }
    return XC_OK;
}

xc_result_t xc__auth_server_reply(xc__auth_t *a, const xc__auth_conf_t *conf, uint8_t kind,
                                  const uint8_t msg1[XC__AUTH_MSG1_LEN],
                                  uint8_t msg2[XC__AUTH_MSG2_LEN], const char **why)
{
    memset(a, 0, sizeof *a);
    if (!hdr_ok(msg1, kind)) {
        *why = "bad frame (not an xcoll handshake of this kind)";
        return XC_ERR_PROTOCOL;
    }
    a->ctx.kind = kind;
    a->ctx.id = get64(msg1 + 8);
    a->ctx.client = (int32_t)get32(msg1 + 16);
    a->ctx.server = (int32_t)get32(msg1 + 20);
    memcpy(a->nc, msg1 + 24, XC__AUTH_NONCE_LEN);
    memcpy(a->key, conf->token, XC__TOKEN_LEN);
    if (nonce(a->ns) != XC_OK) {
        *why = "no random nonce (getrandom failed)";
        return XC_ERR_PROTOCOL;
    }
    put_hdr(msg2, kind);
    memcpy(msg2 + XC__AUTH_HDR_LEN, a->ns, XC__AUTH_NONCE_LEN);
    if (proof(a, DIR_SERVER, msg2 + XC__AUTH_HDR_LEN + XC__AUTH_NONCE_LEN) != 0) {
        *why = "HMAC failed (libcrypto)";
        return XC_ERR_PROTOCOL;
    }
    return XC_OK;
}

xc_result_t xc__auth_server_verify(const xc__auth_t *a, const uint8_t msg3[XC__AUTH_MSG3_LEN],
                                   const char **why)
{
    if (!hdr_ok(msg3, a->ctx.kind)) {
        *why = "bad frame (not an xcoll handshake proof)";
        return XC_ERR_PROTOCOL;
    }
    return check_proof(a, DIR_CLIENT, msg3 + XC__AUTH_HDR_LEN, why);
}

/* ------------------------------------------------------------ blocking client */

xc_result_t xc__auth_connect(int fd, const xc__auth_conf_t *conf, const xc__auth_ctx_t *ctx,
                             uint64_t deadline_ns, const char *peer)
{
    xc__auth_t a;
    uint8_t m1[XC__AUTH_MSG1_LEN], m2[XC__AUTH_MSG2_LEN], m3[XC__AUTH_MSG3_LEN];
    const char *why = "";
    xc_result_t rc = xc__auth_client_hello(&a, conf, ctx, m1);
    if (rc != XC_OK) goto out;
    rc = xc__send_all(fd, m1, sizeof m1, deadline_ns);
    if (rc == XC_OK) rc = xc__recv_all(fd, m2, sizeof m2, deadline_ns);
    if (rc == XC_ERR_TIMEOUT) {
        rc = xc__err(XC_ERR_TIMEOUT, "authentication with %s timed out (no answer to the "
                     "handshake)", peer);
        goto out;
    }
    if (rc != XC_OK && ctx->kind == XC__AUTH_STORE) {
        /* A store that accepted us and drops us at once holds no token:
         * one with a token answers every well-formed handshake. */
        rc = xc__err(XC_ERR_PROTOCOL, "authentication failed with %s: it closed the "
                     "connection during the handshake (it has no job token: check "
                     "XCOLL_TOKEN / XCOLL_TOKEN_FILE where it runs)", peer);
        goto out;
    }
    if (rc != XC_OK) {
        /* A rank may also have died: say both. */
        rc = xc__err(XC_ERR_PEER_LOST, "%s closed the connection during the authentication "
                     "handshake: it exited, or it has no job token (check XCOLL_TOKEN / "
                     "XCOLL_TOKEN_FILE)", peer);
        goto out;
    }
    if (xc__auth_client_finish(&a, m2, m3, &why) != XC_OK) {
        rc = xc__err(XC_ERR_PROTOCOL, "authentication failed with %s: %s (check "
                     "XCOLL_TOKEN / XCOLL_TOKEN_FILE: every rank needs the same token)",
                     peer, why);
        goto out;
    }
    rc = xc__send_all(fd, m3, sizeof m3, deadline_ns);
    if (rc != XC_OK)
        rc = xc__err(rc, "authentication with %s: sending the proof: %s", peer, xc__tls_error());
out:
    explicit_bzero(&a, sizeof a);
    return rc;
}

void xc__auth_reject(const char *who, const char *from, const char *why)
{
    int token = !strncmp(why, "no token", 8) || !strncmp(why, "wrong token", 11) ||
                !strncmp(why, "closed during", 13);
    if (token) atomic_fetch_add_explicit(&g_rejections, 1, memory_order_relaxed);
    XC_WARN("%s: rejected the connection from %s: %s", who, from, why);
}

unsigned xc__auth_rejections(void)
{
    return atomic_load_explicit(&g_rejections, memory_order_relaxed);
}

const char *xc__auth_hint(void)
{
    static _Thread_local char buf[200];
    unsigned n = xc__auth_rejections();
    if (!n) return "";
    snprintf(buf, sizeof buf,
             "; meanwhile this process rejected %u connection%s that failed authentication "
             "(a rank started with another XCOLL_TOKEN, or none?)",
             n, n == 1 ? "" : "s");
    return buf;
}
