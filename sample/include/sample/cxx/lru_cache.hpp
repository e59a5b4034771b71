// lru_cache.hpp - a bounded map that evicts the least recently used entry.
#ifndef SAMPLE_CXX_LRU_CACHE_HPP
#define SAMPLE_CXX_LRU_CACHE_HPP

#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <optional>
#include <utility>

namespace sample {

// Keys are kept in an ordered map so that nothing depends on hashing.
template <typename K, typename V>
class LruCache {
public:
    explicit LruCache(std::size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}

    // The value for key, marking it most recently used.
    std::optional<V> get(const K& key)
    {
        auto it = index_.find(key);
        if (it == index_.end()) {
            ++misses_;
            return std::nullopt;
        }
        ++hits_;
        order_.splice(order_.begin(), order_, it->second);
        return it->second->second;
    }

    // Inserts or replaces; returns the key it evicted, if any.
    std::optional<K> put(const K& key, V value)
    {
        auto it = index_.find(key);
        if (it != index_.end()) {
            it->second->second = std::move(value);
            order_.splice(order_.begin(), order_, it->second);
            return std::nullopt;
        }
        std::optional<K> evicted;
        if (order_.size() == capacity_) {
            evicted = order_.back().first;
            index_.erase(order_.back().first);
            order_.pop_back();
        }
        order_.emplace_front(key, std::move(value));
        index_.emplace(key, order_.begin());
        return evicted;
    }

    // Returns the cached value or computes, stores and returns it.
    template <typename F>
    V get_or_compute(const K& key, F&& compute)
    {
        if (auto hit = get(key))
            return *hit;
        V value = compute(key);
        put(key, value);
        return value;
    }

    bool contains(const K& key) const { return index_.count(key) != 0; }
    std::size_t size() const { return order_.size(); }
    std::size_t hits() const { return hits_; }
    std::size_t misses() const { return misses_; }

    // Keys from most to least recently used.
    template <typename F>
    void for_each_recent(F&& f) const
    {
        for (const auto& entry : order_)
            f(entry.first, entry.second);
    }

private:
    using Entry = std::pair<K, V>;
    std::size_t capacity_;
    std::list<Entry> order_;
    std::map<K, typename std::list<Entry>::iterator> index_;
    std::size_t hits_ = 0;
    std::size_t misses_ = 0;
};

// Self-test of this module; returns its digest.
std::uint32_t lru_cache_selftest();

}  // namespace sample

#endif  // SAMPLE_CXX_LRU_CACHE_HPP
