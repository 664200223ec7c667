#pragma once
// A graph run as a step-by-step walkthrough in Markdown with LaTeX matrices, in the seed
// document's form: every tensor where it is first used, then per node its formula with
// shapes and its result; Linear shows the raw product and the broadcast bias as separate
// steps.
#include <string>

#include "engine/executor.hpp"
#include "engine/graph.hpp"

namespace attngraph::inspect {

struct ExplainOptions {
    std::size_t max_side = 12;   ///< larger axes are elided (first rows, ⋯, last row)
    std::size_t max_slices = 4;  ///< 2-D slices shown of a tensor of rank > 2
};

/// @brief The walkthrough of `result`, a run of `graph` that kept every value (keep_all).
/// Throws GraphError when a value it needs was not kept.
std::string explain_markdown(const Graph& graph, const RunResult& result, const ExplainOptions& options = {});

/// "\mathrm{head1.S\_raw}": a value name as LaTeX.
std::string latex_name(const std::string& name);

}  // namespace attngraph::inspect
