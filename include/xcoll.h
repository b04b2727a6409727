/*
 * xcoll.h -- the one public header of xcoll, collective communication for
 * distributed training on CPUs.
 *
 * Model.  Ranks are processes.  A communicator (xc_comm_t) is created
 * collectively by `size` ranks; every collective is an operation enqueued on
 * its communicator and advanced by the engine.  Each blocking call is the
 * non-blocking form (xc_i*) followed by xc_request_wait; a caller that waits
 * drives progress itself, and a per-communicator progress thread advances
 * operations nobody is waiting on, so computation overlaps communication.
 *
 * Ordering.  Collectives on one communicator run in the order each rank
 * issued them.  Point-to-point operations are matched by (peer, tag), in the
 * order they were posted, independently of the collective queue.
 *
 * Threads.  Different communicators may be used from different threads
 * concurrently.  Calls on ONE communicator must be serialised by the caller
 * (as with an NCCL communicator or a CUDA stream); xc_request_wait/test/free
 * on distinct requests may come from any thread.  xc_comm_abort may be called
 * from any thread at any time.
 *
 * Buffers.  A buffer passed to a non-blocking call belongs to xcoll until the
 * request completes (wait/test report completion); do not read or write it
 * before.  In-place operation is allowed where MPI/NCCL allow it and is
 * spelled NCCL's way, by pointer equality (see each collective).  Buffers
 * that partly overlap in any other way are rejected with XC_ERR_INVALID.
 *
 * Errors.  Every function returns an xc_result_t (0 = success, negative =
 * error).  The library never aborts, exits or prints on error; a human
 * readable cause naming ranks, hosts and the operation is available from
 * xc_comm_last_error(comm) (or xc_last_error() when no communicator exists).
 * A peer-lost, timeout, mismatch or abort error poisons the communicator:
 * every later operation on it fails with the same code until it is destroyed;
 * so does XC_ERR_NOMEM from a collective (one rank could not start it: every
 * rank gets the error, naming that rank).
 */
#ifndef XCOLL_H
#define XCOLL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define XC_API __attribute__((visibility("default")))
#else
#define XC_API
#endif

/* ------------------------------------------------------------------ */
/* Version                                                             */
/* ------------------------------------------------------------------ */

#define XC_VERSION_MAJOR 0
#define XC_VERSION_MINOR 1
#define XC_VERSION_PATCH 0
#define XC_VERSION_NUM \
    ((XC_VERSION_MAJOR << 16) | (XC_VERSION_MINOR << 8) | XC_VERSION_PATCH)

/* The version of the library actually loaded, encoded as XC_VERSION_NUM.
 * Bindings compare it against the header they were written for. */
XC_API unsigned xc_version(void);
/* The same as a string, e.g. "0.1.0". */
XC_API const char *xc_version_string(void);

/* ------------------------------------------------------------------ */
/* Result codes                                                        */
/* ------------------------------------------------------------------ */

/* X(name, value, description).  Values are stable ABI. */
#define XC_RESULT_MAP(X)                                                       \
    X(OK, 0, "success")                                                        \
    X(ERR_INVALID, -1, "invalid argument")                                     \
    X(ERR_NOMEM, -2, "out of memory")                                          \
    X(ERR_SYSTEM, -3, "system call failed")                                    \
    X(ERR_PEER_LOST, -4, "a peer rank died or closed its connection")          \
    X(ERR_TIMEOUT, -5, "operation did not complete before its deadline")       \
    X(ERR_ABORTED, -6, "communicator was aborted")                             \
    X(ERR_MISMATCH, -7, "ranks issued mismatched operations")                  \
    X(ERR_PROTOCOL, -8, "malformed or foreign data on a connection")           \
    X(ERR_UNSUPPORTED, -9, "operation not supported")                          \
    X(ERR_INTERNAL, -10, "internal error (a bug in xcoll)")                   \
    X(ERR_NOT_FOUND, -11, "nothing to load: no complete checkpoint")           \
    X(ERR_CORRUPT, -12, "stored data failed verification (partial, truncated or damaged)") \
    X(ERR_REVOKED, -13, "communicator was revoked by one of its ranks")

typedef enum xc_result {
#define XC__RESULT_ENUM(name, val, desc) XC_##name = val,
    XC_RESULT_MAP(XC__RESULT_ENUM)
#undef XC__RESULT_ENUM
} xc_result_t;

/* Static description of a code ("operation did not complete ..."). */
XC_API const char *xc_strerror(xc_result_t rc);
/* Name of a code ("XC_ERR_TIMEOUT"). */
XC_API const char *xc_err_name(xc_result_t rc);
/* Detail of the last failing call made by this thread (any communicator,
 * including failed creation).  Never NULL; "" when there is none. */
XC_API const char *xc_last_error(void);

/* ------------------------------------------------------------------ */
/* Data types and reductions                                           */
/* ------------------------------------------------------------------ */

typedef enum xc_dtype {
    XC_INT8 = 0,
    XC_UINT8,
    XC_INT16,
    XC_UINT16,
    XC_INT32,
    XC_UINT32,
    XC_INT64,
    XC_UINT64,
    XC_FLOAT16, /* IEEE binary16; reduced in fp32, rounded to nearest even */
    XC_BFLOAT16, /* bfloat16; reduced in fp32, rounded to nearest even    */
    XC_FLOAT32,
    XC_FLOAT64,
    XC_DTYPE_COUNT
} xc_dtype_t;

/*
 * Reductions.  Integers wrap (two's complement) and are exact.
 * XC_AVG is the sum divided by the number of ranks: floats divide the
 * (rounded) sum by N; integers divide the wrapped sum by N truncating toward
 * zero (so an integer average whose sum overflows is meaningless -- average
 * in a wider type).  Bitwise ops are defined for integer types only.
 */
typedef enum xc_op {
    XC_SUM = 0,
    XC_PROD,
    XC_MIN,
    XC_MAX,
    XC_AVG,
    XC_BAND,
    XC_BOR,
    XC_BXOR,
    XC_OP_COUNT
} xc_op_t;

/* Size in bytes of one element (0 for an invalid dtype). */
XC_API size_t xc_dtype_size(xc_dtype_t dtype);
XC_API const char *xc_dtype_name(xc_dtype_t dtype); /* "fp32", "bf16", ... */
XC_API const char *xc_op_name(xc_op_t op);          /* "sum", "avg", ...   */

/* ------------------------------------------------------------------ */
/* Memory for communication buffers                                    */
/* ------------------------------------------------------------------ */

/*
 * Allocate `bytes` (> 0) of zero-filled memory meant for buffers that go
 * through collectives, as MPI_Alloc_mem is for MPI.  The block starts on a
 * 2 MiB boundary and is backed by transparent huge pages where the kernel
 * allows it (THP "always" or "madvise"; blocks of 1 MiB or more, rounded
 * up to whole huge pages; XCOLL_HUGEPAGES=0 asks for ordinary pages,
 * MADV_NOHUGEPAGE): a single-copy read of a peer's buffer then walks and
 * pins one page per 2 MiB instead of 512, and a collective that follows
 * compute finds its translations in far fewer TLB entries
 * (docs/cost-model.md, "Cold calls").  Any buffer works with every call;
 * this one is faster back to back (measured 1.5-2.3x on 2 ranks).
 * Thread-safe.  XC_ERR_INVALID for 0 bytes, a NULL `ptr` or an
 * XCOLL_HUGEPAGES other than 0 or 1, XC_ERR_NOMEM when the mapping fails
 * (*ptr is NULL on every failure).
 */
XC_API xc_result_t xc_mem_alloc(size_t bytes, void **ptr);
/*
 * As xc_mem_alloc, but the block is shared memory (a memfd mapped
 * MAP_SHARED) that the ranks on this node may map: a collective or a
 * point-to-point message that would read or write it single copy
 * (process_vm_readv) copies it with one memcpy instead -- 1.3-1.6x the
 * single copy of huge pages, 2-3x that of ordinary ones (docs/shm.md,
 * "Shared blocks").  Differences from xc_mem_alloc: a process created by
 * fork() does not inherit the block (touching it there faults), where a
 * private block would be a copy; huge pages only where the kernel's shmem
 * THP mode allows them (/sys/kernel/mm/transparent_hugepage/
 * shmem_enabled); one descriptor per block is held open.  A process lists
 * at most 60 such blocks for its peers (more work, single copy).  Errors as
 * xc_mem_alloc, and XC_ERR_SYSTEM where no shared-memory file can be made.
 * Free with xc_mem_free.
 */
XC_API xc_result_t xc_mem_alloc_shared(size_t bytes, void **ptr);
/* Release a block of xc_mem_alloc or xc_mem_alloc_shared.  NULL is a no-op (XC_OK); a pointer
 * neither returned (or already freed) is XC_ERR_INVALID and nothing is
 * released. */
