/*
 * harness.h -- shared machinery of the multi-process correctness suite.
 *
 * Every test program in tests/mp/ is one process per rank, started by
 * `xcoll-run -n N prog --quick|--full`.  The harness gives each of them:
 *
 *  - start-up and shut-down (h_init / h_finish): the world communicator from
 *    the launcher's environment, the command line, a summary line per rank;
 *  - deterministic inputs: element `index` of rank `rank` for a test case
 *    with seed `seed` is a pure function of (seed, rank, index, dtype, op),
 *    so any rank can regenerate any other rank's input and compute the
 *    expected result serially without communicating;
 *  - serial references: exact wrapping arithmetic (through unsigned types)
 *    for integers, fp64 with an error bound for floating point;
 *  - typed checks that print dtype, op, count, index, got, expected and the
 *    rank, and count failures instead of stopping, so that one run shows
 *    every broken case.  Only an unexpected result code stops the process
 *    (the communicator is then usually poisoned anyway).
 *
 * Invariant every test relies on: all ranks walk the same matrix in the same
 * order, so every collective is issued by every rank; a value mismatch never
 * changes the sequence of collectives a rank issues.
 */
#ifndef XC_MP_HARNESS_H
#define XC_MP_HARNESS_H

#include "xcoll.h"

#include <stddef.h>
#include <stdint.h>

/* Pseudo-op for data-movement collectives (allgather, bcast, alltoall,
 * send/recv): inputs are arbitrary bit patterns, results compared bitwise. */
#define H_COPY XC_OP_COUNT

/* The large count of the matrix: over a megabyte-ish, and odd, so that
 * chunking by rank count or by SIMD width leaves a remainder. */
#define H_BIG_COUNT (((size_t)1 << 20) + 3)

/* Bytes of guard pattern after every buffer from h_alloc. */
#define H_GUARD 64

/* State of this test process. */
typedef struct h_env {
    xc_comm_t *comm; /* the world communicator                         */
    int rank, size;
    int full;        /* 1: --full matrix, 0: --quick                   */
    int verbose;     /* --verbose: one line per case on rank 0         */
    uint64_t seed;   /* --seed: base of every case seed                */
    const char *prog;
    /* Collectives this test issued on H.comm (and that completed),
     * compared with xc_comm_stats by h_check_stats. */
    uint64_t issued[XC_COLL_COUNT];
    uint64_t base_ops[XC_COLL_COUNT]; /* ops[] of H.comm right after init */
    uint64_t base_algo[XC_STATS_MAX_ALGOS]; /* algo_ops[] after init     */
} h_env_t;

extern h_env_t H;

/* One test case, for generation seeds and failure messages. */
typedef struct h_case {
    const char *coll; /* "allreduce", "bcast", ...                      */
    xc_dtype_t dtype;
    xc_op_t op;       /* H_COPY for data movement                       */
    size_t count;     /* the count argument of the call                 */
    int inplace;      /* -1: not applicable                             */
    int root;         /* -1: not applicable                             */
    int nranks;       /* ranks whose inputs are reduced                 */
    uint64_t seed;    /* generation seed of this case                   */
} h_case_t;

/* ------------------------------------------------------------ lifecycle */

/* Parse --quick/--full/--seed N/--verbose, create H.comm from the
 * launcher's environment.  Exits 77 (skip) when not started by a launcher,
 * 2 on a usage error, 1 if the communicator cannot be created. */
void h_init(int argc, char **argv);
/* Destroy H.comm (unless the test did and set it NULL), print this rank's
 * summary, return the exit status
 * (0 if no check failed, 1 otherwise). */
int h_finish(void);
/* A new case: fills in a fresh seed (the same on every rank, because every
 * rank creates the same cases in the same order) and nranks = H.size. */
h_case_t h_case(const char *coll, xc_dtype_t dt, xc_op_t op, size_t count,
                int inplace, int root);
/* Print "case ..." on rank 0 when --verbose. */
void h_announce(const h_case_t *c);

/* ------------------------------------------------------------ matrix */

/* One cell of the matrix: a dtype, an op (H_COPY for data movement) and a
 * count of {0, 1, 7, 1000, H_BIG_COUNT}. */
