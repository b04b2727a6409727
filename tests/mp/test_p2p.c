/*
 * test_p2p.c -- the specification of tagged point-to-point messaging.
 *
 * Sends and receives are matched by (peer, tag) in posting order; a send
 * completes when its buffer may be reused; blocking calls inside
 * xc_group_start/xc_group_end are only posted and the group end waits for
 * all of them, so both directions of an exchange cannot deadlock.  Sections:
 *   ring       every dtype x count: a grouped send right / receive left;
 *   tags       messages of distinct sizes received in reverse tag order,
 *              and two messages on one tag arriving in posting order;
 *   self       send to oneself, receive posted before and after the send;
 *   early/late a receive posted long before the send, and a send issued
 *              long before the receive is posted (unexpected message);
 *   early sizes  messages of mixed sizes (4 KiB - 5 MiB), all early,
 *              three rounds: the buffers kept for early messages reused;
 *   many       hundreds of small messages (some empty) on interleaved tags;
 *   any        receives from XC_ANY_SOURCE: one message from every rank
 *              (xc_request_source names each sender once), the posting
 *              order between an any-source and a named receive on one tag
 *              (both ways), to oneself, and blocking;
 *   pairs      a group exchanging 64 MiB each way at once between pairs;
 *   reuse      the same 5 MiB buffers exchanged six times over with new
 *              contents each time: from the fourth, the sender's pages go
 *              huge (XCOLL_SHM_PROMOTE) under the peer's reads;
 *   1f1b       a pipeline-parallel one-forward-one-backward schedule;
 *   offsets    messages of 3 KiB-1 MiB between buffers at every pairing of
 *              0, 4, 16, 40 and 63 bytes past a 64-byte line, so that the
 *              receiving copy sits at every kind of distance from the
 *              source's place in a line (glibc's and the kernel's slow
 *              `rep movsb`: src/core/copy.h, mem_share.c's bounce buffer).
 * Every received byte is checked against the sender's regenerated data;
 * xc_comm_stats counts exactly the completed sends and receives.  Count and
 * dtype mismatches (XC_ERR_MISMATCH) poison a communicator and are tested
 * with the fault-injection tests, not here.
 */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int right_of(int r) { return (r + 1) % H.size; }
static int left_of(int r) { return (r + H.size - 1) % H.size; }

static void count_p2p(uint64_t sends, uint64_t recvs)
{
    H.issued[XC_COLL_SEND] += sends;
    H.issued[XC_COLL_RECV] += recvs;
}

static void ring_case(xc_dtype_t dt, size_t count)
{
    h_case_t c = h_case("p2p ring", dt, H_COPY, count, -1, -1);
    h_announce(&c);
    size_t bytes = count * xc_dtype_size(dt);
    char *send = h_alloc(bytes), *recv = h_alloc(bytes);
    h_fill(&c, send, count, H.rank, 0);
    H_CHECK(H.comm, xc_group_start());
    H_CHECK(H.comm, xc_send(send, count, dt, right_of(H.rank), 1, H.comm));
    H_CHECK(H.comm, xc_recv(recv, count, dt, left_of(H.rank), 1, H.comm));
    H_CHECK(H.comm, xc_group_end());
    count_p2p(1, 1);
    h_check_copy(&c, recv, count, left_of(H.rank), 0, "received from left");
    h_check_guard(&c, recv, bytes, "recvbuf");
    h_check_copy(&c, send, count, H.rank, 0, "sendbuf (must not change)");
    h_free(send);
    h_free(recv);
}

/* Tag t carries 100*t + 1 elements starting at index 1000*t of the
 * sender's stream; they are received in reverse tag order. */
