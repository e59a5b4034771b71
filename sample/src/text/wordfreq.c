/*
 * wordfreq.c - word counts built on the tokenizer, hash map and arena.
 */
#include "sample/wordfreq.h"

#include <stdlib.h>
#include <string.h>

#include "sample/arena.h"
#include "sample/check.h"
#include "sample/digest.h"
#include "sample/hashmap.h"
#include "sample/sort.h"
#include "sample/tokenizer.h"
#include "charclass.h"

/* Longer words are counted by their first this many bytes. */
#define MAX_WORD 63

static void fold(const char *s, size_t len, char out[MAX_WORD + 1])
{
    size_t i;
    if (len > MAX_WORD)
        len = MAX_WORD;
    for (i = 0; i < len; i++)
        out[i] = (char)cc_to_lower((unsigned char)s[i]);
    out[len] = '\0';
}

static int by_count_then_word(const void *a, const void *b, void *ctx)
{
    const struct sample_word_count *x = a, *y = b;
    (void)ctx;
    if (x->count != y->count)
        return x->count > y->count ? -1 : 1;
    return strcmp(x->word, y->word);
}

int sample_wordfreq_build(struct sample_wordfreq *wf, const char *text)
{
    struct sample_hashmap counts;
    struct sample_tokenizer tz;
    struct sample_token tok;
    struct sample_arena *arena;
    char word[MAX_WORD + 1];
    const char *key;
    long value;
    size_t cursor = 0, i = 0;

    memset(wf, 0, sizeof *wf);
    arena = malloc(sizeof *arena);
    if (arena == NULL)
        return -1;
    sample_arena_init(arena, 4096);
    wf->storage = arena;
    sample_hashmap_init(&counts);

    sample_tokenizer_init(&tz, text);
    while ((tok = sample_tokenizer_next(&tz)).kind != SAMPLE_TOKEN_END) {
        if (tok.kind != SAMPLE_TOKEN_WORD)
            continue;
        fold(tok.start, tok.len, word);
        if (sample_hashmap_add(&counts, word, 1, NULL) != 0)
            goto fail;
        wf->total++;
    }

    wf->items = sample_arena_alloc(arena, (sample_hashmap_len(&counts) + 1) * sizeof *wf->items,
                                   sizeof(void *));
    if (wf->items == NULL)
        goto fail;
    while (sample_hashmap_next(&counts, &cursor, &key, &value)) {
        wf->items[i].word = sample_arena_strdup(arena, key);
        wf->items[i].count = value;
        if (wf->items[i].word == NULL)
            goto fail;
        i++;
    }
    wf->len = i;
    sample_hashmap_free(&counts);
    if (sample_merge_sort(wf->items, wf->len, sizeof *wf->items, by_count_then_word, NULL) != 0) {
        sample_wordfreq_free(wf);
        return -1;
    }
    return 0;

fail:
    sample_hashmap_free(&counts);
    sample_wordfreq_free(wf);
    return -1;
}

long sample_wordfreq_lookup(const struct sample_wordfreq *wf, const char *word)
{
    char folded[MAX_WORD + 1];
    fold(word, strlen(word), folded);
    for (size_t i = 0; i < wf->len; i++)
        if (strcmp(wf->items[i].word, folded) == 0)
            return wf->items[i].count;
    return 0;
}

void sample_wordfreq_free(struct sample_wordfreq *wf)
{
    if (wf->storage != NULL) {
        sample_arena_free(wf->storage);
        free(wf->storage);
    }
    memset(wf, 0, sizeof *wf);
}

uint32_t sample_wordfreq_selftest(void)
{
    static const char text[] =
        "The cat sat on the mat. The mat was flat, and the cat was fat.\n"
        "A rat saw the cat; the rat ran. THE END (of the cat's tale).";
    struct sample_wordfreq wf;
    uint32_t digest = 0;
    int ranked = 1;

    SAMPLE_CHECK_EQ(sample_wordfreq_build(&wf, text), 0);
    SAMPLE_CHECK_EQ(wf.total, 29);
    SAMPLE_CHECK_EQ(wf.len, 17);
    if (wf.len >= 4) {
        SAMPLE_CHECK_STR(wf.items[0].word, "the");
        SAMPLE_CHECK_EQ(wf.items[0].count, 8);
        SAMPLE_CHECK_STR(wf.items[1].word, "cat");
        SAMPLE_CHECK_STR(wf.items[2].word, "mat");
        SAMPLE_CHECK_STR(wf.items[3].word, "rat");
    }
    SAMPLE_CHECK_EQ(sample_wordfreq_lookup(&wf, "CAT"), 3);
    SAMPLE_CHECK_EQ(sample_wordfreq_lookup(&wf, "cat's"), 1);
    SAMPLE_CHECK_EQ(sample_wordfreq_lookup(&wf, "dog"), 0);
    for (size_t i = 0; i < wf.len; i++) {
        if (i > 0 && by_count_then_word(&wf.items[i - 1], &wf.items[i], NULL) >= 0)
            ranked = 0;
        digest = sample_digest_str(digest, wf.items[i].word);
        digest = sample_digest_u32(digest, (uint32_t)wf.items[i].count);
    }
    SAMPLE_CHECK(ranked);
    sample_wordfreq_free(&wf);

    SAMPLE_CHECK_EQ(sample_wordfreq_build(&wf, "  ... 42 !"), 0);
    SAMPLE_CHECK_EQ(wf.len, 0);
    SAMPLE_CHECK_EQ(wf.total, 0);
    sample_wordfreq_free(&wf);
    return digest;
}
