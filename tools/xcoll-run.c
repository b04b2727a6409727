/*
 * xcoll-run.c -- start N ranks of a program on this machine, like
 * `torchrun --nproc-per-node N` or `mpirun -n N`, host their rendezvous
 * store, prefix their output with "[rank] " and supervise them: the first
 * rank that fails (non-zero exit or death by a signal) stops the job, and
 * its code becomes the launcher's.  docs/launching.md is the user's guide.
 *
 * Invariants.
 *  - All ranks share one process group whose id is the first rank's pid.
 *    One kill(-pgid) reaches every rank and the processes they started, the
 *    launcher is never hit by it, and a Ctrl-C at the terminal reaches only
 *    the launcher, which forwards it once.  The group is signalled only
 *    while a rank is still unreaped, so its id cannot have been reused.
 *  - Every fd the launcher opens is close-on-exec, and each child closes
 *    every fd above 2 before exec: ranks inherit neither the store server's
 *    sockets nor one another's pipes.
 *  - The launcher is multi-threaded (the store server has a thread), so
 *    between fork and exec the child makes async-signal-safe calls only;
 *    argv, envp and the program's path are all prepared before fork.
 *  - Signal handlers only write the signal number to a self-pipe, and
 *    signals are blocked in the store thread; all work is done by the
 *    poll() loop of the main thread.  A signal we forward that the
 *    launcher was started with ignored (nohup, a background job of a
 *    script) gets no handler and stays ignored in the ranks.
 *  - The launcher holds two pipe ends per rank, and hosting the store a
 *    connection per rank while they rendezvous: it raises its soft limit
 *    of open files to the hard one, and refuses a job that would still
 *    exceed it before starting any rank.  The ranks get the limit back.
 *  - Every rank is reaped before the launcher exits; a rank also gets
 *    SIGKILL (PR_SET_PDEATHSIG) if the launcher itself is killed outright.
 *  - The job token (docs/fault-tolerance.md, "Secure wire") reaches the
 *    ranks through the environment only, never a command line: the user's
 *    XCOLL_TOKEN / XCOLL_TOKEN_FILE, or a fresh XCOLL_TOKEN drawn here for
 *    a job started whole by this invocation.  The launcher's store demands
 *    the same token.
 */
#include "core/store.h"
#include "transport/shm.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_RANKS 1024
#define LINE_CAP 16384       /* longer lines are written in pieces */
#define OUT_CAP (4 * LINE_CAP)
#define GIVEUP_MS 5000       /* after SIGKILL, wait at most this long */

/* The variables xcoll-run sets for each rank, in build_env's order. */
static const char *const k_vars[] = {"XCOLL_RANK", "XCOLL_SIZE",
    "XCOLL_LOCAL_RANK", "XCOLL_LOCAL_SIZE", "XCOLL_ADDR", "XCOLL_STORE_EXTERNAL",
    "XCOLL_NODE_ID"}; /* the last one with --nodes only */
#define NVARS (sizeof k_vars / sizeof *k_vars)

extern char **environ;

/* One output stream (stdout or stderr) of one rank. */
typedef struct stream {
    int fd;      /* read end of the rank's pipe; -1 after EOF */
    int out;     /* where its lines go: 1 or 2 */
    int rank;    /* printed in the prefix */
    int midline; /* the last byte written was not '\n': no prefix next */
    size_t len;  /* bytes pending in buf (no complete line among them) */
    char buf[LINE_CAP];
} stream_t;

typedef struct rank {
    pid_t pid;    /* 0 until started */
    int cpu;      /* the CPU it is bound to (--bind), -1: not bound */
    int alive;    /* started and not yet reaped */
    int failed;   /* reaped by this reap() with a status that counts */
    int status;   /* its wait status, once reaped */
    char **envp;
    stream_t s[2];
} rank_t;

typedef struct job {
    /* options */
    int n, rank_offset, world, host_store, prefix, grace_ms;
    int nodes;               /* --nodes: emulated nodes (0: the real one) */
    int max_restarts;        /* --max-restarts: rerun a failed job this often */
    int bind;                /* --bind: BIND_AUTO, BIND_NONE or BIND_CPU */
    double timeout_s;
    const char *addr, *host;
    char store_host[256];    /* from --addr/--host; 127.0.0.1 by default */
    int store_port;          /* from --addr; 0 = any free port */
    char **argv;
    /* state */
    char *path;              /* program resolved through PATH */
    int fd_max;              /* fallback bound for closing fds in a child */
    char child_addr[300];    /* XCOLL_ADDR given to the ranks */
    xc__store_server_t *srv;
    xc__auth_conf_t auth;    /* the job token, if any */
    rank_t *ranks;
    struct pollfd *pfd;      /* poll set: the self-pipe, then 2 per rank */
    stream_t **pstream;      /* the stream of each pfd entry */
    pid_t pgid;              /* 0 until the first rank runs */
    int nalive;
    int exit_code;           /* -1 until the first failure */
    int got_signal;          /* a termination signal was forwarded */
    int stopping, killed;    /* SIGTERM (or forwarded signal), SIGKILL sent */
    uint64_t end_ns, kill_ns, giveup_ns;
    int out_broken[3];       /* our stdout/stderr is gone: drop output */
} job_t;

enum { BIND_AUTO, BIND_NONE, BIND_CPU };

static int g_sigpipe[2] = {-1, -1}; /* self-pipe: handlers write, loop reads */
static const int k_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGCHLD};
static unsigned g_ignored;          /* bit S: we forward S, it was ignored at start */
static struct rlimit g_nofile;      /* RLIMIT_NOFILE as given; for the ranks */
static int g_nofile_raised;         /* the launcher's soft limit is higher */

static void on_signal(int sig)
{
    int saved = errno;
    unsigned char b = (unsigned char)sig;
    ssize_t w = write(g_sigpipe[1], &b, 1); /* full pipe: a wakeup is pending */
    (void)w;
    errno = saved;
}