static void tags_case(void)
{
    enum { K = 8 };
    h_case_t c = h_case("p2p tags", XC_INT32, H_COPY, K, -1, -1);
    int32_t *out[K], *in[K];
    xc_request_t *sreq[K], *rreq[K];
    for (int t = 0; t < K; t++) {
        size_t n = 100 * (size_t)t + 1;
        out[t] = h_alloc(n * 4);
        in[t] = h_alloc(n * 4);
        h_fill(&c, out[t], n, H.rank, 1000 * (size_t)t);
    }
    for (int t = 0; t < K; t++)
        H_CHECK(H.comm, xc_isend(out[t], 100 * (size_t)t + 1, XC_INT32,
                                 right_of(H.rank), t, H.comm, &sreq[t]));
    for (int t = K - 1; t >= 0; t--)
        H_CHECK(H.comm, xc_irecv(in[t], 100 * (size_t)t + 1, XC_INT32,
                                 left_of(H.rank), t, H.comm, &rreq[t]));
    H_CHECK(H.comm, xc_request_waitall(rreq, K));
    H_CHECK(H.comm, xc_request_waitall(sreq, K));
    count_p2p(K, K);
    for (int t = 0; t < K; t++) {
        char what[64];
        snprintf(what, sizeof what, "message with tag %d", t);
        h_check_copy(&c, in[t], 100 * (size_t)t + 1, left_of(H.rank),
                     1000 * (size_t)t, what);
        xc_request_free(sreq[t]);
        xc_request_free(rreq[t]);
        h_free(out[t]);
        h_free(in[t]);
    }

    /* Two messages on one tag match the receives in posting order. */
    int32_t a[16], b[16], ra[16], rb[16];
    h_fill(&c, a, 16, H.rank, 50000);
    h_fill(&c, b, 16, H.rank, 60000);
    xc_request_t *q[4];
    H_CHECK(H.comm, xc_isend(a, 16, XC_INT32, right_of(H.rank), 77, H.comm, &q[0]));
    H_CHECK(H.comm, xc_isend(b, 16, XC_INT32, right_of(H.rank), 77, H.comm, &q[1]));
    H_CHECK(H.comm, xc_irecv(ra, 16, XC_INT32, left_of(H.rank), 77, H.comm, &q[2]));
    H_CHECK(H.comm, xc_irecv(rb, 16, XC_INT32, left_of(H.rank), 77, H.comm, &q[3]));
    H_CHECK(H.comm, xc_request_waitall(q, 4));
    count_p2p(2, 2);
    h_check_copy(&c, ra, 16, left_of(H.rank), 50000, "first message on tag 77");
    h_check_copy(&c, rb, 16, left_of(H.rank), 60000, "second message on tag 77");
    for (int i = 0; i < 4; i++) xc_request_free(q[i]);
}

static void self_case(void)
{
    const size_t n = 100000;
    h_case_t c = h_case("p2p self", XC_FLOAT64, H_COPY, n, -1, -1);
    double *out = h_alloc(n * 8), *in = h_alloc(n * 8);
    h_fill(&c, out, n, H.rank, 0);
    xc_request_t *req = NULL;

    /* Receive posted first, then a blocking send to oneself. */
    H_CHECK(H.comm, xc_irecv(in, n, XC_FLOAT64, H.rank, 3, H.comm, &req));
    H_CHECK(H.comm, xc_send(out, n, XC_FLOAT64, H.rank, 3, H.comm));
    H_CHECK(H.comm, xc_request_wait(req));
    xc_request_free(req);
    h_check_copy(&c, in, n, H.rank, 0, "self message, receive posted first");

    /* Send first (non-blocking), then a blocking receive. */
    h_poison(in, n * 8);
    H_CHECK(H.comm, xc_isend(out, n, XC_FLOAT64, H.rank, 4, H.comm, &req));
    H_CHECK(H.comm, xc_recv(in, n, XC_FLOAT64, H.rank, 4, H.comm));
    H_CHECK(H.comm, xc_request_wait(req));
    xc_request_free(req);
    h_check_copy(&c, in, n, H.rank, 0, "self message, send posted first");

    /* Both blocking, in a group; and an empty message. */
    h_poison(in, n * 8);
    H_CHECK(H.comm, xc_group_start());
    H_CHECK(H.comm, xc_send(out, n, XC_FLOAT64, H.rank, 5, H.comm));
    H_CHECK(H.comm, xc_recv(in, n, XC_FLOAT64, H.rank, 5, H.comm));
    H_CHECK(H.comm, xc_send(out, 0, XC_FLOAT64, H.rank, 6, H.comm));
    H_CHECK(H.comm, xc_recv(in + n, 0, XC_FLOAT64, H.rank, 6, H.comm));
    H_CHECK(H.comm, xc_group_end());
    count_p2p(4, 4);
    h_check_copy(&c, in, n, H.rank, 0, "self message in a group");
    h_check_guard(&c, in, n * 8, "self recvbuf");
    h_free(out);
    h_free(in);
}

/* A receive posted well before its send, and a send issued well before its
 * receive (the barrier separates them on every rank). */
