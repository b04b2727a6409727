/*
 * log.c -- XCOLL_DEBUG logging with a rank prefix, and the monotonic clock.
 * The level is read once from the environment; output goes to stderr as one
 * write per line so lines of concurrent ranks do not interleave.
 */
#include "common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

/* -1 = not yet read.  Relaxed atomics: racing first readers compute the
 * same value from the same environment. */
static int g_level = -1;
static int g_rank = -1;

int xc__log_level(void)
{
    int lvl = __atomic_load_n(&g_level, __ATOMIC_RELAXED);
    if (XC__LIKELY(lvl >= 0)) return lvl;
    const char *s = getenv("XCOLL_DEBUG");
    lvl = XC__LOG_NONE;
    if (s && *s) {
        if (!strcasecmp(s, "WARN")) lvl = XC__LOG_WARN;
        else if (!strcasecmp(s, "INFO")) lvl = XC__LOG_INFO;
        else if (!strcasecmp(s, "TRACE")) lvl = XC__LOG_TRACE;
        else if (!strcasecmp(s, "NONE") || !strcmp(s, "0")) lvl = XC__LOG_NONE;
        else lvl = XC__LOG_WARN;
    }
    __atomic_store_n(&g_level, lvl, __ATOMIC_RELAXED);
    return lvl;
}

void xc__log_set_rank(int rank) { __atomic_store_n(&g_rank, rank, __ATOMIC_RELAXED); }

void xc__log(int level, const char *fmt, ...)
{
    static const char *names[] = {"", "WARN", "INFO", "TRACE"};
    char line[1024];
    int n = snprintf(line, sizeof line, "xcoll[%d] %d %s ",
                     __atomic_load_n(&g_rank, __ATOMIC_RELAXED), (int)getpid(),
                     names[level & 3]);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof line)
        n += vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n >= sizeof line - 1) n = (int)sizeof line - 2;
    line[n++] = '\n';
    ssize_t w = write(2, line, (size_t)n);
    (void)w;
}

uint64_t xc__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t xc__random64(void)
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, GRND_NONBLOCK) != (ssize_t)sizeof v)
        v = xc__now_ns() ^ ((uint64_t)getpid() << 32);
    return v;
}

int xc__poll_ms_left(uint64_t deadline_ns)
{
    if (deadline_ns == UINT64_MAX) return -1;
    uint64_t now = xc__now_ns();
    if (now >= deadline_ns) return 0;
    uint64_t ms = (deadline_ns - now + 999999ull) / 1000000ull;
    return ms > 1000000000ull ? 1000000000 : (int)ms;
}
