// trie.cpp - a prefix tree with owned children in ordered maps.
#include "sample/cxx/trie.hpp"

#include <string>
#include <utility>

#include "sample/check.h"
#include "sample/cxx/digest.hpp"

namespace sample {

struct Trie::Node {
    std::size_t count = 0;  // occurrences of the word ending here
    std::map<char, std::unique_ptr<Node>> children;

    // Appends the words below this node (spelled so far: word) until out holds limit.
    void collect(std::string& word, std::vector<std::string>& out, std::size_t limit) const
    {
        if (out.size() >= limit)
            return;
        if (count > 0)
            out.push_back(word);
        for (const auto& [c, child] : children) {
            word.push_back(c);
            child->collect(word, out, limit);
            word.pop_back();
        }
    }

    std::size_t size() const
    {
        std::size_t n = 1;
        for (const auto& entry : children)
            n += entry.second->size();
        return n;
    }
};

Trie::Trie() : root_(std::make_unique<Node>()) {}
Trie::~Trie() = default;
Trie::Trie(Trie&&) noexcept = default;
Trie& Trie::operator=(Trie&&) noexcept = default;

void Trie::insert(std::string_view word)
{
    Node* node = root_.get();
    for (char c : word) {
        auto& child = node->children[c];
        if (!child)
            child = std::make_unique<Node>();
        node = child.get();
    }
    if (node->count++ == 0)
        ++distinct_;
}

bool Trie::erase(std::string_view word)
{
    // Remember the path so that branches left empty can be pruned on the way back.
    std::vector<std::pair<Node*, char>> path;
    Node* node = root_.get();
    for (char c : word) {
        auto it = node->children.find(c);
        if (it == node->children.end())
            return false;
        path.emplace_back(node, c);
        node = it->second.get();
    }
    if (node->count == 0)
        return false;
    if (--node->count == 0)
        --distinct_;
    for (auto it = path.rbegin(); it != path.rend(); ++it) {
        Node* child = it->first->children[it->second].get();
        if (child->count != 0 || !child->children.empty())
            break;
        it->first->children.erase(it->second);
    }
    return true;
}

std::size_t Trie::count(std::string_view word) const
{
    const Node* node = root_.get();
    for (char c : word) {
        auto it = node->children.find(c);
        if (it == node->children.end())
            return 0;
        node = it->second.get();
    }
    return node->count;
}

std::vector<std::string> Trie::with_prefix(std::string_view prefix, std::size_t limit) const
{
    std::vector<std::string> out;
    const Node* node = root_.get();
    for (char c : prefix) {
        auto it = node->children.find(c);
        if (it == node->children.end())
            return out;
        node = it->second.get();
    }
    std::string word(prefix);
    node->collect(word, out, limit);
    return out;
}

std::string Trie::common_prefix() const
{
    std::string prefix;
    const Node* node = root_.get();
    if (distinct_ == 0)
        return prefix;
    while (node->count == 0 && node->children.size() == 1) {
        prefix.push_back(node->children.begin()->first);
        node = node->children.begin()->second.get();
    }
    return prefix;
}

std::size_t Trie::node_count() const
{
    return root_->size();
}

std::uint32_t trie_selftest()
{
    Digest digest;
    static const char* const kText =
        "compile compiler compilers compiled complete completion comply concurrent "
        "conclude cache cached caching cargo compile compile";

    Trie trie;
    std::size_t inserted = 0;
    std::string_view text(kText);
    while (!text.empty()) {
        std::size_t space = text.find(' ');
        trie.insert(text.substr(0, space));
        ++inserted;
        text.remove_prefix(space == std::string_view::npos ? text.size() : space + 1);
    }
    SAMPLE_CHECK_EQ(inserted, 15);
    SAMPLE_CHECK_EQ(trie.distinct(), 13);
    SAMPLE_CHECK_EQ(trie.count("compile"), 3);
    SAMPLE_CHECK_EQ(trie.count("comp"), 0);
    SAMPLE_CHECK(!trie.contains("zebra"));

    std::string joined;
    for (const auto& s : trie.with_prefix("compil"))
        joined += s + " ";
    SAMPLE_CHECK_STR(joined.c_str(), "compile compiled compiler compilers ");
    SAMPLE_CHECK_EQ(trie.with_prefix("c").size(), 13);
    SAMPLE_CHECK_EQ(trie.with_prefix("c", 3).size(), 3);
    SAMPLE_CHECK(trie.with_prefix("x").empty());
    SAMPLE_CHECK_STR(trie.common_prefix().c_str(), "c");

    std::size_t nodes = trie.node_count();
    SAMPLE_CHECK(trie.erase("compilers"));
    SAMPLE_CHECK(!trie.erase("compilers"));
    SAMPLE_CHECK(!trie.erase("compi"));
    SAMPLE_CHECK_EQ(trie.node_count(), nodes - 1);
    SAMPLE_CHECK(trie.erase("compile"));
    SAMPLE_CHECK_EQ(trie.count("compile"), 2);
    SAMPLE_CHECK(trie.contains("compiler"));

    Trie moved = std::move(trie);
    SAMPLE_CHECK_EQ(moved.distinct(), 12);

    Trie single;
    single.insert("prefix-one");
    single.insert("prefix-two");
    SAMPLE_CHECK_STR(single.common_prefix().c_str(), "prefix-");

    for (const auto& s : moved.with_prefix(""))
        digest.add(s).add(static_cast<std::uint32_t>(moved.count(s)));
    digest.add(static_cast<std::uint32_t>(moved.node_count()));
    return digest.value();
}

}  // namespace sample