static void early_late_case(void)
{
    const size_t n = (size_t)1 << 20;
    h_case_t c = h_case("p2p early/late", XC_UINT8, H_COPY, n, -1, -1);
    unsigned char *out = h_alloc(n), *in = h_alloc(n);
    h_fill(&c, out, n, H.rank, 0);
    xc_request_t *req = NULL;

    H_CHECK(H.comm, xc_irecv(in, n, XC_UINT8, left_of(H.rank), 11, H.comm, &req));
    H_CHECK(H.comm, xc_barrier(H.comm));
    H_CHECK(H.comm, xc_send(out, n, XC_UINT8, right_of(H.rank), 11, H.comm));
    H_CHECK(H.comm, xc_request_wait(req));
    xc_request_free(req);
    h_check_copy(&c, in, n, left_of(H.rank), 0, "receive posted early");

    h_poison(in, n);
    H_CHECK(H.comm, xc_isend(out, n, XC_UINT8, right_of(H.rank), 12, H.comm, &req));
    H_CHECK(H.comm, xc_barrier(H.comm));
    H_CHECK(H.comm, xc_recv(in, n, XC_UINT8, left_of(H.rank), 12, H.comm));
    H_CHECK(H.comm, xc_request_wait(req));
    xc_request_free(req);
    h_check_copy(&c, in, n, left_of(H.rank), 0, "receive posted late");
    count_p2p(2, 2);
    H.issued[XC_COLL_BARRIER] += 2;
    h_free(out);
    h_free(in);
}

/* Early messages of mixed sizes, round after round: all sent before the
 * receiver posts anything, received in reverse order.  Buffered ones (below
 * the single-copy size, or over TCP) land in buffers the communicator keeps
 * for the next early messages (match.c ubuf_get), often larger than the
 * message: every byte must be this round's, and nothing past the message
 * may be written. */
static void early_sizes_case(void)
{
    static const size_t sizes[] = {60000, 4100, 7001, 300000, 4096, 65000,
                                   ((size_t)1 << 20) + 3, ((size_t)5 << 20) + 1, 9000};
    enum { N = sizeof sizes / sizeof sizes[0] };
    const size_t max = ((size_t)5 << 20) + 1; /* the largest of sizes */
    unsigned char *out[N], *in = h_alloc(max);
    xc_request_t *req[N];
    for (int i = 0; i < N; i++) out[i] = h_alloc(sizes[i]);
    for (int round = 0; round < 3; round++) {
        h_case_t c = h_case("p2p early sizes", XC_UINT8, H_COPY, max, -1, -1);
        for (int i = 0; i < N; i++) {
            h_fill(&c, out[i], sizes[i], H.rank, (size_t)i << 24);
            H_CHECK(H.comm, xc_isend(out[i], sizes[i], XC_UINT8, right_of(H.rank), 40 + i,
                                     H.comm, &req[i]));
        }
        H_CHECK(H.comm, xc_barrier(H.comm));
        for (int i = N - 1; i >= 0; i--) {
            h_poison(in, max);
            H_CHECK(H.comm, xc_recv(in, sizes[i], XC_UINT8, left_of(H.rank), 40 + i, H.comm));
            h_check_copy(&c, in, sizes[i], left_of(H.rank), (size_t)i << 24, "early message");
            h_check_untouched(&c, in + sizes[i], max - sizes[i], "past an early message");
        }
        H_CHECK(H.comm, xc_request_waitall(req, N));
        for (int i = 0; i < N; i++) xc_request_free(req[i]);
        count_p2p(N, N);
        H.issued[XC_COLL_BARRIER] += 1;
    }
    for (int i = 0; i < N; i++) h_free(out[i]);
    h_free(in);
}

/* NMSG messages of i % 17 int16 elements (some empty) on tags i % 4. */
static void many_case(int nmsg)
{
    h_case_t c = h_case("p2p many", XC_INT16, H_COPY, (size_t)nmsg, -1, -1);
    int16_t *out = h_alloc((size_t)nmsg * 32), *in = h_alloc((size_t)nmsg * 32);
    xc_request_t **req = calloc(2 * (size_t)nmsg, sizeof *req);
    if (!req) abort();
    h_fill(&c, out, (size_t)nmsg * 16, H.rank, 0);
    for (int i = 0; i < nmsg; i++) {
        H_CHECK(H.comm, xc_irecv(in + 16 * i, (size_t)(i % 17), XC_INT16,
                                 left_of(H.rank), i % 4, H.comm, &req[i]));
        H_CHECK(H.comm, xc_isend(out + 16 * i, (size_t)(i % 17), XC_INT16,
                                 right_of(H.rank), i % 4, H.comm,
                                 &req[nmsg + i]));
    }
    H_CHECK(H.comm, xc_request_waitall(req, 2 * (size_t)nmsg));
    count_p2p((uint64_t)nmsg, (uint64_t)nmsg);
    for (int i = 0; i < nmsg; i++) {
        char what[64];
        snprintf(what, sizeof what, "message %d (tag %d)", i, i % 4);
        h_check_copy(&c, in + 16 * i, (size_t)(i % 17), left_of(H.rank),
                     16 * (size_t)i, what);
        xc_request_free(req[i]);
        xc_request_free(req[nmsg + i]);
    }
    free(req);
    h_free(out);
    h_free(in);
}