static const char *sig_name(int sig, char *buf, size_t cap)
{
    const char *abbrev = sigabbrev_np(sig);
    if (abbrev) snprintf(buf, cap, "SIG%s", abbrev);
    else snprintf(buf, cap, "signal %d", sig);
    return buf;
}

/* ------------------------------------------------------------ arguments */

static void usage(FILE *f)
{
    fputs("Usage: xcoll-run -n N [options] [--] program [args...]\n"
          "\n"
          "Start N ranks of program on this machine, host their rendezvous\n"
          "store and supervise them.\n"
          "\n"
          "Options:\n"
          "  -n, --nproc N        ranks to start here (1..1024)\n"
          "      --addr HOST:PORT host the store there (default 127.0.0.1, a\n"
          "                       free port; a host name other than localhost:\n"
          "                       on every interface); with --world-size, the address\n"
          "                       of the store shared by every invocation\n"
          "      --host HOST      host the store on HOST, a free port\n"
          "      --rank-offset R  rank of the first process started here (0)\n"
          "      --world-size W   ranks in the whole job (default N)\n"
          "      --host-store     host the store in a job that spans several\n"
          "                       invocations (exactly one of them must)\n"
          "      --no-prefix      do not prefix output lines with \"[rank] \"\n"
          "      --grace-ms MS    SIGTERM to SIGKILL delay (default 3000)\n"
          "      --timeout SEC    stop the job after SEC seconds, exit 124\n"
          "      --nodes K        emulate K nodes: consecutive blocks of ranks get\n"
          "                       their own XCOLL_NODE_ID (shared memory within a\n"
          "                       block, TCP between blocks), for tests and\n"
          "                       benchmarks of multi-node paths on one machine\n"
          "      --bind WHAT      cpu: bind rank i to the (i mod C)-th of the C\n"
          "                       CPUs the launcher may run on; none: do not\n"
          "                       bind; auto (default): cpu when this invocation\n"
          "                       starts as many ranks as it has CPUs or more,\n"
          "                       else none\n"
          "      --max-restarts R when a rank fails, stop the job and start it\n"
          "                       again, at most R times (as torchrun does); the\n"
          "                       ranks see XCOLL_RESTART_COUNT (0 at the first\n"
          "                       start) and resume from their checkpoints\n"
          "  -h, --help           show this help\n"
          "\n"
          "Each rank gets XCOLL_RANK, XCOLL_SIZE, XCOLL_LOCAL_RANK,\n"
          "XCOLL_LOCAL_SIZE, XCOLL_ADDR and XCOLL_STORE_EXTERNAL=1; stdin is\n"
          "/dev/null.  When a rank fails the others get SIGTERM, then SIGKILL.\n"
          "The job token that authenticates every connection is the user's\n"
          "XCOLL_TOKEN / XCOLL_TOKEN_FILE, else a fresh XCOLL_TOKEN drawn for\n"
          "the job (environment only, never on a command line).\n"
          "\n"
          "SIGINT, SIGTERM or SIGHUP ignored when xcoll-run starts (nohup)\n"
          "stays ignored, in xcoll-run and in the ranks.\n"
          "\n"
          "Exit status: 0 if every rank exits 0; else the first failing\n"
          "rank's code (128+S if killed by signal S; of several found at\n"
          "once, a death by a signal first); 128+S if xcoll-run got\n"
          "signal S; 124 on --timeout; 126/127 if program cannot be run;\n"
          "2 on bad usage; 1 if the launch itself fails (too few open files\n"
          "allowed for N ranks, among others).\n",
          f);
}

