/*
 * charclass.h - locale-independent ASCII character classes.
 *
 * <ctype.h> depends on the current locale; the text modules must not,
 * or the program's report would change with LANG.
 */
#ifndef SAMPLE_TEXT_CHARCLASS_H
#define SAMPLE_TEXT_CHARCLASS_H

static inline int cc_is_digit(int c)
{
    return c >= '0' && c <= '9';
}

static inline int cc_is_alpha(int c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* Letters, plus every byte of a multi-byte UTF-8 sequence. */
static inline int cc_is_word_start(int c)
{
    return cc_is_alpha(c) || (c & 0x80) != 0;
}

static inline int cc_is_word_char(int c)
{
    return cc_is_word_start(c) || cc_is_digit(c) || c == '_';
}

static inline int cc_is_space(int c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static inline int cc_to_lower(int c)
{
    return (c >= 'A' && c <= 'Z') ? c - 'A' + 'a' : c;
}

#endif /* SAMPLE_TEXT_CHARCLASS_H */
