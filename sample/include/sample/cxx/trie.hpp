// trie.hpp - a prefix tree of strings with counts.
#ifndef SAMPLE_CXX_TRIE_HPP
#define SAMPLE_CXX_TRIE_HPP

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sample {

class Trie {
public:
    Trie();
    ~Trie();
    Trie(Trie&&) noexcept;
    Trie& operator=(Trie&&) noexcept;
    Trie(const Trie&) = delete;
    Trie& operator=(const Trie&) = delete;

    // Adds one occurrence of word.
    void insert(std::string_view word);

    // Removes one occurrence; returns whether the word was there.
    bool erase(std::string_view word);

    // How many times word was inserted (and not erased).
    std::size_t count(std::string_view word) const;

    bool contains(std::string_view word) const { return count(word) > 0; }

    // Distinct words with the given prefix, in lexicographic order, at most limit of them.
    std::vector<std::string> with_prefix(std::string_view prefix, std::size_t limit = 100) const;

    // The longest prefix shared by every word (empty when there are none).
    std::string common_prefix() const;

    std::size_t distinct() const { return distinct_; }
    std::size_t node_count() const;

private:
    struct Node;
    std::unique_ptr<Node> root_;
    std::size_t distinct_ = 0;
};

// Self-test of this module; returns its digest.
std::uint32_t trie_selftest();

}  // namespace sample

#endif  // SAMPLE_CXX_TRIE_HPP
