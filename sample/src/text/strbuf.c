/*
 * strbuf.c - a growable, always NUL-terminated string builder.
 */
#include "sample/strbuf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sample/check.h"
#include "sample/digest.h"
#include "charclass.h"

void sample_strbuf_init(struct sample_strbuf *sb)
{
    sb->data = NULL;
    sb->len = 0;
    sb->cap = 0;
    sb->failed = 0;
}

const char *sample_strbuf_cstr(const struct sample_strbuf *sb)
{
    return sb->data != NULL ? sb->data : "";
}

static int grow(struct sample_strbuf *sb, size_t extra)
{
    size_t need, cap;
    char *data;
    if (sb->failed)
        return -1;
    if (extra > (size_t)-1 - sb->len - 1) {
        sb->failed = 1;
        return -1;
    }
    need = sb->len + extra + 1;
    if (need <= sb->cap)
        return 0;
    cap = sb->cap ? sb->cap : 32;
    while (cap < need)
        cap = cap > (size_t)-1 / 2 ? need : cap * 2;
    data = realloc(sb->data, cap);
    if (data == NULL) {
        sb->failed = 1;
        return -1;
    }
    sb->data = data;
    sb->cap = cap;
    return 0;
}

int sample_strbuf_append_len(struct sample_strbuf *sb, const char *s, size_t len)
{
    if (grow(sb, len) != 0)
        return -1;
    memcpy(sb->data + sb->len, s, len);
    sb->len += len;
    sb->data[sb->len] = '\0';
    return 0;
}

int sample_strbuf_append(struct sample_strbuf *sb, const char *s)
{
    return sample_strbuf_append_len(sb, s, strlen(s));
}

int sample_strbuf_append_char(struct sample_strbuf *sb, char c)
{
    return sample_strbuf_append_len(sb, &c, 1);
}

int sample_strbuf_vappendf(struct sample_strbuf *sb, const char *fmt, va_list ap)
{
    va_list again;
    int n;
    va_copy(again, ap);
    n = vsnprintf(NULL, 0, fmt, again);
    va_end(again);
    if (n < 0 || grow(sb, (size_t)n) != 0)
        return -1;
    vsnprintf(sb->data + sb->len, (size_t)n + 1, fmt, ap);
    sb->len += (size_t)n;
    return 0;
}

int sample_strbuf_appendf(struct sample_strbuf *sb, const char *fmt, ...)
{
    va_list ap;
    int rc;
    va_start(ap, fmt);
    rc = sample_strbuf_vappendf(sb, fmt, ap);
    va_end(ap);
    return rc;
}

void sample_strbuf_truncate(struct sample_strbuf *sb, size_t len)
{
    if (len < sb->len) {
        sb->len = len;
        sb->data[len] = '\0';
    }
}

void sample_strbuf_trim(struct sample_strbuf *sb)
{
    size_t start = 0, end = sb->len;
    while (start < end && cc_is_space((unsigned char)sb->data[start]))
        start++;
    while (end > start && cc_is_space((unsigned char)sb->data[end - 1]))
        end--;
    if (start > 0)
        memmove(sb->data, sb->data + start, end - start);
    if (sb->data != NULL) {
        sb->len = end - start;
        sb->data[sb->len] = '\0';
    }
}

long sample_strbuf_replace(struct sample_strbuf *sb, const char *from, const char *to)
{
    struct sample_strbuf out;
    size_t from_len = strlen(from), to_len = strlen(to), i = 0;
    long count = 0;
    if (from_len == 0 || sb->failed)
        return -1;
    sample_strbuf_init(&out);
    while (i < sb->len) {
        if (sb->len - i >= from_len && memcmp(sb->data + i, from, from_len) == 0) {
            sample_strbuf_append_len(&out, to, to_len);
            i += from_len;
            count++;
        } else {
            sample_strbuf_append_char(&out, sb->data[i]);
            i++;
        }
    }
    if (out.failed) {
        sample_strbuf_free(&out);
        return -1;
    }
    if (count > 0) {
        free(sb->data);
        *sb = out;
    } else {
        sample_strbuf_free(&out);
    }
    return count;
}

char *sample_strbuf_detach(struct sample_strbuf *sb)
{
    char *data = sb->data;
    if (data == NULL) {
        data = malloc(1);
        if (data != NULL)
            data[0] = '\0';
    }
    sample_strbuf_init(sb);
    return data;
}

void sample_strbuf_free(struct sample_strbuf *sb)
{
    free(sb->data);
    sample_strbuf_init(sb);
}

uint32_t sample_strbuf_selftest(void)
{
    struct sample_strbuf sb;
    uint32_t digest = 0;
    char *owned;
    int i;

    sample_strbuf_init(&sb);
    SAMPLE_CHECK_STR(sample_strbuf_cstr(&sb), "");
    sample_strbuf_trim(&sb);
    SAMPLE_CHECK_EQ(sb.len, 0);

    SAMPLE_CHECK_EQ(sample_strbuf_append(&sb, "hello"), 0);
    SAMPLE_CHECK_EQ(sample_strbuf_append_char(&sb, ','), 0);
    SAMPLE_CHECK_EQ(sample_strbuf_appendf(&sb, " %s #%d (%.2f)", "world", 42, 2.5), 0);
    SAMPLE_CHECK_STR(sample_strbuf_cstr(&sb), "hello, world #42 (2.50)");
    SAMPLE_CHECK_EQ(sb.len, 23);

    for (i = 0; i < 200; i++)
        sample_strbuf_appendf(&sb, "[%03d]", i);
    SAMPLE_CHECK_EQ(sb.len, 23 + 200 * 5);
    SAMPLE_CHECK(strstr(sample_strbuf_cstr(&sb), "[199]") != NULL);
    digest = sample_crc32(digest, sb.data, sb.len);

    sample_strbuf_truncate(&sb, 5);
    SAMPLE_CHECK_STR(sample_strbuf_cstr(&sb), "hello");

    SAMPLE_CHECK_EQ(sample_strbuf_replace(&sb, "l", "LL"), 2);
    SAMPLE_CHECK_STR(sample_strbuf_cstr(&sb), "heLLLLo");
    SAMPLE_CHECK_EQ(sample_strbuf_replace(&sb, "LL", ""), 2);
    SAMPLE_CHECK_STR(sample_strbuf_cstr(&sb), "heo");
    SAMPLE_CHECK_EQ(sample_strbuf_replace(&sb, "zz", "y"), 0);
    SAMPLE_CHECK_EQ(sample_strbuf_replace(&sb, "", "y"), -1);

    sample_strbuf_truncate(&sb, 0);
    sample_strbuf_append(&sb, " \t padded text \n ");
    sample_strbuf_trim(&sb);
    SAMPLE_CHECK_STR(sample_strbuf_cstr(&sb), "padded text");
    digest = sample_digest_str(digest, sample_strbuf_cstr(&sb));

    owned = sample_strbuf_detach(&sb);
    SAMPLE_CHECK_STR(owned, "padded text");
    SAMPLE_CHECK_EQ(sb.len, 0);
    free(owned);
    sample_strbuf_free(&sb);
    return digest;
}