XC_API xc_result_t xc_mem_free(void *ptr);
/* The page size backing a block of xc_mem_alloc (or _shared) right now:
 * 2 MiB when huge pages back (part of) it, else the base page size; 0 for
 * a pointer neither returned.  Huge pages appear on first touch.  Reads
 * /proc/self/smaps (the mapping holding the block: neighbouring blocks of
 * the same kind may share it): a diagnostic, not for a hot path. */
XC_API size_t xc_mem_page_size(const void *ptr);

/* ------------------------------------------------------------------ */
/* Configuration                                                       */
/* ------------------------------------------------------------------ */

/*
 * Optional settings for communicator creation.  Start from XC_CONFIG_INIT;
 * fields left at their "unset" value (-1 / NULL) take the XCOLL_* environment
 * variable, then the built-in default (see docs/config.md).  New fields are
 * only ever appended; `size` tells the library which ones the caller knows.
 */
typedef struct xc_config {
    size_t size;            /* sizeof(xc_config_t), set by XC_CONFIG_INIT */
    int timeout_ms;         /* XCOLL_TIMEOUT_MS: deadline of every wait   */
    int progress_thread;    /* XCOLL_PROGRESS_THREAD: 1 on, 0 off         */
    const char *socket_ifname; /* XCOLL_SOCKET_IFNAME: "eth0", "^lo", ... */
    const char *node_id;    /* XCOLL_NODE_ID: override node identity      */
} xc_config_t;

#define XC_CONFIG_INIT { sizeof(xc_config_t), -1, -1, NULL, NULL }

/* ------------------------------------------------------------------ */
/* Communicators                                                       */
/* ------------------------------------------------------------------ */

typedef struct xc_comm xc_comm_t;
typedef struct xc_request xc_request_t;

/*
 * A key-value store owned by the caller (e.g. a PyTorch c10d store), through
 * which ranks exchange their addresses at creation.  Every callback returns 0
 * on success and non-zero on failure.
 *   set:  store `len` bytes under `key` (overwrite allowed).
 *   get:  block until `key` exists or `timeout_ms` passes (return non-zero
 *         then); copy at most `cap` bytes into `buf`, the full length into
 *         *len.  `timeout_ms` is at least 1 (a look for a key that may be
 *         there is a get of 1 ms).
 *   wait: optional (may be NULL): block until every key exists.
 * The keys xcoll uses start with "xc/"; give each communicator its own store
 * or prefix (as c10d's PrefixStore does).
 */
typedef struct xc_store {
    size_t size; /* sizeof(xc_store_t) */
    void *ctx;
    int (*set)(void *ctx, const char *key, const void *val, size_t len);
    int (*get)(void *ctx, const char *key, void *buf, size_t cap, size_t *len,
               int timeout_ms);
    int (*wait)(void *ctx, const char *const *keys, size_t nkeys,
                int timeout_ms);
} xc_store_t;

/*
 * Create a communicator from the launcher's environment.  Rank and size are
 * read, first found wins, from XCOLL_RANK/XCOLL_SIZE, torchrun's
 * RANK/WORLD_SIZE, Slurm's SLURM_PROCID/SLURM_NTASKS, Open MPI's
 * OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE and PMI_RANK/PMI_SIZE (MPICH,
 * Intel MPI).  The rendezvous address comes from XCOLL_ADDR ("host:port" or
 * "file:/shared/dir"), else MASTER_ADDR:MASTER_PORT.  Collective over all
 * ranks; blocks until every rank has joined or the timeout passes.
 */
XC_API xc_result_t xc_comm_init_env(xc_comm_t **comm, const xc_config_t *cfg);

/*
 * Create a communicator with explicit rank and size.  `addr` is
 * "host:port" for a TCP store (hosted by rank 0 in-process unless
 * XCOLL_STORE_EXTERNAL=1 says a launcher hosts it) or "file:/dir" for a file
 * store on a shared filesystem.  Collective; blocking.
 */
XC_API xc_result_t xc_comm_init(xc_comm_t **comm, int rank, int size,
                                const char *addr, const xc_config_t *cfg);

/* Create a communicator through a caller-owned store.  Collective; blocking.
 * The store is used only during this call. */
XC_API xc_result_t xc_comm_init_store(xc_comm_t **comm, int rank, int size,
                                      const xc_store_t *store,
                                      const xc_config_t *cfg);

#define XC_COLOR_NONE (-1)

/*
 * Split `parent` into disjoint sub-communicators: ranks with the same
 * `color` form one, ordered by (key, parent rank).  Collective over all
 * ranks of `parent` (it runs collectives on it, in issue order).  A rank
 * passing XC_COLOR_NONE takes part but gets *child = NULL.  The child has
 * its own connections and progress; it may be used from another thread than
 * the parent.  `cfg` may be NULL (inherit the parent's settings).
 */
XC_API xc_result_t xc_comm_split(xc_comm_t *parent, int color, int key,
                                 xc_comm_t **child, const xc_config_t *cfg);

/*
 * Shrink: after failures, make a new communicator of the surviving ranks.
 * Every surviving rank calls it on the old communicator, typically after an
 * operation failed with XC_ERR_PEER_LOST (or XC_ERR_REVOKED, XC_ERR_ABORTED,
 * XC_ERR_TIMEOUT);
 * the survivors agree on the membership over the old communicator's own
 * connections -- no store, so it works when rank 0, the store's host, died --
 * and each gets *newcomm: the survivors, renumbered in old-rank order, with
 * their own connections, shared memory and progress thread, the old
 * communicator's settings.  Collective over the survivors; blocking.
 *
 * A rank is failed if its connection closed, it was silent (no frame, no
 * heartbeat) for XCOLL_LIVENESS_MS (XCOLL_TIMEOUT_MS when liveness is off),
 * it did not take part within XCOLL_TIMEOUT_MS, or another survivor found it
 * failed.  Called on a healthy communicator, shrink first poisons it with
 * XC_ERR_ABORTED (every rank must then shrink; with no failure the new
 * communicator has every rank).  The old communicator stays poisoned and
 * must still be destroyed by the caller (after the shrink).
 *
 * Errors: XC_ERR_INVALID (NULL argument; nothing happens);
 * XC_ERR_PEER_LOST when this rank was declared failed by a survivor, or the
 * survivors could not agree on the membership (a further failure during the
 * shrink); XC_ERR_TIMEOUT (or XC_ERR_PEER_LOST) when the survivors could not
 * connect to each other within the deadline (again a failure during the
 * shrink, or survivors that ended with different memberships: they never
 * form inconsistent communicators); XC_ERR_NOMEM, XC_ERR_SYSTEM.  On error
 * *newcomm is NULL, and all survivors may call xc_comm_shrink on the old
 * communicator again.  Not thread-safe with other calls on `comm` (except
 * xc_comm_abort).  See docs/fault-tolerance.md, "Shrink".
 */
XC_API xc_result_t xc_comm_shrink(xc_comm_t *comm, xc_comm_t **newcomm);

/*
 * Destroy a communicator.  Pending operations are first given until their
 * deadline to complete, then fail with XC_ERR_ABORTED; their requests stay
 * valid until xc_request_free.  Not collective, but a rank that destroys a
 * communicator its peers still use makes them fail with XC_ERR_PEER_LOST.
 * NULL is a harmless no-op.  In a forked child (a data-loader worker) the
 * communicator is the parent's: destroy there only closes the child's
 * copies of its descriptors and leaves the parent's communicator working;
 * xc_comm_abort there does nothing, and any other call on it (requests
 * too) is XC_ERR_INVALID.
 */
XC_API xc_result_t xc_comm_destroy(xc_comm_t *comm);

/*
 * Abort: from any thread and any state, fail every pending and future
 * operation on `comm` with XC_ERR_ABORTED, tell the peers (who then fail
 * with XC_ERR_ABORTED too), and return promptly.  The communicator must
 * still be destroyed.  NULL is a no-op.
 */
XC_API xc_result_t xc_comm_abort(xc_comm_t *comm);

/*
 * Revoke: from any thread, make every pending and future operation on
 * `comm` fail with XC_ERR_REVOKED on every rank -- this one at once, the
 * others as soon as the notice reaches them (it goes to every peer, and
 * every rank that hears it passes it on, so ranks blocked waiting for
 * somebody else learn it too), with a message naming the revoking rank.
 * Point-to-point operations are woken as well as collectives.  Use it when
 * one rank knows the job cannot go on as it is (a failure only it saw, a
 * diverged step): the ranks then call xc_comm_shrink on it (with no failed
 * rank, the new communicator has every rank) or destroy it.  A communicator
 * that already failed keeps its first error.  XC_ERR_INVALID for NULL.
 */
