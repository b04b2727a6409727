/*
 * comm.h -- the communicator and the engine's operation and request
 * objects (internal).
 *
 * Locking: every field below `mu` is protected by `mu`.  The progress
 * thread and waiting callers take it to advance the engine; callers issuing
 * operations take it to enqueue.  `status` is also read without the lock
 * (atomic acquire) to fail fast.
 *
 * Ownership: an operation (xc__op_t) belongs to the engine from issue to
 * completion; its request belongs to the caller and the engine jointly
 * (reference count 2 until completion), so either may let go first.
 */
#ifndef XC_COMM_H
#define XC_COMM_H

#include "../algo/sched.h"
#include "../trace/flight.h"
#include "../transport/transport.h"
#include "config.h"
#include "store.h"

#include <pthread.h>

#define XC__OP_PRIVBUF 256

/* How a pending operation nobody waits for is handed to the progress
 * thread (engine.c, hand_to_thread): */
enum {
    XC__WAKE_NONE, /* a channel's send, or its eager receive: the data moves
                    * without this rank (a caller's next wait takes the rest) */
    XC__WAKE_ARM,  /* a channel's large receive (this rank reads it): the
                    * thread is armed, the peer's next frame wakes it */
    XC__WAKE_KICK, /* anything else: the thread is woken now */
};

typedef struct xc__op {
    struct xc__op *next;     /* collective queue or p2p list */
    struct xc__op *prev;     /* p2p list only */
    struct xc_request *req;
    int is_p2p;
    xc__desc_t desc;
    uint64_t seq;            /* collectives: 1, 2, ... in issue order */
    uint64_t deadline_ns;    /* 0 until xc__op_deadline sets it */
    uint64_t t_issue;        /* submission time when tracing, else 0 */
    uint64_t flight_id;      /* its flight-recorder record (0: none) */
    int pending;             /* sends/receives of the current round in flight */
    xc__sched_t sched;       /* collectives */
    int peer;                /* p2p */
    /* Operations that are not schedules (shared-memory collectives):
     * advance returns 1 when complete; priv is freed with the op. */
    int (*advance)(xc_comm_t *comm, struct xc__op *op);
    void (*waiting)(const struct xc__op *op, char *buf, size_t cap);
    void *priv;              /* heap state, freed with the op (or NULL)   */
    uint8_t on_stack;        /* a blocking caller's frame owns it         */
    uint8_t wakes;           /* who moves it when nobody waits: XC__WAKE_* */
    uint8_t issued;          /* seq and flight record taken (run directly) */
    /* Not zeroed by set-up (every field is set before use): */
    xc__tx_t ptx;            /* p2p send */
    xc__rx_t prx;            /* p2p receive */
    /* Inline state of non-schedule operations (no allocation per call). */
    _Alignas(16) unsigned char privbuf[XC__OP_PRIVBUF];
} xc__op_t;

struct xc_request {
    xc_comm_t *comm;         /* not dereferenced once the request is done */
    int done;                /* atomic; release on completion */
    xc_result_t rc;          /* valid once done */
    int refs;                /* atomic: caller + engine */
    int coll;                /* xc_coll_t, for messages */
    int source;              /* a completed receive's sender, else -1 */
    char *msg;               /* cause of a failure (owned), or NULL */
    uint8_t on_stack;        /* a blocking caller's frame owns it: no refs */
};

#define XC__UBUF_KEEP 4 /* early messages' buffers a communicator keeps */

/* Single-copy reductions read peers' inputs in pieces of this size into the
 * communicator's scratch (cma_tmp), then reduce them with one k-way pass. */
#define XC__SHM_CMA_PIECE (256 * 1024)

