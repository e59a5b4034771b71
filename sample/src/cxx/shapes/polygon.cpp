// polygon.cpp - shoelace area, convexity, containment, convex hull.
#include "sample/cxx/polygon.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "geometry.hpp"
#include "sample/check.h"
#include "sample/cxx/digest.hpp"
#include "sample/rng.h"

namespace sample {

Polygon::Polygon(std::vector<Point> vertices) : vertices_(std::move(vertices))
{
    if (vertices_.size() < 3)
        throw std::invalid_argument("a polygon needs at least 3 vertices, got " +
                                    std::to_string(vertices_.size()));
}

double Polygon::signed_area2() const
{
    double sum = 0.0;
    for (std::size_t i = 0, n = vertices_.size(); i < n; ++i) {
        const Point& p = vertices_[i];
        const Point& q = vertices_[(i + 1) % n];
        sum += p.x * q.y - q.x * p.y;
    }
    return sum;
}

double Polygon::area() const
{
    return std::fabs(signed_area2()) / 2.0;
}

double Polygon::perimeter() const
{
    double sum = 0.0;
    for (std::size_t i = 0, n = vertices_.size(); i < n; ++i)
        sum += distance(vertices_[i], vertices_[(i + 1) % n]);
    return sum;
}

Box Polygon::bounds() const
{
    auto [minx, maxx] = std::minmax_element(vertices_.begin(), vertices_.end(),
                                            [](Point a, Point b) { return a.x < b.x; });
    auto [miny, maxy] = std::minmax_element(vertices_.begin(), vertices_.end(),
                                            [](Point a, Point b) { return a.y < b.y; });
    return {{minx->x, miny->y}, {maxx->x, maxy->y}};
}

std::string Polygon::name() const
{
    switch (vertices_.size()) {
    case 3:
        return "polygon-3";
    case 4:
        return "quadrilateral";
    case 5:
        return "pentagon";
    case 6:
        return "hexagon";
    default:
        return "polygon-" + std::to_string(vertices_.size());
    }
}

std::unique_ptr<Shape> Polygon::clone() const
{
    return std::make_unique<Polygon>(*this);
}

void Polygon::translate(double dx, double dy)
{
    for (Point& p : vertices_) {
        p.x += dx;
        p.y += dy;
    }
}

bool Polygon::is_convex() const
{
    int sign = 0;
    for (std::size_t i = 0, n = vertices_.size(); i < n; ++i) {
        double c = geometry::cross(vertices_[i], vertices_[(i + 1) % n], vertices_[(i + 2) % n]);
        if (c == 0.0)
            continue;
        int s = c > 0.0 ? 1 : -1;
        if (sign != 0 && s != sign)
            return false;
        sign = s;
    }
    return true;
}

bool Polygon::contains(Point p) const
{
    bool inside = false;
    for (std::size_t i = 0, n = vertices_.size(), j = n - 1; i < n; j = i++) {
        const Point& a = vertices_[i];
        const Point& b = vertices_[j];
        // On an edge: collinear and within the edge's box.
        if (geometry::cross(a, b, p) == 0.0 && std::min(a.x, b.x) <= p.x &&
            p.x <= std::max(a.x, b.x) && std::min(a.y, b.y) <= p.y && p.y <= std::max(a.y, b.y))
            return true;
        if ((a.y > p.y) != (b.y > p.y) && p.x < (b.x - a.x) * (p.y - a.y) / (b.y - a.y) + a.x)
            inside = !inside;
    }
    return inside;
}

std::vector<Point> convex_hull(std::vector<Point> points)
{
    std::sort(points.begin(), points.end(),
              [](Point a, Point b) { return a.x < b.x || (a.x == b.x && a.y < b.y); });
    points.erase(std::unique(points.begin(), points.end(),
                             [](Point a, Point b) { return a.x == b.x && a.y == b.y; }),
                 points.end());
    if (points.size() < 3)
        return points;

    std::vector<Point> hull(2 * points.size());
    std::size_t k = 0;
    for (const Point& p : points) {
        while (k >= 2 && geometry::cross(hull[k - 2], hull[k - 1], p) <= 0.0)
            --k;
        hull[k++] = p;
    }
    for (std::size_t i = points.size() - 1, lower = k + 1; i-- > 0;) {
        while (k >= lower && geometry::cross(hull[k - 2], hull[k - 1], points[i]) <= 0.0)
            --k;
        hull[k++] = points[i];
    }
    hull.resize(k - 1);  // the last point repeats the first

    // Start from the lowest, then leftmost point.
    auto start = std::min_element(hull.begin(), hull.end(), [](Point a, Point b) {
        return a.y < b.y || (a.y == b.y && a.x < b.x);
    });
    std::rotate(hull.begin(), start, hull.end());
    return hull;
}

std::uint32_t polygon_selftest()
{
    Digest digest;

    Polygon square({{0, 0}, {4, 0}, {4, 4}, {0, 4}});
    SAMPLE_CHECK_NEAR(square.area(), 16.0, 0.0);
    SAMPLE_CHECK_NEAR(square.signed_area2(), 32.0, 0.0);
    SAMPLE_CHECK_NEAR(square.perimeter(), 16.0, 1e-12);
    SAMPLE_CHECK(square.is_convex());
    SAMPLE_CHECK(square.contains({2, 2}));
    SAMPLE_CHECK(square.contains({4, 2}));
    SAMPLE_CHECK(!square.contains({5, 2}));
    SAMPLE_CHECK_STR(square.name().c_str(), "quadrilateral");

    // An L shape: concave, clockwise.
    Polygon ell({{0, 0}, {0, 3}, {1, 3}, {1, 1}, {3, 1}, {3, 0}});
    SAMPLE_CHECK_NEAR(ell.area(), 5.0, 1e-12);
    SAMPLE_CHECK(ell.signed_area2() < 0.0);
    SAMPLE_CHECK(!ell.is_convex());
    SAMPLE_CHECK(ell.contains({0.5, 2.5}));
    SAMPLE_CHECK(!ell.contains({2, 2}));
    Box box = ell.bounds();
    SAMPLE_CHECK(box.width() == 3.0 && box.height() == 3.0);

    bool threw = false;
    try {
        Polygon line({{0, 0}, {1, 1}});
    } catch (const std::invalid_argument& e) {
        threw = std::string(e.what()).find("got 2") != std::string::npos;
    }
    SAMPLE_CHECK(threw);

    // Random points in a disc of radius 10, plus the square's corners scaled out.
    sample_rng rng;
    sample_rng_seed(&rng, 31337, 1);
    std::vector<Point> cloud = {{-20, -20}, {20, -20}, {20, 20}, {-20, 20}};
    for (int i = 0; i < 300; ++i) {
        double angle = sample_rng_double(&rng) * 2.0 * geometry::kPi;
        double r = std::sqrt(sample_rng_double(&rng)) * 10.0;
        cloud.push_back({r * std::cos(angle), r * std::sin(angle)});
    }
    cloud.push_back({0, 0});
    cloud.push_back({0, 0});
    auto hull = convex_hull(cloud);
    SAMPLE_CHECK_EQ(hull.size(), 4);
    if (hull.size() == 4) {
        SAMPLE_CHECK(hull[0].x == -20 && hull[0].y == -20);
        SAMPLE_CHECK(hull[1].x == 20 && hull[1].y == -20);
    }
    Polygon outline(hull.size() >= 3 ? hull : std::vector<Point>{{0, 0}, {1, 0}, {0, 1}});
    SAMPLE_CHECK(outline.is_convex());
    SAMPLE_CHECK_NEAR(outline.area(), 1600.0, 1e-9);
    bool all_inside = std::all_of(cloud.begin(), cloud.end(),
                                  [&outline](Point p) { return outline.contains(p); });
    SAMPLE_CHECK(all_inside);

    // Without the corners the hull is a many-sided polygon close to the circle.
    auto disc = convex_hull(std::vector<Point>(cloud.begin() + 4, cloud.end()));
    SAMPLE_CHECK(disc.size() >= 12);
    if (disc.size() >= 3) {
        Polygon round(disc);
        SAMPLE_CHECK(round.is_convex());
        SAMPLE_CHECK(round.area() > 250.0 && round.area() < geometry::kPi * 100.0);
        digest.add(static_cast<std::uint32_t>(disc.size())).add(geometry::fixed3(round.area()));
    }
    digest.add(ell.describe()).add(square.describe());
    return digest.value();
}

}  // namespace sample
