/*
 * shm_setup.c -- a communicator's shared memory, set up at creation.
 *
 * Every node with two or more of the communicator's ranks gets one segment
 * for them (shm.h): its leader (the node's lowest rank) creates it, the
 * others map it, everyone publishes its pid for single-copy reads and tests
 * that it can read its node neighbour (process_vm_readv), and the name is
 * unlinked as soon as every rank has mapped it, so nothing survives in
 * /dev/shm whatever happens later.  All ranks agree, by one all-reduce, on
 * whether shared memory (and single copy) is used at all -- if any rank
 * cannot map its node's segment, everybody runs over TCP -- and on the
 * single-copy threshold (the smallest XCOLL_SHM_CMA_MIN_KB given).
 *
 * When all ranks share one node, the segment also carries the shared-memory
 * collectives (comm->shm); on several nodes it carries the channels between
 * node peers (comm->node_shm), so that the intra-node steps of hierarchical
 * algorithms and point-to-point messages between node peers never touch a
 * socket.  The collectives used here run over TCP (comm->shm is not yet
 * set), and every rank calls them, whatever its node looks like.
 */
#include "../core/comm.h"
#include "../core/mem_share.h"
#include "shm.h"
#include "../core/membarrier.h"
#include "../engine/bias.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <unistd.h>

/* Ring size of the channels (a power of two): as configured for up to 16
 * ranks on the node, at most 16 KiB up to 64 (L*L rings; only the pages of
 * pairs that talk are ever touched), none beyond. */
static size_t chan_bytes(const xc_comm_t *comm)
{
    size_t want = (size_t)comm->cfg.shm_chan_kb * 1024, b = 4096;
    if (comm->local_size > 64 || want < 4096) return 0;
    if (comm->local_size > 16 && want > 16384) want = 16384;
    while (b * 2 <= want) b *= 2;
    return b;
}

/* The segment's name: the creator's pid (so that a later creator can remove
 * what a job killed inside the set-up window left behind: xc__shm_create),
 * and an id unique to the communicator and node. */
static void seg_name(char *buf, size_t cap, int64_t creator, const xc_comm_t *comm)
{
    uint64_t id = comm->uid ^ ((uint64_t)comm->node * 0x9e3779b97f4a7c15ull);
    snprintf(buf, cap, "/xcoll-%d-%016" PRIx64, (int)creator, id);
}