struct xc_comm {
    /* immutable after creation */
    int rank, size;
    unsigned fork_gen;       /* xc__fork_gen at creation (see xc__comm_forked) */
    int local_rank, local_size;
    int node, nnodes;
    int *node_of;            /* node index of every rank */
    int *local_of;           /* every rank's index among its node's ranks */
    int *node_start;         /* [nnodes+1]: node n's ranks are            */
    int *node_ranks;         /* node_ranks[node_start[n] .. node_start[n+1]) */
    uint64_t uid;
    xc__config_t cfg;
    struct sockaddr_storage my_addr;  /* advertised address (port 0) */
    xc__store_server_t *store_srv;    /* rank 0 hosting the store */
    int efd;                 /* eventfd: wakes the progress thread/waiters */
    int forced_algo[XC_COLL_COUNT]; /* XCOLL_ALGO, parsed once (0 = choose) */
    int trace_lane;          /* lane of its spans in the trace (0: off) */
    xc__flight_t flight;     /* last operations, for post-mortems (flight.h) */
    struct xc__shm *shm;     /* segment of the shared-memory collectives
                              * (all ranks on one node), or NULL */
    struct xc__shm *node_shm; /* segment of this node's ranks (channels,
                              * single copy): == shm on one node */
    int cma;                 /* every rank can read its node peers' memory (CMA) */
    int shm_one_shot;        /* calibration: the 2-rank all-reduce stays one shot (1)
                                or runs single copy (2); 0: as the model says */
    int shm_probing;         /* calibration: all-gather and all-to-all ignore the
                              * profile's measured floors and ceiling
                              * (xc__shm_measured) while they are probed */
    int shm_ok;              /* all ranks agreed to use shared memory (the same
                              * on every rank, also those alone on a node) */
    char *cma_tmp;           /* scratch of single-copy reductions: size - 1
                              * pieces, there iff cma on a one-node
                              * communicator (shm_setup.c) */
    void *scratch_pool;      /* schedules' scratch, cached between calls (sched.c) */
    struct xc__profile *profile; /* cost model profile + selector state (model.h); NULL while created */