XC_API xc_result_t xc_comm_revoke(xc_comm_t *comm);

XC_API int xc_comm_rank(const xc_comm_t *comm);
XC_API int xc_comm_size(const xc_comm_t *comm);
/* Rank among the ranks of `comm` on the same node, and their number. */
XC_API int xc_comm_local_rank(const xc_comm_t *comm);
XC_API int xc_comm_local_size(const xc_comm_t *comm);
/* Index of this rank's node among the nodes of `comm`, and their number. */
XC_API int xc_comm_node(const xc_comm_t *comm);
XC_API int xc_comm_node_count(const xc_comm_t *comm);

/* The first error that poisoned `comm`, or the detail of the last failing
 * call on it.  Never NULL; "" when there is none.  Valid until the next call
 * on `comm`. */
XC_API const char *xc_comm_last_error(const xc_comm_t *comm);
/* XC_OK, or the code that poisoned the communicator. */
XC_API xc_result_t xc_comm_status(const xc_comm_t *comm);

/* ------------------------------------------------------------------ */
/* Requests                                                            */
/* ------------------------------------------------------------------ */

/* Block until `req` completes or its deadline passes; return its result.
 * May be called again (returns the same result).  Drives progress. */
XC_API xc_result_t xc_request_wait(xc_request_t *req);
/* Advance progress once without blocking; *done = 1 when complete (then the
 * return value is the request's result), else 0 and XC_OK. */
XC_API xc_result_t xc_request_test(xc_request_t *req, int *done);
/* Release a request.  If it is still pending, it completes in the
 * background and is released then (its buffers stay in use until then).
 * NULL is a no-op. */
XC_API void xc_request_free(xc_request_t *req);
/* Wait for every request of an array (NULL entries skipped); returns the
 * first error, XC_OK if all succeeded.  Does not free them. */
XC_API xc_result_t xc_request_waitall(xc_request_t **reqs, size_t n);
/* The rank a completed receive came from (what an XC_ANY_SOURCE receive
 * matched; the posted peer otherwise).  -1 for a send, a collective, a
 * receive still pending or failed, or NULL. */
XC_API int xc_request_source(const xc_request_t *req);

/* ------------------------------------------------------------------ */
/* Collectives.  Counts are in elements.  Every x_* blocks; every xc_i*   */
/* returns a request in *req.                                           */
/* ------------------------------------------------------------------ */

/* recvbuf[i] = op over ranks of sendbuf[i].  In place: sendbuf == recvbuf. */
XC_API xc_result_t xc_allreduce(const void *sendbuf, void *recvbuf,
                                size_t count, xc_dtype_t dtype, xc_op_t op,
                                xc_comm_t *comm);
XC_API xc_result_t xc_iallreduce(const void *sendbuf, void *recvbuf,
                                 size_t count, xc_dtype_t dtype, xc_op_t op,
                                 xc_comm_t *comm, xc_request_t **req);

/* sendbuf holds size*recvcount elements; rank r receives the reduction of
 * slice r.  In place: recvbuf == sendbuf + rank*recvcount elements. */
XC_API xc_result_t xc_reduce_scatter(const void *sendbuf, void *recvbuf,
                                     size_t recvcount, xc_dtype_t dtype,
                                     xc_op_t op, xc_comm_t *comm);
XC_API xc_result_t xc_ireduce_scatter(const void *sendbuf, void *recvbuf,
                                      size_t recvcount, xc_dtype_t dtype,
                                      xc_op_t op, xc_comm_t *comm,
                                      xc_request_t **req);

/* recvbuf (size*sendcount elements) = concatenation of every rank's sendbuf.
 * In place: sendbuf == recvbuf + rank*sendcount elements. */
XC_API xc_result_t xc_allgather(const void *sendbuf, void *recvbuf,
                                size_t sendcount, xc_dtype_t dtype,
                                xc_comm_t *comm);
XC_API xc_result_t xc_iallgather(const void *sendbuf, void *recvbuf,
                                 size_t sendcount, xc_dtype_t dtype,
                                 xc_comm_t *comm, xc_request_t **req);

/* Reduction to `root`; recvbuf is used on root only (may be NULL
 * elsewhere).  In place on root: sendbuf == recvbuf. */
XC_API xc_result_t xc_reduce(const void *sendbuf, void *recvbuf, size_t count,
                             xc_dtype_t dtype, xc_op_t op, int root,
                             xc_comm_t *comm);
XC_API xc_result_t xc_ireduce(const void *sendbuf, void *recvbuf,
                              size_t count, xc_dtype_t dtype, xc_op_t op,
                              int root, xc_comm_t *comm, xc_request_t **req);

/* `buf` of root is copied to `buf` of every rank (always in place). */
XC_API xc_result_t xc_bcast(void *buf, size_t count, xc_dtype_t dtype, int root,
                            xc_comm_t *comm);
XC_API xc_result_t xc_ibcast(void *buf, size_t count, xc_dtype_t dtype,
                             int root, xc_comm_t *comm, xc_request_t **req);

/* Block j of sendbuf (count elements) goes to rank j, and lands as block i
 * of rank j's recvbuf.  In place: sendbuf == recvbuf, on every rank or on
 * none (the shared-memory path's staging or single copy depends on it):
 * in place on some ranks only is XC_ERR_MISMATCH on every rank. */
XC_API xc_result_t xc_alltoall(const void *sendbuf, void *recvbuf,
                               size_t count, xc_dtype_t dtype,
                               xc_comm_t *comm);
XC_API xc_result_t xc_ialltoall(const void *sendbuf, void *recvbuf,
                                size_t count, xc_dtype_t dtype, xc_comm_t *comm,
                                xc_request_t **req);

/* Variable all-to-all: sendcounts[j] elements from sendbuf+sdispls[j] go to
 * rank j, which receives them at recvbuf+rdispls[i] expecting recvcounts[i]
 * of them (a disagreement is XC_ERR_MISMATCH; this rank's own block,
 * sendcounts[rank] != recvcounts[rank], is XC_ERR_INVALID before anything is
 * sent).  Displacements in elements.  Arrays are copied at issue.  In place
 * is not allowed. */
XC_API xc_result_t xc_alltoallv(const void *sendbuf, const size_t *sendcounts,
                                const size_t *sdispls, void *recvbuf,
                                const size_t *recvcounts, const size_t *rdispls,
                                xc_dtype_t dtype, xc_comm_t *comm);
XC_API xc_result_t xc_ialltoallv(const void *sendbuf, const size_t *sendcounts,
                                 const size_t *sdispls, void *recvbuf,
                                 const size_t *recvcounts,
                                 const size_t *rdispls, xc_dtype_t dtype,
                                 xc_comm_t *comm, xc_request_t **req);

XC_API xc_result_t xc_barrier(xc_comm_t *comm);
XC_API xc_result_t xc_ibarrier(xc_comm_t *comm, xc_request_t **req);

/* ------------------------------------------------------------------ */
/* Compressed all-reduce (docs/compression.md)                         */
/* ------------------------------------------------------------------ */

/* Wire formats: fp16 / bf16 (2 bytes per value), INT8 (1 byte per value
 * plus one fp32 scale per block of XC_COMPRESS_BLOCK values), INT4 (half a
 * byte per value, codes -7..7, plus the scale per block: 7.8x smaller than
 * fp32, 18x the error of INT8 -- with error feedback). */
typedef enum xc_compress {
    XC_COMPRESS_NONE = 0,
    XC_COMPRESS_FP16,
    XC_COMPRESS_BF16,
    XC_COMPRESS_INT8,
    XC_COMPRESS_INT4,
    XC_COMPRESS_COUNT
} xc_compress_t;

#define XC_COMPRESS_BLOCK 256

/* "none", "fp16", "bf16", "int8", "int4" (NULL for an unknown value). */
XC_API const char *xc_compress_name(xc_compress_t fmt);
/* The inverse; XC_ERR_INVALID naming `s` if it is none of them. */
XC_API xc_result_t xc_compress_parse(const char *s, xc_compress_t *fmt);

/* Error feedback: the quantization error of one tensor (or bucket) of
 * `count` values, carried into its next compressed all-reduce.  Its state
 * is `bytes` of plain data at `data` (xc_residual_data): save it with a
 * checkpoint, write it back to restore, zero it to reset. */
typedef struct xc_residual xc_residual_t;
XC_API xc_result_t xc_residual_create(size_t count, xc_residual_t **out);
XC_API void xc_residual_free(xc_residual_t *r);
XC_API xc_result_t xc_residual_data(xc_residual_t *r, void **data, size_t *bytes);

