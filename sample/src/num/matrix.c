/*
 * matrix.c - dense matrices: products, LU decomposition, solving.
 */
#include "sample/matrix.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sample/check.h"
#include "sample/digest.h"

/* Pivots smaller than this count as zero: the matrix is treated as singular. */
#define SINGULAR_EPS 1e-12

struct sample_matrix *sample_matrix_new(size_t rows, size_t cols)
{
    struct sample_matrix *m;
    if (rows == 0 || cols == 0 || rows > ((size_t)-1 / sizeof(double)) / cols)
        return NULL;
    m = malloc(sizeof *m);
    if (m == NULL)
        return NULL;
    m->v = calloc(rows * cols, sizeof *m->v);
    if (m->v == NULL) {
        free(m);
        return NULL;
    }
    m->rows = rows;
    m->cols = cols;
    return m;
}

struct sample_matrix *sample_matrix_identity(size_t n)
{
    struct sample_matrix *m = sample_matrix_new(n, n);
    if (m != NULL)
        for (size_t i = 0; i < n; i++)
            m->v[i * n + i] = 1.0;
    return m;
}

struct sample_matrix *sample_matrix_copy(const struct sample_matrix *m)
{
    struct sample_matrix *c = sample_matrix_new(m->rows, m->cols);
    if (c != NULL)
        memcpy(c->v, m->v, m->rows * m->cols * sizeof *m->v);
    return c;
}

void sample_matrix_free(struct sample_matrix *m)
{
    if (m != NULL) {
        free(m->v);
        free(m);
    }
}

double sample_matrix_get(const struct sample_matrix *m, size_t r, size_t c)
{
    return m->v[r * m->cols + c];
}

void sample_matrix_set(struct sample_matrix *m, size_t r, size_t c, double value)
{
    m->v[r * m->cols + c] = value;
}

struct sample_matrix *sample_matrix_mul(const struct sample_matrix *a, const struct sample_matrix *b)
{
    struct sample_matrix *p;
    if (a->cols != b->rows)
        return NULL;
    p = sample_matrix_new(a->rows, b->cols);
    if (p == NULL)
        return NULL;
    /* i-k-j order walks both b and p row by row. */
    for (size_t i = 0; i < a->rows; i++)
        for (size_t k = 0; k < a->cols; k++) {
            double aik = a->v[i * a->cols + k];
            for (size_t j = 0; j < b->cols; j++)
                p->v[i * p->cols + j] += aik * b->v[k * b->cols + j];
        }
    return p;
}

struct sample_matrix *sample_matrix_add(const struct sample_matrix *a, const struct sample_matrix *b,
                                       double scale)
{
    struct sample_matrix *s;
    if (a->rows != b->rows || a->cols != b->cols)
        return NULL;
    s = sample_matrix_new(a->rows, a->cols);
    if (s != NULL)
        for (size_t i = 0; i < a->rows * a->cols; i++)
            s->v[i] = a->v[i] + scale * b->v[i];
    return s;
}

struct sample_matrix *sample_matrix_transpose(const struct sample_matrix *m)
{
    struct sample_matrix *t = sample_matrix_new(m->cols, m->rows);
    if (t != NULL)
        for (size_t r = 0; r < m->rows; r++)
            for (size_t c = 0; c < m->cols; c++)
                t->v[c * t->cols + r] = m->v[r * m->cols + c];
    return t;
}

/*
 * Factors lu in place into L (unit lower, below the diagonal) and U, with
 * row permutation perm. Returns the permutation's sign, or 0 when singular.
 */
static int lu_decompose(struct sample_matrix *lu, size_t *perm)
{
    size_t n = lu->rows;
    int sign = 1;
    for (size_t i = 0; i < n; i++)
        perm[i] = i;
    for (size_t k = 0; k < n; k++) {
        size_t pivot = k;
        double best = fabs(lu->v[k * n + k]);
        for (size_t r = k + 1; r < n; r++)
            if (fabs(lu->v[r * n + k]) > best) {
                best = fabs(lu->v[r * n + k]);
                pivot = r;
            }
        if (best < SINGULAR_EPS)
            return 0;
        if (pivot != k) {
            size_t tp = perm[k];
            perm[k] = perm[pivot];
            perm[pivot] = tp;
            for (size_t c = 0; c < n; c++) {
                double t = lu->v[k * n + c];
                lu->v[k * n + c] = lu->v[pivot * n + c];
                lu->v[pivot * n + c] = t;
            }
            sign = -sign;
        }
        for (size_t r = k + 1; r < n; r++) {
            double f = lu->v[r * n + k] / lu->v[k * n + k];
            lu->v[r * n + k] = f;
            for (size_t c = k + 1; c < n; c++)
                lu->v[r * n + c] -= f * lu->v[k * n + c];
        }
    }
    return sign;
}

