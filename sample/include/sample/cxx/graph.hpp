// graph.hpp - a directed, weighted graph with the usual traversals.
//
// Nodes are dense indices 0..n-1. Every algorithm breaks ties by the
// smaller index, so results are fully deterministic.
#ifndef SAMPLE_CXX_GRAPH_HPP
#define SAMPLE_CXX_GRAPH_HPP

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace sample {

class Graph {
public:
    struct Edge {
        std::size_t to;
        long weight;
    };

    explicit Graph(std::size_t nodes = 0);

    // Adds a node and returns its index.
    std::size_t add_node();

    // Adds an edge; throws std::out_of_range for an unknown node.
    void add_edge(std::size_t from, std::size_t to, long weight = 1);

    std::size_t size() const { return adjacency_.size(); }
    std::size_t edge_count() const;
    const std::vector<Edge>& edges_from(std::size_t node) const;

    // A topological order (smallest ready node first), or nothing when there is a cycle.
    std::optional<std::vector<std::size_t>> topological_order() const;

    // Hop counts from source by breadth-first search; unreachable nodes get -1.
    std::vector<long> bfs_levels(std::size_t source) const;

    // Shortest distances from source (Dijkstra; weights must be non-negative); -1 if unreachable.
    std::vector<long> shortest_paths(std::size_t source) const;

    // Weakly connected components: a component number per node, numbered by first node.
    std::vector<std::size_t> components() const;

    // The longest path length in a DAG where each node costs cost[node] (critical path).
    std::optional<long> critical_path(const std::vector<long>& cost) const;

private:
    std::vector<std::vector<Edge>> adjacency_;
};

// Self-test of this module; returns its digest.
std::uint32_t graph_selftest();

}  // namespace sample

#endif  // SAMPLE_CXX_GRAPH_HPP
