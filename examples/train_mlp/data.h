/*
 * data.h -- the example's dataset, generated from a seed: inputs drawn from
 * an approximately normal distribution, labelled by a fixed random
 * "teacher" network (label = argmax of relu(x T1) T2), so the task is
 * learnable but not linearly trivial.  Every rank generates the same
 * dataset (pure function of the seed) and reads its own rows of each
 * global batch; one rank reading all rows sees exactly the same samples.
 */
#ifndef TRAIN_MLP_DATA_H
#define TRAIN_MLP_DATA_H

#include "fmath.h"

#include <stdint.h>
#include <stdlib.h>

typedef struct dataset {
    int n, dim, classes;
    float *x; /* n x dim */
    int *y;   /* n       */
} dataset_t;

static uint64_t rng_next(uint64_t *s) /* splitmix64 */
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double rng_uniform(uint64_t *s) { return (double)(rng_next(s) >> 11) * 0x1p-53; }

/* Irwin-Hall: the sum of 12 uniforms minus 6 has mean 0, variance 1. */
static float rng_normal(uint64_t *s)
{
    double t = 0;
    for (int i = 0; i < 12; i++) t += rng_uniform(s);
    return (float)(t - 6.0);
}

static void dataset_free(dataset_t *d)
{
    free(d->x);
    free(d->y);
    d->x = NULL;
    d->y = NULL;
}

/* Returns 0, or -1 on allocation failure. */
static int dataset_make(dataset_t *d, int n, int dim, int classes, uint64_t seed)
{
    enum { TH = 64 }; /* teacher width */
    d->n = n;
    d->dim = dim;
    d->classes = classes;
    d->x = malloc(sizeof(float) * (size_t)n * (size_t)dim);
    d->y = malloc(sizeof(int) * (size_t)n);
    float *t1 = malloc(sizeof(float) * (size_t)dim * TH), *t2 = malloc(sizeof(float) * TH * (size_t)classes);
    if (!d->x || !d->y || !t1 || !t2) {
        free(t1);
        free(t2);
        dataset_free(d);
        return -1;
    }
    uint64_t s = seed ^ 0x7ea7c4e5ull;
    float s1 = (float)(1.0 / fm_sqrt(dim)), s2 = (float)(1.0 / fm_sqrt(TH));
    for (int i = 0; i < dim * TH; i++) t1[i] = rng_normal(&s) * s1;
    for (int i = 0; i < TH * classes; i++) t2[i] = rng_normal(&s) * s2;
    for (int i = 0; i < n; i++) {
        float *x = d->x + (size_t)i * (size_t)dim, h[TH];
        for (int k = 0; k < dim; k++) x[k] = rng_normal(&s);
        for (int j = 0; j < TH; j++) {
            float a = 0;
            for (int k = 0; k < dim; k++) a += x[k] * t1[k * TH + j];
            h[j] = a > 0 ? a : 0;
        }
        int best = 0;
        float bv = -1e30f;
        for (int c = 0; c < classes; c++) {
            float a = 0;
            for (int j = 0; j < TH; j++) a += h[j] * t2[j * classes + c];
            if (a > bv) bv = a, best = c;
        }
        d->y[i] = best;
    }
    free(t1);
    free(t2);
    return 0;
}

#endif /* TRAIN_MLP_DATA_H */
