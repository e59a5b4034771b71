// c_wrappers.hpp - RAII classes over the C hash map and string builder.
//
// Move-only owners that free their C object in the destructor and turn
// allocation failures into std::bad_alloc.
#ifndef SAMPLE_CXX_C_WRAPPERS_HPP
#define SAMPLE_CXX_C_WRAPPERS_HPP

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sample/hashmap.h"
#include "sample/strbuf.h"

namespace sample {

class HashMap {
public:
    HashMap() { sample_hashmap_init(&map_); }
    ~HashMap() { sample_hashmap_free(&map_); }
    HashMap(HashMap&& other) noexcept;
    HashMap& operator=(HashMap&& other) noexcept;
    HashMap(const HashMap&) = delete;
    HashMap& operator=(const HashMap&) = delete;

    void put(const std::string& key, long value);
    long add(const std::string& key, long delta);
    std::optional<long> get(const std::string& key) const;
    bool remove(const std::string& key) { return sample_hashmap_remove(&map_, key.c_str()) != 0; }
    std::size_t size() const { return sample_hashmap_len(&map_); }

    // Entries sorted by key.
    std::vector<std::pair<std::string, long>> sorted() const;

private:
    sample_hashmap map_;
};

class StrBuf {
public:
    StrBuf() { sample_strbuf_init(&sb_); }
    ~StrBuf() { sample_strbuf_free(&sb_); }
    StrBuf(StrBuf&& other) noexcept;
    StrBuf& operator=(StrBuf&& other) noexcept;
    StrBuf(const StrBuf&) = delete;
    StrBuf& operator=(const StrBuf&) = delete;

    StrBuf& operator<<(std::string_view s);
    StrBuf& operator<<(long v);
    StrBuf& operator<<(char c);
    std::string_view view() const { return {sb_.data ? sb_.data : "", sb_.len}; }
    std::string str() const { return std::string(view()); }
    std::size_t size() const { return sb_.len; }

    // Replaces every from with to; returns the count.
    long replace(const std::string& from, const std::string& to);

    sample_strbuf* raw() { return &sb_; }

private:
    sample_strbuf sb_;
};

// Self-test of this module; returns its digest.
std::uint32_t c_wrappers_selftest();

}  // namespace sample

#endif  // SAMPLE_CXX_C_WRAPPERS_HPP
