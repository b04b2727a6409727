/*
 * test_threads.c -- two communicators driven concurrently from two threads
 * of each rank, with a third thread polling requests of both (the workload
 * of the ThreadSanitizer build).
 *
 * Every rank splits the world twice: A keeps the world order, B reverses it
 * (key = size-1-rank), so the two children number their ranks differently.
 * Thread 1 drives A: a non-blocking int64 allreduce handed to thread 3, a
 * grouped ring exchange (xc_group_start is per thread), a blocking int32
 * max-allreduce.  Thread 2 drives B at the same time: a non-blocking
 * allgather handed to thread 3, a bcast from a rotating root, a
 * reduce-scatter and a send to itself.  Thread 3 polls xc_request_test on
 * the handed-over requests of both communicators while their owners keep
 * issuing operations.  Every result is checked exactly; the failure counts
 * are summed over the world at the end so every rank reports the same.
 *
 * Run by xcoll-run (`xcoll-run -n 3 test_threads [iters]`) or, without
 * XCOLL_RANK in the environment, it forks its own 3 ranks.
 */
#include "harness.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BIG (1 << 16)

static int iters = 60;

/* One request handed from an owner thread to the poller. */
typedef struct mailbox {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    xc_request_t *req; /* set by the owner, cleared by the poller */
    int done;
    xc_result_t rc;
    int polls;
} mailbox_t;

typedef struct shared {
    xc_comm_t *a, *b;
    mailbox_t box[2];
    atomic_int owners_left;
    atomic_int fails;
} shared_t;

static void box_post(mailbox_t *m, xc_request_t *req)
{
    pthread_mutex_lock(&m->mu);
    m->req = req;
    m->done = 0;
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
}

static xc_result_t box_await(mailbox_t *m)
{
    pthread_mutex_lock(&m->mu);
    while (!m->done) pthread_cond_wait(&m->cv, &m->mu);
    xc_result_t rc = m->rc;
    pthread_mutex_unlock(&m->mu);
    return rc;
}

static size_t count_for(int i) { return i % 10 == 9 ? BIG : (size_t)(16 + i); }

static void note(shared_t *s, const char *who, int i, const char *what,
                 xc_result_t rc, xc_comm_t *comm)
{
    if (rc == XC_OK) return;
    xt_fail(__FILE__, __LINE__, "%s iteration %d: %s: %s: \"%s\"", who, i,
            what, xc_err_name(rc), xc_comm_last_error(comm));
    atomic_fetch_add(&s->fails, 1);
}

static void *thread_a(void *p)
{
    shared_t *s = p;
    xc_comm_t *c = s->a;
    int r = xc_comm_rank(c), n = xc_comm_size(c);
    int64_t *in = malloc(BIG * sizeof *in), *out = malloc(BIG * sizeof *out);
    for (int i = 0; i < iters && in && out; i++) {
        size_t cnt = count_for(i);
        for (size_t k = 0; k < cnt; k++) in[k] = (int64_t)r * 7 + (int64_t)k + i;
        xc_request_t *req = NULL;
        xc_result_t rc = xc_iallreduce(in, out, cnt, XC_INT64, XC_SUM, c, &req);
        note(s, "A", i, "iallreduce", rc, c);
        if (rc != XC_OK) break;
        box_post(&s->box[0], req);

        /* Ring exchange, grouped so that it cannot deadlock. */
        int64_t tok = (int64_t)r * 1000000 + i, got = -1;
        xc_group_start();
        xc_send(&tok, 1, XC_INT64, (r + 1) % n, i, c);
        xc_recv(&got, 1, XC_INT64, (r + n - 1) % n, i, c);
        note(s, "A", i, "ring", xc_group_end(), c);
        if (got != (int64_t)((r + n - 1) % n) * 1000000 + i) {
            xt_fail(__FILE__, __LINE__, "A iteration %d: ring got %lld", i,
                    (long long)got);
            atomic_fetch_add(&s->fails, 1);
        }

        int32_t mx = r + i;
        note(s, "A", i, "allreduce max",
             xc_allreduce(&mx, &mx, 1, XC_INT32, XC_MAX, c), c);
        if (mx != n - 1 + i) {
            xt_fail(__FILE__, __LINE__, "A iteration %d: max %d, want %d", i,
                    mx, n - 1 + i);
            atomic_fetch_add(&s->fails, 1);
        }

        note(s, "A", i, "iallreduce (polled)", box_await(&s->box[0]), c);
        xc_request_free(req);
        for (size_t k = 0; k < cnt; k++) {
            int64_t want = (int64_t)7 * n * (n - 1) / 2 +
                           (int64_t)n * ((int64_t)k + i);
            if (out[k] != want) {
                xt_fail(__FILE__, __LINE__, "A iteration %d: out[%zu] = %lld,"
                        " want %lld", i, k, (long long)out[k],
                        (long long)want);
                atomic_fetch_add(&s->fails, 1);
                break;
            }
        }
    }
    free(in);
    free(out);
    atomic_fetch_sub(&s->owners_left, 1);
    return NULL;
}

