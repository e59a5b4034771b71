/*
 * list.c - an intrusive, circular, doubly linked list.
 */
#include "sample/list.h"

#include "sample/check.h"
#include "sample/digest.h"

void sample_list_init(struct sample_list *head)
{
    head->prev = head;
    head->next = head;
}

static void link_between(struct sample_list *node, struct sample_list *prev,
                         struct sample_list *next)
{
    node->prev = prev;
    node->next = next;
    prev->next = node;
    next->prev = node;
}

void sample_list_push_back(struct sample_list *head, struct sample_list *node)
{
    link_between(node, head->prev, head);
}

void sample_list_push_front(struct sample_list *head, struct sample_list *node)
{
    link_between(node, head, head->next);
}

void sample_list_remove(struct sample_list *node)
{
    node->prev->next = node->next;
    node->next->prev = node->prev;
    node->prev = node;
    node->next = node;
}

int sample_list_empty(const struct sample_list *head)
{
    return head->next == head;
}

size_t sample_list_length(const struct sample_list *head)
{
    size_t n = 0;
    for (const struct sample_list *it = head->next; it != head; it = it->next)
        n++;
    return n;
}

void sample_list_splice(struct sample_list *to, struct sample_list *from)
{
    struct sample_list *first, *last;
    if (sample_list_empty(from))
        return;
    first = from->next;
    last = from->prev;
    first->prev = to->prev;
    to->prev->next = first;
    last->next = to;
    to->prev = last;
    sample_list_init(from);
}

void sample_list_sort(struct sample_list *head,
                      int (*less)(const struct sample_list *a, const struct sample_list *b))
{
    struct sample_list left, right, merged;
    size_t n = sample_list_length(head), i;

    if (n < 2)
        return;
    sample_list_init(&left);
    sample_list_init(&right);
    sample_list_init(&merged);
    for (i = 0; i < n; i++) {
        struct sample_list *node = head->next;
        sample_list_remove(node);
        sample_list_push_back(i < n / 2 ? &left : &right, node);
    }
    sample_list_sort(&left, less);
    sample_list_sort(&right, less);

    /* Taking from the left on ties keeps equal elements in their order. */
    while (!sample_list_empty(&left) && !sample_list_empty(&right)) {
        struct sample_list *take = less(right.next, left.next) ? right.next : left.next;
        sample_list_remove(take);
        sample_list_push_back(&merged, take);
    }
    sample_list_splice(&merged, &left);
    sample_list_splice(&merged, &right);
    sample_list_splice(head, &merged);
}

struct task {
    int priority;
    int id;
    struct sample_list link;
};

static int task_less(const struct sample_list *a, const struct sample_list *b)
{
    const struct task *ta = SAMPLE_CONTAINER_OF(a, struct task, link);
    const struct task *tb = SAMPLE_CONTAINER_OF(b, struct task, link);
    return ta->priority < tb->priority;
}

uint32_t sample_list_selftest(void)
{
    struct task tasks[12];
    struct sample_list queue, done;
    uint32_t digest = 0;
    static const int expected[10] = { 0, 8, 11, 7, 2, 6, 10, 9, 5, 1 };
    int order[10] = { 0 };
    int i, position = 0, sorted = 1, stable = 1, prev_priority = -1;

    sample_list_init(&queue);
    sample_list_init(&done);
    SAMPLE_CHECK(sample_list_empty(&queue));

    for (i = 0; i < 12; i++) {
        tasks[i].priority = (i * 7) % 4;
        tasks[i].id = i;
        if (i % 2 == 0)
            sample_list_push_back(&queue, &tasks[i].link);
        else
            sample_list_push_front(&queue, &tasks[i].link);
    }
    SAMPLE_CHECK_EQ(sample_list_length(&queue), 12);
    SAMPLE_CHECK_EQ(SAMPLE_CONTAINER_OF(queue.next, struct task, link)->id, 11);
    SAMPLE_CHECK_EQ(SAMPLE_CONTAINER_OF(queue.prev, struct task, link)->id, 10);

    sample_list_remove(&tasks[3].link);
    sample_list_remove(&tasks[4].link);
    sample_list_push_back(&done, &tasks[3].link);
    SAMPLE_CHECK_EQ(sample_list_length(&queue), 10);
    SAMPLE_CHECK_EQ(sample_list_length(&done), 1);

    sample_list_sort(&queue, task_less);
    for (struct sample_list *it = queue.next; it != &queue; it = it->next) {
        const struct task *t = SAMPLE_CONTAINER_OF(it, struct task, link);
        if (t->priority < prev_priority)
            sorted = 0;
        if (position < 10)
            order[position] = t->id;
        position++;
        digest = sample_digest_u32(digest, (uint32_t)t->id);
        prev_priority = t->priority;
    }
    SAMPLE_CHECK(sorted);
    SAMPLE_CHECK_EQ(position, 10);
    /* Equal priorities keep the order they had in the queue. */
    for (i = 0; i < 10; i++)
        if (order[i] != expected[i])
            stable = 0;
    SAMPLE_CHECK(stable);

    sample_list_splice(&done, &queue);
    SAMPLE_CHECK(sample_list_empty(&queue));
    SAMPLE_CHECK_EQ(sample_list_length(&done), 11);
    SAMPLE_CHECK_EQ(SAMPLE_CONTAINER_OF(done.next, struct task, link)->id, 3);
    return sample_digest_u32(digest, (uint32_t)sample_list_length(&done));
}
