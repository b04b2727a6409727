/*
 * ckpt_prog.c -- checkpoint/restart test job (ckpt.sh, ckpt_kill.sh).
 *
 *   ckpt_prog basic DIR   save steps 1-4 (sync and async), load them back,
 *                         then damage: a flipped byte in rank 1's shard, a
 *                         missing commit marker, a wrong part size, an
 *                         empty directory -- every rank must get the same
 *                         documented error, and parts must stay untouched
 *   ckpt_prog loop DIR    save steps 1, 2, ... forever (killed by the test)
 *   ckpt_prog check DIR   load the newest checkpoint and verify every byte
 *                         (exit 0: verified, or nothing saved yet)
 */
#include <xcoll.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int rank, size, fails;

/* CRC-32C (Castagnoli, reflected), bit by bit: the markers' checksum, to
 * write one by hand. */
static unsigned crc32c(const char *p, size_t n)
{
    unsigned c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= (unsigned char)p[i];
        for (int b = 0; b < 8; b++) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    }
    return ~c;
}

#define EXPECT(cond, ...)                                                      \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "rank %d: FAIL line %d: ", rank, __LINE__);        \
            fprintf(stderr, __VA_ARGS__);                                      \
            fprintf(stderr, "\n");                                             \
            fails++;                                                           \
        }                                                                      \
    } while (0)

static size_t wbytes(int big) { return (big ? (size_t)3 << 20 : 40000) + (size_t)rank * 1000 + 12; }

static void fill(uint32_t *w, size_t n, uint64_t step)
{
    for (size_t i = 0; i < n; i++) w[i] = (uint32_t)(step * 2654435761u + (uint64_t)rank * 97 + i);
}

static size_t bad_words(const uint32_t *w, size_t n, uint64_t step)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += w[i] != (uint32_t)(step * 2654435761u + (uint64_t)rank * 97 + i);
    return bad;
}

typedef struct state {
    uint32_t *w;
    size_t wn;
    uint64_t meta[2];
    xc_ckpt_part_t parts[2];
} state_t;

static void state_init(state_t *s, int big)
{
    s->wn = wbytes(big) / 4;
    s->w = calloc(s->wn, 4);
    s->parts[0] = (xc_ckpt_part_t){"weights", s->w, s->wn * 4};
    s->parts[1] = (xc_ckpt_part_t){"meta", s->meta, sizeof s->meta};
}

static void set_step(state_t *s, uint64_t step)
{
    fill(s->w, s->wn, step);
    s->meta[0] = step;
    s->meta[1] = (uint64_t)rank;
}

static int verify(const state_t *s, uint64_t step)
{
    return bad_words(s->w, s->wn, step) == 0 && s->meta[0] == step && s->meta[1] == (uint64_t)rank;
}

