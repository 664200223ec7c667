#pragma once
// Activation patching: replace what a node computes, rerun, see what changes downstream.
// These helpers check patches against a graph and fill RunOptions::patches / hooks; the
// executor does the rest (the patched node does not run, its consumers read the patch).
#include <functional>
#include <map>
#include <set>
#include <string>

#include "engine/executor.hpp"
#include "engine/graph.hpp"
#include "engine/trace.hpp"

namespace attngraph {

/// @brief The value id a patch of `name` replaces. Throws GraphError for a name the graph
/// lacks, and for an input or param tensor (those are replaced with --input, not patched).
int patch_target(const Graph& graph, const std::string& name);

/// @brief Checks `value` against the node output `name` (ShapeError naming both shapes;
/// `source` names where the value came from, e.g. the .npy file) and adds it to
/// options.patches, converted to the graph's dtype.
void add_patch(const Graph& graph, RunOptions& options, const std::string& name, const Tensor& value,
               const std::string& source = "");

/// @brief Adds a hook: node output `name` is replaced by hook(output) as the graph runs.
void add_hook(const Graph& graph, RunOptions& options, const std::string& name,
              std::function<Tensor(const Tensor&)> hook);

/// @brief The names of the patched and hooked values of `options`.
std::set<std::string> patched_names(const Graph& graph, const RunOptions& options);

/// @brief Marks the trace entries of patched values (manifest.json: "patched": true).
void mark_patched(Trace& trace, const std::set<std::string>& names);

/// @brief A copy of `graph` where each named node output becomes a param tensor holding the
/// given value, so that a backward pass treats it as a constant (no gradient flows through
/// it to its node's inputs). Only nodes with a single output can be frozen (GraphError).
Graph freeze_values(const Graph& graph, const std::map<std::string, Tensor>& values);

}  // namespace attngraph
