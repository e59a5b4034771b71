// ring_buffer.cpp - self-test of RingBuffer: overwrite order, moving averages, strings.
#include "sample/cxx/ring_buffer.hpp"

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "sample/check.h"
#include "sample/cxx/digest.hpp"

namespace sample {

namespace {

// Simple moving average of window values over a series.
std::vector<double> moving_average(const std::vector<double>& series, std::size_t window)
{
    RingBuffer<double> ring(window);
    std::vector<double> out;
    double sum = 0.0;
    for (double v : series) {
        if (auto old = ring.push(v))
            sum -= *old;
        sum += v;
        if (ring.full())
            out.push_back(sum / static_cast<double>(window));
    }
    return out;
}

// Keeps the last n lines of a text, like tail(1).
std::vector<std::string> tail_lines(const std::string& text, std::size_t n)
{
    RingBuffer<std::string> ring(n);
    std::string line;
    for (char c : text) {
        if (c == '\n') {
            ring.push(line);
            line.clear();
        } else {
            line += c;
        }
    }
    if (!line.empty())
        ring.push(line);
    return ring.to_vector();
}

}  // namespace

std::uint32_t ring_buffer_selftest()
{
    Digest digest;

    RingBuffer<int> ring(4);
    SAMPLE_CHECK(ring.empty());
    SAMPLE_CHECK(!ring.pop().has_value());
    for (int i = 1; i <= 4; ++i)
        SAMPLE_CHECK(!ring.push(i).has_value());
    SAMPLE_CHECK(ring.full());
    auto displaced = ring.push(5);
    SAMPLE_CHECK(displaced.has_value() && *displaced == 1);
    SAMPLE_CHECK_EQ(ring.front(), 2);
    SAMPLE_CHECK_EQ(ring.back(), 5);
    SAMPLE_CHECK_EQ(ring.pop().value_or(-1), 2);
    SAMPLE_CHECK_EQ(ring.size(), 3);
    ring.push(6);
    ring.push(7);
    std::vector<int> contents = ring.to_vector();
    SAMPLE_CHECK((contents == std::vector<int>{4, 5, 6, 7}));
    SAMPLE_CHECK_EQ(std::accumulate(contents.begin(), contents.end(), 0), 22);

    bool threw = false;
    try {
        (void)ring.at(4);
    } catch (const std::out_of_range&) {
        threw = true;
    }
    SAMPLE_CHECK(threw);
    threw = false;
    try {
        RingBuffer<int> none(0);
    } catch (const std::invalid_argument&) {
        threw = true;
    }
    SAMPLE_CHECK(threw);

    std::vector<double> series(20);
    std::iota(series.begin(), series.end(), 1.0);
    std::transform(series.begin(), series.end(), series.begin(),
                   [](double v) { return v * v; });
    std::vector<double> avg = moving_average(series, 5);
    SAMPLE_CHECK_EQ(avg.size(), 16);
    SAMPLE_CHECK_NEAR(avg.front(), 11.0, 1e-12);
    SAMPLE_CHECK_NEAR(avg.back(), 326.0, 1e-12);
    SAMPLE_CHECK(std::is_sorted(avg.begin(), avg.end()));
    for (double a : avg)
        digest.add_double(a);

    auto last = tail_lines("one\ntwo\nthree\nfour\nfive\n", 2);
    SAMPLE_CHECK_EQ(last.size(), 2);
    if (last.size() == 2) {
        SAMPLE_CHECK_STR(last[0].c_str(), "four");
        SAMPLE_CHECK_STR(last[1].c_str(), "five");
    }
    for (const auto& l : tail_lines("a\nb\nc", 5))
        digest.add(l);

    int total = 0;
    ring.for_each([&total](int v) { total = total * 10 + v; });
    SAMPLE_CHECK_EQ(total, 4567);
    digest.add(static_cast<std::uint32_t>(total));
    return digest.value();
}

}  // namespace sample
