/*
 * test_sched_pool.c -- a schedule's scratch and its communicator's pool
 * (src/algo/sched.c): a block given back is reused by the next schedule
 * that fits in it, the pool keeps the larger of two blocks, a schedule
 * without a pool allocates plainly, and threads taking and giving back
 * blocks concurrently lose none and share none (each thread writes its
 * block whole and checks it before giving it back; ASan and TSan runs see
 * any overlap, leak or race).
 */
#include "../../src/algo/sched.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "expect.h"

static void *take(void **pool, size_t bytes, xc__sched_t *s)
{
    xc__sched_init(s, pool);
    char *p = xc__sched_scratch(s, bytes);
    EXPECT(p != NULL, "scratch of %zu bytes", bytes);
    EXPECT(((uintptr_t)p & 63) == 0, "scratch %p is not 64-byte aligned", (void *)p);
    if (p) memset(p, 0xa5, bytes); /* all of it is ours */
    return p;
}

static void reuse(void)
{
    void *pool = NULL;
    xc__sched_t s;
    char *a = take(&pool, 40u << 20, &s); /* past glibc's mmap threshold */
    xc__sched_free(&s);
    EXPECT(pool == a, "the freed block is pooled");
    EXPECT(s.pool == &pool && s.scratch == NULL, "a freed schedule keeps its pool only");
    char *b = take(&pool, 1000, &s); /* smaller: the same block */
    EXPECT(b == a, "a smaller scratch reuses the pooled block");
    EXPECT(pool == NULL, "a block in use is not in the pool");
    xc__sched_free(&s);

    /* Two at once: the second allocates; the pool keeps the larger. */
    xc__sched_t s2;
    char *c = take(&pool, 4096, &s);
    char *d = take(&pool, 8192, &s2);
    EXPECT(c == a && d != a, "the second concurrent scratch is a block of its own");
    xc__sched_free(&s2);
    EXPECT(pool == d, "an empty pool takes any block");
    xc__sched_free(&s);
    EXPECT(pool == a, "the pool keeps the larger block");

    /* Too small: replaced by a new, larger block. */
    char *e = take(&pool, 64u << 20, &s);
    EXPECT(e != a && pool == NULL, "a larger scratch replaces a small pooled block");
    xc__sched_free(&s);
    EXPECT(pool == e, "the larger block is pooled");

    /* Calling it again on one schedule gives the first block back. */
    xc__sched_init(&s, &pool);
    char *f = xc__sched_scratch(&s, 100);
    char *g = xc__sched_scratch(&s, 200);
    EXPECT(f == e && g == e, "a second call on one schedule reuses its block");
    xc__sched_free(&s);

    /* Zero bytes still gives a block; no pool: plain allocations. */
    xc__sched_init(&s, NULL);
    EXPECT(xc__sched_scratch(&s, 0) != NULL, "scratch of 0 bytes");
    xc__sched_free(&s);
    xc__sched_pool_free(&pool);
    EXPECT(pool == NULL, "the pool is empty after xc__sched_pool_free");
    xc__sched_pool_free(&pool); /* empty: nothing to free */
}

static void *pool_shared;

static void *worker(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    for (int i = 0; i < 2000; i++) {
        seed = seed * 1103515245u + 12345u;
        size_t bytes = 64 + (seed >> 8) % (256 * 1024);
        unsigned char mark = (unsigned char)(seed >> 24);
        xc__sched_t s;
        xc__sched_init(&s, &pool_shared);
        unsigned char *p = xc__sched_scratch(&s, bytes);
        EXPECT(p != NULL, "scratch");
        if (!p) continue;
        memset(p, mark, bytes);
        for (size_t k = 0; k < bytes; k += 997)
            if (p[k] != mark) {
                EXPECT(0, "another thread wrote into this thread's scratch");
                break;
            }
        xc__sched_free(&s);
    }
    return NULL;
}

static void threads(void)
{
    enum { N = 4 };
    pthread_t t[N];
    for (int i = 0; i < N; i++) pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 1));
    for (int i = 0; i < N; i++) pthread_join(t[i], NULL);
    xc__sched_pool_free(&pool_shared);
}

int main(void)
{
    reuse();
    threads();
    if (!failures) printf("test_sched_pool: all passed\n");
    return failures ? 1 : 0;
}
