/*
 * gemm.h -- the matrix products the MLP example needs, written out so that
 * the example depends on nothing but xcoll (header-only: the example builds
 * from one .c file).
 *
 *   C[M x N] = A[M x K] * op(B)     op(B) = B [K x N] or Bt^T (Bt: N x K)
 *
 * (row-major, leading dimensions).  Columns of op(B) are taken 32 at a
 * time and packed into a K x 32 panel (zero-padded at the right edge), which
 * stays in cache while every row block of A runs over it; a 4 x 32 tile of C
 * is accumulated in registers while k runs (per k: 32 floats of the panel,
 * 4 broadcasts of A, 128 multiply-adds).  One routine per instruction set
 * (target_clones: AVX-512, AVX2+FMA, baseline), chosen once by the loader.
 *
 * Determinism: every element of C is the sum over k in increasing order,
 * one multiply-add at a time -- vectorisation runs across columns, never
 * across k -- so a result does not depend on alignment, tiling, the number
 * of rows or columns, only on the instruction set (fused or separate
 * multiply-add), which is the same for every rank of a machine.  This is
 * what lets the example compare an N-rank run with its serial emulation
 * bit for bit.
 */
#ifndef TRAIN_MLP_GEMM_H
#define TRAIN_MLP_GEMM_H

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define GEMM_MR 4
#define GEMM_NR 32

/* Not under sanitizers: an instrumented ifunc resolver runs before the
 * sanitizer's runtime is initialised and crashes at load. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && \
    !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
#define GEMM_CLONES __attribute__((target_clones("avx512f", "avx2,fma", "default"), \
                                   optimize("fp-contract=fast")))
#else
#define GEMM_CLONES
#endif

/* `mr` (1..4) rows of A times the K x 32 panel P into out[mr][32]. */
GEMM_CLONES
static void gemm_rows(size_t mr, size_t K, const float *A, size_t lda, const float *P,
                      float out[GEMM_MR][GEMM_NR])
{
    float acc[GEMM_MR][GEMM_NR];
    memset(acc, 0, sizeof acc);
    if (mr == GEMM_MR) { /* the hot loop: constant bounds, registers */
        for (size_t k = 0; k < K; k++) {
            const float *p = P + k * GEMM_NR;
            for (int r = 0; r < GEMM_MR; r++) {
                float a = A[r * lda + k];
                for (int c = 0; c < GEMM_NR; c++) acc[r][c] += a * p[c];
            }
        }
    } else {
        for (size_t k = 0; k < K; k++) {
            const float *p = P + k * GEMM_NR;
            for (size_t r = 0; r < mr; r++) {
                float a = A[r * lda + k];
                for (int c = 0; c < GEMM_NR; c++) acc[r][c] += a * p[c];
            }
        }
    }
    memcpy(out, acc, sizeof acc);
}

/* C = A * op(B); `trans_b`: B is given as Bt (N x K, leading dim ldb).
 * Returns 0, or -1 if the panel cannot be allocated. */
static int gemm(size_t M, size_t N, size_t K, const float *A, size_t lda, const float *B,
                size_t ldb, int trans_b, float *C, size_t ldc)
{
    float *P = aligned_alloc(64, (K ? K : 1) * GEMM_NR * sizeof(float));
    if (!P) return -1;
    float tile[GEMM_MR][GEMM_NR];
    for (size_t j = 0; j < N; j += GEMM_NR) {
        size_t nr = N - j < GEMM_NR ? N - j : GEMM_NR;
        for (size_t k = 0; k < K; k++) { /* pack the panel */
            float *p = P + k * GEMM_NR;
            size_t c = 0;
            if (trans_b)
                for (; c < nr; c++) p[c] = B[(j + c) * ldb + k];
            else
                for (; c < nr; c++) p[c] = B[k * ldb + j + c];
            for (; c < GEMM_NR; c++) p[c] = 0;
        }
        for (size_t i = 0; i < M; i += GEMM_MR) {
            size_t mr = M - i < GEMM_MR ? M - i : GEMM_MR;
            gemm_rows(mr, K, A + i * lda, lda, P, tile);
            for (size_t r = 0; r < mr; r++) memcpy(C + (i + r) * ldc + j, tile[r], nr * sizeof(float));
        }
    }
    free(P);
    return 0;
}

/* out[cols x rows] = in[rows x cols]^T, in blocks for the cache. */
static void transpose(size_t rows, size_t cols, const float *in, float *out)
{
    const size_t T = 32;
    for (size_t i0 = 0; i0 < rows; i0 += T)
        for (size_t j0 = 0; j0 < cols; j0 += T)
            for (size_t i = i0; i < i0 + T && i < rows; i++)
                for (size_t j = j0; j < j0 + T && j < cols; j++) out[j * rows + i] = in[i * cols + j];
}

#endif /* TRAIN_MLP_GEMM_H */
