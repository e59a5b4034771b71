/*
 * expr_parse.c - recursive descent from tokens to a tree in an arena.
 *
 * Precedence, loosest first: comparisons, + -, * / %, unary minus, ^.
 * '^' is right-associative and binds tighter than unary minus, so -2^2 is -4.
 */
#include <stdlib.h>
#include <string.h>

#include "expr_internal.h"

struct parser {
    struct expr_lexer lx;
    struct sample_expr *expr;
    struct sample_expr_result *err;
};

static const struct {
    const char *name;
    enum expr_function fn;
    size_t arity;
} functions[] = {
    { "abs", FN_ABS, 1 }, { "sqrt", FN_SQRT, 1 }, { "floor", FN_FLOOR, 1 },
    { "min", FN_MIN, 2 }, { "max", FN_MAX, 2 },   { "pow", FN_POW, 2 },
};

static struct expr_node *parse_comparison(struct parser *p);
static struct expr_node *parse_unary(struct parser *p);

/* Records the first error only: later ones are consequences of it. */
static struct expr_node *fail(struct parser *p, enum sample_expr_error error, size_t column)
{
    if (p->err->error == SAMPLE_EXPR_OK) {
        p->err->error = error;
        p->err->column = column;
    }
    return NULL;
}

static struct expr_node *new_node(struct parser *p, enum expr_node_kind kind, size_t column)
{
    struct expr_node *n = sample_arena_alloc(&p->expr->arena, sizeof *n, sizeof(void *));
    if (n == NULL)
        return fail(p, SAMPLE_EXPR_NO_MEMORY, column);
    memset(n, 0, sizeof *n);
    n->kind = kind;
    n->column = column;
    p->expr->nodes++;
    return n;
}

static struct expr_node *binary(struct parser *p, enum expr_token_kind op, size_t column,
                                struct expr_node *lhs, struct expr_node *rhs)
{
    struct expr_node *n;
    if (lhs == NULL || rhs == NULL)
        return NULL;
    n = new_node(p, NODE_BINARY, column);
    if (n != NULL) {
        n->u.binary.op = op;
        n->u.binary.lhs = lhs;
        n->u.binary.rhs = rhs;
    }
    return n;
}

static struct expr_node *parse_call(struct parser *p, const struct expr_token *name)
{
    struct expr_node *n;
    size_t i, which = sizeof functions / sizeof functions[0];

    for (i = 0; i < sizeof functions / sizeof functions[0]; i++)
        if (strlen(functions[i].name) == name->len &&
            memcmp(functions[i].name, name->start, name->len) == 0)
            which = i;
    if (which == sizeof functions / sizeof functions[0])
        return fail(p, SAMPLE_EXPR_UNKNOWN_FUNCTION, name->column);
    n = new_node(p, NODE_CALL, name->column);
    if (n == NULL)
        return NULL;
    n->u.call.fn = functions[which].fn;

    expr_lexer_advance(&p->lx); /* the '(' */
    if (p->lx.current.kind != TK_RPAREN) {
        for (;;) {
            struct expr_node *arg;
            if (n->u.call.argc == EXPR_MAX_ARGS)
                return fail(p, SAMPLE_EXPR_ARITY, p->lx.current.column);
            arg = parse_comparison(p);
            if (arg == NULL)
                return NULL;
            n->u.call.args[n->u.call.argc++] = arg;
            if (p->lx.current.kind != TK_COMMA)
                break;
            expr_lexer_advance(&p->lx);
        }
    }
    if (p->lx.current.kind != TK_RPAREN)
        return fail(p, SAMPLE_EXPR_SYNTAX, p->lx.current.column);
    if (n->u.call.argc != functions[which].arity)
        return fail(p, SAMPLE_EXPR_ARITY, name->column);
    expr_lexer_advance(&p->lx);
    return n;
}

static struct expr_node *parse_primary(struct parser *p)
{
    struct expr_token tok = p->lx.current;
    struct expr_node *n;

    switch (tok.kind) {
    case TK_NUMBER:
        n = new_node(p, NODE_NUMBER, tok.column);
        if (n != NULL)
            n->u.number = tok.number;
        expr_lexer_advance(&p->lx);
        return n;
    case TK_IDENT:
        expr_lexer_advance(&p->lx);
        if (p->lx.current.kind == TK_LPAREN)
            return parse_call(p, &tok);
        n = new_node(p, NODE_VARIABLE, tok.column);
        if (n != NULL) {
            n->u.name = sample_arena_strndup(&p->expr->arena, tok.start, tok.len);
            if (n->u.name == NULL)
                return fail(p, SAMPLE_EXPR_NO_MEMORY, tok.column);
        }
        return n;
    case TK_LPAREN:
        expr_lexer_advance(&p->lx);
        n = parse_comparison(p);
        if (n == NULL)
            return NULL;
        if (p->lx.current.kind != TK_RPAREN)
            return fail(p, SAMPLE_EXPR_SYNTAX, p->lx.current.column);
        expr_lexer_advance(&p->lx);
        return n;
    default:
        return fail(p, SAMPLE_EXPR_SYNTAX, tok.column);
    }
}

