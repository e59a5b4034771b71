// json.cpp - serialising and parsing the JSON value type.
#include "sample/cxx/json.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "sample/check.h"
#include "sample/cxx/digest.hpp"
#include "sample/utf8.h"

namespace sample::json {

namespace {

const Value& null_value()
{
    static const Value null;
    return null;
}

std::string format_number(double d)
{
    char buf[40];
    if (!std::isfinite(d))
        return "null";  // JSON has no infinities or NaN
    if (d == std::floor(d) && std::fabs(d) < 1e15) {
        std::snprintf(buf, sizeof buf, "%.0f", d);
    } else {
        // The shortest of %.15g and %.17g that reads back as the same double.
        std::snprintf(buf, sizeof buf, "%.15g", d);
        if (std::strtod(buf, nullptr) != d)
            std::snprintf(buf, sizeof buf, "%.17g", d);
    }
    return buf;
}

void newline(std::string& out, int indent, int depth)
{
    if (indent > 0) {
        out.push_back('\n');
        out.append(static_cast<std::size_t>(indent * depth), ' ');
    }
}

class Parser {
public:
    explicit Parser(std::string_view text) : text_(text) {}

    Value parse_document()
    {
        Value v = parse_value(0);
        skip_space();
        if (pos_ != text_.size())
            fail("unexpected text after the value");
        return v;
    }

private:
    static constexpr int kMaxDepth = 100;

    [[noreturn]] void fail(const std::string& what) const { throw ParseError(what, pos_); }

    void skip_space()
    {
        while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                       text_[pos_] == '\n' || text_[pos_] == '\r'))
            ++pos_;
    }

    bool consume(std::string_view word)
    {
        if (text_.substr(pos_, word.size()) != word)
            return false;
        pos_ += word.size();
        return true;
    }

    Value parse_value(int depth)
    {
        if (depth > kMaxDepth)
            fail("nesting deeper than " + std::to_string(kMaxDepth));
        skip_space();
        if (pos_ >= text_.size())
            fail("unexpected end of input");
        char c = text_[pos_];
        if (c == '{')
            return parse_object(depth);
        if (c == '[')
            return parse_array(depth);
        if (c == '"')
            return Value(parse_string());
        if (consume("true"))
            return Value(true);
        if (consume("false"))
            return Value(false);
        if (consume("null"))
            return Value(nullptr);
        if (c == '-' || (c >= '0' && c <= '9'))
            return Value(parse_number());
        fail(std::string("unexpected character '") + c + "'");
    }

