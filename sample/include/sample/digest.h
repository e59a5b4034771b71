/*
 * digest.h - CRC-32 and the running digest every self-test returns.
 *
 * A self-test folds the values it computed into a digest so that the
 * program's report changes if any result does.
 */
#ifndef SAMPLE_DIGEST_H
#define SAMPLE_DIGEST_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* CRC-32 (IEEE 802.3, reflected) of len bytes, continuing from crc (start with 0). */
uint32_t sample_crc32(uint32_t crc, const void *data, size_t len);

/* Adler-32 of len bytes, continuing from adler (start with 1). */
uint32_t sample_adler32(uint32_t adler, const void *data, size_t len);

/* Folds a 32-bit value into a digest, byte order independent of the host. */
uint32_t sample_digest_u32(uint32_t digest, uint32_t value);

/* Folds a NUL-terminated string into a digest. */
uint32_t sample_digest_str(uint32_t digest, const char *s);

/* Folds a double into a digest, rounded to 1e-6 so that the digest is stable. */
uint32_t sample_digest_double(uint32_t digest, double value);

#ifdef __cplusplus
}
#endif

#endif /* SAMPLE_DIGEST_H */
