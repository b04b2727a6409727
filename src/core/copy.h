/*
 * copy.h -- the library's copy of message bytes (docs/shm.md, "Copying
 * bytes").
 *
 * glibc's memcpy (2.36, Debian 12) moves 2 KiB-512 KiB with `rep movsb`,
 * and on the AMD EPYC (Zen 4) VM that instruction runs ~20x slower when
 * the destination sits 1-31 bytes past the source's place in a 64-byte
 * line (((dst - src) mod 64) in 1..31): 32 KiB hot in cache 2 GB/s
 * against 36-43, and 2-3 GB/s against 13-21 where the source was just
 * written by the other core or the destination just read by it; 32-63
 * bytes past, up to 1.6x slower hot (24 against 39).  A rank's block of a
 * collective lands at `rank x count x element size` in the user's buffer,
 * and a chunk's share of a slot at `share x element size`, so odd counts
 * and views that start off a line put copies there: a 4-rank all-gather
 * of 8192 floats into a buffer 16 bytes off a line took 205-231 us
 * against 34-50 (bench/RESULTS.md, fifty-fifth session).  Every copy off
 * the source's place in a line takes a vector loop instead (unaligned
 * loads, aligned stores): level with glibc's best in all those cases;
 * the rest stays glibc's.
 */
#ifndef XC_COPY_H
#define XC_COPY_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Below this glibc copies with vector moves at any offset. */
#define XC__COPY_LOOP_MIN ((size_t)2048)
/* Above this the copy stays glibc's: its `rep movsb` stops at the L2
 * cache's size on AMD (512 KiB on the VM; a CPU with a larger L2 keeps
 * it longer), and past it glibc's vector loop is ~10 % faster than this
 * one (1 MiB hot: 32-38 against 30-33 GB/s). */
#define XC__COPY_LOOP_MAX ((size_t)1 << 20)

/* The vector loop (copy.c); xc__copy decides when. */
__attribute__((visibility("hidden"))) void xc__copy_loop(void *dst, const void *src, size_t n);
/* Non-temporal stores for the destination's whole lines, ordinary ones
 * for its unaligned head and the tail, then a fence (a release store
 * that publishes the bytes comes after every one of them): the slot
 * writes' other way (transport/wcopy.c).  memcpy off x86-64. */
__attribute__((visibility("hidden"))) void xc__copy_nt(void *dst, const void *src, size_t n);

/* Does a copy of `n` bytes from `src` to `dst` take the loop? */
static inline int xc__copy_shifted(const void *dst, const void *src, size_t n)
{
    size_t d = (size_t)(((uintptr_t)dst - (uintptr_t)src) & 63);
    return n >= XC__COPY_LOOP_MIN && n <= XC__COPY_LOOP_MAX && d != 0;
}

/* memcpy's contract (no overlap), without its slow offsets. */
static inline void xc__copy(void *dst, const void *src, size_t n)
{
    if (xc__copy_shifted(dst, src, n)) xc__copy_loop(dst, src, n);
    else memcpy(dst, src, n);
}

/* memmove's contract: xc__copy where the two do not overlap. */
static inline void xc__move(void *dst, const void *src, size_t n)
{
    uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
    if (d + n <= s || s + n <= d) xc__copy(dst, src, n);
    else memmove(dst, src, n);
}

#endif
