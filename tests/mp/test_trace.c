/*
 * test_trace.c -- XCOLL_TRACE: communication and computation spans, step
 * summaries and the trace file.
 *
 * Run with XCOLL_TRACE=<dir>/trace-%r.json.  Step 1 overlaps a
 * non-blocking all-reduce with a 50 ms computation span: the summary must
 * count the computation (45 ms or more), some communication, and no more
 * exposed communication than communication.  Step 2 runs a blocking
 * all-reduce with no computation span: overlap 0 %, exposed = communication
 * > 0.  Step 3 has nothing: 0 communication, overlap 100 %.  Then the file
 * (flushed explicitly) must be this rank's, valid-looking Chrome trace JSON
 * with the computation span and the all-reduce spans in it.
 */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void busy_ms(double ms)
{
    double t0 = h_now();
    volatile double x = 0;
    while ((h_now() - t0) * 1e3 < ms) x += 1.0;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) n = 0;
    if (b) b[n] = 0;
    fclose(f);
    return b;
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p++) n++;
    return n;
}

int main(int argc, char **argv)
{
    h_init(argc, argv);
    const char *path = getenv("XCOLL_TRACE");
    if (!path || !strstr(path, "%r")) {
        if (H.rank == 0) printf("SKIP: run with XCOLL_TRACE=<dir>/trace-%%r.json\n");
        xc_comm_destroy(H.comm);
        return 77;
    }
    H_EQ_INT("xc_trace_enabled", xc_trace_enabled(), 1);
    size_t n = 1 << 18;
    float *a = h_alloc(n * sizeof *a);
    for (size_t i = 0; i < n; i++) a[i] = 1.0f;
    xc_step_summary_t s;
    H_CHECK(H.comm, xc_trace_step(&s)); /* start the first interval here */

    xc_request_t *req;
    xc_trace_begin("compute");
    H_CHECK(H.comm, xc_iallreduce(a, a, n, XC_FLOAT32, XC_SUM, H.comm, &req));
    busy_ms(50);
    xc_trace_end();
    H_CHECK(H.comm, xc_request_wait(req));
    xc_request_free(req);
    H_CHECK(H.comm, xc_trace_step(&s));
    H_EQ_U64("step number", s.step, 2);
    if (s.compute_ms < 45 || s.compute_ms > s.step_ms + 1e-9)
        h_fail(__FILE__, __LINE__, "step 1: compute %.3f ms, expected >= 45 and <= step %.3f ms",
               s.compute_ms, s.step_ms);
    if (!(s.comm_ms > 0) || s.exposed_ms > s.comm_ms + 1e-9 || s.exposed_ms < 0)
        h_fail(__FILE__, __LINE__, "step 1: communication %.3f ms, exposed %.3f ms",
               s.comm_ms, s.exposed_ms);

    H_CHECK(H.comm, xc_allreduce(a, a, n, XC_FLOAT32, XC_SUM, H.comm));
    H_CHECK(H.comm, xc_trace_step(&s));
    if (!(s.comm_ms > 0) || s.exposed_ms != s.comm_ms || s.overlap_pct != 0 || s.compute_ms != 0)
        h_fail(__FILE__, __LINE__,
               "step 2 (no computation): communication %.3f ms, exposed %.3f ms, overlap %.1f%%, "
               "compute %.3f ms; expected exposed = communication > 0, overlap 0",
               s.comm_ms, s.exposed_ms, s.overlap_pct, s.compute_ms);

    H_CHECK(H.comm, xc_trace_step(&s));
    if (s.comm_ms != 0 || s.overlap_pct != 100)
        h_fail(__FILE__, __LINE__, "step 3 (nothing): communication %.3f ms, overlap %.1f%%",
               s.comm_ms, s.overlap_pct);

    H_CHECK(H.comm, xc_trace_flush());
    char file[600];
    const char *pct = strstr(path, "%r");
    snprintf(file, sizeof file, "%.*s%d%s", (int)(pct - path), path, H.rank, pct + 2);
    char *json = slurp(file);
    if (!json) {
        h_fail(__FILE__, __LINE__, "trace file %s was not written", file);
    } else {
        char rank[40];
        snprintf(rank, sizeof rank, "\"rank\":%d", H.rank);
        H_EQ_INT("file names its rank", count(json, rank), 1);
        H_EQ_INT("starts like a Chrome trace", strncmp(json, "{\"displayTimeUnit\"", 18), 0);
        H_EQ_INT("ends the event list", strstr(json, "\n]}\n") != NULL, 1);
        H_EQ_INT("computation spans", count(json, "\"name\":\"compute\",\"cat\":\"compute\""), 1);
        if (count(json, "\"name\":\"allreduce 1 MiB") < 2)
            h_fail(__FILE__, __LINE__, "fewer than 2 all-reduce spans of 1 MiB in %s", file);
        free(json);
    }
    h_free(a);
    return h_finish();
}
