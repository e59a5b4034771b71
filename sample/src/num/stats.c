/*
 * stats.c - running moments, quantiles, correlation, least squares.
 */
#include "sample/stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sample/check.h"
#include "sample/digest.h"
#include "sample/rng.h"
#include "sample/sort.h"

void sample_running_init(struct sample_running_stats *rs)
{
    rs->n = 0;
    rs->mean = 0.0;
    rs->m2 = 0.0;
    rs->min = 0.0;
    rs->max = 0.0;
}

void sample_running_push(struct sample_running_stats *rs, double x)
{
    double delta;
    rs->n++;
    if (rs->n == 1) {
        rs->min = x;
        rs->max = x;
    } else {
        if (x < rs->min)
            rs->min = x;
        if (x > rs->max)
            rs->max = x;
    }
    /* Welford: no catastrophic cancellation, unlike sum of squares minus square of sum. */
    delta = x - rs->mean;
    rs->mean += delta / (double)rs->n;
    rs->m2 += delta * (x - rs->mean);
}

double sample_running_variance(const struct sample_running_stats *rs)
{
    return rs->n < 2 ? 0.0 : rs->m2 / (double)(rs->n - 1);
}

double sample_mean(const double *x, size_t n)
{
    struct sample_running_stats rs;
    sample_running_init(&rs);
    for (size_t i = 0; i < n; i++)
        sample_running_push(&rs, x[i]);
    return rs.mean;
}

double sample_stddev(const double *x, size_t n)
{
    struct sample_running_stats rs;
    sample_running_init(&rs);
    for (size_t i = 0; i < n; i++)
        sample_running_push(&rs, x[i]);
    return sqrt(sample_running_variance(&rs));
}

static int compare_double(const void *a, const void *b, void *ctx)
{
    double x = *(const double *)a, y = *(const double *)b;
    (void)ctx;
    return (x > y) - (x < y);
}

double sample_quantile(const double *x, size_t n, double q)
{
    double *sorted, pos, frac, result;
    size_t lo;
    if (n == 0 || q < 0.0 || q > 1.0)
        return -1.0;
    sorted = malloc(n * sizeof *sorted);
    if (sorted == NULL)
        return -1.0;
    memcpy(sorted, x, n * sizeof *sorted);
    if (sample_merge_sort(sorted, n, sizeof *sorted, compare_double, NULL) != 0) {
        free(sorted);
        return -1.0;
    }
    pos = q * (double)(n - 1);
    lo = (size_t)pos;
    frac = pos - (double)lo;
    result = lo + 1 < n ? sorted[lo] + frac * (sorted[lo + 1] - sorted[lo]) : sorted[lo];
    free(sorted);
    return result;
}

int sample_linear_fit(const double *x, const double *y, size_t n, double *slope,
                      double *intercept, double *r2)
{
    double mx = sample_mean(x, n), my = sample_mean(y, n);
    double sxx = 0.0, sxy = 0.0, syy = 0.0;
    for (size_t i = 0; i < n; i++) {
        sxx += (x[i] - mx) * (x[i] - mx);
        sxy += (x[i] - mx) * (y[i] - my);
        syy += (y[i] - my) * (y[i] - my);
    }
    if (n < 2 || sxx == 0.0)
        return -1;
    *slope = sxy / sxx;
    *intercept = my - *slope * mx;
    *r2 = syy == 0.0 ? 1.0 : (sxy * sxy) / (sxx * syy);
    return 0;
}

double sample_correlation(const double *x, const double *y, size_t n)
{
    double mx = sample_mean(x, n), my = sample_mean(y, n);
    double sxx = 0.0, sxy = 0.0, syy = 0.0;
    for (size_t i = 0; i < n; i++) {
        sxx += (x[i] - mx) * (x[i] - mx);
        sxy += (x[i] - mx) * (y[i] - my);
        syy += (y[i] - my) * (y[i] - my);
    }
    if (sxx == 0.0 || syy == 0.0)
        return 0.0;
    return sxy / sqrt(sxx * syy);
}

uint32_t sample_stats_selftest(void)
{
    static const double data[] = { 2, 4, 4, 4, 5, 5, 7, 9 };
    static double xs[200], ys[200], big[200];
    struct sample_running_stats rs;
    struct sample_rng rng;
    double slope = 0.0, intercept = 0.0, r2 = 0.0;
    uint32_t digest = 0;
    size_t i;

    SAMPLE_CHECK_NEAR(sample_mean(data, 8), 5.0, 1e-12);
    SAMPLE_CHECK_NEAR(sample_stddev(data, 8), sqrt(32.0 / 7.0), 1e-12);
    SAMPLE_CHECK_NEAR(sample_quantile(data, 8, 0.5), 4.5, 1e-12);
    SAMPLE_CHECK_NEAR(sample_quantile(data, 8, 0.25), 4.0, 1e-12);
    SAMPLE_CHECK_NEAR(sample_quantile(data, 8, 1.0), 9.0, 1e-12);
    SAMPLE_CHECK_NEAR(sample_quantile(data, 8, 0.9), 7.6, 1e-12);
    SAMPLE_CHECK_NEAR(sample_quantile(data, 0, 0.5), -1.0, 0.0);

    /* Large offsets: a naive sum of squares would lose every digit here. */
    sample_running_init(&rs);
    for (i = 0; i < 8; i++)
        sample_running_push(&rs, 1e9 + data[i]);
    SAMPLE_CHECK_NEAR(sample_running_variance(&rs), 32.0 / 7.0, 1e-6);
    SAMPLE_CHECK_NEAR(rs.min, 1e9 + 2, 0.0);
    SAMPLE_CHECK_NEAR(rs.max, 1e9 + 9, 0.0);

    sample_rng_seed(&rng, 7, 11);
    for (i = 0; i < 200; i++) {
        xs[i] = (double)i / 10.0;
        ys[i] = 3.0 * xs[i] - 2.0 + (sample_rng_double(&rng) - 0.5) * 0.1;
        big[i] = sample_rng_double(&rng) * 100.0;
    }
    SAMPLE_CHECK_EQ(sample_linear_fit(xs, ys, 200, &slope, &intercept, &r2), 0);
    SAMPLE_CHECK_NEAR(slope, 3.0, 0.01);
    SAMPLE_CHECK_NEAR(intercept, -2.0, 0.05);
    SAMPLE_CHECK(r2 > 0.9999);
    SAMPLE_CHECK(sample_correlation(xs, ys, 200) > 0.9999);
    SAMPLE_CHECK_NEAR(sample_correlation(xs, xs, 200), 1.0, 1e-12);
    SAMPLE_CHECK_NEAR(sample_correlation(xs, data, 1), 0.0, 0.0);
    SAMPLE_CHECK_EQ(sample_linear_fit(data, data, 1, &slope, &intercept, &r2), -1);
    SAMPLE_CHECK_NEAR(sample_quantile(big, 200, 0.5), 50.0, 10.0);

    digest = sample_digest_double(digest, sample_quantile(big, 200, 0.5));
    digest = sample_digest_double(digest, sample_mean(big, 200));
    return sample_digest_double(digest, sample_stddev(data, 8));
}