typedef struct h_cell {
    xc_dtype_t dt;
    xc_op_t op;
    size_t count;
    int next; /* where h_next_cell goes on; start at 0 */
} h_cell_t;
/* The matrix's cells in turn, dtype by dtype, then op by op (every op when
 * `reductions`, else only H_COPY), then count by count, skipping those not
 * in the current matrix (h_in_matrix):
 *     for (h_cell_t c = {0}; h_next_cell(&c, 1);) run_case(c.dt, c.op, c.count);
 * Returns 0 after the last. */
int h_next_cell(h_cell_t *c, int reductions);
/* Whether op applies to dtype (bitwise ops: integers only; H_COPY: all). */
int h_op_valid(xc_dtype_t dt, xc_op_t op);
/* Whether (dt, op, count) is in the current matrix: everything in --full;
 * in --quick, H_BIG_COUNT only for fp32 and int32 with sum (or H_COPY). */
int h_in_matrix(xc_dtype_t dt, xc_op_t op, size_t count);
int h_is_float(xc_dtype_t dt);
int h_is_signed(xc_dtype_t dt);

/* ------------------------------------------------------------ data */

/* Raw bits of input element `index` of `rank` (zero-extended). */
uint64_t h_gen(const h_case_t *c, int rank, size_t index);
/* buf[i] = h_gen(c, rank, index0 + i) for i < count. */
void h_fill(const h_case_t *c, void *buf, size_t count, int rank,
            size_t index0);
/* Element access by bits (zero-extended to 64). */
uint64_t h_load(const void *buf, size_t i, xc_dtype_t dt);
void h_store(void *buf, size_t i, xc_dtype_t dt, uint64_t bits);
/* Exact value of a floating-point element given by its bits. */
double h_to_double(xc_dtype_t dt, uint64_t bits);

/* fp16 / bf16 conversions of the harness's own (round to nearest even). */
double h_fp16_to_double(uint16_t h);
double h_bf16_to_double(uint16_t b);
uint16_t h_float_to_fp16(float f);
uint16_t h_float_to_bf16(float f);

/* malloc(bytes + H_GUARD) with the whole block set to the poison byte
 * 0xCD; never returns NULL (exits on exhaustion). */
void *h_alloc(size_t bytes);
void h_free(void *p);
void h_poison(void *p, size_t bytes);

/* Out-of-memory tests: limit this process's address space to what it maps
 * now plus `headroom` bytes (RLIMIT_AS), so that larger allocations fail.
 * Returns 0 (and limits nothing) under ASan/TSan, whose shadow mappings
 * make an address-space limit meaningless; h_unlimit_memory restores it. */
int h_limit_memory(size_t headroom);
void h_unlimit_memory(void);

/* ------------------------------------------------------------ checks */

/* Expected value of one reduced element. */
typedef struct h_expect {
    uint64_t bits; /* integers: the exact result                       */
    double value;  /* floats: the reference computed in fp64           */
    double tol;    /* floats: allowed |got - value| (0: exact)         */
} h_expect_t;

/* Reference reduction of in[0..n) (raw bits of dtype dt) with op. */
h_expect_t h_reference(xc_dtype_t dt, xc_op_t op, int n, const uint64_t *in);
/* Whether got (raw bits) satisfies e. */
int h_matches(xc_dtype_t dt, uint64_t got, const h_expect_t *e);

/* buf[i] must equal the reduction over ranks 0..c->nranks-1 of the inputs
 * at index0 + i (i < count).  `what` names the buffer in messages.
 * Returns the number of mismatching elements. */
size_t h_check_reduced(const h_case_t *c, const void *buf, size_t count,
                       size_t index0, const char *what);
/* buf[i] must equal h_gen(c, src_rank, src_index0 + i) bitwise. */
size_t h_check_copy(const h_case_t *c, const void *buf, size_t count,
                    int src_rank, size_t src_index0, const char *what);
/* bytes at p must still be the poison byte (never written). */
size_t h_check_untouched(const h_case_t *c, const void *p, size_t bytes,
                         const char *what);
