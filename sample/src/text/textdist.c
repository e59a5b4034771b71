/*
 * textdist.c - edit distances and the longest common subsequence.
 *
 * Each distance keeps only the rows of the dynamic-programming table it
 * needs, so memory is linear in the shorter string.
 */
#include "sample/textdist.h"

#include <stdlib.h>
#include <string.h>

#include "sample/check.h"
#include "sample/digest.h"

static size_t min3(size_t a, size_t b, size_t c)
{
    size_t m = a < b ? a : b;
    return m < c ? m : c;
}

long sample_levenshtein(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), i, j;
    size_t *row;
    long result;

    if (la < lb) {
        const char *t = a;
        size_t tl = la;
        a = b;
        b = t;
        la = lb;
        lb = tl;
    }
    row = malloc((lb + 1) * sizeof *row);
    if (row == NULL)
        return -1;
    for (j = 0; j <= lb; j++)
        row[j] = j;
    for (i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
            row[j] = min3(row[j] + 1, row[j - 1] + 1, diag + cost);
            diag = up;
        }
    }
    result = (long)row[lb];
    free(row);
    return result;
}

long sample_osa_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), i, j;
    size_t *prev2, *prev, *cur, *mem;
    long result;

    mem = malloc(3 * (lb + 1) * sizeof *mem);
    if (mem == NULL)
        return -1;
    prev2 = mem;
    prev = mem + (lb + 1);
    cur = mem + 2 * (lb + 1);
    for (j = 0; j <= lb; j++)
        prev[j] = j;
    for (i = 1; i <= la; i++) {
        size_t *t;
        cur[0] = i;
        for (j = 1; j <= lb; j++) {
            size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
            cur[j] = min3(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost);
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                prev2[j - 2] + 1 < cur[j])
                cur[j] = prev2[j - 2] + 1;
        }
        t = prev2;
        prev2 = prev;
        prev = cur;
        cur = t;
    }
    result = (long)prev[lb];
    free(mem);
    return result;
}

long sample_lcs_length(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), i, j;
    size_t *row;
    long result;

    row = calloc(lb + 1, sizeof *row);
    if (row == NULL)
        return -1;
    for (i = 1; i <= la; i++) {
        size_t diag = 0;
        for (j = 1; j <= lb; j++) {
            size_t up = row[j];
            if (a[i - 1] == b[j - 1])
                row[j] = diag + 1;
            else if (row[j - 1] > row[j])
                row[j] = row[j - 1];
            diag = up;
        }
    }
    result = (long)row[lb];
    free(row);
    return result;
}

long sample_hamming(const char *a, const char *b)
{
    long d = 0;
    if (strlen(a) != strlen(b))
        return -1;
    for (; *a; a++, b++)
        d += *a != *b;
    return d;
}

long sample_closest_word(const char *word, const char *const *candidates, size_t n)
{
    long best = -1, best_distance = 0;
    for (size_t i = 0; i < n; i++) {
        long d = sample_levenshtein(word, candidates[i]);
        if (d >= 0 && (best < 0 || d < best_distance)) {
            best = (long)i;
            best_distance = d;
        }
    }
    return best;
}

uint32_t sample_textdist_selftest(void)
{
    static const char *const commands[] = { "build", "check", "clean", "install", "status" };
    static const char *const pairs[][2] = {
        { "kitten", "sitting" }, { "flaw", "lawn" },   { "", "abc" },
        { "same", "same" },      { "ca", "abc" },      { "intention", "execution" },
    };
    static const long lev[] = { 3, 2, 3, 0, 3, 5 };
    static const long osa[] = { 3, 2, 3, 0, 3, 5 };
    static const long lcs[] = { 4, 3, 0, 4, 1, 5 };
    uint32_t digest = 0;
    size_t i;
    int lev_ok = 1, osa_ok = 1, lcs_ok = 1;

    for (i = 0; i < sizeof lev / sizeof lev[0]; i++) {
        long l = sample_levenshtein(pairs[i][0], pairs[i][1]);
        long o = sample_osa_distance(pairs[i][0], pairs[i][1]);
        long s = sample_lcs_length(pairs[i][0], pairs[i][1]);
        lev_ok &= (l == lev[i] && l == sample_levenshtein(pairs[i][1], pairs[i][0]));
        osa_ok &= (o == osa[i]);
        lcs_ok &= (s == lcs[i]);
        digest = sample_digest_u32(digest, (uint32_t)(l * 10000 + o * 100 + s));
    }
    SAMPLE_CHECK(lev_ok);
    SAMPLE_CHECK(osa_ok);
    SAMPLE_CHECK(lcs_ok);

    SAMPLE_CHECK_EQ(sample_osa_distance("abcd", "acbd"), 1);
    SAMPLE_CHECK_EQ(sample_levenshtein("abcd", "acbd"), 2);
    SAMPLE_CHECK_EQ(sample_hamming("karolin", "kathrin"), 3);
    SAMPLE_CHECK_EQ(sample_hamming("abc", "ab"), -1);

    SAMPLE_CHECK_EQ(sample_closest_word("chekc", commands, 5), 1);
    SAMPLE_CHECK_EQ(sample_closest_word("instal", commands, 5), 3);
    SAMPLE_CHECK_EQ(sample_closest_word("x", commands, 0), -1);
    return digest;
}
