// rational.hpp - exact fractions of 64-bit integers.
//
// Always normalised: positive denominator, lowest terms (via the C gcd).
// Overflow of an intermediate product throws std::overflow_error.
#ifndef SAMPLE_CXX_RATIONAL_HPP
#define SAMPLE_CXX_RATIONAL_HPP

#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

namespace sample {

class Rational {
public:
    Rational() = default;
    Rational(long long n) : num_(n) {}
    // Throws std::domain_error when d is 0.
    Rational(long long n, long long d);

    long long num() const { return num_; }
    long long den() const { return den_; }
    double to_double() const { return static_cast<double>(num_) / static_cast<double>(den_); }

    // "3/4", or "3" for whole numbers.
    std::string to_string() const;

    // Reads "a", "-a/b" or "a.bcd"; throws std::invalid_argument.
    static Rational parse(std::string_view text);

    // The continued fraction [a0; a1, a2, ...].
    std::vector<long long> continued_fraction() const;

    Rational operator-() const;
    Rational& operator+=(const Rational& o);
    Rational& operator-=(const Rational& o);
    Rational& operator*=(const Rational& o);
    Rational& operator/=(const Rational& o);

    friend Rational operator+(Rational a, const Rational& b) { return a += b; }
    friend Rational operator-(Rational a, const Rational& b) { return a -= b; }
    friend Rational operator*(Rational a, const Rational& b) { return a *= b; }
    friend Rational operator/(Rational a, const Rational& b) { return a /= b; }
    friend bool operator==(const Rational& a, const Rational& b)
    {
        return a.num_ == b.num_ && a.den_ == b.den_;
    }
    friend bool operator!=(const Rational& a, const Rational& b) { return !(a == b); }
    friend bool operator<(const Rational& a, const Rational& b);
    friend bool operator>(const Rational& a, const Rational& b) { return b < a; }
    friend bool operator<=(const Rational& a, const Rational& b) { return !(b < a); }
    friend bool operator>=(const Rational& a, const Rational& b) { return !(a < b); }

private:
    void normalize();
    long long num_ = 0;
    long long den_ = 1;
};

std::ostream& operator<<(std::ostream& os, const Rational& r);

// Self-test of this module; returns its digest.
std::uint32_t rational_selftest();

}  // namespace sample

#endif  // SAMPLE_CXX_RATIONAL_HPP
