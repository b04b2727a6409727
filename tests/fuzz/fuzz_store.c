/*
 * fuzz_store.c -- libFuzzer harness for the rendezvous store's parsers
 * (src/core/store_proto.c): the input is a client's byte stream, parsed as
 * the server does (hello, then requests one after the other, each within
 * the bytes available), and every 8-byte window is also checked as an
 * answer header, as the client does.  Nothing may crash or read beyond the
 * input (ASan), and whatever is accepted must respect the protocol's bounds
 * (docs/rendezvous.md).  Build and run: tests/fuzz/run.sh.
 */
#include "core/store_proto.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* Copy into an exact-size heap buffer so that ASan sees any overread. */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    size_t off = 0;
    uint16_t ver = 0;
    int hl = xc__store_parse_hello(buf, size, &ver);
    if (hl > 0) {
        off = (size_t)hl;
        for (;;) {
            struct xc__store_req rq;
            long n = xc__store_parse_req(buf + off, size - off, &rq);
            if (n <= 0) break;
            if ((size_t)n > size - off) abort();
            if (rq.keylen < 1 || rq.keylen > STORE_MAX_KEY) abort();
            if (rq.op == STORE_OP_SET && rq.vlen > STORE_MAX_VAL) abort();
            if ((rq.op == STORE_OP_GET || rq.op == STORE_OP_WAIT) && rq.vlen != STORE_TMO_LEN)
                abort();
            if (rq.op == STORE_OP_ADD && rq.vlen != STORE_ADD_LEN) abort();
            if (rq.op < STORE_OP_SET || rq.op > STORE_OP_WAIT) abort();
            /* touch the key and value: in bounds */
            volatile uint8_t sink = 0;
            for (uint16_t i = 0; i < rq.keylen; i++) sink ^= (uint8_t)rq.key[i];
            for (uint32_t i = 0; i < rq.vlen; i++) sink ^= rq.val[i];
            (void)sink;
            off += (size_t)n;
        }
    }
    for (size_t i = 0; i + STORE_HDR_LEN <= size && i < 64; i++) {
        struct xc__store_hdr h = xc__store_get_hdr(buf + i);
        if (xc__store_ans_ok(&h) &&
            (h.code > STORE_ST_TIMEOUT || h.len > STORE_MAX_VAL || h.keylen))
            abort();
    }
    free(buf);
    return 0;
}
