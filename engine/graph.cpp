#include "engine/graph.hpp"

#include <sys/sysinfo.h>

#include <cstdint>

#include "engine/error.hpp"

namespace attngraph {

std::string to_string(ValueKind kind) {
    switch (kind) {
        case ValueKind::input: return "input";
        case ValueKind::param: return "param";
        case ValueKind::node: return "node";
    }
    return "?";
}

bool valid_name(const std::string& name) {
    if (name.empty() || name == "." || name == "..") return false;
    for (char c : name) {
        const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                        c == '_' || c == '.' || c == '-';
        if (!ok) return false;
    }
    return true;
}

void check_memory(const Graph& graph, std::size_t max_bytes, bool all_kept) {
    const std::size_t word = graph.dtype() == DType::f32 ? 4 : 8;
    // (SIZE_MAX / 2: the guard against sizes that overflow, before any --max-memory applies)
    const std::string limit = max_bytes >= SIZE_MAX / 2 ? std::string("what a process can address")
                                                        : "the memory limit of " + std::to_string(max_bytes) + " bytes";
    std::size_t total = 0;
    for (const auto& v : graph.values()) {
        const std::size_t count = element_count_capped(v.shape);
        const std::size_t bytes = count > SIZE_MAX / word ? SIZE_MAX : count * word;
        if (bytes > max_bytes) {
            std::string what = v.kind == ValueKind::node
                                   ? "node '" + graph.nodes()[static_cast<std::size_t>(v.producer)].name + "' (" +
                                         graph.nodes()[static_cast<std::size_t>(v.producer)].op->name + ") output '" +
                                         v.name + "'"
                                   : to_string(v.kind) + " tensor '" + v.name + "'";
            throw ShapeError(what + " of shape (" + shape_str(v.shape) + ") " + to_string(graph.dtype()) + " needs " +
                             (bytes == SIZE_MAX ? "more than " + std::to_string(SIZE_MAX) : std::to_string(bytes)) +
                             " bytes, over " + limit);
        }
        total = bytes > SIZE_MAX - total ? SIZE_MAX : total + bytes;
    }
    if (all_kept && total > max_bytes)
        throw ShapeError("graph '" + graph.name() + "': its " + std::to_string(graph.values().size()) +
                         " values together need " + std::to_string(total) + " bytes, over " + limit +
                         "; trace fewer with --only");
}

std::size_t default_max_memory() {
    struct sysinfo info {};
    if (sysinfo(&info) == 0) return static_cast<std::size_t>(info.totalram) * info.mem_unit / 2;
    return std::size_t(8) << 30;
}

int Graph::find(const std::string& name) const {
    auto it = m_index.find(name);
    return it == m_index.end() ? -1 : it->second;
}

int Graph::at(const std::string& name) const {
    int id = find(name);
    if (id < 0) throw GraphError("graph '" + m_name + "' has no tensor or node named '" + name + "'");
    return id;
}

static std::string operand_list(const Graph& g, const Node& node) {
    std::string s;
    for (int id : node.inputs) {
        const auto& v = g.value(id);
        s += (s.empty() ? "" : ", ") + v.name + " (" + shape_str(v.shape) + ")";
    }
    return s;
}

std::string Graph::formula(const Node& node) const {
    std::vector<std::string> operands;
    for (int id : node.inputs) operands.push_back(value(id).name + " (" + shape_str(value(id).shape) + ")");
    return node.op->formula(node.attrs, operands);
}

void Graph::infer_shapes() {
    for (const Node& node : m_nodes) {
        std::vector<Shape> in;
        for (int id : node.inputs) in.push_back(m_values[static_cast<std::size_t>(id)].shape);
        const std::vector<Shape> out = node.op->infer_shapes_at(
            node.attrs, in, "node '" + node.name + "' (" + node.op->name + ")", [&] { return operand_list(*this, node); });
        if (out.size() != node.outputs.size())
            throw ShapeError("node '" + node.name + "' (" + node.op->name + "): now has " +
                             std::to_string(out.size()) + " outputs instead of " +
                             std::to_string(node.outputs.size()));
        for (std::size_t k = 0; k < out.size(); ++k)
            m_values[static_cast<std::size_t>(node.outputs[k])].shape = std::move(out[k]);
    }
    check_memory(*this, SIZE_MAX / 2);  // no shape whose size overflows reaches the executor
}

Graph Graph::with_tensors(std::map<std::string, Tensor> replacements) const {
    Graph g = *this;
    for (auto& [name, tensor] : replacements) {
        int id = at(name);
        ValueInfo& v = g.m_values[static_cast<std::size_t>(id)];
        if (v.kind == ValueKind::node)
            throw GraphError("'" + name + "' is a node of graph '" + m_name +
                             "', not an input or param tensor: it cannot be replaced");
        v.shape = tensor.shape();
        v.data = std::make_shared<const Tensor>(tensor.dtype() == m_dtype ? std::move(tensor) : tensor.cast(m_dtype));
    }
    g.infer_shapes();
    // the same structure, dtype and shapes: the same plans (they do not depend on the data)
    bool same_shapes = true;
    for (std::size_t id = 0; id < m_values.size() && same_shapes; ++id)
        same_shapes = m_values[id].shape == g.m_values[id].shape;
    if (same_shapes) g.m_run_cache.share(m_run_cache);
    return g;
}

Graph Graph::with_dtype(DType dtype) const {
    Graph g = *this;
    g.m_dtype = dtype;
    for (auto& v : g.m_values)
        if (v.data && v.data->dtype() != dtype) v.data = std::make_shared<const Tensor>(v.data->cast(dtype));
    return g;
}

}  // namespace attngraph
