/*
 * hashmap.c - open addressing with linear probing and tombstones.
 */
#include "sample/hashmap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sample/check.h"
#include "sample/digest.h"

enum slot_state { SLOT_EMPTY = 0, SLOT_FULL, SLOT_DELETED };

struct sample_hashmap_slot {
    char *key;
    long value;
    uint64_t hash;
    enum slot_state state;
};

uint64_t sample_hash_string(const char *s)
{
    uint64_t h = 14695981039346656037ULL;
    while (*s) {
        h ^= (unsigned char)*s++;
        h *= 1099511628211ULL;
    }
    return h;
}

void sample_hashmap_init(struct sample_hashmap *map)
{
    map->slots = NULL;
    map->cap = 0;
    map->len = 0;
    map->tombstones = 0;
}

static char *copy_key(const char *key)
{
    size_t len = strlen(key);
    char *copy = malloc(len + 1);
    if (copy != NULL)
        memcpy(copy, key, len + 1);
    return copy;
}

/* Slot holding key, or the slot where it would go; cap must be a power of two. */
static struct sample_hashmap_slot *find_slot(const struct sample_hashmap *map, const char *key,
                                             uint64_t hash)
{
    size_t mask = map->cap - 1;
    size_t i = (size_t)hash & mask;
    struct sample_hashmap_slot *reuse = NULL;
    for (;;) {
        struct sample_hashmap_slot *slot = &map->slots[i];
        if (slot->state == SLOT_EMPTY)
            return reuse != NULL ? reuse : slot;
        if (slot->state == SLOT_DELETED) {
            if (reuse == NULL)
                reuse = slot;
        } else if (slot->hash == hash && strcmp(slot->key, key) == 0) {
            return slot;
        }
        i = (i + 1) & mask;
    }
}

static int rehash(struct sample_hashmap *map, size_t cap)
{
    struct sample_hashmap old = *map;
    map->slots = calloc(cap, sizeof *map->slots);
    if (map->slots == NULL) {
        *map = old;
        return -1;
    }
    map->cap = cap;
    map->len = 0;
    map->tombstones = 0;
    for (size_t i = 0; i < old.cap; i++) {
        if (old.slots[i].state == SLOT_FULL) {
            struct sample_hashmap_slot *slot = find_slot(map, old.slots[i].key, old.slots[i].hash);
            *slot = old.slots[i];
            map->len++;
        }
    }
    free(old.slots);
    return 0;
}

static struct sample_hashmap_slot *slot_for_insert(struct sample_hashmap *map, const char *key)
{
    uint64_t hash = sample_hash_string(key);
    struct sample_hashmap_slot *slot;

    /* Tombstones count towards the load so that probes always reach an empty slot. */
    if (map->cap == 0 || (map->len + map->tombstones + 1) * 4 > map->cap * 3) {
        size_t cap = map->cap ? map->cap : 16;
        while ((map->len + 1) * 2 > cap)
            cap *= 2;
        /* The same size again just clears the tombstones. */
        if (rehash(map, cap) != 0)
            return NULL;
    }
    slot = find_slot(map, key, hash);
    if (slot->state != SLOT_FULL) {
        char *copy = copy_key(key);
        if (copy == NULL)
            return NULL;
        if (slot->state == SLOT_DELETED)
            map->tombstones--;
        slot->key = copy;
        slot->hash = hash;
        slot->value = 0;
        slot->state = SLOT_FULL;
        map->len++;
    }
    return slot;
}

int sample_hashmap_put(struct sample_hashmap *map, const char *key, long value)
{
    struct sample_hashmap_slot *slot = slot_for_insert(map, key);
    if (slot == NULL)
        return -1;
    slot->value = value;
    return 0;
}

int sample_hashmap_add(struct sample_hashmap *map, const char *key, long delta, long *out)
{
    struct sample_hashmap_slot *slot = slot_for_insert(map, key);
    if (slot == NULL)
        return -1;
    slot->value += delta;
    if (out != NULL)
        *out = slot->value;
    return 0;
}

int sample_hashmap_get(const struct sample_hashmap *map, const char *key, long *value)
{
    struct sample_hashmap_slot *slot;
    if (map->len == 0)
        return 0;
    slot = find_slot(map, key, sample_hash_string(key));
    if (slot->state != SLOT_FULL)
        return 0;
    if (value != NULL)
        *value = slot->value;
    return 1;
}

