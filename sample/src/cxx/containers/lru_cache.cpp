// lru_cache.cpp - self-test of LruCache: eviction order, statistics, memoisation.
#include "sample/cxx/lru_cache.hpp"

#include <cstdint>
#include <string>
#include <vector>

#include "sample/check.h"
#include "sample/cxx/digest.hpp"

namespace sample {

namespace {

// Number of Collatz steps from n down to 1, memoised in cache.
long collatz_steps(std::uint64_t n, LruCache<std::uint64_t, long>& cache)
{
    std::vector<std::uint64_t> path;
    long steps = 0;
    while (n != 1) {
        if (auto known = cache.get(n)) {
            steps = *known;
            break;
        }
        path.push_back(n);
        n = (n % 2 == 0) ? n / 2 : 3 * n + 1;
    }
    for (auto it = path.rbegin(); it != path.rend(); ++it)
        cache.put(*it, ++steps);
    return steps;
}

}  // namespace

std::uint32_t lru_cache_selftest()
{
    Digest digest;

    LruCache<std::string, int> cache(3);
    cache.put("a", 1);
    cache.put("b", 2);
    cache.put("c", 3);
    SAMPLE_CHECK_EQ(cache.get("a").value_or(0), 1);
    auto evicted = cache.put("d", 4);
    SAMPLE_CHECK(evicted.has_value() && *evicted == "b");
    SAMPLE_CHECK(!cache.contains("b"));
    SAMPLE_CHECK(cache.contains("a"));
    SAMPLE_CHECK(!cache.put("c", 30).has_value());
    evicted = cache.put("e", 5);
    SAMPLE_CHECK(evicted.has_value() && *evicted == "a");
    SAMPLE_CHECK(!cache.get("zzz").has_value());
    SAMPLE_CHECK_EQ(cache.hits(), 1);
    SAMPLE_CHECK_EQ(cache.misses(), 1);

    std::string order;
    cache.for_each_recent([&order](const std::string& k, int v) {
        order += k + "=" + std::to_string(v) + ";";
    });
    SAMPLE_CHECK_STR(order.c_str(), "e=5;c=30;d=4;");
    digest.add(order);

    int computed = 0;
    LruCache<std::uint64_t, long> squares(8);
    auto square = [&computed](std::uint64_t k) {
        ++computed;
        return static_cast<long>(k * k);
    };
    long sum = 0;
    for (int round = 0; round < 3; ++round)
        for (std::uint64_t k = 0; k < 8; ++k)
            sum += squares.get_or_compute(k, square);
    SAMPLE_CHECK_EQ(computed, 8);
    SAMPLE_CHECK_EQ(sum, 3 * 140);

    LruCache<std::uint64_t, long> steps(4096);
    long longest = 0;
    std::uint64_t longest_start = 0;
    for (std::uint64_t n = 1; n < 10000; ++n) {
        long s = collatz_steps(n, steps);
        if (s > longest) {
            longest = s;
            longest_start = n;
        }
    }
    SAMPLE_CHECK_EQ(longest_start, 6171);
    SAMPLE_CHECK_EQ(longest, 261);
    SAMPLE_CHECK_EQ(collatz_steps(27, steps), 111);
    SAMPLE_CHECK(steps.hits() > 1000);
    SAMPLE_CHECK_EQ(steps.size(), 4096);

    digest.add(static_cast<std::uint32_t>(longest_start));
    digest.add(static_cast<std::uint32_t>(steps.hits()));
    digest.add(static_cast<std::uint32_t>(steps.misses()));
    return digest.value();
}

}  // namespace sample
