/*
 * common.h -- internal helpers every xcoll source file may use: error
 * propagation macros, the thread-local "last error" detail, logging and a
 * monotonic clock.  Internal symbols are named xc__* and are hidden from the
 * shared library by the symbol map.
 */
#ifndef XC_COMMON_H
#define XC_COMMON_H

#include "xcoll.h"
#include "copy.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#define XC__HIDDEN __attribute__((visibility("hidden")))
#define XC__PRINTF(a, b) __attribute__((format(printf, a, b)))
#define XC__UNUSED(x) ((void)(x))
#define XC__MIN(a, b) ((a) < (b) ? (a) : (b))
#define XC__MAX(a, b) ((a) > (b) ? (a) : (b))
#define XC__LIKELY(x) __builtin_expect(!!(x), 1)
#define XC__UNLIKELY(x) __builtin_expect(!!(x), 0)

/* Propagate a non-OK result. */
#define XC_CHECK(call)                                                         \
    do {                                                                       \
        xc_result_t xc__rc_ = (call);                                          \
        if (XC__UNLIKELY(xc__rc_ != XC_OK)) return xc__rc_;                    \
    } while (0)

/* Store a non-OK result in `rc` and jump to `label` (one cleanup label). */
#define XC_CHECK_GOTO(call, rc, label)                                         \
    do {                                                                       \
        (rc) = (call);                                                         \
        if (XC__UNLIKELY((rc) != XC_OK)) goto label;                           \
    } while (0)

/* Length of error-detail buffers (thread-local and per communicator). */
#define XC__ERRMSG_LEN 512

/*
 * Record `rc` with a formatted detail as this thread's last error and return
 * rc, so that a failing path reads `return xc__err(XC_ERR_INVALID, "...")`.
 */
XC__HIDDEN xc_result_t xc__err(xc_result_t rc, const char *fmt, ...)
    XC__PRINTF(2, 3);
XC__HIDDEN xc_result_t xc__verr(xc_result_t rc, const char *fmt, va_list ap);
/* "syscall: strerror(errno)" as XC_ERR_SYSTEM. */
XC__HIDDEN xc_result_t xc__err_errno(const char *what);
/* The thread-local detail buffer (for copying into a communicator). */
XC__HIDDEN const char *xc__tls_error(void);
/* Every rank's outcome of a local step -> one outcome for all (collective
 * on comm): XC_OK if every rank's `mine` was, else the lowest failing
 * rank's code and message as "<what> failed on rank r: ...".  If the
 * agreement's own collectives fail, their error. */
XC__HIDDEN xc_result_t xc__agree_outcome(xc_comm_t *comm, xc_result_t mine, const char *what);
/* A code a peer may send in an error or shrink frame: an error of the
 * engine's (XC_ERR_INVALID .. XC_ERR_INTERNAL, or XC_ERR_REVOKED); anything
 * else received is reported as XC_ERR_INTERNAL. */
static inline int xc__wire_code_ok(int64_t code)
{
    return (code < 0 && code >= XC_ERR_INTERNAL) || code == XC_ERR_REVOKED;
}

/* FNV-1a of a string (names and paths that ranks compare by hash). */
static inline uint64_t xc__hash_str(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

/* The size of a dtype's element, 0 for an invalid one (xc_dtype_size,
 * without a call on the hot paths): XC_INT8 .. XC_FLOAT64 in enum order,
 * four bits each. */
#define XC__DTYPE_SIZES 0x842288442211ull
_Static_assert(XC_DTYPE_COUNT == 12, "XC__DTYPE_SIZES lists every dtype");
static inline size_t xc__dtype_size(xc_dtype_t d)
{
    return (unsigned)d < (unsigned)XC_DTYPE_COUNT ? (size_t)(XC__DTYPE_SIZES >> (4 * (unsigned)d)) & 15
                                                  : 0;
}

/* Logging, controlled by XCOLL_DEBUG=WARN|INFO|TRACE (default: errors and
 * warnings only go nowhere; the library never prints unless asked). */
enum { XC__LOG_NONE = 0, XC__LOG_WARN = 1, XC__LOG_INFO = 2, XC__LOG_TRACE = 3 };
XC__HIDDEN int xc__log_level(void);
XC__HIDDEN void xc__log(int level, const char *fmt, ...) XC__PRINTF(2, 3);
/* The rank printed in log prefixes of this process (-1: unknown). */
XC__HIDDEN void xc__log_set_rank(int rank);
#define XC__LOG(level, ...)                                                    \
    do {                                                                       \
        if (XC__UNLIKELY(xc__log_level() >= (level))) xc__log(level, __VA_ARGS__); \
    } while (0)
#define XC_WARN(...) XC__LOG(XC__LOG_WARN, __VA_ARGS__)
#define XC_INFO(...) XC__LOG(XC__LOG_INFO, __VA_ARGS__)
#define XC_TRACE(...) XC__LOG(XC__LOG_TRACE, __VA_ARGS__)

/* Monotonic time. */
XC__HIDDEN uint64_t xc__now_ns(void);
/* 64 random bits (getrandom; the clock and pid if it has none to give). */
XC__HIDDEN uint64_t xc__random64(void);
static inline uint64_t xc__now_ms(void) { return xc__now_ns() / 1000000ull; }

/* Deadline arithmetic: timeout_ms < 0 means "never". */
static inline uint64_t xc__deadline_ns(int timeout_ms)
{
    return timeout_ms < 0 ? UINT64_MAX
                          : xc__now_ns() + (uint64_t)timeout_ms * 1000000ull;
}
/* Milliseconds left until `deadline` for poll(): -1 = infinite, >= 0. */
XC__HIDDEN int xc__poll_ms_left(uint64_t deadline_ns);

#endif /* XC_COMMON_H */
