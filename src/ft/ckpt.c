/*
 * ckpt.c -- checkpoint/restart, the collective part (see ckpt.h and
 * docs/checkpoint.md): every rank writes its shard, the ranks agree that
 * all shards are durable, rank 0 writes the commit marker, and every rank
 * returns the same result.  Loading verifies every shard on every rank
 * before any rank writes into its parts.  The module talks to the
 * communicator only through xcoll.h.
 */
#include "ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MSG_LEN 512

static xc_result_t check_parts(const xc_ckpt_part_t *parts, int nparts, const char *fn)
{
    if (nparts < 0 || (nparts > 0 && !parts))
        return xc__err(XC_ERR_INVALID, "%s: %d parts at %p", fn, nparts, (const void *)parts);
    for (int i = 0; i < nparts; i++) {
        const char *n = parts[i].name;
        if (!n || !*n || strlen(n) >= XC__CKPT_NAME)
            return xc__err(XC_ERR_INVALID, "%s: part %d needs a name of 1-%d bytes", fn, i,
                           XC__CKPT_NAME - 1);
        if (!parts[i].data && parts[i].bytes)
            return xc__err(XC_ERR_INVALID, "%s: part \"%s\" has no data", fn, n);
        for (int j = 0; j < i; j++)
            if (!strcmp(parts[j].name, n))
                return xc__err(XC_ERR_INVALID, "%s: two parts are named \"%s\"", fn, n);
    }
    return XC_OK;
}

/* A directory name every path under it fits with (a truncated path must
 * never name another file). */
static xc_result_t check_dir(const char *dir, const char *fn)
{
    if (!dir || !*dir) return xc__err(XC_ERR_INVALID, "%s: no directory", fn);
    if (strlen(dir) > PATH_MAX - 128) return xc__err(XC_ERR_INVALID, "%s: directory name too long", fn);
    return XC_OK;
}

static xc_result_t check_call(xc_comm_t *comm, const char *dir, uint64_t step, const char *fn)
{
    if (!comm) return xc__err(XC_ERR_INVALID, "%s: comm is NULL", fn);
    XC_CHECK(check_dir(dir, fn));
    if (step == XC_CKPT_LATEST) return xc__err(XC_ERR_INVALID, "%s: step %llu is reserved", fn,
                                               (unsigned long long)step);
    return XC_OK;
}

/* Every rank's check of its own arguments (`mine`), then whether all
 * ranks name the same step and directory (a hash of it): one outcome for
 * all, so that no rank starts a save or a load the others refused. */
static xc_result_t agree_call(xc_comm_t *comm, xc_result_t mine, const char *dir,
                              uint64_t step, const char *fn)
{
    XC_CHECK(xc__agree_outcome(comm, mine, fn));
    uint64_t h = xc__hash_str(dir);
    uint64_t v[4] = {step, ~step, h, ~h}; /* maxima of each and of its complement */
    XC_CHECK(xc_allreduce(v, v, 4, XC_UINT64, XC_MAX, comm));
    if (v[0] != ~v[1])
        return xc__err(XC_ERR_INVALID, "%s: the ranks name different steps (%llu to %llu; "
                       "this rank %llu)", fn, (unsigned long long)~v[1],
                       (unsigned long long)v[0], (unsigned long long)step);
    if (v[2] != ~v[3])
        return xc__err(XC_ERR_INVALID, "%s: the ranks name different directories (this "
                       "rank: %s)", fn, dir);
    return XC_OK;
}

/* ---- the commit marker ---- */

/* "xcoll checkpoint 1\nstep N\nranks R\nshard r CRC\n...end CRC\n" */
static char *marker_text(uint64_t step, int nranks, const uint32_t *crc, size_t *len)
{
    size_t cap = 64 + (size_t)nranks * 32, n = 0;
    char *t = malloc(cap);
    if (!t) return NULL;
    n += (size_t)snprintf(t + n, cap - n, "xcoll checkpoint 1\nstep %llu\nranks %d\n",
                          (unsigned long long)step, nranks);
    for (int r = 0; r < nranks; r++)
        n += (size_t)snprintf(t + n, cap - n, "shard %d %08x\n", r, crc[r]);
    n += (size_t)snprintf(t + n, cap - n, "end %08x\n", xc__crc32c(0, t, n));
    *len = n;
    return t;
}

/* Read and check DIR/step-N/COMMIT: XC_ERR_NOT_FOUND if absent (an
 * incomplete save), XC_ERR_CORRUPT if it does not verify or is for
 * another job size; crc[nranks] receives the shards' header checksums. */
