/*
 * arena.h - a bump allocator that frees everything at once.
 *
 * Used where many small objects share one lifetime (expression trees,
 * interned words). Not thread-safe.
 */
#ifndef SAMPLE_ARENA_H
#define SAMPLE_ARENA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct sample_arena_block;

/* An arena: a chain of blocks, the newest first. */
struct sample_arena {
    struct sample_arena_block *head;
    size_t block_size;
    size_t used;
    size_t blocks;
};

/* Prepares an empty arena whose blocks hold at least block_size bytes. */
void sample_arena_init(struct sample_arena *arena, size_t block_size);

/* Returns size bytes aligned to align (a power of two), or NULL when out of memory. */
void *sample_arena_alloc(struct sample_arena *arena, size_t size, size_t align);

/* Copies a NUL-terminated string into the arena. */
char *sample_arena_strdup(struct sample_arena *arena, const char *s);

/* Copies len bytes of s into the arena and terminates them. */
char *sample_arena_strndup(struct sample_arena *arena, const char *s, size_t len);

/* Releases every block; the arena may be used again afterwards. */
void sample_arena_free(struct sample_arena *arena);

/* Self-test of this module; returns its digest. */
uint32_t sample_arena_selftest(void);

#ifdef __cplusplus
}
#endif

#endif /* SAMPLE_ARENA_H */
