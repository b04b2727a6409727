/*
 * store_file.c -- the file rendezvous store, presented as an xc_store_t: one
 * file per key in a directory on a filesystem every rank sees.
 *
 * Invariants.
 *  - A key maps to exactly one file name and the mapping is injective:
 *    bytes outside [A-Za-z0-9_.-], '%' itself and a leading '.' are written
 *    as %XX.  So a name never contains '/', is never "." or "..", never
 *    starts with '.', and a key cannot escape the directory or collide with
 *    another key.
 *  - Temporary files start with '.' (so never collide with a key), are
 *    created with O_EXCL (mkostemp) and are renamed over the key's file
 *    once complete: readers see either no file or the whole value.
 *  - get/wait poll with backoff from 1 ms to 50 ms until their deadline.
 *  - The ctx is immutable after open, so one store may be used from several
 *    threads at once.
 * Caveat: NFS clients may cache a negative lookup for up to their acdir
 * timeout, which delays (never corrupts) a get.
 */
#include "store.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define FILE_MAX_KEY 512
#define POLL_MIN_MS 1
#define POLL_MAX_MS 50

struct file_store {
    char dir[PATH_MAX]; /* no trailing '/'; "" for the root */
};

/* "<dir>/<encoded key>" into path; XC_ERR_INVALID if the key cannot be
 * stored (empty, too long). */
static xc_result_t key_path(const struct file_store *fs, const char *key,
                            char *path, size_t cap)
{
    static const char hex[] = "0123456789ABCDEF";
    if (!key || !*key)
        return xc__err(XC_ERR_INVALID, "file store %s: empty key", fs->dir);
    size_t klen = strlen(key);
    if (klen > FILE_MAX_KEY)
        return xc__err(XC_ERR_INVALID,
                       "file store %s: key '%.40s...' is %zu bytes, more than "
                       "the %d-byte limit",
                       fs->dir, key, klen, FILE_MAX_KEY);
    char name[3 * FILE_MAX_KEY + 1];
    size_t n = 0;
    for (size_t i = 0; i < klen; ++i) {
        unsigned char ch = (unsigned char)key[i];
        int plain = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
                    (ch >= '0' && ch <= '9') || ch == '_' || ch == '-' ||
                    (ch == '.' && i > 0);
        if (plain) {
            name[n++] = (char)ch;
        } else {
            name[n++] = '%';
            name[n++] = hex[ch >> 4];
            name[n++] = hex[ch & 15];
        }
    }
    name[n] = '\0';
    if (n > NAME_MAX)
        return xc__err(XC_ERR_INVALID,
                       "file store %s: key '%.40s...' encodes to a %zu-byte "
                       "file name, more than the filesystem's %d",
                       fs->dir, key, n, NAME_MAX);
    int w = snprintf(path, cap, "%s/%s", fs->dir, name);
    if (w < 0 || (size_t)w >= cap)
        return xc__err(XC_ERR_INVALID, "file store %s: path of key '%.40s' "
                       "too long", fs->dir, key);
    return XC_OK;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Sleep the next backoff step, bounded by the deadline.  0 when the
 * deadline has passed (no sleep). */
static int backoff_sleep(uint64_t deadline, int *step)
{
    int left = xc__poll_ms_left(deadline);
    if (left == 0) return 0;
    sleep_ms(left < 0 ? *step : XC__MIN(*step, left));
    *step = XC__MIN(*step * 2, POLL_MAX_MS);
    return 1;
}

static int file_set(void *ctx, const char *key, const void *val, size_t len)
{
    const struct file_store *fs = ctx;
    char path[PATH_MAX], tmp[PATH_MAX];
    XC_CHECK(key_path(fs, key, path, sizeof path));
    if (len && !val)
        return xc__err(XC_ERR_INVALID, "file store %s: set of key '%s' with "
                       "a NULL value", fs->dir, key);
    int w = snprintf(tmp, sizeof tmp, "%s/.tmp.XXXXXX", fs->dir);
    if (w < 0 || (size_t)w >= sizeof tmp)
        return xc__err(XC_ERR_INVALID, "file store %s: path too long",
                       fs->dir);
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0)
        return xc__err(XC_ERR_SYSTEM, "file store %s: set of key '%s': "
                       "cannot create a temporary file: %s",
                       fs->dir, key, strerror(errno));
    /* mkostemp makes 0600; ranks of one job may run as other users */
    (void)fchmod(fd, 0644);
    const char *p = val;
    size_t left = len;
    while (left > 0) {
        ssize_t n = write(fd, p, left);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            int e = n < 0 ? errno : EIO;
            close(fd);
            unlink(tmp);
            return xc__err(XC_ERR_SYSTEM,
                           "file store %s: set of key '%s': write %s: %s",
                           fs->dir, key, tmp, strerror(e));
        }
        p += n;
        left -= (size_t)n;
    }
    /* close reports write-back errors on network filesystems */
    if (close(fd) != 0) {
        int e = errno;
        unlink(tmp);
        return xc__err(XC_ERR_SYSTEM,
                       "file store %s: set of key '%s': close %s: %s", fs->dir,
                       key, tmp, strerror(e));
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return xc__err(XC_ERR_SYSTEM,
                       "file store %s: set of key '%s': rename to %s: %s",
                       fs->dir, key, path, strerror(e));
    }
    return XC_OK;
}

