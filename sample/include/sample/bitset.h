/*
 * bitset.h - a fixed-size set of bits.
 */
#ifndef SAMPLE_BITSET_H
#define SAMPLE_BITSET_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* nbits bits stored in 64-bit words. */
struct sample_bitset {
    uint64_t *words;
    size_t nbits;
};

/* Allocates nbits cleared bits; returns 0 on success, -1 when out of memory. */
int sample_bitset_init(struct sample_bitset *set, size_t nbits);

/* Sets bit i (ignored when out of range). */
void sample_bitset_set(struct sample_bitset *set, size_t i);

/* Clears bit i (ignored when out of range). */
void sample_bitset_clear(struct sample_bitset *set, size_t i);

/* Whether bit i is set (0 when out of range). */
int sample_bitset_test(const struct sample_bitset *set, size_t i);

/* Sets every bit. */
void sample_bitset_fill(struct sample_bitset *set);

/* Number of set bits. */
size_t sample_bitset_count(const struct sample_bitset *set);

/* Index of the first set bit at or after from, or nbits when there is none. */
size_t sample_bitset_next(const struct sample_bitset *set, size_t from);

/* Keeps only the bits also set in other (sizes must match); returns -1 if they do not. */
int sample_bitset_and(struct sample_bitset *set, const struct sample_bitset *other);

/* Releases the storage. */
void sample_bitset_free(struct sample_bitset *set);

/* Self-test of this module; returns its digest. */
uint32_t sample_bitset_selftest(void);

#ifdef __cplusplus
}
#endif

#endif /* SAMPLE_BITSET_H */
