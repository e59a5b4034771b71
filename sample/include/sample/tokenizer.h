/*
 * tokenizer.h - splits text into words, numbers, punctuation and space.
 *
 * A word is a run of letters, digits, '_' and inner apostrophes that starts
 * with a letter; a number is a run of digits with at most one '.'. Bytes at
 * or above 0x80 count as letters so that UTF-8 words stay whole.
 */
#ifndef SAMPLE_TOKENIZER_H
#define SAMPLE_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What a token is. */
enum sample_token_kind {
    SAMPLE_TOKEN_END = 0,
    SAMPLE_TOKEN_WORD,
    SAMPLE_TOKEN_NUMBER,
    SAMPLE_TOKEN_PUNCT,
    SAMPLE_TOKEN_SPACE
};

/* One token: a slice of the input. */
struct sample_token {
    enum sample_token_kind kind;
    const char *start;
    size_t len;
    size_t line; /* 1-based line the token starts on */
};

/* A cursor over a NUL-terminated text. */
struct sample_tokenizer {
    const char *pos;
    size_t line;
};

/* Starts tokenizing text. */
void sample_tokenizer_init(struct sample_tokenizer *tz, const char *text);

/* Reads the next token; kind is SAMPLE_TOKEN_END at the end of the text. */
struct sample_token sample_tokenizer_next(struct sample_tokenizer *tz);

/* Counts tokens of each kind in text into counts[kind]. */
void sample_tokenizer_count(const char *text, size_t counts[5]);

/* Name of a token kind ("word", "number", ...). */
const char *sample_token_kind_name(enum sample_token_kind kind);

/* Self-test of this module; returns its digest. */
uint32_t sample_tokenizer_selftest(void);

#ifdef __cplusplus
}
#endif

#endif /* SAMPLE_TOKENIZER_H */
