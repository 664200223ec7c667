#pragma once
// A graph as Graphviz DOT: one box per node (name, op, shape), tensors as notes, clusters
// by name prefix (head1., head2., ...), and, with a trace, each node's wall time.
#include <string>

#include "engine/graph.hpp"
#include "inspect/trace_dir.hpp"

namespace attngraph::inspect {

struct DotOptions {
    const TraceDir* trace = nullptr;  ///< wall times from its manifest ("seconds")
    bool hide_params = false;         ///< leave param tensors (weights) out
};

/// @brief The graph as a DOT digraph (render with `dot -Tsvg`).
std::string graph_dot(const Graph& graph, const DotOptions& options = {});

}  // namespace attngraph::inspect