static void *thread_b(void *p)
{
    shared_t *s = p;
    xc_comm_t *c = s->b;
    int r = xc_comm_rank(c), n = xc_comm_size(c);
    float *gin = malloc(BIG * sizeof *gin);
    float *gout = malloc((size_t)n * BIG * sizeof *gout);
    float *bc = malloc(BIG * sizeof *bc);
    for (int i = 0; i < iters && gin && gout && bc; i++) {
        size_t cnt = count_for(i);
        for (size_t k = 0; k < cnt; k++) gin[k] = (float)(r * 100 + (int)(k % 50) + i);
        xc_request_t *req = NULL;
        xc_result_t rc = xc_iallgather(gin, gout, cnt, XC_FLOAT32, c, &req);
        note(s, "B", i, "iallgather", rc, c);
        if (rc != XC_OK) break;
        box_post(&s->box[1], req);

        int root = i % n;
        for (size_t k = 0; k < cnt; k++)
            bc[k] = r == root ? (float)(k % 1000) + (float)i : -1.0f;
        note(s, "B", i, "bcast", xc_bcast(bc, cnt, XC_FLOAT32, root, c), c);
        for (size_t k = 0; k < cnt; k += 13)
            if (bc[k] != (float)(k % 1000) + (float)i) {
                xt_fail(__FILE__, __LINE__, "B iteration %d: bcast[%zu] = %g",
                        i, k, bc[k]);
                atomic_fetch_add(&s->fails, 1);
                break;
            }

        float rs_in[XT_MAX_RANKS * 4], rs_out[4];
        for (int k = 0; k < n * 4; k++) rs_in[k] = (float)(k + r);
        note(s, "B", i, "reduce_scatter",
             xc_reduce_scatter(rs_in, rs_out, 4, XC_FLOAT32, XC_SUM, c), c);
        for (int k = 0; k < 4; k++) {
            float want = (float)(n * (r * 4 + k) + n * (n - 1) / 2);
            if (rs_out[k] != want) {
                xt_fail(__FILE__, __LINE__, "B iteration %d: rs[%d] = %g, "
                        "want %g", i, k, rs_out[k], want);
                atomic_fetch_add(&s->fails, 1);
                break;
            }
        }

        int32_t self_out = i * 5 + r, self_in = -1;
        xc_request_t *sr = NULL, *ss = NULL;
        note(s, "B", i, "irecv self",
             xc_irecv(&self_in, 1, XC_INT32, r, 1000 + i, c, &sr), c);
        note(s, "B", i, "isend self",
             xc_isend(&self_out, 1, XC_INT32, r, 1000 + i, c, &ss), c);
        xc_request_t *both[2] = {sr, ss};
        note(s, "B", i, "self waitall", xc_request_waitall(both, 2), c);
        xc_request_free(sr);
        xc_request_free(ss);
        if (self_in != i * 5 + r) {
            xt_fail(__FILE__, __LINE__, "B iteration %d: self recv %d", i,
                    self_in);
            atomic_fetch_add(&s->fails, 1);
        }

        note(s, "B", i, "iallgather (polled)", box_await(&s->box[1]), c);
        xc_request_free(req);
        for (int q = 0; q < n; q++)
            for (size_t k = 0; k < cnt; k += 7)
                if (gout[(size_t)q * cnt + k] !=
                    (float)(q * 100 + (int)(k % 50) + i)) {
                    xt_fail(__FILE__, __LINE__, "B iteration %d: allgather "
                            "block %d [%zu] = %g", i, q, k,
                            gout[(size_t)q * cnt + k]);
                    atomic_fetch_add(&s->fails, 1);
                    q = n;
                    break;
                }
    }
    free(gin);
    free(gout);
    free(bc);
    atomic_fetch_sub(&s->owners_left, 1);
    return NULL;
}

