// ring_buffer.hpp - a fixed-capacity FIFO that overwrites its oldest element.
#ifndef SAMPLE_CXX_RING_BUFFER_HPP
#define SAMPLE_CXX_RING_BUFFER_HPP

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

namespace sample {

// Holds the last capacity() values pushed; front() is the oldest.
template <typename T>
class RingBuffer {
public:
    explicit RingBuffer(std::size_t capacity) : slots_(capacity)
    {
        if (capacity == 0)
            throw std::invalid_argument("ring buffer capacity must be positive");
    }

    // Appends value; returns the element it displaced when the buffer was full.
    std::optional<T> push(T value)
    {
        std::optional<T> displaced;
        if (size_ == slots_.size()) {
            displaced = std::move(slots_[head_]);
            slots_[head_] = std::move(value);
            head_ = (head_ + 1) % slots_.size();
        } else {
            slots_[(head_ + size_) % slots_.size()] = std::move(value);
            ++size_;
        }
        return displaced;
    }

    // Removes and returns the oldest element, if any.
    std::optional<T> pop()
    {
        if (size_ == 0)
            return std::nullopt;
        std::optional<T> out(std::move(slots_[head_]));
        head_ = (head_ + 1) % slots_.size();
        --size_;
        return out;
    }

    const T& operator[](std::size_t i) const { return slots_[(head_ + i) % slots_.size()]; }

    const T& at(std::size_t i) const
    {
        if (i >= size_)
            throw std::out_of_range("ring buffer index out of range");
        return (*this)[i];
    }

    const T& front() const { return at(0); }
    const T& back() const { return at(size_ - 1); }
    std::size_t size() const { return size_; }
    std::size_t capacity() const { return slots_.size(); }
    bool empty() const { return size_ == 0; }
    bool full() const { return size_ == slots_.size(); }

    // Calls f on each element, oldest first.
    template <typename F>
    void for_each(F&& f) const
    {
        for (std::size_t i = 0; i < size_; ++i)
            f((*this)[i]);
    }

    std::vector<T> to_vector() const
    {
        std::vector<T> out;
        out.reserve(size_);
        for_each([&out](const T& v) { out.push_back(v); });
        return out;
    }

private:
    std::vector<T> slots_;
    std::size_t head_ = 0;
    std::size_t size_ = 0;
};

// Self-test of this module; returns its digest.
std::uint32_t ring_buffer_selftest();

}  // namespace sample

#endif  // SAMPLE_CXX_RING_BUFFER_HPP
