// polynomial.hpp - polynomials in one variable over any field-like type.
//
// The class is a template; polynomial.cpp instantiates it for double and
// Rational, so users of those two need not see the member definitions.
#ifndef SAMPLE_CXX_POLYNOMIAL_HPP
#define SAMPLE_CXX_POLYNOMIAL_HPP

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace sample {

template <typename T>
class Polynomial {
public:
    Polynomial() = default;
    // Coefficients from the constant term upwards.
    Polynomial(std::initializer_list<T> coefficients);
    explicit Polynomial(std::vector<T> coefficients);

    // Degree; -1 for the zero polynomial.
    int degree() const { return static_cast<int>(c_.size()) - 1; }
    const T& coefficient(std::size_t i) const { return c_.at(i); }

    T operator()(const T& x) const;
    Polynomial derivative() const;

    Polynomial& operator+=(const Polynomial& o);
    Polynomial& operator-=(const Polynomial& o);
    Polynomial operator*(const Polynomial& o) const;
    Polynomial operator+(const Polynomial& o) const { return Polynomial(*this) += o; }
    Polynomial operator-(const Polynomial& o) const { return Polynomial(*this) -= o; }
    bool operator==(const Polynomial& o) const { return c_ == o.c_; }

    // Quotient and remainder of division by a non-zero divisor.
    std::pair<Polynomial, Polynomial> divmod(const Polynomial& divisor) const;

    // "3x^2 - x + 1/2" style text.
    std::string to_string() const;

private:
    void trim();
    std::vector<T> c_;
};

// A root near start by Newton's method, or nothing if it does not converge.
std::optional<double> newton_root(const Polynomial<double>& p, double start);

// Self-test of this module; returns its digest.
std::uint32_t polynomial_selftest();

}  // namespace sample

#endif  // SAMPLE_CXX_POLYNOMIAL_HPP