/* Poll whatever requests the owners hand over until both are finished. */
static void *thread_poll(void *p)
{
    shared_t *s = p;
    while (atomic_load(&s->owners_left) > 0) {
        int idle = 1;
        for (int b = 0; b < 2; b++) {
            mailbox_t *m = &s->box[b];
            pthread_mutex_lock(&m->mu);
            xc_request_t *req = m->req;
            pthread_mutex_unlock(&m->mu);
            if (!req) continue;
            idle = 0;
            int done = 0;
            xc_result_t rc = xc_request_test(req, &done);
            if (!done && rc != XC_OK) {
                xt_fail(__FILE__, __LINE__, "xc_request_test: %s with done=0",
                        xc_err_name(rc));
                atomic_fetch_add(&s->fails, 1);
            }
            pthread_mutex_lock(&m->mu);
            m->polls++;
            if (done) {
                m->req = NULL;
                m->rc = rc;
                m->done = 1;
                pthread_cond_broadcast(&m->cv);
            }
            pthread_mutex_unlock(&m->mu);
        }
        if (idle) usleep(100);
        else sched_yield();
    }
    return NULL;
}

static int rank_main(int rank, int size, void *arg)
{
    (void)arg;
    xc_comm_t *world = xt_comm_world(60000);
    if (!world) return 1;
    shared_t s;
    memset(&s, 0, sizeof s);
    XT_REQUIRE_OK(xc_comm_split(world, 0, rank, &s.a, NULL));
    XT_REQUIRE_OK(xc_comm_split(world, 0, size - 1 - rank, &s.b, NULL));
    XT_CHECK_INT(xc_comm_size(s.a), ==, size);
    XT_CHECK_INT(xc_comm_size(s.b), ==, size);
    XT_CHECK_INT(xc_comm_rank(s.a), ==, rank);
    XT_CHECK_INT(xc_comm_rank(s.b), ==, size - 1 - rank);
    if (xt_failures) return 1;
    for (int b = 0; b < 2; b++) {
        pthread_mutex_init(&s.box[b].mu, NULL);
        pthread_cond_init(&s.box[b].cv, NULL);
    }
    atomic_store(&s.owners_left, 2);

    double t = xt_now();
    pthread_t th[3];
    if (pthread_create(&th[0], NULL, thread_a, &s) != 0 ||
        pthread_create(&th[1], NULL, thread_b, &s) != 0 ||
        pthread_create(&th[2], NULL, thread_poll, &s) != 0) {
        xt_fail(__FILE__, __LINE__, "pthread_create failed");
        return 1;
    }
    for (int k = 0; k < 3; k++) pthread_join(th[k], NULL);
    xt_log("%d iterations on 2 communicators in %.2fs (%d + %d polls)", iters,
           xt_now() - t, s.box[0].polls, s.box[1].polls);
    XT_CHECK_INT(s.box[0].polls, >=, iters);
    XT_CHECK_INT(s.box[1].polls, >=, iters);

    /* Everyone reports the world's failure count. */
    int32_t fails = atomic_load(&s.fails) + xt_failures, total = -1;
    XT_CHECK_RC(xc_allreduce(&fails, &total, 1, XC_INT32, XC_SUM, world),
                XC_OK);
    XT_CHECK_INT(total, ==, 0);
    XT_CHECK_RC(xc_comm_destroy(s.b), XC_OK);
    XT_CHECK_RC(xc_comm_destroy(s.a), XC_OK);
    XT_CHECK_RC(xc_comm_destroy(world), XC_OK);
    for (int b = 0; b < 2; b++) {
        pthread_mutex_destroy(&s.box[b].mu);
        pthread_cond_destroy(&s.box[b].cv);
    }
    return xt_result();
}

int main(int argc, char **argv)
{
    if (argc > 1) iters = atoi(argv[1]);
    if (iters < 1) iters = 1;
    xt_init(argv[0], NULL);
    const char *r = getenv("XCOLL_RANK"), *n = getenv("XCOLL_SIZE");
    if (r && n) { /* started by a launcher */
        xt_set_tag("rank %s", r);
        return rank_main(atoi(r), atoi(n), NULL);
    }
    xt_job_t job;
    if (xt_job_start(&job, 3, rank_main, NULL, -1, 110) != 0) return 1;
    return xt_job_finish(&job, 115);
}
