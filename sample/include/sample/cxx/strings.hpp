// strings.hpp - small string utilities missing from the standard library.
//
// ASCII only: case folding and white space ignore the locale on purpose.
#ifndef SAMPLE_CXX_STRINGS_HPP
#define SAMPLE_CXX_STRINGS_HPP

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sample::str {

// Splits on every occurrence of sep (keeps empty pieces).
std::vector<std::string> split(std::string_view s, char sep);

// Splits on runs of ASCII white space (drops empty pieces).
std::vector<std::string> split_words(std::string_view s);

// Joins pieces with sep between them.
std::string join(const std::vector<std::string>& pieces, std::string_view sep);

// Removes leading and trailing ASCII white space.
std::string_view trim(std::string_view s);

std::string to_lower(std::string_view s);
std::string to_upper(std::string_view s);

bool starts_with(std::string_view s, std::string_view prefix);
bool ends_with(std::string_view s, std::string_view suffix);

// Replaces every occurrence of from (non-empty) with to.
std::string replace_all(std::string_view s, std::string_view from, std::string_view to);

// Pads on the left (right = false) or right to width with fill.
std::string pad(std::string_view s, std::size_t width, bool right = true, char fill = ' ');

// 1234567 -> "1,234,567".
std::string with_thousands(long long value);

// "snake_case_name" -> "SnakeCaseName".
std::string to_camel(std::string_view s);

}  // namespace sample::str

namespace sample {

// Self-test of this module; returns its digest.
std::uint32_t strings_selftest();

}  // namespace sample

#endif  // SAMPLE_CXX_STRINGS_HPP