/* Receives from any source.  Rank 0 gathers one message per rank (itself
 * included) on tag 20 through any-source receives, some posted before the
 * messages arrive and some after; each message says who sent it, and so
 * must xc_request_source.  Then, with rank 1 (rank 0 itself on one rank):
 * an any-source receive posted before a named one on the same tag takes
 * the first message, and after it the second; a blocking any-source
 * receive. */
static void any_case(void)
{
    const size_t n = 1000;
    h_case_t c = h_case("p2p any source", XC_INT32, H_COPY, n, -1, -1);
    int32_t *out = h_alloc(n * 4), *in = h_alloc((size_t)H.size * n * 4);
    xc_request_t **req = calloc((size_t)H.size, sizeof *req), *sreq = NULL;
    if (!req) abort();
    h_fill(&c, out, n, H.rank, 0);
    int early = H.size / 2; /* receives posted before the barrier */
    if (H.rank == 0)
        for (int i = 0; i < early; i++)
            H_CHECK(H.comm, xc_irecv(in + (size_t)i * n, n, XC_INT32, XC_ANY_SOURCE, 20,
                                     H.comm, &req[i]));
    H_CHECK(H.comm, xc_isend(out, n, XC_INT32, 0, 20, H.comm, &sreq));
    H_CHECK(H.comm, xc_barrier(H.comm));
    if (H.rank == 0) {
        for (int i = early; i < H.size; i++)
            H_CHECK(H.comm, xc_irecv(in + (size_t)i * n, n, XC_INT32, XC_ANY_SOURCE, 20,
                                     H.comm, &req[i]));
        H_CHECK(H.comm, xc_request_waitall(req, (size_t)H.size));
        char *seen = calloc((size_t)H.size, 1);
        if (!seen) abort();
        for (int i = 0; i < H.size; i++) {
            int src = xc_request_source(req[i]);
            char what[96];
            snprintf(what, sizeof what, "any-source receive %d: a valid sender", i);
            H_EQ_INT(what, src >= 0 && src < H.size, 1);
            if (src < 0 || src >= H.size) continue;
            snprintf(what, sizeof what, "any-source receive %d: rank %d seen once", i, src);
            H_EQ_INT(what, seen[src]++, 0);
            snprintf(what, sizeof what, "any-source receive %d (from rank %d)", i, src);
            h_check_copy(&c, in + (size_t)i * n, n, src, 0, what);
            xc_request_free(req[i]);
        }
        free(seen);
        count_p2p(0, (uint64_t)H.size);
    }
    H_CHECK(H.comm, xc_request_wait(sreq));
    H_EQ_INT("xc_request_source of a send", xc_request_source(sreq), -1);
    xc_request_free(sreq);
    count_p2p(1, 0);

    /* Posting order decides between an any-source and a named receive. */
    int peer = H.size > 1 ? 1 : 0;
    int32_t a[8], b[8], ra[8], rb[8];
    h_fill(&c, a, 8, peer, 70000);
    h_fill(&c, b, 8, peer, 80000);
    for (int order = 0; order < 2; order++) {
        xc_request_t *q[4] = {NULL, NULL, NULL, NULL};
        int tag = 21 + order;
        if (H.rank == 0) {
            /* order 0: any-source first; order 1: named first. */
            int ia = order, in_ = 1 - order;
            xc_request_t *r2[2];
            for (int k = 0; k < 2; k++) {
                if (k == ia)
                    H_CHECK(H.comm, xc_irecv(ra, 8, XC_INT32, XC_ANY_SOURCE, tag, H.comm,
                                             &r2[k]));
                else
                    H_CHECK(H.comm, xc_irecv(rb, 8, XC_INT32, peer, tag, H.comm, &r2[k]));
            }
            q[0] = r2[ia], q[1] = r2[in_];
        }
        H_CHECK(H.comm, xc_barrier(H.comm));
        if (H.rank == peer) {
            H_CHECK(H.comm, xc_isend(a, 8, XC_INT32, 0, tag, H.comm, &q[2]));
            H_CHECK(H.comm, xc_isend(b, 8, XC_INT32, 0, tag, H.comm, &q[3]));
            count_p2p(2, 0);
        }
        H_CHECK(H.comm, xc_request_waitall(q, 4));
        if (H.rank == 0) {
            count_p2p(0, 2);
            H_EQ_INT("any-source receive's sender", xc_request_source(q[0]), peer);
            H_EQ_INT("named receive's sender", xc_request_source(q[1]), peer);
            /* The receive posted first takes the first message. */
            h_check_copy(&c, order == 0 ? ra : rb, 8, peer, 70000,
                         order == 0 ? "any-source receive posted first: first message"
                                    : "named receive posted first: first message");
            h_check_copy(&c, order == 0 ? rb : ra, 8, peer, 80000,
                         order == 0 ? "named receive posted second: second message"
                                    : "any-source receive posted second: second message");
        }
        for (int i = 0; i < 4; i++) xc_request_free(q[i]);
    }

    /* Two any-source receives pending, then two messages to oneself (on
     * one rank too: nothing is taken for an orphan there). */
    {
        xc_request_t *s2[2];
        H_CHECK(H.comm, xc_irecv(ra, 8, XC_INT32, XC_ANY_SOURCE, 24, H.comm, &s2[0]));
        H_CHECK(H.comm, xc_irecv(rb, 8, XC_INT32, XC_ANY_SOURCE, 24, H.comm, &s2[1]));
        h_fill(&c, a, 8, H.rank, 90000);
        h_fill(&c, b, 8, H.rank, 91000);
        H_CHECK(H.comm, xc_send(a, 8, XC_INT32, H.rank, 24, H.comm));
        H_CHECK(H.comm, xc_send(b, 8, XC_INT32, H.rank, 24, H.comm));
        H_CHECK(H.comm, xc_request_waitall(s2, 2));
        count_p2p(2, 2);
        H_EQ_INT("self message's sender", xc_request_source(s2[1]), H.rank);
        h_check_copy(&c, ra, 8, H.rank, 90000, "first message to oneself, any source");
        h_check_copy(&c, rb, 8, H.rank, 91000, "second message to oneself, any source");
        xc_request_free(s2[0]);
        xc_request_free(s2[1]);
    }

    /* Blocking any-source receive: rank r sends to rank (r + 1) mod N. */
    H_CHECK(H.comm, xc_isend(out, n, XC_INT32, right_of(H.rank), 23, H.comm, &sreq));
    h_poison(in, n * 4);
    H_CHECK(H.comm, xc_recv(in, n, XC_INT32, XC_ANY_SOURCE, 23, H.comm));
    H_CHECK(H.comm, xc_request_wait(sreq));
    xc_request_free(sreq);
    count_p2p(1, 1);
    h_check_copy(&c, in, n, left_of(H.rank), 0, "blocking any-source receive");
    H.issued[XC_COLL_BARRIER] += 3;
    free(req);
    h_free(out);
    h_free(in);
}