/*
 * All-reduce of fp32, fp16 or bf16 values with XC_SUM or XC_AVG, sent
 * compressed as `fmt`: each rank encodes its input once (XC_AVG divides by
 * N first), the owner of each of N slices decodes the N contributions and
 * adds them in fp32 in rank order, encodes the sum once more, and every
 * rank decodes every slice (two hops: all-to-all, all-gather).  Every rank
 * ends with the same bits.  With `residual` (created for `count`; NULL for
 * none) both encodings add the previous call's error before encoding and
 * keep the new one.  XC_COMPRESS_NONE is xc_allreduce.  Error bounds:
 * docs/compression.md.  Ranks that disagree on count, format or dtype fail
 * with XC_ERR_MISMATCH.  In place allowed.
 */
XC_API xc_result_t xc_allreduce_compressed(const void *sendbuf, void *recvbuf, size_t count,
                                           xc_dtype_t dtype, xc_op_t op, xc_compress_t fmt,
                                           xc_residual_t *residual, xc_comm_t *comm);

/*
 * Reduce-scatter of fp32, fp16 or bf16 values with XC_SUM or XC_AVG, sent
 * compressed as `fmt` (the first hop of xc_allreduce_compressed): sendbuf
 * holds N parts of `count` values, part j for rank j; each rank encodes
 * every part once (XC_AVG divides by N first), and rank j decodes the N
 * contributions to its part and adds them in fp32 in rank order into
 * recvbuf (`count` values).  With `residual` (created for count x N
 * values: the input's size) the encoding adds the previous call's error
 * and keeps the new one.  XC_COMPRESS_NONE is xc_reduce_scatter.  Not in
 * place.  Error bound (one encoding per contribution): docs/compression.md.
 * Ranks that disagree on count, format or dtype fail with XC_ERR_MISMATCH.
 */
XC_API xc_result_t xc_reduce_scatter_compressed(const void *sendbuf, void *recvbuf, size_t count,
                                                xc_dtype_t dtype, xc_op_t op, xc_compress_t fmt,
                                                xc_residual_t *residual, xc_comm_t *comm);

/*
 * The cost model's prediction (docs/cost-model.md) of
 * xc_allreduce_compressed of `count` values of `dtype` with `op` as `fmt`
 * on `comm`, in seconds -- XC_COMPRESS_NONE: of the plain all-reduce the
 * selector would run -- from the bytes the format puts on the wire (codes,
 * scales, headers, padding), the collectives that carry them, and the
 * measured cost of the codec passes.  Local (not collective); every rank
 * of a communicator gets the same value, except that it is scaled up when
 * a node runs more ranks than it has cores.  XC_ERR_INVALID for bad
 * arguments (as xc_allreduce_compressed), XC_ERR_UNSUPPORTED if the
 * communicator has no cost model yet.
 */
XC_API xc_result_t xc_compress_predict(xc_comm_t *comm, size_t count, xc_dtype_t dtype,
                                       xc_op_t op, xc_compress_t fmt, double *seconds);

/* ------------------------------------------------------------------ */
/* Point to point                                                      */
/* ------------------------------------------------------------------ */

/*
 * Tagged send/receive, matched by (peer, tag) in posting order; tags are
 * >= 0.  A receive from XC_ANY_SOURCE takes the first message on its tag
 * from any rank (the earliest arrived among those already there); a
 * message goes to the matching receive posted first, whether that names
 * its sender or any source.  Messages from one sender on one tag are never
 * reordered.  xc_irecv's request tells the sender (xc_request_source); a
 * blocking xc_recv from XC_ANY_SOURCE does not.  On more than one rank, an
 * any-source receive fails with XC_ERR_PEER_LOST when it is posted, or as
 * soon as it is pending, once every other rank has destroyed its
 * communicator (or left it with xc_comm_shrink: then XC_ERR_ABORTED), even
 * if a message to oneself could still come.  The receiver's count and
 * dtype must equal the sender's (XC_ERR_MISMATCH otherwise).  Sending to
 * oneself is allowed.  A send completes when its buffer may be reused (not
 * when it was received).
 * Inside xc_group_start/xc_group_end, the blocking forms only post the
 * operation; xc_group_end waits for all of them, so exchanges in both
 * directions cannot deadlock.  A grouped receive may be posted only at
 * xc_group_end (in the order of the calls), so a failure it meets there
 * is reported by xc_group_end rather than by xc_recv; an xc_irecv inside
 * a group is posted at its call, after the group's receives called
 * before it (matching follows the order of the calls).  Conversely a small
 * xc_irecv whose message is already there completes at the call, so a
 * failure it meets (a count mismatch) is returned by xc_irecv itself
 * (then *req is NULL).
 */
#define XC_ANY_SOURCE (-1)
XC_API xc_result_t xc_send(const void *buf, size_t count, xc_dtype_t dtype,
                           int peer, int tag, xc_comm_t *comm);
XC_API xc_result_t xc_recv(void *buf, size_t count, xc_dtype_t dtype, int peer,
                           int tag, xc_comm_t *comm);
XC_API xc_result_t xc_isend(const void *buf, size_t count, xc_dtype_t dtype,
                            int peer, int tag, xc_comm_t *comm,
                            xc_request_t **req);
XC_API xc_result_t xc_irecv(void *buf, size_t count, xc_dtype_t dtype, int peer,
                            int tag, xc_comm_t *comm, xc_request_t **req);

/* Group point-to-point calls made by this thread (nestable).  xc_group_end
 * returns the first error of the grouped blocking calls.  It does not wait
 * for an xc_isend / xc_irecv of the group (their requests are waited for
 * as usual); from xc_group_end on they move in the background like any
 * other nonblocking call.  A communicator used in an open group must not be
 * destroyed before the group's xc_group_end. */
XC_API xc_result_t xc_group_start(void);
XC_API xc_result_t xc_group_end(void);

/* ------------------------------------------------------------------ */
/* Statistics                                                          */
/* ------------------------------------------------------------------ */

typedef enum xc_coll {
    XC_COLL_ALLREDUCE = 0,
    XC_COLL_REDUCE_SCATTER,
    XC_COLL_ALLGATHER,
    XC_COLL_REDUCE,
    XC_COLL_BCAST,
    XC_COLL_ALLTOALL,
    XC_COLL_ALLTOALLV,
    XC_COLL_BARRIER,
    XC_COLL_SEND,
    XC_COLL_RECV,
    XC_COLL_COUNT
} xc_coll_t;

typedef enum xc_transport_kind {
    XC_TRANSPORT_SELF = 0,
    XC_TRANSPORT_TCP,
    XC_TRANSPORT_SHM,
    XC_TRANSPORT_COUNT
} xc_transport_kind_t;

#define XC_STATS_MAX_ALGOS 64

typedef struct xc_stats {
    size_t size; /* set to sizeof(xc_stats_t) before the call */
    uint64_t ops[XC_COLL_COUNT];              /* completed, by collective */
    uint64_t bytes_sent[XC_TRANSPORT_COUNT];  /* payload bytes            */
    uint64_t bytes_recv[XC_TRANSPORT_COUNT];
    uint64_t msgs_sent[XC_TRANSPORT_COUNT];
    uint64_t algo_ops[XC_STATS_MAX_ALGOS];    /* by algorithm id          */
    /* A thread that keeps making small blocking collectives on a
     * shared-memory communicator is let make them without its lock (the
     * "express bias", docs/engine.md); another thread that takes the lock
     * revokes it (~15 us).  How often each happened: */
    uint64_t express_bias_grants;
    uint64_t express_bias_revokes;
    /* Bytes this rank read from (or wrote into) a peer's buffer on the
     * same node by one copy (process_vm_readv / _writev, or a shared
     * mapping: docs/shm.md) rather than through the staging slots. */
    uint64_t single_copy_bytes;
    /* Small blocking collectives on shared memory run outside the
     * engine's queue (the express path, docs/engine.md): how many ran
     * there whole, and how many began there and were finished by the
     * engine because a peer came later (express_resumed). */
    uint64_t express_ops;
    uint64_t express_resumed;
    /* Sends and receives (blocking, in a group, or nonblocking and
     * complete at the call) between ranks sharing memory that ran on the
     * point-to-point express path: the frame written to, or read from,
     * the channel without an operation (docs/engine.md "Express
     * point-to-point"). */
    uint64_t express_p2p;
} xc_stats_t;

/* Snapshot of the counters of `comm` (since creation). */
XC_API xc_result_t xc_comm_stats(const xc_comm_t *comm, xc_stats_t *out);
XC_API const char *xc_coll_name(xc_coll_t coll);
XC_API const char *xc_transport_name(xc_transport_kind_t t);
/* Name of algorithm id `algo` ("ring", "binomial", ...) or NULL. */
XC_API const char *xc_algo_name(int algo);