static int bad_usage(const char *fmt, ...) XC__PRINTF(1, 2);
static int bad_usage(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("xcoll-run: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs("\nTry 'xcoll-run --help'.\n", stderr);
    va_end(ap);
    return 2;
}

/* Strict decimal integer in [lo, hi]. */
static int parse_int(const char *s, long lo, long hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

/* Fill the options of `job`; 0 on success, else the exit code (0 for
 * --help is returned as -1). */
static int parse_args(job_t *job, int argc, char **argv)
{
    enum { O_ADDR = 256, O_HOST, O_OFFSET, O_WORLD, O_HOST_STORE, O_NO_PREFIX,
           O_GRACE, O_TIMEOUT, O_NODES, O_RESTARTS, O_BIND };
    static const struct option longopts[] = {
        {"nproc", required_argument, NULL, 'n'},
        {"addr", required_argument, NULL, O_ADDR},
        {"host", required_argument, NULL, O_HOST},
        {"rank-offset", required_argument, NULL, O_OFFSET},
        {"world-size", required_argument, NULL, O_WORLD},
        {"host-store", no_argument, NULL, O_HOST_STORE},
        {"no-prefix", no_argument, NULL, O_NO_PREFIX},
        {"grace-ms", required_argument, NULL, O_GRACE},
        {"timeout", required_argument, NULL, O_TIMEOUT},
        {"nodes", required_argument, NULL, O_NODES},
        {"max-restarts", required_argument, NULL, O_RESTARTS},
        {"bind", required_argument, NULL, O_BIND},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    job->n = -1;
    job->world = -1;
    job->prefix = 1;
    job->grace_ms = 3000;
    opterr = 0;
    int c;
    /* '+': options end at the program name; its own options are its own. */
    while ((c = getopt_long(argc, argv, "+:hn:", longopts, NULL)) != -1) {
        char *end;
        switch (c) {
        case 'h': usage(stdout); return -1;
        case 'n':
            if (parse_int(optarg, 1, MAX_RANKS, &job->n))
                return bad_usage("-n: '%s' is not a number of ranks in 1..1024",
                                 optarg);
            break;
        case O_ADDR: job->addr = optarg; break;
        case O_HOST: job->host = optarg; break;
        case O_OFFSET:
            if (parse_int(optarg, 0, INT_MAX - MAX_RANKS, &job->rank_offset))
                return bad_usage("--rank-offset: '%s' is not a rank", optarg);
            break;
        case O_WORLD:
            if (parse_int(optarg, 1, INT_MAX, &job->world))
                return bad_usage("--world-size: '%s' is not a positive number",
                                 optarg);
            break;
        case O_HOST_STORE: job->host_store = 1; break;
        case O_NO_PREFIX: job->prefix = 0; break;
        case O_GRACE:
            if (parse_int(optarg, 0, 3600000, &job->grace_ms))
                return bad_usage("--grace-ms: '%s' is not in 0..3600000", optarg);
            break;
        case O_TIMEOUT:
            errno = 0;
            job->timeout_s = strtod(optarg, &end);
            if (errno || end == optarg || *end || !(job->timeout_s > 0) ||
                job->timeout_s > 1e7)
                return bad_usage("--timeout: '%s' is not a number of seconds",
                                 optarg);
            break;
        case O_NODES:
            if (parse_int(optarg, 1, MAX_RANKS, &job->nodes))
                return bad_usage("--nodes: '%s' is not a number of nodes in 1..1024", optarg);
            break;
        case O_RESTARTS:
            if (parse_int(optarg, 0, 1000, &job->max_restarts) != 0)
                return bad_usage("--max-restarts: '%s' is not in 0..1000", optarg);
            break;
        case O_BIND:
            if (!strcmp(optarg, "auto")) job->bind = BIND_AUTO;
            else if (!strcmp(optarg, "none")) job->bind = BIND_NONE;
            else if (!strcmp(optarg, "cpu")) job->bind = BIND_CPU;
            else return bad_usage("--bind: '%s' is not one of auto, none, cpu", optarg);
            break;
        case ':': return bad_usage("%s needs an argument", argv[optind - 1]);
        default:
            if (optopt) return bad_usage("unknown option '-%c'", optopt);
            return bad_usage("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind >= argc) return bad_usage("%s", "no program to run");
    if (job->n < 0) return bad_usage("%s", "-n N (the number of ranks) is required");
    if (job->max_restarts && (job->rank_offset != 0 || (job->world >= 0 && job->world != job->n)))
        return bad_usage("%s", "--max-restarts needs the whole job in this invocation");
    if (job->world < 0) job->world = job->rank_offset + job->n;
    if (job->nodes > job->n)
        return bad_usage("--nodes %d: more nodes than the %d ranks started here", job->nodes,
                         job->n);
    if (job->rank_offset + job->n > job->world)
        return bad_usage("%s", "--rank-offset + -n exceeds --world-size");
    if (job->addr && job->host)
        return bad_usage("%s", "give --addr or --host, not both");
    int partial = job->rank_offset != 0 || job->world != job->n;
    if (partial && !job->addr)
        return bad_usage("%s", "a job spanning several invocations needs "
                               "--addr HOST:PORT, the store they share");
    strcpy(job->store_host, "127.0.0.1");
    if (job->addr && xc__parse_hostport(job->addr, "--addr", job->store_host,
                                        sizeof job->store_host, &job->store_port))
        return bad_usage("%s", xc_last_error());
    if (job->host) {
        if (strlen(job->host) >= sizeof job->store_host)
            return bad_usage("--host: '%s' is too long", job->host);
        strcpy(job->store_host, job->host);
    }
    job->argv = argv + optind;
    return 0;
}

/* ------------------------------------------------------------ setup */

/* Make sure 0, 1 and 2 are open, so no pipe of ours lands on them. */
static void ensure_std_fds(void)
{
    for (int fd = 0; fd < 3; ++fd)
        if (fcntl(fd, F_GETFD) < 0 && errno == EBADF)
            if (open("/dev/null", O_RDWR) < 0) return;
}

/* Whether `sig` is ignored now, i.e. was when we started. */
static int is_ignored(int sig)
{
    struct sigaction old;
    return sigaction(sig, NULL, &old) == 0 && old.sa_handler == SIG_IGN;
}

/* Handlers for the signals we forward and for SIGCHLD.  A forwarded signal
 * that was ignored stays ignored, here and in the ranks (g_ignored): nohup,
 * `trap '' HUP` and a background job of a script (SIGINT) chose that the
 * job outlive a hangup or interrupt, and a handler would undo it.  SIGCHLD
 * gets one regardless: ignored, the kernel would reap the ranks itself and
 * their exit codes would be lost. */
static int install_signals(void)
{
    if (pipe2(g_sigpipe, O_CLOEXEC | O_NONBLOCK) < 0) return -1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof k_signals / sizeof *k_signals; ++i) {
        int sig = k_signals[i];
        if (sig != SIGCHLD && is_ignored(sig)) {
            g_ignored |= 1u << sig;
            continue;
        }
        if (sigaction(sig, &sa, NULL) < 0) return -1;
    }
    signal(SIGPIPE, SIG_IGN); /* a closed stdout is an EPIPE, not a death */
    return 0;
}

/* Raise the soft limit of open files to the hard one (failure ignored:
 * check_fd_limit then says what is missing).  The launcher needs two pipe
 * ends per rank and more (check_fd_limit), past a soft limit of 1024 from
 * about 500 ranks.  The ranks are given the limit back (exec_child): a
 * program that needs more raises its own, and one that keeps fds in an
 * fd_set must not be handed fds of 1024 and above. */
static void raise_fd_limit(void)
{
    if (getrlimit(RLIMIT_NOFILE, &g_nofile) != 0) return;
    struct rlimit r = g_nofile;
    if (r.rlim_cur >= r.rlim_max) return;
    r.rlim_cur = r.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &r) == 0) g_nofile_raised = 1;
}

/* How many fds are open now (/proc/self/fd); -1 if unknown. */
static long open_fd_count(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    long n = -1; /* not counting opendir's own */
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') ++n;
    closedir(d);
    return n;
}

/* Whether the fds the job needs at once fit the soft limit: those open now
 * (the store's among them), the read ends of two pipes per rank, four more
 * while one starts (the write ends and the exec-error pipe), a store
 * connection per rank of the job if we host it (xc_comm_init holds one until
 * every rank has posted its address: short of them, the rendezvous waits
 * for ranks whose connection cannot be accepted), and a few for files the
 * store and libc open.  A new fd takes the lowest free number, so counting
 * is enough.  0, or 1 after saying why not: before any rank is started, not
 * with one failing halfway through. */
static int check_fd_limit(const job_t *job)
{
    struct rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return 0;
    long now = open_fd_count();
    if (now < 0) now = 32; /* no /proc: a guess, the kernel still enforces it */
    long per_rank = 2, store = job->srv ? job->world : 0;
    long need = now + per_rank * job->n + 4 + store + 8;
    if (need <= (long)r.rlim_cur) return 0;
    char hard[32] = "unlimited";
    if (r.rlim_max != RLIM_INFINITY)
        snprintf(hard, sizeof hard, "%llu", (unsigned long long)r.rlim_max);
    fprintf(stderr, "xcoll-run: -n %d needs about %ld open files (2 per rank%s, %ld open "
                    "now), more than its limit of %llu (hard limit %s); raise the hard "
                    "limit (ulimit -Hn, limits.conf, LimitNOFILE=) or start fewer ranks\n",
            job->n, need, store ? ", 1 per rank of the job for the store" : "", now,
            (unsigned long long)r.rlim_cur, hard);
    return 1;
}

/* Settle the job's token (see the top) into job->auth.  0, or 2 after
 * saying why not. */
static int job_token(job_t *job)
{
    const char *t = getenv("XCOLL_TOKEN"), *f = getenv("XCOLL_TOKEN_FILE");
    int given = (t && *t) || (f && *f);
    int whole = job->rank_offset == 0 && job->world == job->n;
    if (!given && whole) {
        uint8_t key[XC__TOKEN_LEN];
        char hex[2 * XC__TOKEN_LEN + 1];
        size_t got = 0;
        while (got < sizeof key) {
            ssize_t r = getrandom(key + got, sizeof key - got, 0);
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) {
                fprintf(stderr, "xcoll-run: cannot draw a job token: getrandom: %s\n",
                        strerror(errno));
                return 2;
            }
            got += (size_t)r;
        }
        for (size_t i = 0; i < sizeof key; ++i)
            snprintf(hex + 2 * i, 3, "%02x", key[i]);
        int e = setenv("XCOLL_TOKEN", hex, 1);
        explicit_bzero(key, sizeof key);
        explicit_bzero(hex, sizeof hex);
        if (e != 0) {
            fprintf(stderr, "xcoll-run: cannot set XCOLL_TOKEN: %s\n", strerror(errno));
            return 2;
        }
    } else if (!given) {
        fprintf(stderr, "xcoll-run: note: this job spans several invocations and no "
                        "XCOLL_TOKEN / XCOLL_TOKEN_FILE is set: its connections are not "
                        "authenticated (give every invocation the same token)\n");
    }
    if (xc__auth_conf_env(&job->auth) != XC_OK) {
        fprintf(stderr, "xcoll-run: %s\n", xc_last_error());
        return 2;
    }
    return 0;
}

static int is_wildcard(const char *h)
{
    return !*h || !strcmp(h, "*") || !strcmp(h, "0.0.0.0") || !strcmp(h, "::");
}

/* Host the store if this invocation should, and set child_addr. */
static int start_store(job_t *job)
{
    const char *host = job->store_host;
    int port = job->store_port;
    int whole = job->rank_offset == 0 && job->world == job->n;
    if (whole || job->host_store) {
        /* As xc_comm_init's rank 0: a name that is not a loopback
         * spelling is bound on every interface (it may resolve to a
         * loopback alias here and to a routable address elsewhere). */
        const char *bind_host =
            strcmp(host, "*") && (xc__host_is_numeric(host) || xc__host_is_loopback(host))
                ? host : "";
        /* The server thread inherits this mask: signals go to main only. */
        sigset_t block, old;
        sigemptyset(&block);
        for (size_t i = 0; i < sizeof k_signals / sizeof *k_signals; ++i)
            sigaddset(&block, k_signals[i]);
        pthread_sigmask(SIG_BLOCK, &block, &old);
        xc_result_t rc = xc__store_server_start(bind_host, port, &job->auth, &job->srv, &port);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (rc != XC_OK) {
            fprintf(stderr, "xcoll-run: cannot host the rendezvous store on "
                            "%s:%d: %s\n", host, port, xc_last_error());
            return 1;
        }
    }
    const char *reach = host;
    if (is_wildcard(host)) reach = strcmp(host, "::") ? "127.0.0.1" : "::1";
    snprintf(job->child_addr, sizeof job->child_addr,
             strchr(reach, ':') ? "[%s]:%d" : "%s:%d", reach, port);
    return 0;
}

/* The launcher's environment without our variables, plus ours for rank
 * `local` of this invocation.  NULL on allocation failure. */
/* How many of k_vars this job sets. */
static size_t nvars(const job_t *job) { return job->nodes ? NVARS : NVARS - 1; }

static char **build_env(const job_t *job, int local)
{
    size_t n = 0;
    while (environ[n]) ++n;
    char **env = calloc(n + NVARS + 1, sizeof *env);
    if (!env) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; ++i) {
        int skip = 0;
        for (size_t j = 0; j < nvars(job) && !skip; ++j) {
            size_t len = strlen(k_vars[j]);
            skip = !strncmp(environ[i], k_vars[j], len) && environ[i][len] == '=';
        }
        if (!skip) env[k++] = environ[i]; /* borrowed, not freed */
    }
    char val[NVARS][320];
    int lrank = local, lsize = job->n;
    if (job->nodes) { /* consecutive blocks of ranks, as on real nodes */
        int node = (int)((long)local * job->nodes / job->n);
        int first = (int)(((long)node * job->n + job->nodes - 1) / job->nodes);
        int next = (int)(((long)(node + 1) * job->n + job->nodes - 1) / job->nodes);
        lrank = local - first;
        lsize = next - first;
        snprintf(val[6], sizeof val[6], "xcoll-run-%d-node%d", (int)getpid(), node);
    }
    snprintf(val[0], sizeof val[0], "%d", job->rank_offset + local);
    snprintf(val[1], sizeof val[1], "%d", job->world);
    snprintf(val[2], sizeof val[2], "%d", lrank);
    snprintf(val[3], sizeof val[3], "%d", lsize);
    snprintf(val[4], sizeof val[4], "%s", job->child_addr);
    snprintf(val[5], sizeof val[5], "1");
    for (size_t j = 0; j < nvars(job); ++j)
        if (asprintf(&env[k++], "%s=%s", k_vars[j], val[j]) < 0)
            return NULL; /* the launcher then exits: nothing to reclaim */
    return env;
}

/* Free what build_env allocated: our variables are the last ones. */
static void free_env(const job_t *job, char **env)
{
    if (!env) return;
    size_t n = 0;
    while (env[n]) ++n;
    for (size_t i = n - nvars(job); i < n; ++i) free(env[i]);
    free(env);
}

/* `name` searched in PATH as execvp would (malloc'd), NULL if absent. */
static char *resolve_program(const char *name)
{
    if (strchr(name, '/')) return strdup(name);
    const char *path = getenv("PATH");
    if (!path || !*path) path = "/usr/local/bin:/usr/bin:/bin";
    while (1) {
        const char *colon = strchrnul(path, ':');
        int dlen = (int)(colon - path);
        char *cand;
        if (asprintf(&cand, "%.*s%s%s", dlen, path, dlen ? "/" : "", name) < 0)
            return NULL;
        struct stat st;
        if (!stat(cand, &st) && S_ISREG(st.st_mode) && !access(cand, X_OK))
            return cand;
        free(cand);
        if (!*colon) return NULL;
        path = colon + 1;
    }
}

/* ------------------------------------------------------------ starting */

/* In the forked child: async-signal-safe calls only.  Never returns. */
static void exec_child(const job_t *job, const rank_t *r, pid_t parent,
                       int errfd, int devnull, int out_w, int err_w)
{
    setpgid(0, job->pgid); /* 0 for the first rank: a new group */
    /* Our handlers and SIGPIPE back to the default; a forwarded signal the
     * launcher was started with ignored stays ignored (nohup's SIGHUP, as
     * in any program nohup runs). */
    struct sigaction act;
    memset(&act, 0, sizeof act);
    for (size_t i = 0; i < sizeof k_signals / sizeof *k_signals; ++i) {
        act.sa_handler = g_ignored >> k_signals[i] & 1 ? SIG_IGN : SIG_DFL;
        sigaction(k_signals[i], &act, NULL);
    }
    act.sa_handler = SIG_DFL;
    sigaction(SIGPIPE, &act, NULL);
    /* The limit the launcher was given (raise_fd_limit); a bare syscall. */
    if (g_nofile_raised) setrlimit(RLIMIT_NOFILE, &g_nofile);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127); /* the launcher died meanwhile */
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (r->cpu >= 0) {
        /* Before exec, so every thread the rank starts inherits it.  A
         * failure (the CPU went offline meanwhile) leaves it unbound:
         * binding is placement, not correctness. */
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(r->cpu, &one);
        sched_setaffinity(0, sizeof one, &one);
    }
    int e = 0;
    if (dup2(devnull, 0) < 0 || dup2(out_w, 1) < 0 || dup2(err_w, 2) < 0) {
        e = errno;
    } else {
        /* errfd (close-on-exec) stays open to report a failed execve. */
        if (close_range((unsigned)errfd + 1, ~0u, 0) < 0) /* kernel < 5.9 */
            for (int fd = errfd + 1; fd < job->fd_max; ++fd) close(fd);
        for (int fd = 3; fd < errfd; ++fd) close(fd);
        execve(job->path, job->argv, r->envp);
        e = errno;
    }
    ssize_t w = write(errfd, &e, sizeof e);
    (void)w;
    _exit(127);
}

