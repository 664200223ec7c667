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

Shape Value::shape() const { return builder().shape_of(m_name); }

Value& Value::as(const std::string& name) {
    builder().rename(m_name, name);
    m_name = name;
    return *this;
}

Value Value::operator[](int k) const { return Value(m_builder, m_name + ":" + std::to_string(k)); }

// ---- GraphBuilder ---------------------------------------------------------------------

GraphBuilder::GraphBuilder(std::string name, DType dtype) : m_name(std::move(name)), m_dtype(dtype) {}

void GraphBuilder::check_new_name(const std::string& name) const {
    if (!valid_name(name))
        throw GraphError("invalid name '" + name + "': use letters, digits, '_', '.' and '-'");
    if (m_taken.count(name)) throw GraphError("duplicate name '" + name + "'");
}

std::string GraphBuilder::fresh_name(const std::string& op) {
    std::string name;
    do {
        name = op + "_" + std::to_string(++m_counter);
    } while (name_taken(name));
    return name;
}

void GraphBuilder::add_tensor(const std::string& name, ValueKind kind, Tensor data) {
    m_tensors.push_back({name, kind, std::make_shared<const Tensor>(std::move(data))});
    m_taken.insert(name);
}

Value GraphBuilder::input(const std::string& name, Tensor data) {
    check_new_name(name);
    add_tensor(name, ValueKind::input, std::move(data));
    return Value(this, name);
}

Value GraphBuilder::param(const std::string& name, Tensor data) {
    check_new_name(name);
    add_tensor(name, ValueKind::param, std::move(data));
    return Value(this, name);
}

void GraphBuilder::add_node(const std::string& name, const std::string& op,
                            std::vector<std::string> inputs, std::any attrs) {
    m_nodes.push_back({name, op, std::move(inputs), std::move(attrs), {}});
    m_taken.insert(name);
}

// Splits "name:k" into ("name", k); a plain name is (name, -1).
static std::pair<std::string, int> split_ref(const std::string& ref) {
    auto colon = ref.rfind(':');
    if (colon == std::string::npos) return {ref, -1};
    const std::string index = ref.substr(colon + 1);
    if (index.empty() || index.size() > 6 || index.find_first_not_of("0123456789") != std::string::npos)
        return {ref, -1};
    return {ref.substr(0, colon), std::stoi(index)};
}

bool GraphBuilder::name_taken(const std::string& name) const { return m_taken.count(name) > 0; }

Shape GraphBuilder::shape_of(const std::string& ref) const {
    for (const auto& t : m_tensors)
        if (t.name == ref) return t.data->shape();
    auto [base, k] = split_ref(ref);
    auto it = m_eager_names.find(base);
    if (it == m_eager_names.end()) throw GraphError("no value named '" + ref + "' in graph '" + m_name + "'");
    const auto& shapes = m_nodes[it->second].shapes;
    if (k < 0) {
        if (shapes.size() != 1)
            throw GraphError("node '" + base + "' has " + std::to_string(shapes.size()) +
                             " outputs: name one as '" + base + ":k'");
        return shapes[0];
    }
    if (static_cast<std::size_t>(k) >= shapes.size())
        throw GraphError("node '" + base + "' has no output " + std::to_string(k));
    return shapes[static_cast<std::size_t>(k)];
}

Value GraphBuilder::node(const std::string& op_name, const std::vector<Value>& inputs, std::any attrs,
                         std::string name) {
    const OpDef* found = OpRegistry::instance().find(op_name);
    if (!found) {
        try {
            OpRegistry::instance().get(op_name);
        } catch (const GraphError& e) {
            throw GraphError((name.empty() ? "" : "node '" + name + "': ") + e.what());
        }
    }
    const OpDef& op = *found;
    if (name.empty()) name = fresh_name(op_name);
    check_new_name(name);
    const std::string where = "node '" + name + "' (" + op_name + ")";
    const int n = static_cast<int>(inputs.size());
    if (n < op.min_inputs || (op.max_inputs >= 0 && n > op.max_inputs))
        throw GraphError(where + ": takes " + op.arity_text() + " inputs, got " + std::to_string(n));
    std::vector<std::string> refs;
    std::vector<Shape> shapes;
    std::string operands;
    for (const Value& v : inputs) {
        if (&v.builder() != this) throw GraphError(where + ": input '" + v.name() + "' is from another graph");
        refs.push_back(v.name());
        shapes.push_back(shape_of(v.name()));
        operands += (operands.empty() ? "" : ", ") + v.name() + " (" + shape_str(shapes.back()) + ")";
    }
    try {
        op.attrs_to_json(attrs);  // the attrs must be this op's struct
    } catch (const std::bad_any_cast&) {
        throw GraphError(where + ": attributes of the wrong type");
    }
    const std::vector<Shape> out = op.infer_shapes_at(attrs, shapes, where, [&] { return operands; });
    for (const auto& r : refs) {
        ++m_consumers[r];
        ++m_consumers[split_ref(r).first];
    }
    m_eager_names[name] = m_nodes.size();
    m_nodes.push_back({name, op_name, std::move(refs), std::move(attrs), std::move(out)});
    m_taken.insert(name);
    return Value(this, name);
}