int sample_hashmap_remove(struct sample_hashmap *map, const char *key)
{
    struct sample_hashmap_slot *slot;
    if (map->len == 0)
        return 0;
    slot = find_slot(map, key, sample_hash_string(key));
    if (slot->state != SLOT_FULL)
        return 0;
    free(slot->key);
    slot->key = NULL;
    slot->state = SLOT_DELETED;
    map->len--;
    map->tombstones++;
    return 1;
}

size_t sample_hashmap_len(const struct sample_hashmap *map)
{
    return map->len;
}

int sample_hashmap_next(const struct sample_hashmap *map, size_t *cursor, const char **key,
                        long *value)
{
    while (*cursor < map->cap) {
        const struct sample_hashmap_slot *slot = &map->slots[(*cursor)++];
        if (slot->state == SLOT_FULL) {
            *key = slot->key;
            *value = slot->value;
            return 1;
        }
    }
    return 0;
}

void sample_hashmap_free(struct sample_hashmap *map)
{
    for (size_t i = 0; i < map->cap; i++)
        if (map->slots[i].state == SLOT_FULL)
            free(map->slots[i].key);
    free(map->slots);
    sample_hashmap_init(map);
}

uint32_t sample_hashmap_selftest(void)
{
    struct sample_hashmap map;
    char key[32];
    uint32_t digest = 0;
    long value = 0, sum = 0;
    size_t cursor = 0, visited = 0;
    const char *k;
    int i, found = 1, ok = 1;

    SAMPLE_CHECK_EQ(sample_hash_string(""), 14695981039346656037ULL);
    SAMPLE_CHECK_EQ(sample_hash_string("a"), 0xaf63dc4c8601ec8cULL);

    sample_hashmap_init(&map);
    SAMPLE_CHECK_EQ(sample_hashmap_get(&map, "missing", &value), 0);

    for (i = 0; i < 2000; i++) {
        snprintf(key, sizeof key, "key-%d", i);
        if (sample_hashmap_put(&map, key, i * 3) != 0)
            ok = 0;
    }
    SAMPLE_CHECK(ok);
    SAMPLE_CHECK_EQ(sample_hashmap_len(&map), 2000);

    for (i = 0; i < 2000; i++) {
        snprintf(key, sizeof key, "key-%d", i);
        if (!sample_hashmap_get(&map, key, &value) || value != i * 3)
            found = 0;
    }
    SAMPLE_CHECK(found);

    for (i = 0; i < 2000; i += 2) {
        snprintf(key, sizeof key, "key-%d", i);
        if (!sample_hashmap_remove(&map, key))
            ok = 0;
    }
    SAMPLE_CHECK(ok);
    SAMPLE_CHECK_EQ(sample_hashmap_len(&map), 1000);
    SAMPLE_CHECK_EQ(sample_hashmap_remove(&map, "key-0"), 0);
    SAMPLE_CHECK_EQ(sample_hashmap_get(&map, "key-1", &value), 1);
    SAMPLE_CHECK_EQ(value, 3);

    /* Churn through tombstones: insert and delete many times without growing forever. */
    for (i = 0; i < 5000; i++) {
        snprintf(key, sizeof key, "tmp-%d", i);
        if (sample_hashmap_put(&map, key, i) != 0 || !sample_hashmap_remove(&map, key))
            ok = 0;
    }
    SAMPLE_CHECK(ok);
    SAMPLE_CHECK(map.cap <= 4096);

    SAMPLE_CHECK_EQ(sample_hashmap_add(&map, "counter", 5, &value), 0);
    SAMPLE_CHECK_EQ(sample_hashmap_add(&map, "counter", -2, &value), 0);
    SAMPLE_CHECK_EQ(value, 3);

    while (sample_hashmap_next(&map, &cursor, &k, &value)) {
        visited++;
        sum += value;
    }
    SAMPLE_CHECK_EQ(visited, 1001);
    /* Odd i from 1 to 1999, times three, plus the counter. */
    SAMPLE_CHECK_EQ(sum, 3L * 1000L * 1000L + 3);

    digest = sample_digest_u32(digest, (uint32_t)visited);
    digest = sample_digest_u32(digest, (uint32_t)sum);
    digest = sample_digest_u32(digest, (uint32_t)(sample_hash_string("sample") >> 32));
    sample_hashmap_free(&map);
    SAMPLE_CHECK_EQ(sample_hashmap_len(&map), 0);
    return digest;
}
