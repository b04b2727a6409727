/*
 * ckpt_file.c -- one rank's checkpoint shard on disk (layout in ckpt.h):
 * durable atomic writes, and verification before anything is loaded.
 */
#include "ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define IO_CHUNK ((size_t)4 << 20) /* verification reads this much at a time */

int xc__ckpt_fmt(char *out, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, cap, fmt, ap);
    va_end(ap);
    return n >= 0 && (size_t)n < cap;
}

void xc__ckpt_step_dir(char *out, size_t cap, const char *dir, uint64_t step)
{
    xc__ckpt_fmt(out, cap, "%s/step-%020llu", dir, (unsigned long long)step);
}

void xc__ckpt_shard_path(char *out, size_t cap, const char *dir, uint64_t step, int rank,
                         int nranks)
{
    xc__ckpt_fmt(out, cap, "%s/step-%020llu/rank-%05d-of-%05d.xck", dir,
                 (unsigned long long)step, rank, nranks);
}

static xc_result_t sys_err(const char *what, const char *path)
{
    return xc__err(XC_ERR_SYSTEM, "checkpoint: %s %s: %s", what, path, strerror(errno));
}

static xc_result_t write_all(int fd, const void *p, size_t n, const char *path)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return sys_err("cannot write", path);
        c += w;
        n -= (size_t)w;
    }
    return XC_OK;
}

xc_result_t xc__ckpt_fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return sys_err("cannot open directory", dir);
    int rc = fsync(fd);
    close(fd);
    if (rc != 0) return sys_err("cannot fsync directory", dir);
    return XC_OK;
}

/* Open DIR/NAME.tmp.<pid> for writing; *tmp receives its path. */
static xc_result_t open_tmp(const char *dir, const char *name, char *tmp, size_t cap, int *fd)
{
    if (!xc__ckpt_fmt(tmp, cap, "%s/%s.tmp.%ld", dir, name, (long)getpid()))
        return xc__err(XC_ERR_INVALID, "checkpoint: path too long under %s", dir);
    *fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (*fd < 0) return sys_err("cannot create", tmp);
    return XC_OK;
}

/* fsync and close fd, rename tmp to DIR/NAME, fsync DIR; on failure the
 * temporary is removed. */
static xc_result_t finish_atomic(int fd, const char *tmp, const char *dir, const char *name)
{
    char path[PATH_MAX];
    xc__ckpt_fmt(path, sizeof path, "%s/%s", dir, name);
    xc_result_t rc = XC_OK;
    if (fsync(fd) != 0) rc = sys_err("cannot fsync", tmp);
    if (close(fd) != 0 && rc == XC_OK) rc = sys_err("cannot close", tmp);
    if (rc == XC_OK && rename(tmp, path) != 0) rc = sys_err("cannot rename into", path);
    if (rc != XC_OK) {
        unlink(tmp);
        return rc;
    }
    return xc__ckpt_fsync_dir(dir);
}

xc_result_t xc__ckpt_write_atomic(const char *dir, const char *name, const void *data, size_t len)
{
    char tmp[PATH_MAX];
    int fd = -1;
    XC_CHECK(open_tmp(dir, name, tmp, sizeof tmp, &fd));
    xc_result_t rc = write_all(fd, data, len, tmp);
    if (rc != XC_OK) {
        close(fd);
        unlink(tmp);
        return rc;
    }
    return finish_atomic(fd, tmp, dir, name);
}

static void seal_header(xc__ckpt_hdr_t *h)
{
    h->hdr_crc = xc__crc32c(0, h, offsetof(xc__ckpt_hdr_t, hdr_crc));
}

/* Temporaries of this shard left by an earlier writer of the same rank
 * that died (one writer per rank and job at a time: any other pid's is
 * stale). */
static void sweep_tmp(const char *sdir, const char *name)
{
    DIR *d = opendir(sdir);
    if (!d) return;
    char prefix[96], mine[96];
    xc__ckpt_fmt(prefix, sizeof prefix, "%s.tmp.", name);
    xc__ckpt_fmt(mine, sizeof mine, "%s.tmp.%ld", name, (long)getpid());
    size_t np = strlen(prefix);
    struct dirent *e;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, prefix, np) && strcmp(e->d_name, mine) != 0)
            unlinkat(dirfd(d), e->d_name, 0);
    closedir(d);
}