static int basic(xc_comm_t *c, const char *dir)
{
    state_t s;
    state_init(&s, 0);
    uint64_t got = 0;
    xc_result_t rc = xc_ckpt_load(c, dir, XC_CKPT_LATEST, s.parts, 2, &got);
    EXPECT(rc == XC_ERR_NOT_FOUND, "empty dir: %s (%s)", xc_err_name(rc), xc_last_error());
    for (uint64_t step = 1; step <= 4; step++) {
        set_step(&s, step);
        if (step % 2) {
            rc = xc_ckpt_save(c, dir, step, s.parts, 2);
        } else {
            xc_ckpt_pending_t *p;
            rc = xc_ckpt_save_async(c, dir, step, s.parts, 2, &p);
            memset(s.w, 0xab, s.wn * 4); /* training goes on: the copy is saved */
            if (rc == XC_OK) rc = xc_ckpt_wait(p);
        }
        EXPECT(rc == XC_OK, "save %llu: %s", (unsigned long long)step, xc_last_error());
    }
    memset(s.w, 0, s.wn * 4);
    rc = xc_ckpt_load(c, dir, XC_CKPT_LATEST, s.parts, 2, &got);
    EXPECT(rc == XC_OK && got == 4 && verify(&s, 4), "load latest: %s step %llu",
           xc_last_error(), (unsigned long long)got);
    rc = xc_ckpt_load(c, dir, 2, s.parts, 2, &got);
    EXPECT(rc == XC_OK && got == 2 && verify(&s, 2), "load step 2: %s", xc_last_error());

    /* Wrong part size: refused, parts untouched. */
    xc_ckpt_part_t wrong[2] = {s.parts[0], s.parts[1]};
    wrong[0].bytes -= 4;
    rc = xc_ckpt_load(c, dir, XC_CKPT_LATEST, wrong, 2, &got);
    EXPECT(rc == XC_ERR_CORRUPT && strstr(xc_last_error(), "rank 0"), "wrong size: %s (%s)",
           xc_err_name(rc), xc_last_error());
    EXPECT(verify(&s, 2), "a refused load wrote into the parts");

    /* A flipped byte in rank 1's shard of step 4: every rank refuses it
     * and names rank 1; the parts stay as they were. */
    char path[4096];
    snprintf(path, sizeof path, "%s/step-%020d/rank-%05d-of-%05d.xck", dir, 4, 1, size);
    if (rank == 1) {
        FILE *f = fopen(path, "r+b");
        EXPECT(f != NULL, "open %s", path);
        if (f) {
            fseek(f, 64 * 3 + 1000, SEEK_SET);
            int ch = fgetc(f);
            fseek(f, 64 * 3 + 1000, SEEK_SET);
            fputc(ch ^ 0x10, f);
            fclose(f);
        }
    }
    xc_barrier(c);
    rc = xc_ckpt_load(c, dir, XC_CKPT_LATEST, s.parts, 2, &got);
    EXPECT(rc == XC_ERR_CORRUPT && strstr(xc_last_error(), "rank 1") &&
               strstr(xc_last_error(), "checksum"),
           "flipped byte: %s (%s)", xc_err_name(rc), xc_last_error());
    EXPECT(verify(&s, 2), "a refused load wrote into the parts");

    /* Step 4 without its commit marker: latest falls back to step 3;
     * asking for step 4 is refused. */
    if (rank == 0) {
        snprintf(path, sizeof path, "%s/step-%020d/COMMIT", dir, 4);
        EXPECT(unlink(path) == 0, "unlink %s", path);
    }
    xc_barrier(c);
    rc = xc_ckpt_load(c, dir, XC_CKPT_LATEST, s.parts, 2, &got);
    EXPECT(rc == XC_OK && got == 3 && verify(&s, 3), "fallback: %s step %llu", xc_last_error(),
           (unsigned long long)got);
    rc = xc_ckpt_load(c, dir, 4, s.parts, 2, &got);
    EXPECT(rc == XC_ERR_CORRUPT && strstr(xc_last_error(), "commit marker"),
           "partial step: %s (%s)", xc_err_name(rc), xc_last_error());

    /* Invalid arguments: every rank gets the same error. */
    xc_ckpt_part_t dup[2] = {s.parts[0], s.parts[0]};
    rc = xc_ckpt_save(c, dir, 9, dup, 2);
    EXPECT(rc == XC_ERR_INVALID, "duplicate names: %s", xc_err_name(rc));
    rc = xc_ckpt_save(c, dir, 9, rank == 1 ? dup : s.parts, 2); /* only rank 1 is wrong */
    EXPECT(rc == XC_ERR_INVALID && strstr(xc_last_error(), "rank 1"), "one bad rank: %s (%s)",
           xc_err_name(rc), xc_last_error());
    /* Arguments only one rank gets wrong, and arguments that differ across
     * ranks: every rank refuses at once (they waited, or wrote a
     * checkpoint that could never load). */
    rc = xc_ckpt_save(c, rank == 1 ? NULL : dir, 9, s.parts, 2);
    EXPECT(rc == XC_ERR_INVALID && strstr(xc_last_error(), "rank 1"),
           "no directory on rank 1: %s (%s)", xc_err_name(rc), xc_last_error());
    xc_ckpt_pending_t *pend = NULL;
    rc = xc_ckpt_save_async(c, dir, rank == 1 ? XC_CKPT_LATEST : 9, s.parts, 2, &pend);
    EXPECT(rc == XC_ERR_INVALID && !pend, "reserved step on rank 1: %s (%s)", xc_err_name(rc),
           xc_last_error());
    rc = xc_ckpt_save(c, dir, rank == 1 ? 10 : 9, s.parts, 2);
    EXPECT(rc == XC_ERR_INVALID && strstr(xc_last_error(), "different steps"),
           "steps differ: %s (%s)", xc_err_name(rc), xc_last_error());
    char other[4096];
    snprintf(other, sizeof other, "%s/../ckpt-other-%d", dir, rank);
    rc = xc_ckpt_save(c, rank == 1 ? other : dir, 9, s.parts, 2);
    EXPECT(rc == XC_ERR_INVALID && strstr(xc_last_error(), "different directories"),
           "directories differ: %s (%s)", xc_err_name(rc), xc_last_error());
    rc = xc_ckpt_load(c, dir, rank == 1 ? 2 : 3, s.parts, 2, &got);
    EXPECT(rc == XC_ERR_INVALID && strstr(xc_last_error(), "different steps"),
           "load steps differ: %s (%s)", xc_err_name(rc), xc_last_error());
    EXPECT(verify(&s, 3), "a refused load wrote into the parts"); /* (the fallback's) */

    /* A checkpoint of a much larger job (16 ranks: its marker is longer
     * than this job's would be) is refused naming the sizes, not as a
     * marker that does not verify. */
    if (rank == 0) {
        char sdir[2048], text[1024];
        snprintf(sdir, sizeof sdir, "%s/step-%020d", dir, 30);
        EXPECT(mkdir(sdir, 0755) == 0, "mkdir %s", sdir);
        int n = snprintf(text, sizeof text, "xcoll checkpoint 1\nstep 30\nranks 16\n");
        for (int r = 0; r < 16; r++) n += snprintf(text + n, sizeof text - (size_t)n, "shard %d %08x\n", r, 0x1234u + (unsigned)r);
        n += snprintf(text + n, sizeof text - (size_t)n, "end %08x\n", crc32c(text, (size_t)n));
        snprintf(path, sizeof path, "%s/COMMIT", sdir);
        FILE *f = fopen(path, "wb");
        EXPECT(f && fwrite(text, 1, (size_t)n, f) == (size_t)n, "write %s", path);
        if (f) fclose(f);
    }
    xc_barrier(c);
    rc = xc_ckpt_load(c, dir, 30, s.parts, 2, &got);
    EXPECT(rc == XC_ERR_CORRUPT && strstr(xc_last_error(), "saved by 16 ranks"),
           "a 16-rank checkpoint: %s (%s)", xc_err_name(rc), xc_last_error());
    free(s.w);
    return fails;
}

