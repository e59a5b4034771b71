/*
 * strbuf.h - a growable, always NUL-terminated string builder.
 */
#ifndef SAMPLE_STRBUF_H
#define SAMPLE_STRBUF_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A string of len bytes in a buffer of cap bytes (cap > len once anything was added). */
struct sample_strbuf {
    char *data;
    size_t len;
    size_t cap;
    int failed; /* set once an allocation failed; later appends do nothing */
};

/* Prepares an empty builder. */
void sample_strbuf_init(struct sample_strbuf *sb);

/* The contents; "" for an empty builder. */
const char *sample_strbuf_cstr(const struct sample_strbuf *sb);

/* Appends len bytes; returns 0, or -1 when out of memory. */
int sample_strbuf_append_len(struct sample_strbuf *sb, const char *s, size_t len);

/* Appends a NUL-terminated string. */
int sample_strbuf_append(struct sample_strbuf *sb, const char *s);

/* Appends one byte. */
int sample_strbuf_append_char(struct sample_strbuf *sb, char c);

/* Appends formatted text (printf rules). */
int sample_strbuf_appendf(struct sample_strbuf *sb, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Appends formatted text from a va_list. */
int sample_strbuf_vappendf(struct sample_strbuf *sb, const char *fmt, va_list ap);

/* Shortens the contents to len bytes (no-op when already shorter). */
void sample_strbuf_truncate(struct sample_strbuf *sb, size_t len);

/* Removes leading and trailing ASCII white space. */
void sample_strbuf_trim(struct sample_strbuf *sb);

/* Replaces every occurrence of from (non-empty) with to; returns the count, or -1. */
long sample_strbuf_replace(struct sample_strbuf *sb, const char *from, const char *to);

/* Takes ownership of the buffer (caller frees it) and empties the builder. */
char *sample_strbuf_detach(struct sample_strbuf *sb);

/* Releases the storage. */
void sample_strbuf_free(struct sample_strbuf *sb);

/* Self-test of this module; returns its digest. */
uint32_t sample_strbuf_selftest(void);

#ifdef __cplusplus
}
#endif

#endif /* SAMPLE_STRBUF_H */
