// interval_map.hpp - a map from half-open key ranges to values.
//
// Every key has a value: the initial one until assigned otherwise. The
// representation stays canonical: no two adjacent ranges hold equal values.
#ifndef SAMPLE_CXX_INTERVAL_MAP_HPP
#define SAMPLE_CXX_INTERVAL_MAP_HPP

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <utility>
#include <vector>

namespace sample {

template <typename K, typename V>
class IntervalMap {
public:
    explicit IntervalMap(V initial) : initial_(std::move(initial)) {}

    // Gives every key in [lo, hi) the value v; an empty range changes nothing.
    void assign(const K& lo, const K& hi, const V& v)
    {
        if (!(lo < hi))
            return;
        V after = (*this)[hi];
        auto first = bounds_.lower_bound(lo);
        auto last = bounds_.lower_bound(hi);
        bounds_.erase(first, last);
        bounds_[hi] = after;
        bounds_[lo] = v;
        canonicalize_around(lo);
        canonicalize_around(hi);
    }

    // The value of key k.
    const V& operator[](const K& k) const
    {
        auto it = bounds_.upper_bound(k);
        if (it == bounds_.begin())
            return initial_;
        return std::prev(it)->second;
    }

    // Number of stored boundaries (each starts a range of a new value).
    std::size_t boundaries() const { return bounds_.size(); }

    // The ranges as (start, value) pairs in key order.
    std::vector<std::pair<K, V>> ranges() const { return {bounds_.begin(), bounds_.end()}; }

private:
    void canonicalize_around(const K& k)
    {
        auto it = bounds_.find(k);
        if (it == bounds_.end())
            return;
        const V& before = it == bounds_.begin() ? initial_ : std::prev(it)->second;
        if (it->second == before)
            bounds_.erase(it);
    }

    V initial_;
    std::map<K, V> bounds_;
};

// Self-test of this module; returns its digest.
std::uint32_t interval_map_selftest();

}  // namespace sample

#endif  // SAMPLE_CXX_INTERVAL_MAP_HPP
