// polygon.hpp - simple polygons, convex hulls, point containment.
#ifndef SAMPLE_CXX_POLYGON_HPP
#define SAMPLE_CXX_POLYGON_HPP

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sample/cxx/shape.hpp"

namespace sample {

// A simple polygon given by its vertices in order (either orientation).
class Polygon final : public Shape {
public:
    // Throws std::invalid_argument for fewer than three vertices.
    explicit Polygon(std::vector<Point> vertices);

    double area() const override;
    double perimeter() const override;
    Box bounds() const override;
    std::string name() const override;
    std::unique_ptr<Shape> clone() const override;
    void accept(ShapeVisitor& visitor) const override { visitor.visit(*this); }
    void translate(double dx, double dy) override;

    // Twice the signed area: positive for counter-clockwise vertices.
    double signed_area2() const;
    bool is_convex() const;

    // Whether p lies inside (even-odd rule; points on an edge count as inside).
    bool contains(Point p) const;

    const std::vector<Point>& vertices() const { return vertices_; }

private:
    std::vector<Point> vertices_;
};

// The convex hull, counter-clockwise from the lowest-leftmost point (monotone chain).
std::vector<Point> convex_hull(std::vector<Point> points);

// Self-test of this module; returns its digest.
std::uint32_t polygon_selftest();

}  // namespace sample

#endif  // SAMPLE_CXX_POLYGON_HPP
