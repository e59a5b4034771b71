/*
 * base64.h - RFC 4648 base64 (standard alphabet, with padding).
 */
#ifndef SAMPLE_BASE64_H
#define SAMPLE_BASE64_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Length of the encoding of n bytes, without the terminating NUL. */
size_t sample_base64_encoded_len(size_t n);

/* Encodes n bytes into out (room for encoded_len + 1); returns the length written. */
size_t sample_base64_encode(const unsigned char *in, size_t n, char *out);

/*
 * Decodes len characters into out (room for len / 4 * 3 bytes); returns the
 * number of bytes, or -1 when the input is not valid padded base64.
 */
long sample_base64_decode(const char *in, size_t len, unsigned char *out);

/* Self-test of this module; returns its digest. */
uint32_t sample_base64_selftest(void);

#ifdef __cplusplus
}
#endif

#endif /* SAMPLE_BASE64_H */
