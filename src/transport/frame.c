/*
 * frame.c -- validation of a frame header read from a peer, before anything
 * is done with it (frame.h).  One function, so that the stream reader and
 * the fuzzer agree on what a well-formed header is.
 */
#include "frame.h"

#include <stddef.h>

const char *xc__frame_check(const xc__hdr_t *h, uint32_t comm_tag)
{
    if (h->magic != XC__FRAME_MAGIC) return "bad magic (foreign or desynchronised stream)";
    if (h->comm_tag != comm_tag) return "another communicator's id";
    if (h->flags & ~(uint16_t)XC__FL_RNDV) return "unknown flags";
    if (h->len > XC__FRAME_MAX_LEN) return "absurd payload length";
    switch (h->kind) {
    case XC__F_COLL:
    case XC__F_P2P:
        if ((h->flags & XC__FL_RNDV) && h->len != XC__FRAME_RNDV_LEN)
            return "single-copy frame of the wrong length";
        return NULL;
    case XC__F_ERROR:
        if (h->flags) return "error frame with flags";
        if (h->len < sizeof(int32_t) || h->len > XC__FRAME_MAX_ERROR)
            return "error frame of a bad length";
        return NULL;
    case XC__F_SHRINK:
        if (h->flags) return "shrink frame with flags";
        if (h->len <= XC__FRAME_SHRINK_FIXED || h->len > XC__FRAME_MAX_SHRINK)
            return "shrink frame of a bad length";
        return NULL;
    case XC__F_BYE:
    case XC__F_ACK:
    case XC__F_BEAT:
        if (h->flags || h->len) return "control frame with flags or a payload";
        return NULL;
    default:
        return "unknown or out-of-place kind";
    }
}
