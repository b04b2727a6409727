/*
 * alltoall_bruck.c -- Bruck's all-to-all for small blocks: ceil(log2 N)
 * rounds instead of N-1 messages, at the price of sending each block up to
 * log2 N times and packing.
 *
 * Rank r first rotates its input into a buffer W, W[i] = its block for
 * rank r+i.  In the round of distance d = 1, 2, 4, ... it packs every W[i]
 * with bit d set, sends the pack to rank r+d, receives rank (r-d)'s pack
 * and unpacks it into the same positions.  A block that starts at position
 * i on rank q moves by the sum of the set bits of i = i, so it ends on rank
 * q+i, still at position i: afterwards W[i] holds the block of rank r-i for
 * r, and the final copy recvbuf[r-i] = W[i] undoes the rotation.  Within a
 * round the unpack runs before the next round's pack, which reads blocks
 * just received.  In place works because the input is read into W first.
 *
 * Rounds: ceil(log2 N) (+ local packing).
 * Cost per rank (b = block bytes, K = ceil(log2 N)):
 *   K·α + (about N/2)·K·bβ, plus local copies of about (2 + K)·N·b bytes
 * Scratch: N·b + 2·(N/2)·b bytes.
 */
#include "algos.h"

/* Number of i in [0, n) with bit d set. */
static int nset(int n, int d)
{
    int c = 0;
    for (int i = d; i < n; i++) c += (i & d) != 0;
    return c;
}

/* Copy every W[i] with bit d set to consecutive slots of pk (or back). */
static void pack(xc__sched_t *s, char *w, char *pk, int n, int d, size_t bb, int unpack)
{
    size_t j = 0;
    for (int i = d; i < n; i++) {
        if (!(i & d)) continue;
        if (unpack)
            xc__sched_copy(s, w + (size_t)i * bb, pk + j * bb, bb);
        else
            xc__sched_copy(s, pk + j * bb, w + (size_t)i * bb, bb);
        j++;
    }
}

xc_result_t xc__build_alltoall_bruck(xc_comm_t *comm, xc__op_t *op, const xc__args_t *a)
{
    xc__sched_t *s = &op->sched;
    int n = comm->size, r = comm->rank;
    size_t bb = a->count * xc__dtype_size(a->dtype);
    const char *in = a->sbuf;
    char *out = a->rbuf;
    if (n == 1) {
        xc__sched_copy(s, out, in, bb);
        xc__sched_round(s);
        return XC_OK;
    }
    size_t half = (size_t)(n / 2); /* at most n/2 positions have a given bit set */
    char *w = xc__sched_scratch(s, ((size_t)n + 2 * half) * bb);
    char *pk = w ? w + (size_t)n * bb : NULL, *rpk = pk ? pk + half * bb : NULL;
    /* W[i] = in[(r+i) mod N]. */
    size_t head = (size_t)(n - r) * bb;
    xc__sched_copy(s, w, in + (size_t)r * bb, head);
    xc__sched_copy(s, w + head, in, (size_t)r * bb);
    pack(s, w, pk, n, 1, bb, 0);
    xc__sched_round(s);
    for (int d = 1; d < n; d <<= 1) {
        size_t bytes = (size_t)nset(n, d) * bb;
        xc__sched_send(s, (r + d) % n, pk, bytes);
        xc__sched_recv(s, xc__mod(r - d, n), rpk, bytes);
        pack(s, w, rpk, n, d, bb, 1);
        if (2 * d < n) pack(s, w, pk, n, 2 * d, bb, 0);
        xc__sched_round(s);
    }
    for (int i = 0; i < n; i++)
        xc__sched_copy(s, out + (size_t)xc__mod(r - i, n) * bb, w + (size_t)i * bb, bb);
    xc__sched_round(s);
    return XC_OK;
}
