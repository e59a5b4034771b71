/*
 * heap.c - a binary min-heap with insertion-order tie breaking.
 */
#include "sample/heap.h"

#include <stdlib.h>

#include "sample/check.h"
#include "sample/digest.h"
#include "sample/rng.h"

void sample_heap_init(struct sample_heap *heap)
{
    heap->items = NULL;
    heap->len = 0;
    heap->cap = 0;
    heap->next_seq = 0;
}

static int entry_less(const struct sample_heap_entry *a, const struct sample_heap_entry *b)
{
    if (a->key != b->key)
        return a->key < b->key;
    return a->seq < b->seq;
}

static void swap_entries(struct sample_heap_entry *a, struct sample_heap_entry *b)
{
    struct sample_heap_entry tmp = *a;
    *a = *b;
    *b = tmp;
}

static void sift_up(struct sample_heap *heap, size_t i)
{
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!entry_less(&heap->items[i], &heap->items[parent]))
            break;
        swap_entries(&heap->items[i], &heap->items[parent]);
        i = parent;
    }
}

static void sift_down(struct sample_heap *heap, size_t i)
{
    for (;;) {
        size_t left = 2 * i + 1, right = left + 1, smallest = i;
        if (left < heap->len && entry_less(&heap->items[left], &heap->items[smallest]))
            smallest = left;
        if (right < heap->len && entry_less(&heap->items[right], &heap->items[smallest]))
            smallest = right;
        if (smallest == i)
            return;
        swap_entries(&heap->items[i], &heap->items[smallest]);
        i = smallest;
    }
}

int sample_heap_push(struct sample_heap *heap, long key, long value)
{
    if (heap->len == heap->cap) {
        size_t cap = heap->cap ? heap->cap * 2 : 16;
        struct sample_heap_entry *items = realloc(heap->items, cap * sizeof *items);
        if (items == NULL)
            return -1;
        heap->items = items;
        heap->cap = cap;
    }
    heap->items[heap->len].key = key;
    heap->items[heap->len].value = value;
    heap->items[heap->len].seq = heap->next_seq++;
    heap->len++;
    sift_up(heap, heap->len - 1);
    return 0;
}

int sample_heap_peek(const struct sample_heap *heap, long *key, long *value)
{
    if (heap->len == 0)
        return -1;
    *key = heap->items[0].key;
    *value = heap->items[0].value;
    return 0;
}

int sample_heap_pop(struct sample_heap *heap, long *key, long *value)
{
    if (sample_heap_peek(heap, key, value) != 0)
        return -1;
    heap->len--;
    if (heap->len > 0) {
        heap->items[0] = heap->items[heap->len];
        sift_down(heap, 0);
    }
    return 0;
}

void sample_heap_free(struct sample_heap *heap)
{
    free(heap->items);
    sample_heap_init(heap);
}

uint32_t sample_heap_selftest(void)
{
    struct sample_heap heap;
    struct sample_rng rng;
    uint32_t digest = 0;
    long key = 0, value = 0, prev_key = -1, prev_value = -1;
    int i, ordered = 1, pushed = 1, ties_in_order = 1;

    sample_heap_init(&heap);
    SAMPLE_CHECK_EQ(sample_heap_pop(&heap, &key, &value), -1);

    sample_rng_seed(&rng, 42, 7);
    for (i = 0; i < 500; i++)
        if (sample_heap_push(&heap, (long)sample_rng_below(&rng, 50), i) != 0)
            pushed = 0;
    SAMPLE_CHECK(pushed);
    SAMPLE_CHECK_EQ(heap.len, 500);

    for (i = 0; i < 500; i++) {
        if (sample_heap_pop(&heap, &key, &value) != 0) {
            ordered = 0;
            break;
        }
        if (key < prev_key)
            ordered = 0;
        if (key == prev_key && value < prev_value)
            ties_in_order = 0;
        prev_key = key;
        prev_value = value;
        digest = sample_digest_u32(digest, (uint32_t)(key * 1000 + value));
    }
    SAMPLE_CHECK(ordered);
    SAMPLE_CHECK(ties_in_order);
    SAMPLE_CHECK_EQ(heap.len, 0);

    /* Dijkstra-style use: decreasing keys pushed again, stale entries skipped. */
    SAMPLE_CHECK_EQ(sample_heap_push(&heap, 10, 1), 0);
    SAMPLE_CHECK_EQ(sample_heap_push(&heap, 5, 2), 0);
    SAMPLE_CHECK_EQ(sample_heap_push(&heap, 5, 3), 0);
    SAMPLE_CHECK_EQ(sample_heap_peek(&heap, &key, &value), 0);
    SAMPLE_CHECK_EQ(value, 2);
    SAMPLE_CHECK_EQ(sample_heap_pop(&heap, &key, &value), 0);
    SAMPLE_CHECK_EQ(sample_heap_pop(&heap, &key, &value), 0);
    SAMPLE_CHECK_EQ(value, 3);
    sample_heap_free(&heap);
    return digest;
}