    pthread_mutex_t mu;      /* taken through xc__comm_lock (engine/bias.h) */
    /* The express owner's bias (engine/bias.h): bias_owner is written under
     * mu and read by the owner without it; bias_busy and bias_calls are the
     * owner's while it holds the bias; the rest is under mu. */
    uintptr_t bias_owner;    /* thread that may make express calls without mu; 0: none */
    int bias_busy;           /* atomic: the owner is inside such a call */
    int bias_ok;             /* biases possible here (xc__bias_init) */
    uint64_t bias_calls;     /* calls made under the current bias */
    unsigned bias_earned, bias_need; /* locked express calls: made, needed for a bias
                              * (grants and revocations are counted in stats) */
    /* --- protected by mu --- */
    xc__conn_t **conns;      /* [size]; NULL for self */
    xc__conn_t **chans;      /* [size] shared-memory channels, or NULL (transport.h) */
    xc__peerq_t *pq;         /* [size] matching queues */
    xc__rx_t *any_head, *any_tail; /* p2p receives from XC_ANY_SOURCE */
    uint64_t p2p_order;      /* orders p2p receives posted and frames arrived */
    xc__op_t *coll_head, *coll_tail;
    uint64_t next_seq;       /* seq of the next collective issued */
    uint64_t done_seq;       /* seq of the last collective completed */
    xc__op_t *p2p_ops;       /* doubly linked */
    int npending;            /* ops issued and not completed */
    int waiters;             /* threads inside xc__request_wait */
    int stop;                /* progress thread must exit */
    int nwakes[3];           /* pending ops by `wakes` class */
    int armed;               /* the thread is announced on the bell on its
                              * own behalf: peers' publications wake it */
    int thread_idle;         /* atomic: the thread sleeps on the bell */
    int split_count;
    int shrink_count;        /* xc_comm_shrink calls on this communicator */
    int shrink_excluded_by;  /* a survivor that declared this rank failed in a
                              * shrink, + 1 (0: none): it is not a member of
                              * any shrunk communicator, and every later
                              * shrink says so */
    uint8_t *failed;         /* bitmap [(size+7)/8]: ranks known failed (lost
                              * peers, and those the shrink found) */
    struct xc__shrink_in *shrink_in; /* [size] latest SHRINK frame per peer
                              * (shrink.c), allocated at the first one */
    uint64_t shm_synced;     /* last shm chunk at which all ranks' `in` was seen */
    uint64_t shm_full[2];    /* last chunk, by slot parity, staged over a whole slot */
    uint64_t shm_out_min;    /* the least `out` of the other ranks when last read
                              * (they only grow: a lower bound) */
    uint64_t shm_ops;        /* shared-memory operations started (not every op is one) */
    xc__desc_t shm_hdesc;    /* the last description hashed (shm_coll.c desc_hash) */
    uint64_t shm_hdh;        /* and its hash; 0: none yet */
    uint64_t shm_out_late;   /* this rank's `out` not yet published (0: none) */
    uint64_t shm_nbq[32][2]; /* deferred right-neighbour checks (shm op number, chunk) */
    int shm_nbq_head, shm_nbq_n;
    struct xc__shm_begun {   /* an operation the express path staged and left */
        int on;              /* (shm_coll.c xc__shm_express_all): its seq, */
        uint64_t seq;        /* description and state (an xc__shm_op_t) --  */
        xc__desc_t d;        /* what the built operation of that seq resumes */
        _Alignas(16) unsigned char state[XC__OP_PRIVBUF];
    } shm_begun;
    uint64_t spin_ns;        /* adaptive busy-poll budget of a wait */
    uint64_t spin_max_ns;    /* its ceiling (XCOLL_SPIN_US, or auto) */
    size_t p2p_cma_min;      /* frames to a node peer from this size travel as
                              * an address read single copy (bytes;
                              * XCOLL_SHM_P2P_CMA_MIN_KB, or auto) */
    uint64_t yield_ns;       /* then yield this long before sleeping */
    int node_cpus;           /* CPUs this node's ranks may run on (0: unknown) */
    int oversub;             /* more ranks on this node than node_cpus */
    xc__tx_t *rndv_wait;     /* rendezvous sends waiting for their ACK */
    int chan_backlog;        /* a channel holds frames it could not write yet
                              * (e.g. an ACK behind a full ring): the engine
                              * must keep servicing the channels */
    uint64_t rndv_id;        /* last rendezvous id used */
    /* Payload buffers of early messages kept for the next ones (match.c
     * ubuf_get / ubuf_put): NULL = empty slot. */
    struct {
        void *p;
        size_t cap;
    } ubuf[XC__UBUF_KEEP];
    const uint8_t *read_stop; /* set: reading a channel stops after the frame
                              * that sets *read_stop (an express receive's
                              * `done`: the peer's next frames stay in the
                              * ring for the next receive, not copied aside) */
    /* Liveness (engine.c): every byte that arrived on the sockets before
     * polled_ns has been read; heartbeats last sent at beat_ns; peers'
     * silence last checked at live_ns. */
    uint64_t polled_ns, beat_ns, live_ns;
    xc_stats_t stats;
    /* --- atomics / error state --- */
    int status;              /* xc_result_t; atomic; XC_OK until poisoned */
    char errmsg[XC__ERRMSG_LEN];    /* first poisoning cause (under mu) */
    char lastmsg[XC__ERRMSG_LEN];   /* last failing call's detail */
    pthread_t thread;
    int has_thread;
};

/* Take comm->mu -- every site but the express owner's calls -- revoking
 * another thread's bias on it (engine/bias.c). */
XC__HIDDEN void xc__comm_lock(xc_comm_t *comm);

/* ---------------------------------------------------------------- comm.c */
/* Allocate a communicator shell (locks, eventfd, queues) for rank/size. */
XC__HIDDEN xc_result_t xc__comm_alloc(int rank, int size, const xc__config_t *cfg,
                                      xc_comm_t **out);
/* Free everything of a communicator whose thread is not running. */
XC__HIDDEN void xc__comm_free(xc_comm_t *comm);
/* Record the thread-local error detail as the communicator's last error
 * and return rc (for API entry points; nothing to do for XC_OK). */
