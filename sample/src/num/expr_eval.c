/*
 * expr_eval.c - evaluating expression trees, and the module's self-test.
 */
#include <math.h>
#include <string.h>

#include "sample/check.h"
#include "sample/digest.h"
#include "expr_internal.h"

/* Deep trees could exhaust the C stack; no sane expression nests this far. */
#define MAX_DEPTH 200

struct evaluator {
    sample_expr_lookup_fn lookup;
    void *ctx;
    struct sample_expr_result result;
};

static int eval_fail(struct evaluator *ev, enum sample_expr_error error, size_t column)
{
    ev->result.error = error;
    ev->result.column = column;
    return -1;
}

static int eval_node(struct evaluator *ev, const struct expr_node *n, int depth, double *out);

static int eval_call(struct evaluator *ev, const struct expr_node *n, int depth, double *out)
{
    double a[EXPR_MAX_ARGS] = { 0.0, 0.0 };
    for (size_t i = 0; i < n->u.call.argc; i++)
        if (eval_node(ev, n->u.call.args[i], depth + 1, &a[i]) != 0)
            return -1;
    switch (n->u.call.fn) {
    case FN_ABS:
        *out = fabs(a[0]);
        return 0;
    case FN_SQRT:
        if (a[0] < 0.0)
            return eval_fail(ev, SAMPLE_EXPR_DOMAIN, n->column);
        *out = sqrt(a[0]);
        return 0;
    case FN_FLOOR:
        *out = floor(a[0]);
        return 0;
    case FN_MIN:
        *out = a[0] < a[1] ? a[0] : a[1];
        return 0;
    case FN_MAX:
        *out = a[0] > a[1] ? a[0] : a[1];
        return 0;
    case FN_POW:
        break;
    }
    if (a[0] < 0.0 && floor(a[1]) != a[1])
        return eval_fail(ev, SAMPLE_EXPR_DOMAIN, n->column);
    if (a[0] == 0.0 && a[1] < 0.0)
        return eval_fail(ev, SAMPLE_EXPR_DIVISION_BY_ZERO, n->column);
    *out = pow(a[0], a[1]);
    return 0;
}

static int eval_binary(struct evaluator *ev, const struct expr_node *n, int depth, double *out)
{
    double l, r;
    if (eval_node(ev, n->u.binary.lhs, depth + 1, &l) != 0 ||
        eval_node(ev, n->u.binary.rhs, depth + 1, &r) != 0)
        return -1;
    switch (n->u.binary.op) {
    case TK_PLUS:
        *out = l + r;
        return 0;
    case TK_MINUS:
        *out = l - r;
        return 0;
    case TK_STAR:
        *out = l * r;
        return 0;
    case TK_SLASH:
        if (r == 0.0)
            return eval_fail(ev, SAMPLE_EXPR_DIVISION_BY_ZERO, n->column);
        *out = l / r;
        return 0;
    case TK_PERCENT:
        if (r == 0.0)
            return eval_fail(ev, SAMPLE_EXPR_DIVISION_BY_ZERO, n->column);
        *out = fmod(l, r);
        return 0;
    case TK_CARET:
        if (l < 0.0 && floor(r) != r)
            return eval_fail(ev, SAMPLE_EXPR_DOMAIN, n->column);
        if (l == 0.0 && r < 0.0)
            return eval_fail(ev, SAMPLE_EXPR_DIVISION_BY_ZERO, n->column);
        *out = pow(l, r);
        return 0;
    case TK_LT:
        *out = l < r;
        return 0;
    case TK_LE:
        *out = l <= r;
        return 0;
    case TK_GT:
        *out = l > r;
        return 0;
    case TK_GE:
        *out = l >= r;
        return 0;
    case TK_EQ:
        *out = l == r;
        return 0;
    case TK_NE:
        *out = l != r;
        return 0;
    default:
        return eval_fail(ev, SAMPLE_EXPR_SYNTAX, n->column);
    }
}

static int eval_node(struct evaluator *ev, const struct expr_node *n, int depth, double *out)
{
    if (depth > MAX_DEPTH)
        return eval_fail(ev, SAMPLE_EXPR_DOMAIN, n->column);
    switch (n->kind) {
    case NODE_NUMBER:
        *out = n->u.number;
        return 0;
    case NODE_VARIABLE:
        if (ev->lookup == NULL || !ev->lookup(n->u.name, out, ev->ctx))
            return eval_fail(ev, SAMPLE_EXPR_UNKNOWN_VARIABLE, n->column);
        return 0;
    case NODE_NEGATE:
        if (eval_node(ev, n->u.operand, depth + 1, out) != 0)
            return -1;
        *out = -*out;
        return 0;
    case NODE_BINARY:
        return eval_binary(ev, n, depth, out);
    case NODE_CALL:
        return eval_call(ev, n, depth, out);
    }
    return eval_fail(ev, SAMPLE_EXPR_SYNTAX, n->column);
}

struct sample_expr_result sample_expr_eval(const struct sample_expr *expr,
                                           sample_expr_lookup_fn lookup, void *ctx)
{
    struct evaluator ev;
    double value = 0.0;
    ev.lookup = lookup;
    ev.ctx = ctx;
    ev.result.error = SAMPLE_EXPR_OK;
    ev.result.value = 0.0;
    ev.result.column = 0;
    if (eval_node(&ev, expr->root, 0, &value) == 0)
        ev.result.value = value;
    return ev.result;
}

