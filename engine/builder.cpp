#include "engine/builder.hpp"

#include <cstdint>
#include <queue>
#include <unordered_map>

#include "engine/error.hpp"

namespace attngraph {

// ---- Value -------------------------------------------------------------------------

GraphBuilder& Value::builder() const {
    if (!m_builder) throw GraphError("use of an empty Value");
    return *m_builder;
}

std::string Value::name() const {
    if (!m_builder) return "";  // an empty Value (an optional input left out)
    const GraphBuilder& b = builder();
    if (m_tensor >= 0) return b.m_tensors[static_cast<std::size_t>(m_tensor)].name;
    const auto& n = b.m_nodes[static_cast<std::size_t>(m_node)];
    return m_output < 0 || (n.shapes.size() == 1 && m_output == 0) ? n.name : n.name + ":" + std::to_string(m_output);
}

Shape Value::shape() const {
    const GraphBuilder& b = builder();
    if (m_tensor >= 0) return b.m_tensors[static_cast<std::size_t>(m_tensor)].data->shape();
    const auto& n = b.m_nodes[static_cast<std::size_t>(m_node)];
    if (m_output < 0) {
        if (n.shapes.size() != 1)
            throw GraphError("node '" + n.name + "' has " + std::to_string(n.shapes.size()) +
                             " outputs: name one as '" + n.name + ":k'");
        return n.shapes[0];
    }
    if (static_cast<std::size_t>(m_output) >= n.shapes.size())
        throw GraphError("node '" + n.name + "' has no output " + std::to_string(m_output));
    return n.shapes[static_cast<std::size_t>(m_output)];
}

Value& Value::named(const std::string& name) {
    GraphBuilder& b = builder();
    if (m_tensor >= 0) throw GraphError("only a node can be renamed, not '" + this->name() + "'");
    auto& n = b.m_nodes[static_cast<std::size_t>(m_node)];
    if (n.name == name) return *this;
    if (b.m_consumers[static_cast<std::size_t>(m_node)] > 0)
        throw GraphError("cannot rename '" + n.name + "' to '" + name + "': it already has consumers");
    b.check_new_name(name);
    b.m_taken.erase(n.name);
    b.m_values.erase(n.name);
    n.name = name;
    b.m_taken.insert(name);
    b.m_values[name] = Value(&b, -1, m_node, -1);
    return *this;
}

Value Value::operator[](int k) const {
    if (m_tensor >= 0 || k < 0) throw GraphError("'" + name() + "' has no output " + std::to_string(k));
    return Value(m_builder, -1, m_node, k);
}

// ---- GraphBuilder: the C++ interface -----------------------------------------------------

GraphBuilder::GraphBuilder(std::string name, DType dtype) : m_name(std::move(name)), m_dtype(dtype) {}

void GraphBuilder::check_new_name(const std::string& name) const {
    if (!valid_name(name)) throw GraphError("invalid name '" + name + "': use letters, digits, '_', '.' and '-'");
    if (m_taken.count(name)) throw GraphError("duplicate name '" + name + "'");
}

std::string GraphBuilder::fresh_name(const std::string& op) {
    std::string name;
    do {
        name = op + "_" + std::to_string(++m_counter);
    } while (m_taken.count(name));
    return name;
}

void GraphBuilder::add_tensor(const std::string& name, ValueKind kind, Tensor data) {
    const int index = static_cast<int>(m_tensors.size());
    m_tensors.push_back({name, kind, std::make_shared<const Tensor>(std::move(data))});
    m_taken.insert(name);
    m_values.emplace(name, Value(this, index, -1, -1));
}

Value GraphBuilder::input(const std::string& name, Tensor data) {
    check_new_name(name);
    add_tensor(name, ValueKind::input, std::move(data));
    return Value(this, static_cast<int>(m_tensors.size()) - 1, -1, -1);
}

Value GraphBuilder::param(const std::string& name, Tensor data) {
    check_new_name(name);
    add_tensor(name, ValueKind::param, std::move(data));
    return Value(this, static_cast<int>(m_tensors.size()) - 1, -1, -1);
}

void GraphBuilder::add_node(const std::string& name, const std::string& op, std::vector<std::string> inputs,
                            NodeAttrs attrs) {
    m_named.push_back({name, op, std::move(inputs), std::move(attrs)});
    m_taken.insert(name);
}

Value GraphBuilder::node(const std::string& op_name, const std::vector<Value>& inputs, NodeAttrs attrs,
                         std::string name) {
    const OpDef* found = OpRegistry::instance().find(op_name);
    if (!found) {
        try {
            OpRegistry::instance().get(op_name);
        } catch (const GraphError& e) {
            throw GraphError((name.empty() ? "" : "node '" + name + "': ") + e.what());
        }
    }
    return node(*found, inputs, std::move(attrs), std::move(name));
}

Value GraphBuilder::node(const OpDef& op, const std::vector<Value>& inputs, NodeAttrs attrs, std::string name) {
    if (name.empty()) name = fresh_name(op.name);
    check_new_name(name);
    return add_checked(op, inputs, std::move(attrs), name);
}

// The one check of a node, whichever front end adds it: arity, inputs of this graph,
// attributes of the op's type, shapes (inferred now). A composite adds its expansion.
Value GraphBuilder::add_checked(const OpDef& op, const std::vector<Value>& inputs, NodeAttrs attrs,
                                const std::string& name) {
    const std::string where = "node '" + name + "' (" + op.name + ")";
    const int n = static_cast<int>(inputs.size());
    if (n < op.min_inputs || (op.max_inputs >= 0 && n > op.max_inputs))
        throw GraphError(where + ": takes " + op.arity_text() + " inputs, got " + std::to_string(n));
    std::vector<Shape> shapes;
    for (const Value& v : inputs) {
        if (&v.builder() != this) throw GraphError(where + ": input '" + v.name() + "' is from another graph");
        shapes.push_back(v.shape());
    }
    if (!op.holds(attrs)) throw GraphError(where + ": attributes of the wrong type");
    if (op.expand) {
        m_taken.insert(name);
        const Value out = op.expand(*this, attrs, inputs, name);
        m_values[name] = out;
        return out;
    }
    std::vector<Shape> out = op.infer_shapes_at(attrs, shapes, where, [&] {
        std::string operands;
        for (std::size_t i = 0; i < inputs.size(); ++i)
            operands += (i ? ", " : "") + inputs[i].name() + " (" + shape_str(shapes[i]) + ")";
        return operands;
    });
    for (const Value& v : inputs)
        if (v.m_node >= 0) ++m_consumers[static_cast<std::size_t>(v.m_node)];
    const int index = static_cast<int>(m_nodes.size());
    m_nodes.push_back({name, &op, std::move(attrs), inputs, std::move(out)});
    m_consumers.push_back(0);
    m_taken.insert(name);
    m_values[name] = Value(this, -1, index, -1);
    return Value(this, -1, index, -1);
}

// ---- build ----------------------------------------------------------------------------

// Splits "name:k" into ("name", k); a plain name is (name, -1).
static std::pair<std::string, int> split_ref(const std::string& ref) {
    auto colon = ref.rfind(':');
    if (colon == std::string::npos) return {ref, -1};
    const std::string index = ref.substr(colon + 1);
    if (index.empty() || index.size() > 6 || index.find_first_not_of("0123456789") != std::string::npos)
        return {ref, -1};
    return {ref.substr(0, colon), std::stoi(index)};
}

// A value named in a graph file: "X", "node", "node:k".
Value GraphBuilder::resolve(const std::string& ref, const std::string& where) const {
    auto* self = const_cast<GraphBuilder*>(this);
    auto it = m_values.find(ref);
    if (it != m_values.end()) {
        const Value& v = it->second;
        if (v.m_node >= 0 && v.m_output < 0 && m_nodes[static_cast<std::size_t>(v.m_node)].shapes.size() != 1)
            throw GraphError(where + ": input '" + ref + "' has several outputs: name one as '" + ref + ":k'");
        return v;
    }
    auto [base, k] = split_ref(ref);
    auto b = m_values.find(base);
    if (k >= 0 && b != m_values.end() && b->second.m_node >= 0 && b->second.m_output < 0) {
        const auto& n = m_nodes[static_cast<std::size_t>(b->second.m_node)];
        if (n.shapes.size() > 1 && static_cast<std::size_t>(k) < n.shapes.size())
            return Value(self, -1, b->second.m_node, k);
    }
    throw GraphError(where + ": input '" + ref + "' names no output of node '" + base + "'");
}

void GraphBuilder::add_named_nodes() {
    // names: valid and unique across tensors and nodes
    std::unordered_map<std::string, int> tensor_of, node_of;
    for (std::size_t i = 0; i < m_tensors.size(); ++i) {
        const auto& t = m_tensors[i];
        if (!valid_name(t.name))
            throw GraphError("invalid tensor name '" + t.name + "': use letters, digits, '_', '.' and '-'");
        if (!tensor_of.emplace(t.name, static_cast<int>(i)).second)
            throw GraphError("duplicate tensor name '" + t.name + "'");
    }
    std::unordered_set<std::string> checked;  // nodes added through node() were checked then
    for (const auto& n : m_nodes) checked.insert(n.name);
    for (std::size_t i = 0; i < m_named.size(); ++i) {
        const auto& n = m_named[i];
        if (!valid_name(n.name))
            throw GraphError("invalid node name '" + n.name + "': use letters, digits, '_', '.' and '-'");
        if (tensor_of.count(n.name)) throw GraphError("duplicate name '" + n.name + "': both a tensor and a node");
        if (checked.count(n.name) || !node_of.emplace(n.name, static_cast<int>(i)).second)
            throw GraphError("duplicate node name '" + n.name + "'");
    }

    // ops, arity, and the edges between nodes
    const std::size_t N = m_named.size();
    std::vector<const OpDef*> ops(N);
    std::vector<std::vector<std::size_t>> consumers(N);
    std::vector<int> pending(N, 0);
    for (std::size_t i = 0; i < N; ++i) {
        const auto& n = m_named[i];
        const std::string where = "node '" + n.name + "' (" + n.op + ")";
        try {
            ops[i] = &OpRegistry::instance().get(n.op);
        } catch (const GraphError& e) {
            throw GraphError("node '" + n.name + "': " + e.what());
        }
        const int count = static_cast<int>(n.inputs.size());
        if (count < ops[i]->min_inputs || (ops[i]->max_inputs >= 0 && count > ops[i]->max_inputs))
            throw GraphError(where + ": takes " + ops[i]->arity_text() + " inputs, got " + std::to_string(count));
        for (const auto& ref : n.inputs) {
            if (tensor_of.count(ref)) continue;
            auto [base, k] = split_ref(ref);
            if (checked.count(base) || m_values.count(ref)) continue;
            auto it = node_of.find(base);
            if (it == node_of.end())
                throw GraphError(where + ": input '" + ref + "' is not a tensor or node of the graph");
            consumers[static_cast<std::size_t>(it->second)].push_back(i);
            ++pending[i];
        }
    }

    // topological order (Kahn; of the ready nodes the first declared goes first, so a
    // file already in order keeps its order)
    std::vector<std::size_t> order;
    order.reserve(N);
    std::priority_queue<std::size_t, std::vector<std::size_t>, std::greater<>> ready;
    for (std::size_t i = 0; i < N; ++i)
        if (pending[i] == 0) ready.push(i);
    while (!ready.empty()) {
        std::size_t i = ready.top();
        ready.pop();
        order.push_back(i);
        for (std::size_t c : consumers[i])
            if (--pending[c] == 0) ready.push(c);
    }
    if (order.size() != N) {
        // walk back from a node left over until a node repeats: that is a cycle
        std::size_t start = 0;
        while (pending[start] == 0) ++start;
        std::vector<int> seen(N, -1);
        std::vector<std::size_t> path;
        std::size_t cur = start;
        while (seen[cur] < 0) {
            seen[cur] = static_cast<int>(path.size());
            path.push_back(cur);
            for (const auto& ref : m_named[cur].inputs) {
                auto it = node_of.find(split_ref(ref).first);
                if (!tensor_of.count(ref) && it != node_of.end() && pending[static_cast<std::size_t>(it->second)] > 0) {
                    cur = static_cast<std::size_t>(it->second);
                    break;
                }
            }
        }
        auto label = [&](std::size_t i) { return m_named[i].name + " (" + m_named[i].op + ")"; };
        std::string cycle;
        for (std::size_t p = static_cast<std::size_t>(seen[cur]); p < path.size(); ++p)
            cycle = " -> " + label(path[p]) + cycle;
        cycle = label(cur) + cycle;
        throw GraphError("graph '" + m_name + "' has a cycle: " + cycle);
    }

    // every node through the one check, in that order
    for (std::size_t i : order) {
        auto& n = m_named[i];
        const std::string where = "node '" + n.name + "' (" + n.op + ")";
        std::vector<Value> inputs;
        for (const auto& ref : n.inputs) inputs.push_back(resolve(ref, where));
        add_checked(*ops[i], inputs, std::move(n.attrs), n.name);
    }
    m_named.clear();
}

Graph GraphBuilder::to_graph() const {
    Graph g;
    g.m_name = m_name;
    g.m_dtype = m_dtype;
    g.m_tokens = m_tokens;

    // values: tensors first, then node outputs in the order the nodes were added (topological)
    for (const auto& t : m_tensors) {
        ValueInfo v;
        v.name = t.name;
        v.kind = t.kind;
        v.shape = t.data->shape();
        v.data = t.data->dtype() == m_dtype ? t.data : std::make_shared<const Tensor>(t.data->cast(m_dtype));
        g.m_index[v.name] = static_cast<int>(g.m_values.size());
        g.m_values.push_back(std::move(v));
    }
    auto id_of = [&](const Value& v) {
        if (v.m_tensor >= 0) return v.m_tensor;
        const Node& producer = g.m_nodes[static_cast<std::size_t>(v.m_node)];
        return producer.outputs[static_cast<std::size_t>(std::max(v.m_output, 0))];
    };
    for (const auto& n : m_nodes) {
        Node node;
        node.name = n.name;
        node.op = n.op;
        node.attrs = n.attrs;
        for (const Value& in : n.inputs) node.inputs.push_back(id_of(in));
        const int node_index = static_cast<int>(g.m_nodes.size());
        for (std::size_t k = 0; k < n.shapes.size(); ++k) {
            ValueInfo v;
            v.name = n.shapes.size() == 1 ? n.name : n.name + ":" + std::to_string(k);
            v.kind = ValueKind::node;
            v.shape = n.shapes[k];
            v.producer = node_index;
            v.output_index = static_cast<int>(k);
            node.outputs.push_back(static_cast<int>(g.m_values.size()));
            g.m_index[v.name] = static_cast<int>(g.m_values.size());
            g.m_values.push_back(std::move(v));
        }
        g.m_nodes.push_back(std::move(node));
    }

    // outputs: as given, else every node output nothing consumes
    if (!m_outputs.empty()) {
        for (const auto& o : m_outputs) {
            std::string name = o.name;
            int id = -1;
            if (o.value.m_builder) {
                if (o.value.m_tensor >= 0 || o.value.m_output >= 0 ||
                    m_nodes[static_cast<std::size_t>(o.value.m_node)].shapes.size() == 1)
                    id = id_of(o.value);
                name = o.value.name();
            } else if (auto it = m_values.find(name); it != m_values.end() && name.find(':') == std::string::npos) {
                const Value& v = it->second;
                if (v.m_tensor >= 0 || v.m_output >= 0 ||
                    m_nodes[static_cast<std::size_t>(v.m_node)].shapes.size() == 1)
                    id = id_of(v);
            } else {
                id = g.find(name);
            }
            if (id < 0 && g.find(name + ":0") >= 0)
                throw GraphError("output '" + name + "' is a node with several outputs: name one as '" + name + ":k'");
            if (id < 0) throw GraphError("output '" + name + "' is not a tensor or node of graph '" + m_name + "'");
            g.m_outputs.push_back(id);
        }
    } else {
        std::vector<bool> used(g.m_values.size(), false);
        for (const auto& node : g.m_nodes)
            for (int id : node.inputs) used[static_cast<std::size_t>(id)] = true;
        for (const auto& node : g.m_nodes)
            for (int id : node.outputs)
                if (!used[static_cast<std::size_t>(id)]) g.m_outputs.push_back(id);
    }
    if (g.m_nodes.empty()) throw GraphError("graph '" + m_name + "' has no nodes");
    check_memory(g, SIZE_MAX / 2);  // no shape whose size overflows reaches the executor
    return g;
}

Graph GraphBuilder::build() const {
    if (m_named.empty()) return to_graph();
    GraphBuilder b = *this;  // the nodes given by name join a copy, so build() leaves this one as it was
    for (auto& [name, v] : b.m_values) v.m_builder = &b;
    b.add_named_nodes();
    return b.to_graph();
}

}  // namespace attngraph