XC__HIDDEN xc_result_t xc__comm_record_fail(xc_comm_t *comm, xc_result_t rc);
static inline xc_result_t xc__comm_fail(xc_comm_t *comm, xc_result_t rc)
{
    return XC__LIKELY(rc == XC_OK) ? rc : xc__comm_record_fail(comm, rc);
}
/* Compute node indices, local rank/size from per-rank node id strings. */
/* The CPUs this process may run on (its affinity set), as a bit mask. */
#define XC__CPUMASK_WORDS 16
typedef struct xc__cpumask {
    uint64_t w[XC__CPUMASK_WORDS];
} xc__cpumask_t;
XC__HIDDEN void xc__cpumask_self(xc__cpumask_t *m);
/* Node indices, local ranks, and the waiting policy from every rank's node
 * identity and CPU mask (the ranks of a node oversubscribe it when they
 * outnumber the union of their masks; every rank computes the same). */
XC__HIDDEN void xc__comm_set_nodes(xc_comm_t *comm, char (*ids)[XC__NODEID_LEN],
                                   const xc__cpumask_t *cpus);
XC__HIDDEN void xc__comm_set_wait(xc_comm_t *comm);
/* The largest measured threshold xc__comm_set_p2p_cma_min takes (a
 * profile's is at most measure.c's RING_PROBE_MAX). */
#define XC__P2P_CMA_MIN_MAX ((size_t)64 << 20)
/* On a crowded node the measured threshold is held between these
 * (xc__comm_set_p2p_cma_min and the profile's big_from, measure.c, which
 * searches from the lower): xc__p2p_crowded_hold. */
#define XC__P2P_CMA_CROWDED_LO ((size_t)32 << 10)
#define XC__P2P_CMA_CROWDED_HI ((size_t)64 << 10)
static inline size_t xc__p2p_crowded_hold(double measured)
{
    return measured < (double)XC__P2P_CMA_CROWDED_LO   ? XC__P2P_CMA_CROWDED_LO
           : measured > (double)XC__P2P_CMA_CROWDED_HI ? XC__P2P_CMA_CROWDED_HI
                                                       : (size_t)measured;
}
XC__HIDDEN void xc__comm_set_p2p_cma_min(xc_comm_t *comm, double measured);

/* --------------------------------------------------------------- split.c */
/* splitmix64 finaliser: child communicator ids. */
XC__HIDDEN uint64_t xc__mix64(uint64_t x);
/* Build and start a communicator of `size` ranks (this one `rank`) with id
 * `uid`: connect to the members listening at addrs[] (this rank on `lfd`,
 * which stays the caller's), node identities ids[] and CPU masks cpus[];
 * on success *out is the new communicator.  Shared by split and shrink. */
XC__HIDDEN xc_result_t xc__comm_build(const xc__config_t *cfg, uint64_t uid, int rank,
                                      int size, const struct sockaddr_storage *my_addr,
                                      int lfd, const struct sockaddr_storage *addrs,
                                      char (*ids)[XC__NODEID_LEN],
                                      const xc__cpumask_t *cpus, uint64_t deadline_ns,
                                      xc_comm_t **out);

/* -------------------------------------------------------------- shrink.c */
/* Matcher hooks for a SHRINK frame from conn->peer: choose where its
 * payload goes (header), record it once complete (done).  Work on a
 * poisoned communicator too; on a healthy one, the frame marks its sender
 * as gone (conn->left) and fails what waits for it. */
XC__HIDDEN void xc__shrink_header(xc_comm_t *comm, xc__conn_t *conn);
XC__HIDDEN void xc__shrink_done(xc_comm_t *comm, xc__conn_t *conn);
/* Free the per-peer SHRINK records. */
XC__HIDDEN void xc__shrink_free(xc_comm_t *comm);
static inline void xc__failed_set(xc_comm_t *c, int r) { c->failed[r / 8] |= (uint8_t)(1u << (r % 8)); }
static inline int xc__failed_has(const uint8_t *bm, int r) { return (bm[r / 8] >> (r % 8)) & 1; }

