/*
 * test_alltoallv.c -- the specification of xc_alltoallv.
 *
 * sendcounts[j] elements at sendbuf + sdispls[j] go to rank j, which
 * receives them at recvbuf + rdispls[i] (recvcounts[i] of them).  The
 * traffic matrix counts(src, dst) comes from a few patterns chosen to be
 * awkward: all zero, uniform, irregular with zeros, self only, one rank
 * silent, and a MoE-like hot spot on rank 0.  Layouts are awkward too: the
 * sender stores its blocks in reverse rank order and the receiver in rotated
 * order, both with gaps between blocks.  Every rank can compute every other
 * rank's layout, so each received block is checked against the sender's
 * regenerated data, and the gaps of recvbuf must stay untouched.  The count
 * and displacement arrays are scribbled over right after an xc_ialltoallv
 * is issued ("arrays are copied at issue").  In place is not allowed and is
 * rejected with XC_ERR_INVALID.
 */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NPATTERNS 6
#define GAP 3 /* elements between blocks, on both sides */

static const char *const pattern_names[NPATTERNS] = {
    "all-zero", "uniform", "irregular", "self-only", "one-silent", "hot-spot"};

/* Elements rank s sends to rank d in `pattern`, in units of `scale`. */
static size_t traffic(int pattern, int s, int d, int n, size_t scale)
{
    switch (pattern) {
    case 0: return 0;
    case 1: return scale;
    case 2: return (size_t)((s * 7 + d * 3) % 5) * scale; /* some zeros */
    case 3: return s == d ? scale : 0;
    case 4: return (s == n - 1 || d == n - 1) ? 0 : (size_t)(s + d + 1) * scale;
    default: return d == 0 ? 3 * scale + (size_t)s : (s == d ? 0 : 1);
    }
}

/* Sender s's layout: blocks in reverse destination order, GAP apart.
 * Returns the length of its sendbuf in elements. */
static size_t send_layout(int pattern, int s, int n, size_t scale,
                          size_t *counts, size_t *displs)
{
    size_t pos = 0;
    for (int d = n - 1; d >= 0; d--) {
        pos += GAP;
        counts[d] = traffic(pattern, s, d, n, scale);
        displs[d] = pos;
        pos += counts[d];
    }
    return pos + GAP;
}

/* Receiver r's layout: blocks from r, r+1, ... (rotated), GAP apart. */
static size_t recv_layout(int pattern, int r, int n, size_t scale,
                          size_t *counts, size_t *displs)
{
    size_t pos = 0;
    for (int k = 0; k < n; k++) {
        int s = (r + k) % n;
        pos += GAP;
        counts[s] = traffic(pattern, s, r, n, scale);
        displs[s] = pos;
        pos += counts[s];
    }
    return pos + GAP;
}

static void run_case(xc_dtype_t dt, int pattern, size_t scale, int nonblocking)
{
    int n = H.size;
    h_case_t c = h_case(nonblocking ? "ialltoallv" : "alltoallv", dt, H_COPY,
                        scale, 0, -1);
    h_announce(&c);
    size_t esz = xc_dtype_size(dt);
    size_t *sc = calloc((size_t)n, sizeof *sc), *sd = calloc((size_t)n, sizeof *sd);
    size_t *rc = calloc((size_t)n, sizeof *rc), *rd = calloc((size_t)n, sizeof *rd);
    size_t *peer_c = calloc((size_t)n, sizeof *peer_c);
    size_t *peer_d = calloc((size_t)n, sizeof *peer_d);
    if (!sc || !sd || !rc || !rd || !peer_c || !peer_d) abort();
    size_t slen = send_layout(pattern, H.rank, n, scale, sc, sd);
    size_t rlen = recv_layout(pattern, H.rank, n, scale, rc, rd);
    char *send = h_alloc(slen * esz), *recv = h_alloc(rlen * esz);
    h_fill(&c, send, slen, H.rank, 0); /* the gaps hold data that must stay */

    if (nonblocking) {
        xc_request_t *req = NULL;
        H_CHECK(H.comm, xc_ialltoallv(send, sc, sd, recv, rc, rd, dt, H.comm,
                                      &req));
        /* The arrays were copied at issue: clobber them before the wait. */
        memset(sc, 0xff, (size_t)n * sizeof *sc);
        memset(rd, 0xff, (size_t)n * sizeof *rd);
        H_CHECK(H.comm, xc_request_wait(req));
        xc_request_free(req);
        send_layout(pattern, H.rank, n, scale, sc, sd);
        recv_layout(pattern, H.rank, n, scale, rc, rd);
    } else {
        H_CHECK(H.comm, xc_alltoallv(send, sc, sd, recv, rc, rd, dt, H.comm));
    }
    H.issued[XC_COLL_ALLTOALLV]++;

    for (int s = 0; s < n; s++) {
        char what[96];
        snprintf(what, sizeof what, "%s block from rank %d",
                 pattern_names[pattern], s);
        send_layout(pattern, s, n, scale, peer_c, peer_d);
        h_check_copy(&c, recv + rd[s] * esz, rc[s], s, peer_d[H.rank], what);
        h_poison(recv + rd[s] * esz, rc[s] * esz); /* checked: now a gap */
    }
    h_check_untouched(&c, recv, rlen * esz + H_GUARD,
                      "recvbuf gaps between blocks and guard");
    h_check_copy(&c, send, slen, H.rank, 0, "sendbuf (must not change)");
    h_check_guard(&c, send, slen * esz, "sendbuf");
    h_free(send);
    h_free(recv);
    free(sc), free(sd), free(rc), free(rd), free(peer_c), free(peer_d);
}

static void run_rejects(void)
{
    int n = H.size;
    size_t *cnt = calloc((size_t)n, sizeof *cnt);
    size_t *dsp = calloc((size_t)n, sizeof *dsp);
    int32_t *buf = calloc((size_t)n + 1, sizeof *buf);
    if (!cnt || !dsp || !buf) abort();
    for (int j = 0; j < n; j++) cnt[j] = 1, dsp[j] = (size_t)j;
    H_EXPECT_RC(H.comm, XC_ERR_INVALID,
                xc_alltoallv(buf, cnt, dsp, buf, cnt, dsp, XC_INT32, H.comm));
    H_EXPECT_RC(H.comm, XC_ERR_INVALID,
                xc_alltoallv(buf, cnt, dsp, buf + 1, cnt, dsp, XC_DTYPE_COUNT,
                             H.comm));
    H_EQ_INT("xc_comm_status after rejected calls", xc_comm_status(H.comm),
             XC_OK);
    free(cnt), free(dsp), free(buf);
}

int main(int argc, char **argv)
{
    h_init(argc, argv);
    run_rejects();
    /* Scales of the traffic matrix: a block is up to 4x the scale, so the
     * largest keeps every block near H_BIG_COUNT / 4 .. H_BIG_COUNT. */
    const size_t scales[] = {1, 7, 1000, H_BIG_COUNT / 4};
    size_t nscales = H.full ? 4 : 3;
    for (int dt = 0; dt < XC_DTYPE_COUNT; dt++)
        for (int p = 0; p < NPATTERNS; p++)
            for (size_t k = 0; k < nscales; k++)
                run_case((xc_dtype_t)dt, p, scales[k], (p + (int)k) % 2);
    if (!H.full) /* one big irregular exchange in the quick matrix too */
        run_case(XC_FLOAT32, 2, H_BIG_COUNT / 4, 0);
    h_check_stats(H.comm, H.base_ops, H.issued, "world");
    return h_finish();
}
