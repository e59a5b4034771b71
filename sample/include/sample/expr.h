/*
 * expr.h - a tiny arithmetic expression evaluator.
 *
 * Grammar: numbers, variables, + - * / % ^ (right-associative), unary
 * minus, parentheses, comparisons (< <= > >= == !=), and the functions
 * abs, min, max, sqrt, floor and pow. Parsing builds a tree in an arena;
 * evaluation reads variables through a callback. Errors carry the column.
 */
#ifndef SAMPLE_EXPR_H
#define SAMPLE_EXPR_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What went wrong. */
enum sample_expr_error {
    SAMPLE_EXPR_OK = 0,
    SAMPLE_EXPR_SYNTAX,
    SAMPLE_EXPR_UNKNOWN_VARIABLE,
    SAMPLE_EXPR_UNKNOWN_FUNCTION,
    SAMPLE_EXPR_ARITY,
    SAMPLE_EXPR_DIVISION_BY_ZERO,
    SAMPLE_EXPR_DOMAIN,
    SAMPLE_EXPR_NO_MEMORY
};

/* The outcome of parsing or evaluating. */
struct sample_expr_result {
    enum sample_expr_error error;
    double value;
    size_t column; /* 1-based column of the error, 0 when there is none */
};

/* Looks a variable up; returns 1 and sets *value when it exists. */
typedef int (*sample_expr_lookup_fn)(const char *name, double *value, void *ctx);

struct sample_expr;

/* Parses text; returns NULL and fills *err when it is not a valid expression. */
struct sample_expr *sample_expr_parse(const char *text, struct sample_expr_result *err);

/* Evaluates a parsed expression. */
struct sample_expr_result sample_expr_eval(const struct sample_expr *expr,
                                           sample_expr_lookup_fn lookup, void *ctx);

/* Number of nodes in the parsed tree. */
size_t sample_expr_node_count(const struct sample_expr *expr);

/* Calls fn for each variable reference, left to right (repeats included); returns the count. */
size_t sample_expr_for_each_variable(const struct sample_expr *expr,
                                     void (*fn)(const char *name, void *ctx), void *ctx);

/* Releases a parsed expression (NULL is fine). */
void sample_expr_free(struct sample_expr *expr);

/* Parses and evaluates in one go, without variables. */
struct sample_expr_result sample_expr_calc(const char *text);

/* Message for an error code. */
const char *sample_expr_error_text(enum sample_expr_error error);

/* Self-test of this module; returns its digest. */
uint32_t sample_expr_selftest(void);

#ifdef __cplusplus
}
#endif

#endif /* SAMPLE_EXPR_H */
