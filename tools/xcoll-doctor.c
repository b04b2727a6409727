/*
 * xcoll-doctor -- read the flight-recorder dumps of a job (written on an
 * error or on SIGUSR1, see docs/fault-tolerance.md) and say which rank is
 * behind or missing, and at which operation the job stopped.
 *
 *   xcoll-doctor [DIR | FILE...]      (default DIR: $XCOLL_FLIGHT_DIR, $TMPDIR, /tmp)
 *
 * For every communicator found it reports: ranks without a dump (dead, or
 * never reached an error); for collectives, the furthest operation any rank
 * issued and the ranks that never issued it ("behind", with their last
 * operation), or that issued it much later than the others ("late"); the
 * ranks whose description of an operation differs from the others'
 * ("mismatch"); point-to-point operations still pending.  Exit status: 0
 * if nothing abnormal was found, 1 if a culprit was named, 2 on usage or
 * input errors.
 */
#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RANKS 4096

typedef struct rec {
    uint64_t id, seq, count;
    char coll[24], dtype[12], op[8], algo[40], state[8], rc[32];
    int root, peer, tag;
    double issued_ago, dur; /* dur < 0: not finished */
    double issued_unix;     /* ms */
} rec_t;

typedef struct dump {
    char comm[20];
    int rank, size, pid;
    double unix_ms;
    char reason[400];
    rec_t *recs;
    size_t n;
} dump_t;

static dump_t *g_dumps;
static size_t g_nd, g_capd;

static int field(const char *line, const char *key, char *out, size_t cap)
{
    char pat[40];
    snprintf(pat, sizeof pat, " %s=", key);
    const char *p = strstr(line, pat);
    if (!p) return 0;
    p += strlen(pat);
    size_t n = strcspn(p, " \n");
    if (n >= cap) n = cap - 1;
    memcpy(out, p, n);
    out[n] = 0;
    return 1;
}

static long long ifield(const char *line, const char *key, long long dflt)
{
    char v[64];
    return field(line, key, v, sizeof v) ? strtoll(v, NULL, 10) : dflt;
}

static int load(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "xcoll-doctor: cannot read %s\n", path);
        return -1;
    }
    char line[1024];
    dump_t d;
    memset(&d, 0, sizeof d);
    if (!fgets(line, sizeof line, f) || strncmp(line, "xcoll-flight 1 ", 15) != 0) {
        fprintf(stderr, "xcoll-doctor: %s is not a flight-recorder dump\n", path);
        fclose(f);
        return -1;
    }
    field(line, "comm", d.comm, sizeof d.comm);
    d.rank = (int)ifield(line, "rank", -1);
    d.size = (int)ifield(line, "size", 0);
    d.pid = (int)ifield(line, "pid", 0);
    d.unix_ms = (double)ifield(line, "unix_ms", 0);
    const char *r = strstr(line, " reason=");
    snprintf(d.reason, sizeof d.reason, "%s", r ? r + 8 : "");
    d.reason[strcspn(d.reason, "\n")] = 0;
    size_t cap = 0;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "op ", 3) != 0) continue;
        if (d.n == cap) {
            cap = cap ? 2 * cap : 64;
            rec_t *p = realloc(d.recs, cap * sizeof *p);
            if (!p) break;
            d.recs = p;
        }
        rec_t *x = &d.recs[d.n++];
        memset(x, 0, sizeof *x);
        char *line1 = line + 2; /* keep the leading space for field() */
        x->id = (uint64_t)ifield(line1, "id", 0);
        x->seq = (uint64_t)ifield(line1, "seq", 0);
        x->count = (uint64_t)ifield(line1, "count", 0);
        field(line1, "coll", x->coll, sizeof x->coll);
        field(line1, "dtype", x->dtype, sizeof x->dtype);
        field(line1, "op", x->op, sizeof x->op);
        field(line1, "algo", x->algo, sizeof x->algo);
        field(line1, "state", x->state, sizeof x->state);
        field(line1, "rc", x->rc, sizeof x->rc);
        x->root = (int)ifield(line1, "root", -1);
        x->peer = (int)ifield(line1, "peer", -1);
        x->tag = (int)ifield(line1, "tag", -1);
        char v[64];
        x->issued_ago = field(line1, "issued_ms_ago", v, sizeof v) ? atof(v) : 0;
        x->dur = field(line1, "dur_ms", v, sizeof v) && strcmp(v, "-") ? atof(v) : -1;
        x->issued_unix = d.unix_ms - x->issued_ago;
    }
    fclose(f);
    if (d.rank < 0 || d.size <= 0 || d.size > MAX_RANKS || !d.comm[0]) {
        fprintf(stderr, "xcoll-doctor: %s has a malformed header\n", path);
        free(d.recs);
        return -1;
    }
    if (g_nd == g_capd) {
        g_capd = g_capd ? 2 * g_capd : 16;
        g_dumps = realloc(g_dumps, g_capd * sizeof *g_dumps);
        if (!g_dumps) return -1;
    }
    g_dumps[g_nd++] = d;
    return 0;
}

