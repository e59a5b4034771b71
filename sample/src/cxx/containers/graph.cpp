// graph.cpp - topological order, BFS, Dijkstra, components, critical path.
#include "sample/cxx/graph.hpp"

#include <algorithm>
#include <functional>  // std::greater
#include <limits>
#include <numeric>
#include <queue>
#include <stdexcept>
#include <string>
#include <utility>

#include "sample/check.h"
#include "sample/cxx/digest.hpp"

namespace sample {

Graph::Graph(std::size_t nodes) : adjacency_(nodes) {}

std::size_t Graph::add_node()
{
    adjacency_.emplace_back();
    return adjacency_.size() - 1;
}

void Graph::add_edge(std::size_t from, std::size_t to, long weight)
{
    if (from >= adjacency_.size() || to >= adjacency_.size())
        throw std::out_of_range("edge " + std::to_string(from) + " -> " + std::to_string(to) +
                                " names a node the graph does not have (it has " +
                                std::to_string(adjacency_.size()) + ")");
    adjacency_[from].push_back({to, weight});
}

std::size_t Graph::edge_count() const
{
    return std::accumulate(adjacency_.begin(), adjacency_.end(), std::size_t{0},
                           [](std::size_t n, const auto& edges) { return n + edges.size(); });
}

const std::vector<Graph::Edge>& Graph::edges_from(std::size_t node) const
{
    return adjacency_.at(node);
}

std::optional<std::vector<std::size_t>> Graph::topological_order() const
{
    std::vector<std::size_t> indegree(size(), 0);
    for (const auto& edges : adjacency_)
        for (const Edge& e : edges)
            ++indegree[e.to];

    // A min-heap of ready nodes makes the order unique: Kahn's algorithm, smallest first.
    std::priority_queue<std::size_t, std::vector<std::size_t>, std::greater<>> ready;
    for (std::size_t n = 0; n < size(); ++n)
        if (indegree[n] == 0)
            ready.push(n);

    std::vector<std::size_t> order;
    order.reserve(size());
    while (!ready.empty()) {
        std::size_t n = ready.top();
        ready.pop();
        order.push_back(n);
        for (const Edge& e : adjacency_[n])
            if (--indegree[e.to] == 0)
                ready.push(e.to);
    }
    if (order.size() != size())
        return std::nullopt;
    return order;
}

std::vector<long> Graph::bfs_levels(std::size_t source) const
{
    std::vector<long> level(size(), -1);
    std::queue<std::size_t> frontier;
    level.at(source) = 0;
    frontier.push(source);
    while (!frontier.empty()) {
        std::size_t n = frontier.front();
        frontier.pop();
        for (const Edge& e : adjacency_[n])
            if (level[e.to] < 0) {
                level[e.to] = level[n] + 1;
                frontier.push(e.to);
            }
    }
    return level;
}

std::vector<long> Graph::shortest_paths(std::size_t source) const
{
    constexpr long kInf = std::numeric_limits<long>::max();
    std::vector<long> dist(size(), kInf);
    using Item = std::pair<long, std::size_t>;
    std::priority_queue<Item, std::vector<Item>, std::greater<>> queue;
    dist.at(source) = 0;
    queue.push({0, source});
    while (!queue.empty()) {
        auto [d, n] = queue.top();
        queue.pop();
        if (d != dist[n])
            continue;  // a stale entry: n was reached more cheaply since
        for (const Edge& e : adjacency_[n])
            if (d + e.weight < dist[e.to]) {
                dist[e.to] = d + e.weight;
                queue.push({dist[e.to], e.to});
            }
    }
    std::replace(dist.begin(), dist.end(), kInf, -1L);
    return dist;
}

std::vector<std::size_t> Graph::components() const
{
    // Union-find over the undirected version of the graph.
    std::vector<std::size_t> parent(size());
    std::iota(parent.begin(), parent.end(), std::size_t{0});
    auto find = [&parent](std::size_t x) {
        while (parent[x] != x) {
            parent[x] = parent[parent[x]];
            x = parent[x];
        }
        return x;
    };
    for (std::size_t n = 0; n < size(); ++n)
        for (const Edge& e : adjacency_[n]) {
            std::size_t a = find(n), b = find(e.to);
            if (a != b)
                parent[std::max(a, b)] = std::min(a, b);
        }

    std::vector<std::size_t> label(size());
    std::vector<std::size_t> number(size(), std::numeric_limits<std::size_t>::max());
    std::size_t next = 0;
    for (std::size_t n = 0; n < size(); ++n) {
        std::size_t root = find(n);
        if (number[root] == std::numeric_limits<std::size_t>::max())
            number[root] = next++;
        label[n] = number[root];
    }
    return label;
}

std::optional<long> Graph::critical_path(const std::vector<long>& cost) const
{
    auto order = topological_order();
    if (!order || cost.size() != size())
        return std::nullopt;
    std::vector<long> finish(size(), 0);
    for (std::size_t n : *order) {
        finish[n] += cost[n];
        for (const Edge& e : adjacency_[n])
            finish[e.to] = std::max(finish[e.to], finish[n]);
    }
    return size() == 0 ? 0 : *std::max_element(finish.begin(), finish.end());
}

std::uint32_t graph_selftest()
{
    Digest digest;

    // A build: headers, objects, a library and two programs; costs in tenths of a second.
    // Numbered against the build order, so that sorting by index alone would be wrong.
    enum { kCli, kTests, kLib, kEval, kParse, kUtil, kConfig, kDocs, kNodes };
    Graph build(kNodes);
    build.add_edge(kConfig, kUtil);
    build.add_edge(kConfig, kParse);
    build.add_edge(kUtil, kParse);
    build.add_edge(kUtil, kEval);
    build.add_edge(kParse, kLib);
    build.add_edge(kEval, kLib);
    build.add_edge(kLib, kCli);
    build.add_edge(kLib, kTests);
    SAMPLE_CHECK_EQ(build.edge_count(), 8);

    auto order = build.topological_order();
    SAMPLE_CHECK(order.has_value());
    if (order) {
        std::vector<std::size_t> want = {kConfig, kUtil, kEval, kParse, kLib, kCli, kTests, kDocs};
        SAMPLE_CHECK(*order == want);
        for (std::size_t n : *order)
            digest.add(static_cast<std::uint32_t>(n));
    }
    std::vector<long> cost = {1, 5, 2, 3, 7, 4, 1, 2};
    SAMPLE_CHECK_EQ(build.critical_path(cost).value_or(-1), 1 + 4 + 7 + 2 + 5);

    auto levels = build.bfs_levels(kConfig);
    SAMPLE_CHECK_EQ(levels[kLib], 2);
    SAMPLE_CHECK_EQ(levels[kTests], 3);
    SAMPLE_CHECK_EQ(levels[kDocs], -1);

    auto comps = build.components();
    SAMPLE_CHECK_EQ(comps[kCli], 0);
    SAMPLE_CHECK_EQ(comps[kDocs], 1);

    build.add_edge(kTests, kUtil);
    SAMPLE_CHECK(!build.topological_order().has_value());
    SAMPLE_CHECK(!build.critical_path(cost).has_value());

    bool threw = false;
    try {
        build.add_edge(0, 99);
    } catch (const std::out_of_range& e) {
        threw = std::string(e.what()).find("(it has 8)") != std::string::npos;
    }
    SAMPLE_CHECK(threw);

    // A grid of 6 x 6 with weights that make the straight line expensive.
    Graph grid(36);
    for (std::size_t r = 0; r < 6; ++r)
        for (std::size_t c = 0; c < 6; ++c) {
            std::size_t n = r * 6 + c;
            long w = (r == 0 || c == 5) ? 1 : 5;
            if (c + 1 < 6) {
                grid.add_edge(n, n + 1, w);
                grid.add_edge(n + 1, n, w);
            }
            if (r + 1 < 6) {
                grid.add_edge(n, n + 6, r == 0 && c != 5 ? 9 : w);
                grid.add_edge(n + 6, n, 5);
            }
        }
    auto dist = grid.shortest_paths(0);
    SAMPLE_CHECK_EQ(dist[5], 5);
    SAMPLE_CHECK_EQ(dist[35], 10);
    SAMPLE_CHECK_EQ(dist[30], 9 + 4 * 5);
    for (long d : dist)
        digest.add(static_cast<std::uint32_t>(d));
    auto hops = grid.bfs_levels(0);
    SAMPLE_CHECK_EQ(hops[35], 10);
    return digest.value();
}

}  // namespace sample
