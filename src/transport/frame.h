/*
 * frame.h -- the fixed header in front of every message on a connection.
 *
 * Every frame names its communicator, its sequence number and a full
 * description of the operation it belongs to, so that the receiver checks it
 * against what it expects and turns any disagreement between ranks into
 * XC_ERR_MISMATCH instead of corrupted memory.  Fields are in host byte order
 * (little-endian on every platform xcoll supports); the magic number makes a
 * foreign or desynchronised stream fail fast with XC_ERR_PROTOCOL.
 */
#ifndef XC_FRAME_H
#define XC_FRAME_H

#include <stdint.h>

#define XC__FRAME_MAGIC 0x31464358u /* "XCF1" */

enum xc__frame_kind {
    XC__F_COLL = 1,  /* data of a collective, matched in FIFO per peer      */
    XC__F_P2P = 2,   /* point-to-point, matched by (peer, tag)             */
    XC__F_ERROR = 3, /* payload: int32 code + text; poisons the receiver   */
    XC__F_BYE = 4,   /* the sender destroyed the communicator (graceful)   */
    XC__F_HELLO = 5, /* connection set-up (bootstrap only)                 */
    XC__F_ACK = 6,   /* a single-copy point-to-point message was read: seq */
    XC__F_BEAT = 7,  /* heartbeat: no payload; says only "alive"           */
    XC__F_SHRINK = 8 /* xc_comm_shrink: seq = shrink number << 32 | round,
                      * count = sender's communicator size, root = the
                      * code it failed with, payload = its
                      * new listening address, CPU mask and failed-rank
                      * bitmap (shrink.c)                                  */
};

/* hdr.flags */
enum {
    /* Rendezvous between ranks of one node: the payload is {u64 address,
     * u64 bytes, u64 id} of the sender's buffer, which the receiver reads
     * itself (process_vm_readv) and acknowledges with XC__F_ACK (seq = id). */
    XC__FL_RNDV = 1
};

typedef struct xc__hdr {
    uint32_t magic;
    uint8_t kind;     /* enum xc__frame_kind */
    uint8_t coll;     /* xc_coll_t           */
    uint8_t dtype;    /* xc_dtype_t          */
    uint8_t op;       /* xc_op_t             */
    uint32_t comm_tag; /* low 32 bits of the communicator's unique id */
    int32_t root;
    uint16_t algo;
    uint16_t flags;
    int32_t tag;      /* p2p tag; sender's rank for HELLO */
    uint64_t seq;     /* collective sequence number (1, 2, ...) */
    uint64_t count;   /* element count of the whole operation */
    uint64_t len;     /* payload bytes following the header */
} xc__hdr_t;

_Static_assert(sizeof(xc__hdr_t) == 48, "frame header must be 48 bytes");

/* Bounds a frame header must respect (frame.c). */
#define XC__FRAME_MAX_LEN (1ull << 47) /* no buffer is 128 TiB */
#define XC__FRAME_MAX_ERROR 4096       /* int32 code + message */
#define XC__FRAME_RNDV_LEN 24          /* {address, bytes, id} */
/* SHRINK: {sockaddr_storage, 16 x u64 CPU mask} then a bitmap of at most
 * 2^20 ranks (the receiver checks the exact length for its size). */
#define XC__FRAME_SHRINK_FIXED 256
#define XC__FRAME_SHRINK_MAX_RANKS (1u << 20)
#define XC__FRAME_MAX_SHRINK (XC__FRAME_SHRINK_FIXED + XC__FRAME_SHRINK_MAX_RANKS / 8)

/* Check a received header after the connection was set up: magic, the
 * communicator's tag, a kind that may travel then (not HELLO), known flags,
 * and a payload length within its kind's bounds.  NULL if acceptable, else
 * what is wrong.  Pure (the fuzzer, tests/fuzz/fuzz_frame.c, drives it);
 * matching against posted operations is match.c's job. */
const char *xc__frame_check(const xc__hdr_t *h, uint32_t comm_tag)
    __attribute__((visibility("hidden")));

#endif
