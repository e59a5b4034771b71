/*
 * sort.h - generic stable sorting and searching over arrays.
 *
 * qsort is not stable; these are, which keeps the program's output
 * independent of the C library.
 */
#ifndef SAMPLE_SORT_H
#define SAMPLE_SORT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Compares two elements like strcmp: negative, zero or positive. */
typedef int (*sample_compare_fn)(const void *a, const void *b, void *ctx);

/* Stable merge sort of n elements of size bytes; returns 0, or -1 when out of memory. */
int sample_merge_sort(void *base, size_t n, size_t size, sample_compare_fn cmp, void *ctx);

/* Stable insertion sort; for short arrays. */
void sample_insertion_sort(void *base, size_t n, size_t size, sample_compare_fn cmp, void *ctx);

/* Index of the first element not less than key in a sorted array (n when none). */
size_t sample_lower_bound(const void *base, size_t n, size_t size, const void *key,
                          sample_compare_fn cmp, void *ctx);

/* Whether the array is sorted according to cmp. */
int sample_is_sorted(const void *base, size_t n, size_t size, sample_compare_fn cmp, void *ctx);

/* Compares two ints (for use with the functions above). */
int sample_compare_int(const void *a, const void *b, void *ctx);

/* Self-test of this module; returns its digest. */
uint32_t sample_sort_selftest(void);

#ifdef __cplusplus
}
#endif

#endif /* SAMPLE_SORT_H */
