/*
 * expr_internal.h - what the expression lexer, parser and evaluator share.
 *
 * Not installed: the public interface is sample/expr.h.
 */
#ifndef SAMPLE_NUM_EXPR_INTERNAL_H
#define SAMPLE_NUM_EXPR_INTERNAL_H

#include <stddef.h>

#include "sample/arena.h"
#include "sample/expr.h"

enum expr_token_kind {
    TK_END = 0,
    TK_NUMBER,
    TK_IDENT,
    TK_PLUS,
    TK_MINUS,
    TK_STAR,
    TK_SLASH,
    TK_PERCENT,
    TK_CARET,
    TK_LPAREN,
    TK_RPAREN,
    TK_COMMA,
    TK_LT,
    TK_LE,
    TK_GT,
    TK_GE,
    TK_EQ,
    TK_NE,
    TK_INVALID
};

struct expr_token {
    enum expr_token_kind kind;
    const char *start;
    size_t len;
    size_t column; /* 1-based */
    double number;
};

struct expr_lexer {
    const char *text;
    const char *pos;
    struct expr_token current;
};

/* Starts lexing text and reads the first token into lx->current. */
void expr_lexer_init(struct expr_lexer *lx, const char *text);

/* Reads the next token into lx->current. */
void expr_lexer_advance(struct expr_lexer *lx);

/* Spelling of a token kind for messages and tests ("+", "number", ...). */
const char *expr_token_name(enum expr_token_kind kind);

/* The built-in functions. */
enum expr_function { FN_ABS, FN_SQRT, FN_FLOOR, FN_MIN, FN_MAX, FN_POW };

#define EXPR_MAX_ARGS 2

enum expr_node_kind { NODE_NUMBER, NODE_VARIABLE, NODE_NEGATE, NODE_BINARY, NODE_CALL };

struct expr_node {
    enum expr_node_kind kind;
    size_t column;
    union {
        double number;
        const char *name;
        struct expr_node *operand;
        struct {
            enum expr_token_kind op;
            struct expr_node *lhs;
            struct expr_node *rhs;
        } binary;
        struct {
            enum expr_function fn;
            size_t argc;
            struct expr_node *args[EXPR_MAX_ARGS];
        } call;
    } u;
};

struct sample_expr {
    struct sample_arena arena;
    struct expr_node *root;
    size_t nodes;
};

#endif /* SAMPLE_NUM_EXPR_INTERNAL_H */
