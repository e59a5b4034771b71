/*
 * hashmap.h - a string-keyed hash map with open addressing.
 *
 * Keys are copied into the map; values are plain integers. Linear probing
 * with tombstones; the table doubles when three quarters full. Iteration
 * order is the table order, which depends only on the keys inserted.
 */
#ifndef SAMPLE_HASHMAP_H
#define SAMPLE_HASHMAP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct sample_hashmap_slot;

/* The map. */
struct sample_hashmap {
    struct sample_hashmap_slot *slots;
    size_t cap;
    size_t len;
    size_t tombstones;
};

/* FNV-1a hash of a NUL-terminated string. */
uint64_t sample_hash_string(const char *s);

/* Prepares an empty map. */
void sample_hashmap_init(struct sample_hashmap *map);

/* Sets key to value; returns 0 on success, -1 when out of memory. */
int sample_hashmap_put(struct sample_hashmap *map, const char *key, long value);

/* Looks key up; returns 1 and sets *value when found, 0 otherwise. */
int sample_hashmap_get(const struct sample_hashmap *map, const char *key, long *value);

/* Adds delta to key's value (missing keys start at 0); returns the new value via *out. */
int sample_hashmap_add(struct sample_hashmap *map, const char *key, long delta, long *out);

/* Removes key; returns 1 when it was there, 0 otherwise. */
int sample_hashmap_remove(struct sample_hashmap *map, const char *key);

/* Number of keys in the map. */
size_t sample_hashmap_len(const struct sample_hashmap *map);

/*
 * Iterates: start with *cursor = 0; each call returns 1 and sets *key and
 * *value for the next entry, or 0 at the end.
 */
int sample_hashmap_next(const struct sample_hashmap *map, size_t *cursor,
                        const char **key, long *value);

/* Releases the map and its keys. */
void sample_hashmap_free(struct sample_hashmap *map);

/* Self-test of this module; returns its digest. */
uint32_t sample_hashmap_selftest(void);

#ifdef __cplusplus
}
#endif

#endif /* SAMPLE_HASHMAP_H */
