/*
 * wordfreq.h - word frequencies of a text, case-folded, most frequent first.
 */
#ifndef SAMPLE_WORDFREQ_H
#define SAMPLE_WORDFREQ_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One word and how often it occurs. */
struct sample_word_count {
    const char *word;
    long count;
};

/* The frequencies of one text. */
struct sample_wordfreq {
    struct sample_word_count *items; /* sorted by count desc, then word asc */
    size_t len;
    long total;
    void *storage; /* owns the words */
};

/* Counts the words of text; returns 0, or -1 when out of memory. */
int sample_wordfreq_build(struct sample_wordfreq *wf, const char *text);

/* Count of one word (case-insensitive ASCII), 0 when absent. */
long sample_wordfreq_lookup(const struct sample_wordfreq *wf, const char *word);

/* Releases everything. */
void sample_wordfreq_free(struct sample_wordfreq *wf);

/* Self-test of this module; returns its digest. */
uint32_t sample_wordfreq_selftest(void);

#ifdef __cplusplus
}
#endif

#endif /* SAMPLE_WORDFREQ_H */
