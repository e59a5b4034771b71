/*
 * list.h - an intrusive, circular, doubly linked list.
 *
 * The links live inside the listed objects; SAMPLE_CONTAINER_OF gets back
 * from a link to its object. The list never allocates.
 */
#ifndef SAMPLE_LIST_H
#define SAMPLE_LIST_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A link; a list head is a link that points at itself when empty. */
struct sample_list {
    struct sample_list *prev;
    struct sample_list *next;
};

#define SAMPLE_CONTAINER_OF(ptr, type, member) \
    ((type *)(void *)((char *)(ptr) - offsetof(type, member)))

/* Makes head an empty list. */
void sample_list_init(struct sample_list *head);

/* Inserts node at the back. */
void sample_list_push_back(struct sample_list *head, struct sample_list *node);

/* Inserts node at the front. */
void sample_list_push_front(struct sample_list *head, struct sample_list *node);

/* Unlinks node from whatever list holds it. */
void sample_list_remove(struct sample_list *node);

/* Whether the list is empty. */
int sample_list_empty(const struct sample_list *head);

/* Number of nodes in the list. */
size_t sample_list_length(const struct sample_list *head);

/* Moves every node of from to the back of to, leaving from empty. */
void sample_list_splice(struct sample_list *to, struct sample_list *from);

/* Sorts the list with a stable merge sort; less(a, b) says whether a goes before b. */
void sample_list_sort(struct sample_list *head,
                      int (*less)(const struct sample_list *a, const struct sample_list *b));

/* Self-test of this module; returns its digest. */
uint32_t sample_list_selftest(void);

#ifdef __cplusplus
}
#endif

#endif /* SAMPLE_LIST_H */
