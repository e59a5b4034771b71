/*
 * textdist.h - distances and similarities between strings.
 */
#ifndef SAMPLE_TEXTDIST_H
#define SAMPLE_TEXTDIST_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Levenshtein distance (insert, delete, substitute cost 1); -1 when out of memory. */
long sample_levenshtein(const char *a, const char *b);

/* Optimal string alignment distance (Levenshtein plus adjacent transposition). */
long sample_osa_distance(const char *a, const char *b);

/* Length of the longest common subsequence; -1 when out of memory. */
long sample_lcs_length(const char *a, const char *b);

/* Hamming distance of equal-length strings, -1 when the lengths differ. */
long sample_hamming(const char *a, const char *b);

/* Index of the candidate closest to word (first one on ties), or -1 when n is 0. */
long sample_closest_word(const char *word, const char *const *candidates, size_t n);

/* Self-test of this module; returns its digest. */
uint32_t sample_textdist_selftest(void);

#ifdef __cplusplus
}
#endif

#endif /* SAMPLE_TEXTDIST_H */
