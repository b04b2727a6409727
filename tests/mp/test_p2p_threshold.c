/*
 * test_p2p_threshold.c -- where point-to-point messages between ranks of
 * one node switch from the channel's ring to single copy.
 *
 * Every rank sends `bytes` to its right neighbour and receives from its
 * left, for a ladder of sizes; the received data is checked, and the rank's
 * xc_stats_t.single_copy_bytes tells whether the message was read single
 * copy (grew by exactly its size) or came through the ring (did not grow).
 * The specification (docs/config.md, XCOLL_SHM_P2P_CMA_MIN_KB):
 *   - one threshold T per communicator, the same on every rank: every size
 *     below it through the ring, every size from it single copy;
 *   - XCOLL_SHM_P2P_CMA_MIN_KB=K: T = K KiB exactly;
 *   - auto on a crowded node (more ranks than the CPUs they may run on):
 *     the measurement held between 32 and 64 KiB (measured at creation:
 *     32 KiB <= T <= 64 KiB; from a profile file with big_from B, T =
 *     min(64 KiB, max(32 KiB, B)) exactly);
 *   - auto otherwise: T is the profile's shared-memory big_from (the cost
 *     model's measurement, src/model/measure.c lead_end), but never
 *     below 8 KiB: measured at creation, 8 KiB <= T <= 1 MiB; from a
 *     profile file (XCOLL_PROFILE) with big_from B, T = max(8 KiB, B)
 *     exactly -- checked with three files, B = 4 / 40 / 128 KiB, each on a
 *     child communicator that rank 0 creates with the file named.
 * Without single copy on this machine (no message read single copy at any
 * size) only the data are checked.
 */
#include "harness.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const size_t k_sizes[] = {4096,   8188,   8192,   12288,  16384,   32764,  32768,
                                 36860,  40960,  49152,  65532,  65536,   98304,  131068,
                                 131072, 262144, 524288, 1048576, 4194304};
#define NSIZES (sizeof k_sizes / sizeof k_sizes[0])

/* The ranks are crowded as the library judges it: more of them than CPUs
 * in the union of their affinity masks. */
static int crowded(void)
{
    cpu_set_t own, all;
    CPU_ZERO(&own);
    if (sched_getaffinity(0, sizeof own, &own) != 0) return H.size > (int)sysconf(_SC_NPROCESSORS_ONLN);
    unsigned char *masks = malloc(sizeof own * (size_t)H.size);
    if (!masks) return 0;
    H_CHECK(H.comm, xc_allgather(&own, masks, sizeof own, XC_UINT8, H.comm));
    CPU_ZERO(&all);
    for (int r = 0; r < H.size; r++) {
        cpu_set_t m;
        memcpy(&m, masks + (size_t)r * sizeof own, sizeof m);
        CPU_OR(&all, &all, &m);
    }
    free(masks);
    return H.size > CPU_COUNT(&all);
}

/* One exchange around the ring of ranks: 1 if this rank's receive was read
 * single copy, 0 if it came through the ring. */
static int exchange(xc_comm_t *comm, size_t bytes)
{
    h_case_t c = h_case("p2p threshold", XC_UINT8, H_COPY, bytes, -1, -1);
    int size = xc_comm_size(comm), rank = xc_comm_rank(comm);
    char *send = h_alloc(bytes), *recv = h_alloc(bytes);
    h_fill(&c, send, bytes, rank, 0);
    h_poison(recv, bytes);
    xc_stats_t s0 = {.size = sizeof s0}, s1 = {.size = sizeof s1};
    H_CHECK(comm, xc_comm_stats(comm, &s0));
    H_CHECK(comm, xc_group_start());
    H_CHECK(comm, xc_send(send, bytes, XC_UINT8, (rank + 1) % size, 7, comm));
    H_CHECK(comm, xc_recv(recv, bytes, XC_UINT8, (rank + size - 1) % size, 7, comm));
    H_CHECK(comm, xc_group_end());
    H_CHECK(comm, xc_comm_stats(comm, &s1));
    h_check_copy(&c, recv, bytes, (rank + size - 1) % size, 0, "received from the left");
    h_check_guard(&c, recv, bytes, "recvbuf");
    uint64_t got = s1.single_copy_bytes - s0.single_copy_bytes;
    char what[96];
    snprintf(what, sizeof what, "%zu B: bytes read single copy (all or none)", bytes);
    H_TRUE(what, got == 0 || got == bytes);
    h_free(send);
    h_free(recv);
    return got == bytes;
}

/* The threshold this rank's receives showed on `comm` (0: none read single
 * copy at any size), after checking that it is one threshold and the same
 * on every rank. */
