/*
 * utf8.c - strict UTF-8 decoding and encoding.
 */
#include "sample/utf8.h"

#include <string.h>

#include "sample/check.h"
#include "sample/digest.h"

size_t sample_utf8_decode(const unsigned char *s, size_t len, uint32_t *cp)
{
    uint32_t c, min;
    size_t n, i;

    if (len == 0)
        return 0;
    c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    } else if ((c & 0xE0) == 0xC0) {
        n = 2;
        c &= 0x1F;
        min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
        n = 3;
        c &= 0x0F;
        min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
        n = 4;
        c &= 0x07;
        min = 0x10000;
    } else {
        return 0;
    }
    if (len < n)
        return 0;
    for (i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        c = (c << 6) | (s[i] & 0x3Fu);
    }
    /* Overlong forms, UTF-16 surrogates and values past Unicode are all invalid. */
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
        return 0;
    *cp = c;
    return n;
}

size_t sample_utf8_encode(uint32_t cp, unsigned char *out)
{
    if (cp < 0x80) {
        out[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (unsigned char)(0xC0 | (cp >> 6));
        out[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp >= 0xD800 && cp <= 0xDFFF)
        return 0;
    if (cp < 0x10000) {
        out[0] = (unsigned char)(0xE0 | (cp >> 12));
        out[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    if (cp <= 0x10FFFF) {
        out[0] = (unsigned char)(0xF0 | (cp >> 18));
        out[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
        out[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        out[3] = (unsigned char)(0x80 | (cp & 0x3F));
        return 4;
    }
    return 0;
}

long sample_utf8_length(const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    long count = 0;
    while (i < len) {
        uint32_t cp;
        size_t n = sample_utf8_decode(p + i, len - i, &cp);
        if (n == 0)
            return -1;
        i += n;
        count++;
    }
    return count;
}

int sample_utf8_valid(const char *s, size_t len)
{
    return sample_utf8_length(s, len) >= 0;
}

long sample_utf8_offset(const char *s, size_t len, size_t index)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, seen = 0;
    while (i < len) {
        uint32_t cp;
        size_t n;
        if (seen == index)
            return (long)i;
        n = sample_utf8_decode(p + i, len - i, &cp);
        if (n == 0)
            return -1;
        i += n;
        seen++;
    }
    return seen == index ? (long)i : -1;
}

uint32_t sample_utf8_selftest(void)
{
    /* "naïve café – 日本 🙂" written out in bytes, so the source stays ASCII. */
    static const char text[] = "na\xC3\xAFve caf\xC3\xA9 \xE2\x80\x93 \xE6\x97\xA5\xE6\x9C\xAC "
                               "\xF0\x9F\x99\x82";
    static const uint32_t samples[] = { 0x24, 0xA2, 0x20AC, 0x10348, 0x7FF, 0xFFFF, 0x10FFFF };
    unsigned char buf[4];
    uint32_t cp = 0, digest = 0;
    size_t i, n;
    int roundtrip = 1;

    SAMPLE_CHECK_EQ(sample_utf8_length(text, strlen(text)), 17);
    SAMPLE_CHECK(sample_utf8_valid(text, strlen(text)));
    SAMPLE_CHECK_EQ(sample_utf8_offset(text, strlen(text), 3), 4);
    SAMPLE_CHECK_EQ(sample_utf8_offset(text, strlen(text), 17), (long)strlen(text));
    SAMPLE_CHECK_EQ(sample_utf8_offset(text, strlen(text), 18), -1);

    n = sample_utf8_decode((const unsigned char *)text + 2, 2, &cp);
    SAMPLE_CHECK_EQ(n, 2);
    SAMPLE_CHECK_EQ(cp, 0xEF);

    for (i = 0; i < sizeof samples / sizeof samples[0]; i++) {
        uint32_t back = 0;
        n = sample_utf8_encode(samples[i], buf);
        if (n == 0 || sample_utf8_decode(buf, n, &back) != n || back != samples[i])
            roundtrip = 0;
        digest = sample_crc32(digest, buf, n);
    }
    SAMPLE_CHECK(roundtrip);
    SAMPLE_CHECK_EQ(sample_utf8_encode(0x20AC, buf), 3);
    SAMPLE_CHECK(buf[0] == 0xE2 && buf[1] == 0x82 && buf[2] == 0xAC);

    SAMPLE_CHECK_EQ(sample_utf8_encode(0xD800, buf), 0);
    SAMPLE_CHECK_EQ(sample_utf8_encode(0x110000, buf), 0);
    SAMPLE_CHECK(!sample_utf8_valid("\xC0\xAF", 2));          /* overlong '/' */
    SAMPLE_CHECK(!sample_utf8_valid("\xED\xA0\x80", 3));      /* surrogate */
    SAMPLE_CHECK(!sample_utf8_valid("\xF4\x90\x80\x80", 4));  /* past U+10FFFF */
    SAMPLE_CHECK(!sample_utf8_valid("\xE2\x82", 2));          /* truncated */
    SAMPLE_CHECK(!sample_utf8_valid("\x80", 1));              /* lone continuation */
    SAMPLE_CHECK(sample_utf8_valid("", 0));

    return sample_digest_u32(digest, (uint32_t)sample_utf8_length(text, strlen(text)));
}
