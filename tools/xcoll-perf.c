/*
 * xcoll-perf.c -- the benchmark of xcoll's collectives, spelled the way
 * nccl-tests is so that its users read it at once: -b/-e/-f sweep the size,
 * -n/-w set the iterations, -d/-o the dtype and reduction, -c checks the
 * results, and each row reports size, count, type, time, algbw, busbw and
 * #wrong.  docs/xcoll-perf.md is the user's guide.
 *
 * Every rank runs this program (started by xcoll-run, torchrun, Slurm or an
 * MPI launcher) and calls xc_comm_init_env; only rank 0 prints.  It uses the
 * public API (include/xcoll.h) and nothing else of the library.
 *
 * Invariants.
 *  - Every rank parses the same command line, so every rank walks the same
 *    sizes and calls the same collectives in the same order.
 *  - Timing: after an xc_barrier, each iteration is timed on its own on every
 *    rank; the per-iteration times are combined (allreduce MAX) only after
 *    the timed loop, so no extra communication sits inside it.  A row reports
 *    the median of those maxima and their spread (p90 - p10) / median.
 *  - "size" follows nccl-tests: the larger of the send and receive buffers in
 *    bytes; "count" is the count argument of the call.  Sizes that round
 *    down to a count of 0, or to the size of the previous row, are skipped.
 *  - Checking (-c 1) runs one extra iteration after the timed ones, on
 *    inputs whose exact result is computable per element (integers wrap
 *    exactly; float inputs are small integers, so sums, products of +-1 and
 *    2, minima and maxima are exact in every float type), and compares every
 *    output element; the wrong counts are summed over ranks.
 *  - Exit status: 0 success, 1 wrong results or an xcoll error, 2 usage.
 */
#include <xcoll.h>

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------ */
/* Tables: data types, reductions, collectives                         */
/* ------------------------------------------------------------------ */

typedef struct dtype_info {
    const char *name;    /* nccl-tests' name, printed in the "type" column */
    const char *alias1;  /* accepted on the command line too */
    const char *alias2;
    xc_dtype_t dt;
    int is_float;
    int is_signed;
} dtype_info_t;

static const dtype_info_t k_dtypes[] = {
    {"int8", "char", NULL, XC_INT8, 0, 1},
    {"uint8", NULL, NULL, XC_UINT8, 0, 0},
    {"int16", NULL, NULL, XC_INT16, 0, 1},
    {"uint16", NULL, NULL, XC_UINT16, 0, 0},
    {"int32", "int", NULL, XC_INT32, 0, 1},
    {"uint32", NULL, NULL, XC_UINT32, 0, 0},
    {"int64", NULL, NULL, XC_INT64, 0, 1},
    {"uint64", NULL, NULL, XC_UINT64, 0, 0},
    {"half", "fp16", "float16", XC_FLOAT16, 1, 1},
    {"bfloat16", "bf16", NULL, XC_BFLOAT16, 1, 1},
    {"float", "fp32", "float32", XC_FLOAT32, 1, 1},
    {"double", "fp64", "float64", XC_FLOAT64, 1, 1},
};
#define NDTYPES (sizeof k_dtypes / sizeof k_dtypes[0])

static const struct {
    const char *name;
    xc_op_t op;
    int ints_only;
} k_ops[] = {
    {"sum", XC_SUM, 0},   {"prod", XC_PROD, 0}, {"min", XC_MIN, 0},   {"max", XC_MAX, 0},
    {"avg", XC_AVG, 0},   {"band", XC_BAND, 1}, {"bor", XC_BOR, 1},   {"bxor", XC_BXOR, 1},
};
#define NOPS (sizeof k_ops / sizeof k_ops[0])

typedef enum coll_id {
    C_ALLREDUCE = 0,
    C_REDUCESCATTER,
    C_ALLGATHER,
    C_BROADCAST,
    C_REDUCE,
    C_ALLTOALL,
    C_SENDRECV,
    C_COUNT
} coll_id_t;

typedef struct coll_info {
    const char *name;     /* as given to -C and printed in the records */
    const char *algo_prefix; /* the library's algorithm names start "<prefix>." */
    int per_rank_blocks;  /* size = count * nranks * esize (else count * esize) */
    int reduces;          /* takes -o */
    int rooted;           /* takes -r */
} coll_info_t;

static const coll_info_t k_colls[C_COUNT] = {
    [C_ALLREDUCE] = {"allreduce", "allreduce", 0, 1, 0},
    [C_REDUCESCATTER] = {"reducescatter", "reduce_scatter", 1, 1, 0},
    [C_ALLGATHER] = {"allgather", "allgather", 1, 0, 0},
    [C_BROADCAST] = {"broadcast", "bcast", 0, 0, 1},
    [C_REDUCE] = {"reduce", "reduce", 0, 1, 1},
    [C_ALLTOALL] = {"alltoall", "alltoall", 1, 0, 0},
    [C_SENDRECV] = {"sendrecv", "p2p", 0, 0, 0},
};

/* nccl-tests' bus bandwidth factors (doc/PERFORMANCE.md). */
static double bus_factor(coll_id_t c, int n)
{
    switch (c) {
    case C_ALLREDUCE: return 2.0 * (n - 1) / n;
    case C_REDUCESCATTER:
    case C_ALLGATHER:
    case C_ALLTOALL: return (double)(n - 1) / n;
    default: return 1.0;
    }
}

/* ------------------------------------------------------------------ */
/* Options                                                             */
/* ------------------------------------------------------------------ */

#define MAX_SIDE 12 /* algorithms of one collective measured side by side */
#define SIDE_ROUNDS 5 /* blocks per algorithm and size when side by side */
#define MAX_ITERS 100000 /* -T stretches -n to at most this many */

typedef struct opts {
    size_t minbytes, maxbytes;
    unsigned long factor;
    int iters, warmup;
    double min_ms;       /* -T: iterations per size stretched to this many ms */
    const dtype_info_t *dtype;
    int op_index;
    int check;
    int inplace;
    int fresh;           /* --fresh: inputs rewritten before each timed call */
    int root;
    int colls[C_COUNT]; /* selected collectives */
    const char *algo;   /* --algo as given */
    char *algo_env;     /* what XCOLL_ALGO was set to (malloc'd) or NULL */
    /* Several algorithms of one collective in --algo: measured side by side
     * (one communicator each, their iterations interleaved); names point
     * into side_buf (malloc'd). */
    const char *side[C_COUNT][MAX_SIDE];
    int nside[C_COUNT];
    char *side_buf;
    const char *csv_path, *json_path; /* "-" = stdout; NULL = off */
    const char *calibrate_path;         /* --calibrate: write a profile, no sweep */
    int xc_buffers;                     /* --buffers xcoll: 1 (xc_mem_alloc),
                                         * shared: 2 (xc_mem_alloc_shared) */
    int p2p_nb;                         /* --p2p nonblocking */
    size_t offset;                      /* --offset B: the receive buffer B
                                         * bytes past a page (or huge page) */
} opts_t;

/* This process's rank as its launcher set it (the variables of
 * xc_comm_init_env, same order), or -1: known before the communicator
 * exists, so that usage errors print once and start-up errors name a rank. */
static int launcher_rank(void)
{
    static const char *const vars[] = {"XCOLL_RANK", "RANK", "SLURM_PROCID",
                                       "OMPI_COMM_WORLD_RANK", "PMI_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) return atoi(v);
    }
    return -1;
}

static int launcher_rank_is_zero(void) { return launcher_rank() <= 0; }