static xc_result_t read_marker(const char *dir, uint64_t step, int nranks, uint32_t *crc)
{
    char sdir[PATH_MAX], path[PATH_MAX];
    xc__ckpt_step_dir(sdir, sizeof sdir, dir, step);
    xc__ckpt_fmt(path, sizeof path, "%s/COMMIT", sdir);
    FILE *f = fopen(path, "re");
    if (!f) {
        if (errno == ENOENT)
            return xc__err(XC_ERR_NOT_FOUND, "checkpoint step %llu in %s has no commit marker "
                           "(an incomplete save)", (unsigned long long)step, dir);
        return xc__err(XC_ERR_SYSTEM, "checkpoint: cannot open %s: %s", path, strerror(errno));
    }
    /* The whole file (a marker of a larger job is longer than this job's
     * would be: cut short it would not verify, and the sizes would never
     * be named), up to what any job size can write. */
    struct stat st;
    size_t cap = fstat(fileno(f), &st) == 0 && st.st_size > 0 &&
                         (uint64_t)st.st_size < (64u << 20)
                     ? (size_t)st.st_size
                     : 64 + (size_t)nranks * 32 + 64;
    char *t = malloc(cap + 1);
    size_t n = t ? fread(t, 1, cap, f) : 0;
    fclose(f);
    if (!t) return xc__err(XC_ERR_NOMEM, "checkpoint: out of memory");
    t[n] = 0;
    xc_result_t rc = XC_OK;
    unsigned long long s;
    int ranks, off = 0;
    char *end = strstr(t, "end ");
    unsigned sum;
    if (!end || sscanf(end, "end %8x\n", &sum) != 1 || sum != xc__crc32c(0, t, (size_t)(end - t)) ||
        sscanf(t, "xcoll checkpoint 1\nstep %llu\nranks %d\n%n", &s, &ranks, &off) != 2 || s != step) {
        rc = xc__err(XC_ERR_CORRUPT, "checkpoint marker %s does not verify", path);
    } else if (ranks != nranks) {
        rc = xc__err(XC_ERR_CORRUPT, "checkpoint %s was saved by %d ranks, this job has %d",
                     sdir, ranks, nranks);
    } else {
        const char *p = t + off;
        for (int r = 0; r < nranks && rc == XC_OK; r++) {
            int rr, k = 0;
            unsigned c;
            if (sscanf(p, "shard %d %8x\n%n", &rr, &c, &k) != 2 || rr != r || k == 0)
                rc = xc__err(XC_ERR_CORRUPT, "checkpoint marker %s does not verify", path);
            crc[r] = c;
            p += k;
        }
    }
    free(t);
    return rc;
}

/* Everyone's shard is written (`mine`, `crc`): agree, rank 0 commits,
 * agree again. */
static xc_result_t commit(xc_comm_t *comm, const char *dir, uint64_t step, xc_result_t mine,
                          uint32_t crc)
{
    XC_CHECK(xc__agree_outcome(comm, mine, "checkpoint: writing the shard"));
    int size = xc_comm_size(comm), rank = xc_comm_rank(comm);
    uint32_t *all = calloc((size_t)size, sizeof *all);
    xc_result_t rc = all ? XC_OK : xc__err(XC_ERR_NOMEM, "checkpoint: out of memory");
    rc = xc__agree_outcome(comm, rc, "checkpoint: commit");
    if (rc == XC_OK) rc = xc_allgather(&crc, all, 1, XC_UINT32, comm);
    if (rc != XC_OK) {
        free(all);
        return rc;
    }
    xc_result_t r0 = XC_OK;
    if (rank == 0) {
        size_t len;
        char *t = marker_text(step, size, all, &len);
        char sdir[PATH_MAX];
        xc__ckpt_step_dir(sdir, sizeof sdir, dir, step);
        r0 = t ? xc__ckpt_write_atomic(sdir, "COMMIT", t, len)
               : xc__err(XC_ERR_NOMEM, "checkpoint: out of memory");
        free(t);
    }
    free(all);
    return xc__agree_outcome(comm, r0, "checkpoint: writing the commit marker");
}

/* Before any shard of `step` is written: a marker left by an earlier
 * save of the same step (a job that resumed from an older checkpoint)
 * must go first, or a crash mid-save would leave it describing shards
 * that are no longer there.  Rank 0 removes it durably; all agree. */
static xc_result_t prepare(xc_comm_t *comm, const char *dir, uint64_t step, xc_result_t mine)
{
    if (mine == XC_OK && xc_comm_rank(comm) == 0) {
        char sdir[PATH_MAX], path[PATH_MAX];
        xc__ckpt_step_dir(sdir, sizeof sdir, dir, step);
        xc__ckpt_fmt(path, sizeof path, "%s/COMMIT", sdir);
        if (unlink(path) == 0) {
            mine = xc__ckpt_fsync_dir(sdir);
        } else if (errno != ENOENT) {
            mine = xc__err(XC_ERR_SYSTEM, "checkpoint: cannot remove the old marker %s: %s",
                           path, strerror(errno));
        }
    }
    return xc__agree_outcome(comm, mine, "checkpoint: preparing the step");
}

