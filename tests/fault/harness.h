/*
 * harness.h -- a small driver for the fault tests: it forks the ranks of a
 * job itself (each child runs a C function as one rank, with XCOLL_RANK,
 * XCOLL_SIZE and XCOLL_ADDR=127.0.0.1:PORT set, rank 0 hosting the store
 * in-process), so that a test controls every process and its exit status,
 * can kill a chosen rank, and can tell an expected death from a failure.
 *
 * Invariants: the driver (parent) never calls the library, so each child
 * starts from a fresh, single-threaded image; every child has an alarm() and
 * PR_SET_PDEATHSIG, so nothing outlives its test or hangs CI.  Ranks and the
 * driver share one anonymous MAP_SHARED page (xt_shm) for out-of-band
 * barriers, progress counters and timestamps, which keeps the checks
 * independent of the communicator under test.
 *
 * Checks are typed and print both values; a failed check increments
 * xt_failures and the rank function returns xt_result() (0 or 1).
 */
#ifndef XT_HARNESS_H
#define XT_HARNESS_H

#include "xcoll.h"

#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#define XT_MAX_RANKS 16
#define XT_MAX_SYNC 64

/* Exit code of a test that cannot run here (ctest SKIP_RETURN_CODE). */
#define XT_SKIP 77

/* ---------------------------------------------------------------- checks */

/* Failed checks in this process (atomic: checks may run in threads). */
extern atomic_int xt_failures;

/* Print a line prefixed with "[tag +seconds]" to stderr (one write). */
void xt_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Record a failed check (prints file:line and the formatted detail). */
void xt_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* 0 if no check failed in this process, else 1. */
int xt_result(void);

/* Monotonic seconds (CLOCK_MONOTONIC: comparable across processes). */
double xt_now(void);

/* Does `msg` mention rank `r` ("rank 2", "rank=2", "ranks 2", "rank(s) 2",
 * "rank: 2", not followed by another digit)? */
int xt_mentions_rank(const char *msg, int r);
/* Case-insensitive substring test (NULL-safe). */
int xt_has(const char *msg, const char *sub);

#define XT_CHECK_RC(got_expr, want_expr)                                       \
    do {                                                                       \
        xc_result_t xt_g_ = (got_expr), xt_w_ = (want_expr);                   \
        if (xt_g_ != xt_w_)                                                    \
            xt_fail(__FILE__, __LINE__, "%s: got %s (%d), want %s (%d); "      \
                    "last error: \"%s\"", #got_expr, xc_err_name(xt_g_),       \
                    (int)xt_g_, xc_err_name(xt_w_), (int)xt_w_,                \
                    xc_last_error());                                          \
    } while (0)

/* XT_CHECK_INT / XT_CHECK_DBL evaluate to 1 if the comparison holds, else
 * record a failure printing both values and evaluate to 0 (so a loop over
 * a buffer can stop at the first bad element).  They evaluate a and b
 * twice: pass expressions without side effects. */
#define XT_CHECK_INT(a, op, b)                                                 \
    xt_check_ll((long long)(a), (long long)(b),                                \
                (long long)(a) op (long long)(b), #a " " #op " " #b, __FILE__, \
                __LINE__)
