/*
 * matrix.h - dense row-major matrices of doubles.
 *
 * Products, transposes, LU decomposition with partial pivoting, solving
 * linear systems, determinants and inverses. Sizes are checked; nothing is
 * vectorised.
 */
#ifndef SAMPLE_MATRIX_H
#define SAMPLE_MATRIX_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* rows x cols values, row after row. */
struct sample_matrix {
    size_t rows;
    size_t cols;
    double *v;
};

/* Allocates a zero matrix; returns NULL when out of memory or a size is 0. */
struct sample_matrix *sample_matrix_new(size_t rows, size_t cols);

/* Allocates the n x n identity. */
struct sample_matrix *sample_matrix_identity(size_t n);

/* Allocates a copy. */
struct sample_matrix *sample_matrix_copy(const struct sample_matrix *m);

/* Releases a matrix (NULL is fine). */
void sample_matrix_free(struct sample_matrix *m);

/* Element (r, c); the caller keeps r and c in range. */
double sample_matrix_get(const struct sample_matrix *m, size_t r, size_t c);

/* Sets element (r, c). */
void sample_matrix_set(struct sample_matrix *m, size_t r, size_t c, double value);

/* a * b, or NULL when the sizes do not fit. */
struct sample_matrix *sample_matrix_mul(const struct sample_matrix *a, const struct sample_matrix *b);

/* a + scale * b, or NULL when the sizes differ. */
struct sample_matrix *sample_matrix_add(const struct sample_matrix *a, const struct sample_matrix *b,
                                       double scale);

/* The transpose. */
struct sample_matrix *sample_matrix_transpose(const struct sample_matrix *m);

/* Determinant of a square matrix (0 for a non-square one). */
double sample_matrix_det(const struct sample_matrix *m);

/* Solves a x = b for square a and a column b; NULL when a is singular. */
struct sample_matrix *sample_matrix_solve(const struct sample_matrix *a, const struct sample_matrix *b);

/* The inverse, or NULL when m is singular or not square. */
struct sample_matrix *sample_matrix_inverse(const struct sample_matrix *m);

/* Largest absolute difference between two same-sized matrices (-1 when sizes differ). */
double sample_matrix_max_diff(const struct sample_matrix *a, const struct sample_matrix *b);

/* Self-test of this module; returns its digest. */
uint32_t sample_matrix_selftest(void);

#ifdef __cplusplus
}
#endif

#endif /* SAMPLE_MATRIX_H */