/* Ranks 2k and 2k+1 exchange `bytes` each way in one group; with an odd
 * rank count the last rank exchanges with itself. */
static void pairs_case(size_t bytes)
{
    size_t n = bytes / 4;
    h_case_t c = h_case("p2p pairs", XC_UINT32, H_COPY, n, -1, -1);
    int partner = H.rank ^ 1;
    if (partner >= H.size) partner = H.rank;
    uint32_t *out = h_alloc(bytes), *in = h_alloc(bytes);
    h_fill(&c, out, n, H.rank, 0);
    double t0 = h_now();
    H_CHECK(H.comm, xc_group_start());
    H_CHECK(H.comm, xc_send(out, n, XC_UINT32, partner, 9, H.comm));
    H_CHECK(H.comm, xc_recv(in, n, XC_UINT32, partner, 9, H.comm));
    H_CHECK(H.comm, xc_group_end());
    double dt = h_now() - t0;
    count_p2p(1, 1);
    h_check_copy(&c, in, n, partner, 0, "pair exchange");
    h_check_guard(&c, in, bytes, "pair recvbuf");
    if (H.rank == 0)
        printf("pair exchange: %zu MiB each way in %.3f s (%.2f GB/s per "
               "direction)\n", bytes >> 20, dt, (double)bytes / dt * 1e-9);
    h_free(out);
    h_free(in);
}

/* The same (unaligned) buffers exchanged again and again, refilled each
 * time: the single-copy source collapsed into huge pages on its fourth
 * publication (core/promote.c) must carry the new contents every time. */
static void reuse_case(void)
{
    size_t n = ((size_t)5 << 18) + 3, bytes = n * 4;
    h_case_t c = h_case("p2p reuse", XC_UINT32, H_COPY, n, -1, -1);
    int partner = H.rank ^ 1;
    if (partner >= H.size) partner = H.rank;
    char *out_raw = h_alloc(bytes + 4), *in_raw = h_alloc(bytes + 4);
    uint32_t *out = (uint32_t *)(out_raw + 4), *in = (uint32_t *)(in_raw + 4);
    for (size_t it = 0; it < 6; it++) {
        h_fill(&c, out, n, H.rank, 7 * it);
        H_CHECK(H.comm, xc_group_start());
        H_CHECK(H.comm, xc_send(out, n, XC_UINT32, partner, 11, H.comm));
        H_CHECK(H.comm, xc_recv(in, n, XC_UINT32, partner, 11, H.comm));
        H_CHECK(H.comm, xc_group_end());
        count_p2p(1, 1);
        h_check_copy(&c, in, n, partner, 7 * it, "reused buffers, received");
        h_check_copy(&c, out, n, H.rank, 7 * it, "reused buffers, sent (must not change)");
    }
    h_check_guard(&c, in, bytes, "reuse recvbuf");
    h_free(out_raw);
    h_free(in_raw);
}

