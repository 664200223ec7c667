// attngraph export GRAPH.json -o MODEL.onnx [--force]: the graph as an ONNX model (opset 23,
// primitive ops; onnx/export.hpp, docs/onnx.md).
#include <cstdio>

#include "cli/common.hpp"
#include "engine/error.hpp"
#include "onnx/export.hpp"

namespace attngraph::cli {

namespace {

struct ExportArgs {
    GraphArgs graph;
    std::string output;
    bool force = false;
};

}  // namespace

void add_export_command(CLI::App& app) {
    auto args = std::make_shared<ExportArgs>();
    CLI::App* cmd = app.add_subcommand("export", "Write a graph as an ONNX model (opset 23; docs/onnx.md)");
    add_graph_args(*cmd, args->graph, false);
    cmd->add_option("-o,--output", args->output, "ONNX model to write (.onnx)")->required();
    cmd->add_flag("--force", args->force, "Replace an existing output file");
    cmd->callback([args] {
        check_graph_output(args->output, "", args->force);  // exists without --force, a directory
        const Graph graph = load_with_inputs(args->graph);
        export_onnx(graph, args->output, args->graph.graph);
        std::printf("wrote %s: %zu nodes, opset 23\n", args->output.c_str(), graph.nodes().size());
    });
}

}  // namespace attngraph::cli
