#pragma once
// GraphBuilder: the one way to make a Graph. C++ code adds nodes through Value handles and the
// op functions of ops/ops.hpp, so that a graph reads like the math:
//
//   GraphBuilder g("attention");
//   Value x = g.input("X", x_data), wq = g.param("Wq", wq_data), ...;
//   Value q = linear(x, wq, bq).named("Q");
//   Value a = softmax(scale(matmul(q, transpose(k)), 1 / std::sqrt(dk))).named("A");
//   g.output(matmul(a, v).named("O"));
//   Graph graph = g.build();
//
// The graph-file loader adds nodes by name instead, in any order (add_node); build() checks
// their names and references, puts them in a topological order and adds them through the same
// path as node(): one validation pass (arity, attributes, shapes) for both front ends. A Value
// is an id (a tensor, or output k of a node), never a name parsed back.
//
// A composite op (one with `expand`, ops/ops.hpp) adds the nodes of its expansion, named
// "<node name>.<part>", instead of one node; its node name then stands for the expansion's
// output (a graph file's inputs and outputs may name it).
#include <map>
#include <string>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/graph.hpp"

namespace attngraph {

class GraphBuilder;

/// @brief A handle to a value of a graph under construction: an input/param tensor, or an
/// output of a node.
class Value {
public:
    Value() = default;

    /// The value's name: the tensor's or the node's, "node:k" for output k of a node with
    /// several outputs; "" for an empty Value (an optional input left out).
    std::string name() const;
    GraphBuilder& builder() const;
    Shape shape() const;
    /// Renames this value's node (only before anything consumes it). Returns *this.
    Value& named(const std::string& name);
    /// Output k of a multi-output node.
    Value operator[](int k) const;

private:
    friend class GraphBuilder;
    Value(GraphBuilder* builder, int tensor, int node, int output)
        : m_builder(builder), m_tensor(tensor), m_node(node), m_output(output) {}

    GraphBuilder* m_builder = nullptr;
    int m_tensor = -1;  // an input/param tensor (index), or
    int m_node = -1;    // a node (index) ...
    int m_output = -1;  // ... and its output; -1: the node's only output
};

/// @brief What a composite op's expand() adds its nodes through: node "<prefix>.<part>".
class Expansion {
public:
    using Value = attngraph::Value;
    Expansion(GraphBuilder& builder, std::string prefix) : m_builder(builder), m_prefix(std::move(prefix)) {}

    /// Adds node "<prefix>.<part>" of op type Op ("<prefix>.<Op>_<n>" without a part).
    template <class Op>
    Value node(const std::vector<Value>& inputs, typename Op::Attrs attrs = {}, const std::string& part = "");
    GraphBuilder& builder() const { return m_builder; }
    const std::string& prefix() const { return m_prefix; }

private:
    GraphBuilder& m_builder;
    std::string m_prefix;
    int m_count = 0;
};

class GraphBuilder {
public:
    explicit GraphBuilder(std::string name = "graph", DType dtype = DType::f32);

    void set_tokens(std::vector<std::string> tokens) { m_tokens = std::move(tokens); }
    void set_dtype(DType dtype) { m_dtype = dtype; }

    // ---- C++ interface: every node checked as it is added ----------------------------
    Value input(const std::string& name, Tensor data);
    Value param(const std::string& name, Tensor data);
    /// Adds a node of op type Op now: shapes inferred at once; throws on a bad shape.
    /// An empty name gets a fresh one ("MatMul_3").
    template <class Op>
    Value node(const std::vector<Value>& inputs, typename Op::Attrs attrs = {}, std::string name = "") {
        return node(op_def<Op>(), inputs, wrap_attrs<Op>(std::move(attrs)), std::move(name));
    }
    /// The same for an op given by its OpDef (attrs must be of its type), or by name.
    Value node(const OpDef& op, const std::vector<Value>& inputs, NodeAttrs attrs, std::string name = "");
    Value node(const std::string& op, const std::vector<Value>& inputs, NodeAttrs attrs, std::string name = "");
    void output(const Value& v) { m_outputs.push_back({v, ""}); }

    // ---- by-name interface, for graph files: checked in build() ------------------------
    void add_tensor(const std::string& name, ValueKind kind, Tensor data);
    /// Inputs are value names ("X", "qkv:1"); they may be defined later.
    void add_node(const std::string& name, const std::string& op, std::vector<std::string> inputs, NodeAttrs attrs);
    void add_output(const std::string& name) { m_outputs.push_back({Value(), name}); }

    /// Validates everything and returns the graph. Throws GraphError / ShapeError.
    Graph build() const;

private:
    friend class Value;
    struct TensorEntry {
        std::string name;
        ValueKind kind;
        std::shared_ptr<const Tensor> data;
    };
    struct NodeEntry {  // added through node(): checked, shapes known
        std::string name;
        const OpDef* op;
        NodeAttrs attrs;
        std::vector<Value> inputs;
        std::vector<Shape> shapes;
    };
    struct NamedNode {  // added by name: checked in build()
        std::string name;
        std::string op;
        std::vector<std::string> inputs;
        NodeAttrs attrs;
    };
    struct OutputEntry {
        Value value;       // C++ interface, or
        std::string name;  // by name
    };

    Value add_checked(const OpDef& op, const std::vector<Value>& inputs, NodeAttrs attrs, const std::string& name);
    void add_named_nodes();  // in a topological order, through add_checked()
    Value resolve(const std::string& ref, const std::string& where) const;
    Graph to_graph() const;
    std::string fresh_name(const std::string& op);
    void check_new_name(const std::string& name) const;
    const NodeEntry& node_of(const Value& v) const;

    std::string m_name;
    DType m_dtype;
    std::vector<std::string> m_tokens;
    std::vector<TensorEntry> m_tensors;
    std::vector<NodeEntry> m_nodes;
    std::vector<NamedNode> m_named;
    std::vector<OutputEntry> m_outputs;
    std::map<std::string, Value> m_values;    // tensor, node and composite names -> value (as checked)
    std::vector<int> m_consumers;             // node index -> how many node inputs read it
    std::unordered_set<std::string> m_taken;  // every tensor and node name so far
    int m_counter = 0;
};

template <class Op>
Value Expansion::node(const std::vector<Value>& inputs, typename Op::Attrs attrs, const std::string& part) {
    const std::string local = part.empty() ? std::string(Op::name) + "_" + std::to_string(++m_count) : part;
    return m_builder.node<Op>(inputs, std::move(attrs), m_prefix + "." + local);
}

template <class Op>
Value expand_node(GraphBuilder& builder, const NodeAttrs& attrs, const std::vector<Value>& inputs,
                  const std::string& name) {
    Expansion e(builder, name);
    return Op::expand(*attrs_if<Op>(attrs), e, inputs);
}

}  // namespace attngraph