void GraphBuilder::rename(const std::string& from, const std::string& to) {
    if (from == to) return;
    auto it = m_eager_names.find(from);
    if (it == m_eager_names.end()) throw GraphError("only a node can be renamed, not '" + from + "'");
    if (m_consumers.count(from))
        throw GraphError("cannot rename '" + from + "' to '" + to + "': it already has consumers");
    check_new_name(to);
    const std::size_t index = it->second;
    m_eager_names.erase(it);
    m_eager_names[to] = index;
    m_nodes[index].name = to;
    m_taken.erase(from);
    m_taken.insert(to);
    for (auto& o : m_outputs)
        if (o == from) o = to;
}

// ---- build --------------------------------------------------------------------------

Graph GraphBuilder::build() const {
    Graph g;
    g.m_name = m_name;
    g.m_dtype = m_dtype;
    g.m_tokens = m_tokens;

    // names: valid and unique across tensors and nodes
    std::unordered_map<std::string, int> tensor_of, node_of;
    for (std::size_t i = 0; i < m_tensors.size(); ++i) {
        const auto& t = m_tensors[i];
        if (!valid_name(t.name))
            throw GraphError("invalid tensor name '" + t.name + "': use letters, digits, '_', '.' and '-'");
        if (!tensor_of.emplace(t.name, static_cast<int>(i)).second)
            throw GraphError("duplicate tensor name '" + t.name + "'");
    }
    for (std::size_t i = 0; i < m_nodes.size(); ++i) {
        const auto& n = m_nodes[i];
        if (!valid_name(n.name))
            throw GraphError("invalid node name '" + n.name + "': use letters, digits, '_', '.' and '-'");
        if (tensor_of.count(n.name)) throw GraphError("duplicate name '" + n.name + "': both a tensor and a node");
        if (!node_of.emplace(n.name, static_cast<int>(i)).second)
            throw GraphError("duplicate node name '" + n.name + "'");
    }

    // ops, arity, and the edges between nodes
    const std::size_t N = m_nodes.size();
    std::vector<const OpDef*> ops(N);
    std::vector<std::vector<std::size_t>> consumers(N);
    std::vector<int> pending(N, 0);
    for (std::size_t i = 0; i < N; ++i) {
        const auto& n = m_nodes[i];
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
            for (const auto& ref : m_nodes[cur].inputs) {
                auto it = node_of.find(split_ref(ref).first);
                if (!tensor_of.count(ref) && it != node_of.end() && pending[static_cast<std::size_t>(it->second)] > 0) {
                    cur = static_cast<std::size_t>(it->second);
                    break;
                }
            }
        }
        auto label = [&](std::size_t i) { return m_nodes[i].name + " (" + m_nodes[i].op + ")"; };
        std::string cycle;
        for (std::size_t p = static_cast<std::size_t>(seen[cur]); p < path.size(); ++p)
            cycle = " -> " + label(path[p]) + cycle;
        cycle = label(cur) + cycle;
        throw GraphError("graph '" + m_name + "' has a cycle: " + cycle);
    }

    // values: tensors first, then node outputs in topological order
    for (const auto& t : m_tensors) {
        ValueInfo v;
        v.name = t.name;
        v.kind = t.kind;
        v.shape = t.data->shape();
        v.data = t.data->dtype() == m_dtype ? t.data : std::make_shared<const Tensor>(t.data->cast(m_dtype));
        g.m_index[v.name] = static_cast<int>(g.m_values.size());
        g.m_values.push_back(std::move(v));
    }
    for (std::size_t i : order) {
        const auto& n = m_nodes[i];
        const std::string where = "node '" + n.name + "' (" + n.op + ")";
        Node node;
        node.name = n.name;
        node.op = ops[i];
        node.attrs = n.attrs;
        std::vector<Shape> in;
        std::string operands;
        for (const auto& ref : n.inputs) {
            int id = g.find(ref);
            if (id < 0) {
                auto [base, k] = split_ref(ref);
                id = k < 0 ? g.find(base + ":0") : -1;
                if (k < 0 && id >= 0 && g.find(base + ":1") >= 0)
                    throw GraphError(where + ": input '" + ref + "' has several outputs: name one as '" +
                                     ref + ":k'");
                if (id < 0) throw GraphError(where + ": input '" + ref + "' names no output of node '" + base + "'");
            }
            node.inputs.push_back(id);
            in.push_back(g.m_values[static_cast<std::size_t>(id)].shape);
            operands += (operands.empty() ? "" : ", ") + ref + " (" + shape_str(in.back()) + ")";
        }
        const std::vector<Shape> out = node.op->infer_shapes_at(node.attrs, in, where, [&] { return operands; });
        const int node_index = static_cast<int>(g.m_nodes.size());
        for (std::size_t k = 0; k < out.size(); ++k) {
            ValueInfo v;
            v.name = out.size() == 1 ? n.name : n.name + ":" + std::to_string(k);
            v.kind = ValueKind::node;
            v.shape = std::move(out[k]);
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
        for (const auto& name : m_outputs) {
            int id = g.find(name);
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

}  // namespace attngraph
