/*
 * test_p2p_express.c -- the point-to-point express path (docs/engine.md
 * "Express point-to-point"): small sends and receives between ranks that
 * share memory, moved without operations, and everything it does not
 * finish handed to the ordinary path unchanged.
 *
 * Sections (data checked byte for byte everywhere; xc_stats_t.ops counts
 * every send and receive exactly, express or not):
 *   loop      grouped exchanges around the ring of ranks, 0 B to 3 KiB:
 *             every send is written on the express path (express_p2p grows
 *             by at least the sends), the receives' share is printed;
 *   late      a blocking receive and a group of two receives whose sender
 *             comes 30 ms late: adopted (not counted as express), then
 *             completed by the ordinary wait, each on its own tag;
 *   order     a group of four receives on one tag from one peer takes the
 *             four messages in the order they were sent;
 *   early     a frame drained by the engine while this rank waited for
 *             another (kept as an early message) is taken by the next
 *             express receive, which counts as express;
 *   overflow  a group of 300 sends of 1 KiB each way (four rings' worth):
 *             the first on the express path, the rest queued behind them,
 *             the receives then posted the ordinary way, in order;
 *   isend     nonblocking sends around the ring, 0 B to 3 KiB: each
 *             written at the call (its request complete when returned,
 *             counted as express), received by xc_irecv; then 300 of 1 KiB
 *             each way (beyond the ring: the later ones queued), and a
 *             single-copy send followed by a small one on the same tag,
 *             which must arrive in that order;
 *   irecv     a nonblocking receive whose frame is already in its channel
 *             (sent before a barrier) is complete at the call and counted
 *             as express; one posted before its frame (sent after the
 *             barrier) is not, and completes at the wait;
 *   any       a named and an any-source receive on one tag in one group
 *             (ordinary path, posting order kept);
 *   mixed     an xc_irecv between two blocking receives of a group, on one
 *             tag from one peer (then from any source), whose three frames
 *             are all in the channel before the group starts: the three
 *             take the messages in the order of the calls;
 *   direct    three frames from one peer -- 40 bytes (two lines), 200
 *             (bulk), 40 on tags 71-73 -- received in sending
 *             order (each read straight from the channel when it is at
 *             the head) and out of order (73 first: tag 71's frame at the
 *             head is not its own, so the ordinary path keeps it and 72's
 *             early and the next receives find them there), at once and
 *             after a barrier: the data exact, every receive express
 *             after the barrier, the shared-memory bytes received counted
 *             once each;
 *   mismatch  a receive expecting 5 elements of a 4-element express send:
 *             XC_ERR_MISMATCH on both ranks (the sender at its next call),
 *             on a child communicator; and an irecv of 5 elements whose
 *             4-element frame is there at the call fails there.
 * Without shared-memory channels (one rank per node) the express path is
 * never taken and only the data and counts are checked.  The express
 * counts assume the default eager limit (above 3 KiB: the single-copy
 * threshold and a quarter of the channel's ring).
 */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int right_of(int r) { return (r + 1) % H.size; }
static int left_of(int r) { return (r + H.size - 1) % H.size; }

static xc_stats_t stats(xc_comm_t *comm)
{
    xc_stats_t s = {.size = sizeof s};
    H_CHECK(comm, xc_comm_stats(comm, &s));
    return s;
}

static void count_p2p(uint64_t sends, uint64_t recvs)
{
    H.issued[XC_COLL_SEND] += sends;
    H.issued[XC_COLL_RECV] += recvs;
}

/* Did this rank's sends to node peers go through the channels? */
static int g_chans;

