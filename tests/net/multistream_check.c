/*
 * multistream_check.c -- one rank of the multi-host job run by
 * multistream.sh on the test bed (bench/netbed.sh): 2 hosts x 2 ranks,
 * every pair of ranks on different hosts joined by several TCP streams
 * (ranks of one host: one socket, their traffic goes through shared
 * memory).
 *
 * Usage (ranks started by xcoll-run in each namespace host):
 *   multistream_check NODES LOCAL_SIZE STREAMS
 * STREAMS is the XCOLL_SOCKETS_PER_PEER every rank runs with, or "mixed":
 * rank r sets 1 + r % 3 itself, and a pair then uses the connecting
 * (higher) rank's value.
 *
 * Checks, with exact arithmetic (integers, or floats holding small
 * integers), at large and odd sizes whose frames are striped over the
 * streams in whole and partial chunks:
 *   - the layout: NODES nodes of LOCAL_SIZE ranks;
 *   - allreduce, allgather, alltoall, bcast from a rank on each host;
 *   - point-to-point between every pair, large and tiny messages with
 *     three tags posted in a different order than sent, in a group;
 *   - a burst of non-blocking allreduces of alternating sizes waited
 *     together (frames of several collectives queued back to back: the
 *     per-peer order must survive striping);
 *   - xc_comm_stats: bytes went over TCP, and over shared memory exactly
 *     when the host has more than one rank;
 *   - the streams really carry data: among this process's TCP sockets
 *     (TCP_INFO), as many as the streams to other hosts add up to received
 *     more than 256 KiB, plus at most the single sockets to this host's
 *     ranks.
 * Exit 0 = pass.
 */
#include "../fault/harness.h"

#include <dirent.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define CHUNK (512 * 1024) /* XC__STRIPE_CHUNK, for choosing sizes */
/* The point-to-point messages every rank sends every other rank. */
#define P2P_LEN0 ((size_t)3 * 3 * CHUNK + 13)
#define P2P_LEN1 ((size_t)5)
#define P2P_LEN2 ((size_t)CHUNK + CHUNK / 3 + 7)

static int rank, size;

static int local_size; /* ranks per host: rank h*local_size+i is on host h */

/* Streams between this rank and `peer`: one on the same host, else the
 * connecting (higher) rank's setting. */
static int pair_streams(const char *mode, int peer)
{
    if (peer / local_size == rank / local_size) return 1;
    if (strcmp(mode, "mixed") != 0) return atoi(mode);
    int hi = rank > peer ? rank : peer;
    return 1 + hi % 3;
}

static uint8_t p2p_byte(int src, int dst, int tag, size_t i)
{
    return (uint8_t)(src * 37 + dst * 11 + tag * 101 + i * 7 + (i >> 9));
}

static void check_allreduce_i64(xc_comm_t *comm, size_t n)
{
    int64_t *a = malloc(n * sizeof *a);
    if (!a) return;
    for (size_t k = 0; k < n; k++) a[k] = (int64_t)(rank + 1) * 1000003 + (int64_t)k;
    xc_result_t rc = xc_allreduce(a, a, n, XC_INT64, XC_SUM, comm);
    XT_CHECK_RC(rc, XC_OK);
    if (rc == XC_OK) {
        int64_t base = (int64_t)size * (size + 1) / 2 * 1000003;
        for (size_t k = 0; k < n; k++)
            if (!XT_CHECK_INT(a[k], ==, base + (int64_t)size * (int64_t)k)) {
                xt_log("allreduce int64 n=%zu: first wrong element %zu", n, k);
                break;
            }
    }
    free(a);
}

