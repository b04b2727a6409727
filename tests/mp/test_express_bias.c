/*
 * test_express_bias.c -- small blocking broadcasts and reduces that a
 * thread makes without the communicator's lock (the express bias,
 * src/engine/bias.h) stay correct while other threads take the lock.
 *
 * 1. Alone: thousands of 8-byte broadcasts and reduces, every root in
 *    turn, each result checked; where biases are possible (shared memory
 *    on one node, membarrier's private expedited barrier, not a
 *    ThreadSanitizer build, XCOLL_EXPRESS_BIAS not 0) the thread must
 *    have held one during it (granted in the loop or before it).
 * 2. With a second thread that takes the lock every few microseconds
 *    (xc_comm_stats, whose counts must only grow): the same loop, every
 *    result checked; where a bias was granted during it, it must have been
 *    revoked too.
 * 3. A request waited on by another thread while this one keeps calling:
 *    the blocking calls queue behind it (no express call while an
 *    operation is pending) and all complete.
 * The operation counts of xc_comm_stats must equal the calls made.
 */
#include "harness.h"

#include <linux/membarrier.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static uint64_t issued[XC_COLL_COUNT];

/* One broadcast (root i % size, value a function of i and the root) and
 * one reduce (sum of rank + i over ranks, to root (i + 1) % size). */
static void step(int i)
{
    int root = i % H.size;
    int64_t v = H.rank == root ? (int64_t)i * 1000 + root : -1;
    H_CHECK(H.comm, xc_bcast(&v, 1, XC_INT64, root, H.comm));
    issued[XC_COLL_BCAST]++;
    h_checked();
    if (v != (int64_t)i * 1000 + root)
        h_fail(__FILE__, __LINE__, "broadcast %d from %d: got %lld", i, root, (long long)v);
    int32_t x[2] = {H.rank + i, -H.rank}, y[2] = {-7, -7};
    int rroot = (i + 1) % H.size;
    H_CHECK(H.comm, xc_reduce(x, y, 2, XC_INT32, XC_SUM, rroot, H.comm));
    issued[XC_COLL_REDUCE]++;
    if (H.rank != rroot) return;
    int32_t s = 0, t = 0;
    for (int r = 0; r < H.size; r++) s += r + i, t -= r;
    h_checked();
    if (y[0] != s || y[1] != t)
        h_fail(__FILE__, __LINE__, "reduce %d to %d: got %d %d, expected %d %d", i, rroot, y[0],
               y[1], s, t);
}

static xc_stats_t stats(void)
{
    xc_stats_t s;
    memset(&s, 0, sizeof s);
    s.size = sizeof s;
    H_CHECK(H.comm, xc_comm_stats(H.comm, &s));
    return s;
}

/* Can this process hold a bias at all?  (What xc__bias_available asks.) */
static int bias_possible(void)
{
#if defined(__SANITIZE_THREAD__)
    return 0;
#else
    const char *e = getenv("XCOLL_EXPRESS_BIAS");
    if (e && !strcmp(e, "0")) return 0;
    e = getenv("XCOLL_SHM");
    if (e && !strcmp(e, "0")) return 0;
    if (getenv("XCOLL_ALGO") || getenv("XCOLL_TRACE") || getenv("XCOLL_TRACE_SUMMARY")) return 0;
    if (H.size < 2 || xc_comm_node_count(H.comm) != 1) return 0;
    long q = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
    return q > 0 && (q & MEMBARRIER_CMD_PRIVATE_EXPEDITED);
#endif
}

static volatile int stop;
static unsigned long looks;

/* Phase 2's other thread: the lock every ~20 us. */
static void *taker(void *arg)
{
    (void)arg;
    uint64_t last = 0;
    struct timespec ts = {0, 20000};
    while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
        xc_stats_t s = stats();
        uint64_t n = s.ops[XC_COLL_BCAST] + s.ops[XC_COLL_REDUCE];
        h_checked();
        if (n < last) h_fail(__FILE__, __LINE__, "operation count went back: %llu after %llu",
                             (unsigned long long)n, (unsigned long long)last);
        last = n;
        looks++;
        nanosleep(&ts, NULL);
    }
    return NULL;
}

/* Phase 3's other thread: waits on the request it is given. */
static void *waiter(void *arg)
{
    xc_request_t *req = arg;
    xc_result_t rc = xc_request_wait(req);
    h_checked();
    if (rc != XC_OK) h_fail(__FILE__, __LINE__, "waiting on another thread's request: %s",
                            xc_err_name(rc));
    xc_request_free(req);
    return NULL;
}

int main(int argc, char **argv)
{
    h_init(argc, argv);
    int n1 = H.full ? 20000 : 4000, n2 = H.full ? 60000 : 12000;
    uint64_t base[XC_COLL_COUNT];
    h_stats_ops(H.comm, base);
    int expect = bias_possible();

    xc_stats_t s0 = stats();
    for (int i = 0; i < n1; i++) step(i);
    xc_stats_t s1 = stats();
    uint64_t g1 = s1.express_bias_grants - s0.express_bias_grants;
    if (expect) {
        h_checked();
        /* Held at some point of the loop: granted in it, or already held
         * at its start (the set-up's small all-reduces and barriers are
         * express calls too; the progress thread's heartbeat may revoke it
         * at any time, which the loop's calls then earn back). */
        if (g1 == 0 && s0.express_bias_grants <= s0.express_bias_revokes)
            h_fail(__FILE__, __LINE__, "no express bias held during %d calls alone", 2 * n1);
    }

    pthread_t t;
    if (pthread_create(&t, NULL, taker, NULL) != 0) {
        fprintf(stderr, "pthread_create failed\n");
        return 1;
    }
    for (int i = 0; i < n2; i++) step(n1 + i);
    __atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
    xc_stats_t s2 = stats();
    uint64_t g2 = s2.express_bias_grants - s1.express_bias_grants;
    uint64_t r2 = s2.express_bias_revokes - s1.express_bias_revokes;
    h_checked();
    if (g2 > 0 && r2 == 0 && looks > 100)
        h_fail(__FILE__, __LINE__, "%llu biases granted while another thread took the lock "
               "%lu times, none revoked", (unsigned long long)g2, looks);

    for (int k = 0; k < 20; k++) {
        xc_request_t *req;
        H_CHECK(H.comm, xc_ibarrier(H.comm, &req));
        issued[XC_COLL_BARRIER]++;
        pthread_t w;
        if (pthread_create(&w, NULL, waiter, req) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            return 1;
        }
        for (int i = 0; i < 25; i++) step(n1 + n2 + 25 * k + i);
        pthread_join(w, NULL);
    }

    h_check_stats(H.comm, base, issued, "express calls with other threads");
    if (H.rank == 0)
        printf("express bias: %llu granted alone (held before it: %s); with another thread "
               "taking the lock %lu times, %llu granted and %llu revoked%s\n",
               (unsigned long long)g1,
               s0.express_bias_grants > s0.express_bias_revokes ? "yes" : "no", looks,
               (unsigned long long)g2, (unsigned long long)r2,
               expect ? "" : " (biases not possible here: correctness only)");
    return h_finish();
}