/* ------------------------------------------------------------------ trace
 *
 * XCOLL_TRACE=path.json records, per process, the engine's communication
 * spans (every collective and message, from issue to completion, one lane
 * per communicator) and the caller's spans (xc_trace_begin/end, one lane per
 * thread) and writes them as a Chrome / Perfetto trace at exit ("%r" in the
 * path is replaced by the rank, else ".r<rank>" goes before ".json").
 * XCOLL_TRACE_SUMMARY=1 records without writing a file.  Recording costs
 * two clock reads per operation; off, nothing.  Spans are what xc_trace_step
 * measures overlap from.
 */
typedef struct xc_step_summary {
    uint64_t step;         /* 1, 2, ... */
    double step_ms;        /* wall time since the previous xc_trace_step     */
    double compute_ms;     /* union of the caller's spans in that interval  */
    double comm_ms;        /* union of communication spans                  */
    double exposed_ms;     /* communication not overlapped by computation   */
    double overlap_pct;    /* 100 * (comm - exposed) / comm (100 if no comm) */
} xc_step_summary_t;

/* Is recording on (XCOLL_TRACE or XCOLL_TRACE_SUMMARY)? */
XC_API int xc_trace_enabled(void);
/* Open / close a span of the calling thread (spans nest; `name` is copied).
 * No-ops when recording is off. */
XC_API void xc_trace_begin(const char *name);
XC_API void xc_trace_end(void);
/* End a training step: summarise the interval since the previous call (or
 * since recording began) into *out (may be NULL) and, with XCOLL_TRACE or
 * XCOLL_TRACE_SUMMARY set, print one line on stderr.  XC_ERR_UNSUPPORTED
 * when recording is off. */
XC_API xc_result_t xc_trace_step(xc_step_summary_t *out);
/* Write the trace file now (it is also written at exit). */
XC_API xc_result_t xc_trace_flush(void);

/* ------------------------------------------------------------------ */
/* Cost model calibration                                              */
/* ------------------------------------------------------------------ */

/*
 * Measure this machine for the cost model that chooses algorithms -- alpha
 * and beta of every link class the ranks of `comm` can use (shared memory,
 * loopback TCP, TCP across nodes), the shared-memory synchronisation cost,
 * memcpy bandwidth, and the reduction cost per dtype x op -- and write the
 * profile as JSON to `path` (used on rank 0 only; docs/cost-model.md).
 * Communicators created with XCOLL_PROFILE=path use it instead of measuring
 * a quick profile at creation.  This is what `xcoll-perf --calibrate` runs.
 * Collective and blocking; takes a few seconds; nothing else may be in
 * flight on `comm` meanwhile (it exchanges point-to-point messages and
 * creates sub-communicators).  Every rank returns rank 0's result.
 */
XC_API xc_result_t xc_profile_calibrate(xc_comm_t *comm, const char *path);

/* ------------------------------------------------------------ bucketer
 *
 * Gradient bucketing for data-parallel training (as PyTorch DDP's reducer):
 * the caller registers its gradient tensors once; during backward it marks
 * each gradient ready as soon as it is computed; gradients are packed into
 * buckets (one dtype each), and a bucket's all-reduce starts, without
 * blocking, as soon as the bucket is complete -- while backward goes on
 * computing the earlier layers' gradients.  xc_bucketer_finish waits for
 * the last bucket.  Built only on this header's non-blocking collectives;
 * docs/training.md explains the design and the choice of bucket sizes.
 *
 * Layout.  Buckets hold up to XCOLL_BUCKET_MB (default 25 MiB), the first
 * bucket of each dtype up to XCOLL_FIRST_BUCKET_MB (default 1 MiB) so that
 * communication starts early; a gradient larger than a bucket gets one of
 * its own -- or, with opts.split, is split into bucket-sized pieces, each
 * a bucket of its own (so that forward_tail can order what is left of it,
 * and xc_bucketer_mark_ready_range can start pieces as they are computed).
 * Step 1 uses the reverse registration order (backward usually
 * produces the last layer's gradients first); at the end of step 1 (of the
 * first step in which rank 0 marked every gradient) the buckets are rebuilt
 * from the order in which rank 0's gradients actually arrived (broadcast,
 * so every rank has the same layout).  Buckets are
 * all-reduced in layout order on every rank, whatever the local order in
 * which they complete, so ranks whose arrival orders differ stay matched.
 *
 * Memory.  With opts.views = 1 the gradients live inside the bucket memory
 * (no copy): the caller computes each gradient directly into
 * xc_bucketer_grad(b, i).  Otherwise the bucketer copies a gradient into its
 * bucket at xc_bucketer_mark_ready and the reduced values back into the
 * caller's array in xc_bucketer_finish.  Averaging (opts.average, default
 * on) is the reduction XC_AVG itself: no separate scaling pass.
 *
 * Threads.  One bucketer is used by one thread at a time, and it issues
 * collectives on `comm`: no other thread may issue collectives on that
 * communicator between commit and destroy except between steps (xcoll.h,
 * "Threads") -- or, once every gradient of the step is marked ready,
 * after an xc_bucketer_wait has returned (every bucket is issued then).  On more than one rank the all-reduces are issued by a
 * launch thread of the bucketer (opts.launch_thread), so that
 * mark_ready returns at once even while the engine is busy with the
 * previous bucket; the hook's start runs on that thread.  The all-reduces
 * progress during backward through the communicator's progress thread
 * (XCOLL_PROGRESS_THREAD=1, the default).
 *
 * Errors are returned (XC_ERR_INVALID for misuse, naming the gradients) and
 * described by xc_bucketer_last_error(b) as well as xc_last_error().
 */
typedef struct xc_bucketer xc_bucketer_t;

typedef struct xc_bucketer_opts {
    size_t size;            /* sizeof(xc_bucketer_opts_t), by XC_BUCKETER_OPTS_INIT */
    double bucket_mb;       /* < 0: XCOLL_BUCKET_MB, else 25 (MiB)              */
    double first_bucket_mb; /* < 0: XCOLL_FIRST_BUCKET_MB, else 1 (MiB)         */
    int average;            /* -1 or 1: reduce with XC_AVG; 0: XC_SUM           */
    int views;              /* 1: gradients live in bucket memory; -1 or 0: copy */
    int rebuild;            /* -1 or 1: rebuild from step 1's arrival order; 0 never */
    int launch_thread;      /* -1: XCOLL_BUCKET_THREAD, else 1; 1: a thread of the
                             * bucketer issues the all-reduces (mark_ready never
                             * waits for the engine); 0: mark_ready issues them */
    int forward_tail;       /* 1: after three steps on the final layout, the
                             * buckets from some t on are issued last-filled
                             * first (first layer first), t chosen by replaying
                             * those steps for the least time the next forward
                             * waits -- for callers that complete buckets with
                             * xc_bucketer_wait in the next forward
                             * (docs/training.md); and the last buckets (and
                             * pieces) shrink: one begun with L bytes still to
                             * arrive holds at most ~L/2 (not below 64 KiB), so
                             * the first layer's is small.  -1 or 0: arrival
                             * order.  Rank 0's choice and timing decide for
                             * every rank. */
    int split;              /* -1: XCOLL_BUCKET_SPLIT, else 0; 1: a gradient larger
                             * than a bucket is split into pieces of the bucket
                             * size (a multiple of 64 bytes; the last ones
                             * smaller with forward_tail), one bucket each, its
                             * memory still contiguous (views); 0: one bucket of
                             * its own.  Must agree across ranks. */
} xc_bucketer_opts_t;

#define XC_BUCKETER_OPTS_INIT { sizeof(xc_bucketer_opts_t), -1.0, -1.0, -1, -1, -1, -1, -1, -1 }

/* One bucket as the communication hook sees it (and xc_bucketer_bucket). */
typedef struct xc_bucket {
    int index;             /* position in the layout (= all-reduce order but
                            * with opts.forward_tail)                         */
    int layout;            /* 0 = initial layout, +1 per rebuild             */
    uint64_t step;         /* the step being reduced (1, 2, ...)             */
    void *data;            /* the bucket's memory: its gradients, packed     */
    size_t count;          /* elements of data (with alignment padding,     */
                           /* which holds zeros)                             */
    xc_dtype_t dtype;
    xc_op_t op;            /* XC_AVG or XC_SUM: what the default hook applies */
    int ngrads;
    const int *grads;      /* indices of its gradients, in memory order      */
    const size_t *offsets; /* element offset of each gradient in data        */
    size_t first_elem;     /* a piece of a split gradient (opts.split; then
                            * ngrads is 1): the element of grads[0] at which
                            * data begins; 0 otherwise                        */
} xc_bucket_t;

