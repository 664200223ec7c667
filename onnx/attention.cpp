#include "onnx/attention.hpp"

#include <algorithm>

#include "engine/builder.hpp"
#include "engine/op.hpp"

namespace attngraph::onnx_import {

AttentionExpansion expand_attention(const std::string& name, const std::vector<std::optional<AttentionOperand>>& in,
                                    const AttentionAttrs& attrs, DType dtype) {
    // a builder whose inputs carry the imported graph's value names: the nodes it gets from
    // attention() then read those values directly
    GraphBuilder b(name, dtype);
    std::vector<Value> v(6);
    for (std::size_t i = 0; i < in.size() && i < v.size(); ++i)
        if (in[i]) v[i] = b.input(in[i]->name, zeros(dtype, in[i]->shape));
    const AttentionOutputs out = attention(name, {v[0], v[1], v[2], v[3], v[4], v[5]}, attrs);
    AttentionExpansion e;
    std::vector<std::string> outputs;
    auto keep = [&](const Value& x, std::string& slot) {
        slot = x.name();
        if (!slot.empty() && std::find(outputs.begin(), outputs.end(), slot) == outputs.end()) {
            outputs.push_back(slot);
            b.output(x);
        }
    };
    keep(out.y, e.y);
    keep(out.present_key, e.present_key);
    keep(out.present_value, e.present_value);
    keep(out.qk, e.qk);
    const Graph graph = b.build();
    // the nodes as a graph file writes them (graph_to_json's loop, without the inputs' data)
    for (const auto& node : graph.nodes()) {
        nlohmann::json n = {{"name", node.name}, {"op", node.op->name}, {"inputs", nlohmann::json::array()}};
        for (int id : node.inputs) n["inputs"].push_back(graph.value(id).name);
        nlohmann::json node_attrs = node.op->attrs_to_json(node.attrs);
        if (!node_attrs.empty()) n["attrs"] = std::move(node_attrs);
        e.nodes.push_back(std::move(n));
    }
    for (const auto& value : graph.values()) e.shapes[value.name] = value.shape;
    const bool three_d = in[0] && in[0]->shape.size() == 3;
    e.k_heads = three_d ? name + ".K" : in[1]->name;
    e.v_heads = three_d ? name + ".V" : in[2]->name;
    return e;
}

}  // namespace attngraph::onnx_import
