// ini.hpp - reading INI-style configuration text.
//
// "[section]" headers, "key = value" lines, '#' and ';' comments. Keys
// before any header belong to the section "". Later duplicates win.
#ifndef SAMPLE_CXX_INI_HPP
#define SAMPLE_CXX_INI_HPP

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sample {

class IniFile {
public:
    // One line that could not be read.
    struct Problem {
        std::size_t line;
        std::string message;
    };

    // Reads text; problems are collected, not thrown.
    static IniFile parse(std::string_view text);

    std::optional<std::string> get(const std::string& section, const std::string& key) const;
    std::string get_or(const std::string& section, const std::string& key,
                       const std::string& fallback) const;

    // An integer value; nothing when absent or not an integer.
    std::optional<long> get_int(const std::string& section, const std::string& key) const;

    // true/yes/on/1 and false/no/off/0 (any case); nothing otherwise.
    std::optional<bool> get_bool(const std::string& section, const std::string& key) const;

    std::vector<std::string> sections() const;
    std::vector<std::string> keys(const std::string& section) const;
    const std::vector<Problem>& problems() const { return problems_; }

    // Writes the contents back as canonical INI text (sorted sections and keys).
    std::string to_string() const;

private:
    std::map<std::string, std::map<std::string, std::string>> data_;
    std::vector<Problem> problems_;
};

// Self-test of this module; returns its digest.
std::uint32_t ini_selftest();

}  // namespace sample

#endif  // SAMPLE_CXX_INI_HPP