/* Exit with a usage error, which only the first rank prints: the others
 * wait a moment first, or the launcher, seeing one of them fail, could
 * stop the first rank before its message is out (xcoll-run stops the
 * remaining ranks when one exits non-zero). */
__attribute__((noreturn)) static void usage_exit(void)
{
    if (!launcher_rank_is_zero()) {
        struct timespec ts = {0, 300 * 1000000L};
        nanosleep(&ts, NULL);
    }
    exit(2);
}

static void usage(FILE *f)
{
    fprintf(f,
        "usage: xcoll-perf [options]   (every rank runs it, e.g. xcoll-run -n 4 xcoll-perf ...)\n"
        "  -b, --minbytes SIZE      smallest size (default 8); K, M, G suffixes are binary\n"
        "  -e, --maxbytes SIZE      largest size (default 64M)\n"
        "  -f, --stepfactor N       multiply the size by N each step (default 2)\n"
        "  -n, --iters N            timed iterations per size (default 20)\n"
        "  -w, --warmup_iters N     untimed iterations per size first (default 5)\n"
        "  -T, --min-time MS        more timed iterations where -n of them would take less\n"
        "                           than MS milliseconds (the time per call from the warm-up,\n"
        "                           -w >= 1, of the slowest rank; at most 100000;\n"
        "                           default 0: exactly -n)\n"
        "  -d, --datatype T         int8 uint8 int16 uint16 int32 uint32 int64 uint64\n"
        "                           half|fp16 bfloat16|bf16 float|fp32 double|fp64 (default float)\n"
        "  -o, --op OP              sum prod min max avg band bor bxor (default sum)\n"
        "  -c, --check 0|1          check every element of one extra iteration (default 1)\n"
        "  -i, --inplace[=0|1]      -i 1 or --inplace: in-place buffers (default 0, out-of-place)\n"
        "  -r, --root R             root of broadcast and reduce (default 0)\n"
        "  -C, --collective LIST    allreduce reducescatter allgather broadcast reduce\n"
        "                           alltoall sendrecv, comma separated, or all (default allreduce)\n"
        "      --algo NAME          force an algorithm on every rank (sets XCOLL_ALGO): a full\n"
        "                           name such as allreduce.ring, or a bare one (ring) applied to\n"
        "                           every selected collective that has it; several of one\n"
        "                           collective (--algo ring,rhd) are measured side by side: a\n"
        "                           communicator each, their iterations interleaved in blocks,\n"
        "                           a row each (ratios from one run on a noisy machine)\n"
        "      --buffers KIND       malloc (default: posix_memalign, ordinary pages), xcoll\n"
        "                           (xc_mem_alloc: 2 MiB-aligned, transparent huge pages) or\n"
        "                           shared (xc_mem_alloc_shared: node peers map it, memcpy)\n"
        "      --offset B           the receive buffer B bytes (0-4095) past a page boundary\n"
        "                           (default 0), as a tensor view that starts off a cache line\n"
        "      --fresh[=0|1]        before each call (untimed, then a barrier) rewrite every cache\n"
        "                           line of this rank's input, as training does when it computes\n"
        "                           a gradient: a peer must then fetch it from the writer's cache,\n"
        "                           not from its own copy of the last call's (default 0, as\n"
        "                           nccl-tests)\n"
        "      --p2p KIND           how sendrecv exchanges: group (default: xc_group_start,\n"
        "                           xc_send, xc_recv, xc_group_end, as nccl-tests) or\n"
        "                           nonblocking (xc_isend, xc_irecv, xc_request_waitall)\n"
        "      --csv[=FILE]         CSV records to FILE, or to stdout instead of the table\n"
        "      --json[=FILE]        a JSON array of the same records, likewise\n"
        "      --calibrate[=FILE]   measure alpha, beta, gamma for the cost model and write\n"
        "                           the profile (default xcoll-profile.json) instead of a\n"
        "                           sweep; use it with XCOLL_PROFILE=FILE\n"
        "  -h, --help               this text\n");
}

__attribute__((noreturn, format(printf, 1, 2)))
static void usage_error(const char *fmt, ...)
{
    if (launcher_rank_is_zero()) {
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "xcoll-perf: ");
        vfprintf(stderr, fmt, ap);
        fprintf(stderr, "\n");
        va_end(ap);
        usage(stderr);
    }
    usage_exit();
}

/* "64M" -> 67108864.  Binary suffixes K, M, G (optionally followed by B). */
static size_t parse_size(const char *opt, const char *s)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || errno || *s == '-') usage_error("%s: bad size \"%s\"", opt, s);
    unsigned shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    default: break;
    }
    if (*end == 'B' || *end == 'b') end++;
    if (*end) usage_error("%s: bad size \"%s\"", opt, s);
    if (shift && v > (SIZE_MAX >> shift)) usage_error("%s: size \"%s\" too large", opt, s);
    return (size_t)(v << shift);
}

static long parse_int(const char *opt, const char *s, long lo, long hi)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno || v < lo || v > hi)
        usage_error("%s: expected an integer in [%ld, %ld], got \"%s\"", opt, lo, hi, s);
    return v;
}

/* "reduce_scatter" and "reducescatter" are the same name. */
static int name_eq(const char *a, const char *b)
{
    for (;;) {
        while (*a == '_' || *a == '-') a++;
        while (*b == '_' || *b == '-') b++;
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b)) return 0;
        if (!*a) return 1;
        a++, b++;
    }
}

static void parse_collectives(opts_t *o, const char *list)
{
    memset(o->colls, 0, sizeof o->colls);
    char *copy = strdup(list);
    if (!copy) usage_error("out of memory");
    for (char *save = NULL, *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (!strcasecmp(t, "all")) {
            for (int c = 0; c < C_COUNT; c++) o->colls[c] = 1;
            continue;
        }
        int found = -1;
        for (int c = 0; c < C_COUNT; c++)
            if (name_eq(t, k_colls[c].name)) found = c;
        if (found < 0 && name_eq(t, "bcast")) found = C_BROADCAST;
        if (found < 0) usage_error("-C: unknown collective \"%s\"", t);
        o->colls[found] = 1;
    }
    free(copy);
    int any = 0;
    for (int c = 0; c < C_COUNT; c++) any |= o->colls[c];
    if (!any) usage_error("-C: no collective given");
}

/* The algorithm names the library knows (ids 0 .. XC_STATS_MAX_ALGOS-1). */
static int algo_known(const char *name)
{
    for (int id = 0; id < XC_STATS_MAX_ALGOS; id++) {
        const char *n = xc_algo_name(id);
        if (n && !strcmp(n, name)) return 1;
    }
    return 0;
}

static void list_algos(FILE *f)
{
    fprintf(f, "known algorithms:");
    for (int id = 0; id < XC_STATS_MAX_ALGOS; id++) {
        const char *n = xc_algo_name(id);
        if (n && strcmp(n, "p2p")) fprintf(f, " %s", n);
    }
    fprintf(f, "\n");
}

/* Turn --algo into the value of XCOLL_ALGO: a comma separated list of full
 * names passes through (checked); a bare name "ring" becomes
 * "<coll>.ring" for every selected collective that has such an algorithm. */