/*
 * --bind: rank i of this invocation on the (i mod C)-th of the C CPUs the
 * launcher may run on.  With more ranks than CPUs, unbound ranks migrate
 * between the cores and their collectives, which need every rank to have
 * run, ran in a slow and a fast mode up to 2x apart; bound, in the fast
 * one (bench/RESULTS.md: 8 ranks on 2 cores, an 8-byte all-reduce 10-15
 * -> 5.7 us; docs/launching.md "Oversubscribed cores").  With exactly as
 * many ranks as CPUs the kernel did not always spread them: 2 ranks on 2
 * CPUs shared one in 3 of 12 starts, for the whole run (a 32 KiB reduce
 * 1.2 us against 5.5, the cost model's calibration taken in that state).
 * With fewer ranks than CPUs nothing is bound: a binding would forbid the
 * rank's own threads (compute, data loading) the idle cores.
 */
static void assign_cpus(job_t *job)
{
    cpu_set_t set;
    int cpus[CPU_SETSIZE], ncpu = 0;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        for (int c = 0; c < CPU_SETSIZE; ++c)
            if (CPU_ISSET(c, &set)) cpus[ncpu++] = c;
    int bind = job->bind == BIND_CPU || (job->bind == BIND_AUTO && ncpu > 0 && job->n >= ncpu);
    if (bind && ncpu == 0)
        fprintf(stderr, "xcoll-run: --bind cpu: the launcher's CPUs are unknown (%s); "
                        "the ranks run unbound\n", strerror(errno));
    for (int i = 0; i < job->n; ++i) job->ranks[i].cpu = bind && ncpu > 0 ? cpus[i % ncpu] : -1;
}

