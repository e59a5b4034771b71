// geometry.hpp - numeric helpers shared by the shape sources (not installed).
#ifndef SAMPLE_CXX_SHAPES_GEOMETRY_HPP
#define SAMPLE_CXX_SHAPES_GEOMETRY_HPP

#include <cmath>
#include <cstdio>
#include <string>

#include "sample/cxx/shape.hpp"

namespace sample::geometry {

// pi to double precision; M_PI is not standard C++.
inline constexpr double kPi = 3.141592653589793238462643383279502884;

// Whether a and b agree to within tol, relative to the larger magnitude (absolute near 0).
inline bool near(double a, double b, double tol = 1e-9)
{
    double scale = std::fmax(1.0, std::fmax(std::fabs(a), std::fabs(b)));
    return std::fabs(a - b) <= tol * scale;
}

// Cross product of (b - a) and (c - a): positive when a, b, c turn left.
inline double cross(Point a, Point b, Point c)
{
    return (b.x - a.x) * (c.y - a.y) - (b.y - a.y) * (c.x - a.x);
}

// Fixed three-decimal text; "-0.000" is printed as "0.000".
inline std::string fixed3(double v)
{
    char buf[48];
    if (std::fabs(v) < 0.0005)
        v = 0.0;
    std::snprintf(buf, sizeof buf, "%.3f", v);
    return buf;
}

}  // namespace sample::geometry

#endif  // SAMPLE_CXX_SHAPES_GEOMETRY_HPP