/* TCP sockets of this process that received more than `min` bytes. */
static int busy_sockets(uint64_t min, int *all)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    *all = 0;
    if (!d) return -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        int fd = atoi(e->d_name);
        struct stat st;
        if (e->d_name[0] == '.' || fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
        struct tcp_info ti;
        socklen_t len = sizeof ti;
        memset(&ti, 0, sizeof ti);
        if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0) continue;
        if (len < offsetof(struct tcp_info, tcpi_bytes_received) + sizeof ti.tcpi_bytes_received)
            continue;
        (*all)++;
        if (ti.tcpi_bytes_received > min) n++;
    }
    closedir(d);
    return n;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s NODES LOCAL_SIZE STREAMS|mixed\n", argv[0]);
        return 2;
    }
    int want_nodes = atoi(argv[1]), want_local = atoi(argv[2]);
    local_size = want_local > 0 ? want_local : 1;
    const char *mode = argv[3];
    const char *rs = getenv("XCOLL_RANK");
    xt_init("multistream_check", mode);
    xt_set_tag("rank %s", rs ? rs : "?");
    alarm(90);
    if (!strcmp(mode, "mixed")) {
        char v[8];
        snprintf(v, sizeof v, "%d", 1 + (rs ? atoi(rs) : 0) % 3);
        setenv("XCOLL_SOCKETS_PER_PEER", v, 1);
    }

    xc_comm_t *comm = xt_comm_world(30000);
    if (!comm) return 1;
    rank = xc_comm_rank(comm);
    size = xc_comm_size(comm);
    XT_CHECK_INT(xc_comm_node_count(comm), ==, want_nodes);
    XT_CHECK_INT(xc_comm_local_size(comm), ==, want_local);

    /* allreduce: a tiny, an odd, a just-over-a-chunk and a large count */
    size_t ar_counts[] = {1, 7, 131071, 3 * CHUNK / 8 + 5, 2 * 1024 * 1024 + 17};
    for (size_t i = 0; i < sizeof ar_counts / sizeof ar_counts[0]; i++)
        check_allreduce_i64(comm, ar_counts[i]);

    /* allreduce fp32 of small integers (exact) */
    {
        size_t n = 1000003;
        float *f = malloc(n * sizeof *f);
        if (!f) return 1;
        for (size_t k = 0; k < n; k++) f[k] = (float)(rank + 1 + (int)(k % 8));
        XT_CHECK_RC(xc_allreduce(f, f, n, XC_FLOAT32, XC_SUM, comm), XC_OK);
        for (size_t k = 0; k < n; k++)
            if (!XT_CHECK_DBL(f[k], ==, size * (size + 1) / 2 + size * (double)(k % 8))) break;
        free(f);
    }

    /* allgather of an odd count just over a chunk per rank */
    {
        size_t n = CHUNK / 4 + 3;
        int32_t *in = malloc(n * sizeof *in), *out = malloc((size_t)size * n * sizeof *out);
        if (!in || !out) return 1;
        for (size_t k = 0; k < n; k++) in[k] = rank * 10000000 + (int32_t)k;
        XT_CHECK_RC(xc_allgather(in, out, n, XC_INT32, comm), XC_OK);
        for (int r = 0; r < size; r++)
            for (size_t k = 0; k < n; k++)
                if (!XT_CHECK_INT(out[(size_t)r * n + k], ==, r * 10000000 + (int32_t)k)) {
                    r = size;
                    break;
                }
        free(in);
        free(out);
    }

    /* alltoall: blocks of 200003 int32 (two chunks and a bit, odd) */
    {
        size_t n = 200003;
        int32_t *in = malloc((size_t)size * n * sizeof *in);
        int32_t *out = malloc((size_t)size * n * sizeof *out);
        if (!in || !out) return 1;
        for (int j = 0; j < size; j++)
            for (size_t k = 0; k < n; k++)
                in[(size_t)j * n + k] = rank * 100000000 + j * 1000000 + (int32_t)(k % 999983);
        XT_CHECK_RC(xc_alltoall(in, out, n, XC_INT32, comm), XC_OK);
        for (int i = 0; i < size; i++)
            for (size_t k = 0; k < n; k++)
                if (!XT_CHECK_INT(out[(size_t)i * n + k], ==,
                                  i * 100000000 + rank * 1000000 + (int32_t)(k % 999983))) {
                    i = size;
                    break;
                }
        free(in);
        free(out);
    }

    /* bcast of an odd large count, from a rank of each host */
    {
        size_t n = 2500009;
        int32_t *v = malloc(n * sizeof *v);
        if (!v) return 1;
        int roots[2] = {size - 1, 0};
        for (int ri = 0; ri < 2; ri++) {
            int root = roots[ri];
            for (size_t k = 0; k < n; k++)
                v[k] = rank == root ? (int32_t)(k * 3 + (size_t)root) : -1;
            XT_CHECK_RC(xc_bcast(v, n, XC_INT32, root, comm), XC_OK);
            for (size_t k = 0; k < n; k++)
                if (!XT_CHECK_INT(v[k], ==, (int32_t)(k * 3 + (size_t)root))) break;
        }
        free(v);
    }

    /* point-to-point between every pair: tags 0 (large: 3 chunks per
     * stream and 13 bytes), 1 (5 bytes) and 2 (large, odd), received in
     * the order 2, 0, 1 */
    {
        size_t len[3] = {P2P_LEN0, P2P_LEN1, P2P_LEN2};
        uint8_t *sb[3], *rb[3];
        for (int t = 0; t < 3; t++) {
            sb[t] = malloc((size_t)size * len[t]);
            rb[t] = malloc((size_t)size * len[t]);
            if (!sb[t] || !rb[t]) return 1;
            for (int p = 0; p < size; p++)
                for (size_t i = 0; i < len[t]; i++) {
                    sb[t][(size_t)p * len[t] + i] = p2p_byte(rank, p, t, i);
                    rb[t][(size_t)p * len[t] + i] = 0xee;
                }
        }
        int order[3] = {2, 0, 1};
        XT_CHECK_RC(xc_group_start(), XC_OK);
        for (int p = 0; p < size; p++) {
            if (p == rank) continue;
            for (int t = 0; t < 3; t++)
                XT_CHECK_RC(xc_send(sb[t] + (size_t)p * len[t], len[t], XC_UINT8, p, t, comm),
                            XC_OK);
            for (int oi = 0; oi < 3; oi++) {
                int t = order[oi];
                XT_CHECK_RC(xc_recv(rb[t] + (size_t)p * len[t], len[t], XC_UINT8, p, t, comm),
                            XC_OK);
            }
        }
        XT_CHECK_RC(xc_group_end(), XC_OK);
        for (int p = 0; p < size; p++) {
            if (p == rank) continue;
            for (int t = 0; t < 3; t++)
                for (size_t i = 0; i < len[t]; i++)
                    if (!XT_CHECK_INT(rb[t][(size_t)p * len[t] + i], ==, p2p_byte(p, rank, t, i))) {
                        xt_log("p2p from %d tag %d: first wrong byte %zu of %zu", p, t, i, len[t]);
                        break;
                    }
        }
        for (int t = 0; t < 3; t++) {
            free(sb[t]);
            free(rb[t]);
        }
    }

    /* a burst of non-blocking allreduces of alternating sizes */
    {
        enum { NB = 6 };
        size_t n[NB] = {3, 700001, 1, 1048579, 64, 393217};
        int64_t *buf[NB];
        xc_request_t *req[NB];
        for (int i = 0; i < NB; i++) {
            buf[i] = malloc(n[i] * sizeof *buf[i]);
            if (!buf[i]) return 1;
            for (size_t k = 0; k < n[i]; k++) buf[i][k] = (int64_t)(rank + 1) * (i + 1) + (int64_t)k;
            XT_CHECK_RC(xc_iallreduce(buf[i], buf[i], n[i], XC_INT64, XC_SUM, comm, &req[i]),
                        XC_OK);
        }
        XT_CHECK_RC(xc_request_waitall(req, NB), XC_OK);
        for (int i = 0; i < NB; i++) {
            int64_t base = (int64_t)size * (size + 1) / 2 * (i + 1);
            for (size_t k = 0; k < n[i]; k++)
                if (!XT_CHECK_INT(buf[i][k], ==, base + (int64_t)size * (int64_t)k)) break;
            xc_request_free(req[i]);
            free(buf[i]);
        }
    }

    /* Traffic between hosts crossed TCP; between the ranks of one host
     * it went through shared memory (the host's segment), if any. */
    xc_stats_t st;
    memset(&st, 0, sizeof st);
    st.size = sizeof st;
    XT_CHECK_RC(xc_comm_stats(comm, &st), XC_OK);
    /* At least the point-to-point messages to and from the other host's
     * ranks (the collectives' share depends on the algorithms chosen). */
    long long remote = size - local_size;
    long long p2p_min = remote * (long long)(P2P_LEN0 + P2P_LEN1 + P2P_LEN2);
    XT_CHECK_INT(st.bytes_sent[XC_TRANSPORT_TCP], >=, p2p_min);
    XT_CHECK_INT(st.bytes_recv[XC_TRANSPORT_TCP], >=, p2p_min);
    if (local_size > 1) {
        XT_CHECK_INT(st.bytes_sent[XC_TRANSPORT_SHM], >, 0);
        XT_CHECK_INT(st.bytes_recv[XC_TRANSPORT_SHM], >, 0);
    } else {
        XT_CHECK_INT(st.bytes_sent[XC_TRANSPORT_SHM], ==, 0);
        XT_CHECK_INT(st.bytes_recv[XC_TRANSPORT_SHM], ==, 0);
    }

    /* Every stream to another host carried data (the p2p exchange alone
     * put at least 3 chunks on each).  The single socket to a rank of this
     * host may or may not have (what shared memory does not carry goes
     * over it), so it is allowed, not required. */
    int expect = 0, local = 0, all = 0;
    for (int p = 0; p < size; p++) {
        if (p == rank) continue;
        if (p / local_size == rank / local_size) local++;
        else expect += pair_streams(mode, p);
    }
    int busy = busy_sockets(256 * 1024, &all);
    xt_log("tcp sockets %d, of which %d received > 256 KiB (expected %d streams to other "
           "hosts, + at most %d to this one); tcp bytes sent %llu",
           all, busy, expect, local, (unsigned long long)st.bytes_sent[XC_TRANSPORT_TCP]);
    XT_CHECK_INT(busy, >=, expect);
    XT_CHECK_INT(busy, <=, expect + local);

    XT_CHECK_RC(xc_barrier(comm), XC_OK);
    XT_CHECK_RC(xc_comm_destroy(comm), XC_OK);
    xt_log("%s", xt_failures ? "FAILED" : "passed");
    return xt_result();
}
