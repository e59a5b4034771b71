/*
 * sort.c - stable merge sort, insertion sort and binary search.
 */
#include "sample/sort.h"

#include <stdlib.h>
#include <string.h>

#include "sample/check.h"
#include "sample/digest.h"
#include "sample/rng.h"

/* Below this many elements insertion sort beats merging. */
#define INSERTION_CUTOFF 12

static unsigned char *elem(void *base, size_t i, size_t size)
{
    return (unsigned char *)base + i * size;
}

void sample_insertion_sort(void *base, size_t n, size_t size, sample_compare_fn cmp, void *ctx)
{
    unsigned char tmp[64];
    unsigned char *held = size <= sizeof tmp ? tmp : malloc(size);
    if (held == NULL)
        return;
    for (size_t i = 1; i < n; i++) {
        size_t j = i;
        if (cmp(elem(base, j - 1, size), elem(base, i, size), ctx) <= 0)
            continue;
        memcpy(held, elem(base, i, size), size);
        while (j > 0 && cmp(elem(base, j - 1, size), held, ctx) > 0) {
            memcpy(elem(base, j, size), elem(base, j - 1, size), size);
            j--;
        }
        memcpy(elem(base, j, size), held, size);
    }
    if (held != tmp)
        free(held);
}

static void merge_sort_rec(unsigned char *base, unsigned char *scratch, size_t n, size_t size,
                           sample_compare_fn cmp, void *ctx)
{
    size_t mid = n / 2, i = 0, j = mid, k = 0;
    if (n <= INSERTION_CUTOFF) {
        sample_insertion_sort(base, n, size, cmp, ctx);
        return;
    }
    merge_sort_rec(base, scratch, mid, size, cmp, ctx);
    merge_sort_rec(base + mid * size, scratch, n - mid, size, cmp, ctx);
    if (cmp(base + (mid - 1) * size, base + mid * size, ctx) <= 0)
        return;
    while (i < mid && j < n) {
        /* "<= 0" takes the left element on ties: that is what makes it stable. */
        if (cmp(base + i * size, base + j * size, ctx) <= 0)
            memcpy(scratch + k++ * size, base + i++ * size, size);
        else
            memcpy(scratch + k++ * size, base + j++ * size, size);
    }
    memcpy(scratch + k * size, base + i * size, (mid - i) * size);
    k += mid - i;
    memcpy(base, scratch, k * size);
}

int sample_merge_sort(void *base, size_t n, size_t size, sample_compare_fn cmp, void *ctx)
{
    unsigned char *scratch;
    if (n < 2)
        return 0;
    scratch = malloc(n * size);
    if (scratch == NULL)
        return -1;
    merge_sort_rec(base, scratch, n, size, cmp, ctx);
    free(scratch);
    return 0;
}

size_t sample_lower_bound(const void *base, size_t n, size_t size, const void *key,
                          sample_compare_fn cmp, void *ctx)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cmp((const unsigned char *)base + mid * size, key, ctx) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int sample_is_sorted(const void *base, size_t n, size_t size, sample_compare_fn cmp, void *ctx)
{
    const unsigned char *p = base;
    for (size_t i = 1; i < n; i++)
        if (cmp(p + (i - 1) * size, p + i * size, ctx) > 0)
            return 0;
    return 1;
}

int sample_compare_int(const void *a, const void *b, void *ctx)
{
    int x = *(const int *)a, y = *(const int *)b;
    (void)ctx;
    return (x > y) - (x < y);
}

struct record {
    int key;
    int order;
};

static int compare_record_key(const void *a, const void *b, void *ctx)
{
    const struct record *x = a, *y = b;
    int *calls = ctx;
    (*calls)++;
    return (x->key > y->key) - (x->key < y->key);
}

uint32_t sample_sort_selftest(void)
{
    enum { N = 3000 };
    static int numbers[N];
    static struct record records[N];
    struct sample_rng rng;
    uint32_t digest = 0;
    int i, stable = 1, calls = 0, key;
    size_t at;

    sample_rng_seed(&rng, 2024, 3);
    for (i = 0; i < N; i++)
        numbers[i] = (int)sample_rng_below(&rng, 100000) - 50000;
    SAMPLE_CHECK_EQ(sample_merge_sort(numbers, N, sizeof numbers[0], sample_compare_int, NULL), 0);
    SAMPLE_CHECK(sample_is_sorted(numbers, N, sizeof numbers[0], sample_compare_int, NULL));
    digest = sample_crc32(digest, numbers, sizeof numbers);

    key = numbers[1234];
    at = sample_lower_bound(numbers, N, sizeof numbers[0], &key, sample_compare_int, NULL);
    SAMPLE_CHECK(at <= 1234);
    SAMPLE_CHECK_EQ(numbers[at], key);
    SAMPLE_CHECK(at == 0 || numbers[at - 1] < key);
    key = 1000000;
    SAMPLE_CHECK_EQ(sample_lower_bound(numbers, N, sizeof numbers[0], &key, sample_compare_int, NULL), N);

    for (i = 0; i < N; i++) {
        records[i].key = (int)sample_rng_below(&rng, 20);
        records[i].order = i;
    }
    SAMPLE_CHECK_EQ(sample_merge_sort(records, N, sizeof records[0], compare_record_key, &calls), 0);
    for (i = 1; i < N; i++)
        if (records[i - 1].key == records[i].key && records[i - 1].order > records[i].order)
            stable = 0;
    SAMPLE_CHECK(stable);
    SAMPLE_CHECK(sample_is_sorted(records, N, sizeof records[0], compare_record_key, &calls));
    /* n log2 n is about 34700 for 3000 elements; far more would mean a quadratic path. */
    SAMPLE_CHECK(calls < 60000);
    for (i = 0; i < N; i += 97)
        digest = sample_digest_u32(digest, (uint32_t)records[i].order);

    for (i = 0; i < 10; i++)
        numbers[i] = 9 - i;
    sample_insertion_sort(numbers, 10, sizeof numbers[0], sample_compare_int, NULL);
    SAMPLE_CHECK_EQ(numbers[0], 0);
    SAMPLE_CHECK_EQ(numbers[9], 9);
    return digest;
}