/* fsync the directory holding `path` ("." for a bare name). */
static xc_result_t fsync_parent(const char *path)
{
    char parent[PATH_MAX];
    xc__ckpt_fmt(parent, sizeof parent, "%s", path);
    size_t n = strlen(parent);
    while (n > 1 && parent[n - 1] == '/') parent[--n] = 0; /* "a/b/" is "a/b" */
    char *slash = strrchr(parent, '/');
    if (!slash) return xc__ckpt_fsync_dir(".");
    slash[slash == parent] = 0; /* "/a" -> "/" */
    return xc__ckpt_fsync_dir(parent);
}

xc_result_t xc__ckpt_write_shard(const char *dir, uint64_t step, int rank, int nranks,
                                 const xc_ckpt_part_t *parts, int nparts, uint32_t *hdr_crc)
{
    _Static_assert(sizeof(xc__ckpt_hdr_t) == 64, "shard header layout");
    _Static_assert(sizeof(xc__ckpt_ent_t) == 64, "shard table layout");
    char sdir[PATH_MAX], path[PATH_MAX], name[64];
    xc__ckpt_step_dir(sdir, sizeof sdir, dir, step);
    /* A directory this rank creates is made durable in its parent (else a
     * save that returned OK could lose its step directory on power loss). */
    if (mkdir(dir, 0755) == 0) XC_CHECK(fsync_parent(dir));
    else if (errno != EEXIST) return sys_err("cannot create directory", dir);
    if (mkdir(sdir, 0755) == 0) XC_CHECK(xc__ckpt_fsync_dir(dir));
    else if (errno != EEXIST) return sys_err("cannot create directory", sdir);
    xc__ckpt_shard_path(path, sizeof path, dir, step, rank, nranks);
    xc__ckpt_fmt(name, sizeof name, "%s", strrchr(path, '/') + 1);
    sweep_tmp(sdir, name);

    xc__ckpt_ent_t *tab = calloc(nparts ? (size_t)nparts : 1, sizeof *tab);
    if (!tab) return xc__err(XC_ERR_NOMEM, "checkpoint: out of memory");
    xc__ckpt_hdr_t h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, XC__CKPT_MAGIC, 8);
    h.version = 1;
    h.rank = (uint32_t)rank;
    h.nranks = (uint32_t)nranks;
    h.nparts = (uint32_t)nparts;
    h.step = step;
    for (int i = 0; i < nparts; i++) {
        snprintf(tab[i].name, sizeof tab[i].name, "%s", parts[i].name);
        tab[i].bytes = parts[i].bytes;
        tab[i].crc = xc__crc32c(0, parts[i].data, parts[i].bytes);
        h.payload += parts[i].bytes;
    }
    h.table_crc = xc__crc32c(0, tab, (size_t)nparts * sizeof *tab);
    seal_header(&h);
    xc__ckpt_foot_t f;
    memset(&f, 0, sizeof f);
    memcpy(f.magic, XC__CKPT_END, 8);
    f.hdr_crc = h.hdr_crc;
    f.foot_crc = xc__crc32c(0, &f, offsetof(xc__ckpt_foot_t, foot_crc));

    char tmp[PATH_MAX];
    int fd = -1;
    xc_result_t rc = open_tmp(sdir, name, tmp, sizeof tmp, &fd);
    if (rc != XC_OK) {
        free(tab);
        return rc;
    }
    rc = write_all(fd, &h, sizeof h, tmp);
    if (rc == XC_OK) rc = write_all(fd, tab, (size_t)nparts * sizeof *tab, tmp);
    for (int i = 0; i < nparts && rc == XC_OK; i++)
        rc = write_all(fd, parts[i].data, parts[i].bytes, tmp);
    if (rc == XC_OK) rc = write_all(fd, &f, sizeof f, tmp);
    free(tab);
    if (rc != XC_OK) {
        close(fd);
        unlink(tmp);
        return rc;
    }
    XC_CHECK(finish_atomic(fd, tmp, sdir, name));
    *hdr_crc = h.hdr_crc;
    return XC_OK;
}

static xc_result_t corrupt(const char *path, const char *why)
{
    return xc__err(XC_ERR_CORRUPT, "checkpoint shard %s: %s", path, why);
}

