/*
 * check.c - counters behind SAMPLE_CHECK and its variants.
 */
#include "sample/check.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static unsigned passed_count;
static unsigned failed_count;

static int count(int ok)
{
    if (ok)
        passed_count++;
    else
        failed_count++;
    return ok;
}

int sample_check_record(int ok, const char *expr, const char *file, int line)
{
    if (!count(ok))
        fprintf(stderr, "%s:%d: check failed: %s\n", file, line, expr);
    return ok;
}

int sample_check_equal_long(long long got, long long want, const char *expr,
                            const char *file, int line)
{
    int ok = got == want;
    if (!count(ok))
        fprintf(stderr, "%s:%d: check failed: %s (got %lld, want %lld)\n", file, line, expr,
                got, want);
    return ok;
}

int sample_check_equal_str(const char *got, const char *want, const char *expr,
                           const char *file, int line)
{
    int ok;
    if (got == NULL || want == NULL)
        ok = got == want;
    else
        ok = strcmp(got, want) == 0;
    if (!count(ok))
        fprintf(stderr, "%s:%d: check failed: %s (got \"%s\", want \"%s\")\n", file, line, expr,
                got ? got : "(null)", want ? want : "(null)");
    return ok;
}

int sample_check_near(double got, double want, double tol, const char *expr, const char *file,
                      int line)
{
    /* NaN compares false both ways, so a NaN result fails instead of passing. */
    int ok = fabs(got - want) <= tol;
    if (!count(ok))
        fprintf(stderr, "%s:%d: check failed: %s (got %.9g, want %.9g, tolerance %.3g)\n", file,
                line, expr, got, want, tol);
    return ok;
}

unsigned sample_check_passed(void)
{
    return passed_count;
}

unsigned sample_check_failed(void)
{
    return failed_count;
}
