/*
 * codec.h -- the wire formats of compressed collectives (docs/compression.md):
 * blocks of XC_COMPRESS_BLOCK fp32 values encoded as fp16, bf16 (2 bytes
 * each, rounded to nearest even), INT8 (1 byte each, symmetric: one fp32
 * scale per block = max|x| / 127, codes round(x / scale) in [-127, 127])
 * or INT4 (the same with 7 for 127: codes in [-7, 7], two per byte: value
 * j in the low nibble of byte j, value j + n/2 (n/2 rounded down) in its
 * high nibble, an odd last value alone in the low nibble of byte n/2).
 *
 * Error of one encode/decode, per element of a block whose largest
 * magnitude is m: INT8 <= m/254 (half a step), INT4 <= m/14, up to fp32
 * rounding of the product (relative 2^-24), plus Q x 2^-150 (Q = 127 or
 * 7) when the scale m/Q is an fp32 subnormal; fp16 <= 2^-11 |x| in its normal range (|x| >= 2^-14),
 * <= 2^-25 below it, infinity above 65504; bf16 <= 2^-8 |x| + 2^-134 (half
 * its smallest subnormal step).
 * Non-finite values: an INT8 or INT4 block holding a NaN or an infinity is sent
 * with a NaN scale and decodes to NaN in every element (a diverged step
 * stays visible); fp16/bf16 carry NaN and infinities element by element.
 * Decoding is deterministic: every rank decoding the same bytes gets the
 * same bits.
 */
#ifndef XC_COMPRESS_CODEC_H
#define XC_COMPRESS_CODEC_H

#include "../core/common.h"

/* Bytes of the codes of one whole block of format f; 0 for an unknown one
 * (a short last block takes less, always within this). */
XC__HIDDEN size_t xc__codec_block_bytes(xc_compress_t f);

/* Formats with an fp32 scale per block (INT8, INT4). */
static inline int xc__codec_scaled(xc_compress_t f)
{
    return f == XC_COMPRESS_INT8 || f == XC_COMPRESS_INT4;
}

/* Encode n <= XC_COMPRESS_BLOCK values of `src` into `codes` (n codes);
 * INT8 and INT4 also write *scale.  With `err` (may alias nothing else), store
 * src - decode(codes) there: the error feedback's residual. */
XC__HIDDEN void xc__codec_encode(xc_compress_t f, const float *src, size_t n, void *codes,
                                 float *scale, float *err);

/* Decode n codes into `dst` (add: dst += decoded, in fp32). */
XC__HIDDEN void xc__codec_decode(xc_compress_t f, const void *codes, float scale, size_t n,
                                 float *dst, int add);

/* Pipeline chunks of the compressed collectives: while chunk c's
 * all-to-all is on the wire, chunk c+1 is encoded and chunk c-1 decoded,
 * so a call costs about one chunk more than its slower side.  Blocks per
 * chunk for a vector of nb blocks: one chunk up to 1 MiB of fp32 (no
 * agreement, two collectives); beyond, about 8 chunks (the fill and drain
 * one eighth), at least 512 blocks (128 Ki values: below, the collectives'
 * per-call cost outweighs the pipelining -- measured: 128-block chunks
 * halved INT8's speed-up at 1 MiB on a 1 Gbit/s link) and at most
 * XC__COMPRESS_CHUNK_BLOCKS (1 MiB of fp32).  A function of the count alone: every rank cuts alike. */
#define XC__COMPRESS_CHUNK_BLOCKS ((size_t)1024)
static inline size_t xc__compress_chunk(size_t nb)
{
    if (nb <= XC__COMPRESS_CHUNK_BLOCKS) return XC__COMPRESS_CHUNK_BLOCKS; /* one chunk */
    size_t c = (nb + 7) / 8;
    if (c < 512) c = 512;
    return c < XC__COMPRESS_CHUNK_BLOCKS ? c : XC__COMPRESS_CHUNK_BLOCKS;
}

/* Bytes of one segment (a slice of at most `maxnb` blocks, padded) on the
 * wire: an 8-byte header, INT8's / INT4's fp32 scales, the codes; 8-aligned. */
static inline size_t xc__compress_seg_bytes(xc_compress_t f, size_t maxnb)
{
    size_t seg = 8 + maxnb * ((xc__codec_scaled(f) ? sizeof(float) : 0) +
                              xc__codec_block_bytes(f));
    return (seg + 7) & ~(size_t)7;
}

#endif
