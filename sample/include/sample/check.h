/*
 * check.h - the self-check counters behind SAMPLE_CHECK.
 *
 * Every module's self-test reports its expectations through these macros.
 * A failed check prints the file and line it came from (via __FILE__ and
 * __LINE__) and is counted; the program's exit status follows the count.
 */
#ifndef SAMPLE_CHECK_H
#define SAMPLE_CHECK_H

#ifdef __cplusplus
extern "C" {
#endif

/* Counts one check; on failure prints "file:line: check failed: expr". Returns ok. */
int sample_check_record(int ok, const char *expr, const char *file, int line);

/* Counts one equality check of two integers; on failure prints both values. */
int sample_check_equal_long(long long got, long long want, const char *expr,
                            const char *file, int line);

/* Counts one equality check of two strings (NULL equals only NULL). */
int sample_check_equal_str(const char *got, const char *want, const char *expr,
                           const char *file, int line);

/* Counts one check that |got - want| <= tol. */
int sample_check_near(double got, double want, double tol, const char *expr,
                      const char *file, int line);

/* Number of checks that passed so far. */
unsigned sample_check_passed(void);

/* Number of checks that failed so far. */
unsigned sample_check_failed(void);

#ifdef __cplusplus
}
#endif

#define SAMPLE_CHECK(cond) \
    sample_check_record((cond) ? 1 : 0, #cond, __FILE__, __LINE__)

#define SAMPLE_CHECK_EQ(got, want)                                   \
    sample_check_equal_long((long long)(got), (long long)(want),     \
                            #got " == " #want, __FILE__, __LINE__)

#define SAMPLE_CHECK_STR(got, want) \
    sample_check_equal_str((got), (want), #got " == " #want, __FILE__, __LINE__)

#define SAMPLE_CHECK_NEAR(got, want, tol)                                   \
    sample_check_near((double)(got), (double)(want), (double)(tol),         \
                      #got " ~ " #want, __FILE__, __LINE__)

#endif /* SAMPLE_CHECK_H */
