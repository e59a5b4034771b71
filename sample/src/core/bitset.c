/*
 * bitset.c - a fixed-size set of bits in 64-bit words.
 */
#include "sample/bitset.h"

#include <stdlib.h>

#include "sample/check.h"
#include "sample/digest.h"

#define WORD_BITS 64u

static size_t word_count(size_t nbits)
{
    return (nbits + WORD_BITS - 1) / WORD_BITS;
}

int sample_bitset_init(struct sample_bitset *set, size_t nbits)
{
    size_t words = word_count(nbits);
    set->nbits = nbits;
    set->words = calloc(words ? words : 1, sizeof *set->words);
    return set->words != NULL ? 0 : -1;
}

void sample_bitset_set(struct sample_bitset *set, size_t i)
{
    if (i < set->nbits)
        set->words[i / WORD_BITS] |= (uint64_t)1 << (i % WORD_BITS);
}

void sample_bitset_clear(struct sample_bitset *set, size_t i)
{
    if (i < set->nbits)
        set->words[i / WORD_BITS] &= ~((uint64_t)1 << (i % WORD_BITS));
}

int sample_bitset_test(const struct sample_bitset *set, size_t i)
{
    if (i >= set->nbits)
        return 0;
    return (int)((set->words[i / WORD_BITS] >> (i % WORD_BITS)) & 1u);
}

void sample_bitset_fill(struct sample_bitset *set)
{
    size_t words = word_count(set->nbits);
    for (size_t w = 0; w < words; w++)
        set->words[w] = ~(uint64_t)0;
    /* Bits past nbits stay clear so that counting needs no mask. */
    if (set->nbits % WORD_BITS != 0)
        set->words[words - 1] = ((uint64_t)1 << (set->nbits % WORD_BITS)) - 1;
}

static unsigned popcount64(uint64_t x)
{
    x = x - ((x >> 1) & 0x5555555555555555ULL);
    x = (x & 0x3333333333333333ULL) + ((x >> 2) & 0x3333333333333333ULL);
    x = (x + (x >> 4)) & 0x0F0F0F0F0F0F0F0FULL;
    return (unsigned)((x * 0x0101010101010101ULL) >> 56);
}

size_t sample_bitset_count(const struct sample_bitset *set)
{
    size_t total = 0, words = word_count(set->nbits);
    for (size_t w = 0; w < words; w++)
        total += popcount64(set->words[w]);
    return total;
}

size_t sample_bitset_next(const struct sample_bitset *set, size_t from)
{
    size_t words = word_count(set->nbits), w;
    uint64_t bits;
    if (from >= set->nbits)
        return set->nbits;
    w = from / WORD_BITS;
    bits = set->words[w] & (~(uint64_t)0 << (from % WORD_BITS));
    for (;;) {
        if (bits != 0) {
            size_t bit = 0;
            while (((bits >> bit) & 1u) == 0)
                bit++;
            return w * WORD_BITS + bit;
        }
        if (++w >= words)
            return set->nbits;
        bits = set->words[w];
    }
}

int sample_bitset_and(struct sample_bitset *set, const struct sample_bitset *other)
{
    if (set->nbits != other->nbits)
        return -1;
    for (size_t w = 0; w < word_count(set->nbits); w++)
        set->words[w] &= other->words[w];
    return 0;
}

void sample_bitset_free(struct sample_bitset *set)
{
    free(set->words);
    set->words = NULL;
    set->nbits = 0;
}

uint32_t sample_bitset_selftest(void)
{
    struct sample_bitset evens, threes;
    uint32_t digest = 0;
    size_t i, walked = 0;

    SAMPLE_CHECK_EQ(sample_bitset_init(&evens, 1000), 0);
    SAMPLE_CHECK_EQ(sample_bitset_init(&threes, 1000), 0);
    SAMPLE_CHECK_EQ(sample_bitset_count(&evens), 0);

    for (i = 0; i < 1000; i += 2)
        sample_bitset_set(&evens, i);
    for (i = 0; i < 1000; i += 3)
        sample_bitset_set(&threes, i);
    sample_bitset_set(&evens, 5000);
    SAMPLE_CHECK_EQ(sample_bitset_count(&evens), 500);
    SAMPLE_CHECK_EQ(sample_bitset_count(&threes), 334);
    SAMPLE_CHECK(sample_bitset_test(&evens, 998));
    SAMPLE_CHECK(!sample_bitset_test(&evens, 999));
    SAMPLE_CHECK(!sample_bitset_test(&evens, 5000));

    SAMPLE_CHECK_EQ(sample_bitset_and(&evens, &threes), 0);
    SAMPLE_CHECK_EQ(sample_bitset_count(&evens), 167);
    for (i = sample_bitset_next(&evens, 0); i < evens.nbits; i = sample_bitset_next(&evens, i + 1)) {
        if (i % 6 != 0)
            break;
        walked++;
        digest = sample_digest_u32(digest, (uint32_t)i);
    }
    SAMPLE_CHECK_EQ(walked, 167);
    SAMPLE_CHECK_EQ(sample_bitset_next(&evens, 991), 996);
    SAMPLE_CHECK_EQ(sample_bitset_next(&evens, 997), 1000);

    sample_bitset_clear(&threes, 0);
    SAMPLE_CHECK_EQ(sample_bitset_next(&threes, 0), 3);
    sample_bitset_fill(&threes);
    SAMPLE_CHECK_EQ(sample_bitset_count(&threes), 1000);
    sample_bitset_free(&threes);

    SAMPLE_CHECK_EQ(sample_bitset_init(&threes, 10), 0);
    SAMPLE_CHECK_EQ(sample_bitset_and(&evens, &threes), -1);
    sample_bitset_free(&threes);
    sample_bitset_free(&evens);
    return digest;
}
