/*
 * textwrap.c - greedy line filling with four alignments.
 *
 * Widths count bytes, not display columns; words are never split.
 */
#include "sample/textwrap.h"

#include <string.h>

#include "sample/check.h"
#include "sample/digest.h"
#include "charclass.h"

/* A word of the input: a slice of the text. */
struct word {
    const char *start;
    size_t len;
};

/* Reads the next word at or after *pos; returns 0 at the end. */
static int next_word(const char **pos, struct word *w)
{
    const char *s = *pos;
    while (cc_is_space((unsigned char)*s))
        s++;
    if (*s == '\0')
        return 0;
    w->start = s;
    while (*s != '\0' && !cc_is_space((unsigned char)*s))
        s++;
    w->len = (size_t)(s - w->start);
    *pos = s;
    return 1;
}

static int pad(struct sample_strbuf *out, size_t n)
{
    while (n-- > 0)
        if (sample_strbuf_append_char(out, ' ') != 0)
            return -1;
    return 0;
}

/* Emits one line of words [first, first + count) whose text is used bytes wide. */
static int emit_line(struct sample_strbuf *out, const struct word *words, size_t count, size_t used,
                     size_t width, enum sample_wrap_align align, int last_line)
{
    size_t slack = width > used ? width - used : 0;
    size_t i;

    if (align == SAMPLE_WRAP_RIGHT && pad(out, slack) != 0)
        return -1;
    if (align == SAMPLE_WRAP_CENTER && pad(out, slack / 2) != 0)
        return -1;
    for (i = 0; i < count; i++) {
        if (i > 0) {
            size_t gap = 1;
            /* Justified lines spread the slack over the gaps, leftmost gaps first. */
            if (align == SAMPLE_WRAP_JUSTIFY && !last_line && count > 1) {
                size_t gaps = count - 1;
                gap += slack / gaps + (i - 1 < slack % gaps ? 1 : 0);
            }
            if (pad(out, gap) != 0)
                return -1;
        }
        if (sample_strbuf_append_len(out, words[i].start, words[i].len) != 0)
            return -1;
    }
    return 0;
}

long sample_wrap(const char *text, size_t width, enum sample_wrap_align align,
                 struct sample_strbuf *out)
{
    enum { MAX_LINE_WORDS = 128 };
    struct word line[MAX_LINE_WORDS], w;
    const char *pos = text;
    size_t count = 0, used = 0;
    long lines = 0;
    int have = next_word(&pos, &w);

    while (have) {
        size_t need = count == 0 ? w.len : used + 1 + w.len;
        if (count > 0 && (need > width || count == MAX_LINE_WORDS)) {
            if (lines > 0 && sample_strbuf_append_char(out, '\n') != 0)
                return -1;
            if (emit_line(out, line, count, used, width, align, 0) != 0)
                return -1;
            lines++;
            count = 0;
            used = 0;
            continue;
        }
        line[count++] = w;
        used = need;
        have = next_word(&pos, &w);
    }
    if (count > 0) {
        if (lines > 0 && sample_strbuf_append_char(out, '\n') != 0)
            return -1;
        if (emit_line(out, line, count, used, width, align, 1) != 0)
            return -1;
        lines++;
    }
    return lines;
}

uint32_t sample_textwrap_selftest(void)
{
    static const char text[] = "Distributed builds send each compile to a machine with a free "
                               "slot and bring the object file back unchanged.";
    struct sample_strbuf out;
    uint32_t digest = 0;
    int align, widths_ok = 1;

    sample_strbuf_init(&out);
    SAMPLE_CHECK_EQ(sample_wrap(text, 20, SAMPLE_WRAP_LEFT, &out), 6);
    SAMPLE_CHECK_STR(sample_strbuf_cstr(&out), "Distributed builds\n"
                                               "send each compile to\n"
                                               "a machine with a\n"
                                               "free slot and bring\n"
                                               "the object file back\n"
                                               "unchanged.");
    sample_strbuf_truncate(&out, 0);

    SAMPLE_CHECK_EQ(sample_wrap("one two three", 9, SAMPLE_WRAP_JUSTIFY, &out), 2);
    SAMPLE_CHECK_STR(sample_strbuf_cstr(&out), "one   two\nthree");
    sample_strbuf_truncate(&out, 0);

    SAMPLE_CHECK_EQ(sample_wrap("ab cd", 8, SAMPLE_WRAP_RIGHT, &out), 1);
    SAMPLE_CHECK_STR(sample_strbuf_cstr(&out), "   ab cd");
    sample_strbuf_truncate(&out, 0);

    SAMPLE_CHECK_EQ(sample_wrap("ab", 7, SAMPLE_WRAP_CENTER, &out), 1);
    SAMPLE_CHECK_STR(sample_strbuf_cstr(&out), "  ab");
    sample_strbuf_truncate(&out, 0);

    SAMPLE_CHECK_EQ(sample_wrap("supercalifragilistic is long", 5, SAMPLE_WRAP_LEFT, &out), 3);
    SAMPLE_CHECK_STR(sample_strbuf_cstr(&out), "supercalifragilistic\nis\nlong");
    sample_strbuf_truncate(&out, 0);

    SAMPLE_CHECK_EQ(sample_wrap("   ", 10, SAMPLE_WRAP_LEFT, &out), 0);

    for (align = SAMPLE_WRAP_LEFT; align <= SAMPLE_WRAP_JUSTIFY; align++) {
        const char *line;
        sample_strbuf_truncate(&out, 0);
        sample_wrap(text, 24, (enum sample_wrap_align)align, &out);
        line = sample_strbuf_cstr(&out);
        while (*line != '\0') {
            const char *end = strchr(line, '\n');
            size_t len = end ? (size_t)(end - line) : strlen(line);
            if (len > 24)
                widths_ok = 0;
            line += len + (end ? 1 : 0);
        }
        digest = sample_digest_str(digest, sample_strbuf_cstr(&out));
    }
    SAMPLE_CHECK(widths_ok);
    sample_strbuf_free(&out);
    return digest;
}
