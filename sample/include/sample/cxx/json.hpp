// json.hpp - a small JSON value: build, serialise and parse.
//
// Objects keep their keys sorted (std::map), so output is canonical.
// Numbers are doubles; \u escapes outside the Basic Multilingual Plane
// (surrogate pairs) are not decoded.
#ifndef SAMPLE_CXX_JSON_HPP
#define SAMPLE_CXX_JSON_HPP

#include <cstddef>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace sample::json {

class Value;
using Array = std::vector<Value>;
using Object = std::map<std::string, Value>;

// A JSON value: null, boolean, number, string, array or object.
class Value {
public:
    Value() : v_(nullptr) {}
    Value(std::nullptr_t) : v_(nullptr) {}
    Value(bool b) : v_(b) {}
    Value(double d) : v_(d) {}
    Value(int i) : v_(static_cast<double>(i)) {}
    Value(const char* s) : v_(std::string(s)) {}
    Value(std::string s) : v_(std::move(s)) {}
    Value(Array a) : v_(std::move(a)) {}
    Value(Object o) : v_(std::move(o)) {}

    bool is_null() const { return std::holds_alternative<std::nullptr_t>(v_); }
    bool is_bool() const { return std::holds_alternative<bool>(v_); }
    bool is_number() const { return std::holds_alternative<double>(v_); }
    bool is_string() const { return std::holds_alternative<std::string>(v_); }
    bool is_array() const { return std::holds_alternative<Array>(v_); }
    bool is_object() const { return std::holds_alternative<Object>(v_); }

    // Typed access; throws std::bad_variant_access on the wrong type.
    bool as_bool() const { return std::get<bool>(v_); }
    double as_number() const { return std::get<double>(v_); }
    const std::string& as_string() const { return std::get<std::string>(v_); }
    const Array& as_array() const { return std::get<Array>(v_); }
    const Object& as_object() const { return std::get<Object>(v_); }
    Array& as_array() { return std::get<Array>(v_); }
    Object& as_object() { return std::get<Object>(v_); }

    // Member of an object, or null when absent or not an object.
    const Value& operator[](const std::string& key) const;

    // Element of an array, or null when out of range or not an array.
    const Value& operator[](std::size_t index) const;

    // Compact text (indent 0) or pretty-printed with indent spaces per level.
    std::string dump(int indent = 0) const;

    bool operator==(const Value& other) const { return v_ == other.v_; }
    bool operator!=(const Value& other) const { return !(*this == other); }

private:
    void dump_to(std::string& out, int indent, int depth) const;
    std::variant<std::nullptr_t, bool, double, std::string, Array, Object> v_;
};

// A parse error with the byte offset where it was found.
class ParseError : public std::runtime_error {
public:
    ParseError(const std::string& what, std::size_t offset);
    std::size_t offset() const { return offset_; }

private:
    std::size_t offset_;
};

// Parses a complete JSON text; throws ParseError.
Value parse(std::string_view text);

// Escapes s as a JSON string literal, quotes included.
std::string quote(std::string_view s);

}  // namespace sample::json

namespace sample {

// Self-test of this module; returns its digest.
std::uint32_t json_selftest();

}  // namespace sample

#endif  // SAMPLE_CXX_JSON_HPP
