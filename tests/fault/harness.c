/*
 * harness.c -- implementation of the fault-test driver (see harness.h):
 * checks and logging, the shared page, out-of-band barriers, and forking,
 * reaping and judging the ranks of a job.
 */
#include "harness.h"
#include "../util/free_port.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

atomic_int xt_failures;
xt_shared_t *xt_shm;

static char log_tag[64] = "driver";
static char test_name[96] = "test";
static double t0;

long long xt_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

double xt_now(void) { return (double)xt_now_ns() / 1e9; }

void xt_set_tag(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(log_tag, sizeof log_tag, fmt, ap);
    va_end(ap);
}

static void vlog(const char *prefix, const char *fmt, va_list ap)
{
    char line[2048];
    int n = snprintf(line, sizeof line, "[%s %s +%.3fs] %s", test_name,
                     log_tag, xt_now() - t0, prefix);
    if (n < 0) return;
    if ((size_t)n < sizeof line)
        n += vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    if ((size_t)n >= sizeof line - 1) n = (int)sizeof line - 2;
    line[n++] = '\n';
    /* One write per line so that ranks' lines do not interleave. */
    ssize_t w = write(2, line, (size_t)n);
    (void)w;
}

void xt_log(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog("", fmt, ap);
    va_end(ap);
}

void xt_fail(const char *file, int line, const char *fmt, ...)
{
    char prefix[256];
    const char *base = strrchr(file, '/');
    snprintf(prefix, sizeof prefix, "FAIL %s:%d: ", base ? base + 1 : file,
             line);
    va_list ap;
    va_start(ap, fmt);
    vlog(prefix, fmt, ap);
    va_end(ap);
    atomic_fetch_add(&xt_failures, 1);
}

int xt_check_ll(long long a, long long b, int ok, const char *expr,
                const char *file, int line)
{
    if (!ok) xt_fail(file, line, "%s: got %lld vs %lld", expr, a, b);
    return ok;
}

int xt_check_dbl(double a, double b, int ok, const char *expr,
                 const char *file, int line)
{
    if (!ok) xt_fail(file, line, "%s: got %.6g vs %.6g", expr, a, b);
    return ok;
}

int xt_check_readable(const char *msg, const char *expr, const char *file,
                      int line)
{
    if (!msg || !*msg) {
        xt_fail(file, line, "%s is empty", expr);
        return 0;
    }
    size_t len = strlen(msg), n = len / 2 < 24 ? len / 2 : 24;
    if (n >= 8) {
        char head[32];
        memcpy(head, msg, n);
        head[n] = '\0';
        if (strstr(msg + 1, head)) {
            xt_fail(file, line, "%s repeats its beginning \"%s\": \"%s\"",
                    expr, head, msg);
            return 0;
        }
    }
    return 1;
}

int xt_result(void) { return atomic_load(&xt_failures) ? 1 : 0; }

int xt_has(const char *msg, const char *sub)
{
    if (!msg || !sub) return 0;
    size_t n = strlen(sub);
    for (const char *p = msg; *p; p++)
        if (strncasecmp(p, sub, n) == 0) return 1;
    return n == 0;
}

/* Parse the number list after a "rank" word: "2", "s 1, 2", "(s) 2",
 * "=2", ": [2]"... and report whether `r` is in it. */
static int list_has(const char *p, int r)
{
    if (*p == 's' || *p == 'S') p++;
    else if (strncmp(p, "(s)", 3) == 0) p += 3;
    while (*p == ' ' || *p == ':' || *p == '=' || *p == '#' || *p == '[' ||
           *p == '{')
        p++;
    while (isdigit((unsigned char)*p)) {
        long v = strtol(p, (char **)&p, 10);
        if (v == r) return 1;
        while (*p == ',' || *p == ' ') p++;
        if (strncmp(p, "and ", 4) == 0) p += 4;
    }
    return 0;
}

int xt_mentions_rank(const char *msg, int r)
{
    if (!msg) return 0;
    for (const char *p = msg; *p; p++)
        if (strncasecmp(p, "rank", 4) == 0 && list_has(p + 4, r)) return 1;
    return 0;
}

