/*
 * bcast_scatter_ag.c -- van de Geijn's broadcast for large messages: a
 * binomial scatter of the message from the root, then a ring all-gather of
 * the pieces.  The root sends each byte about once instead of log2 N times
 * (binomial tree) and every link carries about 2n, whatever N.
 *
 * Ranks are taken relative to the root (v = rank - root mod N) and the
 * message is cut into N blocks (xc__block); relative rank v ends the
 * scatter owning block v.  Scatter: v receives from its binomial parent
 * (v with its lowest set bit cleared) the blocks of its subtree,
 * [v, v + min(lowbit(v), N-v)), then sends each child c = v + 2^k the
 * blocks of c's subtree, largest first.  All-gather: in step t = 0..N-2, v
 * sends block v-t to v+1 and receives block v-t-1 from v-1 (relative ring
 * neighbours are the absolute ones), into place.  A zero-byte exchange of
 * the operation's description rides in the first round, so a rank that
 * disagrees on the root is caught before the trees diverge.
 *
 * Rounds: ceil(log2 N) (scatter) + N-1 (all-gather).
 * Cost per rank (n = message bytes):
 *   (ceil(log2 N) + N-1)·α + 2(N-1)/N·nβ   (the root sends (N-1)/N·n in
 *   the scatter)
 */
#include "algos.h"

xc_result_t xc__build_bcast_scatter_ag(xc_comm_t *comm, xc__op_t *op, const xc__args_t *a)
{
    xc__sched_t *s = &op->sched;
    int n = comm->size, r = comm->rank, root = a->root;
    if (n == 1) return XC_OK;
    size_t es = xc__dtype_size(a->dtype), count = a->count;
    char *buf = a->rbuf;
    int v = xc__rel(r, root, n);
#define OFF(j) (xc__block_off(count, n, (j)) * es)
#define SPAN(i, j) (OFF(j) - OFF(i))
    xc__sched_desc_check(s, r, n);
    /* Scatter. */
    int mask = 1;
    while (mask < n) {
        if (v & mask) {
            int end = v + mask < n ? v + mask : n;
            xc__sched_recv(s, xc__abs(v - mask, root, n), buf + OFF(v), SPAN(v, end));
            xc__sched_round(s);
            break;
        }
        mask <<= 1;
    }
    for (mask >>= 1; mask > 0; mask >>= 1) {
        int c = v + mask;
        if (c >= n) continue;
        int end = c + mask < n ? c + mask : n;
        xc__sched_send(s, xc__abs(c, root, n), buf + OFF(c), SPAN(c, end));
    }
    xc__sched_round(s);
    /* Ring all-gather. */
    int right = (r + 1) % n, left = xc__mod(r - 1, n);
    for (int t = 0; t < n - 1; t++) {
        int sb = xc__mod(v - t, n), rb = xc__mod(v - t - 1, n);
        xc__sched_send(s, right, buf + OFF(sb), SPAN(sb, sb + 1));
        xc__sched_recv(s, left, buf + OFF(rb), SPAN(rb, rb + 1));
        xc__sched_round(s);
    }
#undef OFF
#undef SPAN
    return XC_OK;
}
