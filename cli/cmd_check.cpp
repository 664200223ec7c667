// attngraph check GRAPH.json: validate, then print the tensors and nodes with inferred shapes.
#include <cstdio>
#include <iostream>

#include "cli/common.hpp"

namespace attngraph::cli {

void add_check_command(CLI::App& app) {
    auto args = std::make_shared<GraphArgs>();
    CLI::App* cmd = app.add_subcommand("check", "Validate a graph file and print its node table with inferred shapes");
    add_graph_args(*cmd, *args, false);
    cmd->callback([args] {
        OnnxNames onnx_names;
        const Graph graph = load_with_inputs(*args, &onnx_names);
        std::printf("graph '%s': %s, %zu nodes, ok\n", graph.name().c_str(), to_string(graph.dtype()).c_str(),
                    graph.nodes().size());
        std::printf("%-20s %-10s %-12s %s\n", "name", "kind/op", "shape", "inputs");
        for (const auto& v : graph.values())
            if (v.data)
                std::printf("%-20s %-10s %-12s\n", v.name.c_str(), to_string(v.kind).c_str(),
                            shape_str(v.shape).c_str());
        for (const auto& n : graph.nodes()) {
            std::string inputs;
            for (int id : n.inputs) inputs += (inputs.empty() ? "" : ", ") + graph.value(id).name;
            for (int id : n.outputs)
                std::printf("%-20s %-10s %-12s %s\n", graph.value(id).name.c_str(), n.op->name.c_str(),
                            shape_str(graph.value(id).shape).c_str(), inputs.c_str());
        }
        std::string outs;
        for (int id : graph.outputs()) outs += (outs.empty() ? "" : ", ") + graph.value(id).name;
        std::printf("outputs: %s\n", outs.c_str());
        if (!onnx_names.empty()) {
            std::printf("ONNX name -> attngraph name (values folded at import have none)\n");
            for (const auto& [onnx, ours] : onnx_names) std::printf("  %s -> %s\n", onnx.c_str(), ours.c_str());
        }
    });
}

}  // namespace attngraph::cli
