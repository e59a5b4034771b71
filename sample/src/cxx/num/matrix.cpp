// matrix.cpp - the C++ Matrix over the C implementation, and least-squares fitting.
#include "sample/cxx/matrix.hpp"

#include <cmath>
#include <cstdio>
#include <new>
#include <stdexcept>
#include <string>

#include "sample/check.h"
#include "sample/cxx/digest.hpp"

namespace sample {

namespace {

std::string shape_of(std::size_t rows, std::size_t cols)
{
    return std::to_string(rows) + "x" + std::to_string(cols);
}

sample_matrix* allocate(std::size_t rows, std::size_t cols)
{
    if (rows == 0 || cols == 0)
        throw std::invalid_argument("matrix of " + shape_of(rows, cols) + " has no elements");
    sample_matrix* m = sample_matrix_new(rows, cols);
    if (m == nullptr)
        throw std::bad_alloc();
    return m;
}

}  // namespace

Matrix::Matrix(sample_matrix* owned) : m_(owned) {}

Matrix::Matrix(std::size_t rows, std::size_t cols) : m_(allocate(rows, cols)) {}

Matrix::Matrix(std::initializer_list<std::initializer_list<double>> rows)
    : m_(allocate(rows.size(), rows.size() ? rows.begin()->size() : 0))
{
    std::size_t r = 0;
    for (const auto& row : rows) {
        if (row.size() != cols())
            throw std::invalid_argument("row " + std::to_string(r) + " has " +
                                        std::to_string(row.size()) + " values, expected " +
                                        std::to_string(cols()));
        std::size_t c = 0;
        for (double v : row)
            (*this)(r, c++) = v;
        ++r;
    }
}

Matrix Matrix::identity(std::size_t n)
{
    sample_matrix* m = sample_matrix_identity(n);
    if (m == nullptr)
        throw std::bad_alloc();
    return Matrix(m);
}

Matrix Matrix::column(const std::vector<double>& values)
{
    Matrix m(values.size(), 1);
    for (std::size_t i = 0; i < values.size(); ++i)
        m(i, 0) = values[i];
    return m;
}

Matrix::Matrix(const Matrix& other)
{
    sample_matrix* m = sample_matrix_copy(other.m_.get());
    if (m == nullptr)
        throw std::bad_alloc();
    m_.reset(m);
}

Matrix& Matrix::operator=(const Matrix& other)
{
    if (this != &other)
        *this = Matrix(other);
    return *this;
}

double Matrix::operator()(std::size_t r, std::size_t c) const
{
    if (r >= rows() || c >= cols())
        throw std::out_of_range("element (" + std::to_string(r) + ", " + std::to_string(c) +
                                ") outside " + shape_of(rows(), cols()));
    return m_->v[r * m_->cols + c];
}

double& Matrix::operator()(std::size_t r, std::size_t c)
{
    if (r >= rows() || c >= cols())
        throw std::out_of_range("element (" + std::to_string(r) + ", " + std::to_string(c) +
                                ") outside " + shape_of(rows(), cols()));
    return m_->v[r * m_->cols + c];
}

Matrix Matrix::operator*(const Matrix& o) const
{
    if (cols() != o.rows())
        throw std::invalid_argument("cannot multiply " + shape_of(rows(), cols()) + " by " +
                                    shape_of(o.rows(), o.cols()));
    sample_matrix* p = sample_matrix_mul(m_.get(), o.m_.get());
    if (p == nullptr)
        throw std::bad_alloc();
    return Matrix(p);
}

Matrix Matrix::operator+(const Matrix& o) const
{
    if (rows() != o.rows() || cols() != o.cols())
        throw std::invalid_argument("cannot add " + shape_of(rows(), cols()) + " and " +
                                    shape_of(o.rows(), o.cols()));
    sample_matrix* s = sample_matrix_add(m_.get(), o.m_.get(), 1.0);
    if (s == nullptr)
        throw std::bad_alloc();
    return Matrix(s);
}

Matrix Matrix::operator-(const Matrix& o) const
{
    if (rows() != o.rows() || cols() != o.cols())
        throw std::invalid_argument("cannot subtract " + shape_of(o.rows(), o.cols()) + " from " +
                                    shape_of(rows(), cols()));
    sample_matrix* s = sample_matrix_add(m_.get(), o.m_.get(), -1.0);
    if (s == nullptr)
        throw std::bad_alloc();
    return Matrix(s);
}

Matrix Matrix::transposed() const
{
    sample_matrix* t = sample_matrix_transpose(m_.get());
    if (t == nullptr)
        throw std::bad_alloc();
    return Matrix(t);
}

Matrix Matrix::inverse() const
{
    if (rows() != cols())
        throw std::invalid_argument("cannot invert a " + shape_of(rows(), cols()) + " matrix");
    sample_matrix* inv = sample_matrix_inverse(m_.get());
    if (inv == nullptr)
        throw std::domain_error("matrix is singular");
    return Matrix(inv);
}

double Matrix::determinant() const
{
    if (rows() != cols())
        throw std::invalid_argument("no determinant for a " + shape_of(rows(), cols()) + " matrix");
    return sample_matrix_det(m_.get());
}

Matrix Matrix::solve(const Matrix& b) const
{
    if (rows() != cols() || b.rows() != rows() || b.cols() != 1)
        throw std::invalid_argument("cannot solve " + shape_of(rows(), cols()) + " with " +
                                    shape_of(b.rows(), b.cols()));
    sample_matrix* x = sample_matrix_solve(m_.get(), b.m_.get());
    if (x == nullptr)
        throw std::domain_error("matrix is singular");
    return Matrix(x);
}

double Matrix::max_diff(const Matrix& o) const
{
    return sample_matrix_max_diff(m_.get(), o.m_.get());
}

std::string Matrix::to_string(int decimals) const
{
    std::string out;
    char buf[64];
    for (std::size_t r = 0; r < rows(); ++r) {
        for (std::size_t c = 0; c < cols(); ++c) {
            double v = (*this)(r, c);
            if (std::fabs(v) < 0.5 * std::pow(10.0, -decimals))
                v = 0.0;  // no "-0.000"
            std::snprintf(buf, sizeof buf, "%s%.*f", c ? " " : "", decimals, v);
            out += buf;
        }
        out += "\n";
    }
    return out;
}

std::vector<double> polyfit(const std::vector<double>& x, const std::vector<double>& y,
                            std::size_t degree)
{
    if (x.size() != y.size() || x.size() <= degree)
        throw std::invalid_argument("polyfit of degree " + std::to_string(degree) + " needs more than " +
                                    std::to_string(degree) + " paired points, got " +
                                    std::to_string(x.size()) + " and " + std::to_string(y.size()));
    // Normal equations (V^T V) c = V^T y for the Vandermonde matrix V.
    Matrix v(x.size(), degree + 1);
    for (std::size_t i = 0; i < x.size(); ++i) {
        double p = 1.0;
        for (std::size_t j = 0; j <= degree; ++j) {
            v(i, j) = p;
            p *= x[i];
        }
    }
    Matrix vt = v.transposed();
    Matrix c = (vt * v).solve(vt * Matrix::column(y));
    std::vector<double> out(degree + 1);
    for (std::size_t j = 0; j <= degree; ++j)
        out[j] = c(j, 0);
    return out;
}

std::uint32_t matrix_cxx_selftest()
{
    Digest digest;

    Matrix a{{4, -2, 1}, {-2, 4, -2}, {1, -2, 4}};
    SAMPLE_CHECK_NEAR(a.determinant(), 36.0, 1e-12);
    Matrix x = a.solve(Matrix::column({11, -16, 17}));
    SAMPLE_CHECK_NEAR(x(0, 0), 1.0, 1e-12);
    SAMPLE_CHECK_NEAR(x(1, 0), -2.0, 1e-12);
    SAMPLE_CHECK_NEAR(x(2, 0), 3.0, 1e-12);
    SAMPLE_CHECK((a * a.inverse()).max_diff(Matrix::identity(3)) < 1e-12);
    SAMPLE_CHECK((a - a.transposed()).max_diff(Matrix(3, 3)) == 0.0);

    Matrix copy = a;
    copy(0, 0) = 100.0;
    SAMPLE_CHECK_NEAR(a(0, 0), 4.0, 0.0);
    SAMPLE_CHECK_STR((a + Matrix::identity(3)).to_string(1).c_str(),
                     "5.0 -2.0 1.0\n-2.0 5.0 -2.0\n1.0 -2.0 5.0\n");
    digest.add(a.inverse().to_string(6));

    int errors = 0;
    try {
        (void)(a * Matrix(2, 2));
    } catch (const std::invalid_argument& e) {
        errors += std::string(e.what()) == "cannot multiply 3x3 by 2x2";
    }
    try {
        (void)Matrix{{1, 2}, {2, 4}}.inverse();
    } catch (const std::domain_error&) {
        ++errors;
    }
    try {
        (void)a(3, 0);
    } catch (const std::out_of_range&) {
        ++errors;
    }
    try {
        Matrix ragged{{1, 2}, {3}};
    } catch (const std::invalid_argument&) {
        ++errors;
    }
    SAMPLE_CHECK_EQ(errors, 4);

    // Points on y = 0.5x^2 - 3x + 2 exactly: the fit must recover the coefficients.
    std::vector<double> xs, ys;
    for (int i = -5; i <= 10; ++i) {
        xs.push_back(i);
        ys.push_back(0.5 * i * i - 3.0 * i + 2.0);
    }
    std::vector<double> coef = polyfit(xs, ys, 2);
    SAMPLE_CHECK_NEAR(coef[0], 2.0, 1e-9);
    SAMPLE_CHECK_NEAR(coef[1], -3.0, 1e-9);
    SAMPLE_CHECK_NEAR(coef[2], 0.5, 1e-9);
    for (double c : coef)
        digest.add_double(std::round(c * 1e6) / 1e6);

    bool too_few = false;
    try {
        polyfit({1.0, 2.0}, {1.0, 2.0}, 2);
    } catch (const std::invalid_argument&) {
        too_few = true;
    }
    SAMPLE_CHECK(too_few);
    return digest.value();
}

}  // namespace sample
