/*
 * utf8.h - decoding, encoding and validating UTF-8.
 *
 * Rejects overlong forms, surrogates and code points above U+10FFFF.
 */
#ifndef SAMPLE_UTF8_H
#define SAMPLE_UTF8_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Decodes one code point from s[0..len); returns its length in bytes, or 0 if invalid. */
size_t sample_utf8_decode(const unsigned char *s, size_t len, uint32_t *cp);

/* Encodes cp into out (room for 4 bytes); returns the length, or 0 if cp is not encodable. */
size_t sample_utf8_encode(uint32_t cp, unsigned char *out);

/* Whether s[0..len) is valid UTF-8. */
int sample_utf8_valid(const char *s, size_t len);

/* Number of code points in a valid string, or -1 if it is not valid. */
long sample_utf8_length(const char *s, size_t len);

/* Byte offset of code point index in s, or -1 when out of range or invalid. */
long sample_utf8_offset(const char *s, size_t len, size_t index);

/* Self-test of this module; returns its digest. */
uint32_t sample_utf8_selftest(void);

#ifdef __cplusplus
}
#endif

#endif /* SAMPLE_UTF8_H */