struct sample_expr_result sample_expr_calc(const char *text)
{
    struct sample_expr_result result;
    struct sample_expr *expr = sample_expr_parse(text, &result);
    if (expr == NULL)
        return result;
    result = sample_expr_eval(expr, NULL, NULL);
    sample_expr_free(expr);
    return result;
}

const char *sample_expr_error_text(enum sample_expr_error error)
{
    switch (error) {
    case SAMPLE_EXPR_OK:
        return "ok";
    case SAMPLE_EXPR_SYNTAX:
        return "syntax error";
    case SAMPLE_EXPR_UNKNOWN_VARIABLE:
        return "unknown variable";
    case SAMPLE_EXPR_UNKNOWN_FUNCTION:
        return "unknown function";
    case SAMPLE_EXPR_ARITY:
        return "wrong number of arguments";
    case SAMPLE_EXPR_DIVISION_BY_ZERO:
        return "division by zero";
    case SAMPLE_EXPR_DOMAIN:
        return "argument out of domain";
    case SAMPLE_EXPR_NO_MEMORY:
        return "out of memory";
    }
    return "unknown error";
}

/* Variables for the self-test: x = 3, y = 4, rate = 0.25. */
static int test_lookup(const char *name, double *value, void *ctx)
{
    int *calls = ctx;
    (*calls)++;
    if (strcmp(name, "x") == 0)
        *value = 3.0;
    else if (strcmp(name, "y") == 0)
        *value = 4.0;
    else if (strcmp(name, "rate") == 0)
        *value = 0.25;
    else
        return 0;
    return 1;
}

uint32_t sample_expr_selftest(void)
{
    static const struct {
        const char *text;
        double value;
    } good[] = {
        { "1 + 2 * 3", 7.0 },         { "(1 + 2) * 3", 9.0 },     { "2 ^ 3 ^ 2", 512.0 },
        { "-2 ^ 2", -4.0 },           { "2 ^ -1", 0.5 },          { "10 % 4 + 7 / 2", 5.5 },
        { "1.5e2 - .5", 149.5 },      { "max(3, min(8, 5))", 5 }, { "sqrt(16) + abs(-2)", 6.0 },
        { "floor(-2.5)", -3.0 },      { "pow(2, 10)", 1024.0 },   { "1 < 2 == 1", 1.0 },
        { "3 >= 4", 0.0 },            { "2 != 2", 0.0 },          { "--3", 3.0 },
        { "+4 - -4", 8.0 },
    };
    static const struct {
        const char *text;
        enum sample_expr_error error;
        size_t column;
    } bad[] = {
        { "1 +", SAMPLE_EXPR_SYNTAX, 4 },
        { "(1 + 2", SAMPLE_EXPR_SYNTAX, 7 },
        { "1 / (2 - 2)", SAMPLE_EXPR_DIVISION_BY_ZERO, 3 },
        { "sqrt(-1)", SAMPLE_EXPR_DOMAIN, 1 },
        { "nope(1)", SAMPLE_EXPR_UNKNOWN_FUNCTION, 1 },
        { "min(1)", SAMPLE_EXPR_ARITY, 1 },
        { "max(1, 2, 3)", SAMPLE_EXPR_ARITY, 11 },
        { "2 = 2", SAMPLE_EXPR_SYNTAX, 3 },
        { "1 2", SAMPLE_EXPR_SYNTAX, 3 },
        { "zzz + 1", SAMPLE_EXPR_UNKNOWN_VARIABLE, 1 },
        { "(-8) ^ 0.5", SAMPLE_EXPR_DOMAIN, 6 },
    };
    struct sample_expr_result r;
    struct sample_expr *e;
    uint32_t digest = 0;
    size_t i;
    int calls = 0, good_ok = 1, bad_ok = 1;

    for (i = 0; i < sizeof good / sizeof good[0]; i++) {
        r = sample_expr_calc(good[i].text);
        if (r.error != SAMPLE_EXPR_OK || fabs(r.value - good[i].value) > 1e-12) {
            good_ok = 0;
            sample_check_record(0, good[i].text, __FILE__, __LINE__);
        }
        digest = sample_digest_double(digest, r.value);
    }
    SAMPLE_CHECK(good_ok);

    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        r = sample_expr_calc(bad[i].text);
        if (r.error != bad[i].error || r.column != bad[i].column) {
            bad_ok = 0;
            sample_check_record(0, bad[i].text, __FILE__, __LINE__);
        }
        digest = sample_digest_u32(digest, (uint32_t)(r.error * 100 + r.column));
    }
    SAMPLE_CHECK(bad_ok);

    e = sample_expr_parse("x * x + y * y == 25 * (1 + rate - 0.25)", &r);
    SAMPLE_CHECK(e != NULL);
    if (e != NULL) {
        SAMPLE_CHECK_EQ(sample_expr_node_count(e), 15);
        r = sample_expr_eval(e, test_lookup, &calls);
        SAMPLE_CHECK_EQ(r.error, SAMPLE_EXPR_OK);
        SAMPLE_CHECK_NEAR(r.value, 1.0, 0.0);
        SAMPLE_CHECK_EQ(calls, 5);
        SAMPLE_CHECK_EQ(sample_expr_for_each_variable(e, NULL, NULL), 5);
        r = sample_expr_eval(e, NULL, NULL);
        SAMPLE_CHECK_EQ(r.error, SAMPLE_EXPR_UNKNOWN_VARIABLE);
        SAMPLE_CHECK_EQ(r.column, 1);
        sample_expr_free(e);
    }
    SAMPLE_CHECK_STR(sample_expr_error_text(SAMPLE_EXPR_ARITY), "wrong number of arguments");
    return digest;
}