void xt_init(const char *test, const char *scenario)
{
    const char *base = strrchr(test, '/');
    snprintf(test_name, sizeof test_name, "%s%s%s", base ? base + 1 : test,
             scenario ? "/" : "", scenario ? scenario : "");
    t0 = xt_now();
    if (!xt_shm) {
        void *p = mmap(NULL, sizeof *xt_shm, PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            perror("mmap");
            exit(2);
        }
        xt_shm = p;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
}

const char *xt_scenario(int argc, char **argv, const char *const *known, size_t n)
{
    for (size_t k = 0; argc == 2 && k < n; k++)
        if (strcmp(argv[1], known[k]) == 0) return known[k];
    fprintf(stderr, "usage: %s ", argv[0]);
    for (size_t k = 0; k < n; k++) fprintf(stderr, "%s%s", k ? "|" : "", known[k]);
    fputc('\n', stderr);
    exit(2);
}

int xt_job_finish(xt_job_t *job, int wait_s)
{
    xt_job_wait(job, wait_s);
    xt_expect_all_ok(job);
    xt_log("%s", xt_failures ? "FAILED" : "passed");
    return xt_result();
}

int xt_sync(int id, int n, double timeout_s)
{
    atomic_fetch_add_explicit(&xt_shm->sync[id], 1, memory_order_acq_rel);
    double end = xt_now() + timeout_s;
    while (atomic_load_explicit(&xt_shm->sync[id], memory_order_acquire) < n) {
        if (atomic_load_explicit(&xt_shm->broken, memory_order_acquire)) {
            xt_fail(__FILE__, __LINE__, "out-of-band barrier %d: a rank "
                    "died unexpectedly; giving up", id);
            return -1;
        }
        if (xt_now() > end) {
            xt_fail(__FILE__, __LINE__, "out-of-band barrier %d: %d of %d "
                    "arrived in %.1fs", id,
                    atomic_load(&xt_shm->sync[id]), n, timeout_s);
            return -1;
        }
        usleep(1000);
    }
    return 0;
}

int xt_owns_inode(pid_t pid, unsigned long ino)
{
    char dir[64], path[320], link[64], want[64];
    snprintf(dir, sizeof dir, "/proc/%d/fd", (int)pid);
    snprintf(want, sizeof want, "socket:[%lu]", ino);
    DIR *d = opendir(dir);
    if (!d) return 0;
    int found = 0;
    struct dirent *e;
    while (!found && (e = readdir(d)) != NULL) {
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        ssize_t n = readlink(path, link, sizeof link - 1);
        if (n <= 0) continue;
        link[n] = '\0';
        found = strcmp(link, want) == 0;
    }
    closedir(d);
    return found;
}

int xt_shm_leftovers(const xt_job_t *job)
{
    DIR *d = opendir("/dev/shm");
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        int pid = 0;
        if (sscanf(e->d_name, "xcoll-%d-", &pid) != 1) continue;
        for (int r = 0; r < job->size; r++)
            if (job->pid[r] == pid) {
                xt_log("left in /dev/shm: %s", e->d_name);
                n++;
            }
    }
    closedir(d);
    return n;
}

int xt_job_start(xt_job_t *job, int size, xt_rank_fn fn, void *arg,
                 int timeout_ms, unsigned alarm_s)
{
    memset(job, 0, sizeof *job);
    memset(xt_shm, 0, sizeof *xt_shm);
    if (size < 1 || size > XT_MAX_RANKS) return -1;
    job->size = size;
    job->port = xt_pick_port();
    if (job->port < 0) {
        xt_fail(__FILE__, __LINE__, "no free port: %s", strerror(errno));
        return -1;
    }
    snprintf(job->addr, sizeof job->addr, "127.0.0.1:%d", job->port);
    job->start = xt_now();
    pid_t parent = getpid();
    fflush(NULL);
    for (int r = 0; r < size; r++) {
        pid_t pid = fork();
        if (pid < 0) {
            xt_fail(__FILE__, __LINE__, "fork: %s", strerror(errno));
            for (int k = 0; k < r; k++) kill(job->pid[k], SIGKILL);
            return -1;
        }
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != parent) _exit(3);
            char buf[32];
            snprintf(buf, sizeof buf, "%d", r);
            setenv("XCOLL_RANK", buf, 1);
            snprintf(buf, sizeof buf, "%d", size);
            setenv("XCOLL_SIZE", buf, 1);
            setenv("XCOLL_ADDR", job->addr, 1);
            unsetenv("XCOLL_STORE_EXTERNAL");
            if (timeout_ms >= 0) {
                snprintf(buf, sizeof buf, "%d", timeout_ms);
                setenv("XCOLL_TIMEOUT_MS", buf, 1);
            }
            xt_set_tag("rank %d", r);
            atomic_store(&xt_failures, 0);
            alarm(alarm_s);
            int rc = fn(r, size, arg);
            fflush(NULL);
            _exit(rc);
        }
        job->pid[r] = pid;
    }
    return 0;
}