static size_t observe(xc_comm_t *comm, const char *label)
{
    int cma[NSIZES];
    for (size_t i = 0; i < NSIZES; i++) cma[i] = exchange(comm, k_sizes[i]);
    size_t t = 0;
    for (size_t i = 0; i < NSIZES && !t; i++)
        if (cma[i]) t = k_sizes[i];
    char what[128];
    for (size_t i = 0; i < NSIZES; i++) {
        snprintf(what, sizeof what, "%s: %zu B read as one threshold at %zu B says", label,
                 k_sizes[i], t);
        H_EQ_INT(what, cma[i], t && k_sizes[i] >= t);
    }
    int size = xc_comm_size(comm);
    uint64_t mine = t, *all = malloc(sizeof *all * (size_t)size);
    if (!all) return t;
    H_CHECK(comm, xc_allgather(&mine, all, 1, XC_UINT64, comm));
    for (int r = 0; r < size; r++) {
        snprintf(what, sizeof what, "%s: rank %d's threshold against this rank's", label, r);
        H_EQ_U64(what, all[r], mine);
    }
    free(all);
    if (H.rank == 0) printf("# %s: single copy from %zu B\n", label, t);
    return t;
}

/* A profile with the shared-memory link, whose big_from is `big_from`, and
 * the host's figures (made-up costs: only the threshold is checked). */
static void write_profile(const char *path, size_t big_from)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        h_fail(__FILE__, __LINE__, "cannot write %s", path);
        return;
    }
    fprintf(f, "{\"format\": \"xcoll-profile\", \"version\": 1, \"links\": {\"shm\": "
               "{\"big_from\": %zu",
            big_from);
    static const char *xf[] = {"oneway", "exchange", "oneway_fresh", "exchange_fresh"};
    for (int x = 0; x < 4; x++)
        fprintf(f, ", \"%s\": {\"alpha_us\": 0.5, \"beta_ps\": 100, \"big_alpha_us\": 4, "
                   "\"big_beta_ps\": 50, \"mem_alpha_us\": 4, \"mem_beta_ps\": 90}",
                xf[x]);
    fprintf(f, "}}, \"shm_sync\": {\"alpha_us\": 0, \"per_rank_us\": 0.3}, \"host\": "
               "{\"cache_bytes\": 524288, \"memcpy_ps\": {\"cache\": 12, \"mem\": 22}, "
               "\"gamma_ps\": {");
    for (int d = 0; d < XC_DTYPE_COUNT; d++)
        fprintf(f, "%s\"%s\": {\"sum\": [23, 40], \"prod\": [23, 40], \"minmax\": [23, 40]}",
                d ? ", " : "", xc_dtype_name((xc_dtype_t)d));
    fprintf(f, "}}}\n");
    fclose(f);
}

int main(int argc, char **argv)
{
    h_init(argc, argv);
    const char *env = getenv("XCOLL_SHM_P2P_CMA_MIN_KB");
    long kb = env && *env ? atol(env) : -1;
    int crowd = crowded();
    size_t t = observe(H.comm, "world");
    int have_cma = t != 0;
    if (!have_cma && H.rank == 0)
        printf("# no message was read single copy: single copy unavailable here; only the data "
               "are checked\n");
    if (have_cma) {
        if (kb >= 0)
            H_EQ_U64("world: the configured threshold", t, kb * 1024 < 4096 ? 4096 : kb * 1024);
        else if (crowd)
            H_TRUE("world: a crowded node's measured threshold within [32 KiB, 64 KiB]",
                   t >= 32768 && t <= 65536);
        else
            H_TRUE("world: the measured threshold within [8 KiB, 1 MiB]",
                   t >= 8192 && t <= 1048576);
    }
    /* Profile files, auto only (a configured threshold ignores them, and a
     * child inherits its parent's configuration). */
    static const size_t files[] = {4096, 40960, 131072};
    char path[64];
    snprintf(path, sizeof path, "/tmp/xcoll-p2p-threshold-%d.json", (int)getpid());
    for (size_t k = 0; kb < 0 && k < sizeof files / sizeof files[0]; k++) {
        if (H.rank == 0) {
            write_profile(path, files[k]);
            setenv("XCOLL_PROFILE", path, 1); /* rank 0 decides the profile */
        }
        xc_comm_t *child = NULL;
        H_CHECK(H.comm, xc_comm_split(H.comm, 0, H.rank, &child, NULL));
        if (H.rank == 0) {
            unsetenv("XCOLL_PROFILE");
            unlink(path);
        }
        char label[64];
        snprintf(label, sizeof label, "profile big_from %zu", files[k]);
        size_t tc = observe(child, label);
        if (have_cma) {
            size_t want = crowd ? (files[k] < 32768   ? 32768
                                   : files[k] > 65536 ? 65536
                                                      : files[k])
                                : files[k] < 8192 ? 8192
                                                  : files[k];
            H_EQ_U64(label, tc, want);
        }
        H_CHECK(child, xc_comm_destroy(child));
    }
    return h_finish();
}
