/*
 * primes.c - sieve of Eratosthenes, trial division, modular powers.
 */
#include "sample/primes.h"

#include "sample/bitset.h"
#include "sample/check.h"
#include "sample/digest.h"

long long sample_gcd(long long a, long long b)
{
    /* Work on magnitudes as unsigned so that LLONG_MIN does not overflow. */
    unsigned long long x = a < 0 ? 0ULL - (unsigned long long)a : (unsigned long long)a;
    unsigned long long y = b < 0 ? 0ULL - (unsigned long long)b : (unsigned long long)b;
    while (y != 0) {
        unsigned long long t = x % y;
        x = y;
        y = t;
    }
    return (long long)x;
}

long long sample_lcm(long long a, long long b)
{
    long long g;
    if (a == 0 || b == 0)
        return 0;
    g = sample_gcd(a, b);
    a = a < 0 ? -a : a;
    b = b < 0 ? -b : b;
    return a / g * b;
}

long sample_primes_below(uint32_t limit, uint32_t *out, size_t max)
{
    struct sample_bitset composite;
    size_t count = 0;
    if (limit < 3)
        return 0;
    if (sample_bitset_init(&composite, limit) != 0)
        return -1;
    for (uint64_t i = 2; i * i < limit; i++)
        if (!sample_bitset_test(&composite, (size_t)i))
            for (uint64_t j = i * i; j < limit; j += i)
                sample_bitset_set(&composite, (size_t)j);
    for (uint32_t i = 2; i < limit && count < max; i++)
        if (!sample_bitset_test(&composite, i))
            out[count++] = i;
    sample_bitset_free(&composite);
    return (long)count;
}

int sample_is_prime(uint64_t n)
{
    if (n < 2)
        return 0;
    if (n < 4)
        return 1;
    if (n % 2 == 0 || n % 3 == 0)
        return 0;
    for (uint64_t i = 5; i <= n / i; i += 6)
        if (n % i == 0 || n % (i + 2) == 0)
            return 0;
    return 1;
}

size_t sample_factorize(uint64_t n, uint64_t *factors, size_t max)
{
    size_t count = 0;
    for (uint64_t d = 2; d <= n / d && count < max; d += (d == 2 ? 1 : 2)) {
        while (n % d == 0 && count < max) {
            factors[count++] = d;
            n /= d;
        }
    }
    if (n > 1 && count < max)
        factors[count++] = n;
    return count;
}

static uint64_t mulmod(uint64_t a, uint64_t b, uint64_t m)
{
    /* Double-and-add keeps every intermediate below 2m, so nothing overflows. */
    uint64_t result = 0;
    a %= m;
    while (b > 0) {
        if (b & 1u)
            result = result >= m - a ? result - (m - a) : result + a;
        a = a >= m - a ? a - (m - a) : a + a;
        b >>= 1;
    }
    return result;
}

uint64_t sample_powmod(uint64_t a, uint64_t e, uint64_t m)
{
    uint64_t result = 1 % m;
    a %= m;
    while (e > 0) {
        if (e & 1u)
            result = mulmod(result, a, m);
        a = mulmod(a, a, m);
        e >>= 1;
    }
    return result;
}

uint32_t sample_primes_selftest(void)
{
    static uint32_t primes[1300];
    uint64_t factors[64];
    uint32_t digest = 0;
    long n;
    size_t count, i;
    int agree = 1;

    n = sample_primes_below(10000, primes, 1300);
    SAMPLE_CHECK_EQ(n, 1229);
    SAMPLE_CHECK_EQ(primes[0], 2);
    SAMPLE_CHECK_EQ(primes[99], 541);
    SAMPLE_CHECK_EQ(primes[1228], 9973);
    for (i = 0; n > 0 && i < (size_t)n; i++) {
        if (!sample_is_prime(primes[i]))
            agree = 0;
        digest = sample_digest_u32(digest, primes[i]);
    }
    SAMPLE_CHECK(agree);
    SAMPLE_CHECK_EQ(sample_primes_below(2, primes, 10), 0);
    SAMPLE_CHECK_EQ(sample_primes_below(100, primes, 5), 5);

    SAMPLE_CHECK(sample_is_prime(2147483647u));
    SAMPLE_CHECK(!sample_is_prime(4294967297ULL)); /* 641 * 6700417 */
    SAMPLE_CHECK(!sample_is_prime(1));

    count = sample_factorize(4294967297ULL, factors, 64);
    SAMPLE_CHECK_EQ(count, 2);
    SAMPLE_CHECK_EQ(factors[0], 641);
    SAMPLE_CHECK_EQ(factors[1], 6700417);
    count = sample_factorize(360, factors, 64);
    SAMPLE_CHECK_EQ(count, 6);
    SAMPLE_CHECK(factors[0] == 2 && factors[2] == 2 && factors[3] == 3 && factors[5] == 5);
    count = sample_factorize(1ULL << 40, factors, 64);
    SAMPLE_CHECK_EQ(count, 40);

    SAMPLE_CHECK_EQ(sample_gcd(84, -36), 12);
    SAMPLE_CHECK_EQ(sample_gcd(0, 0), 0);
    SAMPLE_CHECK_EQ(sample_lcm(4, 6), 12);
    SAMPLE_CHECK_EQ(sample_lcm(-3, 5), 15);

    SAMPLE_CHECK_EQ(sample_powmod(2, 10, 1000), 24);
    SAMPLE_CHECK_EQ(sample_powmod(3, 0, 7), 1);
    /* Fermat: a^(p-1) = 1 mod p for a prime p near 2^61. */
    SAMPLE_CHECK_EQ(sample_powmod(123456789, 2305843009213693950ULL, 2305843009213693951ULL), 1);
    SAMPLE_CHECK_EQ(sample_powmod(5, 3, 1), 0);

    digest = sample_digest_u32(digest, (uint32_t)sample_powmod(7, 1000003, 1000000007));
    return digest;
}