    double parse_number()
    {
        std::size_t start = pos_;
        auto digits = [this] {
            std::size_t from = pos_;
            while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9')
                ++pos_;
            return pos_ - from;
        };
        if (text_[pos_] == '-')
            ++pos_;
        if (pos_ < text_.size() && text_[pos_] == '0')
            ++pos_;
        else if (digits() == 0)
            fail("a number needs digits");
        if (pos_ < text_.size() && text_[pos_] == '.') {
            ++pos_;
            if (digits() == 0)
                fail("a fraction needs digits");
        }
        if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
            ++pos_;
            if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-'))
                ++pos_;
            if (digits() == 0)
                fail("an exponent needs digits");
        }
        std::string number(text_.substr(start, pos_ - start));
        return std::strtod(number.c_str(), nullptr);
    }

    unsigned hex4()
    {
        unsigned v = 0;
        for (int i = 0; i < 4; ++i, ++pos_) {
            if (pos_ >= text_.size())
                fail("truncated \\u escape");
            char c = text_[pos_];
            v <<= 4;
            if (c >= '0' && c <= '9')
                v |= static_cast<unsigned>(c - '0');
            else if (c >= 'a' && c <= 'f')
                v |= static_cast<unsigned>(c - 'a' + 10);
            else if (c >= 'A' && c <= 'F')
                v |= static_cast<unsigned>(c - 'A' + 10);
            else
                fail("bad hex digit in \\u escape");
        }
        return v;
    }

    std::string parse_string()
    {
        std::string out;
        ++pos_;  // the opening quote
        for (;;) {
            if (pos_ >= text_.size())
                fail("unterminated string");
            char c = text_[pos_++];
            if (c == '"')
                return out;
            if (static_cast<unsigned char>(c) < 0x20)
                fail("control character in string");
            if (c != '\\') {
                out.push_back(c);
                continue;
            }
            if (pos_ >= text_.size())
                fail("unterminated escape");
            char e = text_[pos_++];
            switch (e) {
            case '"': out.push_back('"'); break;
            case '\\': out.push_back('\\'); break;
            case '/': out.push_back('/'); break;
            case 'b': out.push_back('\b'); break;
            case 'f': out.push_back('\f'); break;
            case 'n': out.push_back('\n'); break;
            case 'r': out.push_back('\r'); break;
            case 't': out.push_back('\t'); break;
            case 'u': {
                unsigned cp = hex4();
                unsigned char buf[4];
                std::size_t n = sample_utf8_encode(cp, buf);
                if (n == 0)
                    fail("surrogate escapes are not supported");
                out.append(reinterpret_cast<const char*>(buf), n);
                break;
            }
            default:
                fail(std::string("unknown escape '\\") + e + "'");
            }
        }
    }

    Value parse_array(int depth)
    {
        Array items;
        ++pos_;
        skip_space();
        if (consume("]"))
            return Value(std::move(items));
        for (;;) {
            items.push_back(parse_value(depth + 1));
            skip_space();
            if (consume("]"))
                return Value(std::move(items));
            if (!consume(","))
                fail("expected ',' or ']'");
        }
    }

    Value parse_object(int depth)
    {
        Object members;
        ++pos_;
        skip_space();
        if (consume("}"))
            return Value(std::move(members));
        for (;;) {
            skip_space();
            if (pos_ >= text_.size() || text_[pos_] != '"')
                fail("expected a member name");
            std::string key = parse_string();
            skip_space();
            if (!consume(":"))
                fail("expected ':'");
            members[key] = parse_value(depth + 1);
            skip_space();
            if (consume("}"))
                return Value(std::move(members));
            if (!consume(","))
                fail("expected ',' or '}'");
        }
    }

    std::string_view text_;
    std::size_t pos_ = 0;
};

}  // namespace

ParseError::ParseError(const std::string& what, std::size_t offset)
    : std::runtime_error(what + " at offset " + std::to_string(offset)), offset_(offset)
{
}

const Value& Value::operator[](const std::string& key) const
{
    if (!is_object())
        return null_value();
    auto it = as_object().find(key);
    return it == as_object().end() ? null_value() : it->second;
}

const Value& Value::operator[](std::size_t index) const
{
    if (!is_array() || index >= as_array().size())
        return null_value();
    return as_array()[index];
}

std::string quote(std::string_view s)
{
    static const char kHex[] = "0123456789abcdef";
    std::string out = "\"";
    for (char c : s) {
        switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        default:
            if (static_cast<unsigned char>(c) < 0x20) {
                out += "\\u00";
                out.push_back(kHex[(c >> 4) & 0xF]);
                out.push_back(kHex[c & 0xF]);
            } else {
                out.push_back(c);
            }
        }
    }
    out.push_back('"');
    return out;
}

void Value::dump_to(std::string& out, int indent, int depth) const
{
    if (is_null()) {
        out += "null";
    } else if (is_bool()) {
        out += as_bool() ? "true" : "false";
    } else if (is_number()) {
        out += format_number(as_number());
    } else if (is_string()) {
        out += quote(as_string());
    } else if (is_array()) {
        const Array& a = as_array();
        out.push_back('[');
        for (std::size_t i = 0; i < a.size(); ++i) {
            if (i > 0)
                out.push_back(',');
            newline(out, indent, depth + 1);
            a[i].dump_to(out, indent, depth + 1);
        }
        if (!a.empty())
            newline(out, indent, depth);
        out.push_back(']');
    } else {
        const Object& o = as_object();
        out.push_back('{');
        bool first = true;
        for (const auto& [key, value] : o) {
            if (!first)
                out.push_back(',');
            first = false;
            newline(out, indent, depth + 1);
            out += quote(key);
            out += indent > 0 ? ": " : ":";
            value.dump_to(out, indent, depth + 1);
        }
        if (!o.empty())
            newline(out, indent, depth);
        out.push_back('}');
    }
}