static void resolve_algo(opts_t *o)
{
    size_t cap = 64 + strlen(o->algo) * (C_COUNT + 1) + 32 * C_COUNT;
    char *env = calloc(1, cap);
    if (!env) usage_error("out of memory");
    char *copy = strdup(o->algo);
    if (!copy) usage_error("out of memory");
    for (char *save = NULL, *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int added = 0;
        if (strchr(t, '.')) {
            if (algo_known(t)) {
                if (*env) strcat(env, ",");
                strcat(env, t);
                added = 1;
            }
        } else {
            for (int c = 0; c < C_COUNT; c++) {
                char full[128];
                if (!o->colls[c]) continue;
                snprintf(full, sizeof full, "%s.%s", k_colls[c].algo_prefix, t);
                if (!algo_known(full)) continue;
                if (*env) strcat(env, ",");
                strcat(env, full);
                added = 1;
            }
        }
        if (!added) {
            if (launcher_rank_is_zero()) {
                fprintf(stderr, "xcoll-perf: --algo: no algorithm \"%s\" for the selected "
                                "collective(s)\n", t);
                list_algos(stderr);
            }
            free(copy);
            free(env);
            usage_exit();
        }
    }
    free(copy);
    o->algo_env = env;
    /* A copy of env split into the algorithms of each collective (the
     * world communicator, made with all of them in XCOLL_ALGO, would run
     * the last of each; side by side, each gets a communicator of its
     * own). */
    char *list = strdup(env);
    if (!list) usage_error("out of memory");
    o->side_buf = list; /* kept for the run (and reachable if we exit early) */
    for (char *save = NULL, *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save))
        for (int c = 0; c < C_COUNT; c++) {
            size_t n = strlen(k_colls[c].algo_prefix);
            if (strncmp(t, k_colls[c].algo_prefix, n) || t[n] != '.') continue;
            int dup = 0;
            for (int i = 0; i < o->nside[c]; i++) dup |= !strcmp(o->side[c][i], t);
            if (dup) break;
            if (o->nside[c] == MAX_SIDE) usage_error("--algo: at most %d algorithms of one "
                                                     "collective", MAX_SIDE);
            o->side[c][o->nside[c]++] = t;
            break;
        }
}

static void parse_args(opts_t *o, int argc, char **argv)
{
    enum {
        OPT_ALGO = 256, OPT_CSV, OPT_JSON, OPT_INPLACE, OPT_CALIBRATE, OPT_BUFFERS, OPT_FRESH,
        OPT_P2P, OPT_OFFSET
    };
    static const struct option longopts[] = {
        {"minbytes", required_argument, NULL, 'b'},
        {"maxbytes", required_argument, NULL, 'e'},
        {"stepfactor", required_argument, NULL, 'f'},
        {"iters", required_argument, NULL, 'n'},
        {"warmup_iters", required_argument, NULL, 'w'},
        {"min-time", required_argument, NULL, 'T'},
        {"datatype", required_argument, NULL, 'd'},
        {"op", required_argument, NULL, 'o'},
        {"check", required_argument, NULL, 'c'},
        {"inplace", optional_argument, NULL, OPT_INPLACE},
        {"root", required_argument, NULL, 'r'},
        {"collective", required_argument, NULL, 'C'},
        {"algo", required_argument, NULL, OPT_ALGO},
        {"csv", optional_argument, NULL, OPT_CSV},
        {"json", optional_argument, NULL, OPT_JSON},
        {"calibrate", optional_argument, NULL, OPT_CALIBRATE},
        {"buffers", required_argument, NULL, OPT_BUFFERS},
        {"offset", required_argument, NULL, OPT_OFFSET},
        {"fresh", optional_argument, NULL, OPT_FRESH},
        {"p2p", required_argument, NULL, OPT_P2P},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    memset(o, 0, sizeof *o);
    o->minbytes = 8;
    o->maxbytes = (size_t)64 << 20;
    o->factor = 2;
    o->iters = 20;
    o->warmup = 5;
    o->dtype = &k_dtypes[10]; /* float */
    o->op_index = 0;          /* sum */
    o->check = 1;
    o->colls[C_ALLREDUCE] = 1;

    opterr = 0; /* we print our own message */
    int ch;
    while ((ch = getopt_long(argc, argv, ":b:e:f:n:w:T:d:o:c:i:r:C:h", longopts, NULL)) != -1) {
        switch (ch) {
        case 'b': o->minbytes = parse_size("-b", optarg); break;
        case 'e': o->maxbytes = parse_size("-e", optarg); break;
        case 'f': o->factor = (unsigned long)parse_int("-f", optarg, 1, 1 << 20); break;
        case 'n': o->iters = (int)parse_int("-n", optarg, 1, 1000000); break;
        case 'w': o->warmup = (int)parse_int("-w", optarg, 0, 1000000); break;
        case 'T': o->min_ms = (double)parse_int("-T", optarg, 0, 600000); break;
        case 'c': o->check = (int)parse_int("-c", optarg, 0, 1); break;
        case 'i': o->inplace = (int)parse_int("-i", optarg, 0, 1); break;
        case 'r': o->root = (int)parse_int("-r", optarg, 0, 1 << 30); break;
        case 'C': parse_collectives(o, optarg); break;
        case 'd': {
            const dtype_info_t *found = NULL;
            for (size_t i = 0; i < NDTYPES; i++) {
                const dtype_info_t *d = &k_dtypes[i];
                if (!strcasecmp(optarg, d->name) || (d->alias1 && !strcasecmp(optarg, d->alias1)) ||
                    (d->alias2 && !strcasecmp(optarg, d->alias2)))
                    found = d;
            }
            if (!found) usage_error("-d: unknown data type \"%s\"", optarg);
            o->dtype = found;
            break;
        }
        case 'o': {
            int found = -1;
            for (size_t i = 0; i < NOPS; i++)
                if (!strcasecmp(optarg, k_ops[i].name)) found = (int)i;
            if (found < 0) usage_error("-o: unknown reduction \"%s\"", optarg);
            o->op_index = found;
            break;
        }
        case OPT_INPLACE: o->inplace = optarg ? (int)parse_int("--inplace", optarg, 0, 1) : 1; break;
        case OPT_FRESH: o->fresh = optarg ? (int)parse_int("--fresh", optarg, 0, 1) : 1; break;
        case OPT_ALGO: o->algo = optarg; break;
        case OPT_CSV: o->csv_path = optarg ? optarg : "-"; break;
        case OPT_JSON: o->json_path = optarg ? optarg : "-"; break;
        case OPT_OFFSET: o->offset = (size_t)parse_int("--offset", optarg, 0, 4095); break;
        case OPT_BUFFERS:
            if (strcmp(optarg, "malloc") && strcmp(optarg, "xcoll") && strcmp(optarg, "shared"))
                usage_error("--buffers: \"%s\" is none of malloc, xcoll, shared", optarg);
            o->xc_buffers = !strcmp(optarg, "xcoll") ? 1 : !strcmp(optarg, "shared") ? 2 : 0;
            break;
        case OPT_P2P:
            if (strcmp(optarg, "group") && strcmp(optarg, "nonblocking"))
                usage_error("--p2p: \"%s\" is neither group nor nonblocking", optarg);
            o->p2p_nb = !strcmp(optarg, "nonblocking");
            break;
        case OPT_CALIBRATE:
            o->calibrate_path = optarg && *optarg ? optarg : "xcoll-profile.json";
            break;
        case 'h':
            if (launcher_rank_is_zero()) usage(stdout);
            exit(0);
        case ':': usage_error("option %s needs a value", argv[optind - 1]);
        default:
            if (optopt) usage_error("unknown option -%c", optopt);
            usage_error("unknown option %s", argv[optind - 1]);
        }
    }
    if (optind < argc) usage_error("unexpected argument \"%s\"", argv[optind]);
    if (o->minbytes > o->maxbytes) usage_error("-b %zu is larger than -e %zu", o->minbytes,
                                               o->maxbytes);
    if (o->factor < 2 && o->minbytes != o->maxbytes)
        usage_error("-f must be at least 2 (or -b equal to -e)");
    if (k_ops[o->op_index].ints_only && o->dtype->is_float) {
        int reduces = 0;
        for (int c = 0; c < C_COUNT; c++) reduces |= o->colls[c] && k_colls[c].reduces;
        if (reduces)
            usage_error("-o %s is defined for integer types only, not %s",
                        k_ops[o->op_index].name, o->dtype->name);
    }
    if (o->min_ms > 0 && o->warmup < 1)
        usage_error("-T estimates the time per call from the warm-up: it needs -w 1 or more");
    if (o->calibrate_path && (o->algo || o->csv_path || o->json_path))
        usage_error("--calibrate measures the machine, not a sweep: it takes no --algo, "
                    "--csv or --json");
    if (o->csv_path && o->json_path && !strcmp(o->csv_path, "-") && !strcmp(o->json_path, "-"))
        usage_error("--csv and --json cannot both go to stdout; give one a file (--csv=FILE)");
    if (o->algo) resolve_algo(o);
}

/* ------------------------------------------------------------------ */
/* Errors from xcoll                                                   */
/* ------------------------------------------------------------------ */

static xc_comm_t *g_comm;
static int g_rank = -1;

__attribute__((noreturn))
static void die_xc(const char *what, xc_result_t rc)
{
    const char *detail = g_comm ? xc_comm_last_error(g_comm) : xc_last_error();
    if (!detail || !*detail) detail = xc_last_error();
    if (!detail || !*detail) detail = xc_strerror(rc);
    fprintf(stderr, "xcoll-perf: rank %d: %s failed: %s: %s\n", g_rank, what, xc_err_name(rc),
            detail);
    fflush(stderr);
    if (g_comm) xc_comm_abort(g_comm); /* peers fail promptly instead of timing out */
    exit(1);
}

#define XC(call)                                   \
    do {                                           \
        xc_result_t rc_ = (call);                  \
        if (rc_ != XC_OK) die_xc(#call, rc_);      \
    } while (0)

static void *xmalloc(size_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, 4096, n ? n : 1)) {
        fprintf(stderr, "xcoll-perf: rank %d: out of memory (%zu bytes)\n", g_rank, n);
        exit(1);
    }
    return p;
}

