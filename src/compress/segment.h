/*
 * segment.h -- what the compressed collectives put on the wire, shared by
 * the all-reduce (allreduce_compressed.c) and the reduce-scatter
 * (reduce_scatter_compressed.c); docs/compression.md.
 *
 * A segment carries blocks [b0, b1) of one vector of `count` values: an
 * 8-byte header (magic, the collective, format, dtype, op, a flag; the low
 * 32 bits of count), INT8's / INT4's fp32 scales (room for `maxnb`
 * blocks), then the codes, padded to xc__compress_seg_bytes(f, maxnb) so
 * that every segment of a collective has the same size.  The header makes
 * ranks that disagree on the collective, format, dtype, op or count fail
 * with XC_ERR_MISMATCH.
 */
#ifndef XC_COMPRESS_SEGMENT_H
#define XC_COMPRESS_SEGMENT_H

#include "codec.h"

enum { XC__CSEG_ALLREDUCE = 1, XC__CSEG_REDUCE_SCATTER = 2 };
#define XC__CSEG_FLAG_MISMATCH 1u /* the sender saw a foreign header */

/* Layout of the segments of one pipeline chunk. */
typedef struct xc__cseg {
    xc_compress_t f;
    int kind;      /* XC__CSEG_* */
    xc_dtype_t dtype; /* of the callers' buffers (the wire is fp32-coded) */
    xc_op_t op;
    size_t count;  /* values of the vector the blocks index */
    size_t maxnb;  /* blocks a segment has room for */
    size_t bb;     /* bytes of the codes of a whole block */
    size_t seg;    /* bytes of one padded segment */
} xc__cseg_t;

XC__HIDDEN xc__cseg_t xc__cseg_make(xc_compress_t f, int kind, xc_dtype_t dtype, xc_op_t op,
                                    size_t count, size_t maxnb);

/* Elements [*e0, *e1) of blocks [b0, b1) of the vector. */
XC__HIDDEN void xc__cseg_elems(const xc__cseg_t *p, size_t b0, size_t b1, size_t *e0, size_t *e1);

/* Encode blocks [b0, b1) of `src` (the vector) into `seg` with header
 * flags `flags`; with `res` (same indexing) add it first and keep the new
 * error there.  tmp: XC_COMPRESS_BLOCK floats of scratch. */
XC__HIDDEN void xc__cseg_encode(const xc__cseg_t *p, const float *src, float *res, size_t b0,
                                size_t b1, char *seg, float *tmp, uint32_t flags);

/* Decode `seg` (blocks [b0, b1)) into dst (the vector); add: dst += . */
XC__HIDDEN void xc__cseg_decode(const xc__cseg_t *p, const char *seg, size_t b0, size_t b1,
                                float *dst, int add);

/* Is `seg`'s header this layout's (flags aside)?  Its flags in *flags. */
XC__HIDDEN int xc__cseg_check(const xc__cseg_t *p, const char *seg, uint32_t *flags);

/* Arguments of a compressed collective of `count` values (fn names it). */
XC__HIDDEN xc_result_t xc__compress_check_args(const char *fn, const void *sendbuf,
                                               const void *recvbuf, size_t count,
                                               xc_dtype_t dtype, xc_op_t op, xc_compress_t fmt,
                                               const xc_comm_t *comm);

/* Ranks agree on count, format, dtype and op before a pipeline of several
 * chunks (a rank with another count would issue another number of
 * collectives, and the surplus could only end at the deadline). */
XC__HIDDEN xc_result_t xc__compress_agree(const char *fn, size_t count, xc_compress_t fmt,
                                          xc_dtype_t dtype, xc_op_t op, xc_comm_t *comm);

/* The result of a compressed collective: XC_ERR_MISMATCH naming the rank
 * whose header differed (mismatch_rank >= 0), or rc with the
 * communicator's message, or XC_OK. */
XC__HIDDEN xc_result_t xc__compress_result(const char *fn, xc_result_t rc, int mismatch_rank,
                                           xc_compress_t fmt, size_t count, xc_comm_t *comm);

/* n values of dtype (fp32, fp16, bf16) to fp32 and back. */
XC__HIDDEN void xc__compress_widen(float *dst, const void *src, size_t n, xc_dtype_t dtype);
XC__HIDDEN void xc__compress_narrow(void *dst, const float *src, size_t n, xc_dtype_t dtype);

/* The residual's values (sender side first, then reducer side). */
XC__HIDDEN float *xc__residual_values(xc_residual_t *r);
XC__HIDDEN size_t xc__residual_count(const xc_residual_t *r);

#endif