/* Solves with a factored matrix for one right-hand side column (x may alias nothing). */
static void lu_solve(const struct sample_matrix *lu, const size_t *perm, const double *b, double *x)
{
    size_t n = lu->rows;
    for (size_t i = 0; i < n; i++) {
        double s = b[perm[i]];
        for (size_t j = 0; j < i; j++)
            s -= lu->v[i * n + j] * x[j];
        x[i] = s;
    }
    for (size_t i = n; i-- > 0;) {
        double s = x[i];
        for (size_t j = i + 1; j < n; j++)
            s -= lu->v[i * n + j] * x[j];
        x[i] = s / lu->v[i * n + i];
    }
}

double sample_matrix_det(const struct sample_matrix *m)
{
    struct sample_matrix *lu;
    size_t *perm;
    double det = 0.0;
    int sign;
    if (m->rows != m->cols)
        return 0.0;
    lu = sample_matrix_copy(m);
    perm = malloc(m->rows * sizeof *perm);
    if (lu != NULL && perm != NULL && (sign = lu_decompose(lu, perm)) != 0) {
        det = sign;
        for (size_t i = 0; i < m->rows; i++)
            det *= lu->v[i * m->rows + i];
    }
    free(perm);
    sample_matrix_free(lu);
    return det;
}

struct sample_matrix *sample_matrix_solve(const struct sample_matrix *a, const struct sample_matrix *b)
{
    struct sample_matrix *lu = NULL, *x = NULL;
    size_t *perm = NULL;
    if (a->rows != a->cols || b->rows != a->rows || b->cols != 1)
        return NULL;
    lu = sample_matrix_copy(a);
    perm = malloc(a->rows * sizeof *perm);
    if (lu != NULL && perm != NULL && lu_decompose(lu, perm) != 0) {
        x = sample_matrix_new(a->rows, 1);
        if (x != NULL)
            lu_solve(lu, perm, b->v, x->v);
    }
    free(perm);
    sample_matrix_free(lu);
    return x;
}

struct sample_matrix *sample_matrix_inverse(const struct sample_matrix *m)
{
    struct sample_matrix *lu = NULL, *inv = NULL;
    size_t *perm = NULL, n = m->rows;
    double *e = NULL, *col = NULL;
    if (m->rows != m->cols)
        return NULL;
    lu = sample_matrix_copy(m);
    perm = malloc(n * sizeof *perm);
    e = calloc(n, sizeof *e);
    col = malloc(n * sizeof *col);
    if (lu != NULL && perm != NULL && e != NULL && col != NULL && lu_decompose(lu, perm) != 0) {
        inv = sample_matrix_new(n, n);
        for (size_t c = 0; inv != NULL && c < n; c++) {
            e[c] = 1.0;
            lu_solve(lu, perm, e, col);
            e[c] = 0.0;
            for (size_t r = 0; r < n; r++)
                inv->v[r * n + c] = col[r];
        }
    }
    free(col);
    free(e);
    free(perm);
    sample_matrix_free(lu);
    return inv;
}

double sample_matrix_max_diff(const struct sample_matrix *a, const struct sample_matrix *b)
{
    double worst = 0.0;
    if (a->rows != b->rows || a->cols != b->cols)
        return -1.0;
    for (size_t i = 0; i < a->rows * a->cols; i++)
        if (fabs(a->v[i] - b->v[i]) > worst)
            worst = fabs(a->v[i] - b->v[i]);
    return worst;
}