/* A benchmark buffer: from xc_mem_alloc (--buffers xcoll), from
 * xc_mem_alloc_shared (shared) or xmalloc. */
static void *buf_alloc(size_t n, int xc)
{
    void *p = NULL;
    if (!xc) return xmalloc(n);
    if (xc == 2)
        XC(xc_mem_alloc_shared(n ? n : 1, &p));
    else
        XC(xc_mem_alloc(n ? n : 1, &p));
    return p;
}
static void buf_free(void *p, int xc)
{
    if (xc) XC(xc_mem_free(p));
    else free(p);
}

/* ------------------------------------------------------------------ */
/* Element encoding: fp16 / bf16 by hand, round to nearest even        */
/* ------------------------------------------------------------------ */

static uint16_t f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return sign | 0x7e00;      /* NaN */
    if (ax >= 0x477ff000u) return sign | 0x7c00;     /* >= 65520 rounds to inf */
    if (ax < 0x38800000u) {                          /* below 2^-14: subnormal */
        float a;
        memcpy(&a, &ax, 4);
        return sign | (uint16_t)lrintf(a * 16777216.0f); /* units of 2^-24, RNE */
    }
    uint32_t h = ((((ax >> 23) - 127 + 15) << 10) | ((ax & 0x7fffffu) >> 13));
    uint32_t rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++;
    return sign | (uint16_t)h;
}

static double f16_to_double(uint16_t h)
{
    int e = (h >> 10) & 0x1f;
    int m = h & 0x3ff;
    double v;
    if (e == 0) v = ldexp(m, -24);
    else if (e == 31) v = m ? NAN : INFINITY;
    else v = ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

static uint16_t f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);
    x += 0x7fffu + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

