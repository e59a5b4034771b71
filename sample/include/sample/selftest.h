/*
 * selftest.h - the table of module self-tests the program runs.
 *
 * Each entry names a module and the function that checks it; the function
 * records its checks through check.h and returns a digest of its results.
 */
#ifndef SAMPLE_SELFTEST_H
#define SAMPLE_SELFTEST_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A self-test: runs the checks of one module and returns a digest of its results. */
typedef uint32_t (*sample_selftest_fn)(void);

/* One module's entry. */
struct sample_selftest {
    const char *name;
    sample_selftest_fn run;
};

/* Self-test of the version stamp. */
uint32_t sample_version_selftest(void);

/* Self-test of the digests. */
uint32_t sample_digest_selftest(void);

#ifdef __cplusplus
}
#endif

#endif /* SAMPLE_SELFTEST_H */