xc_result_t xc_ckpt_save(xc_comm_t *comm, const char *dir, uint64_t step,
                         const xc_ckpt_part_t *parts, int nparts)
{
    if (!comm) return xc__err(XC_ERR_INVALID, "xc_ckpt_save: comm is NULL");
    xc_result_t rc = check_call(comm, dir, step, "xc_ckpt_save");
    if (rc == XC_OK) rc = check_parts(parts, nparts, "xc_ckpt_save");
    XC_CHECK(agree_call(comm, rc, dir, step, "xc_ckpt_save"));
    XC_CHECK(prepare(comm, dir, step, XC_OK));
    uint32_t crc = 0;
    if (rc == XC_OK)
        rc = xc__ckpt_write_shard(dir, step, xc_comm_rank(comm), xc_comm_size(comm), parts,
                                  nparts, &crc);
    return commit(comm, dir, step, rc, crc);
}

/* ---- asynchronous save ---- */

struct xc_ckpt_pending {
    xc_comm_t *comm;
    char *dir;
    uint64_t step;
    int nparts;
    xc_ckpt_part_t *parts; /* copies: names and data in `arena` */
    char *arena;
    pthread_t th;
    int started;
    xc_result_t rc;
    uint32_t crc;
    char msg[MSG_LEN];
};

static void *writer(void *arg)
{
    xc_ckpt_pending_t *p = arg;
    p->rc = xc__ckpt_write_shard(p->dir, p->step, xc_comm_rank(p->comm), xc_comm_size(p->comm),
                                 p->parts, p->nparts, &p->crc);
    if (p->rc != XC_OK) snprintf(p->msg, sizeof p->msg, "%s", xc_last_error());
    return NULL;
}

static void pending_free(xc_ckpt_pending_t *p)
{
    if (!p) return;
    free(p->dir);
    free(p->parts);
    free(p->arena);
    free(p);
}

xc_result_t xc_ckpt_save_async(xc_comm_t *comm, const char *dir, uint64_t step,
                               const xc_ckpt_part_t *parts, int nparts, xc_ckpt_pending_t **out)
{
    if (!out) return xc__err(XC_ERR_INVALID, "xc_ckpt_save_async: out is NULL");
    *out = NULL;
    if (!comm) return xc__err(XC_ERR_INVALID, "xc_ckpt_save_async: comm is NULL");
    XC_CHECK(agree_call(comm, check_call(comm, dir, step, "xc_ckpt_save_async"), dir, step,
                        "xc_ckpt_save_async"));
    xc_ckpt_pending_t *p = calloc(1, sizeof *p);
    xc_result_t prc =
        prepare(comm, dir, step, p ? XC_OK : xc__err(XC_ERR_NOMEM, "checkpoint: out of memory"));
    if (prc != XC_OK) {
        free(p);
        return prc;
    }
    p->comm = comm;
    p->step = step;
    p->nparts = nparts;
    /* Argument errors and allocation failures are reported by the wait,
     * which every rank reaches, so that all ranks agree on them. */
    p->rc = check_parts(parts, nparts, "xc_ckpt_save_async");
    size_t total = 0;
    for (int i = 0; p->rc == XC_OK && i < nparts; i++) total += parts[i].bytes + XC__CKPT_NAME;
    if (p->rc == XC_OK) {
        p->dir = strdup(dir);
        p->parts = calloc(nparts ? (size_t)nparts : 1, sizeof *p->parts);
        p->arena = malloc(total ? total : 1);
        if (!p->dir || !p->parts || !p->arena)
            p->rc = xc__err(XC_ERR_NOMEM, "checkpoint: out of memory copying %zu bytes", total);
    }
    if (p->rc == XC_OK) {
        char *a = p->arena;
        for (int i = 0; i < nparts; i++) {
            snprintf(a, XC__CKPT_NAME, "%s", parts[i].name);
            p->parts[i].name = a;
            a += XC__CKPT_NAME;
            if (parts[i].bytes) xc__copy(a, parts[i].data, parts[i].bytes);
            p->parts[i].data = a;
            p->parts[i].bytes = parts[i].bytes;
            a += parts[i].bytes;
        }
        if (pthread_create(&p->th, NULL, writer, p) == 0) {
            p->started = 1; /* p->rc and p->msg are the writer's until the join */
            *out = p;
            return XC_OK;
        }
        p->rc = xc__err(XC_ERR_SYSTEM, "checkpoint: cannot start the writer thread");
    }
    snprintf(p->msg, sizeof p->msg, "%s", xc_last_error());
    *out = p;
    return XC_OK;
}

