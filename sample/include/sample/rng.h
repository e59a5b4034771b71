/*
 * rng.h - a small deterministic pseudo-random generator (PCG32).
 *
 * Self-tests draw their inputs from it so that every run sees the same data.
 */
#ifndef SAMPLE_RNG_H
#define SAMPLE_RNG_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Generator state. */
struct sample_rng {
    uint64_t state;
    uint64_t inc;
};

/* Seeds the generator; the same seed and stream give the same sequence. */
void sample_rng_seed(struct sample_rng *rng, uint64_t seed, uint64_t stream);

/* Next 32 random bits. */
uint32_t sample_rng_next(struct sample_rng *rng);

/* Uniform integer in [0, bound), without modulo bias; bound must be positive. */
uint32_t sample_rng_below(struct sample_rng *rng, uint32_t bound);

/* Uniform double in [0, 1). */
double sample_rng_double(struct sample_rng *rng);

/* Shuffles n ints in place (Fisher-Yates). */
void sample_rng_shuffle(struct sample_rng *rng, int *items, uint32_t n);

/* Self-test of this module; returns its digest. */
uint32_t sample_rng_selftest(void);

#ifdef __cplusplus
}
#endif

#endif /* SAMPLE_RNG_H */
