// c_wrappers.cpp - HashMap and StrBuf: C containers behind C++ ownership.
#include "sample/cxx/c_wrappers.hpp"

#include <algorithm>
#include <map>
#include <new>

#include "sample/check.h"
#include "sample/cxx/digest.hpp"
#include "sample/cxx/strings.hpp"
#include "sample/wordfreq.h"

namespace sample {

HashMap::HashMap(HashMap&& other) noexcept : map_(other.map_)
{
    sample_hashmap_init(&other.map_);
}

HashMap& HashMap::operator=(HashMap&& other) noexcept
{
    if (this != &other) {
        sample_hashmap_free(&map_);
        map_ = other.map_;
        sample_hashmap_init(&other.map_);
    }
    return *this;
}

void HashMap::put(const std::string& key, long value)
{
    if (sample_hashmap_put(&map_, key.c_str(), value) != 0)
        throw std::bad_alloc();
}

long HashMap::add(const std::string& key, long delta)
{
    long out = 0;
    if (sample_hashmap_add(&map_, key.c_str(), delta, &out) != 0)
        throw std::bad_alloc();
    return out;
}

std::optional<long> HashMap::get(const std::string& key) const
{
    long value = 0;
    if (!sample_hashmap_get(&map_, key.c_str(), &value))
        return std::nullopt;
    return value;
}

std::vector<std::pair<std::string, long>> HashMap::sorted() const
{
    std::vector<std::pair<std::string, long>> out;
    std::size_t cursor = 0;
    const char* key = nullptr;
    long value = 0;
    while (sample_hashmap_next(&map_, &cursor, &key, &value))
        out.emplace_back(key, value);
    std::sort(out.begin(), out.end());
    return out;
}

StrBuf::StrBuf(StrBuf&& other) noexcept : sb_(other.sb_)
{
    sample_strbuf_init(&other.sb_);
}

StrBuf& StrBuf::operator=(StrBuf&& other) noexcept
{
    if (this != &other) {
        sample_strbuf_free(&sb_);
        sb_ = other.sb_;
        sample_strbuf_init(&other.sb_);
    }
    return *this;
}

StrBuf& StrBuf::operator<<(std::string_view s)
{
    if (sample_strbuf_append_len(&sb_, s.data(), s.size()) != 0)
        throw std::bad_alloc();
    return *this;
}

StrBuf& StrBuf::operator<<(long v)
{
    if (sample_strbuf_appendf(&sb_, "%ld", v) != 0)
        throw std::bad_alloc();
    return *this;
}

StrBuf& StrBuf::operator<<(char c)
{
    if (sample_strbuf_append_char(&sb_, c) != 0)
        throw std::bad_alloc();
    return *this;
}

long StrBuf::replace(const std::string& from, const std::string& to)
{
    return sample_strbuf_replace(&sb_, from.c_str(), to.c_str());
}

std::uint32_t c_wrappers_selftest()
{
    Digest digest;
    static const char kText[] =
        "a route maps a toolchain to the agents that serve it and a queue of tasks "
        "an agent with a free token takes the oldest task of its routes";

    // The C hash map and std::map must count the same words.
    HashMap counts;
    std::map<std::string, long> reference;
    for (const std::string& w : str::split_words(kText)) {
        counts.add(w, 1);
        ++reference[w];
    }
    auto sorted = counts.sorted();
    SAMPLE_CHECK_EQ(sorted.size(), reference.size());
    SAMPLE_CHECK(std::equal(sorted.begin(), sorted.end(), reference.begin(), reference.end(),
                            [](const auto& a, const auto& b) {
                                return a.first == b.first && a.second == b.second;
                            }));
    SAMPLE_CHECK_EQ(counts.get("a").value_or(0), 4);
    SAMPLE_CHECK(!counts.get("scheduler").has_value());
    SAMPLE_CHECK(counts.remove("queue"));
    SAMPLE_CHECK(!counts.remove("queue"));

    HashMap moved = std::move(counts);
    SAMPLE_CHECK_EQ(moved.size(), reference.size() - 1);
    SAMPLE_CHECK_EQ(counts.size(), 0);
    counts.put("fresh", 1);
    SAMPLE_CHECK_EQ(counts.size(), 1);

    // ... and the C word-frequency module agrees with both.
    sample_wordfreq wf;
    SAMPLE_CHECK_EQ(sample_wordfreq_build(&wf, kText), 0);
    SAMPLE_CHECK_EQ(static_cast<std::size_t>(wf.len), reference.size());
    SAMPLE_CHECK_EQ(sample_wordfreq_lookup(&wf, "task"), 1);
    SAMPLE_CHECK_EQ(sample_wordfreq_lookup(&wf, "agent"), reference["agent"]);
    sample_wordfreq_free(&wf);

    StrBuf sb;
    for (const auto& [word, n] : sorted)
        if (n > 1)
            sb << word << '=' << n << ' ';
    SAMPLE_CHECK_STR(sb.str().c_str(), "a=4 of=2 the=2 ");
    SAMPLE_CHECK_EQ(sb.replace("=", ": "), 3);
    SAMPLE_CHECK(sb.view() == "a: 4 of: 2 the: 2 ");
    StrBuf other = std::move(sb);
    SAMPLE_CHECK_EQ(sb.size(), 0);
    SAMPLE_CHECK_EQ(other.size(), 18);
    digest.add(other.str());
    for (const auto& [word, n] : sorted)
        digest.add(word).add(static_cast<std::uint32_t>(n));
    return digest.value();
}

}  // namespace sample
