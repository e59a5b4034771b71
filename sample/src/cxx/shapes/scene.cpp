// scene.cpp - owning collections of shapes: copying, sorting, census, report.
#include "sample/cxx/scene.hpp"

#include <algorithm>
#include <numeric>

#include "geometry.hpp"
#include "sample/check.h"
#include "sample/cxx/digest.hpp"
#include "sample/cxx/polygon.hpp"

namespace sample {

Scene::Scene(const Scene& other)
{
    shapes_.reserve(other.shapes_.size());
    for (const auto& s : other.shapes_)
        shapes_.push_back(s->clone());
}

Scene& Scene::operator=(const Scene& other)
{
    if (this != &other) {
        Scene copy(other);
        *this = std::move(copy);
    }
    return *this;
}

std::size_t Scene::add(std::unique_ptr<Shape> shape)
{
    shapes_.push_back(std::move(shape));
    return shapes_.size() - 1;
}

double Scene::total_area() const
{
    return std::accumulate(shapes_.begin(), shapes_.end(), 0.0,
                           [](double sum, const auto& s) { return sum + s->area(); });
}

Box Scene::bounds() const
{
    if (shapes_.empty())
        return {};
    Box box = shapes_.front()->bounds();
    for (const auto& s : shapes_) {
        Box b = s->bounds();
        box.min.x = std::min(box.min.x, b.min.x);
        box.min.y = std::min(box.min.y, b.min.y);
        box.max.x = std::max(box.max.x, b.max.x);
        box.max.y = std::max(box.max.y, b.max.y);
    }
    return box;
}

void Scene::sort_by_area()
{
    std::stable_sort(shapes_.begin(), shapes_.end(),
                     [](const auto& a, const auto& b) { return a->area() > b->area(); });
}

std::size_t Scene::remove_if(const std::function<bool(const Shape&)>& pred)
{
    auto first = std::remove_if(shapes_.begin(), shapes_.end(),
                                [&pred](const auto& s) { return pred(*s); });
    std::size_t removed = static_cast<std::size_t>(shapes_.end() - first);
    shapes_.erase(first, shapes_.end());
    return removed;
}

std::map<std::string, std::size_t> Scene::census() const
{
    std::map<std::string, std::size_t> counts;
    for (const auto& s : shapes_)
        ++counts[s->name()];
    return counts;
}

std::string Scene::report() const
{
    std::string out;
    for (std::size_t i = 0; i < shapes_.size(); ++i)
        out += std::to_string(i + 1) + ". " + shapes_[i]->describe() + "\n";
    return out;
}

void Scene::translate_all(double dx, double dy)
{
    for (auto& s : shapes_)
        s->translate(dx, dy);
}

std::uint32_t scene_selftest()
{
    Digest digest;
    Scene scene;
    scene.add(std::make_unique<Rectangle>(Point{0, 0}, 2.0, 1.0));
    scene.add(std::make_unique<Circle>(Point{10, 10}, 2.0));
    scene.add(std::make_unique<Triangle>(Point{0, 0}, Point{4, 0}, Point{0, 3}));
    scene.add(std::make_unique<Polygon>(std::vector<Point>{{0, 0}, {2, 0}, {3, 2}, {1, 3}, {-1, 2}}));
    scene.add(std::make_unique<Rectangle>(Point{-5, -5}, 1.0, 1.0));
    scene.add(std::make_unique<Rectangle>(Point{3, 3}, 1.0, 2.0));

    SAMPLE_CHECK_EQ(scene.size(), 6);
    SAMPLE_CHECK_NEAR(scene.total_area(), 2.0 + geometry::kPi * 4.0 + 6.0 + 8.0 + 1.0 + 2.0, 1e-9);
    Box box = scene.bounds();
    SAMPLE_CHECK(box.min.x == -5.0 && box.min.y == -5.0 && box.max.x == 12.0 && box.max.y == 12.0);

    Scene snapshot = scene;
    scene.sort_by_area();
    SAMPLE_CHECK_STR(scene.at(0).name().c_str(), "circle");
    SAMPLE_CHECK_STR(scene.at(1).name().c_str(), "pentagon");
    // Two shapes of area 2: the stable sort keeps the first-added rectangle first.
    SAMPLE_CHECK_NEAR(scene.at(3).bounds().min.x, 0.0, 0.0);
    SAMPLE_CHECK_NEAR(scene.at(4).bounds().min.x, 3.0, 0.0);
    SAMPLE_CHECK_STR(snapshot.at(0).name().c_str(), "rectangle");

    auto census = scene.census();
    SAMPLE_CHECK_EQ(census["rectangle"], 2);
    SAMPLE_CHECK_EQ(census["square"], 1);
    SAMPLE_CHECK_EQ(census.size(), 5);

    std::string report = scene.report();
    SAMPLE_CHECK(report.rfind("1. circle area=12.566 perimeter=12.566\n", 0) == 0);
    SAMPLE_CHECK_EQ(std::count(report.begin(), report.end(), '\n'), 6);
    digest.add(report);

    std::size_t removed = scene.remove_if([](const Shape& s) { return s.area() < 2.5; });
    SAMPLE_CHECK_EQ(removed, 3);
    SAMPLE_CHECK_EQ(scene.size(), 3);
    SAMPLE_CHECK_EQ(snapshot.size(), 6);

    scene.translate_all(1.0, 1.0);
    SAMPLE_CHECK_NEAR(scene.bounds().max.x, 13.0, 0.0);
    SAMPLE_CHECK_NEAR(snapshot.bounds().max.x, 12.0, 0.0);

    Scene moved = std::move(snapshot);
    SAMPLE_CHECK_EQ(moved.size(), 6);
    snapshot = moved;
    SAMPLE_CHECK_EQ(snapshot.size(), 6);

    for (const auto& [name, count] : moved.census())
        digest.add(name).add(static_cast<std::uint32_t>(count));
    digest.add(scene.report());
    return digest.value();
}

}  // namespace sample
