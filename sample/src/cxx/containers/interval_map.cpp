// interval_map.cpp - self-test of IntervalMap against a brute-force model.
#include "sample/cxx/interval_map.hpp"

#include <array>
#include <string>
#include <vector>

#include "sample/check.h"
#include "sample/cxx/digest.hpp"
#include "sample/rng.h"

namespace sample {

namespace {

// The same operations on a plain array: the model the map must agree with.
template <std::size_t N>
struct Model {
    std::array<char, N> values;
    explicit Model(char initial) { values.fill(initial); }
    void assign(int lo, int hi, char v)
    {
        for (int k = lo < 0 ? 0 : lo; k < hi && k < static_cast<int>(N); ++k)
            values[static_cast<std::size_t>(k)] = v;
    }
};

bool canonical(const IntervalMap<int, char>& map, char initial)
{
    char prev = initial;
    for (const auto& [start, value] : map.ranges()) {
        (void)start;
        if (value == prev)
            return false;
        prev = value;
    }
    return true;
}

}  // namespace

std::uint32_t interval_map_selftest()
{
    Digest digest;

    IntervalMap<int, std::string> shifts("closed");
    shifts.assign(9, 17, "open");
    shifts.assign(12, 13, "lunch");
    SAMPLE_CHECK_STR(shifts[8].c_str(), "closed");
    SAMPLE_CHECK_STR(shifts[9].c_str(), "open");
    SAMPLE_CHECK_STR(shifts[12].c_str(), "lunch");
    SAMPLE_CHECK_STR(shifts[13].c_str(), "open");
    SAMPLE_CHECK_STR(shifts[17].c_str(), "closed");
    SAMPLE_CHECK_EQ(shifts.boundaries(), 4);
    shifts.assign(12, 13, "open");
    SAMPLE_CHECK_EQ(shifts.boundaries(), 2);
    shifts.assign(5, 5, "never");
    SAMPLE_CHECK_EQ(shifts.boundaries(), 2);
    shifts.assign(0, 100, "closed");
    SAMPLE_CHECK_EQ(shifts.boundaries(), 0);

    // Random assignments, compared key by key with the model.
    constexpr std::size_t kKeys = 64;
    IntervalMap<int, char> map('.');
    Model<kKeys> model('.');
    sample_rng rng;
    sample_rng_seed(&rng, 99, 5);
    bool agree = true, always_canonical = true;
    for (int step = 0; step < 400; ++step) {
        int lo = static_cast<int>(sample_rng_below(&rng, kKeys + 4)) - 2;
        int hi = lo + static_cast<int>(sample_rng_below(&rng, 20));
        char v = "abc."[sample_rng_below(&rng, 4)];
        map.assign(lo, hi, v);
        model.assign(lo, hi, v);
        for (std::size_t k = 0; k < kKeys; ++k)
            if (map[static_cast<int>(k)] != model.values[k])
                agree = false;
        if (!canonical(map, '.'))
            always_canonical = false;
    }
    SAMPLE_CHECK(agree);
    SAMPLE_CHECK(always_canonical);
    SAMPLE_CHECK(map[-1000] == '.' || map[-1000] == map[-3]);

    std::string picture(model.values.begin(), model.values.end());
    digest.add(picture);
    digest.add(static_cast<std::uint32_t>(map.boundaries()));
    for (const auto& [start, value] : map.ranges()) {
        digest.add(static_cast<std::uint32_t>(start + 1000));
        digest.add(static_cast<std::uint32_t>(static_cast<unsigned char>(value)));
    }
    return digest.value();
}

}  // namespace sample