static double bf16_to_double(uint16_t b)
{
    uint32_t x = (uint32_t)b << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

/* Store the low bits of `bits` as element k. */
static void put_bits(void *buf, size_t k, size_t esize, uint64_t bits)
{
    switch (esize) {
    case 1: ((uint8_t *)buf)[k] = (uint8_t)bits; break;
    case 2: ((uint16_t *)buf)[k] = (uint16_t)bits; break;
    case 4: ((uint32_t *)buf)[k] = (uint32_t)bits; break;
    default: ((uint64_t *)buf)[k] = bits; break;
    }
}

static uint64_t get_bits(const void *buf, size_t k, size_t esize)
{
    switch (esize) {
    case 1: return ((const uint8_t *)buf)[k];
    case 2: return ((const uint16_t *)buf)[k];
    case 4: return ((const uint32_t *)buf)[k];
    default: return ((const uint64_t *)buf)[k];
    }
}

/* A float value's encoding in dtype `dt`. */
static uint64_t float_bits(xc_dtype_t dt, double v)
{
    switch (dt) {
    case XC_FLOAT16: return f32_to_f16((float)v);
    case XC_BFLOAT16: return f32_to_bf16((float)v);
    case XC_FLOAT32: {
        float f = (float)v;
        uint32_t x;
        memcpy(&x, &f, 4);
        return x;
    }
    default: {
        uint64_t x;
        memcpy(&x, &v, 8);
        return x;
    }
    }
}

static double float_value(xc_dtype_t dt, uint64_t bits)
{
    switch (dt) {
    case XC_FLOAT16: return f16_to_double((uint16_t)bits);
    case XC_BFLOAT16: return bf16_to_double((uint16_t)bits);
    case XC_FLOAT32: {
        uint32_t x = (uint32_t)bits;
        float f;
        memcpy(&f, &x, 4);
        return f;
    }
    default: {
        double d;
        memcpy(&d, &bits, 8);
        return d;
    }
    }
}

/* ------------------------------------------------------------------ */
/* Input pattern and expected results                                  */
/* ------------------------------------------------------------------ */

/* What a benchmark of one (collective, dtype, op) needs to know. */
typedef struct bench {
    coll_id_t coll;
    const dtype_info_t *dt;
    xc_op_t op;
    int rank, nranks, root, inplace;
    int p2p_nb; /* sendrecv as xc_isend + xc_irecv + xc_request_waitall */
    size_t esize;
    unsigned width; /* bits per element */
} bench_t;

static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Element k of rank r's input, as a small integer for float types. */
static double float_input(const bench_t *b, int r, size_t k)
{
    uint64_t h = mix64(((uint64_t)(unsigned)r << 40) ^ k);
    int reduces = k_colls[b->coll].reduces;
    if (reduces && (b->op == XC_SUM || b->op == XC_AVG))
        return (double)(int)(h % 9) - 4;           /* |sum| <= 4N: exact to bf16 for N <= 64 */
    if (reduces && b->op == XC_PROD)
        return h % 16 == 0 ? 2.0 : (h % 5 == 0 ? -1.0 : 1.0); /* +-2^j: exact or inf */
    return (double)(int)(h % 201) - 100;           /* exact in every float type */
}

/* Element k of rank r's input, as its encoding in the buffer. */
static uint64_t input_bits(const bench_t *b, int r, size_t k)
{
    if (b->dt->is_float) return float_bits(b->dt->dt, float_input(b, r, k));
    return mix64(((uint64_t)(unsigned)r << 40) ^ k ^ 0x5bd1e995ull);
}

static uint64_t mask_of(unsigned width) { return width >= 64 ? ~0ull : (1ull << width) - 1; }

static int64_t sign_extend(uint64_t bits, unsigned width)
{
    if (width >= 64) return (int64_t)bits;
    uint64_t m = 1ull << (width - 1);
    bits &= mask_of(width);
    return (int64_t)((bits ^ m) - m);
}

/* Expected reduction over ranks of input element k, with the semantics of
 * xcoll.h: integers wrap, avg divides the wrapped sum truncating toward
 * zero.  For floats, *value gets the exact result (avg: sum / N). */
static uint64_t expected_reduction(const bench_t *b, size_t k, double *value)
{
    int n = b->nranks;
    if (b->dt->is_float) {
        double acc = float_input(b, 0, k);
        for (int r = 1; r < n; r++) {
            double v = float_input(b, r, k);
            switch (b->op) {
            case XC_SUM:
            case XC_AVG: acc += v; break;
            case XC_PROD: acc *= v; break;
            case XC_MIN: acc = v < acc ? v : acc; break;
            default: acc = v > acc ? v : acc; break;
            }
        }
        if (b->op == XC_AVG) acc /= n;
        *value = acc;
        return float_bits(b->dt->dt, acc);
    }
    unsigned w = b->width;
    uint64_t m = mask_of(w);
    uint64_t acc = input_bits(b, 0, k) & m;
    for (int r = 1; r < n; r++) {
        uint64_t v = input_bits(b, r, k) & m;
        switch (b->op) {
        case XC_SUM:
        case XC_AVG: acc += v; break;
        case XC_PROD: acc *= v; break;
        case XC_MIN:
        case XC_MAX: {
            int less = b->dt->is_signed ? sign_extend(v, w) < sign_extend(acc, w) : v < (acc & m);
            if (less == (b->op == XC_MIN)) acc = v;
            break;
        }
        case XC_BAND: acc &= v; break;
        case XC_BOR: acc |= v; break;
        default: acc ^= v; break;
        }
        acc &= m;
    }
    if (b->op == XC_AVG) {
        if (b->dt->is_signed) acc = (uint64_t)(sign_extend(acc, w) / n);
        else acc = acc / (uint64_t)n;
    }
    *value = 0;
    return acc & m;
}

/* Relative tolerance of a float average: the library divides a rounded sum,
 * possibly rounding twice (fp32, then fp16/bf16). */
static double avg_tolerance(xc_dtype_t dt)
{
    switch (dt) {
    case XC_FLOAT16: return 1.0 / 1024;
    case XC_BFLOAT16: return 1.0 / 128;
    case XC_FLOAT32: return 1.0 / (1 << 22);
    default: return 1e-14;
    }
}

/* Is output element `got` equal to the expected bits / value? */
static int element_ok(const bench_t *b, uint64_t got, uint64_t want, double want_value,
                      int reduced)
{
    uint64_t m = mask_of(b->width);
    if (!b->dt->is_float) return (got & m) == (want & m);
    double g = float_value(b->dt->dt, got);
    if (reduced && b->op == XC_AVG) {
        double scale = fabs(want_value) > 1 ? fabs(want_value) : 1;
        return fabs(g - want_value) <= avg_tolerance(b->dt->dt) * scale;
    }
    return g == float_value(b->dt->dt, want); /* by value: +0 == -0 */
}

/* ------------------------------------------------------------------ */
/* Buffers and one call of the collective                              */
/* ------------------------------------------------------------------ */

typedef struct bufs {
    char *send, *recv; /* each holds -e bytes */
} bufs_t;

/* Where the input and the output live for this mode (see xcoll.h on the
 * in-place spelling of each collective). */
static void regions(const bench_t *b, const bufs_t *B, size_t count, char **in, size_t *in_count,
                    char **out, size_t *out_count)
{
    size_t n = (size_t)b->nranks, es = b->esize, me = (size_t)b->rank;
    int ip = b->inplace;
    switch (b->coll) {
    case C_ALLREDUCE:
    case C_REDUCE:
        *in = ip ? B->recv : B->send, *in_count = count;
        *out = B->recv, *out_count = count;
        break;
    case C_REDUCESCATTER:
        *in = B->send, *in_count = n * count;
        *out = ip ? B->send + me * count * es : B->recv, *out_count = count;
        break;
    case C_ALLGATHER:
        *in = ip ? B->recv + me * count * es : B->send, *in_count = count;
        *out = B->recv, *out_count = n * count;
        break;
    case C_BROADCAST:
        *in = B->recv, *in_count = count;
        *out = B->recv, *out_count = count;
        break;
    case C_ALLTOALL:
        *in = ip ? B->recv : B->send, *in_count = n * count;
        *out = B->recv, *out_count = n * count;
        break;
    default: /* sendrecv: always out of place */
        *in = B->send, *in_count = count;
        *out = B->recv, *out_count = count;
        break;
    }
}

static xc_result_t run_once(xc_comm_t *c, const bench_t *b, const bufs_t *B, size_t count)
{
    xc_dtype_t dt = b->dt->dt;
    char *in, *out;
    size_t nin, nout;
    regions(b, B, count, &in, &nin, &out, &nout);
    switch (b->coll) {
    case C_ALLREDUCE: return xc_allreduce(in, out, count, dt, b->op, c);
    case C_REDUCESCATTER: return xc_reduce_scatter(in, out, count, dt, b->op, c);
    case C_ALLGATHER: return xc_allgather(in, out, count, dt, c);
    case C_BROADCAST: return xc_bcast(out, count, dt, b->root, c);
    case C_REDUCE: return xc_reduce(in, out, count, dt, b->op, b->root, c);
    case C_ALLTOALL: return xc_alltoall(in, out, count, dt, c);
    default: {
        int n = b->nranks;
        if (b->p2p_nb) {
            xc_request_t *q[2] = {NULL, NULL};
            xc_result_t rs = xc_isend(in, count, dt, (b->rank + 1) % n, 0, c, &q[0]);
            xc_result_t rr = xc_irecv(out, count, dt, (b->rank + n - 1) % n, 0, c, &q[1]);
            xc_result_t rc = xc_request_waitall(q, 2);
            xc_request_free(q[0]);
            xc_request_free(q[1]);
            return rs != XC_OK ? rs : rr != XC_OK ? rr : rc;
        }
        xc_result_t rc = xc_group_start();
        if (rc != XC_OK) return rc;
        xc_result_t rs = xc_send(in, count, dt, (b->rank + 1) % n, 0, c);
        xc_result_t rr = xc_recv(out, count, dt, (b->rank + n - 1) % n, 0, c);
        rc = xc_group_end();
        if (rs != XC_OK) return rs;
        if (rr != XC_OK) return rr;
        return rc;
    }
    }
}

/* run_once, exiting with the library's diagnosis if it fails. */
static void run_checked(xc_comm_t *c, const bench_t *b, const bufs_t *B, size_t count)
{
    xc_result_t rc = run_once(c, b, B, count);
    if (rc != XC_OK) {
        char what[128];
        size_t blocks = k_colls[b->coll].per_rank_blocks ? (size_t)b->nranks : 1;
        snprintf(what, sizeof what, "%s of %zu bytes (count %zu, %s)", k_colls[b->coll].name,
                 count * b->esize * blocks, count, b->dt->name);
        die_xc(what, rc);
    }
}

/* Fill the input of this rank (and, for a broadcast, only the root's). */
static void fill_inputs(const bench_t *b, const bufs_t *B, size_t count)
{
    char *in, *out;
    size_t nin, nout;
    regions(b, B, count, &in, &nin, &out, &nout);
    if (b->coll == C_BROADCAST && b->rank != b->root) return;
    for (size_t k = 0; k < nin; k++) put_bits(in, k, b->esize, input_bits(b, b->rank, k));
}

/* --fresh: dirty every cache line of this rank's input in its own cache
 * (the values stay), so that a peer reading it next meets the state a
 * freshly computed input is in -- not its own cached copy of the last
 * call's, which an unchanged send buffer lets it keep.  A barrier follows
 * (untimed): only the root of a broadcast has an input to write, and the
 * other ranks' clocks would otherwise run while they wait for it. */
static void touch_inputs(const bench_t *b, const bufs_t *B, size_t count)
{
    char *in, *out;
    size_t nin, nout;
    regions(b, B, count, &in, &nin, &out, &nout);
    if (b->coll == C_BROADCAST && b->rank != b->root) return;
    volatile char *p = in;
    for (size_t i = 0, n = nin * b->esize; i < n; i += 64) p[i] = p[i];
}

static void fresh_inputs(xc_comm_t *c, const bench_t *b, const bufs_t *B, size_t count)
{
    touch_inputs(b, B, count);
    XC(xc_barrier(c));
}

/* Poison the output, then write the input (which may lie inside it). */
static void prepare_check(const bench_t *b, const bufs_t *B, size_t count)
{
    char *in, *out;
    size_t nin, nout;
    regions(b, B, count, &in, &nin, &out, &nout);
    memset(out, 0xa5, nout * b->esize);
    fill_inputs(b, B, count);
}

/* Number of wrong output elements on this rank. */
static int64_t check_outputs(const bench_t *b, const bufs_t *B, size_t count)
{
    char *in, *out;
    size_t nin, nout;
    regions(b, B, count, &in, &nin, &out, &nout);
    int n = b->nranks, me = b->rank;
    size_t es = b->esize;
    int64_t wrong = 0;
    if (b->coll == C_REDUCE && me != b->root) return 0;
    for (size_t k = 0; k < nout; k++) {
        uint64_t want;
        double want_value = 0;
        int reduced = 0;
        switch (b->coll) {
        case C_ALLREDUCE:
        case C_REDUCE:
            want = expected_reduction(b, k, &want_value), reduced = 1;
            break;
        case C_REDUCESCATTER:
            want = expected_reduction(b, (size_t)me * count + k, &want_value), reduced = 1;
            break;
        case C_ALLGATHER: want = input_bits(b, (int)(k / count), k % count); break;
        case C_BROADCAST: want = input_bits(b, b->root, k); break;
        case C_ALLTOALL:
            want = input_bits(b, (int)(k / count), (size_t)me * count + k % count);
            break;
        default: want = input_bits(b, (me + n - 1) % n, k); break;
        }
        if (!element_ok(b, get_bits(out, k, es), want, want_value, reduced)) wrong++;
    }
    return wrong;
}

/* ------------------------------------------------------------------ */
/* Measurement of one size                                             */
/* ------------------------------------------------------------------ */

typedef struct row {
    size_t bytes, count;
    double time_us, algbw, busbw, spread_pct;
    double mean_us; /* the slowest rank's mean time per iteration (nccl-tests' "time") */
    int64_t wrong; /* -1: not checked */
    int iters;     /* timed iterations (-n, or more with -T) */
    char algo[160];
} row_t;

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Percentile q in [0, 1] of sorted v[0..n), interpolating linearly. */
static double percentile(const double *v, int n, double q)
{
    double pos = q * (n - 1);
    int i = (int)pos;
    if (i >= n - 1) return v[n - 1];
    return v[i] + (pos - i) * (v[i + 1] - v[i]);
}

/* Names of the algorithms whose counters moved between two snapshots. */
static void algo_delta(const xc_stats_t *s0, const xc_stats_t *s1, char *out, size_t cap)
{
    out[0] = '\0';
    for (int id = 0; id < XC_STATS_MAX_ALGOS; id++) {
        if (s1->algo_ops[id] == s0->algo_ops[id]) continue;
        const char *name = xc_algo_name(id);
        char unknown[32];
        if (!name) snprintf(unknown, sizeof unknown, "algo%d", id), name = unknown;
        /* No collective measured here is a barrier: those are --fresh's. */
        if (!strncmp(name, "barrier.", 8)) continue;
        size_t len = strlen(out);
        snprintf(out + len, cap - len, "%s%s", len ? "+" : "", name);
    }
    if (!out[0]) snprintf(out, cap, "-");
}

/* Timed iterations for one size: -n, or with -T as many as fill o->min_ms
 * at the warm-up's time per call of the fastest of the k communicators
 * (side by side, slower algorithms run longer), as the slowest rank saw it
 * (a rank of a rooted collective that only sends returns early), agreed by
 * one all-reduce so that all ranks run the same number of calls. */
static int iterations(xc_comm_t *const *comms, const opts_t *o, double per_call_us)
{
    XC(xc_allreduce(&per_call_us, &per_call_us, 1, XC_FLOAT64, XC_MAX, comms[0]));
    int64_t n = o->iters;
    if (o->min_ms > 0 && per_call_us > 0) {
        double want = o->min_ms * 1000.0 / per_call_us;
        if (want > MAX_ITERS) want = MAX_ITERS;
        if (want > (double)n) n = (int64_t)want;
    }
    return (int)n;
}

/* Measure one size on each of the k communicators (k > 1: algorithms
 * side by side).  Their iterations are interleaved in SIDE_ROUNDS blocks,
 * each after one untimed call, so every algorithm meets the machine's
 * slow and fast spells alike (small-message latency here switches between
 * modes ~1.3x apart every ~100 ms) while each block still runs back to
 * back as a single-algorithm run does.  *times (k * iterations, grown as
 * -T needs; *cap doubles held) receives the per-call times. */
static void measure(xc_comm_t *const *comms, int k, const bench_t *b, const opts_t *o,
                    const bufs_t *B, size_t count, double **times_p, size_t *cap, row_t *rows)
{
    fill_inputs(b, B, count);
    double fastest = 0;
    for (int j = 0; j < k; j++) {
        double spent = 0; /* in the calls only, not in --fresh's writing */
        for (int i = 0; i < o->warmup; i++) {
            if (o->fresh) fresh_inputs(comms[j], b, B, count);
            double t0 = now_us();
            run_checked(comms[j], b, B, count);
            spent += now_us() - t0;
        }
        double per = o->warmup ? spent / o->warmup : 0;
        if (j == 0 || per < fastest) fastest = per;
    }
    int iters = iterations(comms, o, fastest);
    if ((size_t)iters * (size_t)k > *cap) {
        *cap = (size_t)iters * (size_t)k;
        free(*times_p);
        *times_p = xmalloc(*cap * sizeof **times_p);
    }
    double *times = *times_p;

    xc_stats_t s0[MAX_SIDE], s1;
    s1.size = sizeof(xc_stats_t);
    for (int j = 0; j < k; j++) {
        s0[j].size = sizeof(xc_stats_t);
        XC(xc_barrier(comms[j]));
        XC(xc_comm_stats(comms[j], &s0[j]));
    }
    int blocks = k > 1 ? (iters < SIDE_ROUNDS ? iters : SIDE_ROUNDS) : 1;
    for (int r = 0; r < blocks; r++) {
        int lo = (int)((long)iters * r / blocks), hi = (int)((long)iters * (r + 1) / blocks);
        for (int j = 0; j < k; j++) {
            if (k > 1) run_checked(comms[j], b, B, count);
            for (int i = lo; i < hi; i++) {
                if (o->fresh) fresh_inputs(comms[j], b, B, count);
                double t0 = now_us();
                run_checked(comms[j], b, B, count);
                times[(size_t)j * iters + i] = now_us() - t0;
            }
        }
    }
    for (int j = 0; j < k; j++) {
        row_t *row = &rows[j];
        double *t = times + (size_t)j * iters;
        row->iters = iters;
        XC(xc_comm_stats(comms[j], &s1));
        algo_delta(&s0[j], &s1, row->algo, sizeof row->algo);
        /* Each rank's own mean first (a throughput: with more ranks than
         * cores the ranks run in bursts, and the median of per-iteration
         * maxima then counts a rank's descheduling in nearly every
         * iteration), then the per-iteration maxima. */
        double mean = 0;
        for (int i = 0; i < iters; i++) mean += t[i];
        mean = iters ? mean / iters : 0;
        XC(xc_allreduce(&mean, &mean, 1, XC_FLOAT64, XC_MAX, comms[j]));
        row->mean_us = mean;
        XC(xc_allreduce(t, t, (size_t)iters, XC_FLOAT64, XC_MAX, comms[j]));
        qsort(t, (size_t)iters, sizeof *t, cmp_double);

        double med = percentile(t, iters, 0.5);
        double p10 = percentile(t, iters, 0.1), p90 = percentile(t, iters, 0.9);
        row->time_us = med;
        row->spread_pct = med > 0 ? (p90 - p10) / med * 100.0 : 0;
        row->algbw = med > 0 ? (double)row->bytes / (med * 1e-6) / 1e9 : 0;
        row->busbw = row->algbw * bus_factor(b->coll, b->nranks);

        row->wrong = -1;
        if (o->check) {
            prepare_check(b, B, count);
            run_checked(comms[j], b, B, count);
            int64_t wrong = check_outputs(b, B, count);
            XC(xc_allreduce(&wrong, &wrong, 1, XC_INT64, XC_SUM, comms[j]));
            row->wrong = wrong;
        }
    }
}

/* ------------------------------------------------------------------ */
/* Output                                                              */
/* ------------------------------------------------------------------ */

typedef struct out {
    int table;         /* print the human table on stdout */
    FILE *csv, *json;
    int json_rows;
} out_t;

static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        if ((unsigned char)*s < 0x20) fprintf(f, "\\u%04x", *s);
        else fputc(*s, f);
    }
    fputc('"', f);
}

