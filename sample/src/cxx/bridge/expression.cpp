// expression.cpp - Expression over the C evaluator, and Sheet on top of Graph.
#include "sample/cxx/expression.hpp"

#include <cmath>
#include <string>

#include "sample/check.h"
#include "sample/cxx/digest.hpp"
#include "sample/cxx/graph.hpp"

namespace sample {

namespace {

// The C callback: ctx is the variable map.
int lookup_in_map(const char* name, double* value, void* ctx)
{
    const auto* vars = static_cast<const std::map<std::string, double>*>(ctx);
    auto it = vars->find(name);
    if (it == vars->end())
        return 0;
    *value = it->second;
    return 1;
}

void collect_name(const char* name, void* ctx)
{
    static_cast<std::set<std::string>*>(ctx)->insert(name);
}

}  // namespace

ExpressionError::ExpressionError(sample_expr_error code, std::size_t column, const std::string& text)
    : std::runtime_error(std::string(sample_expr_error_text(code)) + " at column " +
                         std::to_string(column) + " of \"" + text + "\""),
      code_(code),
      column_(column)
{
}

Expression::Expression(const std::string& text) : text_(text)
{
    sample_expr_result err{};
    expr_.reset(sample_expr_parse(text.c_str(), &err));
    if (!expr_)
        throw ExpressionError(err.error, err.column, text);
}

double Expression::eval(const std::map<std::string, double>& vars) const
{
    // The C side only reads the map through the const pointer it is handed back.
    void* ctx = const_cast<std::map<std::string, double>*>(&vars);
    sample_expr_result r = sample_expr_eval(expr_.get(), lookup_in_map, ctx);
    if (r.error != SAMPLE_EXPR_OK)
        throw ExpressionError(r.error, r.column, text_);
    return r.value;
}

std::set<std::string> Expression::variables() const
{
    std::set<std::string> names;
    sample_expr_for_each_variable(expr_.get(), collect_name, &names);
    return names;
}

void Sheet::set(const std::string& cell, const std::string& formula)
{
    Expression e(formula);
    cells_.erase(cell);
    cells_.emplace(cell, std::move(e));
}

std::vector<std::string> Sheet::order() const
{
    std::vector<std::string> names;
    std::map<std::string, std::size_t> index;
    for (const auto& entry : cells_) {
        index[entry.first] = names.size();
        names.push_back(entry.first);
    }
    Graph deps(names.size());
    for (const auto& [cell, expr] : cells_)
        for (const std::string& var : expr.variables()) {
            auto it = index.find(var);
            if (it == index.end())
                throw std::runtime_error("cell " + cell + " refers to missing cell " + var);
            deps.add_edge(it->second, index[cell]);
        }
    auto order = deps.topological_order();
    if (!order)
        throw std::runtime_error("cells refer to each other in a cycle");
    std::vector<std::string> out;
    for (std::size_t n : *order)
        out.push_back(names[n]);
    return out;
}

std::map<std::string, double> Sheet::evaluate() const
{
    std::map<std::string, double> values;
    for (const std::string& cell : order())
        values[cell] = cells_.at(cell).eval(values);
    return values;
}

std::uint32_t expression_selftest()
{
    Digest digest;

    Expression area("pi * r ^ 2");
    SAMPLE_CHECK_EQ(area.nodes(), 5);
    SAMPLE_CHECK_NEAR(area.eval({{"pi", 3.0}, {"r", 2.0}}), 12.0, 0.0);
    auto vars = area.variables();
    SAMPLE_CHECK(vars.size() == 2 && vars.count("pi") == 1 && vars.count("r") == 1);

    int failures = 0;
    try {
        area.eval({{"pi", 3.0}});
    } catch (const ExpressionError& e) {
        failures += e.code() == SAMPLE_EXPR_UNKNOWN_VARIABLE && e.column() == 6;
        digest.add(e.what());
    }
    try {
        Expression broken("1 + * 2");
    } catch (const ExpressionError& e) {
        failures += e.code() == SAMPLE_EXPR_SYNTAX && e.column() == 5;
        digest.add(e.what());
    }
    SAMPLE_CHECK_EQ(failures, 2);

    // A small budget: cells refer to each other in any order of definition.
    Sheet sheet;
    sheet.set("total", "subtotal + tax");
    sheet.set("tax", "subtotal * rate");
    sheet.set("subtotal", "price * qty - discount");
    sheet.set("price", "12.5");
    sheet.set("qty", "8");
    sheet.set("discount", "max(0, qty - 5) * 2");
    sheet.set("rate", "0.2");
    std::vector<std::string> order = sheet.order();
    std::string joined;
    for (const auto& c : order)
        joined += c + " ";
    SAMPLE_CHECK_STR(joined.c_str(), "price qty discount rate subtotal tax total ");
    auto values = sheet.evaluate();
    SAMPLE_CHECK_NEAR(values["discount"], 6.0, 0.0);
    SAMPLE_CHECK_NEAR(values["subtotal"], 94.0, 1e-12);
    SAMPLE_CHECK_NEAR(values["total"], 112.8, 1e-12);
    for (const auto& [cell, v] : values)
        digest.add(cell).add_double(v);

    sheet.set("price", "total / 10");
    bool cycle = false;
    try {
        sheet.evaluate();
    } catch (const std::runtime_error& e) {
        cycle = std::string(e.what()).find("cycle") != std::string::npos;
    }
    SAMPLE_CHECK(cycle);

    sheet.set("price", "list_price");
    bool missing = false;
    try {
        sheet.evaluate();
    } catch (const std::runtime_error& e) {
        missing = std::string(e.what()) == "cell price refers to missing cell list_price";
    }
    SAMPLE_CHECK(missing);
    return digest.value();
}

}  // namespace sample