/* The H_GUARD bytes after p + bytes must be intact. */
size_t h_check_guard(const h_case_t *c, const void *p, size_t bytes,
                     const char *what);
/* Every rank of comm must hold bit-identical `bytes` at buf: allgathers a
 * 64-bit hash (one allgather on comm, which the caller accounts for). */
size_t h_check_identical(const h_case_t *c, xc_comm_t *comm, const void *buf,
                         size_t bytes);
/* ops[k] of xc_comm_stats(comm) minus base[k] must equal issued[k] for every
 * collective k; base may be NULL (zeros).  On H.comm, when XCOLL_ALGO forces
 * algorithms ("allreduce.ring,..."), each forced algorithm must also have
 * run every operation of its collective (algo_ops of its id). */
void h_check_stats(xc_comm_t *comm, const uint64_t *base,
                   const uint64_t *issued, const char *what);
/* Snapshot of ops[] of comm into out[XC_COLL_COUNT]. */
void h_stats_ops(xc_comm_t *comm, uint64_t *out);
/* 64-bit hash of bytes. */
uint64_t h_hash_bytes(const void *p, size_t bytes);
/* splitmix64 finaliser: a bijective 64-bit mixer. */
uint64_t h_mix64(uint64_t x);

/* ------------------------------------------------------------ reporting */

/* Record one failure and print it with the rank prefix (at most a few
 * dozen lines per rank are printed; all are counted).  Thread-safe. */
void h_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Print the failing call, xc_err_name(rc) and xc_comm_last_error(comm)
 * (or xc_last_error() when comm is NULL), then exit(1). */
void h_die_rc(const char *file, int line, const char *call, xc_result_t rc,
              const xc_comm_t *comm) __attribute__((noreturn));
/* Count one check performed (the summary line reports how many: a test
 * that checks nothing is a defect).  Thread-safe. */
void h_checked(void);
/* Failures recorded so far by this process. */
unsigned long h_failures(void);
/* Describe a case ("allreduce fp16 sum count=7 in-place root=2"). */
const char *h_case_str(const h_case_t *c, char *buf, size_t len);
/* Monotonic clock in seconds. */
double h_now(void);

/* A call that must succeed. */
#define H_CHECK(comm, call)                                                    \
    do {                                                                       \
        xc_result_t h_rc_ = (call);                                            \
        if (h_rc_ != XC_OK) h_die_rc(__FILE__, __LINE__, #call, h_rc_, (comm)); \
    } while (0)

/* A call that must fail with `want` (non-fatal check). */
#define H_EXPECT_RC(comm, want, call)                                          \
    do {                                                                       \
        xc_result_t h_rc_ = (call);                                            \
        h_checked();                                                           \
        if (h_rc_ != (want))                                                   \
            h_fail(__FILE__, __LINE__, "%s returned %s, expected %s (%s)",     \
                   #call, xc_err_name(h_rc_), xc_err_name(want),               \
                   xc_comm_last_error(comm));                                  \
    } while (0)

/* Typed equality checks printing both values (non-fatal). */
#define H_EQ_INT(what, got, want)                                              \
    do {                                                                       \
        long long h_g_ = (long long)(got), h_w_ = (long long)(want);           \
        h_checked();                                                           \
        if (h_g_ != h_w_)                                                      \
            h_fail(__FILE__, __LINE__, "%s: got %lld, expected %lld", (what),  \
                   h_g_, h_w_);                                                \
    } while (0)

#define H_EQ_U64(what, got, want)                                              \
    do {                                                                       \
        unsigned long long h_g_ = (got), h_w_ = (want);                        \
        h_checked();                                                           \
        if (h_g_ != h_w_)                                                      \
            h_fail(__FILE__, __LINE__, "%s: got %llu (0x%llx), expected %llu " \
                   "(0x%llx)", (what), h_g_, h_g_, h_w_, h_w_);                \
    } while (0)

#define H_TRUE(what, cond)                                                     \
    do {                                                                       \
        h_checked();                                                           \
        if (!(cond))                                                           \
            h_fail(__FILE__, __LINE__, "%s: expected %s", (what), #cond);      \
    } while (0)

#endif /* XC_MP_HARNESS_H */
