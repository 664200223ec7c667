#pragma once
// Gradient checking: the backward pass against central finite differences in float64.
// For output gradients G, L = sum over outputs of sum(G ⊙ output) (over the finite elements
// of the outputs: a masked -inf does not depend on the inputs); each element t of a
// checked tensor is moved by ±eps and dL/dt ≈ (L(t + eps) - L(t - eps)) / (2 eps) is compared
// with backward()'s dL/dt. The graph is converted to float64 first.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/graph.hpp"

namespace attngraph {

/// @brief What to check.
struct GradcheckOptions {
    std::vector<std::string> wrt;                ///< input/param tensors; empty: all of them
    std::map<std::string, Tensor> output_grads;  ///< G per output; missing: seeded uniform(-1, 1)
    std::uint64_t seed = 7;                      ///< for the random G
    double eps = 1e-6;                           ///< finite-difference step
    int threads = 1;                             ///< for the backward pass
};

/// @brief The comparison for one tensor.
struct GradcheckEntry {
    std::string name;
    Tensor analytic;  ///< backward()'s gradient (float64)
    Tensor numeric;   ///< finite differences (float64)
    double max_abs_error = 0;
    /// max |analytic - numeric| / max(1, max |analytic|, max |numeric|): relative to the
    /// gradient's scale, absolute for gradients smaller than 1
    double rel_error = 0;
    std::size_t worst_index = 0;  ///< flat index of the largest |analytic - numeric|
};

/// @brief The comparison for every checked tensor.
struct GradcheckResult {
    std::vector<GradcheckEntry> entries;
    double max_rel_error = 0;
    std::string worst;  ///< name of the entry with the largest rel_error

    const GradcheckEntry& at(const std::string& name) const;
    /// One line per tensor: name, shape, rel error, abs error, worst element.
    std::string report() const;
};

/// @brief Checks backward() of `graph` (converted to float64) against finite differences.
/// Throws what backward() throws, and GraphError for a wrt name that is not an input or
/// param tensor.
GradcheckResult gradcheck(const Graph& graph, const GradcheckOptions& options = {});

/// @brief Gradcheck of one op: a graph of a single `op` node named "y" with attributes
/// `attrs` (as in a graph file, e.g. {"axis": 0}) over input tensors "in0", "in1", ...
/// holding `inputs`; every output of the node is an output of the graph.
GradcheckResult gradcheck_op(const std::string& op, const nlohmann::json& attrs, const std::vector<Tensor>& inputs,
                             const GradcheckOptions& options = {});

}  // namespace attngraph
