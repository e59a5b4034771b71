/*
 * base64.c - RFC 4648 base64 with padding.
 */
#include "sample/base64.h"

#include <string.h>

#include "sample/check.h"
#include "sample/digest.h"

static const char alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t sample_base64_encoded_len(size_t n)
{
    return (n + 2) / 3 * 4;
}

size_t sample_base64_encode(const unsigned char *in, size_t n, char *out)
{
    size_t i = 0, o = 0;
    while (n - i >= 3) {
        uint32_t v = ((uint32_t)in[i] << 16) | ((uint32_t)in[i + 1] << 8) | in[i + 2];
        out[o++] = alphabet[(v >> 18) & 63];
        out[o++] = alphabet[(v >> 12) & 63];
        out[o++] = alphabet[(v >> 6) & 63];
        out[o++] = alphabet[v & 63];
        i += 3;
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)in[i] << 16;
        out[o++] = alphabet[(v >> 18) & 63];
        out[o++] = alphabet[(v >> 12) & 63];
        out[o++] = '=';
        out[o++] = '=';
    } else if (n - i == 2) {
        uint32_t v = ((uint32_t)in[i] << 16) | ((uint32_t)in[i + 1] << 8);
        out[o++] = alphabet[(v >> 18) & 63];
        out[o++] = alphabet[(v >> 12) & 63];
        out[o++] = alphabet[(v >> 6) & 63];
        out[o++] = '=';
    }
    out[o] = '\0';
    return o;
}

static int sextet(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

long sample_base64_decode(const char *in, size_t len, unsigned char *out)
{
    size_t i, o = 0;
    if (len % 4 != 0)
        return -1;
    for (i = 0; i < len; i += 4) {
        int last = i + 4 == len;
        int a = sextet(in[i]), b = sextet(in[i + 1]);
        int c = sextet(in[i + 2]), d = sextet(in[i + 3]);
        uint32_t v;
        if (a < 0 || b < 0)
            return -1;
        if (last && in[i + 2] == '=' && in[i + 3] == '=') {
            /* Non-zero bits under the padding would not survive a round trip. */
            if ((b & 15) != 0)
                return -1;
            out[o++] = (unsigned char)((a << 2) | (b >> 4));
            break;
        }
        if (c < 0)
            return -1;
        if (last && in[i + 3] == '=') {
            if ((c & 3) != 0)
                return -1;
            v = ((uint32_t)a << 18) | ((uint32_t)b << 12) | ((uint32_t)c << 6);
            out[o++] = (unsigned char)(v >> 16);
            out[o++] = (unsigned char)((v >> 8) & 0xFF);
            break;
        }
        if (d < 0)
            return -1;
        v = ((uint32_t)a << 18) | ((uint32_t)b << 12) | ((uint32_t)c << 6) | (uint32_t)d;
        out[o++] = (unsigned char)(v >> 16);
        out[o++] = (unsigned char)((v >> 8) & 0xFF);
        out[o++] = (unsigned char)(v & 0xFF);
    }
    return (long)o;
}

uint32_t sample_base64_selftest(void)
{
    /* The test vectors of RFC 4648, section 10. */
    static const char *const plain[] = { "", "f", "fo", "foo", "foob", "fooba", "foobar" };
    static const char *const coded[] = { "", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=",
                                         "Zm9vYmFy" };
    unsigned char bytes[256], back[256];
    char text[400];
    uint32_t digest = 0;
    size_t i;
    int vectors = 1, decoded = 1;

    for (i = 0; i < 7; i++) {
        size_t n = sample_base64_encode((const unsigned char *)plain[i], strlen(plain[i]), text);
        long m;
        if (n != strlen(coded[i]) || strcmp(text, coded[i]) != 0)
            vectors = 0;
        m = sample_base64_decode(coded[i], strlen(coded[i]), back);
        if (m != (long)strlen(plain[i]) || memcmp(back, plain[i], (size_t)m) != 0)
            decoded = 0;
    }
    SAMPLE_CHECK(vectors);
    SAMPLE_CHECK(decoded);

    for (i = 0; i < sizeof bytes; i++)
        bytes[i] = (unsigned char)(i * 37 + 11);
    SAMPLE_CHECK_EQ(sample_base64_encoded_len(sizeof bytes), 344);
    SAMPLE_CHECK_EQ(sample_base64_encode(bytes, sizeof bytes, text), 344);
    SAMPLE_CHECK_EQ(sample_base64_decode(text, 344, back), 256);
    SAMPLE_CHECK(memcmp(bytes, back, sizeof bytes) == 0);
    digest = sample_digest_str(digest, text);

    SAMPLE_CHECK_EQ(sample_base64_decode("Zm9", 3, back), -1);
    SAMPLE_CHECK_EQ(sample_base64_decode("Zm9*", 4, back), -1);
    SAMPLE_CHECK_EQ(sample_base64_decode("Zh==", 4, back), -1);
    SAMPLE_CHECK_EQ(sample_base64_decode("Zg==Zg==", 8, back), -1);
    return digest;
}
