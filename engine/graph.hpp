#pragma once
// The graph IR: named values (input and param tensors, node outputs) and the nodes that
// compute them, in topological order, every shape inferred. A Graph is immutable once
// built; GraphBuilder (engine/builder.hpp) and load_graph (engine/graph_file.hpp) make one.
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/error.hpp"
#include "engine/op.hpp"
#include "engine/tensor.hpp"

namespace attngraph {

enum class ValueKind { input, param, node };
std::string to_string(ValueKind kind);

/// @brief One named value: a tensor given with the graph, or one output of a node.
struct ValueInfo {
    std::string name;
    ValueKind kind = ValueKind::node;
    Shape shape;
    int producer = -1;                   // node index, -1 for input/param tensors
    int output_index = 0;                // which output of the producer
    std::shared_ptr<const Tensor> data;  // input/param tensors only
};

/// @brief One op application.
struct Node {
    std::string name;
    const OpDef* op = nullptr;
    NodeAttrs attrs;           // of op's type (op->holds(attrs))
    std::vector<int> inputs;   // value ids
    std::vector<int> outputs;  // value ids

    /// The attributes when this is a node of op type Op, else nullptr: how code that needs a
    /// particular op (the optimizer's patterns, the trace, explain) finds it.
    template <class Op>
    const typename Op::Attrs* attrs_if() const {
        return attngraph::attrs_if<Op>(attrs);
    }
    template <class Op>
    bool is() const {
        return attrs_if<Op>() != nullptr;
    }
};

class RunCache;  // engine/executor.cpp: the run plans of one graph, made once

/// @brief Where a Graph keeps its RunCache. A new graph, and every copy, starts with an empty
/// cache of its own: a copy may be given other shapes (with_tensors) or another dtype, and a
/// plan is only valid for the shapes it was made for. A move takes the cache along.
class RunCacheSlot {
public:
    RunCacheSlot();
    RunCacheSlot(const RunCacheSlot&);
    RunCacheSlot& operator=(const RunCacheSlot&);
    RunCacheSlot(RunCacheSlot&&) noexcept = default;
    RunCacheSlot& operator=(RunCacheSlot&&) noexcept = default;
    ~RunCacheSlot();
    /// @throws Error for a moved-from graph (its cache went with the move)
    RunCache& get() const {
        if (!m_cache) throw Error("this graph was moved from: it has no nodes and cannot run");
        return *m_cache;
    }
    /// Shares `other`'s cache (with_tensors, when no shape changed).
    void share(const RunCacheSlot& other) { m_cache = other.m_cache; }

private:
    std::shared_ptr<RunCache> m_cache;
};

/// @brief A validated, topologically ordered, shape-inferred DAG.
class Graph {
public:
    const std::string& name() const { return m_name; }
    DType dtype() const { return m_dtype; }
    const std::vector<std::string>& tokens() const { return m_tokens; }
    const std::vector<ValueInfo>& values() const { return m_values; }
    const ValueInfo& value(int id) const { return m_values.at(static_cast<std::size_t>(id)); }
    /// Nodes in a topological order (a node comes after every producer of its inputs).
    const std::vector<Node>& nodes() const { return m_nodes; }
    const std::vector<int>& outputs() const { return m_outputs; }

    /// Value id by name ("head1.Q", "qkv:1"); -1 when absent.
    int find(const std::string& name) const;
    /// Value id by name; throws GraphError naming the graph when absent.
    int at(const std::string& name) const;

    /// "head1.Q (3x2) · head1.KT (2x3)": the node's formula with operand names and shapes.
    std::string formula(const Node& node) const;

    /// A copy with some input/param tensors replaced (shapes may change) and every shape
    /// inferred again; throws ShapeError where the new shapes do not fit. A replacement in
    /// the graph's dtype is moved in (pass the map as an rvalue to spare the copy).
    Graph with_tensors(std::map<std::string, Tensor> replacements) const;
    /// A copy computing in another dtype (tensors converted).
    Graph with_dtype(DType dtype) const;

    /// The plans (and buffers) of this graph's runs, which the executor makes on a graph's
    /// first run with given kept values and reuses after (engine/executor.cpp). Safe to use
    /// from several threads: it locks inside.
    RunCache& run_cache() const { return m_run_cache.get(); }

private:
    friend class GraphBuilder;
    void infer_shapes();  // in topological order; throws ShapeError with node context

    std::string m_name;
    DType m_dtype = DType::f32;
    std::vector<std::string> m_tokens;
    std::vector<ValueInfo> m_values;
    std::vector<Node> m_nodes;
    std::vector<int> m_outputs;
    std::map<std::string, int> m_index;
    RunCacheSlot m_run_cache;
};

/// @brief Refuses (ShapeError naming the value, its node, op and shape) a graph with a value
/// that would need more than `max_bytes` in the graph's dtype; with `all_kept` (every value
/// kept, as a full trace does) also one whose values together would.
void check_memory(const Graph& graph, std::size_t max_bytes, bool all_kept = false);

/// @brief The memory limit when none is given (the CLI's --max-memory, Python's max_memory=):
/// half of the machine's memory (8 GiB when it cannot be read).
std::size_t default_max_memory();

/// True when name uses only letters, digits, '_', '.', '-' and is not "." or "..".
bool valid_name(const std::string& name);

}  // namespace attngraph