static void loop_case(void)
{
    const int rounds = 200;
    char *send = h_alloc(3072), *recv = h_alloc(3072);
    xc_stats_t s0 = stats(H.comm);
    for (int i = 0; i < rounds; i++) {
        size_t bytes = (size_t)(i * 37) % 3073;
        h_case_t c = h_case("p2p express loop", XC_UINT8, H_COPY, bytes, -1, -1);
        h_fill(&c, send, bytes, H.rank, (uint64_t)i);
        h_poison(recv, 3072);
        H_CHECK(H.comm, xc_group_start());
        H_CHECK(H.comm, xc_send(send, bytes, XC_UINT8, right_of(H.rank), 5, H.comm));
        H_CHECK(H.comm, xc_recv(recv, bytes, XC_UINT8, left_of(H.rank), 5, H.comm));
        H_CHECK(H.comm, xc_group_end());
        h_check_copy(&c, recv, bytes, left_of(H.rank), (uint64_t)i, "received from left");
        h_check_untouched(&c, recv + bytes, 3072 - bytes, "beyond the message");
    }
    count_p2p((uint64_t)rounds, (uint64_t)rounds);
    xc_stats_t s1 = stats(H.comm);
    g_chans = s1.msgs_sent[XC_TRANSPORT_SHM] - s0.msgs_sent[XC_TRANSPORT_SHM] >= (uint64_t)rounds;
    uint64_t express = s1.express_p2p - s0.express_p2p;
    if (g_chans) {
        H_TRUE("every small send on the express path", express >= (uint64_t)rounds);
        H_TRUE("no more express calls than calls", express <= 2 * (uint64_t)rounds);
    } else {
        H_EQ_U64("no express call without channels", express, 0);
    }
    printf("# rank %d: %llu of %d receives on the express path\n", H.rank,
           (unsigned long long)(express > (uint64_t)rounds ? express - (uint64_t)rounds : 0),
           rounds);
    h_free(send);
    h_free(recv);
}

/* Rank 1 sends to rank 0 30 ms after both left a barrier. */
static void late_case(void)
{
    if (H.size < 2) return;
    const size_t n = 100;
    h_case_t c = h_case("p2p express late", XC_INT32, H_COPY, n, -1, -1);
    int32_t *a = h_alloc(n * 4), *b = h_alloc(n * 4), *d = h_alloc(n * 4);
    H_CHECK(H.comm, xc_barrier(H.comm));
    H.issued[XC_COLL_BARRIER]++;
    if (H.rank == 0) {
        h_poison(a, n * 4);
        h_poison(b, n * 4);
        h_poison(d, n * 4);
        xc_stats_t s0 = stats(H.comm);
        H_CHECK(H.comm, xc_recv(a, n, XC_INT32, 1, 11, H.comm));
        H_CHECK(H.comm, xc_group_start());
        H_CHECK(H.comm, xc_recv(b, n, XC_INT32, 1, 12, H.comm));
        H_CHECK(H.comm, xc_recv(d, n, XC_INT32, 1, 13, H.comm));
        H_CHECK(H.comm, xc_group_end());
        xc_stats_t s1 = stats(H.comm);
        h_check_copy(&c, a, n, 1, 11, "blocking receive, late sender");
        h_check_copy(&c, b, n, 1, 12, "grouped receive (tag 12), late sender");
        h_check_copy(&c, d, n, 1, 13, "grouped receive (tag 13), late sender");
        count_p2p(0, 3);
        if (g_chans)
            H_EQ_U64("receives 30 ms early are not express", s1.express_p2p - s0.express_p2p, 0);
    } else if (H.rank == 1) {
        usleep(30000);
        h_fill(&c, a, n, 1, 11);
        H_CHECK(H.comm, xc_send(a, n, XC_INT32, 0, 11, H.comm));
        usleep(30000);
        h_fill(&c, d, n, 1, 13); /* the second tag first */
        h_fill(&c, b, n, 1, 12);
        H_CHECK(H.comm, xc_send(d, n, XC_INT32, 0, 13, H.comm));
        H_CHECK(H.comm, xc_send(b, n, XC_INT32, 0, 12, H.comm));
        count_p2p(3, 0);
    }
    h_free(a);
    h_free(b);
    h_free(d);
}

static void order_case(void)
{
    if (H.size < 2) return;
    const size_t n = 7;
    h_case_t c = h_case("p2p express order", XC_UINT64, H_COPY, n, -1, -1);
    uint64_t *buf = h_alloc(4 * n * 8);
    if (H.rank == 1) {
        for (int k = 0; k < 4; k++) {
            h_fill(&c, buf + k * n, n, 1, (uint64_t)k);
            H_CHECK(H.comm, xc_send(buf + k * n, n, XC_UINT64, 0, 21, H.comm));
        }
        count_p2p(4, 0);
    } else if (H.rank == 0) {
        h_poison(buf, 4 * n * 8);
        H_CHECK(H.comm, xc_group_start());
        for (int k = 0; k < 4; k++)
            H_CHECK(H.comm, xc_recv(buf + k * n, n, XC_UINT64, 1, 21, H.comm));
        H_CHECK(H.comm, xc_group_end());
        for (int k = 0; k < 4; k++) h_check_copy(&c, buf + k * n, n, 1, (uint64_t)k, "in order");
        count_p2p(0, 4);
    }
    h_free(buf);
}