/*
 * Communication hook: replaces a bucket's all-reduce (e.g. by compression).
 *   start: begin reducing bucket->data in place across the ranks of `comm`;
 *          return a request in *req (or NULL if already done).  Every rank
 *          must issue the same collectives for the same bucket.  Called in
 *          layout order, from xc_bucketer_mark_ready or xc_bucketer_finish.
 *   done:  optional (may be NULL); called in xc_bucketer_finish once the
 *          request completed successfully, before the gradients are handed
 *          back (e.g. to decompress into bucket->data).
 * The bucketer waits for and frees the request.  A non-OK return fails the
 * step with that code.
 */
typedef struct xc_bucket_hook {
    size_t size; /* sizeof(xc_bucket_hook_t) */
    void *ctx;
    xc_result_t (*start)(void *ctx, xc_comm_t *comm, const xc_bucket_t *bucket,
                         xc_request_t **req);
    xc_result_t (*done)(void *ctx, xc_comm_t *comm, const xc_bucket_t *bucket);
} xc_bucket_hook_t;

/* Create a bucketer on `comm` (not owned; must outlive it).  `opts` may be
 * NULL (defaults and XCOLL_* variables).  Local: no communication. */
XC_API xc_result_t xc_bucketer_create(xc_comm_t *comm,
                                      const xc_bucketer_opts_t *opts,
                                      xc_bucketer_t **out);

/* Register a gradient of `count` elements of `dtype`; its index (0, 1, ...
 * in registration order) goes to *index (may be NULL).  `name` is copied and
 * names it in errors (NULL: "grad<i>").  With views, `grad` must be NULL;
 * otherwise it is the caller's array (non-NULL unless count is 0), which
 * stays the caller's.  Local; only before xc_bucketer_commit. */
XC_API xc_result_t xc_bucketer_register(xc_bucketer_t *b, void *grad,
                                        size_t count, xc_dtype_t dtype,
                                        const char *name, int *index);

/* End registration.  Collective over comm, blocking: checks that every rank
 * registered the same gradients (count, dtype, name, in the same order) and
 * the same bucket sizes and averaging -- XC_ERR_INVALID on every rank
 * otherwise, naming the first difference and the rank -- then builds the
 * initial layout.  If a rank runs out of memory, no rank commits: every
 * rank returns XC_ERR_NOMEM naming it, and commit may be called again. */
XC_API xc_result_t xc_bucketer_commit(xc_bucketer_t *b);

/* Where gradient `index` lives: inside bucket memory with views, else the
 * caller's array.  With views the address changes when the buckets are
 * rebuilt (in the finish of the first complete step, values carried over);
 * the address fetched before stays readable, holding the results, until
 * the next step's first xc_bucketer_mark_ready.  So: fetch the addresses at
 * the start of every step, before writing gradients.  NULL for a bad index
 * or before commit. */
XC_API void *xc_bucketer_grad(const xc_bucketer_t *b, int index);

/* Gradient `index` holds its final value for this step.  Without views its
 * values are copied into the bucket now (the caller's array must not be
 * written again before finish, which overwrites it with the result).
 * Starts the all-reduce of every bucket that is complete and whose
 * predecessors have started (hands it to the launch thread, if any: a
 * failure to start is then reported by finish).  XC_ERR_INVALID if the
 * gradient was already marked in this step (nothing changes then).  Not
 * blocking. */
XC_API xc_result_t xc_bucketer_mark_ready(xc_bucketer_t *b, int index);

/* Elements [first, first + count) of gradient `index` hold their final
 * value -- for a large gradient computed in blocks (e.g. a weight
 * gradient row block by row block), so that its pieces (opts.split) go
 * out as they are computed instead of when the whole gradient is.  The
 * range must consist of whole pieces: `first` is where a piece begins
 * (xc_bucket_t.first_elem of its bucket; the pieces of a gradient are
 * consecutive buckets from xc_bucketer_locate's, each the bucket size in
 * bytes -- with forward_tail the last ones 1/2, 1/4, ... of it -- a
 * multiple of 64) and first + count where one ends or the gradient does;
 * a gradient that is not split has one piece, itself.  The gradient is
 * marked once its pieces are; a piece marked twice, a range outside the
 * gradient or not on piece boundaries is XC_ERR_INVALID (nothing changes
 * then).  Otherwise as xc_bucketer_mark_ready, which marks every piece. */
XC_API xc_result_t xc_bucketer_mark_ready_range(xc_bucketer_t *b, int index, size_t first,
                                                size_t count);

/* End the step: wait for every bucket's reduction (then each gradient holds
 * the average -- or sum -- over the ranks) and start the next step.
 * Blocking; collective in effect (it completes the step's all-reduces, and
 * after step 1 broadcasts rank 0's arrival order).  Gradients never marked
 * are still reduced, so that the ranks' collectives stay matched, with this
 * rank contributing zero for them (so the other ranks' results are the
 * average with a zero from this rank, as for an unused parameter); finish
 * returns XC_ERR_INVALID naming them on this rank.  A rebuild that a rank
 * has no memory for changes no rank's layout: finish returns XC_ERR_NOMEM
 * naming that rank on every rank (the step's results are complete), and
 * the next step's finish tries again. */
XC_API xc_result_t xc_bucketer_finish(xc_bucketer_t *b);

/* Complete, before finish, the bucket holding gradient `index` (every
 * piece of it, if split): wait for its reduction and hand its results back
 * (copy mode: into the caller's arrays; a hook's done is called), so its
 * gradients can be used while
 * later buckets are still on the wire -- e.g. the optimizer applied to each
 * layer just before the next forward pass needs it ("forward overlap",
 * docs/training.md), which lets communication hide behind the next
 * forward as well as behind backward.  Every gradient of that bucket and of
 * the buckets before it must have been marked ready in this step, else
 * XC_ERR_INVALID naming what is missing (the bucket cannot have started).
 * finish still ends the step: it completes the other buckets, rebuilds the
 * layout, and returns the step's first error (also one this call
 * returned).  Blocking; a completed bucket returns at once. */
XC_API xc_result_t xc_bucketer_wait(xc_bucketer_t *b, int index);

/*
 * A compression hook (docs/compression.md): each bucket of fp32, fp16 or
 * bf16 gradients reduced with xc_allreduce_compressed as `fmt`, after
 * `warmup` steps of plain all-reduce, with error feedback (a residual per
 * bucket, reset when the layout is rebuilt) unless `feedback` is 0; other
 * dtypes keep the plain all-reduce.  Fills *hook for xc_bucketer_set_hook;
 * the state must outlive the bucketer's use of it.  A bucketer created
 * with XCOLL_COMPRESS=fp16|bf16|int8 installs one itself at commit
 * (XCOLL_COMPRESS_WARMUP steps, default 10; XCOLL_COMPRESS_FEEDBACK=0
 * turns the feedback off; XCOLL_COMPRESS_WHEN, below).  xc_compress_hook_residual exposes a bucket's
 * residual (for checkpoints), NULL data if it has none yet;
 * xc_compress_hook_residual_of makes it (to restore one).
 */
typedef struct xc_compress_hook xc_compress_hook_t;
XC_API xc_result_t xc_compress_hook_create(xc_compress_t fmt, int warmup, int feedback,
                                           xc_compress_hook_t **out, xc_bucket_hook_t *hook);
XC_API void xc_compress_hook_free(xc_compress_hook_t *h);
/* When the hook compresses a bucket (past the warm-up):
 * XC_COMPRESS_WHEN_FASTER (the default) only if xc_compress_predict says
 * the compressed all-reduce of the bucket's size is faster than the plain
 * one on the bucketer's communicator -- decided once per bucket size, the
 * same on every rank (the prediction is the same there), so small buckets
 * on fast links stay exact; XC_COMPRESS_WHEN_ALWAYS compresses every
 * float bucket.  XCOLL_COMPRESS_WHEN=faster|always sets it for the hook
 * that XCOLL_COMPRESS installs. */
typedef enum xc_compress_when {
    XC_COMPRESS_WHEN_FASTER = 0,
    XC_COMPRESS_WHEN_ALWAYS = 1
} xc_compress_when_t;
XC_API xc_result_t xc_compress_hook_set_when(xc_compress_hook_t *h, xc_compress_when_t when);
XC_API xc_result_t xc_compress_hook_residual(xc_compress_hook_t *h, int bucket, void **data,
                                             size_t *bytes);
/* The residual of bucket `bk` (from xc_bucketer_bucket), created (zero)
 * for its size and layout if the hook has none for them yet: where a
 * checkpoint's residuals are restored before the first compressed step
 * (copy the saved bytes into *data).  NULL data, XC_OK, for a bucket that
 * never has one (another dtype or op, feedback off).  Between steps. */