static void describe(const rec_t *x, char *buf, size_t cap)
{
    char root[24] = "";
    if (x->root >= 0) snprintf(root, sizeof root, ", root %d", x->root);
    if (x->seq)
        snprintf(buf, cap, "%s #%" PRIu64 " (%s %s, %" PRIu64 " elements%s, %s)", x->coll, x->seq,
                 x->dtype, x->op, x->count, root, x->algo);
    else
        snprintf(buf, cap, "%s %s rank %d, tag %d (%s, %" PRIu64 " elements)", x->coll,
                 strcmp(x->coll, "send") ? "from" : "to", x->peer, x->tag, x->dtype, x->count);
}

static int same_desc(const rec_t *a, const rec_t *b)
{
    return !strcmp(a->coll, b->coll) && !strcmp(a->dtype, b->dtype) && !strcmp(a->op, b->op) &&
           a->count == b->count && a->root == b->root && !strcmp(a->algo, b->algo);
}

/* The record of collective `seq` in dump d, or NULL. */
static const rec_t *find_seq(const dump_t *d, uint64_t seq)
{
    for (size_t i = 0; i < d->n; i++)
        if (d->recs[i].seq == seq) return &d->recs[i];
    return NULL;
}

static int diagnose(const char *comm)
{
    const dump_t *by_rank[MAX_RANKS] = {0};
    int size = 0, culprit = 0;
    for (size_t i = 0; i < g_nd; i++) {
        if (strcmp(g_dumps[i].comm, comm)) continue;
        size = g_dumps[i].size;
        if (g_dumps[i].rank < MAX_RANKS) by_rank[g_dumps[i].rank] = &g_dumps[i];
    }
    printf("communicator %s, %d ranks\n", comm, size);
    for (int r = 0; r < size; r++)
        if (by_rank[r]) printf("  rank %d (pid %d) dumped: %s\n", r, by_rank[r]->pid, by_rank[r]->reason);
    for (int r = 0; r < size; r++)
        if (!by_rank[r]) {
            printf("  MISSING: rank %d left no dump (it died, or never saw an error or SIGUSR1)\n", r);
            culprit = 1;
        }
    /* Collectives: the furthest one issued. */
    uint64_t top = 0;
    int top_rank = -1;
    for (int r = 0; r < size; r++) {
        const dump_t *d = by_rank[r];
        for (size_t i = 0; d && i < d->n; i++)
            if (d->recs[i].seq > top) top = d->recs[i].seq, top_rank = r;
    }
    if (top) {
        const rec_t *ref = find_seq(by_rank[top_rank], top);
        char desc[200];
        describe(ref, desc, sizeof desc);
        double first = 1e300;
        for (int r = 0; r < size; r++) {
            const rec_t *x = by_rank[r] ? find_seq(by_rank[r], top) : NULL;
            if (x && x->issued_unix < first) first = x->issued_unix;
        }
        printf("  furthest collective: %s\n", desc);
        for (int r = 0; r < size; r++) {
            const dump_t *d = by_rank[r];
            if (!d) continue;
            const rec_t *x = find_seq(d, top);
            if (!x) {
                uint64_t last = 0;
                const rec_t *lx = NULL;
                for (size_t i = 0; i < d->n; i++)
                    if (d->recs[i].seq > last) last = d->recs[i].seq, lx = &d->recs[i];
                char ld[200] = "none recorded";
                if (lx) describe(lx, ld, sizeof ld);
                printf("  BEHIND: rank %d never issued #%" PRIu64 "; its last collective is %s, %s\n",
                       r, top, ld, lx ? lx->state : "-");
                culprit = 1;
                continue;
            }
            if (!same_desc(x, ref)) {
                char xd[200];
                describe(x, xd, sizeof xd);
                printf("  MISMATCH: rank %d issued %s where rank %d issued %s\n", r, xd, top_rank,
                       desc);
                culprit = 1;
            }
            double late = x->issued_unix - first;
            if (late > 500) {
                printf("  LATE: rank %d issued #%" PRIu64 " %.1f s after the first rank\n", r, top,
                       late / 1e3);
                culprit = 1;
            }
            if (!strcmp(x->state, "issued"))
                printf("  rank %d: waiting in #%" PRIu64 " for %.1f s\n", r, top, x->issued_ago / 1e3);
            else if (!strcmp(x->state, "failed"))
                printf("  rank %d: #%" PRIu64 " failed with %s\n", r, top, x->rc);
        }
    }
    /* Point-to-point still pending. */
    for (int r = 0; r < size; r++) {
        const dump_t *d = by_rank[r];
        for (size_t i = 0; d && i < d->n; i++) {
            const rec_t *x = &d->recs[i];
            if (x->seq || strcmp(x->state, "issued")) continue;
            char xd[200];
            describe(x, xd, sizeof xd);
            printf("  rank %d: pending %s for %.1f s\n", r, xd, x->issued_ago / 1e3);
        }
    }
    if (!culprit) printf("  no rank is missing, behind, late or mismatched\n");
    return culprit;
}

