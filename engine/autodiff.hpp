#pragma once
// Reverse-mode autodiff over a finished forward run, run by an Executor (executor.hpp). For output gradients G (all
// ones by default) it computes the gradient of the scalar L = sum over outputs of sum(G ⊙ output) with respect to any
// values of the graph — input and param tensors and node outputs — by calling each node's op backward (ops/<name>.cpp)
// once its outputs' gradients are complete. Independent branches (the heads) run their backward in parallel on oneTBB;
// where a value feeds several nodes, each consumer adds into its own buffer and the
// buffers are summed in consumer order, so the gradients are bit-identical for any thread
// count. Only the nodes on a path from a requested value to an output run their backward.
// A fused attention step of the forward plan (engine/optimize.hpp) runs as one backward
// (engine/attention_kernel.hpp) that recomputes the attention weights block by block when
// the forward did not keep them, with the forward's own kernel: the same bits either way.
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/executor.hpp"
#include "engine/graph.hpp"
#include "engine/trace.hpp"

namespace attngraph {

/// @brief Which gradients to compute and how to run (for the free function backward()).
struct BackwardOptions {
    std::vector<std::string> wrt;  ///< value names (tensors or nodes); empty: every value
    int threads = 0;               ///< 0: every core of the machine
    /// Called after each node's backward with (nodes done, nodes to run), from any of the
    /// run's threads, possibly from two at once (a progress line reads it).
    std::function<void(std::size_t, std::size_t)> progress;
    /// Run each fused attention step of the forward (O = softmax(c·Q·Kᵀ)·V) as one backward
    /// that recomputes the weights the forward did not keep; false: a backward per node
    /// (the forward must then keep every value: keep_all).
    bool fuse = true;
};

/// @brief The gradients dL/dv of one backward pass, by value name.
class Gradients {
public:
    /// dL/d`name`; throws GraphError when `name` was not requested (or is not in the graph).
    const Tensor& at(const std::string& name) const;
    bool contains(const std::string& name) const { return m_by_name.count(name) != 0; }
    /// The requested names, in the graph's value order.
    const std::vector<std::string>& names() const { return m_names; }
    /// Wall time of each node's backward, by node name (nodes that ran only).
    const std::map<std::string, double>& seconds() const { return m_seconds; }

    void add(const std::string& name, std::shared_ptr<const Tensor> grad);
    void set_seconds(const std::string& node, double s) { m_seconds[node] = s; }

private:
    std::vector<std::string> m_names;
    std::map<std::string, std::shared_ptr<const Tensor>> m_by_name;
    std::map<std::string, double> m_seconds;
};

/// @brief Runs the backward pass of `graph` over `forward`, a complete run of the same graph
/// made with RunOptions::keep_for_backward (or keep_all), on default_executor(options.threads);
/// Executor::backward runs it on a given executor. `output_grads` maps output names to G (the output's
/// shape; converted to the graph's dtype); an output left out gets all ones.
/// Throws GraphError (unknown name, not an output, value not kept, op without backward)
/// or ShapeError (G of the wrong shape).
Gradients backward(const Graph& graph, const RunResult& forward, const std::map<std::string, Tensor>& output_grads = {},
                   const BackwardOptions& options = {});

/// @brief What a forward run keeps for backward() when it keeps `keep` (traced values and
/// outputs) anyway: every value but the scores and weights (S_raw, S, A, and KT) of fused
/// attention steps that are not in `keep`; the backward recomputes them block by block.
std::vector<bool> backward_keep(const Graph& graph, const std::vector<bool>& keep);

/// @brief manifest.json of a gradient trace: the forward trace's manifest (format npy) where
/// every entry with a gradient gets "grad": "grad/<name>.npy", plus a "grads" list of those
/// names and "loss" describing L.
nlohmann::json grad_trace_manifest(const Trace& trace, const Gradients& grads, const std::string& loss);

/// @brief Writes the forward trace (<name>.npy) and every gradient (grad/<name>.npy) with
/// their manifest into `dir` atomically (write_directory_atomically): an existing non-empty
/// `dir` is refused unless `force`, and nothing is left behind on error.
void write_grad_trace(const Trace& trace, const Gradients& grads, const std::string& loss,
                      const std::filesystem::path& dir, bool force);

}  // namespace attngraph