/* Start local rank i.  0 on success, else the launcher's exit code. */
static int spawn_rank(job_t *job, int i, int devnull)
{
    rank_t *r = &job->ranks[i];
    int out[2], err[2], ep[2];
    if (pipe2(out, O_CLOEXEC) < 0) goto sys_fail;
    if (pipe2(err, O_CLOEXEC) < 0) { close(out[0]); close(out[1]); goto sys_fail; }
    if (pipe2(ep, O_CLOEXEC) < 0) {
        close(out[0]); close(out[1]); close(err[0]); close(err[1]);
        goto sys_fail;
    }
    /* Keep our handlers from running in the child before it resets them. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) exec_child(job, r, parent, ep[1], devnull, out[1], err[1]);
    int fork_errno = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    close(out[1]);
    close(err[1]);
    close(ep[1]);
    if (pid < 0) {
        close(out[0]); close(err[0]); close(ep[0]);
        errno = fork_errno;
        goto sys_fail;
    }
    if (!job->pgid) job->pgid = pid;
    setpgid(pid, job->pgid); /* the child does it too: whoever runs first */
    r->pid = pid;
    r->alive = 1;
    job->nalive++;
    for (int k = 0; k < 2; ++k) {
        r->s[k].fd = k ? err[0] : out[0];
        r->s[k].out = k + 1;
        r->s[k].rank = job->rank_offset + i;
        fcntl(r->s[k].fd, F_SETFL, O_NONBLOCK);
    }
    int e;
    ssize_t got;
    do got = read(ep[0], &e, sizeof e); /* EOF: execve succeeded */
    while (got < 0 && errno == EINTR);
    close(ep[0]);
    if (got != (ssize_t)sizeof e) return 0;
    fprintf(stderr, "xcoll-run: cannot run '%s' as rank %d: %s\n", job->path,
            job->rank_offset + i, strerror(e));
    return e == ENOENT ? 127 : 126;
sys_fail:
    fprintf(stderr, "xcoll-run: cannot start rank %d: %s\n",
            job->rank_offset + i, strerror(errno));
    return 1;
}

