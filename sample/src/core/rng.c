/*
 * rng.c - PCG32 (XSH RR variant, 64-bit state).
 */
#include "sample/rng.h"

#include "sample/check.h"
#include "sample/digest.h"

void sample_rng_seed(struct sample_rng *rng, uint64_t seed, uint64_t stream)
{
    rng->state = 0;
    rng->inc = (stream << 1) | 1u;
    sample_rng_next(rng);
    rng->state += seed;
    sample_rng_next(rng);
}

uint32_t sample_rng_next(struct sample_rng *rng)
{
    uint64_t old = rng->state;
    uint32_t xorshifted, rot;
    rng->state = old * 6364136223846793005ULL + rng->inc;
    xorshifted = (uint32_t)(((old >> 18) ^ old) >> 27);
    rot = (uint32_t)(old >> 59);
    return (xorshifted >> rot) | (xorshifted << ((32 - rot) & 31));
}

uint32_t sample_rng_below(struct sample_rng *rng, uint32_t bound)
{
    /* Rejecting the low values that would make some results more likely. */
    uint32_t threshold = (uint32_t)(-bound) % bound;
    for (;;) {
        uint32_t r = sample_rng_next(rng);
        if (r >= threshold)
            return r % bound;
    }
}

double sample_rng_double(struct sample_rng *rng)
{
    uint64_t hi = sample_rng_next(rng) >> 5;
    uint64_t lo = sample_rng_next(rng) >> 6;
    return (double)(hi * 67108864u + lo) / 9007199254740992.0;
}

void sample_rng_shuffle(struct sample_rng *rng, int *items, uint32_t n)
{
    for (uint32_t i = n; i > 1; i--) {
        uint32_t j = sample_rng_below(rng, i);
        int tmp = items[i - 1];
        items[i - 1] = items[j];
        items[j] = tmp;
    }
}

uint32_t sample_rng_selftest(void)
{
    struct sample_rng rng, again;
    uint32_t digest = 0, counts[6] = { 0 };
    int deck[52], seen[52] = { 0 };
    int i, all_seen = 1, in_range = 1, moved = 0;
    double sum = 0.0;

    /* The reference sequence of pcg32 for seed 42, stream 54. */
    sample_rng_seed(&rng, 42u, 54u);
    SAMPLE_CHECK_EQ(sample_rng_next(&rng), 0xa15c02b7u);
    SAMPLE_CHECK_EQ(sample_rng_next(&rng), 0x7b47f409u);
    SAMPLE_CHECK_EQ(sample_rng_next(&rng), 0xba1d3330u);

    sample_rng_seed(&rng, 1, 1);
    sample_rng_seed(&again, 1, 1);
    SAMPLE_CHECK_EQ(sample_rng_next(&rng), sample_rng_next(&again));

    for (i = 0; i < 6000; i++)
        counts[sample_rng_below(&rng, 6)]++;
    for (i = 0; i < 6; i++) {
        if (counts[i] < 850 || counts[i] > 1150)
            in_range = 0;
        digest = sample_digest_u32(digest, counts[i]);
    }
    SAMPLE_CHECK(in_range);

    for (i = 0; i < 1000; i++) {
        double d = sample_rng_double(&rng);
        if (d < 0.0 || d >= 1.0)
            in_range = 0;
        sum += d;
    }
    SAMPLE_CHECK(in_range);
    SAMPLE_CHECK_NEAR(sum / 1000.0, 0.5, 0.05);
    digest = sample_digest_double(digest, sum);

    for (i = 0; i < 52; i++)
        deck[i] = i;
    sample_rng_shuffle(&rng, deck, 52);
    for (i = 0; i < 52; i++) {
        seen[deck[i]]++;
        if (deck[i] != i)
            moved++;
        digest = sample_digest_u32(digest, (uint32_t)deck[i]);
    }
    for (i = 0; i < 52; i++)
        if (seen[i] != 1)
            all_seen = 0;
    SAMPLE_CHECK(all_seen);
    SAMPLE_CHECK(moved > 26);
    return digest;
}
