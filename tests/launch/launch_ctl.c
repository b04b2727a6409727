/*
 * launch_ctl.c -- a rank program whose behaviour the launcher tests choose
 * on the command line: report its environment, exit with a code, die by a
 * signal, sleep, catch or ignore signals, write output in awkward pieces.
 * It uses no xcoll code at all, so the launcher can be tested before (and
 * independently of) the library.  Every mode first prints "pid=<pid>" when
 * other processes must be able to check on it.
 *
 * Usage: launch_ctl MODE [args]   (the rank is read from XCOLL_RANK)
 *   env [HOLD_MS]        one line: rank, size, local rank/size, addr,
 *                        external, store reachability, open fds; then sleep
 *   sleep SEC            sleep
 *   fail RANK CODE SEC   RANK exits CODE after 500 ms (so the others have
 *                        started), the others sleep SEC
 *   kill RANK SEC        RANK dies by SIGKILL after 500 ms, the others
 *                        sleep SEC
 *   exit CODE            every rank exits CODE
 *   trap SEC             on SIGINT/TERM/HUP print "caught N" and exit 0
 *   stubborn RANK CODE SEC  RANK exits CODE after 200 ms; the others
 *                        ignore SIGTERM and sleep SEC
 *   lines N              N lines on stdout and stderr, each written in two
 *                        pieces, then "tail R" without a newline
 *   longline LEN         one line of LEN 'x' in one write, then "end"
 *   port                 print a TCP port of 127.0.0.1 that is free now
 *   sigdfl PROG [ARGS]   exec PROG with SIGINT, SIGQUIT, SIGTERM and SIGHUP
 *                        at their default action: a background job of a
 *                        script has SIGINT and SIGQUIT ignored, and
 *                        xcoll-run leaves ignored signals ignored
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "../util/free_port.h"

static int env_int(const char *name)
{
    const char *v = getenv(name);
    return v ? atoi(v) : -1;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {}
}

static void say_pid(void) { dprintf(1, "pid=%d\n", (int)getpid()); }

/* Connect to XCOLL_ADDR ("host:port" or "[v6]:port"), retrying for up to
 * 10 s because another invocation may host the store and start later. */
static const char *store_state(void)
{
    const char *addr = getenv("XCOLL_ADDR");
    if (!addr) return "noaddr";
    char host[256];
    const char *colon = strrchr(addr, ':');
    if (!colon || (size_t)(colon - addr) >= sizeof host) return "badaddr";
    size_t hlen = (size_t)(colon - addr);
    const char *h = addr;
    if (h[0] == '[' && hlen >= 2 && h[hlen - 1] == ']') { ++h; hlen -= 2; }
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res;
    if (getaddrinfo(host, colon + 1, &hints, &res)) return "badaddr";
    const char *state = "unreachable";
    for (int attempt = 0; attempt < 100; ++attempt) {
        int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int ok = fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0;
        if (fd >= 0) close(fd);
        if (ok) { state = "ok"; break; }
        sleep_ms(100);
    }
    freeaddrinfo(res);
    return state;
}

/* The fds open in this process, "0,1,2" when it inherited nothing else. */
static void open_fds(char *buf, size_t cap)
{
    DIR *d = opendir("/proc/self/fd");
    buf[0] = '\0';
    if (!d) { snprintf(buf, cap, "unknown"); return; }
    int fds[64], n = 0, self = dirfd(d);
    struct dirent *e;
    while ((e = readdir(d)) && n < 64) {
        if (e->d_name[0] == '.') continue;
        int fd = atoi(e->d_name);
        if (fd != self) fds[n++] = fd;
    }
    closedir(d);
    for (int i = 0; i < n; ++i) /* insertion sort: readdir order is arbitrary */
        for (int j = i; j > 0 && fds[j - 1] > fds[j]; --j) {
            int t = fds[j]; fds[j] = fds[j - 1]; fds[j - 1] = t;
        }
    size_t len = 0;
    for (int i = 0; i < n && len < cap; ++i)
        len += (size_t)snprintf(buf + len, cap - len, i ? ",%d" : "%d", fds[i]);
}

