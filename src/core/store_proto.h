/*
 * store_proto.h -- the TCP rendezvous store's wire protocol, in the one place
 * that both ends include: the client (store_tcp.c) and the server
 * (store_server.c).  The protocol itself is described in docs/rendezvous.md.
 *
 * Invariants.
 *  - Every integer on the wire is big-endian; the put/get helpers below are
 *    the only code that converts, byte by byte, so host byte order and
 *    alignment never matter.
 *  - The hello (8 bytes) is `magic u32 | version u16 | word u16`: the client
 *    sends flags = 0 as the word, the server answers a STORE_HELLO_* status.
 *  - A request header and an answer header share one 8-byte layout,
 *    `code u8 | reserved u8 = 0 | keylen u16 | len u32`: the code is an
 *    opcode in a request and a status in an answer, whose keylen is 0.
 *  - When the server holds a job token, the connection opens with the
 *    handshake of auth.h (kind XC__AUTH_STORE, id 0, ranks -1) before the
 *    hello; a plain hello then gets STORE_HELLO_AUTH_REQUIRED and a close.
 *  - Parsing of what a peer sent is done by the pure functions at the end
 *    (store_proto.c), which the fuzzer (tests/fuzz/fuzz_store.c) drives.
 *  - Changing anything here changes the protocol: bump STORE_VERSION and
 *    update docs/rendezvous.md.
 */
#ifndef XC_STORE_PROTO_H
#define XC_STORE_PROTO_H

#include "common.h"

#include <stddef.h>
#include <stdint.h>

#define STORE_MAGIC 0x58435354u /* "XCST" */
#define STORE_VERSION 1
#define STORE_HELLO_LEN 8
#define STORE_HDR_LEN 8
#define STORE_MAX_KEY 512
#define STORE_MAX_VAL (1u << 20)
#define STORE_MAX_ERRMSG 4096 /* longest ERROR answer body */
#define STORE_TMO_LEN 4 /* GET/WAIT value: timeout_ms u32 */
#define STORE_WAIT_FOREVER 0xFFFFFFFFu /* ... meaning no timeout */
#define STORE_ADD_LEN 8 /* ADD value and OK body: i64 */

/* Request opcodes. */
enum { STORE_OP_SET = 1, STORE_OP_GET = 2, STORE_OP_ADD = 3, STORE_OP_WAIT = 4 };
/* Answer statuses. */
enum { STORE_ST_OK = 0, STORE_ST_ERR = 1, STORE_ST_TIMEOUT = 2 };
/* Status word of the server's hello. */
enum { STORE_HELLO_OK = 0, STORE_HELLO_BAD_VERSION = 1, STORE_HELLO_AUTH_REQUIRED = 2 };

/* ---- big-endian integers */

static inline void xc__store_put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}
static inline void xc__store_put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; ++i) p[i] = (uint8_t)(v >> (24 - 8 * i));
}
static inline void xc__store_put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; ++i) p[i] = (uint8_t)(v >> (56 - 8 * i));
}
static inline uint16_t xc__store_get_u16(const uint8_t *p)
{
    return (uint16_t)((p[0] << 8) | p[1]);
}
static inline uint32_t xc__store_get_u32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) |
           ((uint32_t)p[2] << 8) | p[3];
}
static inline uint64_t xc__store_get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
    return v;
}

/* ---- frames */

/* Hello: magic | STORE_VERSION | word (client: flags 0; server: status). */
static inline void xc__store_put_hello(uint8_t p[STORE_HELLO_LEN],
                                       uint16_t word)
{
    xc__store_put_u32(p, STORE_MAGIC);
    xc__store_put_u16(p + 4, STORE_VERSION);
    xc__store_put_u16(p + 6, word);
}

/* A request or answer header, decoded. */
struct xc__store_hdr {
    uint8_t code;     /* opcode (request) or status (answer) */
    uint8_t reserved; /* must be 0 */
    uint16_t keylen;  /* 0 in an answer */
    uint32_t len;     /* value (request) or body (answer) length */
};

static inline void xc__store_put_hdr(uint8_t p[STORE_HDR_LEN], uint8_t code,
                                     uint16_t keylen, uint32_t len)
{
    p[0] = code;
    p[1] = 0;
    xc__store_put_u16(p + 2, keylen);
    xc__store_put_u32(p + 4, len);
}

static inline struct xc__store_hdr xc__store_get_hdr(const uint8_t *p)
{
    struct xc__store_hdr h = {p[0], p[1], xc__store_get_u16(p + 2),
                              xc__store_get_u32(p + 4)};
    return h;
}

/* ---- parsing (store_proto.c) */

/* A client's hello at p[0..avail): 8 (its length) with *version set, 0 if
 * incomplete but plausible so far, -1 if not a hello (bad magic). */
XC__HIDDEN int xc__store_parse_hello(const uint8_t *p, size_t avail, uint16_t *version);

/* A request, located in the input buffer. */
struct xc__store_req {
    uint8_t op;
    uint16_t keylen;
    uint32_t vlen;
    const char *key;    /* keylen bytes, not NUL-terminated */
    const uint8_t *val; /* vlen bytes */
};
/* One request at p[0..avail): its total length (> 0) with *out filled, 0
 * if incomplete (the header so far is valid), -1 if malformed: unknown
 * opcode, nonzero reserved byte, empty or oversized key, value length not
 * the opcode's.  Never reads beyond avail. */
XC__HIDDEN long xc__store_parse_req(const uint8_t *p, size_t avail, struct xc__store_req *out);

/* Is an answer header (client side) well-formed: known status, zero
 * reserved and keylen, length within the status's bound? */
XC__HIDDEN int xc__store_ans_ok(const struct xc__store_hdr *h);

#endif /* XC_STORE_PROTO_H */
