// summary.cpp - summaries built on the C statistics functions.
#include "sample/cxx/summary.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <stdexcept>

#include "sample/check.h"
#include "sample/cxx/digest.hpp"
#include "sample/cxx/strings.hpp"
#include "sample/rng.h"
#include "sample/stats.h"

namespace sample {

namespace {

std::string fixed(double v, int decimals)
{
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
    return buf;
}

}  // namespace

Summary summarize(const std::vector<double>& values, double bucket_width)
{
    if (!(bucket_width > 0.0))
        throw std::invalid_argument("histogram bucket width must be positive");
    Summary s;
    s.count = values.size();
    if (values.empty())
        return s;
    auto [lo, hi] = std::minmax_element(values.begin(), values.end());
    s.min = *lo;
    s.max = *hi;
    s.mean = sample_mean(values.data(), values.size());
    s.stddev = sample_stddev(values.data(), values.size());
    s.median = sample_quantile(values.data(), values.size(), 0.5);
    s.p90 = sample_quantile(values.data(), values.size(), 0.9);
    for (double v : values) {
        long bucket = static_cast<long>(std::floor(v / bucket_width) * bucket_width);
        ++s.histogram[bucket];
    }
    return s;
}

std::vector<double> outliers(const std::vector<double>& values, double k)
{
    std::vector<double> out;
    if (values.size() < 2)
        return out;
    double mean = sample_mean(values.data(), values.size());
    double sd = sample_stddev(values.data(), values.size());
    std::copy_if(values.begin(), values.end(), std::back_inserter(out),
                 [=](double v) { return std::fabs(v - mean) > k * sd; });
    return out;
}

std::string Summary::to_table() const
{
    std::string out;
    auto row = [&out](const char* label, const std::string& value) {
        out += str::pad(label, 8) + str::pad(value, 12, false) + "\n";
    };
    row("count", std::to_string(count));
    row("min", fixed(min, 2));
    row("max", fixed(max, 2));
    row("mean", fixed(mean, 2));
    row("stddev", fixed(stddev, 2));
    row("median", fixed(median, 2));
    row("p90", fixed(p90, 2));

    std::size_t tallest = 0;
    for (const auto& entry : histogram)
        tallest = std::max(tallest, entry.second);
    for (const auto& [bucket, n] : histogram) {
        // Bars scaled to at most 40 characters, rounding up so that no count shows as nothing.
        std::size_t bar = tallest ? (n * 40 + tallest - 1) / tallest : 0;
        out += str::pad(std::to_string(bucket), 6, false) + " | " + std::string(bar, '#') + " " +
               std::to_string(n) + "\n";
    }
    return out;
}

std::uint32_t summary_selftest()
{
    Digest digest;

    // Compile times of a build in seconds: mostly short, a few long ones.
    sample_rng rng;
    sample_rng_seed(&rng, 12345, 9);
    std::vector<double> times;
    for (int i = 0; i < 400; ++i) {
        double u = sample_rng_double(&rng);
        times.push_back(0.2 + 3.0 * u * u);
    }
    times.push_back(25.0);
    times.push_back(31.5);

    Summary s = summarize(times, 1.0);
    SAMPLE_CHECK_EQ(s.count, 402);
    SAMPLE_CHECK_NEAR(s.max, 31.5, 0.0);
    SAMPLE_CHECK(s.min >= 0.2 && s.min < 0.25);
    SAMPLE_CHECK(s.median > 0.7 && s.median < 1.2);
    SAMPLE_CHECK(s.mean > s.median);
    SAMPLE_CHECK(s.p90 > 2.0 && s.p90 < 3.2);
    std::size_t histogram_total = std::accumulate(
        s.histogram.begin(), s.histogram.end(), std::size_t{0},
        [](std::size_t n, const auto& entry) { return n + entry.second; });
    SAMPLE_CHECK_EQ(histogram_total, 402);
    SAMPLE_CHECK_EQ(s.histogram.count(25), 1);
    SAMPLE_CHECK_EQ(s.histogram.count(31), 1);
    SAMPLE_CHECK(s.histogram.begin()->first == 0);

    auto slow = outliers(times, 3.0);
    SAMPLE_CHECK_EQ(slow.size(), 2);
    SAMPLE_CHECK(outliers({1.0}, 1.0).empty());

    std::string table = s.to_table();
    SAMPLE_CHECK(str::starts_with(table, "count            402\n"));
    SAMPLE_CHECK(table.find("max            31.50\n") != std::string::npos);
    SAMPLE_CHECK_EQ(std::count(table.begin(), table.end(), '\n'),
                    static_cast<long>(7 + s.histogram.size()));
    digest.add(table);

    Summary empty = summarize({}, 2.0);
    SAMPLE_CHECK_EQ(empty.count, 0);
    SAMPLE_CHECK(empty.histogram.empty());
    bool threw = false;
    try {
        summarize(times, 0.0);
    } catch (const std::invalid_argument&) {
        threw = true;
    }
    SAMPLE_CHECK(threw);

    Summary exact = summarize({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 5.0);
    SAMPLE_CHECK_NEAR(exact.median, 5.5, 1e-12);
    SAMPLE_CHECK_NEAR(exact.p90, 9.1, 1e-12);
    SAMPLE_CHECK_EQ(exact.histogram[0], 4);
    SAMPLE_CHECK_EQ(exact.histogram[5], 5);
    SAMPLE_CHECK_EQ(exact.histogram[10], 1);
    digest.add(exact.to_table());
    return digest.value();
}

}  // namespace sample