XC_API xc_result_t xc_compress_hook_residual_of(xc_compress_hook_t *h, const xc_bucket_t *bk,
                                                void **data, size_t *bytes);

/* The compression hook a bucketer created with XCOLL_COMPRESS installed
 * itself (its residuals for checkpoints), or NULL; owned by the bucketer. */
XC_API xc_compress_hook_t *xc_bucketer_compress_hook(const xc_bucketer_t *b);

/* Install (or with NULL remove) a communication hook; only between steps.
 * The struct is copied. */
XC_API xc_result_t xc_bucketer_set_hook(xc_bucketer_t *b,
                                        const xc_bucket_hook_t *hook);

typedef struct xc_bucketer_info {
    size_t size;               /* set to sizeof(xc_bucketer_info_t)   */
    int ngrads, nbuckets;
    int layout;                /* 0 = initial, +1 per rebuild          */
    uint64_t step;             /* the current (unfinished) step, 1...  */
    size_t bucket_bytes;       /* capacity of buckets                  */
    size_t first_bucket_bytes; /* capacity of the first bucket         */
    size_t total_bytes;        /* bucket memory, padding included      */
    int views, average, rebuild;
    int launch_thread;         /* 1: a launch thread issues the all-reduces */
    int tail_from;             /* buckets issue in layout order up to this
                                * one, then from the last back to it
                                * (opts.forward_tail); nbuckets: no tail */
    int split;                 /* 1: large gradients in pieces (opts.split) */
} xc_bucketer_info_t;

XC_API xc_result_t xc_bucketer_info(const xc_bucketer_t *b,
                                    xc_bucketer_info_t *out);
/* Bucket k of the current layout (0 <= k < nbuckets); the arrays of *out
 * stay valid until the layout changes. */
XC_API xc_result_t xc_bucketer_bucket(const xc_bucketer_t *b, int k,
                                      xc_bucket_t *out);
/* The bucket and element offset of gradient `index` in the current layout
 * (split: its first piece's bucket; the pieces follow it). */
XC_API xc_result_t xc_bucketer_locate(const xc_bucketer_t *b, int index,
                                      int *bucket, size_t *offset);
/* The detail of the bucketer's last error; never NULL, "" if none. */
XC_API const char *xc_bucketer_last_error(const xc_bucketer_t *b);

/*
 * Bucket-size tuner.  A model of the last complete steps of `b` (up to 8,
 * medians): when each gradient was marked ready (from the step's first
 * mark), when finish was called (the end of backward), how long finish
 * waited; buckets formed from the last step's arrival order as
 * the bucketer forms them, all-reduced one after the other, each starting
 * when it is complete and its predecessor is done, costing
 * alpha + bytes / bandwidth -- `slowdown` times more while backward still
 * runs, since on CPUs computation and communication share the cores.
 * alpha_us, gbps < 0 are measured (timed all-reduces of 4 KiB and 4 MiB on
 * the bucketer's communicator, slowest rank); slowdown < 0 is fitted so
 * that the model reproduces the exposed time finish measured with the
 * steps' actual layout.  For each candidate capacity the model predicts
 * the time from the first gradient to the end of communication (at least
 * the end of backward); the fastest wins, near ties (1 %) going to the
 * largest capacity (fewest buckets).  Learn from steps run with small
 * buckets (e.g. 1 MiB): their communication overlaps backward, which is
 * what the slowdown is fitted to.  Collective over comm (rank 0's
 * timings and result are broadcast, so every rank returns the same),
 * blocking, between steps; XC_ERR_INVALID if no step has completed, and
 * on every rank if one rank has marked gradients of an unfinished step
 * (naming it; the step can then be finished as usual -- a rank whose
 * buckets already went out gets XC_ERR_INVALID alone, and its peers'
 * tuning fails against that bucket's all-reduce).
 */
#define XC_BUCKET_TUNE_MAX 16
typedef struct xc_bucket_tune {
    size_t size;         /* sizeof(xc_bucket_tune_t), by XC_BUCKET_TUNE_INIT */
    double alpha_us;     /* in/out: latency of one all-reduce (< 0: measure) */
    double gbps;         /* in/out: all-reduce bandwidth, GB/s of buffer     */
    double slowdown;     /* in/out: all-reduce slowdown during backward      */
                         /*         (< 0: fit to the last step)              */
    double best_mb;      /* out: the chosen XCOLL_BUCKET_MB                   */
    double predicted_ms; /* out: first gradient -> end of communication      */
    double backward_ms;  /* out: first gradient -> finish, measured          */
    double exposed_ms;   /* out: finish -> all reduced, measured             */
    double serial_ms;    /* out: predicted with one all-reduce of all        */
                         /*      gradients after backward (no overlap)       */
    int ncand;           /* out: candidates tried                            */
    double cand_mb[XC_BUCKET_TUNE_MAX];  /* out: their capacities            */
    double cand_ms[XC_BUCKET_TUNE_MAX];  /* out: their predicted times       */
    int cand_buckets[XC_BUCKET_TUNE_MAX]; /* out: their numbers of buckets   */
} xc_bucket_tune_t;

#define XC_BUCKET_TUNE_INIT \
    { sizeof(xc_bucket_tune_t), -1.0, -1.0, -1.0, 0, 0, 0, 0, 0, 0, {0}, {0}, {0} }

XC_API xc_result_t xc_bucketer_tune(xc_bucketer_t *b, xc_bucket_tune_t *t);

/* Wait for anything still in flight and free the bucketer (not the
 * communicator).  Returns the first error of that wait.  A step in
 * progress (gradients marked, no finish yet) is finished first -- its
 * peers wait for every bucket -- and destroy returns XC_ERR_INVALID saying
 * so.  NULL: no-op. */
XC_API xc_result_t xc_bucketer_destroy(xc_bucketer_t *b);

/* ------------------------------------------------------------------ */
/* Global-norm clipping with one synchronisation (docs/training.md)    */
/* ------------------------------------------------------------------ */

/* One gradient tensor, or this rank's shard of one, as the clip sees it.
 * `replicas`: how many ranks of the communicator hold these very values --
 * 1 for a shard only this rank owns (ZeRO: see xc_zero_step_clip; a
 * tensor-parallel slice), R for
 * a tensor replicated on R ranks of the group (e.g. a layer norm's weight
 * in a tensor-parallel group): its squared norm counts 1/R on each of them,
 * so the total counts it once. */
typedef struct xc_grad {
    void *data;
    size_t count;
    xc_dtype_t dtype; /* XC_FLOAT32, XC_FLOAT64, XC_FLOAT16 or XC_BFLOAT16 */
    int replicas;     /* >= 1 */
} xc_grad_t;

/*
 * Global-norm gradient clipping with exactly one collective.  Every rank
 * computes the squared L2 norm of its gradients (in fp64, replicas counted
 * once), whether any value is infinite or NaN, and appends `nscalars`
 * scalars of its own (e.g. its batch's loss sum and token count); ONE
 * all-reduce (XC_SUM of nscalars + 2 fp64 values) gives every rank the
 * global norm, the overflow flag and the scalars' global sums (written
 * back into `scalars`).  Then, if every value was finite, max_norm > 0
 * and the norm exceeds it, every gradient is scaled in place by
 * max_norm / (norm + 1e-6) (the rule of PyTorch's clip_grad_norm_); if
 * any value on any rank was not finite, nothing is scaled and *nonfinite
 * is 1 on every rank (skip the step, as loss scalers do).  `comm` is the
 * group over which the gradients are partitioned (the shard group, the
 * tensor-parallel group, or both): data-parallel replicas hold equal
 * gradients after their all-reduce and must not be summed again.
 * norm and nonfinite may be NULL.  Collective; every rank passes the same
 * nscalars (else XC_ERR_MISMATCH) and max_norm.
 */
XC_API xc_result_t xc_clip_grad_norm(xc_comm_t *comm, const xc_grad_t *grads, int ngrads,
                                     double max_norm, double *scalars, int nscalars,
                                     double *norm, int *nonfinite);

