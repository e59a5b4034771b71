// polynomial.cpp - the Polynomial template's members, instantiated for double and Rational.
#include "sample/cxx/polynomial.hpp"

#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "sample/check.h"
#include "sample/cxx/digest.hpp"
#include "sample/cxx/rational.hpp"

namespace sample {

namespace {

bool is_zero(double v)
{
    return v == 0.0;
}

bool is_zero(const Rational& v)
{
    return v.num() == 0;
}

bool is_negative(double v)
{
    return v < 0.0;
}

bool is_negative(const Rational& v)
{
    return v.num() < 0;
}

std::string text_of(double v)
{
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
}

std::string text_of(const Rational& v)
{
    return v.to_string();
}

template <typename T>
bool is_one(const T& v)
{
    return v == T(1);
}

}  // namespace

template <typename T>
Polynomial<T>::Polynomial(std::initializer_list<T> coefficients) : c_(coefficients)
{
    trim();
}

template <typename T>
Polynomial<T>::Polynomial(std::vector<T> coefficients) : c_(std::move(coefficients))
{
    trim();
}

template <typename T>
void Polynomial<T>::trim()
{
    while (!c_.empty() && is_zero(c_.back()))
        c_.pop_back();
}

template <typename T>
T Polynomial<T>::operator()(const T& x) const
{
    T acc(0);
    for (auto it = c_.rbegin(); it != c_.rend(); ++it)
        acc = acc * x + *it;
    return acc;
}

template <typename T>
Polynomial<T> Polynomial<T>::derivative() const
{
    std::vector<T> d;
    for (std::size_t i = 1; i < c_.size(); ++i)
        d.push_back(c_[i] * T(static_cast<int>(i)));
    return Polynomial(std::move(d));
}

template <typename T>
Polynomial<T>& Polynomial<T>::operator+=(const Polynomial& o)
{
    if (o.c_.size() > c_.size())
        c_.resize(o.c_.size(), T(0));
    for (std::size_t i = 0; i < o.c_.size(); ++i)
        c_[i] = c_[i] + o.c_[i];
    trim();
    return *this;
}

template <typename T>
Polynomial<T>& Polynomial<T>::operator-=(const Polynomial& o)
{
    if (o.c_.size() > c_.size())
        c_.resize(o.c_.size(), T(0));
    for (std::size_t i = 0; i < o.c_.size(); ++i)
        c_[i] = c_[i] - o.c_[i];
    trim();
    return *this;
}

template <typename T>
Polynomial<T> Polynomial<T>::operator*(const Polynomial& o) const
{
    if (c_.empty() || o.c_.empty())
        return Polynomial();
    std::vector<T> p(c_.size() + o.c_.size() - 1, T(0));
    for (std::size_t i = 0; i < c_.size(); ++i)
        for (std::size_t j = 0; j < o.c_.size(); ++j)
            p[i + j] = p[i + j] + c_[i] * o.c_[j];
    return Polynomial(std::move(p));
}

template <typename T>
std::pair<Polynomial<T>, Polynomial<T>> Polynomial<T>::divmod(const Polynomial& divisor) const
{
    if (divisor.c_.empty())
        throw std::domain_error("polynomial division by zero");
    std::vector<T> rem = c_;
    std::vector<T> quot(c_.size() >= divisor.c_.size() ? c_.size() - divisor.c_.size() + 1 : 0,
                        T(0));
    const T& lead = divisor.c_.back();
    for (std::size_t k = quot.size(); k-- > 0;) {
        T factor = rem[k + divisor.c_.size() - 1] / lead;
        quot[k] = factor;
        for (std::size_t j = 0; j < divisor.c_.size(); ++j)
            rem[k + j] = rem[k + j] - factor * divisor.c_[j];
    }
    return {Polynomial(std::move(quot)), Polynomial(std::move(rem))};
}

template <typename T>
std::string Polynomial<T>::to_string() const
{
    if (c_.empty())
        return "0";
    std::string out;
    for (std::size_t i = c_.size(); i-- > 0;) {
        const T& c = c_[i];
        if (is_zero(c))
            continue;
        bool negative = is_negative(c);
        T magnitude = negative ? T(0) - c : c;
        if (out.empty())
            out += negative ? "-" : "";
        else
            out += negative ? " - " : " + ";
        if (i == 0 || !is_one(magnitude))
            out += text_of(magnitude);
        if (i >= 1)
            out += "x";
        if (i >= 2)
            out += "^" + std::to_string(i);
    }
    return out;
}

template class Polynomial<double>;
template class Polynomial<Rational>;

std::optional<double> newton_root(const Polynomial<double>& p, double start)
{
    Polynomial<double> dp = p.derivative();
    double x = start;
    for (int i = 0; i < 100; ++i) {
        double fx = p(x), dfx = dp(x);
        if (dfx == 0.0)
            return std::nullopt;
        double next = x - fx / dfx;
        if (std::fabs(next - x) <= 1e-14 * std::fmax(1.0, std::fabs(x)))
            return next;
        x = next;
    }
    return std::nullopt;
}

std::uint32_t polynomial_selftest()
{
    Digest digest;
    using PolyQ = Polynomial<Rational>;
    using PolyD = Polynomial<double>;

    // (x - 1)(x + 2)(2x - 1/3) with exact coefficients.
    PolyQ a{Rational(-1), Rational(1)};
    PolyQ b{Rational(2), Rational(1)};
    PolyQ c{Rational(-1, 3), Rational(2)};
    PolyQ p = a * b * c;
    SAMPLE_CHECK_EQ(p.degree(), 3);
    SAMPLE_CHECK_STR(p.to_string().c_str(), "2x^3 + 5/3x^2 - 13/3x + 2/3");
    SAMPLE_CHECK(p(Rational(1)) == Rational(0));
    SAMPLE_CHECK(p(Rational(1, 6)) == Rational(0));
    SAMPLE_CHECK(p(Rational(-2)) == Rational(0));
    SAMPLE_CHECK(p(Rational(3)) == Rational(2 * 5 * 17, 3));

    auto [q, r] = p.divmod(a);
    SAMPLE_CHECK(q == b * c);
    SAMPLE_CHECK_EQ(r.degree(), -1);
    auto [q2, r2] = p.divmod(PolyQ{Rational(0), Rational(0), Rational(1)});
    SAMPLE_CHECK_STR(q2.to_string().c_str(), "2x + 5/3");
    SAMPLE_CHECK_STR(r2.to_string().c_str(), "-13/3x + 2/3");
    SAMPLE_CHECK((q2 * PolyQ{Rational(0), Rational(0), Rational(1)} + r2 == p));
    SAMPLE_CHECK_STR(p.derivative().to_string().c_str(), "6x^2 + 10/3x - 13/3");
    SAMPLE_CHECK((p - p).degree() == -1);
    digest.add(p.to_string()).add(p.derivative().to_string());

    // Chebyshev T5(x) = 16x^5 - 20x^3 + 5x has roots cos((2k-1)pi/10).
    PolyD t5{0.0, 5.0, 0.0, -20.0, 0.0, 16.0};
    SAMPLE_CHECK_STR(t5.to_string().c_str(), "16x^5 - 20x^3 + 5x");
    auto root = newton_root(t5, 0.9);
    SAMPLE_CHECK(root.has_value());
    if (root) {
        SAMPLE_CHECK_NEAR(*root, std::cos(3.14159265358979323846 / 10.0), 1e-12);
        digest.add_double(*root);
    }
    auto flat = newton_root(PolyD{1.0, 0.0, 1.0}, 0.0);
    SAMPLE_CHECK(!flat.has_value());
    SAMPLE_CHECK_NEAR(t5(0.5), 16.0 / 32.0 - 20.0 / 8.0 + 2.5, 1e-12);

    bool threw = false;
    try {
        p.divmod(PolyQ{});
    } catch (const std::domain_error&) {
        threw = true;
    }
    SAMPLE_CHECK(threw);
    return digest.value();
}

}  // namespace sample
