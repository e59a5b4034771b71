/*
 * vec.c - a growable array of fixed-size elements.
 */
#include "sample/vec.h"

#include <stdlib.h>
#include <string.h>

#include "sample/check.h"
#include "sample/digest.h"

void sample_vec_init(struct sample_vec *vec, size_t elem_size)
{
    vec->data = NULL;
    vec->len = 0;
    vec->cap = 0;
    vec->elem_size = elem_size;
}

int sample_vec_reserve(struct sample_vec *vec, size_t cap)
{
    unsigned char *data;
    if (cap <= vec->cap)
        return 0;
    if (vec->elem_size == 0 || cap > (size_t)-1 / vec->elem_size)
        return -1;
    data = realloc(vec->data, cap * vec->elem_size);
    if (data == NULL)
        return -1;
    vec->data = data;
    vec->cap = cap;
    return 0;
}

int sample_vec_push(struct sample_vec *vec, const void *elem)
{
    if (vec->len == vec->cap && sample_vec_reserve(vec, vec->cap ? vec->cap * 2 : 8) != 0)
        return -1;
    memcpy(vec->data + vec->len * vec->elem_size, elem, vec->elem_size);
    vec->len++;
    return 0;
}

int sample_vec_pop(struct sample_vec *vec, void *out)
{
    if (vec->len == 0)
        return -1;
    vec->len--;
    if (out != NULL)
        memcpy(out, vec->data + vec->len * vec->elem_size, vec->elem_size);
    return 0;
}

void *sample_vec_at(const struct sample_vec *vec, size_t i)
{
    if (i >= vec->len)
        return NULL;
    return vec->data + i * vec->elem_size;
}

int sample_vec_remove(struct sample_vec *vec, size_t i)
{
    if (i >= vec->len)
        return -1;
    memmove(vec->data + i * vec->elem_size, vec->data + (i + 1) * vec->elem_size,
            (vec->len - i - 1) * vec->elem_size);
    vec->len--;
    return 0;
}

void sample_vec_reverse(struct sample_vec *vec)
{
    unsigned char tmp;
    size_t size = vec->elem_size;
    if (vec->len < 2)
        return;
    for (size_t lo = 0, hi = vec->len - 1; lo < hi; lo++, hi--) {
        unsigned char *a = vec->data + lo * size;
        unsigned char *b = vec->data + hi * size;
        for (size_t k = 0; k < size; k++) {
            tmp = a[k];
            a[k] = b[k];
            b[k] = tmp;
        }
    }
}

void sample_vec_free(struct sample_vec *vec)
{
    free(vec->data);
    sample_vec_init(vec, vec->elem_size);
}

struct point {
    int x;
    int y;
};

uint32_t sample_vec_selftest(void)
{
    struct sample_vec ints, points;
    uint32_t digest = 0;
    int value, pushed = 1, in_order = 1;
    size_t i;

    sample_vec_init(&ints, sizeof(int));
    for (value = 0; value < 1000; value++)
        if (sample_vec_push(&ints, &value) != 0)
            pushed = 0;
    SAMPLE_CHECK(pushed);
    SAMPLE_CHECK_EQ(ints.len, 1000);
    SAMPLE_CHECK_EQ(ints.cap, 1024);
    SAMPLE_CHECK(sample_vec_at(&ints, 1000) == NULL);

    SAMPLE_CHECK_EQ(sample_vec_remove(&ints, 0), 0);
    SAMPLE_CHECK_EQ(sample_vec_remove(&ints, 5000), -1);
    SAMPLE_CHECK_EQ(*(int *)sample_vec_at(&ints, 0), 1);
    SAMPLE_CHECK_EQ(sample_vec_pop(&ints, &value), 0);
    SAMPLE_CHECK_EQ(value, 999);

    sample_vec_reverse(&ints);
    for (i = 0; i < ints.len; i++) {
        int v = *(int *)sample_vec_at(&ints, i);
        if (v != (int)(998 - i))
            in_order = 0;
        digest = sample_digest_u32(digest, (uint32_t)v);
    }
    SAMPLE_CHECK(in_order);
    sample_vec_free(&ints);
    SAMPLE_CHECK_EQ(ints.len, 0);
    SAMPLE_CHECK_EQ(sample_vec_pop(&ints, NULL), -1);

    sample_vec_init(&points, sizeof(struct point));
    for (value = 0; value < 10; value++) {
        struct point p = { value, value * value };
        SAMPLE_CHECK_EQ(sample_vec_push(&points, &p), 0);
    }
    sample_vec_reverse(&points);
    SAMPLE_CHECK_EQ(((struct point *)sample_vec_at(&points, 0))->y, 81);
    SAMPLE_CHECK_EQ(((struct point *)sample_vec_at(&points, 9))->x, 0);
    digest = sample_crc32(digest, points.data, points.len * points.elem_size);
    sample_vec_free(&points);
    return digest;
}
