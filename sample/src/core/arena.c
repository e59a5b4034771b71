/*
 * arena.c - bump allocation from a chain of blocks.
 */
#include "sample/arena.h"

#include <stdlib.h>
#include <string.h>

#include "sample/check.h"
#include "sample/digest.h"

struct sample_arena_block {
    struct sample_arena_block *next;
    size_t size;
    size_t used;
    /* Keeps the payload aligned for any object. */
    union {
        long double ld;
        void *p;
        long long ll;
    } payload[];
};

void sample_arena_init(struct sample_arena *arena, size_t block_size)
{
    arena->head = NULL;
    arena->block_size = block_size < 256 ? 256 : block_size;
    arena->used = 0;
    arena->blocks = 0;
}

static struct sample_arena_block *new_block(size_t size)
{
    struct sample_arena_block *block = malloc(sizeof *block + size);
    if (block == NULL)
        return NULL;
    block->next = NULL;
    block->size = size;
    block->used = 0;
    return block;
}

void *sample_arena_alloc(struct sample_arena *arena, size_t size, size_t align)
{
    struct sample_arena_block *block = arena->head;
    size_t offset;

    if (align == 0 || (align & (align - 1)) != 0 || align > sizeof block->payload[0])
        return NULL;
    if (size == 0)
        size = 1;

    if (block != NULL) {
        offset = (block->used + align - 1) & ~(align - 1);
        if (offset <= block->size && size <= block->size - offset) {
            block->used = offset + size;
            arena->used += size;
            return (char *)block->payload + offset;
        }
    }

    /* An oversized request gets a block of its own. */
    block = new_block(size > arena->block_size ? size : arena->block_size);
    if (block == NULL)
        return NULL;
    block->next = arena->head;
    arena->head = block;
    arena->blocks++;
    block->used = size;
    arena->used += size;
    return block->payload;
}

char *sample_arena_strndup(struct sample_arena *arena, const char *s, size_t len)
{
    char *copy = sample_arena_alloc(arena, len + 1, 1);
    if (copy == NULL)
        return NULL;
    memcpy(copy, s, len);
    copy[len] = '\0';
    return copy;
}

char *sample_arena_strdup(struct sample_arena *arena, const char *s)
{
    return sample_arena_strndup(arena, s, strlen(s));
}

void sample_arena_free(struct sample_arena *arena)
{
    struct sample_arena_block *block = arena->head;
    while (block != NULL) {
        struct sample_arena_block *next = block->next;
        free(block);
        block = next;
    }
    arena->head = NULL;
    arena->used = 0;
    arena->blocks = 0;
}

uint32_t sample_arena_selftest(void)
{
    struct sample_arena arena;
    uint32_t digest = 0;
    long *numbers[100];
    char *words[3];
    char *big;
    int i, aligned = 1, intact = 1;

    sample_arena_init(&arena, 512);
    SAMPLE_CHECK(arena.block_size == 512);
    SAMPLE_CHECK(sample_arena_alloc(&arena, 8, 3) == NULL);

    for (i = 0; i < 100; i++) {
        numbers[i] = sample_arena_alloc(&arena, sizeof(long), sizeof(long));
        if (numbers[i] == NULL || ((uintptr_t)numbers[i] % sizeof(long)) != 0)
            aligned = 0;
        else
            *numbers[i] = (long)i * i;
    }
    SAMPLE_CHECK(aligned);
    for (i = 0; aligned && i < 100; i++)
        if (*numbers[i] != (long)i * i)
            intact = 0;
    SAMPLE_CHECK(intact);
    SAMPLE_CHECK_EQ(arena.used, 100 * sizeof(long));
    SAMPLE_CHECK_EQ(arena.blocks, (100 * sizeof(long) + 511) / 512);

    words[0] = sample_arena_strdup(&arena, "alpha");
    words[1] = sample_arena_strndup(&arena, "betamax", 4);
    words[2] = sample_arena_strdup(&arena, "");
    SAMPLE_CHECK_STR(words[0], "alpha");
    SAMPLE_CHECK_STR(words[1], "beta");
    SAMPLE_CHECK_STR(words[2], "");

    big = sample_arena_alloc(&arena, 4000, 1);
    SAMPLE_CHECK(big != NULL);
    if (big != NULL) {
        memset(big, 'x', 4000);
        digest = sample_crc32(digest, big, 4000);
    }
    SAMPLE_CHECK_STR(words[0], "alpha");

    digest = sample_digest_u32(digest, (uint32_t)arena.used);
    digest = sample_digest_u32(digest, (uint32_t)arena.blocks);
    for (i = 0; i < 3; i++)
        digest = sample_digest_str(digest, words[i]);

    sample_arena_free(&arena);
    SAMPLE_CHECK_EQ(arena.blocks, 0);
    SAMPLE_CHECK(sample_arena_strdup(&arena, "again") != NULL);
    sample_arena_free(&arena);
    return digest;
}
