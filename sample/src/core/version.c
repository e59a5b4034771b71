/*
 * version.c - the version string stamped in by the build.
 */
#include "sample/version.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "sample/check.h"
#include "sample/digest.h"
#include "sample/selftest.h"

static const char version_string[] = SAMPLE_VERSION_STRING;

const char *sample_version(void)
{
    return version_string;
}

/* Reads a decimal number without sign; returns the position after it, or NULL. */
static const char *read_number(const char *s, int *out)
{
    long value = 0;
    if (!isdigit((unsigned char)*s))
        return NULL;
    while (isdigit((unsigned char)*s)) {
        value = value * 10 + (*s - '0');
        if (value > 99999)
            return NULL;
        s++;
    }
    *out = (int)value;
    return s;
}

int sample_version_parts(int *major, int *minor, int *patch)
{
    const char *s = version_string;
    if ((s = read_number(s, major)) == NULL || *s++ != '.')
        return 0;
    if ((s = read_number(s, minor)) == NULL || *s++ != '.')
        return 0;
    if ((s = read_number(s, patch)) == NULL)
        return 0;
    return *s == '\0';
}

uint32_t sample_version_selftest(void)
{
    int major = -1, minor = -1, patch = -1;
    uint32_t digest = 0;

    SAMPLE_CHECK(sample_version_parts(&major, &minor, &patch));
    SAMPLE_CHECK(major >= 0 && minor >= 0 && patch >= 0);
    SAMPLE_CHECK(strlen(sample_version()) >= 5);
    SAMPLE_CHECK(strchr(sample_version(), '"') == NULL);

    digest = sample_digest_u32(digest, (uint32_t)major);
    digest = sample_digest_u32(digest, (uint32_t)minor);
    return sample_digest_u32(digest, (uint32_t)patch);
}
