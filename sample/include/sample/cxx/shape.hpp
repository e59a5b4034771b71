// shape.hpp - plane shapes behind one abstract interface.
//
// Shape is the polymorphic base: area, perimeter, bounding box, cloning,
// and double dispatch through ShapeVisitor. Circle, Rectangle and Triangle
// live here; Polygon has its own header.
#ifndef SAMPLE_CXX_SHAPE_HPP
#define SAMPLE_CXX_SHAPE_HPP

#include <cstdint>
#include <memory>
#include <string>

namespace sample {

struct Point {
    double x = 0.0;
    double y = 0.0;
};

// An axis-aligned box.
struct Box {
    Point min;
    Point max;
    double width() const { return max.x - min.x; }
    double height() const { return max.y - min.y; }
};

class Circle;
class Rectangle;
class Triangle;
class Polygon;

// Receives each concrete shape type.
class ShapeVisitor {
public:
    virtual ~ShapeVisitor() = default;
    virtual void visit(const Circle& c) = 0;
    virtual void visit(const Rectangle& r) = 0;
    virtual void visit(const Triangle& t) = 0;
    virtual void visit(const Polygon& p) = 0;
};

class Shape {
public:
    virtual ~Shape() = default;
    virtual double area() const = 0;
    virtual double perimeter() const = 0;
    virtual Box bounds() const = 0;
    virtual std::string name() const = 0;
    virtual std::unique_ptr<Shape> clone() const = 0;
    virtual void accept(ShapeVisitor& visitor) const = 0;

    // Moves the shape by (dx, dy).
    virtual void translate(double dx, double dy) = 0;

    // "name area=... perimeter=..." with three decimals.
    std::string describe() const;

protected:
    Shape() = default;
    Shape(const Shape&) = default;
    Shape& operator=(const Shape&) = default;
};

class Circle final : public Shape {
public:
    Circle(Point center, double radius);
    double area() const override;
    double perimeter() const override;
    Box bounds() const override;
    std::string name() const override { return "circle"; }
    std::unique_ptr<Shape> clone() const override;
    void accept(ShapeVisitor& visitor) const override { visitor.visit(*this); }
    void translate(double dx, double dy) override;
    double radius() const { return radius_; }

private:
    Point center_;
    double radius_;
};

class Rectangle final : public Shape {
public:
    Rectangle(Point corner, double width, double height);
    double area() const override { return width_ * height_; }
    double perimeter() const override { return 2.0 * (width_ + height_); }
    Box bounds() const override;
    std::string name() const override { return width_ == height_ ? "square" : "rectangle"; }
    std::unique_ptr<Shape> clone() const override;
    void accept(ShapeVisitor& visitor) const override { visitor.visit(*this); }
    void translate(double dx, double dy) override;

private:
    Point corner_;
    double width_;
    double height_;
};

class Triangle final : public Shape {
public:
    Triangle(Point a, Point b, Point c);
    double area() const override;
    double perimeter() const override;
    Box bounds() const override;
    std::string name() const override { return "triangle"; }
    std::unique_ptr<Shape> clone() const override;
    void accept(ShapeVisitor& visitor) const override { visitor.visit(*this); }
    void translate(double dx, double dy) override;

    // Whether the sides satisfy a^2 + b^2 = c^2 (within a relative 1e-9).
    bool is_right() const;

private:
    Point a_, b_, c_;
};

// Distance between two points.
double distance(Point a, Point b);

// Self-test of this module; returns its digest.
std::uint32_t shape_selftest();

}  // namespace sample

#endif  // SAMPLE_CXX_SHAPE_HPP