/* ---------------------------------------------------------------- mesh.c */
/* Identity of this process's node (hostname, boot id, network namespace),
 * or cfg->node_id. */
XC__HIDDEN void xc__node_id(const xc__config_t *cfg, char out[XC__NODEID_LEN]);
/* Connect every pair of ranks: connect to lower ranks at addrs[], accept
 * higher ranks on `lfd`, with an authenticated hello carrying comm->uid.
 * Strangers are dropped.  Fills comm->conns.  Needs the nodes set
 * (xc__comm_set_nodes): pairs on different nodes get
 * XCOLL_SOCKETS_PER_PEER streams, pairs on one node a single socket. */
XC__HIDDEN xc_result_t xc__mesh_connect(xc_comm_t *comm, int lfd,
                                        const struct sockaddr_storage *addrs,
                                        uint64_t deadline_ns);
/* Start the progress thread if configured, then a barrier on the new
 * communicator confirming every connection. */
XC__HIDDEN xc_result_t xc__comm_start(xc_comm_t *comm);

/* -------------------------------------------------------------- engine */
/* Poison: fail every pending operation with rc, remember the cause, tell
 * the peers how `from_peer` says, wake everyone.  The first cause wins.
 * XC__POISON_LOCAL (0): found here -- every peer is told (error frames, the
 * node's poison word).  XC__POISON_QUIET (1): local only (peers learn
 * otherwise: a goodbye, a shrink frame).  XC__POISON_RELAY (2): a peer
 * reported it -- relayed to every peer too, so that a peer hears the cause
 * from this rank before anything else this rank may send it later (a
 * goodbye after its caller saw the error and destroyed the communicator
 * would otherwise read as "peer lost" where another report was still
 * unread). */
enum { XC__POISON_LOCAL = 0, XC__POISON_QUIET = 1, XC__POISON_RELAY = 2 };
XC__HIDDEN void xc__comm_poison(xc_comm_t *comm, xc_result_t rc, int from_peer,
                                const char *fmt, ...) XC__PRINTF(4, 5);
/* The same from a caller's thread (takes the communicator's lock). */
XC__HIDDEN void xc__comm_poison_now(xc_comm_t *comm, xc_result_t rc, int from_peer,
                                    const char *fmt, ...) XC__PRINTF(4, 5);
/* Forks seen by this process (incremented in the child by a pthread_atfork
 * handler).  A communicator whose fork_gen differs is a forked child's
 * copy: its threads, shared-memory segments (MADV_DONTFORK) and peers are
 * the parent's -- the child may only let go of its descriptors. */
XC__HIDDEN extern unsigned xc__fork_gen;
static inline int xc__comm_forked(const xc_comm_t *c)
{
    return __atomic_load_n(&xc__fork_gen, __ATOMIC_RELAXED) != c->fork_gen;
}
/* The error of call `fn` on a forked child's copy (XC_ERR_INVALID). */
XC__HIDDEN xc_result_t xc__comm_forked_err(const char *fn);

/* Transport callback: connection to `peer` is broken/closed. */
XC__HIDDEN void xc__comm_peer_lost(xc_comm_t *comm, int peer, const char *why);
/* Transport callbacks: a frame header arrived; choose its destination.
 * Returns the payload destination (NULL = discard) and sets conn->rrx/rux. */
XC__HIDDEN void xc__match_header(xc_comm_t *comm, xc__conn_t *conn);
/* The frame's payload has fully arrived. */
XC__HIDDEN void xc__match_done(xc_comm_t *comm, xc__conn_t *conn);
/* Queue a header-only control frame (BYE, ACK) to `peer`. */
XC__HIDDEN void xc__send_control(xc_comm_t *comm, int peer, int kind, uint64_t seq);
/* Forget posted receives and free unexpected messages; frames being read
 * into memory that goes away are discarded (when poisoning). */