static void emit_record(out_t *O, const bench_t *b, const row_t *r)
{
    const char *coll = k_colls[b->coll].name;
    const char *op = k_colls[b->coll].reduces ? xc_op_name(b->op) : "none";
    int inplace = b->coll == C_BROADCAST ? 1 : b->coll == C_SENDRECV ? 0 : b->inplace;
    if (O->csv) {
        fprintf(O->csv, "%s,%zu,%zu,%s,%s,%s,%.3f,%.6f,%.6f,%" PRId64 ",%.2f,%d,%d,%d,%.3f\n",
                coll, r->bytes, r->count, b->dt->name, op, r->algo, r->time_us, r->algbw,
                r->busbw, r->wrong, r->spread_pct, b->nranks, inplace, r->iters, r->mean_us);
        fflush(O->csv);
    }
    if (O->json) {
        FILE *f = O->json;
        fprintf(f, "%s\n  {\"collective\": ", O->json_rows++ ? "," : "");
        json_string(f, coll);
        fprintf(f, ", \"size\": %zu, \"count\": %zu, \"type\": ", r->bytes, r->count);
        json_string(f, b->dt->name);
        fprintf(f, ", \"op\": ");
        json_string(f, op);
        fprintf(f, ", \"algo\": ");
        json_string(f, r->algo);
        fprintf(f,
                ", \"time_us\": %.3f, \"algbw_gbs\": %.6f, \"busbw_gbs\": %.6f, \"wrong\": %" PRId64
                ", \"spread_pct\": %.2f, \"nranks\": %d, \"inplace\": %d, \"iters\": %d"
                ", \"mean_us\": %.3f}",
                r->time_us, r->algbw, r->busbw, r->wrong, r->spread_pct, b->nranks, inplace,
                r->iters, r->mean_us);
        fflush(f);
    }
}