std::string Value::dump(int indent) const
{
    std::string out;
    dump_to(out, indent, 0);
    return out;
}

Value parse(std::string_view text)
{
    return Parser(text).parse_document();
}

}  // namespace sample::json

namespace sample {

std::uint32_t json_selftest()
{
    using namespace json;
    Digest digest;

    Object agent;
    agent["name"] = "agent-1";
    agent["tokens"] = 8;
    agent["load"] = 0.375;
    agent["online"] = true;
    agent["toolchains"] = Array{"gcc-12", "g++-12"};
    agent["quota"] = nullptr;
    Value doc(Object{{"agents", Array{Value(agent)}}, {"version", 3}});

    std::string compact = doc.dump();
    SAMPLE_CHECK_STR(compact.c_str(),
                     "{\"agents\":[{\"load\":0.375,\"name\":\"agent-1\",\"online\":true,"
                     "\"quota\":null,\"tokens\":8,\"toolchains\":[\"gcc-12\",\"g++-12\"]}],"
                     "\"version\":3}");
    std::string pretty = doc.dump(2);
    SAMPLE_CHECK(pretty.find("\n    {\n      \"load\": 0.375,") != std::string::npos);
    digest.add(compact).add(pretty);

    bool round_trip = false;
    try {
        round_trip = parse(compact) == doc && parse(pretty) == doc;
    } catch (const ParseError&) {
    }
    SAMPLE_CHECK(round_trip);

    Value parsed;
    try {
        parsed = parse(" {\"a\": [1, -2.5e3, 0.1, \"\\u00e9\\n\\\"x\\\"\"], \"b\": {}} ");
    } catch (const ParseError&) {
    }
    SAMPLE_CHECK(parsed["a"].is_array());
    SAMPLE_CHECK_NEAR(parsed["a"][1].is_number() ? parsed["a"][1].as_number() : 0.0, -2500.0, 0.0);
    SAMPLE_CHECK(parsed["a"][3].is_string() && parsed["a"][3].as_string() == "\xC3\xA9\n\"x\"");
    SAMPLE_CHECK(parsed["b"].is_object() && parsed["b"].as_object().empty());
    SAMPLE_CHECK(parsed["missing"].is_null());
    SAMPLE_CHECK(parsed["a"][99].is_null());
    SAMPLE_CHECK_STR(Value(0.1).dump().c_str(), "0.1");
    SAMPLE_CHECK_STR(Value(1.0 / 3.0).dump().c_str(), "0.33333333333333331");
    SAMPLE_CHECK_STR(Value(1e20).dump().c_str(), "1e+20");
    SAMPLE_CHECK_STR(quote("tab\there\x01").c_str(), "\"tab\\there\\u0001\"");

    struct Bad {
        const char* text;
        std::size_t offset;
    };
    static const Bad kBad[] = {
        {"", 0},         {"[1,]", 3},   {"{\"a\" 1}", 5}, {"tru", 0},
        {"01", 1},       {"\"abc", 4},  {"[1] x", 4},     {"\"\\q\"", 3},
        {"-", 1},        {"{1:2}", 1},
    };
    std::size_t right_offsets = 0;
    for (const Bad& b : kBad) {
        try {
            parse(b.text);
        } catch (const ParseError& e) {
            if (e.offset() == b.offset)
                ++right_offsets;
            digest.add(e.what());
        }
    }
    SAMPLE_CHECK_EQ(right_offsets, sizeof kBad / sizeof kBad[0]);

    std::string deep(150, '[');
    bool too_deep = false;
    try {
        parse(deep);
    } catch (const ParseError& e) {
        too_deep = std::string(e.what()).find("nesting deeper than 100") != std::string::npos;
    }
    SAMPLE_CHECK(too_deep);
    return digest.value();
}

}  // namespace sample
