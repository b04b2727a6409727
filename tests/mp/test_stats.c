/*
 * test_stats.c -- xc_comm_stats counts the bytes each transport moved.
 *
 * Messages between ranks of one node must go through shared memory (the
 * point-to-point channels) and not a byte over TCP, messages across nodes
 * over TCP (run with `xcoll-run --nodes K` to emulate several nodes); with
 * XCOLL_SHM=0 everything goes over TCP.  On a single node the shared-memory
 * collectives move no TCP bytes at all.  Checked with exact byte counts where the accounting is defined
 * (docs/engine.md): an all-reduce of n bytes adds n to bytes_sent and
 * bytes_recv of shared memory on every rank; a message of m bytes adds m to
 * the sender's bytes_sent and the receiver's bytes_recv of its transport,
 * both below the single-copy threshold (channel) and above it (rendezvous).
 * A message to oneself counts as XC_TRANSPORT_SELF.
 */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Counters between barriers: what a peer does before or after does not
 * leak into the interval. */
static xc_stats_t stats(void)
{
    H_CHECK(H.comm, xc_barrier(H.comm));
    xc_stats_t s;
    memset(&s, 0, sizeof s);
    s.size = sizeof s;
    H_CHECK(H.comm, xc_comm_stats(H.comm, &s));
    H_CHECK(H.comm, xc_barrier(H.comm)); /* nobody sends before all have looked */
    return s;
}

/* A ring exchange of `bytes` (send right, receive from the left). */
static void ring_exchange(size_t bytes)
{
    char *out = h_alloc(bytes), *in = h_alloc(bytes);
    memset(out, H.rank + 1, bytes);
    H_CHECK(H.comm, xc_group_start());
    H_CHECK(H.comm, xc_send(out, bytes, XC_UINT8, (H.rank + 1) % H.size, 7, H.comm));
    H_CHECK(H.comm, xc_recv(in, bytes, XC_UINT8, (H.rank + H.size - 1) % H.size, 7, H.comm));
    H_CHECK(H.comm, xc_group_end());
    int left = (H.rank + H.size - 1) % H.size;
    size_t bad = 0;
    for (size_t i = 0; i < bytes; i++) bad += (unsigned char)in[i] != (unsigned char)(left + 1);
    H_EQ_U64("wrong bytes received", bad, 0);
    h_free(out);
    h_free(in);
}

int main(int argc, char **argv)
{
    h_init(argc, argv);
    const char *env = getenv("XCOLL_SHM");
    int shm_on = !(env && !strcmp(env, "0"));
    /* Which transport reaches each rank: shared memory on the own node
     * (when there is a node peer at all), TCP across nodes. */
    int *node = h_alloc((size_t)H.size * sizeof *node);
    int mynode = xc_comm_node(H.comm);
    H_CHECK(H.comm, xc_allgather(&mynode, node, 1, XC_INT32, H.comm));
    int right = (H.rank + 1) % H.size, left = (H.rank + H.size - 1) % H.size;
    int tr_right = shm_on && node[right] == mynode ? XC_TRANSPORT_SHM : XC_TRANSPORT_TCP;
    int tr_left = shm_on && node[left] == mynode ? XC_TRANSPORT_SHM : XC_TRANSPORT_TCP;
    if (shm_on && xc_comm_node_count(H.comm) == 1 && H.size > 1) {
        /* Whatever algorithm the model picks, nothing goes over TCP; the
         * shared-memory collective has an exact accounting. */
        size_t n = 1000;
        float *a = h_alloc(n * sizeof *a);
        for (size_t i = 0; i < n; i++) a[i] = (float)i;
        int shm_id = -1;
        for (int id = 0; id < XC_STATS_MAX_ALGOS; id++)
            if (xc_algo_name(id) && !strcmp(xc_algo_name(id), "allreduce.shm")) shm_id = id;
        xc_stats_t s0 = stats();
        H_CHECK(H.comm, xc_allreduce(a, a, n, XC_FLOAT32, XC_SUM, H.comm));
        xc_stats_t s1 = stats();
        H_EQ_U64("tcp bytes of an all-reduce on one node",
                 s1.bytes_sent[XC_TRANSPORT_TCP] - s0.bytes_sent[XC_TRANSPORT_TCP], 0);
        if (shm_id >= 0 && s1.algo_ops[shm_id] > s0.algo_ops[shm_id]) {
            /* The shared-memory collective: input counted as sent, output
             * as received. */
            H_EQ_U64("shm bytes_sent of a 4000-byte all-reduce",
                     s1.bytes_sent[XC_TRANSPORT_SHM] - s0.bytes_sent[XC_TRANSPORT_SHM], n * 4);
            H_EQ_U64("shm bytes_recv of a 4000-byte all-reduce",
                     s1.bytes_recv[XC_TRANSPORT_SHM] - s0.bytes_recv[XC_TRANSPORT_SHM], n * 4);
        } else if (s1.bytes_sent[XC_TRANSPORT_SHM] == s0.bytes_sent[XC_TRANSPORT_SHM]) {
            /* A schedule over the channels: its frames are shm bytes. */
            h_fail(__FILE__, __LINE__, "an all-reduce on one node moved no shared-memory bytes");
        }
        h_free(a);
    }
    if (H.size > 1) {
        size_t sizes[] = {1000, (size_t)1 << 20};
        for (int k = 0; k < 2; k++) {
            xc_stats_t s0 = stats();
            ring_exchange(sizes[k]);
            /* The receiver counts a rendezvous message when it has read it,
             * the sender when the receiver acknowledged it (before its send
             * completes), so the barrier in stats() settles both. */
            xc_stats_t s1 = stats();
            for (int t = XC_TRANSPORT_TCP; t <= XC_TRANSPORT_SHM; t++) {
                char what[128];
                snprintf(what, sizeof what, "%s bytes_sent by a %zu-byte message to rank %d",
                         xc_transport_name(t), sizes[k], right);
                H_EQ_U64(what, s1.bytes_sent[t] - s0.bytes_sent[t], t == tr_right ? sizes[k] : 0);
                snprintf(what, sizeof what, "%s bytes_recv of a %zu-byte message from rank %d",
                         xc_transport_name(t), sizes[k], left);
                H_EQ_U64(what, s1.bytes_recv[t] - s0.bytes_recv[t], t == tr_left ? sizes[k] : 0);
            }
        }
    }
    h_free(node);
    /* To oneself. */
    int v = 42, w = 0;
    xc_stats_t s0 = stats();
    H_CHECK(H.comm, xc_group_start());
    H_CHECK(H.comm, xc_send(&v, 1, XC_INT32, H.rank, 1, H.comm));
    H_CHECK(H.comm, xc_recv(&w, 1, XC_INT32, H.rank, 1, H.comm));
    H_CHECK(H.comm, xc_group_end());
    xc_stats_t s1 = stats();
    H_EQ_INT("message to self", w, 42);
    H_EQ_U64("self bytes_sent", s1.bytes_sent[XC_TRANSPORT_SELF] - s0.bytes_sent[XC_TRANSPORT_SELF],
             4);
    return h_finish();
}