static void print_table_header(const bench_t *b)
{
    const char *mode = b->coll == C_BROADCAST ? "in-place"
                       : b->coll == C_SENDRECV ? "out-of-place"
                       : b->inplace            ? "in-place"
                                               : "out-of-place";
    printf("#\n# collective %s (%s)\n#\n", k_colls[b->coll].name, mode);
    printf("# %10s  %12s  %8s  %6s  %5s  %-24s  %10s  %7s  %7s  %6s  %7s  %10s\n", "size", "count",
           "type", "redop", "root", "algo", "time", "algbw", "busbw", "#wrong", "spread", "mean");
    printf("# %10s  %12s  %8s  %6s  %5s  %-24s  %10s  %7s  %7s  %6s  %7s  %10s\n", "(B)",
           "(elements)", "", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(%)", "(us)");
}

static void print_table_row(const bench_t *b, const row_t *r)
{
    char wrong[32];
    if (r->wrong < 0) snprintf(wrong, sizeof wrong, "N/A");
    else snprintf(wrong, sizeof wrong, "%" PRId64, r->wrong);
    printf("%12zu  %12zu  %8s  %6s  %5d  %-24s  %10.2f  %7.2f  %7.2f  %6s  %7.1f  %10.2f\n",
           r->bytes, r->count, b->dt->name, k_colls[b->coll].reduces ? xc_op_name(b->op) : "none",
           k_colls[b->coll].rooted ? b->root : -1, r->algo, r->time_us, r->algbw, r->busbw, wrong,
           r->spread_pct, r->mean_us);
    fflush(stdout);
}

/* The job description, like nccl-tests' header; collective over all ranks
 * (it gathers every rank's host and pid). */
static void print_job_header(const opts_t *o, int print)
{
    enum { HOSTCAP = 120 };
    typedef struct {
        char host[HOSTCAP];
        int32_t pid, node;
    } who_t;
    int n = xc_comm_size(g_comm);
    who_t me;
    memset(&me, 0, sizeof me);
    gethostname(me.host, sizeof me.host - 1);
    me.pid = (int32_t)getpid();
    me.node = xc_comm_node(g_comm);
    who_t *all = xmalloc((size_t)n * sizeof *all);
    XC(xc_allgather(&me, all, sizeof me, XC_UINT8, g_comm));
    if (print) {
        const char *env_algo = getenv("XCOLL_ALGO");
        printf("# xcoll-perf: xcoll %s, %d ranks on %d node(s)\n", xc_version_string(), n,
               xc_comm_node_count(g_comm));
        printf("# collectives:");
        for (int c = 0; c < C_COUNT; c++)
            if (o->colls[c]) printf(" %s", k_colls[c].name);
        printf("  dtype: %s  op: %s  root: %d\n", o->dtype->name, k_ops[o->op_index].name,
               o->root);
        printf("# minBytes %zu maxBytes %zu step: %lu(factor) warmup iters: %d iters: %d "
               "validation: %d inplace: %d fresh: %d%s\n",
               o->minbytes, o->maxbytes, o->factor, o->warmup, o->iters, o->check, o->inplace,
               o->fresh, o->p2p_nb ? "  p2p: nonblocking" : "");
        if (o->offset) printf("# receive buffer: %zu bytes past a page boundary\n", o->offset);
        if (o->min_ms > 0)
            printf("# min-time: %g ms per size and algorithm (more iterations where -n is "
                   "quicker)\n", o->min_ms);
        printf("# algorithm: %s%s\n", env_algo && *env_algo ? "XCOLL_ALGO=" : "auto (selector)",
               env_algo && *env_algo ? env_algo : "");
        printf("# time: median over iterations of the slowest rank's time per iteration; "
               "spread = (p90 - p10) / median; mean: the slowest rank's mean time per "
               "iteration\n#\n");
        for (int r = 0; r < n; r++)
            printf("#  Rank %3d Pid %7d on %s node %d\n", r, (int)all[r].pid, all[r].host,
                   (int)all[r].node);
        fflush(stdout);
    }
    free(all);
}

static FILE *open_output(const char *path)
{
    if (!strcmp(path, "-")) return stdout;
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "xcoll-perf: cannot write %s: %s\n", path, strerror(errno));
        exit(1);
    }
    return f;
}

