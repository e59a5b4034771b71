// strings.cpp - ASCII string utilities over std::string_view.
#include "sample/cxx/strings.hpp"

#include <algorithm>
#include <string>

#include "sample/check.h"
#include "sample/cxx/digest.hpp"

namespace sample::str {

namespace {

bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

char lower(char c)
{
    return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

char upper(char c)
{
    return (c >= 'a' && c <= 'z') ? static_cast<char>(c - 'a' + 'A') : c;
}

}  // namespace

std::vector<std::string> split(std::string_view s, char sep)
{
    std::vector<std::string> out;
    std::size_t start = 0;
    for (;;) {
        std::size_t at = s.find(sep, start);
        if (at == std::string_view::npos) {
            out.emplace_back(s.substr(start));
            return out;
        }
        out.emplace_back(s.substr(start, at - start));
        start = at + 1;
    }
}

std::vector<std::string> split_words(std::string_view s)
{
    std::vector<std::string> out;
    auto it = s.begin();
    while (it != s.end()) {
        it = std::find_if_not(it, s.end(), is_space);
        auto end = std::find_if(it, s.end(), is_space);
        if (it != end)
            out.emplace_back(it, end);
        it = end;
    }
    return out;
}

std::string join(const std::vector<std::string>& pieces, std::string_view sep)
{
    std::string out;
    for (std::size_t i = 0; i < pieces.size(); ++i) {
        if (i > 0)
            out.append(sep);
        out.append(pieces[i]);
    }
    return out;
}

std::string_view trim(std::string_view s)
{
    while (!s.empty() && is_space(s.front()))
        s.remove_prefix(1);
    while (!s.empty() && is_space(s.back()))
        s.remove_suffix(1);
    return s;
}

std::string to_lower(std::string_view s)
{
    std::string out(s);
    std::transform(out.begin(), out.end(), out.begin(), lower);
    return out;
}

std::string to_upper(std::string_view s)
{
    std::string out(s);
    std::transform(out.begin(), out.end(), out.begin(), upper);
    return out;
}

bool starts_with(std::string_view s, std::string_view prefix)
{
    return s.substr(0, prefix.size()) == prefix;
}

bool ends_with(std::string_view s, std::string_view suffix)
{
    return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string replace_all(std::string_view s, std::string_view from, std::string_view to)
{
    if (from.empty())
        return std::string(s);
    std::string out;
    std::size_t start = 0;
    for (std::size_t at; (at = s.find(from, start)) != std::string_view::npos;
         start = at + from.size()) {
        out.append(s.substr(start, at - start));
        out.append(to);
    }
    out.append(s.substr(start));
    return out;
}

std::string pad(std::string_view s, std::size_t width, bool right, char fill)
{
    if (s.size() >= width)
        return std::string(s);
    std::string padding(width - s.size(), fill);
    return right ? std::string(s) + padding : padding + std::string(s);
}

std::string with_thousands(long long value)
{
    // Through unsigned so that the most negative value has a magnitude.
    unsigned long long magnitude =
        value < 0 ? 0ULL - static_cast<unsigned long long>(value) : static_cast<unsigned long long>(value);
    std::string digits = std::to_string(magnitude);
    std::string out;
    for (std::size_t i = 0; i < digits.size(); ++i) {
        if (i > 0 && (digits.size() - i) % 3 == 0)
            out.push_back(',');
        out.push_back(digits[i]);
    }
    return value < 0 ? "-" + out : out;
}

std::string to_camel(std::string_view s)
{
    std::string out;
    bool up = true;
    for (char c : s) {
        if (c == '_' || c == '-' || c == ' ') {
            up = true;
        } else {
            out.push_back(up ? upper(c) : c);
            up = false;
        }
    }
    return out;
}

}  // namespace sample::str

namespace sample {

std::uint32_t strings_selftest()
{
    using namespace str;
    Digest digest;

    auto parts = split("a,b,,c,", ',');
    SAMPLE_CHECK_EQ(parts.size(), 5);
    SAMPLE_CHECK_STR(join(parts, "|").c_str(), "a|b||c|");
    SAMPLE_CHECK_EQ(split("", ',').size(), 1);

    auto words = split_words("  the\tquick \n brown   fox ");
    SAMPLE_CHECK_EQ(words.size(), 4);
    SAMPLE_CHECK_STR(join(words, " ").c_str(), "the quick brown fox");
    SAMPLE_CHECK(split_words(" \t\n").empty());

    SAMPLE_CHECK(trim("  padded \n") == "padded");
    SAMPLE_CHECK(trim("   ").empty());
    SAMPLE_CHECK_STR(to_lower("MiXeD 123").c_str(), "mixed 123");
    SAMPLE_CHECK_STR(to_upper("MiXeD 123").c_str(), "MIXED 123");
    SAMPLE_CHECK(starts_with("distributed", "dist"));
    SAMPLE_CHECK(!starts_with("di", "dist"));
    SAMPLE_CHECK(ends_with("object.o", ".o"));
    SAMPLE_CHECK(!ends_with("o", ".o"));

    SAMPLE_CHECK_STR(replace_all("a-b-c", "-", "--").c_str(), "a--b--c");
    SAMPLE_CHECK_STR(replace_all("aaaa", "aa", "b").c_str(), "bb");
    SAMPLE_CHECK_STR(replace_all("abc", "", "x").c_str(), "abc");
    SAMPLE_CHECK_STR(pad("7", 3, false, '0').c_str(), "007");
    SAMPLE_CHECK_STR(pad("left", 6).c_str(), "left  ");
    SAMPLE_CHECK_STR(pad("toolong", 3).c_str(), "toolong");

    SAMPLE_CHECK_STR(with_thousands(0).c_str(), "0");
    SAMPLE_CHECK_STR(with_thousands(999).c_str(), "999");
    SAMPLE_CHECK_STR(with_thousands(1234567).c_str(), "1,234,567");
    SAMPLE_CHECK_STR(with_thousands(-1000).c_str(), "-1,000");
    SAMPLE_CHECK_STR(with_thousands(-9223372036854775807LL - 1).c_str(),
                     "-9,223,372,036,854,775,808");
    SAMPLE_CHECK_STR(to_camel("preferred_remote_limit").c_str(), "PreferredRemoteLimit");

    std::vector<std::string> names = {"token", "Agent", "route", "consumerd", "Hook"};
    std::sort(names.begin(), names.end(), [](const std::string& a, const std::string& b) {
        return to_lower(a) < to_lower(b);
    });
    SAMPLE_CHECK_STR(join(names, ",").c_str(), "Agent,consumerd,Hook,route,token");

    for (const auto& n : names)
        digest.add(to_camel(n)).add(pad(n, 12, false, '.'));
    digest.add(with_thousands(1LL << 40));
    return digest.value();
}

}  // namespace sample
