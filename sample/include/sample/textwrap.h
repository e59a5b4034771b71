/*
 * textwrap.h - greedy word wrapping and justification to a fixed width.
 */
#ifndef SAMPLE_TEXTWRAP_H
#define SAMPLE_TEXTWRAP_H

#include <stddef.h>
#include <stdint.h>

#include "sample/strbuf.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Layout choices. */
enum sample_wrap_align {
    SAMPLE_WRAP_LEFT = 0,
    SAMPLE_WRAP_RIGHT,
    SAMPLE_WRAP_CENTER,
    SAMPLE_WRAP_JUSTIFY
};

/*
 * Wraps text into lines of at most width bytes (longer words get a line of
 * their own), appending them to out separated by '\n'. Returns the number
 * of lines, or -1 when out of memory.
 */
long sample_wrap(const char *text, size_t width, enum sample_wrap_align align,
                 struct sample_strbuf *out);

/* Self-test of this module; returns its digest. */
uint32_t sample_textwrap_selftest(void);

#ifdef __cplusplus
}
#endif

#endif /* SAMPLE_TEXTWRAP_H */
