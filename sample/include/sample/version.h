/*
 * version.h - the version the build stamps into the program.
 *
 * The build passes the version as a bare token on the command line, for
 * example -DSAMPLE_VERSION=1.4.2; this header turns it into a string.
 */
#ifndef SAMPLE_VERSION_H
#define SAMPLE_VERSION_H

#ifndef SAMPLE_VERSION
#error "SAMPLE_VERSION is not defined: build with -DSAMPLE_VERSION=<major>.<minor>.<patch>"
#endif

#define SAMPLE_STRINGIFY_(x) #x
#define SAMPLE_STRINGIFY(x) SAMPLE_STRINGIFY_(x)
#define SAMPLE_VERSION_STRING SAMPLE_STRINGIFY(SAMPLE_VERSION)

#ifdef __cplusplus
extern "C" {
#endif

/* The version string, e.g. "1.4.2". */
const char *sample_version(void);

/* Splits the version into its numbers; returns 0 unless it reads major.minor.patch. */
int sample_version_parts(int *major, int *minor, int *patch);

#ifdef __cplusplus
}
#endif

#endif /* SAMPLE_VERSION_H */
