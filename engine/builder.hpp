#pragma once
// GraphBuilder: the one way to make a Graph. The JSON loader feeds it by name (nodes in any
// order); C++ code uses Value handles and the op functions of ops/ops.hpp, so that a graph
// reads like the math:
//
//   GraphBuilder g("attention");
//   Value x = g.input("X", x_data), wq = g.param("Wq", wq_data), ...;
//   Value q = linear(x, wq, bq).as("Q");
//   Value a = softmax(scale(matmul(q, transpose(k)), 1 / std::sqrt(dk))).as("A");
//   g.output(matmul(a, v).as("O"));
//   Graph graph = g.build();
//
// Shapes are checked as each node is added from C++ (the error names the node), and the
// whole graph again in build(): names, arity, cycles, shapes.
#include <any>
#include <string>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/graph.hpp"

namespace attngraph {

class GraphBuilder;

/// @brief A handle to a value of a graph under construction.
class Value {
public:
    Value() = default;
    Value(GraphBuilder* builder, std::string name) : m_builder(builder), m_name(std::move(name)) {}

    const std::string& name() const { return m_name; }
    GraphBuilder& builder() const;
    Shape shape() const;
    /// Renames this value's node (only before anything consumes it). Returns *this.
    Value& as(const std::string& name);
    /// Output k of a multi-output node ("name:k").
    Value operator[](int k) const;

private:
    GraphBuilder* m_builder = nullptr;
    std::string m_name;
};

class GraphBuilder {
public:
    explicit GraphBuilder(std::string name = "graph", DType dtype = DType::f32);

    void set_tokens(std::vector<std::string> tokens) { m_tokens = std::move(tokens); }
    void set_dtype(DType dtype) { m_dtype = dtype; }

    // ---- C++ (eager) interface ---------------------------------------------------
    Value input(const std::string& name, Tensor data);
    Value param(const std::string& name, Tensor data);
    /// Adds a node of op `op` now: shapes inferred at once; throws on a bad shape.
    /// An empty name gets a fresh one ("MatMul_3").
    Value node(const std::string& op, const std::vector<Value>& inputs, std::any attrs,
               std::string name = "");
    void output(const Value& v) { m_outputs.push_back(v.name()); }

    // ---- by-name (deferred) interface, for graph files ----------------------------
    void add_tensor(const std::string& name, ValueKind kind, Tensor data);
    /// Inputs are value names; they may be defined later. Nothing is checked until build().
    void add_node(const std::string& name, const std::string& op,
                  std::vector<std::string> inputs, std::any attrs);
    void add_output(const std::string& name) { m_outputs.push_back(name); }

    /// Validates everything and returns the graph. Throws GraphError / ShapeError.
    Graph build() const;

    // used by Value
    Shape shape_of(const std::string& name) const;
    void rename(const std::string& from, const std::string& to);

private:
    struct PendingTensor {
        std::string name;
        ValueKind kind;
        std::shared_ptr<const Tensor> data;
    };
    struct PendingNode {
        std::string name;
        std::string op;
        std::vector<std::string> inputs;
        std::any attrs;
        std::vector<Shape> shapes;  // known when added through node()
    };
    std::string fresh_name(const std::string& op);
    bool name_taken(const std::string& name) const;
    void check_new_name(const std::string& name) const;

    std::string m_name;
    DType m_dtype;
    std::vector<std::string> m_tokens;
    std::vector<PendingTensor> m_tensors;
    std::vector<PendingNode> m_nodes;
    std::vector<std::string> m_outputs;
    std::map<std::string, std::size_t> m_eager_names;  // name -> node index (node())
    std::map<std::string, int> m_consumers;             // name -> number of consumers
    std::unordered_set<std::string> m_taken;            // every tensor and node name so far
    int m_counter = 0;
};

}  // namespace attngraph