XC__HIDDEN void xc__match_clear(xc_comm_t *comm);
/* xc__match_clear, and every frame still being read (a communicator being
 * freed). */
XC__HIDDEN void xc__match_free(xc_comm_t *comm);
/* 1 when no other rank can send any more (every one has said goodbye, left
 * to shrink, or is gone): a receive from XC_ANY_SOURCE would wait forever.
 * Always 0 on one rank (a message to oneself can still come). */
XC__HIDDEN int xc__no_remote_sender(const xc_comm_t *comm);
/* Completion of one send/receive of an operation. */
XC__HIDDEN void xc__tx_done(xc_comm_t *comm, xc__tx_t *tx);
XC__HIDDEN void xc__rx_done(xc_comm_t *comm, xc__rx_t *rx);
/* Post a send / receive of operation `op` (sets headers, matches). */
XC__HIDDEN void xc__post_send(xc_comm_t *comm, xc__op_t *op, xc__tx_t *tx,
                              int peer, const void *buf, size_t len);
XC__HIDDEN void xc__post_recv(xc_comm_t *comm, xc__op_t *op, xc__rx_t *rx,
                              int peer, void *buf, size_t len);
/* Post receive `rx` whose buffer, length, peer, kind, tag, seq, desc and
 * op are set (op NULL: a bare receive, done when rx->done is set). */
XC__HIDDEN void xc__post_rx(xc_comm_t *comm, xc__rx_t *rx);
/* The header of a plain point-to-point frame: a send of `count` elements
 * of `dtype` on `tag` (the express path's; what a shared-memory channel's
 * short line stands for, shm_chan.c) / is `h` one, to the byte? */
XC__HIDDEN void xc__p2p_plain_hdr(const xc_comm_t *comm, xc__hdr_t *h, xc_dtype_t dtype,
                                  size_t count, int32_t tag);
XC__HIDDEN int xc__p2p_is_plain(const xc_comm_t *comm, const xc__hdr_t *h);
/* Would frame `h`, the next from `peer`, go to bare point-to-point receive
 * `rx` if it were posted now -- nothing posted or kept early from `peer`,
 * no receive from any source -- and fill it whole, as its description
 * says?  1: the frame may be read straight into rx->buf (p2p_express.c);
 * 0: the ordinary path decides (and reports a mismatch). */
XC__HIDDEN int xc__match_p2p_direct(const xc_comm_t *comm, int peer, const xc__rx_t *rx,
                                    const xc__hdr_t *h);
/* Description of an operation for messages: "allreduce #5 (fp32 sum, 10
 * elements, ring)". */
XC__HIDDEN void xc__desc_str(const xc__desc_t *d, uint64_t seq, char *buf,
                             size_t cap);

/* Allocate an operation and its request (refs = 2). */
XC__HIDDEN xc_result_t xc__op_new(xc_comm_t *comm, xc_coll_t coll,
                                  xc__op_t **op, xc_request_t **req);
/* A request complete with XC_OK that no operation holds (refs = 1): what
 * a nonblocking call finished at once on an express path returns; NULL
 * when out of memory.  xc__request_init_done makes `req` (allocated, not
 * held by anything else) such a request, from `source` (-1: none). */
XC__HIDDEN xc_request_t *xc__request_new_done(xc_comm_t *comm, xc_coll_t coll);
XC__HIDDEN void xc__request_init_done(xc_request_t *req, xc_comm_t *comm, xc_coll_t coll,
                                      int source);
/* Set up `op` and `req` as xc__op_new does, in memory the caller owns:
 * on_stack 1 -- a blocking caller's frame (no allocation): `op` and `req`
 * stay valid until xc__request_wait_stack returns; 0 -- both allocated
 * with malloc, then owned as xc__op_new's are. */
XC__HIDDEN void xc__op_init(xc_comm_t *comm, xc_coll_t coll, xc__op_t *op, xc_request_t *req,
                            int on_stack);
XC__HIDDEN void xc__op_init_stack(xc_comm_t *comm, xc_coll_t coll, xc__op_t *op,
                                  xc_request_t *req);