int main(int argc, char **argv)
{
    if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        printf("usage: xcoll-doctor [DIR | FILE...]\n"
               "Compare xcoll flight-recorder dumps (xcoll-flight-*.txt) and name the rank\n"
               "that is missing, behind, late or mismatched, and the operation.\n"
               "DIR defaults to $XCOLL_FLIGHT_DIR, else $TMPDIR, else /tmp.\n");
        return 0;
    }
    const char *dir = NULL;
    int files = 0;
    for (int i = 1; i < argc; i++) {
        DIR *dd = opendir(argv[i]);
        if (dd) {
            closedir(dd);
            dir = argv[i];
        } else {
            if (load(argv[i]) != 0) return 2;
            files++;
        }
    }
    if (!files) {
        if (!dir) dir = getenv("XCOLL_FLIGHT_DIR");
        if (!dir || !*dir) dir = getenv("TMPDIR");
        if (!dir || !*dir) dir = "/tmp";
        DIR *dd = opendir(dir);
        if (!dd) {
            fprintf(stderr, "xcoll-doctor: cannot open directory %s\n", dir);
            return 2;
        }
        struct dirent *e;
        while ((e = readdir(dd))) {
            size_t n = strlen(e->d_name);
            if (strncmp(e->d_name, "xcoll-flight-", 13) || n < 4 || strcmp(e->d_name + n - 4, ".txt"))
                continue;
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            if (load(p) != 0) {
                closedir(dd);
                return 2;
            }
        }
        closedir(dd);
    }
    if (!g_nd) {
        fprintf(stderr, "xcoll-doctor: no flight-recorder dumps found\n");
        return 2;
    }
    int culprit = 0;
    for (size_t i = 0; i < g_nd; i++) {
        int seen = 0;
        for (size_t j = 0; j < i; j++) seen |= !strcmp(g_dumps[j].comm, g_dumps[i].comm);
        if (!seen) culprit |= diagnose(g_dumps[i].comm);
    }
    return culprit ? 1 : 0;
}
