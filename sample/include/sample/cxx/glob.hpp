// glob.hpp - shell-style wildcard matching.
//
// '*' matches any run (including '/'), '?' one byte, "[a-z]" and "[!abc]"
// a class; '\' escapes the next byte. No brace expansion.
#ifndef SAMPLE_CXX_GLOB_HPP
#define SAMPLE_CXX_GLOB_HPP

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sample::glob {

// Whether name matches pattern as a whole.
bool match(std::string_view pattern, std::string_view name);

// The names matching any include pattern and no exclude pattern, in input order.
std::vector<std::string> filter(const std::vector<std::string>& names,
                                const std::vector<std::string>& include,
                                const std::vector<std::string>& exclude = {});

}  // namespace sample::glob

namespace sample {

// Self-test of this module; returns its digest.
std::uint32_t glob_selftest();

}  // namespace sample

#endif  // SAMPLE_CXX_GLOB_HPP
