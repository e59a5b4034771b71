// rational.cpp - exact arithmetic on normalised fractions.
#include "sample/cxx/rational.hpp"

#include <cstdlib>
#include <limits>
#include <ostream>
#include <sstream>
#include <stdexcept>

#include "sample/check.h"
#include "sample/cxx/digest.hpp"
#include "sample/primes.h"

namespace sample {

namespace {

long long checked_mul(long long a, long long b)
{
    long long r = 0;
    if (__builtin_mul_overflow(a, b, &r))
        throw std::overflow_error("rational overflow: " + std::to_string(a) + " * " +
                                  std::to_string(b));
    return r;
}

long long checked_add(long long a, long long b)
{
    long long r = 0;
    if (__builtin_add_overflow(a, b, &r))
        throw std::overflow_error("rational overflow: " + std::to_string(a) + " + " +
                                  std::to_string(b));
    return r;
}

}  // namespace

Rational::Rational(long long n, long long d) : num_(n), den_(d)
{
    if (d == 0)
        throw std::domain_error("rational with denominator 0");
    normalize();
}

void Rational::normalize()
{
    if (den_ < 0) {
        if (num_ == std::numeric_limits<long long>::min() ||
            den_ == std::numeric_limits<long long>::min())
            throw std::overflow_error("rational overflow: cannot negate the smallest long long");
        num_ = -num_;
        den_ = -den_;
    }
    long long g = sample_gcd(num_, den_);
    if (g > 1) {
        num_ /= g;
        den_ /= g;
    }
}

std::string Rational::to_string() const
{
    return den_ == 1 ? std::to_string(num_) : std::to_string(num_) + "/" + std::to_string(den_);
}

Rational Rational::parse(std::string_view text)
{
    std::string s(text);
    auto whole = [&s](const std::string& part) {
        if (part.empty() || part == "-" || part.find_first_not_of("-0123456789") != std::string::npos ||
            part.find('-', 1) != std::string::npos)
            throw std::invalid_argument("not a rational number: \"" + s + "\"");
        return std::stoll(part);
    };
    if (auto slash = s.find('/'); slash != std::string::npos)
        return Rational(whole(s.substr(0, slash)), whole(s.substr(slash + 1)));
    if (auto dot = s.find('.'); dot != std::string::npos) {
        std::string digits = s.substr(dot + 1);
        long long den = 1;
        for (std::size_t i = 0; i < digits.size(); ++i)
            den = checked_mul(den, 10);
        long long ip = whole(s.substr(0, dot));
        long long fp = digits.empty() ? 0 : whole(digits);
        bool negative = !s.empty() && s[0] == '-';
        return Rational(checked_add(checked_mul(ip, den), negative ? -fp : fp), den);
    }
    return Rational(whole(s));
}

std::vector<long long> Rational::continued_fraction() const
{
    std::vector<long long> terms;
    long long n = num_, d = den_;
    while (d != 0) {
        // Floor division, so that negative fractions expand correctly.
        long long q = n / d;
        if ((n % d != 0) && ((n < 0) != (d < 0)))
            --q;
        terms.push_back(q);
        long long r = n - q * d;
        n = d;
        d = r;
    }
    return terms;
}

Rational Rational::operator-() const
{
    return Rational(checked_mul(num_, -1), den_);
}

Rational& Rational::operator+=(const Rational& o)
{
    // Dividing by the gcd of the denominators first keeps intermediates small.
    long long g = sample_gcd(den_, o.den_);
    long long n = checked_add(checked_mul(num_, o.den_ / g), checked_mul(o.num_, den_ / g));
    long long d = checked_mul(den_ / g, o.den_);
    num_ = n;
    den_ = d;
    normalize();
    return *this;
}

Rational& Rational::operator-=(const Rational& o)
{
    return *this += -o;
}

Rational& Rational::operator*=(const Rational& o)
{
    long long g1 = sample_gcd(num_, o.den_), g2 = sample_gcd(o.num_, den_);
    if (g1 == 0)
        g1 = 1;
    if (g2 == 0)
        g2 = 1;
    num_ = checked_mul(num_ / g1, o.num_ / g2);
    den_ = checked_mul(den_ / g2, o.den_ / g1);
    normalize();
    return *this;
}

Rational& Rational::operator/=(const Rational& o)
{
    if (o.num_ == 0)
        throw std::domain_error("rational division by zero");
    return *this *= Rational(o.den_, o.num_);
}

bool operator<(const Rational& a, const Rational& b)
{
    return checked_mul(a.num_, b.den_) < checked_mul(b.num_, a.den_);
}

std::ostream& operator<<(std::ostream& os, const Rational& r)
{
    return os << r.to_string();
}

std::uint32_t rational_selftest()
{
    Digest digest;

    Rational half(1, 2), third(1, 3);
    SAMPLE_CHECK_STR((half + third).to_string().c_str(), "5/6");
    SAMPLE_CHECK_STR((half - third).to_string().c_str(), "1/6");
    SAMPLE_CHECK_STR((half * third).to_string().c_str(), "1/6");
    SAMPLE_CHECK_STR((half / third).to_string().c_str(), "3/2");
    SAMPLE_CHECK_STR(Rational(6, -4).to_string().c_str(), "-3/2");
    SAMPLE_CHECK_STR(Rational(0, -7).to_string().c_str(), "0");
    SAMPLE_CHECK(third < half && half > third && half <= half && Rational(-1, 2) < third);
    SAMPLE_CHECK(Rational(2, 4) == half);
    std::ostringstream printed;
    printed << half << ' ' << Rational(-9, 3) << ' ' << third * third;
    SAMPLE_CHECK_STR(printed.str().c_str(), "1/2 -3 1/9");

    // Harmonic numbers H(1..20): exact, and their denominators grow fast.
    Rational h;
    for (int k = 1; k <= 20; ++k) {
        h += Rational(1, k);
        digest.add(h.to_string());
    }
    SAMPLE_CHECK_STR(h.to_string().c_str(), "55835135/15519504");
    SAMPLE_CHECK_NEAR(h.to_double(), 3.597739657143682, 1e-12);

    SAMPLE_CHECK(Rational::parse("3.125") == Rational(25, 8));
    SAMPLE_CHECK(Rational::parse("-0.5") == Rational(-1, 2));
    SAMPLE_CHECK(Rational::parse("-2.25") == Rational(-9, 4));
    SAMPLE_CHECK(Rational::parse("-7/21") == Rational(-1, 3));
    SAMPLE_CHECK(Rational::parse("42") == Rational(42));
    int rejected = 0;
    for (const char* bad : {"", "1/x", "--1", "1/0", "1-2", "abc"}) {
        try {
            Rational::parse(bad);
        } catch (const std::invalid_argument&) {
            ++rejected;
        } catch (const std::domain_error&) {
            ++rejected;
        }
    }
    SAMPLE_CHECK_EQ(rejected, 6);

    auto cf = Rational(415, 93).continued_fraction();
    SAMPLE_CHECK((cf == std::vector<long long>{4, 2, 6, 7}));
    auto neg = Rational(-7, 3).continued_fraction();
    SAMPLE_CHECK((neg == std::vector<long long>{-3, 1, 2}));
    for (long long t : cf)
        digest.add(static_cast<std::uint32_t>(t));

    bool overflowed = false;
    try {
        Rational big(std::numeric_limits<long long>::max() / 2, 1);
        big *= Rational(3);
    } catch (const std::overflow_error&) {
        overflowed = true;
    }
    SAMPLE_CHECK(overflowed);
    bool divided = false;
    try {
        (void)(half / Rational(0));
    } catch (const std::domain_error&) {
        divided = true;
    }
    SAMPLE_CHECK(divided);
    return digest.value();
}

}  // namespace sample