static int loop(xc_comm_t *c, const char *dir)
{
    state_t s;
    state_init(&s, 1);
    /* Resume as a training job does: from the newest complete checkpoint
     * (which must verify), re-saving any later, incomplete steps. */
    uint64_t got = 0;
    xc_result_t lr = xc_ckpt_load(c, dir, XC_CKPT_LATEST, s.parts, 2, &got);
    if (lr == XC_OK && !verify(&s, got)) {
        printf("rank %d: FAIL: resumed step %llu with wrong bytes\n", rank, (unsigned long long)got);
        free(s.w);
        return 1;
    }
    if (lr == XC_ERR_PEER_LOST) { /* the kill landed in the resume: expected */
        printf("rank %d: resume: %s: %s\n", rank, xc_err_name(lr), xc_last_error());
        free(s.w);
        return 0;
    }
    if (lr != XC_OK && lr != XC_ERR_NOT_FOUND) {
        printf("rank %d: FAIL: resume: %s: %s\n", rank, xc_err_name(lr), xc_last_error());
        free(s.w);
        return 1;
    }
    for (uint64_t step = got + 1;; step++) {
        set_step(&s, step);
        xc_result_t rc;
        if (step % 2) {
            rc = xc_ckpt_save(c, dir, step, s.parts, 2);
        } else {
            xc_ckpt_pending_t *p;
            rc = xc_ckpt_save_async(c, dir, step, s.parts, 2, &p);
            if (rc == XC_OK) rc = xc_ckpt_wait(p);
        }
        if (rc != XC_OK) {
            printf("rank %d: save %llu: %s: %s\n", rank, (unsigned long long)step,
                   xc_err_name(rc), xc_last_error());
            free(s.w);
            return 0; /* a peer was killed: expected */
        }
    }
}

static int check(xc_comm_t *c, const char *dir)
{
    state_t s;
    state_init(&s, 1);
    uint64_t got = 0;
    xc_result_t rc = xc_ckpt_load(c, dir, XC_CKPT_LATEST, s.parts, 2, &got);
    if (rc == XC_ERR_NOT_FOUND) {
        printf("rank %d: nothing saved yet\n", rank);
        free(s.w);
        return 0;
    }
    EXPECT(rc == XC_OK, "load: %s: %s", xc_err_name(rc), xc_last_error());
    if (rc == XC_OK) {
        EXPECT(verify(&s, got), "step %llu loaded with wrong bytes", (unsigned long long)got);
        if (!fails) printf("rank %d: step %llu verified\n", rank, (unsigned long long)got);
    }
    free(s.w);
    return fails;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: ckpt_prog basic|loop|check DIR\n");
        return 2;
    }
    xc_comm_t *c;
    if (xc_comm_init_env(&c, NULL) != XC_OK) {
        fprintf(stderr, "init: %s\n", xc_last_error());
        return 1;
    }
    rank = xc_comm_rank(c);
    size = xc_comm_size(c);
    int bad = !strcmp(argv[1], "basic") ? basic(c, argv[2])
              : !strcmp(argv[1], "loop") ? loop(c, argv[2])
              : !strcmp(argv[1], "check") ? check(c, argv[2])
                                          : 2;
    xc_comm_destroy(c);
    if (!bad && !strcmp(argv[1], "basic")) printf("rank %d: PASS\n", rank);
    return bad ? 1 : 0;
}