static void early_case(void)
{
    if (H.size < 2) return;
    h_case_t c = h_case("p2p express early", XC_FLOAT32, H_COPY, 9, -1, -1);
    float *x = h_alloc(9 * 4), *y = h_alloc(9 * 4);
    if (H.rank == 1) {
        h_fill(&c, x, 9, 1, 31);
        h_fill(&c, y, 9, 1, 39);
        H_CHECK(H.comm, xc_send(x, 9, XC_FLOAT32, 0, 31, H.comm));
        H_CHECK(H.comm, xc_send(y, 9, XC_FLOAT32, 0, 39, H.comm));
        count_p2p(2, 0);
    } else if (H.rank == 0) {
        h_poison(x, 9 * 4);
        h_poison(y, 9 * 4);
        /* The engine reads tag 31's frame (before tag 39's) into an early
         * message while it waits for tag 39. */
        xc_request_t *r = NULL;
        H_CHECK(H.comm, xc_irecv(y, 9, XC_FLOAT32, 1, 39, H.comm, &r));
        H_CHECK(H.comm, xc_request_wait(r));
        xc_request_free(r);
        xc_stats_t s0 = stats(H.comm);
        H_CHECK(H.comm, xc_recv(x, 9, XC_FLOAT32, 1, 31, H.comm));
        xc_stats_t s1 = stats(H.comm);
        h_check_copy(&c, x, 9, 1, 31, "early message");
        h_check_copy(&c, y, 9, 1, 39, "waited-for message");
        count_p2p(0, 2);
        if (g_chans)
            H_EQ_U64("an early message is taken on the express path",
                     s1.express_p2p - s0.express_p2p, 1);
    }
    h_free(x);
    h_free(y);
}

static void overflow_case(void)
{
    const int nmsg = 300;
    const size_t bytes = 1024;
    h_case_t c = h_case("p2p express overflow", XC_UINT8, H_COPY, bytes, -1, -1);
    char *send = h_alloc((size_t)nmsg * bytes), *recv = h_alloc((size_t)nmsg * bytes);
    for (int k = 0; k < nmsg; k++) h_fill(&c, send + (size_t)k * bytes, bytes, H.rank, (uint64_t)k);
    h_poison(recv, (size_t)nmsg * bytes);
    H_CHECK(H.comm, xc_group_start());
    for (int k = 0; k < nmsg; k++)
        H_CHECK(H.comm, xc_send(send + (size_t)k * bytes, bytes, XC_UINT8, right_of(H.rank), 41,
                                H.comm));
    for (int k = 0; k < nmsg; k++)
        H_CHECK(H.comm, xc_recv(recv + (size_t)k * bytes, bytes, XC_UINT8, left_of(H.rank), 41,
                                H.comm));
    H_CHECK(H.comm, xc_group_end());
    count_p2p((uint64_t)nmsg, (uint64_t)nmsg);
    for (int k = 0; k < nmsg; k++)
        h_check_copy(&c, recv + (size_t)k * bytes, bytes, left_of(H.rank), (uint64_t)k,
                     "message k of a group beyond the ring");
    h_free(send);
    h_free(recv);
}

/* Is `r` complete (without waiting)? */
static int is_done(xc_request_t *r)
{
    int done = 0;
    H_CHECK(H.comm, xc_request_test(r, &done));
    return done;
}

/* Wait for a nonblocking send r[0] (to the right) and receive r[1] (from
 * the left, of `n` bytes into `recv` of `cap`): sources, data, the bytes
 * beyond, then free both. */
static void finish_exchange(xc_request_t *r[2], const h_case_t *c, char *recv, size_t n,
                            size_t cap, uint64_t salt)
{
    H_CHECK(H.comm, xc_request_waitall(r, 2));
    H_EQ_U64("a send's request names no source", (uint64_t)(xc_request_source(r[0]) + 1), 0);
    H_EQ_U64("the receive's source", (uint64_t)xc_request_source(r[1]), (uint64_t)left_of(H.rank));
    xc_request_free(r[0]);
    xc_request_free(r[1]);
    h_check_copy(c, recv, n, left_of(H.rank), salt, "received from the left");
    h_check_untouched(c, recv + n, cap - n, "beyond the message");
}

