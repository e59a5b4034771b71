/*
 * expr_lex.c - the expression lexer.
 */
#include <stdlib.h>
#include <string.h>

#include "expr_internal.h"

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static int is_ident_start(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

void expr_lexer_init(struct expr_lexer *lx, const char *text)
{
    lx->text = text;
    lx->pos = text;
    expr_lexer_advance(lx);
}

/* Length of the number at s: digits, an optional fraction and an optional exponent. */
static size_t scan_number(const char *s)
{
    size_t n = 0;
    while (is_digit(s[n]))
        n++;
    if (s[n] == '.') {
        n++;
        while (is_digit(s[n]))
            n++;
    }
    if (s[n] == 'e' || s[n] == 'E') {
        size_t m = n + 1;
        if (s[m] == '+' || s[m] == '-')
            m++;
        if (is_digit(s[m])) {
            while (is_digit(s[m]))
                m++;
            n = m;
        }
    }
    return n;
}

static double number_value(const char *s, size_t len)
{
    char buf[64];
    if (len >= sizeof buf)
        return strtod(s, NULL);
    memcpy(buf, s, len);
    buf[len] = '\0';
    return strtod(buf, NULL);
}

void expr_lexer_advance(struct expr_lexer *lx)
{
    struct expr_token *t = &lx->current;
    const char *s = lx->pos;

    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
        s++;
    t->start = s;
    t->column = (size_t)(s - lx->text) + 1;
    t->len = 1;
    t->number = 0.0;

    if (*s == '\0') {
        t->kind = TK_END;
        t->len = 0;
    } else if (is_digit(*s) || (*s == '.' && is_digit(s[1]))) {
        t->kind = TK_NUMBER;
        t->len = scan_number(s);
        t->number = number_value(s, t->len);
    } else if (is_ident_start(*s)) {
        t->kind = TK_IDENT;
        while (is_ident_start(s[t->len]) || is_digit(s[t->len]))
            t->len++;
    } else {
        switch (*s) {
        case '+': t->kind = TK_PLUS; break;
        case '-': t->kind = TK_MINUS; break;
        case '*': t->kind = TK_STAR; break;
        case '/': t->kind = TK_SLASH; break;
        case '%': t->kind = TK_PERCENT; break;
        case '^': t->kind = TK_CARET; break;
        case '(': t->kind = TK_LPAREN; break;
        case ')': t->kind = TK_RPAREN; break;
        case ',': t->kind = TK_COMMA; break;
        case '<':
            t->kind = s[1] == '=' ? TK_LE : TK_LT;
            break;
        case '>':
            t->kind = s[1] == '=' ? TK_GE : TK_GT;
            break;
        case '=':
            t->kind = s[1] == '=' ? TK_EQ : TK_INVALID;
            break;
        case '!':
            t->kind = s[1] == '=' ? TK_NE : TK_INVALID;
            break;
        default:
            t->kind = TK_INVALID;
            break;
        }
        if (t->kind == TK_LE || t->kind == TK_GE || t->kind == TK_EQ || t->kind == TK_NE)
            t->len = 2;
    }
    lx->pos = s + t->len;
}

const char *expr_token_name(enum expr_token_kind kind)
{
    static const char *const names[] = {
        "end", "number", "identifier", "+", "-", "*", "/", "%", "^",
        "(",   ")",      ",",          "<", "<=", ">", ">=", "==", "!=", "invalid",
    };
    if ((size_t)kind >= sizeof names / sizeof names[0])
        return "?";
    return names[kind];
}