/* ---------------------------------------------------------------- 1F1B
 * Stage s = rank.  Forward of micro-batch m at stage s maps x to
 * x * 3 + (s + 1); the last stage's loss gradient is y ^ 0x5bd1e995;
 * backward at stage s maps g to g * 5 + (s + 1).  Stage 0's input for m
 * is the generated stream at m * K, so every stage can compute what it must
 * receive.  Activations of m travel on tag 2m, gradients on tag 2m + 1.
 * The schedule is Megatron-LM's non-interleaved 1F1B: warm-up forwards,
 * steady state (forward + send-forward/recv-backward group, backward +
 * send-backward/recv-forward group), cool-down backwards. */

typedef struct pipe {
    h_case_t c;
    size_t K;
    int M;
    uint32_t *x, *y, *g, *dx; /* input, output, gradient in and out */
} pipe_t;

static uint32_t fwd_input(const pipe_t *p, int stage, int m, size_t i)
{
    uint32_t v = (uint32_t)h_gen(&p->c, 0, (size_t)m * p->K + i);
    for (int k = 0; k < stage; k++) v = v * 3u + (uint32_t)(k + 1);
    return v;
}

static uint32_t bwd_input(const pipe_t *p, int stage, int m, size_t i)
{
    uint32_t v = fwd_input(p, H.size, m, i) ^ 0x5bd1e995u;
    for (int k = H.size - 1; k > stage; k--) v = v * 5u + (uint32_t)(k + 1);
    return v;
}

static void pipe_check(pipe_t *p, const uint32_t *got, int backward, int m)
{
    for (size_t i = 0; i < p->K; i++) {
        uint32_t want = backward ? bwd_input(p, H.rank, m, i)
                                 : fwd_input(p, H.rank, m, i);
        if (got[i] != want) {
            char what[96];
            snprintf(what, sizeof what, "1f1b stage %d %s of micro-batch %d "
                     "element %zu", H.rank,
                     backward ? "gradient" : "activation", m, i);
            H_EQ_U64(what, got[i], want);
            return;
        }
    }
}

static void pipe_recv(pipe_t *p, uint32_t *buf, int backward, int m)
{
    int peer = backward ? H.rank + 1 : H.rank - 1;
    H_CHECK(H.comm, xc_recv(buf, p->K, XC_UINT32, peer, 2 * m + backward,
                            H.comm));
    count_p2p(0, 1);
    pipe_check(p, buf, backward, m);
}

static void pipe_send(pipe_t *p, const uint32_t *buf, int backward, int m)
{
    int peer = backward ? H.rank - 1 : H.rank + 1;
    H_CHECK(H.comm, xc_send(buf, p->K, XC_UINT32, peer, 2 * m + backward,
                            H.comm));
    count_p2p(1, 0);
}

static void forward(pipe_t *p, int m)
{
    int s = H.rank;
    if (s == 0)
        for (size_t i = 0; i < p->K; i++) p->x[i] = fwd_input(p, 0, m, i);
    for (size_t i = 0; i < p->K; i++) p->y[i] = p->x[i] * 3u + (uint32_t)(s + 1);
    if (s == H.size - 1) /* loss gradient */
        for (size_t i = 0; i < p->K; i++) p->g[i] = p->y[i] ^ 0x5bd1e995u;
}

static void backward(pipe_t *p)
{
    for (size_t i = 0; i < p->K; i++)
        p->dx[i] = p->g[i] * 5u + (uint32_t)(H.rank + 1);
}