static void isend_case(void)
{
    const int rounds = 100, nmsg = 300;
    const size_t bytes = 1024, big = 1 << 20;
    char *send = h_alloc(3072), *recv = h_alloc(3072);
    xc_stats_t s0 = stats(H.comm);
    int born_done = 0, recv_done = 0;
    for (int i = 0; i < rounds; i++) {
        size_t n = (size_t)(i * 53) % 3073;
        h_case_t c = h_case("p2p express isend", XC_UINT8, H_COPY, n, -1, -1);
        h_fill(&c, send, n, H.rank, (uint64_t)i);
        h_poison(recv, 3072);
        xc_request_t *r[2];
        H_CHECK(H.comm, xc_isend(send, n, XC_UINT8, right_of(H.rank), 6, H.comm, &r[0]));
        born_done += is_done(r[0]);
        xc_stats_t a = stats(H.comm);
        H_CHECK(H.comm, xc_irecv(recv, n, XC_UINT8, left_of(H.rank), 6, H.comm, &r[1]));
        recv_done += (int)(stats(H.comm).express_p2p - a.express_p2p);
        finish_exchange(r, &c, recv, n, 3072, (uint64_t)i);
    }
    count_p2p((uint64_t)rounds, (uint64_t)rounds);
    xc_stats_t s1 = stats(H.comm);
    if (g_chans) {
        /* (The receiver may lag a round: its ring still has room.) */
        H_EQ_U64("every small isend complete when returned", (uint64_t)born_done,
                 (uint64_t)rounds);
        H_EQ_U64("every small isend counted as express (and the irecvs done at the call)",
                 s1.express_p2p - s0.express_p2p, (uint64_t)(rounds + recv_done));
    } else {
        H_EQ_U64("no express isend without channels", s1.express_p2p - s0.express_p2p, 0);
    }
    h_free(send);
    h_free(recv);

    /* Beyond the ring: the later sends queue behind the earlier ones and
     * every message arrives in order. */
    h_case_t c = h_case("p2p express isend overflow", XC_UINT8, H_COPY, bytes, -1, -1);
    send = h_alloc((size_t)nmsg * bytes);
    recv = h_alloc((size_t)nmsg * bytes);
    xc_request_t **r = calloc(2 * (size_t)nmsg, sizeof *r);
    H_TRUE("requests allocated", r != NULL);
    for (int k = 0; k < nmsg; k++) h_fill(&c, send + (size_t)k * bytes, bytes, H.rank, (uint64_t)k);
    h_poison(recv, (size_t)nmsg * bytes);
    born_done = 0;
    for (int k = 0; k < nmsg; k++) {
        H_CHECK(H.comm, xc_isend(send + (size_t)k * bytes, bytes, XC_UINT8, right_of(H.rank), 42,
                                 H.comm, &r[k]));
        born_done += is_done(r[k]);
    }
    for (int k = 0; k < nmsg; k++)
        H_CHECK(H.comm, xc_irecv(recv + (size_t)k * bytes, bytes, XC_UINT8, left_of(H.rank), 42,
                                 H.comm, &r[nmsg + k]));
    H_CHECK(H.comm, xc_request_waitall(r, 2 * (size_t)nmsg));
    for (int k = 0; k < 2 * nmsg; k++) xc_request_free(r[k]);
    count_p2p((uint64_t)nmsg, (uint64_t)nmsg);
    for (int k = 0; k < nmsg; k++)
        h_check_copy(&c, recv + (size_t)k * bytes, bytes, left_of(H.rank), (uint64_t)k,
                     "isend k beyond the ring");
    if (g_chans) H_TRUE("the first isends complete when returned", born_done > 0);
    printf("# rank %d: %d of %d isends beyond the ring complete when returned\n", H.rank,
           born_done, nmsg);
    h_free(send);
    h_free(recv);
    free(r);

    /* A single-copy send, then a small one on the same tag: in that order. */
    h_case_t cb = h_case("p2p express isend after a big one", XC_UINT8, H_COPY, big, -1, -1);
    h_case_t cs = h_case("p2p express isend after a big one", XC_UINT8, H_COPY, bytes, -1, -1);
    char *bs = h_alloc(big), *br = h_alloc(big), *ss = h_alloc(bytes), *sr = h_alloc(bytes);
    h_fill(&cb, bs, big, H.rank, 1);
    h_fill(&cs, ss, bytes, H.rank, 2);
    h_poison(br, big);
    h_poison(sr, bytes);
    xc_request_t *q[4];
    H_CHECK(H.comm, xc_isend(bs, big, XC_UINT8, right_of(H.rank), 43, H.comm, &q[0]));
    H_CHECK(H.comm, xc_isend(ss, bytes, XC_UINT8, right_of(H.rank), 43, H.comm, &q[1]));
    H_CHECK(H.comm, xc_irecv(br, big, XC_UINT8, left_of(H.rank), 43, H.comm, &q[2]));
    H_CHECK(H.comm, xc_irecv(sr, bytes, XC_UINT8, left_of(H.rank), 43, H.comm, &q[3]));
    H_CHECK(H.comm, xc_request_waitall(q, 4));
    for (int k = 0; k < 4; k++) xc_request_free(q[k]);
    count_p2p(2, 2);
    h_check_copy(&cb, br, big, left_of(H.rank), 1, "the big isend, sent first");
    h_check_copy(&cs, sr, bytes, left_of(H.rank), 2, "the small isend, sent after it");
    h_free(bs);
    h_free(br);
    h_free(ss);
    h_free(sr);
}