/* ------------------------------------------------------------ output */

/* write() all of buf; give up on this fd for good if it is broken. */
static void write_all(job_t *job, int fd, const char *buf, size_t len)
{
    while (len && !job->out_broken[fd]) {
        ssize_t w = write(fd, buf, len);
        if (w > 0) {
            buf += w;
            len -= (size_t)w;
        } else if (w < 0 && errno == EAGAIN) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            poll(&p, 1, 100);
        } else if (!(w < 0 && errno == EINTR)) {
            job->out_broken[fd] = 1;
        }
    }
}

/* Write the complete lines pending in `s`, each prefixed with "[rank] ",
 * batched into few writes; keep an incomplete tail unless the buffer is
 * full (a line longer than LINE_CAP goes out in pieces, prefixed once) or
 * `final` (the rank's stream ended; a prefixed last line gets its '\n'). */
static void stream_emit(job_t *job, stream_t *s, int final)
{
    static char out[OUT_CAP];
    char prefix[24];
    size_t plen = job->prefix ? (size_t)snprintf(prefix, sizeof prefix, "[%d] ",
                                                 s->rank) : 0;
    size_t olen = 0, start = 0;
    while (start < s->len) {
        const char *nl = memchr(s->buf + start, '\n', s->len - start);
        size_t end;
        if (nl) end = (size_t)(nl - s->buf) + 1;
        else if (final || (start == 0 && s->len == LINE_CAP)) end = s->len;
        else break;
        if (olen + plen + (end - start) + 1 > OUT_CAP) {
            write_all(job, s->out, out, olen);
            olen = 0;
        }
        if (!s->midline) {
            memcpy(out + olen, prefix, plen);
            olen += plen;
        }
        memcpy(out + olen, s->buf + start, end - start);
        olen += end - start;
        s->midline = s->buf[end - 1] != '\n';
        start = end;
    }
    if (final && s->midline && job->prefix) {
        out[olen++] = '\n';
        s->midline = 0;
    }
    write_all(job, s->out, out, olen);
    memmove(s->buf, s->buf + start, s->len - start);
    s->len -= start;
}

/* Read what `s` has (all of it if `drain`), emit whole lines, close on EOF. */
static void stream_read(job_t *job, stream_t *s, int drain)
{
    while (s->fd >= 0) {
        ssize_t got = read(s->fd, s->buf + s->len, LINE_CAP - s->len);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0 && errno == EAGAIN) {
            if (drain) stream_emit(job, s, 1);
            return;
        }
        if (got <= 0) { /* EOF, or an error that ends the stream all the same */
            stream_emit(job, s, 1);
            close(s->fd);
            s->fd = -1;
            return;
        }
        s->len += (size_t)got;
        stream_emit(job, s, 0);
        if (!drain) return;
    }
}

/* ------------------------------------------------------------ supervision */

/* Signal every rank (the whole group); start the SIGKILL clock once. */
static void stop_job(job_t *job, int sig)
{
    if (job->nalive > 0 && job->pgid > 0) kill(-job->pgid, sig);
    if (!job->stopping) {
        job->stopping = 1;
        job->kill_ns = xc__now_ns() + (uint64_t)job->grace_ms * 1000000ull;
    }
}