/* ------------------------------------------------------------------ */
/* Main                                                                */
/* ------------------------------------------------------------------ */

/* The call's count and the reported size for a requested size. */
static size_t count_for(const bench_t *b, size_t size, size_t *bytes)
{
    size_t unit = b->esize * (k_colls[b->coll].per_rank_blocks ? (size_t)b->nranks : 1);
    size_t count = size / unit;
    *bytes = count * unit;
    return count;
}

/* --calibrate: the library measures (xc_profile_calibrate) and rank 0
 * writes the profile; no sweep. */
static int calibrate(const char *path, int lead)
{
    if (lead) {
        printf("# xcoll-perf --calibrate: %d ranks on %d node(s), writing %s\n",
               xc_comm_size(g_comm), xc_comm_node_count(g_comm), path);
        fflush(stdout);
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    XC(xc_profile_calibrate(g_comm, path));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (lead) {
        printf("# done in %.1f s; use it with XCOLL_PROFILE=%s\n",
               (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9, path);
        fflush(stdout);
    }
    XC(xc_comm_destroy(g_comm));
    g_comm = NULL;
    return 0;
}

int main(int argc, char **argv)
{
    opts_t o;
    parse_args(&o, argc, argv);
    if (o.algo_env && setenv("XCOLL_ALGO", o.algo_env, 1)) {
        fprintf(stderr, "xcoll-perf: setenv: %s\n", strerror(errno));
        return 1;
    }

    g_rank = launcher_rank();
    XC(xc_comm_init_env(&g_comm, NULL));
    g_rank = xc_comm_rank(g_comm);
    int nranks = xc_comm_size(g_comm);
    int lead = g_rank == 0;
    if (o.root >= nranks) {
        if (lead) fprintf(stderr, "xcoll-perf: -r %d: only %d ranks\n", o.root, nranks);
        xc_comm_destroy(g_comm);
        return 2;
    }
    if (o.calibrate_path) return calibrate(o.calibrate_path, lead);

    out_t O = {0};
    if (lead) {
        O.table = !(o.csv_path && !strcmp(o.csv_path, "-")) &&
                  !(o.json_path && !strcmp(o.json_path, "-"));
        if (o.csv_path) {
            O.csv = open_output(o.csv_path);
            fprintf(O.csv, "collective,size,count,type,op,algo,time_us,algbw_gbs,busbw_gbs,"
                           "wrong,spread_pct,nranks,inplace,iters,mean_us\n");
        }
        if (o.json_path) {
            O.json = open_output(o.json_path);
            fprintf(O.json, "[");
        }
    }
    print_job_header(&o, lead && O.table);

    bufs_t B;
    B.send = buf_alloc(o.maxbytes, o.xc_buffers);
    char *recv_base = buf_alloc(o.maxbytes + o.offset, o.xc_buffers);
    B.recv = recv_base + o.offset;
    memset(B.send, 0, o.maxbytes); /* touch every page before timing */
    memset(recv_base, 0, o.maxbytes + o.offset);
    if (o.xc_buffers && lead && O.table)
        printf("# buffers: %s, on %zu KiB pages\n#\n",
               o.xc_buffers == 2 ? "xc_mem_alloc_shared" : "xc_mem_alloc",
               xc_mem_page_size(B.send) >> 10);
    size_t times_cap = (size_t)o.iters * MAX_SIDE;
    double *times = xmalloc(times_cap * sizeof *times);

    int64_t total_wrong = 0;
    for (int c = 0; c < C_COUNT; c++) {
        if (!o.colls[c]) continue;
        bench_t b = {
            .coll = (coll_id_t)c,
            .dt = o.dtype,
            .op = k_ops[o.op_index].op,
            .rank = g_rank,
            .nranks = nranks,
            .root = o.root,
            .inplace = o.inplace,
            .p2p_nb = o.p2p_nb,
            .esize = xc_dtype_size(o.dtype->dt),
        };
        b.width = (unsigned)(b.esize * 8);
        if (lead && O.table) print_table_header(&b);

        /* One communicator per algorithm side by side (XCOLL_ALGO is read
         * when a communicator is made), else the world's. */
        xc_comm_t *comms[MAX_SIDE] = {g_comm};
        int k = o.nside[c] > 1 ? o.nside[c] : 1;
        for (int j = 0; k > 1 && j < k; j++) {
            if (setenv("XCOLL_ALGO", o.side[c][j], 1)) {
                fprintf(stderr, "xcoll-perf: setenv: %s\n", strerror(errno));
                exit(1);
            }
            XC(xc_comm_split(g_comm, 0, g_rank, &comms[j], NULL));
        }
        if (k > 1 && o.algo_env) setenv("XCOLL_ALGO", o.algo_env, 1);

        double bw_sum = 0;
        int rows = 0;
        int64_t coll_wrong = 0;
        size_t last_bytes = 0;
        for (size_t size = o.minbytes;;) {
            row_t row[MAX_SIDE];
            memset(row, 0, sizeof row);
            row[0].count = count_for(&b, size, &row[0].bytes);
            if (row[0].count > 0 && row[0].bytes != last_bytes) {
                for (int j = 1; j < k; j++) row[j].count = row[0].count, row[j].bytes = row[0].bytes;
                measure(comms, k, &b, &o, &B, row[0].count, &times, &times_cap, row);
                last_bytes = row[0].bytes;
                for (int j = 0; j < k; j++) {
                    bw_sum += row[j].busbw;
                    rows++;
                    if (row[j].wrong > 0) coll_wrong += row[j].wrong;
                    if (lead && O.table) print_table_row(&b, &row[j]);
                    if (lead) emit_record(&O, &b, &row[j]);
                }
            }
            /* nccl-tests' sweep: multiply while the product stays <= -e. */
            if (o.factor < 2 || size > o.maxbytes / o.factor) break;
            size = size ? size * o.factor : 1;
        }
        for (int j = 0; k > 1 && j < k; j++) XC(xc_comm_destroy(comms[j]));
        if (lead && O.table) {
            if (o.check)
                printf("# Out of bounds values : %" PRId64 " %s\n", coll_wrong,
                       coll_wrong ? "FAILED" : "OK");
            printf("# Avg bus bandwidth    : %.4f GB/s (%d sizes)\n", rows ? bw_sum / rows : 0.0,
                   rows);
            fflush(stdout);
        }
        total_wrong += coll_wrong;
    }

    if (O.json) {
        fprintf(O.json, "%s]\n", O.json_rows ? "\n" : "");
        if (O.json != stdout) fclose(O.json);
    }
    if (O.csv && O.csv != stdout) fclose(O.csv);
    if (lead && O.table) printf("#\n");

    free(times);
    buf_free(B.send, o.xc_buffers);
    buf_free(recv_base, o.xc_buffers);
    free(o.algo_env);
    free(o.side_buf);
    XC(xc_comm_destroy(g_comm));
    g_comm = NULL;
    if (total_wrong > 0) {
        if (lead) fprintf(stderr, "xcoll-perf: %" PRId64 " wrong elements\n", total_wrong);
        return 1;
    }
    return 0;
}
