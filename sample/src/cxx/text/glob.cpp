// glob.cpp - wildcard matching with backtracking over the last '*'.
#include "sample/cxx/glob.hpp"

#include <algorithm>
#include <string>

#include "sample/check.h"
#include "sample/cxx/digest.hpp"

namespace sample::glob {

namespace {

// Matches one bracket class at pattern[p] (just after '['); returns the index
// after ']' and sets matched, or npos when the class is not terminated.
std::size_t match_class(std::string_view pattern, std::size_t p, char c, bool& matched)
{
    bool negate = false;
    matched = false;
    if (p < pattern.size() && (pattern[p] == '!' || pattern[p] == '^')) {
        negate = true;
        ++p;
    }
    bool first = true;
    while (p < pattern.size() && (first || pattern[p] != ']')) {
        char lo = pattern[p];
        first = false;
        if (p + 2 < pattern.size() && pattern[p + 1] == '-' && pattern[p + 2] != ']') {
            char hi = pattern[p + 2];
            if (lo <= c && c <= hi)
                matched = true;
            p += 3;
        } else {
            if (lo == c)
                matched = true;
            ++p;
        }
    }
    if (p >= pattern.size())
        return std::string_view::npos;
    matched = matched != negate;
    return p + 1;
}

}  // namespace

bool match(std::string_view pattern, std::string_view name)
{
    std::size_t p = 0, n = 0;
    std::size_t star_p = std::string_view::npos, star_n = 0;
    while (n < name.size()) {
        if (p < pattern.size()) {
            char pc = pattern[p];
            if (pc == '*') {
                star_p = p++;
                star_n = n;
                continue;
            }
            if (pc == '?') {
                ++p;
                ++n;
                continue;
            }
            if (pc == '[') {
                bool matched = false;
                std::size_t after = match_class(pattern, p + 1, name[n], matched);
                if (after != std::string_view::npos && matched) {
                    p = after;
                    ++n;
                    continue;
                }
                // An unterminated '[' is an ordinary character.
                if (after == std::string_view::npos && name[n] == '[') {
                    ++p;
                    ++n;
                    continue;
                }
            } else {
                if (pc == '\\' && p + 1 < pattern.size())
                    pc = pattern[++p];
                if (pc == name[n]) {
                    ++p;
                    ++n;
                    continue;
                }
            }
        }
        // Mismatch: let the last '*' swallow one more byte, or fail.
        if (star_p == std::string_view::npos)
            return false;
        p = star_p + 1;
        n = ++star_n;
    }
    while (p < pattern.size() && pattern[p] == '*')
        ++p;
    return p == pattern.size();
}

std::vector<std::string> filter(const std::vector<std::string>& names,
                                const std::vector<std::string>& include,
                                const std::vector<std::string>& exclude)
{
    std::vector<std::string> out;
    auto matches = [](const std::string& name) {
        return [&name](const std::string& pattern) { return match(pattern, name); };
    };
    std::copy_if(names.begin(), names.end(), std::back_inserter(out),
                 [&](const std::string& name) {
                     return std::any_of(include.begin(), include.end(), matches(name)) &&
                            std::none_of(exclude.begin(), exclude.end(), matches(name));
                 });
    return out;
}

}  // namespace sample::glob

namespace sample {

std::uint32_t glob_selftest()
{
    using glob::match;
    Digest digest;

    struct Case {
        const char* pattern;
        const char* name;
        bool want;
    };
    static const Case kCases[] = {
        {"*.c", "main.c", true},          {"*.c", "main.cpp", false},
        {"src/*/*.c", "src/core/a.c", true}, {"?.o", "a.o", true},
        {"?.o", "ab.o", false},           {"[abc]x", "bx", true},
        {"[!abc]x", "bx", false},         {"[a-f]*", "exit", true},
        {"[a-f]*", "zeta", false},        {"*a*b*c*", "xxaxxbxxcxx", true},
        {"*a*b*c*", "xxaxxcxxbxx", false}, {"\\*literal", "*literal", true},
        {"\\*literal", "xliteral", false}, {"", "", true},
        {"*", "", true},                  {"**", "anything/at/all", true},
        {"[]]x", "]x", true},             {"[a-", "[a-", true},
        {"a*", "b", false},               {"*.tar.gz", "backup.tar.gz", true},
    };
    bool all = true;
    std::size_t matched = 0;
    for (const Case& c : kCases) {
        bool got = match(c.pattern, c.name);
        if (got != c.want) {
            all = false;
            sample_check_record(0, c.pattern, __FILE__, __LINE__);
        }
        matched += got ? 1 : 0;
        digest.add(c.pattern).add(static_cast<std::uint32_t>(got));
    }
    SAMPLE_CHECK(all);
    SAMPLE_CHECK_EQ(matched, 13);

    std::vector<std::string> files = {"src/a.c",  "src/b.cpp", "src/c.h",   "docs/x.md",
                                      "src/t.cc", "build/a.o", "src/gen.c", "README"};
    auto sources = glob::filter(files, {"*.c", "*.cpp", "*.cc"}, {"*/gen.*"});
    SAMPLE_CHECK_EQ(sources.size(), 3);
    if (sources.size() == 3) {
        SAMPLE_CHECK_STR(sources[0].c_str(), "src/a.c");
        SAMPLE_CHECK_STR(sources[2].c_str(), "src/t.cc");
    }
    SAMPLE_CHECK(glob::filter(files, {}).empty());
    for (const auto& s : sources)
        digest.add(s);
    return digest.value();
}

}  // namespace sample