/* The launcher's exit code for a rank's wait status: C, or 128+S. */
static int status_code(int st)
{
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* "xcoll-run: rank r (pid p) <how it ended>", without the newline. */
static void print_failure(const job_t *job, int i)
{
    int st = job->ranks[i].status;
    char cause[96], name[32];
    if (WIFEXITED(st))
        snprintf(cause, sizeof cause, "exited with code %d%s", WEXITSTATUS(st),
                 WEXITSTATUS(st) == 77 ? " (skipped)" : "");
    else
        snprintf(cause, sizeof cause, "was killed by %s (%s)%s",
                 sig_name(WTERMSIG(st), name, sizeof name), strsignal(WTERMSIG(st)),
                 WCOREDUMP(st) ? ", core dumped" : "");
    fprintf(stderr, "xcoll-run: rank %d (pid %d) %s", job->rank_offset + i,
            (int)job->ranks[i].pid, cause);
}

/* Which of the ranks this reap() found failed is blamed: the first killed
 * by a signal, else the first with a non-zero exit.  Several can be found
 * at once when the launcher was not running (stopped, descheduled), and
 * waitpid(-1) returns them in the order they were started, not the order
 * they died.  A crash (SIGSEGV, SIGABRT, the OOM killer) is the likelier
 * first cause: the ranks it leaves behind typically exit non-zero with
 * XC_ERR_PEER_LOST.  None of these signals can be ours: once we signal
 * the ranks, the job is stopping and nothing counts any more. */
static int blamed_rank(const job_t *job)
{
    int first = -1;
    for (int i = 0; i < job->n; ++i) {
        if (!job->ranks[i].failed) continue;
        if (WIFSIGNALED(job->ranks[i].status)) return i;
        if (first < 0) first = i;
    }
    return first;
}

/* Reap every rank that has ended, then, if the job was running, decide:
 * one line per failed rank, the blamed one's code, the others stopped. */
static void reap(job_t *job)
{
    int st, nfailed = 0;
    pid_t pid;
    while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
        int i = 0;
        while (i < job->n && job->ranks[i].pid != pid) ++i;
        if (i == job->n) continue;
        rank_t *r = &job->ranks[i];
        r->alive = 0;
        r->status = st;
        job->nalive--;
        /* A rank that did not end cleanly may have died inside its
         * communicator's set-up window, leaving its shared-memory segment
         * behind: nobody else knows its name. */
        if (st != 0) xc__shm_remove_of(pid);
        if (st == 0 || job->stopping) continue; /* fine, or a consequence */
        r->failed = 1;
        nfailed++;
    }
    if (nfailed == 0) return;
    int blame = blamed_rank(job);
    for (int i = 0; i < job->n; ++i) {
        if (!job->ranks[i].failed) continue;
        job->ranks[i].failed = 0;
        print_failure(job, i);
        if (i == blame && nfailed > 1)
            fprintf(stderr, "; blamed, of %d failures found at once (%s)", nfailed,
                    WIFSIGNALED(job->ranks[i].status)
                        ? "a death by a signal comes before an exit code"
                        : "the lowest rank: which failed first is not known");
        if (i == blame && job->nalive)
            fprintf(stderr, "; stopping the %d other running rank%s", job->nalive,
                    job->nalive == 1 ? "" : "s");
        fputc('\n', stderr);
    }
    job->exit_code = status_code(job->ranks[blame].status);
    stop_job(job, SIGTERM);
}

/* Act on the signals the handler queued in the self-pipe. */
static void handle_signals(job_t *job)
{
    unsigned char b[64];
    ssize_t got;
    while ((got = read(g_sigpipe[0], b, sizeof b)) > 0) {
        for (ssize_t k = 0; k < got; ++k) {
            int sig = b[k];
            if (sig == SIGCHLD) continue; /* reap() runs on every wakeup */
            char name[32];
            sig_name(sig, name, sizeof name);
            if (job->got_signal) { /* a second one: no more patience */
                fprintf(stderr, "xcoll-run: %s again; killing every rank\n", name);
                if (job->nalive > 0 && job->pgid > 0) kill(-job->pgid, SIGKILL);
                continue;
            }
            job->got_signal = sig;
            fprintf(stderr, "xcoll-run: caught %s; forwarding it to the ranks\n",
                    name);
            if (job->exit_code < 0) job->exit_code = 128 + sig;
            stop_job(job, sig);
        }
    }
}

/* Time-driven transitions; returns the poll timeout in ms. */
static int check_clocks(job_t *job)
{
    uint64_t now = xc__now_ns();
    if (!job->stopping && now >= job->end_ns) {
        fprintf(stderr, "xcoll-run: timeout: the job ran for %g s; stopping "
                        "%d running rank%s\n", job->timeout_s, job->nalive,
                job->nalive == 1 ? "" : "s");
        job->exit_code = 124;
        stop_job(job, SIGTERM);
    }
    if (job->stopping && !job->killed && now >= job->kill_ns) {
        fprintf(stderr, "xcoll-run: %d rank%s still running %d ms after "
                        "SIGTERM; sending SIGKILL\n", job->nalive,
                job->nalive == 1 ? "" : "s", job->grace_ms);
        if (job->nalive > 0 && job->pgid > 0) kill(-job->pgid, SIGKILL);
        job->killed = 1;
        job->giveup_ns = now + GIVEUP_MS * 1000000ull;
    }
    if (job->killed) return xc__poll_ms_left(job->giveup_ns);
    return xc__poll_ms_left(job->stopping ? job->kill_ns : job->end_ns);
}

