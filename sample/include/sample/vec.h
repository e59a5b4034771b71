/*
 * vec.h - a growable array of fixed-size elements.
 *
 * Elements are copied in and out by value (memcpy); the vector owns its
 * storage. Growth doubles the capacity.
 */
#ifndef SAMPLE_VEC_H
#define SAMPLE_VEC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A vector of len elements of elem_size bytes each. */
struct sample_vec {
    unsigned char *data;
    size_t len;
    size_t cap;
    size_t elem_size;
};

/* Prepares an empty vector of elem_size-byte elements. */
void sample_vec_init(struct sample_vec *vec, size_t elem_size);

/* Makes room for at least cap elements; returns 0 on success, -1 when out of memory. */
int sample_vec_reserve(struct sample_vec *vec, size_t cap);

/* Appends a copy of *elem; returns 0 on success, -1 when out of memory. */
int sample_vec_push(struct sample_vec *vec, const void *elem);

/* Removes the last element into *out (if out is not NULL); returns 0, or -1 when empty. */
int sample_vec_pop(struct sample_vec *vec, void *out);

/* Address of element i, or NULL when i is out of range. */
void *sample_vec_at(const struct sample_vec *vec, size_t i);

/* Removes element i, keeping the order of the rest; returns 0, or -1 when out of range. */
int sample_vec_remove(struct sample_vec *vec, size_t i);

/* Reverses the elements in place. */
void sample_vec_reverse(struct sample_vec *vec);

/* Releases the storage. */
void sample_vec_free(struct sample_vec *vec);

/* Self-test of this module; returns its digest. */
uint32_t sample_vec_selftest(void);

#ifdef __cplusplus
}
#endif

#endif /* SAMPLE_VEC_H */
