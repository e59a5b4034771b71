// matrix.hpp - a C++ value type over the C matrix of sample/matrix.h.
//
// Owns its sample_matrix through a unique_ptr with the C deleter; copies
// are deep. Size mismatches throw std::invalid_argument, singular systems
// std::domain_error.
#ifndef SAMPLE_CXX_MATRIX_HPP
#define SAMPLE_CXX_MATRIX_HPP

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "sample/matrix.h"

namespace sample {

class Matrix {
public:
    Matrix(std::size_t rows, std::size_t cols);
    Matrix(std::initializer_list<std::initializer_list<double>> rows);
    static Matrix identity(std::size_t n);
    static Matrix column(const std::vector<double>& values);

    Matrix(const Matrix& other);
    Matrix& operator=(const Matrix& other);
    Matrix(Matrix&&) noexcept = default;
    Matrix& operator=(Matrix&&) noexcept = default;
    ~Matrix() = default;

    std::size_t rows() const { return m_->rows; }
    std::size_t cols() const { return m_->cols; }
    double operator()(std::size_t r, std::size_t c) const;
    double& operator()(std::size_t r, std::size_t c);

    Matrix operator*(const Matrix& o) const;
    Matrix operator+(const Matrix& o) const;
    Matrix operator-(const Matrix& o) const;
    Matrix transposed() const;
    Matrix inverse() const;
    double determinant() const;

    // Solves this * x = b for a column b.
    Matrix solve(const Matrix& b) const;

    double max_diff(const Matrix& o) const;

    // Rows on lines, values with the given number of decimals.
    std::string to_string(int decimals = 3) const;

private:
    struct Deleter {
        void operator()(sample_matrix* m) const { sample_matrix_free(m); }
    };
    explicit Matrix(sample_matrix* owned);
    std::unique_ptr<sample_matrix, Deleter> m_;
};

// Least-squares polynomial fit of the given degree; coefficients from the constant up.
std::vector<double> polyfit(const std::vector<double>& x, const std::vector<double>& y,
                            std::size_t degree);

// Self-test of this module; returns its digest.
std::uint32_t matrix_cxx_selftest();

}  // namespace sample

#endif  // SAMPLE_CXX_MATRIX_HPP