static void pipeline_1f1b(size_t K, int M)
{
    pipe_t p = {h_case("p2p 1f1b", XC_UINT32, H_COPY, K, -1, -1), K, M,
                NULL, NULL, NULL, NULL};
    p.x = h_alloc(K * 4), p.y = h_alloc(K * 4), p.g = h_alloc(K * 4);
    p.dx = h_alloc(K * 4);
    int s = H.rank, first = s == 0, last = s == H.size - 1;
    int warmup = H.size - s - 1 < M ? H.size - s - 1 : M;
    int remaining = M - warmup, fm = 0, bm = 0; /* next fwd / bwd batch */

    for (int i = 0; i < warmup; i++, fm++) {
        if (!first) pipe_recv(&p, p.x, 0, fm);
        forward(&p, fm);
        if (!last) pipe_send(&p, p.y, 0, fm);
    }
    if (remaining > 0 && !first) pipe_recv(&p, p.x, 0, fm);
    for (int i = 0; i < remaining; i++, fm++, bm++) {
        forward(&p, fm);
        if (!last) { /* send forward, receive backward, as one group */
            H_CHECK(H.comm, xc_group_start());
            pipe_send(&p, p.y, 0, fm);
            H_CHECK(H.comm, xc_recv(p.g, K, XC_UINT32, s + 1, 2 * bm + 1, H.comm));
            H_CHECK(H.comm, xc_group_end());
            count_p2p(0, 1);
            pipe_check(&p, p.g, 1, bm);
        }
        backward(&p);
        if (first) continue; /* no one to send to; next input is local */
        if (i == remaining - 1) {
            pipe_send(&p, p.dx, 1, bm);
        } else { /* send backward, receive the next forward, as one group */
            H_CHECK(H.comm, xc_group_start());
            pipe_send(&p, p.dx, 1, bm);
            H_CHECK(H.comm, xc_recv(p.x, K, XC_UINT32, s - 1, 2 * (fm + 1),
                                    H.comm));
            H_CHECK(H.comm, xc_group_end());
            count_p2p(0, 1);
            pipe_check(&p, p.x, 0, fm + 1);
        }
    }
    for (int i = 0; i < warmup; i++, bm++) {
        pipe_recv(&p, p.g, 1, bm);
        backward(&p);
        if (!first) pipe_send(&p, p.dx, 1, bm);
    }
    H_EQ_INT("1f1b forward micro-batches", fm, M);
    H_EQ_INT("1f1b backward micro-batches", bm, M);
    h_free(p.x), h_free(p.y), h_free(p.g), h_free(p.dx);
}

/* Each rank sends right from a buffer `soff` bytes past a line and
 * receives from the left into one `roff` bytes past a line. */
static void offsets_case(void)
{
    static const size_t sizes[] = {3 << 10, (100 << 10) + 3, ((size_t)1 << 20) + 5};
    static const size_t offs[] = {0, 4, 16, 40, 63};
    enum { NO = sizeof offs / sizeof offs[0] };
    const size_t max = ((size_t)1 << 20) + 5;
    unsigned char *sb = h_alloc(max + 128), *rb = h_alloc(max + 128);
    unsigned char *s0 = sb + (64 - ((uintptr_t)sb & 63)), *r0 = rb + (64 - ((uintptr_t)rb & 63));
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        for (int a = 0; a < NO; a++)
            for (int b = 0; b < NO; b++) {
                size_t n = sizes[i];
                unsigned char *s = s0 + offs[a], *r = r0 + offs[b];
                h_case_t c = h_case("p2p offsets", XC_UINT8, H_COPY, n, -1, -1);
                h_poison(rb, max + 128);
                h_fill(&c, s, n, H.rank, (size_t)(a * NO + b) << 20);
                H_CHECK(H.comm, xc_group_start());
                H_CHECK(H.comm, xc_send(s, n, XC_UINT8, right_of(H.rank), 77, H.comm));
                H_CHECK(H.comm, xc_recv(r, n, XC_UINT8, left_of(H.rank), 77, H.comm));
                H_CHECK(H.comm, xc_group_end());
                count_p2p(1, 1);
                char what[96];
                snprintf(what, sizeof what,
                         "received: sender +%zu, receiver +%zu bytes past a line", offs[a],
                         offs[b]);
                h_check_copy(&c, r, n, left_of(H.rank), (size_t)(a * NO + b) << 20, what);
                h_check_untouched(&c, rb, (size_t)(r - rb), "before the receive buffer");
                h_check_untouched(&c, r + n, (size_t)(rb + max + 128 - (r + n)),
                                  "past the receive buffer");
            }
    h_free(sb);
    h_free(rb);
}

static void run_rejects(void)
{
    int32_t a[4] = {0};
    H_EXPECT_RC(H.comm, XC_ERR_INVALID,
                xc_send(a, 4, XC_INT32, H.size, 0, H.comm));
    H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_send(a, 4, XC_INT32, -1, 0, H.comm));
    H_EXPECT_RC(H.comm, XC_ERR_INVALID, xc_recv(a, 4, XC_INT32, 0, -1, H.comm));
    H_EXPECT_RC(H.comm, XC_ERR_INVALID,
                xc_send(a, 4, XC_DTYPE_COUNT, 0, 0, H.comm));
    H_CHECK(H.comm, xc_group_start()); /* an empty group is fine */
    H_CHECK(H.comm, xc_group_end());
    H_EQ_INT("xc_comm_status after rejected calls", xc_comm_status(H.comm),
             XC_OK);
}