int xt_job_wait(xt_job_t *job, double timeout_s)
{
    double end = xt_now() + timeout_s;
    int left = 0;
    for (int r = 0; r < job->size; r++) left += !job->reaped[r];
    while (left > 0) {
        int st;
        pid_t p = waitpid(-1, &st, WNOHANG);
        if (p > 0) {
            for (int r = 0; r < job->size; r++)
                if (job->pid[r] == p && !job->reaped[r]) {
                    job->reaped[r] = 1;
                    job->status[r] = st;
                    left--;
                    int bad = WIFSIGNALED(st) ||
                              (WIFEXITED(st) && WEXITSTATUS(st) != 0);
                    if (bad && !job->may_die[r] && left > 0) {
                        xt_log("rank %d ended abnormally (status 0x%x) while "
                               "others run: failing their waits", r, st);
                        atomic_store(&xt_shm->broken, 1);
                    }
                }
            continue;
        }
        if (p < 0 && errno != EINTR && errno != ECHILD) break;
        if (xt_now() > end) break;
        usleep(2000);
    }
    if (left == 0) return 0;
    for (int r = 0; r < job->size; r++) {
        if (job->reaped[r]) continue;
        xt_fail(__FILE__, __LINE__, "rank %d (pid %d) still running after "
                "%.1fs: killing it", r, (int)job->pid[r], timeout_s);
        kill(job->pid[r], SIGKILL);
        int st = 0;
        waitpid(job->pid[r], &st, 0);
        job->reaped[r] = 1;
        job->status[r] = st;
    }
    return -1;
}

static void describe(int st, char *buf, size_t cap)
{
    if (WIFEXITED(st))
        snprintf(buf, cap, "exit %d", WEXITSTATUS(st));
    else if (WIFSIGNALED(st))
        snprintf(buf, cap, "signal %d (%s)", WTERMSIG(st),
                 strsignal(WTERMSIG(st)));
    else
        snprintf(buf, cap, "status 0x%x", st);
}

void xt_expect_exit(const xt_job_t *job, int r, int code)
{
    int st = job->status[r];
    if (!job->reaped[r] || !WIFEXITED(st) || WEXITSTATUS(st) != code) {
        char d[96];
        describe(st, d, sizeof d);
        xt_fail(__FILE__, __LINE__, "rank %d ended with %s, want exit %d", r,
                d, code);
    }
}

void xt_expect_signal(const xt_job_t *job, int r, int sig)
{
    int st = job->status[r];
    if (!job->reaped[r] || !WIFSIGNALED(st) || WTERMSIG(st) != sig) {
        char d[96];
        describe(st, d, sizeof d);
        xt_fail(__FILE__, __LINE__, "rank %d ended with %s, want signal %d",
                r, d, sig);
    }
}

void xt_expect_all_ok(const xt_job_t *job)
{
    for (int r = 0; r < job->size; r++) xt_expect_exit(job, r, 0);
}

xc_comm_t *xt_comm_world(int timeout_ms)
{
    xc_config_t cfg = XC_CONFIG_INIT;
    cfg.timeout_ms = timeout_ms;
    xc_comm_t *comm = NULL;
    double t = xt_now();
    xc_result_t rc = xc_comm_init_env(&comm, &cfg);
    if (rc != XC_OK) {
        xt_fail(__FILE__, __LINE__, "xc_comm_init_env: %s after %.2fs: \"%s\"",
                xc_err_name(rc), xt_now() - t, xc_last_error());
        return NULL;
    }
    if (!comm) {
        xt_fail(__FILE__, __LINE__, "xc_comm_init_env returned XC_OK and NULL");
        return NULL;
    }
    return comm;
}

void xt_wait_survivors(const xt_job_t *job, int victim, double timeout_s)
{
    double end = xt_now() + timeout_s;
    for (;;) {
        int done = 0;
        for (int r = 0; r < job->size; r++)
            if (r != victim && atomic_load(&xt_shm->flag[r]) != 0) done++;
        if (done == job->size - 1 || xt_now() > end || atomic_load(&xt_shm->broken)) return;
        usleep(2000);
    }
}