/* A nonblocking receive whose frame is here already (its sender's
 * express send returned before the barrier) completes at the call; one
 * whose sender sends after the barrier is posted and completes at the
 * wait.  Either way the data, the source and the counts are exact. */
static void irecv_case(void)
{
    const int rounds = 60;
    char *send = h_alloc(2048), *recv = h_alloc(2048);
    int at_call = 0;
    for (int i = 0; i < rounds; i++) {
        size_t n = (size_t)(i * 37) % 2049;
        int late = i % 3 == 2; /* the sender sends after the barrier */
        h_case_t c = h_case("p2p express irecv", XC_UINT8, H_COPY, n, -1, -1);
        h_fill(&c, send, n, H.rank, (uint64_t)i);
        h_poison(recv, 2048);
        xc_request_t *r[2] = {NULL, NULL};
        if (!late) H_CHECK(H.comm, xc_isend(send, n, XC_UINT8, right_of(H.rank), 7, H.comm, &r[0]));
        if (!late) H_CHECK(H.comm, xc_barrier(H.comm));
        xc_stats_t a = stats(H.comm);
        H_CHECK(H.comm, xc_irecv(recv, n, XC_UINT8, left_of(H.rank), 7, H.comm, &r[1]));
        uint64_t now = stats(H.comm).express_p2p - a.express_p2p;
        at_call += (int)now;
        if (g_chans && H.size > 1)
            H_EQ_U64(late ? "an irecv before its frame: not done at the call"
                          : "an irecv after its frame: done at the call",
                     now, (uint64_t)!late);
        if (late) H_CHECK(H.comm, xc_barrier(H.comm));
        if (late) H_CHECK(H.comm, xc_isend(send, n, XC_UINT8, right_of(H.rank), 7, H.comm, &r[0]));
        finish_exchange(r, &c, recv, n, 2048, (uint64_t)i);
    }
    count_p2p((uint64_t)rounds, (uint64_t)rounds);
    H.issued[XC_COLL_BARRIER] += (uint64_t)rounds;
    if (!g_chans || H.size < 2) H_EQ_U64("no irecv done at the call without channels", (uint64_t)at_call, 0);
    h_free(send);
    h_free(recv);
}

static void any_case(void)
{
    if (H.size < 2) return;
    h_case_t c = h_case("p2p express any", XC_INT64, H_COPY, 3, -1, -1);
    int64_t *a = h_alloc(24), *b = h_alloc(24);
    if (H.rank == 1) {
        h_fill(&c, a, 3, 1, 51);
        h_fill(&c, b, 3, 1, 52);
        H_CHECK(H.comm, xc_send(a, 3, XC_INT64, 0, 50, H.comm));
        H_CHECK(H.comm, xc_send(b, 3, XC_INT64, 0, 50, H.comm));
        count_p2p(2, 0);
    } else if (H.rank == 0) {
        h_poison(a, 24);
        h_poison(b, 24);
        H_CHECK(H.comm, xc_group_start());
        H_CHECK(H.comm, xc_recv(a, 3, XC_INT64, 1, 50, H.comm));
        H_CHECK(H.comm, xc_recv(b, 3, XC_INT64, XC_ANY_SOURCE, 50, H.comm));
        H_CHECK(H.comm, xc_group_end());
        h_check_copy(&c, a, 3, 1, 51, "named receive, posted first");
        h_check_copy(&c, b, 3, 1, 52, "any-source receive, posted second");
        count_p2p(0, 2);
    }
    h_free(a);
    h_free(b);
}