/* Pump output and reap ranks until all are gone (or will not die). */
static void supervise(job_t *job)
{
    struct pollfd *pfd = job->pfd;
    for (;;) {
        handle_signals(job);
        reap(job);
        if (job->nalive == 0) break;
        int ms = check_clocks(job);
        if (job->killed && ms == 0) {
            for (int i = 0; i < job->n; ++i)
                if (job->ranks[i].alive)
                    fprintf(stderr, "xcoll-run: rank %d (pid %d) survived "
                                    "SIGKILL; giving up on it\n",
                            job->rank_offset + i, (int)job->ranks[i].pid);
            break;
        }
        nfds_t np = 0;
        pfd[np++] = (struct pollfd){.fd = g_sigpipe[0], .events = POLLIN};
        for (int i = 0; i < job->n; ++i)
            for (int k = 0; k < 2; ++k)
                if (job->ranks[i].s[k].fd >= 0) {
                    job->pstream[np] = &job->ranks[i].s[k];
                    pfd[np++] = (struct pollfd){.fd = job->ranks[i].s[k].fd,
                                                .events = POLLIN};
                }
        int ready = poll(pfd, np, ms);
        if (ready < 0 && errno != EINTR) poll(NULL, 0, 10); /* don't spin */
        for (nfds_t p = 1; ready > 0 && p < np; ++p)
            if (pfd[p].revents) stream_read(job, job->pstream[p], 0);
    }
    /* The ranks are gone, so their pipes hold all they wrote; a grandchild
     * still holding one open must not keep us here: read what is there. */
    for (int i = 0; i < job->n; ++i)
        for (int k = 0; k < 2; ++k) stream_read(job, &job->ranks[i].s[k], 1);
}

/* Every rank's environment (build_env); 0, or 1 after saying why not. */
static int build_envs(job_t *job)
{
    for (int i = 0; i < job->n; ++i)
        if (!(job->ranks[i].envp = build_env(job, i))) {
            fprintf(stderr, "xcoll-run: out of memory\n");
            return 1;
        }
    return 0;
}

/* Back to the state before the ranks were started, for a restart: a new
 * store (stale keys of the failed attempt must not be read) and new
 * environments.  0, or 1 after printing why not. */
static int reset_job(job_t *job, int attempt)
{
    for (int i = 0; i < job->n; ++i) {
        free_env(job, job->ranks[i].envp);
        memset(&job->ranks[i], 0, sizeof job->ranks[i]);
        job->ranks[i].s[0].fd = job->ranks[i].s[1].fd = -1;
    }
    job->pgid = 0;
    job->nalive = 0;
    job->exit_code = -1;
    job->stopping = job->killed = 0;
    job->kill_ns = job->giveup_ns = 0;
    xc__store_server_stop(job->srv);
    job->srv = NULL;
    char v[16];
    snprintf(v, sizeof v, "%d", attempt);
    setenv("XCOLL_RESTART_COUNT", v, 1);
    if (start_store(job) != 0) return 1;
    return build_envs(job);
}

int main(int argc, char **argv)
{
    job_t job;
    memset(&job, 0, sizeof job);
    job.exit_code = -1;
    int rc = parse_args(&job, argc, argv);
    if (rc) return rc < 0 ? 0 : rc;
    ensure_std_fds();
    raise_fd_limit();
    if (install_signals() < 0) {
        perror("xcoll-run: signal setup");
        return 1;
    }
    int devnull = -1, attempt = 0;
    rc = 1;
    setenv("XCOLL_RESTART_COUNT", "0", 1);
    job.path = resolve_program(job.argv[0]);
    if (!job.path) {
        fprintf(stderr, "xcoll-run: %s: command not found\n", job.argv[0]);
        rc = 127;
        goto out;
    }
    job.ranks = calloc((size_t)job.n, sizeof *job.ranks);
    job.pfd = calloc(1 + 2 * (size_t)job.n, sizeof *job.pfd);
    job.pstream = calloc(1 + 2 * (size_t)job.n, sizeof *job.pstream);
    devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (!job.ranks || !job.pfd || !job.pstream || devnull < 0) {
        fprintf(stderr, "xcoll-run: setup failed: %s\n", strerror(errno));
        goto out;
    }
    for (int i = 0; i < job.n; ++i) job.ranks[i].s[0].fd = job.ranks[i].s[1].fd = -1;
    long fd_max = sysconf(_SC_OPEN_MAX);
    job.fd_max = fd_max > 0 && fd_max < 65536 ? (int)fd_max : 65536;
    if ((rc = job_token(&job)) != 0) goto out;
    if ((rc = start_store(&job)) != 0) goto out;
    rc = 1;
    if (check_fd_limit(&job) != 0) goto out;
    if (build_envs(&job) != 0) goto out;
    job.end_ns = job.timeout_s > 0
                     ? xc__now_ns() + (uint64_t)(job.timeout_s * 1e9)
                     : UINT64_MAX;
restart:
    assign_cpus(&job); /* reset_job cleared the ranks */
    for (int i = 0; i < job.n; ++i) {
        handle_signals(&job); /* stop starting ranks once told to stop */
        if (job.stopping) break;
        int spawn_rc = spawn_rank(&job, i, devnull);
        if (spawn_rc) {
            if (job.exit_code < 0) job.exit_code = spawn_rc;
            stop_job(&job, SIGTERM);
            break;
        }
    }
    supervise(&job);
    rc = job.exit_code < 0 ? 0 : job.exit_code;
    /* A failed rank (not a timeout, not a signal to us): the whole job again,
     * with a fresh store, the ranks told which attempt this is. */
    if (rc != 0 && rc != 124 && !job.got_signal && attempt < job.max_restarts) {
        attempt++;
        fprintf(stderr, "xcoll-run: the job failed (exit %d); restart %d of %d\n", rc, attempt,
                job.max_restarts);
        if (reset_job(&job, attempt) != 0) {
            rc = 1;
            goto out;
        }
        goto restart;
    }
out:
    xc__store_server_stop(job.srv);
    if (devnull >= 0) close(devnull);
    for (int i = 0; job.ranks && i < job.n; ++i) free_env(&job, job.ranks[i].envp);
    free(job.ranks);
    free(job.pfd);
    free(job.pstream);
    free(job.path);
    return rc;
}
