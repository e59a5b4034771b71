/*
 * tokenizer.c - words, numbers, punctuation and white space.
 */
#include "sample/tokenizer.h"

#include <string.h>

#include "sample/check.h"
#include "sample/digest.h"
#include "charclass.h"

void sample_tokenizer_init(struct sample_tokenizer *tz, const char *text)
{
    tz->pos = text;
    tz->line = 1;
}

static size_t scan_word(const char *s)
{
    size_t n = 1;
    for (;;) {
        unsigned char c = (unsigned char)s[n];
        if (cc_is_word_char(c)) {
            n++;
        } else if (c == '\'' && cc_is_word_start((unsigned char)s[n + 1])) {
            /* "don't" is one word; a closing quote is punctuation. */
            n += 2;
        } else {
            return n;
        }
    }
}

static size_t scan_number(const char *s)
{
    size_t n = 0;
    int seen_dot = 0;
    for (;;) {
        if (cc_is_digit((unsigned char)s[n])) {
            n++;
        } else if (s[n] == '.' && !seen_dot && cc_is_digit((unsigned char)s[n + 1])) {
            seen_dot = 1;
            n++;
        } else {
            return n;
        }
    }
}

struct sample_token sample_tokenizer_next(struct sample_tokenizer *tz)
{
    struct sample_token tok;
    const char *s = tz->pos;
    unsigned char c = (unsigned char)*s;

    tok.start = s;
    tok.line = tz->line;
    if (c == '\0') {
        tok.kind = SAMPLE_TOKEN_END;
        tok.len = 0;
        return tok;
    }
    if (cc_is_space(c)) {
        size_t n = 0;
        while (cc_is_space((unsigned char)s[n])) {
            if (s[n] == '\n')
                tz->line++;
            n++;
        }
        tok.kind = SAMPLE_TOKEN_SPACE;
        tok.len = n;
    } else if (cc_is_digit(c)) {
        tok.kind = SAMPLE_TOKEN_NUMBER;
        tok.len = scan_number(s);
    } else if (cc_is_word_start(c)) {
        tok.kind = SAMPLE_TOKEN_WORD;
        tok.len = scan_word(s);
    } else {
        tok.kind = SAMPLE_TOKEN_PUNCT;
        tok.len = 1;
    }
    tz->pos = s + tok.len;
    return tok;
}

void sample_tokenizer_count(const char *text, size_t counts[5])
{
    struct sample_tokenizer tz;
    struct sample_token tok;
    memset(counts, 0, 5 * sizeof counts[0]);
    sample_tokenizer_init(&tz, text);
    do {
        tok = sample_tokenizer_next(&tz);
        counts[tok.kind]++;
    } while (tok.kind != SAMPLE_TOKEN_END);
}

const char *sample_token_kind_name(enum sample_token_kind kind)
{
    switch (kind) {
    case SAMPLE_TOKEN_END:
        return "end";
    case SAMPLE_TOKEN_WORD:
        return "word";
    case SAMPLE_TOKEN_NUMBER:
        return "number";
    case SAMPLE_TOKEN_PUNCT:
        return "punct";
    case SAMPLE_TOKEN_SPACE:
        return "space";
    }
    return "unknown";
}

uint32_t sample_tokenizer_selftest(void)
{
    static const char text[] = "It's 3.14, isn't it?\nPi (roughly) = 22/7 -- or 3.1415...\n"
                               "caf\xC3\xA9 x_1 'quoted'";
    static const char *const expected[] = {
        "It's", " ", "3.14", ",", " ", "isn't", " ", "it", "?", "\n",
        "Pi", " ", "(", "roughly", ")", " ", "=", " ", "22", "/", "7",
    };
    struct sample_tokenizer tz;
    struct sample_token tok;
    size_t counts[5], i, last_line = 0;
    uint32_t digest = 0;
    int matches = 1;
    char piece[32];

    sample_tokenizer_init(&tz, text);
    for (i = 0; i < sizeof expected / sizeof expected[0]; i++) {
        tok = sample_tokenizer_next(&tz);
        if (tok.len != strlen(expected[i]) || memcmp(tok.start, expected[i], tok.len) != 0)
            matches = 0;
    }
    SAMPLE_CHECK(matches);

    sample_tokenizer_init(&tz, text);
    do {
        tok = sample_tokenizer_next(&tz);
        if (tok.kind == SAMPLE_TOKEN_NUMBER && tok.len < sizeof piece) {
            memcpy(piece, tok.start, tok.len);
            piece[tok.len] = '\0';
            digest = sample_digest_str(digest, piece);
        }
        digest = sample_digest_u32(digest, (uint32_t)tok.kind);
        last_line = tok.line;
    } while (tok.kind != SAMPLE_TOKEN_END);
    SAMPLE_CHECK_EQ(last_line, 3);

    sample_tokenizer_count(text, counts);
    SAMPLE_CHECK_EQ(counts[SAMPLE_TOKEN_WORD], 9);
    SAMPLE_CHECK_EQ(counts[SAMPLE_TOKEN_NUMBER], 4);
    SAMPLE_CHECK_EQ(counts[SAMPLE_TOKEN_PUNCT], 13);
    SAMPLE_CHECK_EQ(counts[SAMPLE_TOKEN_SPACE], 13);
    SAMPLE_CHECK_EQ(counts[SAMPLE_TOKEN_END], 1);
    SAMPLE_CHECK_STR(sample_token_kind_name(SAMPLE_TOKEN_PUNCT), "punct");

    sample_tokenizer_count("", counts);
    SAMPLE_CHECK_EQ(counts[SAMPLE_TOKEN_END], 1);
    SAMPLE_CHECK_EQ(counts[SAMPLE_TOKEN_WORD], 0);
    return digest;
}
