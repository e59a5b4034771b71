// expression.hpp - C++ access to the C expression evaluator, and a tiny sheet.
//
// Expression owns a parsed sample_expr and evaluates it against a map of
// variables. Sheet holds named cells whose formulas refer to other cells
// and evaluates them in dependency order (a cycle is an error).
#ifndef SAMPLE_CXX_EXPRESSION_HPP
#define SAMPLE_CXX_EXPRESSION_HPP

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "sample/expr.h"

namespace sample {

// A failed parse or evaluation, with the C error code and 1-based column.
class ExpressionError : public std::runtime_error {
public:
    ExpressionError(sample_expr_error code, std::size_t column, const std::string& text);
    sample_expr_error code() const { return code_; }
    std::size_t column() const { return column_; }

private:
    sample_expr_error code_;
    std::size_t column_;
};

class Expression {
public:
    // Parses text; throws ExpressionError.
    explicit Expression(const std::string& text);

    // Evaluates with the given variables; throws ExpressionError.
    double eval(const std::map<std::string, double>& vars = {}) const;

    // The variable names the expression mentions, sorted.
    std::set<std::string> variables() const;

    const std::string& text() const { return text_; }
    std::size_t nodes() const { return sample_expr_node_count(expr_.get()); }

private:
    struct Deleter {
        void operator()(sample_expr* e) const { sample_expr_free(e); }
    };
    std::string text_;
    std::unique_ptr<sample_expr, Deleter> expr_;
};

class Sheet {
public:
    // Sets a cell's formula; throws ExpressionError if it does not parse.
    void set(const std::string& cell, const std::string& formula);

    // Evaluates every cell; throws std::runtime_error naming a cycle or missing cell.
    std::map<std::string, double> evaluate() const;

    // The order evaluate() uses.
    std::vector<std::string> order() const;

private:
    std::map<std::string, Expression> cells_;
};

// Self-test of this module; returns its digest.
std::uint32_t expression_selftest();

}  // namespace sample

#endif  // SAMPLE_CXX_EXPRESSION_HPP
