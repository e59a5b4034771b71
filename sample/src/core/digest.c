/*
 * digest.c - CRC-32, Adler-32, and folding values into a digest.
 *
 * The CRC table is built on first use; the program is single-threaded.
 */
#include "sample/digest.h"

#include <math.h>
#include <string.h>

#include "sample/check.h"
#include "sample/selftest.h"

static uint32_t crc_table[256];
static int crc_table_ready;

static void build_crc_table(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[n] = c;
    }
    crc_table_ready = 1;
}

uint32_t sample_crc32(uint32_t crc, const void *data, size_t len)
{
    const unsigned char *p = data;
    if (!crc_table_ready)
        build_crc_table();
    crc = ~crc;
    for (size_t i = 0; i < len; i++)
        crc = crc_table[(crc ^ p[i]) & 0xFFu] ^ (crc >> 8);
    return ~crc;
}

uint32_t sample_adler32(uint32_t adler, const void *data, size_t len)
{
    /* 5552 is the largest run whose sums cannot overflow 32 bits before reduction. */
    enum { MOD_ADLER = 65521, NMAX = 5552 };
    const unsigned char *p = data;
    uint32_t a = adler & 0xFFFFu;
    uint32_t b = (adler >> 16) & 0xFFFFu;
    while (len > 0) {
        size_t run = len < NMAX ? len : NMAX;
        len -= run;
        while (run-- > 0) {
            a += *p++;
            b += a;
        }
        a %= MOD_ADLER;
        b %= MOD_ADLER;
    }
    return (b << 16) | a;
}

uint32_t sample_digest_u32(uint32_t digest, uint32_t value)
{
    unsigned char bytes[4];
    bytes[0] = (unsigned char)(value & 0xFFu);
    bytes[1] = (unsigned char)((value >> 8) & 0xFFu);
    bytes[2] = (unsigned char)((value >> 16) & 0xFFu);
    bytes[3] = (unsigned char)((value >> 24) & 0xFFu);
    return sample_crc32(digest, bytes, sizeof bytes);
}

uint32_t sample_digest_str(uint32_t digest, const char *s)
{
    size_t len = strlen(s);
    digest = sample_digest_u32(digest, (uint32_t)len);
    return sample_crc32(digest, s, len);
}

uint32_t sample_digest_double(uint32_t digest, double value)
{
    /* Rounding hides last-bit differences between optimisation levels. */
    double scaled = value * 1e6;
    long long rounded;
    if (isnan(value))
        return sample_digest_u32(digest, 0x7FC00000u);
    if (scaled > 9e18)
        scaled = 9e18;
    if (scaled < -9e18)
        scaled = -9e18;
    rounded = llround(scaled);
    digest = sample_digest_u32(digest, (uint32_t)((unsigned long long)rounded & 0xFFFFFFFFu));
    return sample_digest_u32(digest, (uint32_t)((unsigned long long)rounded >> 32));
}

uint32_t sample_digest_selftest(void)
{
    static const char check_input[] = "123456789";
    static const char fox[] = "The quick brown fox jumps over the lazy dog";
    unsigned char zeros[6000];
    uint32_t whole, split, digest = 0;

    memset(zeros, 0, sizeof zeros);

    /* Published check values for the two checksums. */
    SAMPLE_CHECK_EQ(sample_crc32(0, check_input, 9), 0xCBF43926u);
    SAMPLE_CHECK_EQ(sample_crc32(0, fox, strlen(fox)), 0x414FA339u);
    SAMPLE_CHECK_EQ(sample_crc32(0, "", 0), 0);
    SAMPLE_CHECK_EQ(sample_adler32(1, "Wikipedia", 9), 0x11E60398u);
    SAMPLE_CHECK_EQ(sample_adler32(1, "", 0), 1);

    whole = sample_crc32(0, fox, strlen(fox));
    split = sample_crc32(sample_crc32(0, fox, 10), fox + 10, strlen(fox) - 10);
    SAMPLE_CHECK_EQ(whole, split);

    /* Longer than one Adler block, so the reduction path runs. */
    SAMPLE_CHECK_EQ(sample_adler32(1, zeros, sizeof zeros), 0x17700001u);
    zeros[5999] = 1;
    SAMPLE_CHECK_EQ(sample_adler32(1, zeros, sizeof zeros), 0x17710002u);

    SAMPLE_CHECK(sample_digest_double(0, 0.1 + 0.2) == sample_digest_double(0, 0.3));
    SAMPLE_CHECK(sample_digest_u32(0, 1) != sample_digest_u32(0, 2));
    SAMPLE_CHECK(sample_digest_str(0, "ab") != sample_digest_str(0, "ba"));

    digest = sample_digest_u32(digest, whole);
    digest = sample_digest_u32(digest, sample_adler32(1, fox, strlen(fox)));
    return sample_digest_str(digest, fox);
}
