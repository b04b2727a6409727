/*
 * store_proto.c -- parsing what a peer of the rendezvous store sent: the
 * client's hello and requests (server side), the server's answer headers
 * (client side).  Pure functions over byte buffers, so that the server's
 * poll loop, the client and the fuzzer (tests/fuzz/fuzz_store.c) share one
 * definition of "well-formed" (store_proto.h).
 */
#include "store_proto.h"

#include <string.h>

int xc__store_parse_hello(const uint8_t *p, size_t avail, uint16_t *version)
{
    uint8_t magic[4];
    xc__store_put_u32(magic, STORE_MAGIC);
    if (memcmp(p, magic, XC__MIN(avail, sizeof magic)) != 0) return -1;
    if (avail < STORE_HELLO_LEN) return 0;
    *version = xc__store_get_u16(p + 4);
    return STORE_HELLO_LEN;
}

long xc__store_parse_req(const uint8_t *p, size_t avail, struct xc__store_req *out)
{
    if (avail < STORE_HDR_LEN) return 0;
    struct xc__store_hdr h = xc__store_get_hdr(p);
    int ok = h.reserved == 0 && h.keylen >= 1 && h.keylen <= STORE_MAX_KEY;
    switch (h.code) {
    case STORE_OP_SET: ok = ok && h.len <= STORE_MAX_VAL; break;
    case STORE_OP_GET:
    case STORE_OP_WAIT: ok = ok && h.len == STORE_TMO_LEN; break;
    case STORE_OP_ADD: ok = ok && h.len == STORE_ADD_LEN; break;
    default: ok = 0;
    }
    if (!ok) return -1;
    size_t need = STORE_HDR_LEN + (size_t)h.keylen + h.len;
    if (avail < need) return 0;
    out->op = h.code;
    out->keylen = h.keylen;
    out->vlen = h.len;
    out->key = (const char *)p + STORE_HDR_LEN;
    out->val = p + STORE_HDR_LEN + h.keylen;
    return (long)need;
}

int xc__store_ans_ok(const struct xc__store_hdr *h)
{
    uint32_t maxlen = h->code == STORE_ST_OK    ? STORE_MAX_VAL
                      : h->code == STORE_ST_ERR ? STORE_MAX_ERRMSG
                                                : 0;
    return h->code <= STORE_ST_TIMEOUT && !h->reserved && !h->keylen && h->len <= maxlen;
}
