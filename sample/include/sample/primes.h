/*
 * primes.h - number theory helpers: sieve, factorisation, gcd.
 */
#ifndef SAMPLE_PRIMES_H
#define SAMPLE_PRIMES_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Greatest common divisor (always non-negative; gcd(0, 0) is 0). */
long long sample_gcd(long long a, long long b);

/* Least common multiple (0 if either is 0). */
long long sample_lcm(long long a, long long b);

/* Primes below limit into out (room for max); returns how many were written, or -1. */
long sample_primes_below(uint32_t limit, uint32_t *out, size_t max);

/* Whether n is prime (deterministic trial division with a 6k +/- 1 wheel). */
int sample_is_prime(uint64_t n);

/* Prime factors of n (n >= 2) with repetition, ascending; returns the count. */
size_t sample_factorize(uint64_t n, uint64_t *factors, size_t max);

/* a^e mod m (m > 0). */
uint64_t sample_powmod(uint64_t a, uint64_t e, uint64_t m);

/* Self-test of this module; returns its digest. */
uint32_t sample_primes_selftest(void);

#ifdef __cplusplus
}
#endif

#endif /* SAMPLE_PRIMES_H */
