// shape.cpp - circles, rectangles and triangles.
#include "sample/cxx/shape.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "geometry.hpp"
#include "sample/check.h"
#include "sample/cxx/digest.hpp"

namespace sample {

using geometry::kPi;

double distance(Point a, Point b)
{
    return std::hypot(a.x - b.x, a.y - b.y);
}

std::string Shape::describe() const
{
    return name() + " area=" + geometry::fixed3(area()) +
           " perimeter=" + geometry::fixed3(perimeter());
}

Circle::Circle(Point center, double radius) : center_(center), radius_(radius)
{
    if (!(radius > 0.0))
        throw std::invalid_argument("circle radius must be positive");
}

double Circle::area() const
{
    return kPi * radius_ * radius_;
}

double Circle::perimeter() const
{
    return 2.0 * kPi * radius_;
}

Box Circle::bounds() const
{
    return {{center_.x - radius_, center_.y - radius_}, {center_.x + radius_, center_.y + radius_}};
}

std::unique_ptr<Shape> Circle::clone() const
{
    return std::make_unique<Circle>(*this);
}

void Circle::translate(double dx, double dy)
{
    center_.x += dx;
    center_.y += dy;
}

Rectangle::Rectangle(Point corner, double width, double height)
    : corner_(corner), width_(width), height_(height)
{
    if (!(width > 0.0) || !(height > 0.0))
        throw std::invalid_argument("rectangle sides must be positive");
}

Box Rectangle::bounds() const
{
    return {corner_, {corner_.x + width_, corner_.y + height_}};
}

std::unique_ptr<Shape> Rectangle::clone() const
{
    return std::make_unique<Rectangle>(*this);
}

void Rectangle::translate(double dx, double dy)
{
    corner_.x += dx;
    corner_.y += dy;
}

Triangle::Triangle(Point a, Point b, Point c) : a_(a), b_(b), c_(c)
{
    if (geometry::near(geometry::cross(a, b, c), 0.0, 1e-12))
        throw std::invalid_argument("triangle corners are collinear");
}

double Triangle::area() const
{
    return std::fabs(geometry::cross(a_, b_, c_)) / 2.0;
}

double Triangle::perimeter() const
{
    return distance(a_, b_) + distance(b_, c_) + distance(c_, a_);
}

Box Triangle::bounds() const
{
    auto [minx, maxx] = std::minmax({a_.x, b_.x, c_.x});
    auto [miny, maxy] = std::minmax({a_.y, b_.y, c_.y});
    return {{minx, miny}, {maxx, maxy}};
}

std::unique_ptr<Shape> Triangle::clone() const
{
    return std::make_unique<Triangle>(*this);
}

void Triangle::translate(double dx, double dy)
{
    for (Point* p : {&a_, &b_, &c_}) {
        p->x += dx;
        p->y += dy;
    }
}

bool Triangle::is_right() const
{
    std::array<double, 3> sq = {distance(a_, b_), distance(b_, c_), distance(c_, a_)};
    std::sort(sq.begin(), sq.end());
    for (double& s : sq)
        s *= s;
    return geometry::near(sq[0] + sq[1], sq[2]);
}

namespace {

// Counts shapes by type and sums the circle radii: exercises the visitor.
class Tally final : public ShapeVisitor {
public:
    void visit(const Circle& c) override
    {
        ++circles;
        radii += c.radius();
    }
    void visit(const Rectangle&) override { ++rectangles; }
    void visit(const Triangle& t) override { right_triangles += t.is_right() ? 1 : 0; }
    void visit(const Polygon&) override {}

    int circles = 0;
    int rectangles = 0;
    int right_triangles = 0;
    double radii = 0.0;
};

}  // namespace

std::uint32_t shape_selftest()
{
    Digest digest;
    std::vector<std::unique_ptr<Shape>> shapes;
    shapes.push_back(std::make_unique<Circle>(Point{0, 0}, 1.0));
    shapes.push_back(std::make_unique<Rectangle>(Point{1, 1}, 3.0, 2.0));
    shapes.push_back(std::make_unique<Rectangle>(Point{-2, -2}, 2.0, 2.0));
    shapes.push_back(std::make_unique<Triangle>(Point{0, 0}, Point{3, 0}, Point{0, 4}));
    shapes.push_back(std::make_unique<Triangle>(Point{0, 0}, Point{2, 0}, Point{1, 5}));
    shapes.push_back(std::make_unique<Circle>(Point{5, 5}, 0.5));

    SAMPLE_CHECK_NEAR(shapes[0]->area(), kPi, 1e-12);
    SAMPLE_CHECK_NEAR(shapes[1]->perimeter(), 10.0, 1e-12);
    SAMPLE_CHECK_STR(shapes[2]->name().c_str(), "square");
    SAMPLE_CHECK_NEAR(shapes[3]->area(), 6.0, 1e-12);
    SAMPLE_CHECK_NEAR(shapes[3]->perimeter(), 12.0, 1e-12);
    SAMPLE_CHECK_STR(shapes[3]->describe().c_str(), "triangle area=6.000 perimeter=12.000");
    SAMPLE_CHECK_STR(shapes[0]->describe().c_str(), "circle area=3.142 perimeter=6.283");

    Box b = shapes[4]->bounds();
    SAMPLE_CHECK_NEAR(b.width(), 2.0, 0.0);
    SAMPLE_CHECK_NEAR(b.height(), 5.0, 0.0);

    Tally tally;
    for (const auto& s : shapes)
        s->accept(tally);
    SAMPLE_CHECK_EQ(tally.circles, 2);
    SAMPLE_CHECK_EQ(tally.rectangles, 2);
    SAMPLE_CHECK_EQ(tally.right_triangles, 1);
    SAMPLE_CHECK_NEAR(tally.radii, 1.5, 0.0);

    // A clone is independent of its original.
    auto copy = shapes[5]->clone();
    copy->translate(10.0, -10.0);
    SAMPLE_CHECK_NEAR(copy->bounds().min.x, 14.5, 1e-12);
    SAMPLE_CHECK_NEAR(shapes[5]->bounds().min.x, 4.5, 1e-12);
    SAMPLE_CHECK_NEAR(copy->area(), shapes[5]->area(), 0.0);

    int rejected = 0;
    try {
        Circle bad({0, 0}, -1.0);
    } catch (const std::invalid_argument&) {
        ++rejected;
    }
    try {
        Triangle flat({0, 0}, {1, 1}, {2, 2});
    } catch (const std::invalid_argument&) {
        ++rejected;
    }
    try {
        Rectangle thin({0, 0}, 1.0, 0.0);
    } catch (const std::invalid_argument&) {
        ++rejected;
    }
    SAMPLE_CHECK_EQ(rejected, 3);

    for (const auto& s : shapes)
        digest.add(s->describe());
    return digest.value();
}

}  // namespace sample
