// scene.hpp - a collection of owned shapes and queries over them.
#ifndef SAMPLE_CXX_SCENE_HPP
#define SAMPLE_CXX_SCENE_HPP

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "sample/cxx/shape.hpp"

namespace sample {

class Scene {
public:
    Scene() = default;
    Scene(const Scene& other);
    Scene& operator=(const Scene& other);
    Scene(Scene&&) noexcept = default;
    Scene& operator=(Scene&&) noexcept = default;

    // Takes ownership of shape; returns its index.
    std::size_t add(std::unique_ptr<Shape> shape);

    std::size_t size() const { return shapes_.size(); }
    const Shape& at(std::size_t i) const { return *shapes_.at(i); }

    double total_area() const;

    // The box around every shape; a zero box for an empty scene.
    Box bounds() const;

    // Sorts by area, largest first; equal areas keep their order.
    void sort_by_area();

    // Removes the shapes for which pred holds; returns how many went.
    std::size_t remove_if(const std::function<bool(const Shape&)>& pred);

    // Number of shapes of each name.
    std::map<std::string, std::size_t> census() const;

    // One describe() line per shape.
    std::string report() const;

    void translate_all(double dx, double dy);

private:
    std::vector<std::unique_ptr<Shape>> shapes_;
};

// Self-test of this module; returns its digest.
std::uint32_t scene_selftest();

}  // namespace sample

#endif  // SAMPLE_CXX_SCENE_HPP