static void mixed_case(void)
{
    if (H.size < 2) return;
    for (int any = 0; any <= 1; any++) {
        const size_t n = 5;
        h_case_t c = h_case("p2p express mixed", XC_UINT32, H_COPY, n, -1, -1);
        uint32_t *buf = h_alloc(3 * n * 4);
        int tag = 80 + any;
        if (H.rank == 1) {
            for (int k = 0; k < 3; k++) {
                h_fill(&c, buf + k * n, n, 1, (uint64_t)k);
                H_CHECK(H.comm, xc_send(buf + k * n, n, XC_UINT32, 0, tag, H.comm));
            }
            count_p2p(3, 0);
        }
        H_CHECK(H.comm, xc_barrier(H.comm)); /* the frames are there */
        H.issued[XC_COLL_BARRIER]++;
        if (H.rank == 0) {
            h_poison(buf, 3 * n * 4);
            xc_request_t *r = NULL;
            H_CHECK(H.comm, xc_group_start());
            H_CHECK(H.comm, xc_recv(buf, n, XC_UINT32, 1, tag, H.comm));
            H_CHECK(H.comm, xc_irecv(buf + n, n, XC_UINT32, any ? XC_ANY_SOURCE : 1, tag,
                                     H.comm, &r));
            H_CHECK(H.comm, xc_recv(buf + 2 * n, n, XC_UINT32, 1, tag, H.comm));
            H_CHECK(H.comm, xc_group_end());
            H_CHECK(H.comm, xc_request_wait(r));
            xc_request_free(r);
            h_check_copy(&c, buf, n, 1, 0, "the group's first receive: the first message");
            h_check_copy(&c, buf + n, n, 1, 1, "the irecv after it: the second");
            h_check_copy(&c, buf + 2 * n, n, 1, 2, "the receive after the irecv: the third");
            count_p2p(0, 3);
        }
        h_free(buf);
    }
}

/* Three frames from rank 1 to rank 0 (tags 71, 72, 73), received in the
 * order of tags `order`: at once (a receive finds its frame at the head of
 * its channel and reads it straight from there, or a frame not its own
 * there and leaves it to the ordinary path, or nothing yet), or after a
 * barrier (every frame there, in the channel or kept early).  Returns the
 * receives' bytes. */
static uint64_t direct_round(const int order[3], int after_barrier, const char *what)
{
    /* uint64: 40 B (two lines), 200 B (bulk), 40 B: tag 73's receive, if
     * it took tag 71's frame (the same description), would get its data */
    static const size_t n[3] = {5, 25, 5};
    h_case_t c = h_case("p2p express direct", XC_UINT64, H_COPY, 25, -1, -1);
    uint64_t *buf[3];
    for (int k = 0; k < 3; k++) buf[k] = h_alloc(n[k] * 8);
    if (H.rank == 1) {
        for (int k = 0; k < 3; k++) {
            h_fill(&c, buf[k], n[k], 1, (uint64_t)(71 + k));
            H_CHECK(H.comm, xc_send(buf[k], n[k], XC_UINT64, 0, 71 + k, H.comm));
        }
        count_p2p(3, 0);
    }
    if (after_barrier) {
        H_CHECK(H.comm, xc_barrier(H.comm));
        H.issued[XC_COLL_BARRIER]++;
    }
    xc_stats_t s0 = stats(H.comm);
    if (H.rank == 0) {
        for (int j = 0; j < 3; j++) {
            int k = order[j];
            h_poison(buf[k], n[k] * 8);
            H_CHECK(H.comm, xc_recv(buf[k], n[k], XC_UINT64, 1, 71 + k, H.comm));
        }
        xc_stats_t s1 = stats(H.comm);
        for (int k = 0; k < 3; k++) h_check_copy(&c, buf[k], n[k], 1, (uint64_t)(71 + k), what);
        count_p2p(0, 3);
        if (g_chans && after_barrier) {
            char m[160];
            snprintf(m, sizeof m, "%s: every receive on the express path", what);
            H_EQ_U64(m, s1.express_p2p - s0.express_p2p, 3);
        }
    }
    H_CHECK(H.comm, xc_barrier(H.comm));
    H.issued[XC_COLL_BARRIER]++;
    for (int k = 0; k < 3; k++) h_free(buf[k]);
    return H.rank == 0 ? (5 + 25 + 5) * 8 : 0;
}