uint32_t sample_matrix_selftest(void)
{
    static const double a_values[9] = { 2, -1, 0, -1, 2, -1, 0, -1, 2 };
    static const double rect_values[6] = { 1, 2, 3, 4, 5, 6 };
    struct sample_matrix *a = sample_matrix_new(3, 3), *rect = sample_matrix_new(2, 3);
    struct sample_matrix *b = sample_matrix_new(3, 1), *x, *inv, *prod, *id, *t, *gram, *diff;
    struct sample_matrix *hilbert = sample_matrix_new(6, 6), *hinv, *hprod, *id6;
    uint32_t digest = 0;

    if (a == NULL || rect == NULL || b == NULL || hilbert == NULL) {
        SAMPLE_CHECK(!"out of memory");
        return 0;
    }
    memcpy(a->v, a_values, sizeof a_values);
    memcpy(rect->v, rect_values, sizeof rect_values);
    sample_matrix_set(b, 0, 0, 1.0);
    sample_matrix_set(b, 1, 0, 0.0);
    sample_matrix_set(b, 2, 0, 1.0);

    SAMPLE_CHECK_NEAR(sample_matrix_det(a), 4.0, 1e-12);
    x = sample_matrix_solve(a, b);
    SAMPLE_CHECK(x != NULL);
    if (x != NULL) {
        SAMPLE_CHECK_NEAR(sample_matrix_get(x, 0, 0), 1.0, 1e-12);
        SAMPLE_CHECK_NEAR(sample_matrix_get(x, 1, 0), 1.0, 1e-12);
        SAMPLE_CHECK_NEAR(sample_matrix_get(x, 2, 0), 1.0, 1e-12);
    }

    inv = sample_matrix_inverse(a);
    id = sample_matrix_identity(3);
    prod = inv ? sample_matrix_mul(a, inv) : NULL;
    SAMPLE_CHECK(prod != NULL && sample_matrix_max_diff(prod, id) < 1e-12);
    if (inv != NULL)
        SAMPLE_CHECK_NEAR(sample_matrix_get(inv, 0, 0), 0.75, 1e-12);

    t = sample_matrix_transpose(rect);
    gram = t ? sample_matrix_mul(rect, t) : NULL;
    SAMPLE_CHECK(gram != NULL && gram->rows == 2 && gram->cols == 2);
    if (gram != NULL) {
        SAMPLE_CHECK_NEAR(sample_matrix_get(gram, 0, 0), 14.0, 0.0);
        SAMPLE_CHECK_NEAR(sample_matrix_get(gram, 0, 1), 32.0, 0.0);
        SAMPLE_CHECK_NEAR(sample_matrix_get(gram, 1, 1), 77.0, 0.0);
        SAMPLE_CHECK_NEAR(sample_matrix_det(gram), 54.0, 1e-9);
    }
    SAMPLE_CHECK(sample_matrix_mul(rect, rect) == NULL);
    SAMPLE_CHECK(sample_matrix_new(0, 3) == NULL);

    diff = sample_matrix_add(a, a, -1.0);
    SAMPLE_CHECK(diff != NULL && sample_matrix_det(diff) == 0.0);
    SAMPLE_CHECK(diff != NULL && sample_matrix_inverse(diff) == NULL);

    /* The Hilbert matrix is badly conditioned: a real test of the pivoting. */
    for (size_t r = 0; r < 6; r++)
        for (size_t c = 0; c < 6; c++)
            sample_matrix_set(hilbert, r, c, 1.0 / (double)(r + c + 1));
    hinv = sample_matrix_inverse(hilbert);
    id6 = sample_matrix_identity(6);
    hprod = hinv ? sample_matrix_mul(hilbert, hinv) : NULL;
    SAMPLE_CHECK(hprod != NULL && sample_matrix_max_diff(hprod, id6) < 1e-6);
    if (hinv != NULL)
        SAMPLE_CHECK_NEAR(sample_matrix_get(hinv, 0, 0), 36.0, 1e-5);
    SAMPLE_CHECK_NEAR(sample_matrix_det(hilbert), 5.3673e-18, 1e-21);

    digest = sample_digest_double(digest, sample_matrix_det(a));
    if (inv != NULL)
        for (size_t i = 0; i < 9; i++)
            digest = sample_digest_double(digest, inv->v[i]);
    /* Whole numbers only: the last digits of an ill-conditioned inverse may vary. */
    if (hinv != NULL) {
        SAMPLE_CHECK_NEAR(sample_matrix_get(hinv, 5, 5), 698544.0, 0.05);
        digest = sample_digest_u32(digest, (uint32_t)lround(sample_matrix_get(hinv, 5, 5)));
    }

    sample_matrix_free(hprod);
    sample_matrix_free(id6);
    sample_matrix_free(hinv);
    sample_matrix_free(hilbert);
    sample_matrix_free(diff);
    sample_matrix_free(gram);
    sample_matrix_free(t);
    sample_matrix_free(prod);
    sample_matrix_free(id);
    sample_matrix_free(inv);
    sample_matrix_free(x);
    sample_matrix_free(b);
    sample_matrix_free(rect);
    sample_matrix_free(a);
    return digest;
}