static xc_result_t read_exact(int fd, void *p, size_t n, const char *path)
{
    char *c = p;
    while (n > 0) {
        ssize_t r = read(fd, c, n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return sys_err("cannot read", path);
        if (r == 0) return corrupt(path, "truncated");
        c += r;
        n -= (size_t)r;
    }
    return XC_OK;
}

/* Parse and check header and table against what the caller expects. */
static xc_result_t check_head(int fd, const char *path, uint64_t step, int rank, int nranks,
                              const xc_ckpt_part_t *parts, int nparts, uint32_t want_crc,
                              xc__ckpt_hdr_t *h, xc__ckpt_ent_t *tab)
{
    char why[160];
    XC_CHECK(read_exact(fd, h, sizeof *h, path));
    if (memcmp(h->magic, XC__CKPT_MAGIC, 8) != 0) return corrupt(path, "not an xcoll shard");
    if (h->hdr_crc != xc__crc32c(0, h, offsetof(xc__ckpt_hdr_t, hdr_crc)))
        return corrupt(path, "header checksum mismatch");
    if (h->version != 1) return corrupt(path, "unknown version");
    if (h->hdr_crc != want_crc)
        return corrupt(path, "is not the shard the commit marker recorded (left over from "
                             "another save of this step?)");
    if (h->step != step || h->rank != (uint32_t)rank || h->nranks != (uint32_t)nranks)
        return corrupt(path, "header names another step, rank or job size");
    if (h->nparts != (uint32_t)nparts) {
        snprintf(why, sizeof why, "holds %u parts, the caller asks for %d", h->nparts, nparts);
        return corrupt(path, why);
    }
    XC_CHECK(read_exact(fd, tab, (size_t)nparts * sizeof *tab, path));
    if (h->table_crc != xc__crc32c(0, tab, (size_t)nparts * sizeof *tab))
        return corrupt(path, "table checksum mismatch");
    uint64_t total = 0;
    for (int i = 0; i < nparts; i++) {
        tab[i].name[XC__CKPT_NAME - 1] = 0;
        if (strcmp(tab[i].name, parts[i].name) != 0 || tab[i].bytes != parts[i].bytes) {
            snprintf(why, sizeof why, "part %d is \"%.47s\" of %llu bytes, the caller asks for "
                     "\"%.47s\" of %zu", i, tab[i].name, (unsigned long long)tab[i].bytes,
                     parts[i].name, parts[i].bytes);
            return corrupt(path, why);
        }
        total += tab[i].bytes;
    }
    if (total != h->payload) return corrupt(path, "sizes disagree with the header");
    struct stat st;
    if (fstat(fd, &st) != 0) return sys_err("cannot stat", path);
    uint64_t want = sizeof *h + (uint64_t)nparts * sizeof *tab + total + sizeof(xc__ckpt_foot_t);
    if ((uint64_t)st.st_size != want) return corrupt(path, "truncated or extended");
    return XC_OK;
}

xc_result_t xc__ckpt_read_shard(const char *dir, uint64_t step, int rank, int nranks,
                                xc_ckpt_part_t *parts, int nparts, uint32_t want_crc, int fill)
{
    char path[PATH_MAX];
    xc__ckpt_shard_path(path, sizeof path, dir, step, rank, nranks);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) return corrupt(path, "missing");
        return sys_err("cannot open", path);
    }
    xc__ckpt_ent_t *tab = calloc(nparts ? (size_t)nparts : 1, sizeof *tab);
    char *buf = fill ? NULL : malloc(IO_CHUNK);
    xc__ckpt_hdr_t h;
    xc_result_t rc = (!tab || (!fill && !buf)) ? xc__err(XC_ERR_NOMEM, "checkpoint: out of memory")
                                               : check_head(fd, path, step, rank, nranks, parts,
                                                            nparts, want_crc, &h, tab);
    for (int i = 0; i < nparts && rc == XC_OK; i++) {
        uint32_t crc = 0;
        if (fill) {
            rc = read_exact(fd, parts[i].data, parts[i].bytes, path);
            if (rc == XC_OK) crc = xc__crc32c(0, parts[i].data, parts[i].bytes);
        } else {
            for (uint64_t left = tab[i].bytes; left > 0 && rc == XC_OK;) {
                size_t n = left < IO_CHUNK ? (size_t)left : IO_CHUNK;
                rc = read_exact(fd, buf, n, path);
                if (rc == XC_OK) crc = xc__crc32c(crc, buf, n);
                left -= n;
            }
        }
        if (rc == XC_OK && crc != tab[i].crc) {
            char why[96];
            snprintf(why, sizeof why, "part \"%.47s\" checksum mismatch", tab[i].name);
            rc = corrupt(path, why);
        }
    }
    if (rc == XC_OK) {
        xc__ckpt_foot_t f;
        rc = read_exact(fd, &f, sizeof f, path);
        if (rc == XC_OK && (memcmp(f.magic, XC__CKPT_END, 8) != 0 || f.hdr_crc != h.hdr_crc ||
                            f.foot_crc != xc__crc32c(0, &f, offsetof(xc__ckpt_foot_t, foot_crc))))
            rc = corrupt(path, "footer mismatch");
    }
    free(buf);
    free(tab);
    close(fd);
    return rc;
}
