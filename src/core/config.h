/*
 * config.h -- every XCOLL_* knob in one table.  A knob's value comes from the
 * caller's xc_config_t if set there, else from the environment, else from the
 * default in the table (config.c).  docs/config.md lists the same table.
 */
#ifndef XC_CONFIG_H
#define XC_CONFIG_H

#include "auth.h"
#include "common.h"

#define XC__IFNAME_LEN 64
#define XC__NODEID_LEN 160

/* The resolved settings of one communicator. */
typedef struct xc__config {
    int timeout_ms;       /* deadline of every wait; < 0 never          */
    int progress_thread;  /* 1: a progress thread per communicator      */
    int spin_us;          /* busy-poll this long before yielding (-1: auto) */
    int yield_us;         /* then yield the CPU this long before sleeping (-1: auto) */
    int heartbeat_ms;     /* progress thread's heartbeat to every peer (0: none) */
    int liveness_ms;      /* a peer silent this long is lost (0: never) */
    int shm;              /* 1: shared memory between ranks of one node */
    int shm_slot_kb;      /* staging slot size per rank (KiB)           */
    int shm_slot_rot;     /* places each staging slot turns through (-1:
                             * unset, xc__shm_rot_for chooses) */
    int shm_cma_min_kb;   /* single-copy reads from this block size on   */
    int shm_p2p_cma_min_kb; /* ... of point-to-point / schedule frames (-1:
                             * auto, comm->p2p_cma_min) */
    int shm_cma_max_kb;   /* all-gather / all-to-all blocks above this are
                             staged: -1 the measured ceiling, 0 none */
    int shm_nt;           /* staged chunks written with non-temporal stores:
                             1 always, 0 never, -1 as measured (wcopy.h) */
    int shm_chan_kb;      /* ring per pair of local ranks (KiB), 0 = none */
    int shm_promote;      /* single-copy sources collapse into huge pages at
                             their this-many-th use (core/promote.c); 0 never */
    int node_crowded;     /* the node counts as crowded (comm->oversub): 1,
                             0, or -1 when its ranks outnumber their CPUs */
    int shm_coop;         /* single-copy broadcast's root copies too: 1 always,
                             0 never, -1 when the node is not crowded */
    int shm_membarrier;   /* 1: fence-free publications where every rank can
                             register for membarrier (docs/shm.md), 0: fences */
    int express_bias;     /* 1: a thread that keeps making express calls may
                             skip the communicator's lock (engine/bias.h) */
    int deterministic;    /* 1: floating-point reductions in rank order  */
    int sockets_per_peer; /* TCP streams per pair of ranks (docs/tcp.md) */
    int socket_buf_kb;    /* TCP send/receive buffers, 0 = autotuning  */
    char ifname[XC__IFNAME_LEN];   /* interface selector, "" = default  */
    char node_id[XC__NODEID_LEN];  /* "" = derive from host/boot/netns  */
    xc__auth_conf_t auth;          /* job token, handshake deadline (auth.h) */
} xc__config_t;

/* Resolve `user` (may be NULL) over the environment and the defaults.
 * XC_ERR_INVALID names a malformed variable or field. */
XC__HIDDEN xc_result_t xc__config_resolve(const xc_config_t *user,
                                          xc__config_t *out);
/* Apply a child's `user` settings over an inherited resolved config. */
XC__HIDDEN xc_result_t xc__config_override(const xc_config_t *user,
                                           xc__config_t *inout);

/* An integer from the environment: *out unchanged if unset; XC_ERR_INVALID
 * (naming the variable) if not an integer in [lo, hi]. */
XC__HIDDEN xc_result_t xc__env_int(const char *name, long lo, long hi,
                                   long *out);

#endif