xc_result_t xc__shm_attach(xc_comm_t *comm)
{
    /* Global conditions only: every rank must take the same branch.
     * (XCOLL_SHM is this rank's: it goes into the agreement below, so
     * that one rank's XCOLL_SHM=0 puts every rank on TCP.) */
    if (comm->size < 2 || comm->nnodes == comm->size) return XC_OK;
    int single = comm->nnodes == 1;
    int mine = comm->cfg.shm && comm->local_size >= 2 && comm->local_size <= XC__SHM_MAX_RANKS;
    int leader = comm->local_rank == 0;
    /* Slots carry the shared-memory collectives: one node only. */
    size_t slot = single ? (size_t)comm->cfg.shm_slot_kb * 1024 : 4096;
    char name[64] = "";
    xc__shm_t *s = NULL;
    int64_t *creators = malloc((size_t)comm->size * sizeof *creators);
    if (!creators) return xc__err(XC_ERR_NOMEM, "out of memory setting up shared memory");
    int64_t me = 0; /* leaders: pid, or -1 when creation failed */
    if (mine && leader) {
        me = (int64_t)getpid();
        seg_name(name, sizeof name, me, comm);
        size_t rot = single ? xc__shm_rot_for(comm->local_size, slot, comm->cfg.shm_slot_rot) : 1;
        if (xc__shm_create(name, comm->local_size, 0, slot, rot, chan_bytes(comm), &s) != XC_OK) {
            XC_WARN("no shared memory: %s", xc__tls_error());
            me = -1;
        }
    }
    xc_result_t rc = xc_allgather(&me, creators, 1, XC_INT64, comm);
    int64_t creator = creators[comm->node_ranks[comm->node_start[comm->node]]];
    free(creators);
    if (rc != XC_OK) goto fail;
    if (mine && !leader && creator > 0) {
        seg_name(name, sizeof name, creator, comm);
        if (xc__shm_open(name, comm->local_size, comm->local_rank, &s) != XC_OK)
            XC_WARN("no shared memory: %s", xc__tls_error());
    }
    if (s) {
        /* Single-copy reads: let peers read us even under Yama's ptrace
         * restrictions, and publish a value they can test-read. */
        prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
        if (single && s->rot > 1) xc__shm_prefault_own(s);
        s->ctl[comm->local_rank].pid = (uint32_t)getpid();
        s->ctl[comm->local_rank].probe = (uint64_t)(uintptr_t)&comm->uid;
        /* Where peers find the blocks of xc_mem_alloc_shared they may map. */
        int tfd = -1;
        uint64_t nonce = 0;
        if (xc__share_table(&tfd, &nonce) != 0) tfd = -1, nonce = 0;
        s->ctl[comm->local_rank].share_fd = tfd;
        s->ctl[comm->local_rank].share_nonce = nonce;
    }
    /* every rank's pid and probe are published */
    XC_CHECK_GOTO(xc_barrier(comm), rc, fail);
    /* [2], [3]: the smallest and (negated) largest XCOLL_SHM_CMA_MIN_KB --
     * which path (single copy or staged) a collective takes depends on it,
     * and a root writing into a peer that staged instead would write to a
     * stale address: the ranks must agree. */
    /* [4]: every rank can take part in the fence-free wake-up check
     * (shm.c; XCOLL_SHM_MEMBARRIER=0 on any rank keeps the fences). */
    /* [5], [6]: the same for XCOLL_SHM_CMA_MAX_KB (the all-gather's and
     * all-to-all's ceiling: which way they take depends on it too). */
    /* [7], [8]: XCOLL_NODE_CROWDED (every path's choice on a node depends
     * on it): a difference falls back to what every rank computes alike. */
    int32_t ok[9] = {comm->cfg.shm && (!mine || s != NULL), !mine, comm->cfg.shm_cma_min_kb,
                     -comm->cfg.shm_cma_min_kb,
                     !s || (comm->cfg.shm_membarrier && xc__membarrier_register(XC__MB_GLOBAL)),
                     comm->cfg.shm_cma_max_kb, -comm->cfg.shm_cma_max_kb,
                     comm->cfg.node_crowded, -comm->cfg.node_crowded};
    if (s) {
        int right = (comm->local_rank + 1) % comm->local_size;
        uint64_t v = 0;
        struct iovec li = {&v, sizeof v},
                     ri = {(void *)(uintptr_t)s->ctl[right].probe, sizeof v};
        ok[1] = process_vm_readv((pid_t)s->ctl[right].pid, &li, 1, &ri, 1, 0) == sizeof v &&
                v == comm->uid;
        /* The single-copy reductions' scratch (the shared-memory
         * collectives': one node only), (size - 1) pieces, address space
         * until used: every rank has it or none reads single copy -- which
         * way a reduction goes must not hang on one rank's malloc. */
        if (ok[1] && single && !comm->cma_tmp)
            comm->cma_tmp = malloc((size_t)(comm->size - 1) * XC__SHM_CMA_PIECE);
        ok[1] = ok[1] && (!single || comm->cma_tmp);
    }
    /* Everybody must agree to use it (and single copy). */
    XC_CHECK_GOTO(xc_allreduce(ok, ok, 9, XC_INT32, XC_MIN, comm), rc, fail);
    if (!ok[0] || !ok[1]) { /* no single copy: no scratch for it */
        free(comm->cma_tmp);
        comm->cma_tmp = NULL;
    }
    if (ok[2] != -ok[3])
        XC_WARN("XCOLL_SHM_CMA_MIN_KB differs across ranks (%d..%d): all use %d", (int)ok[2],
                (int)-ok[3], (int)ok[2]);
    comm->cfg.shm_cma_min_kb = ok[2];
    if (ok[5] != -ok[6])
        XC_WARN("XCOLL_SHM_CMA_MAX_KB differs across ranks (%d..%d): all use %d", (int)ok[5],
                (int)-ok[6], (int)ok[5]);
    comm->cfg.shm_cma_max_kb = ok[5];
    if (ok[7] != -ok[8]) {
        XC_WARN("XCOLL_NODE_CROWDED differs across ranks (%d..%d): all use auto", (int)ok[7],
                (int)-ok[8]);
        comm->cfg.node_crowded = -1;
        xc__comm_set_wait(comm);
    }
    /* Every rank has mapped it (or given up): unlink now, by anyone. */
    if (name[0]) xc__shm_unlink(name);
    if (!ok[0]) {
        xc__shm_close(s);
        if (comm->cfg.shm)
            XC_WARN("shared memory unavailable (or XCOLL_SHM=0) on some rank: using TCP");
        return XC_OK;
    }
    if (!ok[1])
        XC_INFO("single-copy reads (process_vm_readv, or the memory for their scratch) "
                "unavailable on some rank: staging only");
    comm->shm_ok = 1;
    if (!s) return XC_OK; /* alone on this node */
    s->asym = ok[4]; /* before anybody publishes or sleeps on it */
    /* Measured, crowded node or not: where the host puts the vCPUs far
     * apart, ordinary stores into the lines a reader on the other core
     * holds cost 2-4x (4 ranks on 2 cores, 512 KiB-2 MiB all-reduce,
     * all-gather and all-to-all 1.2-1.9 GB/s against 2.6-5.5 measured;
     * near, level within 5 %: docs/shm.md "Writing a slot"). */
    s->wcopy.mode = comm->cfg.shm_nt >= 0 ? comm->cfg.shm_nt : -1;
    s->wcopy.crowded = comm->oversub;
    xc__comm_lock(comm);
    comm->node_shm = s;
    if (single) comm->shm = s;
    if (single) xc__bias_init(comm); /* express calls need comm->shm */
    comm->cma = ok[1];
    /* Channels exist iff the creator sized them (so a node agrees); a peer
     * may write to ours before we open them: the bytes wait there. */
    rc = xc__chan_open_all(comm);
    pthread_mutex_unlock(&comm->mu);
    return rc;
fail:
    /* A rank failed in the set-up window: the segment must not outlive
     * this process in /dev/shm (found by test_shrink during). */
    if (name[0]) xc__shm_unlink(name);
    xc__shm_close(s);
    return rc;
}