#define XT_CHECK_DBL(a, op, b)                                                 \
    xt_check_dbl((double)(a), (double)(b), (double)(a) op (double)(b),         \
                 #a " " #op " " #b, __FILE__, __LINE__)
int xt_check_ll(long long a, long long b, int ok, const char *expr,
                const char *file, int line);
int xt_check_dbl(double a, double b, int ok, const char *expr,
                 const char *file, int line);

#define XT_CHECK_HAS(msg, sub)                                                 \
    do {                                                                       \
        const char *xt_m_ = (msg), *xt_s_ = (sub);                             \
        if (!xt_has(xt_m_, xt_s_))                                             \
            xt_fail(__FILE__, __LINE__, "%s does not mention \"%s\": \"%s\"",  \
                    #msg, xt_s_, xt_m_ ? xt_m_ : "(null)");                    \
    } while (0)

#define XT_CHECK_RANK(msg, r)                                                  \
    do {                                                                       \
        const char *xt_m_ = (msg);                                             \
        int xt_r_ = (r);                                                       \
        if (!xt_mentions_rank(xt_m_, xt_r_))                                   \
            xt_fail(__FILE__, __LINE__, "%s does not name rank %d: \"%s\"",    \
                    #msg, xt_r_, xt_m_ ? xt_m_ : "(null)");                    \
    } while (0)

/* An error detail fit for a human: non-empty and not garbled -- its first
 * 24 characters do not occur again in it (a detail formatted from itself,
 * "A: A: ...", shows up that way). */
#define XT_CHECK_READABLE(msg) xt_check_readable((msg), #msg, __FILE__, __LINE__)
int xt_check_readable(const char *msg, const char *expr, const char *file,
                      int line);

/* Give up on this rank function (returns 1) if a call did not succeed. */
#define XT_REQUIRE_OK(expr)                                                    \
    do {                                                                       \
        xc_result_t xt_g_ = (expr);                                            \
        if (xt_g_ != XC_OK) {                                                  \
            xt_fail(__FILE__, __LINE__, "%s: got %s; last error: \"%s\"",      \
                    #expr, xc_err_name(xt_g_), xc_last_error());               \
            return 1;                                                          \
        }                                                                      \
    } while (0)

/* ------------------------------------------------------- shared memory */

typedef struct xt_shared {
    atomic_int sync[XT_MAX_SYNC];          /* out-of-band barrier counters */
    atomic_llong progress[XT_MAX_RANKS];   /* e.g. completed iterations     */
    atomic_llong stamp_ns[XT_MAX_RANKS];   /* e.g. when a rank died/aborted */
    atomic_int flag[XT_MAX_RANKS];
    atomic_int broken; /* a rank died unexpectedly: stop waiting for it */
} xt_shared_t;

extern xt_shared_t *xt_shm;

/* Out-of-band barrier number `id` among `n` processes (ranks or driver).
 * Returns 0, or -1 (and records a failure) after `timeout_s` or as soon as
 * the driver has seen a rank die unexpectedly (xt_shm->broken). */
int xt_sync(int id, int n, double timeout_s);
/* Monotonic nanoseconds, for xt_shm->stamp_ns. */
long long xt_now_ns(void);

/* ------------------------------------------------------------ jobs */

typedef int (*xt_rank_fn)(int rank, int size, void *arg);

typedef struct xt_job {
    int size;
    int port;
    char addr[64];          /* "127.0.0.1:PORT" */
    pid_t pid[XT_MAX_RANKS];
    int status[XT_MAX_RANKS];
    int reaped[XT_MAX_RANKS];
    int may_die[XT_MAX_RANKS]; /* set by the test: death is not "broken" */
    double start;
} xt_job_t;

/* Set up xt_shm and the process's log tag; call once at the top of main()
 * with the program name (argv[0] basename) and scenario. */
void xt_init(const char *test, const char *scenario);

/* The scenario argv[1] names, one of `known` (n of them), or exit(2) with a
 * usage line listing them.  XT_SCENARIO(argc, argv, known) counts them. */
const char *xt_scenario(int argc, char **argv, const char *const *known, size_t n);
#define XT_SCENARIO(argc, argv, known)                                         \
    xt_scenario(argc, argv, known, sizeof known / sizeof known[0])
/* The end of a test's main(): wait up to wait_s for the job, expect every
 * rank to exit 0, log "passed" or "FAILED"; xt_result(). */
int xt_job_finish(xt_job_t *job, int wait_s);

/* Is socket inode `ino` (a /proc/net/tcp{,6} row's) one of process `pid`'s
 * descriptors?  1 or 0. */
int xt_owns_inode(pid_t pid, unsigned long ino);
/* How many of the job's shared-memory segments ("xcoll-<creator pid>-..."
 * with a creator among its ranks) are in /dev/shm; each is logged. */
int xt_shm_leftovers(const xt_job_t *job);

/*
 * Fork `size` ranks, each running fn(rank, size, arg) and exiting with its
 * return value.  `timeout_ms` >= 0 sets XCOLL_TIMEOUT_MS in the children.
 * Each child arms alarm(alarm_s).  Clears xt_shm first.  0 or -1.
 */
int xt_job_start(xt_job_t *job, int size, xt_rank_fn fn, void *arg,
                 int timeout_ms, unsigned alarm_s);
/* Reap every rank; SIGKILL all of them if `timeout_s` passes first.  A rank
 * that ends with a signal or a non-zero code while others still run (and
 * whose may_die is 0) sets xt_shm->broken, so that the others' out-of-band
 * barriers fail at once instead of at their timeout.
 * Returns 0 if all were reaped in time, -1 otherwise (failure recorded). */
int xt_job_wait(xt_job_t *job, double timeout_s);
/* After xt_job_wait: check rank `r` exited with `code` / died of `sig`.
 * Records a failure describing the actual status otherwise. */
void xt_expect_exit(const xt_job_t *job, int r, int code);
void xt_expect_signal(const xt_job_t *job, int r, int sig);
/* Wait until every rank but `victim` has set its xt_shm->flag (done with
 * its checks, or failed), a rank died unexpectedly, or `timeout_s` passed:
 * the moment to SIGKILL a stopped victim. */
void xt_wait_survivors(const xt_job_t *job, int victim, double timeout_s);
/* Convenience: every rank exited 0. */
void xt_expect_all_ok(const xt_job_t *job);

/* In a rank: create the world communicator from the environment, with
 * timeout_ms (-1: from the environment).  NULL (failure recorded) if not. */
xc_comm_t *xt_comm_world(int timeout_ms);

/* Set this process's log tag (e.g. "rank 2"). */
void xt_set_tag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif /* XT_HARNESS_H */