/* ------------------------------------------------------------------ */
/* ZeRO: sharded data parallelism (docs/zero.md)                       */
/* ------------------------------------------------------------------ */
/*
 * The parameters of a model (fp32 tensors, registered in forward order)
 * are sharded over the ranks of a data-parallel communicator: tensor i of
 * c values is cut into N shards of s = ceil(c / N) values, rank r owning
 * values [r s, min((r+1) s, c)) (the last shards may be short or empty).
 * Rank r keeps the optimizer state of its shards only (stage 1), also
 * only its shards of the gradients (stage 2: each gradient is reduce-
 * scattered, averaged, as soon as it is marked ready and the full one
 * dropped), and also only its shards of the parameters (stage 3: a
 * tensor is all-gathered by xc_zero_fetch before use and dropped by
 * xc_zero_release after; the next `prefetch` tensors in the direction of
 * the pass are gathered ahead, at most `inflight` gathers at once).
 *
 * Per step: xc_zero_begin(z, XC_ZERO_FORWARD); for each tensor in order
 * fetch, compute, release; xc_zero_begin(z, XC_ZERO_BACKWARD); for each in
 * reverse fetch, write its gradient into xc_zero_grad(z, i), mark it ready,
 * release; xc_zero_step(z, update, ctx): update(ctx, i, shard of the
 * parameter, shard of the averaged gradient, its optimizer state, n, offset)
 * runs on every owned shard, then (stages 1 and 2) the updated shards are
 * all-gathered into every rank's full parameters.  Stages 1 and 2 keep full
 * parameters: fetch returns them at once and release does nothing.
 * Every rank must make the same calls in the same order (they issue
 * collectives).  Errors are returned and described by xc_last_error().
 *
 * Buckets (bucket_mb > 0, as the bucketer's): consecutive tensors up to
 * that size (a larger tensor alone) are sharded, reduced and gathered as
 * one -- one collective for many small tensors.  A rank then owns a
 * contiguous range of each bucket, which meets each tensor in one range
 * (xc_zero_shard; possibly empty); the update runs on those ranges.  In
 * stage 3 a bucket is gathered by the first fetch of one of its tensors
 * and dropped when its last tensor in the pass's order is released.
 */
typedef struct xc_zero xc_zero_t;

typedef struct xc_zero_opts {
    size_t size;       /* sizeof(xc_zero_opts_t), by XC_ZERO_OPTS_INIT */
    int stage;         /* 1, 2 or 3 */
    int prefetch;      /* stage 3: tensors gathered ahead (default 2; 0: none) */
    int inflight;      /* stage 3: gathers in flight at most (default 2, >= 1) */
    int state_per_value; /* optimizer state floats per parameter value (e.g. 1 for
                          * momentum, 2 for Adam; default 0) */
    double bucket_mb;  /* consecutive tensors share a bucket up to this many MiB
                        * (default 0: a bucket per tensor), see below */
} xc_zero_opts_t;

#define XC_ZERO_OPTS_INIT { sizeof(xc_zero_opts_t), 1, 2, 2, 0, 0.0 }

typedef enum xc_zero_pass { XC_ZERO_FORWARD = 0, XC_ZERO_BACKWARD = 1 } xc_zero_pass_t;

/* The optimizer of one shard: param[0..n) (values [offset, offset + n)
 * of tensor `tensor`), its averaged gradient, state[0..n x
 * state_per_value).  Returns 0, or non-zero to fail the step. */
typedef int (*xc_zero_update_fn)(void *ctx, int tensor, float *param, const float *grad,
                                 float *state, size_t n, size_t offset);

/* Memory this rank holds for the model, in bytes (now and at most). */
typedef struct xc_zero_memory {
    size_t params, grads, state;                /* now */
    size_t peak_params, peak_grads, peak_total; /* since commit */
    uint64_t gathers, max_inflight;             /* stage 3 all-gathers issued, most at once */
} xc_zero_memory_t;

XC_API xc_result_t xc_zero_create(xc_comm_t *comm, const xc_zero_opts_t *opts, xc_zero_t **out);
/* Register a tensor of `count` fp32 values with its initial values (every
 * rank the same; copied); its index in *index (0, 1, ... in order). */
XC_API xc_result_t xc_zero_register(xc_zero_t *z, const float *init, size_t count, int *index);
/* Collective: every rank must have registered the same sizes in order
 * with the same options (XC_ERR_MISMATCH otherwise).  If a rank runs out
 * of memory, no rank commits: XC_ERR_NOMEM naming it on every rank, the
 * registrations kept, and commit may be called again. */
XC_API xc_result_t xc_zero_commit(xc_zero_t *z);
XC_API xc_result_t xc_zero_begin(xc_zero_t *z, xc_zero_pass_t pass);
/* The full values of tensor i (stage 3: gathered; valid until release). */
XC_API xc_result_t xc_zero_fetch(xc_zero_t *z, int i, float **values);
XC_API xc_result_t xc_zero_release(xc_zero_t *z, int i);
/* Where to write tensor i's full gradient this step (zeroed), and
 * mark it written (stage 2/3: its reduce-scatter starts). */
XC_API float *xc_zero_grad(xc_zero_t *z, int i);
XC_API xc_result_t xc_zero_grad_ready(xc_zero_t *z, int i);
XC_API xc_result_t xc_zero_step(xc_zero_t *z, xc_zero_update_fn update, void *ctx);
/* xc_zero_step with global-norm clipping (xc_clip_grad_norm's rule) of the
 * averaged gradient before the update: the norm is taken over every rank's
 * gradient shards (one all-reduce); above max_norm (finite; 0: measure
 * only) every shard is scaled by max_norm / (norm + 1e-6); a NaN or
 * infinity on any rank skips
 * the update on every rank (*nonfinite = 1; the parameters stay as they
 * were).  norm and nonfinite may be NULL.  Every rank passes the same
 * max_norm. */
XC_API xc_result_t xc_zero_step_clip(xc_zero_t *z, double max_norm, double *norm, int *nonfinite,
                                     xc_zero_update_fn update, void *ctx);
/* This rank's shard of tensor i: its first value's offset and its length. */
XC_API xc_result_t xc_zero_shard(const xc_zero_t *z, int i, size_t *offset, size_t *n);
/* Copy the full current values of tensor i into out (collective: stage 3
 * gathers them). */
XC_API xc_result_t xc_zero_gather(xc_zero_t *z, int i, float *out);
XC_API xc_result_t xc_zero_memory(const xc_zero_t *z, xc_zero_memory_t *m);
XC_API void xc_zero_destroy(xc_zero_t *z);

/* ------------------------------------------------------------------ */
/* Checkpoint / restart (docs/checkpoint.md)                           */
/* ------------------------------------------------------------------ */
/*
 * Sharded checkpoints: every rank writes its own parts to
 * DIR/step-<N>/rank-<r>-of-<n>.xck with a CRC-32C on every piece; each file
 * is written under a temporary name, fsynced, renamed and its directory
 * fsynced; rank 0 writes DIR/step-<N>/COMMIT last, once every rank's shard
 * is durable.  A checkpoint without its COMMIT is never loaded.  Save,
 * wait and load are collective: every rank of `comm` calls them, with the
 * same dir and step, and gets the same result (an error names the rank and
 * the cause).  A load lists the parts the save listed, in the same
 * order; each is matched by name and size (XC_ERR_CORRUPT naming the first
 * difference).  Different steps or directories across the ranks of one
 * call are XC_ERR_INVALID on every rank.
 */
typedef struct xc_ckpt_part {
    const char *name;   /* at most 47 bytes, unique within a shard */
    void *data;         /* saved from / loaded into */
    size_t bytes;
} xc_ckpt_part_t;

/* Save step `step` of `nparts` parts now; returns once it is committed. */
XC_API xc_result_t xc_ckpt_save(xc_comm_t *comm, const char *dir, uint64_t step,
                                const xc_ckpt_part_t *parts, int nparts);

/* Asynchronous save: copies the parts (so training may change them at
 * once) and writes this rank's shard on a background thread.  Complete it
 * with xc_ckpt_wait (collective: it commits), on every rank, before the
 * next save. */
typedef struct xc_ckpt_pending xc_ckpt_pending_t;
XC_API xc_result_t xc_ckpt_save_async(xc_comm_t *comm, const char *dir, uint64_t step,
                                      const xc_ckpt_part_t *parts, int nparts,
                                      xc_ckpt_pending_t **out);
/* Wait for the shard, agree with every rank, commit; frees `p`. */
XC_API xc_result_t xc_ckpt_wait(xc_ckpt_pending_t *p);

/* Load the newest committed checkpoint in `dir` (step_in ==
 * XC_CKPT_LATEST) or step `step_in`, into `parts`; *step_out (may be NULL)
 * receives its step.  XC_ERR_NOT_FOUND when there is none (nothing is
 * written), XC_ERR_CORRUPT when a shard or the marker fails verification
 * or step `step_in` has no COMMIT; the parts are written only once every
 * rank has verified its whole shard. */
#define XC_CKPT_LATEST UINT64_MAX
XC_API xc_result_t xc_ckpt_load(xc_comm_t *comm, const char *dir, uint64_t step_in,
                                xc_ckpt_part_t *parts, int nparts, uint64_t *step_out);

#ifdef __cplusplus
}
#endif
#endif /* XCOLL_H */