/* Drop an operation that was never enqueued (and its request). */
XC__HIDDEN void xc__op_discard(xc__op_t *op);
/* Enqueue and start an operation.  `will_wait`: the caller is about to wait
 * on it, so the progress thread need not be woken. */
XC__HIDDEN xc_result_t xc__op_submit(xc_comm_t *comm, xc__op_t *op, int will_wait);
/* Hand the pending work of `comm` to its progress thread if no caller is
 * waiting on it: what a submission with will_wait 0 does, done later
 * (xc_group_end, for the nonblocking calls of its group). */
XC__HIDDEN void xc__comm_handoff(xc_comm_t *comm);
/* Register point-to-point operation `op` as pending (its flight record,
 * wake class, the list of point-to-point operations) without posting its
 * send or receive: xc__op_submit's first step, and how the express path
 * hands over a receive it has posted bare (p2p_express.c). */
XC__HIDDEN void xc__op_adopt_p2p(xc_comm_t *comm, xc__op_t *op);
/* A point-to-point call done on the express path: its flight record, its
 * count in the statistics (with rc XC_OK). */
XC__HIDDEN void xc__p2p_express_done(xc_comm_t *comm, const xc__desc_t *d, int peer, int tag,
                                     xc_result_t rc);
/* Largest point-to-point payload that travels inside the frames of a
 * shared-memory channel, plus one (the single-copy threshold, at most a
 * quarter of the ring). */
XC__HIDDEN size_t xc__p2p_eager(const xc_comm_t *comm);
/* The result a caller gets for an operation that never entered the queue
 * (an express path) when the communicator's status is `st`. */
XC__HIDDEN xc_result_t xc__unqueued_result(const xc_comm_t *comm, xc_result_t st);
/* Blocking form for an operation in the caller's frame: submit and wait
 * under one lock; returns its result (the op is gone afterwards). */
XC__HIDDEN xc_result_t xc__op_run(xc_comm_t *comm, xc__op_t *op);
/* An operation's deadline: its timeout counts from the first time the
 * engine looks at it waiting (the head of the collective queue, or a
 * point-to-point operation), not from its submission, so a collective queued
 * behind others does not spend its time in the queue; set lazily, so an
 * operation that completes at once never reads the clock. */
XC__HIDDEN uint64_t xc__op_deadline(const xc_comm_t *comm, xc__op_t *op);
/* Complete an operation with rc (unlink it, complete its request). */
XC__HIDDEN void xc__op_complete(xc_comm_t *comm, xc__op_t *op, xc_result_t rc);
/* Run the engine: service connections reported ready and advance
 * operations.  poll() waits at most timeout_ms (0 = just look) with the
 * lock released. */
XC__HIDDEN void xc__comm_poll(xc_comm_t *comm, int timeout_ms);
/* Advance queued operations (no I/O waiting). */
XC__HIDDEN void xc__comm_advance(xc_comm_t *comm);
/* Are peers watched for silence (XCOLL_LIVENESS_MS with heartbeats and a
 * progress thread on every rank)? */
XC__HIDDEN int xc__liveness_on(const xc_comm_t *comm);
/* Wake the progress thread and waiters. */
XC__HIDDEN void xc__comm_kick(xc_comm_t *comm);
/* The progress thread's body. */
XC__HIDDEN void *xc__progress_main(void *arg);
/* Issue-then-wait helpers for blocking entry points. */
XC__HIDDEN xc_result_t xc__request_wait_free(xc_request_t *req);
/* Wait for a request in a caller's frame and collect its result; the
 * caller waits for `next` right after (NULL: nothing), which on the same
 * communicator keeps the progress thread out in between (engine.c). */
XC__HIDDEN xc_result_t xc__request_wait_stack(xc_request_t *req, const xc_request_t *next);

static inline xc_result_t xc__comm_status(const xc_comm_t *c)
{
    return (xc_result_t)__atomic_load_n(&c->status, __ATOMIC_ACQUIRE);
}

#endif