/* Read a whole open file: up to cap bytes into buf, total length in *len. */
static xc_result_t read_value(const struct file_store *fs, const char *key,
                              int fd, void *buf, size_t cap, size_t *len)
{
    size_t total = 0;
    char junk[4096];
    for (;;) {
        char *dst = total < cap ? (char *)buf + total : junk;
        size_t room = total < cap ? cap - total : sizeof junk;
        ssize_t n = read(fd, dst, room);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0)
            return xc__err(XC_ERR_SYSTEM,
                           "file store %s: get of key '%s': read: %s", fs->dir,
                           key, strerror(errno));
        if (n == 0) break;
        total += (size_t)n;
    }
    if (len) *len = total;
    return XC_OK;
}

static int file_get(void *ctx, const char *key, void *buf, size_t cap,
                    size_t *len, int timeout_ms)
{
    const struct file_store *fs = ctx;
    char path[PATH_MAX];
    XC_CHECK(key_path(fs, key, path, sizeof path));
    if (cap && !buf)
        return xc__err(XC_ERR_INVALID, "file store %s: get of key '%s' into "
                       "a NULL buffer", fs->dir, key);
    uint64_t deadline = xc__deadline_ns(timeout_ms);
    int step = POLL_MIN_MS;
    for (;;) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            xc_result_t rc = read_value(fs, key, fd, buf, cap, len);
            close(fd);
            return rc;
        }
        if (errno != ENOENT)
            return xc__err(XC_ERR_SYSTEM,
                           "file store %s: get of key '%s': open %s: %s",
                           fs->dir, key, path, strerror(errno));
        if (!backoff_sleep(deadline, &step))
            return xc__err(XC_ERR_TIMEOUT,
                           "file store %s: get of key '%s' timed out after "
                           "%d ms (the key was not set in time)",
                           fs->dir, key, timeout_ms);
    }
}

static int file_wait(void *ctx, const char *const *keys, size_t nkeys,
                     int timeout_ms)
{
    const struct file_store *fs = ctx;
    if (nkeys && !keys)
        return xc__err(XC_ERR_INVALID, "file store %s: wait with NULL keys",
                       fs->dir);
    uint64_t deadline = xc__deadline_ns(timeout_ms);
    int step = POLL_MIN_MS;
    for (size_t i = 0; i < nkeys; ++i) {
        char path[PATH_MAX];
        XC_CHECK(key_path(fs, keys[i], path, sizeof path));
        for (;;) {
            struct stat st;
            if (stat(path, &st) == 0) break;
            if (errno != ENOENT)
                return xc__err(XC_ERR_SYSTEM,
                               "file store %s: wait for key '%s': stat %s: %s",
                               fs->dir, keys[i], path, strerror(errno));
            if (!backoff_sleep(deadline, &step))
                return xc__err(XC_ERR_TIMEOUT,
                               "file store %s: wait for key '%s' timed out "
                               "after %d ms (the key was not set in time)",
                               fs->dir, keys[i], timeout_ms);
        }
    }
    return XC_OK;
}

/* mkdir -p; `path` is modified temporarily. */
static xc_result_t make_dirs(char *path)
{
    for (char *p = path + 1; *p; ++p) {
        if (*p != '/') continue;
        *p = '\0';
        int r = mkdir(path, 0777);
        int e = errno;
        *p = '/';
        if (r != 0 && e != EEXIST)
            return xc__err(XC_ERR_SYSTEM, "file store: mkdir %.*s: %s",
                           (int)(p - path), path, strerror(e));
    }
    if (mkdir(path, 0777) != 0 && errno != EEXIST)
        return xc__err(XC_ERR_SYSTEM, "file store: mkdir %s: %s", path,
                       strerror(errno));
    struct stat st;
    if (stat(path, &st) != 0)
        return xc__err(XC_ERR_SYSTEM, "file store: stat %s: %s", path,
                       strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return xc__err(XC_ERR_INVALID, "file store: %s is not a directory",
                       path);
    return XC_OK;
}

xc_result_t xc__file_store_open(const char *dir, xc_store_t *out)
{
    if (!out) return xc__err(XC_ERR_INVALID, "file store: NULL output");
    memset(out, 0, sizeof *out);
    if (!dir || !*dir)
        return xc__err(XC_ERR_INVALID, "file store: empty directory");
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') --n; /* "a/b///" -> "a/b" */
    if (n + 1 + NAME_MAX + 1 > PATH_MAX)
        return xc__err(XC_ERR_INVALID, "file store: directory '%.60s...' "
                       "too long", dir);
    struct file_store *fs = malloc(sizeof *fs);
    if (!fs) return xc__err(XC_ERR_NOMEM, "file store: out of memory");
    memcpy(fs->dir, dir, n);
    fs->dir[n] = '\0';
    xc_result_t rc = make_dirs(fs->dir);
    if (rc != XC_OK) {
        free(fs);
        return rc;
    }
    if (n == 1 && fs->dir[0] == '/') fs->dir[0] = '\0'; /* "/" + "/key" */
    out->size = sizeof *out;
    out->ctx = fs;
    out->set = file_set;
    out->get = file_get;
    out->wait = file_wait;
    return XC_OK;
}

void xc__file_store_close(xc_store_t *store)
{
    if (!store || !store->ctx || store->set != file_set) return;
    free(store->ctx);
    memset(store, 0, sizeof *store);
}
