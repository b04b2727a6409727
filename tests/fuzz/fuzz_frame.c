/*
 * fuzz_frame.c -- libFuzzer harness for what a rank accepts from a peer's
 * connection before any collective runs: the frame header check
 * (xc__frame_check, src/transport/frame.c) and the mesh's handshake
 * messages (src/core/auth.c: a server parsing message 1 and checking
 * message 3, a client checking message 2).  The input is cut into those
 * messages; nothing may crash, read out of bounds or leak (ASan), and a
 * forged proof must never be accepted.  Build and run: tests/fuzz/run.sh.
 */
#include "core/auth.h"
#include "transport/frame.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A header: the first 48 bytes (zero-padded), against the tag that
     * the next 4 bytes give, or the header's own. */
    xc__hdr_t h;
    memset(&h, 0, sizeof h);
    memcpy(&h, data, size < sizeof h ? size : sizeof h);
    uint32_t tag = h.comm_tag;
    if (size >= sizeof h + 4) memcpy(&tag, data + sizeof h, 4);
    const char *bad = xc__frame_check(&h, tag);
    if (!bad) {
        /* What the check lets through respects the documented bounds. */
        if (h.magic != XC__FRAME_MAGIC || h.len > XC__FRAME_MAX_LEN) abort();
        if (h.kind == XC__F_HELLO) abort();
        if ((h.kind == XC__F_BYE || h.kind == XC__F_ACK || h.kind == XC__F_BEAT) && h.len) abort();
        if (h.kind == XC__F_ERROR && (h.len < 4 || h.len > XC__FRAME_MAX_ERROR)) abort();
        if (h.kind == XC__F_SHRINK &&
            (h.flags || h.len <= XC__FRAME_SHRINK_FIXED || h.len > XC__FRAME_MAX_SHRINK))
            abort();
    }

    /* The handshake, with a fixed key: the input plays the peer. */
    static const xc__auth_conf_t conf = {.has_token = 1, .handshake_ms = 1000,
                                         .token = {1, 2, 3, 4, 5, 6, 7, 8}};
    const char *why = "";
    uint8_t m1[XC__AUTH_MSG1_LEN] = {0}, m2[XC__AUTH_MSG2_LEN], m3[XC__AUTH_MSG3_LEN] = {0};
    memcpy(m1, data, size < sizeof m1 ? size : sizeof m1);
    if (size > sizeof m1) {
        size_t rest = size - sizeof m1;
        memcpy(m3, data + sizeof m1, rest < sizeof m3 ? rest : sizeof m3);
    }
    xc__auth_t srv;
    if (xc__auth_server_reply(&srv, &conf, XC__AUTH_MESH, m1, m2, &why) == XC_OK) {
        /* Without the key, a proof made of the input is never right (the
         * input would have to predict our fresh nonce's MAC). */
        if (xc__auth_server_verify(&srv, m3, &why) == XC_OK) abort();
    }
    /* A client receiving the input as the server's answer. */
    xc__auth_t cl;
    xc__auth_ctx_t ctx = {.kind = XC__AUTH_MESH, .id = 7, .client = 1, .server = 0};
    uint8_t my1[XC__AUTH_MSG1_LEN], in2[XC__AUTH_MSG2_LEN] = {0}, out3[XC__AUTH_MSG3_LEN];
    memcpy(in2, data, size < sizeof in2 ? size : sizeof in2);
    if (xc__auth_client_hello(&cl, &conf, &ctx, my1) == XC_OK &&
        xc__auth_client_finish(&cl, in2, out3, &why) == XC_OK)
        abort();
    return 0;
}
