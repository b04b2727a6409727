/*
 * stats.h -- the examples' order statistics (header-only): the comparison
 * for qsort and the median they report per-step figures with.
 */
#ifndef XCOLL_EXAMPLE_STATS_H
#define XCOLL_EXAMPLE_STATS_H

#include <stdlib.h>

static inline int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of v[0..n) (sorts v in place; the middle two's mean for an
 * even n); 0 for n < 1.  The examples report per-step figures as medians:
 * the first steps pay first-touch costs (tens of times a steady step's
 * communication on a VM) that a mean over a short run would carry. */
static inline double median_of(double *v, int n)
{
    if (n < 1) return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif
