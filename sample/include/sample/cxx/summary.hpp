// summary.hpp - a statistical summary of a data set, as numbers and as text.
#ifndef SAMPLE_CXX_SUMMARY_HPP
#define SAMPLE_CXX_SUMMARY_HPP

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace sample {

struct Summary {
    std::size_t count = 0;
    double min = 0.0;
    double max = 0.0;
    double mean = 0.0;
    double stddev = 0.0;
    double median = 0.0;
    double p90 = 0.0;
    std::map<long, std::size_t> histogram; // bucket start -> count

    // A fixed-width text table: one line per statistic, then the histogram bars.
    std::string to_table() const;
};

// Summarises values with histogram buckets of bucket_width (> 0).
Summary summarize(const std::vector<double>& values, double bucket_width);

// Values more than k standard deviations from the mean, in input order.
std::vector<double> outliers(const std::vector<double>& values, double k);

// Self-test of this module; returns its digest.
std::uint32_t summary_selftest();

}  // namespace sample

#endif  // SAMPLE_CXX_SUMMARY_HPP
