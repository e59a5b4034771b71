/*
 * stats.h - descriptive statistics over arrays of doubles.
 *
 * Mean and variance use Welford's method; quantiles interpolate linearly
 * between order statistics (the "type 7" rule).
 */
#ifndef SAMPLE_STATS_H
#define SAMPLE_STATS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Running mean and variance. */
struct sample_running_stats {
    size_t n;
    double mean;
    double m2;
    double min;
    double max;
};

/* Resets the running statistics. */
void sample_running_init(struct sample_running_stats *rs);

/* Adds one observation. */
void sample_running_push(struct sample_running_stats *rs, double x);

/* Sample variance (n - 1 in the denominator); 0 for fewer than two values. */
double sample_running_variance(const struct sample_running_stats *rs);

/* Mean of n values (0 when n is 0). */
double sample_mean(const double *x, size_t n);

/* Sample standard deviation. */
double sample_stddev(const double *x, size_t n);

/* Quantile q in [0, 1] of n values (sorted copy; -1 when out of memory or n is 0). */
double sample_quantile(const double *x, size_t n, double q);

/* Least-squares line y = slope * x + intercept; returns -1 when x is constant. */
int sample_linear_fit(const double *x, const double *y, size_t n, double *slope,
                      double *intercept, double *r2);

/* Pearson correlation of x and y (0 when either is constant). */
double sample_correlation(const double *x, const double *y, size_t n);

/* Self-test of this module; returns its digest. */
uint32_t sample_stats_selftest(void);

#ifdef __cplusplus
}
#endif

#endif /* SAMPLE_STATS_H */
