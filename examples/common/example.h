/*
 * example.h -- what the parallel training examples share (header-only, so
 * that each example still builds from its one .c file): failing on an
 * xcoll error, a clock, a deterministic value stream, the order
 * statistics of stats.h, and the bytes a communicator has sent.
 */
#ifndef XCOLL_EXAMPLE_H
#define XCOLL_EXAMPLE_H

#include <xcoll.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "stats.h"

/* The example's name, for messages (each example defines it). */
extern const char *example_name;

#define CHECK(call)                                                                       \
    do {                                                                                  \
        xc_result_t rc_ = (call);                                                         \
        if (rc_ != XC_OK) {                                                               \
            fprintf(stderr, "%s: %s failed: %s: %s\n", example_name, #call,               \
                    xc_err_name(rc_), xc_last_error());                                   \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

static inline double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Element i of stream s of `seed`, uniform in [-scale, scale): every rank
 * and the one-process twin draw the same values. */
static inline float val(uint64_t seed, uint64_t s, uint64_t i, float scale)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull ^ (s << 40) ^ i;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return (float)((double)(x >> 11) * 0x1p-53 * 2 - 1) * scale;
}

/* Rows [r0, r0 + n) of step s's batch of `batch` rows of width H: inputs
 * X in [-1, 1), targets T in [-0.5, 0.5). */
static inline void batch_rows(uint64_t seed, int s, int batch, int r0, int n, int H, float *X,
                              float *T)
{
    for (int r = 0; r < n; r++)
        for (int k = 0; k < H; k++) {
            uint64_t i = ((uint64_t)s * (uint64_t)batch + (uint64_t)(r0 + r)) * (uint64_t)H + (uint64_t)k;
            X[(size_t)r * H + k] = val(seed, 1000, i, 1.0f);
            T[(size_t)r * H + k] = val(seed, 1001, i, 0.5f);
        }
}

/* A communication buffer, zero-filled: from xc_mem_alloc (2 MiB-aligned,
 * huge pages from 1 MiB, the faster kind for collectives: xcoll.h), or
 * with `plain` from calloc (to compare). */
static inline void *comm_alloc(size_t bytes, int plain)
{
    void *p = NULL;
    if (plain) {
        p = calloc(bytes ? bytes : 1, 1);
        if (!p) {
            fprintf(stderr, "%s: out of memory (%zu bytes)\n", example_name, bytes);
            exit(1);
        }
    } else {
        CHECK(xc_mem_alloc(bytes ? bytes : 1, &p));
    }
    return p;
}
static inline void comm_free(void *p, int plain)
{
    if (plain) free(p);
    else CHECK(xc_mem_free(p));
}

/* Payload bytes `c` has sent so far, over every transport. */
static inline uint64_t bytes_sent(xc_comm_t *c)
{
    xc_stats_t st = {.size = sizeof st};
    CHECK(xc_comm_stats(c, &st));
    uint64_t b = 0;
    for (int t = 0; t < XC_TRANSPORT_COUNT; t++) b += st.bytes_sent[t];
    return b;
}

#endif