static void on_trap(int sig)
{
    char msg[32];
    int n = snprintf(msg, sizeof msg, "caught %d\n", sig);
    ssize_t w = write(1, msg, (size_t)n);
    (void)w;
    _exit(0);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    int rank = env_int("XCOLL_RANK");
    long a2 = argc > 2 ? atol(argv[2]) : 0, a3 = argc > 3 ? atol(argv[3]) : 0;
    long a4 = argc > 4 ? atol(argv[4]) : 0;

    if (!strcmp(mode, "env")) {
        char fds[256];
        open_fds(fds, sizeof fds);
        const char *ext = getenv("XCOLL_STORE_EXTERNAL");
        printf("rank=%d size=%d local_rank=%d local_size=%d addr=%s "
               "external=%s store=%s fds=%s pid=%d\n",
               rank, env_int("XCOLL_SIZE"), env_int("XCOLL_LOCAL_RANK"),
               env_int("XCOLL_LOCAL_SIZE"), getenv("XCOLL_ADDR"),
               ext ? ext : "unset", store_state(), fds, (int)getpid());
        fflush(stdout);
        fprintf(stderr, "stderr of rank %d\n", rank);
        sleep_ms(a2);
        return 0;
    }
    if (!strcmp(mode, "sleep")) {
        say_pid();
        sleep_ms(a2 * 1000);
        return 0;
    }
    if (!strcmp(mode, "fail") || !strcmp(mode, "kill")) {
        say_pid();
        if (rank == a2) {
            sleep_ms(500);
            if (mode[0] == 'k') raise(SIGKILL);
            return (int)a3;
        }
        sleep_ms((mode[0] == 'k' ? a3 : a4) * 1000);
        return 0;
    }
    if (!strcmp(mode, "exit")) return (int)a2;
    if (!strcmp(mode, "trap")) {
        signal(SIGINT, on_trap);
        signal(SIGTERM, on_trap);
        signal(SIGHUP, on_trap);
        say_pid();
        sleep_ms(a2 * 1000);
        return 0;
    }
    if (!strcmp(mode, "stubborn")) {
        say_pid();
        if (rank == a2) {
            sleep_ms(200);
            return (int)a3;
        }
        signal(SIGTERM, SIG_IGN);
        sleep_ms(a4 * 1000);
        return 0;
    }
    if (!strcmp(mode, "lines")) {
        for (long i = 0; i < a2; ++i) {
            dprintf(1, "out %d ", rank);
            dprintf(2, "err %d ", rank);
            dprintf(1, "%ld\n", i);
            dprintf(2, "%ld\n", i);
        }
        dprintf(1, "tail %d", rank);
        return 0;
    }
    if (!strcmp(mode, "longline")) {
        char *line = malloc((size_t)a2 + 1);
        if (!line) return 1;
        memset(line, 'x', (size_t)a2);
        line[a2] = '\n';
        ssize_t w = write(1, line, (size_t)a2 + 1);
        free(line);
        printf("end\n");
        return w == a2 + 1 ? 0 : 1;
    }
    if (!strcmp(mode, "sigdfl") && argc > 2) {
        static const int sigs[] = {SIGINT, SIGQUIT, SIGTERM, SIGHUP};
        for (size_t i = 0; i < sizeof sigs / sizeof *sigs; ++i) signal(sigs[i], SIG_DFL);
        execvp(argv[2], argv + 2);
        fprintf(stderr, "launch_ctl: cannot run '%s': %s\n", argv[2], strerror(errno));
        return 127;
    }
    if (!strcmp(mode, "port")) {
        int port = xt_pick_port();
        printf("%d\n", port);
        return port > 0 ? 0 : 1;
    }
    fprintf(stderr, "launch_ctl: unknown mode '%s'\n", mode);
    return 2;
}
