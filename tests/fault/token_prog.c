/*
 * token_prog.c -- run under xcoll-run: the launcher gave this rank a job
 * token through the environment (XCOLL_TOKEN, 64 hex digits, or
 * XCOLL_TOKEN_FILE), and the token appears on no command line -- neither
 * this rank's /proc/self/cmdline nor the launcher's (the parent's).  Then
 * an all-reduce over the authenticated connections must be correct.
 * Exit 0 = pass.
 */
#include "xcoll.h"

#include <ctype.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failures;

#define CHECK(c, ...)                                                          \
    do {                                                                       \
        if (!(c)) {                                                            \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #c);       \
            fprintf(stderr, __VA_ARGS__);                                      \
            fputc('\n', stderr);                                               \
            failures++;                                                        \
        }                                                                      \
    } while (0)

/* Read a /proc file whole (NUL separators kept); its length, or -1. */
static long slurp(const char *path, char *buf, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    long n = 0;
    ssize_t r;
    while (n < (long)cap && (r = read(fd, buf + n, cap - (size_t)n)) > 0) n += r;
    close(fd);
    return n;
}

static int contains(const char *buf, long n, const char *needle)
{
    size_t m = strlen(needle);
    for (long i = 0; i + (long)m <= n; i++)
        if (!memcmp(buf + i, needle, m)) return 1;
    return 0;
}

int main(void)
{
    const char *tok = getenv("XCOLL_TOKEN");
    const char *file = getenv("XCOLL_TOKEN_FILE");
    char from_file[200] = "";
    if (!tok && file) {
        FILE *f = fopen(file, "r");
        if (f && fgets(from_file, sizeof from_file, f)) from_file[strcspn(from_file, "\n")] = 0;
        if (f) fclose(f);
        tok = from_file;
    }
    CHECK(tok && strlen(tok) == 64, "no 64-digit job token in the environment");
    if (tok) {
        for (const char *p = tok; *p; p++)
            CHECK(isxdigit((unsigned char)*p), "token character '%c' is not hex", *p);
        static char buf[1 << 16];
        char path[64];
        long n = slurp("/proc/self/cmdline", buf, sizeof buf);
        CHECK(n > 0, "cannot read /proc/self/cmdline");
        CHECK(!contains(buf, n, tok), "the token is on this rank's command line");
        snprintf(path, sizeof path, "/proc/%d/cmdline", (int)getppid());
        n = slurp(path, buf, sizeof buf);
        CHECK(n > 0, "cannot read %s", path);
        CHECK(!contains(buf, n, tok), "the token is on the launcher's command line");
        CHECK(!contains(buf, n, "TOKEN"), "a token variable is on the launcher's command line");
    }
    xc_comm_t *comm = NULL;
    xc_result_t rc = xc_comm_init_env(&comm, NULL);
    CHECK(rc == XC_OK, "xc_comm_init_env: %s: %s", xc_err_name(rc), xc_last_error());
    if (rc == XC_OK) {
        int rank = xc_comm_rank(comm), size = xc_comm_size(comm);
        double v[256];
        for (int i = 0; i < 256; i++) v[i] = rank + i;
        rc = xc_allreduce(v, v, 256, XC_FLOAT64, XC_SUM, comm);
        CHECK(rc == XC_OK, "allreduce: %s", xc_last_error());
        for (int i = 0; i < 256 && rc == XC_OK; i += 17)
            CHECK(v[i] == size * (size - 1) / 2.0 + (double)size * i, "v[%d] = %g", i, v[i]);
        CHECK(xc_comm_destroy(comm) == XC_OK, "destroy: %s", xc_last_error());
    }
    if (!failures) printf("token handed over by the environment only; allreduce correct\n");
    return failures ? 1 : 0;
}
