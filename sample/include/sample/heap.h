/*
 * heap.h - a binary min-heap of (key, value) pairs.
 *
 * Equal keys come out in insertion order: each entry carries a sequence
 * number that breaks ties, so results never depend on the heap's shape.
 */
#ifndef SAMPLE_HEAP_H
#define SAMPLE_HEAP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One entry of the heap. */
struct sample_heap_entry {
    long key;
    long value;
    unsigned long seq;
};

/* A min-heap ordered by key, then by insertion. */
struct sample_heap {
    struct sample_heap_entry *items;
    size_t len;
    size_t cap;
    unsigned long next_seq;
};

/* Prepares an empty heap. */
void sample_heap_init(struct sample_heap *heap);

/* Adds a pair; returns 0 on success, -1 when out of memory. */
int sample_heap_push(struct sample_heap *heap, long key, long value);

/* Removes the smallest pair into *key and *value; returns 0, or -1 when empty. */
int sample_heap_pop(struct sample_heap *heap, long *key, long *value);

/* Looks at the smallest pair without removing it; returns 0, or -1 when empty. */
int sample_heap_peek(const struct sample_heap *heap, long *key, long *value);

/* Releases the storage. */
void sample_heap_free(struct sample_heap *heap);

/* Self-test of this module; returns its digest. */
uint32_t sample_heap_selftest(void);

#ifdef __cplusplus
}
#endif

#endif /* SAMPLE_HEAP_H */