static struct expr_node *parse_power(struct parser *p)
{
    struct expr_node *base = parse_primary(p);
    if (base != NULL && p->lx.current.kind == TK_CARET) {
        size_t column = p->lx.current.column;
        expr_lexer_advance(&p->lx);
        /* The exponent may itself be negated or a power: 2^-1, 2^3^2. */
        return binary(p, TK_CARET, column, base, parse_unary(p));
    }
    return base;
}

static struct expr_node *parse_unary(struct parser *p)
{
    if (p->lx.current.kind == TK_MINUS) {
        size_t column = p->lx.current.column;
        struct expr_node *operand, *n;
        expr_lexer_advance(&p->lx);
        operand = parse_unary(p);
        if (operand == NULL)
            return NULL;
        n = new_node(p, NODE_NEGATE, column);
        if (n != NULL)
            n->u.operand = operand;
        return n;
    }
    if (p->lx.current.kind == TK_PLUS) {
        expr_lexer_advance(&p->lx);
        return parse_unary(p);
    }
    return parse_power(p);
}

static struct expr_node *parse_term(struct parser *p)
{
    struct expr_node *lhs = parse_unary(p);
    while (lhs != NULL && (p->lx.current.kind == TK_STAR || p->lx.current.kind == TK_SLASH ||
                           p->lx.current.kind == TK_PERCENT)) {
        struct expr_token op = p->lx.current;
        expr_lexer_advance(&p->lx);
        lhs = binary(p, op.kind, op.column, lhs, parse_unary(p));
    }
    return lhs;
}

static struct expr_node *parse_sum(struct parser *p)
{
    struct expr_node *lhs = parse_term(p);
    while (lhs != NULL && (p->lx.current.kind == TK_PLUS || p->lx.current.kind == TK_MINUS)) {
        struct expr_token op = p->lx.current;
        expr_lexer_advance(&p->lx);
        lhs = binary(p, op.kind, op.column, lhs, parse_term(p));
    }
    return lhs;
}

static int is_comparison(enum expr_token_kind kind)
{
    return kind == TK_LT || kind == TK_LE || kind == TK_GT || kind == TK_GE || kind == TK_EQ ||
           kind == TK_NE;
}

static struct expr_node *parse_comparison(struct parser *p)
{
    struct expr_node *lhs = parse_sum(p);
    while (lhs != NULL && is_comparison(p->lx.current.kind)) {
        struct expr_token op = p->lx.current;
        expr_lexer_advance(&p->lx);
        lhs = binary(p, op.kind, op.column, lhs, parse_sum(p));
    }
    return lhs;
}

struct sample_expr *sample_expr_parse(const char *text, struct sample_expr_result *err)
{
    struct sample_expr_result ignored;
    struct parser p;

    if (err == NULL)
        err = &ignored;
    err->error = SAMPLE_EXPR_OK;
    err->value = 0.0;
    err->column = 0;

    p.expr = malloc(sizeof *p.expr);
    if (p.expr == NULL) {
        err->error = SAMPLE_EXPR_NO_MEMORY;
        return NULL;
    }
    sample_arena_init(&p.expr->arena, 1024);
    p.expr->nodes = 0;
    p.err = err;
    expr_lexer_init(&p.lx, text);

    p.expr->root = parse_comparison(&p);
    if (p.expr->root != NULL && p.lx.current.kind != TK_END)
        fail(&p, SAMPLE_EXPR_SYNTAX, p.lx.current.column);
    if (err->error != SAMPLE_EXPR_OK) {
        sample_expr_free(p.expr);
        return NULL;
    }
    return p.expr;
}

size_t sample_expr_node_count(const struct sample_expr *expr)
{
    return expr->nodes;
}

static size_t visit_variables(const struct expr_node *n, void (*fn)(const char *, void *),
                              void *ctx)
{
    size_t count = 0;
    switch (n->kind) {
    case NODE_NUMBER:
        return 0;
    case NODE_VARIABLE:
        if (fn != NULL)
            fn(n->u.name, ctx);
        return 1;
    case NODE_NEGATE:
        return visit_variables(n->u.operand, fn, ctx);
    case NODE_BINARY:
        count = visit_variables(n->u.binary.lhs, fn, ctx);
        return count + visit_variables(n->u.binary.rhs, fn, ctx);
    case NODE_CALL:
        for (size_t i = 0; i < n->u.call.argc; i++)
            count += visit_variables(n->u.call.args[i], fn, ctx);
        return count;
    }
    return count;
}

size_t sample_expr_for_each_variable(const struct sample_expr *expr,
                                     void (*fn)(const char *name, void *ctx), void *ctx)
{
    return visit_variables(expr->root, fn, ctx);
}

void sample_expr_free(struct sample_expr *expr)
{
    if (expr != NULL) {
        sample_arena_free(&expr->arena);
        free(expr);
    }
}