/* A bulk frame's raw lines in a shared-memory channel (shm_chan.c) hold
 * the message's bytes where other lines hold their tags: at the next lap
 * the receiver must not take a stale word for the tag it then expects.
 * On a fresh communicator of ranks 0 and 1 (its 0 -> 1 channel starts at
 * line 0, the ring's line count known from XCOLL_SHM_CHAN_KB), rank 0
 * sends a 2 KiB message whose word in every raw line's tag position is
 * that line's next-lap tag, then one-line messages round the ring, then
 * -- after rank 1 is waiting where the stale words lie -- two more,
 * which must be what rank 1 receives.  (With other frames on the channel
 * first, or no channel, it is a plain message test.)  Run last: the split
 * is a collective of H.comm. */
static void stale_lines_case(void)
{
    if (H.size < 2) return;
    xc_comm_t *pair = NULL;
    H_CHECK(H.comm, xc_comm_split(H.comm, H.rank < 2 ? 0 : XC_COLOR_NONE, H.rank, &pair, NULL));
    if (!pair) return;
    const char *kb = getenv("XCOLL_SHM_CHAN_KB");
    uint64_t lines = (uint64_t)(kb && *kb ? atoi(kb) : 64) * 1024 / 64;
    enum { WORDS = 256 }; /* 2 KiB: a bulk put (48-byte header + payload) */
    uint64_t big[WORDS], small = 0, got = 0;
    const char *what = "p2p stale channel lines";
    /* Raw line j (from 1) holds frame bytes (j-1)*64 .. +63: its tag word
     * (bytes 56..63) is payload word (j-1)*8 + 1; its next-lap tag is line
     * j + lines, 0 lines after it, 56 bytes. */
    for (size_t i = 0; i < WORDS; i++) big[i] = 0x5eed0000u + i;
    for (uint64_t j = 1; (j - 1) * 8 + 1 < WORDS; j++)
        big[(j - 1) * 8 + 1] = (j + lines + 1) << 12 | 56;
    int nsmall = lines > 35 ? (int)(lines - 33) : 1; /* lines 34 .. lines (slot 0) */
    if (H.rank == 0) {
        H_CHECK(pair, xc_send(big, WORDS, XC_UINT64, 1, 30, pair));
        for (int i = 0; i < nsmall; i++) {
            small = (uint64_t)i;
            H_CHECK(pair, xc_send(&small, 1, XC_UINT64, 1, 31, pair));
        }
        struct timespec ts = {0, 50 * 1000000L}; /* rank 1 waits at slot 1 */
        nanosleep(&ts, NULL);
        small = 0xfeedfacecafe;
        H_CHECK(pair, xc_send(&small, 1, XC_UINT64, 1, 32, pair));
        small = 0xabad1dea;
        H_CHECK(pair, xc_send(&small, 1, XC_UINT64, 1, 33, pair));
    } else {
        uint64_t in[WORDS];
        H_CHECK(pair, xc_recv(in, WORDS, XC_UINT64, 0, 30, pair));
        for (size_t i = 0; i < WORDS; i++)
            if (in[i] != big[i]) {
                h_fail(__FILE__, __LINE__, "%s: word %zu is %#llx, sent %#llx", what, i,
                       (unsigned long long)in[i], (unsigned long long)big[i]);
                break;
            }
        for (int i = 0; i < nsmall; i++) {
            H_CHECK(pair, xc_recv(&got, 1, XC_UINT64, 0, 31, pair));
            if (got != (uint64_t)i)
                h_fail(__FILE__, __LINE__, "%s: message %d carried %llu", what, i,
                       (unsigned long long)got);
        }
        H_CHECK(pair, xc_recv(&got, 1, XC_UINT64, 0, 32, pair));
        if (got != 0xfeedfacecafe)
            h_fail(__FILE__, __LINE__, "%s: the late message carried %#llx", what,
                   (unsigned long long)got);
        /* The lines after it are stale raw lines too. */
        H_CHECK(pair, xc_recv(&got, 1, XC_UINT64, 0, 33, pair));
        if (got != 0xabad1dea)
            h_fail(__FILE__, __LINE__, "%s: the message after it carried %#llx", what,
                   (unsigned long long)got);
    }
    H_CHECK(NULL, xc_comm_destroy(pair));
}

int main(int argc, char **argv)
{
    h_init(argc, argv);
    run_rejects();
    for (h_cell_t c = {0}; h_next_cell(&c, 0);)
        ring_case(c.dt, c.count);
    tags_case();
    self_case();
    early_late_case();
    early_sizes_case();
    many_case(H.full ? 2000 : 300);
    any_case();
    pairs_case((size_t)64 << 20);
    reuse_case();
    pipeline_1f1b(H.full ? ((size_t)1 << 18) + 3 : 4099, 2 * H.size + 1);
    offsets_case();
    h_check_stats(H.comm, H.base_ops, H.issued, "world");
    stale_lines_case();
    return h_finish();
}