static void direct_case(void)
{
    if (H.size < 2) return;
    static const int in_order[3] = {0, 1, 2}, out_of_order[3] = {2, 0, 1};
    /* Counted from before the barrier: rank 1 sends its first frames as it
     * leaves it, and rank 0, still waiting there, may drain (and count)
     * them before it returns (seen once under ASan: 840 of 1120 bytes). */
    xc_stats_t s0 = stats(H.comm);
    H_CHECK(H.comm, xc_barrier(H.comm));
    H.issued[XC_COLL_BARRIER]++;
    uint64_t bytes = direct_round(in_order, 0, "in sending order, at once");
    bytes += direct_round(out_of_order, 0, "out of order, at once");
    bytes += direct_round(in_order, 1, "in sending order, after a barrier");
    bytes += direct_round(out_of_order, 1, "out of order, after a barrier");
    xc_stats_t s1 = stats(H.comm);
    if (g_chans && H.rank == 0)
        H_EQ_U64("shared-memory bytes received by the receives, counted once each",
                 s1.bytes_recv[XC_TRANSPORT_SHM] - s0.bytes_recv[XC_TRANSPORT_SHM], bytes);
}

static void mismatch_case(void)
{
    if (H.size < 2) return;
    xc_comm_t *child = NULL;
    H_CHECK(H.comm, xc_comm_split(H.comm, H.rank < 2 ? 0 : 1, H.rank, &child, NULL));
    int32_t v[5] = {1, 2, 3, 4, 5};
    if (H.rank == 1) {
        H_CHECK(child, xc_send(v, 4, XC_INT32, 0, 61, child));
        H_EXPECT_RC(child, XC_ERR_MISMATCH, xc_barrier(child));
    } else if (H.rank == 0) {
        H_EXPECT_RC(child, XC_ERR_MISMATCH, xc_recv(v, 5, XC_INT32, 1, 61, child));
        H_TRUE("the cause names the sender's description",
               strstr(xc_comm_last_error(child), "4 elements") != NULL);
    }
    H_CHECK(child, xc_comm_destroy(child));

    /* The same for an irecv whose frame is there at the call: the
     * mismatch is found there (with channels) or at the wait. */
    H_CHECK(H.comm, xc_comm_split(H.comm, H.rank < 2 ? 0 : 1, H.rank, &child, NULL));
    if (H.rank == 1) H_CHECK(child, xc_send(v, 4, XC_INT32, 0, 62, child));
    H_CHECK(H.comm, xc_barrier(H.comm));
    if (H.rank == 1) {
        H_EXPECT_RC(child, XC_ERR_MISMATCH, xc_barrier(child));
    } else if (H.rank == 0) {
        xc_request_t *r = NULL;
        xc_result_t rc = xc_irecv(v, 5, XC_INT32, 1, 62, child, &r);
        if (g_chans) H_EQ_U64("an irecv's mismatch found at the call", (uint64_t)rc,
                              (uint64_t)XC_ERR_MISMATCH);
        if (rc == XC_OK) {
            H_TRUE("a request", r != NULL);
            rc = xc_request_wait(r);
            xc_request_free(r);
        } else {
            H_TRUE("no request from a failed irecv", r == NULL);
        }
        H_EQ_U64("an irecv of 5 elements from a send of 4: XC_ERR_MISMATCH", (uint64_t)rc,
                 (uint64_t)XC_ERR_MISMATCH);
        H_TRUE("the irecv's cause names the sender's description",
               strstr(xc_comm_last_error(child), "4 elements") != NULL);
    }
    H_CHECK(child, xc_comm_destroy(child));
}

int main(int argc, char **argv)
{
    h_init(argc, argv);
    loop_case();
    late_case();
    order_case();
    early_case();
    overflow_case();
    isend_case();
    irecv_case();
    any_case();
    mixed_case();
    direct_case();
    h_check_stats(H.comm, H.base_ops, H.issued, "after the point-to-point cases");
    mismatch_case();
    return h_finish();
}
