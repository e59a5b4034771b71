// ini.cpp - a forgiving INI reader that reports what it skipped.
#include "sample/cxx/ini.hpp"

#include <cerrno>
#include <cstdlib>
#include <string>

#include "sample/check.h"
#include "sample/cxx/digest.hpp"
#include "sample/cxx/strings.hpp"

namespace sample {

IniFile IniFile::parse(std::string_view text)
{
    IniFile ini;
    std::string section;
    std::size_t line_no = 0;
    for (const std::string& raw : str::split(text, '\n')) {
        ++line_no;
        std::string_view line = str::trim(raw);
        if (line.empty() || line.front() == '#' || line.front() == ';')
            continue;
        if (line.front() == '[') {
            if (line.back() != ']') {
                ini.problems_.push_back({line_no, "section header without ']'"});
                continue;
            }
            section = std::string(str::trim(line.substr(1, line.size() - 2)));
            if (section.empty())
                ini.problems_.push_back({line_no, "empty section name"});
            ini.data_[section];
            continue;
        }
        std::size_t eq = line.find('=');
        if (eq == std::string_view::npos) {
            ini.problems_.push_back({line_no, "expected 'key = value'"});
            continue;
        }
        std::string key(str::trim(line.substr(0, eq)));
        std::string_view value = str::trim(line.substr(eq + 1));
        if (key.empty()) {
            ini.problems_.push_back({line_no, "missing key before '='"});
            continue;
        }
        // A value in double quotes keeps its inner spaces and may hold '#'.
        if (value.size() >= 2 && value.front() == '"' && value.back() == '"')
            value = value.substr(1, value.size() - 2);
        else if (std::size_t hash = value.find(" #"); hash != std::string_view::npos)
            value = str::trim(value.substr(0, hash));
        ini.data_[section][key] = std::string(value);
    }
    return ini;
}

std::optional<std::string> IniFile::get(const std::string& section, const std::string& key) const
{
    auto s = data_.find(section);
    if (s == data_.end())
        return std::nullopt;
    auto k = s->second.find(key);
    if (k == s->second.end())
        return std::nullopt;
    return k->second;
}

std::string IniFile::get_or(const std::string& section, const std::string& key,
                            const std::string& fallback) const
{
    return get(section, key).value_or(fallback);
}

std::optional<long> IniFile::get_int(const std::string& section, const std::string& key) const
{
    auto v = get(section, key);
    if (!v || v->empty())
        return std::nullopt;
    char* end = nullptr;
    errno = 0;
    long n = std::strtol(v->c_str(), &end, 0);
    if (errno != 0 || *end != '\0')
        return std::nullopt;
    return n;
}

std::optional<bool> IniFile::get_bool(const std::string& section, const std::string& key) const
{
    auto v = get(section, key);
    if (!v)
        return std::nullopt;
    std::string s = str::to_lower(*v);
    if (s == "true" || s == "yes" || s == "on" || s == "1")
        return true;
    if (s == "false" || s == "no" || s == "off" || s == "0")
        return false;
    return std::nullopt;
}

std::vector<std::string> IniFile::sections() const
{
    std::vector<std::string> out;
    for (const auto& entry : data_)
        out.push_back(entry.first);
    return out;
}

std::vector<std::string> IniFile::keys(const std::string& section) const
{
    std::vector<std::string> out;
    auto s = data_.find(section);
    if (s != data_.end())
        for (const auto& entry : s->second)
            out.push_back(entry.first);
    return out;
}

std::string IniFile::to_string() const
{
    std::string out;
    for (const auto& [section, keys] : data_) {
        if (!section.empty())
            out += (out.empty() ? "[" : "\n[") + section + "]\n";
        for (const auto& [key, value] : keys) {
            bool quote = value != str::trim(value) || value.find('#') != std::string::npos;
            out += key + " = " + (quote ? "\"" + value + "\"" : value) + "\n";
        }
    }
    return out;
}

std::uint32_t ini_selftest()
{
    Digest digest;
    static const char kConfig[] =
        "# scheduler settings\n"
        "name = farm-1\n"
        "\n"
        "[scheduler]\n"
        "listen = 0.0.0.0:9090   # all interfaces\n"
        "max_queued = 0x400\n"
        "strict = Yes\n"
        "\n"
        "[agent]\n"
        "tokens=8\n"
        "motd = \"  hello # world  \"\n"
        "broken line\n"
        "[unterminated\n"
        "= nothing\n"
        "tokens = 12\n"
        "[ cache ]\n"
        "enabled = maybe\n";

    IniFile ini = IniFile::parse(kConfig);
    SAMPLE_CHECK_EQ(ini.problems().size(), 3);
    if (ini.problems().size() == 3) {
        SAMPLE_CHECK_EQ(ini.problems()[0].line, 12);
        SAMPLE_CHECK_EQ(ini.problems()[1].line, 13);
        SAMPLE_CHECK_EQ(ini.problems()[2].line, 14);
    }
    SAMPLE_CHECK_STR(ini.get_or("", "name", "?").c_str(), "farm-1");
    SAMPLE_CHECK_STR(ini.get_or("scheduler", "listen", "?").c_str(), "0.0.0.0:9090");
    SAMPLE_CHECK_EQ(ini.get_int("scheduler", "max_queued").value_or(-1), 1024);
    SAMPLE_CHECK(ini.get_bool("scheduler", "strict").value_or(false));
    SAMPLE_CHECK_EQ(ini.get_int("agent", "tokens").value_or(-1), 12);
    SAMPLE_CHECK_STR(ini.get_or("agent", "motd", "?").c_str(), "  hello # world  ");
    SAMPLE_CHECK(!ini.get_bool("cache", "enabled").has_value());
    SAMPLE_CHECK(!ini.get_int("scheduler", "listen").has_value());
    SAMPLE_CHECK(!ini.get("nowhere", "x").has_value());
    SAMPLE_CHECK_STR(ini.get_or("nowhere", "x", "fallback").c_str(), "fallback");

    std::vector<std::string> sections = ini.sections();
    SAMPLE_CHECK_STR(str::join(sections, ",").c_str(), ",agent,cache,scheduler");
    SAMPLE_CHECK_STR(str::join(ini.keys("agent"), ",").c_str(), "motd,tokens");

    std::string canonical = ini.to_string();
    IniFile again = IniFile::parse(canonical);
    SAMPLE_CHECK(again.problems().empty());
    SAMPLE_CHECK_STR(again.to_string().c_str(), canonical.c_str());
    SAMPLE_CHECK_STR(again.get_or("agent", "motd", "?").c_str(), "  hello # world  ");

    digest.add(canonical);
    for (const auto& p : ini.problems())
        digest.add(static_cast<std::uint32_t>(p.line)).add(p.message);
    return digest.value();
}

}  // namespace sample