xc_result_t xc_ckpt_wait(xc_ckpt_pending_t *p)
{
    if (!p) return xc__err(XC_ERR_INVALID, "xc_ckpt_wait: NULL");
    if (p->started) pthread_join(p->th, NULL);
    if (p->rc != XC_OK) xc__err(p->rc, "%s", p->msg); /* this thread's message, for agree */
    char dir[PATH_MAX];
    xc__ckpt_fmt(dir, sizeof dir, "%s", p->dir ? p->dir : "");
    xc_comm_t *comm = p->comm;
    uint64_t step = p->step;
    xc_result_t mine = p->rc;
    uint32_t crc = p->crc;
    pending_free(p);
    return commit(comm, dir, step, mine, crc);
}

/* ---- load ---- */

/* Rank 0: the newest step in `dir` with a commit marker; XC_ERR_NOT_FOUND
 * if none.  Directories without a marker (incomplete saves) are passed
 * over; a marker that does not verify is an error, not skipped. */
static xc_result_t newest(const char *dir, int nranks, uint64_t *step, uint32_t *crc)
{
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT)
            return xc__err(XC_ERR_NOT_FOUND, "no checkpoint: directory %s does not exist", dir);
        return xc__err(XC_ERR_SYSTEM, "checkpoint: cannot open %s: %s", dir, strerror(errno));
    }
    uint64_t *steps = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        unsigned long long s;
        int k = 0;
        if (sscanf(e->d_name, "step-%20llu%n", &s, &k) != 1 || k != 25 || e->d_name[k]) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            uint64_t *t = realloc(steps, cap * sizeof *t);
            if (!t) { /* (an older step must not be loaded for want of memory) */
                closedir(d);
                free(steps);
                return xc__err(XC_ERR_NOMEM, "checkpoint: out of memory listing %s", dir);
            }
            steps = t;
        }
        steps[n++] = s;
    }
    closedir(d);
    xc_result_t rc = xc__err(XC_ERR_NOT_FOUND, "no complete checkpoint in %s", dir);
    int found = 0;
    while (n > 0 && !found) {
        size_t best = 0;
        for (size_t i = 1; i < n; i++)
            if (steps[i] > steps[best]) best = i;
        xc_result_t r = read_marker(dir, steps[best], nranks, crc);
        if (r == XC_ERR_NOT_FOUND) {
            XC_WARN("checkpoint: step %llu in %s is incomplete (no commit marker): passed over",
                    (unsigned long long)steps[best], dir);
            steps[best] = steps[--n];
            continue;
        }
        rc = r;
        *step = steps[best];
        found = 1;
    }
    free(steps);
    return rc;
}

xc_result_t xc_ckpt_load(xc_comm_t *comm, const char *dir, uint64_t step_in,
                         xc_ckpt_part_t *parts, int nparts, uint64_t *step_out)
{
    if (!comm) return xc__err(XC_ERR_INVALID, "xc_ckpt_load: comm is NULL");
    int size = xc_comm_size(comm), rank = xc_comm_rank(comm);
    xc_result_t rc = check_dir(dir, "xc_ckpt_load");
    if (rc == XC_OK) rc = check_parts(parts, nparts, "xc_ckpt_load");
    uint32_t *crc = calloc((size_t)size, sizeof *crc);
    if (rc == XC_OK && !crc) rc = xc__err(XC_ERR_NOMEM, "checkpoint: out of memory");
    rc = agree_call(comm, rc, dir, step_in, "xc_ckpt_load");
    uint64_t step = step_in;
    if (rc == XC_OK) {
        xc_result_t r0 = XC_OK;
        if (rank == 0)
            r0 = step_in == XC_CKPT_LATEST ? newest(dir, size, &step, crc)
                                           : read_marker(dir, step_in, size, crc);
        if (rank == 0 && r0 == XC_ERR_NOT_FOUND && step_in != XC_CKPT_LATEST)
            r0 = xc__err(XC_ERR_CORRUPT, "%s", xc_last_error()); /* asked for it: partial */
        rc = xc__agree_outcome(comm, r0, "checkpoint: finding the checkpoint");
    }
    if (rc == XC_OK) rc = xc_bcast(&step, 1, XC_UINT64, 0, comm);
    if (rc == XC_OK) rc = xc_bcast(crc, (size_t)size, XC_UINT32, 0, comm);
    if (rc == XC_OK)
        rc = xc__agree_outcome(comm, xc__ckpt_read_shard(dir, step, rank, size, parts, nparts, crc[rank], 0),
                   "checkpoint: verifying the shard");
    if (rc == XC_OK)
        rc = xc__agree_outcome(comm, xc__ckpt_read_shard(dir, step, rank, size, parts, nparts, crc[rank], 1),
                   "checkpoint: reading the shard");
    free(crc);
    if (rc == XC_OK && step_out) *step_out = step;
    return rc;
}
