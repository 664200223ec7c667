#include "engine/patch.hpp"

#include "engine/error.hpp"
#include "engine/graph_file.hpp"

namespace attngraph {

int patch_target(const Graph& graph, const std::string& name) {
    const int id = graph.find(name);
    if (id < 0) throw GraphError("patch " + name + ": graph '" + graph.name() + "' has no node named '" + name + "'");
    const ValueInfo& v = graph.value(id);
    if (v.kind != ValueKind::node)
        throw GraphError("patch " + name + ": '" + name + "' is " +
                         (v.kind == ValueKind::input ? "an input" : "a param") +
                         " tensor, not a node output (replace it with --input " + name + "=FILE.npy)");
    return id;
}

static std::string node_text(const Graph& graph, int id) {
    const ValueInfo& v = graph.value(id);
    const Node& node = graph.nodes()[static_cast<std::size_t>(v.producer)];
    return "node '" + v.name + "' (" + node.op->name + ") outputs " + shape_str(v.shape);
}

void add_patch(const Graph& graph, RunOptions& options, const std::string& name, const Tensor& value,
               const std::string& source) {
    const int id = patch_target(graph, name);
    if (value.shape() != graph.value(id).shape)
        throw ShapeError("patch " + name + ": " + (source.empty() ? "the value" : source) + " is " +
                         shape_str(value.shape()) + ", " + node_text(graph, id));
    options.patches[id] = std::make_shared<const Tensor>(value.cast(graph.dtype()));
}

void add_hook(const Graph& graph, RunOptions& options, const std::string& name,
              std::function<Tensor(const Tensor&)> hook) {
    options.hooks[patch_target(graph, name)] = std::move(hook);
}

std::set<std::string> patched_names(const Graph& graph, const RunOptions& options) {
    std::set<std::string> names;
    for (const auto& [id, t] : options.patches) names.insert(graph.value(id).name);
    for (const auto& [id, h] : options.hooks) names.insert(graph.value(id).name);
    return names;
}

void mark_patched(Trace& trace, const std::set<std::string>& names) {
    for (auto& e : trace.entries)
        if (names.count(e.name)) e.patched = true;
}

Graph freeze_values(const Graph& graph, const std::map<std::string, Tensor>& values) {
    if (values.empty()) return graph;
    nlohmann::json doc = graph_to_json(graph);
    for (const auto& [name, value] : values) {
        const int id = patch_target(graph, name);
        const ValueInfo& v = graph.value(id);
        const Node& node = graph.nodes()[static_cast<std::size_t>(v.producer)];
        if (node.outputs.size() != 1)
            throw GraphError("patch " + name + ": gradients through a patch of one output of the multi-output node '" +
                             node.name + "' (" + node.op->name + ") are not supported");
        if (value.shape() != v.shape)
            throw ShapeError("patch " + name + ": the value is " + shape_str(value.shape()) + ", " +
                             node_text(graph, id));
        nlohmann::json t;
        t["kind"] = "param";
        t["shape"] = v.shape;
        t["data"] = tensor_to_json(value.cast(graph.dtype()));
        doc["tensors"][name] = std::move(t);
        auto& nodes = doc["nodes"];
        for (auto it = nodes.begin(); it != nodes.end(); ++it)
            if ((*it)["name"] == node.name) {
                nodes.erase(it);
                break;
            }
    }
    LoadOptions options;
    options.dtype = graph.dtype();
    options.max_elements = std::size_t(1) << 40;
    return parse_graph(doc.dump(), {}, "graph '" + graph.name() + "' (patched)", options);
}

}  // namespace attngraph
